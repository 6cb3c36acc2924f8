"""The op registry: how an op runs, records itself, and finds its gradient.

Every op, built in or a user's ``@tp.primitive``, is an ``OpDef`` run by
``execute`` (or by the lean ``unary``/``binary`` wrappers for elementwise
ops): compute on ndarrays, wrap the results, record on the active tapes.
Gradients live in a separate table keyed by op name, filled by
``register_gradient``; ``not_differentiable`` declares the ops without one.
"""

from __future__ import annotations

import functools
import inspect
import operator
from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np

from tapefit.core import dtypes as _dt
from tapefit.core.record import _NO_ATTRS, active_tapes, record_lean, record_op
from tapefit.core.tensor import Tensor, _traces, _wrap, as_tensor, weak_operand

F = TypeVar("F", bound=Callable[..., Any])
_value_of = operator.attrgetter("_value")
GradFn = Callable[..., Any]

_GRADIENTS: dict[str, GradFn] = {}
_NOT_DIFFERENTIABLE: set[str] = set()
# Op name -> the index of its first working output (see working_outputs).
_WORKING: dict[str, int] = {}
# Each OpDef's forward function -> the op's name: a trace writes down forward functions, and
# exporters (tapefit.export) read the names back with ``forward_op_name``.
_OP_NAMES: dict[Any, str] = {}


def register_gradient(op_name: str) -> Callable[[F], F]:
    """Registers ``grad_fn(op, *output_grads)`` as the gradient of ``op_name``.

    ``grad_fn`` returns one gradient (or ``None``) per input of the op, built
    from tapefit ops so that it can be differentiated again.
    """
    if not isinstance(op_name, str) or not op_name:
        raise TypeError(f"register_gradient needs an op name (a string), got {op_name!r}")

    def decorator(grad_fn: F) -> F:
        if op_name in _GRADIENTS or op_name in _NOT_DIFFERENTIABLE:
            raise KeyError(f"a gradient for op {op_name!r} is already registered")
        _GRADIENTS[op_name] = grad_fn
        return grad_fn

    return decorator


def working_outputs(op_name: str, first: int) -> None:
    """Declares that ``op_name``'s outputs from index ``first`` on are working arrays its
    gradient reads (saved state, not results): when nothing differentiates them, the tape
    passes ``None`` as their gradients instead of arrays of zeros."""
    _WORKING[op_name] = first


def not_differentiable(op_name: str) -> None:
    """Declares that ``op_name`` has no gradient: its inputs get ``None``, without error."""
    if op_name in _GRADIENTS:
        raise KeyError(f"op {op_name!r} already has a registered gradient")
    _NOT_DIFFERENTIABLE.add(op_name)


def is_not_differentiable(op_name: str) -> bool:
    """Whether ``op_name`` was declared with ``not_differentiable``."""
    return op_name in _NOT_DIFFERENTIABLE


def forward_op_name(forward: Callable[..., Any]) -> str | None:
    """The name of the op whose forward function is ``forward`` (``None`` if no op has it)."""
    return _OP_NAMES.get(forward)


def has_gradient(op_name: str) -> bool:
    """Whether ``op_name`` has a registered gradient function."""
    return op_name in _GRADIENTS


def get_gradient(op_name: str) -> GradFn | None:
    """The gradient function of ``op_name``; ``None`` for a non-differentiable op.

    Raises:
        LookupError: the op has neither a gradient nor a non-differentiable declaration.
    """
    grad_fn = _GRADIENTS.get(op_name)
    if grad_fn is None and op_name not in _NOT_DIFFERENTIABLE:
        raise LookupError(f"gradient registry has no entry for: {op_name}")
    return grad_fn


class OpDef:
    """An op's name, its NumPy forward function and what its gradient needs saved.

    Args:
        name: the registry name.
        forward: ``forward(*arrays, **attrs)`` returning an ndarray or a tuple of them.
        save: which values the gradient reads: input names ``"x"``, ``"y"``, ``"z"``
            (inputs 0, 1, 2), ``"inputs"`` for every input, ``"out"`` for the outputs,
            or ``"all"``.
    """

    __slots__ = ("name", "forward", "save_inputs", "save_outputs")

    def __init__(self, name: str, forward: Callable[..., Any], save: str = "all") -> None:
        self.name = name
        self.forward = forward
        _OP_NAMES.setdefault(forward, name)
        parts = set(save.replace(",", " ").split())
        self.save_outputs = "out" in parts or "all" in parts
        indices = tuple(i for i, n in enumerate("xyz") if n in parts)
        self.save_inputs: bool | tuple[int, ...] = True if parts & {"all", "inputs"} else indices

    def __repr__(self) -> str:
        return f"<OpDef {self.name}>"


