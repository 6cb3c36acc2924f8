"""Shared by the layer tests: gradient checks of inputs and trainable weights against finite
differences, and the PyTorch references of ``scripts/torch_reference_attention.py``."""

import importlib.util
from pathlib import Path

import numpy as np
import pytest

import tapefit as tp


def check_layer_gradients(layer, x, order=1, training=None, **tolerances):
    """Checks d(layer(x))/dx and d/d(each trainable weight held as an attribute of ``layer``).

    The layer (float64) is built by a first call; then ``tp.testing.check_gradients``
    differentiates ``f(x, *weights)``, which puts the given weights in the layer's
    attributes for the duration of the call.
    """
    layer(x, training=training)
    names = [n for n, v in vars(layer).items() if isinstance(v, tp.Variable) and v.trainable]
    assert names, "the layer has no trainable weights to check"

    def f(inputs, *weights):
        saved = {n: getattr(layer, n) for n in names}
        try:
            for n, w in zip(names, weights):
                setattr(layer, n, w)
            return layer(inputs, training=training)
        finally:
            for n, v in saved.items():
                setattr(layer, n, v)

    tp.testing.check_gradients(f, x, *[getattr(layer, n).numpy() for n in names], order=order, **tolerances)
    return names


@pytest.fixture
def check_layer():
    """``check_layer_gradients`` as a fixture (test modules are not importable packages)."""
    return check_layer_gradients


_SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "torch_reference_attention.py"


@pytest.fixture(scope="session")
def torch_reference():
    """``scripts/torch_reference_attention.py`` as a module (it imports PyTorch only when run)."""
    spec = importlib.util.spec_from_file_location("torch_reference_attention", _SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def saved_case(torch_reference):
    """``saved_case(prefix)``: the script's saved arrays under ``prefix/``, by their names after it."""
    with np.load(torch_reference.PATH, allow_pickle=False) as saved:
        arrays = dict(saved)

    def case(prefix):
        return {
            key.split("/", 1)[1]: value for key, value in arrays.items() if key.split("/", 1)[0] == prefix
        }

    return case


_KERAS_SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "keras_reference_functional.py"


@pytest.fixture(scope="session")
def keras_reference():
    """``scripts/keras_reference_functional.py`` as a module (it imports Keras only when run)."""
    spec = importlib.util.spec_from_file_location("keras_reference_functional", _KERAS_SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def keras_saved(keras_reference):
    """Keras's saved reference arrays, by key (``layer/add/out``, ``conv1d/w/conv1/0``, ...)."""
    with np.load(keras_reference.PATH, allow_pickle=False) as saved:
        return dict(saved)
