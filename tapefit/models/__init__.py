"""``tp.models``: whole-model files, as ``keras.models``: ``save_model`` and ``load_model``.

A ``.tapefit`` file holds a model's architecture (its config, JSON) and its weights
(safetensors), and, when a ``Trainer`` saved it, the loss, metrics and loss weights it was made
with and the optimizer's config and state, so that training continues exactly where it stopped.
The optimizers a model holds as attributes (a GAN's two) keep their states in it too, whoever
saved it: the model's config makes them again, and the file gives back where they stood.
The file format and its checks live in ``tapefit.layers.saving``; this package adds what sits
above the layers: optimizers and their schedules.

Loading runs no code from the file: every class it names is looked up among tapefit's built-in
classes and those registered with ``@tp.register_serializable``; a file is untrusted input,
checked as checkpoints are (sizes before reading, JSON size and depth, unknown keys).
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import math
import os
from collections.abc import Mapping
from typing import Any

import numpy as np

from tapefit.core.messages import shown
from tapefit.layers import saving, serialization
from tapefit.layers.module import Module, weight_budget
from tapefit.layers.saving import ModelFileError
from tapefit.layers.serialization import register_serializable
from tapefit.layers.training_methods import held_optimizers

__all__ = [
    "CompiledModel",
    "ModelFileError",
    "clone_model",
    "load_compiled",
    "load_model",
    "model_from_json",
    "register_serializable",
    "save_model",
]

_COMPILE_KEYS = ("loss", "metrics", "loss_weights", "weighted_metrics")


def _tables() -> dict[str, dict[str, type]]:
    """Every built-in class a model file may name, by namespace."""
    from tapefit import optimizers
    from tapefit.optimizers import schedules

    tables = serialization.layer_tables()
    tables["tapefit.optimizers"] = {
        cls.__name__: cls
        for cls in vars(optimizers).values()
        if isinstance(cls, type) and issubclass(cls, optimizers.Optimizer) and cls is not optimizers.Optimizer
    }
    tables["tapefit.optimizers.schedules"] = {
        cls.__name__: cls
        for cls in vars(schedules).values()
        if isinstance(cls, type)
        and issubclass(cls, schedules.LearningRateSchedule)
        and cls is not schedules.LearningRateSchedule
    }
    return tables


def _optimizer_entry(optimizer: Any) -> dict[str, Any]:
    """The optimizer's serialized form, its learning-rate schedule nested as an object."""
    from tapefit.optimizers import schedules

    config = dict(optimizer.get_config())
    if isinstance(config.get("learning_rate"), Mapping):  # {"type": ...}: made an object again
        config["learning_rate"] = schedules.deserialize(config["learning_rate"])
    return serialization.entry(type(optimizer), config, "optimizer")


def save_model(
    model: Module,
    path: str | os.PathLike[str],
    *,
    optimizer: Any = None,
    loss: Any = None,
    metrics: Any = None,
    loss_weights: Any = None,
    weighted_metrics: Any = None,
) -> None:
    """Writes ``model`` (and optionally what a trainer trains it with) to one ``.tapefit`` file.

    ``model.save(path)`` calls this with the model alone; ``Trainer.save(path)`` with its
    optimizer, loss, metrics and loss weights. Either way the states of the optimizers the model
    holds as attributes are saved (as Keras's ``model.save`` keeps them with the model). The
    file is written atomically.

    Args:
        model: the model; built-in layers and registered classes only.
        path: the file; its name must end in ``.tapefit`` and its folder must exist.
        optimizer: the optimizer; its config and its state (step count, slots) are saved.
        loss: the loss as given to ``Trainer`` (a name, a loss object, a registered function,
            or a list or dict of them, one per output).
        metrics: the metrics as given to ``Trainer`` (names, metric objects).
        loss_weights: the loss weights as given to ``Trainer``.
        weighted_metrics: the weighted metrics as given to ``Trainer``.

    Raises:
        ValueError: something in the model or the compile state that a file cannot describe
            (an unregistered class or function, a plain callable learning rate), named.
    """
    compile_config = None
    given = (optimizer, loss, metrics, loss_weights, weighted_metrics)
    if any(value is not None for value in given):
        compile_config = {
            "loss": serialization.to_plain(loss, "loss"),
            "metrics": serialization.to_plain(metrics, "metrics"),
            "loss_weights": serialization.to_plain(loss_weights, "loss_weights"),
        }
        if weighted_metrics is not None:  # files without it read as before
            compile_config["weighted_metrics"] = serialization.to_plain(weighted_metrics, "weighted_metrics")
    saving.save_model(
        model,
        path,
        compile_config=compile_config,
        optimizer_entry=None if optimizer is None else _optimizer_entry(optimizer),
        optimizer_state=None if optimizer is None else optimizer.get_state(),
    )


