"""``tp.nn`` (``tapefit/core/ops/nn.py``): values against plain NumPy references, gradients
against finite differences (second order for the smooth ops, conv2d and pooling), stability
at extreme logits, and the errors for bad input.

Second-order checks of piecewise-linear ops wrap the op's output in ``sin``, so that the
gradient op itself (``ReluGrad``, ``Conv2DBackpropInput``, ``AvgPoolGrad``, the scatter)
must be differentiable.
"""

from __future__ import annotations

import inspect
import math
import re

import numpy as np
import pytest

import tapefit as tp
from tapefit.core.ops import nn as nn_ops
from tapefit.core.ops.nn import masked_softmax

check = tp.testing.check_gradients
RNG = np.random.default_rng(11)


def _x(*shape: int) -> np.ndarray:
    return RNG.normal(size=shape)


def _away_from_zero(*shape: int) -> np.ndarray:
    """Values with |x| >= 0.1, so finite differences never straddle a kink at 0."""
    x = _x(*shape)
    return np.where(x >= 0, x + 0.1, x - 0.1)


def _grads(f, *args):
    """Tape gradients of ``sum(f(*args))`` with respect to every argument."""
    args = [tp.constant(a) for a in args]
    with tp.GradientTape() as tape:
        tape.watch(args)
        y = tp.reduce_sum(f(*args))
    return [g.numpy() for g in tape.gradient(y, args)]


_erf_ref = np.vectorize(math.erf)
_erfc_ref = np.vectorize(math.erfc)


# -- activations -------------------------------------------------------------------


ACTIVATIONS = {
    "relu": (tp.nn.relu, lambda x: np.maximum(x, 0)),
    "leaky_relu": (tp.nn.leaky_relu, lambda x: np.where(x > 0, x, 0.2 * x)),
    "leaky_relu_0.01": (lambda x: tp.nn.leaky_relu(x, alpha=0.01), lambda x: np.where(x > 0, x, 0.01 * x)),
    "leaky_relu_2": (lambda x: tp.nn.leaky_relu(x, alpha=2.0), lambda x: np.where(x > 0, x, 2.0 * x)),
    "leaky_relu_-0.5": (lambda x: tp.nn.leaky_relu(x, alpha=-0.5), lambda x: np.where(x > 0, x, -0.5 * x)),
    "elu": (tp.nn.elu, lambda x: np.where(x > 0, x, np.expm1(x))),
    "gelu": (tp.nn.gelu, lambda x: 0.5 * x * (1 + _erf_ref(x / np.sqrt(2)))),
    "gelu_tanh": (
        lambda x: tp.nn.gelu(x, approximate=True),
        lambda x: 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3))),
    ),
    "softplus": (tp.nn.softplus, lambda x: np.log1p(np.exp(x))),
    "sigmoid": (tp.nn.sigmoid, lambda x: 1 / (1 + np.exp(-x))),
    "tanh": (tp.nn.tanh, np.tanh),
    "erf": (tp.nn.erf, _erf_ref),
}
SMOOTH = ["elu", "gelu", "gelu_tanh", "softplus", "sigmoid", "tanh", "erf"]


