"""Tracing a model's forward pass into a list of recorded ops, for exporters.

A ``_Recorder`` stands where a ``tp.function`` trace stands (``tapefit.core.tensor``'s
trace list): every op the forward pass runs reports its forward function, input tensors,
attrs and outputs to it. Arrays are followed by identity, as ``tp.function`` follows them:
an op's input is a model input, an earlier op's output, a Variable's value or a constant.
The op's name comes from the registry (``forward_op_name``), and the innermost module
running it from ``observe_calls``.

The model is traced twice, on batches of 2 and of 3 samples: an axis whose size differs
between the traces is a batch axis (its size ``k * batch``), so that the exported graph can
keep the batch size dynamic.
"""

from __future__ import annotations

import os
import sys
import types
from dataclasses import dataclass, field
from threading import get_ident
from typing import Any

import numpy as np

from tapefit.core import nest
from tapefit.core import tensor as _tensor
from tapefit.core.capture import DRAW as _DRAW
from tapefit.core.registry import forward_op_name
from tapefit.core.tensor import Tensor, Variable
from tapefit.layers.module import Module, observe_calls

_CORE_DIR = os.path.dirname(os.path.abspath(_tensor.__file__)) + os.sep
_PACKAGE_DIR = os.path.dirname(_CORE_DIR.rstrip(os.sep)) + os.sep

# Batch sizes of the two traces. A dimension ``d`` of the first trace that is ``d + d / 2``
# in the second is ``d / 2`` times the batch size.
BATCHES = (2, 3)


class ExportError(ValueError):
    """A model, layer or op that cannot be exported; the message is one line naming it."""


@dataclass
class TracedOp:
    """One recorded op: its registry name, input and output slots, attrs and the layer running it."""

    name: str
    inputs: tuple[int, ...]
    attrs: dict[str, Any]
    outputs: tuple[int, ...]
    layer: str | None


@dataclass
class Trace:
    """The ops of one forward pass, with every slot's array shape and dtype.

    A slot is one array: a model input, an op output, a Variable's value (``variables``) or
    a constant captured at trace time (``constants``).
    """

    ops: list[TracedOp] = field(default_factory=list)
    shapes: list[tuple[int, ...]] = field(default_factory=list)
    dtypes: list[np.dtype] = field(default_factory=list)
    constants: dict[int, np.ndarray] = field(default_factory=dict)
    variables: dict[int, Variable] = field(default_factory=dict)
    inputs: list[int] = field(default_factory=list)
    outputs: list[int] = field(default_factory=list)


class _Recorder:
    """What ops report to while a model is traced (the interface of a ``tp.function`` trace)."""

    def __init__(self) -> None:
        self.thread = get_ident()
        self.trace = Trace()
        self.slot_of: dict[int, int] = {}  # id(array) -> slot
        self.keep: list[Any] = []  # every array seen stays alive, so that no id is reused
        self.code = _Unexportable(self)  # random draws and host calls append here: neither exports
        self.hosted: dict[int, Any] = {}  # a host call's Tensor result, as tp.function keeps it
        self.layers: list[str] = []
        self.dynamic: set[int] = set()  # the slots computed from the model's inputs

    def new_slot(self, array: Any) -> int:
        array = np.asarray(array) if not isinstance(array, np.ndarray) else array
        slot = len(self.trace.shapes)
        self.trace.shapes.append(tuple(array.shape))
        self.trace.dtypes.append(array.dtype)
        self.slot_of[id(array)] = slot
        self.keep.append(array)
        return slot

    def const(self, value: Any) -> int:
        slot = self.new_slot(value)
        self.trace.constants[slot] = np.asarray(value)
        return slot

    def ref(self, t: Tensor) -> int:
        if t._is_variable and get_ident() == self.thread:
            slot = self.new_slot(t._value)
            self.trace.variables[slot] = t  # type: ignore[assignment]
            return slot
        known = self.slot_of.get(id(t._value))
        return self.const(t._value) if known is None else known

    def array_ref(self, value: Any) -> int:
        known = self.slot_of.get(id(value))
        return self.const(value) if known is None else known

    def op(self, forward: Any, inputs: tuple[Tensor, ...], attrs: Any, outputs: Any) -> None:
        if get_ident() != self.thread:
            return
        slots = tuple(self.ref(t) for t in inputs)
        outs = outputs if isinstance(outputs, tuple) else (outputs,)
        name = forward_op_name(forward) or str(getattr(forward, "__name__", repr(forward)))
        layer = self.layers[-1] if self.layers else None
        out_slots = tuple(self.new_slot(t._value) for t in outs)
        if any(s in self.dynamic for s in slots):
            self.dynamic.update(out_slots)
        self.trace.ops.append(TracedOp(name, slots, dict(attrs or {}), out_slots, layer))

    def assign(self, variable: Variable, method: str, value: Any) -> None:
        if get_ident() == self.thread:
            layer = self.layers[-1] if self.layers else "the model"
            raise ExportError(
                f"ONNX export: layer '{layer}' changes variable '{variable.name}' in inference mode "
                "(training=False); an exported graph cannot"
            )

    def value_read(self, t: Tensor) -> None:
        if get_ident() != self.thread or t._is_variable or self.slot_of.get(id(t._value)) not in self.dynamic:
            return  # weights and constants are fixed in the exported graph: reading them is fine
        filename, line = _user_frame()
        raise ExportError(
            f"ONNX export: the forward pass uses a tensor's value as a Python value at {filename}:{line}; "
            "keep it in tapefit ops (e.g. tp.where instead of if)"
        )

    def observe(self, module: Module, entering: bool) -> None:
        if entering:
            self.layers.append(module.name)
        else:
            self.layers.pop()


