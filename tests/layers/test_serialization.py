"""get_config/from_config on every public class, and the registry of model files."""

from __future__ import annotations

import inspect
import json
from typing import Any

import numpy as np
import pytest

import tapefit as tp
from tapefit.layers import serialization
from tapefit.optimizers import schedules


@tp.register_serializable(name="tests.double")
def double(x: Any) -> Any:
    return x * 2.0


def _functional() -> tp.Model:
    inputs = tp.Input((4,), name="features")
    hidden = tp.layers.Dense(3, activation="relu", name="hidden")(inputs)
    return tp.Model(inputs, tp.layers.Dense(2, name="out")(hidden), name="small")


# The arguments of the classes that need some; every other public class is made with none.
ARGUMENTS: dict[str, Any] = {
    "Rescaling": lambda: {"scale": 0.5, "offset": 1.0},
    "GaussianNoise": lambda: {"stddev": 0.1},
    "CategoryEncoding": lambda: {"num_tokens": 4, "output_mode": "count"},
    "Hashing": lambda: {"num_bins": 5, "salt": 3},
    "Activation": lambda: {"activation": "tanh"},
    "Bidirectional": lambda: {"layer": tp.layers.LSTM(3, return_sequences=True), "merge_mode": "sum"},
    "Conv1D": lambda: {"filters": 2, "kernel_size": 3, "strides": 2, "padding": "same"},
    "Conv2D": lambda: {"filters": 2, "kernel_size": (3, 2), "kernel_regularizer": tp.regularizers.L2(0.1)},
    "Convolution2D": lambda: {"filters": 2, "kernel_size": 3},
    "Conv1DTranspose": lambda: {"filters": 2, "kernel_size": 3, "strides": 2, "output_padding": 1},
    "Conv2DTranspose": lambda: {"filters": 2, "kernel_size": (3, 2), "padding": "same", "dilation_rate": 2},
    "DepthwiseConv2D": lambda: {"kernel_size": 3, "depth_multiplier": 2, "depthwise_regularizer": "l2"},
    "SeparableConv2D": lambda: {"filters": 2, "kernel_size": 3, "pointwise_initializer": "he_normal"},
    "SpatialDropout1D": lambda: {"rate": 0.25, "seed": 3},
    "SpatialDropout2D": lambda: {"rate": 0.25},
    "Dense": lambda: {
        "units": 3,
        "activation": "gelu",
        "kernel_initializer": tp.initializers.HeNormal(seed=1),
    },
    "Dot": lambda: {"axes": (1, 1), "normalize": True},
    "Dropout": lambda: {"rate": 0.25, "seed": 3},
    "Embedding": lambda: {"input_dim": 5, "output_dim": 2, "mask_zero": True},
    "GRU": lambda: {"units": 3},
    "LSTM": lambda: {"units": 3, "return_state": True},
    "SimpleRNN": lambda: {"units": 3, "activation": "relu"},
    "RNN": lambda: {"cell": [tp.layers.GRUCell(2), tp.layers.LSTMCell(3)], "return_sequences": True},
    "SimpleRNNCell": lambda: {"units": 3, "dropout": 0.5},
    "LSTMCell": lambda: {"units": 3, "unit_forget_bias": False},
    "GRUCell": lambda: {"units": 3, "reset_after": False},
    "StackedRNNCells": lambda: {"cells": [tp.layers.SimpleRNNCell(2), tp.layers.GRUCell(2)]},
    "TimeDistributed": lambda: {"layer": tp.layers.Dense(2)},
    "Lambda": lambda: {"function": double},
    "MultiHeadAttention": lambda: {"num_heads": 2, "key_dim": 4},
    "Permute": lambda: {"dims": (2, 1)},
    "RepeatVector": lambda: {"n": 3},
    "Reshape": lambda: {"target_shape": (2, -1)},
    "Sequential": lambda: {"layers": [tp.layers.Dense(2), tp.layers.Dropout(0.5)], "name": "stack"},
    "MeanMetricWrapper": lambda: {"fn": tp.losses.Huber(delta=2.0, reduction="none"), "name": "huber"},
    "Optimizer": lambda: {"learning_rate": 0.1},
    "SGD": lambda: {"learning_rate": 0.1, "momentum": 0.9, "nesterov": True},
    "Adam": lambda: {"learning_rate": schedules.CosineDecay(0.01, 100)},
    "CosineDecay": lambda: {"initial_learning_rate": 0.1, "decay_steps": 10, "alpha": 0.1},
    "ExponentialDecay": lambda: {"initial_learning_rate": 0.1, "decay_steps": 10, "decay_rate": 0.5},
    "PiecewiseConstantDecay": lambda: {"boundaries": [10, 20], "values": [0.1, 0.01, 0.001]},
    "PolynomialDecay": lambda: {"initial_learning_rate": 0.1, "decay_steps": 10},
}
ABSTRACT = {"LearningRateSchedule"}  # defines no schedule: its get_config is for subclasses


