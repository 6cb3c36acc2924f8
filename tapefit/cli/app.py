"""The ``train`` command: ``train --config FILE [--set KEY=VALUE ...] [--resume auto|PATH]``.

It reads and validates the config (every problem is one line naming the key, exit status 2,
before anything is built or written), builds the data, model, loss, metrics, optimizer and
plugins, checks that the model runs on the data, and only then creates the run's folder
(``runs/<name>/`` unless ``trainer.output_dir`` says otherwise), writes the resolved config
there and trains. Exit status: 0 done, 2 a bad command line or config, 1 a failure while
training, 130 interrupted (Ctrl-C), 143 SIGTERM, 129 SIGHUP: each of those three stops the run at
its next safe point with an interrupted checkpoint.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import difflib
import inspect
import json
import logging
import math
import os
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

import numpy as np

from tapefit.cli import config as _config
from tapefit.cli import run_folder as _run_folder
from tapefit.cli.config import ConfigError, Kind, Schema
from tapefit.cli.run_folder import RunFolderError, RunLock
from tapefit.core import random as _random
from tapefit.distributed.world import MPIWorld, launcher_rank, launcher_world_size, shard_problem
from tapefit.plugins.hookspecs import hookimpl
from tapefit.training.boundary import STOP_SIGNALS, raise_terminated

CONFIG_FILE_NAME = "config.yaml"
"""The resolved config in the run folder."""

MODEL_FILE_NAME = "model.safetensors"
"""The final weights in the run folder (with early_stopping's restore_best_weights, the best ones)."""

EXAMPLES = """\
examples:
  train --config configs/digits_mlp.yaml
      train the digits MLP; outputs go to runs/digits-mlp/
  train --config configs/digits_mlp.yaml --set trainer.epochs=5 --set optimizer.learning_rate=3e-3
      override any key; values are read as YAML (3, 3e-3, true, null, [64, 32])
  train --config configs/digits_mlp.yaml --resume auto --set trainer.epochs=40
      continue from the newest checkpoint of runs/digits-mlp/, up to epoch 40
  train --config configs/spirals_mlp.yaml --print-config
      show the config with every default filled in, then exit
  python -m tapefit train --config my_run.toml --set name=try-2 --set plugins[0].every_n_epochs=5

exit status: 0 done, 2 bad command line or config, 1 failure while training, 130 interrupted
  (Ctrl-C), 143 SIGTERM, 129 SIGHUP (each saves an interrupted checkpoint first)
watch a run: tensorboard --logdir runs
"""

logger = logging.getLogger("tapefit")


# --------------------------------------------------------------------------- the schema of configs


class _LazyTable(Mapping[str, Any]):
    """Names known up front, objects imported only when looked up (tensorboardX is slow)."""

    def __init__(self, names: Sequence[str], resolve: Callable[[str], Any]) -> None:
        self._names = list(names)
        self._resolve = resolve

    def __getitem__(self, name: str) -> Any:
        if name not in self._names:
            raise KeyError(name)
        return self._resolve(name)

    def __contains__(self, name: object) -> bool:
        return name in self._names  # without importing (Mapping's own would call __getitem__)

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)


def _data_types() -> dict[str, Callable[..., Any]]:
    from tapefit import data

    return {
        "digits": data.load_digits,
        "spirals": data.make_spirals,
        "npz": data.load_npz,
        "csv": data.load_csv,
        "npy": data.load_npy,
        "grain": grain_source,
    }


def grain_source(source: str, **kwargs: Any) -> Any:
    """``data.type: grain``: calls the ``@tp.configurable`` factory ``source`` (``pkg.module:name``)
    with the section's other keys; it returns a Grain data set or loader of ``(x, y)`` batches,
    or a ``(train, validation)`` pair of them."""
    factory = _config.import_object(source, "data.source")
    if not _config.is_configurable(factory):
        raise ConfigError(
            f"data.source: {source!r} is not a function marked with @tp.configurable", "data.source"
        )
    return factory(**kwargs)


def _model_types() -> dict[str, Callable[..., Any]]:
    from tapefit.cli import models

    return {"mlp": models.mlp, "cnn": models.cnn}


def _loss_types() -> dict[str, Callable[..., Any]]:
    from tapefit.layers import losses

    return dict(losses.registry)


class named_metric:  # lower case: it stands in the tables where functions stand
    """Stands for a built-in metric name in configs: such a metric takes only ``name``.

    A class, so the config's checks read ``name`` from its signature (a function in the
    metric section is a user's ``(y_true, y_pred)`` and takes no keys).
    """

    def __init__(self, name: str | None = None) -> None:
        self.name = name


def _metric_types() -> dict[str, Callable[..., Any]]:
    from tapefit.layers import metrics

    return dict.fromkeys(metrics.registry.names(), named_metric)


def _optimizer_types() -> dict[str, Callable[..., Any]]:
    from tapefit import optimizers

    return dict(optimizers.registry)


def _schedule_types() -> dict[str, Callable[..., Any]]:
    from tapefit.optimizers import schedules

    return dict(schedules.registry)


def _plugin_types() -> Mapping[str, Any]:
    from tapefit.plugins import manager

    return _LazyTable(manager.available_plugins(), manager.resolve_plugin)


def _subclass_of(base: Callable[[], type], required: str) -> Callable[[Any], str | None]:
    """Accepts a class deriving from ``base()`` (imported when first needed)."""

    def accepts(obj: Any) -> str | None:
        return None if isinstance(obj, type) and issubclass(obj, base()) else required

    return accepts


def _subclass_or_marked(base: Callable[[], type], required: str) -> Callable[[Any], str | None]:
    """Accepts a class deriving from ``base()``, or a function marked ``@tp.configurable``."""
    subclass = _subclass_of(base, required)

    def accepts(obj: Any) -> str | None:
        if not isinstance(obj, type) and _config.is_configurable(obj):
            return None
        return subclass(obj)

    return accepts


def _marked(obj: Any) -> str | None:
    return None if _config.is_configurable(obj) else "a function or class marked with @tp.configurable"


def _hook_implementations(obj: Any) -> list[str]:
    """The names of ``obj``'s attributes that carry ``@tp.hookimpl`` marks, read without calling anything."""
    from tapefit.plugins.hookspecs import PROJECT_NAME

    mark = f"{PROJECT_NAME}_impl"
    names = []
    for name in dir(obj):
        try:
            value = inspect.getattr_static(obj, name)
        except AttributeError:
            continue
        value = getattr(value, "__func__", value)  # staticmethod/classmethod
        if callable(value) and getattr(value, mark, None) is not None:
            names.append(name)
    return names


def _plugin_like(obj: Any) -> str | None:
    if (isinstance(obj, type) or inspect.ismodule(obj)) and _hook_implementations(obj):
        return None
    return "a plugin class or module with @tp.hookimpl methods"


def _module_class() -> type:
    from tapefit.layers import Module

    return Module


def _loss_class() -> type:
    from tapefit.layers.losses import Loss

    return Loss


def _metric_class() -> type:
    from tapefit.layers.metrics import Metric

    return Metric


def _optimizer_class() -> type:
    from tapefit.optimizers import Optimizer

    return Optimizer


def _schedule_class() -> type:
    from tapefit.optimizers.schedules import LearningRateSchedule

    return LearningRateSchedule


