"""A user model for ``configs/custom_module.yaml``: a ``tp.Module`` subclass found by import path.

``train`` imports ``examples.custom_module``, takes ``ResidualMLP`` and calls it with the
config's other model keys: ``ResidualMLP(num_classes=10, units=64, blocks=2)``. Registered with
``@tp.register_serializable``, it can be saved in a ``.tapefit`` file and loaded back with
``tp.models.load_model`` once this module is imported.
"""

from __future__ import annotations

import tapefit as tp


@tp.register_serializable
class ResidualMLP(tp.Module):
    """Dense layers with residual connections: ``h = relu(h + W2 relu(W1 h))`` per block.

    Args:
        num_classes: The number of classes; the model returns their probabilities.
        units: Width of the hidden layers.
        blocks: The number of residual blocks.
        name: The module's name.
    """

    def __init__(self, num_classes: int, units: int = 64, blocks: int = 2, name: str | None = None) -> None:
        super().__init__(name=name)
        self.project = tp.layers.Dense(units, activation="relu")
        # Layers inside a list (of tuples) are tracked like attributes.
        self.blocks = [
            (tp.layers.Dense(units, activation="relu"), tp.layers.Dense(units)) for _ in range(blocks)
        ]
        self.head = tp.layers.Dense(num_classes, activation="softmax")

    def call(self, x: tp.Tensor) -> tp.Tensor:
        """Class probabilities for a batch of feature vectors."""
        h = self.project(x)
        for inner, outer in self.blocks:
            h = tp.nn.relu(h + outer(inner(h)))
        return self.head(h)
