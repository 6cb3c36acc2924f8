"""Capture: what a ``tp.function`` trace writes down while the traced function runs eagerly.

A ``Trace`` records every NumPy call the ops make, in order, as instructions of a program:
each op's forward function with the arrays it read (``OP``), each read of a Variable
(``READ``), each ``assign*`` (``ASSIGN``), each random draw (``DRAW``) and each *host call*
(``HOST``: a Python callable that must run again on every call, such as an optimizer's
update), and the bounds of a region a guard checks mid-call (``GUARD`` ... ``END``).
Arrays are followed by identity: each array a trace sees gets a *slot*. Planning the
replay's memory is ``planning``'s job, writing it out as Python is ``emit``'s, and caching
programs per signature is ``function``'s.

Every instruction is a tuple ``(kind, a, b, c, d)``:

- ``OP``: ``(OP, forward, input slots, attrs, output slot or tuple of slots)``
- ``READ``: ``(READ, variable, slot, None, None)``
- ``ASSIGN``: ``(ASSIGN, variable, method name, value slot, whether to wrap it as a Tensor)``
- ``DRAW``: ``(DRAW, sample, slot, None, None)``
- ``HOST``: ``(HOST, fn, (structure, template), result slot or None, scratch or None)``
- ``GUARD``: ``(GUARD, guard index, (structure, template), fallback, None)``
- ``END``: ``(END, None, None, None, None)``
- ``UPDATE`` (made by ``fuse``): ``(UPDATE, variable, (kernel, method), input slots, None)``
"""

from __future__ import annotations

import contextlib
import linecache
import os
import sys
import types
from collections.abc import Callable, Iterator
from threading import get_ident
from typing import Any

import numpy as np

from tapefit.core import nest
from tapefit.core import tensor as _tensor
from tapefit.core.tensor import Tensor, Variable

__all__ = [
    "ASSIGN",
    "DRAW",
    "END",
    "GUARD",
    "HOST",
    "OP",
    "READ",
    "UPDATE",
    "Ref",
    "Trace",
    "draw",
    "guard",
    "guarded",
    "host_call",
    "tracing",
    "unchanged",
]

# The trace being written (at most one), shared with tensor.py and registry.py, which call
# its ``op``, ``assign`` and ``value_read``. Ops test this list's truthiness: with no trace,
# that test is all tracing costs them.
traces: list[Any] = _tensor._traces

_CORE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep

# Instruction kinds of a program (GUARD and END bound a ``guarded`` region; ``fuse`` makes UPDATE).
OP, READ, ASSIGN, DRAW, HOST, GUARD, END, UPDATE = range(8)


def tracing() -> bool:
    """Whether this thread is writing a ``tp.function`` trace (and not paused for a host call):
    another thread's trace does not record this thread's ops."""
    return bool(traces) and traces[-1].thread == get_ident()


class Ref:
    """A placeholder for the array in one slot, in the arguments of a host call."""

    __slots__ = ("slot",)

    def __init__(self, slot: int) -> None:
        self.slot = slot


