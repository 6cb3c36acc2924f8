"""Keras 3's numbers for the models of its functional-API and saving guides, saved for CI.

CI has no Keras, so ``tests/layers/test_keras_guides_functional.py`` compares tapefit's
translations of these guide blocks with the numbers this script computed once with Keras 3
(TensorFlow backend) and saved in ``tests/layers/data/keras_saving.npz``. Only NumPy and Keras
are used, not tapefit. The models are the guides' own, shrunk (fewer units, words, filters):

- ``ticket``: the multi-input, multi-output model (title, body and tags in; priority and
  department out), embeddings and LSTMs joined by ``concatenate``;
- ``resnet``: the toy ResNet, three blocks joined by ``add``;
- ``shared``: one ``Embedding`` called on two inputs;
- ``autoencoder``: the encoder and the decoder as models, nested in an autoencoder (the
  decoder upsamples with ``UpSampling2D`` and ``Conv2D``: tapefit has no ``Conv2DTranspose``);
- ``ensemble``: three models of one ``get_model`` averaged by ``average``;
- ``custom``: the saving guide's ``CustomLayer(factor)`` (registered in a package, its config
  its own arguments only) and a registered ``custom_fn`` activation, saved and loaded back;
- ``custom_units``: the guide's ``CustomLayer(units)`` whose ``get_config`` updates the base
  config, rebuilt from its config with ``custom_objects``.

For each model: ``<model>/names`` (``model.layers``' names, Keras's order), ``<model>/w/<i>``
(``get_weights()``), ``<model>/x/<i>`` (inputs) and ``<model>/y/<i>`` (outputs,
``training=False``); ``custom`` and ``custom_units`` also ``<model>/loaded/<i>``, the outputs of
the model loaded back.

    /tmp/kerasvenv/bin/python scripts/keras_reference_saving.py          # writes the file
    /tmp/kerasvenv/bin/python scripts/keras_reference_saving.py --check  # compares, exit 1 if not equal
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

PATH = Path(__file__).resolve().parents[1] / "tests" / "layers" / "data" / "keras_saving.npz"


def ticket(keras: Any) -> Any:
    layers = keras.layers
    num_tags, num_words, num_departments = 5, 30, 4
    title_input = keras.Input(shape=(None,), name="title")
    body_input = keras.Input(shape=(None,), name="body")
    tags_input = keras.Input(shape=(num_tags,), name="tags")
    title_features = layers.Embedding(num_words, 8)(title_input)
    body_features = layers.Embedding(num_words, 8)(body_input)
    title_features = layers.LSTM(6)(title_features)
    body_features = layers.LSTM(4)(body_features)
    x = layers.concatenate([title_features, body_features, tags_input])
    priority_pred = layers.Dense(1, name="priority")(x)
    department_pred = layers.Dense(num_departments, name="department")(x)
    return keras.Model(
        inputs=[title_input, body_input, tags_input],
        outputs={"priority": priority_pred, "department": department_pred},
    )


def resnet(keras: Any) -> Any:
    layers = keras.layers
    inputs = keras.Input(shape=(16, 16, 3), name="img")
    x = layers.Conv2D(4, 3, activation="relu")(inputs)
    x = layers.Conv2D(8, 3, activation="relu")(x)
    block_1_output = layers.MaxPooling2D(3)(x)
    x = layers.Conv2D(8, 3, activation="relu", padding="same")(block_1_output)
    x = layers.Conv2D(8, 3, activation="relu", padding="same")(x)
    block_2_output = layers.add([x, block_1_output])
    x = layers.Conv2D(8, 3, activation="relu", padding="same")(block_2_output)
    x = layers.Conv2D(8, 3, activation="relu", padding="same")(x)
    block_3_output = layers.add([x, block_2_output])
    x = layers.Conv2D(8, 3, activation="relu")(block_3_output)
    x = layers.GlobalAveragePooling2D()(x)
    x = layers.Dense(16, activation="relu")(x)
    x = layers.Dropout(0.5)(x)
    outputs = layers.Dense(10)(x)
    return keras.Model(inputs, outputs, name="toy_resnet")


def shared(keras: Any) -> Any:
    layers = keras.layers
    shared_embedding = layers.Embedding(50, 8)
    text_input_a = keras.Input(shape=(None,), dtype="int32")
    text_input_b = keras.Input(shape=(None,), dtype="int32")
    encoded_input_a = shared_embedding(text_input_a)
    encoded_input_b = shared_embedding(text_input_b)
    return keras.Model([text_input_a, text_input_b], [encoded_input_a, encoded_input_b])


def autoencoder(keras: Any) -> Any:
    layers = keras.layers
    encoder_input = keras.Input(shape=(28, 28, 1), name="original_img")
    x = layers.Conv2D(4, 3, activation="relu")(encoder_input)
    x = layers.Conv2D(8, 3, activation="relu")(x)
    x = layers.MaxPooling2D(3)(x)
    x = layers.Conv2D(8, 3, activation="relu")(x)
    x = layers.Conv2D(4, 3, activation="relu")(x)
    encoder_output = layers.GlobalMaxPooling2D()(x)
    encoder = keras.Model(encoder_input, encoder_output, name="encoder")

    decoder_input = keras.Input(shape=(4,), name="encoded_img")
    x = layers.Reshape((2, 2, 1))(decoder_input)
    x = layers.Conv2D(4, 3, activation="relu", padding="same")(x)
    x = layers.UpSampling2D(3)(x)
    decoder_output = layers.Conv2D(1, 3, activation="relu", padding="same")(x)
    decoder = keras.Model(decoder_input, decoder_output, name="decoder")

    autoencoder_input = keras.Input(shape=(28, 28, 1), name="img")
    encoded_img = encoder(autoencoder_input)
    decoded_img = decoder(encoded_img)
    return keras.Model(autoencoder_input, decoded_img, name="autoencoder")


def ensemble(keras: Any) -> Any:
    layers = keras.layers

    def get_model():
        inputs = keras.Input(shape=(8,))
        outputs = layers.Dense(1)(inputs)
        return keras.Model(inputs, outputs)

    model1 = get_model()
    model2 = get_model()
    model3 = get_model()
    inputs = keras.Input(shape=(8,))
    y1 = model1(inputs)
    y2 = model2(inputs)
    y3 = model3(inputs)
    outputs = layers.average([y1, y2, y3])
    return keras.Model(inputs=inputs, outputs=outputs)


def _custom_classes(keras: Any) -> dict[str, Any]:
    """The saving guide's custom objects, made once per process (registration is global)."""

    @keras.saving.register_keras_serializable(package="MyLayers")
    class CustomLayer(keras.layers.Layer):
        def __init__(self, factor):
            super().__init__()
            self.factor = factor

        def call(self, x):
            return x * self.factor

        def get_config(self):
            return {"factor": self.factor}

    @keras.saving.register_keras_serializable(package="my_package", name="custom_fn")
    def custom_fn(x):
        return x**2

    class UnitsLayer(keras.layers.Layer):
        def __init__(self, units=32, **kwargs):
            super().__init__(**kwargs)
            self.units = units

        def build(self, input_shape):
            self.w = self.add_weight(shape=(input_shape[-1], self.units), initializer="random_normal")
            self.b = self.add_weight(shape=(self.units,), initializer="random_normal")

        def call(self, inputs):
            return keras.ops.matmul(inputs, self.w) + self.b

        def get_config(self):
            config = super().get_config()
            config.update({"units": self.units})
            return config

    def custom_activation(x):
        return keras.ops.tanh(x) ** 2

    return {
        "CustomLayer": CustomLayer,
        "custom_fn": custom_fn,
        "UnitsLayer": UnitsLayer,
        "custom_activation": custom_activation,
    }


