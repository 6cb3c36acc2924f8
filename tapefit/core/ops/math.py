"""Elementwise math: forward in NumPy, gradient from tapefit ops, side by side.

Each gradient reads like a line of a derivative sheet; ``dy`` is the upstream
gradient, ``x``/``y`` the inputs, ``out`` the output. Broadcast inputs get
their gradients summed back by the tape, not here.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tapefit.core import dtypes as _dt
from tapefit.core.record import Op
from tapefit.core.registry import (
    OpDef,
    binary,
    binary_operands,
    execute,
    not_differentiable,
    register_gradient,
    same_dtype_tensors,
    unary,
)
from tapefit.core.tensor import Tensor, as_tensor

# -- binary arithmetic -------------------------------------------------------


def _integer_checked(name: str, fn: Any) -> Any:
    """``fn`` raising on an integer zero divisor, where NumPy would quietly give 0 (as TF raises)."""

    def forward(x: np.ndarray, y: np.ndarray) -> np.ndarray:
        if y.dtype.kind in "iu" and not np.all(y):
            raise ZeroDivisionError(f"{name}: integer division by zero")
        return fn(x, y)

    return forward


add = binary("Add", np.add, save="", numeric=True)
"""``tp.add(x, y)``: ``x + y`` elementwise, with NumPy broadcasting.

