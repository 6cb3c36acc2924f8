"""``tp.function``: trace a Python function once per input signature, then replay it.

Tracing runs the function eagerly (so the first call's results are the eager ones) while a
``_Trace`` writes down every NumPy call the ops make, in order: each op's forward function
with the arrays it read, each read of a Variable, each ``assign*``, each random draw and
each *host call* (a Python callable that must run again on every call, such as an
optimizer's update). The tape's gradient computation is itself made of ops, so the backward
pass is in the program too. A confirmed program becomes one generated Python function of
straight-line NumPy calls, and a replay calls it on the new inputs: no Tensors, no tapes,
no dtype checks; the same NumPy calls in the same order, so the results are the eager ones
bit for bit.

Arrays are followed by identity: an op's input array is a program input, the output of an
earlier call, the value of a Variable read before, or else a constant captured at trace time
(a Tensor made from Python values, ``tp.zeros``, ...). A tensor's value turned into a Python
value while tracing (``if x > 0:``, ``float(t)``, ``t.numpy()``) would freeze a value that
changes from call to call: the trace detects it, finishes that call eagerly, and the function
runs eagerly from then on, with one warning naming the line.
"""

from __future__ import annotations

import functools
import linecache
import os
import sys
import types
import warnings
from collections.abc import Callable
from threading import get_ident
from typing import Any, TypeVar, overload

import numpy as np

from tapefit.core import nest
from tapefit.core import tensor as _tensor
from tapefit.core.record import active_tapes
from tapefit.core.tensor import Tensor, Variable, _wrap

__all__ = ["Function", "draw", "function", "host_call", "tracing"]


F = TypeVar("F", bound=Callable[..., Any])

# The trace being written (at most one), shared with tensor.py and registry.py, which call
# its ``op``, ``assign`` and ``value_read``. Ops test this list's truthiness: with no trace,
# that test is all tracing costs them.
_tracing: list[Any] = _tensor._traces

_CORE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep
_ndarray = np.ndarray
_asarray = np.asarray

# Instruction kinds of a program.
_OP, _READ, _ASSIGN, _DRAW, _HOST = range(5)


def tracing() -> bool:
    """Whether a ``tp.function`` trace is being written (and not paused for a host call)."""
    return bool(_tracing)


class _Ref:
    """A placeholder for the array in one slot, in the arguments of a host call."""

    __slots__ = ("slot",)

    def __init__(self, slot: int) -> None:
        self.slot = slot


class _Trace:
    """The program being written while the traced function runs eagerly."""

    def __init__(self) -> None:
        self.code: list[tuple[Any, ...]] = []
        self.init: list[Any] = []  # constants at their slots, None for the values of a call
        self.slot_of: dict[int, int] = {}  # id(array) -> the slot holding it
        # Every array seen stays alive until the trace ends, so that no id is reused.
        self.keep: list[Any] = []
        self.failure: tuple[str, int, str] | None = None
        self.thread = get_ident()  # other threads' ops are not this function's

    def new_slot(self, array: Any) -> int:
        slot = len(self.init)
        self.init.append(None)
        self.slot_of[id(array)] = slot
        self.keep.append(array)
        return slot

    def const(self, value: Any) -> int:
        slot = len(self.init)
        self.init.append(value)
        self.keep.append(value)
        return slot

    def ref(self, t: Tensor) -> int:
        """The slot of ``t``'s array: a Variable is read here, in program order."""
        if t._is_variable and get_ident() == self.thread:
            value = t._value
            slot = self.new_slot(value)
            self.code.append((_READ, t, slot, None, None))
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
        else:
            out = self.new_slot(outputs._value)
        self.code.append((_OP, forward, slots, attrs, out))

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
        self.code.append((_ASSIGN, variable, method, slot, wrap))

    def _check_attrs(self, attrs: dict[str, Any]) -> None:
        """An op attribute holding a traced array (``x[index_tensor]``) would be frozen."""
        for value in attrs.values():
            for item in value if isinstance(value, tuple) else (value,):
                if isinstance(item, np.ndarray) and id(item) in self.slot_of and self.failure is None:
                    self.failure = _user_frame()
                    _tracing.clear()

    def value_read(self, t: Tensor) -> None:
        """Called when a tensor's value leaves for Python (``bool``, ``float``, ``numpy()``...)."""
        if self.failure is None and get_ident() == self.thread and self.is_dynamic(t):
            self.failure = _user_frame()
            _tracing.clear()  # the call goes on eagerly from here


