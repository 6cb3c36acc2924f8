"""The blocks of Keras's guide "Making new layers and models via subclassing" that make weights,
translated (``keras`` -> ``tp``) and compared with Keras 3's numbers on the same weights and
inputs (``scripts/keras_reference_guides.py``; CI has no Keras). Its ``add_loss``, endpoint and
VAE blocks are in tests/training/test_keras_guides_steps.py."""

from __future__ import annotations

from pathlib import Path

import numpy as np

import tapefit as tp

REFERENCE = dict(np.load(Path(__file__).parent / "data" / "keras_guides.npz"))


def weights(case):
    count = sum(1 for key in REFERENCE if key.startswith(f"{case}/w/"))
    return [REFERENCE[f"{case}/w/{i}"] for i in range(count)]


class Linear(tp.layers.Layer):
    def __init__(self, units=32):
        super().__init__()
        self.units = units

    def build(self, input_shape):
        self.w = self.add_weight(
            shape=(input_shape[-1], self.units), initializer="random_normal", trainable=True
        )
        self.b = self.add_weight(shape=(self.units,), initializer="random_normal", trainable=True)

    def call(self, inputs):
        return tp.matmul(inputs, self.w) + self.b


def test_weights_made_in_build_on_the_first_call():
    linear = Linear(4)
    assert len(linear.weights) == int(REFERENCE["linear/weights_before"])
    x = REFERENCE["linear/x"]
    linear(x)
    linear.set_weights(weights("linear"))
    np.testing.assert_allclose(linear(x).numpy(), REFERENCE["linear/y"], rtol=1e-6, atol=1e-6)


def test_building_by_hand_then_setting_weights_keeps_them():
    linear = Linear(4)
    linear.build((None, 3))  # Keras's habit: build, set the weights, then call
    linear.set_weights(weights("linear"))
    np.testing.assert_allclose(
        linear(REFERENCE["linear/x"]).numpy(), REFERENCE["linear/y"], rtol=1e-6, atol=1e-6
    )


def test_layers_are_recursively_composable():
    class MLPBlock(tp.layers.Layer):
        def __init__(self):
            super().__init__()
            self.linear_1 = Linear(8)
            self.linear_2 = Linear(8)
            self.linear_3 = Linear(1)

        def call(self, inputs):
            x = tp.nn.relu(self.linear_1(inputs))
            x = tp.nn.relu(self.linear_2(x))
            return self.linear_3(x)

    mlp = MLPBlock()
    x = REFERENCE["mlp/x"]
    mlp(x)
    assert len(mlp.weights) == int(REFERENCE["mlp/weights"])
    assert len(mlp.trainable_weights) == int(REFERENCE["mlp/trainable_weights"])
    mlp.set_weights(weights("mlp"))
    np.testing.assert_allclose(mlp(x).numpy(), REFERENCE["mlp/y"], rtol=1e-5, atol=1e-6)


def test_non_trainable_weights():
    class ComputeSum(tp.layers.Layer):
        def __init__(self, input_dim):
            super().__init__()
            self.total = self.add_weight(initializer="zeros", shape=(input_dim,), trainable=False)

        def call(self, inputs):
            self.total.assign_add(tp.reduce_sum(inputs, axis=0))
            return self.total

    summer = ComputeSum(2)
    x = np.ones((2, 2), np.float32)
    summer(x)
    np.testing.assert_array_equal(summer(x).numpy(), REFERENCE["compute_sum/after_two"])
    counts = [len(summer.weights), len(summer.non_trainable_weights), len(summer.trainable_weights)]
    assert counts == list(REFERENCE["compute_sum/weights"])
