"""Planning: which slots a replay frees where, which ops it folds, and which buffers it reuses.

Everything here reads a captured program (``capture``) and decides; nothing runs it. Each
intermediate's life runs from the op that makes it to its last read (a possible view keeps
its base alive); every op whose forward takes ``out=`` (NumPy's ufuncs, and forwards marked
``writes_into``) writes into a buffer of its shape and dtype that is free by then, and
elementwise ops write over an input that dies there. Nothing the caller can hold is a
buffer. Ops on constants only are computed once (``fold``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from tapefit.core.capture import ASSIGN, END, GUARD, HOST, OP, UPDATE, Ref
from tapefit.core.marks import overwrites

if TYPE_CHECKING:
    from tapefit.core.function import Program

__all__ = ["fold", "lives", "plan", "with_frees"]

F = TypeVar("F", bound=Callable[..., Any])
_ndarray = np.ndarray
_asarray = np.asarray


def with_frees(code: list[tuple[Any, ...]], outputs: list[Any]) -> list[tuple[Any, ...]]:
    """``code`` with, on each instruction, the slots read for the last time there: a replay
    drops them at once, so that memory is reused and ``assign*`` can write in place."""
    kept = {x.slot for x in outputs if isinstance(x, Ref)}
    last: dict[int, int] = {}
    for index, (kind, _a, b, c, d) in enumerate(code):
        if kind == OP:
            reads: Any = b
            written: Any = (d,) if isinstance(d, int) else d
        elif kind == ASSIGN:
            reads, written = (c,), ()
        elif kind == HOST:
            reads, written = [x.slot for x in b[1] if isinstance(x, Ref)], () if c is None else (c,)
        elif kind == GUARD:
            reads, written = [x.slot for x in b[1] if isinstance(x, Ref)], ()
        elif kind == END:
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


def fold(program: Program) -> tuple[list[tuple[Any, ...]], list[Any]]:
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
    returned = {x.slot for x in program.outputs if isinstance(x, Ref)}
    code = []
    for ins in program.code:
        kind, forward, reads, attrs, out = ins[:5]
        outs = (out,) if kind == OP and out.__class__ is int else out
        if kind == OP and all(constant[i] for i in reads) and not returned.intersection(outs):
            result = forward(*[init[i] for i in reads], **(attrs or {}))
            values = (result,) if out.__class__ is int else result
            for slot, value in zip(outs, values):
                init[slot] = value if value.__class__ is _ndarray else _asarray(value)
                constant[slot] = True
            continue
        code.append(ins)
    return code, init


def lives(program: Program, code: list[tuple[Any, ...]]) -> tuple[dict[int, int], set[int]]:
    """Each slot's last use (its last read, or where it is made; a view's base lives as long
    as the view), and the slots the caller may hold (see ``plan``)."""
    escaped = {x.slot for x in program.outputs if isinstance(x, Ref)}
    last: dict[int, int] = {}
    for index, (kind, _a, b, c, d, _free) in enumerate(code):
        if kind == OP:
            reads: Any = b
            for slot in (d,) if d.__class__ is int else d:
                last.setdefault(slot, index)
        elif kind == ASSIGN:
            reads = (c,)
            if b == "assign":  # assign_add and assign_sub never keep their argument
                escaped.add(c)
        elif kind == HOST or kind == GUARD:
            reads = [x.slot for x in b[1] if x.__class__ is Ref]
            # Lent, not given: a replay checks after the call whether it kept them.
            escaped.update([slot for slot in reads if slot in program.views])
        elif kind == UPDATE:
            reads = c
        else:
            reads = ()
        for slot in reads:
            last[slot] = index
    for index in range(len(code) - 1, -1, -1):  # views made later extend their bases first
        kind, _a, b, _c, d, _free = code[index]
        if kind != OP:
            continue
        for out in (d,) if d.__class__ is int else d:
            if out in program.views:
                for slot in b:
                    last[slot] = max(last[slot], last[out])
                    if out in escaped:
                        escaped.add(slot)
    return last, escaped


def plan(
    program: Program, code: list[tuple[Any, ...]]
) -> tuple[dict[int, int], list[np.ndarray], dict[int, list[tuple[int, int]]], dict[int, list[int]]]:
    """The replay's buffers: which op outputs are written, with ``out=``, into which buffer.

    Liveness first: a slot lives from the op that makes it to its last read, and a view keeps
    its base alive (an op whose result may view its inputs, see ``capture.Trace._may_view``, extends
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
    last, escaped = lives(program, code)
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
        layout = program.layout.get(d) if kind == OP and d.__class__ is int else None
        over = overwrites(a, c) if layout is not None and d not in escaped else None
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
        elif kind == HOST or kind == GUARD:
            counts: dict[int, int] = {}
            ending: dict[int, bool] = {}
            for x in b[1]:
                if x.__class__ is Ref and x.slot in held:
                    counts[held[x.slot]] = counts.get(held[x.slot], 0) + 1
                    ending[held[x.slot]] = last[x.slot] == index
            if counts:
                lent[index] = sorted(counts.items())
                dying[index] = sorted(k for k, n in counts.items() if n == 1 and ending[k])
        release(ends.get(index, ()))
    return into, buffers, lent, dying
