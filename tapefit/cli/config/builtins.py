"""The schema of ``train``'s configs: the built-in types of each section and what a ``type`` may name.

Each typed section (data, model, loss, metric, optimizer, schedule, plugin) has its built-in
short names (tables read on first use, so ``train --help`` imports nothing heavy) and a rule for
what an import path may name (a ``tp.Module`` subclass for a model, a plugin class or module,
a ``@tp.configurable`` function...). ``default_schema`` puts them together for
``resolve_config``, with the ``trainer`` section derived from ``Trainer``.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from tapefit.cli.config.checking import Kind, import_object
from tapefit.cli.config.loading import ConfigError, is_configurable
from tapefit.cli.config.schema import DATA_COMMON, Schema


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
    or a ``(train, validation)`` pair of them.

    Args:
        source: the import path of the factory, ``"package.module:function"``.
        **kwargs: the factory's keyword arguments (the data section's other keys).
    """
    factory = import_object(source, "data.source")
    if not is_configurable(factory):
        raise ConfigError(
            f"data.source: {source!r} is not a function marked with @tp.configurable", "data.source"
        )
    return factory(**kwargs)


def _model_types() -> dict[str, Callable[..., Any]]:
    from tapefit.cli import models

    return {"mlp": models.mlp, "cnn": models.cnn}


def loss_types() -> dict[str, Callable[..., Any]]:
    from tapefit.layers import losses

    return dict(losses.registry)


class named_metric:  # lower case: it stands in the tables where functions stand
    """Stands for a built-in metric name in configs: such a metric takes only ``name``.

    A class, so the config's checks read ``name`` from its signature (a function in the
    metric section is a user's ``(y_true, y_pred)`` and takes no keys).

    Args:
        name: the metric's name in the logs (default the metric's own, e.g. ``accuracy``).
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
        if not isinstance(obj, type) and is_configurable(obj):
            return None
        return subclass(obj)

    return accepts


def _marked(obj: Any) -> str | None:
    return None if is_configurable(obj) else "a function or class marked with @tp.configurable"


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
        "data": Kind(
            "data",
            _data_types,
            common=dict(DATA_COMMON),
            accepts=_marked,
            type_defaults={"grain": {"validation_split": 0.0}},  # its source gives the validation set
        ),
        "model": Kind("model", _model_types, accepts=_subclass_of(_module_class, "a tp.Module subclass")),
        "loss": Kind(
            "loss",
            loss_types,
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