@pytest.mark.parametrize("name", sorted(ACTIVATIONS))
def test_activation_values(name):
    op, reference = ACTIVATIONS[name]
    x = _x(3, 5) * 3
    np.testing.assert_allclose(op(x).numpy(), reference(x), rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("name", sorted(ACTIVATIONS))
def test_activation_keeps_float32(name):
    op, reference = ACTIVATIONS[name]
    x = _x(4).astype(np.float32)
    y = op(x)
    assert y.dtype == np.float32
    np.testing.assert_allclose(y.numpy(), reference(x.astype(np.float64)), rtol=2e-6, atol=1e-6)


@pytest.mark.parametrize("name", SMOOTH)
def test_smooth_activation_gradients(name):
    check(ACTIVATIONS[name][0], _x(2, 3) * 2, order=2)


@pytest.mark.parametrize("name", ["relu", "leaky_relu", "leaky_relu_0.01", "leaky_relu_2", "leaky_relu_-0.5"])
def test_piecewise_linear_activation_gradients(name):
    op = ACTIVATIONS[name][0]
    check(lambda x: tp.sin(op(x)), _away_from_zero(2, 3), order=2)


def test_elu_second_derivative_is_exp_on_the_negative_side():
    x = tp.constant([-1.5, -0.2, 0.7])
    with tp.GradientTape() as outer:
        outer.watch(x)
        with tp.GradientTape() as inner:
            inner.watch(x)
            y = tp.reduce_sum(tp.nn.elu(x))
        g = inner.gradient(y, x)
    h = outer.gradient(g, x)
    np.testing.assert_allclose(g.numpy(), [np.exp(-1.5), np.exp(-0.2), 1.0], rtol=1e-6)
    np.testing.assert_allclose(h.numpy(), [np.exp(-1.5), np.exp(-0.2), 0.0], rtol=1e-6)


def test_piecewise_activations_at_infinities_and_nan():
    x = np.array([-np.inf, np.inf, np.nan, 0.0])
    np.testing.assert_array_equal(tp.nn.elu(x).numpy(), [-1, np.inf, np.nan, 0])
    np.testing.assert_array_equal(tp.nn.leaky_relu(x).numpy(), [-np.inf, np.inf, np.nan, 0])
    for op, want in ((tp.nn.elu, [0, 1, 1]), (tp.nn.leaky_relu, [0.2, 1, 0.2])):
        t = tp.constant(x[[0, 1, 3]])
        with tp.GradientTape() as tape:
            tape.watch(t)
            y = op(t)  # a non-scalar target: upstream gradient of ones, no sum of infinities
        np.testing.assert_array_equal(tape.gradient(y, t).numpy(), want)


@pytest.mark.parametrize("op", [tp.nn.leaky_relu, tp.nn.elu, tp.nn.gelu, tp.nn.erf, tp.nn.softmax])
def test_activations_reject_integer_input(op):
    with pytest.raises(TypeError, match=r"int32.*tp\.cast"):
        op(tp.constant([1, 2]))


def test_erf_accuracy_over_the_whole_range():
    x = np.concatenate([np.linspace(-30, 30, 60001), [1e-300, -1e-12, 0.5, 1.0, 2.0, 3.0, 4.5, 6.0]])
    got = tp.nn.erf(x).numpy()
    want = _erf_ref(x)
    np.testing.assert_allclose(got, want, rtol=1e-14, atol=1e-15)
    tiny = np.abs(x) < 1e-3  # relative accuracy where erf itself is tiny
    np.testing.assert_allclose(got[tiny], want[tiny], rtol=1e-14, atol=0)


def test_erf_special_values():
    got = tp.nn.erf(np.array([np.inf, -np.inf, np.nan, 0.0, -0.0])).numpy()
    np.testing.assert_array_equal(got[:2], [1.0, -1.0])
    assert np.isnan(got[2])
    assert got[3] == 0 and np.signbit(got[4])


def test_gelu_keeps_relative_accuracy_in_the_negative_tail():
    x = np.array([-5.0, -10.0, -20.0, -37.0])
    want = 0.5 * x * _erfc_ref(-x / np.sqrt(2))  # about -1e-6 down to -1e-299
    np.testing.assert_allclose(tp.nn.gelu(x).numpy(), want, rtol=1e-12)
    g = _grads(tp.nn.gelu, x)[0]
    assert np.all(np.isfinite(g))


# -- softmax ---------------------------------------------------------------------------


def _softmax_ref(x, axis=-1):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


@pytest.mark.parametrize("axis", [-1, 0, 1, None])
def test_softmax_and_log_softmax_values(axis):
    x = _x(3, 4, 2)
    want = _softmax_ref(x, -1 if axis is None else axis)
    np.testing.assert_allclose(tp.nn.softmax(x, axis=axis).numpy(), want, rtol=1e-12)
    np.testing.assert_allclose(tp.nn.log_softmax(x, axis=axis).numpy(), np.log(want), rtol=1e-12)


@pytest.mark.parametrize("axis", [-1, 0])
def test_softmax_and_log_softmax_gradients(axis):
    x = _x(3, 4)
    check(lambda x: tp.nn.softmax(x, axis=axis), x, order=2)
    check(lambda x: tp.nn.log_softmax(x, axis=axis), x, order=2)


def test_softmax_is_stable_at_extreme_logits():
    x = np.array([[1000.0, -1000.0, 0.0], [-1000.0, -1000.0, -1000.0]], np.float32)
    p = tp.nn.softmax(x).numpy()
    np.testing.assert_allclose(p, [[1, 0, 0], [1 / 3, 1 / 3, 1 / 3]], atol=1e-7)
    logp = tp.nn.log_softmax(x).numpy()
    np.testing.assert_allclose(logp, [[0, -2000, -1000], [-np.log(3)] * 3], rtol=1e-6)
    for f in (tp.nn.softmax, tp.nn.log_softmax):
        assert np.all(np.isfinite(_grads(lambda x, f=f: tp.sin(f(x)), x)[0]))


def _masked_softmax_ref(x, mask, axis=-1):
    return _softmax_ref(np.where(mask, x, -1e9), axis)


MASK = RNG.random((2, 3, 4)) > 0.4
MASK[0, 1] = False  # a row with every logit masked
MASK[1, 2] = True


@pytest.mark.parametrize("mask", [MASK, MASK[:, :1], MASK[0]], ids=["full", "broadcast rows", "no batch"])
def test_masked_softmax_values(mask):
    x = _x(2, 3, 4)
    got = masked_softmax(x, mask).numpy()
    np.testing.assert_allclose(got, _masked_softmax_ref(x, mask), rtol=1e-12)
    full = np.broadcast_to(mask, x.shape)
    assert np.all(got[~full & full.any(-1, keepdims=True)] == 0.0)  # exactly 0 beside a real logit
    f32 = masked_softmax(x.astype(np.float32), mask)
    assert f32.dtype == np.float32
    np.testing.assert_allclose(f32.numpy(), _masked_softmax_ref(x, mask), rtol=1e-6, atol=1e-7)


def test_masked_softmax_of_a_fully_masked_row_is_uniform_and_has_no_gradient():
    x = _x(2, 3, 4)
    np.testing.assert_array_equal(masked_softmax(x, MASK).numpy()[0, 1], [0.25] * 4)
    (dx,) = _grads(lambda x: tp.sin(masked_softmax(x, MASK)), x)
    assert np.all(dx[~MASK] == 0.0) and np.all(dx[MASK] != 0.0)


@pytest.mark.parametrize("axis", [-1, 1])
def test_masked_softmax_gradients(axis):
    x = _x(2, 3, 4)
    for mask in (MASK, MASK[:, :1]):
        check(lambda x, mask=mask: masked_softmax(x, mask, axis=axis), x, order=2)
        check(lambda x, mask=mask: tp.sin(masked_softmax(x, mask, axis=axis)), x, order=3)


def test_the_softmax_gradient_is_one_op():
    x = tp.constant(_x(3, 4))
    cases = [(tp.nn.softmax, "Softmax"), (lambda x: masked_softmax(x, MASK[0]), "MaskedSoftmax")]
    for softmax, forward in cases:
        with tp.GradientTape() as outer:
            outer.watch(x)
            with tp.GradientTape() as inner:
                inner.watch(x)
                y = softmax(x)
            inner.gradient(y, x, output_gradients=tp.constant(_x(3, 4)))
        assert [op.type for op in outer._entries] == [forward, "SoftmaxGrad"]


def test_masked_softmax_rejects_bad_masks():
    with pytest.raises(TypeError, match="masked_softmax: mask must be a bool tensor, got int64"):
        masked_softmax(_x(2, 3), np.ones((2, 3), np.int64))
    with pytest.raises(ValueError, match=r"the mask \(3,\) does not broadcast to the logits' shape \(2, 4\)"):
        masked_softmax(_x(2, 4), np.ones(3, bool))


def test_softmax_rejects_a_bad_axis():
    with pytest.raises(ValueError, match=r"softmax: axis 2 is out of range for a tensor of rank 2"):
        tp.nn.softmax(_x(2, 3), axis=2)


# -- cross-entropies --------------------------------------------------------------------


def test_sigmoid_cross_entropy_values_and_gradients():
    z, x = RNG.uniform(size=(3, 4)), _x(3, 4) * 2
    sig = 1 / (1 + np.exp(-x))
    want = -z * np.log(sig) - (1 - z) * np.log(1 - sig)
    np.testing.assert_allclose(tp.nn.sigmoid_cross_entropy_with_logits(z, x).numpy(), want, rtol=1e-12)
    dz, dx = _grads(tp.nn.sigmoid_cross_entropy_with_logits, z, x)
    np.testing.assert_allclose(dx, sig - z, rtol=1e-12)
    np.testing.assert_allclose(dz, -x, rtol=1e-12)
    check(tp.nn.sigmoid_cross_entropy_with_logits, z, x, order=2)


def test_sigmoid_cross_entropy_is_stable_at_extreme_logits():
    x = np.array([1000.0, -1000.0, 1000.0, -1000.0], np.float32)
    z = np.array([0.0, 1.0, 1.0, 0.0], np.float32)
    loss = tp.nn.sigmoid_cross_entropy_with_logits(z, x).numpy()
    np.testing.assert_allclose(loss, [1000, 1000, 0, 0])
    dz, dx = _grads(tp.nn.sigmoid_cross_entropy_with_logits, z, x)
    np.testing.assert_allclose(dx, [1, -1, 0, 0])
    assert np.all(np.isfinite(dz))


def test_softmax_cross_entropy_values_and_gradients():
    x = _x(3, 5)
    z = RNG.uniform(size=(3, 5))
    z /= z.sum(-1, keepdims=True)
    p = _softmax_ref(x)
    loss = tp.nn.softmax_cross_entropy_with_logits(z, x)
    assert loss.shape == (3,)
    np.testing.assert_allclose(loss.numpy(), -(z * np.log(p)).sum(-1), rtol=1e-12)
    dz, dx = _grads(tp.nn.softmax_cross_entropy_with_logits, z, x)
    np.testing.assert_allclose(dx, p - z, atol=1e-12)  # TensorFlow's (softmax - labels) * dy
    np.testing.assert_allclose(dz, -np.log(p), rtol=1e-12)
    check(tp.nn.softmax_cross_entropy_with_logits, z, x, order=2)


def test_softmax_cross_entropy_third_order():
    z = np.array([[0.2, 0.5, 0.3], [0.6, 0.1, 0.3]])
    check(tp.nn.softmax_cross_entropy_with_logits, z, _x(2, 3), order=3)


def test_softmax_cross_entropy_gradient_is_exact_for_unnormalized_labels():
    z = RNG.uniform(size=(2, 4)) * 3
    check(tp.nn.softmax_cross_entropy_with_logits, z, _x(2, 4), order=2)


def test_softmax_cross_entropy_on_another_axis():
    x, z = _x(4, 3), RNG.uniform(size=(4, 3))
    z /= z.sum(0, keepdims=True)
    got = tp.nn.softmax_cross_entropy_with_logits(z, x, axis=0).numpy()
    np.testing.assert_allclose(got, -(z * np.log(_softmax_ref(x, 0))).sum(0), rtol=1e-12)
    check(lambda z, x: tp.nn.softmax_cross_entropy_with_logits(z, x, axis=0), z, x, order=2)


def test_softmax_cross_entropy_is_stable_at_extreme_logits():
    x = np.array([[1000.0, -1000.0, 0.0], [-1000.0, 1000.0, 1000.0]], np.float32)
    z = np.array([[0.0, 1.0, 0.0], [1.0, 0.0, 0.0]], np.float32)
    loss = tp.nn.softmax_cross_entropy_with_logits(z, x).numpy()
    np.testing.assert_allclose(loss, [2000, 2000 + np.log(2)], rtol=1e-6)
    dz, dx = _grads(tp.nn.softmax_cross_entropy_with_logits, z, x)
    np.testing.assert_allclose(dx, [[1, -1, 0], [-1, 0.5, 0.5]], atol=1e-6)
    assert np.all(np.isfinite(dz))


def test_sparse_softmax_cross_entropy_values_and_gradients():
    x = _x(4, 5)
    labels = np.array([0, 4, 2, 2])
    p = _softmax_ref(x)
    loss = tp.nn.sparse_softmax_cross_entropy_with_logits(labels, x)
    np.testing.assert_allclose(loss.numpy(), -np.log(p[np.arange(4), labels]), rtol=1e-12)
    dense = tp.nn.softmax_cross_entropy_with_logits(np.eye(5)[labels], x)
    np.testing.assert_allclose(loss.numpy(), dense.numpy(), rtol=1e-12)
    (dx,) = _grads(lambda x: tp.nn.sparse_softmax_cross_entropy_with_logits(labels, x), x)
    np.testing.assert_allclose(dx, p - np.eye(5)[labels], atol=1e-12)
    check(lambda x: tp.nn.sparse_softmax_cross_entropy_with_logits(labels, x), x, order=2)


def test_sparse_softmax_cross_entropy_higher_rank_and_third_order():
    labels = tp.constant([[0, 2], [1, 1]], tp.int64)
    x = _x(2, 2, 3)
    p = _softmax_ref(x)
    want = -np.log(np.take_along_axis(p, labels.numpy()[..., None], -1))[..., 0]
    np.testing.assert_allclose(tp.nn.sparse_softmax_cross_entropy_with_logits(labels, x).numpy(), want)
    check(lambda x: tp.nn.sparse_softmax_cross_entropy_with_logits(labels, x), x, order=3)


def test_sparse_softmax_cross_entropy_is_stable_at_extreme_logits():
    x = np.array([[1000.0, -1000.0, 0.0], [-1000.0, 1000.0, 1000.0]], np.float32)
    labels = [1, 0]
    loss = tp.nn.sparse_softmax_cross_entropy_with_logits(labels, x).numpy()
    np.testing.assert_allclose(loss, [2000, 2000 + np.log(2)], rtol=1e-6)
    (dx,) = _grads(lambda x: tp.nn.sparse_softmax_cross_entropy_with_logits(labels, x), x)
    np.testing.assert_allclose(dx, [[1, -1, 0], [-1, 0.5, 0.5]], atol=1e-6)


def test_cross_entropies_take_python_labels_in_the_logits_dtype():
    x = tp.constant([[0.5, -1.0]])
    loss = tp.nn.softmax_cross_entropy_with_logits([[1, 0]], x)
    assert loss.dtype == np.float32
    assert tp.nn.sigmoid_cross_entropy_with_logits([[1.0, 0.0]], x).dtype == np.float32


@pytest.mark.parametrize(
    "fn", [tp.nn.sigmoid_cross_entropy_with_logits, tp.nn.softmax_cross_entropy_with_logits]
)
def test_cross_entropies_reject_mismatched_shapes_and_dtypes(fn):
    with pytest.raises(ValueError, match=re.escape("got logits (2, 3) and labels (2, 4)")):
        fn(np.zeros((2, 4)), np.zeros((2, 3)))
    with pytest.raises(TypeError, match=r"float64, float32"):
        fn(np.zeros((2, 3), np.float32), np.zeros((2, 3)))
    with pytest.raises(TypeError, match=r"float64, int32"):
        fn(tp.constant([[1, 0, 0]]), np.zeros((1, 3)))


def test_sparse_cross_entropy_rejects_bad_labels():
    fn = tp.nn.sparse_softmax_cross_entropy_with_logits
    x = np.zeros((3, 4))
    with pytest.raises(ValueError, match=re.escape("label 4 is outside the valid range [0, 4)")):
        fn([0, 4, 1], x)
    with pytest.raises(ValueError, match=re.escape("label -1 is outside the valid range [0, 4)")):
        fn([0, -1, 1], x)
    with pytest.raises(ValueError, match=re.escape("got labels (2,) and logits (3, 4)")):
        fn([0, 1], x)
    with pytest.raises(TypeError, match=r"labels must be integer class indices, got dtype float32"):
        fn([0.0, 1.0, 2.0], x)


# -- dropout ---------------------------------------------------------------------------


def test_dropout_keeps_about_one_minus_rate_and_scales_the_kept():
    x = RNG.uniform(1, 2, size=(200, 100)).astype(np.float32)
    y = tp.nn.dropout(x, 0.3, seed=5).numpy()
    kept = y != 0
    assert 0.68 < kept.mean() < 0.72  # 20000 draws: 0.7 +- 0.0032 is one standard deviation
    np.testing.assert_allclose(y[kept], x[kept] / 0.7, rtol=1e-6)
    assert y.dtype == np.float32


def test_dropout_gradient_is_the_scaled_mask():
    x = tp.constant(RNG.uniform(1, 2, size=(5, 6)))
    with tp.GradientTape() as tape:
        tape.watch(x)
        y = tp.nn.dropout(x, 0.5, seed=3)
    g = tape.gradient(y, x).numpy()
    np.testing.assert_array_equal(g, np.where(y.numpy() != 0, 2.0, 0.0))


def test_dropout_is_reproducible_with_seeds():
    x = np.ones((8, 8))
    tp.random.set_seed(1)
    first = [tp.nn.dropout(x, 0.5, seed=7).numpy() for _ in range(2)]
    tp.random.set_seed(1)
    again = [tp.nn.dropout(x, 0.5, seed=7).numpy() for _ in range(2)]
    np.testing.assert_array_equal(first, again)
    assert not np.array_equal(first[0], first[1])  # the op's generator moves on, as in TensorFlow
    tp.random.set_seed(1)
    other = tp.nn.dropout(x, 0.5, seed=8).numpy()
    assert not np.array_equal(first[0], other)


def test_dropout_noise_shape_shares_the_mask_along_broadcast_axes():
    x = np.ones((6, 5, 4))
    y = tp.nn.dropout(x, 0.5, noise_shape=[6, 1, None], seed=2).numpy()
    assert np.all(y == y[:, :1, :])
    assert 0 < (y != 0).mean() < 1


def test_dropout_rate_zero_is_the_identity():
    x = tp.constant([1.0, 2.0])
    assert tp.nn.dropout(x, 0.0) is x


def test_dropout_rate_zero_of_a_variable_gives_a_tensor():
    v = tp.Variable([1.0, 2.0])
    with tp.GradientTape() as tape:
        x = tp.nn.dropout(v, 0.0)
        y = tp.reduce_sum(x * 2.0)
    assert type(x) is tp.Tensor
    v.assign([0.0, 0.0])
    np.testing.assert_array_equal(x.numpy(), [1.0, 2.0])
    np.testing.assert_array_equal(tape.gradient(y, v).numpy(), [2.0, 2.0])


@pytest.mark.parametrize("rate", [-0.1, 1, 1.5, [0.5], "half", float("nan")])
def test_dropout_rejects_bad_rates(rate):
    with pytest.raises(ValueError, match=r"dropout: rate must be a scalar in the range \[0, 1\)"):
        tp.nn.dropout(np.ones(3), rate)


def test_leaky_relu_rejects_a_non_number_alpha():
    with pytest.raises(TypeError, match="leaky_relu: alpha must be a number, got 'a'"):
        tp.nn.leaky_relu(tp.constant([1.0]), "a")


def test_dropout_rejects_bad_input():
    with pytest.raises(TypeError, match=r"dropout: x must be a floating tensor, got int32"):
        tp.nn.dropout(tp.constant([1, 2]), 0.5)
    with pytest.raises(
        ValueError, match=re.escape("noise_shape [3, 2] does not broadcast to the shape (3, 4)")
    ):
        tp.nn.dropout(np.ones((3, 4)), 0.5, noise_shape=[3, 2])
    with pytest.raises(ValueError, match=r"one entry per axis"):
        tp.nn.dropout(np.ones((3, 4)), 0.5, noise_shape=[4])


# -- conv2d ----------------------------------------------------------------------------


def _pair(v):
    """TensorFlow's int / 1 / 2 / 4-entry spatial argument as [h, w]."""
    v = [v] if isinstance(v, int) else list(v)
    return v[1:3] if len(v) == 4 else v * 2 if len(v) == 1 else v


def _same_pads(size, k, s, d=1):
    span = (k - 1) * d + 1
    out = -(-size // s)
    total = max((out - 1) * s + span - size, 0)
    return out, total // 2


def _conv_ref(x, w, strides, padding, dilations=(1, 1)):
    """Direct nested-loop cross-correlation, TensorFlow's SAME/VALID geometry."""
    n, h, wd, _ = x.shape
    kh, kw, _, o = w.shape
    (sh, sw), (dh, dw) = strides, dilations
    if padding == "SAME":
        (oh, top), (ow, left) = _same_pads(h, kh, sh, dh), _same_pads(wd, kw, sw, dw)
    else:
        oh, ow, top, left = (h - (kh - 1) * dh - 1) // sh + 1, (wd - (kw - 1) * dw - 1) // sw + 1, 0, 0
    out = np.zeros((n, oh, ow, o))
    for b in range(n):
        for i in range(oh):
            for j in range(ow):
                for a in range(kh):
                    for e in range(kw):
                        r, q = i * sh + a * dh - top, j * sw + e * dw - left
                        if 0 <= r < h and 0 <= q < wd:
                            out[b, i, j] += x[b, r, q] @ w[a, e]
    return out


CONV_CASES = [
    # input shape, filter (kh, kw, out), strides, padding, dilations
    ((2, 5, 6, 3), (3, 3, 2), 1, "SAME", 1),
    ((2, 5, 6, 3), (3, 3, 2), 1, "VALID", 1),
    ((1, 7, 6, 2), (3, 2, 3), 2, "SAME", 1),
    ((1, 7, 8, 2), (2, 3, 2), [2, 3], "VALID", 1),
    ((2, 6, 5, 1), (2, 2, 3), [1, 2, 2, 1], "SAME", 1),
    ((1, 8, 8, 1), (4, 4, 2), [3], "SAME", 1),
    ((1, 6, 7, 2), (2, 2, 2), 1, "SAME", [2, 1]),
    ((1, 7, 7, 1), (3, 3, 1), 1, "VALID", 2),
    ((2, 5, 4, 5), (3, 2, 2), [2, 1], "SAME", 1),  # 4 channels or more: the other im2col layout
]


@pytest.mark.parametrize("shape, fshape, strides, padding, dilations", CONV_CASES)
def test_conv2d_values(shape, fshape, strides, padding, dilations):
    x, w = _x(*shape), _x(fshape[0], fshape[1], shape[3], fshape[2])
    got = tp.nn.conv2d(x, w, strides, padding, dilations=dilations).numpy()
    np.testing.assert_allclose(got, _conv_ref(x, w, _pair(strides), padding, _pair(dilations)), atol=1e-12)


@pytest.mark.parametrize("shape, fshape, strides, padding, dilations", CONV_CASES[::2])
def test_conv2d_gradients(shape, fshape, strides, padding, dilations):
    x = _x(1, *shape[1:])
    w = _x(fshape[0], fshape[1], shape[3], min(fshape[2], 2))
    check(lambda x, w: tp.sin(tp.nn.conv2d(x, w, strides, padding, dilations=dilations)), x, w, order=2)


def test_conv2d_third_order_goes_through_both_backprop_ops():
    x, w = _x(1, 3, 3, 2), _x(2, 2, 2, 1)
    check(lambda x, w: tp.sin(tp.nn.conv2d(x, w, 2, "SAME")), x, w, order=3)


def test_conv2d_gradient_ops_have_tensorflow_names_and_gradients():
    from tapefit.core.registry import get_gradient

    for name in ("Conv2D", "Conv2DBackpropInput", "Conv2DBackpropFilter", "AvgPool", "AvgPoolGrad"):
        assert get_gradient(name) is not None, name
    x, w = tp.constant(_x(1, 4, 4, 1)), tp.Variable(_x(3, 3, 1, 2))
    with tp.GradientTape(persistent=True) as outer:
        outer.watch(x)
        with tp.GradientTape() as inner:
            inner.watch(x)
            y = tp.reduce_sum(tp.nn.conv2d(x, w, 1, "SAME"))
        dx, dw = inner.gradient(y, [x, w])
    # y is bilinear: dx depends on w only (Conv2DBackpropInput), dw on x only (Conv2DBackpropFilter)
    assert outer.gradient(dx, x) is None and outer.gradient(dw, w) is None
    d2 = outer.gradient(dx, w).numpy()  # d/dw sum_x dy/dx: each filter tap counts its in-bounds positions
    np.testing.assert_array_equal(d2[:, :, 0, 0], [[9, 12, 9], [12, 16, 12], [9, 12, 9]])


def test_conv2d_same_puts_the_extra_padding_bottom_right():
    # 4x4 input, 2x2 filter of ones, stride 1, SAME: total padding 1, all of it at the bottom/right
    x = np.arange(16.0).reshape(1, 4, 4, 1)
    y = tp.nn.conv2d(x, np.ones((2, 2, 1, 1)), 1, "SAME").numpy()[0, :, :, 0]
    assert y[0, 0] == 0 + 1 + 4 + 5
    assert y[3, 3] == 15
    np.testing.assert_array_equal(y[3], [12 + 13, 13 + 14, 14 + 15, 15])


def test_conv2d_strides_forms_agree_and_padding_is_case_insensitive():
    x, w = _x(1, 6, 6, 2), _x(3, 3, 2, 2)
    a = tp.nn.conv2d(x, w, 2, "SAME").numpy()
    for strides in ([2], [2, 2], [1, 2, 2, 1], (2, 2)):
        np.testing.assert_array_equal(tp.nn.conv2d(x, w, strides, "same").numpy(), a)


def test_conv2d_float32():
    x, w = _x(2, 5, 5, 3).astype(np.float32), _x(3, 3, 3, 4).astype(np.float32)
    y = tp.nn.conv2d(x, w, 1, "SAME")
    assert y.dtype == np.float32
    np.testing.assert_allclose(y.numpy(), _conv_ref(x, w, (1, 1), "SAME"), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    "x_shape, w_shape, kwargs, error, message",
    [
        ((1, 4, 4), (3, 3, 1, 2), {}, ValueError, "got shapes (1, 4, 4) and (3, 3, 1, 2)"),
        (
            (1, 4, 4, 3),
            (3, 3, 2, 2),
            {},
            ValueError,
            "filters (3, 3, 2, 2) expect 2 input channels, the input (1, 4, 4, 3) has 3",
        ),
        (
            (1, 4, 4, 1),
            (3, 3, 1, 2),
            {"padding": "FULL"},
            ValueError,
            "padding must be 'SAME' or 'VALID', got 'FULL'",
        ),
        (
            (1, 4, 4, 1),
            (3, 3, 1, 2),
            {"strides": [2, 2, 2, 2]},
            ValueError,
            "must be 1 in the batch and channel entries",
        ),
        (
            (1, 4, 4, 1),
            (3, 3, 1, 2),
            {"strides": 0},
            ValueError,
            "strides must be an int or a list of 1, 2 or 4 positive ints",
        ),
        (
            (1, 4, 4, 1),
            (3, 3, 1, 2),
            {"strides": [1, 2, 3]},
            ValueError,
            "list of 1, 2 or 4 positive ints, got [1, 2, 3]",
        ),
        ((1, 4, 4, 1), (3, 3, 1, 2), {"data_format": "NCHW"}, ValueError, "only data_format='NHWC'"),
        (
            (1, 4, 4, 1),
            (5, 3, 1, 2),
            {"padding": "VALID"},
            ValueError,
            "the window height 5 is larger than the input height 4",
        ),
        ((1, 4, 4, 1), (2, 2, 1, 2), {"padding": "VALID", "dilations": 4}, ValueError, "window height 5"),
        ((1, 4, 4, 1), (3, 3, 1, 2), {"strides": "x"}, TypeError, "strides must be an int or a list"),
        # never truncated to 1 in silence
        ((1, 4, 4, 1), (3, 3, 1, 2), {"strides": [1.5, 2]}, TypeError, "got [1.5, 2]"),
        ((1, 4, 4, 1), (3, 3, 1, 2), {"dilations": 1.5}, TypeError, "dilations must be an int"),
    ],
)
def test_conv2d_rejects_bad_input(x_shape, w_shape, kwargs, error, message):
    args = {"strides": 1, "padding": "SAME", **kwargs}
    with pytest.raises(error, match=re.escape(message)):
        tp.nn.conv2d(np.zeros(x_shape), np.zeros(w_shape), **args)


def test_conv2d_rejects_mixed_and_integer_dtypes():
    with pytest.raises(TypeError, match=r"float64, float32"):
        tp.nn.conv2d(np.zeros((1, 3, 3, 1)), np.zeros((2, 2, 1, 1), np.float32), 1, "SAME")
    with pytest.raises(TypeError, match=r"conv2d: input must be a floating tensor"):
        tp.nn.conv2d(tp.constant(np.zeros((1, 3, 3, 1), np.int32)), np.zeros((2, 2, 1, 1)), 1, "SAME")


# -- pooling ---------------------------------------------------------------------------


def _pool_ref(x, k, s, padding, reduce):
    """Direct loops; SAME windows see only their real elements (padding neither wins nor counts)."""
    n, h, wd, c = x.shape
    if padding == "SAME":
        (oh, top), (ow, left) = _same_pads(h, k[0], s[0]), _same_pads(wd, k[1], s[1])
    else:
        oh, ow, top, left = (h - k[0]) // s[0] + 1, (wd - k[1]) // s[1] + 1, 0, 0
    out = np.zeros((n, oh, ow, c))
    for i in range(oh):
        for j in range(ow):
            r0, q0 = i * s[0] - top, j * s[1] - left
            window = x[:, max(r0, 0) : r0 + k[0], max(q0, 0) : q0 + k[1]]
            out[:, i, j] = reduce(window.reshape(n, -1, c), axis=1)
    return out


POOL_CASES = [
    # input shape, ksize, strides, padding
    ((2, 4, 4, 2), 2, 2, "VALID"),
    ((2, 5, 6, 3), [3, 2], 1, "SAME"),
    ((1, 7, 6, 2), 3, [2, 2], "SAME"),
    ((1, 7, 8, 2), [1, 2, 3, 1], [1, 2, 3, 1], "VALID"),
    ((1, 5, 5, 1), 3, 2, "SAME"),
    ((1, 6, 5, 2), [2, 3], [3, 1], "SAME"),
]


@pytest.mark.parametrize("shape, ksize, strides, padding", POOL_CASES)
def test_pool_values(shape, ksize, strides, padding):
    x = _x(*shape)
    k, s = _pair(ksize), _pair(strides)
    got_max = tp.nn.max_pool2d(x, ksize, strides, padding).numpy()
    np.testing.assert_array_equal(got_max, _pool_ref(x, k, s, padding, np.max))
    got_avg = tp.nn.avg_pool2d(x, ksize, strides, padding).numpy()
    np.testing.assert_allclose(got_avg, _pool_ref(x, k, s, padding, np.mean), atol=1e-14)


@pytest.mark.parametrize("shape, ksize, strides, padding", POOL_CASES[1:4])
def test_pool_gradients(shape, ksize, strides, padding):
    x = _x(1, *shape[1:])
    check(lambda x: tp.sin(tp.nn.avg_pool2d(x, ksize, strides, padding)), x, order=2)
    check(lambda x: tp.sin(tp.nn.max_pool2d(x, ksize, strides, padding)), x, order=2)


def test_avg_pool_same_divides_by_the_real_elements():
    y = tp.nn.avg_pool2d(np.ones((1, 5, 5, 1)), 3, 2, "SAME").numpy()
    np.testing.assert_array_equal(y, np.ones((1, 3, 3, 1)))  # zero padding counted would give 4/9 at corners
    x = np.arange(9.0).reshape(1, 3, 3, 1)
    y = tp.nn.avg_pool2d(x, 2, 1, "SAME").numpy()[0, :, :, 0]
    assert y[2, 2] == 8.0 and y[2, 0] == (6 + 7) / 2 and y[0, 0] == (0 + 1 + 3 + 4) / 4


def test_max_pool_gradient_goes_to_the_first_maximum():
    x = np.array([[1.0, 3.0], [3.0, 0.0]]).reshape(1, 2, 2, 1)
    (g,) = _grads(lambda x: tp.nn.max_pool2d(x, 2, 2, "VALID"), x)
    np.testing.assert_array_equal(g.reshape(2, 2), [[0, 1], [0, 0]])


def test_max_pool_overlapping_windows_add_their_gradients():
    x = np.array([0.0, 5.0, 1.0, 2.0]).reshape(1, 1, 4, 1)
    (g,) = _grads(lambda x: tp.nn.max_pool2d(x, [1, 3], 1, "SAME"), x)
    np.testing.assert_array_equal(g.ravel(), [0, 3, 0, 1])


def test_max_pool_with_minus_infinity_inputs_and_same_padding():
    # 3x3 windows at stride 1 with SAME: the first tap of the corner windows is padding
    x = np.full((1, 3, 3, 1), -np.inf)
    x[0, 2, 2, 0] = 1.0
    y = tp.nn.max_pool2d(x, 3, 1, "SAME").numpy()[0, :, :, 0]
    np.testing.assert_array_equal(y, [[-np.inf, -np.inf, -np.inf], [-np.inf, 1, 1], [-np.inf, 1, 1]])
    (g,) = _grads(lambda x: tp.nn.max_pool2d(x, 3, 1, "SAME"), x)
    assert g[0, 2, 2, 0] == 4 and g.sum() == 9  # every window's gradient lands on a real element


def test_max_pool_on_integers():
    x = tp.constant(np.arange(16).reshape(1, 4, 4, 1).tolist())
    y = tp.nn.max_pool2d(x, 2, 2, "VALID")
    assert y.dtype == np.int32
    np.testing.assert_array_equal(y.numpy()[0, :, :, 0], [[5, 7], [13, 15]])


@pytest.mark.parametrize("pool", [tp.nn.max_pool2d, tp.nn.avg_pool2d])
def test_pools_reject_bad_input(pool):
    with pytest.raises(
        ValueError, match=re.escape("input must be (batch, height, width, channels), got shape (4, 4)")
    ):
        pool(np.zeros((4, 4)), 2, 2, "VALID")
    with pytest.raises(ValueError, match=r"ksize \[2, 2, 2, 1\] must be 1 in the batch and channel entries"):
        pool(np.zeros((1, 4, 4, 1)), [2, 2, 2, 1], 2, "VALID")
    with pytest.raises(ValueError, match=r"padding must be 'SAME' or 'VALID'"):
        pool(np.zeros((1, 4, 4, 1)), 2, 2, "REFLECT")
    with pytest.raises(ValueError, match=r"window width 5 is larger than the input width 4"):
        pool(np.zeros((1, 8, 4, 1)), 5, 1, "VALID")


def test_avg_pool_rejects_integer_input():
    with pytest.raises(TypeError, match=r"avg_pool2d: input must be a floating tensor, got int32"):
        tp.nn.avg_pool2d(tp.constant(np.zeros((1, 2, 2, 1), np.int32)), 2, 2, "VALID")


# -- the namespace ---------------------------------------------------------------------


def test_tp_nn_has_every_name_api_md_lists():
    names = (
        "relu leaky_relu elu gelu softplus sigmoid tanh softmax log_softmax sigmoid_cross_entropy_with_logits "
        "softmax_cross_entropy_with_logits sparse_softmax_cross_entropy_with_logits dropout conv2d "
        "max_pool2d avg_pool2d erf"
    ).split()
    for name in names:
        assert callable(getattr(tp.nn, name)), name
        assert name in nn_ops.__all__
    assert tp.nn.tanh is tp.tanh and tp.nn.sigmoid is tp.sigmoid


# TensorFlow's parameter names (without `name`), in order: keyword calls written for tf.nn work.
TF_NN_PARAMETERS = {
    "relu": ["features"],
    "leaky_relu": ["features", "alpha"],
    "elu": ["features"],
    "gelu": ["features", "approximate"],
    "softplus": ["features"],
    "sigmoid": ["x"],
    "tanh": ["x"],
    "softmax": ["logits", "axis"],
    "log_softmax": ["logits", "axis"],
    "sigmoid_cross_entropy_with_logits": ["labels", "logits"],
    "softmax_cross_entropy_with_logits": ["labels", "logits", "axis"],
    "sparse_softmax_cross_entropy_with_logits": ["labels", "logits"],
    "dropout": ["x", "rate", "noise_shape", "seed"],
    "conv2d": ["input", "filters", "strides", "padding", "data_format", "dilations"],
    "max_pool2d": ["input", "ksize", "strides", "padding", "data_format"],
    "avg_pool2d": ["input", "ksize", "strides", "padding", "data_format"],
}


@pytest.mark.parametrize("name", sorted(TF_NN_PARAMETERS))
def test_nn_functions_take_tensorflows_parameter_names(name):
    expected = TF_NN_PARAMETERS[name]
    parameters = list(inspect.signature(getattr(tp.nn, name)).parameters)
    assert parameters[: len(expected)] == expected


def test_activations_accept_features_by_keyword():
    x = tp.constant([-1.0, 0.5])
    np.testing.assert_allclose(tp.nn.relu(features=x).numpy(), [0.0, 0.5])
    np.testing.assert_allclose(tp.nn.elu(features=x).numpy(), [math.expm1(-1.0), 0.5], rtol=1e-6)
    np.testing.assert_allclose(tp.nn.softplus(features=x).numpy(), np.log1p(np.exp([-1.0, 0.5])), rtol=1e-6)
    assert tp.math.softplus(features=x).shape == (2,)
