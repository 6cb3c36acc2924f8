"""``tp.function``: trace a Python function once per input signature, then replay it.

Tracing runs the function eagerly (so the first call's results are the eager ones) while a
trace (``capture``) writes down every NumPy call the ops make, in order: each op's forward
function with the arrays it read, each read of a Variable, each ``assign*``, each random draw
and each *host call* (a Python callable that must run again on every call). The tape's
gradient computation is itself made of ops, so the backward pass is in the program too. A
confirmed program becomes one generated Python function of straight-line NumPy calls
(``emit``), and a replay calls it on the new inputs: no Tensors, no tapes, no dtype checks;
the same NumPy calls in the same order, so the results are the eager ones bit for bit.

A replay allocates (almost) nothing: the first replay of a program plans its buffers once
(``planning``). Nothing the caller can hold is a buffer: the results, ``assign`` values; the
arrays lent to host calls (the optimizer's gradients) are checked after the call and
replaced if kept. Ops on constants only are computed once.

A tensor's value turned into a Python value while tracing (``if x > 0:``, ``float(t)``,
``t.numpy()``) would freeze a value that changes from call to call: the trace detects it,
finishes that call eagerly, and the function runs eagerly from then on, with one warning
naming the line.

This module keeps the programs: one per signature, confirmed by a second trace, guarded by
the checks the trace asked for.
"""

from __future__ import annotations

import functools
import threading
import warnings
from collections.abc import Callable
from typing import Any, TypeVar, overload

import numpy as np

from tapefit.core import nest
from tapefit.core.capture import (
    Ref,
    Trace,
    draw,
    guard,
    guarded,
    host_call,
    traces,
    tracing,
    unchanged,
)
from tapefit.core.emit import compile_program
from tapefit.core.fuse import require_numba
from tapefit.core.marks import elementwise, replay_source, writes_into
from tapefit.core.planning import with_frees
from tapefit.core.record import active_tapes
from tapefit.core.tensor import Tensor, _wrap

__all__ = [
    "Function",
    "draw",
    "elementwise",
    "function",
    "guard",
    "guarded",
    "host_call",
    "replay_source",
    "tracing",
    "unchanged",
    "writes_into",
]

F = TypeVar("F", bound=Callable[..., Any])


class Program:
    """One traced signature: the instructions, the constants and where the inputs and outputs go."""

    __slots__ = (
        "code",
        "init",
        "inputs",
        "outputs",
        "structure",
        "objects",
        "layout",
        "views",
        "buffers",
        "guards",
        "hosted",
        "shapes",
        "fused",
        "_replay",
        "_unplanned",
        "_free",
    )

    def __init__(
        self,
        trace: Trace,
        inputs: list[int],
        outputs: list[Any],
        structure: Any,
        objects: list[Any],
        fused: bool = False,
    ):
        self.code = with_frees(trace.code, outputs)
        self.init = trace.init
        self.inputs = inputs
        self.outputs = outputs
        self.structure = structure
        self.objects = objects  # the arguments keyed by identity: keeps their ids valid
        self.layout = trace.layout
        self.views = trace.views
        self.buffers: list[np.ndarray] = []  # the planned replay's pool, made with it
        self.guards = tuple(trace.guards)
        self.hosted = trace.hosted
        self.shapes = trace.shapes
        self.fused = fused  # tp.function(jit_compile=True): the planned replay fuses (``fuse``)
        self._replay: Callable[..., list[Any]] | None = None  # made on the first run
        self._unplanned: Callable[..., list[Any]] | None = None  # for a call inside a call
        # One token: a run takes it (list.pop is atomic), so a second run at the same time
        # (re-entered from a host call, or another thread) finds none. Unlike a Lock, a list
        # deep-copies with the function.
        self._free: list[None] = [None]

    def run(self, arrays: list[np.ndarray]) -> Any:
        replay = self._replay
        if replay is None:
            replay = self._replay = compile_program(self, planned=True)
        try:
            self._free.pop()
        except IndexError:
            # A call while this program runs (a host call calling the function again, another
            # thread) would write into the buffers the running call is using: it allocates.
            if self._unplanned is None:
                self._unplanned = compile_program(self, planned=False)
            return self._unplanned(*arrays)
        try:
            return replay(*arrays)
        finally:
            self._free.append(None)


