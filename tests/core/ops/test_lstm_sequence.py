"""The whole-sequence LSTM op: its values against per-step cells, its gradients to second
order, its gradient op's own, and a replay under tp.function."""

import numpy as np
import pytest

import tapefit as tp
from tapefit.core.ops.lstm_sequence import _per_step, lstm_sequence

RNG = np.random.default_rng(26)


def arrays(batch=3, steps=4, features=2, units=3, dtype=np.float64, zero_state=False):
    shapes = [(batch, steps, features), (features, 4 * units), (units, 4 * units), (4 * units,)]
    values = [RNG.standard_normal(s) * 0.7 for s in shapes]
    states = [
        np.zeros((batch, units)) if zero_state else RNG.standard_normal((batch, units)) for _ in range(2)
    ]
    return [v.astype(dtype) for v in values + states]


@pytest.mark.parametrize("batch", [1, 3])
def test_values_equal_the_per_step_cells(batch):
    args = arrays(batch=batch, dtype=np.float32)
    for ours, theirs in zip(lstm_sequence(*args), _per_step(*[tp.constant(a) for a in args])):
        assert ours.dtype == tp.float32 and ours.shape == theirs.shape
        np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-5, atol=1e-6)


def test_one_step():
    args = arrays(steps=1)
    for ours, theirs in zip(lstm_sequence(*args), _per_step(*[tp.constant(a) for a in args])):
        np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("zero_state", [True, False])
def test_gradients_match_finite_differences(zero_state):
    tp.testing.check_gradients(lambda *a: list(lstm_sequence(*a)), *arrays(zero_state=zero_state))


MASK = np.array([[1, 0, 1, 1], [0, 0, 1, 0], [1, 1, 0, 0]], bool)


@pytest.mark.parametrize("zero_output", [False, True])
def test_masked_values_and_gradients(zero_output):
    args = arrays()
    ours = lstm_sequence(*args, MASK, zero_output)
    theirs = _per_step(*[tp.constant(a) for a in args], tp.constant(MASK), zero_output)
    for a, b in zip(ours, theirs):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-12, atol=1e-12)
    tp.testing.check_gradients(lambda *a: list(lstm_sequence(*a, MASK, zero_output)), *args)


def test_masked_second_order_gradients_match_finite_differences():
    args = arrays(batch=2, steps=3, features=2, units=2)
    mask = np.array([[1, 0, 1], [0, 1, 1]], bool)
    tp.testing.check_gradients(lambda *a: list(lstm_sequence(*a, mask)), *args, order=2)


def test_second_order_gradients_match_finite_differences():
    args = arrays(batch=2, steps=3, features=2, units=2)
    tp.testing.check_gradients(lambda *a: list(lstm_sequence(*a)), *args, order=2)


def test_gradients_equal_the_per_step_cells_at_first_and_second_order():
    variables = [tp.Variable(a) for a in arrays(batch=2, steps=3)]

    def grads(run):
        with tp.GradientTape() as outer:
            with tp.GradientTape() as inner:
                out, h, c = run(*variables)
                loss = tp.reduce_sum(out * out) + tp.reduce_sum(tp.sin(h)) + tp.reduce_sum(c * 3.0)
            first = inner.gradient(loss, variables)
            total = tp.add_n([tp.reduce_sum(g * g) for g in first])
        return [g.numpy() for g in first + outer.gradient(total, variables)]

    for ours, theirs in zip(grads(lstm_sequence), grads(_per_step)):
        np.testing.assert_allclose(ours, theirs, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("chunk", [1, 3])
@pytest.mark.parametrize("mask", [None, MASK], ids=["unmasked", "masked"])
def test_gradients_across_chunks_of_steps_equal_the_per_step_cells(chunk, mask, monkeypatch):
    # The backward pass prepares its per-step factors a chunk of steps at a time.
    from tapefit.core.ops import lstm_sequence as module

    monkeypatch.setattr(module, "_CHUNK", chunk)
    variables = [tp.Variable(a) for a in arrays()]
    extra = [] if mask is None else [tp.constant(mask)]

    def grads(run):
        with tp.GradientTape() as tape:
            out, h, c = run(*variables, *extra)
            loss = tp.reduce_sum(out * out) + tp.reduce_sum(tp.sin(h)) + tp.reduce_sum(c * 3.0)
        return [g.numpy() for g in tape.gradient(loss, variables)]

    for ours, theirs in zip(grads(lstm_sequence), grads(_per_step)):
        np.testing.assert_allclose(ours, theirs, rtol=1e-10, atol=1e-12)


def test_the_upstream_gradients_are_not_written():
    # One row: transposing its state gradient gives a contiguous view, which BPTT must not write.
    variables = [tp.Variable(a) for a in arrays(batch=1)]
    dh = tp.constant(RNG.standard_normal((1, 3)))
    dc = tp.constant(RNG.standard_normal((1, 3)))
    before = dh.numpy().copy(), dc.numpy().copy()
    with tp.GradientTape() as tape:
        _, h, c = lstm_sequence(*variables)
    tape.gradient([h, c], variables, output_gradients=[dh, dc])
    np.testing.assert_array_equal(dh.numpy(), before[0])
    np.testing.assert_array_equal(dc.numpy(), before[1])


def test_a_compiled_gradient_replays_the_fused_ops():
    args = [tp.constant(a) for a in arrays(dtype=np.float32)]

    def step(*xs):
        with tp.GradientTape() as tape:
            tape.watch(list(xs))
            out, h, c = lstm_sequence(*xs)
            loss = tp.reduce_sum(out * out) + tp.reduce_sum(h + c)
        return tape.gradient(loss, list(xs))

    compiled = tp.function(step)
    compiled(*args)  # traced
    fresh = [tp.constant(a) for a in arrays(dtype=np.float32)]
    for ours, theirs in zip(compiled(*fresh), step(*fresh)):
        np.testing.assert_array_equal(ours.numpy(), theirs.numpy())


@pytest.mark.parametrize("recorded", [False, True], ids=["fast", "recorded"])
def test_the_tape_fills_no_zeros_for_the_working_outputs(recorded, monkeypatch):
    from tapefit.core.registry import _GRADIENTS

    seen = []
    original = _GRADIENTS["LSTMSequence"]

    def spy(op, *dys):
        seen.append([dy is None for dy in dys])
        return original(op, *dys)

    monkeypatch.setitem(_GRADIENTS, "LSTMSequence", spy)
    variables = [tp.Variable(a) for a in arrays()]
    with tp.GradientTape(persistent=recorded) as tape:
        out, _, _ = lstm_sequence(*variables)
        loss = tp.reduce_sum(out)
        grads = tape.gradient(loss, variables)  # inside: a persistent tape records its backward
    assert seen == [[False, False, False, True, True, True]]
    assert all(g is not None for g in grads)


def test_a_numeric_mask_counts_as_booleans():
    args = arrays()
    for ours, theirs in zip(lstm_sequence(*args, MASK.astype(np.float32)), lstm_sequence(*args, MASK)):
        np.testing.assert_array_equal(ours.numpy(), theirs.numpy())
