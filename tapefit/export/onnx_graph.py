"""The ONNX form of a traced forward pass: each recorded op becomes ONNX nodes (opset 17).

``to_onnx`` traces the model twice (``trace.BATCHES``), reads which axes are batch axes from
the two traces, and maps each op with the converter of its name in ``_CONVERTERS``. Images
are NHWC in tapefit and NCHW in ONNX's Conv and pooling: the converters transpose around them.
Variables become initializers; the batch axis of every input and output is dynamic.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from typing import Any

import numpy as np

from tapefit.core.files import atomic_write
from tapefit.core.tensor import Tensor, Variable
from tapefit.export.trace import BATCHES, ExportError, Trace, TracedOp, trace_call
from tapefit.layers.module import Module
from tapefit.layers.symbolic import SymbolicTensor

OPSET = 17
_INT64_MAX = np.iinfo(np.int64).max


def _onnx() -> Any:
    try:
        import onnx
    except ImportError:
        raise ImportError("ONNX export needs the onnx package: pip install 'tapefit[onnx]'") from None
    return onnx


# -- symbolic shapes -----------------------------------------------------------
# A dimension is an int (a fixed size) or ``-k`` for ``k`` times the batch size (k >= 1);
# ``None`` when the two traces disagree in another way.


def _dim(a: int, b: int) -> int | None:
    if a == b:
        return a
    k = b - a
    if k > 0 and a == k * BATCHES[0] and b == k * BATCHES[1]:
        return -k
    return None


def _dims(a: Any, b: Any) -> tuple[int | None, ...] | None:
    if len(a) != len(b):
        return None
    return tuple(_dim(int(x), int(y)) for x, y in zip(a, b))


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return (
            isinstance(a, np.ndarray)
            and isinstance(b, np.ndarray)
            and a.shape == b.shape
            and a.dtype == b.dtype
            and bool(np.array_equal(a, b, equal_nan=a.dtype.kind in "fc"))
        )
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    try:
        return bool(a == b)
    except Exception:
        return False


class _Builder:
    """The ONNX graph being written: nodes, initializers and the name of every slot."""

    def __init__(self, first: Trace, second: Trace) -> None:
        self.onnx = _onnx()
        self.first, self.second = first, second
        self.nodes: list[Any] = []
        self.initializers: list[Any] = []
        self.names: dict[int, str] = {}  # slot -> value name
        self.variable_names: dict[int, str] = {}  # id(variable) -> initializer name
        self.taken: set[str] = set()
        self.pooled: dict[int, int] = {}  # MaxPoolIndices output slot -> the pooled input's slot
        self.op: TracedOp | None = None
        self._batch: str | None = None

    # -- names and constants -------------------------------------------------

    def fresh(self, base: str) -> str:
        name, count = base, 0
        while name in self.taken:
            count += 1
            name = f"{base}_{count}"
        self.taken.add(name)
        return name

    def node(self, op_type: str, inputs: list[str], outputs: int | list[str] = 1, **attrs: Any) -> Any:
        names = (
            [self.fresh(f"{op_type.lower()}") for _ in range(outputs)]
            if isinstance(outputs, int)
            else outputs
        )
        self.nodes.append(
            self.onnx.helper.make_node(op_type, inputs, names, name=self.fresh(f"node_{op_type}"), **attrs)
        )
        return names[0] if len(names) == 1 else names

    def constant(self, value: Any, base: str = "const") -> str:
        name = self.fresh(base)
        self.initializers.append(self.onnx.numpy_helper.from_array(np.asarray(value), name))
        return name

    def ints(self, values: Any) -> str:
        return self.constant(np.asarray(values, np.int64), "ints")

    def scalar(self, value: Any, like: np.dtype) -> str:
        return self.constant(np.asarray(value, like), "scalar")

    def batch(self) -> str:
        """The batch size, a 1-D int64 tensor of one element read from the first input."""
        if self._batch is None:
            self._batch = self.node("Shape", [self.names[self.first.inputs[0]]], start=0, end=1)
        return self._batch

    def shape_tensor(self, dims: tuple[int | None, ...], inferred: set[int] | None = None) -> str:
        """A 1-D int64 shape: fixed sizes as constants, ``-k`` as ``k`` times the batch size;
        the positions in ``inferred`` are -1 (Reshape's inferred size)."""
        inferred = inferred or set()
        dims = tuple(0 if i in inferred else d for i, d in enumerate(dims))
        if all(d is not None and d >= 0 for d in dims):
            return self.ints([-1 if i in inferred else d for i, d in enumerate(dims)])
        pieces = []
        for i, d in enumerate(dims):
            if i in inferred:
                pieces.append(self.ints([-1]))
                continue
            if d is None:
                raise self.error("depends on the batch size in a way ONNX export cannot follow")
            if d >= 0:
                pieces.append(self.ints([d]))
            else:
                pieces.append(self.batch() if d == -1 else self.node("Mul", [self.batch(), self.ints([-d])]))
        return self.node("Concat", pieces, axis=0)

    def error(self, what: str) -> ExportError:
        op = self.op
        assert op is not None
        where = f" (in layer '{op.layer}')" if op.layer else ""
        return ExportError(f"ONNX export: op '{op.name}'{where} {what}")

    # -- slots -----------------------------------------------------------------

    def shape(self, slot: int) -> tuple[int, ...]:
        return self.first.shapes[slot]

    def dtype(self, slot: int) -> np.dtype:
        return self.first.dtypes[slot]

    def sym(self, slot: int) -> tuple[int | None, ...]:
        dims = _dims(self.first.shapes[slot], self.second.shapes[slot])
        if dims is None:
            raise self.error("has an input whose rank depends on the batch size")
        return dims

    def value(self, slot: int) -> str:
        """The name of a slot's value, writing a Variable or constant the first time it is read."""
        name = self.names.get(slot)
        if name is not None:
            return name
        if slot in self.pooled:
            raise self.error("reads the argmax positions of a max pooling, which has no ONNX form")
        variable = self.first.variables.get(slot)
        if variable is not None:
            name = self.variable_names.get(id(variable))
            if name is None:
                name = self.constant(variable.numpy(), _initializer_name(variable))
                self.variable_names[id(variable)] = name
        elif slot in self.first.constants:
            name = self._constant(slot)
        else:
            raise self.error("reads a value the trace did not see made")
        self.names[slot] = name
        return name

    def _constant(self, slot: int) -> str:
        a, b = self.first.constants[slot], self.second.constants.get(slot)
        if b is not None and _same(a, b):
            return self.constant(a)
        dims = _dims(a.shape, b.shape) if b is not None else None
        if (
            dims is not None
            and a.size
            and np.all(a == a.flat[0])
            and b is not None
            and np.all(b == a.flat[0])
        ):
            return self.node("Expand", [self.scalar(a.flat[0], a.dtype), self.shape_tensor(dims)])
        raise self.error(f"takes a constant of shape {a.shape} that depends on the batch size")


def _initializer_name(variable: Variable) -> str:
    return str(getattr(variable, "name", None) or "weight").replace(":", "_")


# -- converters ------------------------------------------------------------------
# Each takes the builder, the op and its inputs' names, and returns the names of its outputs.

Converter = Callable[[_Builder, TracedOp, list[str]], list[str]]
_CONVERTERS: dict[str, Converter] = {}


def _converts(*names: str) -> Callable[[Converter], Converter]:
    def decorator(fn: Converter) -> Converter:
        for name in names:
            _CONVERTERS[name] = fn
        return fn

    return decorator


def _elementwise(onnx_type: str) -> Converter:
    def convert(g: _Builder, op: TracedOp, x: list[str]) -> list[str]:
        return [g.node(onnx_type, x)]

    return convert


for _name, _type in {
    "Add": "Add",
    "Sub": "Sub",
    "Mul": "Mul",
    "RealDiv": "Div",
    "Maximum": "Max",
    "Minimum": "Min",
    "Pow": "Pow",
    "Equal": "Equal",
    "Greater": "Greater",
    "GreaterEqual": "GreaterOrEqual",
    "Less": "Less",
    "LessEqual": "LessOrEqual",
    "LogicalAnd": "And",
    "LogicalOr": "Or",
    "LogicalNot": "Not",
    "Abs": "Abs",
    "Cos": "Cos",
    "Sin": "Sin",
    "Erf": "Erf",
    "Exp": "Exp",
    "Floor": "Floor",
    "Log": "Log",
    "Neg": "Neg",
    "Relu": "Relu",
    "Sigmoid": "Sigmoid",
    "Sign": "Sign",
    "Softplus": "Softplus",
    "Sqrt": "Sqrt",
    "Tanh": "Tanh",
    "Elu": "Elu",
    "Identity": "Identity",
    "StopGradient": "Identity",
    "AddN": "Sum",
    "Select": "Where",
}.items():
    _CONVERTERS[_name] = _elementwise(_type)


@_converts("NotEqual")
def _not_equal(g: _Builder, op: TracedOp, x: list[str]) -> list[str]:
    return [g.node("Not", [g.node("Equal", x)])]


@_converts("Square")
def _square(g: _Builder, op: TracedOp, x: list[str]) -> list[str]:
    return [g.node("Mul", [x[0], x[0]])]


@_converts("Log1p")
def _log1p(g: _Builder, op: TracedOp, x: list[str]) -> list[str]:
    return [g.node("Log", [g.node("Add", [x[0], g.scalar(1, g.dtype(op.inputs[0]))])])]


@_converts("FloorDiv")
def _floor_div(g: _Builder, op: TracedOp, x: list[str]) -> list[str]:
    if g.dtype(op.inputs[0]).kind != "f":
        raise g.error("on integers has no ONNX form (ONNX's Div rounds toward zero)")
    return [g.node("Floor", [g.node("Div", x)])]


@_converts("FloorMod")
def _floor_mod(g: _Builder, op: TracedOp, x: list[str]) -> list[str]:
    if g.dtype(op.inputs[0]).kind != "f":
        return [g.node("Mod", x, fmod=0)]
    # x - floor(x / y) * y: the sign of y, as Python's %
    return [g.node("Sub", [x[0], g.node("Mul", [g.node("Floor", [g.node("Div", x)]), x[1]])])]


@_converts("LeakyRelu")
def _leaky_relu(g: _Builder, op: TracedOp, x: list[str]) -> list[str]:
    return [g.node("LeakyRelu", x, alpha=float(op.attrs["alpha"]))]


@_converts("Gelu")
def _gelu(g: _Builder, op: TracedOp, x: list[str]) -> list[str]:
    dtype = g.dtype(op.inputs[0])
    half = g.node("Mul", [x[0], g.scalar(0.5, dtype)])
    if op.attrs["approximate"]:
        cube = g.node("Mul", [g.node("Mul", [x[0], x[0]]), x[0]])
        inner = g.node("Add", [x[0], g.node("Mul", [cube, g.scalar(0.044715, dtype)])])
        t = g.node("Tanh", [g.node("Mul", [inner, g.scalar(math.sqrt(2 / math.pi), dtype)])])
    else:
        t = g.node("Erf", [g.node("Mul", [x[0], g.scalar(math.sqrt(0.5), dtype)])])
    return [g.node("Mul", [half, g.node("Add", [t, g.scalar(1, dtype)])])]


@_converts("Softmax", "LogSoftmax")
def _softmax(g: _Builder, op: TracedOp, x: list[str]) -> list[str]:
    return [g.node(op.name, x, axis=int(op.attrs["axis"]))]


@_converts("MaskedSoftmax")
def _masked_softmax(g: _Builder, op: TracedOp, x: list[str]) -> list[str]:
    dtype = g.dtype(op.inputs[0])
    filled = g.node("Where", [x[1], x[0], g.scalar(-3e4 if dtype == np.float16 else -1e9, dtype)])
    return [g.node("Softmax", [filled], axis=int(op.attrs["axis"]))]


@_converts("Cast")
def _cast(g: _Builder, op: TracedOp, x: list[str]) -> list[str]:
    to = g.onnx.helper.np_dtype_to_tensor_dtype(np.dtype(op.attrs["dtype"]))
    return [g.node("Cast", x, to=to)]


@_converts("Dense")
def _dense(g: _Builder, op: TracedOp, x: list[str]) -> list[str]:
    out = g.node("MatMul", x[:2])
    if len(x) == 3:
        out = g.node("Add", [out, x[2]])
    return [g.node("Relu", [out]) if op.attrs["relu"] else out]


def _swap_last(g: _Builder, name: str, rank: int) -> str:
    perm = list(range(rank))
    perm[-2:] = perm[-1], perm[-2]
    return g.node("Transpose", [name], perm=perm)


@_converts("MatMul")
def _matmul(g: _Builder, op: TracedOp, x: list[str]) -> list[str]:
    a, b = x
    if op.attrs["transpose_a"]:
        a = _swap_last(g, a, len(g.shape(op.inputs[0])))
    if op.attrs["transpose_b"]:
        b = _swap_last(g, b, len(g.shape(op.inputs[1])))
    return [g.node("MatMul", [a, b])]


@_converts("Einsum")
def _einsum(g: _Builder, op: TracedOp, x: list[str]) -> list[str]:
    subscripts, output = list(op.attrs["subscripts"]), op.attrs["output"]
    if len(x) != 2 or any(len(set(s)) != len(s) for s in subscripts):
        return [g.node("Einsum", x, equation=",".join(subscripts) + "->" + output)]
    # Two operands as one batched MatMul (what MultiHeadAttention's einsums are): letters in
    # both and in the output batch it, letters in both only are contracted, the others stay.
    sizes: dict[str, int | None] = {}
    for slot, letters in zip(op.inputs, subscripts):
        sizes.update(zip(letters, g.sym(slot)))
    names = list(x)
    for k in range(2):  # a letter of one operand only, not in the output, is summed out first
        other = subscripts[1 - k]
        gone = [i for i, c in enumerate(subscripts[k]) if c not in other and c not in output]
        if gone:
            names[k] = g.node("ReduceSum", [names[k], g.ints(gone)], keepdims=0)
            subscripts[k] = "".join(c for c in subscripts[k] if c in other or c in output)
    a, b = subscripts
    batch = [c for c in a if c in b and c in output]
    contracted = [c for c in a if c in b and c not in output]
    free_a = [c for c in a if c not in b]
    free_b = [c for c in b if c not in a]

    def arrange(name: str, letters: str, order: list[str], rows: list[str], cols: list[str]) -> str:
        perm = [letters.index(c) for c in order]
        if perm != list(range(len(perm))):
            name = g.node("Transpose", [name], perm=perm)
        dims = [sizes[c] for c in batch] + [
            _product([sizes[c] for c in rows]),
            _product([sizes[c] for c in cols]),
        ]
        return g.node("Reshape", [name, g.shape_tensor(tuple(dims))])

    left = arrange(names[0], a, batch + free_a + contracted, free_a, contracted)
    right = arrange(names[1], b, batch + contracted + free_b, contracted, free_b)
    product = g.node("MatMul", [left, right])
    result_letters = batch + free_a + free_b
    out = g.node("Reshape", [product, g.shape_tensor(tuple(sizes[c] for c in result_letters))])
    perm = [result_letters.index(c) for c in output]
    if perm != list(range(len(perm))):
        out = g.node("Transpose", [out], perm=perm)
    return [out]


def _product(dims: list[int | None]) -> int | None:
    """The size of axes merged into one, symbolically: at most one of them a batch axis."""
    if any(d is None for d in dims) or sum(1 for d in dims if d is not None and d < 0) > 1:
        return None
    fixed = math.prod(d for d in dims if d is not None and d >= 0)
    batch = [d for d in dims if d is not None and d < 0]
    return batch[0] * fixed if batch else fixed


@_converts("Reshape")
def _reshape(g: _Builder, op: TracedOp, x: list[str]) -> list[str]:
    a, b = op.attrs["shape"], _second(g, op).attrs["shape"]
    inferred = {i for i, (u, v) in enumerate(zip(a, b)) if u == -1 and v == -1}
    return [g.node("Reshape", [x[0], g.shape_tensor(_batch_attr(g, op, "shape"), inferred)])]


def _batch_attr(g: _Builder, op: TracedOp, key: str) -> tuple[int | None, ...]:
    """A shape attr in the symbolic form: sizes that differ between the traces are batch sizes."""
    dims = _dims(op.attrs[key], _second(g, op).attrs[key])
    if dims is None:
        raise g.error(f"has a {key} that depends on the batch size in a way ONNX export cannot follow")
    return dims


def _second(g: _Builder, op: TracedOp) -> TracedOp:
    return g.second.ops[g.first.ops.index(op)]


@_converts("Transpose")
def _transpose(g: _Builder, op: TracedOp, x: list[str]) -> list[str]:
    return [g.node("Transpose", x, perm=[int(p) for p in op.attrs["perm"]])]


@_converts("BroadcastTo")
def _broadcast_to(g: _Builder, op: TracedOp, x: list[str]) -> list[str]:
    dims = _batch_attr(g, op, "shape")
    # Expand broadcasts both ways: a batch axis the input already has may be given as 1
    source = g.sym(op.inputs[0])
    offset = len(dims) - len(source)
    fixed = tuple(
        1 if d is not None and d < 0 and i >= offset and source[i - offset] == d else d
        for i, d in enumerate(dims)
    )
    return [g.node("Expand", [x[0], g.shape_tensor(fixed)])]


@_converts("ConcatV2")
def _concat(g: _Builder, op: TracedOp, x: list[str]) -> list[str]:
    return [g.node("Concat", x, axis=int(op.attrs["axis"]))]


@_converts("Pack")
def _pack(g: _Builder, op: TracedOp, x: list[str]) -> list[str]:
    axis = int(op.attrs["axis"])
    axes = g.ints([axis])
    return [g.node("Concat", [g.node("Unsqueeze", [v, axes]) for v in x], axis=axis)]


@_converts("Unpack")
def _unpack(g: _Builder, op: TracedOp, x: list[str]) -> list[str]:
    axis = int(op.attrs["axis"])
    count = len(op.outputs)
    parts = g.node("Split", [x[0], g.ints([1] * count)], count, axis=axis)
    parts = [parts] if count == 1 else parts
    axes = g.ints([axis])
    return [g.node("Squeeze", [p, axes]) for p in parts]


@_converts("SplitV")
def _split(g: _Builder, op: TracedOp, x: list[str]) -> list[str]:
    sizes = [int(s) for s in op.attrs["sizes"]]
    parts = g.node("Split", [x[0], g.ints(sizes)], len(sizes), axis=int(op.attrs["axis"]))
    return [parts] if len(sizes) == 1 else list(parts)


@_converts("Tile")
def _tile(g: _Builder, op: TracedOp, x: list[str]) -> list[str]:
    if not _same(op.attrs["multiples"], _second(g, op).attrs["multiples"]):
        raise g.error("tiles by a multiple that depends on the batch size")
    return [g.node("Tile", [x[0], g.ints(op.attrs["multiples"])])]


@_converts("PadV2", "MirrorPad")
def _pad(g: _Builder, op: TracedOp, x: list[str]) -> list[str]:
    pads = op.attrs["paddings"]
    spec = g.ints([p[0] for p in pads] + [p[1] for p in pads])
    if op.name == "MirrorPad":
        if op.attrs["mode"] != "REFLECT":
            raise g.error(f"with mode {op.attrs['mode']!r} has no ONNX form (ONNX pads by REFLECT only)")
        return [g.node("Pad", [x[0], spec], mode="reflect")]
    value = np.asarray(op.attrs["value"], g.dtype(op.inputs[0]))
    return [g.node("Pad", [x[0], spec, g.constant(value)], mode="constant")]


@_converts("GatherV2")
def _gather(g: _Builder, op: TracedOp, x: list[str]) -> list[str]:
    source = g.pooled.get(op.inputs[1])
    if source is not None:  # max_pool2d: gather(reshape(x, [-1]), MaxPoolIndices(x))
        indices = next(o for o in g.first.ops if o.outputs[0] == op.inputs[1])
        return [_pool(g, indices, g.value(source), "MaxPool")]
    if op.attrs["batch_dims"]:
        raise g.error("with batch_dims has no ONNX form here")
    return [g.node("Gather", x, axis=int(op.attrs["axis"]))]


@_converts("MaxPoolIndices")
def _max_pool_indices(g: _Builder, op: TracedOp, x: list[str]) -> list[str]:
    g.pooled[op.outputs[0]] = op.inputs[0]
    return []


def _nchw(g: _Builder, name: str) -> str:
    return g.node("Transpose", [name], perm=[0, 3, 1, 2])


def _nhwc(g: _Builder, name: str) -> str:
    return g.node("Transpose", [name], perm=[0, 2, 3, 1])


def _pads(win: Any) -> list[int]:
    top, bottom, left, right = win.pads
    return [int(top), int(left), int(bottom), int(right)]


def _pool(g: _Builder, op: TracedOp, x: str, onnx_type: str) -> str:
    win = op.attrs["win"]
    attrs: dict[str, Any] = {
        "kernel_shape": [int(k) for k in op.attrs["ksize"]],
        "strides": [int(s) for s in win.strides],
        "pads": _pads(win),
    }
    if onnx_type == "AveragePool":
        attrs["count_include_pad"] = 0
    return _nhwc(g, g.node(onnx_type, [_nchw(g, x)], **attrs))


@_converts("AvgPool")
def _avg_pool(g: _Builder, op: TracedOp, x: list[str]) -> list[str]:
    return [_pool(g, op, x[0], "AveragePool")]


@_converts("Conv2D")
def _conv2d(g: _Builder, op: TracedOp, x: list[str]) -> list[str]:
    win = op.attrs["win"]
    kh, kw = g.shape(op.inputs[1])[:2]
    weights = g.node("Transpose", [x[1]], perm=[3, 2, 0, 1])  # (h, w, in, out) -> (out, in, h, w)
    out = g.node(
        "Conv",
        [_nchw(g, x[0]), weights],
        kernel_shape=[int(kh), int(kw)],
        strides=[int(s) for s in win.strides],
        dilations=[int(d) for d in win.dilations],
        pads=_pads(win),
    )
    return [_nhwc(g, out)]


@_converts("Conv2DBackpropInput")
def _conv2d_transpose(g: _Builder, op: TracedOp, x: list[str]) -> list[str]:
    # conv2d_transpose(x, w) is Conv2DBackpropInput(w, x); ONNX's ConvTranspose crops ``pads``
    # from its full output, and output_padding adds the rows the forward windows never reach
    win = op.attrs["win"]
    again = _second(g, op).attrs
    if again["win"] != win or again["input_shape"][1:] != op.attrs["input_shape"][1:]:
        raise g.error("has attributes that depend on the batch size, which ONNX export cannot follow")
    kh, kw = g.shape(op.inputs[0])[:2]
    height, width = op.attrs["input_shape"][1:3]
    extra = [
        (size + before + after - ((k - 1) * d + 1)) % s
        for size, k, d, s, before, after in zip(
            (height, width), (kh, kw), win.dilations, win.strides, win.pads[::2], win.pads[1::2]
        )
    ]
    weights = g.node("Transpose", [x[0]], perm=[3, 2, 0, 1])  # (h, w, out, in) -> (in, out, h, w)
    out = g.node(
        "ConvTranspose",
        [_nchw(g, x[1]), weights],
        kernel_shape=[int(kh), int(kw)],
        strides=[int(s) for s in win.strides],
        dilations=[int(d) for d in win.dilations],
        pads=_pads(win),
        output_padding=[int(e) for e in extra],
    )
    return [_nhwc(g, out)]


@_converts("DepthwiseConv2dNative")
def _depthwise_conv2d(g: _Builder, op: TracedOp, x: list[str]) -> list[str]:
    # a grouped Conv, one group per input channel; output channel c * multiplier + m, as ONNX
    win = op.attrs["win"]
    kh, kw, channels, multiplier = g.shape(op.inputs[1])
    weights = g.node("Transpose", [x[1]], perm=[2, 3, 0, 1])  # (h, w, c, m) -> (c, m, h, w)
    weights = g.node("Reshape", [weights, g.ints([channels * multiplier, 1, kh, kw])])
    out = g.node(
        "Conv",
        [_nchw(g, x[0]), weights],
        kernel_shape=[int(kh), int(kw)],
        strides=[int(s) for s in win.strides],
        dilations=[int(d) for d in win.dilations],
        pads=_pads(win),
        group=int(channels),
    )
    return [_nhwc(g, out)]


_REDUCTIONS = {
    "Sum": "ReduceSum",
    "Mean": "ReduceMean",
    "Max": "ReduceMax",
    "Min": "ReduceMin",
    "Prod": "ReduceProd",
}


@_converts(*_REDUCTIONS, "Any", "All")
def _reduce(g: _Builder, op: TracedOp, x: list[str]) -> list[str]:
    axes = [int(a) for a in op.attrs["axis"]]
    keepdims = int(bool(op.attrs["keepdims"]))
    source = x[0]
    logical = op.name in ("Any", "All")
    if logical:
        source = g.node("Cast", [source], to=g.onnx.TensorProto.INT32)
    elif op.name in ("Sum", "Mean") and g.dtype(op.inputs[0]).kind == "b":
        source = g.node("Cast", [source], to=g.onnx.TensorProto.INT32)
    if not axes:
        out = g.node("Identity", [source])
    elif op.name == "Sum":
        out = g.node("ReduceSum", [source, g.ints(axes)], keepdims=keepdims)
    else:
        kind = {"Any": "ReduceMax", "All": "ReduceMin"}.get(op.name) or _REDUCTIONS[op.name]
        out = g.node(kind, [source], axes=axes, keepdims=keepdims)
    if logical:
        out = g.node("Cast", [out], to=g.onnx.TensorProto.BOOL)
    return [out]


@_converts("OneHot")
def _one_hot(g: _Builder, op: TracedOp, x: list[str]) -> list[str]:
    # Where(Unsqueeze(indices, axis) == arange(depth) along axis, on, off), not ONNX's OneHot:
    # onnxruntime runs OneHot for a few index and depth dtypes only, and OneHot counts a
    # negative index from the end where tapefit (as tf.one_hot) gives a row of off values.
    axis, depth = int(op.attrs["axis"]), int(op.attrs["depth"])
    on, off = np.asarray(op.attrs["on"]), np.asarray(op.attrs["off"])
    after = len(g.shape(op.inputs[0])) - axis  # the index axes after the new one
    classes = g.constant(np.arange(depth, dtype=np.int64).reshape((depth,) + (1,) * after), "classes")
    indices = g.node("Cast", [x[0]], to=g.onnx.TensorProto.INT64)
    hit = g.node("Equal", [g.node("Unsqueeze", [indices, g.ints([axis])]), classes])
    return [g.node("Where", [hit, g.constant(on), g.constant(off)])]


@_converts("GetItem")
def _getitem(g: _Builder, op: TracedOp, x: list[str]) -> list[str]:
    key = op.attrs["key"]
    if not _same(key, _second(g, op).attrs["key"]):
        raise g.error("indexes with a key that depends on the batch size")
    parts = list(key) if isinstance(key, tuple) else [key]
    shape, sym = g.shape(op.inputs[0]), g.sym(op.inputs[0])
    if any(isinstance(p, np.ndarray) for p in parts):
        arrays = [i for i, p in enumerate(parts) if isinstance(p, np.ndarray)]
        p = parts[arrays[0]]
        simple = (
            len(arrays) == 1
            and p.dtype.kind in "iu"
            and all(isinstance(q, slice) and q == slice(None) for i, q in enumerate(parts) if i != arrays[0])
        )
        if not simple or Ellipsis in [q for q in parts if not isinstance(q, np.ndarray)]:
            raise g.error(
                "indexes with arrays in a way that has no ONNX form here (one int array on one axis only)"
            )
        return [g.node("Gather", [x[0], g.constant(p.astype(np.int64))], axis=arrays[0])]
    used = sum(1 for p in parts if p is not None and p is not Ellipsis)
    if Ellipsis in parts:
        at = parts.index(Ellipsis)
        parts[at : at + 1] = [slice(None)] * (len(shape) - used)
    parts += [slice(None)] * (len(shape) - sum(1 for p in parts if p is not None))
    starts: list[int] = []
    ends: list[int] = []
    axes: list[int] = []
    steps: list[int] = []
    squeeze: list[int] = []
    unsqueeze: list[int] = []
    axis = out_axis = 0
    for p in parts:
        if p is None:
            unsqueeze.append(out_axis)
            out_axis += 1
            continue
        if isinstance(p, slice):
            if p != slice(None):
                size = sym[axis]
                if size is None or size < 0:
                    raise g.error("slices a batch axis, which the exported graph keeps whole")
                start, stop, step = p.indices(shape[axis])
                if step < 0 and stop < 0:
                    stop = -_INT64_MAX  # through the first element
                starts.append(start)
                ends.append(stop)
                axes.append(axis)
                steps.append(step)
            out_axis += 1
        else:
            index = int(p)
            size = sym[axis]
            if size is None or size < 0:
                raise g.error("picks one element of a batch axis, which the exported graph keeps whole")
            index %= shape[axis]
            starts.append(index)
            ends.append(index + 1)
            axes.append(axis)
            steps.append(1)
            squeeze.append(axis)
        axis += 1
    out = x[0]
    if axes:
        out = g.node("Slice", [out, g.ints(starts), g.ints(ends), g.ints(axes), g.ints(steps)])
    if squeeze:
        out = g.node("Squeeze", [out, g.ints(squeeze)])
    if unsqueeze:
        out = g.node("Unsqueeze", [out, g.ints(unsqueeze)])
    if out == x[0]:
        out = g.node("Identity", [out])
    return [out]


def _split_even(g: _Builder, z: str, count: int) -> list[str]:
    return list(g.node("Split", [z], count, axis=-1))


def _lstm_step(g: _Builder, z: str, c_prev: str) -> tuple[str, str, list[str]]:
    """One LSTM step's nodes: ``h``, ``c`` and the four gates."""
    i, f, gate, o = _split_even(g, z, 4)
    i, f, o = (g.node("Sigmoid", [v]) for v in (i, f, o))
    gate = g.node("Tanh", [gate])
    c = g.node("Add", [g.node("Mul", [f, c_prev]), g.node("Mul", [i, gate])])
    h = g.node("Mul", [g.node("Tanh", [c]), o])
    return h, c, [i, f, gate, o]


@_converts("LSTMCell")
def _lstm_cell(g: _Builder, op: TracedOp, x: list[str]) -> list[str]:
    h, c, gates = _lstm_step(g, *x)
    return [h, c, g.node("Concat", gates, axis=-1)]


@_converts("LSTMSequence")
def _lstm_sequence(g: _Builder, op: TracedOp, x: list[str]) -> list[str]:
    inputs, kernel, recurrent, bias, h, c, *mask = x
    projected = g.node("Add", [g.node("MatMul", [inputs, kernel]), bias])

    def step(t: int, states: list[str]) -> list[str]:
        xw = g.node("Gather", [projected, g.ints(t)], axis=1)
        z = g.node("Add", [xw, g.node("MatMul", [states[0], recurrent])])
        return list(_lstm_step(g, z, states[1])[:2])

    return _unrolled(g, op, mask, [h, c], step)


def _gru_step(g: _Builder, xw: str, hw: str, h: str) -> tuple[str, list[str]]:
    """One GRU step's nodes: the new state and the gates ``z, r`` and the candidate."""
    x_z, x_r, x_h = _split_even(g, xw, 3)
    h_z, h_r, h_h = _split_even(g, hw, 3)
    z = g.node("Sigmoid", [g.node("Add", [x_z, h_z])])
    r = g.node("Sigmoid", [g.node("Add", [x_r, h_r])])
    c = g.node("Tanh", [g.node("Add", [g.node("Mul", [r, h_h]), x_h])])
    return g.node("Add", [g.node("Mul", [g.node("Sub", [h, c]), z]), c]), [z, r, c]  # c + z * (h - c)


@_converts("GRUCell")
def _gru_cell(g: _Builder, op: TracedOp, x: list[str]) -> list[str]:
    out, gates = _gru_step(g, *x)
    return [out, g.node("Concat", gates, axis=-1)]


def _unrolled(
    g: _Builder, op: TracedOp, mask: list[str], states: list[str], step: Callable[[int, list[str]], list[str]]
) -> list[str]:
    """A sequence op's outputs over the traced number of steps, as the per-step layers export:
    ``step(t, states)`` gives step ``t``'s new states (the output first); Keras's mask rule
    (see ``lstm_sequence``) with a ``mask``. Returns the outputs (batch, time, units) and the
    last states; the op's working outputs, which only its gradient reads, get no nodes."""
    zero = g.scalar(0, g.first.dtypes[op.inputs[0]])
    outputs: list[str] = []
    for t in range(g.first.shapes[op.inputs[0]][1]):
        new = step(t, states)
        if not mask:
            states, output = new, new[0]
        else:
            keep = g.node("Unsqueeze", [g.node("Gather", [mask[0], g.ints(t)], axis=1), g.ints([1])])
            states = [g.node("Where", [keep, n, s]) for n, s in zip(new, states)]
            zeros = not outputs or op.attrs.get("zero_output_for_mask", False)
            output = g.node("Where", [keep, new[0], zero if zeros else outputs[-1]])
        outputs.append(output)
    sequence = g.node("Concat", [g.node("Unsqueeze", [o, g.ints([1])]) for o in outputs], axis=1)
    return [sequence, *(g.node("Identity", [s]) for s in states)]


@_converts("GRUSequence")
def _gru_sequence(g: _Builder, op: TracedOp, x: list[str]) -> list[str]:
    inputs, kernel, recurrent, bias, h, *mask = x
    input_bias, recurrent_bias = (g.node("Gather", [bias, g.ints(k)], axis=0) for k in (0, 1))
    projected = g.node("Add", [g.node("MatMul", [inputs, kernel]), input_bias])

    def step(t: int, states: list[str]) -> list[str]:
        xw = g.node("Gather", [projected, g.ints(t)], axis=1)
        hw = g.node("Add", [g.node("MatMul", [states[0], recurrent]), recurrent_bias])
        return [_gru_step(g, xw, hw, states[0])[0]]

    return _unrolled(g, op, mask, [h], step)


@_converts("RNNCell")
def _rnn_cell(g: _Builder, op: TracedOp, x: list[str]) -> list[str]:
    xw, h, kernel = x
    return [g.node("Tanh", [g.node("Add", [g.node("MatMul", [h, kernel]), xw])])]


# -- the model ---------------------------------------------------------------------


def _input_specs(model: Module, input_signature: Any) -> list[tuple[tuple[int | None, ...], np.dtype, str]]:
    """Each input's (shape with the batch axis first, dtype, name)."""
    if input_signature is None:
        inputs = getattr(model, "inputs", None)
        if isinstance(inputs, list) and inputs and all(isinstance(t, SymbolicTensor) for t in inputs):
            names = model.input_names if hasattr(model, "input_names") else [t.name for t in inputs]
            return [(tuple(t.shape), np.dtype(t.dtype), n) for t, n in zip(inputs, names)]
        shape = getattr(model, "_build_input_shape", None)
        if shape is None:
            raise ExportError(
                f"ONNX export: model '{model.name}' has no known input shape; pass "
                "input_signature=(None, ...) (or a sample batch), or call the model once first"
            )
        input_signature = shape
    specs = input_signature if _is_list_of_specs(input_signature) else [input_signature]
    out = []
    for k, spec in enumerate(specs):
        name = f"input_{k}" if len(specs) > 1 else "input"
        if isinstance(spec, SymbolicTensor):
            out.append((tuple(spec.shape), np.dtype(spec.dtype), spec.name))
        elif isinstance(spec, (np.ndarray, Tensor)):
            array = np.asarray(spec.numpy() if isinstance(spec, Tensor) else spec)
            out.append(((None, *array.shape[1:]), array.dtype, name))
        elif isinstance(spec, (tuple, list)) and all(
            d is None or isinstance(d, (int, np.integer)) for d in spec
        ):
            out.append((tuple(None if d is None else int(d) for d in spec), np.dtype(np.float32), name))
        else:
            raise ExportError(
                f"ONNX export: input_signature takes shapes (tuples with the batch axis first), sample "
                f"arrays or tp.Input tensors, got {spec!r}"
            )
    return out


def _is_list_of_specs(value: Any) -> bool:
    if not isinstance(value, (list, tuple)) or not value:
        return False
    return all(isinstance(v, (list, tuple, np.ndarray, Tensor, SymbolicTensor)) for v in value)


def _samples(specs: list[tuple[tuple[int | None, ...], np.dtype, str]], batch: int) -> list[np.ndarray]:
    arrays = []
    rng = np.random.default_rng(0)
    for shape, dtype, name in specs:
        if not shape:
            raise ExportError(f"ONNX export: input '{name}' has no batch axis")
        missing = [i for i, d in enumerate(shape[1:], 1) if d is None]
        if missing:
            raise ExportError(
                f"ONNX export: axis {missing[0]} of input '{name}' has no fixed size; give it in input_signature"
            )
        full = (batch, *(int(d) for d in shape[1:] if d is not None))
        if dtype.kind == "f":
            # in [0, 1): valid where a model casts its float inputs to ids (they become 0)
            arrays.append(rng.uniform(0.0, 1.0, full).astype(dtype))
        elif dtype.kind == "b":
            arrays.append(np.ones(full, dtype))
        else:
            arrays.append(np.zeros(full, dtype))
    return arrays


def _packer(model: Module, count: int) -> Callable[[list[Tensor]], Any]:
    structure = getattr(model, "_inputs_structure", None)
    if isinstance(structure, dict):
        names = model.input_names  # type: ignore[attr-defined]
        return lambda tensors: dict(zip(names, tensors))
    if count == 1 and not isinstance(structure, (list, tuple)):
        return lambda tensors: tensors[0]
    return list


def build_model_proto(model: Module, input_signature: Any = None) -> Any:
    """The ONNX ``ModelProto`` of ``model``'s forward pass in inference mode; see ``to_onnx``."""
    onnx = _onnx()
    for module in [model, *model.submodules]:
        reason = getattr(module, "onnx_unsupported", None)  # a preprocessing layer says why
        if reason:
            raise ExportError(f"ONNX export: layer '{module.name}' ({type(module).__name__}) {reason}")
    specs = _input_specs(model, input_signature)
    pack = _packer(model, len(specs))
    first, second = (trace_call(model, _samples(specs, b), pack) for b in BATCHES)
    if [op.name for op in first.ops] != [op.name for op in second.ops] or len(first.shapes) != len(
        second.shapes
    ):
        raise ExportError(
            f"ONNX export: model '{model.name}' runs different ops for different batch sizes; "
            "its graph cannot keep the batch size dynamic"
        )
    g = _Builder(first, second)
    helper = onnx.helper
    graph_inputs = []
    for slot, (shape, dtype, name) in zip(first.inputs, specs):
        g.names[slot] = g.fresh(name)
        graph_inputs.append(
            helper.make_tensor_value_info(
                g.names[slot], helper.np_dtype_to_tensor_dtype(dtype), ["batch", *shape[1:]]
            )
        )
    # the outputs' names are taken first, so that no node or weight takes them
    output_names = [g.fresh(base) for base in _output_names(model, len(first.outputs))]
    for op, again in zip(first.ops, second.ops):
        g.op = op
        convert = _CONVERTERS.get(op.name)
        if convert is None:
            raise g.error("has no ONNX form")
        if op.name not in _BATCH_ATTRS and not _same(op.attrs, again.attrs):
            raise g.error("has attributes that depend on the batch size, which ONNX export cannot follow")
        pooled = op.name == "MaxPoolIndices" or (op.name == "GatherV2" and op.inputs[1] in g.pooled)
        outputs = convert(g, op, [] if pooled else [g.value(s) for s in op.inputs])
        for slot, name in zip(op.outputs, outputs):
            g.names[slot] = name
    graph_outputs = []
    for slot, name in zip(first.outputs, output_names):
        g.op = TracedOp("output", (), {}, (), None)
        g.node("Identity", [g.value(slot)], [name])  # its own name, also for an input or a weight
        dims = [_dim_param(d) for d in _dims(first.shapes[slot], second.shapes[slot]) or ()]
        graph_outputs.append(
            helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(first.dtypes[slot]), dims)
        )
    nodes, initializers = _used(g.nodes, g.initializers, output_names)
    graph = helper.make_graph(nodes, model.name, graph_inputs, graph_outputs, initializers)
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="tapefit")
    proto.ir_version = min(proto.ir_version, 8)  # onnxruntime 1.17 reads IR 8 with opset 17
    onnx.checker.check_model(proto)
    return proto


