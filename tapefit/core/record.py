"""What an op leaves on the active tapes: the thread-local tape stack and the ``Op`` record."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from tapefit.core.tensor import Tensor, _next_id

if TYPE_CHECKING:
    import numpy as np

    from tapefit.core.tape import GradientTape

_NO_ATTRS: dict[str, Any] = {}


class _TapeStack(threading.local):
    def __init__(self) -> None:
        self.tapes: list[GradientTape] = []


# The one source of truth: this thread's active tapes, innermost last. Only push_tape,
# pop_tape and pause_recording change it (and keep ``active_tapes`` in step).
_state = _TapeStack()
# The tapes active in any thread, a mirror of every thread's ``_state.tapes``. Ops test this
# plain list first (cheaper than the thread-local stack): with no active tape, that test is
# all they pay.
active_tapes: list[GradientTape] = []


def push_tape(tape: GradientTape) -> None:
    """Makes ``tape`` the innermost active tape of this thread."""
    _state.tapes.append(tape)
    active_tapes.append(tape)


def pop_tape(tape: GradientTape) -> None:
    """Removes ``tape`` from the active tapes (also when tapes exit out of order)."""
    if tape in _state.tapes:
        _state.tapes.remove(tape)
    if tape in active_tapes:
        active_tapes.remove(tape)


def recording() -> bool:
    """Whether an active tape records right now (so a gradient term may itself be differentiated)."""
    return any(not tape._paused for tape in active_tapes)


def current_tapes() -> tuple[GradientTape, ...]:
    """The tapes recording in this thread, innermost last (a snapshot)."""
    return tuple(_state.tapes)


@contextlib.contextmanager
def pause_recording() -> Iterator[None]:
    """Suspends every tape active in this thread inside the ``with`` block.

    Ops run inside are recorded by no tape that was active when the block began; a
    tape entered inside the block records as usual. Optimizer updates and a
    ``custom_gradient`` function's forward pass run under it.
    """
    tapes = _state.tapes
    if not tapes:
        yield
        return
    _state.tapes = []
    for tape in tapes:
        active_tapes.remove(tape)
    try:
        yield
    finally:
        # A tape exited inside the block (out of order) stays exited.
        resumed = [tape for tape in tapes if tape._active]
        _state.tapes[:0] = resumed
        active_tapes.extend(resumed)


class Op:
    """One recorded op, as a gradient function sees it.

    Attributes:
        type: the op's registered name, for example ``"MatMul"``.
        inputs: the input Tensors the gradient needs (others are ``None``).
        outputs: the output Tensors the gradient needs (others are ``None``).
        attrs: the op's non-tensor arguments.
        needs_grad: per input, whether any tape may ask for its gradient.
    """

    __slots__ = (
        "type",
        "inputs",
        "outputs",
        "attrs",
        "input_ids",
        "output_ids",
        "input_shapes",
        "input_dtypes",
        "output_shapes",
        "output_dtypes",
        "needs_grad",
        "grad_fn",
        "custom",
    )

    type: str
    # Tensors, with None where the op saves none: a gradient function reads only those its op
    # saves, so the elements are Any rather than Tensor | None (no check in every gradient).
    inputs: tuple[Any, ...]
    outputs: tuple[Any, ...]
    attrs: dict[str, Any]
    input_ids: tuple[int, ...]
    output_ids: tuple[int, ...]
    input_shapes: tuple[tuple[int, ...], ...]
    input_dtypes: tuple[np.dtype[Any], ...]
    output_shapes: tuple[tuple[int, ...], ...]
    output_dtypes: tuple[np.dtype[Any], ...]
    needs_grad: tuple[bool, ...]
    grad_fn: Callable[..., Any] | None
    custom: bool

    def __init__(
        self,
        type: str,
        inputs: tuple[Tensor, ...],
        outputs: tuple[Tensor, ...],
        attrs: dict[str, Any],
        save_inputs: bool | tuple[int, ...],
        save_outputs: bool,
        needs_grad: tuple[bool, ...],
        grad_fn: Callable[..., Any] | None = None,
    ) -> None:
        self.type = type
        # The general form (several outputs, or several tapes): most records are made by
        # _one_output_op, which fills these slots with fewer steps.
        self.input_ids, self.input_shapes, self.input_dtypes = _specs(inputs)
        self.inputs = _saved(inputs, save_inputs)
        self.output_ids, self.output_shapes, self.output_dtypes = _specs(outputs)
        self.outputs = outputs if save_outputs else (None,) * len(outputs)
        self.attrs = attrs
        self.needs_grad = needs_grad
        self.grad_fn = grad_fn
        self.custom = grad_fn is not None

    def __repr__(self) -> str:
        return f"<tp.Op {self.type} inputs={self.input_shapes} outputs={self.output_shapes}>"


_new = object.__new__
_NONE1 = (None,)


def _one_output_op(
    name: str,
    inputs: tuple[Tensor, ...],
    out: Tensor,
    attrs: dict[str, Any],
    save_inputs: bool | tuple[int, ...],
    save_outputs: bool,
    needs: tuple[bool, ...],
    grad_fn: Callable[..., Any] | None,
) -> Op:
    """``Op(...)`` for one output (which has its id), as ``record_op`` makes most records.

    It fills the slots without ``__init__``'s call and branches: this is the cost of
    recording an op, and the one- and two-input ops are most of a step's records.
    """
    op = _new(Op)
    op.type = name
    if len(inputs) == 2 and (save_inputs is True or not save_inputs):
        x, y = inputs
        value, other = x._value, y._value
        op.input_ids = (x._id, y._id)  # an unwatched input may have no id yet
        op.input_shapes, op.input_dtypes = (value.shape, other.shape), (value.dtype, other.dtype)
        if not save_inputs:
            op.inputs = (None, None)
        elif x._is_variable or y._is_variable:
            op.inputs = (_snapshot(x) if x._is_variable else x, _snapshot(y) if y._is_variable else y)
        else:
            op.inputs = inputs
    elif len(inputs) == 1:
        x = inputs[0]
        value = x._value
        op.input_ids, op.input_shapes, op.input_dtypes = (x._tid,), (value.shape,), (value.dtype,)
        if save_inputs is True or (save_inputs and 0 in save_inputs):
            op.inputs = (_snapshot(x),) if x._is_variable else inputs
        else:
            op.inputs = _NONE1
    else:
        op.input_ids, op.input_shapes, op.input_dtypes = _specs(inputs)
        op.inputs = _saved(inputs, save_inputs)
    value = out._value
    op.output_ids, op.output_shapes, op.output_dtypes = (out._tid,), (value.shape,), (value.dtype,)
    op.outputs = (out,) if save_outputs else _NONE1
    op.attrs = attrs
    op.needs_grad = needs
    op.grad_fn = grad_fn
    op.custom = grad_fn is not None
    return op


def _saved(inputs: tuple[Tensor, ...], save_inputs: bool | tuple[int, ...]) -> tuple[Any, ...]:
    """The inputs a record keeps: those ``save_inputs`` names, Variables as snapshots."""
    if save_inputs is True:
        for t in inputs:
            if t._is_variable:
                return tuple([_snapshot(t) if t._is_variable else t for t in inputs])
        return inputs
    if save_inputs:
        return tuple(
            [
                (_snapshot(t) if t._is_variable else t) if i in save_inputs else None
                for i, t in enumerate(inputs)
            ]
        )
    return (None,) * len(inputs)


def _specs(tensors: tuple[Tensor, ...]) -> tuple[tuple[int, ...], tuple[Any, ...], tuple[Any, ...]]:
    """Ids, shapes and dtypes in one pass: this runs for every recorded op."""
    if len(tensors) == 1:  # most ops' outputs and the unary ops' inputs: no lists to build
        t = tensors[0]
        value = t._value
        return (t._id,), (value.shape,), (value.dtype,)
    ids, shapes, dtypes = [], [], []
    for t in tensors:
        value = t._value
        ids.append(t._id)
        shapes.append(value.shape)
        dtypes.append(value.dtype)
    return tuple(ids), tuple(shapes), tuple(dtypes)


def _snapshot(t: Tensor) -> Tensor:
    """A Variable's current value under the Variable's id: later assigns do not change it."""
    s = Tensor.__new__(Tensor)
    s._value = t._value
    s._tid = t._id
    return s


def record_lean(
    name: str,
    inputs: tuple[Tensor, ...],
    out: Tensor,
    save_inputs: bool | tuple[int, ...],
    save_outputs: bool,
) -> None:
    """``record_op`` for an op of one or two inputs, one output and no attrs (the elementwise
    wrappers): with this thread's one tape active, one call records it."""
    tapes = _state.tapes
    if len(tapes) != 1:
        return record_op(name, inputs, (out,), _NO_ATTRS, save_inputs, save_outputs)
    tape = tapes[0]
    if tape._paused:
        return None
    watched = tape._watched
    x = inputs[0]
    x_in = getattr(x, "_tid", 0) in watched or (x._is_variable and tape._watches(x))
    if len(inputs) == 1:
        if not x_in:
            return None
        needs: tuple[bool, ...] = _FLOAT_NEEDS if x._value.dtype.kind == "f" else _INT_NEEDS
    else:
        y = inputs[1]
        y_in = getattr(y, "_tid", 0) in watched or (y._is_variable and tape._watches(y))
        if not (x_in or y_in):
            return None
        needs = (x_in and x._value.dtype.kind == "f", y_in and y._value.dtype.kind == "f")
    out._tid = tid = _next_id()
    tape._entries.append(_one_output_op(name, inputs, out, _NO_ATTRS, save_inputs, save_outputs, needs, None))
    watched.add(tid)
    return None


