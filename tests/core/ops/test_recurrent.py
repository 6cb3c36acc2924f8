"""The fused LSTM cell op: its values, its gradients to third order, its gradient op's own."""

import numpy as np
import pytest

import tapefit as tp
from tapefit.core.ops.recurrent import gru_cell, lstm_cell, rnn_cell

RNG = np.random.default_rng(3)


def composite(z, c_prev):
    """The cell in elementwise ops, as a layer with custom activations runs it."""
    i, f, g, o = tp.split(z, 4, axis=-1)
    c = tp.sigmoid(f) * c_prev + tp.sigmoid(i) * tp.tanh(g)
    return tp.sigmoid(o) * tp.tanh(c), c


def test_values_equal_the_composite_cell():
    z = RNG.standard_normal((5, 12)).astype(np.float32) * 3
    c_prev = RNG.standard_normal((5, 3)).astype(np.float32)
    for ours, theirs in zip(lstm_cell(z, c_prev), composite(tp.constant(z), tp.constant(c_prev))):
        assert ours.dtype == tp.float32
        np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("order", [1, 2, 3])
def test_gradients_match_finite_differences(order):
    z = RNG.standard_normal((2, 8))
    c_prev = RNG.standard_normal((2, 2))
    tp.testing.check_gradients(lambda a, b: list(lstm_cell(a, b)), z, c_prev, order=order)


def test_gradients_equal_the_composite_cells_at_first_and_second_order():
    z = tp.Variable(RNG.standard_normal((4, 12)))
    c_prev = tp.Variable(RNG.standard_normal((4, 3)))

    def grads(cell):
        with tp.GradientTape() as outer:
            with tp.GradientTape() as inner:
                h, c = cell(z, c_prev)
                loss = tp.reduce_sum(h * h) + tp.reduce_sum(tp.sin(c))
            first = inner.gradient(loss, [z, c_prev])
            total = tp.reduce_sum(first[0] * first[0]) + tp.reduce_sum(first[1])
        return [g.numpy() for g in first + outer.gradient(total, [z, c_prev])]

    for ours, theirs in zip(grads(lstm_cell), grads(composite)):
        np.testing.assert_allclose(ours, theirs, rtol=1e-10, atol=1e-12)


def test_the_lstm_layer_gives_the_same_results_fused_or_not():
    x = tp.constant(RNG.standard_normal((3, 5, 4)).astype(np.float32))
    fused = tp.layers.LSTM(6, return_sequences=True)
    # A callable that is not one of the default activations takes the elementwise path.
    plain = tp.layers.LSTM(6, return_sequences=True, activation=lambda t: tp.tanh(t))
    for layer in (fused, plain):
        tp.random.set_seed(2)
        layer(x)  # builds the same weights

    def run(layer):
        with tp.GradientTape() as tape:
            loss = tp.reduce_sum(tp.square(layer(x)))
        return [loss.numpy()] + [g.numpy() for g in tape.gradient(loss, layer.trainable_variables)]

    for ours, theirs in zip(run(fused), run(plain)):
        np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-6)


# -- the fused GRU (reset_after) and simple RNN cells -------------------------------


def gru_composite(xw, hw, h):
    """The GRU step in elementwise ops, as a layer with custom activations runs it."""
    x_z, x_r, x_h = tp.split(xw, 3, axis=-1)
    h_z, h_r, h_h = tp.split(hw, 3, axis=-1)
    z = tp.sigmoid(x_z + h_z)
    r = tp.sigmoid(x_r + h_r)
    c = tp.tanh(x_h + r * h_h)
    return z * h + (1.0 - z) * c, tp.concat([z, r, c], axis=-1)


def test_gru_cell_values_equal_the_composite_cell():
    xw, hw = (RNG.standard_normal((5, 9)).astype(np.float32) * 2 for _ in range(2))
    h = RNG.standard_normal((5, 3)).astype(np.float32)
    for ours, theirs in zip(
        gru_cell(xw, hw, h), gru_composite(tp.constant(xw), tp.constant(hw), tp.constant(h))
    ):
        assert ours.dtype == tp.float32
        np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("order", [1, 2, 3])
def test_gru_cell_gradients_match_finite_differences(order):
    xw, hw = RNG.standard_normal((2, 6)), RNG.standard_normal((2, 6))
    h = RNG.standard_normal((2, 2))
    # both outputs count, so the gates' own gradient path is checked too
    tp.testing.check_gradients(lambda a, b, c: list(gru_cell(a, b, c)), xw, hw, h, order=order)


@pytest.mark.parametrize("order", [1, 2, 3])
def test_rnn_cell_gradients_match_finite_differences(order):
    xw, h, kernel = RNG.standard_normal((3, 2)), RNG.standard_normal((3, 2)), RNG.standard_normal((2, 2))
    tp.testing.check_gradients(rnn_cell, xw, h, kernel, order=order)


def test_rnn_cell_values_equal_tanh_of_the_sum():
    xw, h = RNG.standard_normal((4, 3)).astype(np.float32), RNG.standard_normal((4, 3)).astype(np.float32)
    kernel = RNG.standard_normal((3, 3)).astype(np.float32)
    expected = tp.tanh(tp.constant(xw) + tp.matmul(tp.constant(h), tp.constant(kernel)))
    np.testing.assert_allclose(rnn_cell(xw, h, kernel).numpy(), expected.numpy(), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("layer_type", [tp.layers.GRU, tp.layers.SimpleRNN])
def test_gru_and_simple_rnn_layers_give_the_same_results_fused_or_not(layer_type):
    x = tp.constant(RNG.standard_normal((3, 5, 4)).astype(np.float32))
    fused = layer_type(6, return_sequences=True)
    plain = layer_type(6, return_sequences=True, activation=lambda t: tp.tanh(t))
    for layer in (fused, plain):
        tp.random.set_seed(2)
        layer(x)

    def run(layer):
        with tp.GradientTape() as outer:
            with tp.GradientTape() as tape:
                loss = tp.reduce_sum(tp.square(layer(x)))
            grads = tape.gradient(loss, layer.trainable_variables)
            total = tp.add_n([tp.reduce_sum(g * g) for g in grads])
        second = outer.gradient(total, layer.trainable_variables)
        return [loss.numpy()] + [g.numpy() for g in grads + second]

    for ours, theirs in zip(run(fused), run(plain)):
        np.testing.assert_allclose(ours, theirs, rtol=1e-4, atol=1e-5)
