"""Fuse: the opt-in path of ``tp.function(jit_compile=True)``, which runs each run of
elementwise ops as one compiled loop.

NumPy makes one pass over memory per elementwise op: ``w - lr * g`` reads ``g``, writes a
temporary, then reads it and ``w`` and writes ``w``. This pass rewrites a program (after
``planning.fold``, before ``planning.plan``) so that such a run makes one pass:

- consecutive elementwise ops (forwards marked ``elementwise``) whose intermediates die
  inside the run become one ``OP`` whose forward is a ``Fused`` kernel, writing into a
  planned buffer as any op does;
- such a run whose result is then added to or subtracted from a Variable (an optimizer's
  ``assign_add``/``assign_sub``) becomes one ``UPDATE``: the kernel writes the new value
  into the variable's array, in place when nothing else holds it.

Kernels are loops that Numba compiles (an optional dependency: ``pip install
'tapefit[jit]'``), once per expression, input layout and dtype in a process. An input of the
output's shape, a row along its last axis (a bias) or a single value broadcasts; any other
run stays as it was. The arithmetic is IEEE arithmetic in the same order as NumPy's, so sums,
products and quotients agree bit for bit; ``exp``, ``log`` and ``tanh`` may differ in the last
bit, and ``maximum`` of -0.0 and 0.0 may pick the other zero. Results agree with eager within
1e-6 relative per step in float32 (tests check that over a whole training run).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from tapefit.core.capture import ASSIGN, GUARD, HOST, OP, READ, UPDATE
from tapefit.core.marks import elementwise_template, replay_source, writes_into
from tapefit.core.tensor import Variable

if TYPE_CHECKING:
    from tapefit.core.function import Program

__all__ = ["Fused", "fuse", "require_numba"]

_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))
Instruction = tuple[Any, ...]


def require_numba() -> Any:
    """The ``numba`` module, or an ImportError saying how to install it."""
    try:
        import numba
    except ImportError:
        raise ImportError(
            "tp.function(jit_compile=True) compiles its kernels with Numba, which is not installed: "
            "pip install 'tapefit[jit]' (or leave jit_compile off: the default path needs only NumPy)"
        ) from None
    return numba


# (source, dtype) -> the compiled kernel: a process compiles each kernel once.
_KERNELS: dict[tuple[str, str], Callable[..., Any]] = {}


def _kernel(
    statements: list[str], kinds: tuple[str, ...], dtype: np.dtype, update: bool
) -> Callable[..., Any]:
    """A compiled loop ``kernel(out, *inputs)`` over ``out``'s (rows, cols). Each line of
    ``statements`` assigns a ``t`` name from ``x1``, ``x2``, ... (the inputs' elements) and,
    for an ``update``, ``x0`` (``out``'s own element, read before it is written); the last
    one is the result. ``kinds``: per input, ``full`` (an array of ``out``'s shape), ``row``
    (indexed by column) or ``scalar`` (one value).

    ``out`` must not share memory with an input: the loop then compiles to vector
    instructions, which a possible overlap would rule out (an update reads its target as
    ``out`` itself)."""
    args = ", ".join(f"a{k}" for k in range(1, len(kinds) + 1))
    lines = [f"def kernel(out, {args}):", f"    zero = np.{dtype.name}(0)", "    rows, cols = out.shape"]
    lines += [f"    x{k} = a{k}[0]" for k, kind in enumerate(kinds, 1) if kind == "scalar"]
    lines += ["    for r in range(rows):", "        for c in range(cols):"]
    if update:
        lines.append("            x0 = out[r, c]")
    for k, kind in enumerate(kinds, 1):
        if kind == "full":
            lines.append(f"            x{k} = a{k}[r, c]")
        elif kind == "row":
            lines.append(f"            x{k} = a{k}[c]")
    lines += [f"            {line}" for line in statements]
    lines.append(f"            out[r, c] = {statements[-1].split(' = ', 1)[0]}")
    source = "\n".join(lines)
    key = (source, dtype.name)
    kernel = _KERNELS.get(key)
    if kernel is None:
        numba = require_numba()
        scope: dict[str, Any] = {"np": np, "math": math}
        exec(compile(source, "<tp.function fused kernel>", "exec"), scope)
        # error_model="numpy": a division by zero gives inf or nan, as NumPy's does, not an error.
        kernel = _KERNELS[key] = numba.njit(nogil=True, error_model="numpy")(scope["kernel"])
    return kernel


class Fused:
    """The forward of a fused run: a kernel over the output's (rows, cols), its inputs reshaped
    by kind. A planned replay writes its call out in its source; called, it computes the run
    as any op's forward does."""

    def __init__(
        self, kernel: Callable[..., Any], kinds: tuple[str, ...], shape: tuple[int, ...], dtype: np.dtype
    ) -> None:
        self.kernel, self.kinds, self.shape, self.dtype = kernel, kinds, shape, dtype
        self.rows, self.cols = (math.prod(shape[:-1]), shape[-1]) if shape else (1, 1)

    def arguments(self, out: str, args: list[str]) -> str:
        """The kernel's arguments as source: ``out`` and ``args`` reshaped by kind."""
        shaped = {"full": f"({self.rows}, {self.cols})", "row": f"({self.cols},)", "scalar": "(1,)"}
        views = [f"{a}.reshape({shaped[kind]})" for a, kind in zip(args, self.kinds)]
        return ", ".join([f"{out}.reshape({self.rows}, {self.cols})", *views])

    def __call__(self, *arrays: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        result = np.empty(self.shape, self.dtype) if out is None else out
        shaped = {"full": (self.rows, self.cols), "row": (self.cols,), "scalar": (1,)}
        inputs = [np.ascontiguousarray(a).reshape(shaped[kind]) for a, kind in zip(arrays, self.kinds)]
        self.kernel(result.reshape(self.rows, self.cols), *inputs)
        return result

    def source(self, name: Callable[[Any], str], args: list[str], attrs: Any, out: str) -> list[str]:
        """The replay's lines for this forward (see ``replay_source``)."""
        target = out if out != "None" else f"{name(np.empty)}({self.shape!r}, {name(self.dtype)})"
        return [f"_r = {target}", f"{name(self.kernel)}({self.arguments('_r', args)})"]


# (kernel, kinds, shape, dtype) -> its forward: the same object across traces, so that the
# marks registered on it stay few.
_FORWARDS: dict[tuple[Any, ...], Fused] = {}


def _fused(
    kernel: Callable[..., Any], kinds: tuple[str, ...], shape: tuple[int, ...], dtype: np.dtype
) -> Fused:
    key = (kernel, kinds, shape, dtype.name)
    forward = _FORWARDS.get(key)
    if forward is None:
        forward = _FORWARDS[key] = Fused(kernel, kinds, shape, dtype)
        # Into a planned buffer, but never an input's: see ``_kernel``.
        writes_into()(forward)
        replay_source(forward.source)(forward)
    return forward


def _kind(shape: tuple[int, ...], out: tuple[int, ...]) -> str | None:
    """How an input of ``shape`` broadcasts into an output of shape ``out``, if a kernel can."""
    if len(shape) > len(out):
        return None
    if shape == out:
        return "full"
    if math.prod(shape) == 1:
        return "scalar"
    if out and shape and shape[-1] == out[-1] and math.prod(shape) == out[-1]:
        return "row"
    return None


class _Fuser:
    """One pass of ``fuse`` over a program's code."""

    def __init__(self, program: Program, code: list[Instruction]) -> None:
        from tapefit.core.planning import lives

        self.program = program
        self.last, self.escaped = lives(program, code)
        self.reads_of: dict[int, tuple[Variable, int]] = {}  # READ slot -> (variable, index)
        self.touched: dict[int, int] = {}  # id(variable) -> where it was last assigned
        self.barrier = -1  # the last host call or guard: it may have assigned any variable
        self.result: list[Instruction] = []
        self.run: list[tuple[int, Instruction]] = []

    def fusible(self, ins: Instruction) -> bool:
        kind, forward, reads, attrs, out = ins[:5]
        if kind != OP or attrs or out.__class__ is not int or out in self.program.views:
            return False
        if elementwise_template(forward) is None:
            return False
        layout = self.program.layout.get(out)
        if layout is None or layout[1] not in _FLOATS:
            return False
        for slot in reads:
            known = self.program.shapes.get(slot)
            if known is None or known[1] != layout[1] or _kind(known[0], layout[0]) is None:
                return False
        return True

    def sound(self, end: int) -> bool:
        """Whether every intermediate of the run dies inside it (by ``end``)."""
        return all(
            ins[4] not in self.escaped and self.last.get(ins[4], -1) <= end for _, ins in self.run[:-1]
        )

    def compiled(self, update: Variable | None = None, sign: str = "") -> tuple[Fused, list[int]]:
        """The run's forward and its input slots (an update's kernel reads the variable's array
        as its output, ``x0``)."""
        made = {ins[4] for _, ins in self.run}
        shape, dtype = self._layout(self.run[-1][1][4])
        inputs: list[int] = []
        names: dict[int, str] = {}
        statements = []
        for _, (_, forward, reads, _, out, _) in self.run:
            args = []
            for slot in reads:
                read = self.reads_of.get(slot)
                if slot in made:
                    args.append(f"t{slot}")
                elif update is not None and read is not None and read[0] is update and self._still(read):
                    args.append("x0")  # the variable's array as it is now: read, and unchanged since
                else:
                    if slot not in names:
                        names[slot] = f"x{len(inputs) + 1}"
                        inputs.append(slot)
                    args.append(names[slot])
            template = elementwise_template(forward)
            assert template is not None
            statements.append(f"t{out} = " + template.format(*args))
        if update is not None:
            statements.append(f"t_new = x0 {sign} t{self.run[-1][1][4]}")
        kinds = tuple(_kind(self.program.shapes[s][0], shape) or "" for s in inputs)
        return _fused(_kernel(statements, kinds, dtype, update is not None), kinds, shape, dtype), inputs

    def _layout(self, slot: int) -> tuple[tuple[int, ...], np.dtype]:
        layout = self.program.layout[slot]
        assert layout is not None  # fusible ops have one
        return layout

    def _still(self, read: tuple[Variable, int]) -> bool:
        """Whether a variable read at ``read[1]`` holds the same array now (a run holds no
        assignment, so now is also when the run's update writes it)."""
        return max(self.touched.get(id(read[0]), -1), self.barrier) < read[1]

    def frees(self, extra: tuple[int, ...] = ()) -> tuple[int, ...]:
        """The slots the run's members read for the last time, but its intermediates."""
        made = {ins[4] for _, ins in self.run[:-1]}
        return tuple(s for _, ins in self.run for s in ins[5] if s not in made) + extra

    def flush(self) -> None:
        run = self.run
        # One NumPy ufunc is one pass already; a run, or a forward of several passes, is fused.
        several = len(run) > 1 or not isinstance(run[0][1][1], np.ufunc)
        if several and self.sound(run[-1][0]):
            forward, inputs = self.compiled()
            self.result.append((OP, forward, tuple(inputs), None, run[-1][1][4], self.frees()))
        else:
            self.result.extend(ins for _, ins in run)
        run.clear()

    def update(self, index: int, ins: Instruction) -> bool:
        """Whether the ``assign_add``/``assign_sub`` ``ins`` took the run's result in a fused
        update (appended)."""
        _, variable, method, value, _, free = ins
        if method not in ("assign_add", "assign_sub") or variable.__class__ is not Variable:
            return False
        out = self.run[-1][1][4]
        if value != out or self.last.get(out) != index or not self.sound(index):
            return False
        shape, dtype = self._layout(out)
        if variable._value.shape != shape or variable._value.dtype != dtype:
            return False
        forward, inputs = self.compiled(variable, "-" if method == "assign_sub" else "+")
        frees = self.frees(tuple(s for s in free if s != value))
        self.result.append(
            (UPDATE, variable, (forward, method), tuple(inputs), None, tuple(s for s in frees if s != out))
        )
        self.run.clear()
        return True

    def rewrite(self, code: list[Instruction]) -> list[Instruction]:
        for index, ins in enumerate(code):
            kind = ins[0]
            if self.fusible(ins):
                if self.run and not any(slot == m[4] for _, m in self.run for slot in ins[2]):
                    self.flush()
                self.run.append((index, ins))
                continue
            if kind == ASSIGN and self.run and self.update(index, ins):
                self.touched[id(ins[1])] = index
                continue
            if self.run:
                self.flush()
            if kind == READ:
                self.reads_of[ins[2]] = (ins[1], index)
            elif kind == ASSIGN:
                self.touched[id(ins[1])] = index
            elif kind == HOST or kind == GUARD:
                self.barrier = index
            self.result.append(ins)
        if self.run:
            self.flush()
        return self.result


def fuse(program: Program, code: list[Instruction]) -> list[Instruction]:
    """``code`` (folded, with its frees) with its fusible runs rewritten (see the module)."""
    return _Fuser(program, code).rewrite(code)
