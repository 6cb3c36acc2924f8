"""ONNX export of the transposed, depthwise and separable convolutions, the 1-D pools,
GroupNormalization and spatial dropout: onnxruntime's outputs equal tapefit's (atol and rtol
1e-5), the batch axis dynamic."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("onnx", reason="ONNX export needs the onnx package (pip install 'tapefit[onnx]')")
pytest.importorskip("onnxruntime", reason="the export tests run graphs with onnxruntime (tapefit[onnx])")

import tapefit as tp
from tapefit import layers as L
from tests.export.test_onnx import check, floats, functional, randomize

CASES: list[tuple[Any, tuple[int, ...]]] = [
    (lambda: L.Conv2DTranspose(3, 3, strides=2, padding="same"), (4, 5, 2)),
    (lambda: L.Conv2DTranspose(2, (3, 2), strides=2, activation="relu"), (3, 4, 3)),
    (lambda: L.Conv2DTranspose(2, 2, strides=3), (3, 3, 2)),  # rows and columns no window reaches
    (lambda: L.Conv2DTranspose(2, 3, strides=(2, 3), output_padding=(1, 2)), (3, 2, 2)),
    (lambda: L.Conv2DTranspose(2, 3, strides=2, padding="same", output_padding=1), (3, 3, 2)),
    (lambda: L.Conv2DTranspose(2, 3, dilation_rate=2, padding="same", use_bias=False), (5, 6, 2)),
    (lambda: L.Conv2DTranspose(4, 4, strides=2, padding="same"), (3, 3, 3)),
    (lambda: L.Conv1DTranspose(3, 3, strides=2, padding="same"), (5, 2)),
    (lambda: L.Conv1DTranspose(2, 4, strides=3, output_padding=2), (4, 3)),
    (lambda: L.MaxPooling1D(), (7, 3)),
    (lambda: L.MaxPooling1D(3, 2, "same"), (8, 3)),
    (lambda: L.AveragePooling1D(3, 2, "same"), (8, 3)),
    (lambda: L.DepthwiseConv2D(3), (5, 6, 3)),
    (lambda: L.DepthwiseConv2D((3, 2), strides=2, padding="same", depth_multiplier=2), (5, 6, 3)),
    (lambda: L.DepthwiseConv2D(2, dilation_rate=2, depth_multiplier=3), (6, 5, 2)),
    (lambda: L.SeparableConv2D(3, 3, strides=2, padding="same", depth_multiplier=2), (6, 5, 2)),
    (lambda: L.GroupNormalization(2), (3, 4, 6)),
    (lambda: L.GroupNormalization(-1, axis=1), (4, 5)),
    (lambda: L.SpatialDropout1D(0.5), (3, 6)),
    (lambda: L.SpatialDropout2D(0.5), (3, 4, 6)),
]


@pytest.mark.parametrize("make, shape", CASES)
def test_layer(make, shape, tmp_path):
    model = functional(make(), *shape)
    randomize(model)
    check(model, floats(*shape), tmp_path)


def test_a_dcgan_generator(tmp_path):
    latent = tp.Input((8,))
    x = L.Dense(4 * 4 * 8)(latent)
    x = L.Reshape((4, 4, 8))(x)
    x = L.Conv2DTranspose(8, 4, strides=2, padding="same")(x)
    x = L.LeakyReLU(0.2)(x)
    x = L.Conv2DTranspose(4, 4, strides=2, padding="same")(x)
    model = tp.Model(latent, L.Conv2D(1, 5, padding="same", activation="sigmoid")(x))
    randomize(model)
    check(model, floats(8), tmp_path)
