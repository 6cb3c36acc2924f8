"""The model's graph for TensorBoard's Graphs tab, from one forward pass recorded on a tape.

The forward runs under a persistent ``GradientTape`` that watches the inputs (the model's
trainable Variables are watched as they are read), while ``observe_calls`` tells which
module call is in progress; each recorded op is named by the modules it ran in
(``sequential/dense_1/MatMul``), the way TensorFlow scopes names. Tensors that no recorded
op made become nodes of their own: the inputs (``Placeholder``), Variables (``VariableV2``,
named in the scope of their first use) and constants (``Const``). Output shapes go into each
node's ``_output_shapes``, which TensorBoard shows on the edges.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any

import numpy as np

from tapefit.core import nest
from tapefit.core.tape import GradientTape
from tapefit.core.tensor import Tensor, as_tensor
from tapefit.layers.module import Module, observe_calls


class GraphNode:
    """One node: its name, op type, input names (``name`` or ``name:k``), outputs' shapes and dtypes."""

    __slots__ = ("name", "op", "inputs", "shapes", "dtypes")

    def __init__(
        self, name: str, op: str, inputs: list[str], shapes: list[tuple[int, ...]], dtypes: list[np.dtype]
    ) -> None:
        self.name = name
        self.op = op
        self.inputs = inputs
        self.shapes = shapes
        self.dtypes = dtypes

    def __repr__(self) -> str:
        return f"<GraphNode {self.name} {self.op} inputs={self.inputs} shapes={self.shapes}>"


def trace_graph(model: Any, inputs: Any) -> list[GraphNode]:
    """Runs ``model(inputs, training=False)`` once and returns its graph's nodes.

    The call must leave the model as it was: with ``training=False`` dropout draws nothing
    and normalization statistics stay; the model should be built already (a lazy layer
    built here would draw its initial weights out of the training run's order).
    """
    tensors = nest.pack_sequence_as(
        inputs, [as_tensor(a) if isinstance(a, np.ndarray) else a for a in nest.flatten(inputs)]
    )
    flat_inputs = [t for t in nest.flatten(tensors) if isinstance(t, Tensor)]
    scopes: list[str] = []
    # (index of the first tape entry recorded inside it, scope) per module call, in call order
    marks: list[tuple[int, tuple[str, ...]]] = []
    tape = GradientTape(persistent=True)

    def observer(module: Any, entering: bool) -> None:
        if entering:
            scopes.append(module.name)
        else:
            scopes.pop()
        marks.append((len(tape._entries), tuple(scopes)))

    with tape, observe_calls(observer):
        for t in flat_inputs:
            if t.dtype.kind == "f":
                tape.watch(t)
        _call(model, tensors)
    entries = list(tape._entries)
    variables = dict(tape._variables)

    # Scope of each entry: the innermost module call in progress when it was recorded.
    entry_scopes: list[tuple[str, ...]] = []
    mark_index = 0
    current: tuple[str, ...] = ()
    for i in range(len(entries)):
        while mark_index < len(marks) and marks[mark_index][0] <= i:
            current = marks[mark_index][1]
            mark_index += 1
        entry_scopes.append(current)

    nodes: list[GraphNode] = []
    taken: set[str] = set()
    produced: dict[int, str] = {}  # tensor id -> "node" or "node:k"

    def unique(name: str) -> str:
        candidate, k = name, 0
        while candidate in taken:
            k += 1
            candidate = f"{name}_{k}"
        taken.add(candidate)
        return candidate

    for k, t in enumerate(flat_inputs):
        name = unique("input" if len(flat_inputs) == 1 else f"input_{k}")
        nodes.append(GraphNode(name, "Placeholder", [], [tuple(t.shape)], [t.dtype]))
        produced[t._id] = name

    for op, scope in zip(entries, entry_scopes):
        prefix = "/".join(scope)
        input_names = []
        for i, tensor_id in enumerate(op.input_ids):
            source = produced.get(tensor_id)
            if source is None:
                variable = variables.get(tensor_id)
                base = variable.name if variable is not None else "Const"
                source = unique(f"{prefix}/{base}" if prefix else base)
                kind = "VariableV2" if variable is not None else "Const"
                shape, dtype = op.input_shapes[i], op.input_dtypes[i]
                nodes.append(GraphNode(source, kind, [], [tuple(shape)], [dtype]))
                produced[tensor_id] = source
            input_names.append(source)
        name = unique(f"{prefix}/{op.type}" if prefix else op.type)
        nodes.append(
            GraphNode(
                name, op.type, input_names, [tuple(s) for s in op.output_shapes], list(op.output_dtypes)
            )
        )
        for j, tensor_id in enumerate(op.output_ids):
            produced[tensor_id] = name if j == 0 else f"{name}:{j}"
    return nodes


def _call(model: Any, inputs: Any) -> Any:
    # A Module passes training= on only to a call that takes it; another callable gets it
    # only if its signature has it.
    if isinstance(model, Module):
        return model(inputs, training=False)
    parameters: Mapping[str, inspect.Parameter]
    try:
        parameters = inspect.signature(model).parameters
    except (TypeError, ValueError):
        parameters = {}
    if "training" in parameters:
        return model(inputs, training=False)
    return model(inputs)


def to_graph_def(nodes: list[GraphNode]) -> Any:
    """The nodes as a TensorFlow ``GraphDef`` protocol buffer (tensorboardX's copy of it)."""
    from tensorboardX.proto.attr_value_pb2 import AttrValue
    from tensorboardX.proto.graph_pb2 import GraphDef
    from tensorboardX.proto.node_def_pb2 import NodeDef
    from tensorboardX.proto.tensor_shape_pb2 import TensorShapeProto
    from tensorboardX.proto.versions_pb2 import VersionDef

    def shape_proto(shape: tuple[int, ...]) -> Any:
        return TensorShapeProto(dim=[TensorShapeProto.Dim(size=int(n)) for n in shape])

    graph = GraphDef(versions=VersionDef(producer=22))
    for node in nodes:
        attrs = {
            "_output_shapes": AttrValue(
                list=AttrValue.ListValue(shape=[shape_proto(s) for s in node.shapes])
            ),
        }
        if node.dtypes:
            attrs["dtype"] = AttrValue(s=np.dtype(node.dtypes[0]).name.encode())
        graph.node.append(NodeDef(name=node.name, op=node.op, input=node.inputs, attr=attrs))
    return graph