def default_schema() -> Schema:
    """The sections of a ``train`` config and their built-in types.

    An import path is checked against its section before anything it names is called
    (``Kind.accepts``): a model is a ``tp.Module`` subclass, an optimizer an ``Optimizer``
    subclass, a schedule a ``LearningRateSchedule`` subclass, a loss a ``Loss`` subclass or
    a ``@tp.configurable`` function, a metric a ``Metric`` subclass or a ``@tp.configurable``
    function, a data type a ``@tp.configurable`` function or class, a plugin a class or
    module with ``@tp.hookimpl`` methods.
    """
    kinds = {
        "data": Kind("data", _data_types, common=dict(_config.DATA_COMMON), accepts=_marked),
        "model": Kind("model", _model_types, accepts=_subclass_of(_module_class, "a tp.Module subclass")),
        "loss": Kind(
            "loss",
            _loss_types,
            call_functions=False,
            accepts=_subclass_or_marked(_loss_class, "a Loss subclass or a @tp.configurable loss function"),
        ),
        "metric": Kind(
            "metric",
            _metric_types,
            call_functions=False,
            fill_defaults=False,
            accepts=_subclass_or_marked(
                _metric_class, "a Metric subclass or a @tp.configurable metric function"
            ),
        ),
        "optimizer": Kind(
            "optimizer",
            _optimizer_types,
            nested={"learning_rate": "schedule"},
            accepts=_subclass_of(_optimizer_class, "an Optimizer subclass"),
        ),
        "schedule": Kind(
            "schedule",
            _schedule_types,
            accepts=_subclass_of(_schedule_class, "a LearningRateSchedule subclass"),
        ),
        "plugin": Kind("plugin", _plugin_types, accepts=_plugin_like),
    }
    return Schema(kinds)


# --------------------------------------------------------------------------- building the run


@dataclass
class Data:
    """The prepared data of a run.

    For a stream (``data.type: grain``, or ``data.workers``/``data.map`` on arrays), ``stream``
    is what ``fit`` reads; ``x_train``/``y_train`` are then the arrays it was made of, or for
    a grain source only its first batch, which the start-up checks run the model on.
    """

    x_train: np.ndarray
    y_train: np.ndarray
    validation: Any
    description: str
    stream: Any = None


@dataclass
class Run:
    """Everything ``train`` built from a config, ready to fit."""

    config: dict[str, Any]
    data: Data
    model: Any
    loss: Any
    metrics: list[Any]
    optimizer: Any
    plugins: list[Any]
    output_dir: Path
    trainer: Any
    resume_from: Path | None
    resume_epoch: int = 0
    lock: RunLock | None = None
    resume_note: str | None = None


def _fail(key: str, message: str) -> NoReturn:
    raise ConfigError(f"{key}: {message}", key)


def _error_text(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0] if text else ''}".rstrip(": ")


def _fail_building(key: str, entry: Mapping[str, Any], error: Exception) -> NoReturn:
    """Fails for an entry that raised ``error`` when built, at the key path of the argument the
    error names (``optimizer.learning_rate``: see ``argument_error``), else at ``key``."""
    argument = getattr(error, "argument", None)
    where = key
    if isinstance(argument, str):
        name = argument.partition("[")[0]
        path = _argument_path(entry, name)
        if path:
            where = f"{key}.{path}{argument[len(name) :]}"
    _fail(where, f"{entry['type']!r} could not be built: {_error_text(error)}")


def _argument_path(entry: Mapping[str, Any], name: str) -> str | None:
    """The key path of ``name`` in ``entry``, or in an entry nested in it (a schedule)."""
    if name in entry and name != "type":
        return name
    for key, value in entry.items():
        if isinstance(value, Mapping):
            inner = _argument_path(value, name)
            if inner is not None:
                return f"{key}.{inner}"
    return None


def _kwargs(entry: Mapping[str, Any], skip: Sequence[str] = ()) -> dict[str, Any]:
    return {k: v for k, v in entry.items() if k != "type" and k not in skip}


def build_data(section: dict[str, Any], schema: Schema) -> Data:
    """Loads the data of ``section`` (the resolved ``data`` config), splits and standardizes it."""
    from tapefit import data as _data

    target = _config.find_target(schema.kinds["data"], section["type"], "data.type")
    uses_grain = section["type"] == "grain" or section["workers"] or section["map"] is not None
    if uses_grain:  # imported before the user's modules import it, so quietly (require_grain)
        from tapefit.data.pipeline import require_grain

        try:
            require_grain()
        except ImportError as e:
            key = "type" if section["type"] == "grain" else "workers" if section["workers"] else "map"
            _fail(f"data.{key}", str(e))
    kwargs = _kwargs(section, skip=list(_config.DATA_COMMON))
    if "seed" in target.params:
        kwargs["seed"] = section["seed"]
    source = f"data.type {section['type']!r}"
    if section["type"] == "grain":
        return _grain_data(target, kwargs, section, source)
    try:
        x, y = target.obj(**kwargs)
        x, y = _data.check_arrays(x, y, source)
    except _data.DataError as e:
        key = f"data.{e.key}" if e.key else "data"
        _fail(key, str(e))
    except Exception as e:  # a user loader's own error, or one that does not return (x, y)
        _fail("data", f"{source} failed to load: {_error_text(e)}")
    try:
        (x_train, y_train), validation = _data.validation_split(
            x, y, section["validation_split"], section["seed"]
        )
    except _data.DataError as e:
        _fail("data.validation_split", str(e))
    if section["standardize"] and _data.is_lazy(x):
        _fail("data.standardize", "needs the features in memory; memory-mapped data is used as stored")
    if section["standardize"]:
        if validation is None:
            (x_train,), _ = _data.standardize(x_train)
        else:
            (x_train, x_val), _ = _data.standardize(x_train, validation[0])
            validation = (x_val, validation[1])
    n_val = 0 if validation is None else len(validation[0])
    description = f"{source}: {len(x_train)} training and {n_val} validation samples of shape {x.shape[1:]}"
    return Data(x_train, y_train, validation, description)


def _pipeline(data: Data, section: dict[str, Any], settings: dict[str, Any]) -> Any:
    """The training arrays as a ``tp.data.Pipeline`` (``data.workers``, ``data.prefetch``, ``data.map``)."""
    from tapefit import data as _data

    fn = None
    if section["map"] is not None:
        fn = _config.import_object(section["map"], "data.map")
        if not _config.is_configurable(fn):
            _fail("data.map", f"{section['map']!r} is not a function marked with @tp.configurable")
    try:
        return _data.Pipeline(
            data.x_train,
            data.y_train,
            batch_size=settings["batch_size"],
            map=fn,
            shuffle=settings["shuffle"],
            drop_last=settings["drop_last"],
            workers=section["workers"],
            prefetch=section["prefetch"],
            seed=section["seed"],
        )
    except ImportError as e:
        _fail("data.workers", str(e))
    except ValueError as e:
        _fail("trainer.batch_size", str(e))


def _check_steps(settings: dict[str, Any], data: Data) -> None:
    """``trainer.steps_per_epoch`` needs a stream, ``trainer.validation_steps`` a streamed validation."""
    from tapefit.data.sources import is_stream

    if settings["steps_per_epoch"] is not None and data.stream is None:
        _fail(
            "trainer.steps_per_epoch",
            "is for streamed data (data.type grain, data.workers or data.map); with arrays an epoch is one "
            "pass over them",
        )
    if settings["validation_steps"] is not None and not is_stream(data.validation):
        why = (
            "this run has no validation data"
            if data.validation is None
            else "this run's validation samples are arrays, evaluated whole"
        )
        _fail(
            "trainer.validation_steps",
            f"is for a streamed validation (the second data set of a grain source); {why}",
        )


def _check_ends(settings: dict[str, Any], data: Data) -> None:
    """A grain source that repeats without end needs ``trainer.steps_per_epoch`` to end its epochs."""
    from tapefit.data.sources import endless

    if settings["steps_per_epoch"] is None and endless(data.stream):
        _fail(
            "trainer.steps_per_epoch",
            "data.source repeats without end (a MapDataset.repeat() of no count), so an epoch would never "
            "end: set trainer.steps_per_epoch",
        )


