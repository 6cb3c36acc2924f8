"""The model graph for TensorBoard: ops scoped by modules, shapes on the edges."""

from __future__ import annotations

import numpy as np

import tapefit as tp
from tapefit.plugins.model_graph import to_graph_def, trace_graph


class Block(tp.Module):
    def __init__(self, name=None):
        super().__init__(name=name)
        self.dense = tp.layers.Dense(4, activation="tanh", name="inner")
        self.gain = tp.Variable(2.0, name="gain")

    def call(self, x):
        a, b = tp.split(self.dense(x), 2, axis=1)  # a two-output op
        return tp.concat([a * self.gain, b], axis=1)


def built_model():
    tp.random.set_seed(0)
    model = tp.layers.Sequential(
        [Block(name="block"), tp.layers.Dropout(0.5), tp.layers.Dense(3)], name="net"
    )
    model(np.ones((2, 5), np.float32))
    return model


def test_ops_are_named_by_the_modules_that_ran_them():
    model = built_model()
    nodes = {n.name: n for n in trace_graph(model, np.ones((6, 5), np.float32))}
    assert nodes["input"].op == "Placeholder" and nodes["input"].shapes == [(6, 5)]
    matmul = nodes["net/block/inner/MatMul"]
    assert matmul.op == "MatMul" and matmul.inputs == ["input", "net/block/inner/kernel"]
    assert nodes["net/block/inner/kernel"].op == "VariableV2"
    assert nodes["net/block/inner/kernel"].shapes == [(5, 4)]
    split = next(n for n in nodes.values() if n.op.startswith("Split"))
    assert split.name.startswith("net/block/") and split.shapes == [(6, 2), (6, 2)]
    concat = next(n for n in nodes.values() if n.op.startswith("Concat"))
    assert f"{split.name}:1" in concat.inputs  # the second output, by index
    assert nodes["net/block/gain"].op == "VariableV2" and nodes["net/block/gain"].shapes == [()]
    last = [n for n in nodes.values() if n.name.startswith("net/dense")]
    # A Dense layer with no activation (or ReLU) runs as one fused op.
    assert {n.op for n in last} >= {"Dense", "VariableV2"} and last[-1].shapes == [(6, 3)]
    # Dropout at inference records nothing; every input names an existing node
    assert not any("dropout" in name for name in nodes)
    for node in nodes.values():
        for source in node.inputs:
            assert source.split(":")[0] in nodes, (node.name, source)


def test_tracing_changes_nothing_in_the_model_or_the_random_state():
    model = built_model()
    before = {k: v.copy() for k, v in model.state_dict().items()}
    state = tp.random.get_state()
    trace_graph(model, np.ones((3, 5), np.float32))
    for key, value in model.state_dict().items():
        np.testing.assert_array_equal(value, before[key])
    assert str(tp.random.get_state()) == str(state)


def test_graph_def_has_the_shapes_on_the_nodes():
    graph = to_graph_def(trace_graph(built_model(), np.ones((6, 5), np.float32)))
    by_name = {node.name: node for node in graph.node}
    shapes = by_name["net/block/inner/MatMul"].attr["_output_shapes"].list.shape
    assert [[d.size for d in s.dim] for s in shapes] == [[6, 4]]
    assert list(by_name["net/block/inner/MatMul"].input) == ["input", "net/block/inner/kernel"]
