"""Built-in metrics inside a ``tp.function``: their updates, results and resets are traced into
the replay (no host call for them), bit for bit what eager gives; a user's NumPy code in a metric
still runs on every call, never frozen into the trace."""

import numpy as np
import pytest

import tapefit as tp
from tapefit import metrics
from tapefit.layers.metrics import MeanMetricWrapper, _call_method

B, C = 8, 4


def _batch(kind, rng):
    """``(y_true, y_pred)`` of one batch of ``kind`` inputs, as Tensors."""
    if kind == "binary":
        pair = (rng.random((B, 1)) > 0.5).astype(np.float32), rng.random((B, 1)).astype(np.float32)
    elif kind == "multi":
        pair = (rng.random((B, C)) > 0.5).astype(np.float32), rng.random((B, C)).astype(np.float32)
    elif kind == "onehot":
        scores = rng.random((B, C)).astype(np.float32)
        scores[0] = [0.5, 0.5, 0.1, 0.1]  # a tie for the highest
        pair = np.eye(C, dtype=np.float32)[rng.integers(0, C, B)], scores
    elif kind == "sparse":
        pair = rng.integers(0, C, (B, 1)), rng.random((B, C)).astype(np.float32)
    elif kind == "sorted":
        pair = rng.integers(0, C, (B,)), np.argsort(-rng.random((B, C)), axis=-1)
    elif kind == "labels":
        pair = rng.integers(0, 3, (B, 1)), rng.integers(0, 3, (B, 1))
    elif kind == "logits":
        pair = (rng.random((B, 3)) > 0.5).astype(np.float32), rng.normal(size=(B, 3)).astype(np.float32)
    else:  # "regression"
        pair = rng.normal(size=(B, 3)).astype(np.float32), rng.normal(size=(B, 3)).astype(np.float32)
    return tuple(tp.constant(a) for a in pair)