def _mapped_batch(data: Data, section: dict[str, Any]) -> Data:
    """The first batch of ``data.stream`` (a pipeline with ``data.map``), made in this process, as
    the data the model is checked on; a map that fails or does not give ``(x, y)`` is a config error."""
    from tapefit.data.sources import split_batch

    try:
        first = data.stream.peek()
    except Exception as e:
        _fail("data.map", f"{section['map']!r} failed on the first batch: {_error_text(e)}")
    try:
        x, y = split_batch(first, 0)
        x, y = np.asarray(x), np.asarray(y)
    except Exception as e:
        _fail("data.map", f"{section['map']!r}: its first batch: {_error_text(e)}")
    stored = tuple(np.shape(data.x_train)[1:])
    if data.validation is not None and x.shape[1:] != stored:
        _fail(
            "data.map",
            f"{section['map']!r} turns samples of shape {stored} into {x.shape[1:]}, but the validation "
            "samples are used as stored (the map runs on training batches only): set data.validation_split: 0",
        )
    return Data(x, y, data.validation, data.description)


def _grain_workers(stream: Any, section: dict[str, Any]) -> Any:
    """A grain source read by ``data.workers`` processes (Grain's own ``mp_prefetch``)."""
    from tapefit.data.sources import GrainSource

    if section["map"] is not None:
        _fail(
            "data.map",
            "a grain source's elements are batches, and data.map is a function of one sample: map the "
            "samples in data.source's pipeline (dataset.map(fn) before .batch)",
        )
    if not section["workers"]:
        return stream
    try:
        return GrainSource.of(stream, workers=section["workers"], prefetch=section["prefetch"])
    except ValueError as e:
        _fail("data.workers", str(e))


def _grain_data(target: Any, kwargs: dict[str, Any], section: dict[str, Any], source: str) -> Data:
    """``data.type: grain``: the data set(s) the ``source`` factory returns."""
    from tapefit.data.sources import split_batch

    if section["validation_split"]:
        _fail(
            "data.validation_split",
            "a grain source is not split by train: set it to 0 and return (train, validation) data sets "
            "from data.source for validation",
        )
    if section["standardize"]:
        _fail("data.standardize", "a grain source is used as it comes: standardize in its pipeline")
    try:
        made = target.obj(**kwargs)
    except ConfigError:
        raise
    except Exception as e:
        _fail("data.source", f"{section['source']!r} failed: {_error_text(e)}")
    train, validation = made if isinstance(made, tuple) and len(made) == 2 else (made, None)
    try:
        first = next(iter(train.to_iter_dataset() if hasattr(train, "to_iter_dataset") else train))
        x, y = split_batch(first, 0)
        x, y = np.asarray(x), np.asarray(y)
    except StopIteration:
        _fail("data.source", f"{section['source']!r} gave an empty data set")
    except Exception as e:
        _fail("data.source", f"{section['source']!r}: its first batch: {_error_text(e)}")
    description = f"{source}: {section['source']}, batches of shape {x.shape}"
    return Data(x, y, validation, description, stream=train)


def _labels(data: Data) -> np.ndarray:
    """The labels of the training and the validation part together (a grain source's first batch)."""
    if data.validation is None or data.stream is not None:
        return data.y_train
    return np.concatenate([data.y_train, data.validation[1]])


def check_labels(loss_type: str, data: Data) -> None:
    """Checks that every label suits the loss, before a model is built for them.

    Sparse categorical cross-entropy takes class indices (whole numbers from 0; float labels
    that are whole numbers count, as in Keras); binary cross-entropy takes labels in [0, 1].
    Every label is looked at, the validation part's too, so a bad one deep in a file is
    reported here, not as a crash in the middle of training.
    """
    y = _labels(data)
    low: float  # an int for class indices
    high: float
    if loss_type == "sparse_categorical_crossentropy":
        need = f"{loss_type!r} needs class indices 0, 1, 2, ... as labels"
        if y.dtype.kind == "f":
            fractional = y[y != np.round(y)]
            if fractional.size:
                _fail("data", f"{need}, but some labels are not whole numbers ({fractional.flat[0]:g})")
        low, high = int(y.min()), int(y.max())
        if low < 0:
            _fail("data", f"{need}, but the labels go from {low} to {high}")
    elif loss_type == "binary_crossentropy":
        low, high = float(y.min()), float(y.max())
        if low < 0.0 or high > 1.0:
            _fail(
                "data",
                f"{loss_type!r} needs labels between 0 and 1, but the labels go from {low:g} to {high:g} "
                "(for class indices use sparse_categorical_crossentropy)",
            )


def loss_kind(section: dict[str, Any], schema: Schema) -> str:
    """The config name of the built-in loss that ``section`` names, whether by that name or by
    its class's import path, so that its labels are checked alike; else its ``type`` as written."""
    if ":" not in section["type"]:  # a config name already
        return str(section["type"])
    target = _config.find_target(schema.kinds["loss"], section["type"], "loss.type")
    return next((name for name, cls in _loss_types().items() if cls is target.obj), section["type"])


_MANY_CLASSES = 2**16
"""More classes than this, and than there are labels, is taken for a label column that holds
something else (identifiers, measurements): refused unless ``model.output_units`` says so."""


def _check_class_count(loss_type: str, units: int, data: Data) -> None:
    """A built-in model's class count comes from the highest label; one far beyond the number of
    labels would build an output layer of that size (memory without bound), so it is refused."""
    labels = _labels(data).size
    if loss_type == "sparse_categorical_crossentropy" and units > max(labels, _MANY_CLASSES):
        _fail(
            "data",
            f"the highest label is {units - 1}, so the model would need {units} outputs for {labels} "
            f"labels; check the label column, or set model.output_units: {units} if that is meant",
        )


def _output_defaults(loss: dict[str, Any], y: np.ndarray) -> tuple[int, str | None]:
    """The output layer a built-in model needs for these labels and this loss.

    Sparse categorical cross-entropy: one unit per class (labels 0..max), softmax.
    Categorical cross-entropy: one unit per label column, softmax. Binary cross-entropy: one
    unit per label column, sigmoid. With ``from_logits: true`` no activation. Any other loss
    (regression): one unit per label column, no activation.
    """
    loss_type = loss["type"]
    from_logits = bool(loss.get("from_logits", False))
    width = 1 if y.ndim == 1 else int(np.prod(y.shape[1:]))
    if loss_type == "sparse_categorical_crossentropy":  # check_labels made them whole numbers
        return max(int(y.max()) + 1, 2), None if from_logits else "softmax"
    if loss_type == "categorical_crossentropy":
        return width, None if from_logits else "softmax"
    if loss_type == "binary_crossentropy":
        return width, None if from_logits else "sigmoid"
    return width, None


_PROBABILITIES = {
    "sparse_categorical_crossentropy": "softmax",
    "categorical_crossentropy": "softmax",
    "binary_crossentropy": "sigmoid",
}


def _check_output_activation(activation: Any, loss: dict[str, Any]) -> None:
    """A built-in model's output activation must agree with the cross-entropy's ``from_logits``."""
    squash = _PROBABILITIES.get(loss["type"])
    if squash is None:
        return
    from_logits = bool(loss.get("from_logits", False))
    if from_logits and activation in ("softmax", "sigmoid"):
        _fail(
            "model.output_activation",
            f"{activation!r} gives probabilities, but loss.from_logits is true, so the loss would apply "
            f"{squash} a second time; leave output_activation out (or null)",
        )
    if not from_logits and activation in (None, "linear"):
        _fail(
            "model.output_activation",
            f"{_config._show(activation)} gives logits, but loss.from_logits is false, so the loss would "
            "read them as probabilities; set loss.from_logits: true, or leave output_activation out",
        )