def _public_classes() -> list[tuple[str, type]]:
    found: dict[int, tuple[str, type]] = {}
    for module in (
        tp.layers,
        tp.optimizers,
        schedules,
        tp.losses,
        tp.metrics,
        tp.initializers,
        tp.regularizers,
    ):
        for name in getattr(module, "__all__", []):
            value = getattr(module, name)
            if isinstance(value, type) and name not in ABSTRACT and value is not tp.layers.SymbolicTensor:
                found.setdefault(id(value), (f"{module.__name__}.{name}", value))
    return sorted(found.values())


@pytest.mark.parametrize(("name", "cls"), _public_classes(), ids=[n for n, _ in _public_classes()])
def test_every_public_class_round_trips_through_json(name: str, cls: type) -> None:
    if cls is tp.Model:
        obj: Any = _functional()
    else:
        obj = cls(**ARGUMENTS.get(cls.__name__, dict)())
    config = obj.get_config()
    text = json.dumps(config, allow_nan=False)  # plain JSON values only
    again = cls.from_config(json.loads(text))
    assert type(again) is cls
    assert again.get_config() == config


def test_a_layer_config_uses_keras_names_and_nests_objects() -> None:
    layer = tp.layers.Dense(
        3, activation="relu", kernel_initializer=tp.initializers.GlorotNormal(seed=4), name="d"
    )
    config = layer.get_config()
    assert config["units"] == 3 and config["activation"] == "relu" and config["name"] == "d"
    assert config["kernel_initializer"] == {
        "module": "tapefit.initializers",
        "class_name": "GlorotNormal",
        "config": {"seed": 4},
    }
    assert config["dtype"] == "float32" and config["trainable"] is True


def test_a_frozen_layer_keeps_trainable_false() -> None:
    layer = tp.layers.Dense(2)
    layer.trainable = False
    assert tp.layers.Dense.from_config(layer.get_config()).trainable is False


def test_a_functional_config_keeps_shared_layers_and_structures() -> None:
    a, b = tp.Input((3,), name="a"), tp.Input((3,), name="b")
    shared = tp.layers.Dense(2, name="shared")
    out = tp.layers.Add(name="add")([shared(a), shared(b)])
    model = tp.Model({"a": a, "b": b}, {"sum": out, "left": shared(a)}, name="two")
    config = model.get_config()
    assert [entry["config"]["name"] for entry in config["layers"]] == ["shared", "add"]
    assert [call["layer"] for call in config["calls"]] == ["shared", "shared", "add", "shared"]
    again = tp.Model.from_config(json.loads(json.dumps(config)))
    assert again.get_config() == config
    assert again.input_names == ["a", "b"] and again.output_names == ["left", "sum"]


def test_an_unregistered_class_is_named_with_the_fix() -> None:
    class Mine(tp.layers.Layer):
        def call(self, x: Any) -> Any:
            return x

    with pytest.raises(
        ValueError, match=r"Mine is not a built-in class; decorate it with @tp.register_serializable"
    ):
        tp.layers.Sequential([Mine()]).get_config()


def test_an_unregistered_function_is_named() -> None:
    def halve(x: Any) -> Any:
        return x / 2

    with pytest.raises(ValueError, match=r"halve .*cannot be saved in a model file.*register_serializable"):
        tp.layers.Lambda(halve).get_config()