class Trace:
    """The program being written while the traced function runs eagerly."""

    def __init__(self) -> None:
        self.code: list[tuple[Any, ...]] = []
        self.init: list[Any] = []  # constants at their slots, None for the values of a call
        self.slot_of: dict[int, int] = {}  # id(array) -> the slot holding it
        # Every array seen stays alive until the trace ends, so that no id is reused.
        self.keep: list[Any] = []
        self.failure: tuple[str, int, str] | None = None
        self.thread = get_ident()  # other threads' ops are not this function's
        # Per op output slot: (shape, dtype) when the array was C-contiguous and its own
        # memory, else None; and the outputs that may be views of their op's inputs.
        self.layout: dict[int, tuple[tuple[int, ...], np.dtype] | None] = {}
        self.views: set[int] = set()
        self.guards: list[Callable[[], bool]] = []  # see ``guard``
        # Per host call result slot: the function, and the result's shape and dtype when traced.
        self.hosted: dict[int, tuple[Callable[..., Any], tuple[int, ...], np.dtype]] = {}
        # Per slot holding an array: its shape and dtype when traced (what ``fuse`` reads).
        self.shapes: dict[int, tuple[tuple[int, ...], np.dtype]] = {}

    def new_slot(self, array: Any) -> int:
        slot = len(self.init)
        self.init.append(None)
        self.slot_of[id(array)] = slot
        self.keep.append(array)
        if array.__class__ is np.ndarray:
            self.shapes[slot] = (array.shape, array.dtype)
        return slot

    def const(self, value: Any) -> int:
        slot = len(self.init)
        self.init.append(value)
        self.keep.append(value)
        if value.__class__ is np.ndarray:
            self.shapes[slot] = (value.shape, value.dtype)
        return slot

    def ref(self, t: Tensor) -> int:
        """The slot of ``t``'s array: a Variable is read here, in program order."""
        if t._is_variable and get_ident() == self.thread:
            value = t._value
            slot = self.new_slot(value)
            self.code.append((READ, t, slot, None, None))
            return slot
        value = t._value
        known = self.slot_of.get(id(value))
        return self.const(value) if known is None else known

    def array_ref(self, value: Any) -> int:
        slot = self.slot_of.get(id(value))
        return self.const(value) if slot is None else slot

    def is_dynamic(self, t: Tensor) -> bool:
        return t._is_variable or id(t._value) in self.slot_of

    def op(self, forward: Callable[..., Any], inputs: tuple[Tensor, ...], attrs: Any, outputs: Any) -> None:
        """Writes down one executed op: ``forward`` with its inputs' arrays and ``attrs``.

        ``outputs`` is the op's output Tensor, or a tuple of them for a multi-output op.
        """
        if get_ident() != self.thread:
            return
        if attrs:
            self._check_attrs(attrs)
        slots = tuple([self.ref(t) for t in inputs])
        if isinstance(outputs, tuple):
            out: Any = tuple([self.new_slot(t._value) for t in outputs])
            # Conservative: a multi-output op whose outputs are not all fresh may view its inputs.
            if any(self._may_view(t._value, inputs) for t in outputs):
                self.views.update(out)
        else:
            value = outputs._value
            out = self.new_slot(value)
            if self._may_view(value, inputs):
                self.views.add(out)
            elif value.flags.c_contiguous:
                self.layout[out] = (value.shape, value.dtype)
        self.code.append((OP, forward, slots, attrs, out))

    @staticmethod
    def _may_view(value: np.ndarray, inputs: tuple[Tensor, ...]) -> bool:
        """Whether ``value`` may share memory with an input: a view of anything (``base`` set:
        reshape, transpose, slices, ``broadcast_to``, or a view of a temporary) or an input
        returned as it is. Conservative on purpose: a false "view" only keeps a buffer longer."""
        return value.base is not None or any(value is t._value for t in inputs)

    def assign(self, variable: Variable, method: str, value: Any) -> None:
        """Writes down ``variable.<method>(value)``: replays call it with the replay's value."""
        if get_ident() != self.thread:
            return
        if isinstance(value, Tensor):
            slot, wrap = self.ref(value), True
        elif isinstance(value, np.ndarray):
            slot, wrap = self.array_ref(value), False
        else:
            slot, wrap = self.const(value), False
        self.code.append((ASSIGN, variable, method, slot, wrap))

    def _check_attrs(self, attrs: dict[str, Any]) -> None:
        """An op attribute holding a traced array (``x[index_tensor]``) would be frozen."""
        for value in attrs.values():
            for item in value if isinstance(value, tuple) else (value,):
                if isinstance(item, np.ndarray) and id(item) in self.slot_of and self.failure is None:
                    self.failure = _user_frame()
                    traces.clear()

    def value_read(self, t: Tensor) -> None:
        """Called when a tensor's value leaves for Python (``bool``, ``float``, ``numpy()``...)."""
        if self.failure is None and get_ident() == self.thread and self.is_dynamic(t):
            self.failure = _user_frame()
            traces.clear()  # the call goes on eagerly from here


def draw(sample: Callable[[], np.ndarray]) -> np.ndarray:
    """Returns ``sample()``, a random draw; a trace calls it again on every replay.

    ``sample`` must look its generator up when called (``tp.random.generator(seed)``), so
    that replays draw from the generators as they are then (after ``set_seed`` or a
    checkpoint's ``set_state``), in the same order as eager code.
    """
    array = sample()
    if traces and traces[-1].thread == get_ident():
        trace = traces[-1]
        trace.code.append((DRAW, sample, trace.new_slot(array), None, None))
    return array


def guard(check: Callable[[], bool]) -> None:
    """While a trace is written, makes every replay of its program call ``check()`` first.

    For code that traces a choice made on Python state that may change between calls (an
    optimizer's hyperparameters, say): ``check`` says whether that state still makes the
    same choice. When it returns False, the call traces the function again instead of
    replaying (before anything runs, so nothing happens twice). Outside a trace, does nothing.
    """
    if traces and traces[-1].thread == get_ident():
        traces[-1].guards.append(check)


