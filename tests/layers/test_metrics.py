"""Streaming metrics: Keras's documented numbers, streaming, reset, names, and "accuracy" resolution."""

import numpy as np
import pytest

import tapefit as tp
from tapefit import metrics


def _value(metric):
    result = metric.result()
    assert isinstance(result, tp.Tensor) and result.dtype == tp.float32 and result.shape == ()
    return float(result)


def test_mean_streams_weights_and_resets():
    m = metrics.Mean()
    assert _value(m) == 0.0
    m.update_state([1, 3, 5, 7])
    assert _value(m) == 4.0
    m.update_state(tp.constant(10.0))
    assert _value(m) == pytest.approx(26 / 5)
    m.reset_state()
    m.update_state([1, 3, 5, 7], sample_weight=[1, 1, 0, 0])
    assert _value(m) == 2.0
    assert m.name == "mean"


def test_accuracy():
    m = metrics.Accuracy()
    assert float(m([[1], [2], [3], [4]], [[0], [2], [3], [4]])) == 0.75
    m.reset_state()
    m.update_state([[1], [2], [3], [4]], [[0], [2], [3], [4]], sample_weight=[1, 1, 0, 0])
    assert _value(m) == 0.5


def test_binary_accuracy():
    m = metrics.BinaryAccuracy()
    m.update_state([[1], [1], [0], [0]], [[0.98], [1], [0], [0.6]])
    assert _value(m) == 0.75
    m.reset_state()
    m.update_state([[1], [1], [0], [0]], [[0.98], [1], [0], [0.6]], sample_weight=[1, 0, 0, 1])
    assert _value(m) == 0.5
    strict = metrics.BinaryAccuracy(threshold=0.99)
    strict.update_state([1, 1], tp.constant([0.98, 1.0]))
    assert _value(strict) == 0.5


def test_categorical_and_sparse_categorical_accuracy():
    c = metrics.CategoricalAccuracy()
    c.update_state([[0, 0, 1], [0, 1, 0]], [[0.1, 0.9, 0.8], [0.05, 0.95, 0]])
    assert _value(c) == 0.5
    c.reset_state()
    c.update_state([[0, 0, 1], [0, 1, 0]], [[0.1, 0.9, 0.8], [0.05, 0.95, 0]], sample_weight=[0.7, 0.3])
    assert _value(c) == pytest.approx(0.3)
    s = metrics.SparseCategoricalAccuracy()
    s.update_state([[2], [1]], [[0.1, 0.6, 0.3], [0.05, 0.95, 0]])
    assert _value(s) == 0.5
    s.update_state(tp.constant([0, 0]), tp.constant([[0.9, 0.1, 0.0], [0.2, 0.7, 0.1]]))
    assert _value(s) == 0.5
    s.reset_state()
    s.update_state([2, 1], [[0.1, 0.6, 0.3], [0.05, 0.95, 0]], sample_weight=[0.7, 0.3])
    assert _value(s) == pytest.approx(0.3)


def test_mean_squared_and_absolute_error_metrics():
    m = metrics.MeanSquaredError()
    m.update_state([[0, 1], [0, 0]], [[1, 1], [0, 0]])
    assert _value(m) == 0.25
    m.reset_state()
    m.update_state([[0, 1], [0, 0]], [[1, 1], [0, 0]], sample_weight=[1, 0])
    assert _value(m) == 0.5
    a = metrics.MeanAbsoluteError()
    a.update_state([1.0, 2.0], [[2.0], [4.0]])
    assert _value(a) == 1.5


def test_metric_errors_name_the_shapes():
    with pytest.raises(ValueError, match="use SparseCategoricalAccuracy"):
        metrics.CategoricalAccuracy().update_state([1, 2], [[0.1, 0.9], [0.3, 0.7]])
    with pytest.raises(ValueError, match=r"y_true of shape \(2, 2\) does not fit y_pred of shape \(2, 3\)"):
        metrics.SparseCategoricalAccuracy().update_state([[0, 1], [1, 0]], np.ones((2, 3)))
    with pytest.raises(ValueError, match=r"y_true has shape \(3,\) but y_pred has shape \(2,\)"):
        metrics.Accuracy().update_state([1, 2, 3], [1, 2])
    with pytest.raises(ValueError, match="sample_weight of shape"):
        metrics.Mean().update_state([1.0, 2.0], sample_weight=[1.0, 2.0, 3.0])


def test_get_accuracy_follows_the_loss():
    cases = [
        ("sparse_categorical_crossentropy", metrics.SparseCategoricalAccuracy),
        (tp.losses.SparseCategoricalCrossentropy(from_logits=True), metrics.SparseCategoricalAccuracy),
        ("categorical_crossentropy", metrics.CategoricalAccuracy),
        (tp.losses.BinaryCrossentropy(), metrics.BinaryAccuracy),
    ]
    for loss, kind in cases:
        m = metrics.get("accuracy", loss=loss)
        assert type(m) is kind and m.name == "accuracy"
    assert metrics.get("acc", loss="binary_crossentropy").name == "acc"