@dataclasses.dataclass
class CompiledModel:
    """A model file's contents rebuilt: the model and what it was trained with.

    Attributes:
        model: the model, with its weights.
        optimizer: the optimizer with its state restored (``None`` if the file has none).
        loss: the loss as the trainer was given it (names stay names).
        metrics: the metrics as the trainer was given them.
        loss_weights: the loss weights as the trainer was given them.
        weighted_metrics: the weighted metrics as the trainer was given them.
    """

    model: Module
    optimizer: Any
    loss: Any
    metrics: Any
    loss_weights: Any
    weighted_metrics: Any = None


def load_compiled(
    path: str | os.PathLike[str], custom_objects: Mapping[str, Any] | None = None
) -> CompiledModel:
    """Rebuilds a ``.tapefit`` file's model, optimizer (with its state), loss and metrics; each
    optimizer the rebuilt model holds gets the state saved under its attribute name.

    ``Trainer.load(path)`` makes a trainer of them; ``load_model`` returns the model alone.

    Raises:
        FileNotFoundError: there is no such file.
        ModelFileError: the file is not a model file, lies about its sizes, holds JSON that is
            too large or too deep, names an unknown key or class, or holds optimizer states
            that the optimizers (or the model's optimizers, by name) cannot take (one line
            naming the file and the problem).
    """
    contents = saving.read_model_file(path)
    tables = _tables()
    try:
        with serialization.custom_object_scope(custom_objects):
            return _load_compiled(contents, tables)
    except serialization.ConfigError as error:
        raise ModelFileError(f"load_model: '{path}': {error}") from None


def _load_compiled(contents: saving.ModelFile, tables: dict[str, dict[str, type]]) -> CompiledModel:
    """``load_compiled``'s work, inside its custom-object scope."""
    model = _rebuild_model(contents, tables)
    optimizer = None
    if contents.config["optimizer"] is not None:
        optimizer = _rebuild_optimizer(contents.config["optimizer"], tables)
        assert contents.optimizer_state is not None  # read_model_file checks they come together
        try:
            optimizer.check_state(contents.optimizer_state, model.trainable_variables)
            optimizer.set_state(contents.optimizer_state)
        except (TypeError, ValueError) as error:
            raise serialization.ConfigError(f"the optimizer's state: {_first_line(error)}") from None
    _restore_held_optimizers(model, contents.held_optimizer_states)
    compile_config = contents.config["compile_config"] or {
        "loss": None,
        "metrics": None,
        "loss_weights": None,
    }
    unknown = [k for k in compile_config if k not in _COMPILE_KEYS]
    if unknown:
        raise serialization.ConfigError(
            f"unknown key {shown(unknown[0])} in compile_config (known: {', '.join(_COMPILE_KEYS)})"
        )
    compiled = {k: serialization.from_plain(compile_config.get(k), tables, k) for k in _COMPILE_KEYS}
    _check_compiled(compiled)
    return CompiledModel(
        model,
        optimizer,
        compiled["loss"],
        compiled["metrics"],
        compiled["loss_weights"],
        compiled["weighted_metrics"],
    )


def load_model(path: str | os.PathLike[str], custom_objects: Mapping[str, Any] | None = None) -> Module:
    """The model a ``.tapefit`` file holds, with its weights (``keras.models.load_model``).

    Nothing the file names is imported or run: classes are tapefit's built-in ones, yours
    registered with ``@tp.register_serializable`` (import the module that registers them
    first), or those given in ``custom_objects``. Predictions equal the saved model's bit for bit.

    Args:
        path: the ``.tapefit`` file.
        custom_objects: classes and functions by the names the file gives them (a registered
            ``"package>Name"`` is found by ``"Name"`` too), as Keras's ``custom_objects``.

    Raises:
        FileNotFoundError: there is no such file.
        ModelFileError: as ``load_compiled``; an unregistered class is named with the fix.
    """
    return load_compiled(path, custom_objects).model