def build_model(config: dict[str, Any], schema: Schema, data: Data) -> Any:
    """Builds the model of ``config["model"]``; fills a built-in model's output layer from the data."""
    from tapefit import layers

    section = config["model"]
    target = _config.find_target(schema.kinds["model"], section["type"], "model.type")
    loss = {**config["loss"], "type": loss_kind(config["loss"], schema)}
    if section["type"] in ("mlp", "cnn"):
        units, activation = _output_defaults(loss, _labels(data))
        if section.get("output_units") is None and config["data"]["type"] == "grain":
            _fail(
                "model.output_units",
                "a grain source is not read before training, so the classes are not known: give output_units",
            )
        if section.get("output_units") is None:
            _check_class_count(loss["type"], units, data)
            section["output_units"] = units
        if section.get("output_activation") == "auto":
            section["output_activation"] = activation
        _check_output_activation(section["output_activation"], loss)
        if section["type"] == "cnn" and data.x_train.ndim != 4:
            _fail(
                "model.type",
                f"'cnn' needs images of shape (samples, height, width, channels), but the data has shape "
                f"{data.x_train.shape}"
                + (" (set data.flatten: false)" if config["data"]["type"] == "digits" else ""),
            )
    try:
        model = target.obj(**_kwargs(section))
    except Exception as e:
        _fail_building("model", section, e)
    if not isinstance(model, layers.Module):
        _fail(
            "model.type",
            f"{section['type']!r} made a {type(model).__name__}, not a tapefit Module (tp.Module)",
        )
    return model


def _named(entry: dict[str, Any], key: str, build: Callable[[], Any]) -> Any:
    try:
        return build()
    except ConfigError:
        raise
    except Exception as e:
        _fail_building(key, entry, e)


def build_loss(section: dict[str, Any], schema: Schema) -> Any:
    """The loss object (or function) of the resolved ``loss`` entry."""
    target = _config.find_target(schema.kinds["loss"], section["type"], "loss.type")
    kwargs = _kwargs(section)
    if not target.params and not target.open and not kwargs and not isinstance(target.obj, type):
        return target.obj  # a user function (y_true, y_pred)
    return _named(section, "loss", lambda: target.obj(**kwargs))


def build_metrics(entries: list[dict[str, Any]], schema: Schema, loss: Any) -> list[Any]:
    """The metric objects of the resolved ``metrics`` list (``accuracy`` follows the loss)."""
    from tapefit.layers import metrics as _metrics

    built = []
    for i, entry in enumerate(entries):
        key = f"metrics[{i}]"
        target = _config.find_target(schema.kinds["metric"], entry["type"], f"{key}.type")
        kwargs = _kwargs(entry)
        make: Callable[[], Any]  # one of three, each with its own defaults
        if target.obj is named_metric:

            def make(entry: dict[str, Any] = entry, kwargs: dict[str, Any] = kwargs) -> Any:
                metric = _metrics.get(entry["type"], loss=loss)
                if kwargs.get("name"):
                    metric.name = kwargs["name"]
                return metric

        elif isinstance(target.obj, type):

            def make(target: _config.Target = target, kwargs: dict[str, Any] = kwargs) -> Any:
                return target.obj(**kwargs)

        else:

            def make(target: _config.Target = target) -> Any:
                return _metrics.get(target.obj)

        built.append(_named(entry, key, make))
    names = [getattr(m, "name", None) for m in built]
    for i, name in enumerate(names):
        if name == "loss" or names.index(name) != i:
            _fail(f"metrics[{i}]", f"the metric name {name!r} is taken; give it another with name: ...")
    return built


def build_optimizer(section: dict[str, Any]) -> Any:
    """The optimizer of the resolved ``optimizer`` entry (its schedule included)."""
    from tapefit import optimizers

    try:
        return optimizers.get(section)
    except Exception as e:
        _fail_building("optimizer", section, e)


def build_plugins(entries: list[dict[str, Any]]) -> list[Any]:
    """The plugin objects of the resolved ``plugins`` list, in order."""
    from tapefit.plugins import manager

    built = []
    for i, entry in enumerate(entries):
        try:
            plugin = manager.create_plugin(dict(entry))
        except Exception as e:
            _fail_building(f"plugins[{i}]", entry, e)
        try:  # a misspelt or unmarked hook is found here, and named with its entry
            manager.PluginManager().register(plugin)
        except manager.PluginValidationError as e:
            _fail(f"plugins[{i}]", str(e).strip().splitlines()[0])
        built.append(plugin)
    return built


def check_monitors(plugins: list[Any], metrics: list[Any], data: Data) -> None:
    """Checks that every plugin's ``monitor`` names a key the epoch logs will have.

    The keys are ``loss``, the metrics' names, their ``val_`` twins when there is validation
    data, and what each plugin's ``adds_log_keys`` lists (``learning_rate`` with
    ``reduce_lr_on_plateau``). A plugin without ``adds_log_keys`` may add keys of its own, so
    with one in the run a missing key stays a warning at the first epoch's end.
    """
    if not all(hasattr(plugin, "adds_log_keys") for plugin in plugins):
        return  # a plugin that does not say which keys it adds may add the one monitored
    keys = ["loss", *(m.name for m in metrics)]
    if data.validation is not None:
        keys += [f"val_{k}" for k in keys]
    keys += [key for plugin in plugins for key in plugin.adds_log_keys if key not in keys]
    for i, plugin in enumerate(plugins):
        monitor = getattr(plugin, "monitor", None)
        if not isinstance(monitor, str) or monitor in keys:
            continue
        why = ""
        if monitor.startswith("val_") and data.validation is None:
            why = " (there is no validation data: data.validation_split is 0)"
        close = difflib.get_close_matches(monitor, keys, n=1, cutoff=0.5)
        hint = f"; did you mean {close[0]!r}?" if close else "."
        _fail(
            f"plugins[{i}].monitor",
            f"{monitor!r} is not a key of this run's epoch logs{why}{hint} The keys are: {', '.join(keys)}",
        )


def check_model_on_data(
    model: Any, loss: Any, loss_type: str, data: Data, metrics: Sequence[Any] = ()
) -> None:
    """Runs the model, the loss and the metrics on two samples, so a mismatch is a config error, not a crash."""
    from tapefit.core.tensor import as_tensor

    x, y = data.x_train[:2], data.y_train[:2]
    try:
        out = model(as_tensor(x))
    except Exception as e:
        _fail("model", f"cannot run on the data (inputs of shape {x.shape[1:]} per sample): {_error_text(e)}")
    shape = tuple(getattr(out, "shape", ()))
    if loss_type == "sparse_categorical_crossentropy" and len(shape) >= 2:
        labels = _labels(data)
        low, high = int(labels.min()), int(labels.max())
        if high >= shape[-1]:
            _fail(
                "model",
                f"the model gives {shape[-1]} class scores per sample, but the labels go from {low} to {high}"
                f" (the model needs {high + 1} outputs)",
            )
    try:
        value = loss(as_tensor(y), out)
        float(value)
    except Exception as e:
        _fail(
            "loss",
            f"{loss_type!r} cannot compare labels of shape {y.shape} with model outputs of shape {shape}: "
            f"{_error_text(e)}",
        )
    for i, metric in enumerate(metrics):
        try:
            metric.update_state(y, out)
            float(metric.result())
        except Exception as e:
            _fail(
                f"metrics[{i}]",
                f"{metric.name!r} cannot compare labels of shape {y.shape} with model outputs of shape {shape}: "
                f"{_error_text(e)}",
            )
        finally:
            metric.reset_state()  # the two samples must not count in the first epoch


def _checkpoint_folder(plugins: list[Any], output_dir: Path) -> Path | None:
    """The folder of the first plugin that saves checkpoints (``checkpoint_folder``, hookspecs.py)."""
    for plugin in plugins:
        folder = getattr(plugin, "checkpoint_folder", None)
        if callable(folder):
            return Path(folder(output_dir))
    return None


