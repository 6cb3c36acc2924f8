"""ONNX export: onnxruntime's outputs equal ``Trainer.predict``'s for every built-in layer.

Each model is exported from traces at batch sizes 2 and 3 and run by onnxruntime on a batch
of 5 (the batch axis is dynamic), against tapefit's predictions: atol and rtol 1e-5.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

onnx = pytest.importorskip("onnx", reason="ONNX export needs the onnx package (pip install 'tapefit[onnx]')")
ort = pytest.importorskip(
    "onnxruntime", reason="the export tests run graphs with onnxruntime (tapefit[onnx])"
)

import tapefit as tp  # noqa: E402
from tapefit import layers as L  # noqa: E402
from tapefit.export import to_onnx  # noqa: E402
from tests.cli import test_full_disk as full_disk  # noqa: E402

BATCH = 5
TOL = {"atol": 1e-5, "rtol": 1e-5}


def predict(model: Any, x: Any) -> list[np.ndarray]:
    outputs = tp.Trainer(model, "sgd", "mse").predict(x, batch_size=BATCH)
    return [np.asarray(o) for o in (outputs if isinstance(outputs, (list, tuple)) else [outputs])]


def run_onnx(path: Any, x: Any) -> list[np.ndarray]:
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    xs = x if isinstance(x, (list, tuple)) else [x]
    return session.run(None, {i.name: v for i, v in zip(session.get_inputs(), xs)})


def check(model: Any, x: Any, tmp_path: Any, **kwargs: Any) -> float:
    """Exports ``model``, checks onnxruntime's outputs against ``predict``; the max error."""
    path = tmp_path / "model.onnx"
    to_onnx(model, path, **kwargs)
    expected, got = predict(model, x), run_onnx(path, x)
    assert len(expected) == len(got)
    error = 0.0
    for e, g in zip(expected, got):
        assert e.shape == g.shape
        np.testing.assert_allclose(g, e, **TOL)
        if e.size:
            error = max(error, float(np.max(np.abs(g.astype(np.float64) - e))))
    return error


