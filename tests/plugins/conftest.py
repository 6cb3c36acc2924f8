"""Small data, a small model with dropout, and a trainer factory for the plugin tests."""

from __future__ import annotations

import numpy as np
import pytest

import tapefit as tp


def make_data(
    n: int = 24, features: int = 4, classes: int = 3, seed: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, features)).astype(np.float32)
    y = (np.abs(x[:, 0] * 1.5 + x[:, 1]).astype(np.int64)) % classes
    return x, y


def make_model(classes: int = 3, dropout: float = 0.25) -> tp.Module:
    return tp.layers.Sequential(
        [tp.layers.Dense(8, activation="relu"), tp.layers.Dropout(dropout), tp.layers.Dense(classes)]
    )


def make_trainer(plugins=(), seed: int = 0, metrics=("accuracy",), **kwargs) -> tp.Trainer:
    tp.random.set_seed(seed)
    return tp.Trainer(
        make_model(),
        tp.optimizers.Adam(learning_rate=0.01),
        tp.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=list(metrics),
        plugins=list(plugins),
        **kwargs,
    )


@pytest.fixture
def data() -> tuple[np.ndarray, np.ndarray]:
    return make_data()


@pytest.fixture(name="make_trainer")
def _make_trainer_fixture():
    return make_trainer


@pytest.fixture(name="make_data")
def _make_data_fixture():
    return make_data