def find_resume_point(resume: str, plugins: list[Any], output_dir: Path) -> tuple[Path | None, str | None]:
    """The checkpoint ``--resume`` means: ``auto`` the run's newest (or ``None``), else a path;
    and a note when ``auto`` could not follow the ``last`` pointer and took the newest intact one."""
    from tapefit import checkpointing as _checkpoint

    if resume == "auto":
        folder = _checkpoint_folder(plugins, output_dir)
        if folder is None:
            raise ConfigError(
                "--resume auto: the config has no checkpoint plugin, so there is nothing to resume"
            )
        try:
            return _checkpoint.resume_point(folder)
        except (OSError, ValueError) as e:
            raise ConfigError(
                f"--resume auto: {e}; not starting over on top of the run (repair the pointer, or start "
                "afresh with --overwrite)"
            ) from e
    try:
        path = _checkpoint.resolve_checkpoint(resume)
        _checkpoint.load_checkpoint(path)  # verified now, so a bad file is a start-up error
    except (OSError, ValueError) as e:
        raise ConfigError(f"--resume: {e}") from e
    return path, None


def _check_resume_fits(path: Path, model: Any, config: dict[str, Any], data: Data) -> int:
    """Checks that the checkpoint at ``path`` can continue this config; returns its epoch."""
    from tapefit import checkpointing as _checkpoint
    from tapefit.checkpointing.validate import check_checkpoint, check_fits
    from tapefit.data.loader import BatchLoader
    from tapefit.data.sources import as_source, fit_kind

    try:
        contents = _checkpoint.load_checkpoint(path)
        check_checkpoint(contents, model=model, num_samples=len(data.x_train), source=path)
    except (OSError, ValueError) as e:
        raise ConfigError(f"--resume: {e}") from e
    settings = config["trainer"]
    if data.stream is not None:
        source = as_source(data.stream)
    else:
        source = BatchLoader(
            data.x_train,
            data.y_train,
            batch_size=settings["batch_size"],
            shuffle=settings["shuffle"],
            drop_last=settings["drop_last"],
        )
    try:
        check_fits(contents, fit_kind(source), path)
    except ValueError as e:
        raise ConfigError(f"--resume: {e}") from e
    state = contents.get("trainer", {})
    scratch = build_optimizer(copy.deepcopy(config["optimizer"]))
    try:  # a fresh optimizer of the config's kind takes the saved state, or says why not
        scratch.set_state(contents.get("optimizer", {}))
    except (ValueError, KeyError, TypeError) as e:
        raise ConfigError(
            f"--resume: {path} holds the state of another optimizer than the config's "
            f"({str(e).strip().splitlines()[0]})"
        ) from e
    return int(state.get("epoch", 0))


def _check_plugin_states(path: Path, trainer: Any) -> None:
    """Has each plugin of the run check its state in the checkpoint at ``path`` (by the names
    the trainer registered them under), so that a bad one is refused before training."""
    from tapefit import checkpointing as _checkpoint
    from tapefit.checkpointing.validate import check_plugin_states

    try:
        states = _checkpoint.load_checkpoint(path)["plugins"]
        check_plugin_states(states, trainer.plugins.list_name_plugin(), model=trainer.model, source=path)
    except (OSError, ValueError) as e:
        raise ConfigError(f"--resume: {e}") from e


def resolve(args: argparse.Namespace, schema: Schema) -> dict[str, Any]:
    """Reads the config file, applies ``--set`` and validates it; calls nothing the config names."""
    raw = _config.load_config_file(args.config)
    raw = _config.apply_overrides(raw, args.set)
    stem = Path(args.config).stem.replace("_", "-")
    return _config.resolve_config(raw, schema, default_name=stem)


def prepare(args: argparse.Namespace) -> Run:
    """Reads, validates and builds everything; raises ``ConfigError`` before anything is written."""
    from tapefit.training.trainer import Trainer

    schema = default_schema()
    config = resolve(args, schema)
    _random.set_seed(config["seed"])
    data = build_data(config["data"], schema)
    check_labels(loss_kind(config["loss"], schema), data)
    model = build_model(config, schema, data)
    loss = build_loss(config["loss"], schema)
    metrics = build_metrics(config["metrics"], schema, loss)
    optimizer = build_optimizer(config["optimizer"])
    plugins = build_plugins(config["plugins"])
    check_monitors(plugins, metrics, data)
    settings = config["trainer"]
    checked = data  # what the model is checked on: a map's first batch when there is a map
    if config["data"]["type"] == "grain":
        _check_ends(settings, data)
        data.stream = _grain_workers(data.stream, config["data"])
    elif config["data"]["workers"] or config["data"]["map"] is not None:
        data.stream = _pipeline(data, config["data"], settings)
        if config["data"]["map"] is not None:
            checked = _mapped_batch(data, config["data"])
    check_model_on_data(model, loss, loss_kind(config["loss"], schema), checked, metrics)
    _check_steps(settings, data)
    if config["data"]["workers"] or config["data"]["map"] is not None:
        data.description += f", read by {config['data']['workers']} worker processes"
    if data.stream is not None and config["data"]["type"] == "grain":
        pass  # a grain source makes its own batches: nothing to check against batch_size
    elif settings["drop_last"] and settings["batch_size"] > len(data.x_train):
        _fail(
            "trainer.batch_size",
            f"{settings['batch_size']} is more than the {len(data.x_train)} training samples, and "
            "trainer.drop_last is true, so there would be no batch",
        )
    problem = shard_problem(
        len(data.x_train), settings["batch_size"], settings["drop_last"], launcher_world_size()
    )
    if problem is not None and config["data"]["type"] != "grain":
        _fail("trainer.batch_size", problem)
    output_dir = Path(config["trainer"]["output_dir"] or Path("runs") / config["name"])
    try:
        if output_dir.exists() and not output_dir.is_dir():
            _fail("trainer.output_dir", f"{str(output_dir)!r} exists and is not a folder")
    except (OSError, ValueError) as e:  # a name too long, a NUL byte: as the lock would say
        _cannot_use(output_dir, e)
    # Locked before a checkpoint is looked for or a folder judged, so that what is checked
    # stays true while this run lives; a second train of the same folder stops here. Under an
    # MPI launcher rank 0 alone owns the folder (the others write nothing to it).
    chief = launcher_rank() == 0
    lock = _lock(output_dir) if chief else None
    try:
        resume_from, resume_epoch, resume_note = None, 0, None
        if chief:
            _run_folder.check_no_links(output_dir)
        if args.resume is not None:
            resume_from, resume_note = find_resume_point(args.resume, plugins, output_dir)
            if resume_from is not None:
                resume_epoch = _check_resume_fits(resume_from, model, config, data)
        if not chief:
            pass
        elif resume_from is None:
            _check_output_dir(output_dir, args)
        else:
            _check_resume_target(resume_from, args.resume, plugins, output_dir)
        try:  # registering the plugins checks their hooks (a misspelt hook name is an error)
            trainer = Trainer(
                model,
                optimizer,
                loss,
                metrics=metrics,
                plugins=plugins,
                output_dir=output_dir,
                config=config,
                compile=config["trainer"].get("compile", False),
                threads=config["trainer"].get("threads"),
            )
        except Exception as e:
            raise ConfigError(f"plugins: {_error_text(e)}", "plugins") from e
        if resume_from is not None:
            _check_plugin_states(resume_from, trainer)
    except RunFolderError as e:
        if lock is not None:
            lock.release(undo=True)
        raise ConfigError(str(e)) from None
    except BaseException:
        if lock is not None:
            lock.release(undo=True)
        raise
    return Run(
        config,
        data,
        model,
        loss,
        metrics,
        optimizer,
        plugins,
        output_dir,
        trainer,
        resume_from,
        resume_epoch,
        lock,
        resume_note,
    )


