"""tp.Input and tp.Model: the graph, shared layers, structures, masks, errors and summary."""

from __future__ import annotations

import numpy as np
import pytest

import tapefit as tp
from tapefit import layers as L


def _x(*shape, seed=0):
    return np.random.default_rng(seed).normal(size=shape).astype(np.float32)


def test_input_is_symbolic_with_a_none_batch_axis():
    x = tp.Input((40,), name="signal")
    assert x.shape == (None, 40) and x.dtype == np.float32 and x.name == "signal"
    assert tp.Input(3, dtype="int32").shape == (None, 3)
    with pytest.raises(ValueError, match="shape must be a tuple"):
        tp.Input((-1,))
    with pytest.raises(TypeError, match="has no values"):
        np.asarray(x)


def test_a_layer_on_symbolic_tensors_records_and_builds_it():
    x = tp.Input((5,))
    dense = L.Dense(3)
    y = dense(x)
    assert y.shape == (None, 3) and y.node.layer is dense
    assert dense.built and dense.kernel.shape == (5, 3)


def test_unknown_axes_stay_unknown():
    x = tp.Input((None, 4))
    y = L.Dense(2)(x)
    assert y.shape == (None, None, 2)


def test_model_runs_the_graph_as_the_layers_would():
    x = tp.Input((4,))
    a, b = L.Dense(8, activation="relu"), L.Dense(4)
    h = a(x)
    out = L.Add()([b(h), x])
    model = tp.Model(x, out)
    data = _x(5, 4)
    expected = b(a(data)).numpy() + data
    np.testing.assert_allclose(model(data).numpy(), expected, rtol=1e-6)
    assert [layer.name for layer in model.layers] == [x.name, a.name, b.name, model.layers[3].name]


def test_a_shared_layer_has_one_set_of_weights_and_gets_both_gradients():
    left, right = tp.Input((3,)), tp.Input((3,))
    shared = L.Dense(2, use_bias=False)
    out = L.Subtract()([shared(left), shared(right)])
    model = tp.Model([left, right], out)
    assert len(model.trainable_variables) == 1
    a, b = _x(4, 3, seed=1), _x(4, 3, seed=2)
    with tp.GradientTape() as tape:
        loss = tp.reduce_sum(model([a, b]))
    (grad,) = tape.gradient(loss, model.trainable_variables)
    np.testing.assert_allclose(grad.numpy(), np.repeat((a - b).sum(0)[:, None], 2, axis=1), rtol=1e-5)


def test_dict_inputs_and_outputs_and_input_names():
    a, b = tp.Input((2,), name="a"), tp.Input((3,), name="b")
    joined = L.Concatenate()([a, b])
    model = tp.Model({"a": a, "b": b}, {"sum": L.Dense(1, name="head")(joined), "joined": joined})
    out = model({"b": np.ones((2, 3), np.float32), "a": np.zeros((2, 2), np.float32)})
    assert set(out) == {"sum", "joined"} and out["joined"].shape == (2, 5)
    assert model.input_names == ["a", "b"] and model.output_names == ["joined", "sum"]
    with pytest.raises(ValueError, match=r"have no \['b'\]"):
        model({"a": np.zeros((2, 2), np.float32)})


def test_a_list_model_also_takes_a_dict_keyed_by_input_names():
    a, b = tp.Input((2,), name="left"), tp.Input((2,), name="right")
    model = tp.Model([a, b], L.Multiply()([a, b]))
    x, y = _x(3, 2), _x(3, 2, seed=1)
    np.testing.assert_allclose(model({"left": x, "right": y}).numpy(), x * y, rtol=1e-6)
    assert model.output_names == [model.layers[2].name]


def test_a_nested_model_is_a_layer_with_its_weights():
    x = tp.Input((4,))
    inner = tp.Model(x, L.Dense(3, name="inner_dense")(x), name="inner")
    y = tp.Input((4,))
    outer = tp.Model(y, L.Dense(1)(inner(y)), name="outer")
    assert len(outer.trainable_variables) == 4
    assert "outer/inner/inner_dense/kernel" in outer.state_dict()
    data = _x(2, 4)
    np.testing.assert_allclose(outer(data).numpy(), outer.layers[2](inner(data)).numpy(), rtol=1e-6)