# Every built-in metric class and the metrics made from names, with the inputs each takes.
CASES = {
    "Accuracy": (lambda: metrics.Accuracy(), "labels"),
    "BinaryAccuracy": (lambda: metrics.BinaryAccuracy(threshold=0.3), "binary"),
    "CategoricalAccuracy": (lambda: metrics.CategoricalAccuracy(), "onehot"),
    "SparseCategoricalAccuracy": (lambda: metrics.SparseCategoricalAccuracy(), "sparse"),
    "accuracy-binary": (lambda: metrics.get("accuracy"), "binary"),
    "accuracy-sparse": (lambda: metrics.get("accuracy"), "sparse"),
    "accuracy-onehot": (lambda: metrics.get("accuracy"), "onehot"),
    "MeanSquaredError": (lambda: metrics.MeanSquaredError(), "regression"),
    "MeanAbsoluteError": (lambda: metrics.MeanAbsoluteError(), "regression"),
    "RootMeanSquaredError": (lambda: metrics.RootMeanSquaredError(), "regression"),
    "MeanAbsolutePercentageError": (lambda: metrics.MeanAbsolutePercentageError(), "regression"),
    "BinaryCrossentropy": (lambda: metrics.BinaryCrossentropy(), "binary"),
    "BinaryCrossentropy-logits": (
        lambda: metrics.BinaryCrossentropy(from_logits=True, label_smoothing=0.1),
        "logits",
    ),
    "CategoricalCrossentropy": (lambda: metrics.CategoricalCrossentropy(label_smoothing=0.2), "onehot"),
    "TopKCategoricalAccuracy": (lambda: metrics.TopKCategoricalAccuracy(k=2), "onehot"),
    "SparseTopKCategoricalAccuracy": (lambda: metrics.SparseTopKCategoricalAccuracy(k=2), "sparse"),
    "SparseTopKCategoricalAccuracy-sorted": (
        lambda: metrics.SparseTopKCategoricalAccuracy(k=2, from_sorted_ids=True),
        "sorted",
    ),
    "loss-mse": (lambda: metrics.get("mean_squared_logarithmic_error"), "regression"),
    "loss-sparse-xent": (lambda: metrics.get("sparse_categorical_crossentropy"), "sparse"),
    "wrapper-loss-function": (lambda: metrics.MeanMetricWrapper(tp.losses.log_cosh), "regression"),
    "Precision": (lambda: metrics.Precision(), "binary"),
    "Precision-thresholds": (lambda: metrics.Precision(thresholds=[0.2, 0.5, 0.7]), "multi"),
    "Precision-even": (lambda: metrics.Precision(thresholds=[0.0, 0.5, 1.0]), "multi"),
    "Precision-top_k": (lambda: metrics.Precision(top_k=2), "multi"),
    "Precision-top_k-class_id": (lambda: metrics.Precision(top_k=2, class_id=1), "onehot"),
    "Recall-class_id": (lambda: metrics.Recall(class_id=2), "multi"),
    "Recall-top_k": (lambda: metrics.Recall(thresholds=[0.3, 0.6], top_k=1), "onehot"),
    "AUC": (lambda: metrics.AUC(), "binary"),
    "AUC-PR": (lambda: metrics.AUC(num_thresholds=7, curve="PR"), "multi"),
    "AUC-PR-minoring": (lambda: metrics.AUC(curve="PR", summation_method="minoring"), "multi"),
    "AUC-majoring-multi_label": (
        lambda: metrics.AUC(summation_method="majoring", multi_label=True),
        "multi",
    ),
    "AUC-PR-multi_label-label_weights": (
        lambda: metrics.AUC(curve="PR", multi_label=True, label_weights=[1, 2, 0.5, 1]),
        "multi",
    ),
    "AUC-label_weights": (lambda: metrics.AUC(label_weights=[1, 2, 0.5, 1]), "multi"),
    "AUC-thresholds": (lambda: metrics.AUC(thresholds=[0.1, 0.4, 0.8]), "multi"),
    "AUC-thresholds-multi_label-num_labels": (
        lambda: metrics.AUC(thresholds=[0.1, 0.4], multi_label=True, num_labels=C, curve="PR"),
        "multi",
    ),
    "AUC-from_logits": (lambda: metrics.AUC(from_logits=True), "logits"),
    "FBetaScore": (lambda: metrics.FBetaScore(), "onehot"),
    "FBetaScore-micro": (lambda: metrics.FBetaScore(average="micro", threshold=0.5), "multi"),
    "FBetaScore-macro": (lambda: metrics.FBetaScore(average="macro", beta=2.0), "multi"),
    "F1Score-weighted": (lambda: metrics.F1Score(average="weighted"), "onehot"),
}


def _update(metric, y_true, y_pred):
    metric.update_state(y_true, y_pred)
    return metric.result()


def _update_weighted(metric, y_true, y_pred, weights):
    metric.update_state(y_true, y_pred, sample_weight=weights)
    return metric.result()


def _reset_and_update(metric, y_true, y_pred, weights):
    metric.reset_state()
    metric.update_state(y_true, y_pred, sample_weight=weights)
    return metric.result()


def _hosts_a_metric_method(function):
    (program,) = function._programs.values()
    return any(value is _call_method for value in program._replay.__globals__.values())


def _same(a, b):
    a, b = a.numpy(), b.numpy()
    return a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b)


