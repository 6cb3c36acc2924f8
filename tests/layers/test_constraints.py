"""Constraints, their layer arguments, the optimizers' projection after an update, and the
activity penalties (Keras's numbers are in test_keras_layers_parity.py)."""

from __future__ import annotations

import numpy as np
import pytest

import tapefit as tp
from tapefit.layers import constraints, regularizers

W = np.array([[1.0, -2.0, 0.3], [3.0, 0.5, -0.1]], np.float64)


@pytest.mark.parametrize(
    "constraint",
    [
        constraints.MaxNorm(2.0),
        constraints.MaxNorm(1.0, axis=1),
        constraints.UnitNorm(),
        constraints.MinMaxNorm(0.5, 1.5, rate=0.6),
        constraints.NonNeg(),
    ],
    ids=repr,
)
def test_constraint_gradients_match_finite_differences(constraint):
    tp.testing.check_gradients(constraint, W + 0.05)


@pytest.mark.parametrize("mode", ["rows", "columns"])
def test_orthogonal_regularizer_gradients_match_finite_differences(mode):
    regularizer = regularizers.OrthogonalRegularizer(0.3, mode)
    # no product of two rows (or columns) at 0, where |.| has no derivative
    tp.testing.check_gradients(regularizer, np.random.default_rng(5).normal(size=(3, 4)))


def test_activity_penalty_gradients_match_finite_differences():
    layer = tp.layers.Dense(
        2, activity_regularizer=regularizers.L1L2(0.1, 0.2), kernel_initializer="ones", dtype="float64"
    )
    x = np.array([[0.5, -1.0, 2.0], [1.5, 0.25, -0.75]])
    layer(x[:1])

    def penalty(x):
        layer(x)
        return tp.add_n(layer.losses)

    tp.testing.check_gradients(penalty, x)


def test_names_and_classes_resolve_with_keras_defaults():
    assert constraints.registry.names() == ["constraint", "max_norm", "min_max_norm", "non_neg", "unit_norm"]
    assert constraints.get("max_norm").get_config() == {"max_value": 2, "axis": 0}
    assert constraints.get("MinMaxNorm").get_config() == {
        "min_value": 0.0,
        "max_value": 1.0,
        "rate": 1.0,
        "axis": 0,
    }
    assert constraints.get(None) is None
    mine = constraints.UnitNorm(axis=1)
    assert constraints.get(mine) is mine
    assert tp.constraints is constraints and tp.layers.constraints is constraints
    np.testing.assert_array_equal(constraints.Constraint()(W).numpy(), W)


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: constraints.get("max_nrom"), "unknown constraint 'max_nrom'"),
        (lambda: constraints.MaxNorm(-1), "MaxNorm: max_value must be a number >= 0"),
        (lambda: constraints.MaxNorm(axis="rows"), "MaxNorm: axis must be an integer"),
        (lambda: constraints.UnitNorm(axis=[]), "UnitNorm: axis must be an integer"),
        (lambda: constraints.MinMaxNorm(2.0, 1.0), "MinMaxNorm: max_value must be >= min_value"),
        (lambda: constraints.MinMaxNorm(rate=-0.5), "MinMaxNorm: rate must be a number >= 0"),
        (lambda: regularizers.OrthogonalRegularizer(mode="diagonal"), "mode must be 'rows' or 'columns'"),
        (lambda: regularizers.OrthogonalRegularizer(factor=-1.0), "factor must be a finite number >= 0"),
        (lambda: regularizers.OrthogonalRegularizer()(np.ones(3)), "needs a matrix"),
        (lambda: tp.initializers.Identity()((2, 2, 2)), "Identity needs a 2-D shape"),
        (lambda: tp.layers.Dense(2, kernel_constraint="big"), "unknown constraint 'big'"),
    ],
)
def test_bad_arguments_are_one_line_errors_naming_them(make, message):
    with pytest.raises(ValueError, match=message) as caught:
        make()
    assert "\n" not in str(caught.value)


def test_a_variable_constraint_must_be_callable():
    with pytest.raises(TypeError, match="constraint must be None or a callable"):
        tp.Variable([1.0], constraint="non_neg")


@pytest.mark.parametrize("optimizer", ["sgd", "adam", "rmsprop", "adagrad", "adamw"])
def test_every_optimizer_projects_after_the_update(optimizer):
    layer = tp.layers.Dense(3, kernel_constraint="non_neg", bias_constraint=constraints.MaxNorm(0.1))
    x = np.random.default_rng(0).normal(size=(6, 4)).astype(np.float32)
    layer(x)
    opt = tp.optimizers.get(optimizer)
    opt.learning_rate = 0.5
    for _ in range(3):
        with tp.GradientTape() as tape:
            loss = tp.reduce_sum(layer(x))
        opt.apply_gradients(zip(tape.gradient(loss, layer.trainable_variables), layer.trainable_variables))
        assert layer.kernel.numpy().min() >= 0.0
        assert np.linalg.norm(layer.bias.numpy()) <= 0.1 + 1e-6


def test_a_variable_without_a_gradient_is_not_projected():
    # Keras projects the variables the step updated only.
    free = tp.Variable([-1.0, 2.0], constraint=constraints.NonNeg())
    used = tp.Variable([-1.0, 2.0], constraint=constraints.NonNeg())
    tp.optimizers.SGD(0.1).apply_gradients([(np.zeros(2, np.float32), used), (None, free)])
    np.testing.assert_array_equal(free.numpy(), [-1.0, 2.0])
    np.testing.assert_array_equal(used.numpy(), [0.0, 2.0])


