"""Masking and TimeDistributed: Keras 3's numbers (``scripts/keras_reference_rnn.py``), masks
reaching recurrent layers, gradients, shapes, configs, files and ONNX."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

import tapefit as tp
from tapefit import layers as L

REFERENCE = dict(np.load(Path(__file__).parent / "data" / "keras_rnn.npz"))
X, XM, R = REFERENCE["x"], REFERENCE["xm"], REFERENCE["r"]
TOL = {"rtol": 1e-5, "atol": 1e-6}


def fill(model, seed):
    """The weights the script gave Keras's model (uniform in [-0.3, 0.3) from ``seed``)."""
    rng = np.random.default_rng(seed)
    model.set_weights([rng.uniform(-0.3, 0.3, w.shape).astype(np.float32) for w in model.get_weights()])


def gradients_like_the_script(model, x):
    xv = tp.Variable(x)
    with tp.GradientTape() as tape:
        y = model(xv)
        weight = R[..., : y.shape[-1]] if y.ndim == 3 else R[:, 0, : y.shape[-1]]
        loss = tp.reduce_sum(y * weight)
    grads = tape.gradient(loss, [*model.trainable_variables, xv])
    return y.numpy(), [g.numpy() for g in grads]


def check(case, model, x):
    y, grads = gradients_like_the_script(model, x)
    np.testing.assert_allclose(y, REFERENCE[f"{case}/y/0"], **TOL)
    for i, g in enumerate(grads[:-1]):
        np.testing.assert_allclose(g, REFERENCE[f"{case}/g/{i}"], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(grads[-1], REFERENCE[f"{case}/gx"], rtol=1e-4, atol=1e-5)


# -- Masking ---------------------------------------------------------------------------------


def test_masking_output_and_mask_match_keras():
    masking = L.Masking()
    np.testing.assert_array_equal(masking(XM).numpy(), REFERENCE["masking/y"])
    np.testing.assert_array_equal(masking.compute_mask(XM).numpy(), REFERENCE["masking/mask"])
    half = L.Masking(mask_value=0.5)
    np.testing.assert_array_equal(half(XM).numpy(), REFERENCE["masking/half/y"])
    np.testing.assert_array_equal(half.compute_mask(XM).numpy(), REFERENCE["masking/half/mask"])


def test_masking_then_lstm_matches_keras_outputs_and_gradients():
    model = tp.layers.Sequential([tp.Input((5, 4)), L.Masking(), L.LSTM(3)])
    fill(model, 130)
    check("masking/lstm", model, XM)


def test_recurrent_layers_honour_the_masking_layers_mask():
    lengths = [3, 5]
    padded = XM.copy()
    padded[1, 1] = X[1, 1]  # no masked step in sample 1
    for layer in (L.SimpleRNN(3), L.GRU(3), L.RNN(L.LSTMCell(3)), L.Bidirectional(L.GRU(2))):
        inputs = tp.Input((None, 4))
        model = tp.Model(inputs, layer(L.Masking()(inputs)))
        y = model(padded).numpy()
        for i, n in enumerate(lengths):
            np.testing.assert_allclose(y[i], layer(padded[i : i + 1, :n]).numpy()[0], rtol=1e-5, atol=1e-6)


def test_masking_gradients_and_shapes():
    # the padded steps are constants: finite differences would unmask them
    layer, padding = L.Masking(dtype="float64"), np.zeros((2, 2, 4))
    tp.testing.check_gradients(lambda x: layer(tp.concat([x, padding], axis=1)), X[:, :3].astype(np.float64))
    inputs = tp.Input((None, 4))
    out = L.Masking()(inputs)
    assert out.shape == (None, None, 4) and out.has_mask
    assert L.Masking().compute_output_shape((2, 5, 4)) == (2, 5, 4)
    with pytest.raises(ValueError, match="Masking"):
        L.Masking()(np.zeros(3, np.float32))
    with pytest.raises(ValueError, match="mask_value must be a number"):
        L.Masking(mask_value="zero")


def test_masking_config_and_model_file(tmp_path):
    layer = L.Masking(mask_value=-1.0, name="pad")
    config = layer.get_config()
    assert config["mask_value"] == -1.0 and config["name"] == "pad"
    assert L.Masking.from_config(json.loads(json.dumps(config))).get_config() == config
    model = tp.layers.Sequential([tp.Input((5, 4)), L.Masking(mask_value=0.5), L.GRU(2)])
    model.save(tmp_path / "m.tapefit")
    loaded = tp.models.load_model(tmp_path / "m.tapefit")
    np.testing.assert_allclose(loaded(XM).numpy(), model(XM).numpy(), rtol=1e-6)


# -- TimeDistributed -------------------------------------------------------------------------


def test_time_distributed_dense_matches_keras_outputs_and_gradients():
    model = tp.layers.Sequential([tp.Input((5, 4)), L.TimeDistributed(L.Dense(2, activation="tanh"))])
    fill(model, 140)
    check("td", model, X)
    assert [p for p, _ in model.layers[0].named_variables()] == [
        "time_distributed/dense/kernel",
        "time_distributed/dense/bias",
    ]


def test_time_distributed_applies_the_layer_to_every_step():
    conv = L.Conv2D(2, 3, padding="same")
    layer = L.TimeDistributed(conv)
    frames = np.random.default_rng(0).standard_normal((2, 3, 6, 6, 1)).astype(np.float32)
    y = layer(frames).numpy()
    assert y.shape == (2, 3, 6, 6, 2)
    for t in range(3):
        np.testing.assert_allclose(y[:, t], conv(frames[:, t]).numpy(), rtol=1e-6, atol=1e-6)
    assert layer.compute_output_shape((None, 3, 6, 6, 1)) == (None, 3, 6, 6, 2)
    inputs = tp.Input((None, 6, 6, 1))
    assert L.TimeDistributed(L.Conv2D(4, 3))(inputs).shape == (None, None, 4, 4, 4)


def test_time_distributed_passes_the_mask_on_and_down():
    class MaskSum(tp.layers.Layer):
        def call(self, inputs, mask=None):
            seen.append(None if mask is None else tuple(mask.shape))
            return inputs if mask is None else inputs * tp.cast(tp.expand_dims(mask, -1), "float32")

    seen = []
    inputs = tp.Input((5, 4))
    x = L.Masking()(inputs)
    x = L.TimeDistributed(MaskSum())(x)
    outputs = L.LSTM(3)(x)
    assert x.has_mask
    model = tp.Model(inputs, outputs)
    direct = tp.Model(inputs, L.LSTM(3)(L.Masking()(inputs)))
    direct.set_weights(model.get_weights())
    seen.clear()
    np.testing.assert_allclose(model(XM).numpy(), direct(XM).numpy(), rtol=1e-6)
    assert seen == [(10,)]  # the (batch * time,) mask reached the wrapped layer


def test_time_distributed_gradients_config_file_and_errors(tmp_path):
    layer = L.TimeDistributed(L.Dense(2, dtype="float64"), dtype="float64")
    x = X[:, :3].astype(np.float64)
    layer(x)
    dense = layer.layer

    def run(x, kernel, bias):
        dense.kernel, dense.bias = kernel, bias
        return layer.call(x)

    tp.testing.check_gradients(run, x, *[np.asarray(w, np.float64) for w in dense.get_weights()])
    wrapped = L.TimeDistributed(L.Dense(3, activation="relu", name="inner"), name="td")
    config = wrapped.get_config()
    again = L.TimeDistributed.from_config(json.loads(json.dumps(config)))
    assert again.get_config() == config and again.layer.units == 3 and again.layer.name == "inner"
    model = tp.layers.Sequential([tp.Input((5, 4)), wrapped, L.TimeDistributed(L.Dense(1))])
    model.save(tmp_path / "m.tapefit")
    loaded = tp.models.load_model(tmp_path / "m.tapefit")
    np.testing.assert_allclose(loaded(X).numpy(), model(X).numpy(), rtol=1e-6)
    with pytest.raises(TypeError, match="TimeDistributed wraps a layer"):
        L.TimeDistributed("dense")
    with pytest.raises(ValueError, match=r"TimeDistributed '\w+' needs inputs \(batch, time, \.\.\.\)"):
        L.TimeDistributed(L.Dense(2))(X[:, 0])


@pytest.mark.skipif(importlib.util.find_spec("onnxruntime") is None, reason="needs onnxruntime")
def test_onnx_export_of_masking_and_time_distributed_matches_onnxruntime(tmp_path):
    import onnxruntime as ort

    from tapefit.export import to_onnx

    x = np.random.default_rng(0).standard_normal((5, 6, 4)).astype(np.float32)
    x[0, 4:] = 0.0
    inputs = tp.Input((6, 4))
    h = L.TimeDistributed(L.Dense(3, activation="tanh"))(L.Masking()(inputs))
    model = tp.Model(inputs, L.GRU(2)(h))
    to_onnx(model, tmp_path / "m.onnx")
    session = ort.InferenceSession(str(tmp_path / "m.onnx"), providers=["CPUExecutionProvider"])
    (got,) = session.run(None, {session.get_inputs()[0].name: x})
    np.testing.assert_allclose(got, model(x).numpy(), rtol=1e-5, atol=1e-5)