def test_register_serializable_refuses_a_taken_name() -> None:
    with pytest.raises(ValueError, match=r"the name 'tests\.double' is taken"):
        tp.register_serializable(lambda x: x, name="tests.double")


def test_a_config_with_an_unknown_key_is_refused_naming_it() -> None:
    with pytest.raises(ValueError, match="Dense: unknown key 'unitz'"):
        tp.layers.Dense.from_config({"unitz": 3})


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"module": "tapefit.layers", "class_name": "os.system", "config": {}}, "is an import path"),
        ({"module": "custom", "class_name": "pkg.mod:Evil", "config": {}}, "not registered .*never import"),
        (
            {"module": "tapefit.layers", "class_name": "Nope", "config": {}},
            "'Nope' is not a class of tapefit.layers",
        ),
        ({"module": "builtins", "class_name": "eval", "config": {}}, "unknown module 'builtins'"),
        ({"module": "tapefit.layers", "class_name": "Dense", "config": {}, "x": 1}, "unknown key 'x'"),
    ],
)
def test_deserialize_looks_classes_up_and_imports_nothing(entry: dict[str, Any], message: str) -> None:
    with pytest.raises(serialization.ConfigError, match=message):
        serialization.deserialize(entry, serialization.layer_tables(), "model")


def test_every_keras_layer_argument_is_in_the_config() -> None:
    signature = inspect.signature(tp.layers.Conv2D.__init__)
    config = tp.layers.Conv2D(2, 3).get_config()
    assert set(config) == {k for k in signature.parameters if k != "self"}
    assert np.array(config["kernel_size"]).tolist() == [3, 3] or config["kernel_size"] == 3


def test_a_value_that_is_not_plain_is_named_on_one_line() -> None:
    @tp.register_serializable(name="tests.FromArray")
    class FromArray(tp.layers.Layer):
        def __init__(self, values: Any, name: str | None = None) -> None:
            super().__init__(name=name)
            self.values = values

    with pytest.raises(ValueError, match=r"\.values: a ndarray .* is not a plain value") as caught:
        FromArray(np.ones((30, 30)), name="fa").get_config()
    assert "\n" not in str(caught.value) and len(str(caught.value)) < 300


@tp.register_serializable(name="tests.OnlyItsOwnArguments")
class OnlyItsOwnArguments(tp.layers.Layer):
    """The serialization guide's custom layer: a config without the layer's name."""

    def __init__(self, factor: float) -> None:
        super().__init__()
        self.factor = factor

    def call(self, x: Any) -> Any:
        return x * self.factor

    def get_config(self) -> dict[str, Any]:
        return {"factor": self.factor}


@tp.register_serializable(name="tests.UpdatesTheBaseConfig")
class UpdatesTheBaseConfig(tp.layers.Layer):
    """A custom layer whose get_config adds its argument to the base class's."""

    def __init__(self, units: int = 32, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.units = units

    def build(self, input_shape: Any) -> None:
        self.w = self.add_weight(shape=(input_shape[-1], self.units), initializer="random_normal")

    def call(self, x: Any) -> Any:
        return tp.matmul(x, self.w)

    def get_config(self) -> dict[str, Any]:
        config = super().get_config()
        config.update({"units": self.units})
        return config


def test_a_custom_layer_whose_config_has_no_name_loads_in_a_functional_model(tmp_path: Any) -> None:
    inputs = tp.Input((4,))
    outputs = UpdatesTheBaseConfig(3)(OnlyItsOwnArguments(0.5)(inputs))
    model = tp.Model(inputs, outputs)
    OnlyItsOwnArguments(1.0)  # takes the next default name, which a rebuilt layer would get
    model.save(tmp_path / "custom.tapefit")
    loaded = tp.models.load_model(tmp_path / "custom.tapefit")
    data = np.random.default_rng(0).standard_normal((2, 4)).astype(np.float32)
    np.testing.assert_array_equal(loaded(data).numpy(), model(data).numpy())
    assert [layer.name for layer in loaded.layers] == [layer.name for layer in model.layers]
    again = tp.Model.from_config(json.loads(json.dumps(model.get_config())))
    assert [layer.name for layer in again.layers][1:] == [layer.name for layer in model.layers][1:]