def draw(sample: Callable[[], np.ndarray]) -> np.ndarray:
    """Returns ``sample()``, a random draw; a trace calls it again on every replay.

    ``sample`` must look its generator up when called (``tp.random.generator(seed)``), so
    that replays draw from the generators as they are then (after ``set_seed`` or a
    checkpoint's ``set_state``), in the same order as eager code.
    """
    array = sample()
    if _tracing and _tracing[-1].thread == get_ident():
        trace = _tracing[-1]
        trace.code.append((_DRAW, sample, trace.new_slot(array), None, None))
    return array


def host_call(fn: Callable[..., Any], *args: Any) -> Any:
    """Calls ``fn(*args)``; a trace records the call, and every replay calls ``fn`` again.

    For Python code that must run on every call of a ``tp.function`` with the values of that
    call, such as an optimizer's update (its learning rate follows ``iterations``). Tensors
    in ``args`` (also inside lists, tuples and dicts) are passed to the replays' calls with
    the replays' values; Variables and other objects are passed as they are. Nothing ``fn``
    does is traced. A Tensor ``fn`` returns is followed like an op's output.
    """
    if not _tracing or _tracing[-1].thread != get_ident():
        return fn(*args)
    trace = _tracing.pop()
    try:
        leaves = nest.flatten(list(args))
        template = [_Ref(trace.ref(x)) if isinstance(x, Tensor) and not x._is_variable else x for x in leaves]
        result = fn(*args)
    finally:
        _tracing.append(trace)
    out = None
    if isinstance(result, Tensor) and not result._is_variable:
        out = trace.new_slot(result._value)
    structure = nest.pack_sequence_as(list(args), template)  # holds no trace-time Tensor
    trace.code.append((_HOST, fn, (structure, template), out, None))
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


class _Program:
    """One traced signature: the instructions, the constants and where the inputs and outputs go."""

    __slots__ = ("code", "init", "inputs", "outputs", "structure", "objects", "_replay")

    def __init__(
        self, trace: _Trace, inputs: list[int], outputs: list[Any], structure: Any, objects: list[Any]
    ):
        self.code = _with_frees(trace.code, outputs)
        self.init = trace.init
        self.inputs = inputs
        self.outputs = outputs
        self.structure = structure
        self.objects = objects  # the arguments keyed by identity: keeps their ids valid
        self._replay: Callable[..., list[Any]] | None = None  # made on the first run

    def run(self, arrays: list[np.ndarray]) -> Any:
        replay = self._replay
        if replay is None:
            replay = self._replay = _compile(self)
        return replay(*arrays)


