"""Emit: a planned program written out as one Python function of straight-line NumPy calls.

Each slot is a local variable, deleted after its last read (so memory is reused and
``assign*`` find their arrays unshared, as in eager code); constants, functions and
Variables are globals of the function. Running it costs the NumPy calls and little else:
no loop over instructions, no list of slots. The source holds only names made here (and
the ``assign*`` method names); every value reaches it as a global.

Each instruction kind has one emitter, registered in ``EMITTERS`` with ``emits``; an
emitter appends the instruction's lines to a ``Source``. A different way of running a kind
(a fused kernel for a run of elementwise ops, say) is another emitter for it, passed to
``compile_program``; the rest of the writing is shared.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from tapefit.core import nest
from tapefit.core import tensor as _tensor
from tapefit.core.capture import ASSIGN, DRAW, END, GUARD, HOST, OP, READ, UPDATE, Ref
from tapefit.core.fuse import fuse
from tapefit.core.marks import source_of
from tapefit.core.planning import fold, plan
from tapefit.core.tensor import Variable, _wrap

if TYPE_CHECKING:
    from tapefit.core.function import Program

__all__ = ["EMITTERS", "Source", "compile_program", "emits"]

F = TypeVar("F", bound=Callable[..., Any])
_ndarray = np.ndarray
_asarray = np.asarray


class Source:
    """A replay function being written: its lines, its globals and what the plan decided.

    ``planned``: the ops that can write into a given array do, with ``out=``, into the
    buffers ``plan`` assigned (allocated there, once, and kept by the program).
    """

    def __init__(self, program: Program, planned: bool) -> None:
        self.program = program
        self.names: dict[str, Any] = {
            "_ndarray": _ndarray,
            "_asarray": _asarray,
            "_wrap": _wrap,
            "_refcount": sys.getrefcount,
            "_host_result_error": _host_result_error,
            "_empty_like": np.empty_like,
        }
        self.into: dict[int, int] = {}  # op output slot -> its buffer
        self.lent: dict[int, list[tuple[int, int]]] = {}  # host call -> (buffer, Tensors of it)
        self.dying: dict[int, list[int]] = {}  # host call -> the lent buffers it may overwrite
        self.swapped: list[int] = []  # buffers a host call may keep: globals the replay rebinds
        self.code, self.init = program.code, program.init
        if planned:
            self.code, self.init = fold(program)
            if program.fused:
                self.code = fuse(program, self.code)
            self.into, program.buffers, self.lent, self.dying = plan(program, self.code)
            for k, array in enumerate(program.buffers):
                self.names[f"b{k}"] = array
        self.local = _locals(program.inputs, self.code)
        # A host call's result may have any shape and dtype on a replay: no slot of one is checked.
        self.unchecked = {ins[3] for ins in self.code if ins[0] == HOST and ins[3] is not None}
        self.lines = [f"def replay({', '.join(f's{i}' for i in program.inputs)}):"]
        self.pad = ""  # "    " inside a guarded region's checked branch
        self.hosted = False  # a host call runs before: a guarded region's check may fail mid-call
        self.region: tuple[Any, ...] | None = None  # the open region's GUARD instruction and index

    def slot(self, i: int) -> str:
        """The expression of slot ``i``: a local, or a constant captured at trace time (or folded)."""
        if i in self.local:
            return f"s{i}"
        self.names[f"k{i}"] = self.init[i]
        return f"k{i}"

    def const(self, value: Any) -> str:
        """The name of a new global of the replay bound to ``value``."""
        name = f"g{len(self.names)}"
        self.names[name] = value
        return name

    def body(self, line: str) -> None:
        """Appends ``line`` (indented one level by the caller) to the function's body."""
        self.lines.append(self.pad + line)

    def frees(self, free: tuple[int, ...]) -> None:
        """Deletes the locals of the slots in ``free`` (read for the last time)."""
        dropped = [f"s{i}" for i in free if i in self.local]
        if dropped:
            self.body(f"    del {', '.join(dropped)}")

    def finish(self) -> Callable[..., list[Any]]:
        """The function: its return, compiled."""
        self.body(f"    return {_result(self.program.structure, self.const)}")
        if self.swapped:
            self.lines.insert(1, f"    global {', '.join(sorted({f'b{k}' for k in self.swapped}))}")
        namespace: dict[str, Any] = dict(self.names)
        source = "\n".join(self.lines)
        exec(compile(source, "<tp.function replay>", "exec"), namespace)
        replay = namespace["replay"]
        replay.source = source  # for a reader (and the tests): what a replay runs
        return replay