def test_accuracy_for_a_binary_loss_on_logits_thresholds_at_zero():
    # A logit of 0.3 means p = 0.57 (class 1), -0.2 means p = 0.45 (class 0): the 0.5 threshold
    # meant for probabilities would call both class 0 (tensorflow/tensorflow#41413).
    m = metrics.get("accuracy", loss=tp.losses.BinaryCrossentropy(from_logits=True))
    m.update_state([[1.0], [0.0]], [[0.3], [-0.2]])
    assert type(m) is metrics.BinaryAccuracy and m.threshold == 0.0 and _value(m) == 1.0
    assert metrics.get("accuracy", loss=tp.losses.BinaryCrossentropy()).threshold == 0.5


def test_get_accuracy_without_a_loss_decides_by_shapes_like_keras():
    sparse = metrics.get("accuracy")
    sparse.update_state([2, 1], [[0.1, 0.6, 0.3], [0.05, 0.95, 0]])
    assert _value(sparse) == 0.5 and isinstance(sparse.chosen, metrics.SparseCategoricalAccuracy)
    binary = metrics.get("accuracy", loss="mse")
    binary.update_state([[1], [0]], [[0.7], [0.8]])
    assert _value(binary) == 0.5 and isinstance(binary.chosen, metrics.BinaryAccuracy)
    onehot = metrics.get("accuracy")
    onehot.update_state([[0, 0, 1], [0, 1, 0]], [[0.1, 0.9, 0.8], [0.05, 0.95, 0]])
    assert _value(onehot) == 0.5 and isinstance(onehot.chosen, metrics.CategoricalAccuracy)
    onehot.reset_state()
    assert _value(onehot) == 0.0


def test_get_other_names_callables_and_errors():
    assert type(metrics.get("mse")) is metrics.MeanSquaredError and metrics.get("mse").name == "mse"
    assert type(metrics.get("mae")) is metrics.MeanAbsoluteError
    assert type(metrics.get("sparse_categorical_accuracy")) is metrics.SparseCategoricalAccuracy
    mine = metrics.BinaryAccuracy(name="acc_at_half")
    assert metrics.get(mine) is mine
    xent = metrics.get("sparse_categorical_crossentropy")
    xent.update_state([1, 2], [[0.05, 0.95, 0], [0.1, 0.8, 0.1]])
    assert (
        _value(xent) == pytest.approx(1.1769392, rel=1e-5) and xent.name == "sparse_categorical_crossentropy"
    )

    def largest_error(y_true, y_pred):
        return np.max(np.abs(np.asarray(y_true) - np.asarray(y_pred)), axis=-1)

    wrapped = metrics.get(largest_error)
    wrapped.update_state([[0.0, 1.0], [2.0, 2.0]], [[0.5, 1.0], [2.0, 5.0]])
    assert wrapped.name == "largest_error" and _value(wrapped) == 1.75
    with pytest.raises(ValueError, match=r"unknown metric 'acuracy'; known: .*accuracy"):
        metrics.get("acuracy")
    with pytest.raises(TypeError, match="a metric must be"):
        metrics.get(1)
    assert tp.metrics is metrics


# -- the metrics taken from Keras 3 later: their numbers against Keras are in
# test_keras_metrics_reference.py; here names, state and configs.


def test_keras_names_resolve_as_keras_names_them():
    cases = {
        "AUC": (metrics.AUC, "auc"),
        "auc": (metrics.AUC, "auc"),
        "Precision": (metrics.Precision, "precision"),
        "precision": (metrics.Precision, "precision"),
        "recall": (metrics.Recall, "recall"),
        "F1Score": (metrics.F1Score, "f1_score"),
        "f1_score": (metrics.F1Score, "f1_score"),
        "FBetaScore": (metrics.FBetaScore, "fbeta_score"),
        "top_k_categorical_accuracy": (metrics.TopKCategoricalAccuracy, "top_k_categorical_accuracy"),
        "sparse_top_k_categorical_accuracy": (
            metrics.SparseTopKCategoricalAccuracy,
            "sparse_top_k_categorical_accuracy",
        ),
        "RootMeanSquaredError": (metrics.RootMeanSquaredError, "root_mean_squared_error"),
        "mape": (metrics.MeanAbsolutePercentageError, "mape"),
        "binary_crossentropy": (metrics.BinaryCrossentropy, "binary_crossentropy"),
        "CategoricalCrossentropy": (metrics.CategoricalCrossentropy, "categorical_crossentropy"),
    }
    for identifier, (cls, name) in cases.items():
        metric = metrics.get(identifier)
        assert type(metric) is cls and metric.name == name, identifier


def test_dir_of_metrics_lists_public_names_only():
    names = dir(metrics)
    assert {"AUC", "Precision", "F1Score", "serialize", "deserialize", "get"} <= set(names)
    assert not {"Any", "Callable", "Registry", "Tensor", "np", "functools"} & set(names)


