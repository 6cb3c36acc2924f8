"""Gradient checks of layers: inputs and trainable weights against finite differences."""

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