def test_a_mask_from_embedding_reaches_a_recurrent_layer():
    ids = tp.Input((None,), dtype="int32")
    embedding = L.Embedding(10, 4, mask_zero=True)
    lstm = L.LSTM(3)
    model = tp.Model(ids, lstm(embedding(ids)))
    batch = np.array([[1, 2, 0, 0], [3, 4, 5, 0]])
    masked = lstm(embedding(batch), mask=batch != 0).numpy()
    unmasked = lstm(embedding(batch)).numpy()
    np.testing.assert_allclose(model(batch).numpy(), masked, rtol=1e-6)
    assert not np.allclose(masked, unmasked)


def test_a_mask_passes_through_a_nested_model():
    ids = tp.Input((None,), dtype="int32")
    embedding = L.Embedding(10, 4, mask_zero=True)
    inner = tp.Model(ids, embedding(ids))
    outer_ids = tp.Input((None,), dtype="int32")
    gru = L.GRU(2)
    model = tp.Model(outer_ids, gru(inner(outer_ids)))
    batch = np.array([[1, 0, 0], [2, 3, 0]])
    np.testing.assert_allclose(
        model(batch).numpy(), gru(embedding(batch), mask=batch != 0).numpy(), rtol=1e-6
    )


def test_shape_errors_come_when_the_graph_is_built_naming_layer_and_shapes():
    x = tp.Input((4,))
    dense = L.Dense(2, name="proj")
    dense(x)
    with pytest.raises(
        ValueError, match=r"Dense 'proj' cannot be called on inputs of shape \(None, 5\).*dimension 4"
    ):
        dense(tp.Input((5,)))
    with pytest.raises(
        ValueError, match=r"Add '.*' cannot be called on inputs of shape \[\(None, 4\), \(None, 3\)\]"
    ):
        L.Add()([x, tp.Input((3,))])


def test_calling_a_model_with_the_wrong_shape_names_the_input():
    x = tp.Input((4,), name="features")
    model = tp.Model(x, L.Dense(1)(x))
    with pytest.raises(ValueError, match=r"input 0 \('features'\) expects shape \(None, 4\), got \(2, 3\)"):
        model(np.zeros((2, 3), np.float32))


def test_outputs_from_an_input_not_given_are_refused():
    a, b = tp.Input((2,), name="given"), tp.Input((2,), name="forgotten")
    with pytest.raises(ValueError, match="input 'forgotten', which is not among"):
        tp.Model(a, L.Add()([a, b]))
    with pytest.raises(TypeError, match="must be symbolic tensors"):
        tp.Model(a, np.zeros(2))


def test_summary_shows_shapes_params_and_connections():
    a, b = tp.Input((3,), name="a"), tp.Input((3,), name="b")
    shared = L.Dense(2, name="shared")
    out = L.Add(name="sum")([shared(a), shared(b)])
    lines = []
    tp.Model([a, b], out, name="twin").summary(print_fn=lines.append)
    text = "\n".join(lines)
    assert 'Model: "twin"' in text and "Connected to" in text
    assert "shared (Dense)" in text and "a[0][0], b[0][0]" in text
    assert "sum[0][0]" not in text and "shared[0][0], shared[1][0]" in text
    assert "Total params: 8" in text


def test_weights_save_and_load_into_a_second_copy(tmp_path):
    def build():
        x = tp.Input((3,))
        return tp.Model(x, L.Dense(2)(L.Dense(4, activation="tanh")(x)))

    first, second = build(), build()
    first.save_weights(tmp_path / "w.safetensors")
    second.load_weights(tmp_path / "w.safetensors")
    data = _x(2, 3)
    np.testing.assert_array_equal(first(data).numpy(), second(data).numpy())
    assert list(first.state_dict()) == list(second.state_dict())


def test_training_reaches_the_layers_of_the_graph():
    x = tp.Input((50,))
    model = tp.Model(x, L.Dropout(0.5)(x))
    ones = np.ones((2, 50), np.float32)
    np.testing.assert_array_equal(model(ones).numpy(), ones)
    assert (model(ones, training=True).numpy() == 0).any()