Emitter = Callable[[Source, int, tuple[Any, ...]], None]

# Instruction kind -> its emitter (see ``emits``).
EMITTERS: dict[int, Emitter] = {}


def emits(kind: int, registry: dict[int, Emitter] = EMITTERS) -> Callable[[Emitter], Emitter]:
    """Registers an emitter of instructions of ``kind``: ``emitter(source, index, instruction)``
    appends the lines that run the instruction (at position ``index`` of ``source.code``; the
    instruction's last item is the tuple of slots read for the last time there)."""

    def register(emitter: Emitter) -> Emitter:
        registry[kind] = emitter
        return emitter

    return register


def compile_program(
    program: Program, planned: bool = True, emitters: dict[int, Emitter] = EMITTERS
) -> Callable[..., list[Any]]:
    """``program`` as one Python function of straight-line NumPy calls (see the module)."""
    source = Source(program, planned)
    for index, instruction in enumerate(source.code):
        emitters[instruction[0]](source, index, instruction)
    return source.finish()


@emits(OP)
def _emit_op(src: Source, index: int, ins: tuple[Any, ...]) -> None:
    _kind, forward, reads, attrs, out, free = ins
    buffer = src.into.get(out) if out.__class__ is int else None
    target = "None" if buffer is None else f"b{buffer}"
    lines = _op_lines(forward, [src.slot(i) for i in reads], attrs, target, out.__class__ is int, src.const)
    for line in _results(lines, out, buffer):
        src.body(f"    {line}")
    src.frees(free)


@emits(READ)
def _emit_read(src: Source, index: int, ins: tuple[Any, ...]) -> None:
    src.body(f"    s{ins[2]} = {src.const(ins[1])}._value")
    src.frees(ins[5])


@emits(DRAW)
def _emit_draw(src: Source, index: int, ins: tuple[Any, ...]) -> None:
    src.body(f"    s{ins[2]} = {src.const(ins[1])}()")
    src.frees(ins[5])


@emits(ASSIGN)
def _emit_assign(src: Source, index: int, ins: tuple[Any, ...]) -> None:
    _kind, variable, method, value, wrap, free = ins
    # The value is taken before the frees: an assign* writes in place only when the
    # variable's array has no other holder.
    src.body(f"    _v = {src.slot(value)}")
    src.frees(free)
    checked = (
        variable.__class__ is Variable
        and value not in src.unchecked
        and (value in src.local or _same_dtype(src.init[value], variable))
    )
    for line in _assign_lines(src.const(variable), method, wrap, checked, src.const):
        src.body(f"    {line}")


@emits(HOST)
def _emit_host(src: Source, index: int, ins: tuple[Any, ...]) -> None:
    _kind, fn, args, out, scratch, free = ins
    src.body(f"    _a = {_result(args[0], src.const, src.slot)}")
    # The arguments' slots before the call (the optimizer then updates in place); a
    # result nothing reads after the call, once the call has made it.
    src.frees(tuple(i for i in free if i != out))
    traced = None if out is None else src.program.hosted[out]
    lent = src.lent.get(index, [])
    _host_call_lines(src, fn, out, lent, src.dying.get(index) if scratch else None, traced)
    src.frees(tuple(i for i in free if i == out))
    src.hosted = True


@emits(UPDATE)
def _emit_update(src: Source, index: int, ins: tuple[Any, ...]) -> None:
    """A fused ``assign_add``/``assign_sub``: the kernel writes the new value into the
    variable's array when nothing else holds it (as ``assign*`` would), else into a new one."""
    _kind, variable, (forward, _method), reads, _none, free = ins
    v, kernel = src.const(variable), src.const(forward.kernel)
    args = [src.slot(i) for i in reads]
    src.body(f"    _w = {v}._value")
    src.frees(tuple(s for s in free if s not in reads))  # e.g. the variable's own read, first
    src.body(f"    if {_SOLE_HOLDER} and _w.flags.c_contiguous: {kernel}({forward.arguments('_w', args)})")
    src.body(f"    else: _n = _w.copy(); {kernel}({forward.arguments('_n', args)}); {v}._value = _n; del _n")
    src.body("    del _w")
    src.frees(tuple(s for s in free if s in reads))


