"""Activations by name: values against NumPy formulas and second-order gradients."""

import numpy as np
import pytest

import tapefit as tp
from tapefit.layers import activations

X = np.array([[-3.0, -0.7, 0.2, 1.5, 4.0]])

EXPECTED = {
    "linear": X,
    "relu": np.maximum(X, 0),
    "relu6": np.minimum(np.maximum(X, 0), 6),
    "sigmoid": 1 / (1 + np.exp(-X)),
    "tanh": np.tanh(X),
    "softplus": np.log1p(np.exp(X)),
    "softsign": X / (1 + np.abs(X)),
    "silu": X / (1 + np.exp(-X)),
    "swish": X / (1 + np.exp(-X)),
    "exponential": np.exp(X),
    "softmax": np.exp(X) / np.exp(X).sum(-1, keepdims=True),
    "log_softmax": X - np.log(np.exp(X).sum(-1, keepdims=True)),
    "elu": np.where(X > 0, X, np.exp(X) - 1),
    "selu": 1.0507009873554805 * np.where(X > 0, X, 1.6732632423543772 * (np.exp(X) - 1)),
    "leaky_relu": np.where(X > 0, X, 0.2 * X),
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_activation_values_and_gradients(name):
    fn = activations.get(name)
    np.testing.assert_allclose(
        fn(tp.constant(X)).numpy() if name != "linear" else fn(X), EXPECTED[name], rtol=1e-12
    )
    if name not in ("linear", "relu", "relu6", "leaky_relu"):
        tp.testing.check_gradients(fn, X, order=2)
    elif name != "linear":
        tp.testing.check_gradients(fn, X)


def test_gelu_exact_and_approximate():
    from math import erf

    exact = np.array([[0.5 * x * (1 + erf(x / np.sqrt(2))) for x in X[0]]])
    np.testing.assert_allclose(activations.gelu(tp.constant(X)).numpy(), exact, rtol=1e-6)
    approx = 0.5 * X * (1 + np.tanh(np.sqrt(2 / np.pi) * (X + 0.044715 * X**3)))
    np.testing.assert_allclose(activations.gelu(tp.constant(X), approximate=True).numpy(), approx, rtol=1e-6)
    tp.testing.check_gradients(activations.get("gelu"), X, order=2)


def test_elu_alpha_and_get_errors():
    np.testing.assert_allclose(
        activations.elu(tp.constant(X), alpha=0.5).numpy(), np.where(X > 0, X, 0.5 * (np.exp(X) - 1))
    )
    assert activations.get(None) is activations.linear
    assert activations.get(tp.math.tanh) is tp.math.tanh
    with pytest.raises(ValueError, match=r"unknown activation 'rlu'; known: .*relu"):
        activations.get("rlu")
    with pytest.raises(TypeError, match="an activation must be"):
        activations.get(5)
