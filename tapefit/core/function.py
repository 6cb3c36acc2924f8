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

A replay allocates (almost) nothing: the first replay of a program plans its buffers once
(``_plan``). Each intermediate's life runs from the op that makes it to its last read (a
possible view keeps its base alive); every op whose forward takes ``out=`` (NumPy's ufuncs, and
forwards marked ``writes_into``: Dense, MatMul, Sum, Relu, ReluGrad) writes into a buffer of
its shape and dtype that is free by then, and elementwise ops write over an input that dies
there. Nothing the caller can hold is a buffer: the results, ``assign`` values; the arrays
lent to host calls (the optimizer's gradients) are checked after the call and replaced if
kept. Ops on constants only are computed once (``_fold``).

Arrays are followed by identity: an op's input array is a program input, the output of an
earlier call, the value of a Variable read before, or else a constant captured at trace time
(a Tensor made from Python values, ``tp.zeros``, ...). A tensor's value turned into a Python
value while tracing (``if x > 0:``, ``float(t)``, ``t.numpy()``) would freeze a value that
changes from call to call: the trace detects it, finishes that call eagerly, and the function
runs eagerly from then on, with one warning naming the line.
"""

from __future__ import annotations

import contextlib
import functools
import linecache
import os
import sys
import types
import warnings
from collections.abc import Callable, Iterator
from threading import get_ident
from typing import Any, TypeVar, overload

import numpy as np

from tapefit.core import nest
from tapefit.core import tensor as _tensor
from tapefit.core.record import active_tapes
from tapefit.core.tensor import Tensor, Variable, _wrap

__all__ = [
    "Function",
    "draw",
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

# The trace being written (at most one), shared with tensor.py and registry.py, which call
# its ``op``, ``assign`` and ``value_read``. Ops test this list's truthiness: with no trace,
# that test is all tracing costs them.
_tracing: list[Any] = _tensor._traces

_CORE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep
_ndarray = np.ndarray
_asarray = np.asarray

# Instruction kinds of a program (_GUARD and _END bound a ``guarded`` region).
_OP, _READ, _ASSIGN, _DRAW, _HOST, _GUARD, _END = range(7)


def tracing() -> bool:
    """Whether this thread is writing a ``tp.function`` trace (and not paused for a host call):
    another thread's trace does not record this thread's ops."""
    return bool(_tracing) and _tracing[-1].thread == get_ident()


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
        # Per op output slot: (shape, dtype) when the array was C-contiguous and its own
        # memory, else None; and the outputs that may be views of their op's inputs.
        self.layout: dict[int, tuple[tuple[int, ...], np.dtype] | None] = {}
        self.views: set[int] = set()
        self.guards: list[Callable[[], bool]] = []  # see ``guard``
        # Per host call result slot: the function, and the result's shape and dtype when traced.
        self.hosted: dict[int, tuple[Callable[..., Any], tuple[int, ...], np.dtype]] = {}

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
        self.code.append((_OP, forward, slots, attrs, out))

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


def guard(check: Callable[[], bool]) -> None:
    """While a trace is written, makes every replay of its program call ``check()`` first.

    For code that traces a choice made on Python state that may change between calls (an
    optimizer's hyperparameters, say): ``check`` says whether that state still makes the
    same choice. When it returns False, the call traces the function again instead of
    replaying (before anything runs, so nothing happens twice). Outside a trace, does nothing.
    """
    if _tracing and _tracing[-1].thread == get_ident():
        _tracing[-1].guards.append(check)


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
    if not _tracing or _tracing[-1].thread != get_ident():
        yield
        return
    trace = _tracing[-1]
    trace.guards.append(check)
    leaves = nest.flatten(list(args))
    template = [_Ref(trace.ref(x)) if isinstance(x, Tensor) and not x._is_variable else x for x in leaves]
    structure = nest.pack_sequence_as(list(args), template)
    # The guard's index, not the check: each trace makes its own check, which _same_program compares.
    trace.code.append((_GUARD, len(trace.guards) - 1, (structure, template), fallback, None))
    try:
        yield
    finally:
        trace.code.append((_END, None, None, None, None))


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
        trace.hosted[out] = (fn, result._value.shape, result._value.dtype)
    structure = nest.pack_sequence_as(list(args), template)  # holds no trace-time Tensor
    trace.code.append((_HOST, fn if replay is None else replay, (structure, template), out, scratch or None))
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
        "_replay",
        "_unplanned",
        "_free",
    )

    def __init__(
        self, trace: _Trace, inputs: list[int], outputs: list[Any], structure: Any, objects: list[Any]
    ):
        self.code = _with_frees(trace.code, outputs)
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
        self._replay: Callable[..., list[Any]] | None = None  # made on the first run
        self._unplanned: Callable[..., list[Any]] | None = None  # for a call inside a call
        # One token: a run takes it (list.pop is atomic), so a second run at the same time
        # (re-entered from a host call, or another thread) finds none. Unlike a Lock, a list
        # deep-copies with the function.
        self._free: list[None] = [None]

    def run(self, arrays: list[np.ndarray]) -> Any:
        replay = self._replay
        if replay is None:
            replay = self._replay = _compile(self, planned=True)
        try:
            self._free.pop()
        except IndexError:
            # A call while this program runs (a host call calling the function again, another
            # thread) would write into the buffers the running call is using: it allocates.
            if self._unplanned is None:
                self._unplanned = _compile(self, planned=False)
            return self._unplanned(*arrays)
        try:
            return replay(*arrays)
        finally:
            self._free.append(None)


def _compile(program: _Program, planned: bool = True) -> Callable[..., list[Any]]:
    """The program as one Python function of straight-line NumPy calls.

    Each slot is a local variable, deleted after its last read (so memory is reused and
    ``assign*`` find their arrays unshared, as in eager code); constants, functions and
    Variables are globals of the function. Running it costs the NumPy calls and little else:
    no loop over instructions, no list of slots. The source holds only names made here (and
    the ``assign*`` method names); every value reaches it as a global.

    ``planned``: the ops that can write into a given array do, with ``out=``, into the
    buffers ``_plan`` assigned (allocated here, once, and kept by the program).
    """
    names: dict[str, Any] = {
        "_ndarray": _ndarray,
        "_asarray": _asarray,
        "_wrap": _wrap,
        "_refcount": sys.getrefcount,
        "_host_result_error": _host_result_error,
        "_empty_like": np.empty_like,
    }
    into: dict[int, int] = {}
    lent: dict[int, list[tuple[int, int]]] = {}
    dying: dict[int, list[int]] = {}  # host call -> the lent buffers it may overwrite
    swapped: list[int] = []  # buffers a host call may keep: globals the replay rebinds
    code, init = program.code, program.init
    if planned:
        code, init = _fold(program)
        into, program.buffers, lent, dying = _plan(program, code)
        for k, array in enumerate(program.buffers):
            names[f"b{k}"] = array
    local = _locals(program.inputs, code)
    # A host call's result may have any shape and dtype on a replay: no slot of one is checked.
    unchecked = {ins[3] for ins in code if ins[0] == _HOST and ins[3] is not None}

    def slot(i: int) -> str:
        if i in local:
            return f"s{i}"
        names[f"k{i}"] = init[i]  # a constant captured at trace time (or folded)
        return f"k{i}"

    def const(value: Any) -> str:
        name = f"g{len(names)}"
        names[name] = value
        return name

    lines = [f"def replay({', '.join(f's{i}' for i in program.inputs)}):"]
    pad = [""]  # "    " inside a guarded region's checked branch

    def body(line: str) -> None:
        lines.append(pad[0] + line)

    def frees(free: tuple[int, ...]) -> None:
        dropped = [f"s{i}" for i in free if i in local]
        if dropped:
            body(f"    del {', '.join(dropped)}")

    hosted = False  # a host call runs before: a guarded region's check may fail mid-call
    region: tuple[Any, ...] | None = None  # the open region's _GUARD instruction and index
    for index, (kind, a, b, c, d, free) in enumerate(code):
        if kind == _OP:
            buffer = into.get(d) if d.__class__ is int else None
            out = "None" if buffer is None else f"b{buffer}"
            for line in _results(
                _op_lines(a, [slot(i) for i in b], c, out, d.__class__ is int, const), d, buffer
            ):
                body(f"    {line}")
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
            checked = (
                a.__class__ is Variable and c not in unchecked and (c in local or _same_dtype(init[c], a))
            )
            for line in _assign_lines(const(a), b, d, checked, const):
                body(f"    {line}")
        elif kind == _HOST:
            body(f"    _a = {_result(b[0], const, slot)}")
            # The arguments' slots before the call (the optimizer then updates in place); a
            # result nothing reads after the call, once the call has made it.
            frees(tuple(i for i in free if i != c))
            traced = None if c is None else program.hosted[c]
            _host_call_lines(body, const, a, c, lent.get(index, []), dying.get(index) if d else None, traced)
            frees(tuple(i for i in free if i == c))
            swapped.extend([k for k, _count in lent.get(index, [])])
            hosted = True
        elif kind == _GUARD:
            if hosted and region is None:
                region = (index, a, b, c, free)
                body(f"    if {const(program.guards[a])}():")
                pad[0] = "    "
                body("    pass")
            frees(free)
        elif kind == _END and region is not None:
            # The check failed after the entry's passed: the host-call update, with this call's
            # values (the region's slots are alive in this branch, as it deletes none of them).
            at, _check, args, fallback, dropped = region
            region = None
            pad[0] = ""
            body("    else:")
            pad[0] = "    "
            body(f"    _a = {_result(args[0], const, slot)}")
            frees(dropped)
            _host_call_lines(body, const, fallback, None, lent.get(at, []))
            swapped.extend([k for k, _count in lent.get(at, [])])
            pad[0] = ""
    body(f"    return {_result(program.structure, const)}")
    if swapped:
        lines.insert(1, f"    global {', '.join(sorted({f'b{k}' for k in swapped}))}")
    namespace: dict[str, Any] = dict(names)
    source = "\n".join(lines)
    exec(compile(source, "<tp.function replay>", "exec"), namespace)
    replay = namespace["replay"]
    replay.source = source  # for a reader (and the tests): what a replay runs
    return replay


def _op_lines(
    forward: Any, args: list[str], attrs: Any, out: str, single: bool, const: Callable[[Any], str]
) -> list[str]:
    """Lines that leave in ``_r`` what ``forward(*args, **attrs)`` returns (written into the
    buffer ``out`` unless it is ``"None"``): the forward's own source if it has one
    (``replay_source``), else a call."""
    source = _source_of(forward) if single else None
    if source is not None:
        return source(const, args, attrs or {}, out)
    extra = [] if out == "None" else [f"out={out}"]
    return [f"_r = {const(forward)}({', '.join(args + extra + ([f'**{const(attrs)}'] if attrs else []))})"]


def _results(op: list[str], d: Any, buffer: int | None) -> list[str]:
    """``op``'s lines with its result ``_r`` put in the slot(s) ``d``: its buffer, or arrays
    (a 0-d ufunc result comes back as a NumPy scalar)."""
    if buffer is not None and op[-1].startswith("_r = ") and not any("_r" in line for line in op[:-1]):
        return [*op[:-1], f"s{d} = {op[-1].removeprefix('_r = ')}"]  # a call that returns the buffer
    if buffer is not None:
        return [*op, f"s{d} = _r", "del _r"]
    lines = list(op)
    for k, target in enumerate((d,) if d.__class__ is int else d):
        value = "_r" if d.__class__ is int else f"_r[{k}]"
        lines += [
            f"s{target} = {value}",
            f"if s{target}.__class__ is not _ndarray: s{target} = _asarray(s{target})",
        ]
    return [*lines, "del _r"]


def _same_dtype(value: Any, variable: Variable) -> bool:
    return isinstance(value, (np.ndarray, np.generic)) and value.dtype == variable._value.dtype


def _assign_lines(
    variable: str, method: str, wrap: bool, checked: bool, const: Callable[[Any], str]
) -> list[str]:
    """``variable.<method>(_v)``. ``assign_add`` and ``assign_sub`` of a ``Variable`` (not a
    subclass) by an array the trace checked (its shape and dtype are the variable's on every
    replay) are written out: in place when nothing else holds the variable's array, else a
    new array, as the methods do."""
    ufunc = {"assign_add": np.add, "assign_sub": np.subtract}.get(method)
    if ufunc is None or not checked or _SOLE_LOCAL_REFS is None:
        return [f"{variable}.{method}({'_wrap(_v)' if wrap and method == 'assign' else '_v'})", "del _v"]
    f = const(ufunc)
    return [
        f"_w = {variable}._value",
        f"if _refcount(_w) <= {_SOLE_LOCAL_REFS} and _w.base is None and _w.flags.writeable: {f}(_w, _v, out=_w)",
        f"else: {variable}._value = {f}(_w, _v)",
        "del _v, _w",
    ]


def _local_refs(variable: Variable) -> int:
    _w = variable._value
    return sys.getrefcount(_w)


# What a replay's ``_refcount(_w)`` sees for a variable's array held by the variable alone
# and the local ``_w`` (measured, as tensor.py measures its count); None: no refcounts.
_SOLE_LOCAL_REFS = _local_refs(Variable(0.0)) if _tensor._refcount is not None else None


def _locals(inputs: list[int], code: list[tuple[Any, ...]]) -> set[int]:
    """The slots a replay holds in local variables (the others are constants)."""
    local = set(inputs)
    for kind, _, b, c, d, _ in code:
        if kind == _OP:
            local.update((d,) if d.__class__ is int else d)
        elif kind in (_READ, _DRAW):
            local.add(b)
        elif kind == _HOST and c is not None:
            local.add(c)
    return local


def _host_result_error(
    fn: Callable[..., Any], value: np.ndarray, shape: tuple[int, ...], dtype: np.dtype
) -> None:
    name = getattr(fn, "__qualname__", None) or repr(fn)
    raise ValueError(
        f"tp.function: host call {name} returned shape {value.shape} and dtype {value.dtype.name}, "
        f"but shape {shape} and dtype {dtype.name} when the function was traced; the traced program "
        "was built for those (return them on every call)"
    )


def _host_call_lines(
    body: Callable[[str], None],
    const: Callable[[Any], str],
    call: Callable[..., Any],
    out: int | None,
    checks: list[tuple[int, int]],
    scratch: list[int] | None = None,
    traced: tuple[Callable[..., Any], tuple[int, ...], np.dtype] | None = None,
) -> None:
    """A host call of ``call`` on the arguments ``_a``; ``checks``: the buffers lent to it, each
    with the number of Tensors made of it. A buffer the call kept (itself, its Tensor or a view:
    the references to it did not all go) is the caller's from then on; the replay takes a new
    one for that buffer's later uses and the next calls. ``scratch``: for a call that takes the
    keyword, the lent buffers it may overwrite (see ``host_call``). ``traced``: the function,
    shape and dtype of the result when traced, which the result must have again (the program
    was planned for it)."""
    fn = const(call)
    for k, _count in checks:
        body(f"    _c{k} = _refcount(b{k})")
    if scratch is None:
        body(f"    _h = {fn}(*_a)")
    else:
        body(f"    _h = {fn}(*_a, scratch=({''.join(f'b{k}, ' for k in scratch)}))")
    body("    del _a")
    if out is not None:
        body(f"    s{out} = _h._value")
    if out is not None and traced is not None:
        named, shape, dtype = const(traced[0]), traced[1], const(traced[2])
        body(
            f"    if s{out}.shape != {shape!r} or (s{out}.dtype is not {dtype} and s{out}.dtype != {dtype}):"
        )
        body(f"        _host_result_error({named}, s{out}, {shape!r}, {dtype})")
    body("    del _h")
    for k, count in checks:
        body(f"    if _refcount(b{k}) > _c{k} - {count}: b{k} = _empty_like(b{k})")


def _result(structure: Any, const: Callable[[Any], str], slot: Callable[[int], str] = "s{}".format) -> str:
    """An expression that builds the function's result (or a host call's arguments):
    ``structure`` with each ``_Ref`` wrapped as a Tensor of ``slot(its slot)`` and every other
    leaf a constant (containers as ``nest`` rebuilds them)."""
    # An explicit stack of (node, its child expressions so far, its children left).
    stack: list[tuple[Any, list[str], list[Any]]] = [(None, [], [structure])]
    while True:
        node, built, left = stack[-1]
        if len(stack) > 32:  # deeper than Python's parser takes comfortably: rebuild at run time
            leaves = [
                f"_wrap({slot(x.slot)})" if x.__class__ is _Ref else const(x) for x in nest.flatten(structure)
            ]
            return f"{const(nest.pack_sequence_as)}({const(structure)}, [{', '.join(leaves)}])"
        if left:
            child = left.pop(0)
            if isinstance(child, dict):
                stack.append((child, [], list(child.values())))
            elif isinstance(child, (list, tuple)):
                stack.append((child, [], list(child)))
            else:
                built.append(f"_wrap({slot(child.slot)})" if child.__class__ is _Ref else const(child))
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
        elif kind == _GUARD:
            reads, written = [x.slot for x in b[1] if isinstance(x, _Ref)], ()
        elif kind == _END:
            reads, written = (), ()
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


# Forwards that take ``out=``: see ``writes_into``.
_WRITES_INTO: dict[Any, tuple[int, ...]] = {}


def writes_into(*over: int) -> Callable[[F], F]:
    """Marks an op's forward as taking ``out=``, an array of its result's shape and dtype
    (C-contiguous) that it writes its result into and returns, bit for bit what it returns
    without ``out``. A planned replay then writes the op's result into a buffer allocated once
    (``_plan``). ``over``: the positions of the inputs whose array ``out`` may be (the forward
    reads them elementwise, before writing each element); ``out`` is never any other input's
    array. NumPy ufuncs need no mark (any input may be ``out``).
    """

    def mark(forward: F) -> F:
        _WRITES_INTO[forward] = over
        return forward

    return mark


# Forwards a replay writes out in its own source: see ``replay_source``.
_SOURCES: dict[Any, Callable[..., list[str]]] = {}


def replay_source(
    source: Callable[[Callable[[Any], str], list[str], dict[str, Any], str], list[str]],
) -> Callable[[F], F]:
    """Marks an op's forward as one a replay writes out in its own source instead of calling
    it: a forward of a few NumPy calls then costs those calls and no Python call of its own.

    ``source(name, args, attrs, out)`` returns lines of Python that leave in ``_r`` what
    ``forward(*args, **attrs, out=out)`` returns, by the same NumPy calls (so the same bits);
    ``args`` and ``out`` are expressions (``out`` may be ``"None"``), and ``name(value)`` gives
    the name of a global of the replay bound to ``value``.
    """

    def mark(forward: F) -> F:
        _SOURCES[forward] = source
        return forward

    return mark


def _source_of(forward: Any) -> Callable[..., list[str]] | None:
    try:
        return _SOURCES.get(forward)
    except TypeError:  # an unhashable callable
        return None


def _overwrites(forward: Any, attrs: Any) -> tuple[int, ...] | None:
    """The input positions whose array ``forward`` may write its result over (``writes_into``),
    or ``None`` if it does not take ``out=``."""
    if attrs and ("out" in attrs or "where" in attrs):
        return None
    if isinstance(forward, np.ufunc):
        return tuple(range(forward.nin)) if forward.nout == 1 else None
    try:
        return _WRITES_INTO.get(forward)
    except TypeError:  # an unhashable callable
        return None


def _fold(program: _Program) -> tuple[list[tuple[Any, ...]], list[Any]]:
    """The program's code and constants with every op whose inputs are all constants
    computed once, here, and its outputs made constants (a loss's ``1 / batch`` and the
    reshapes and broadcasts of it that its gradient makes). Ops are pure functions of their
    arrays (random draws are their own instructions), so a replay computes nothing else
    than it would have. An op whose output the function returns stays: each call returns
    new Tensors."""
    init = list(program.init)
    constant = [value is not None for value in init]
    for slot in program.inputs:
        constant[slot] = False
    returned = {x.slot for x in program.outputs if isinstance(x, _Ref)}
    code = []
    for ins in program.code:
        kind, forward, reads, attrs, out = ins[:5]
        outs = (out,) if kind == _OP and out.__class__ is int else out
        if kind == _OP and all(constant[i] for i in reads) and not returned.intersection(outs):
            result = forward(*[init[i] for i in reads], **(attrs or {}))
            values = (result,) if out.__class__ is int else result
            for slot, value in zip(outs, values):
                init[slot] = value if value.__class__ is _ndarray else _asarray(value)
                constant[slot] = True
            continue
        code.append(ins)
    return code, init


def _lives(program: _Program, code: list[tuple[Any, ...]]) -> tuple[dict[int, int], set[int]]:
    """Each slot's last use (its last read, or where it is made; a view's base lives as long
    as the view), and the slots the caller may hold (see ``_plan``)."""
    escaped = {x.slot for x in program.outputs if isinstance(x, _Ref)}
    last: dict[int, int] = {}
    for index, (kind, _a, b, c, d, _free) in enumerate(code):
        if kind == _OP:
            reads: Any = b
            for slot in (d,) if d.__class__ is int else d:
                last.setdefault(slot, index)
        elif kind == _ASSIGN:
            reads = (c,)
            if b == "assign":  # assign_add and assign_sub never keep their argument
                escaped.add(c)
        elif kind == _HOST or kind == _GUARD:
            reads = [x.slot for x in b[1] if x.__class__ is _Ref]
            # Lent, not given: a replay checks after the call whether it kept them.
            escaped.update([slot for slot in reads if slot in program.views])
        else:
            reads = ()
        for slot in reads:
            last[slot] = index
    for index in range(len(code) - 1, -1, -1):  # views made later extend their bases first
        kind, _a, b, _c, d, _free = code[index]
        if kind != _OP:
            continue
        for out in (d,) if d.__class__ is int else d:
            if out in program.views:
                for slot in b:
                    last[slot] = max(last[slot], last[out])
                    if out in escaped:
                        escaped.add(slot)
    return last, escaped


def _plan(
    program: _Program, code: list[tuple[Any, ...]]
) -> tuple[dict[int, int], list[np.ndarray], dict[int, list[tuple[int, int]]], dict[int, list[int]]]:
    """The replay's buffers: which op outputs are written, with ``out=``, into which buffer.

    Liveness first: a slot lives from the op that makes it to its last read, and a view keeps
    its base alive (an op whose result may view its inputs, see ``_Trace._may_view``, extends
    their lives to its own). Then one pass in program order hands each output of a forward
    that takes ``out=`` a free buffer of its shape and dtype (or a new one), and frees the
    buffers of the slots that die there. Whatever the caller can hold never gets a buffer:
    the function's results, the arrays passed to ``assign`` (a variable may keep the array;
    ``assign_add`` and ``assign_sub`` only read theirs),
    views passed to host calls, and, through views, the arrays those view. The arrays a host
    call gets (the optimizer's gradients, as Tensors) are lent: after the call the replay
    counts the references to each lent buffer, and one the call kept is replaced (see
    ``_host_call_lines``). An elementwise ufunc may write into the buffer of an input that
    dies there (in place), and so may a forward over the inputs ``writes_into`` names; any
    other forward gets a buffer none of its inputs uses.

    Returns the buffer of each planned slot, the buffers, per host call the buffers it
    is lent with the number of Tensors made of each, and per host call the lent buffers whose
    slot dies there behind one Tensor (a ``scratch`` host call may overwrite them: no later
    instruction reads them, and no view of them lives on, since views passed to a host call
    and their bases get no buffer).
    """
    last, escaped = _lives(program, code)
    ends: dict[int, list[int]] = {}
    for slot, index in last.items():
        ends.setdefault(index, []).append(slot)
    free: dict[Any, list[int]] = {}
    buffers: list[np.ndarray] = []
    into: dict[int, int] = {}
    held: dict[int, int] = {}  # slot -> its buffer, while the slot lives
    lent: dict[int, list[tuple[int, int]]] = {}  # host call -> (buffer, Tensors made of it)
    dying: dict[int, list[int]] = {}  # host call -> lent buffers read for the last time there

    def release(slots: Any) -> None:
        for slot in slots:
            k = held.pop(slot, None)
            if k is not None:
                buffer = buffers[k]
                free.setdefault((buffer.shape, buffer.dtype), []).append(k)

    for index, (kind, a, b, c, d, _free) in enumerate(code):
        layout = program.layout.get(d) if kind == _OP and d.__class__ is int else None
        over = _overwrites(a, c) if layout is not None and d not in escaped else None
        if over is not None and layout is not None:
            # An input that dies here, read only where the forward may write over it, gives
            # its buffer (an elementwise op in place).
            # (NumPy's ufuncs handle any overlap; another forward's other inputs must not be
            # views, which could view the array written over.)
            others = {slot for i, slot in enumerate(b) if i not in over}
            if isinstance(a, np.ufunc) or not others & program.views:
                release([b[i] for i in over if last[b[i]] == index and b[i] not in others])
            pool = free.get(layout)
            if pool:
                k = pool.pop()
            else:
                k = len(buffers)
                buffers.append(np.empty(*layout))
            into[d] = held[d] = k
        elif kind == _HOST or kind == _GUARD:
            counts: dict[int, int] = {}
            ending: dict[int, bool] = {}
            for x in b[1]:
                if x.__class__ is _Ref and x.slot in held:
                    counts[held[x.slot]] = counts.get(held[x.slot], 0) + 1
                    ending[held[x.slot]] = last[x.slot] == index
            if counts:
                lent[index] = sorted(counts.items())
                dying[index] = sorted(k for k, n in counts.items() if n == 1 and ending[k])
        release(ends.get(index, ()))
    return into, buffers, lent, dying


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


def _holds(program: _Program) -> bool:
    """Whether every guard of ``program`` still holds (see ``guard``)."""
    for check in program.guards:
        if not check():
            return False
    return True


# The parts of ``_signature``'s key around positional arguments, with no keyword arguments.
_CALL_KEY, _NO_KWARGS_KEY = (tuple, 2), (dict, ())


def _tensors_key(args: tuple[Any, ...], arrays: list[Any]) -> tuple[Any, ...] | None:
    """``_signature``'s key of a call with Tensors (not Variables) as its only arguments,
    positional, whose arrays it appends to ``arrays``; ``None`` for any other call."""
    key: list[Any] = [_CALL_KEY, (tuple, len(args))]
    for x in args:
        if x.__class__ is not Tensor:
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