@pytest.mark.parametrize(
    ("make", "weights"),
    [
        (
            lambda: tp.layers.Conv1D(2, 2, kernel_constraint="non_neg", bias_constraint="non_neg"),
            ["kernel", "bias"],
        ),
        (
            lambda: tp.layers.Conv2D(2, 2, kernel_constraint="non_neg", bias_constraint="non_neg"),
            ["kernel", "bias"],
        ),
        (lambda: tp.layers.Embedding(5, 2, embeddings_constraint="non_neg"), ["embeddings"]),
        (
            lambda: tp.layers.GRU(
                2, kernel_constraint="non_neg", recurrent_constraint="non_neg", bias_constraint="non_neg"
            ),
            ["kernel", "recurrent_kernel", "bias"],
        ),
        (
            lambda: tp.layers.LayerNormalization(beta_constraint="non_neg", gamma_constraint="non_neg"),
            ["beta", "gamma"],
        ),
        (
            lambda: tp.layers.BatchNormalization(beta_constraint="non_neg", gamma_constraint="non_neg"),
            ["beta", "gamma"],
        ),
        (
            lambda: tp.layers.MultiHeadAttention(
                2, 2, kernel_constraint="non_neg", bias_constraint="non_neg"
            ),
            ["query_kernel", "key_bias", "output_kernel", "output_bias"],
        ),
    ],
)
def test_layers_give_their_constraints_to_their_weights(make, weights):
    layer = make()
    again = type(layer).from_config(layer.get_config())
    for made in (layer, again):
        if isinstance(made, tp.layers.Conv2D):
            made(np.ones((1, 3, 3, 2), np.float32))
        elif isinstance(made, tp.layers.MultiHeadAttention):
            made(np.ones((1, 3, 2), np.float32), np.ones((1, 3, 2), np.float32))
        elif not isinstance(made, tp.layers.Embedding):  # made its weights when constructed
            made(np.ones((1, 3, 2), np.float32))
        for name in weights:
            assert isinstance(getattr(made, name).constraint, constraints.NonNeg), name


def test_constraint_objects_survive_a_model_file(tmp_path):
    model = tp.layers.Sequential(
        [tp.layers.Dense(3, kernel_constraint=constraints.MaxNorm(1.5, axis=[0]), activity_regularizer="l2")]
    )
    model(np.ones((2, 4), np.float32))
    path = tmp_path / "model.tapefit"
    tp.models.save_model(model, path)
    loaded = tp.models.load_model(path)
    dense = loaded.layers[0]
    assert dense.kernel.constraint.get_config() == {"max_value": 1.5, "axis": [0]}
    assert isinstance(dense.activity_regularizer, regularizers.L2)


def test_activity_penalties_are_those_of_the_last_outermost_call():
    inner = tp.layers.Dense(2, activity_regularizer="l1", kernel_initializer="ones")
    model = tp.layers.Sequential([inner, tp.layers.Dense(1)])
    x = np.ones((4, 3), np.float32)
    model(x)
    model(x * 2)
    (penalty,) = model.losses
    # l1 of the outputs (each 6 for the 4 rows, 2 units) / batch 4
    np.testing.assert_allclose(float(penalty), 0.01 * 6 * 8 / 4, rtol=1e-6)
    inner(x[:1])  # a call of its own starts afresh too
    np.testing.assert_allclose(float(inner.losses[0]), 0.01 * 3 * 2, rtol=1e-6)


def test_an_empty_batch_has_a_zero_activity_penalty():
    layer = tp.layers.Dense(2, activity_regularizer="l2")
    layer(np.ones((1, 3), np.float32))
    layer(np.ones((0, 3), np.float32))
    assert float(layer.losses[0]) == 0.0


def test_recurrent_activity_penalizes_every_output_and_bidirectional_passes_it_on():
    lstm = tp.layers.LSTM(3, return_state=True, activity_regularizer="l2", kernel_regularizer="l1")
    both = tp.layers.Bidirectional(lstm)
    x = np.random.default_rng(1).normal(size=(2, 4, 3)).astype(np.float32)
    both(x)
    # per direction: output, h, c (each penalized) and the kernel's penalty
    assert len(both.losses) == 8
    assert both.backward_layer.activity_regularizer is not None
    forward = lstm(x)
    expected = sum(0.01 * float(np.square(t.numpy()).sum()) / 2 for t in forward)
    np.testing.assert_allclose(sum(float(p) for p in lstm.losses[:3]), expected, rtol=1e-5)


def test_a_compiled_fit_adds_the_activity_penalty_as_eager_does():
    def fit(compiled):
        tp.random.set_seed(3)
        model = tp.layers.Sequential([tp.layers.Dense(3, activity_regularizer="l2"), tp.layers.Dense(1)])
        trainer = tp.Trainer(model, optimizer=tp.optimizers.SGD(0.1), loss="mse", compile=compiled)
        x = np.random.default_rng(0).normal(size=(16, 4)).astype(np.float32)
        y = np.random.default_rng(1).normal(size=(16, 1)).astype(np.float32)
        return trainer.fit(x, y, batch_size=8, epochs=2, shuffle=False, verbose=0).history["loss"]

    assert fit(True) == fit(False)
