"""Plugins of the fit loop: the hook specifications, the manager, and the built-ins.

Built-in plugins (short names for configs): ``progress``, ``csv_logger``, ``tensorboard``,
``clip_gradients``, ``checkpoint``, ``early_stopping``, ``terminate_on_nan``,
``reduce_lr_on_plateau``. Each lives in its own module here and is imported on first use.
"""

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
]