A Python number takes the dtype of the tensor it meets (TensorFlow's weak typing)."""
subtract = binary("Sub", np.subtract, save="", numeric=True)
"""``tp.subtract(x, y)``: ``x - y`` elementwise, with broadcasting."""
multiply = binary("Mul", np.multiply, save="x y", numeric=True)
"""``tp.multiply(x, y)``: ``x * y`` elementwise, with broadcasting."""
divide = binary("RealDiv", np.true_divide, save="x y", numeric=True)
"""``tp.divide(x, y)``: ``x / y`` elementwise (true division), with broadcasting."""
floordiv = binary("FloorDiv", _integer_checked("FloorDiv", np.floor_divide), save="", numeric=True)
"""``tp.floordiv(x, y)``: ``x // y`` elementwise, rounding down; no gradient.

Integer division by zero raises ``ZeroDivisionError``."""
floormod = binary("FloorMod", _integer_checked("FloorMod", np.mod), save="x y", numeric=True)
"""``tp.floormod(x, y)``: ``x % y`` elementwise, with the sign of ``y`` (as Python and TensorFlow).

Integer division by zero raises ``ZeroDivisionError``."""
pow = binary("Pow", np.power, save="x y out", numeric=True)
"""``tp.pow(x, y)``: ``x ** y`` elementwise, with broadcasting."""
maximum = binary("Maximum", np.maximum, save="x y", numeric=True)
"""``tp.maximum(x, y)``: the larger of ``x`` and ``y``, elementwise; on ties the gradient goes to ``x``."""
minimum = binary("Minimum", np.minimum, save="x y", numeric=True)
"""``tp.minimum(x, y)``: the smaller of ``x`` and ``y``, elementwise; on ties the gradient goes to ``x``."""


@register_gradient("Add")
def _add_grad(op: Op, dy: Tensor) -> tuple[Any, Any]:
    return dy, dy


@register_gradient("Sub")
def _sub_grad(op: Op, dy: Tensor) -> tuple[Any, Any]:
    return dy, negative(dy) if op.needs_grad[1] else None


@register_gradient("Mul")
def _mul_grad(op: Op, dy: Tensor) -> tuple[Any, Any]:
    x, y = op.inputs
    return (dy * y if op.needs_grad[0] else None, dy * x if op.needs_grad[1] else None)


@register_gradient("RealDiv")
def _div_grad(op: Op, dy: Tensor) -> tuple[Any, Any]:
    x, y = op.inputs
    # d(x/y) = dx / y - x dy / y^2
    return (dy / y if op.needs_grad[0] else None, -dy * x / (y * y) if op.needs_grad[1] else None)


@register_gradient("FloorMod")
def _floormod_grad(op: Op, dy: Tensor) -> tuple[Any, Any]:
    x, y = op.inputs
    # x mod y = x - floor(x / y) * y
    return dy, -dy * floor(x / y) if op.needs_grad[1] else None


@register_gradient("Pow")
def _pow_grad(op: Op, dy: Tensor) -> tuple[Any, Any]:
    x, y = op.inputs
    (out,) = op.outputs
    dx = dy * y * x ** (y - 1) if op.needs_grad[0] else None
    dexp = None
    if op.needs_grad[1]:
        # d(x^y)/dy = x^y log x, taken as 0 where x <= 0 (as TensorFlow does)
        positive = x > 0
        dexp = dy * out * where(positive, log(where(positive, x, 1)), 0)
    return dx, dexp


@register_gradient("Maximum")
def _maximum_grad(op: Op, dy: Tensor) -> tuple[Any, Any]:
    x, y = op.inputs
    x_wins = x >= y  # ties send the gradient to x, as TensorFlow does
    need = op.needs_grad
    return where(x_wins, dy, 0) if need[0] else None, where(x_wins, 0, dy) if need[1] else None


@register_gradient("Minimum")
def _minimum_grad(op: Op, dy: Tensor) -> tuple[Any, Any]:
    x, y = op.inputs
    x_wins = x <= y
    need = op.needs_grad
    return where(x_wins, dy, 0) if need[0] else None, where(x_wins, 0, dy) if need[1] else None


not_differentiable("FloorDiv")

# -- comparisons (bool results, no gradient) ---------------------------------

less = binary("Less", np.less, save="")
"""``tp.less(x, y)``: ``x < y`` elementwise, a bool tensor; no gradient."""
less_equal = binary("LessEqual", np.less_equal, save="")
"""``tp.less_equal(x, y)``: ``x <= y`` elementwise, a bool tensor; no gradient."""
greater = binary("Greater", np.greater, save="")
"""``tp.greater(x, y)``: ``x > y`` elementwise, a bool tensor; no gradient."""
greater_equal = binary("GreaterEqual", np.greater_equal, save="")
"""``tp.greater_equal(x, y)``: ``x >= y`` elementwise, a bool tensor; no gradient."""
equal = binary("Equal", np.equal, save="")
"""``tp.equal(x, y)``: ``x == y`` elementwise, a bool tensor; no gradient."""
not_equal = binary("NotEqual", np.not_equal, save="")
"""``tp.not_equal(x, y)``: ``x != y`` elementwise, a bool tensor; no gradient."""


def _bool_only(name: str, fn: Any) -> Any:
    """``fn`` refusing non-bool arrays, as TensorFlow's logical ops do (no silent truthiness)."""

    def forward(*arrays: np.ndarray) -> np.ndarray:
        for a in arrays:
            if a.dtype.kind != "b":
                raise TypeError(f"{name} needs bool tensors, got {a.dtype.name}; compare first, e.g. x > 0")
        return fn(*arrays)

    return forward


logical_and = binary("LogicalAnd", _bool_only("LogicalAnd", np.logical_and), save="")
"""``tp.logical_and(x, y)``: elementwise "and" of two bool tensors (others raise ``TypeError``)."""
logical_or = binary("LogicalOr", _bool_only("LogicalOr", np.logical_or), save="")
"""``tp.logical_or(x, y)``: elementwise "or" of two bool tensors (others raise ``TypeError``)."""
logical_not = unary("LogicalNot", _bool_only("LogicalNot", np.logical_not), save="", dtypes="any")
"""``tp.logical_not(x)``: elementwise "not" of a bool tensor (others raise ``TypeError``)."""
for _name in (
    "Less",
    "LessEqual",
    "Greater",
    "GreaterEqual",
    "Equal",
    "NotEqual",
    "LogicalAnd",
    "LogicalOr",
    "LogicalNot",
):
    not_differentiable(_name)

# -- unary -------------------------------------------------------------------


def sigmoid_into(x: np.ndarray, out: np.ndarray) -> np.ndarray:
    """Writes the logistic sigmoid of ``x`` into ``out`` (the fused ops share it)."""
    # 1 / (1 + exp(-x)): exp overflows to inf for very negative x, which gives the right limit 0,
    # and unlike 0.5 + 0.5 tanh(x / 2) it keeps full relative precision for x < 0.
    with np.errstate(over="ignore"):
        np.negative(x, out=out)
        np.exp(out, out=out)
    out += 1
    np.reciprocal(out, out=out)
    return out


def _sigmoid(x: np.ndarray) -> np.ndarray:
    # an array also for 0-d input, so the in-place steps work
    return sigmoid_into(x, np.empty_like(x))


def _identity(x: np.ndarray) -> np.ndarray:
    return x  # arrays behind Tensors are never written, so sharing is safe


negative = unary("Neg", np.negative, save="", dtypes="numeric")
"""``tp.negative(x)``: ``-x`` elementwise."""
abs = unary("Abs", np.abs, save="x", dtypes="numeric")
"""``tp.abs(x)``: ``|x|`` elementwise; the gradient at 0 is 0."""
sign = unary("Sign", np.sign, save="", dtypes="numeric")
"""``tp.sign(x)``: -1, 0 or 1 elementwise; its gradient is zero."""
square = unary("Square", np.square, save="x", dtypes="numeric")
"""``tp.square(x)``: ``x * x`` elementwise."""
floor = unary("Floor", np.floor, save="")
"""``tp.floor(x)``: ``x`` rounded down elementwise (floats); no gradient."""
exp = unary("Exp", np.exp, save="out")
"""``tp.exp(x)``: ``e ** x`` elementwise (floats)."""
log = unary("Log", np.log, save="x")
"""``tp.log(x)``: the natural logarithm elementwise (floats)."""
log1p = unary("Log1p", np.log1p, save="x")
"""``tp.log1p(x)``: ``log(1 + x)`` elementwise, accurate for small ``x`` (floats)."""
sqrt = unary("Sqrt", np.sqrt, save="out")
"""``tp.sqrt(x)``: the square root elementwise (floats)."""
sin = unary("Sin", np.sin, save="x")
"""``tp.sin(x)``: the sine elementwise, in radians (floats)."""
cos = unary("Cos", np.cos, save="x")
"""``tp.cos(x)``: the cosine elementwise, in radians (floats)."""
tanh = unary("Tanh", np.tanh, save="out")
"""``tp.tanh(x)``: the hyperbolic tangent elementwise (floats)."""
sigmoid = unary("Sigmoid", _sigmoid, save="out")
"""``tp.sigmoid(x)``: the logistic function ``1 / (1 + exp(-x))`` elementwise (floats)."""
identity = unary("Identity", _identity, save="", dtypes="any")
"""``tp.identity(x)``: a new tensor with ``x``'s value; the gradient passes through."""
stop_gradient = unary("StopGradient", _identity, save="", dtypes="any")
"""``tp.stop_gradient(x)``: ``x``'s value, with no gradient flowing back through it."""


not_differentiable("Floor")
not_differentiable("StopGradient")


@register_gradient("Neg")
def _neg_grad(op: Op, dy: Tensor) -> Tensor:
    return -dy


@register_gradient("Abs")
def _abs_grad(op: Op, dy: Tensor) -> Tensor:
    return dy * sign(op.inputs[0])


@register_gradient("Sign")
def _sign_grad(op: Op, dy: Tensor) -> Tensor:
    return zeros_like_tensor(dy)


@register_gradient("Square")
def _square_grad(op: Op, dy: Tensor) -> Tensor:
    return dy * (2 * op.inputs[0])


@register_gradient("Exp")
def _exp_grad(op: Op, dy: Tensor) -> Tensor:
    return dy * op.outputs[0]


@register_gradient("Log")
def _log_grad(op: Op, dy: Tensor) -> Tensor:
    return dy / op.inputs[0]


@register_gradient("Log1p")
def _log1p_grad(op: Op, dy: Tensor) -> Tensor:
    return dy / (1 + op.inputs[0])


@register_gradient("Sqrt")
def _sqrt_grad(op: Op, dy: Tensor) -> Tensor:
    return dy / (2 * op.outputs[0])


@register_gradient("Sin")
def _sin_grad(op: Op, dy: Tensor) -> Tensor:
    return dy * cos(op.inputs[0])


@register_gradient("Cos")
def _cos_grad(op: Op, dy: Tensor) -> Tensor:
    return -dy * sin(op.inputs[0])


# TanhGrad and SigmoidGrad are their own ops (one recorded op, one wrapper call, instead of
# three), each computing what ``dy * (1 - out * out)`` and ``dy * (out * (1 - out))`` compute,
# step by step; their own gradients give the higher derivatives.


def _tanh_backprop(dy: np.ndarray, out: np.ndarray) -> np.ndarray:
    g = np.multiply(out, out, out=np.empty_like(out))  # an array also for 0-d inputs
    np.subtract(1, g, out=g)
    return np.multiply(dy, g, out=g)


def _sigmoid_backprop(dy: np.ndarray, out: np.ndarray) -> np.ndarray:
    g = np.subtract(1, out, out=np.empty_like(out))
    np.multiply(out, g, out=g)
    return np.multiply(dy, g, out=g)


_TANH_GRAD = OpDef("TanhGrad", _tanh_backprop, save="x y")
_SIGMOID_GRAD = OpDef("SigmoidGrad", _sigmoid_backprop, save="x y")


@register_gradient("Tanh")
def _tanh_grad(op: Op, dy: Tensor) -> Tensor:
    return execute(_TANH_GRAD, (dy, op.outputs[0]))


@register_gradient("TanhGrad")
def _tanh_grad_grad(op: Op, ddx: Tensor) -> tuple[Any, Any]:
    dy, out = op.inputs  # d/d dy: (1 - out^2); d/d out: -2 dy out
    need = op.needs_grad
    return (
        execute(_TANH_GRAD, (ddx, out)) if need[0] else None,
        ddx * (-2 * dy * out) if need[1] else None,
    )


@register_gradient("Sigmoid")
def _sigmoid_grad(op: Op, dy: Tensor) -> Tensor:
    return execute(_SIGMOID_GRAD, (dy, op.outputs[0]))


@register_gradient("SigmoidGrad")
def _sigmoid_grad_grad(op: Op, ddx: Tensor) -> tuple[Any, Any]:
    dy, out = op.inputs  # d/d dy: out (1 - out); d/d out: dy (1 - 2 out)
    need = op.needs_grad
    return (
        execute(_SIGMOID_GRAD, (ddx, out)) if need[0] else None,
        ddx * (dy * (1 - 2 * out)) if need[1] else None,
    )


@register_gradient("Identity")
def _identity_grad(op: Op, dy: Tensor) -> Tensor:
    return dy


def zeros_like_tensor(t: Tensor) -> Tensor:
    """Zeros of ``t``'s shape and dtype (a constant, not recorded)."""
    return Tensor(np.zeros(t.shape, t.dtype))


# -- ops with attributes or several inputs -----------------------------------

_CAST = OpDef("Cast", lambda x, dtype: x.astype(dtype, copy=False), save="")


def cast(x: Any, dtype: _dt.DTypeLike) -> Tensor:
    """``x`` converted to ``dtype``; the gradient flows only between floating dtypes."""
    x = as_tensor(x)
    dtype = _dt.as_dtype(dtype)
    if x.dtype == dtype:
        # A Variable gets a Tensor of its current value, never a live alias of itself.
        return identity(x) if x._is_variable else x
    return execute(_CAST, (x,), {"dtype": dtype})


@register_gradient("Cast")
def _cast_grad(op: Op, dy: Tensor) -> Any:
    if op.input_dtypes[0].kind != "f" or dy.dtype.kind != "f":
        return None
    return cast(dy, op.input_dtypes[0])


_SELECT = OpDef("Select", np.where, save="x")


def where(condition: Any, x: Any = None, y: Any = None) -> Tensor:
    """Elements of ``x`` where ``condition`` is true, else of ``y`` (broadcasting).

    With only ``condition``, the int64 coordinates of its true elements, as TensorFlow.
    """
    condition = as_tensor(condition)
    if condition.dtype != _dt.bool:
        raise TypeError(f"where: condition must be a bool tensor, got {condition.dtype.name}")
    if x is None and y is None:
        return Tensor(np.argwhere(condition._value).astype(np.int64))
    if x is None or y is None:
        raise ValueError("where: give both x and y, or neither")
    x, y = binary_operands("Select", x, y)
    return execute(_SELECT, (condition, x, y))


@register_gradient("Select")
def _select_grad(op: Op, dy: Tensor) -> tuple[Any, Any, Any]:
    condition = op.inputs[0]
    zero = zeros_like_tensor(dy)
    return (
        None,
        where(condition, dy, zero) if op.needs_grad[1] else None,
        where(condition, zero, dy) if op.needs_grad[2] else None,
    )


def clip_by_value(t: Any, clip_value_min: Any, clip_value_max: Any) -> Tensor:
    """``t`` with its values limited to ``[clip_value_min, clip_value_max]``."""
    t = as_tensor(t)
    return minimum(maximum(t, clip_value_min), clip_value_max)


def _add_n(*xs: np.ndarray) -> np.ndarray:
    total = xs[0].copy()
    for x in xs[1:]:
        total += x  # in place: ``total`` is our own fresh array
    return total


_ADD_N = OpDef("AddN", _add_n, save="")


def add_n(inputs: list[Any]) -> Tensor:
    """The elementwise sum of a list of tensors of one shape and dtype."""
    if not inputs:
        raise ValueError("add_n needs at least one tensor")
    tensors = same_dtype_tensors("AddN", inputs)
    shapes = {t.shape for t in tensors}
    if len(shapes) > 1:
        raise ValueError(f"add_n needs tensors of one shape, got shapes {sorted(shapes)}")
    return execute(_ADD_N, tensors)


@register_gradient("AddN")
def _add_n_grad(op: Op, dy: Tensor) -> tuple[Tensor, ...]:
    return (dy,) * len(op.input_ids)


__all__ = [
    "abs",
    "add",
    "add_n",
    "cast",
    "clip_by_value",
    "cos",
    "divide",
    "equal",
    "exp",
    "floor",
    "floordiv",
    "floormod",
    "greater",
    "greater_equal",
    "identity",
    "less",
    "less_equal",
    "log",
    "log1p",
    "logical_and",
    "logical_not",
    "logical_or",
    "maximum",
    "minimum",
    "multiply",
    "negative",
    "not_equal",
    "pow",
    "sigmoid",
    "sign",
    "sin",
    "sqrt",
    "square",
    "stop_gradient",
    "subtract",
    "tanh",
    "where",
]