def _same(a: Any, b: Any) -> bool:
    """Whether two traced values (constants, attrs, arguments) are the same."""
    if a is b:
        return True
    if type(a) is not type(b):
        return False
    if isinstance(a, np.ndarray):
        return (
            a.shape == b.shape
            and a.dtype == b.dtype
            and bool(np.array_equal(a, b, equal_nan=a.dtype.kind in "fc"))
        )
    if isinstance(a, Tensor):
        return a._is_variable is False and _same(a._value, b._value)
    if isinstance(a, Ref):
        return a.slot == b.slot
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    code = getattr(a, "__code__", None)
    if code is not None:  # closures made afresh by each trace: same code, same captured values
        cells = [c.cell_contents for c in a.__closure__ or ()]
        other = [c.cell_contents for c in b.__closure__ or ()]
        return code is getattr(b, "__code__", None) and _same(cells, other)
    try:
        return bool(a == b)
    except Exception:
        return False


def _same_program(p: Program, q: Program) -> bool:
    """Whether two traces of one signature wrote the same program (constants compared by value)."""
    if len(p.code) != len(q.code) or len(p.init) != len(q.init) or p.inputs != q.inputs:
        return False
    if not _same(p.outputs, q.outputs):
        return False
    for a, b in zip(p.init, q.init):
        if not (a is None and b is None) and (a is None or b is None or not _same(a, b)):
            return False
    for x, y in zip(p.code, q.code):
        if x[0] != y[0] or not all(_same(u, v) for u, v in zip(x[1:], y[1:])):
            return False
    return True


def _leaf_key(x: Any, objects: list[Any]) -> Any:
    if x.__class__ is Tensor:
        return ("T", x._value.shape, x._value.dtype.str)
    if isinstance(x, np.ndarray):
        return ("A", x.shape, x.dtype.str)
    if x is None or isinstance(x, (bool, int, float, complex, str, bytes)):
        return (type(x), x)
    objects.append(x)  # Variables, modules, optimizers, other objects: by identity
    return ("O", id(x))


_tracing = threading.Lock()  # held by the thread whose trace is on the stack