def test_get_layer_names_the_layers_when_missing():
    x = tp.Input((2,))
    model = tp.Model(x, L.Dense(1, name="out")(x))
    assert model.get_layer("out").name == "out"
    with pytest.raises(ValueError, match=r"no layer 'nope'.*\['input_layer(_\d+)?', 'out'\]"):
        model.get_layer("nope")


# -- against Keras 3 on the same weights (scripts/keras_reference_functional.py) ----------------


def _residual_mlp():
    x = tp.Input((8,), name="x")
    h = L.Dense(16, activation="relu", name="d1")(x)
    r = L.Dense(16, activation="relu", name="d2")(h)
    h = L.Add(name="add")([h, r])
    return tp.Model(x, L.Dense(3, name="out")(h))


def _shared_two_inputs():
    a, b = tp.Input((6,), name="a"), tp.Input((6,), name="b")
    shared = L.Dense(4, activation="tanh", name="shared")
    sa, sb = shared(a), shared(b)
    diff = L.Subtract(name="diff")([sa, sb])
    joined = L.Concatenate(name="joined")([sa, sb, diff])
    return tp.Model([a, b], L.Dense(1, name="head")(joined))


def _two_outputs():
    x = tp.Input((5,), name="x")
    h = L.Dense(8, activation="relu", name="body")(x)
    return tp.Model(x, [L.Dense(1, name="reg")(h), L.Dense(3, activation="softmax", name="cls")(h)])


def _conv1d():
    x = tp.Input((40,), name="x")
    h = L.Reshape((40, 1), name="reshape")(x)
    h = L.ZeroPadding1D(2, name="pad1")(h)
    h = L.Conv1D(8, 5, activation="relu", name="conv1")(h)
    h = L.ZeroPadding1D(2, name="pad2")(h)
    h = L.Conv1D(8, 5, strides=2, activation="relu", name="conv2")(h)
    h = L.Flatten(name="flatten")(h)
    return tp.Model(x, L.Dense(10, name="logits")(h))


def _masked_rnn():
    ids = tp.Input((6,), dtype="int32", name="ids")
    h = L.Embedding(7, 3, mask_zero=True, name="embedding")(ids)
    h = L.LSTM(4, name="lstm")(h)
    return tp.Model(ids, L.Dense(2, name="out")(h))


def _masked_merges():
    ids_a = tp.Input((5,), dtype="int32", name="ids_a")
    ids_b = tp.Input((5,), dtype="int32", name="ids_b")
    plain = tp.Input((5, 3), name="plain")
    a = L.Embedding(6, 3, mask_zero=True, name="emb_a")(ids_a)
    b = L.Embedding(6, 3, mask_zero=True, name="emb_b")(ids_b)
    largest = L.Maximum(name="max")([a, b])
    outputs = [
        largest,
        L.Minimum(name="min")([a, b, plain]),
        L.Multiply(name="mul")([a, b]),
        L.Multiply(name="mul_plain")([a, plain]),
        L.GRU(2, name="gru")(largest),
    ]
    return tp.Model([ids_a, ids_b, plain], outputs)


BUILDERS = {
    "residual_mlp": _residual_mlp,
    "shared_two_inputs": _shared_two_inputs,
    "two_outputs": _two_outputs,
    "conv1d": _conv1d,
    "masked_rnn": _masked_rnn,
    "masked_merges": _masked_merges,
}


def _numbered(saved, prefix):
    """The arrays saved as ``prefix/0``, ``prefix/1``, ..., in order."""
    found = []
    while f"{prefix}/{len(found)}" in saved:
        found.append(saved[f"{prefix}/{len(found)}"])
    return found


def _set_keras_weights(model, saved, name, stage="w"):
    layers = sorted({key.split("/")[2] for key in saved if key.startswith(f"{name}/{stage}/")})
    for layer in layers:
        model.get_layer(layer).set_weights(_numbered(saved, f"{name}/{stage}/{layer}"))
    assert sum(v.size for v in model.variables) == sum(
        saved[k].size for k in saved if k.startswith(f"{name}/{stage}/")
    )


