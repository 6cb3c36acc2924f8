"""ReLU, LeakyReLU, PReLU, ELU and Softmax as layers: Keras's formulas and defaults, gradients
against finite differences, get_config round trips, masks, ONNX export, and argument errors."""

from __future__ import annotations

import numpy as np
import pytest
from tapefit.testing import check_gradients

import tapefit as tp

X = np.array([[-2.0, -0.5, 0.0, 0.7, 3.0, 8.0]], np.float32)


@pytest.mark.parametrize(
    "layer, expected",
    [
        (tp.layers.ReLU(), np.maximum(X, 0)),
        (tp.layers.ReLU(max_value=6.0), np.clip(X, 0, 6)),
        (tp.layers.ReLU(negative_slope=0.1, threshold=0.5), np.where(X >= 0.5, X, 0.1 * (X - 0.5))),
        (tp.layers.LeakyReLU(), np.where(X > 0, X, 0.3 * X)),  # Keras 3's default slope
        (tp.layers.LeakyReLU(negative_slope=0.2), np.where(X > 0, X, 0.2 * X)),
        (tp.layers.ELU(), np.where(X > 0, X, np.expm1(X))),
        (tp.layers.ELU(alpha=0.5), np.where(X > 0, X, 0.5 * np.expm1(X))),
        (tp.layers.Softmax(), np.exp(X) / np.exp(X).sum(-1, keepdims=True)),
    ],
)
def test_values_follow_keras_formulas(layer, expected):
    np.testing.assert_allclose(layer(X).numpy(), expected, rtol=1e-6, atol=1e-7)
    assert layer.compute_output_shape((None, 6)) == (None, 6)


def test_prelu_learns_one_alpha_per_value_or_shared_axes():
    layer = tp.layers.PReLU()
    x = np.random.default_rng(0).normal(size=(2, 4, 4, 3)).astype(np.float32)
    np.testing.assert_array_equal(layer(x).numpy(), np.maximum(x, 0))  # alpha starts at zero
    assert tuple(layer.alpha.shape) == (4, 4, 3)
    shared = tp.layers.PReLU(alpha_initializer=tp.initializers.Constant(0.25), shared_axes=[1, 2])
    np.testing.assert_allclose(shared(x).numpy(), np.where(x > 0, x, 0.25 * x), rtol=1e-6)
    assert tuple(shared.alpha.shape) == (1, 1, 3)
    with pytest.raises(ValueError, match=r"PReLU: shared_axes must be axes >= 1 of a sample, got \[0\]"):
        tp.layers.PReLU(shared_axes=[0])


@pytest.mark.parametrize(
    "make",
    [
        lambda: tp.layers.ReLU(max_value=1.5, negative_slope=0.1, threshold=-0.2),
        lambda: tp.layers.LeakyReLU(0.2),
        lambda: tp.layers.ELU(alpha=0.7),
        lambda: tp.layers.Softmax(),
        lambda: tp.layers.PReLU(alpha_initializer=tp.initializers.Constant(0.1)),
    ],
)
def test_gradients_configs_and_export(make, tmp_path):
    layer = make()
    x = np.array([[-1.3, -0.4, 0.3, 1.1], [0.6, -2.2, 1.7, -0.05]])
    layer(x.astype(np.float32))
    check_gradients(
        lambda v: tp.reduce_sum(layer(tp.cast(v, tp.float32)) * np.arange(1.0, 5.0, dtype=np.float32)),
        x,
        atol=2e-3,
        rtol=2e-3,
        eps=1e-3,
    )
    clone = type(layer).from_config(layer.get_config())
    assert clone.get_config() == layer.get_config()
    model = tp.layers.Sequential([tp.Input((4,)), make()])
    model.export(tmp_path / "m.onnx")
    import onnxruntime as ort

    session = ort.InferenceSession(str(tmp_path / "m.onnx"))
    (out,) = session.run(None, {session.get_inputs()[0].name: x.astype(np.float32)})
    np.testing.assert_allclose(out, model(x.astype(np.float32)).numpy(), rtol=1e-5, atol=1e-6)


def test_softmax_gives_masked_values_no_probability():
    scores = np.array([[1.0, 2.0, 3.0]], np.float32)
    out = tp.layers.Softmax()(scores, mask=np.array([[True, True, False]])).numpy()
    np.testing.assert_allclose(
        out, [[np.exp(1) / (np.exp(1) + np.exp(2)), np.exp(2) / (np.exp(1) + np.exp(2)), 0.0]], rtol=1e-6
    )


def test_arguments_that_are_not_numbers_are_named():
    with pytest.raises(ValueError, match=r"LeakyReLU: negative_slope must be a finite number >= 0, got -1.0"):
        tp.layers.LeakyReLU(-1.0)
    with pytest.raises(TypeError, match=r"ReLU: max_value must be a number, got 'six'"):
        tp.layers.ReLU(max_value="six")


def test_rescaling_and_gaussian_noise():
    images = np.array([[0.0, 127.5, 255.0]], np.float32)
    np.testing.assert_allclose(
        tp.layers.Rescaling(1 / 127.5, offset=-1)(images).numpy(), [[-1.0, 0.0, 1.0]], atol=1e-6
    )
    noise = tp.layers.GaussianNoise(0.5)
    x = np.zeros((2000, 3), np.float32)
    np.testing.assert_array_equal(noise(x).numpy(), x)  # inference: the identity
    tp.random.set_seed(3)
    noisy = noise(x, training=True).numpy()
    assert abs(noisy.std() - 0.5) < 0.03 and abs(noisy.mean()) < 0.03
    tp.random.set_seed(3)
    np.testing.assert_array_equal(noise(x, training=True).numpy(), noisy)  # tp.random's draws
    for layer in (tp.layers.Rescaling(2.0, offset=1.0), tp.layers.GaussianNoise(0.1, seed=4)):
        assert type(layer).from_config(layer.get_config()).get_config() == layer.get_config()
        assert layer.compute_output_shape((None, 5)) == (None, 5)


def test_leaky_relu_takes_keras_2s_alpha_with_a_warning():
    with pytest.warns(DeprecationWarning, match="use negative_slope"):
        layer = tp.layers.LeakyReLU(alpha=0.2)
    assert layer.negative_slope == 0.2
    np.testing.assert_allclose(layer(tp.constant([-1.0, 2.0])).numpy(), [-0.2, 2.0])
    assert layer.get_config()["negative_slope"] == 0.2 and "alpha" not in layer.get_config()