def _same_state(a, b):
    x, y = a.get_state(), b.get_state()
    return (
        x.keys() == y.keys()
        and (x["total"], x["count"], x.get("kind")) == (y["total"], y["count"], y.get("kind"))
        and all(np.array_equal(u, v) for u, v in zip(x.get("variables", []), y.get("variables", [])))
    )


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("weighted", [False, True], ids=["unweighted", "weighted"])
def test_a_compiled_update_and_result_equal_eager_bit_for_bit_in_the_replay(case, weighted):
    make, kind = CASES[case]
    rng = np.random.default_rng(len(case))
    eager, compiled = make(), make()
    step = _update_weighted if weighted else _update
    function = tp.function(step)
    for _ in range(5):  # two traces, then replays
        batch = _batch(kind, rng)
        if weighted:
            batch += (tp.constant(rng.random(B)),)
        expected = step(eager, *batch)
        assert _same(function(compiled, *batch), expected)
    assert not function.eager and not _hosts_a_metric_method(function)
    assert _same_state(compiled, eager)


@pytest.mark.parametrize(
    "case", ["CategoricalAccuracy", "accuracy-sparse", "AUC-majoring-multi_label", "FBetaScore"]
)
def test_a_reset_inside_and_outside_the_replay_is_the_eager_reset(case):
    make, kind = CASES[case]
    rng = np.random.default_rng(3)
    eager, compiled = make(), make()
    function = tp.function(_reset_and_update)
    for _ in range(4):
        batch = (*_batch(kind, rng), tp.constant(rng.random(B)))
        assert _same(function(compiled, *batch), _reset_and_update(eager, *batch))
    assert not _hosts_a_metric_method(function)
    accumulate = tp.function(_update)
    for _ in range(4):
        batch = _batch(kind, rng)
        assert _same(accumulate(compiled, *batch), _update(eager, *batch))
    compiled.reset_state()  # outside: the next replays start from zero as eager does
    eager.reset_state()
    assert float(np.max(compiled.result().numpy())) == 0.0
    for _ in range(2):
        batch = _batch(kind, rng)
        assert _same(accumulate(compiled, *batch), _update(eager, *batch))
    assert _same_state(compiled, eager)


@pytest.mark.parametrize(
    "case",
    [
        "MeanSquaredError",
        "accuracy-onehot",
        "Precision-top_k",
        "AUC-PR-multi_label-label_weights",
        "F1Score-weighted",
    ],
)
def test_the_state_after_compiled_updates_round_trips(case):
    make, kind = CASES[case]
    rng = np.random.default_rng(4)
    compiled = make()
    function = tp.function(_update_weighted)
    for _ in range(4):
        function(compiled, *_batch(kind, rng), tp.constant(rng.random(B)))
    restored = make()
    restored.set_state(compiled.get_state())
    assert _same(restored.result(), compiled.result()) and _same_state(restored, compiled)
    for _ in range(2):  # the replay goes on as the restored metric does eagerly
        batch = (*_batch(kind, rng), tp.constant(rng.random(B)))
        assert _same(function(compiled, *batch), _update_weighted(restored, *batch))
    other = make()  # a state set from outside: the next replay starts from it
    other.update_state(*_batch(kind, rng))
    compiled.set_state(other.get_state())
    batch = (*_batch(kind, rng), tp.constant(rng.random(B)))
    assert _same(function(compiled, *batch), _update_weighted(other, *batch))
    assert _same_state(compiled, other)


def test_a_numpy_function_in_a_wrapper_runs_on_every_call_and_is_never_frozen():
    def largest_error(y_true, y_pred):
        return np.max(np.abs(np.asarray(y_true) - np.asarray(y_pred)), axis=-1)

    rng = np.random.default_rng(5)
    compiled, eager = metrics.get(largest_error), metrics.get(largest_error)
    function = tp.function(_update_weighted)
    seen = []
    for _ in range(5):
        y_true, y_pred = _batch("regression", rng)
        weights = tp.constant(rng.random(B))
        seen.append((y_true.numpy(), y_pred.numpy(), weights.numpy()))
        assert _same(
            function(compiled, y_true, y_pred, weights), _update_weighted(eager, y_true, y_pred, weights)
        )
    assert not function.eager
    (program,) = function._programs.values()
    hosted = [getattr(value, "__func__", None) for value in program._replay.__globals__.values()]
    assert MeanMetricWrapper._add_values_of_fn in hosted  # fn and the averaging, on every call
    errors = np.concatenate([np.abs(t - p).max(axis=-1) for t, p, _ in seen])
    weights = np.concatenate([w for _, _, w in seen])
    np.testing.assert_allclose(float(compiled.result()), (errors * weights).sum() / weights.sum(), rtol=1e-6)


