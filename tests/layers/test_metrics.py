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
