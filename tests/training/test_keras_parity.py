"""fit's rules against Keras 3's numbers on the same weights and data (saved by
``scripts/keras_reference_parity.py``; CI has no Keras)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import tapefit as tp

REFERENCE = dict(np.load(Path(__file__).parent / "data" / "keras_parity.npz"))

CASES = {
    "plain": {},
    "split_weighted": {"validation_split": 0.25, "sample_weight": "w"},
    "validation_weighted": {"validation_data": ("xv", "yv", "wv")},
    "class_weight_partial": {"class_weight": {0: 2.0, 2: 0.5}},
}


def value(v):
    if isinstance(v, tuple):
        return tuple(REFERENCE[k] for k in v)
    return REFERENCE[v] if isinstance(v, str) else v


@pytest.mark.parametrize("case", sorted(CASES))
def test_fit_history_and_batch_logs_equal_keras(case):
    model = tp.layers.Sequential([tp.layers.Dense(4, activation="relu"), tp.layers.Dense(3)])
    model(REFERENCE["x"][:1])
    model.set_weights([REFERENCE[f"w/{i}"] for i in range(4)])
    seen = []

    class BatchLoss:
        @tp.hookimpl
        def on_train_batch_end(self, logs):
            seen.append(logs["loss"])

    trainer = tp.Trainer(
        model,
        tp.optimizers.SGD(0.1),
        tp.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
        plugins=[BatchLoss()],
    )
    arguments = {k: value(v) for k, v in CASES[case].items()}
    history = trainer.fit(
        REFERENCE["x"], REFERENCE["y"], epochs=3, batch_size=8, shuffle=False, verbose=0, **arguments
    )
    prefix = f"fit/{case}/history/"
    keras_keys = sorted(k[len(prefix) :] for k in REFERENCE if k.startswith(prefix))
    assert sorted(history.history) == keras_keys
    for key in keras_keys:
        np.testing.assert_allclose(
            history.history[key], REFERENCE[prefix + key], rtol=1e-5, atol=1e-6, err_msg=key
        )
    np.testing.assert_allclose(seen, REFERENCE[f"fit/{case}/batch_loss"], rtol=1e-5, atol=1e-6)


# Keras 3.15's sparsemax (every backend) does not project onto the simplex: for [0.1, 1.2, 0.5]
# it gives [0, 0.25, 0], which does not sum to 1; tapefit's is tested against the definition.
KERAS_WRONG = {"sparsemax"}


@pytest.mark.parametrize(
    "name",
    sorted({k.removeprefix("activation/") for k in REFERENCE if k.startswith("activation/")} - KERAS_WRONG),
)
def test_activations_equal_keras(name):
    x = REFERENCE["activation_x"]
    fn = getattr(tp.layers.activations, name)
    out = fn(tp.constant(x), 0.3, -1.0) if name == "threshold" else fn(tp.constant(x))
    np.testing.assert_allclose(np.asarray(out), REFERENCE[f"activation/{name}"], rtol=1e-5, atol=1e-6)


def test_sparsemax_is_the_projection_onto_the_simplex():
    x = REFERENCE["activation_x"].astype(np.float64)
    p = np.asarray(tp.layers.activations.sparsemax(tp.constant(x)))
    np.testing.assert_allclose(p.sum(axis=-1), 1.0, rtol=1e-12)
    assert (p >= 0).all()
    # the projection: p = max(x - tau, 0) with one tau per row, and no point of the simplex
    # closer to x (checked against random points of it)
    rng = np.random.default_rng(0)
    for row, q in zip(x, p):
        others = rng.dirichlet(np.full(row.size, 0.3), size=2000)
        assert np.sum((q - row) ** 2) <= np.min(np.sum((others - row) ** 2, axis=1)) + 1e-12
    p3 = np.asarray(tp.layers.activations.sparsemax(tp.constant([[0.1, 1.2, 0.5]])))
    np.testing.assert_allclose(p3, [[0.0, 0.85, 0.15]], atol=1e-7)


@pytest.mark.parametrize(
    "name",
    [
        "celu",
        "glu",
        "hard_shrink",
        "hard_sigmoid",
        "hard_silu",
        "hard_tanh",
        "log_sigmoid",
        "mish",
        "soft_shrink",
        "sparse_plus",
        "sparse_sigmoid",
        "sparsemax",
        "squareplus",
        "tanh_shrink",
        "threshold",
    ],
)
def test_new_activations_gradients_match_finite_differences(name):
    fn = getattr(tp.layers.activations, name)
    # points away from the kinks (|x| = 0.5, 1, 3, 0.3), where finite differences straddle them
    x = np.array([[-3.7, -1.6, -0.8, -0.1, 0.2, 0.7, 1.4, 4.2]], np.float64)
    call = (lambda t: fn(t, 0.3, -1.0)) if name == "threshold" else fn
    tp.testing.check_gradients(call, [x])


def test_a_stream_of_x_y_sample_weight_batches_trains_as_weighted_arrays():
    # Keras reads (x, y, sample_weight) batches from a generator; tapefit took them for (x, y)
    x, y, w = REFERENCE["x"], REFERENCE["y"], REFERENCE["w"]

    def trained(data, **fit):
        model = tp.layers.Sequential([tp.layers.Dense(4, activation="relu"), tp.layers.Dense(3)])
        model(x[:1])
        model.set_weights([REFERENCE[f"w/{i}"] for i in range(4)])
        trainer = tp.Trainer(
            model, tp.optimizers.SGD(0.1), tp.losses.SparseCategoricalCrossentropy(from_logits=True)
        )
        history = trainer.fit(*data, epochs=2, verbose=0, **fit)
        return history.history["loss"], trainer.evaluate(
            [(x[i : i + 8], y[i : i + 8], w[i : i + 8]) for i in range(0, 32, 8)]
        )

    batches = [(x[i : i + 8], y[i : i + 8], w[i : i + 8]) for i in range(0, 32, 8)]
    streamed = trained((batches,))
    arrays = trained((x, y), sample_weight=w, batch_size=8, shuffle=False)
    np.testing.assert_allclose(streamed[0], arrays[0], rtol=1e-6)
    assert streamed[1]["loss"] == pytest.approx(arrays[1]["loss"], rel=1e-6)
    dicts = [{"x": a, "y": b, "sample_weight": c} for a, b, c in batches]
    np.testing.assert_allclose(trained((dicts,))[0], arrays[0], rtol=1e-6)
    with pytest.raises(ValueError, match=r"expected an \(x, y\) or \(x, y, sample_weight\) tuple"):
        trained((iter([(x[:8], y[:8], w[:8], w[:8])]),))