def _op_error(name: str, inputs: tuple[Tensor, ...], error: Exception) -> Exception:
    shapes = ", ".join(str(t.shape) for t in inputs)
    dtypes = ", ".join(t.dtype.name for t in inputs)
    message = f"{name}: {error} (input shapes {shapes}; dtypes {dtypes})"
    try:
        return type(error)(message)
    except TypeError:  # exception types with other constructors
        return ValueError(message)


def execute(opdef: OpDef, inputs: tuple[Tensor, ...], attrs: dict[str, Any] = _NO_ATTRS) -> Any:
    """Runs ``opdef`` on Tensors and records it; returns a Tensor or a tuple of them."""
    try:
        result = opdef.forward(*map(_value_of, inputs), **attrs)
    except (ValueError, TypeError, IndexError) as error:
        raise _op_error(opdef.name, inputs, error) from error
    if isinstance(result, (tuple, list)):
        outputs = tuple([_wrap(r) for r in result])
    else:
        outputs = (_wrap(result),)
    if active_tapes:
        record_op(opdef.name, inputs, outputs, attrs, opdef.save_inputs, opdef.save_outputs)
    if _traces:  # tp.function writes the NumPy call down
        _traces[-1].op(
            opdef.forward,
            inputs,
            attrs,
            outputs if len(outputs) > 1 or isinstance(result, (tuple, list)) else outputs[0],
        )
    return outputs if isinstance(result, (tuple, list)) else outputs[0]


def check_same_dtype(name: str, tensors: tuple[Tensor, ...] | list[Tensor]) -> None:
    """Raises the dtype-mix ``TypeError`` unless all tensors share one dtype."""
    first = tensors[0]._value.dtype
    for t in tensors:
        if t._value.dtype != first:
            raise _dt.mix_error(name, [first, t._value.dtype])


def same_dtype_tensors(name: str, values: Any) -> tuple[Tensor, ...]:
    """``values`` as Tensors of one dtype, for ops taking a list (concat, stack, add_n).

    Python numbers and lists are weakly typed and adopt the first Tensor's dtype, as
    in binary ops; ndarrays and Tensors keep theirs and must match.
    """
    strong = (Tensor, np.ndarray, np.generic)
    like = next((v for v in values if isinstance(v, Tensor)), None)
    tensors = tuple(
        [
            as_tensor(v) if like is None or isinstance(v, strong) else weak_operand(v, like, name)
            for v in values
        ]
    )
    check_same_dtype(name, tensors)  # names the dtypes in the order given
    return tensors


_FLOATS = frozenset([_dt.float16, _dt.float32, _dt.float64])
_NUMERIC = _FLOATS | frozenset(np.dtype(t) for t in "bBhHiIlLqQ")  # every int, no bool
_ALLOWED = {"float": _FLOATS, "numeric": _NUMERIC, "any": None}
_BOOL = _dt.bool
_FLOAT32 = _dt.float32
_new = object.__new__
_ndarray = np.ndarray
_asarray = np.asarray