def _single(xs):
    return xs if len(xs) > 1 else xs[0]


@pytest.mark.parametrize("name", sorted(BUILDERS))
def test_the_forward_pass_matches_keras_on_the_same_weights(name, keras_reference, keras_saved):
    assert set(BUILDERS) == set(keras_reference.MODELS)
    model = BUILDERS[name]()
    _set_keras_weights(model, keras_saved, name)
    outputs = model(_single(_numbered(keras_saved, f"{name}/x")))
    outputs = outputs if isinstance(outputs, list) else [outputs]
    expected = _numbered(keras_saved, f"{name}/y")
    assert len(outputs) == len(expected)
    for out, want in zip(outputs, expected):
        np.testing.assert_allclose(out.numpy(), want, atol=1e-5)


def test_the_mask_matters_in_the_keras_comparison(keras_saved):
    # Without the mask passed on, the padded steps would change the LSTM's output.
    model = _masked_rnn()
    _set_keras_weights(model, keras_saved, "masked_rnn")
    ids = keras_saved["masked_rnn/x/0"]
    assert (ids == 0).any()
    embedding, lstm, dense = (model.get_layer(n) for n in ("embedding", "lstm", "out"))
    unmasked = dense(lstm(embedding(ids))).numpy()
    assert np.abs(unmasked - keras_saved["masked_rnn/y/0"]).max() > 1e-3


@pytest.mark.parametrize("name", ["two_outputs", "conv1d"])
def test_fit_history_and_weights_match_keras(name, keras_reference, keras_saved):
    model = BUILDERS[name]()
    _set_keras_weights(model, keras_saved, name)
    x = keras_saved[f"{name}/x/0"]
    targets = _numbered(keras_saved, f"{name}/t")
    if name == "two_outputs":
        loss = {"reg": "mse", "cls": "sparse_categorical_crossentropy"}
        y = {"reg": targets[0], "cls": targets[1]}
        trainer = tp.Trainer(model, tp.optimizers.SGD(0.1), loss, loss_weights=keras_reference.LOSS_WEIGHTS)
    else:
        loss = tp.losses.SparseCategoricalCrossentropy(from_logits=True)
        y = targets[0]
        trainer = tp.Trainer(model, tp.optimizers.SGD(0.1), loss)
    history = trainer.fit(x, y, shuffle=False, verbose=0, **keras_reference.TRAINED[name])
    expected = {k.split("/")[2]: v for k, v in keras_saved.items() if k.startswith(f"{name}/history/")}
    assert set(history.history) == set(expected)
    for key, values in expected.items():
        np.testing.assert_allclose(history.history[key], values, atol=1e-5, err_msg=key)
    reference = BUILDERS[name]()
    _set_keras_weights(reference, keras_saved, name, stage="trained")
    for got, want in zip(model.get_weights(), reference.get_weights()):
        np.testing.assert_allclose(got, want, atol=1e-5)


def test_sequential_and_lambda_are_layers_of_a_graph():
    x = tp.Input((3,))
    stack = L.Sequential([L.Dense(4, activation="relu"), L.Dense(2)])
    doubled = L.Lambda(lambda t: t * 2.0)(stack(x))
    model = tp.Model(x, doubled)
    data = _x(2, 3)
    np.testing.assert_allclose(model(data).numpy(), 2.0 * stack(data).numpy(), rtol=1e-6)
    assert doubled.shape == (None, 2)


def test_a_nested_model_is_one_row_of_the_summary():
    x = tp.Input((4,))
    inner = tp.Model(x, L.Dense(3)(x), name="encoder")
    y = tp.Input((4,), name="features")
    lines = []
    tp.Model(y, L.Dense(1, name="score")(inner(y))).summary(print_fn=lines.append)
    text = "\n".join(lines)
    assert "encoder (Model)" in text and "features[0][0]" in text and "encoder[0][0]" in text
    assert "Total params: 19" in text