def _lock(output_dir: Path) -> RunLock:
    """Takes the run folder's lock, or says in one line why it cannot be taken."""
    try:
        return RunLock.acquire(output_dir)
    except RunFolderError as e:
        raise ConfigError(str(e)) from None
    except (OSError, ValueError) as e:
        _cannot_use(output_dir, e)


def _cannot_use(output_dir: Path, error: OSError | ValueError) -> NoReturn:
    reason = error.strerror if isinstance(error, OSError) and error.strerror else str(error)
    shown = str(output_dir) if len(str(output_dir)) <= 80 else str(output_dir)[:77] + "..."
    _fail("trainer.output_dir", f"cannot make or lock the run folder {shown!r}: {reason}")


def _check_output_dir(output_dir: Path, args: argparse.Namespace) -> None:
    if not _run_folder.entries(output_dir):
        return
    if not _run_folder.is_run_folder(output_dir):
        what = "--resume auto: it has no checkpoint, and " if args.resume == "auto" else ""
        raise ConfigError(
            f"{what}{output_dir} holds files and is not a tapefit run folder (train did not make it); "
            "not writing into it: pick another name (--set name=...) or trainer.output_dir"
        )
    if args.resume == "auto":
        return  # asked to continue, and nothing to continue from: start afresh in the run folder
    if not args.overwrite:
        raise ConfigError(
            f"{output_dir} already holds a run; continue it with --resume auto, start over with --overwrite, "
            "or pick another name (--set name=...)"
        )


def _check_resume_target(resume_from: Path, resume: str, plugins: list[Any], output_dir: Path) -> None:
    """A checkpoint from elsewhere may continue in an empty folder, never over another run's files."""
    own = [output_dir, _checkpoint_folder(plugins, output_dir)]
    if any(folder is not None and resume_from.resolve().is_relative_to(folder.resolve()) for folder in own):
        return
    if _run_folder.entries(output_dir):
        raise ConfigError(
            f"--resume {resume}: {output_dir} already holds another run and the checkpoint is not one of its "
            "own; continue it in a new folder (--set name=...)"
        )


# --------------------------------------------------------------------------- training and the report


def _format_logs(logs: Mapping[str, float]) -> str:
    # loss first, then the metrics, then their validation twins, whatever order they came in
    order = sorted(logs, key=lambda k: (k.startswith("val_"), k.removeprefix("val_") != "loss"))
    logs = {k: logs[k] for k in order}
    return "  ".join(f"{k} {v:.4f}" if isinstance(v, float) else f"{k} {v}" for k, v in logs.items())


def train(run: Run, args: argparse.Namespace, out: Any) -> int:
    """Creates the run folder, writes the resolved config, fits, and prints the summary."""
    chief = launcher_rank() == 0  # under an MPI launcher rank 0 alone writes the run's files
    if chief and run.resume_from is None and args.overwrite and _run_folder.is_run_folder(run.output_dir):
        kept = _run_folder.remove_recorded(run.output_dir)  # the lock stays: this run holds it
        if kept:
            print(
                f"train: --overwrite kept what no run wrote in {run.output_dir}: {', '.join(kept)}", file=out
            )
    trainer = run.trainer
    settings = run.config["trainer"]
    print(f"train: {run.config['name']}: {run.data.description}", file=out)
    if run.resume_from is not None:
        from tapefit.checkpointing import load_checkpoint

        contents = load_checkpoint(run.resume_from)
        finished = trainer.finished_by(contents)
        if finished is not None:
            print(
                f"train: {run.resume_from}: {finished}; nothing to train (to train on anyway, remove "
                "that plugin from the config)",
                file=out,
            )
            return 0
    if run.resume_from is not None and run.resume_epoch >= settings["epochs"]:
        print(f"train: resuming from {run.resume_from}", file=out)
        print(
            f"train: the checkpoint has {run.resume_epoch} epochs done and trainer.epochs is "
            f"{settings['epochs']}: nothing to train (train longer with --set trainer.epochs=N)",
            file=out,
        )
        return 0  # and nothing written: the run folder stays as the finished run left it
    if chief:
        _claim(run)
    if run.resume_note is not None:
        print(f"train: --resume auto: {run.resume_note}", file=out)
    if run.resume_from is not None:
        _say_the_learning_rate_is_restored(contents, args, out)
    if run.resume_from is None and args.resume == "auto":
        folder = _checkpoint_folder(run.plugins, run.output_dir)
        print(
            f"train: --resume auto: no checkpoint in {folder} yet, so training starts from the beginning",
            file=out,
        )
    if run.resume_from is not None:
        print(f"train: resuming from {run.resume_from}", file=out)
    started = time.perf_counter()
    streamed = run.data.stream is not None
    recorder = _RunFolderRecorder(run.output_dir) if chief else None
    if recorder is not None:
        trainer.plugins.register(recorder, name="run_folder")
    try:
        history = trainer.fit(
            run.data.stream if streamed else run.data.x_train,
            None if streamed else run.data.y_train,
            epochs=settings["epochs"],
            batch_size=settings["batch_size"],
            validation_data=run.data.validation,
            shuffle=settings["shuffle"],
            drop_last=settings["drop_last"],
            resume_from=run.resume_from,
            verbose=settings["verbose"],
            steps_per_epoch=settings["steps_per_epoch"],
            validation_steps=settings["validation_steps"],
        )
    finally:
        if recorder is not None:
            recorder.record()
    seconds = time.perf_counter() - started
    final = {k: v[-1] for k, v in history.history.items() if v}
    epochs = len(history.history.get("loss", []))
    trained = max(epochs - run.resume_epoch, 0) if run.resume_from is not None else epochs
    total = f" ({epochs} in all)" if run.resume_from is not None else ""
    failure = _failure(run.plugins, final)
    if failure is None and chief:
        _run_folder.record(run.output_dir, [MODEL_FILE_NAME])
        _export(run.model, run.output_dir / MODEL_FILE_NAME)
    print(
        f"train: {'stopped' if failure else 'done'}: {run.config['name']}, {trained} "
        f"epoch{'' if trained == 1 else 's'} in {seconds:.1f} s{total}",
        file=out,
    )
    if final:
        print(f"  final   {_format_logs(final)}", file=out)
    if chief:
        _print_outputs(run, out)
    if failure is not None:
        if chief:
            print(f"{args.prog}: error: {failure}", file=sys.stderr)
        return 1
    return 0


def _claim(run: Run) -> None:
    """Marks the run folder as train's (it is empty, or holds the run this one resumes) and
    writes the resolved config into it."""
    from tapefit.checkpointing import atomic_write

    folder = run.output_dir
    if not _run_folder.is_run_folder(folder):
        _run_folder.record(folder, _run_folder.entries(folder))
    _run_folder.record(folder, [CONFIG_FILE_NAME])
    text = _config.dump_config(run.config).encode("utf-8")
    atomic_write(folder / CONFIG_FILE_NAME, lambda f: f.write(text))