def test_state_variables_are_in_the_state_and_reset():
    auc = metrics.AUC(num_thresholds=5, multi_label=True)
    assert auc.variables == []  # built on the first batch, as Keras
    auc.update_state([[1, 0], [0, 1]], [[0.8, 0.3], [0.4, 0.6]], sample_weight=[1.0, 2.0])
    state = auc.get_state()
    assert [v.shape for v in state["variables"]] == [(5, 2)] * 4
    again = metrics.AUC(num_thresholds=5, multi_label=True)
    again.set_state(state)
    assert float(again.result()) == float(auc.result()) == 1.0
    auc.reset_state()
    assert all(not v.numpy().any() for v in auc.variables)
    with pytest.raises(ValueError, match="holds 4 variables, the metric has 2"):
        metrics.Precision().set_state(state)


def test_new_metrics_config_round_trip():
    for metric in [
        metrics.AUC(curve="PR", thresholds=[0.2, 0.6], multi_label=True, label_weights=[1, 2]),
        metrics.Precision(thresholds=[0.3, 0.6], top_k=2, class_id=1),
        metrics.Recall(thresholds=0.4),
        metrics.FBetaScore(average="weighted", beta=2.0, threshold=0.5),
        metrics.F1Score(average="micro"),
        metrics.SparseTopKCategoricalAccuracy(k=3, from_sorted_ids=True),
        metrics.BinaryCrossentropy(from_logits=True, label_smoothing=0.1),
        metrics.CategoricalCrossentropy(axis=-1),
    ]:
        again = metrics.deserialize(metrics.serialize(metric))
        assert type(again) is type(metric) and again.get_config() == metric.get_config()


def test_precision_with_several_thresholds_gives_one_value_each():
    precision = metrics.Precision(thresholds=[0.3, 0.7])
    precision.update_state([1, 0, 1, 0], [0.9, 0.5, 0.4, 0.1])
    np.testing.assert_allclose(precision.result().numpy(), [2 / 3, 1.0])


def test_sparse_top_k_from_sorted_ids():
    metric = metrics.SparseTopKCategoricalAccuracy(k=2, from_sorted_ids=True)
    metric.update_state([3, 1, 0], [[3, 0, 1], [2, 0, 1], [1, 0, 2]])
    assert _value(metric) == pytest.approx(2 / 3)


def test_new_metrics_update_inside_a_compiled_step():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(64, 5)).astype(np.float32)
    y = (x[:, :1] > 0).astype(np.float32)

    def fit(compile):
        tp.random.set_seed(0)
        model = tp.layers.Sequential([tp.layers.Dense(1, activation="sigmoid")])
        names = ["AUC", "precision", "recall", "binary_crossentropy"]
        trainer = tp.Trainer(model, "sgd", "binary_crossentropy", metrics=names, compile=compile)
        return trainer.fit(x, y, epochs=2, batch_size=16, verbose=0).history

    eager, compiled = fit(False), fit(True)
    assert sorted(eager) == ["auc", "binary_crossentropy", "loss", "precision", "recall"]
    assert eager == compiled
    assert all(0.0 <= v <= 1.0 for v in eager["auc"] + eager["precision"] + eager["recall"])


def test_a_mean_in_a_compiled_step_updates_inside_the_replay_as_eager_does():
    from tapefit.layers.metrics import _call_method

    rng = np.random.default_rng(0)
    batches = [
        (rng.standard_normal((4, 3)).astype(np.float32), rng.random((4, 1)).astype(np.float32))
        for _ in range(5)
    ]
    eager, compiled_mean = metrics.Mean(), metrics.Mean()

    def step(mean, values, weights):
        mean.update_state(values, sample_weight=weights)
        return mean.result()

    compiled = tp.function(step)
    for values, weights in batches:
        expected = step(eager, tp.constant(values), tp.constant(weights))
        assert float(compiled(compiled_mean, tp.constant(values), tp.constant(weights))) == float(expected)
    assert (compiled_mean.total, compiled_mean.count) == (eager.total, eager.count)
    values = np.concatenate([v for v, _ in batches]).astype(np.float64)
    weights = np.concatenate([w for _, w in batches]).astype(np.float64)
    np.testing.assert_allclose(eager.total, (values * weights).sum(), rtol=1e-12)
    np.testing.assert_allclose(eager.count, np.broadcast_to(weights, values.shape).sum(), rtol=1e-12)
    (program,) = compiled._programs.values()
    assert all(value is not _call_method for value in program._replay.__globals__.values())
    compiled_mean.reset_state()
    assert (compiled_mean.total, compiled_mean.count, _value(compiled_mean)) == (0.0, 0.0, 0.0)


def test_a_mean_refuses_weights_that_do_not_fit_and_values_that_are_not_numbers():
    with pytest.raises(
        ValueError, match=r"sample_weight of shape \(2, 2\) does not fit values of shape \(2, 3\)"
    ):
        metrics.Mean().update_state(np.ones((2, 3)), sample_weight=np.ones((2, 2)))
    with pytest.raises(TypeError, match="mean: cannot read values as an array"):
        metrics.Mean().update_state(["a", object()])
