"""Constraints, regularizer arguments, OrthogonalRegularizer and Identity against Keras 3's
numbers on the same weights and data (saved by ``scripts/keras_reference_layers.py``; CI has
no Keras)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

import tapefit as tp
from tapefit.layers import constraints, regularizers

REFERENCE = dict(np.load(Path(__file__).parent / "data" / "keras_layers_parity.npz"))
_spec = importlib.util.spec_from_file_location(
    "keras_reference_layers", Path(__file__).parents[2] / "scripts" / "keras_reference_layers.py"
)
assert _spec is not None and _spec.loader is not None
script = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(script)


def test_the_saved_file_holds_every_case_and_stays_small():
    assert script.PATH.stat().st_size < 40_000
    assert {f"constraint/{c}" for c in script.CONSTRAINTS} <= set(REFERENCE)
    assert {f"orthogonal/{c}" for c in script.ORTHOGONAL} <= set(REFERENCE)


@pytest.mark.parametrize("case", sorted(script.CONSTRAINTS))
def test_each_constraint_equals_keras(case):
    name, kwargs, key = script.CONSTRAINTS[case]
    constraint = getattr(constraints, name)(**kwargs)
    np.testing.assert_allclose(constraint(REFERENCE[key]).numpy(), REFERENCE[f"constraint/{case}"], atol=1e-5)
    # the registry name with Keras's defaults, and the config round trip
    again = type(constraint).from_config(constraint.get_config())
    np.testing.assert_allclose(again(REFERENCE[key]).numpy(), REFERENCE[f"constraint/{case}"], atol=1e-6)


@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize("how", ["trainer", "tape"])
def test_dense_constraints_after_three_sgd_steps_equal_keras(how, compiled):
    layer = tp.layers.Dense(3, kernel_constraint="max_norm", bias_constraint="non_neg")
    model = tp.layers.Sequential([layer])
    model(REFERENCE["x"][:1])
    layer.set_weights([REFERENCE["sgd/w0"], REFERENCE["sgd/b0"]])
    x, y = REFERENCE["x"], REFERENCE["y"]
    if how == "trainer":
        trainer = tp.Trainer(model, optimizer=tp.optimizers.SGD(0.5), loss="mse", compile=compiled)
        trainer.fit(x, y, batch_size=8, epochs=3, shuffle=False, verbose=0)
    else:
        optimizer = tp.optimizers.SGD(0.5)

        def step(x, y):
            with tp.GradientTape() as tape:
                loss = tp.reduce_mean(tp.square(model(x) - y))
            optimizer.apply_gradients(
                zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables)
            )
            return loss

        run = tp.function(step) if compiled else step
        for _ in range(3):
            run(tp.constant(x), tp.constant(y))
    np.testing.assert_allclose(layer.kernel.numpy(), REFERENCE["sgd/kernel"], atol=1e-5)
    np.testing.assert_allclose(layer.bias.numpy(), REFERENCE["sgd/bias"], atol=1e-5)
    assert layer.bias.numpy().min() >= 0.0


def _regularizer(spec):
    name, *factors = spec
    return getattr(regularizers, name)(*factors)


def _loss_and_grads(model, x, y):
    with tp.GradientTape() as tape:
        out = model(x)
        penalty = tp.add_n(model.losses)
        loss = tp.reduce_mean(tp.square(out - y)) + penalty
    return loss, penalty, tape.gradient(loss, model.trainable_variables)


def test_dense_regularizers_loss_and_gradients_equal_keras():
    regs = {k: _regularizer(v) for k, v in script.DENSE_REG.items()}
    layer = tp.layers.Dense(
        3,
        kernel_regularizer=regs["kernel"],
        bias_regularizer=regs["bias"],
        activity_regularizer=regs["activity"],
    )
    layer(REFERENCE["x"][:1])
    layer.set_weights([REFERENCE["dense_reg/w/0"], REFERENCE["dense_reg/w/1"]])
    loss, penalty, grads = _loss_and_grads(layer, REFERENCE["x"], REFERENCE["y"])
    np.testing.assert_allclose(float(loss), REFERENCE["dense_reg/loss"], atol=1e-5)
    np.testing.assert_allclose(float(penalty), REFERENCE["dense_reg/penalty"], atol=1e-5)
    for i, g in enumerate(grads):
        np.testing.assert_allclose(g.numpy(), REFERENCE[f"dense_reg/grad/{i}"], atol=1e-5)


def test_lstm_regularizers_loss_and_gradients_equal_keras():
    regs = {k: _regularizer(v) for k, v in script.LSTM_REG.items()}
    layer = tp.layers.LSTM(
        3,
        kernel_regularizer=regs["kernel"],
        recurrent_regularizer=regs["recurrent"],
        bias_regularizer=regs["bias"],
        activity_regularizer=regs["activity"],
    )
    model = tp.layers.Sequential([layer])
    model(REFERENCE["seq"][:1])
    layer.set_weights([REFERENCE[f"lstm_reg/w/{i}"] for i in range(3)])
    loss, penalty, grads = _loss_and_grads(model, REFERENCE["seq"], REFERENCE["seq_y"])
    np.testing.assert_allclose(float(loss), REFERENCE["lstm_reg/loss"], atol=1e-5)
    np.testing.assert_allclose(float(penalty), REFERENCE["lstm_reg/penalty"], atol=1e-5)
    for i, g in enumerate(grads):
        np.testing.assert_allclose(g.numpy(), REFERENCE[f"lstm_reg/grad/{i}"], atol=1e-5)


@pytest.mark.parametrize(
    ("case", "make", "x"),
    [
        (
            "gru",
            lambda: tp.layers.GRU(
                3, return_sequences=True, return_state=True, activity_regularizer=regularizers.L2(0.05)
            ),
            "seq",
        ),
        ("conv2d", lambda: tp.layers.Conv2D(2, 2, activity_regularizer=regularizers.L1(0.02)), "img"),
    ],
)
def test_activity_penalties_of_every_output_equal_keras(case, make, x):
    layer = make()
    layer(REFERENCE[x][:1])
    layer.set_weights([REFERENCE[k] for k in sorted(REFERENCE) if k.startswith(f"activity/{case}/w/")])
    layer(REFERENCE[x])
    np.testing.assert_allclose(float(tp.add_n(layer.losses)), REFERENCE[f"activity/{case}"], atol=1e-5)


@pytest.mark.parametrize("case", sorted(script.ORTHOGONAL))
def test_orthogonal_regularizer_equals_keras(case):
    factor, mode, key = script.ORTHOGONAL[case]
    regularizer = regularizers.OrthogonalRegularizer(factor=factor, mode=mode)
    np.testing.assert_allclose(float(regularizer(REFERENCE[key])), REFERENCE[f"orthogonal/{case}"], atol=1e-6)
    if case == "rows":  # Keras's defaults
        by_name = regularizers.get("orthogonal_regularizer")
        np.testing.assert_allclose(float(by_name(REFERENCE[key])), REFERENCE[f"orthogonal/{case}"], atol=1e-6)


@pytest.mark.parametrize("shape", [(3, 4), (4, 2), (3, 3)])
def test_identity_initializer_equals_keras(shape):
    init = tp.initializers.Identity(gain=2.0)
    np.testing.assert_array_equal(init(shape).numpy(), REFERENCE[f"identity/{shape[0]}x{shape[1]}"])
    np.testing.assert_array_equal(
        tp.initializers.get("identity")(shape).numpy(), np.eye(*shape, dtype=np.float32)
    )


@pytest.mark.parametrize(
    "layer",
    [
        "Flatten",
        "GlobalAveragePooling1D",
        "GlobalMaxPooling1D",
        "GlobalAveragePooling2D",
        "GlobalMaxPooling2D",
    ],
)
def test_a_keras_positional_data_format_is_refused_not_taken_for_another_argument(layer):
    # Keras's first argument of these is data_format; here it set trainable or keepdims silently.
    with pytest.raises(TypeError, match="positional argument"):
        getattr(tp.layers, layer)("channels_first")


@pytest.mark.parametrize(
    ("make", "keras_meaning"),
    [
        # the argument at that place in Keras's signature, which here took another's place
        (
            lambda: tp.layers.SimpleRNN(4, "tanh", True, "glorot_uniform", "orthogonal", "zeros", "l2"),
            "kernel_regularizer",
        ),
        (lambda: tp.layers.MaxPooling2D(2, None, "valid", "channels_first"), "data_format"),
        (lambda: tp.layers.MultiHeadAttention(2, 4, None, 0.0, True, None, (1,)), "attention_axes"),
        (lambda: tp.layers.Embedding(10, 3, "uniform", None, "max_norm"), "embeddings_constraint"),
        (
            lambda: tp.layers.LayerNormalization(-1, 1e-3, True, True, "zeros", "ones", "l2"),
            "beta_regularizer",
        ),
    ],
)
def test_a_keras_positional_argument_is_refused_where_the_places_differ(make, keras_meaning):
    # Keras's argument at this place is keras_meaning; here it set another argument silently
    with pytest.raises(TypeError, match="positional argument"):
        make()