def unary(
    name: str, forward: Callable[[np.ndarray], np.ndarray], save: str, dtypes: str = "float"
) -> Callable[[Any], Tensor]:
    """An elementwise one-input op, on the lean path the hot ops need.

    The body is ``execute`` unrolled for one input: an op costs little more than
    its NumPy call when no tape is active. ``dtypes`` is ``"float"``, ``"numeric"``
    (no bool, as TensorFlow's arithmetic) or ``"any"``.
    """
    opdef = OpDef(name, forward, save)
    save_inputs, save_outputs = opdef.save_inputs, opdef.save_outputs
    allowed = _ALLOWED[dtypes]

    def op(x: Any) -> Tensor:
        if x.__class__ is not Tensor:
            x = as_tensor(x)
        value = x._value
        # float32 first: NumPy's built-in dtypes are singletons, and `is` costs less than hashing.
        if value.dtype is not _FLOAT32 and allowed is not None and value.dtype not in allowed:
            raise TypeError(
                f"{name} needs a {'floating' if allowed is _FLOATS else 'numeric'} tensor, got "
                f"{value.dtype.name}; use tp.cast(x, tp.float32)"
            )
        result = forward(value)
        out = _new(Tensor)
        out._value = result if result.__class__ is _ndarray else _asarray(result)
        if active_tapes:
            record_lean(name, (x,), out, save_inputs, save_outputs)
        if _traces:
            _traces[-1].op(forward, (x,), _NO_ATTRS, out)
        return out

    op.__name__ = op.__qualname__ = name
    return op


def binary_operands(name: str, x: Any, y: Any) -> tuple[Tensor, Tensor]:
    """Converts the operands of a binary op by the weak-typing rules and checks their dtypes."""
    if isinstance(x, Tensor):
        y = weak_operand(y, x, name)
    elif isinstance(y, Tensor):
        x = weak_operand(x, y, name)
    else:
        x = as_tensor(x)
        y = weak_operand(y, x, name)
    if x._value.dtype != y._value.dtype:
        raise _dt.mix_error(name, [x._value.dtype, y._value.dtype])
    return x, y


def binary(
    name: str, forward: Callable[[np.ndarray, np.ndarray], np.ndarray], save: str, numeric: bool = False
) -> Callable[[Any, Any], Tensor]:
    """An elementwise two-input op with NumPy broadcasting and weak Python scalars (lean path).

    ``numeric=True`` rejects bool tensors, as TensorFlow's arithmetic does.
    """
    opdef = OpDef(name, forward, save)
    save_inputs, save_outputs = opdef.save_inputs, opdef.save_outputs
    if save_inputs == (0, 1):
        save_inputs = True  # both: the record keeps the inputs' tuple as it is
    rejected = _BOOL if numeric else None

    def op(x: Any, y: Any) -> Tensor:
        if (
            x.__class__ is not Tensor
            or y.__class__ is not Tensor
            or x._value.dtype is not y._value.dtype
            or x._value.dtype is rejected
        ):
            x, y = binary_operands(name, x, y)
            if x._value.dtype is rejected:
                raise TypeError(f"{name} does not take bool tensors; use tp.logical_and/or or tp.cast")
        try:
            result = forward(x._value, y._value)
        except ValueError as error:
            raise _op_error(name, (x, y), error) from error
        out = _new(Tensor)
        out._value = result if result.__class__ is _ndarray else _asarray(result)
        if active_tapes:
            record_lean(name, (x, y), out, save_inputs, save_outputs)
        if _traces:
            _traces[-1].op(forward, (x, y), _NO_ATTRS, out)
        return out

    op.__name__ = op.__qualname__ = name
    return op


def primitive(op_name: str) -> Callable[[F], F]:
    """Turns a function over ndarrays into a recorded op named ``op_name``.

    Positional arguments are converted to Tensors and arrive as ndarrays;
    keyword arguments are kept as the op's ``attrs``, together with the
    defaults of the keyword parameters not given (as TensorFlow ops carry every
    attr), so a gradient can read ``op.attrs[name]``. The ndarray result (or
    tuple of results) comes back as Tensor(s). Register its gradient with
    ``register_gradient(op_name)``.
    """

    def decorator(fn: F) -> F:
        opdef = OpDef(op_name, fn, "all")
        defaults = [
            (i, p.name, p.default, p.kind is p.KEYWORD_ONLY)
            for i, p in enumerate(inspect.signature(fn).parameters.values())
            if p.default is not p.empty and p.kind is not p.POSITIONAL_ONLY
        ]

        @functools.wraps(fn)
        def op(*args: Any, **attrs: Any) -> Any:
            unset = {n: d for i, n, d, kw in defaults if (kw or i >= len(args)) and n not in attrs}
            if unset:
                attrs = {**unset, **attrs}
            return execute(opdef, tuple([as_tensor(a) for a in args]), attrs)

        return op  # type: ignore[return-value]

    return decorator
