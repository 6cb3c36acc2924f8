"""Building what a resolved config names, and the checks that run before anything is written.

``build_data``, ``build_model``, ``build_loss``, ``build_metrics``, ``build_optimizer`` and
``build_plugins`` turn a config's sections into objects; ``check_labels``, ``check_monitors`` and
``check_model_on_data`` try them on the data (labels against the loss, a plugin's monitor
against the logs, the model on two samples), so that a mistake is one line naming its key,
exit 2, before the run folder is touched.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NoReturn

import numpy as np

from tapefit.cli import config as _config
from tapefit.cli.config import ConfigError, Schema, loss_types, named_metric


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


def fail(key: str, message: str) -> NoReturn:
    raise ConfigError(f"{key}: {message}", key)


def error_text(error: BaseException) -> str:
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
    fail(where, f"{entry['type']!r} could not be built: {error_text(error)}")


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
            fail(f"data.{key}", str(e))
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
        fail(key, str(e))
    except Exception as e:  # a user loader's own error, or one that does not return (x, y)
        fail("data", f"{source} failed to load: {error_text(e)}")
    try:
        (x_train, y_train), validation = _data.validation_split(
            x, y, section["validation_split"], section["seed"]
        )
    except _data.DataError as e:
        fail("data.validation_split", str(e))
    if section["standardize"] and _data.is_lazy(x):
        fix = "set data.mmap: false to load them" if section.get("mmap") else "load them into memory"
        fail(
            "data.standardize",
            f"needs the features in memory, and they are memory-mapped: {fix}, or standardize them "
            "once and save them",
        )
    if section["standardize"]:
        if validation is None:
            (x_train,), _ = _data.standardize(x_train)
        else:
            (x_train, x_val), _ = _data.standardize(x_train, validation[0])
            validation = (x_val, validation[1])
    n_val = 0 if validation is None else len(validation[0])
    description = f"{source}: {len(x_train)} training and {n_val} validation samples of shape {x.shape[1:]}"
    return Data(x_train, y_train, validation, description)


def pipeline(data: Data, section: dict[str, Any], settings: dict[str, Any]) -> Any:
    """The training arrays as a ``tp.data.Pipeline`` (``data.workers``, ``data.prefetch``, ``data.map``)."""
    from tapefit import data as _data

    fn = None
    if section["map"] is not None:
        fn = _config.import_object(section["map"], "data.map")
        if not _config.is_configurable(fn):
            fail("data.map", f"{section['map']!r} is not a function marked with @tp.configurable")
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
        fail("data.workers", str(e))
    except ValueError as e:
        fail("trainer.batch_size", str(e))


def check_steps(settings: dict[str, Any], data: Data) -> None:
    """``trainer.steps_per_epoch`` needs a stream, ``trainer.validation_steps`` a streamed validation."""
    from tapefit.data.sources import is_stream

    if settings["steps_per_epoch"] is not None and data.stream is None:
        fail(
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
        fail(
            "trainer.validation_steps",
            f"is for a streamed validation (the second data set of a grain source); {why}",
        )


def check_ends(settings: dict[str, Any], data: Data) -> None:
    """A grain source that repeats without end needs ``trainer.steps_per_epoch`` to end its epochs."""
    from tapefit.data.sources import endless

    if settings["steps_per_epoch"] is None and endless(data.stream):
        fail(
            "trainer.steps_per_epoch",
            "data.source repeats without end (a MapDataset.repeat() of no count), so an epoch would never "
            "end: set trainer.steps_per_epoch",
        )


def mapped_batch(data: Data, section: dict[str, Any]) -> Data:
    """The first batch of ``data.stream`` (a pipeline with ``data.map``), made in this process, as
    the data the model is checked on; a map that fails or does not give ``(x, y)`` is a config error."""
    from tapefit.data.sources import split_batch

    try:
        first = data.stream.peek()
    except Exception as e:
        fail("data.map", f"{section['map']!r} failed on the first batch: {error_text(e)}")
    try:
        x, y, _ = split_batch(first, 0)
        x, y = np.asarray(x), np.asarray(y)
    except Exception as e:
        fail("data.map", f"{section['map']!r}: its first batch: {error_text(e)}")
    stored = tuple(np.shape(data.x_train)[1:])
    if data.validation is not None and x.shape[1:] != stored:
        fail(
            "data.map",
            f"{section['map']!r} turns samples of shape {stored} into {x.shape[1:]}, but the validation "
            "samples are used as stored (the map runs on training batches only): set data.validation_split: 0",
        )
    return Data(x, y, data.validation, data.description)


def grain_workers(stream: Any, section: dict[str, Any]) -> Any:
    """A grain source read by ``data.workers`` processes (Grain's own ``mp_prefetch``)."""
    from tapefit.data.sources import GrainSource

    if section["map"] is not None:
        fail(
            "data.map",
            "a grain source's elements are batches, and data.map is a function of one sample: map the "
            "samples in data.source's pipeline (dataset.map(fn) before .batch)",
        )
    if not section["workers"]:
        return stream
    try:
        return GrainSource.of(stream, workers=section["workers"], prefetch=section["prefetch"])
    except ValueError as e:
        fail("data.workers", str(e))


def _grain_data(target: Any, kwargs: dict[str, Any], section: dict[str, Any], source: str) -> Data:
    """``data.type: grain``: the data set(s) the ``source`` factory returns."""
    from tapefit.data.sources import split_batch

    if section["validation_split"]:
        fail(
            "data.validation_split",
            "a grain source is not split by train: set it to 0 and return (train, validation) data sets "
            "from data.source for validation",
        )
    if section["standardize"]:
        fail("data.standardize", "a grain source is used as it comes: standardize in its pipeline")
    try:
        made = target.obj(**kwargs)
    except ConfigError:
        raise
    except Exception as e:
        fail("data.source", f"{section['source']!r} failed: {error_text(e)}")
    train, validation = made if isinstance(made, tuple) and len(made) == 2 else (made, None)
    try:
        first = next(iter(train.to_iter_dataset() if hasattr(train, "to_iter_dataset") else train))
        x, y, _ = split_batch(first, 0)
        x, y = np.asarray(x), np.asarray(y)
    except StopIteration:
        fail("data.source", f"{section['source']!r} gave an empty data set")
    except Exception as e:
        fail("data.source", f"{section['source']!r}: its first batch: {error_text(e)}")
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
                fail("data", f"{need}, but some labels are not whole numbers ({fractional.flat[0]:g})")
        low, high = int(y.min()), int(y.max())
        if low < 0:
            fail("data", f"{need}, but the labels go from {low} to {high}")
    elif loss_type == "binary_crossentropy":
        low, high = float(y.min()), float(y.max())
        if low < 0.0 or high > 1.0:
            fail(
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
    return next((name for name, cls in loss_types().items() if cls is target.obj), section["type"])


_MANY_CLASSES = 2**16
"""More classes than this, and than there are labels, is taken for a label column that holds
something else (identifiers, measurements): refused unless ``model.output_units`` says so."""


def _check_class_count(loss_type: str, units: int, data: Data) -> None:
    """A built-in model's class count comes from the highest label; one far beyond the number of
    labels would build an output layer of that size (memory without bound), so it is refused."""
    labels = _labels(data).size
    if loss_type == "sparse_categorical_crossentropy" and units > max(labels, _MANY_CLASSES):
        fail(
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
        fail(
            "model.output_activation",
            f"{activation!r} gives probabilities, but loss.from_logits is true, so the loss would apply "
            f"{squash} a second time; leave output_activation out (or null)",
        )
    if not from_logits and activation in (None, "linear"):
        fail(
            "model.output_activation",
            f"{_config.show(activation)} gives logits, but loss.from_logits is false, so the loss would "
            "read them as probabilities; set loss.from_logits: true, or leave output_activation out",
        )


def build_model(config: dict[str, Any], schema: Schema, data: Data) -> Any:
    """Builds the model of ``config["model"]``; fills a built-in model's output layer from the data."""
    from tapefit import layers

    section = config["model"]
    target = _config.find_target(schema.kinds["model"], section["type"], "model.type")
    if section["type"] in ("mlp", "cnn"):  # the default step: resolve_config made sure of a loss
        loss = {**config["loss"], "type": loss_kind(config["loss"], schema)}
        units, activation = _output_defaults(loss, _labels(data))
        if section.get("output_units") is None and config["data"]["type"] == "grain":
            fail(
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
            fail(
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
        fail(
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


def build_loss(section: dict[str, Any] | None, schema: Schema) -> Any:
    """The loss object (or function) of the resolved ``loss`` entry (``None`` for none: a model
    whose ``train_step`` computes its own)."""
    if section is None:
        return None
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
            fail(f"metrics[{i}]", f"the metric name {name!r} is taken; give it another with name: ...")
    return built


def build_optimizer(section: dict[str, Any] | None) -> Any:
    """The optimizer of the resolved ``optimizer`` entry (its schedule included), or ``None`` for
    none (a model whose ``train_step`` uses optimizers of its own)."""
    from tapefit import optimizers

    if section is None:
        return None

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
            fail(f"plugins[{i}]", str(e).strip().splitlines()[0])
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
        fail(
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
        fail("model", f"cannot run on the data (inputs of shape {x.shape[1:]} per sample): {error_text(e)}")
    shape = tuple(getattr(out, "shape", ()))
    if loss_type == "sparse_categorical_crossentropy" and len(shape) >= 2:
        labels = _labels(data)
        low, high = int(labels.min()), int(labels.max())
        if high >= shape[-1]:
            fail(
                "model",
                f"the model gives {shape[-1]} class scores per sample, but the labels go from {low} to {high}"
                f" (the model needs {high + 1} outputs)",
            )
    try:
        value = loss(as_tensor(y), out)
        float(value)
    except Exception as e:
        fail(
            "loss",
            f"{loss_type!r} cannot compare labels of shape {y.shape} with model outputs of shape {shape}: "
            f"{error_text(e)}",
        )
    for i, metric in enumerate(metrics):
        try:
            metric.update_state(y, out)
            float(metric.result())
        except Exception as e:
            fail(
                f"metrics[{i}]",
                f"{metric.name!r} cannot compare labels of shape {y.shape} with model outputs of shape {shape}: "
                f"{error_text(e)}",
            )
        finally:
            metric.reset_state()  # the two samples must not count in the first epoch
