"""SimpleRNN, LSTM, GRU and Bidirectional: Keras's equations and layouts, masks, gradients."""

import functools
import importlib.util
from pathlib import Path

import numpy as np
import pytest

import tapefit as tp

RNG = np.random.default_rng(0)
X = RNG.standard_normal((3, 6, 4)).astype(np.float32)


def sigmoid(z):
    return 1.0 / (1.0 + np.exp(-z))


def reference(kind, x, kernel, recurrent, bias, go_backwards=False, mask=None, zero_output_for_mask=False):
    """Keras 3's equations in float64 NumPy: every step's output and the final states.

    A masked step keeps ``h`` and ``c`` and outputs the previous step's output (zeros before the
    first step), or zeros with ``zero_output_for_mask`` (Keras's TensorFlow backend).
    """
    batch, steps, _ = x.shape
    units = recurrent.shape[0]
    h, c = np.zeros((batch, units)), np.zeros((batch, units))
    outputs = []
    for t in range(steps - 1, -1, -1) if go_backwards else range(steps):
        h_prev, c_prev = h, c
        xt = x[:, t].astype(np.float64)
        if kind == "simple":
            h = np.tanh(xt @ kernel + h @ recurrent + bias)
        elif kind == "lstm":
            i, f, g, o = np.split(xt @ kernel + h @ recurrent + bias, 4, axis=-1)
            c = sigmoid(f) * c + sigmoid(i) * np.tanh(g)
            h = sigmoid(o) * np.tanh(c)
        elif kind == "gru":
            x_z, x_r, x_h = np.split(xt @ kernel + bias[0], 3, axis=-1)
            h_z, h_r, h_h = np.split(h @ recurrent + bias[1], 3, axis=-1)
            z, r = sigmoid(x_z + h_z), sigmoid(x_r + h_r)
            h = z * h + (1 - z) * np.tanh(x_h + r * h_h)
        else:  # reset_after=False: the reset gate before the product, one bias
            x_z, x_r, x_h = np.split(xt @ kernel + bias, 3, axis=-1)
            h_z, h_r = np.split(h @ recurrent[:, : 2 * units], 2, axis=-1)
            z, r = sigmoid(x_z + h_z), sigmoid(x_r + h_r)
            h = z * h + (1 - z) * np.tanh(x_h + (r * h) @ recurrent[:, 2 * units :])
        if mask is None:
            outputs.append(h)
            continue
        keep = mask[:, t, None]
        h, c = np.where(keep, h, h_prev), np.where(keep, c, c_prev)
        fallback = outputs[-1] if outputs and not zero_output_for_mask else np.zeros_like(h)
        outputs.append(np.where(keep, h, fallback))
    return np.stack(outputs, axis=1), h, c


LAYERS = {
    "simple": tp.layers.SimpleRNN,
    "lstm": tp.layers.LSTM,
    "gru": tp.layers.GRU,
    "gru_reset_before": functools.partial(tp.layers.GRU, reset_after=False),
}
TORCH_KINDS = ["simple", "lstm", "gru"]  # PyTorch's GRU resets after the product


def weights(layer):
    return [v.numpy().astype(np.float64) for v in (layer.kernel, layer.recurrent_kernel, layer.bias)]