class Function:
    """A Python function traced per input signature and replayed; see ``function``."""

    def __init__(
        self, fn: Callable[..., Any], reduce_retracing: bool = False, jit_compile: bool | None = None
    ) -> None:
        if jit_compile:
            require_numba()  # now, not at the first call: the error belongs where the option is
        functools.update_wrapper(self, fn)
        self._python_function = fn
        self._reduce_retracing = bool(reduce_retracing)
        self._jit_compile = bool(jit_compile)
        self._programs: dict[Any, Program] = {}
        # Traced, to be confirmed by the next trace of the signature: (program, traces so far).
        self._first_traces: dict[Any, tuple[Program, int]] = {}
        self._eager_reason: str | None = None

    @property
    def python_function(self) -> Callable[..., Any]:
        """The wrapped Python function."""
        return self._python_function

    @property
    def eager(self) -> bool:
        """Whether a trace found a tensor value used in Python, so calls now run eagerly."""
        return self._eager_reason is not None

    def __get__(self, instance: Any, owner: Any = None) -> Any:
        if instance is None:
            return self
        return functools.partial(self.__call__, instance)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        # Inside another trace the body is traced inline; under an active tape the caller
        # wants the ops recorded; after a failed trace the function is eager.
        if traces or active_tapes or self._eager_reason is not None:
            return self._python_function(*args, **kwargs)
        arrays: list[Any] = []
        key = None if kwargs else _tensors_key(args, arrays)
        if key is not None:  # Tensors only, the common call: its signature without the walk
            program = self._programs.get(key)
            if program is not None:
                for check in program.guards:  # _holds, without its call on every step
                    if not check():
                        break
                else:
                    return program.run(arrays)
        call = (args, kwargs)
        objects: list[Any] = []
        leaves, key = _signature(call, objects)
        program = self._programs.get(key)
        if program is None:
            return self._trace(call, leaves, key, objects)
        if not _holds(program):
            del self._programs[key]  # traced on a choice that changed: trace and confirm anew
            return self._trace(call, leaves, key, objects)
        return program.run([x._value if x.__class__ is Tensor else x for x in leaves if _is_input(x)])

    def _trace(self, call: Any, leaves: list[Any], key: Any, objects: list[Any]) -> Any:
        # One thread traces at a time: a trace is the top of the one trace stack, which every
        # op checks. Another thread's call meanwhile runs eagerly, as calls inside a trace do.
        if not _tracing.acquire(blocking=False):
            args, kwargs = call
            return self._python_function(*args, **kwargs)
        try:
            return self._trace_alone(call, leaves, key, objects)
        finally:
            _tracing.release()

    def _trace_alone(self, call: Any, leaves: list[Any], key: Any, objects: list[Any]) -> Any:
        trace = Trace()
        inputs, traced_leaves = [], []
        for x in leaves:
            if _is_input(x):
                t = x if x.__class__ is Tensor else _wrap(x)  # ndarrays come in as Tensors, as in TF
                inputs.append(trace.new_slot(t._value))
                traced_leaves.append(t)
            else:
                traced_leaves.append(x)
        args, kwargs = nest.pack_sequence_as(call, traced_leaves)
        traces.append(trace)
        try:
            result = self._python_function(*args, **kwargs)
        finally:
            traces.clear()
        if trace.failure is not None:
            filename, line, text = trace.failure
            self._fall_back(
                f"a tensor's value is used as a Python value at {filename}:{line} ({text!r}), so the "
                "traced program would freeze it",
                f"{filename}:{line}",
            )
            return result
        out_leaves = nest.flatten(result)
        outputs = []
        for x in out_leaves:
            if isinstance(x, Tensor) and not x._is_variable and id(x._value) in trace.slot_of:
                outputs.append(Ref(trace.slot_of[id(x._value)]))
            else:
                outputs.append(x)
        structure = nest.pack_sequence_as(result, outputs)  # holds no trace-time Tensor
        trace.keep.clear()
        trace.slot_of.clear()
        program = Program(trace, inputs, outputs, structure, objects, fused=self._jit_compile)
        earlier, count = self._first_traces.pop(key, (None, 0))
        if earlier is not None and _same_program(earlier, program):
            self._programs[key] = program
        elif count < 2:  # a first call may differ (a model building itself): compare the next two
            self._first_traces[key] = (program, count + 1)
        else:
            self._fall_back(
                "two traces of the same signature differ (a constant or an op depends on a tensor's "
                "value inside code that reads arrays directly)",
                "differing traces",
            )
        return result

    def _fall_back(self, why: str, reason: str) -> None:
        self._eager_reason = reason
        self._programs.clear()
        self._first_traces.clear()
        # A callable without __name__ (a functools.partial) leaves update_wrapper nothing to copy.
        name = getattr(self._python_function, "__name__", repr(self._python_function))
        warnings.warn(
            f"tp.function {name!r}: {why}; it runs eagerly from now on (keep tensor values "
            "in tapefit ops, e.g. tp.where instead of if)",
            RuntimeWarning,
            stacklevel=4,
        )

    def _signature_count(self) -> int:
        """How many signatures it has traced, confirmed or not."""
        return len(self._programs) + len(self._first_traces)

    def experimental_get_tracing_count(self) -> int:
        """How many signatures have a confirmed program that calls replay (``tf.function``'s
        method of that name counts traces; here a signature's checking traces count once)."""
        return len(self._programs)


def _holds(program: Program) -> bool:
    """Whether every guard of ``program`` still holds (see ``guard``)."""
    for check in program.guards:
        if not check():
            return False
    return True


# The parts of ``_signature``'s key around positional arguments, with no keyword arguments.
_CALL_KEY, _NO_KWARGS_KEY, _NONE_KEY = (tuple, 2), (dict, ()), (type(None), None)