def floats(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((BATCH, *shape)).astype(np.float32)


def functional(layer: Any, *shape: int, dtype: str = "float32") -> Any:
    inputs = tp.Input(shape, dtype=dtype)
    return tp.Model(inputs, layer(inputs))


def randomize(model: Any, seed: int = 1) -> None:
    """Non-trivial weights everywhere (biases, moving statistics), so that every term counts."""
    rng = np.random.default_rng(seed)
    for v in model.variables:
        value = rng.uniform(0.5, 1.5, v.shape) if "variance" in v.name else rng.standard_normal(v.shape) * 0.5
        v.assign(value.astype(v.dtype))


# -- core layers --------------------------------------------------------------------

ACTIVATIONS = sorted(L.activations.registry.names())


@pytest.mark.parametrize("activation", ACTIVATIONS)
def test_dense_with_every_activation(activation, tmp_path):
    model = functional(L.Dense(6, activation=activation), 4)
    randomize(model)
    check(model, floats(4) * 3, tmp_path)


@pytest.mark.parametrize("activation", ACTIVATIONS)
def test_activation_layer(activation, tmp_path):
    model = functional(L.Activation(activation), 3, 8)  # glu halves the last axis: even
    check(model, floats(3, 8) * 4, tmp_path)


def test_dense_on_a_sequence_and_without_bias(tmp_path):
    inputs = tp.Input((3, 4))
    x = L.Dense(5, use_bias=False)(inputs)
    model = tp.Model(inputs, L.Dense(2, activation="tanh")(x))
    randomize(model)
    check(model, floats(3, 4), tmp_path)


def test_dropout_is_the_identity_and_flatten_keeps_the_batch(tmp_path):
    inputs = tp.Input((3, 4, 2))
    x = L.Dropout(0.5)(L.Flatten()(inputs))
    model = tp.Model(inputs, L.Dense(3)(x))
    check(model, floats(3, 4, 2), tmp_path)


@pytest.mark.parametrize("mask_zero", [False, True])
def test_embedding(mask_zero, tmp_path):
    model = functional(L.Embedding(11, 4, mask_zero=mask_zero), 6, dtype="int32")
    ids = np.random.default_rng(0).integers(0, 11, (BATCH, 6)).astype(np.int32)
    check(model, ids, tmp_path)


# -- convolution and pooling --------------------------------------------------------

CONV2D = [
    {"padding": "valid"},
    {"padding": "same"},
    {"padding": "valid", "strides": 2},
    {"padding": "same", "strides": (2, 1)},
    {"padding": "valid", "dilation_rate": 2},
    {"padding": "same", "dilation_rate": (2, 1)},
    {"padding": "same", "groups": 2},
    {"padding": "valid", "groups": 4, "strides": 2},
    {"padding": "same", "activation": "relu", "use_bias": False},
]


@pytest.mark.parametrize("config", CONV2D, ids=lambda c: "-".join(f"{k}={v}" for k, v in c.items()))
def test_conv2d(config, tmp_path):
    model = functional(L.Conv2D(8, (3, 2), **config), 9, 8, 4)
    randomize(model)
    check(model, floats(9, 8, 4), tmp_path)


CONV1D = [
    {"padding": "valid"},
    {"padding": "same"},
    {"padding": "causal"},
    {"padding": "valid", "strides": 2},
    {"padding": "same", "strides": 3},
    {"padding": "causal", "dilation_rate": 2},
    {"padding": "same", "dilation_rate": 3},
    {"padding": "valid", "groups": 2},
    {"padding": "causal", "groups": 4, "activation": "gelu"},
]


@pytest.mark.parametrize("config", CONV1D, ids=lambda c: "-".join(f"{k}={v}" for k, v in c.items()))
def test_conv1d(config, tmp_path):
    model = functional(L.Conv1D(8, 3, **config), 12, 4)
    randomize(model)
    check(model, floats(12, 4), tmp_path)


@pytest.mark.parametrize("kind", [L.MaxPool2D, L.AvgPool2D])
@pytest.mark.parametrize(
    "config",
    [
        {},
        {"pool_size": 3, "strides": 2},
        {"pool_size": (2, 3), "padding": "same"},
        {"pool_size": 3, "strides": 1, "padding": "same"},
    ],
)
def test_pooling(kind, config, tmp_path):
    model = functional(kind(**config), 7, 8, 3)
    check(model, floats(7, 8, 3), tmp_path)


@pytest.mark.parametrize(
    "kind, shape",
    [
        (L.GlobalAveragePooling1D, (6, 3)),
        (L.GlobalMaxPooling1D, (6, 3)),
        (L.GlobalAveragePooling2D, (4, 5, 3)),
        (L.GlobalMaxPooling2D, (4, 5, 3)),
    ],
)
@pytest.mark.parametrize("keepdims", [False, True])
def test_global_pooling(kind, shape, keepdims, tmp_path):
    check(functional(kind(keepdims=keepdims), *shape), floats(*shape), tmp_path)


def test_global_average_pooling_1d_with_a_mask(tmp_path):
    inputs = tp.Input((6,), dtype="int32")
    x = L.Embedding(9, 3, mask_zero=True)(inputs)
    model = tp.Model(inputs, L.GlobalAveragePooling1D()(x))
    ids = np.random.default_rng(3).integers(1, 9, (BATCH, 6)).astype(np.int32)
    ids[:, 4:] = 0
    check(model, ids, tmp_path)


# -- normalization -------------------------------------------------------------------


@pytest.mark.parametrize("config", [{}, {"axis": 1}, {"center": False}, {"scale": False, "epsilon": 0.1}])
def test_batch_normalization_in_inference_mode(config, tmp_path):
    model = functional(L.BatchNormalization(**config), 4, 3)
    randomize(model)
    check(model, floats(4, 3), tmp_path)


@pytest.mark.parametrize("config", [{}, {"axis": [1, 2]}, {"center": False, "scale": False}])
def test_layer_normalization(config, tmp_path):
    model = functional(L.LayerNormalization(**config), 4, 3)
    randomize(model)
    check(model, floats(4, 3), tmp_path)


# -- reshaping ------------------------------------------------------------------------

RESHAPING = [
    (lambda: L.Reshape((6, 2)), (3, 4)),
    (lambda: L.Reshape((-1, 3)), (3, 4)),
    (lambda: L.Permute((2, 1)), (3, 4)),
    (lambda: L.Permute((3, 1, 2)), (2, 3, 4)),
    (lambda: L.RepeatVector(3), (4,)),
    (lambda: L.ZeroPadding1D(2), (5, 3)),
    (lambda: L.ZeroPadding1D((1, 3)), (5, 3)),
    (lambda: L.ZeroPadding2D(1), (4, 5, 2)),
    (lambda: L.ZeroPadding2D(((1, 2), (0, 3))), (4, 5, 2)),
    (lambda: L.Cropping1D((1, 2)), (6, 3)),
    (lambda: L.Cropping2D(((1, 0), (2, 1))), (5, 6, 2)),
    (lambda: L.Cropping2D(1), (5, 6, 2)),
    (lambda: L.UpSampling1D(3), (4, 2)),
    (lambda: L.UpSampling2D((2, 3)), (3, 4, 2)),
    (lambda: L.UpSampling2D(2), (3, 4, 2)),
    (lambda: L.Flatten(), (3, 4, 2)),
    (lambda: L.UpSampling2D((2, 3), interpolation="bilinear"), (3, 4, 2)),
    (lambda: L.UpSampling2D(2, data_format="channels_first", interpolation="bilinear"), (2, 3, 4)),
    (lambda: L.ZeroPadding2D((1, 2), data_format="channels_first"), (2, 3, 4)),
    (lambda: L.Cropping2D(((0, 1), (1, 1)), data_format="channels_first"), (2, 3, 4)),
    (lambda: L.ZeroPadding1D(1, data_format="channels_first"), (2, 3)),
]


@pytest.mark.parametrize("make, shape", RESHAPING, ids=[f"{i}" for i in range(len(RESHAPING))])
def test_reshaping_layers(make, shape, tmp_path):
    check(functional(make(), *shape), floats(*shape), tmp_path)


# -- merging ---------------------------------------------------------------------------


@pytest.mark.parametrize("kind", [L.Add, L.Subtract, L.Multiply, L.Average, L.Maximum, L.Minimum])
def test_merge_layers(kind, tmp_path):
    a, b = tp.Input((3, 4)), tp.Input((3, 4))
    model = tp.Model([a, b], kind()([a, b]))
    check(model, [floats(3, 4, seed=1), floats(3, 4, seed=2)], tmp_path)


@pytest.mark.parametrize("kind", [L.Add, L.Multiply, L.Average, L.Maximum, L.Minimum])
def test_merge_layers_of_three_inputs(kind, tmp_path):
    xs = [tp.Input((4,)) for _ in range(3)]
    model = tp.Model(xs, kind()(xs))
    check(model, [floats(4, seed=s) for s in range(3)], tmp_path)


@pytest.mark.parametrize("axis", [-1, 1, 2])
def test_concatenate(axis, tmp_path):
    a, b = tp.Input((3, 4)), tp.Input((3, 4))
    model = tp.Model([a, b], L.Concatenate(axis=axis)([a, b]))
    check(model, [floats(3, 4, seed=1), floats(3, 4, seed=2)], tmp_path)


@pytest.mark.parametrize(
    "axes, shapes, normalize",
    [
        (1, ((4,), (4,)), False),
        (1, ((4,), (4,)), True),
        ((2, 2), ((3, 4), (5, 4)), False),
        ((1, 2), ((3, 4), (5, 3)), True),
    ],
)
def test_dot(axes, shapes, normalize, tmp_path):
    a, b = tp.Input(shapes[0]), tp.Input(shapes[1])
    model = tp.Model([a, b], L.Dot(axes, normalize=normalize)([a, b]))
    check(model, [floats(*shapes[0], seed=1), floats(*shapes[1], seed=2)], tmp_path)


# -- recurrent --------------------------------------------------------------------------

RNN_CONFIGS = [
    {},
    {"return_sequences": True},
    {"go_backwards": True},
    {"return_sequences": True, "return_state": True},
    {"use_bias": False, "activation": "relu"},
]


@pytest.mark.parametrize("kind", [L.SimpleRNN, L.LSTM, L.GRU])
@pytest.mark.parametrize("config", RNN_CONFIGS, ids=lambda c: "-".join(c) or "default")
def test_recurrent_layers(kind, config, tmp_path):
    model = functional(kind(5, **config), 6, 3)
    randomize(model)
    check(model, floats(6, 3), tmp_path)


def test_gru_without_reset_after_and_lstm_with_other_activations(tmp_path):
    inputs = tp.Input((5, 3))
    x = L.GRU(4, reset_after=False, return_sequences=True)(inputs)
    x = L.LSTM(4, activation="relu", recurrent_activation="tanh")(x)
    model = tp.Model(inputs, x)
    randomize(model)
    check(model, floats(5, 3), tmp_path)


@pytest.mark.parametrize("kind", [L.SimpleRNN, L.LSTM, L.GRU])
@pytest.mark.parametrize("zero_output", [False, True])
def test_recurrent_layers_with_a_mask(kind, zero_output, tmp_path):
    inputs = tp.Input((7,), dtype="int32")
    x = L.Embedding(10, 3, mask_zero=True)(inputs)
    model = tp.Model(inputs, kind(4, return_sequences=True, zero_output_for_mask=zero_output)(x))
    randomize(model)
    ids = np.random.default_rng(5).integers(1, 10, (BATCH, 7)).astype(np.int32)
    ids[0, 5:] = 0
    ids[1, :2] = 0
    ids[2, 3] = 0
    check(model, ids, tmp_path)


@pytest.mark.parametrize("merge_mode", ["concat", "sum", "mul", "ave", None])
@pytest.mark.parametrize("kind", [L.LSTM, L.GRU])
def test_bidirectional(kind, merge_mode, tmp_path):
    model = functional(L.Bidirectional(kind(4, return_sequences=True), merge_mode=merge_mode), 5, 3)
    randomize(model)
    check(model, floats(5, 3), tmp_path)


@pytest.mark.parametrize("kind", [L.SimpleRNN, L.LSTM, L.GRU])
def test_bidirectional_returning_states(kind, tmp_path):
    model = functional(L.Bidirectional(kind(3, return_state=True)), 4, 2)
    randomize(model)
    check(model, floats(4, 2), tmp_path)


def test_a_conv_net_of_the_functional_api(tmp_path):
    """As the MNIST-1D models are built: Input, Reshape, ZeroPadding1D, Conv1D, a residual Add."""
    inputs = tp.Input((40,))
    x = L.ZeroPadding1D(2)(L.Reshape((40, 1))(inputs))
    x = L.Conv1D(8, 5, strides=2, activation="relu")(x)
    y = L.BatchNormalization()(L.Conv1D(8, 3, padding="same")(x))
    x = L.Add()([x, L.Activation("relu")(y)])
    x = L.Dropout(0.3)(L.GlobalMaxPooling1D()(x))
    model = tp.Model(inputs, L.Dense(10)(x))
    randomize(model)
    check(model, floats(40), tmp_path)


def test_bidirectional_with_a_mask_and_last_states(tmp_path):
    inputs = tp.Input((6,), dtype="int32")
    x = L.Embedding(8, 3, mask_zero=True)(inputs)
    model = tp.Model(inputs, L.Bidirectional(L.SimpleRNN(4))(x))
    randomize(model)
    ids = np.random.default_rng(2).integers(0, 8, (BATCH, 6)).astype(np.int32)
    check(model, ids, tmp_path)


# -- attention ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "config, causal",
    [
        ({"num_heads": 2, "key_dim": 3}, False),
        ({"num_heads": 3, "key_dim": 2, "value_dim": 4, "output_shape": 5}, True),
        ({"num_heads": 1, "key_dim": 4, "use_bias": False}, False),
    ],
)
def test_multi_head_attention(config, causal, tmp_path):
    q, v = tp.Input((4, 6)), tp.Input((5, 6))
    layer = L.MultiHeadAttention(**config)
    if causal:
        out = layer(q, q, use_causal_mask=True)
        model = tp.Model(q, out)
        x: Any = floats(4, 6)
    else:
        model = tp.Model([q, v], layer(q, v))
        x = [floats(4, 6, seed=1), floats(5, 6, seed=2)]
    randomize(model)
    check(model, x, tmp_path)