def test_a_users_numpy_metric_runs_as_a_host_call_with_each_calls_values():
    class LargestSeen(metrics.Metric):
        def __init__(self):
            super().__init__("largest_seen")
            self.largest = 0.0

        def update_state(self, y_true, y_pred, sample_weight=None):
            self.largest = max(self.largest, float(np.max(np.asarray(y_pred))))

        def result(self):
            return tp.constant(np.float32(self.largest))

        def reset_state(self):
            self.largest = 0.0

    metric = LargestSeen()
    function = tp.function(_update)
    values = [0.5, 2.0, 1.0, 3.0, 2.5]
    for value in values:
        result = function(metric, tp.constant([[0.0]]), tp.constant([[value]]))
    assert float(result) == 3.0 and not function.eager
    assert _hosts_a_metric_method(function)


def test_a_subclass_numpy_update_with_the_base_result_in_the_replay():
    class Doubled(metrics.Metric):
        def update_state(self, values):
            self.total += 2.0 * float(np.sum(np.asarray(values)))
            self.count += float(np.size(np.asarray(values)))

    metric = Doubled("doubled")
    function = tp.function(lambda m, v: (m.update_state(v), m.result())[1])
    for k in range(1, 5):
        result = function(metric, tp.constant([float(k), float(k)]))
    assert float(result) == 5.0 and (metric.total, metric.count) == (40.0, 8.0)


def test_metrics_built_on_a_traced_first_batch_update_their_new_variables():
    rng = np.random.default_rng(6)
    auc = metrics.AUC(num_thresholds=5, multi_label=True)
    function = tp.function(_update)
    for _ in range(4):
        function(auc, *_batch("multi", rng))
    assert [v.shape for v in auc.variables] == [(5, C)] * 4
    total = sum(float(v.numpy().sum()) for v in auc.variables)
    assert total == 4 * B * C * 5  # each prediction counted once per threshold in each batch


def test_a_result_traced_before_the_first_batch_is_traced_again_once_built():
    rng = np.random.default_rng(7)
    for metric, kind in [
        (metrics.AUC(multi_label=True), "multi"),
        (metrics.F1Score(), "onehot"),
        (metrics.get("accuracy"), "sparse"),
    ]:
        read = tp.function(lambda m: m.result())
        for _ in range(3):
            assert float(read(metric)) == 0.0
        y_true, y_pred = _batch(kind, rng)
        metric.update_state(y_true, y_pred)
        assert _same(read(metric), metric.result()) and float(np.max(metric.result().numpy())) > 0.0


def test_a_changed_accuracy_kind_makes_the_replay_trace_again():
    rng = np.random.default_rng(8)
    accuracy = metrics.get("accuracy")
    function = tp.function(_update)
    for _ in range(3):
        function(accuracy, *_batch("binary", rng))
    assert isinstance(accuracy.chosen, metrics.BinaryAccuracy)
    other = metrics.get("accuracy")
    other.update_state(*_batch("onehot", rng))
    accuracy.set_state(other.get_state())  # now categorical: a replay would update the old kind
    assert isinstance(accuracy.chosen, metrics.CategoricalAccuracy)
    result = tp.function(lambda m: m.result())
    assert float(result(accuracy)) == float(other.result())


