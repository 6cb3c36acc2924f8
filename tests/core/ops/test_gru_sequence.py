"""The whole-sequence GRU op: its values against per-step cells, with and without a mask, its
gradients to second order and a replay under tp.function."""

import numpy as np
import pytest

import tapefit as tp
from tapefit.core.ops.gru_sequence import _per_step, gru_sequence

RNG = np.random.default_rng(27)
MASK = np.array([[1, 0, 1, 1], [0, 0, 1, 0], [1, 1, 0, 0]], bool)


def arrays(batch=3, steps=4, features=2, units=3, dtype=np.float64):
    shapes = [
        (batch, steps, features),
        (features, 3 * units),
        (units, 3 * units),
        (2, 3 * units),
        (batch, units),
    ]
    return [(RNG.standard_normal(s) * 0.7).astype(dtype) for s in shapes]


@pytest.mark.parametrize("batch", [1, 3])
def test_values_equal_the_per_step_cells(batch):
    args = arrays(batch=batch, dtype=np.float32)
    for ours, theirs in zip(gru_sequence(*args), _per_step(*[tp.constant(a) for a in args])):
        assert ours.dtype == tp.float32 and ours.shape == theirs.shape
        np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("mask", [None, MASK], ids=["unmasked", "masked"])
@pytest.mark.parametrize("zero_output", [False, True])
def test_gradients_match_finite_differences(mask, zero_output):
    args = arrays()
    ours = gru_sequence(*args, mask, zero_output)
    theirs = _per_step(
        *[tp.constant(a) for a in args], None if mask is None else tp.constant(mask), zero_output
    )
    for a, b in zip(ours, theirs):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-12, atol=1e-12)
    tp.testing.check_gradients(lambda *a: list(gru_sequence(*a, mask, zero_output)), *args)


@pytest.mark.parametrize("mask", [None, MASK[:2, :3]], ids=["unmasked", "masked"])
def test_second_order_gradients_match_finite_differences(mask):
    args = arrays(batch=2, steps=3, units=2)
    tp.testing.check_gradients(lambda *a: list(gru_sequence(*a, mask)), *args, order=2)


@pytest.mark.parametrize("chunk", [1, 3])
@pytest.mark.parametrize("mask", [None, MASK], ids=["unmasked", "masked"])
def test_gradients_across_chunks_of_steps_equal_the_per_step_cells(chunk, mask, monkeypatch):
    # The backward pass prepares its per-step factors a chunk of steps at a time.
    from tapefit.core.ops import gru_sequence as module

    monkeypatch.setattr(module, "_CHUNK", chunk)
    variables = [tp.Variable(a) for a in arrays()]
    extra = [] if mask is None else [tp.constant(mask)]

    def grads(run):
        with tp.GradientTape() as tape:
            out, h = run(*variables, *extra)
            loss = tp.reduce_sum(out * out) + tp.reduce_sum(tp.sin(h))
        return [g.numpy() for g in tape.gradient(loss, variables)]

    for ours, theirs in zip(grads(gru_sequence), grads(_per_step)):
        np.testing.assert_allclose(ours, theirs, rtol=1e-10, atol=1e-12)


def test_a_compiled_gradient_replays_the_fused_ops():
    def step(*xs):
        with tp.GradientTape() as tape:
            tape.watch(list(xs))
            out, h = gru_sequence(*xs, MASK)
            loss = tp.reduce_sum(out * out) + tp.reduce_sum(h)
        return tape.gradient(loss, list(xs))

    compiled = tp.function(step)
    compiled(*[tp.constant(a) for a in arrays(dtype=np.float32)])  # traced
    fresh = [tp.constant(a) for a in arrays(dtype=np.float32)]
    for ours, theirs in zip(compiled(*fresh), step(*fresh)):
        np.testing.assert_array_equal(ours.numpy(), theirs.numpy())


def test_a_numeric_mask_counts_as_booleans():
    args = arrays()
    for ours, theirs in zip(gru_sequence(*args, MASK.astype(np.int32)), gru_sequence(*args, MASK)):
        np.testing.assert_array_equal(ours.numpy(), theirs.numpy())