def test_multi_head_attention_with_a_padding_mask(tmp_path):
    inputs = tp.Input((6,), dtype="int32")
    x = L.Embedding(9, 8, mask_zero=True)(inputs)
    model = tp.Model(inputs, L.MultiHeadAttention(2, 4)(x, x))
    randomize(model)
    ids = np.random.default_rng(4).integers(1, 9, (BATCH, 6)).astype(np.int32)
    ids[:, 4:] = 0
    check(model, ids, tmp_path)


@pytest.mark.parametrize(
    "equation, shapes",
    [
        ("btd,dhk->bthk", ((3, 4), (4, 2, 5))),
        ("dhk,btd->bthk", ((4, 2, 5), (3, 4))),
        ("bthk,bshk->bhts", ((3, 2, 4), (5, 2, 4))),
        ("bhts,bshk->bthk", ((2, 3, 5), (5, 2, 4))),
        ("bthk,hko->bto", ((3, 2, 4), (2, 4, 6))),
        ("bthk,hko->bt", ((3, 2, 4), (2, 4, 6))),
        ("bi,bj->bij", ((3,), (4,))),
        ("bij,bkj->bk", ((3, 2), (4, 2))),
        ("bij->bji", ((3, 2),)),
    ],
)
def test_einsum_as_matmuls(equation, shapes, tmp_path):
    operands = equation.split("->")[0].split(",")
    weights = {i: floats(*s, seed=9)[0] for i, (o, s) in enumerate(zip(operands, shapes)) if "b" not in o}

    class Einsum(L.Layer):
        def call(self, xs: Any) -> Any:
            given = iter(xs if isinstance(xs, list) else [xs])
            return tp.einsum(
                equation, *[weights[i] if i in weights else next(given) for i in range(len(operands))]
            )

    inputs = [tp.Input(s) for i, s in enumerate(shapes) if i not in weights]
    model = tp.Model(inputs, Einsum()(inputs if len(inputs) > 1 else inputs[0]))
    samples = [floats(*s, seed=i) for i, s in enumerate(shapes) if i not in weights]
    check(model, samples if len(samples) > 1 else samples[0], tmp_path)
    graph = onnx.load(tmp_path / "model.onnx")
    uses_einsum = any(node.op_type == "Einsum" for node in graph.graph.node)
    assert uses_einsum == (len(shapes) == 1)  # two operands become MatMuls