@pytest.mark.parametrize("kind", list(LAYERS))
@pytest.mark.parametrize("go_backwards", [False, True])
def test_outputs_follow_keras_equations(kind, go_backwards):
    tp.random.set_seed(1)
    layer = LAYERS[kind](5, return_sequences=True, return_state=True, go_backwards=go_backwards)
    sequence, *states = layer(tp.constant(X))
    expected, h, c = reference(kind, X, *weights(layer), go_backwards=go_backwards)
    np.testing.assert_allclose(sequence.numpy(), expected, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(states[0].numpy(), h, rtol=1e-5, atol=1e-5)
    if kind == "lstm":
        np.testing.assert_allclose(states[1].numpy(), c, rtol=1e-5, atol=1e-5)
    assert len(states) == (2 if kind == "lstm" else 1)
    np.testing.assert_allclose(LAYERS[kind](5)(tp.constant(X)).shape, (3, 5))


def test_weight_layouts_and_initializers_are_keras():
    tp.random.set_seed(2)
    lstm, gru, gru_before = tp.layers.LSTM(8), tp.layers.GRU(8), tp.layers.GRU(8, reset_after=False)
    lstm(tp.constant(X)), gru(tp.constant(X)), gru_before(tp.constant(X))
    assert [v.shape for v in lstm.variables] == [(4, 32), (8, 32), (32,)]
    assert [v.shape for v in gru.variables] == [(4, 24), (8, 24), (2, 24)]
    assert [v.shape for v in gru_before.variables] == [(4, 24), (8, 24), (24,)]
    assert gru.reset_after and not gru_before.reset_after
    bias = lstm.bias.numpy()
    assert (
        np.all(bias[8:16] == 1.0) and np.all(bias[:8] == 0.0) and np.all(bias[16:] == 0.0)
    )  # unit_forget_bias
    rk = gru.recurrent_kernel.numpy()
    np.testing.assert_allclose(rk @ rk.T, np.eye(8), atol=1e-5)  # (8, 24): orthonormal rows


def test_padded_steps_change_nothing():
    tp.random.set_seed(3)
    layer = tp.layers.LSTM(5, return_sequences=True, return_state=True)
    unpadded, h4, c4 = layer(tp.constant(X[:, :4]))
    pad = np.full((3, 2, 4), 7.0, np.float32)
    right, left = np.concatenate([X[:, :4], pad], axis=1), np.concatenate([pad, X[:, :4]], axis=1)
    right_mask, left_mask = np.arange(6) < 4, np.arange(6) >= 2
    for padded, mask in ((right, right_mask), (left, left_mask)):
        sequence, h, c = layer(tp.constant(padded), mask=np.tile(mask, (3, 1)))
        np.testing.assert_allclose(h.numpy(), h4.numpy(), rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(c.numpy(), c4.numpy(), rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(sequence.numpy()[:, mask], unpadded.numpy(), rtol=1e-6, atol=1e-6)
        padded_steps = sequence.numpy()[:, ~mask]
        # Keras: a padded step repeats the previous output (zeros before the first real step).
        expected = sequence.numpy()[:, [3, 3]] if mask is right_mask else np.zeros_like(padded_steps)
        np.testing.assert_array_equal(padded_steps, expected)
    last = tp.layers.LSTM(5)
    last(tp.constant(X))
    last.set_weights(layer.get_weights())
    output = last(tp.constant(right), mask=np.tile(right_mask, (3, 1)))
    np.testing.assert_allclose(output.numpy(), h4.numpy(), rtol=1e-6, atol=1e-6)


MASK = np.array([[1, 1, 1, 1, 0, 0], [0, 1, 1, 0, 1, 0], [1, 0, 0, 0, 0, 0]], bool)


@pytest.mark.parametrize("kind", list(LAYERS))
@pytest.mark.parametrize("go_backwards", [False, True])
@pytest.mark.parametrize("zero_output_for_mask", [False, True])
def test_masked_steps_follow_keras(kind, go_backwards, zero_output_for_mask):
    tp.random.set_seed(12)
    layer = LAYERS[kind](
        5,
        return_sequences=True,
        return_state=True,
        go_backwards=go_backwards,
        zero_output_for_mask=zero_output_for_mask,
    )
    sequence, *states = layer(tp.constant(X), mask=MASK)
    expected, h, c = reference(
        kind, X, *weights(layer), go_backwards, mask=MASK, zero_output_for_mask=zero_output_for_mask
    )
    np.testing.assert_allclose(sequence.numpy(), expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(states[0].numpy(), h, rtol=1e-5, atol=1e-6)
    if kind == "lstm":
        np.testing.assert_allclose(states[1].numpy(), c, rtol=1e-5, atol=1e-6)
    # Without return_sequences: the last step's output, zeros after a masked one with
    # zero_output_for_mask (Keras does the same).
    single = LAYERS[kind](5, go_backwards=go_backwards, zero_output_for_mask=zero_output_for_mask)
    single(tp.constant(X))
    single.set_weights(layer.get_weights())
    np.testing.assert_allclose(
        single(tp.constant(X), mask=MASK).numpy(), expected[:, -1], rtol=1e-5, atol=1e-6
    )


def test_bidirectional_concatenates_forward_and_time_ordered_backward():
    tp.random.set_seed(4)
    layer = tp.layers.Bidirectional(tp.layers.GRU(3, return_sequences=True))
    out = layer(tp.constant(X)).numpy()
    forward, _, _ = reference("gru", X, *weights(layer.forward_layer))
    backward, _, _ = reference("gru", X, *weights(layer.backward_layer), go_backwards=True)
    np.testing.assert_allclose(
        out, np.concatenate([forward, backward[:, ::-1]], axis=-1), rtol=1e-5, atol=1e-5
    )
    assert len(layer.trainable_variables) == 6
    summed = tp.layers.Bidirectional(tp.layers.LSTM(3), merge_mode="sum")(tp.constant(X))
    assert summed.shape == (3, 3)
    with pytest.raises(ValueError, match="merge_mode must be one of"):
        tp.layers.Bidirectional(tp.layers.LSTM(3), merge_mode="max")


@pytest.mark.parametrize("kind", list(LAYERS))
def test_gradients_match_finite_differences(kind):
    layer = LAYERS[kind](3, return_sequences=True)
    tp.random.set_seed(5)
    layer(tp.constant(X[:2, :3, :2]))  # builds the float32 weights; the check runs in float64

    def run(x, kernel, recurrent, bias):
        layer.kernel, layer.recurrent_kernel, layer.bias = kernel, recurrent, bias
        return layer.call(x)

    tp.testing.check_gradients(run, X[:2, :3, :2].astype(np.float64), *weights(layer))


GRADIENT_MASK = np.array([[1, 1, 0, 1], [0, 1, 1, 0]], bool)  # holes, left and right padding


@pytest.mark.parametrize("kind", list(LAYERS))
@pytest.mark.parametrize("zero_output_for_mask", [False, True])
def test_masked_gradients_match_finite_differences(kind, zero_output_for_mask):
    x = X[:2, :4, :2]
    layer = LAYERS[kind](
        3, return_sequences=True, return_state=True, zero_output_for_mask=zero_output_for_mask
    )
    tp.random.set_seed(14)
    layer(tp.constant(x))  # builds the float32 weights; the check runs in float64

    def run(x, kernel, recurrent, bias):
        layer.kernel, layer.recurrent_kernel, layer.bias = kernel, recurrent, bias
        return layer.call(x, mask=GRADIENT_MASK)  # the sequence and the final states

    tp.testing.check_gradients(run, x.astype(np.float64), *weights(layer))


@pytest.mark.parametrize("kind", list(LAYERS))
@pytest.mark.parametrize("masked", [False, True])
def test_bidirectional_gradients_match_finite_differences(kind, masked):
    x = X[:2, :4, :2]
    layer = tp.layers.Bidirectional(LAYERS[kind](3, return_sequences=True, return_state=True))
    tp.random.set_seed(15)
    layer(tp.constant(x))
    directions = (layer.forward_layer, layer.backward_layer)

    def run(x, *arrays):
        for k, sublayer in enumerate(directions):
            sublayer.kernel, sublayer.recurrent_kernel, sublayer.bias = arrays[3 * k : 3 * k + 3]
        return layer(x, mask=GRADIENT_MASK if masked else None)

    tp.testing.check_gradients(run, x.astype(np.float64), *weights(directions[0]), *weights(directions[1]))


def test_second_order_through_an_lstm_cell():
    layer = tp.layers.LSTM(2)
    tp.random.set_seed(6)
    layer(tp.constant(X[:1, :2, :2]))

    def run(x, kernel):
        layer.kernel = kernel
        layer.recurrent_kernel = tp.constant(layer.recurrent_kernel.numpy().astype(np.float64))
        layer.bias = tp.constant(layer.bias.numpy().astype(np.float64))
        return layer.call(x)

    tp.testing.check_gradients(run, X[:1, :2, :2].astype(np.float64), weights(layer)[0], order=2)


def test_a_compiled_step_equals_the_eager_one_bit_for_bit():
    def make():
        tp.random.set_seed(7)
        model = tp.layers.Sequential([tp.layers.LSTM(6), tp.layers.Dense(2)])
        model(tp.constant(X))  # built now: both models draw the same weights
        return model, tp.optimizers.Adam(0.01)

    y = tp.constant(np.array([0, 1, 1]))
    loss_fn = tp.losses.SparseCategoricalCrossentropy(from_logits=True)

    def stepper(model, optimizer):
        def step(x, y):
            with tp.GradientTape() as tape:
                loss = loss_fn(y, model(x))
            optimizer.apply_gradients(
                zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables)
            )
            return loss

        return step

    (eager_model, eager_opt), (compiled_model, compiled_opt) = make(), make()
    eager, compiled = stepper(eager_model, eager_opt), tp.function(stepper(compiled_model, compiled_opt))
    for _ in range(3):
        assert float(eager(tp.constant(X), y)) == float(compiled(tp.constant(X), y))
    for a, b in zip(eager_model.variables, compiled_model.variables):
        np.testing.assert_array_equal(a.numpy(), b.numpy())


def test_bad_inputs_name_the_shapes():
    layer = tp.layers.LSTM(4)
    with pytest.raises(
        ValueError, match=r"needs inputs of shape \(batch, time, features\), got shape \(3, 4\)"
    ):
        layer(tp.constant(X[:, 0]))
    layer(tp.constant(X))
    with pytest.raises(ValueError, match=r"built for inputs \(batch, time, 4\), got shape \(3, 6, 5\)"):
        layer(tp.constant(np.zeros((3, 6, 5), np.float32)))
    with pytest.raises(ValueError, match=r"mask must have shape \(3, 6\)"):
        layer(tp.constant(X), mask=np.ones((3, 5), bool))
    with pytest.raises(ValueError, match="units must be a positive integer"):
        tp.layers.GRU(0)


# PyTorch's results, saved by scripts/torch_reference.py (its docstring lists the keys).
TORCH_REFERENCE = Path(__file__).parent / "data" / "torch_recurrent.npz"
TORCH_CASES = {  # name: (layer, bidirectional, masked), as the script's CASES
    "simple": (tp.layers.SimpleRNN, False, False),
    "lstm": (tp.layers.LSTM, False, False),
    "gru": (tp.layers.GRU, False, False),
    "simple_masked": (tp.layers.SimpleRNN, False, True),
    "lstm_masked": (tp.layers.LSTM, False, True),
    "gru_masked": (tp.layers.GRU, False, True),
    "bilstm": (tp.layers.LSTM, True, False),
    "bilstm_masked": (tp.layers.LSTM, True, True),
}


@pytest.mark.parametrize("case", list(TORCH_CASES))
def test_outputs_and_gradients_equal_pytorchs_saved_results(case):
    cls, bidirectional, masked = TORCH_CASES[case]
    with np.load(TORCH_REFERENCE) as data:
        saved = {key: data[key] for key in data.files if key.startswith(case + "/") or "/" not in key}
    # PyTorch's padded outputs are zeros: Keras's zero_output_for_mask (Bidirectional sets it).
    layer = cls(
        4, return_sequences=True, return_state=True, zero_output_for_mask=masked and not bidirectional
    )
    if bidirectional:
        layer = tp.layers.Bidirectional(layer)
    directions = (
        {"forward": layer.forward_layer, "backward": layer.backward_layer}
        if bidirectional
        else {"forward": layer}
    )
    x = tp.Variable(saved["x"])
    mask = saved["mask"] if masked else None
    layer(x)  # builds the weights, then the saved ones replace them
    names = ("kernel", "recurrent_kernel", "bias")
    for direction, sublayer in directions.items():
        for name in names:
            getattr(sublayer, name).assign(saved[f"{case}/{direction}/{name}"])
    with tp.GradientTape() as tape:
        outputs = layer(x, mask=mask)
        loss = tp.add_n([tp.reduce_sum(out * saved[f"{case}/weight_{k}"]) for k, out in enumerate(outputs)])
    sources = [getattr(sublayer, name) for sublayer in directions.values() for name in names]
    grads = tape.gradient(loss, [x, *sources])
    assert len(outputs) == sum(key.startswith(f"{case}/output_") for key in saved)
    for k, out in enumerate(outputs):
        np.testing.assert_allclose(
            out.numpy(), saved[f"{case}/output_{k}"], rtol=1e-5, atol=1e-6, err_msg=f"output {k}"
        )
    expected = [saved[f"{case}/grad_x"]] + [
        saved[f"{case}/{direction}/grad_{name}"] for direction in directions for name in names
    ]
    labels = ["x"] + [f"{direction} {name}" for direction in directions for name in names]
    for grad, want, label in zip(grads, expected, labels):
        np.testing.assert_allclose(grad.numpy(), want, rtol=1e-5, atol=1e-6, err_msg=label)


@pytest.fixture
def torch():
    """PyTorch, or a skip where it is not installed (CI has it not)."""
    return pytest.importorskip("torch")


def torch_module(torch, kind, layer):
    kernel, recurrent, bias = (np.asarray(w, np.float32) for w in weights(layer))
    units = recurrent.shape[0]
    cls = {"simple": torch.nn.RNN, "lstm": torch.nn.LSTM, "gru": torch.nn.GRU}[kind]
    module = cls(kernel.shape[0], units, batch_first=True)
    if kind == "gru":  # Keras's z, r, h against PyTorch's r, z, n
        order = np.concatenate(
            [np.arange(units, 2 * units), np.arange(units), np.arange(2 * units, 3 * units)]
        )
        kernel, recurrent, bias_ih, bias_hh = (
            kernel[:, order],
            recurrent[:, order],
            bias[0][order],
            bias[1][order],
        )
    else:  # LSTM: i, f, c, o in both
        bias_ih, bias_hh = bias, np.zeros_like(bias)
    with torch.no_grad():
        module.weight_ih_l0.copy_(torch.from_numpy(kernel.T.copy()))
        module.weight_hh_l0.copy_(torch.from_numpy(recurrent.T.copy()))
        module.bias_ih_l0.copy_(torch.from_numpy(np.ascontiguousarray(bias_ih)))
        module.bias_hh_l0.copy_(torch.from_numpy(np.ascontiguousarray(bias_hh)))
    return module


@pytest.mark.parametrize("kind", TORCH_KINDS)
def test_outputs_and_gradients_equal_pytorchs(torch, kind):
    tp.random.set_seed(8)
    layer = LAYERS[kind](5, return_sequences=True)
    x = tp.Variable(X)
    with tp.GradientTape() as tape:
        loss = tp.reduce_sum(tp.square(layer(x)))
    ours = tape.gradient(loss, [x, layer.kernel, layer.recurrent_kernel])
    module = torch_module(torch, kind, layer)
    xt = torch.from_numpy(X.copy()).requires_grad_()
    out, _ = module(xt)
    (out**2).sum().backward()
    np.testing.assert_allclose(layer(tp.constant(X)).numpy(), out.detach().numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(ours[0].numpy(), xt.grad.numpy(), rtol=1e-4, atol=1e-5)
    kernel_grad = module.weight_ih_l0.grad.numpy().T
    recurrent_grad = module.weight_hh_l0.grad.numpy().T
    if kind == "gru":
        units = 5
        back = np.concatenate(
            [np.arange(units, 2 * units), np.arange(units), np.arange(2 * units, 3 * units)]
        )
        kernel_grad, recurrent_grad = kernel_grad[:, np.argsort(back)], recurrent_grad[:, np.argsort(back)]
    np.testing.assert_allclose(ours[1].numpy(), kernel_grad, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(ours[2].numpy(), recurrent_grad, rtol=1e-4, atol=1e-5)


def test_the_torch_reference_script_reproduces_the_saved_results(torch):
    spec = importlib.util.spec_from_file_location(
        "torch_reference", Path(__file__).parents[2] / "scripts" / "torch_reference.py"
    )
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    assert script.PATH == TORCH_REFERENCE
    assert set(script.CASES) == set(TORCH_CASES)
    assert script.check(TORCH_REFERENCE, script.compute()) == []


def test_embedding_mask_zero_flows_through_sequential_to_the_rnn():
    ids = np.array([[3, 5, 2, 0, 0], [4, 1, 0, 0, 0]])
    for layers in (
        lambda: [tp.layers.Embedding(10, 4, mask_zero=True), tp.layers.GRU(6)],
        lambda: [tp.layers.Embedding(10, 4, mask_zero=True), tp.layers.Dense(4), tp.layers.LSTM(6)],
    ):
        tp.random.set_seed(9)
        model = tp.layers.Sequential([*layers(), tp.layers.Dense(2)])
        padded = model(tp.constant(ids)).numpy()
        first = model(tp.constant(ids[:1, :3])).numpy()  # the first sequence without its padding
        np.testing.assert_allclose(padded[:1], first, rtol=1e-6, atol=1e-6)
    tp.random.set_seed(9)
    unmasked = tp.layers.Sequential([tp.layers.Embedding(10, 4), tp.layers.GRU(6)])
    assert not np.allclose(unmasked(tp.constant(ids)).numpy()[:1], unmasked(tp.constant(ids[:1, :3])).numpy())


def test_bidirectional_passes_the_mask_on():
    ids = np.array([[3, 5, 2, 0, 0], [4, 1, 0, 0, 0]])
    tp.random.set_seed(13)
    model = tp.layers.Sequential(
        [
            tp.layers.Embedding(10, 4, mask_zero=True),
            tp.layers.Bidirectional(tp.layers.LSTM(3, return_sequences=True)),
            tp.layers.LSTM(2),
        ]
    )
    padded = model(tp.constant(ids)).numpy()
    for row, length in enumerate((3, 2)):
        alone = model(tp.constant(ids[row : row + 1, :length])).numpy()
        np.testing.assert_allclose(padded[row : row + 1], alone, rtol=1e-6, atol=1e-6)
    bidirectional = model.layers[1]
    mask = tp.constant(ids != 0)
    assert bidirectional.compute_mask(None, mask) is mask
    sequence = bidirectional(model.layers[0](tp.constant(ids)), mask=mask).numpy()
    np.testing.assert_array_equal(sequence[ids == 0], 0.0)  # both directions: zeros when padded
    assert tp.layers.Bidirectional(tp.layers.GRU(3)).compute_mask(None, mask) is None
    pair = tp.layers.Bidirectional(tp.layers.GRU(3, return_sequences=True), merge_mode=None)
    assert [m is mask for m in pair.compute_mask(None, mask)] == [True, True]


def test_a_compiled_model_with_mask_zero_follows_each_calls_padding():
    tp.random.set_seed(10)
    model = tp.layers.Sequential([tp.layers.Embedding(10, 4, mask_zero=True), tp.layers.LSTM(3)])
    compiled = tp.function(lambda ids: model(ids))
    for ids in (np.array([[1, 2, 0, 0]]), np.array([[1, 2, 3, 0]]), np.array([[4, 0, 0, 0]])):
        np.testing.assert_array_equal(compiled(tp.constant(ids)).numpy(), model(tp.constant(ids)).numpy())


@pytest.mark.parametrize("kind", list(LAYERS))
def test_dropout_in_training_only_and_seeded(kind):
    def run(training, seed=11):
        tp.random.set_seed(seed)
        layer = LAYERS[kind](5, dropout=0.5, recurrent_dropout=0.3)
        return layer(tp.constant(X), training=training).numpy()

    tp.random.set_seed(11)
    plain = LAYERS[kind](5)(tp.constant(X)).numpy()
    np.testing.assert_array_equal(run(False), plain)  # inference: no dropout
    assert not np.allclose(run(True), plain)
    np.testing.assert_array_equal(run(True), run(True))  # the same seed, the same masks
    with pytest.raises(ValueError, match="dropout must be in"):
        LAYERS[kind](5, dropout=1.0)


def test_arguments_after_the_activations_are_keyword_only():
    # Keras's fourth positional argument is use_bias; tapefit's would be unit_forget_bias or
    # reset_after, so it refuses positions there rather than read them as something else.
    with pytest.raises(TypeError):
        tp.layers.LSTM(4, "tanh", "sigmoid", False)
    with pytest.raises(TypeError):
        tp.layers.GRU(4, "tanh", "sigmoid", False)
    assert tp.layers.LSTM(4, unit_forget_bias=False).unit_forget_bias is False