def clone_model(model: Module) -> Module:
    """A new model of the same config as ``model``, with new weights (``keras.models.clone_model``):
    the same layers, names and graph, none of its variables shared.

    Raises:
        ValueError: (``ConfigError``) the model holds what a config cannot describe (named).
    """
    entry = serialization.serialize(model, f"clone_model: {type(model).__name__}")
    clone = serialization.deserialize(entry, _tables(), "clone_model")
    _build(clone, saving.build_config(model))  # variables as the model's first call made them
    return clone


def model_from_json(json_string: str, custom_objects: Mapping[str, Any] | None = None) -> Module:
    """The model ``model.to_json()`` described, with new weights (``keras.models.model_from_json``).

    Args:
        json_string: the JSON text.
        custom_objects: classes and functions by name, beside the built-in and registered ones.

    Raises:
        ValueError: (``ConfigError``) the text is not JSON, or names an unknown class or key.
    """
    try:
        entry = json.loads(json_string)
    except (TypeError, ValueError) as error:
        raise serialization.ConfigError(f"model_from_json: not JSON ({_first_line(error)})") from None
    build = None
    if isinstance(entry, dict) and "build_config" in entry:  # to_json's, beside the entry
        entry = dict(entry)
        build = entry.pop("build_config")
    with serialization.custom_object_scope(custom_objects):
        try:
            model = serialization.deserialize(entry, _tables(), "model_from_json")
        except RecursionError:
            raise serialization.ConfigError("model_from_json: the model's layers nest too deeply") from None
        try:
            _build(model, build)  # also refuses what is not a model
        except serialization.ConfigError as error:
            raise serialization.ConfigError(f"model_from_json: {error}") from None
    return model


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def _rebuild_model(contents: saving.ModelFile, tables: dict[str, dict[str, type]]) -> Module:
    # The config may ask for no more weights than the file holds: a crafted Dense(units=10**9)
    # is refused before it allocates.
    with weight_budget(sum(array.size for array in contents.weights.values())):
        try:
            model = serialization.deserialize(contents.config["model"], tables, "model")
        except RecursionError:
            raise serialization.ConfigError("the model's layers nest too deeply") from None
        _build(model, contents.config["build_config"])
    try:
        model.set_weights([contents.weights[path] for path in contents.config["weight_paths"]])
    except ValueError as error:
        raise serialization.ConfigError(f"the weights do not fit the model: {_first_line(error)}") from None
    return model


def _restore_held_optimizers(model: Module, states: dict[str, dict[str, Any]]) -> None:
    """Gives each optimizer the rebuilt model holds (its config made it) the state saved under
    its attribute name, after checking them all: the same names, and each state one its
    optimizer takes for the model's variables."""
    held = held_optimizers(model)
    if sorted(states) != sorted(held):
        raise serialization.ConfigError(
            f"{saving.HELD_OPTIMIZERS_MEMBER} holds the states of {sorted(states)}, the model holds the "
            f"optimizers {sorted(held)}"
        )
    for name, optimizer in held.items():
        try:
            _check_held_state(optimizer, states[name], model.trainable_variables)
        except (TypeError, ValueError) as error:
            raise serialization.ConfigError(
                f"{saving.HELD_OPTIMIZERS_MEMBER}: {name}: {_first_line(error)}"
            ) from None
    for name, optimizer in held.items():
        optimizer.set_state(states[name])


def _check_held_state(optimizer: Any, state: dict[str, Any], variables: list[Any]) -> None:
    """``Optimizer.check_state`` for an optimizer the model holds. Which of the model's variables
    it updates shows only when its step runs, so unless it has seen them already, its slots
    are checked against the model's variables as a whole: no more positions than there are
    variables, each slot of a shape one of them has (``set_state`` checks the rest when the
    optimizer first sees its variables)."""
    seen = list(getattr(optimizer, "_variables", ()))
    if seen:
        optimizer.check_state(state, seen)
        return
    optimizer.check_state(state)
    shapes = {tuple(variable.shape) for variable in variables}
    for key, value in state.items():
        name, _, position = str(key).rpartition("/")
        if not name:
            continue  # iterations, learning_rate
        if int(position) >= len(variables):
            raise ValueError(
                f"set_state: the state holds slots for variable {position}, but the model has "
                f"{len(variables)} trainable variables"
            )
        if tuple(np.shape(value)) not in shapes:
            raise ValueError(
                f"set_state: slot {shown(key)} has shape {tuple(np.shape(value))}, which none of the "
                "model's trainable variables has"
            )