# -- models ---------------------------------------------------------------------------------


def test_sequential_needs_an_input_shape_or_its_first_call(tmp_path):
    model = L.Sequential(
        [L.Conv2D(4, 3, padding="same", activation="relu"), L.MaxPool2D(), L.Flatten(), L.Dense(3)]
    )
    with pytest.raises(
        ValueError, match=r"^ONNX export: model '.*' has no known input shape; pass input_signature"
    ):
        to_onnx(model, tmp_path / "m.onnx")
    check(model, floats(8, 8, 1), tmp_path, input_signature=(None, 8, 8, 1))
    fresh = L.Sequential([L.Dense(3)])
    fresh(floats(4))
    check(fresh, floats(4), tmp_path)  # the shape of its first call


def test_subclassed_model_and_module_export(tmp_path):
    class Residual(L.Layer):
        def __init__(self) -> None:
            super().__init__()
            self.inner = L.Dense(4, activation="relu")
            self.out = L.Dense(2)

        def call(self, x: Any) -> Any:
            return self.out(
                tp.concat([x + self.inner(x), tp.reduce_mean(x, axis=-1, keepdims=True)], axis=-1)
            )

    model = Residual()
    model(floats(4))
    model.export(tmp_path / "r.onnx")
    np.testing.assert_allclose(
        run_onnx(tmp_path / "r.onnx", floats(4))[0], predict(model, floats(4))[0], **TOL
    )
    with pytest.raises(ValueError, match="format must be 'onnx'"):
        model.export(tmp_path / "r.tflite", format="tflite")


