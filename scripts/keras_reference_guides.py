"""Keras 3's numbers for the guides "The Sequential model" and "Making new layers and models
via subclassing" (its blocks that build weights), saved for CI.

CI has no Keras, so ``tests/layers/test_keras_guide_sequential.py`` and
``tests/layers/test_keras_guide_subclassing.py`` compare tapefit's translation of the guides'
blocks with what this script computed once with Keras 3 and saved in
``tests/layers/data/keras_guides.npz``: for each block, the weights in Keras's ``get_weights``
order, the input and Keras's output (the guide's shapes shrunk where they are large), and the
layer and weight counts the guide prints. Only NumPy and Keras are used, not tapefit.

    KERAS_BACKEND=tensorflow python scripts/keras_reference_guides.py          # writes
    KERAS_BACKEND=tensorflow python scripts/keras_reference_guides.py --check  # compares
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

PATH = Path(__file__).resolve().parents[1] / "tests" / "layers" / "data" / "keras_guides.npz"


def _record(out: dict[str, np.ndarray], case: str, model: object, x: np.ndarray) -> None:
    y = model(x)  # type: ignore[operator]  # (builds a model given no input shape)
    for i, w in enumerate(model.get_weights()):  # type: ignore[attr-defined]
        out[f"{case}/w/{i}"] = np.asarray(w, np.float32)
    out[f"{case}/x"] = x
    if isinstance(y, (list, tuple)):
        for i, v in enumerate(y):
            out[f"{case}/y/{i}"] = np.asarray(v, np.float32)
    else:
        out[f"{case}/y"] = np.asarray(y, np.float32)


def compute() -> dict[str, np.ndarray]:
    import keras
    from keras import layers

    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    out: dict[str, np.ndarray] = {}

    # "When to use": three Dense layers called on ones((3, 3)).
    model = keras.Sequential(
        [
            layers.Dense(2, activation="relu", name="layer1"),
            layers.Dense(3, activation="relu", name="layer2"),
            layers.Dense(4, name="layer3"),
        ]
    )
    _record(out, "three_dense", model, rng.normal(size=(3, 3)).astype(np.float32))

    # add() and pop(): the layer count after a pop.
    model = keras.Sequential()
    model.add(layers.Dense(2, activation="relu"))
    model.add(layers.Dense(3, activation="relu"))
    model.add(layers.Dense(4))
    model.pop()
    out["pop/len"] = np.array(len(model.layers))

    # "Specifying the input shape in advance": weights after the first call; an Input first.
    layer = layers.Dense(3)
    out["lazy_layer/weights_before"] = np.array(len(layer.weights))
    layer(np.ones((1, 4), np.float32))
    out["lazy_layer/weights_after"] = np.array(len(layer.weights))
    model = keras.Sequential([keras.Input(shape=(4,)), layers.Dense(2, activation="relu")])
    out["input_first/len"] = np.array(len(model.layers))
    out["input_first/weights"] = np.array(len(model.weights))
    model = keras.Sequential([layers.Dense(2, activation="relu", input_shape=(4,))])
    out["input_shape_arg/weights"] = np.array(len(model.weights))

    # "A common debugging workflow": conv stack on a 250x250 input, shrunk to 40x40.
    model = keras.Sequential(
        [
            keras.Input(shape=(40, 40, 3)),
            layers.Conv2D(8, 5, strides=2, activation="relu"),
            layers.Conv2D(8, 3, activation="relu"),
            layers.MaxPooling2D(3),
            layers.Conv2D(8, 3, activation="relu"),
            layers.GlobalMaxPooling2D(),
            layers.Dense(10),
        ]
    )
    out["debugging/output_shapes"] = np.array(
        [list(layer.output.shape[1:]) + [0] * (3 - len(layer.output.shape[1:])) for layer in model.layers]
    )
    _record(out, "debugging", model, rng.normal(size=(2, 40, 40, 3)).astype(np.float32))

    # "Feature extraction with a Sequential model": every layer's output.
    initial = keras.Sequential(
        [
            keras.Input(shape=(20, 20, 3)),
            layers.Conv2D(4, 5, strides=2, activation="relu"),
            layers.Conv2D(4, 3, activation="relu"),
            layers.Conv2D(4, 3, activation="relu"),
        ]
    )
    extractor = keras.Model(inputs=initial.inputs, outputs=[layer.output for layer in initial.layers])
    _record(out, "features", extractor, rng.normal(size=(1, 20, 20, 3)).astype(np.float32))

    # "Making new layers and models via subclassing": weights made lazily in build.
    class Linear(keras.layers.Layer):
        def __init__(self, units=32):
            super().__init__()
            self.units = units

        def build(self, input_shape):
            self.w = self.add_weight(
                shape=(input_shape[-1], self.units), initializer="random_normal", trainable=True
            )
            self.b = self.add_weight(shape=(self.units,), initializer="random_normal", trainable=True)

        def call(self, inputs):
            return keras.ops.matmul(inputs, self.w) + self.b

    linear = Linear(4)
    out["linear/weights_before"] = np.array(len(linear.weights))
    _record(out, "linear", linear, rng.normal(size=(2, 3)).astype(np.float32))

    class MLPBlock(keras.layers.Layer):
        def __init__(self):
            super().__init__()
            self.linear_1 = Linear(8)
            self.linear_2 = Linear(8)
            self.linear_3 = Linear(1)

        def call(self, inputs):
            x = keras.activations.relu(self.linear_1(inputs))
            x = keras.activations.relu(self.linear_2(x))
            return self.linear_3(x)

    mlp = MLPBlock()
    _record(out, "mlp", mlp, rng.normal(size=(3, 64)).astype(np.float32))
    out["mlp/weights"] = np.array(len(mlp.weights))
    out["mlp/trainable_weights"] = np.array(len(mlp.trainable_weights))

    class ComputeSum(keras.layers.Layer):
        def __init__(self, input_dim):
            super().__init__()
            self.total = self.add_weight(initializer="zeros", shape=(input_dim,), trainable=False)

        def call(self, inputs):
            self.total.assign_add(keras.ops.sum(inputs, axis=0))
            return self.total

    summer = ComputeSum(2)
    x = np.ones((2, 2), np.float32)
    summer(x)
    out["compute_sum/after_two"] = np.asarray(summer(x))
    out["compute_sum/weights"] = np.array(
        [len(summer.weights), len(summer.non_trainable_weights), len(summer.trainable_weights)]
    )
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--check", action="store_true", help="compare with the saved file instead of writing it"
    )
    args = parser.parse_args(argv)
    computed = compute()
    if args.check:
        saved = dict(np.load(PATH))
        bad = [
            k
            for k in computed
            if k not in saved or not np.allclose(saved[k], computed[k], rtol=1e-5, atol=1e-6)
        ]
        print("reproduced" if not bad and set(saved) == set(computed) else f"differs: {bad[:5]}")
        return 1 if bad else 0
    PATH.parent.mkdir(parents=True, exist_ok=True)
    np.savez(PATH, **computed)
    print(f"wrote {len(computed)} arrays to {PATH}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
