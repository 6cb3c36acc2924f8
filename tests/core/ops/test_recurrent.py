"""The fused LSTM cell op: its values, its gradients to third order, its gradient op's own."""

import numpy as np
import pytest

import tapefit as tp
from tapefit.core.ops.recurrent import lstm_cell

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