_FLOAT_NEEDS, _INT_NEEDS = (True,), (False,)


def record_op(
    name: str,
    inputs: tuple[Tensor, ...],
    outputs: tuple[Tensor, ...],
    attrs: dict[str, Any],
    save_inputs: bool | tuple[int, ...],
    save_outputs: bool,
    grad_fn: Callable[..., Any] | None = None,
) -> None:
    """Records one executed op on every active tape that watches one of its inputs."""
    tapes = _state.tapes
    if len(tapes) == 1 and len(outputs) == 1:  # the common case, with fewer steps
        tape = tapes[0]
        if tape._paused:
            return
        watched = tape._watched
        if len(inputs) == 1:
            x = inputs[0]
            if not (getattr(x, "_tid", 0) in watched or (x._is_variable and tape._watches(x))):
                return
            needs: Any = (x._value.dtype.kind == "f",)
        else:
            needs = None
            for i, t in enumerate(inputs):  # as in the loop below
                if getattr(t, "_tid", 0) in watched or (t._is_variable and tape._watches(t)):
                    if needs is None:
                        needs = [False] * len(inputs)
                    needs[i] = t._value.dtype.kind == "f"
            if needs is None:
                return
            needs = tuple(needs)
        out = outputs[0]
        out._tid = tid = _next_id()
        tape._entries.append(
            _one_output_op(name, inputs, out, attrs, save_inputs, save_outputs, needs, grad_fn)
        )
        watched.add(tid)
        return
    hit: list[GradientTape] = []
    needs = None
    for tape in tapes:
        if tape._paused:
            continue
        watched = tape._watched
        found = False
        for i, t in enumerate(inputs):
            # A Tensor with no id yet was never watched: reading the id through the property
            # would give one to every unwatched input. _watches also auto-watches a trainable
            # Variable read here.
            if getattr(t, "_tid", 0) in watched or (t._is_variable and tape._watches(t)):
                found = True
                if needs is None:
                    needs = [False] * len(inputs)
                needs[i] = needs[i] or t._value.dtype.kind == "f"
        if found:
            hit.append(tape)
    if hit:
        for t in outputs:
            t._tid = _next_id()  # outputs are fresh: give their ids here, not through the property
        op = Op(name, inputs, outputs, attrs, save_inputs, save_outputs, tuple(needs), grad_fn)
        for tape in hit:
            tape._entries.append(op)
            tape._watched.update(op.output_ids)