class _RunFolderRecorder:
    """Records in the run folder's marker the entries that appear in it while the run trains
    (the plugins' logs, checkpoints, a user plugin's files), once the plugins have started and
    at every epoch's end, so that ``--overwrite`` knows them even after a SIGKILL."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.before = set(_run_folder.entries(folder))

    def record(self) -> None:
        with contextlib.suppress(OSError):  # bookkeeping never ends a run; the next record retries
            _run_folder.record(self.folder, set(_run_folder.entries(self.folder)) - self.before)

    @hookimpl(trylast=True)
    def on_fit_start(self) -> None:
        self.record()

    @hookimpl(trylast=True)
    def on_epoch_end(self) -> None:
        self.record()


def _say_the_learning_rate_is_restored(
    contents: Mapping[str, Any], args: argparse.Namespace, out: Any
) -> None:
    """A resumed optimizer takes its learning rate from the checkpoint (a plugin such as
    reduce_lr_on_plateau may have changed it), not from the config: one line when ``--set``
    asked for another one."""
    if not any(item.partition("=")[0].strip() == "optimizer.learning_rate" for item in args.set):
        return
    saved = contents.get("optimizer", {}).get("learning_rate")
    if isinstance(saved, (int, float)):
        print(
            "train: --set optimizer.learning_rate is not used on a resume: the optimizer continues with the "
            f"checkpoint's learning rate, {float(saved):g}",
            file=out,
        )


def export(run: Run, path: Path, out: Any) -> int:
    """``train --export PATH``: the weights of the checkpoint ``--resume`` chose, as ``.safetensors``."""
    from tapefit.checkpointing import load_checkpoint

    try:
        if run.resume_from is None:
            raise ConfigError("--export: there is no checkpoint to export (the run has not saved one yet)")
        try:
            run.model.load_state_dict(load_checkpoint(run.resume_from)["model"])
            _export(run.model, path)
        except (OSError, ValueError) as e:
            raise ConfigError(f"--export: {_error_text(e)}") from e
    finally:
        if run.lock is not None:
            run.lock.release(undo=True)  # export writes nothing into the run folder
    print(f"train: exported the weights of {run.resume_from} to {path}", file=out)
    return 0


def _failure(plugins: list[Any], final: Mapping[str, float]) -> str | None:
    """Why the fit failed (a plugin's ``failure``, or a non-finite final loss), or ``None``."""
    for plugin in plugins:
        failure = getattr(plugin, "failure", None)
        if isinstance(failure, str) and failure:
            return failure
    loss = final.get("loss")
    if isinstance(loss, float) and not math.isfinite(loss):
        return "the training loss was not finite"
    return None


def _export(model: Any, path: Path) -> None:
    """Writes the model's weights to ``path`` (``.safetensors``), when the model can save them."""
    if callable(getattr(model, "save_weights", None)):
        model.save_weights(path)


def _print_outputs(run: Run, out: Any) -> None:
    from tapefit.checkpointing import latest_checkpoint

    folder = run.output_dir
    print(f"  outputs {folder}/", file=out)
    known = {
        CONFIG_FILE_NAME: "resolved config",
        MODEL_FILE_NAME: "the trained weights (Module.load_weights)",
        "tensorboard": "TensorBoard (tensorboard --logdir runs)",
        "checkpoints": "checkpoints",
    }
    for entry in sorted(folder.iterdir()):
        if entry.name.startswith("."):
            continue
        what = known.get(entry.name) or ("CSV log" if entry.suffix == ".csv" else "")
        print(f"    {entry.name + ('/' if entry.is_dir() else ''):<18}{what}", file=out)
    checkpoints = _checkpoint_folder(run.plugins, folder)
    last = latest_checkpoint(checkpoints) if checkpoints is not None else None
    if last is not None:
        print(f"  last checkpoint {last} (continue with --resume auto)", file=out)


def _what_was_saved(run: Run) -> str:
    """Where an interrupted run can continue from, in words."""
    from tapefit.checkpointing import latest_checkpoint

    folder = _checkpoint_folder(run.plugins, run.output_dir)
    if folder is None:
        return "no checkpoint was saved (the run has no checkpoint plugin)"
    saved = [p.interrupted_path for p in run.plugins if getattr(p, "interrupted_path", None) is not None]
    if saved:
        return f"the state was saved to {saved[0]} (continue with --resume auto)"
    last = latest_checkpoint(folder) if folder is not None else None
    if last is None:
        return "no checkpoint was saved yet"
    return f"the newest checkpoint is {last} (continue from it with --resume auto)"


# --------------------------------------------------------------------------- the command line


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser(prog: str = "train") -> argparse.ArgumentParser:
    """The argument parser of ``train``."""
    parser = _Parser(
        prog=prog,
        description="Train a model from a config file (YAML or TOML).",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--config", required=True, metavar="FILE", help="the config file (.yaml, .yml or .toml)"
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a config key (dotted path, lists by index: plugins[1].keep_last=5); repeatable",
    )
    parser.add_argument(
        "--resume",
        metavar="auto|PATH",
        help="continue from a checkpoint: 'auto' for the run's newest, or a checkpoint file or folder",
    )
    parser.add_argument(
        "--print-config",
        action="store_true",
        help=(
            "print the resolved config (defaults filled in) and exit; it is validated, but nothing it names "
            "is built or called, so a built-in model's output_units stay null until a run reads the data"
        ),
    )
    parser.add_argument(
        "--overwrite", action="store_true", help="delete an earlier run of the same name first"
    )
    parser.add_argument(
        "--export",
        metavar="PATH",
        help=(
            "write the model weights of the checkpoint that --resume names (default: the run's newest) to "
            "PATH, a .safetensors file, and exit without training"
        ),
    )
    parser.add_argument("--debug", action="store_true", help="show tracebacks and debug logging")
    from tapefit import __version__

    parser.add_argument("--version", action="version", version=f"tapefit {__version__}")
    return parser


def main(argv: Sequence[str] | None = None, prog: str = "train") -> int:
    """Runs ``train`` with ``argv`` (default ``sys.argv[1:]``) and returns the exit status."""
    parser = build_parser(prog)
    try:
        args = parser.parse_args(argv)
        args.prog = prog
        if args.overwrite and args.resume is not None:
            parser.error("--overwrite deletes the run that --resume would continue; give one of them")
        if args.export is not None:
            if args.overwrite or args.print_config:
                parser.error(
                    "--export writes a checkpoint's weights and trains nothing; drop --overwrite/--print-config"
                )
            if not args.export.endswith(".safetensors"):
                parser.error(f"--export: the file name must end in '.safetensors', got {args.export!r}")
            args.resume = args.resume or "auto"
    except SystemExit as e:  # --help, --version and usage errors
        return e.code if isinstance(e.code, int) else 2
    # tapefit's warnings (a plugin that failed to clean up, ...) go to stderr while train runs;
    # the handler is removed afterwards, so calling main() from Python leaves logging as it was.
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(f"{prog}: %(levelname)s: %(message)s"))
    level = logger.level
    logger.addHandler(handler)
    # Under an MPI launcher only rank 0 prints; the others speak only when they fail.
    chief = launcher_rank() == 0
    logger.setLevel((logging.DEBUG if args.debug else logging.INFO) if chief else logging.ERROR)
    in_main_thread = threading.current_thread() is threading.main_thread()
    handlers = {signum: signal.getsignal(signum) for signum in STOP_SIGNALS} if in_main_thread else {}
    try:
        # SIGTERM (a scheduler's, docker stop's) and SIGHUP stop the run as Ctrl-C does.
        for signum in handlers:
            if signum != signal.SIGINT:
                signal.signal(signum, raise_terminated)
        if chief:
            return _main(args, prog, sys.stdout)
        with open(os.devnull, "w") as quiet:
            return _main(args, prog, quiet)
    except KeyboardInterrupt as e:  # between a first Ctrl-C and its handler
        _ignore_interrupts()
        what, status = _stopped(e)
        if chief:  # under a launcher every rank stops: rank 0 says so for all
            print(f"{prog}: {what}", file=sys.stderr)
        return status
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
        for signum, previous in handlers.items():
            if previous is not None:
                signal.signal(signum, previous)


def command(argv: Sequence[str] | None = None, prog: str = "train") -> int:
    """``main`` for a process that exits with its status: once it returns, a late Ctrl-C is
    ignored, so that it cannot turn the exit into a traceback."""
    status = main(argv, prog)
    _ignore_interrupts()
    return status