MODELS = {
    "ticket": ticket,
    "resnet": resnet,
    "shared": shared,
    "autoencoder": autoencoder,
    "ensemble": ensemble,
}


def _inputs(name: str, rng: np.random.Generator) -> list[np.ndarray]:
    if name == "ticket":
        return [
            rng.integers(0, 30, (3, 7)).astype(np.float32),
            rng.integers(0, 30, (3, 9)).astype(np.float32),
            rng.integers(0, 2, (3, 5)).astype(np.float32),
        ]
    if name == "resnet":
        return [rng.standard_normal((2, 16, 16, 3)).astype(np.float32)]
    if name == "shared":
        return [rng.integers(0, 50, (2, 5)).astype(np.int32), rng.integers(0, 50, (2, 3)).astype(np.int32)]
    if name == "autoencoder":
        return [rng.random((2, 28, 28, 1)).astype(np.float32)]
    return [rng.standard_normal((3, 8)).astype(np.float32)]  # ensemble, custom, custom_units


def _outputs(model: Any, xs: list[np.ndarray]) -> list[np.ndarray]:
    out = model(xs if len(xs) > 1 else xs[0], training=False)
    if isinstance(out, dict):
        out = [out[k] for k in sorted(out)]
    elif not isinstance(out, (list, tuple)):
        out = [out]
    return [np.asarray(o, dtype=np.float32) for o in out]