@contextlib.contextmanager
def guarded(check: Callable[[], bool], fallback: Callable[..., Any], *args: Any) -> Iterator[None]:
    """``guard(check)`` for the code traced in the block, checked again where the block starts.

    A host call earlier in the same call may change what ``check`` watches after the call's
    entry check passed. So a replay with a host call before the block calls ``check()`` there
    too; when it fails, the replay skips the block's instructions and calls
    ``fallback(*args)`` instead (``args`` as ``host_call`` passes them), and the next call traces
    again. A replay without a host call before the block only checks at entry. Nothing after
    the block may read an array made in it (the fallback's branch never makes it).
    """
    if not traces or traces[-1].thread != get_ident():
        yield
        return
    trace = traces[-1]
    trace.guards.append(check)
    leaves = nest.flatten(list(args))
    template = [Ref(trace.ref(x)) if isinstance(x, Tensor) and not x._is_variable else x for x in leaves]
    structure = nest.pack_sequence_as(list(args), template)
    # The guard's index, not the check: each trace makes its own check, which the programs' comparison compares.
    trace.code.append((GUARD, len(trace.guards) - 1, (structure, template), fallback, None))
    try:
        yield
    finally:
        trace.code.append((END, None, None, None, None))


def unchanged(*attributes: tuple[Any, str]) -> Callable[[], bool]:
    """A check for ``guard``: whether each ``(object, name)`` attribute still holds the value
    it holds now (the same object, or an equal one). One generated expression, cheap enough
    to run on every call."""
    scope: dict[str, Any] = {}
    terms = []
    for k, (owner, name) in enumerate(attributes):
        if not name.isidentifier():
            raise ValueError(f"unchanged: {name!r} is not an attribute name")
        scope[f"o{k}"], scope[f"v{k}"] = owner, getattr(owner, name)
        terms.append(f"(o{k}.{name} is v{k} or o{k}.{name} == v{k})")
    exec(
        compile(f"def check():\n    return {' and '.join(terms) or 'True'}", "<tp.function guard>", "exec"),
        scope,
    )
    check: Callable[[], bool] = scope["check"]
    return check


def host_call(
    fn: Callable[..., Any], *args: Any, scratch: bool = False, replay: Callable[..., Any] | None = None
) -> Any:
    """Calls ``fn(*args)``; a trace records the call, and every replay calls ``fn`` again.

    For Python code that must run on every call of a ``tp.function`` with the values of that
    call, such as an optimizer's update (its learning rate follows ``iterations``). Tensors
    in ``args`` (also inside lists, tuples and dicts) are passed to the replays' calls with
    the replays' values; Variables and other objects are passed as they are. Nothing ``fn``
    does is traced. A Tensor ``fn`` returns is followed like an op's output.

    With ``scratch=True``, ``fn`` takes a keyword argument ``scratch``: a replay passes the
    arrays of those Tensors in ``args`` that nothing reads after the call (planned buffers
    whose value dies there, each behind exactly one Tensor), which ``fn`` may overwrite
    during the call and must not keep. The trace's own call, like an eager one, gets none.

    ``replay``: what replays call instead of ``fn``, with the same arguments (and ``scratch``),
    when ``fn`` checks what no replay can change (the arguments' structure, and the shapes
    and dtypes of their Tensors, which are the trace's): it does what ``fn`` does without
    those checks. It must give the same results as ``fn``, bit for bit.
    """
    if not traces or traces[-1].thread != get_ident():
        return fn(*args)
    trace = traces.pop()
    try:
        leaves = nest.flatten(list(args))
        template = [Ref(trace.ref(x)) if isinstance(x, Tensor) and not x._is_variable else x for x in leaves]
        result = fn(*args)
    finally:
        traces.append(trace)
    out = None
    if isinstance(result, Tensor) and not result._is_variable:
        out = trace.new_slot(result._value)
        trace.hosted[out] = (fn, result._value.shape, result._value.dtype)
    structure = nest.pack_sequence_as(list(args), template)  # holds no trace-time Tensor
    trace.code.append((HOST, fn if replay is None else replay, (structure, template), out, scratch or None))
    return result


def _user_frame() -> tuple[str, int, str]:
    """The innermost frame outside ``tapefit/core``: the line that asked for the value."""
    frame: types.FrameType | None = sys._getframe(1)
    while frame is not None and frame.f_code.co_filename.startswith(_CORE_DIR):
        frame = frame.f_back
    if frame is None:
        return "<unknown>", 0, ""
    filename, line = frame.f_code.co_filename, frame.f_lineno
    return filename, line, linecache.getline(filename, line).strip()