class _Unexportable:
    """Where a trace's random draws and host calls go (``tp.function`` lists them in its code):
    keeps the first, as one line naming the op, the layer running it and the line calling it."""

    def __init__(self, recorder: _Recorder) -> None:
        self.recorder = recorder
        self.first: str | None = None

    def append(self, entry: tuple[Any, ...]) -> None:
        if self.first is not None:
            return
        kind, fn = entry[0], entry[1]
        what = "draws random numbers" if kind == _DRAW else "makes a host call"
        layers = self.recorder.layers
        where = f" (in layer '{layers[-1]}')" if layers else ""
        filename, line = _user_frame()
        self.first = (
            f"ONNX export: op '{_function_name(fn)}'{where} {what} in inference mode (training=False) "
            f"at {filename}:{line}, which has no ONNX form"
        )

    def __bool__(self) -> bool:
        return self.first is not None


def _function_name(fn: Any) -> str:
    """``tp.random.normal`` for the sampler ``tapefit.core.random.normal`` defines, else the
    function's qualified name (``Noisy.call.<lambda>``)."""
    name = str(getattr(fn, "__qualname__", None) or type(fn).__name__)
    module = str(getattr(fn, "__module__", None) or "")
    if module.startswith("tapefit."):
        return f"tp.{module.rsplit('.', 1)[-1]}.{name.split('.<locals>')[0]}"
    return name.replace(".<locals>", "")


def _user_frame() -> tuple[str, int]:
    """The innermost frame outside tapefit's core and this package: the line that read a value."""
    frame: types.FrameType | None = sys._getframe(2)
    while frame is not None and frame.f_code.co_filename.startswith((_CORE_DIR, _PACKAGE_DIR + "export")):
        frame = frame.f_back
    if frame is None:
        return "<unknown>", 0
    return frame.f_code.co_filename, frame.f_lineno


def trace_call(model: Module, arrays: list[np.ndarray], pack: Any) -> Trace:
    """Runs ``model(pack(arrays), training=False)`` and returns the ops it ran.

    Raises:
        ExportError: the forward pass draws random numbers, calls host code, assigns a
            variable or reads a tensor's value in Python, or returns no tensor.
    """
    if _tensor._traces:
        raise ExportError("ONNX export: cannot run inside a tp.function trace; call it outside")
    recorder = _Recorder()
    tensors = [_tensor._wrap(a) for a in arrays]
    for t in tensors:
        recorder.trace.inputs.append(recorder.new_slot(t._value))
    recorder.dynamic.update(recorder.trace.inputs)
    _tensor._traces.append(recorder)
    try:
        # the sample values are arbitrary: a 0/0 they cause (a mean over an all-masked row) is no news
        with observe_calls(recorder.observe), np.errstate(all="ignore"):
            result = model(pack(tensors), training=False)
    finally:
        _tensor._traces.clear()
    if recorder.code.first is not None:
        raise ExportError(recorder.code.first)
    for leaf in nest.flatten(result):
        if not isinstance(leaf, Tensor):
            raise ExportError(f"ONNX export: the model returns a {type(leaf).__name__}, not only tensors")
        recorder.trace.outputs.append(recorder.ref(leaf))
    return recorder.trace