def _compile(program: _Program) -> Callable[..., list[Any]]:
    """The program as one Python function of straight-line NumPy calls.

    Each slot is a local variable, deleted after its last read (so memory is reused and
    ``assign*`` find their arrays unshared, as in eager code); constants, functions and
    Variables are globals of the function. Running it costs the NumPy calls and little else:
    no loop over instructions, no list of slots. The source holds only names made here (and
    the ``assign*`` method names); every value reaches it as a global.
    """
    names: dict[str, Any] = {"_ndarray": _ndarray, "_asarray": _asarray, "_wrap": _wrap}
    local = set(program.inputs)
    for kind, _, b, c, d, _ in program.code:
        if kind == _OP:
            local.update((d,) if d.__class__ is int else d)
        elif kind in (_READ, _DRAW):
            local.add(b)
        elif kind == _HOST and c is not None:
            local.add(c)

    def slot(i: int) -> str:
        if i in local:
            return f"s{i}"
        names[f"k{i}"] = program.init[i]  # a constant captured at trace time
        return f"k{i}"

    def const(value: Any) -> str:
        name = f"g{len(names)}"
        names[name] = value
        return name

    lines = [f"def replay({', '.join(f's{i}' for i in program.inputs)}):"]
    body = lines.append

    def frees(free: tuple[int, ...]) -> None:
        dropped = [f"s{i}" for i in free if i in local]
        if dropped:
            body(f"    del {', '.join(dropped)}")

    def arrays(targets: list[str], result: str) -> None:
        for target in targets:  # 0-d ufunc results come back as NumPy scalars
            body(f"    {target} = {result}")
            body(f"    if {target}.__class__ is not _ndarray: {target} = _asarray({target})")

    for kind, a, b, c, d, free in program.code:
        if kind == _OP:
            args = ", ".join([slot(i) for i in b] + ([f"**{const(c)}"] if c else []))
            call = f"{const(a)}({args})"
            if d.__class__ is int:
                body(f"    _r = {call}")
                arrays([f"s{d}"], "_r")
            else:
                body(f"    _r = {call}")
                for k, target in enumerate(d):
                    arrays([f"s{target}"], f"_r[{k}]")
            body("    del _r")
            frees(free)
        elif kind == _READ:
            body(f"    s{b} = {const(a)}._value")
            frees(free)
        elif kind == _DRAW:
            body(f"    s{b} = {const(a)}()")
            frees(free)
        elif kind == _ASSIGN:
            # The value is taken before the frees: an assign* writes in place only when the
            # variable's array has no other holder.
            body(f"    _v = {slot(c)}")
            frees(free)
            body(f"    {const(a)}.{b}({'_wrap(_v)' if d else '_v'})")
            body("    del _v")
        else:
            structure, template = b
            refs = [slot(x.slot) for x in template if x.__class__ is _Ref]
            body(f"    _a = {const(functools.partial(_host_args, structure, template))}({', '.join(refs)})")
            frees(free)  # before the call: the optimizer then updates in place
            body(f"    _h = {const(a)}(*_a)")
            body("    del _a")
            if c is not None:
                body(f"    s{c} = _h._value")
            body("    del _h")
    body(f"    return {_result(program.structure, const)}")
    namespace: dict[str, Any] = dict(names)
    exec(compile("\n".join(lines), "<tp.function replay>", "exec"), namespace)
    return namespace["replay"]


def _result(structure: Any, const: Callable[[Any], str]) -> str:
    """An expression that builds the function's result: ``structure`` with each ``_Ref``
    wrapped as a Tensor and every other leaf a constant (containers as ``nest`` rebuilds them)."""
    # An explicit stack of (node, its child expressions so far, its children left).
    stack: list[tuple[Any, list[str], list[Any]]] = [(None, [], [structure])]
    while True:
        node, built, left = stack[-1]
        if len(stack) > 32:  # deeper than Python's parser takes comfortably: rebuild at run time
            leaves = [
                f"_wrap(s{x.slot})" if x.__class__ is _Ref else const(x) for x in nest.flatten(structure)
            ]
            return f"{const(nest.pack_sequence_as)}({const(structure)}, [{', '.join(leaves)}])"
        if left:
            child = left.pop(0)
            if isinstance(child, dict):
                stack.append((child, [], list(child.values())))
            elif isinstance(child, (list, tuple)):
                stack.append((child, [], list(child)))
            else:
                built.append(f"_wrap(s{child.slot})" if child.__class__ is _Ref else const(child))
            continue
        stack.pop()
        if not stack:
            return built[0]
        if isinstance(node, dict):
            pairs = ", ".join(f"({const(k)}, {v})" for k, v in zip(node, built))
            expression = f"{const(type(node))}([{pairs}])"
        elif node.__class__ is list:
            expression = f"[{', '.join(built)}]"
        elif node.__class__ is tuple:
            expression = f"({', '.join(built)},)" if built else "()"
        elif isinstance(node, tuple) and hasattr(node, "_fields"):  # a namedtuple
            expression = f"{const(type(node))}({', '.join(built)})"
        else:
            expression = f"{const(type(node))}([{', '.join(built)}])"
        stack[-1][1].append(expression)