def test_two_outputs_keep_their_names(tmp_path):
    inputs = tp.Input((4,), name="features")
    shared = L.Dense(3, activation="relu")(inputs)
    model = tp.Model(inputs, [L.Dense(2, name="left")(shared), L.Dense(1, name="right")(shared)])
    check(model, floats(4), tmp_path)
    session = ort.InferenceSession(str(tmp_path / "model.onnx"), providers=["CPUExecutionProvider"])
    assert [o.name for o in session.get_outputs()] == ["left", "right"]
    assert session.get_inputs()[0].name == "features"
    assert session.get_inputs()[0].shape == ["batch", 4]


@pytest.mark.parametrize(
    "dtype, axis, values",
    [("int32", None, {}), ("int64", 0, {}), ("int32", 1, {"on_value": 5, "off_value": -2, "dtype": "int32"})],
)
def test_one_hot_runs_in_onnxruntime_with_out_of_range_indices(dtype, axis, values, tmp_path):
    model = functional(L.Lambda(lambda t: tp.one_hot(t, 4, axis=axis, **values)), 6, dtype=dtype)
    ids = np.random.default_rng(0).integers(-5, 9, (BATCH, 6)).astype(dtype)  # negative and past depth
    ids[0] = [0, 1, 2, 3, -1, 4]
    assert check(model, ids, tmp_path) == 0