def _main(args: argparse.Namespace, prog: str, out: Any) -> int:
    try:
        if args.print_config:
            out.write(_config.dump_config(resolve(args, default_schema())))
            return 0
        try:
            run = prepare(args)
        except ConfigError as e:
            _, chief_started, _ = _agree_on_start(ok=False)
            e.speak = launcher_rank() == 0 or chief_started  # type: ignore[attr-defined]
            raise
        agreed = fingerprint(run) if launcher_world_size() > 1 else None
        started, _, mismatch = _agree_on_start(ok=True, fingerprint=agreed)
        if not started:
            if run.lock is not None:
                run.lock.release(undo=True)
            if mismatch is not None:
                raise mismatch  # this rank speaks for the ranks that differ
            return 2  # another rank could not start, or runs another config, and said why
        if args.export is not None:
            return export(run, Path(args.export), out)
    except ConfigError as e:
        if args.debug:
            traceback.print_exc()
        where = f"{args.config}: " if e.key is not None else ""  # a key's message names its file
        if getattr(e, "speak", True):  # under a launcher rank 0 speaks for the ranks that agree
            rank = (
                f"rank {launcher_rank()}: "
                if launcher_rank() and not getattr(e, "names_ranks", False)
                else ""
            )
            print(f"{prog}: error: {rank}{where}{e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as e:
        _ignore_interrupts()
        what, status = _stopped(e)
        if launcher_rank() == 0:  # under a launcher every rank stops: rank 0 says so for all
            print(f"{prog}: {what} before training started", file=sys.stderr)
        return status
    try:
        return train(run, args, out)
    except KeyboardInterrupt as e:
        _ignore_interrupts()
        what, status = _stopped(e)
        newline = "\n" if status == 130 else ""  # after the terminal's ^C
        if launcher_rank() == 0:  # the ranks agreed to stop (Trainer.fit): rank 0 says so for all
            print(f"{newline}{prog}: {what}; {_what_was_saved(run)}", file=sys.stderr)
        return status
    except Exception as e:
        if args.debug:
            traceback.print_exc()
        print(
            f"{prog}: error while training: {_error_text(e)} (--debug shows the traceback)", file=sys.stderr
        )
        return 1
    finally:
        if run.lock is not None:
            run.lock.release()


def _agree_on_start(
    ok: bool, fingerprint: dict[str, Any] | None = None
) -> tuple[bool, bool, ConfigError | None]:
    """Under an MPI launcher, whether every rank could start and whether rank 0 could (each
    rank checks the config and data itself), so that no rank is left waiting for the others
    at a collective; in one process, ``(ok, ok, None)``.

    When every rank could start, they compare their ``fingerprint`` (the resolved config's
    key paths and values, and the data's shapes) with rank 0's: a rank that runs another
    config would wait at a collective whose sizes differ, or train on other data without a
    word. The lowest rank that differs gets the ``ConfigError`` that names the first key that
    differs; every rank then does not start.
    """
    if launcher_world_size() <= 1:
        return ok, ok, None
    world = MPIWorld()
    failed = world.allreduce_sum(np.array([not ok, not ok and world.is_chief], np.float64), "start-up check")
    if failed[0] != 0 or fingerprint is None:
        return bool(failed[0] == 0), bool(failed[1] == 0), None
    chief = world.broadcast_object(fingerprint, "start-up config check")
    difference = _first_difference(chief["config"], fingerprint["config"])
    if difference is None and chief["--resume"] != fingerprint["--resume"]:
        difference = ("--resume", _config._show(chief["--resume"]), _config._show(fingerprint["--resume"]))
    if difference is None and chief["data"] != fingerprint["data"]:
        difference = ("data", chief["data"], fingerprint["data"])
    flags = np.zeros(world.size, np.float64)
    flags[world.rank] = difference is not None
    differ = np.flatnonzero(world.allreduce_sum(flags, "start-up config check"))
    if not differ.size:
        return True, True, None
    if world.rank != differ[0]:
        return False, True, None
    assert difference is not None
    key, theirs, mine = difference
    more = "" if differ.size == 1 else f"; ranks {', '.join(map(str, differ))} differ from rank 0"
    error = ConfigError(
        f"{key}: differs between the MPI ranks (rank 0 has {theirs}, rank {world.rank} has {mine}{more}); "
        "every rank must run the same config",
        None if key in ("--resume", "data") else key,
    )
    error.names_ranks = True  # type: ignore[attr-defined]
    return False, True, error


def fingerprint(run: Run) -> dict[str, Any]:
    """What the ranks of a distributed run must agree on: the resolved config (as JSON values),
    the checkpoint they resume from, and the data's sizes, shapes and dtypes."""
    data = run.data
    shapes = [("training", data.x_train, data.y_train)]
    if isinstance(data.validation, tuple) and len(data.validation) == 2:
        shapes.append(("validation", *data.validation))
    described = "; ".join(
        f"{len(x)} {part} samples of shape {tuple(np.shape(x)[1:])} ({getattr(x, 'dtype', '?')}), "
        f"labels {tuple(np.shape(y)[1:])} ({getattr(y, 'dtype', '?')})"
        for part, x, y in shapes
    )
    config = json.loads(json.dumps(_config._plain(run.config), default=repr))
    resume = None if run.resume_from is None else str(run.resume_from)
    return {"config": config, "--resume": resume, "data": described}


def _first_difference(chief: Any, mine: Any, key: str = "") -> tuple[str, str, str] | None:
    """The first key path (in rank 0's order) whose value differs between rank 0's ``chief``
    and this rank's ``mine``: ``(key, rank 0's value, this rank's value)``, or ``None``.

    Sections are compared key by key, lists of sections entry by entry
    (``plugins[0].timeout``); any other value, a list of numbers too
    (``model.hidden_units``), as a whole.
    """
    if _canonical(chief) == _canonical(mine):
        return None
    if isinstance(chief, dict) and isinstance(mine, dict):
        for name in [*chief, *(k for k in mine if k not in chief)]:
            inner = f"{key}.{name}" if key else str(name)
            if name not in chief or name not in mine:
                shown = [
                    _config._show(side[name]) if name in side else "no such key" for side in (chief, mine)
                ]
                return inner, shown[0], shown[1]
            found = _first_difference(chief[name], mine[name], inner)
            if found is not None:
                return found
    both_lists = isinstance(chief, list) and isinstance(mine, list)
    if both_lists and any(isinstance(v, dict) for v in [*chief, *mine]):
        for i, (a, b) in enumerate(zip(chief, mine)):
            found = _first_difference(a, b, f"{key}[{i}]")
            if found is not None:
                return found
        return key, _entries(len(chief)), _entries(len(mine))
    return key, _config._show(chief), _config._show(mine)


def _entries(n: int) -> str:
    return f"{n} entr{'y' if n == 1 else 'ies'}"


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True)


def _stopped(interrupt: KeyboardInterrupt) -> tuple[str, int]:
    """What stopped the run, in words, and the exit status: 130 for Ctrl-C, 128 + the signal's
    number for SIGTERM (143) and SIGHUP (129), as a shell reports a process they ended."""
    signum = getattr(interrupt, "signum", signal.SIGINT)
    if signum == signal.SIGINT:
        return "interrupted", 130
    return f"stopped by {signal.Signals(signum).name}", 128 + signum


def _ignore_interrupts() -> None:
    """From the first Ctrl-C (or SIGTERM, SIGHUP) on, ``train`` is only reporting and leaving: a
    second one (within milliseconds, as an impatient double press) must not turn the exit into
    a traceback. ``main`` restores the handlers before it returns."""
    if threading.current_thread() is threading.main_thread():
        for signum in STOP_SIGNALS:
            signal.signal(signum, signal.SIG_IGN)


if __name__ == "__main__":
    sys.exit(main())