def _record(result: dict[str, np.ndarray], name: str, model: Any, xs: list[np.ndarray]) -> None:
    result[f"{name}/names"] = np.array([layer.name for layer in model.layers])
    for i, w in enumerate(model.get_weights()):
        result[f"{name}/w/{i}"] = np.asarray(w)
    for i, x in enumerate(xs):
        result[f"{name}/x/{i}"] = x
    for i, y in enumerate(_outputs(model, xs)):
        result[f"{name}/y/{i}"] = y


def compute() -> dict[str, np.ndarray]:
    os.environ.setdefault("KERAS_BACKEND", "tensorflow")
    import keras

    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    result: dict[str, np.ndarray] = {}
    for name, build in MODELS.items():
        _record(result, name, build(keras), _inputs(name, rng))

    custom = _custom_classes(keras)
    layers = keras.layers
    inputs = keras.Input(shape=(8,))
    mid = custom["CustomLayer"](0.5)(inputs)
    outputs = layers.Dense(1, activation=custom["custom_fn"])(mid)
    model = keras.Model(inputs, outputs)
    xs = _inputs("custom", rng)
    _record(result, "custom", model, xs)
    with tempfile.TemporaryDirectory() as folder:
        model.save(os.path.join(folder, "custom_model.keras"))
        reconstructed_model = keras.models.load_model(os.path.join(folder, "custom_model.keras"))
    result["custom/loaded/0"] = _outputs(reconstructed_model, xs)[0]

    inputs = keras.Input((8,))
    x = custom["UnitsLayer"](3)(inputs)
    outputs = layers.Activation(custom["custom_activation"])(x)
    model = keras.Model(inputs, outputs)
    config = model.get_config()
    objects = {"UnitsLayer": custom["UnitsLayer"], "custom_activation": custom["custom_activation"]}
    with keras.saving.custom_object_scope(objects):
        new_model = keras.Model.from_config(config)
    new_model.set_weights(model.get_weights())
    xs = _inputs("custom_units", rng)
    _record(result, "custom_units", model, xs)
    result["custom_units/loaded/0"] = _outputs(new_model, xs)[0]
    return result


def compare(computed: dict[str, np.ndarray], saved: dict[str, np.ndarray]) -> list[str]:
    problems = [f"{key}: missing" for key in sorted(set(computed) ^ set(saved))]
    for key in sorted(set(computed) & set(saved)):
        a, b = computed[key], saved[key]
        if a.shape != b.shape or a.dtype != b.dtype:
            problems.append(f"{key}: {a.dtype}{a.shape} against {b.dtype}{b.shape}")
        elif a.dtype.kind in "US":
            if not np.array_equal(a, b):
                problems.append(f"{key}: {a.tolist()} against {b.tolist()}")
        elif not np.allclose(a, b, rtol=1e-5, atol=1e-6):
            problems.append(f"{key}: differs by {np.max(np.abs(a - b)):.3g}")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="recompute and compare with the saved file")
    args = parser.parse_args(argv)
    computed = compute()
    if args.check:
        with np.load(PATH, allow_pickle=False) as file:
            problems = compare(computed, dict(file))
        for problem in problems:
            print(problem)
        print("reproduced" if not problems else f"{len(problems)} differences")
        return 1 if problems else 0
    np.savez_compressed(PATH, **computed)
    print(f"wrote {PATH} ({PATH.stat().st_size} bytes, {len(computed)} arrays)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