def test_an_op_with_no_onnx_form_is_named_in_one_line(tmp_path):
    class Odd(L.Layer):
        def call(self, x: Any) -> Any:
            return tp.reduce_logsumexp(x, axis=-1)

    inputs = tp.Input((4,))
    model = tp.Model(inputs, Odd(name="odd")(inputs))
    with pytest.raises(
        ValueError, match=r"^ONNX export: op 'LogSumExpShift' \(in layer 'odd'\) has no ONNX form$"
    ):
        to_onnx(model, tmp_path / "m.onnx")


def test_a_python_read_of_a_value_is_refused(tmp_path):
    class Branchy(L.Layer):
        def call(self, x: Any) -> Any:
            return x * 2 if float(tp.reduce_sum(x)) > 0 else x

    inputs = tp.Input((3,))
    with pytest.raises(
        ValueError,
        match=r"^ONNX export: the forward pass uses a tensor's value as a Python value at .*test_onnx\.py:\d+",
    ):
        to_onnx(tp.Model(inputs, Branchy()(inputs)), tmp_path / "m.onnx")


def test_an_input_without_a_fixed_size_is_named(tmp_path):
    model = functional(L.LSTM(3), 4, 2)
    with pytest.raises(ValueError, match=r"^ONNX export: axis 1 of input 'input' has no fixed size"):
        to_onnx(model, tmp_path / "m.onnx", input_signature=(None, None, 2))


# -- shipped configs and the CLI ---------------------------------------------------------

CONFIGS = sorted((Path(__file__).resolve().parents[2] / "configs").glob("*.yaml"))


@pytest.mark.parametrize("config", CONFIGS, ids=[c.stem for c in CONFIGS])
def test_every_shipped_configs_model(config, tmp_path, monkeypatch):
    from tapefit.cli import app

    monkeypatch.chdir(tmp_path)
    args = app.build_parser().parse_args(
        ["--config", str(config), "--set", f"trainer.output_dir={tmp_path / 'run'}"]
    )
    args.prog = "train"
    run = app.prepare(args)  # built as train builds it, and run on two samples of its data
    if run.lock is not None:
        run.lock.release(undo=True)
    x = np.asarray(run.data.x_train[:7])
    if type(run.model).train_step is not tp.Module.train_step:  # a GAN's forward takes its noise
        x = np.random.default_rng(0).normal(size=(7, *run.model._build_input_shape[1:])).astype(np.float32)
    path = tmp_path / "model.onnx"
    to_onnx(run.model, path)
    np.testing.assert_allclose(run_onnx(path, x)[0], run.trainer.predict(x, batch_size=7), **TOL)


SPIRALS = """\
name: sp
data: {type: spirals, n_samples: 120, n_classes: 3}
model: {type: mlp, hidden_units: [8, 8]}
loss: sparse_categorical_crossentropy
optimizer: {type: adam, learning_rate: 0.01}
trainer: {epochs: 1, batch_size: 40}
plugins:
  - {type: checkpoint, every_n_epochs: 1}
"""


