"""Keras 3's guides "The Functional API" and "Serialization and saving", translated.

Each model below is a guide block with ``keras`` replaced by ``tp`` (``from keras import
layers`` by ``layers = tp.layers``), shrunk as ``scripts/keras_reference_saving.py`` shrinks it.
Keras's weights go in with ``set_weights`` in Keras's order, and the outputs, the number of
layers, their order and the weights' shapes must be Keras's (``keras_saving.npz``).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import tapefit as tp

layers = tp.layers
DATA = Path(__file__).parent / "data" / "keras_saving.npz"


@pytest.fixture(scope="module")
def keras_saved() -> dict[str, np.ndarray]:
    with np.load(DATA, allow_pickle=False) as file:
        return dict(file)


def _arrays(saved: dict[str, np.ndarray], prefix: str) -> list[np.ndarray]:
    keys = [k for k in saved if k.startswith(prefix) and k[len(prefix) :].isdigit()]
    return [saved[f"{prefix}{i}"] for i in range(len(keys))]


def _outputs(model: Any, xs: list[np.ndarray]) -> list[np.ndarray]:
    out = model(xs if len(xs) > 1 else xs[0], training=False)
    if isinstance(out, dict):
        out = [out[k] for k in sorted(out)]
    elif not isinstance(out, (list, tuple)):
        out = [out]
    return [o.numpy() for o in out]


# Default names that differ: Keras names a nested functional model "functional", tapefit "model".
_TAPEFIT_NAMES = {"functional": "model"}


def _base(name: str) -> str:
    """A layer's name without the number a default name gets (``dense_3`` -> ``dense``)."""
    base = re.sub(r"_\d+$", "", name)
    return _TAPEFIT_NAMES.get(base, base)


def _compare(model: Any, saved: dict[str, np.ndarray], name: str, atol: float = 1e-5) -> float:
    """Loads Keras's weights into ``model``; checks the layers and weights against Keras's and
    returns the largest difference of the outputs."""
    names = saved[f"{name}/names"].tolist()
    assert len(model.layers) == len(names)
    assert [_base(layer.name) for layer in model.layers] == [_base(n) for n in names]
    weights = _arrays(saved, f"{name}/w/")
    assert [w.shape for w in model.get_weights()] == [w.shape for w in weights]
    model.set_weights(weights)
    got = _outputs(model, _arrays(saved, f"{name}/x/"))
    expected = _arrays(saved, f"{name}/y/")
    assert len(got) == len(expected)
    worst = 0.0
    for g, e in zip(got, expected):
        np.testing.assert_allclose(g, e, rtol=1e-5, atol=atol)
        worst = max(worst, float(np.max(np.abs(g - e))))
    return worst


def test_the_multi_input_multi_output_ticket_model(keras_saved):
    num_tags, num_words, num_departments = 5, 30, 4
    title_input = tp.Input(shape=(None,), name="title")
    body_input = tp.Input(shape=(None,), name="body")
    tags_input = tp.Input(shape=(num_tags,), name="tags")
    title_features = layers.Embedding(num_words, 8)(title_input)
    body_features = layers.Embedding(num_words, 8)(body_input)
    title_features = layers.LSTM(6)(title_features)
    body_features = layers.LSTM(4)(body_features)
    x = layers.concatenate([title_features, body_features, tags_input])
    priority_pred = layers.Dense(1, name="priority")(x)
    department_pred = layers.Dense(num_departments, name="department")(x)
    model = tp.Model(
        inputs=[title_input, body_input, tags_input],
        outputs={"priority": priority_pred, "department": department_pred},
    )
    _compare(model, keras_saved, "ticket")
    assert [layer.name for layer in model.layers][:2] == ["title", "body"]
    assert [_base(layer.name) for layer in model.layers][-4:] == [
        "tags",
        "concatenate",
        "department",
        "priority",
    ]


def test_the_toy_resnet(keras_saved):
    inputs = tp.Input(shape=(16, 16, 3), name="img")
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
    model = tp.Model(inputs, outputs, name="toy_resnet")
    _compare(model, keras_saved, "resnet")


def test_a_shared_embedding_on_two_inputs(keras_saved):
    shared_embedding = layers.Embedding(50, 8)
    text_input_a = tp.Input(shape=(None,), dtype="int32")
    text_input_b = tp.Input(shape=(None,), dtype="int32")
    encoded_input_a = shared_embedding(text_input_a)
    encoded_input_b = shared_embedding(text_input_b)
    model = tp.Model([text_input_a, text_input_b], [encoded_input_a, encoded_input_b])
    assert _compare(model, keras_saved, "shared") == 0.0
    assert shared_embedding.input is text_input_a and shared_embedding.output is encoded_input_a


