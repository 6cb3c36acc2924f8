"""The name tables (``tapefit/core/naming.py``) and the public registries built on them."""

import pytest

import tapefit as tp
from tapefit.core.naming import Registry, to_snake_case
from tapefit.layers import activations, constraints, initializers, losses, metrics, regularizers
from tapefit.optimizers import schedules


class Thing:
    pass


def test_lookup_as_given_then_lower_case_then_snake_case():
    table = Registry("thing", {"mean_squared_error": 1, "sgd": 2, "AdamW": 3})
    assert table.lookup("mean_squared_error") == 1
    assert table.lookup("MeanSquaredError") == 1
    assert table.lookup(" SGD ") == 2
    assert table.lookup("AdamW") == 3
    assert (
        to_snake_case("Conv2D") == "conv2d" and to_snake_case("BatchNormalization") == "batch_normalization"
    )


def test_unknown_name_lists_the_known_ones_sorted():
    table = Registry("thing", {"b": 1, "a": 2})
    with pytest.raises(ValueError, match=r"^unknown thing 'c'; known: a, b$"):
        table.lookup("c")
    paths = Registry("thing", {"b": 1}, import_paths=True)
    with pytest.raises(ValueError, match=r"^unknown thing 'c'; known: b \(or an import path"):
        paths.lookup("c")


def test_import_paths_only_where_the_registry_takes_them():
    with pytest.raises(ValueError, match="unknown thing"):
        Registry("thing", {}).lookup("tapefit.layers:Dense")
    assert Registry("thing", {}, import_paths=True).lookup("tapefit.layers:Dense") is tp.layers.Dense
    with pytest.raises(ValueError, match="'no_such_module_here:X' does not import: ModuleNotFoundError"):
        Registry("thing", {}, import_paths=True).lookup("no_such_module_here:X")
    with pytest.raises(ValueError, match="has no attribute 'Nope'"):
        Registry("thing", {}, import_paths=True).lookup("tapefit.layers:Nope")


def test_get_names_callables_and_none():
    made = Registry("widget", {"thing": Thing}, instantiate=True)
    assert isinstance(made.get("thing"), Thing)
    assert made.get(len) is len
    with pytest.raises(TypeError, match=r"^a widget must be a name or a callable, got None$"):
        made.get(None)
    kept = Registry("item", {"thing": Thing}, none="nothing", callable_form=" () -> x")
    assert kept.get("thing") is Thing and kept.get(None) == "nothing"
    with pytest.raises(TypeError, match=r"^an item must be None, a name or a callable \(\) -> x, got 3$"):
        kept.get(3)


def test_registry_is_a_read_only_mapping_with_name_of():
    table = Registry("thing", {"b": Thing, "a": int, "alias": Thing})
    assert dict(table) == {"b": Thing, "a": int, "alias": Thing}
    assert len(table) == 3 and table.names() == ["a", "alias", "b"]
    assert table.name_of(Thing) == "b" and table.name_of(str) is None
    with pytest.raises(TypeError):
        table["c"] = 1  # type: ignore[index]


def test_every_listed_name_is_accepted_by_its_get():
    for name in activations.registry.names():
        assert callable(activations.get(name))
    for name in initializers.registry.names():
        assert initializers.get(name)((2, 3)).shape == (2, 3)
    for name in regularizers.registry.names():
        # a matrix: orthogonal_regularizer takes rank 2 only; Keras's "l1l2" has factors 0
        penalty = float(regularizers.get(name)(tp.constant([[1.0, 2.0], [3.0, 4.0]])))
        assert penalty > 0 or (name == "l1l2" and penalty == 0)
    for name in constraints.registry.names():
        assert constraints.get(name)(tp.ones((2, 3))).shape == (2, 3)
    for name in losses.registry.names():
        assert isinstance(losses.get(name), losses.Loss)
    for name in metrics.registry.names():
        metric = metrics.get(name)
        assert isinstance(metric, metrics.Metric) and metric.name == name
    for name in tp.optimizers.registry.names():
        assert isinstance(tp.optimizers.get(name), tp.optimizers.Optimizer)
    for name in schedules.registry.names():
        schedule = schedules.get({"type": name, **_schedule_args(name)})
        assert isinstance(schedule, schedules.LearningRateSchedule)


def _schedule_args(name):
    if name == "piecewise_constant_decay":
        return {"boundaries": [1], "values": [0.1, 0.01]}
    args = {"initial_learning_rate": 0.1, "decay_steps": 10}
    return {**args, "decay_rate": 0.5} if name == "exponential_decay" else args


def test_metric_names_cover_accuracy_and_the_losses():
    names = metrics.registry.names()
    assert {"accuracy", "acc", "mean", "sparse_categorical_accuracy"} <= set(names)
    assert set(losses.registry.names()) <= set(names)
    # "accuracy" follows the loss; another spelling is Keras's Accuracy class (exact equality)
    assert isinstance(metrics.get("accuracy", loss="binary_crossentropy"), metrics.BinaryAccuracy)
    assert type(metrics.get("Accuracy")) is metrics.Accuracy


def test_serialize_names_registered_classes_and_import_paths():
    class MySchedule(schedules.ExponentialDecay):
        pass

    assert schedules.serialize(schedules.ExponentialDecay(0.1, 10, 0.5))["type"] == "exponential_decay"
    config = schedules.serialize(MySchedule(0.1, 10, 0.5))
    assert config["type"] == f"{__name__}:{MySchedule.__qualname__}"
