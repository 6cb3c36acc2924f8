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
from tapefit.core.ops import reduce as _reduce
from tapefit.core.ops import shape as _shape
from tapefit.core.ops.creation import convert_to_tensor
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


def celu(x: Any, alpha: float = 1.0) -> Tensor:
    """``max(x, 0) + min(0, alpha * (exp(x / alpha) - 1))``."""
    return _nn.relu(x) + _math.minimum(_math.exp(x / alpha) * alpha - alpha, 0.0)


def glu(x: Any, axis: int = -1) -> Tensor:
    """The gated linear unit: ``a * sigmoid(b)``, with ``a`` and ``b`` the halves of ``x`` along ``axis``."""
    x = convert_to_tensor(x)
    if x.shape[axis] % 2:
        raise ValueError(f"glu: axis {axis} of x must have an even size, got shape {tuple(x.shape)}")
    a, b = _shape.split(x, 2, axis=axis)
    return a * _math.sigmoid(b)


def hard_sigmoid(x: Any) -> Tensor:
    """``relu6(x + 3) / 6``: 0 below -3, 1 above 3, linear between (Keras 3's)."""
    return _math.clip_by_value(x / 6.0 + 0.5, 0.0, 1.0)


def hard_silu(x: Any) -> Tensor:
    """``x * hard_sigmoid(x)`` (also called hard_swish)."""
    return x * hard_sigmoid(x)


def hard_tanh(x: Any) -> Tensor:
    """``x`` clipped to ``[-1, 1]``."""
    return _math.clip_by_value(x, -1.0, 1.0)


def hard_shrink(x: Any, threshold: float = 0.5) -> Tensor:
    """``x`` where ``|x| > threshold``, else 0."""
    return _math.where(_math.abs(x) > threshold, x, 0.0)


def soft_shrink(x: Any, threshold: float = 0.5) -> Tensor:
    """``x`` moved ``threshold`` towards 0, and 0 within ``threshold`` of it."""
    return _math.where(x > threshold, x - threshold, _math.where(x < -threshold, x + threshold, 0.0))


def tanh_shrink(x: Any) -> Tensor:
    """``x - tanh(x)``."""
    return x - _math.tanh(x)


def log_sigmoid(x: Any) -> Tensor:
    """``log(sigmoid(x))``, computed as ``-softplus(-x)``."""
    return -_nn.softplus(-x)


def mish(x: Any) -> Tensor:
    """``x * tanh(softplus(x))``."""
    return x * _math.tanh(_nn.softplus(x))


def sparse_plus(x: Any) -> Tensor:
    """0 for ``x <= -1``, ``x`` for ``x >= 1``, and ``(x + 1)**2 / 4`` between."""
    return _math.where(x <= -1.0, 0.0, _math.where(x >= 1.0, x, (x + 1.0) * (x + 1.0) / 4.0))


def sparse_sigmoid(x: Any) -> Tensor:
    """0 for ``x <= -1``, 1 for ``x >= 1``, and ``(x + 1) / 2`` between."""
    return _math.clip_by_value((x + 1.0) / 2.0, 0.0, 1.0)


def squareplus(x: Any, b: float = 4.0) -> Tensor:
    """``(x + sqrt(x**2 + b)) / 2``, a smooth relu."""
    return (x + _math.sqrt(x * x + b)) / 2.0


def threshold(x: Any, threshold: float, default_value: float) -> Tensor:
    """``x`` where ``x > threshold``, else ``default_value``. Not a name for ``activation=``:
    its two arguments have no defaults (as in Keras, where the name fails when called)."""
    return _math.where(x > threshold, x, default_value)


def sparsemax(x: Any, axis: int = -1) -> Tensor:
    """The Euclidean projection of ``x`` onto the probability simplex along ``axis``: like
    softmax, outputs that sum to 1, but exactly 0 for the small inputs.

    Without a sort: entry ``i`` is in the support when ``1 + k_i x_i > s_i``, with ``k_i`` and
    ``s_i`` the count and the sum of the entries at least ``x_i`` (a pairwise comparison, so a
    row of ``n`` entries costs ``n * n``); the gradient follows from the ops.
    """
    x = convert_to_tensor(x)
    axis = axis % len(x.shape)
    x_j, x_i = _shape.expand_dims(x, axis), _shape.expand_dims(x, axis + 1)  # j along axis + 1
    pairs = _math.cast(_math.greater_equal(x_j, x_i), x.dtype)
    at_least = _reduce.reduce_sum(pairs, axis=axis + 1)  # k_i: the entries j with x_j >= x_i
    sums = _reduce.reduce_sum(pairs * x_j, axis=axis + 1)  # s_i: their sum
    support = _math.cast(_math.greater(at_least * x + 1.0, sums), x.dtype)
    size = _reduce.reduce_sum(support, axis=axis, keepdims=True)
    tau = (_reduce.reduce_sum(support * x, axis=axis, keepdims=True) - 1.0) / size
    return _nn.relu(x - tau)


swish = silu
hard_swish = hard_silu

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
        "celu": celu,
        "glu": glu,
        "hard_sigmoid": hard_sigmoid,
        "hard_silu": hard_silu,
        "hard_swish": hard_silu,
        "hard_tanh": hard_tanh,
        "hard_shrink": hard_shrink,
        "soft_shrink": soft_shrink,
        "tanh_shrink": tanh_shrink,
        "log_sigmoid": log_sigmoid,
        "mish": mish,
        "sparse_plus": sparse_plus,
        "sparse_sigmoid": sparse_sigmoid,
        "sparsemax": sparsemax,
        "squareplus": squareplus,
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


def serialize(activation: Any) -> Any:
    """A built-in activation's name (``"relu"``), or a registered function's
    ``{"module", "class_name", "config"}``, as Keras 3's ``serialize`` gives them.

    Raises:
        tp.layers.serialization.ConfigError: a function neither built in nor registered.
    """
    from tapefit.layers import serialization

    name = registry.name_of(activation)
    if name is not None:
        return name
    return serialization.serialize(activation, getattr(activation, "__name__", "activation"))


def deserialize(config: Any) -> Callable[..., Any]:
    """The activation ``serialize`` described: a name (as ``get`` takes it) or a registered
    function's entry.

    Raises:
        ValueError: an unknown name; tp.layers.serialization.ConfigError: an unknown entry.
    """
    from tapefit.layers import serialization

    if config is None or isinstance(config, str):
        return get(config)
    result: Callable[..., Any] = serialization.deserialize(config, serialization.layer_tables(), "activation")
    return result


__all__ = [
    "celu",
    "glu",
    "hard_shrink",
    "hard_sigmoid",
    "hard_silu",
    "hard_swish",
    "hard_tanh",
    "log_sigmoid",
    "mish",
    "soft_shrink",
    "sparse_plus",
    "sparse_sigmoid",
    "sparsemax",
    "squareplus",
    "tanh_shrink",
    "threshold",
    "elu",
    "exponential",
    "deserialize",
    "gelu",
    "get",
    "leaky_relu",
    "linear",
    "log_softmax",
    "registry",
    "relu",
    "relu6",
    "selu",
    "serialize",
    "sigmoid",
    "silu",
    "softmax",
    "softplus",
    "softsign",
    "swish",
    "tanh",
]


def __dir__() -> list[str]:
    return sorted(__all__)