def test_train_export_writes_an_onnx_file_of_the_checkpoint(tmp_path, monkeypatch, capsys):
    from tapefit.checkpointing import latest_checkpoint
    from tapefit.cli import app

    monkeypatch.chdir(tmp_path)
    (tmp_path / "c.yaml").write_text(SPIRALS, encoding="utf-8")
    assert app.main(["--config", "c.yaml"]) == 0
    assert app.main(["--config", "c.yaml", "--export", "m.onnx"]) == 0
    out = capsys.readouterr().out
    assert "exported the model (ONNX) of" in out and "to m.onnx" in out
    model = L.Sequential(
        [L.Dense(8, activation="relu"), L.Dense(8, activation="relu"), L.Dense(3, activation="softmax")]
    )
    x = floats(2)
    model(x)
    checkpoint = latest_checkpoint(tmp_path / "runs/sp/checkpoints")
    from tapefit.plugins.checkpoint import load_checkpoint

    model.load_state_dict(load_checkpoint(checkpoint)["model"])
    np.testing.assert_allclose(run_onnx(tmp_path / "m.onnx", x)[0], predict(model, x)[0], **TOL)
    assert app.main(["--config", "c.yaml", "--export", "m.tflite"]) == 2
    assert "must end in '.safetensors' or '.tapefit' or '.onnx'" in capsys.readouterr().err


def test_random_draws_and_assignments_in_inference_are_refused(tmp_path):
    class Noisy(L.Layer):
        def call(self, x: Any) -> Any:
            return tp.nn.dropout(x, 0.5)  # drops even in inference

    class Jitter(L.Layer):
        def call(self, x: Any) -> Any:
            return x + tp.random.normal((3,), stddev=0.1)  # noise even in inference

    from tapefit.core.function import host_call

    class Hosting(L.Layer):
        def call(self, x: Any) -> Any:
            return host_call(lambda t: t * 2, x)

    class Counting(L.Layer):
        def build(self, input_shape: Any) -> None:
            self.calls = self.add_weight((), "zeros", trainable=False, name="calls")

        def call(self, x: Any) -> Any:
            self.calls.assign_add(1.0)
            return x

    inputs = tp.Input((3,))
    draws = r"draws random numbers in inference mode \(training=False\) at .*test_onnx\.py:\d+, which has"
    with pytest.raises(ValueError, match=rf"^ONNX export: op 'tp\.nn\.dropout' \(in layer 'noisy'\) {draws}"):
        to_onnx(tp.Model(inputs, Noisy(name="noisy")(inputs)), tmp_path / "m.onnx")
    with pytest.raises(
        ValueError,
        match=rf"^ONNX export: op 'tp\.random\.normal' \(in layer 'jitter'\) {draws} no ONNX form$",
    ):
        to_onnx(tp.Model(inputs, Jitter(name="jitter")(inputs)), tmp_path / "m.onnx")
    with pytest.raises(
        ValueError,
        match=r"^ONNX export: op '.*Hosting\.call\.<lambda>' \(in layer 'host'\) makes a host call in inference mode",
    ):
        to_onnx(tp.Model(inputs, Hosting(name="host")(inputs)), tmp_path / "m.onnx")
    with pytest.raises(
        ValueError, match=r"^ONNX export: layer 'counter' changes variable '.*calls' in inference mode"
    ):
        to_onnx(tp.Model(inputs, Counting(name="counter")(inputs)), tmp_path / "m.onnx")


def test_an_op_whose_attrs_follow_the_batch_is_refused(tmp_path):
    class FirstRows(L.Layer):
        def call(self, x: Any) -> Any:
            return tp.one_hot(tp.zeros((x.shape[0],), tp.int32), x.shape[0])  # depth = the batch size

    inputs = tp.Input((3,))
    with pytest.raises(
        ValueError,
        match=r"^ONNX export: op 'OneHot' \(in layer 'rows'\) has attributes that depend on the batch size",
    ):
        to_onnx(tp.Model(inputs, FirstRows(name="rows")(inputs)), tmp_path / "m.onnx")


# -- writing the file: as every file tapefit writes -------------------------------------

