"""LayerNormalization and BatchNormalization."""

import numpy as np
import pytest

import tapefit as tp
from tapefit.layers import BatchNormalization, LayerNormalization, Sequential


def test_layer_normalization_values_and_weights():
    x = np.random.default_rng(0).normal(3.0, 2.0, size=(4, 6)).astype(np.float32)
    layer = LayerNormalization()
    y = layer(x).numpy()
    expected = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-3)
    np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-5)
    assert [(v.name, v.shape) for v in layer.trainable_variables] == [("gamma", (6,)), ("beta", (6,))]


def test_layer_normalization_over_several_axes():
    x = np.random.default_rng(1).normal(size=(2, 3, 4))
    layer = LayerNormalization(axis=[1, 2], epsilon=0.0, dtype="float64")
    y = layer(x).numpy()
    flat = x.reshape(2, -1)
    expected = ((flat - flat.mean(1, keepdims=True)) / flat.std(1, keepdims=True)).reshape(x.shape)
    np.testing.assert_allclose(y, expected, rtol=1e-10)
    assert layer.gamma.shape == (3, 4)


def test_layer_normalization_gradients(check_layer):
    x = np.random.default_rng(2).normal(size=(3, 5))
    tp.random.set_seed(0)
    layer = LayerNormalization(
        dtype="float64", gamma_initializer="random_normal", beta_initializer="random_normal"
    )
    assert check_layer(layer, x, order=2) == ["gamma", "beta"]
    check_layer(LayerNormalization(axis=1, dtype="float64"), np.random.default_rng(3).normal(size=(2, 3, 2)))


def test_layer_normalization_shape_error():
    layer = LayerNormalization()
    layer(tp.ones((2, 3)))
    with pytest.raises(ValueError, match=r"built for inputs of shape \(2, 3\).*got shape \(2, 4\)"):
        layer(tp.ones((2, 4)))
    with pytest.raises(ValueError, match="out of range"):
        LayerNormalization(axis=3)(tp.ones((2, 3)))


def test_batch_normalization_training_uses_batch_statistics_and_updates_moving_ones():
    rng = np.random.default_rng(4)
    x = rng.normal(5.0, 3.0, size=(16, 3)).astype(np.float32)
    layer = BatchNormalization()
    y = layer(x, training=True).numpy()
    mean, var = x.mean(0), x.var(0)
    np.testing.assert_allclose(y, (x - mean) / np.sqrt(var + 1e-3), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(layer.moving_mean.numpy(), 0.99 * 0 + 0.01 * mean, rtol=1e-5)
    np.testing.assert_allclose(layer.moving_variance.numpy(), 0.99 * 1 + 0.01 * var, rtol=1e-5)
    assert [v.name for v in layer.trainable_variables] == ["gamma", "beta"]
    assert [v.name for v in layer.non_trainable_variables] == ["moving_mean", "moving_variance"]
    # a second step compounds: moving = moving * momentum + batch * (1 - momentum)
    x2 = rng.normal(-1.0, 0.5, size=(16, 3)).astype(np.float32)
    expected_mean = layer.moving_mean.numpy() * 0.99 + x2.mean(0) * 0.01
    layer(x2, training=True)
    np.testing.assert_allclose(layer.moving_mean.numpy(), expected_mean, rtol=1e-5)


def test_batch_normalization_inference_uses_moving_statistics():
    layer = BatchNormalization(momentum=0.5, epsilon=0.0)
    x = np.array([[1.0, 10.0], [3.0, 30.0]], np.float32)
    layer(x, training=True)
    mean = 0.5 * np.array([2.0, 20.0])
    var = 0.5 * 1 + 0.5 * np.array([1.0, 100.0])
    np.testing.assert_allclose(layer.moving_mean.numpy(), mean)
    np.testing.assert_allclose(layer.moving_variance.numpy(), var)
    before = layer.moving_mean.numpy()
    for training in (False, None):
        y = layer(x, training=training).numpy()
        np.testing.assert_allclose(y, (x - mean) / np.sqrt(var), rtol=1e-6)
    np.testing.assert_array_equal(layer.moving_mean.numpy(), before)


def test_batch_normalization_follows_the_model_training_flag_and_freezing():
    layer = BatchNormalization()
    model = Sequential([layer])
    x = np.random.default_rng(5).normal(2.0, 1.0, size=(8, 2)).astype(np.float32)
    model(x)
    np.testing.assert_array_equal(layer.moving_mean.numpy(), [0.0, 0.0])
    model(x, training=True)
    moved = layer.moving_mean.numpy()
    assert np.all(moved != 0)
    layer.trainable = False  # frozen: inference mode even in training, as Keras 3
    y = model(x, training=True).numpy()
    np.testing.assert_array_equal(layer.moving_mean.numpy(), moved)
    np.testing.assert_allclose(y, (x - moved) / np.sqrt(layer.moving_variance.numpy() + 1e-3), rtol=1e-5)


def test_batch_normalization_on_images_normalizes_per_channel():
    x = np.random.default_rng(6).normal(size=(4, 3, 3, 2)) * [1.0, 10.0] + [0.0, 5.0]
    layer = BatchNormalization(dtype="float64")
    y = layer(x, training=True).numpy()
    np.testing.assert_allclose(y.mean(axis=(0, 1, 2)), [0.0, 0.0], atol=1e-10)
    np.testing.assert_allclose(y.var(axis=(0, 1, 2)), x.var(axis=(0, 1, 2)) / (x.var(axis=(0, 1, 2)) + 1e-3))
    assert layer.gamma.shape == (2,)


def test_batch_normalization_gradients(check_layer):
    x = np.random.default_rng(7).normal(size=(5, 3))
    tp.random.set_seed(1)
    layer = BatchNormalization(dtype="float64", gamma_initializer="random_normal")
    assert check_layer(layer, x, training=True, order=2) == ["gamma", "beta"]
    assert check_layer(BatchNormalization(dtype="float64"), x, training=False) == ["gamma", "beta"]


def test_batch_normalization_errors():
    layer = BatchNormalization()
    layer(tp.ones((2, 3)))
    with pytest.raises(ValueError, match=r"3 features on axis 1, got shape \(2, 4\)"):
        layer(tp.ones((2, 4)))
    with pytest.raises(ValueError, match="momentum"):
        BatchNormalization(momentum=1.5)


@pytest.mark.parametrize(
    "make",
    [
        lambda: tp.layers.LayerNormalization(gamma_initializer="onez"),
        lambda: tp.layers.BatchNormalization(moving_variance_initializer="onez"),
    ],
)
def test_normalizations_reject_an_unknown_initializer_when_constructed(make):
    with pytest.raises(ValueError, match="unknown initializer 'onez'"):
        make()


def test_batch_normalization_training_on_an_empty_batch_leaves_the_moving_statistics():
    bn = BatchNormalization(momentum=0.5)
    bn(np.array([[1.0, 2.0], [3.0, 6.0]], np.float32), training=True)
    mean, variance = bn.moving_mean.numpy(), bn.moving_variance.numpy()
    # The moments of no samples are NaN; folded in, they would poison every later inference.
    out = bn(np.zeros((0, 2), np.float32), training=True)
    assert out.shape == (0, 2)
    np.testing.assert_array_equal(bn.moving_mean.numpy(), mean)
    np.testing.assert_array_equal(bn.moving_variance.numpy(), variance)