# Ops whose converters read the batch axes off their attrs (the others' attrs must not change).
_BATCH_ATTRS = frozenset(["Reshape", "BroadcastTo", "Conv2DBackpropInput"])


def _used(nodes: list[Any], initializers: list[Any], outputs: list[str]) -> tuple[list[Any], list[Any]]:
    """The nodes and initializers the outputs depend on (max pooling leaves a Reshape unread)."""
    needed = set(outputs)
    kept = []
    for node in reversed(nodes):
        if any(name in needed for name in node.output):
            kept.append(node)
            needed.update(node.input)
    return kept[::-1], [t for t in initializers if t.name in needed]


def _dim_param(d: int | None) -> int | str | None:
    if d is None or d >= 0:
        return d
    return "batch" if d == -1 else f"batch*{-d}"


def _output_names(model: Module, count: int) -> list[str]:
    names = getattr(model, "output_names", None)
    if isinstance(names, list) and len(names) == count:
        return [str(n) for n in names]
    return ["output"] if count == 1 else [f"output_{k}" for k in range(count)]


def to_onnx(model: Module, path: str | os.PathLike[str], input_signature: Any = None) -> None:
    """Writes ``model``'s forward pass in inference mode (``training=False``) as an ONNX file.

    The model is traced on sample batches; every op it runs becomes ONNX nodes (opset 17),
    its variables initializers. The batch axis of the inputs and outputs is dynamic; every
    other axis keeps the size it was traced with (recurrent layers are unrolled over it).
    The file is written as tapefit writes every file: to a temporary file renamed over
    ``path``, so that a link or a named pipe at ``path`` is replaced, never written through.

    Args:
        model: the model (a functional ``tp.Model``, a ``Sequential`` or any ``Module``).
        path: where to write the ``.onnx`` file.
        input_signature: the inputs' shapes with the batch axis first (``(None, 28, 28, 1)``,
            or a list of them for several inputs; float32), sample batches (ndarrays, whose
            dtypes are kept) or ``tp.Input`` tensors. Not needed for a functional model, or
            for a model called before (the shape of its first call is used).

    Raises:
        ValueError: an op or layer has no ONNX form (the message names it), or the input
            shape is unknown.
        ImportError: the ``onnx`` package is missing (``pip install 'tapefit[onnx]'``).
        OSError: the file could not be written (a full disk); it names ``path``, and the file
            that was there before is left as it was.
    """
    data = build_model_proto(model, input_signature).SerializeToString()
    atomic_write(path, lambda f: f.write(data))  # complete or absent, and never through a link


__all__ = ["ExportError", "build_model_proto", "to_onnx"]