REPO = Path(__file__).resolve().parents[2]
small_disk = full_disk.small_disk  # the fixture: a real tmpfs of 512 KB, or a skip saying why not
fill = full_disk.fill


def onnx_model(units: int = 4, seed: int = 1) -> Any:
    model = functional(L.Dense(units), 3)
    randomize(model, seed)
    return model


def test_export_replaces_a_symbolic_link_instead_of_writing_through_it(tmp_path):
    victim = tmp_path / "victim"
    victim.write_bytes(b"precious")
    (tmp_path / "m.onnx").symlink_to(victim)
    onnx_model().export(tmp_path / "m.onnx")
    assert victim.read_bytes() == b"precious"
    assert not (tmp_path / "m.onnx").is_symlink()
    run_onnx(tmp_path / "m.onnx", floats(3))  # a whole graph where the link was


def run_python(code: str, cwd: Path, *args: str) -> subprocess.CompletedProcess:
    """``code`` or ``python -m tapefit`` in a subprocess with a deadline: a write that blocks
    fails the test instead of hanging it."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    command = [sys.executable, "-c", code] if code else [sys.executable, "-m", "tapefit", *args]
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=60)


EXPORT_TO = """\
import tapefit as tp
inputs = tp.Input((3,))
tp.Model(inputs, tp.layers.Dense(2)(inputs)).export("f.onnx")
print("exported")
"""


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="named pipes are POSIX")
def test_export_to_a_named_pipe_replaces_it_instead_of_blocking(tmp_path):
    os.mkfifo(tmp_path / "f.onnx")
    result = run_python(EXPORT_TO, tmp_path)
    assert result.stdout.strip() == "exported", result.stderr
    assert (tmp_path / "f.onnx").is_file()
    run_onnx(tmp_path / "f.onnx", floats(3))


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A run folder with a checkpoint of the spirals config, made by ``train`` in a subprocess."""
    folder = tmp_path_factory.mktemp("trained")
    (folder / "c.yaml").write_text(SPIRALS.replace("[8, 8]", "[64, 64]"), encoding="utf-8")
    result = run_python("", folder, "train", "--config", "c.yaml")
    assert result.returncode == 0, result.stderr
    return folder


@pytest.mark.parametrize("planted", ["symlink", "fifo"])
def test_train_export_replaces_a_link_or_a_pipe(planted, trained):
    target = trained / "m.onnx"
    victim = trained / "victim"
    victim.write_bytes(b"precious")
    target.unlink(missing_ok=True)
    if planted == "symlink":
        target.symlink_to(victim)
    elif not hasattr(os, "mkfifo"):
        pytest.skip("named pipes are POSIX")
    else:
        os.mkfifo(target)
    result = run_python("", trained, "train", "--config", "c.yaml", "--export", "m.onnx")
    assert result.returncode == 0, result.stderr
    assert victim.read_bytes() == b"precious"
    assert target.is_file() and not target.is_symlink()
    assert run_onnx(target, floats(2))[0].shape == (BATCH, 3)


def test_export_on_a_full_disk_keeps_the_last_export_and_names_the_file(tmp_path, small_disk):
    path = small_disk / "m.onnx"
    onnx_model(units=200).export(path)  # 3 KB of weights and the graph: it fits
    before = path.read_bytes()
    fill(small_disk)
    with pytest.raises(OSError) as caught:  # 6 KB: more than emptying the last export would free
        onnx_model(units=400, seed=2).export(path)
    assert str(caught.value) == f"[Errno 28] No space left on device: '{path}'"
    assert path.read_bytes() == before
    assert sorted(p.name for p in small_disk.iterdir()) == ["filler", "m.onnx"]  # no temporary left


def test_train_export_on_a_full_disk_is_one_line_naming_the_file(trained, small_disk):
    path = small_disk / "m.onnx"
    onnx_model().export(path)  # smaller than the checkpoint's model of 17 KB
    before = path.read_bytes()
    fill(small_disk)
    result = run_python("", trained, "train", "--config", "c.yaml", "--export", str(path))
    assert result.returncode == 2, result.stderr
    [line] = result.stderr.strip().splitlines()
    assert line.endswith(f"--export: OSError: [Errno 28] No space left on device: '{path}'"), line
    assert path.read_bytes() == before