def _host_args(structure: Any, template: list[Any], *arrays: np.ndarray) -> Any:
    """A host call's arguments: ``template`` with each ``_Ref`` replaced by the next array, as a Tensor."""
    values = iter(arrays)
    return nest.pack_sequence_as(
        structure, [_wrap(next(values)) if x.__class__ is _Ref else x for x in template]
    )


def _with_frees(code: list[tuple[Any, ...]], outputs: list[Any]) -> list[tuple[Any, ...]]:
    """``code`` with, on each instruction, the slots read for the last time there: a replay
    drops them at once, so that memory is reused and ``assign*`` can write in place."""
    kept = {x.slot for x in outputs if isinstance(x, _Ref)}
    last: dict[int, int] = {}
    for index, (kind, _a, b, c, d) in enumerate(code):
        if kind == _OP:
            reads: Any = b
            written: Any = (d,) if isinstance(d, int) else d
        elif kind == _ASSIGN:
            reads, written = (c,), ()
        elif kind == _HOST:
            reads, written = [x.slot for x in b[1] if isinstance(x, _Ref)], () if c is None else (c,)
        else:  # a Variable read or a random draw
            reads, written = (), (b,)
        for slot in reads:
            last[slot] = index
        for slot in written:  # a value never read is dropped where it is made
            last.setdefault(slot, index)
    frees: list[list[int]] = [[] for _ in code]
    for slot, index in last.items():
        if slot not in kept:
            frees[index].append(slot)
    return [(*ins, tuple(free)) for ins, free in zip(code, frees)]


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
    if isinstance(a, _Ref):
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


def _same_program(p: _Program, q: _Program) -> bool:
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


class Function:
    """A Python function traced per input signature and replayed; see ``function``."""

    def __init__(self, fn: Callable[..., Any], reduce_retracing: bool = False) -> None:
        functools.update_wrapper(self, fn)
        self._python_function = fn
        self._reduce_retracing = bool(reduce_retracing)
        self._programs: dict[Any, _Program] = {}
        # Traced, to be confirmed by the next trace of the signature: (program, traces so far).
        self._first_traces: dict[Any, tuple[_Program, int]] = {}
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
        if _tracing or active_tapes or self._eager_reason is not None:
            return self._python_function(*args, **kwargs)
        call = (args, kwargs)
        objects: list[Any] = []
        leaves, key = _signature(call, objects)
        program = self._programs.get(key)
        if program is None:
            return self._trace(call, leaves, key, objects)
        return program.run([x._value if x.__class__ is Tensor else x for x in leaves if _is_input(x)])

    def _trace(self, call: Any, leaves: list[Any], key: Any, objects: list[Any]) -> Any:
        trace = _Trace()
        inputs, traced_leaves = [], []
        for x in leaves:
            if _is_input(x):
                t = x if x.__class__ is Tensor else _wrap(x)  # ndarrays come in as Tensors, as in TF
                inputs.append(trace.new_slot(t._value))
                traced_leaves.append(t)
            else:
                traced_leaves.append(x)
        args, kwargs = nest.pack_sequence_as(call, traced_leaves)
        _tracing.append(trace)
        try:
            result = self._python_function(*args, **kwargs)
        finally:
            _tracing.clear()
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
                outputs.append(_Ref(trace.slot_of[id(x._value)]))
            else:
                outputs.append(x)
        structure = nest.pack_sequence_as(result, outputs)  # holds no trace-time Tensor
        trace.keep.clear()
        trace.slot_of.clear()
        program = _Program(trace, inputs, outputs, structure, objects)
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

    def experimental_get_tracing_count(self) -> int:
        """How many signatures have a confirmed program that calls replay (``tf.function``'s
        method of that name counts traces; here a signature's checking traces count once)."""
        return len(self._programs)


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
def function(fn: F, *, reduce_retracing: bool = False) -> F: ...
@overload
def function(fn: None = None, *, reduce_retracing: bool = False) -> Callable[[F], F]: ...
def function(fn: Any = None, *, reduce_retracing: bool = False) -> Any:
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
    """
    if fn is None:
        return lambda f: Function(f, reduce_retracing=reduce_retracing)
    return Function(fn, reduce_retracing=reduce_retracing)