def test_inputs_bind_by_name_or_position_and_a_wrong_count_is_named():
    a, b = tp.Input((2,), name="p"), tp.Input((2,), name="q")
    model = tp.Model([a, b], L.Subtract()([a, b]))
    x, y = _x(1, 2), _x(1, 2, seed=1)
    np.testing.assert_allclose(model((x, y)).numpy(), x - y, rtol=1e-6)
    with pytest.raises(ValueError, match="takes 2 inputs, got a list of 3"):
        model([x, y, y])
    with pytest.raises(ValueError, match="takes a list of 2 inputs, got one ndarray"):
        model(x)
    single = tp.Model(a, L.Dense(1)(a))
    np.testing.assert_array_equal(single({"p": x}).numpy(), single(x).numpy())
    keyed = tp.Model({"p": a}, L.Dense(1)(a))
    with pytest.raises(TypeError, match=r"takes a dict with keys \['p'\], got ndarray"):
        keyed(x)


def test_masked_merges_differ_from_plain_ones_in_the_keras_comparison(keras_saved):
    model = _masked_merges()
    _set_keras_weights(model, keras_saved, "masked_merges")
    ids_a, ids_b, plain = _numbered(keras_saved, "masked_merges/x")
    assert (ids_a == 0).any() and (ids_b == 0).any()
    a = model.get_layer("emb_a")(ids_a).numpy()
    b = model.get_layer("emb_b")(ids_b).numpy()
    saved = _numbered(keras_saved, "masked_merges/y")
    assert np.abs(np.maximum(a, b) - saved[0]).max() > 1e-3
    assert np.abs(a * plain - saved[3]).max() > 1e-3


def test_two_inputs_with_one_name_are_refused():
    a, b = tp.Input((3,), name="x"), tp.Input((3,), name="x")
    with pytest.raises(ValueError, match=r"the inputs \['x'\] are each named more than once"):
        tp.Model([a, b], tp.layers.Subtract()([a, b]))


def test_input_takes_keras_batch_shape_and_batch_size():
    assert tp.Input(batch_shape=(None, 5, 2)).shape == (None, 5, 2)
    assert tp.Input((3,), batch_size=8).shape == (None, 3)
    with pytest.raises(ValueError, match=r"give shape \(without the batch axis\) or batch_shape"):
        tp.Input((3,), batch_shape=(None, 3))


def _two_branch_model() -> tp.Model:
    a, b = tp.Input((4,), name="a"), tp.Input((3,), name="b")
    x = L.Dense(5, name="da")(a)
    added = L.Add(name="add")([x, L.Dense(5, name="db")(b)])
    return tp.Model([a, b], [L.Dense(2, name="o1")(added), L.Dense(1, name="o2")(x)])


def test_layers_and_weights_come_in_keras_order_in_a_branched_model():
    # Keras 3.15 lists this model as below (inputs first, then deepest first); made before
    # "db", "o2" used to come before it, and set_weights(keras_model.get_weights()) failed.
    model = _two_branch_model()
    assert [layer.name for layer in model.layers] == ["a", "b", "da", "db", "add", "o1", "o2"]
    shapes = [(4, 5), (5,), (3, 5), (5,), (5, 2), (2,), (5, 1), (1,)]
    assert [w.shape for w in model.get_weights()] == shapes
    assert isinstance(model.layers[0], L.InputLayer) and model.layers[0].output is model.inputs[0]


def test_layer_input_and_output_are_those_of_its_first_call():
    model = _two_branch_model()
    assert model.get_layer("da").input is model.inputs[0]
    assert model.get_layer("add").input == [model.get_layer("da").output, model.get_layer("db").output]
    assert model.get_layer("o1").output is model.outputs[0]
    shared = L.Dense(2, name="twice")
    first = shared(model.inputs[0])
    shared(model.inputs[0])
    assert shared.output is first  # Keras 3 gives the first call's
    with pytest.raises(AttributeError, match="'never_called' has never been called"):
        L.Dense(2, name="never_called").output


def test_get_layer_by_index_as_keras():
    model = _two_branch_model()
    assert model.get_layer(index=0).name == "a" and model.get_layer(index=-1).name == "o2"
    with pytest.raises(ValueError, match="no layer at index 7"):
        model.get_layer(index=7)
    with pytest.raises(ValueError, match="not both"):
        model.get_layer("a", 0)
    with pytest.raises(ValueError, match="give the name or the index"):
        model.get_layer()