def _build(model: Any, build: Any) -> None:
    """Makes the variables of a rebuilt model as its first call did, from ``build_config``."""
    if not isinstance(model, Module):
        raise serialization.ConfigError(f"'model' describes a {type(model).__name__}, not a model")
    if build is None:
        return
    unknown = [k for k in build if k not in ("input_spec", "layers")]
    if unknown:
        raise serialization.ConfigError(f"unknown key {shown(unknown[0])} in build_config")
    if ("input_spec" in build) == ("layers" in build):
        raise serialization.ConfigError("build_config holds one of 'input_spec' and 'layers'")
    targets = [(model, build.get("input_spec"), "the model")]
    if "layers" in build:
        if not isinstance(build["layers"], dict):
            raise serialization.ConfigError("build_config.layers must be an object")
        targets = []
        for name, spec in build["layers"].items():
            layer = vars(model).get(name)
            if not isinstance(layer, Module):
                raise serialization.ConfigError(
                    f"build_config.layers: the model holds no layer {shown(name)} to build"
                )
            targets.append((layer, spec, f"its layer {shown(name)}"))
    for target, spec, what in targets:
        try:
            saving.build_from_spec(target, spec)
        except (TypeError, ValueError, IndexError, MemoryError, NotImplementedError) as error:
            raise serialization.ConfigError(f"{what} cannot be built: {_first_line(error)}") from None


def _rebuild_optimizer(entry: Any, tables: dict[str, dict[str, type]]) -> Any:
    from tapefit.optimizers import Optimizer

    cls, config = serialization.lookup(
        entry, {"tapefit.optimizers": tables["tapefit.optimizers"]}, "optimizer"
    )
    if not (isinstance(cls, type) and issubclass(cls, Optimizer)):
        raise serialization.ConfigError(f"optimizer: {shown(entry['class_name'])} is not an optimizer")
    serialization.check_arguments(cls, config)
    learning_rate = config.get("learning_rate")
    if serialization.is_entry(learning_rate):
        schedules = {"tapefit.optimizers.schedules": tables["tapefit.optimizers.schedules"]}
        config = {
            **config,
            "learning_rate": serialization.deserialize(learning_rate, schedules, "optimizer.learning_rate"),
        }
    elif isinstance(learning_rate, (dict, list)):
        raise serialization.ConfigError("optimizer: learning_rate must be a number or a schedule's entry")
    for key, value in config.items():
        if key != "learning_rate" and isinstance(value, (dict, list)):
            raise serialization.ConfigError(f"optimizer: {key} must be a plain value")
    try:
        inspect.signature(cls).bind(**config)
        return cls.from_config(config)
    except (TypeError, ValueError) as error:
        raise serialization.ConfigError(f"optimizer {cls.__name__}: {_first_line(error)}") from None


def _check_compiled(compiled: dict[str, Any]) -> None:
    """Checks the loss, metrics and loss weights a file names as a trainer will take them: a loss
    by name, a loss object or a registered function, metrics likewise, and finite weights; each
    alone or in a list or dict (one per output)."""
    from tapefit.layers import losses, metrics

    def each(value: Any, where: str) -> Any:
        if isinstance(value, list):
            return [(v, f"{where}[{i}]") for i, v in enumerate(value)]
        if isinstance(value, dict):
            return [(v, f"{where}.{k}") for k, v in value.items()]
        return [(value, where)]

    def check(value: Any, where: str, kind: type, get: Any) -> None:
        if value is None:
            return
        if isinstance(value, str):
            try:
                get(value)
            except ValueError as error:
                raise serialization.ConfigError(f"compile_config.{where}: {_first_line(error)}") from None
        elif not (isinstance(value, kind) or inspect.isfunction(value)):
            raise serialization.ConfigError(
                f"compile_config.{where}: expected a name, a {kind.__name__} or a registered function, "
                f"got {type(value).__name__} {shown(value)}"
            )

    for value, where in each(compiled["loss"], "loss"):
        check(value, where, losses.Loss, losses.get)
    for key in ("metrics", "weighted_metrics"):
        for value, where in each(compiled[key], key):
            for metric, at in each(value, where) if isinstance(value, (list, dict)) else [(value, where)]:
                check(metric, at, metrics.Metric, metrics.get)
    for value, where in each(compiled["loss_weights"], "loss_weights"):
        if value is not None and not (
            isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
        ):
            raise serialization.ConfigError(
                f"compile_config.{where}: expected a finite number, got {shown(value)}"
            )


def __dir__() -> list[str]:
    return sorted(__all__)
