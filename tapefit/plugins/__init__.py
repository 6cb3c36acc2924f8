"""Plugins of the fit loop: the hook specifications, the manager, and the built-ins.

Built-in plugins (short names for configs): ``progress``, ``csv_logger``, ``tensorboard``, ``mlflow``,
``clip_gradients``, ``checkpoint``, ``early_stopping``, ``terminate_on_nan``,
``reduce_lr_on_plateau``, ``learning_rate_scheduler``, ``lambda_callback``, and
``keras_callback`` (which runs a Keras-style callback object given to ``fit``). Each lives in its
own module here and is imported on first use. Their classes are importable from here by name, as Keras's callbacks are
(``from tapefit.plugins import EarlyStopping``, ``tp.plugins.TensorBoard(...)``).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from tapefit.plugins.hookspecs import hookimpl, hookspec
from tapefit.plugins.manager import (
    BUILTIN_PLUGINS,
    ENTRY_POINT_GROUP,
    PluginManager,
    PluginValidationError,
    available_plugins,
    create_plugin,
    resolve_plugin,
)

if TYPE_CHECKING:
    from tapefit.plugins.checkpoint import Checkpoint
    from tapefit.plugins.clip_gradients import ClipGradients
    from tapefit.plugins.csv_logger import CSVLogger
    from tapefit.plugins.distributed import Distributed
    from tapefit.plugins.early_stopping import EarlyStopping
    from tapefit.plugins.lambda_callback import KerasCallback, LambdaCallback
    from tapefit.plugins.learning_rate_scheduler import LearningRateScheduler
    from tapefit.plugins.mlflow import MLFlowLogger
    from tapefit.plugins.progress import Progress
    from tapefit.plugins.reduce_lr_on_plateau import ReduceLROnPlateau
    from tapefit.plugins.tensorboard import TensorBoard
    from tapefit.plugins.terminate_on_nan import TerminateOnNaN

# Class name -> "module:Class", from the one table of built-ins. The modules are imported on
# first access (module __getattr__, PEP 562): tqdm.auto alone costs ~30 ms at import.
_PLUGIN_CLASSES: dict[str, str] = {path.rpartition(":")[2]: path for path in BUILTIN_PLUGINS.values()}

__all__ = [
    "BUILTIN_PLUGINS",
    "ENTRY_POINT_GROUP",
    "PluginManager",
    "PluginValidationError",
    "available_plugins",
    "create_plugin",
    "hookimpl",
    "hookspec",
    "resolve_plugin",
    # the built-in plugin classes (a test keeps this list equal to BUILTIN_PLUGINS)
    "CSVLogger",
    "Checkpoint",
    "ClipGradients",
    "Distributed",
    "EarlyStopping",
    "KerasCallback",
    "LambdaCallback",
    "LearningRateScheduler",
    "MLFlowLogger",
    "Progress",
    "ReduceLROnPlateau",
    "TensorBoard",
    "TerminateOnNaN",
]


def __getattr__(name: str) -> Any:
    path = _PLUGIN_CLASSES.get(name)
    if path is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module_name, _, class_name = path.partition(":")
    value = getattr(importlib.import_module(module_name), class_name)
    globals()[name] = value  # later accesses skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(__all__) | set(_PLUGIN_CLASSES))
