"""Neural-network ops (``tp.nn``): activations, losses, dropout, convolution and pooling."""

from __future__ import annotations

from typing import Any

import numpy as np

from tapefit.core.ops.math import sigmoid, tanh
from tapefit.core.record import Op
from tapefit.core.registry import OpDef, execute, register_gradient, unary
from tapefit.core.tensor import Tensor


def _relu(x: np.ndarray) -> np.ndarray:
    return np.maximum(x, x.dtype.type(0))


relu = unary("Relu", _relu, save="out")
softplus = unary("Softplus", lambda x: np.logaddexp(x.dtype.type(0), x), save="x")

# ReluGrad is its own op (fused mask-and-multiply), with its own gradient for higher orders.
_RELU_GRAD = OpDef("ReluGrad", lambda dy, out: np.where(out > 0, dy, dy.dtype.type(0)), save="y")


@register_gradient("Relu")
def _relu_grad(op: Op, dy: Tensor) -> Tensor:
    return execute(_RELU_GRAD, (dy, op.outputs[0]))


@register_gradient("ReluGrad")
def _relu_grad_grad(op: Op, ddy: Tensor) -> tuple[Any, None]:
    return execute(_RELU_GRAD, (ddy, op.inputs[1])), None


@register_gradient("Softplus")
def _softplus_grad(op: Op, dy: Tensor) -> Tensor:
    return dy * sigmoid(op.inputs[0])


__all__ = ["relu", "sigmoid", "softplus", "tanh"]
