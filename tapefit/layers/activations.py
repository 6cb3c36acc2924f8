"""Activation functions by Keras's names (``activation="relu"`` in a layer).

The ones TensorFlow has in ``tf.nn`` come from ``tp.nn``; the rest are one line
each over tapefit ops, so every activation is differentiable to any order.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tapefit.core.naming import Registry
from tapefit.core.ops import math as _math
from tapefit.core.ops import nn as _nn
from tapefit.core.tensor import Tensor


def linear(x: Any) -> Any:
    """The identity: ``x``."""
    return x


def relu(x: Any) -> Tensor:
    """``max(x, 0)``."""
    return _nn.relu(x)


def relu6(x: Any) -> Tensor:
    """``min(max(x, 0), 6)``."""
    return _math.minimum(_nn.relu(x), 6.0)


def sigmoid(x: Any) -> Tensor:
    """``1 / (1 + exp(-x))``."""
    return _math.sigmoid(x)


def tanh(x: Any) -> Tensor:
    """The hyperbolic tangent."""
    return _math.tanh(x)


def softplus(x: Any) -> Tensor:
    """``log(1 + exp(x))``."""
    return _nn.softplus(x)


def softsign(x: Any) -> Tensor:
    """``x / (1 + |x|)``."""
    return x / (_math.abs(x) + 1.0)


def silu(x: Any) -> Tensor:
    """``x * sigmoid(x)`` (also called swish)."""
    return x * _math.sigmoid(x)


def exponential(x: Any) -> Tensor:
    """``exp(x)``."""
    return _math.exp(x)


def softmax(x: Any, axis: int = -1) -> Tensor:
    """``exp(x) / sum(exp(x))`` along ``axis``."""
    return _nn.softmax(x, axis=axis)


def log_softmax(x: Any, axis: int = -1) -> Tensor:
    """``x - logsumexp(x)`` along ``axis``."""
    return _nn.log_softmax(x, axis=axis)


def gelu(x: Any, approximate: bool = False) -> Tensor:
    """The Gaussian error linear unit (exact by default, as in Keras)."""
    return _nn.gelu(x, approximate=approximate)


def elu(x: Any, alpha: float = 1.0) -> Tensor:
    """``x`` for ``x > 0``, else ``alpha * (exp(x) - 1)``."""
    return _nn.elu(x) if alpha == 1.0 else _math.where(x > 0, x, _nn.elu(x) * alpha)


def selu(x: Any) -> Tensor:
    """``scale * elu(x, alpha)`` with the self-normalizing constants."""
    alpha, scale = 1.6732632423543772, 1.0507009873554805
    return elu(x, alpha) * scale


def leaky_relu(x: Any, negative_slope: float = 0.2) -> Tensor:
    """``x`` for ``x > 0``, else ``negative_slope * x`` (Keras's default slope 0.2)."""
    return _nn.leaky_relu(x, alpha=negative_slope)


swish = silu

registry: Registry[Callable[..., Any]] = Registry(
    "activation",
    {
        "linear": linear,
        "relu": relu,
        "relu6": relu6,
        "sigmoid": sigmoid,
        "tanh": tanh,
        "softplus": softplus,
        "softsign": softsign,
        "silu": silu,
        "swish": silu,
        "exponential": exponential,
        "softmax": softmax,
        "log_softmax": log_softmax,
        "gelu": gelu,
        "elu": elu,
        "selu": selu,
        "leaky_relu": leaky_relu,
    },
    none=linear,
)
"""The activations by name (``registry.names()``)."""


def get(identifier: str | Callable[..., Any] | None) -> Callable[..., Any]:
    """The activation for ``identifier``: ``None`` (the identity), a name, or a callable.

    Raises:
        ValueError: an unknown name (the message lists the known ones).
        TypeError: neither ``None``, a string nor a callable.
    """
    return registry.get(identifier)


__all__ = [
    "elu",
    "exponential",
    "gelu",
    "get",
    "leaky_relu",
    "linear",
    "log_softmax",
    "registry",
    "relu",
    "relu6",
    "selu",
    "sigmoid",
    "silu",
    "softmax",
    "softplus",
    "softsign",
    "swish",
    "tanh",
]
