"""Initializers: Keras's formulas (checked by their statistics), seeding, names."""

import numpy as np
import pytest

import tapefit as tp
from tapefit import initializers


def _draw(name, shape, dtype=None):
    value = initializers.get(name)(shape, dtype=dtype)
    assert isinstance(value, tp.Tensor) and value.shape == shape
    return value.numpy()


def test_fans():
    assert initializers.compute_fans((3, 4)) == (3, 4)
    assert initializers.compute_fans((3, 3, 2, 8)) == (18, 72)
    assert initializers.compute_fans((5,)) == (5, 5)
    assert initializers.compute_fans(()) == (1, 1)


def test_glorot_and_he_statistics():
    tp.random.set_seed(0)
    fan_in, fan_out = 200, 300
    w = _draw("glorot_uniform", (fan_in, fan_out))
    limit = np.sqrt(6 / (fan_in + fan_out))
    assert np.abs(w).max() <= limit and np.abs(w).max() > 0.99 * limit
    assert w.std() == pytest.approx(np.sqrt(2 / (fan_in + fan_out)), rel=0.02)
    w = _draw("glorot_normal", (fan_in, fan_out))
    std = np.sqrt(2 / (fan_in + fan_out))
    assert w.std() == pytest.approx(std, rel=0.02)
    assert np.abs(w).max() <= 2 * std / 0.87962566103423978 + 1e-6  # truncated at two (pre-scaling) stddevs
    w = _draw("he_normal", (fan_in, fan_out))
    assert w.std() == pytest.approx(np.sqrt(2 / fan_in), rel=0.02)
    w = _draw("he_uniform", (fan_in, fan_out))
    assert np.abs(w).max() <= np.sqrt(6 / fan_in)
    assert w.std() == pytest.approx(np.sqrt(2 / fan_in), rel=0.02)
    w = _draw("he_normal", (3, 3, 16, 32))  # convolution kernel: fan_in = 3 * 3 * 16
    assert w.std() == pytest.approx(np.sqrt(2 / 144), rel=0.03)


def test_constant_and_normal_initializers():
    assert np.all(_draw("zeros", (2, 3)) == 0) and np.all(_draw("ones", (4,)) == 1)
    assert _draw("zeros", (2,)).dtype == np.float32
    assert _draw("ones", (2,), dtype="float64").dtype == np.float64
    tp.random.set_seed(1)
    w = _draw("random_normal", (100, 100))
    assert w.std() == pytest.approx(0.05, rel=0.03) and abs(w.mean()) < 0.002
    w = initializers.RandomNormal(mean=1.0, stddev=2.0)((50, 50)).numpy()
    assert w.mean() == pytest.approx(1.0, abs=0.1) and w.std() == pytest.approx(2.0, rel=0.05)
    np.testing.assert_array_equal(initializers.Constant(3.0)((2,)).numpy(), [3.0, 3.0])


def test_global_seed_repeats_and_initializer_seed_repeats_every_call():
    tp.random.set_seed(5)
    a = _draw("glorot_uniform", (4, 4))
    b = _draw("glorot_uniform", (4, 4))
    tp.random.set_seed(5)
    np.testing.assert_array_equal(_draw("glorot_uniform", (4, 4)), a)
    assert not np.array_equal(a, b)
    seeded = initializers.HeNormal(seed=3)
    np.testing.assert_array_equal(seeded((3, 3)).numpy(), seeded((3, 3)).numpy())


def test_initializer_seeds_follow_tp_random_rules():
    # Negative seeds work as in tp.random.set_seed (TensorFlow's int64 seeds); 1.5 is not truncated.
    negative = initializers.GlorotUniform(seed=-1)
    np.testing.assert_array_equal(negative((3, 3)).numpy(), negative((3, 3)).numpy())
    assert not np.array_equal(negative((3, 3)).numpy(), initializers.GlorotUniform(seed=1)((3, 3)).numpy())
    with pytest.raises(TypeError, match=r"seed must be an int, got 1\.5"):
        initializers.GlorotUniform(seed=1.5)((3, 3))


def test_get_names_callables_and_errors():
    assert isinstance(initializers.get("GlorotUniform"), initializers.GlorotUniform)
    assert isinstance(initializers.get("he_normal"), initializers.HeNormal)

    def mine(shape, dtype=None):
        return np.full(shape, 7.0)

    assert initializers.get(mine) is mine
    layer = tp.layers.Dense(2, kernel_initializer=mine)
    layer(tp.ones((1, 3)))
    assert np.all(layer.kernel.numpy() == 7.0) and layer.kernel.dtype == np.float32
    with pytest.raises(ValueError, match=r"unknown initializer 'glorot'; known: .*glorot_uniform"):
        initializers.get("glorot")
    with pytest.raises(TypeError, match="an initializer must be"):
        initializers.get(3)
    with pytest.raises(ValueError, match="mode must be one of"):
        initializers.VarianceScaling(mode="fan_max")
    assert tp.initializers is initializers
