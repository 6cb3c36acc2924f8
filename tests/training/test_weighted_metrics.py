"""compile's weighted_metrics and per-output metrics, with Keras 3's update and naming rules."""

from __future__ import annotations

import numpy as np
import pytest

import tapefit as tp


def _data(n: int = 40):
    rng = np.random.RandomState(0)
    x = rng.randn(n, 3).astype(np.float32)
    y = (x[:, 0] + 0.3 * x[:, 1] > 0).astype(np.int64)
    w = np.linspace(0.1, 2.0, n).astype(np.float32)
    return x, y, w


def _classifier() -> tp.layers.Sequential:
    tp.random.set_seed(3)
    return tp.layers.Sequential([tp.Input((3,)), tp.layers.Dense(2, activation="softmax")])


def test_weighted_metrics_take_the_sample_weights_and_metrics_do_not():
    x, y, w = _data()
    model = _classifier()
    model.compile(
        "sgd", "sparse_categorical_crossentropy", metrics=["accuracy"], weighted_metrics=["accuracy"]
    )
    correct = (np.argmax(model.predict(x, verbose=0), axis=-1) == y).astype(np.float64)
    logs = model.evaluate(x, y, batch_size=16, sample_weight=w, verbose=0)
    assert list(logs) == ["loss", "accuracy", "weighted_accuracy"]  # Keras's name for the clash
    assert logs["accuracy"] == pytest.approx(correct.mean(), rel=1e-6)
    assert logs["weighted_accuracy"] == pytest.approx((correct * w).sum() / w.sum(), rel=1e-6)
    assert logs["weighted_accuracy"] != pytest.approx(logs["accuracy"])


def test_fit_weighs_them_by_class_weight_too():
    x, y, _ = _data()
    model = _classifier()
    model.compile("sgd", "sparse_categorical_crossentropy", weighted_metrics=["accuracy"])
    correct = (np.argmax(model.predict(x, verbose=0), axis=-1) == y).astype(np.float64)
    table = {0: 0.25, 1: 3.0}
    weights = np.array([table[int(c)] for c in y])
    model.optimizer.learning_rate = 0.0  # the metric sees the starting weights' predictions
    history = model.fit(x, y, epochs=1, batch_size=40, class_weight=table, shuffle=False, verbose=0)
    assert list(history.history) == ["loss", "accuracy"]  # no clash: its own name
    expected = (correct * weights).sum() / weights.sum()
    assert history.history["accuracy"][0] == pytest.approx(expected, rel=1e-6)


def test_the_trainer_takes_them_and_a_custom_step_updates_them_through_compute_metrics():
    x, y, w = _data()
    model = _classifier()
    trainer = tp.Trainer(model, "sgd", "sparse_categorical_crossentropy", weighted_metrics=["accuracy"])
    trainer.evaluate(x, y, sample_weight=w, verbose=0)
    model.reset_metrics()
    y_pred = model(x)
    results = model.compute_metrics(x, y, y_pred, sample_weight=w)
    correct = (np.argmax(y_pred.numpy(), axis=-1) == y).astype(np.float64)
    assert float(results["accuracy"]) == pytest.approx((correct * w).sum() / w.sum(), rel=1e-6)


def _two_outputs() -> tp.Model:
    tp.random.set_seed(5)
    inputs = tp.Input((3,), name="features")
    value = tp.layers.Dense(1, name="value")(inputs)
    label = tp.layers.Dense(2, activation="softmax", name="label")(inputs)
    return tp.Model(inputs, [value, label])


@pytest.mark.parametrize(
    "metrics, weighted",
    [
        ([["mae"], ["accuracy"]], [None, ["accuracy", "sparse_categorical_crossentropy"]]),
        ({"value": "mae", "label": ["accuracy"]}, {"label": ["accuracy", "sparse_categorical_crossentropy"]}),
    ],
)
def test_per_output_metrics_as_a_list_or_a_dict_log_by_output_name(metrics, weighted):
    x, y, w = _data()
    target = x[:, :1] * 2.0
    model = _two_outputs()
    model.compile(
        "sgd", ["mse", "sparse_categorical_crossentropy"], metrics=metrics, weighted_metrics=weighted
    )
    value, label = model.predict(x, verbose=0)
    logs = model.evaluate(x, [target, y], batch_size=40, sample_weight=w, verbose=0)
    assert sorted(logs) == sorted(
        [
            "loss",
            "value_loss",
            "label_loss",
            "value_mae",
            "label_accuracy",
            "label_weighted_accuracy",
            "label_sparse_categorical_crossentropy",
        ]
    )
    correct = (np.argmax(label, axis=-1) == y).astype(np.float64)
    assert logs["value_mae"] == pytest.approx(np.abs(value - target).mean(), rel=1e-5)
    assert logs["label_accuracy"] == pytest.approx(correct.mean(), rel=1e-6)
    assert logs["label_weighted_accuracy"] == pytest.approx((correct * w).sum() / w.sum(), rel=1e-6)
    per_sample = -np.log(label[np.arange(len(y)), y])
    assert logs["label_sparse_categorical_crossentropy"] == pytest.approx(
        (per_sample * w).sum() / w.sum(), rel=1e-5
    )


def test_a_repeated_unweighted_name_gets_a_counter_as_in_keras():
    x, y, _ = _data()
    model = _classifier()
    model.compile(
        "sgd",
        "sparse_categorical_crossentropy",
        metrics=["accuracy"],
        weighted_metrics=["accuracy", tp.metrics.SparseCategoricalAccuracy(name="accuracy")],
    )
    logs = model.evaluate(x, y, verbose=0)
    assert list(logs) == ["loss", "accuracy", "weighted_accuracy", "weighted_accuracy_1"]


def test_bad_weighted_metrics_are_named():
    model = _classifier()
    with pytest.raises(TypeError, match="weighted_metrics must be a list, a tuple or a dict, got str"):
        model.compile("sgd", "sparse_categorical_crossentropy", weighted_metrics="accuracy")
    two = _two_outputs()
    with pytest.raises(ValueError, match=r"weighted_metrics names \['nope'\], which are not outputs"):
        two.compile("sgd", "mse", weighted_metrics={"nope": ["mae"]})
    with pytest.raises(ValueError, match="metrics has 3 entries, the model has 2 outputs"):
        two.compile("sgd", "mse", metrics=[["mae"], ["mae"], ["mae"]])


def test_a_model_file_keeps_the_weighted_metrics(tmp_path):
    x, y, w = _data()
    model = _classifier()
    model.compile(
        "sgd", "sparse_categorical_crossentropy", metrics=["accuracy"], weighted_metrics=["accuracy"]
    )
    path = tmp_path / "model.tapefit"
    model._compiled_trainer("save").save(path)
    trainer = tp.Trainer.load(path)
    before = model.evaluate(x, y, sample_weight=w, verbose=0)
    after = trainer.evaluate(x, y, sample_weight=w, verbose=0)
    assert list(after) == ["loss", "accuracy", "weighted_accuracy"]
    for key in before:
        assert after[key] == pytest.approx(before[key], rel=1e-6)
