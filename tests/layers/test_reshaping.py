"""Reshape, Permute, RepeatVector, ZeroPadding1D/2D, Cropping1D/2D, UpSampling1D/2D: Keras 3's
numbers (saved by scripts/keras_reference_functional.py), gradients and errors."""

from __future__ import annotations

import numpy as np
import pytest

import tapefit as tp
from tapefit import layers as L

RESHAPING = {
    "Reshape",
    "Permute",
    "RepeatVector",
    "ZeroPadding1D",
    "ZeroPadding2D",
    "Cropping1D",
    "Cropping2D",
    "UpSampling1D",
    "UpSampling2D",
}


def _cases(keras_reference):
    return [c for c in keras_reference.LAYER_CASES if c[1] in RESHAPING]


def test_every_layer_matches_keras(keras_reference, keras_saved):
    cases = _cases(keras_reference)
    assert {c[1] for c in cases} == RESHAPING
    for case, cls, kwargs, _ in cases:
        x = keras_saved[f"layer/{case}/x0"]
        out = getattr(L, cls)(**kwargs)(x)
        np.testing.assert_allclose(out.numpy(), keras_saved[f"layer/{case}/out"], atol=1e-5, err_msg=case)


def test_every_layer_has_finite_difference_gradients(keras_reference, keras_saved):
    for case, cls, kwargs, _ in _cases(keras_reference):
        layer = getattr(L, cls)(**kwargs)
        tp.testing.check_gradients(layer, keras_saved[f"layer/{case}/x0"].astype(np.float64))


def test_functional_shapes_follow_the_layers():
    x = tp.Input((40,))
    h = L.Reshape((40, 1))(x)
    assert h.shape == (None, 40, 1)
    assert L.ZeroPadding1D(2)(h).shape == (None, 44, 1)
    assert L.Cropping1D((1, 3))(h).shape == (None, 36, 1)
    assert L.UpSampling1D(2)(h).shape == (None, 80, 1)
    assert L.Permute((2, 1))(h).shape == (None, 1, 40)
    assert L.RepeatVector(3)(x).shape == (None, 3, 40)
    image = tp.Input((5, 6, 2))
    assert L.ZeroPadding2D(((1, 0), (2, 1)))(image).shape == (None, 6, 9, 2)
    assert L.Cropping2D(1)(image).shape == (None, 3, 4, 2)
    assert L.UpSampling2D((2, 3), interpolation="bilinear")(image).shape == (None, 10, 18, 2)
    assert L.Reshape((-1, 4))(tp.Input((2, 6))).shape == (None, 3, 4)


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: L.Reshape((3, -1, -1)), "one -1"),
        (lambda: L.Reshape((0, 2)), "positive ints"),
        (lambda: L.Permute((0, 1)), "permutation of 1, ..., n"),
        (lambda: L.RepeatVector(0), "n must be a positive int"),
        (lambda: L.ZeroPadding1D(-1), "padding must be a non-negative int"),
        (lambda: L.ZeroPadding2D((1, 2, 3)), "padding must be an int, a pair"),
        (lambda: L.Cropping2D(((1, 2), (3,))), "cropping must be a non-negative int or a pair"),
        (lambda: L.UpSampling1D(1.5), "size must be a positive int"),
        (lambda: L.UpSampling2D((0, 2)), "size must be a positive int"),
        (lambda: L.UpSampling2D(interpolation="bicubic"), "interpolation must be 'nearest' or 'bilinear'"),
        (lambda: L.ZeroPadding2D(data_format="NHWC"), "data_format must be"),
    ],
)
def test_bad_arguments_are_named(make, message):
    with pytest.raises(ValueError, match=message):
        make()


def test_shape_errors_name_the_layer_and_the_shapes():
    with pytest.raises(
        ValueError, match=r"Reshape 'r' cannot be called on inputs of shape \(None, 40\).*\(30, 1\)"
    ):
        L.Reshape((30, 1), name="r")(tp.Input((40,)))
    with pytest.raises(ValueError, match=r"cropping \(3, 3\) leaves nothing of axis 1"):
        L.Cropping1D(3)(np.zeros((1, 6, 2), np.float32))
    with pytest.raises(ValueError, match=r"RepeatVector 'rv' needs inputs of rank 2, got shape \(1, 2, 3\)"):
        L.RepeatVector(2, name="rv")(np.zeros((1, 2, 3), np.float32))
