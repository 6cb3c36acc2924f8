"""``conv2d_transpose`` and ``depthwise_conv2d``: values against direct definitions, gradients
(first and second order) against finite differences, replay under ``tp.function``, errors."""

from __future__ import annotations

import numpy as np
import pytest

import tapefit as tp
from tapefit.core.ops import nn

RNG = np.random.default_rng(7)


@pytest.mark.parametrize("padding", ["SAME", "VALID"])
@pytest.mark.parametrize("strides, dilations", [(1, 1), (2, 1), ([3, 2], 1), (1, 2)])
def test_conv2d_transpose_is_the_adjoint_of_conv2d(padding, strides, dilations):
    # <conv2d(a, w), b> == <a, conv2d_transpose(b, w)> for every a and b
    a = RNG.normal(size=(2, 7, 6, 3))
    w = RNG.normal(size=(3, 2, 3, 4))
    y = nn.conv2d(a, w, strides, padding, dilations=dilations).numpy()
    b = RNG.normal(size=y.shape)
    t = nn.conv2d_transpose(b, w, a.shape, strides, padding, dilations=dilations).numpy()
    assert t.shape == a.shape
    np.testing.assert_allclose(np.sum(y * b), np.sum(a * t), rtol=1e-10)


def test_conv2d_transpose_spreads_each_pixel_over_the_output():
    # one input pixel at (1, 2), stride 2: the kernel lands at (2, 4), top-left, VALID
    x = np.zeros((1, 3, 4, 1))
    x[0, 1, 2, 0] = 2.0
    w = RNG.normal(size=(3, 3, 2, 1))
    out = nn.conv2d_transpose(x, w, (1, 7, 9, 2), 2, "VALID").numpy()
    expected = np.zeros((1, 7, 9, 2))
    expected[0, 2:5, 4:7] = 2.0 * w[:, :, :, 0]
    np.testing.assert_allclose(out, expected)


def direct_depthwise(x, w, stride, padding, dilation):
    """Output channel c * m + k: channel c of x correlated with w[:, :, c, k] (conv2d per channel)."""
    channels, multiplier = w.shape[2:]
    parts = [
        nn.conv2d(
            x[..., c : c + 1], w[:, :, c : c + 1, k : k + 1], stride, padding, dilations=dilation
        ).numpy()
        for c in range(channels)
        for k in range(multiplier)
    ]
    return np.concatenate(parts, axis=-1)


@pytest.mark.parametrize("padding", ["SAME", "VALID"])
@pytest.mark.parametrize("stride, dilation", [(1, 1), (2, 1), ([1, 2], 1), (1, 2)])
def test_depthwise_conv2d_is_a_conv2d_per_channel(padding, stride, dilation):
    x = RNG.normal(size=(2, 6, 7, 3))
    w = RNG.normal(size=(3, 2, 3, 2))
    np.testing.assert_allclose(
        nn.depthwise_conv2d(x, w, stride, padding, dilations=dilation).numpy(),
        direct_depthwise(x, w, stride, padding, dilation),
        rtol=1e-10,
        atol=1e-12,
    )


@pytest.mark.parametrize("padding", ["SAME", "VALID"])
@pytest.mark.parametrize("stride, dilation", [(1, 1), (2, 1), (1, 2)])
def test_depthwise_conv2d_gradients_to_second_order(padding, stride, dilation):
    x = RNG.normal(size=(2, 5, 6, 2))
    w = RNG.normal(size=(2, 3, 2, 3))
    tp.testing.check_gradients(
        lambda x, w: nn.depthwise_conv2d(x, w, stride, padding, dilations=dilation), x, w, order=2
    )


@pytest.mark.parametrize(
    "in_shape, out_shape, strides, padding, dilations",
    [
        ((2, 4, 3, 2), (2, 8, 6, 3), 2, "SAME", 1),
        ((2, 3, 3, 2), (2, 8, 7, 3), 2, "VALID", 1),  # a last row and column no window reaches
        ((1, 5, 4, 2), (1, 5, 4, 3), 1, "SAME", 2),
    ],
)
def test_conv2d_transpose_gradients_to_second_order(in_shape, out_shape, strides, padding, dilations):
    x = RNG.normal(size=in_shape)
    w = RNG.normal(size=(3, 2, out_shape[3], in_shape[3]))
    tp.testing.check_gradients(
        lambda x, w: nn.conv2d_transpose(x, w, out_shape, strides, padding, dilations=dilations),
        x,
        w,
        order=2,
    )


def test_ops_replay_under_tp_function():
    x = tp.constant(RNG.normal(size=(2, 4, 5, 3)).astype(np.float32))
    w_t = tp.Variable(RNG.normal(size=(3, 3, 2, 3)).astype(np.float32))
    w_d = tp.Variable(RNG.normal(size=(3, 3, 2, 2)).astype(np.float32))

    def step(x):
        with tp.GradientTape() as tape:
            up = nn.conv2d_transpose(x, w_t, (x.shape[0], 8, 10, 2), 2, "SAME")
            y = nn.depthwise_conv2d(up, w_d, 2, "SAME")
            loss = tp.reduce_sum(y * y)
        return (loss, *tape.gradient(loss, [w_t, w_d]))

    compiled = tp.function(step)
    for _ in range(2):  # the trace, then a replay
        for e, c in zip(step(x), compiled(x)):
            np.testing.assert_array_equal(c.numpy(), e.numpy())
    other = tp.constant(RNG.normal(size=(2, 4, 5, 3)).astype(np.float32))
    for e, c in zip(step(other), compiled(other)):  # the replay reads the new input
        np.testing.assert_array_equal(c.numpy(), e.numpy())


def test_errors_name_the_problem():
    x = np.zeros((1, 4, 4, 2), np.float32)
    with pytest.raises(ValueError, match=r"output_shape \[1, 4, 4, 3\] does not fit the input"):
        nn.conv2d_transpose(x, np.zeros((2, 2, 3, 2), np.float32), (1, 4, 4, 3), 2, "SAME")
    with pytest.raises(ValueError, match="output_shape must be"):
        nn.conv2d_transpose(x, np.zeros((2, 2, 3, 2), np.float32), (1, 8, 8, 5), 2, "SAME")
    with pytest.raises(ValueError, match="expect 3 input channels"):
        nn.conv2d_transpose(x, np.zeros((2, 2, 3, 3), np.float32), (1, 8, 8, 3), 2, "SAME")
    with pytest.raises(TypeError, match="must be a floating tensor"):
        nn.depthwise_conv2d(x.astype(np.int32), np.zeros((2, 2, 2, 1), np.float32), 1, "SAME")
    with pytest.raises(ValueError, match="expects 3 input channels"):
        nn.depthwise_conv2d(x, np.zeros((2, 2, 3, 1), np.float32), 1, "SAME")
    with pytest.raises(ValueError, match="only data_format='NHWC'"):
        nn.depthwise_conv2d(x, np.zeros((2, 2, 2, 1), np.float32), 1, "SAME", data_format="NCHW")
    with pytest.raises(TypeError, match="mix"):
        nn.depthwise_conv2d(x, np.zeros((2, 2, 2, 1), np.float64), 1, "SAME")
