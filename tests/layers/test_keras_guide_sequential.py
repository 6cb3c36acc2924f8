"""Keras's guide "The Sequential model", translated block by block (``keras`` -> ``tp``), with
the numbers Keras 3 gave on the same weights and inputs (``scripts/keras_reference_guides.py``
saved them; CI has no Keras). The guide's 250x250 images are shrunk as the script shrinks them."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import tapefit as tp
from tapefit import layers

REFERENCE = dict(np.load(Path(__file__).parent / "data" / "keras_guides.npz"))


def weights(case):
    count = sum(1 for key in REFERENCE if key.startswith(f"{case}/w/"))
    return [REFERENCE[f"{case}/w/{i}"] for i in range(count)]


def test_when_to_use_three_dense_layers():
    model = tp.layers.Sequential(
        [
            layers.Dense(2, activation="relu", name="layer1"),
            layers.Dense(3, activation="relu", name="layer2"),
            layers.Dense(4, name="layer3"),
        ]
    )
    x = REFERENCE["three_dense/x"]
    model(x)
    model.set_weights(weights("three_dense"))  # Keras's get_weights order
    np.testing.assert_allclose(model(x).numpy(), REFERENCE["three_dense/y"], rtol=1e-5, atol=1e-6)
    layer1, layer2, layer3 = model.layers
    np.testing.assert_allclose(
        layer3(layer2(layer1(x))).numpy(), REFERENCE["three_dense/y"], rtol=1e-5, atol=1e-6
    )


def test_add_and_pop():
    model = tp.layers.Sequential()
    model.add(layers.Dense(2, activation="relu"))
    model.add(layers.Dense(3, activation="relu"))
    model.add(layers.Dense(4))
    model.pop()
    assert len(model.layers) == int(REFERENCE["pop/len"])
    assert tp.layers.Sequential(name="my_sequential").name == "my_sequential"


def test_specifying_the_input_shape_in_advance():
    layer = layers.Dense(3)
    assert len(layer.weights) == int(REFERENCE["lazy_layer/weights_before"])
    layer(np.ones((1, 4), np.float32))
    assert len(layer.weights) == int(REFERENCE["lazy_layer/weights_after"])
    model = tp.layers.Sequential([tp.Input(shape=(4,)), layers.Dense(2, activation="relu")])
    assert len(model.layers) == int(REFERENCE["input_first/len"])  # the Input is not a layer
    assert len(model.weights) == int(REFERENCE["input_first/weights"])
    model = tp.layers.Sequential([layers.Dense(2, activation="relu", input_shape=(4,))])
    assert len(model.weights) == int(REFERENCE["input_shape_arg/weights"])


def test_a_common_debugging_workflow_shows_shapes_before_data():
    model = tp.layers.Sequential()
    model.add(tp.Input(shape=(40, 40, 3)))
    model.add(layers.Conv2D(8, 5, strides=2, activation="relu"))
    model.add(layers.Conv2D(8, 3, activation="relu"))
    model.add(layers.MaxPooling2D(3))
    lines = []
    model.summary(print_fn=lines.append)  # shapes known before any data, as in Keras
    assert any("(None, 18, 18, 8)" in line for line in lines) and any(
        "(None, 5, 5, 8)" in line for line in lines
    )
    model.add(layers.Conv2D(8, 3, activation="relu"))
    model.add(layers.GlobalMaxPooling2D())
    model.add(layers.Dense(10))
    shapes = [tuple(int(n) for n in row if n) for row in REFERENCE["debugging/output_shapes"]]
    assert [tuple(s[1:]) for s in _output_shapes(model)] == shapes
    model.set_weights(weights("debugging"))
    np.testing.assert_allclose(
        model(REFERENCE["debugging/x"]).numpy(), REFERENCE["debugging/y"], rtol=1e-4, atol=1e-5
    )


def _output_shapes(model):
    return [layer._output_shape for layer in model.layers]


def test_feature_extraction_with_a_sequential_model():
    initial_model = tp.layers.Sequential(
        [
            tp.Input(shape=(20, 20, 3)),
            layers.Conv2D(4, 5, strides=2, activation="relu"),
            layers.Conv2D(4, 3, activation="relu"),
            layers.Conv2D(4, 3, activation="relu"),
        ]
    )
    feature_extractor = tp.Model(
        inputs=initial_model.inputs, outputs=[layer.output for layer in initial_model.layers]
    )
    feature_extractor.set_weights(weights("features"))
    features = feature_extractor(REFERENCE["features/x"])
    for i, feature in enumerate(features):
        np.testing.assert_allclose(feature.numpy(), REFERENCE[f"features/y/{i}"], rtol=1e-4, atol=1e-5)


def test_transfer_learning_freezes_all_but_the_last_layer():
    model = tp.layers.Sequential(
        [
            tp.Input(shape=(4,)),
            layers.Dense(8, activation="relu"),
            layers.Dense(8, activation="relu"),
            layers.Dense(2),
        ]
    )
    for layer in model.layers[:-1]:
        layer.trainable = False
    assert len(model.trainable_weights) == 2 and len(model.weights) == 6
    model.compile(optimizer="adam", loss="mse")
    before = [w.copy() for w in model.get_weights()]
    model.fit(np.ones((4, 4), np.float32), np.zeros((4, 2), np.float32), epochs=1, verbose=0)
    after = model.get_weights()
    assert all(np.array_equal(a, b) for a, b in zip(before[:4], after[:4]))
    assert not np.array_equal(before[4], after[4])


@pytest.mark.parametrize("case", ["three_dense", "debugging", "features"])
def test_the_reference_file_is_whole(case):
    assert weights(case) and f"{case}/x" in REFERENCE
