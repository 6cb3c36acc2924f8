"""``tp.clip_by_norm`` and ``tp.clip_by_global_norm`` (``tapefit/core/ops/clip.py``): TensorFlow's
formulas, the clipping invariants (the norm equals the bound after clipping, clipping is
idempotent, nothing changes below the bound, ``None`` passes through), inf/NaN behaviour,
gradients and bad input.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

import tapefit as tp

check = tp.testing.check_gradients
RNG = np.random.default_rng(3)


def _norm(*arrays) -> float:
    return float(np.sqrt(sum(np.sum(np.asarray(a, np.float64) ** 2) for a in arrays)))


# -- clip_by_norm ------------------------------------------------------------------------


def test_clip_by_norm_matches_tensorflows_formula():
    t = RNG.normal(size=(3, 4)) * 5
    got = tp.clip_by_norm(t, 2.0).numpy()
    np.testing.assert_allclose(got, t * 2.0 / max(_norm(t), 2.0), rtol=1e-15)


def test_clip_by_norm_reaches_the_bound_and_is_idempotent():
    t = tp.constant(RNG.normal(size=(5, 3)).astype(np.float32) * 10)
    once = tp.clip_by_norm(t, 1.5)
    assert once.dtype == np.float32
    np.testing.assert_allclose(_norm(once.numpy()), 1.5, rtol=1e-6)
    twice = tp.clip_by_norm(once, 1.5)
    np.testing.assert_allclose(twice.numpy(), once.numpy(), rtol=1e-6)
    np.testing.assert_allclose(once.numpy() / t.numpy(), 1.5 / _norm(t.numpy()), rtol=1e-5)  # direction kept


def test_clip_by_norm_leaves_small_tensors_unchanged():
    t = RNG.normal(size=(4,))
    t *= 0.5 / _norm(t)
    np.testing.assert_allclose(tp.clip_by_norm(t, 1.0).numpy(), t, rtol=1e-15)
    edge = t * (1.0 / _norm(t))  # exactly at the bound
    np.testing.assert_allclose(tp.clip_by_norm(edge, 1.0).numpy(), edge, rtol=1e-15)


def test_clip_by_norm_over_axes_clips_each_slice():
    t = np.array([[3.0, 4.0], [0.3, 0.4], [0.0, 0.0]])
    got = tp.clip_by_norm(t, 1.0, axes=[1]).numpy()
    np.testing.assert_allclose(got, [[0.6, 0.8], [0.3, 0.4], [0.0, 0.0]], rtol=1e-15)
    got0 = tp.clip_by_norm(t, 1.0, axes=0).numpy()
    np.testing.assert_allclose(got0[:, 0], t[:, 0] / _norm(t[:, 0]), rtol=1e-15)
    np.testing.assert_allclose(got0[:, 1], t[:, 1] / _norm(t[:, 1]), rtol=1e-15)


def test_clip_by_norm_of_zeros_is_zero_with_a_finite_gradient():
    x = tp.zeros((3,), tp.float64)
    with tp.GradientTape() as tape:
        tape.watch(x)
        y = tp.clip_by_norm(x, 1.0)
    np.testing.assert_array_equal(y.numpy(), [0, 0, 0])
    g = tape.gradient(y, x).numpy()
    assert np.all(np.isfinite(g))


def test_clip_by_norm_gradients():
    above = RNG.normal(size=(2, 3)) * 3  # norm well above 1
    check(lambda t: tp.clip_by_norm(t, 1.0), above, order=2)
    below = RNG.normal(size=(2, 3)) * 0.1
    check(lambda t: tp.clip_by_norm(t, 1.0), below, order=2)
    check(lambda t, c: tp.clip_by_norm(t, c), above, tp.constant(1.3, tp.float64), order=1)


@pytest.mark.parametrize("clip_norm", [0.0, -1.0, float("nan"), float("inf")])
def test_clip_by_norm_rejects_bad_bounds(clip_norm):
    with pytest.raises(ValueError, match=r"clip_by_norm: clip_norm must be a finite number > 0"):
        tp.clip_by_norm(np.ones(3), clip_norm)


def test_clip_by_norm_rejects_bad_input():
    with pytest.raises(ValueError, match=re.escape("clip_norm must be a scalar, got shape (2,)")):
        tp.clip_by_norm(np.ones(3), [1.0, 2.0])
    with pytest.raises(TypeError, match=r"clip_by_norm: t must be a floating tensor, got int32"):
        tp.clip_by_norm(tp.constant([1, 2]), 1.0)
    with pytest.raises(TypeError, match=r"float32, float64"):
        tp.clip_by_norm(tp.constant([1.0, 2.0]), tp.constant(1.0, tp.float64))
    with pytest.raises(TypeError, match=r"clip_norm must be a number"):
        tp.clip_by_norm(np.ones(3), "1")


# -- clip_by_global_norm -----------------------------------------------------------------


def test_clip_by_global_norm_matches_tensorflows_formula_and_skips_none():
    a, b = RNG.normal(size=(3, 2)) * 4, RNG.normal(size=(5,)) * 4
    clipped, norm = tp.clip_by_global_norm([a, None, b], 2.0)
    assert isinstance(clipped, list) and clipped[1] is None
    np.testing.assert_allclose(norm.numpy(), _norm(a, b), rtol=1e-15)  # the None entry is left out
    scale = 2.0 / _norm(a, b)
    np.testing.assert_allclose(clipped[0].numpy(), a * scale, rtol=1e-14)
    np.testing.assert_allclose(clipped[2].numpy(), b * scale, rtol=1e-14)
    np.testing.assert_allclose(_norm(clipped[0].numpy(), clipped[2].numpy()), 2.0, rtol=1e-14)


def test_clip_by_global_norm_is_idempotent_and_leaves_small_lists_unchanged():
    ts = [tp.constant(RNG.normal(size=(4,)).astype(np.float32) * 3), tp.constant(np.float32([[1.0, -2.0]]))]
    once, norm = tp.clip_by_global_norm(ts, 1.0)
    assert [t.dtype for t in once] == [np.float32, np.float32] and norm.dtype == np.float32
    twice, norm2 = tp.clip_by_global_norm(once, 1.0)
    np.testing.assert_allclose(float(norm2), 1.0, rtol=1e-6)
    for a, b in zip(once, twice):
        np.testing.assert_allclose(b.numpy(), a.numpy(), rtol=1e-6)
    small = [t * 0.01 for t in ts]
    same, _ = tp.clip_by_global_norm(small, 1.0)
    for a, b in zip(small, same):
        np.testing.assert_array_equal(b.numpy(), a.numpy())


def test_clip_by_global_norm_accepts_tuples_and_python_data():
    clipped, norm = tp.clip_by_global_norm(([3.0, 4.0],), 1.0)
    np.testing.assert_allclose(clipped[0].numpy(), [0.6, 0.8], rtol=1e-6)
    assert float(norm) == 5.0


@pytest.mark.parametrize("bad", [np.inf, -np.inf, np.nan])
def test_clip_by_global_norm_with_a_non_finite_entry_gives_nan(bad):
    clipped, norm = tp.clip_by_global_norm([np.array([1.0, bad]), np.array([2.0]), None], 1.0)
    assert np.isnan(norm.numpy()) if np.isnan(bad) else np.isinf(norm.numpy())
    assert np.all(np.isnan(clipped[0].numpy())) and np.all(np.isnan(clipped[1].numpy()))
    assert clipped[2] is None


def test_clip_by_global_norm_of_zeros_stays_zero():
    clipped, norm = tp.clip_by_global_norm([np.zeros(3), np.zeros((2, 2))], 1.0)
    assert float(norm) == 0.0
    assert all(not np.any(t.numpy()) for t in clipped)


def test_clip_by_global_norm_use_norm():
    a = np.array([3.0, 4.0])
    clipped, norm = tp.clip_by_global_norm([a], 1.0, use_norm=10.0)
    assert float(norm) == 10.0
    np.testing.assert_allclose(clipped[0].numpy(), a * 0.1, rtol=1e-15)
    nothing, norm = tp.clip_by_global_norm([None, None], 1.0, use_norm=2.0)
    assert nothing == [None, None] and float(norm) == 2.0


def test_clip_by_global_norm_mixed_dtypes_use_the_widest():
    clipped, norm = tp.clip_by_global_norm([np.float32([3.0]), np.float64([4.0])], 1.0)
    assert norm.dtype == np.float64 and float(norm) == 5.0
    assert clipped[0].dtype == np.float32 and clipped[1].dtype == np.float64


def test_clip_by_global_norm_gradients():
    a, b = RNG.normal(size=(2, 2)) * 3, RNG.normal(size=(3,)) * 3

    def f(a, b):
        clipped, norm = tp.clip_by_global_norm([a, None, b], 1.0)
        return [clipped[0], clipped[2], norm]

    check(f, a, b, order=2)


def test_clip_by_global_norm_rejects_bad_input():
    with pytest.raises(TypeError, match=r"t_list should be a list or tuple of tensors, got Tensor"):
        tp.clip_by_global_norm(tp.constant([1.0]), 1.0)
    with pytest.raises(ValueError, match=r"every entry is None"):
        tp.clip_by_global_norm([None], 1.0)
    with pytest.raises(
        ValueError, match=r"clip_by_global_norm: clip_norm must be a finite number > 0, got -1"
    ):
        tp.clip_by_global_norm([np.ones(2)], -1)
    with pytest.raises(TypeError, match=re.escape("t_list[1] must be a floating tensor, got int32")):
        tp.clip_by_global_norm([np.ones(2), tp.constant([1, 2])], 1.0)
    with pytest.raises(ValueError, match=r"use_norm must be a scalar"):
        tp.clip_by_global_norm([np.ones(2)], 1.0, use_norm=[1.0, 2.0])
