"""The LSTM and GRU layers' whole-sequence ops against their step-by-step loops: the same
outputs, states and gradients in every configuration the ops run, and the loop where they do
not apply."""

import numpy as np
import pytest

import tapefit as tp

RNG = np.random.default_rng(5)
X = RNG.standard_normal((4, 7, 3))


def _op_types(layer, *args, **kwargs):
    with tp.GradientTape() as tape:
        tape.watch(args[0])
        layer(*args, **kwargs)
    return {op.type for op in tape._entries}


OPS = {tp.layers.LSTM: "LSTMSequence", tp.layers.GRU: "GRUSequence"}


def run(layer, x, fused, monkeypatch, **kwargs):
    """The layer's results and the gradients of a loss of all of them, fused or step by step."""
    with monkeypatch.context() as patch:
        if not fused:
            patch.setattr(type(layer), "_sequence", lambda self, *args: None)
        initial = kwargs.get("initial_state")
        sources = [x, *layer.trainable_variables, *(initial or [])]
        with tp.GradientTape() as tape:
            tape.watch([x, *(initial or [])])
            results = layer(x, **kwargs)
            results = results if isinstance(results, list) else [results]
            loss = tp.add_n([tp.reduce_sum(tp.square(r) * (k + 1.0)) for k, r in enumerate(results)])
        grads = tape.gradient(loss, sources)
    return [r.numpy() for r in results] + [g.numpy() for g in grads]


def build(dtype="float64", kind=tp.layers.LSTM, **arguments):
    tp.random.set_seed(3)
    layer = kind(5, **arguments)
    layer.dtype = np.dtype(dtype)  # the weights' dtype, read when they are built
    layer(tp.constant(X.astype(dtype)))
    assert layer.kernel.dtype == dtype
    return layer


CONFIGURATIONS = [
    {},
    {"return_sequences": True},
    {"go_backwards": True},
    {"return_sequences": True, "go_backwards": True, "return_state": True},
    {"return_state": True},
    {"use_bias": False, "return_sequences": True},
    {"unit_forget_bias": False},
]
KINDS = [pytest.param(tp.layers.LSTM, id="LSTM"), pytest.param(tp.layers.GRU, id="GRU")]


def _for(kind, arguments):
    return {k: v for k, v in arguments.items() if kind is tp.layers.LSTM or k != "unit_forget_bias"}


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("arguments", CONFIGURATIONS, ids=lambda a: "-".join(a) or "default")
def test_fused_equals_step_by_step(kind, arguments, monkeypatch):
    layer = build(kind=kind, **_for(kind, arguments))
    x = tp.constant(X)
    assert OPS[kind] in _op_types(layer, x)
    for ours, theirs in zip(run(layer, x, True, monkeypatch), run(layer, x, False, monkeypatch)):
        np.testing.assert_allclose(ours, theirs, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("kind", KINDS)
def test_fused_equals_step_by_step_from_an_initial_state(kind, monkeypatch):
    layer = build(kind=kind, return_sequences=True, return_state=True)
    x = tp.constant(X)
    state = [tp.constant(RNG.standard_normal((4, 5))) for _ in range(2 if kind is tp.layers.LSTM else 1)]
    fused = run(layer, x, True, monkeypatch, initial_state=state)
    looped = run(layer, x, False, monkeypatch, initial_state=state)
    for ours, theirs in zip(fused, looped):
        np.testing.assert_allclose(ours, theirs, rtol=1e-10, atol=1e-12)


MASK = np.array(
    [[1, 1, 1, 1, 1, 1, 1], [0, 0, 1, 1, 0, 1, 1], [1, 1, 1, 0, 0, 0, 0], [0, 1, 0, 1, 0, 1, 0]], bool
)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("zero_output_for_mask", [False, True])
@pytest.mark.parametrize("arguments", CONFIGURATIONS[1:4], ids=lambda a: "-".join(a))
def test_masked_fused_equals_step_by_step(kind, arguments, zero_output_for_mask, monkeypatch):
    layer = build(kind=kind, **arguments, zero_output_for_mask=zero_output_for_mask)
    x = tp.constant(X)
    mask = tp.constant(MASK)
    assert OPS[kind] in _op_types(layer, x, mask=mask)
    state = [tp.constant(RNG.standard_normal((4, 5))) for _ in range(2 if kind is tp.layers.LSTM else 1)]
    fused = run(layer, x, True, monkeypatch, mask=mask, initial_state=state)
    looped = run(layer, x, False, monkeypatch, mask=mask, initial_state=state)
    for ours, theirs in zip(fused, looped):
        np.testing.assert_allclose(ours, theirs, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("kind", KINDS)
def test_float32_sums_agree_within_float_tolerance(kind, monkeypatch):
    layer = build("float32", kind, return_sequences=True)
    x = tp.constant(X.astype(np.float32))
    fused, looped = run(layer, x, True, monkeypatch), run(layer, x, False, monkeypatch)
    for ours, theirs in zip(fused, looped):
        assert ours.dtype == np.float32
        np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(fused[1].sum(), looped[1].sum(), rtol=1e-6)


def test_input_dropout_in_training_runs_fused(monkeypatch):
    layer = build(return_sequences=True, dropout=0.3)
    x = tp.constant(X)
    assert "LSTMSequence" in _op_types(layer, x, training=True)
    results = []
    for fused in (True, False):
        tp.random.set_seed(11)
        results.append(run(layer, x, fused, monkeypatch, training=True))
    for ours, theirs in zip(*results):
        np.testing.assert_allclose(ours, theirs, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize(
    "arguments, call",
    [
        ({"recurrent_dropout": 0.3}, {"training": True}),
        ({"activation": "relu"}, {}),
        ({"recurrent_activation": "hard_sigmoid"}, {}),
    ],
)
@pytest.mark.parametrize("kind", KINDS)
def test_configurations_without_the_op_run_step_by_step(kind, arguments, call):
    layer = build(kind=kind, **arguments)
    types = _op_types(layer, tp.constant(X), **call)
    assert OPS[kind] not in types


def test_a_gru_without_reset_after_runs_step_by_step():
    layer = build(kind=tp.layers.GRU, reset_after=False)
    assert "GRUSequence" not in _op_types(layer, tp.constant(X))


def test_a_layer_without_steps_returns_its_initial_state():
    layer = build(return_state=True)
    out, h, c = layer(tp.constant(np.zeros((4, 0, 3))))
    assert out.shape == h.shape == c.shape == (4, 5)
    assert not out.numpy().any()
