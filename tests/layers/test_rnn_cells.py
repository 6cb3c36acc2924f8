"""RNN(cell) with SimpleRNNCell, LSTMCell, GRUCell, StackedRNNCells and cells of one's own;
``stateful`` and ``reset_states`` on every recurrent layer. Keras 3's numbers come from
``scripts/keras_reference_rnn.py`` (``tests/layers/data/keras_rnn.npz``; CI has no Keras)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

import tapefit as tp
from tapefit import layers as L

REFERENCE = dict(np.load(Path(__file__).parent / "data" / "keras_rnn.npz"))
X, MASK, R = REFERENCE["x"], REFERENCE["mask"], REFERENCE["r"]
TOL = {"rtol": 1e-5, "atol": 1e-6}


def fill(model, seed):
    """The weights ``scripts/keras_reference_rnn.py`` gave Keras's model: uniform in
    [-0.3, 0.3) from ``seed``, in ``get_weights`` order."""
    rng = np.random.default_rng(seed)
    model.set_weights([rng.uniform(-0.3, 0.3, w.shape).astype(np.float32) for w in model.get_weights()])


def flat(value):
    if isinstance(value, (list, tuple)):
        return [leaf for v in value for leaf in flat(v)]
    return [value]


def outputs_and_gradients(layer, x, **kwargs):
    """The layer's outputs, and the gradients of ``sum(first output * r)`` for its trainable
    weights and for ``x`` (the script's loss)."""
    xv = tp.Variable(x)
    with tp.GradientTape() as tape:
        ys = flat(layer(xv, **kwargs))
        first = ys[0]
        weight = R[..., : first.shape[-1]] if first.ndim == 3 else R[:, 0, : first.shape[-1]]
        loss = tp.reduce_sum(first * weight)
    grads = tape.gradient(loss, [*layer.trainable_variables, xv])
    return [y.numpy() for y in ys], [g.numpy() for g in grads]


def check_against_keras(case, layer, x, **kwargs):
    ys, grads = outputs_and_gradients(layer, x, **kwargs)
    assert len(ys) == sum(1 for k in REFERENCE if k.startswith(f"{case}/y/"))
    for i, y in enumerate(ys):
        np.testing.assert_allclose(y, REFERENCE[f"{case}/y/{i}"], **TOL)
    for i, g in enumerate(grads[:-1]):
        np.testing.assert_allclose(g, REFERENCE[f"{case}/g/{i}"], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(grads[-1], REFERENCE[f"{case}/gx"], rtol=1e-4, atol=1e-5)


CELLS = {
    "simple": lambda: L.SimpleRNNCell(3),
    "lstm": lambda: L.LSTMCell(3),
    "gru": lambda: L.GRUCell(3),
    "gru_before": lambda: L.GRUCell(3, reset_after=False),
}


@pytest.mark.parametrize("seed, kind", list(enumerate(CELLS)))
def test_cells_with_a_mask_match_keras_outputs_and_gradients(seed, kind):
    layer = L.RNN(CELLS[kind](), return_sequences=True, return_state=True)
    layer(X)
    fill(layer, 100 + seed)
    check_against_keras(f"cell/{kind}", layer, X, mask=MASK)


def test_go_backwards_and_stacked_cells_match_keras():
    layer = L.RNN(L.LSTMCell(3), go_backwards=True)
    layer(X)
    fill(layer, 110)
    check_against_keras("cell/lstm_backwards", layer, X)
    stacked = L.RNN([L.SimpleRNNCell(3), L.LSTMCell(2)], return_state=True)
    stacked(X)
    fill(stacked, 111)
    check_against_keras("cell/stacked", stacked, X)
    assert isinstance(stacked.cell, L.StackedRNNCells)
    assert stacked.cell.state_size == [3, [2, 2]]


def test_weight_names_and_order_are_keras():
    layer = L.RNN([L.SimpleRNNCell(3), L.GRUCell(2)])
    layer(X)
    assert [path for path, _ in layer.named_variables()] == [
        "rnn/stacked_rnn_cells/simple_rnn_cell/kernel",
        "rnn/stacked_rnn_cells/simple_rnn_cell/recurrent_kernel",
        "rnn/stacked_rnn_cells/simple_rnn_cell/bias",
        "rnn/stacked_rnn_cells/gru_cell/kernel",
        "rnn/stacked_rnn_cells/gru_cell/recurrent_kernel",
        "rnn/stacked_rnn_cells/gru_cell/bias",
    ]
    assert [tuple(w.shape) for w in layer.get_weights()] == [(4, 3), (3, 3), (3,), (3, 6), (2, 6), (2, 6)]
    lstm = L.LSTMCell(2)
    lstm.build((None, 4))
    np.testing.assert_array_equal(lstm.bias.numpy(), [0, 0, 1, 1, 0, 0, 0, 0])  # unit_forget_bias


@pytest.mark.parametrize(
    "cell, layer",
    [
        (lambda: L.LSTMCell(3), lambda: L.LSTM(3, return_sequences=True, return_state=True)),
        (lambda: L.GRUCell(3), lambda: L.GRU(3, return_sequences=True, return_state=True)),
        (lambda: L.GRUCell(3, reset_after=False), lambda: L.GRU(3, reset_after=False, return_sequences=True)),
        (lambda: L.SimpleRNNCell(3), lambda: L.SimpleRNN(3, return_sequences=True, return_state=True)),
        (
            lambda: L.LSTMCell(3, activation="relu"),
            lambda: L.LSTM(3, activation="relu", return_sequences=True),
        ),
    ],
)
@pytest.mark.parametrize("masked", [False, True])
def test_rnn_of_a_cell_equals_the_layer_with_the_same_weights(cell, layer, masked):
    rnn, fused = L.RNN(cell(), return_sequences=True, return_state=layer().return_state), layer()
    rnn(X), fused(X)
    fill(fused, 3)
    rnn.set_weights(fused.get_weights())
    mask = MASK if masked else None
    for a, b in zip(flat(rnn(X, mask=mask)), flat(fused(X, mask=mask))):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-6, atol=1e-6)


class MinimalRNNCell(tp.layers.Layer):
    """The Keras docs' minimal cell: an int state_size, ``call`` returning one new state."""

    def __init__(self, units, **kwargs):
        super().__init__(**kwargs)
        self.units = units
        self.state_size = units

    def build(self, input_shape):
        self.kernel = self.add_weight(
            shape=(input_shape[-1], self.units), initializer="uniform", name="kernel"
        )
        self.recurrent_kernel = self.add_weight(
            shape=(self.units, self.units), initializer="uniform", name="recurrent_kernel"
        )

    def call(self, inputs, states):
        prev_output = states[0]
        h = tp.matmul(inputs, self.kernel)
        output = h + tp.matmul(prev_output, self.recurrent_kernel)
        return output, output


class PairCell(tp.layers.Layer):
    """Two states of different sizes (a list state_size), the output the sum of both's parts."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.state_size = [2, 3]
        self.output_size = 2

    def build(self, input_shape):
        self.w = self.add_weight(shape=(input_shape[-1], 5), name="w")

    def call(self, inputs, states):
        a, b = states
        z = tp.tanh(tp.matmul(inputs, self.w))
        new_a, new_b = a + z[:, :2], b * 0.5 + z[:, 2:]
        return new_a + new_b[:, :2], [new_a, new_b]


def test_a_minimal_cell_of_ones_own_runs_its_equations():
    cell = MinimalRNNCell(3)
    layer = L.RNN(cell, return_sequences=True)
    y = layer(X).numpy()
    kernel, recurrent = cell.kernel.numpy(), cell.recurrent_kernel.numpy()
    h = np.zeros((2, 3))
    for t in range(X.shape[1]):
        h = X[:, t] @ kernel + h @ recurrent
        np.testing.assert_allclose(y[:, t], h, rtol=1e-5, atol=1e-6)


def test_a_cell_with_a_list_of_states_returns_them_and_masks_them():
    layer = L.RNN(PairCell(), return_state=True)
    y, a, b = layer(X, mask=MASK)
    assert (y.shape, a.shape, b.shape) == ((2, 2), (2, 2), (2, 3))
    inputs = tp.Input((None, 4))
    symbolic = L.RNN(PairCell(), return_state=True)(inputs)
    assert [s.shape for s in symbolic] == [(None, 2), (None, 2), (None, 3)]
    # a masked step changes nothing: drop sample 0's last two steps and sample 1's first
    short = L.RNN(layer.cell, return_state=True)
    for got, want in zip(short(X[:1, :3]), (y[:1], a[:1], b[:1])):
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6, atol=1e-6)
    for got, want in zip(short(X[1:, 1:]), (y[1:], a[1:], b[1:])):
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6, atol=1e-6)


GRADIENT_CELLS = {
    "simple": lambda: L.SimpleRNNCell(2, dtype="float64"),
    "lstm": lambda: L.LSTMCell(2, dtype="float64"),
    "gru": lambda: L.GRUCell(2, dtype="float64"),
    "gru_before": lambda: L.GRUCell(2, reset_after=False, dtype="float64"),
    "lstm_relu": lambda: L.LSTMCell(
        2, activation="relu", recurrent_activation="hard_sigmoid", dtype="float64"
    ),
}


@pytest.mark.parametrize("kind", list(GRADIENT_CELLS))
def test_gradients_match_finite_differences(kind):
    cell = GRADIENT_CELLS[kind]()
    layer = L.RNN(cell, return_sequences=True, dtype="float64")
    x = X[:, :3, :2].astype(np.float64)
    layer(x)
    mask = MASK[:, 1:4]

    def run(x, kernel, recurrent, bias):
        cell.kernel, cell.recurrent_kernel, cell.bias = kernel, recurrent, bias
        return layer.call(x, mask=mask)

    weights = [np.asarray(w, np.float64) for w in cell.get_weights()]
    tp.testing.check_gradients(run, x, *weights)


def test_gradients_through_stacked_and_own_cells_match_finite_differences():
    for cells in (
        [L.SimpleRNNCell(2, dtype="float64"), L.LSTMCell(2, dtype="float64")],
        PairCell(dtype="float64"),
    ):
        layer = L.RNN(cells, return_state=True, dtype="float64")
        x = X[:, :3, :2].astype(np.float64)
        tp.testing.check_gradients(lambda x, layer=layer: layer(x, mask=MASK[:, 1:4]), x)


def test_cell_dropout_draws_one_mask_per_sequence_in_training_only():
    cell = L.SimpleRNNCell(3, dropout=0.5, recurrent_dropout=0.5, seed=1)
    layer = L.RNN(cell)
    tp.random.set_seed(3)
    inference = layer(X).numpy()
    np.testing.assert_allclose(layer(X, training=False).numpy(), inference)
    trained = layer(X, training=True).numpy()
    assert not np.allclose(trained, inference)
    assert cell._dropout_mask is None  # reset after the sequence
    tp.random.set_seed(3)
    first = layer(X, training=True).numpy()
    tp.random.set_seed(3)
    np.testing.assert_array_equal(layer(X, training=True).numpy(), first)


def test_symbolic_shapes_follow_keras():
    inputs = tp.Input((7, 4))
    assert L.RNN(L.LSTMCell(5))(inputs).shape == (None, 5)
    assert L.RNN(L.GRUCell(5), return_sequences=True)(inputs).shape == (None, 7, 5)
    out = L.RNN(L.LSTMCell(5), return_state=True)(inputs)
    assert [o.shape for o in out] == [(None, 5), (None, 5), (None, 5)]
    stacked = L.RNN([L.SimpleRNNCell(3), L.LSTMCell(2)], return_sequences=True, return_state=True)
    assert stacked.compute_output_shape((8, 7, 4)) == [(8, 7, 2), [(8, 3)], [(8, 2), (8, 2)]]
    model = tp.Model(inputs, L.RNN(L.SimpleRNNCell(3))(inputs))
    assert model(X[:, :, :].repeat(2, axis=1)[:, :7]).shape == (2, 3)


def test_config_round_trip_with_nested_cells():
    layer = L.RNN(
        [L.LSTMCell(3, recurrent_activation="hard_sigmoid"), L.GRUCell(2, reset_after=False)],
        return_sequences=True,
        go_backwards=True,
        name="stack",
    )
    config = layer.get_config()
    json.dumps(config)
    again = L.RNN.from_config(config)
    assert again.get_config() == config
    assert isinstance(again.cell, L.StackedRNNCells)
    assert [type(c).__name__ for c in again.cell.cells] == ["LSTMCell", "GRUCell"]
    assert again.cell.cells[1].reset_after is False and again.go_backwards
    single = L.RNN(L.SimpleRNNCell(4, activation="relu", dropout=0.25), stateful=True)
    again = tp.layers.deserialize(tp.layers.serialize(single))
    assert again.cell.units == 4 and again.cell.dropout == 0.25 and again.stateful


def test_model_file_round_trip(tmp_path):
    inputs = tp.Input((5, 4))
    x = L.RNN([L.SimpleRNNCell(3), L.LSTMCell(3)], return_sequences=True)(inputs)
    outputs = L.RNN(L.GRUCell(2))(x)
    model = tp.Model(inputs, outputs)
    fill(model, 9)
    model.save(tmp_path / "m.tapefit")
    loaded = tp.models.load_model(tmp_path / "m.tapefit")
    np.testing.assert_allclose(loaded(X).numpy(), model(X).numpy(), rtol=1e-6)


def test_a_cell_of_ones_own_in_a_model_file(tmp_path):
    registered = tp.register_serializable(package="rnn_cells_test")(PairCell)
    try:
        model = tp.layers.Sequential([tp.Input((5, 4)), L.RNN(registered())])
        model.save(tmp_path / "m.tapefit")
        loaded = tp.models.load_model(tmp_path / "m.tapefit")
        np.testing.assert_allclose(loaded(X).numpy(), model(X).numpy(), rtol=1e-6)
    finally:
        from tapefit.layers import serialization

        serialization._registered.pop("rnn_cells_test>PairCell", None)


def test_bad_cells_and_inputs_are_named():
    with pytest.raises(TypeError, match="state_size"):
        L.RNN(L.Dense(3))
    with pytest.raises(ValueError, match="units must be a positive integer"):
        L.LSTMCell(0)
    with pytest.raises(ValueError, match="dropout must be in"):
        L.GRUCell(2, dropout=1.0)
    layer = L.RNN(L.LSTMCell(3))
    with pytest.raises(ValueError, match=r"RNN 'rnn\w*' needs inputs of shape \(batch, time, features"):
        layer(X[:, 0])
    with pytest.raises(ValueError, match=r"needs inputs of shape \(batch, time, features"):
        L.RNN(L.LSTMCell(3))(tp.Input((4,)))
    layer(X)
    with pytest.raises(ValueError, match=r"mask must have shape \(2, 5\)"):
        layer(X, mask=MASK[:, :4])
    with pytest.raises(ValueError, match="takes 2 initial state"):
        layer(X, initial_state=[np.zeros((2, 3), np.float32)])
    with pytest.raises(ValueError, match=r"built for step inputs \(batch, 4\)"):
        layer(X[:, :, :3])
    with pytest.raises(ValueError, match="at least one time step"):
        layer(X[:, :0])


def test_initial_state_is_where_the_loop_starts():
    layer = L.RNN(L.LSTMCell(3), return_state=True)
    _, h, c = layer(X[:, :2])
    y, *_ = layer(X[:, 2:], initial_state=[h, c])
    whole, *_ = layer(X)
    np.testing.assert_allclose(y.numpy(), whole.numpy(), rtol=1e-6, atol=1e-6)


def test_a_compiled_step_equals_the_eager_one():
    model = tp.layers.Sequential([tp.Input((5, 4)), L.RNN(L.GRUCell(3)), L.Dense(1)])
    y = np.arange(2, dtype=np.float32)[:, None]
    twin = tp.models.clone_model(model)
    twin.set_weights(model.get_weights())
    eager = tp.Trainer(model, "sgd", "mse").fit(X, y, epochs=2, batch_size=2, verbose=0).history["loss"]
    compiled = tp.Trainer(twin, "sgd", "mse", compile=True).fit(X, y, epochs=2, batch_size=2, verbose=0)
    np.testing.assert_array_equal(eager, compiled.history["loss"])


# -- stateful ------------------------------------------------------------------------------


STATEFUL = {
    "lstm": lambda: L.LSTM(3, stateful=True),
    "gru": lambda: L.GRU(3, stateful=True, return_sequences=True),
    "simple": lambda: L.SimpleRNN(3, stateful=True),
    "rnn_gru": lambda: L.RNN(L.GRUCell(3), stateful=True),
}


@pytest.mark.parametrize("seed, kind", list(enumerate(STATEFUL)))
def test_stateful_layers_carry_states_across_calls_as_keras(seed, kind):
    layer = STATEFUL[kind]()
    x = REFERENCE["x6"]
    chunks = [x[:, i : i + 2] for i in (0, 2, 4)]
    layer(chunks[0])
    fill(layer, 120 + seed)
    layer.reset_states()
    for i, chunk in enumerate(chunks):
        np.testing.assert_allclose(layer(chunk).numpy(), REFERENCE[f"stateful/{kind}/{i}"], **TOL)
    layer.reset_states()
    np.testing.assert_allclose(layer(chunks[0]).numpy(), REFERENCE[f"stateful/{kind}/after_reset"], **TOL)


@pytest.mark.parametrize(
    "make", [lambda s: L.LSTM(4, stateful=s), lambda s: L.RNN(L.LSTMCell(4), stateful=s)]
)
def test_a_stateful_lstm_over_time_chunks_equals_one_call_and_reset_restarts(make):
    x = np.random.default_rng(2).standard_normal((3, 12, 5)).astype(np.float32)
    stateful, whole = make(True), make(False)
    stateful(x[:, :4]), whole(x)
    whole.set_weights(stateful.get_weights())
    stateful.reset_states()
    for start in (0, 4, 8):
        last = stateful(x[:, start : start + 4])
    np.testing.assert_allclose(last.numpy(), whole(x).numpy(), rtol=1e-5, atol=1e-6)
    h, c = stateful.states
    assert h.shape == (3, 4) and c.shape == (3, 4)
    assert not h.trainable and not c.trainable
    stateful.reset_states()
    np.testing.assert_array_equal(h.numpy(), np.zeros((3, 4)))
    np.testing.assert_allclose(stateful(x[:, :4]).numpy(), whole(x[:, :4]).numpy(), rtol=1e-5, atol=1e-6)


def test_stateful_states_are_not_weights_and_stay_out_of_files(tmp_path):
    # Keras 3 keeps them out of `weights` and model files: a loaded model starts from zeros.
    model = tp.layers.Sequential([tp.Input(batch_shape=(2, 3, 4)), L.LSTM(3, stateful=True)])
    model(X[:, :3])
    assert len(model.variables) == 3 and model.layers[0].states is not None
    assert all("state" not in key for key in model.state_dict())
    first = model(X[:, :3]).numpy()
    model.save(tmp_path / "m.tapefit")
    loaded = tp.models.load_model(tmp_path / "m.tapefit")
    assert loaded.layers[0].stateful
    model.layers[0].reset_states()
    np.testing.assert_allclose(loaded(X[:, :3]).numpy(), model(X[:, :3]).numpy(), rtol=1e-6)
    # its second call carries its first call's states, as the saved model's second call did
    np.testing.assert_allclose(loaded(X[:, :3]).numpy(), first, rtol=1e-6)


def test_stateful_batch_size_is_fixed_with_one_clear_error():
    layer = L.GRU(3, stateful=True)
    layer(X)
    with pytest.raises(
        ValueError, match=r"GRU 'gru\w*' is stateful: .* a batch of 2 sequences, but got a batch of 1"
    ):
        layer(X[:1])
    declared = L.SimpleRNN(3, stateful=True, batch_input_shape=(4, 5, 4))
    with pytest.raises(ValueError, match="batch of 4 sequences, but got a batch of 2"):
        declared(X)
    sized = L.LSTM(3, stateful=True, batch_size=3, input_shape=(5, 4))
    with pytest.raises(ValueError, match="batch of 3 sequences, but got a batch of 2"):
        sized(X)
    # tp.Input keeps no batch size (a model takes any), so a model's first call fixes it
    inputs = tp.Input(batch_shape=(3, 5, 4))
    model = tp.Model(inputs, L.RNN(L.LSTMCell(2), stateful=True)(inputs))
    model(np.concatenate([X, X[:1]]))
    with pytest.raises(ValueError, match="batch of 3 sequences, but got a batch of 2"):
        model(X)


def test_stateful_training_in_a_compiled_step_carries_the_states():
    def make():
        return tp.layers.Sequential([tp.Input(batch_shape=(2, 5, 4)), L.LSTM(3, stateful=True), L.Dense(1)])

    eager, compiled = make(), make()
    compiled.set_weights(eager.get_weights())
    y = np.ones((4, 1), np.float32)
    x = np.concatenate([X, X[::-1]])
    a = tp.Trainer(eager, "sgd", "mse").fit(x, y, epochs=2, batch_size=2, shuffle=False, verbose=0)
    b = tp.Trainer(compiled, "sgd", "mse", compile=True).fit(
        x, y, epochs=2, batch_size=2, shuffle=False, verbose=0
    )
    np.testing.assert_allclose(a.history["loss"], b.history["loss"], rtol=1e-6)
    np.testing.assert_allclose(
        eager.layers[0].states[0].numpy(), compiled.layers[0].states[0].numpy(), rtol=1e-6
    )
    assert np.abs(compiled.layers[0].states[0].numpy()).sum() > 0


def test_bidirectional_of_stateful_layers_resets_both():
    layer = L.Bidirectional(L.LSTM(2, stateful=True))
    first = layer(X).numpy()
    assert not np.allclose(layer(X).numpy(), first)
    layer.reset_states()
    np.testing.assert_allclose(layer(X).numpy(), first, rtol=1e-6)


@pytest.mark.skipif(importlib.util.find_spec("onnxruntime") is None, reason="needs onnxruntime")
def test_onnx_export_of_cells_matches_onnxruntime(tmp_path):
    import onnxruntime as ort

    from tapefit.export import to_onnx

    x = np.random.default_rng(0).standard_normal((5, 6, 4)).astype(np.float32)
    x[0, 4:] = 0.0
    inputs = tp.Input((6, 4))
    h = L.Masking()(inputs)
    h = L.RNN([L.SimpleRNNCell(3), L.GRUCell(2, reset_after=False)], return_sequences=True)(h)
    outputs = L.RNN(L.LSTMCell(3), go_backwards=True)(h)
    model = tp.Model(inputs, outputs)
    to_onnx(model, tmp_path / "m.onnx")
    session = ort.InferenceSession(str(tmp_path / "m.onnx"), providers=["CPUExecutionProvider"])
    (got,) = session.run(None, {session.get_inputs()[0].name: x})
    np.testing.assert_allclose(got, model(x).numpy(), rtol=1e-5, atol=1e-5)
    stateful_inputs = tp.Input(batch_shape=(5, 6, 4))
    stateful = tp.Model(stateful_inputs, L.RNN(L.LSTMCell(3), stateful=True, name="keeper")(stateful_inputs))
    with pytest.raises(Exception, match="layer 'keeper' changes variable 'rnn_state'"):
        to_onnx(stateful, tmp_path / "s.onnx")


def test_a_loss_for_each_output_of_one_layer_counts_each():
    # An RNN's output and states come from one layer and share its name; Keras 3 still sums
    # the loss over all three.
    inputs = tp.Input((5, 4))
    model = tp.Model(inputs, L.RNN(L.LSTMCell(2), return_state=True, name="seq")(inputs))
    model.compile(optimizer="sgd", loss="mse")
    targets = [np.full((2, 2), 0.5, np.float32)] * 3
    predicted = model.predict(X, verbose=0)
    expected = sum(float(np.mean((p - t) ** 2)) for p, t in zip(predicted, targets))
    logs = model.evaluate(X, targets, verbose=0, return_dict=True)
    np.testing.assert_allclose(logs["loss"], expected, rtol=1e-6)
    assert {"seq_loss", "seq_1_loss", "seq_2_loss"} <= set(logs)


def test_stateful_and_unroll_round_trip_through_configs():
    for layer in (
        L.SimpleRNN(2, stateful=True, unroll=True),
        L.LSTM(2, stateful=True),
        L.GRU(2, unroll=True),
    ):
        config = layer.get_config()
        again = type(layer).from_config(json.loads(json.dumps(config)))
        assert again.get_config() == config
        assert (again.stateful, again.unroll) == (layer.stateful, layer.unroll)
    assert L.Bidirectional(L.GRU(2, stateful=True)).backward_layer.stateful