@pytest.mark.parametrize(
    ("metric", "y_pred", "message"),
    [
        (
            metrics.Accuracy(),
            np.zeros((4, 2)),
            r"accuracy: y_true has shape \(4, 3\) but y_pred has shape \(4, 2\)",
        ),
        (metrics.CategoricalAccuracy(), np.zeros((4, 2)), "categorical_accuracy: y_true of shape"),
        (metrics.AUC(multi_label=True), np.zeros((4, 3, 2)), "auc: multi_label needs y_pred of rank 2"),
        (metrics.FBetaScore(), np.zeros((4, 2)), r"fbeta_score: expects y_true and y_pred of one shape"),
        (metrics.Precision(), np.zeros((4, 2)), r"precision: y_true has shape \(4, 3\) but y_pred"),
    ],
)
def test_bad_shapes_name_the_metric_when_traced_too(metric, y_pred, message):
    function = tp.function(_update)
    y_true = np.zeros((4, 3, 2) if "multi_label" in message else (4, 3), np.float32)
    with pytest.raises(ValueError, match=message):
        function(metric, tp.constant(y_true), tp.constant(y_pred.astype(np.float32)))


def test_bad_weights_and_values_name_the_metric_when_traced_too():
    function = tp.function(_update_weighted)
    y = tp.constant(np.zeros((4, 3), np.float32))
    with pytest.raises(ValueError, match=r"mean_squared_error: sample_weight of shape \(3,\) does not fit"):
        function(metrics.MeanSquaredError(), y, y, tp.constant(np.ones(3)))
    with pytest.raises(ValueError, match=r"auc: sample_weight of shape \(2, 2\) does not fit y_pred"):
        function(metrics.AUC(), y, y, tp.constant(np.ones((2, 2))))
    with pytest.raises(ValueError, match=r"f1_score: sample_weight of shape \(3,\) does not fit y_pred"):
        function(metrics.F1Score(), y, y, tp.constant(np.ones(3)))
    with pytest.raises(TypeError, match="mean: cannot read values as an array"):
        tp.function(lambda m: m.update_state(["a", "b"]))(metrics.Mean())


def test_a_compiled_fit_updates_its_metrics_in_the_replay_as_eager_does():
    rng = np.random.default_rng(9)
    x = rng.normal(size=(48, 5)).astype(np.float32)
    y = (x[:, :1] + 0.3 * x[:, 1:2] > 0).astype(np.float32)
    names = ["accuracy", "AUC", "precision", "recall", "mse", "binary_crossentropy"]

    def fit(compile):
        tp.random.set_seed(0)
        model = tp.layers.Sequential([tp.layers.Dense(1, activation="sigmoid")])
        trainer = tp.Trainer(model, "sgd", "binary_crossentropy", metrics=names, compile=compile)
        return trainer, trainer.fit(x, y, epochs=2, batch_size=16, verbose=0).history

    (_, eager), (trainer, compiled) = fit(False), fit(True)
    assert compiled == eager
    replays = [p._replay for p in trainer._compiled_step._programs.values() if p._replay is not None]
    assert replays and all(
        value is not _call_method for replay in replays for value in replay.__globals__.values()
    )


@pytest.mark.parametrize(
    "make, kind, setting, value",
    [
        (lambda: metrics.BinaryAccuracy(), "binary", "threshold", 0.7),
        (lambda: metrics.SparseTopKCategoricalAccuracy(k=3), "sparse", "k", 1),
        (lambda: metrics.Precision(thresholds=[0.3, 0.6]), "binary", "thresholds", [0.2, 0.9]),
        (lambda: metrics.AUC(num_thresholds=20), "binary", "curve", "PR"),
    ],
    ids=["threshold", "k", "thresholds", "curve"],
)
def test_a_setting_changed_after_tracing_is_followed_as_eager_follows_it(make, kind, setting, value):
    rng = np.random.default_rng(3)
    batches = [_batch(kind, rng) for _ in range(4)]
    compiled_metric, eager_metric = make(), make()

    @tp.function
    def step(y_true, y_pred):
        compiled_metric.update_state(y_true, y_pred)
        return compiled_metric.result()

    for y_true, y_pred in batches[:3]:  # traced, confirmed, replayed
        step(y_true, y_pred)
        eager_metric.update_state(y_true, y_pred)
    for metric in (compiled_metric, eager_metric):
        setattr(metric, setting, value)
    compiled = step(*batches[3]).numpy()
    eager_metric.update_state(*batches[3])
    np.testing.assert_array_equal(compiled, eager_metric.result().numpy())