def _tensors_key(args: tuple[Any, ...], arrays: list[Any]) -> tuple[Any, ...] | None:
    """``_signature``'s key of a call with Tensors (not Variables) or ``None`` as its only
    arguments, positional, whose arrays it appends to ``arrays``; ``None`` for any other call."""
    key: list[Any] = [_CALL_KEY, (tuple, len(args))]
    for x in args:
        if x.__class__ is not Tensor:
            if x is None:
                key.append(_NONE_KEY)
                continue
            return None
        value = x._value
        arrays.append(value)
        key.append(("T", value.shape, value.dtype.str))
    key.append(_NO_KWARGS_KEY)
    return tuple(key)


def _is_input(x: Any) -> bool:
    return x.__class__ is Tensor or isinstance(x, np.ndarray)


def _signature(call: Any, objects: list[Any]) -> tuple[list[Any], tuple[Any, ...]]:
    """The leaves of ``call`` in ``nest.flatten`` order, and its signature: the nesting
    (container types, lengths, dict keys) and each leaf's key, in one pass."""
    leaves: list[Any] = []
    key: list[Any] = []
    stack = [call]
    while stack:
        x = stack.pop()
        if isinstance(x, dict):
            names = sorted(x)
            key.append((dict, tuple(names)))
            stack.extend([x[k] for k in reversed(names)])
        elif isinstance(x, (list, tuple)):
            key.append((x.__class__, len(x)))
            stack.extend(reversed(x))
        else:
            leaves.append(x)
            key.append(_leaf_key(x, objects))
    return leaves, tuple(key)


@overload
def function(fn: F, *, reduce_retracing: bool = False, jit_compile: bool | None = None) -> F: ...
@overload
def function(
    fn: None = None, *, reduce_retracing: bool = False, jit_compile: bool | None = None
) -> Callable[[F], F]: ...
def function(fn: Any = None, *, reduce_retracing: bool = False, jit_compile: bool | None = None) -> Any:
    """Traces ``fn`` once per input signature and replays the traced NumPy program.

    As ``tf.function``: the first call with a new signature runs ``fn`` eagerly while
    writing down every NumPy call its ops make (forward, the tape's backward, ``assign*``,
    optimizer updates, random draws). The second call traces again and checks that both
    traces agree (a program that differs, because some code read a tensor's array outside
    the ops, makes the function eager; a first call that builds a model may differ, and then
    the next two traces are compared). Later calls with that signature replay the program,
    bit for bit equal to eager, without Tensors or tapes. The signature is the shape and
    dtype of each Tensor or ndarray argument, the value of each Python number, string,
    bool or None, and the identity of any other object (Variables, models, optimizers);
    arguments may be nested in lists, tuples and dicts. ndarray arguments reach ``fn`` as
    Tensors.

    Python side effects (``print``, appending to a list, creating Variables, changing an
    attribute) happen at trace time only, as in TensorFlow (so on the first two calls of a
    signature). Variables are read and assigned
    at replay time, so they always see their current values; random ops draw afresh on each
    replay from the same generators, in the same order, as eager code; optimizers update
    with their step's learning rate.

    Python control flow on Python values is fine (only the branch taken is traced). A
    tensor's value used as a Python value (``if loss > 1:``, ``float(t)``, ``t.numpy()``)
    cannot be traced: that call finishes eagerly and the function runs eagerly from then
    on, after one ``RuntimeWarning`` naming the line. Called while a ``GradientTape`` is
    active, or inside another traced function, ``fn`` runs eagerly (its ops recorded).

    Args:
        fn: the function; without it, ``function(reduce_retracing=...)`` returns a decorator.
        reduce_retracing: accepted for ``tf.function`` compatibility; signatures are exact.
        jit_compile: opt in to fused kernels (needs Numba: ``pip install 'tapefit[jit]'``): each
            run of elementwise ops, and each optimizer update of a variable, runs as one compiled
            loop instead of one NumPy pass per op. Results then agree with eager within 1e-6
            relative per float32 step instead of bit for bit (as XLA's do). Off (``None`` or
            ``False``, the default): pure NumPy, bit for bit the eager results.

    Raises:
        ImportError: ``jit_compile=True`` without Numba installed.
    """
    if fn is None:
        return lambda f: Function(f, reduce_retracing=reduce_retracing, jit_compile=jit_compile)
    return Function(fn, reduce_retracing=reduce_retracing, jit_compile=jit_compile)