@emits(GUARD)
def _emit_guard(src: Source, index: int, ins: tuple[Any, ...]) -> None:
    _kind, guard, args, fallback, _none, free = ins
    if src.hosted and src.region is None:
        src.region = (index, guard, args, fallback, free)
        src.body(f"    if {src.const(src.program.guards[guard])}():")
        src.pad = "    "
        src.body("    pass")
    src.frees(free)


@emits(END)
def _emit_end(src: Source, index: int, ins: tuple[Any, ...]) -> None:
    if src.region is None:
        return
    # The check failed after the entry's passed: the host-call update, with this call's
    # values (the region's slots are alive in this branch, as it deletes none of them).
    at, _check, args, fallback, dropped = src.region
    src.region = None
    src.pad = ""
    src.body("    else:")
    src.pad = "    "
    src.body(f"    _a = {_result(args[0], src.const, src.slot)}")
    src.frees(dropped)
    _host_call_lines(src, fallback, None, src.lent.get(at, []))
    src.pad = ""


def _op_lines(
    forward: Any, args: list[str], attrs: Any, out: str, single: bool, const: Callable[[Any], str]
) -> list[str]:
    """Lines that leave in ``_r`` what ``forward(*args, **attrs)`` returns (written into the
    buffer ``out`` unless it is ``"None"``): the forward's own source if it has one
    (``replay_source``), else a call."""
    source = source_of(forward) if single else None
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
        f"if {_SOLE_HOLDER}: {f}(_w, _v, out=_w)",
        f"else: {variable}._value = {f}(_w, _v)",
        "del _v, _w",
    ]


def _local_refs(variable: Variable) -> int:
    _w = variable._value
    return sys.getrefcount(_w)


# What a replay's ``_refcount(_w)`` sees for a variable's array held by the variable alone
# and the local ``_w`` (measured, as tensor.py measures its count); None: no refcounts.
_SOLE_LOCAL_REFS = _local_refs(Variable(0.0)) if _tensor._refcount is not None else None

# The condition a replay tests before writing into a variable's array ``_w`` in place, as
# ``assign*`` would: nothing else holds it, it is its own memory, and writable.
_SOLE_HOLDER = (
    "False"
    if _SOLE_LOCAL_REFS is None
    else f"_refcount(_w) <= {_SOLE_LOCAL_REFS} and _w.base is None and _w.flags.writeable"
)


def _locals(inputs: list[int], code: list[tuple[Any, ...]]) -> set[int]:
    """The slots a replay holds in local variables (the others are constants)."""
    local = set(inputs)
    for kind, _, b, c, d, _ in code:
        if kind == OP:
            local.update((d,) if d.__class__ is int else d)
        elif kind in (READ, DRAW):
            local.add(b)
        elif kind == HOST and c is not None:
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
    src: Source,
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
    body, const = src.body, src.const
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
    src.swapped.extend([k for k, _count in checks])  # rebound: globals of the replay


def _result(structure: Any, const: Callable[[Any], str], slot: Callable[[int], str] = "s{}".format) -> str:
    """An expression that builds the function's result (or a host call's arguments):
    ``structure`` with each ``Ref`` wrapped as a Tensor of ``slot(its slot)`` and every other
    leaf a constant (containers as ``nest`` rebuilds them)."""
    # An explicit stack of (node, its child expressions so far, its children left).
    stack: list[tuple[Any, list[str], list[Any]]] = [(None, [], [structure])]
    while True:
        node, built, left = stack[-1]
        if len(stack) > 32:  # deeper than Python's parser takes comfortably: rebuild at run time
            leaves = [
                f"_wrap({slot(x.slot)})" if x.__class__ is Ref else const(x) for x in nest.flatten(structure)
            ]
            return f"{const(nest.pack_sequence_as)}({const(structure)}, [{', '.join(leaves)}])"
        if left:
            child = left.pop(0)
            if isinstance(child, dict):
                stack.append((child, [], list(child.values())))
            elif isinstance(child, (list, tuple)):
                stack.append((child, [], list(child)))
            else:
                built.append(f"_wrap({slot(child.slot)})" if child.__class__ is Ref else const(child))
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