def test_a_numpy_function_may_give_another_number_of_values_on_every_call():
    def known_errors(y_true, y_pred):  # labels of -1 are unknown: as many values as known labels
        t, p = np.asarray(y_true).ravel(), np.asarray(y_pred).ravel()
        return np.abs(t[t >= 0] - p[t >= 0])

    rng = np.random.default_rng(6)
    compiled, eager = metrics.get(known_errors), metrics.get(known_errors)
    function = tp.function(_update_weighted)
    for known in (8, 5, 7, 3):
        y_true = np.where(np.arange(B) < known, rng.random(B), -1.0)
        batch = (tp.constant(y_true), tp.constant(rng.random(B)), None)
        assert _same(function(compiled, *batch), _update_weighted(eager, *batch))
    assert not function.eager


def test_a_keras_style_subclass_may_keep_total_and_count_in_its_own_variables():
    class Sums(metrics.Metric):
        def __init__(self):
            super().__init__("sums")
            self.total = self.add_variable((), "zeros", name="total")
            self.count = self.add_variable((), "zeros", name="count")

        def update_state(self, values):
            self.total.assign_add(tp.reduce_sum(values))
            self.count.assign_add(float(np.size(values)))

        def result(self):
            return self.total / self.count

    metric = Sums()
    metric.update_state(tp.constant([1.0, 2.0]))
    assert float(metric.result()) == 1.5
    state = metric.get_state()
    assert state["total"] == 3.0 and state["count"] == 2.0
    fresh = Sums()
    fresh.set_state(state)
    assert float(fresh.result()) == 1.5 and isinstance(fresh.total, tp.Variable)
    metric.reset_state()
    assert float(metric.total) == 0.0 and isinstance(metric.total, tp.Variable)


def test_top_k_precision_keeps_memory_linear_in_the_classes():
    rng = np.random.default_rng(7)
    y_pred = rng.random((4, 5000)).astype(np.float32)
    y_true = (rng.random((4, 5000)) > 0.99).astype(np.float32)
    metric = metrics.Precision(top_k=3)
    metric.update_state(y_true, y_pred)  # a (4, 5000, 5000) comparison would need 100 MB
    top = np.argsort(-y_pred, axis=-1, kind="stable")[:, :3]
    hits = np.take_along_axis(y_true, top, axis=-1).sum()
    assert float(metric.result()) == np.float32(hits / 12)


def test_a_label_outside_the_classes_is_never_in_the_top_k():
    metric = metrics.SparseTopKCategoricalAccuracy(k=2)
    scores = np.array([[0.1, 0.5, 0.4], [0.3, 0.3, 0.4], [0.6, 0.2, 0.2]], np.float32)
    metric.update_state(np.array([-1, 3, 0]), scores)
    assert float(metric.result()) == np.float32(1 / 3)


def test_accuracy_compares_strings_as_it_did_before_its_ops():
    metric = metrics.Accuracy()
    metric.update_state(["a", "b", "c"], np.array([["a"], ["x"], ["c"]]))
    assert float(metric.result()) == np.float32(2 / 3)


def test_metric_updates_under_a_tape_record_nothing():
    metric = metrics.AUC(num_thresholds=10)
    x = tp.Variable(np.array([0.2, 0.7, 0.9], np.float32))
    with tp.GradientTape() as tape:
        y = tp.sigmoid(x)
        metric.update_state(np.array([0.0, 1.0, 1.0], np.float32), y)
    assert len(tape._entries) == 1  # the sigmoid alone