def test_an_autoencoder_of_nested_encoder_and_decoder_models(keras_saved):
    encoder_input = tp.Input(shape=(28, 28, 1), name="original_img")
    x = layers.Conv2D(4, 3, activation="relu")(encoder_input)
    x = layers.Conv2D(8, 3, activation="relu")(x)
    x = layers.MaxPooling2D(3)(x)
    x = layers.Conv2D(8, 3, activation="relu")(x)
    x = layers.Conv2D(4, 3, activation="relu")(x)
    encoder_output = layers.GlobalMaxPooling2D()(x)
    encoder = tp.Model(encoder_input, encoder_output, name="encoder")

    decoder_input = tp.Input(shape=(4,), name="encoded_img")
    x = layers.Reshape((2, 2, 1))(decoder_input)
    x = layers.Conv2D(4, 3, activation="relu", padding="same")(x)
    x = layers.UpSampling2D(3)(x)
    decoder_output = layers.Conv2D(1, 3, activation="relu", padding="same")(x)
    decoder = tp.Model(decoder_input, decoder_output, name="decoder")

    autoencoder_input = tp.Input(shape=(28, 28, 1), name="img")
    encoded_img = encoder(autoencoder_input)
    decoded_img = decoder(encoded_img)
    autoencoder = tp.Model(autoencoder_input, decoded_img, name="autoencoder")
    _compare(autoencoder, keras_saved, "autoencoder")
    assert [layer.name for layer in autoencoder.layers] == ["img", "encoder", "decoder"]
    assert autoencoder.get_layer("encoder").output is encoded_img


def test_an_ensemble_of_models_averaged(keras_saved):
    def get_model():
        inputs = tp.Input(shape=(8,))
        outputs = layers.Dense(1)(inputs)
        return tp.Model(inputs, outputs)

    model1 = get_model()
    model2 = get_model()
    model3 = get_model()
    inputs = tp.Input(shape=(8,))
    y1 = model1(inputs)
    y2 = model2(inputs)
    y3 = model3(inputs)
    outputs = layers.average([y1, y2, y3])
    ensemble_model = tp.Model(inputs=inputs, outputs=outputs)
    _compare(ensemble_model, keras_saved, "ensemble")


# -- the serialization guide ----------------------------------------------------------


@tp.register_serializable(package="MyLayers")
class CustomLayer(tp.layers.Layer):
    def __init__(self, factor):
        super().__init__()
        self.factor = factor

    def call(self, x):
        return x * self.factor

    def get_config(self):
        return {"factor": self.factor}


@tp.register_serializable(package="my_package", name="custom_fn")
def custom_fn(x):
    return x**2


def test_a_registered_custom_layer_and_function_save_and_load(keras_saved, tmp_path):
    inputs = tp.Input(shape=(8,))
    mid = CustomLayer(0.5)(inputs)
    outputs = layers.Dense(1, activation=custom_fn)(mid)
    model = tp.Model(inputs, outputs)
    _compare(model, keras_saved, "custom")
    model.save(tmp_path / "custom_model.tapefit")
    CustomLayer(2.0)  # a rebuilt layer's default name would now be another
    reconstructed_model = tp.models.load_model(tmp_path / "custom_model.tapefit")
    xs = _arrays(keras_saved, "custom/x/")
    np.testing.assert_allclose(
        _outputs(reconstructed_model, xs)[0], keras_saved["custom/loaded/0"], rtol=1e-5
    )
    np.testing.assert_array_equal(_outputs(reconstructed_model, xs)[0], _outputs(model, xs)[0])
    again = tp.models.load_model(
        tmp_path / "custom_model.tapefit", custom_objects={"CustomLayer": CustomLayer, "custom_fn": custom_fn}
    )
    np.testing.assert_array_equal(_outputs(again, xs)[0], _outputs(model, xs)[0])
    clone = tp.models.clone_model(model)
    assert [layer.name for layer in clone.layers] == [layer.name for layer in model.layers]


class UnitsLayer(tp.layers.Layer):
    def __init__(self, units=32, **kwargs):
        super().__init__(**kwargs)
        self.units = units

    def build(self, input_shape):
        self.w = self.add_weight(shape=(input_shape[-1], self.units), initializer="random_normal")
        self.b = self.add_weight(shape=(self.units,), initializer="random_normal")

    def call(self, inputs):
        return tp.matmul(inputs, self.w) + self.b

    def get_config(self):
        config = super().get_config()
        config.update({"units": self.units})
        return config


def custom_activation(x):
    return tp.tanh(x) ** 2


def test_a_custom_layer_rebuilt_from_its_config_with_custom_objects(keras_saved):
    inputs = tp.Input((8,))
    x = UnitsLayer(3)(inputs)
    outputs = layers.Activation(custom_activation)(x)
    model = tp.Model(inputs, outputs)
    _compare(model, keras_saved, "custom_units")
    serialized_layer = tp.layers.serialize(tp.layers.Dense(3, activation="relu"))
    assert type(tp.layers.deserialize(serialized_layer)) is tp.layers.Dense
    tp.register_serializable(UnitsLayer, name="tests.UnitsLayer")  # a config names only registered classes
    tp.register_serializable(custom_activation, name="tests.custom_activation")
    config = model.get_config()
    new_model = tp.Model.from_config(config)
    new_model.set_weights(model.get_weights())
    xs = _arrays(keras_saved, "custom_units/x/")
    np.testing.assert_allclose(_outputs(new_model, xs)[0], keras_saved["custom_units/loaded/0"], rtol=1e-5)
    json_config = model.to_json()
    from_json = tp.models.model_from_json(
        json_config, custom_objects={"UnitsLayer": UnitsLayer, "custom_activation": custom_activation}
    )
    assert [w.shape for w in from_json.get_weights()] == [w.shape for w in model.get_weights()]
