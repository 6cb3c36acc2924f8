"""Keras 3's numbers for the transposed, depthwise and separable convolutions, the 1-D pooling
layers and GroupNormalization, saved for CI.

CI has no Keras, so tapefit is compared there with the numbers this script computed once with
Keras 3 (TensorFlow backend) and saved in ``tests/layers/data/keras_conv.npz``. Only NumPy,
TensorFlow and Keras are used, not tapefit.

For each case of ``CASES`` (a layer class, its arguments and an input shape):

- ``<case>/config``: the layer's class name and arguments, as JSON;
- ``<case>/x``: the input; ``<case>/w/<i>``: the weights, in ``layer.weights`` order (random,
  so that a bias or a beta counts);
- ``<case>/r``: fixed weights for the loss ``sum(r * layer(x))``;
- ``<case>/out``: the output; ``<case>/grad/x`` and ``<case>/grad/<i>``: the loss's gradients
  for the input and for each weight.

And ``dcgan/<model>/params`` and ``dcgan/<model>/shape``: the parameter count and output shape
of the discriminator and the generator of the keras.io example "DCGAN to generate face images".

    KERAS_BACKEND=tensorflow python scripts/keras_reference_conv.py          # writes the file
    KERAS_BACKEND=tensorflow python scripts/keras_reference_conv.py --check  # compares, exit 1 if not equal
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

import numpy as np

PATH = Path(__file__).resolve().parents[1] / "tests" / "layers" / "data" / "keras_conv.npz"

# case: (Keras class, its arguments, the input's shape)
CASES: dict[str, tuple[str, dict[str, Any], tuple[int, ...]]] = {
    "conv2dt_same_s2": ("Conv2DTranspose", {"filters": 3, "kernel_size": 3, "strides": 2, "padding": "same"}, (2, 4, 5, 2)),
    "conv2dt_valid_s2": ("Conv2DTranspose", {"filters": 2, "kernel_size": (3, 2), "strides": 2, "activation": "tanh"}, (2, 3, 4, 3)),
    "conv2dt_valid_k2s3": ("Conv2DTranspose", {"filters": 2, "kernel_size": 2, "strides": 3}, (1, 3, 3, 2)),
    "conv2dt_same_outpad": ("Conv2DTranspose", {"filters": 2, "kernel_size": 3, "strides": 2, "padding": "same", "output_padding": 1}, (2, 3, 3, 2)),
    "conv2dt_valid_outpad": ("Conv2DTranspose", {"filters": 2, "kernel_size": 3, "strides": (2, 3), "output_padding": (1, 2)}, (1, 3, 2, 2)),
    "conv2dt_dilated": ("Conv2DTranspose", {"filters": 2, "kernel_size": 3, "dilation_rate": 2, "padding": "same"}, (2, 5, 6, 2)),
    "conv2dt_nobias": ("Conv2DTranspose", {"filters": 4, "kernel_size": 4, "strides": 2, "padding": "same", "use_bias": False}, (2, 3, 3, 3)),
    "conv1dt_same_s2": ("Conv1DTranspose", {"filters": 3, "kernel_size": 3, "strides": 2, "padding": "same"}, (2, 5, 2)),
    "conv1dt_valid_outpad": ("Conv1DTranspose", {"filters": 2, "kernel_size": 4, "strides": 3, "output_padding": 2}, (2, 4, 3)),
    "conv1dt_dilated": ("Conv1DTranspose", {"filters": 2, "kernel_size": 2, "dilation_rate": 3}, (1, 6, 2)),
    "maxpool1d": ("MaxPooling1D", {}, (2, 7, 3)),
    "maxpool1d_same_s2": ("MaxPooling1D", {"pool_size": 3, "strides": 2, "padding": "same"}, (2, 8, 3)),
    "avgpool1d": ("AveragePooling1D", {"pool_size": 2}, (2, 7, 3)),
    "avgpool1d_same": ("AveragePooling1D", {"pool_size": 3, "strides": 2, "padding": "same"}, (2, 8, 3)),
    "depthwise": ("DepthwiseConv2D", {"kernel_size": 3}, (2, 5, 6, 3)),
    "depthwise_m2_same_s2": ("DepthwiseConv2D", {"kernel_size": (3, 2), "strides": 2, "padding": "same", "depth_multiplier": 2}, (2, 5, 6, 3)),
    "depthwise_dilated": ("DepthwiseConv2D", {"kernel_size": 2, "dilation_rate": 2, "depth_multiplier": 3, "activation": "relu"}, (1, 6, 5, 2)),
    "separable": ("SeparableConv2D", {"filters": 4, "kernel_size": 3}, (2, 5, 6, 3)),
    "separable_m2_same_s2": ("SeparableConv2D", {"filters": 3, "kernel_size": 3, "strides": 2, "padding": "same", "depth_multiplier": 2}, (2, 6, 5, 2)),
    "groupnorm_images": ("GroupNormalization", {"groups": 2}, (2, 3, 4, 6)),
    "groupnorm_sequences": ("GroupNormalization", {"groups": 3, "epsilon": 0.1}, (3, 5, 6)),
    "groupnorm_instance": ("GroupNormalization", {"groups": -1}, (2, 4, 3)),
    "groupnorm_axis1": ("GroupNormalization", {"groups": 2, "axis": 1}, (2, 4, 5)),
    "groupnorm_one_group": ("GroupNormalization", {"groups": 1, "center": False}, (2, 3, 4)),
}  # fmt: skip


def compute() -> dict[str, np.ndarray]:
    import keras
    import tensorflow as tf

    rng = np.random.default_rng(2026)
    out: dict[str, np.ndarray] = {}
    for case, (cls, kwargs, shape) in CASES.items():
        layer = getattr(keras.layers, cls)(**kwargs)
        x = rng.normal(size=shape).astype(np.float32)
        layer.build(shape)
        weights = [rng.normal(scale=0.5, size=tuple(w.shape)).astype(np.float32) for w in layer.weights]
        layer.set_weights(weights)
        y0 = layer(x)
        r = rng.normal(size=tuple(y0.shape)).astype(np.float32)
        xt = tf.constant(x)
        with tf.GradientTape() as tape:
            tape.watch(xt)
            y = layer(xt)
            loss = tf.reduce_sum(y * r)
        grads = tape.gradient(loss, [xt, *layer.trainable_weights])
        out[f"{case}/config"] = np.array(json.dumps({"class_name": cls, "config": kwargs}))
        out[f"{case}/x"] = x
        out[f"{case}/r"] = r
        out[f"{case}/out"] = np.asarray(y)
        out[f"{case}/grad/x"] = np.asarray(grads[0])
        for i, (w, g) in enumerate(zip(weights, grads[1:])):
            out[f"{case}/w/{i}"] = w
            out[f"{case}/grad/{i}"] = np.asarray(g)
    out.update(dcgan())
    out["keras_version"] = np.array(keras.__version__)
    return out


def dcgan() -> dict[str, np.ndarray]:
    """The keras.io example "DCGAN to generate face images": its discriminator's and generator's
    parameter counts and output shapes (``dcgan/<model>/params``, ``dcgan/<model>/shape``)."""
    import keras
    from keras import layers

    discriminator = keras.Sequential(
        [
            keras.Input(shape=(64, 64, 3)),
            layers.Conv2D(64, kernel_size=4, strides=2, padding="same"),
            layers.LeakyReLU(negative_slope=0.2),
            layers.Conv2D(128, kernel_size=4, strides=2, padding="same"),
            layers.LeakyReLU(negative_slope=0.2),
            layers.Conv2D(128, kernel_size=4, strides=2, padding="same"),
            layers.LeakyReLU(negative_slope=0.2),
            layers.Flatten(),
            layers.Dropout(0.2),
            layers.Dense(1, activation="sigmoid"),
        ]
    )
    generator = keras.Sequential(
        [
            keras.Input(shape=(128,)),
            layers.Dense(8 * 8 * 128),
            layers.Reshape((8, 8, 128)),
            layers.Conv2DTranspose(128, kernel_size=4, strides=2, padding="same"),
            layers.LeakyReLU(negative_slope=0.2),
            layers.Conv2DTranspose(256, kernel_size=4, strides=2, padding="same"),
            layers.LeakyReLU(negative_slope=0.2),
            layers.Conv2DTranspose(512, kernel_size=4, strides=2, padding="same"),
            layers.LeakyReLU(negative_slope=0.2),
            layers.Conv2D(3, kernel_size=5, padding="same", activation="sigmoid"),
        ]
    )
    return {
        f"dcgan/{name}/{what}": np.array(value)
        for name, model in (("discriminator", discriminator), ("generator", generator))
        for what, value in (("params", model.count_params()), ("shape", model.output_shape[1:]))
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--check", action="store_true", help="compare with the saved file instead of writing it"
    )
    args = parser.parse_args(argv)
    os.environ.setdefault("KERAS_BACKEND", "tensorflow")
    out = compute()
    if args.check:
        saved = dict(np.load(PATH))
        same = sorted(saved) == sorted(out) and all(
            np.array_equal(saved[k], out[k])
            if out[k].dtype.kind == "U"
            else np.allclose(saved[k], out[k], atol=1e-6)
            for k in out
        )
        print("same" if same else "differs")
        return 0 if same else 1
    PATH.parent.mkdir(parents=True, exist_ok=True)
    np.savez(PATH, **out)
    print(f"wrote {PATH} ({PATH.stat().st_size} bytes, {len(out)} arrays)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
