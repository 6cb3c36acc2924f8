"""The plugin manager: pluggy's, with tapefit's hooks, names and discovery.

Plugins come from three places, all registered by the same mechanism:

* objects or modules passed in ``Trainer(plugins=[...])``;
* built-in plugins by short name (``"progress"``, ``{"type": "checkpoint", ...}``);
* third-party plugins by name from the ``tapefit`` entry-point group, or by import
  path ``"package.module:ClassName"``.
"""

from __future__ import annotations

import contextlib
import difflib
import importlib
import importlib.metadata
import inspect
import logging
import re
import types
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import pluggy

from tapefit.core.messages import shown
from tapefit.core.naming import import_object
from tapefit.plugins import hookspecs
from tapefit.plugins.hookspecs import PROJECT_NAME, GradsAndVars

logger = logging.getLogger("tapefit")

ENTRY_POINT_GROUP = "tapefit"

# Short name -> "module:attribute"; imported only when used (tensorboardX is slow to import).
BUILTIN_PLUGINS: dict[str, str] = {
    "progress": "tapefit.plugins.progress:Progress",
    "csv_logger": "tapefit.plugins.csv_logger:CSVLogger",
    "tensorboard": "tapefit.plugins.tensorboard:TensorBoard",
    "mlflow": "tapefit.plugins.mlflow:MLFlowLogger",
    "clip_gradients": "tapefit.plugins.clip_gradients:ClipGradients",
    "checkpoint": "tapefit.plugins.checkpoint:Checkpoint",
    "early_stopping": "tapefit.plugins.early_stopping:EarlyStopping",
    "terminate_on_nan": "tapefit.plugins.terminate_on_nan:TerminateOnNaN",
    "reduce_lr_on_plateau": "tapefit.plugins.reduce_lr_on_plateau:ReduceLROnPlateau",
    "distributed": "tapefit.plugins.distributed:Distributed",
    "learning_rate_scheduler": "tapefit.plugins.learning_rate_scheduler:LearningRateScheduler",
    "lambda_callback": "tapefit.plugins.lambda_callback:LambdaCallback",
    "keras_callback": "tapefit.plugins.lambda_callback:KerasCallback",
}

# A Keras callback's methods (keras.callbacks.Callback): an object with some of these and no
# hooks is run by the keras_callback plugin.
KERAS_CALLBACK_METHODS = (
    "on_train_begin",
    "on_train_end",
    "on_epoch_begin",
    "on_epoch_end",
    "on_train_batch_begin",
    "on_train_batch_end",
    "on_batch_begin",
    "on_batch_end",
    "on_test_begin",
    "on_test_end",
    "on_test_batch_begin",
    "on_test_batch_end",
    "on_predict_begin",
    "on_predict_end",
    "on_predict_batch_begin",
    "on_predict_batch_end",
)

PluginValidationError = pluggy.PluginValidationError


def _entry_points() -> dict[str, importlib.metadata.EntryPoint]:
    return {ep.name: ep for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)}


def available_plugins() -> list[str]:
    """The short names that ``create_plugin`` resolves: built-ins, then entry points."""
    extra = sorted(name for name in _entry_points() if name not in BUILTIN_PLUGINS)
    return [*BUILTIN_PLUGINS, *extra]


def resolve_plugin(name: str) -> Any:
    """Finds what a plugin name refers to (a class, module or object), without creating it.

    Args:
        name: a built-in short name, a name from the ``tapefit`` entry-point group,
            or an import path ``"package.module:ClassName"``.

    Raises:
        ValueError: the name is unknown (the message lists the known names).
    """
    if name in BUILTIN_PLUGINS:
        return import_object(BUILTIN_PLUGINS[name], "plugin")
    entry_points = _entry_points()
    if name in entry_points:
        try:
            return entry_points[name].load()
        except Exception as error:
            raise ValueError(f"cannot load plugin {name!r} from its entry point: {error}") from error
    if ":" in name:
        return import_object(name, "plugin")
    known = available_plugins()
    close = difflib.get_close_matches(name, known, n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    raise ValueError(
        f"unknown plugin {name!r}{hint}; known plugins: {', '.join(known)}, "
        "or an import path 'package.module:ClassName'"
    )


def _has_hooks(value: Any) -> bool:
    marker = f"{PROJECT_NAME}_impl"
    return any(hasattr(getattr(value, hook, None), marker) for hook in hookspecs.HOOK_NAMES)


def is_keras_callback(value: Any) -> bool:
    """Whether ``value`` is a Keras-style callback: an object with some of Keras's callback
    methods (``on_epoch_end``, ``on_batch_end``, ...) and no ``@tp.hookimpl`` method."""
    if isinstance(value, (type, str, Mapping, types.ModuleType)):
        return False
    return any(callable(getattr(value, m, None)) for m in KERAS_CALLBACK_METHODS) and not _has_hooks(value)


def create_plugin(spec: Any, **kwargs: Any) -> Any:
    """Makes a plugin from a config entry.

    Args:
        spec: a plugin object or module (returned as is), a Keras-style callback object
            (run by the ``keras_callback`` plugin), a name (see ``resolve_plugin``), or a dict
            ``{"type": name, **kwargs}`` as in configs.
        **kwargs: keyword arguments for the plugin's class.

    Returns:
        The plugin: a class found by name is instantiated with the keyword arguments;
        a module or object found by name is returned as is.

    Raises:
        TypeError: ``spec`` cannot be a plugin (``None``, a number, a list).
    """
    if isinstance(spec, Mapping):
        if "type" not in spec:
            raise ValueError(f"a plugin config needs a 'type' key, got keys {sorted(spec)}")
        kwargs = {**{k: v for k, v in spec.items() if k != "type"}, **kwargs}
        spec = spec["type"]
    if isinstance(spec, type):
        raise TypeError(
            f"got the class {spec.__name__}, not a plugin object; pass an instance: {spec.__name__}(...)"
        )
    if not isinstance(spec, str):
        if kwargs:
            raise TypeError(
                f"keyword arguments {sorted(kwargs)} given for an already created plugin {spec!r}"
            )
        if is_keras_callback(spec):
            return resolve_plugin("keras_callback")(spec)
        if spec is None or isinstance(spec, (bool, int, float, complex, bytes, list, tuple, set)):
            raise TypeError(
                f"got {shown(spec)} ({type(spec).__name__}), which is not a plugin: a plugin is an object "
                "or module with @tp.hookimpl methods, a Keras-style callback object, a plugin name or "
                "a {'type': name, ...} dict"
            )
        return spec
    target = resolve_plugin(spec)
    if isinstance(target, type):
        try:
            return target(**kwargs)
        except TypeError as error:
            raise TypeError(f"plugin {spec!r}: {error}") from error
    if kwargs:
        raise TypeError(f"plugin {spec!r} is not a class, so it takes no options; got {sorted(kwargs)}")
    return target


def default_plugin_name(plugin: Any) -> str:
    """A plugin's default name: ``plugin_name`` if it has one, else its module or class name."""
    name = getattr(plugin, "plugin_name", None)
    if isinstance(name, str) and name:
        return name
    if isinstance(plugin, types.ModuleType):
        return plugin.__name__
    return re.sub(r"(?<!^)(?=[A-Z])", "_", type(plugin).__name__).lower()


class PluginManager(pluggy.PluginManager):
    """Holds a trainer's plugins and calls their hooks (``trainer.plugins``).

    Hooks are called as ``manager.hook.on_epoch_end(trainer=..., epoch=..., logs=...)``.
    Every plugin gets a unique name (``default_plugin_name``, then ``-2``, ``-3``, ...),
    used as its key in checkpoints.
    """

    def __init__(self) -> None:
        super().__init__(PROJECT_NAME)
        self.add_hookspecs(hookspecs)

    def register(self, plugin: Any, name: str | None = None) -> str | None:
        """Registers a plugin object or module and checks its hooks.

        Args:
            plugin: an object or module with ``@tp.hookimpl`` methods, or a config
                entry that ``create_plugin`` understands (a name or ``{"type": ...}``).
            name: its name; by default ``default_plugin_name(plugin)`` made unique.

        Returns:
            The name it was registered under.

        Raises:
            PluginValidationError: a marked method is not a known hook (misspelt), takes
                arguments its hook does not have, or a method named like a hook is not
                marked with ``@tp.hookimpl``; the message names the plugin.
        """
        if isinstance(plugin, (str, Mapping)):
            plugin = create_plugin(plugin)
        name = self._unique_name(default_plugin_name(plugin) if name is None else name)
        self._check_unmarked(plugin, name)
        self._check_arguments(plugin, name)
        registered = super().register(plugin, name)
        try:
            self.check_pending()
        except PluginValidationError as error:
            self.unregister(error.plugin)
            raise self._unknown_hook_error(error.plugin) from None
        return registered

    def register_launcher_plugins(self) -> None:
        """Under an MPI launcher with more than one rank, registers ``distributed`` if no plugin
        of that name is registered yet (it switches itself on, as Horovod users expect)."""
        from tapefit.distributed.world import launcher_world_size

        if launcher_world_size() > 1 and self.get_plugin("distributed") is None:
            self.register(create_plugin("distributed"), name="distributed")

    def register_all(self, plugins: Iterable[Any]) -> list[str]:
        """Registers plugins so that their hooks run in the given order.

        pluggy calls the last registered implementation first, so the list is
        registered backwards; names are still given in list order.
        """
        created = []
        for position, plugin in enumerate(plugins):
            try:
                created.append(create_plugin(plugin))
            except (TypeError, ValueError) as error:
                raise type(error)(f"plugin {position}: {error}") from None
        names = []
        taken = set(self._name2plugin)
        for plugin in created:
            name = _unique(default_plugin_name(plugin), taken)
            taken.add(name)
            names.append(name)
        done: list[str] = []
        try:
            for plugin, name in reversed(list(zip(created, names))):
                self.register(plugin, name)
                done.append(name)
        except BaseException:
            for name in done:  # all or nothing: a refused list leaves no member registered
                self.unregister(name=name)
            raise
        return names

    @contextlib.contextmanager
    def registered(self, plugins: Iterable[Any] | None) -> Iterator[list[str]]:
        """Registers ``plugins`` as ``register_all`` does for the duration of the block (a
        fit's ``callbacks``), then unregisters those still registered."""
        if plugins is not None and not isinstance(plugins, (list, tuple)):
            raise TypeError(
                f"callbacks must be a list of plugins, got {type(plugins).__name__}; pass callbacks=[...]"
            )
        names = self.register_all(plugins or [])
        try:
            yield names
        finally:
            for name in names:
                if self.get_plugin(name) is not None:
                    self.unregister(name=name)

    def _unique_name(self, name: str) -> str:
        return _unique(name, set(self._name2plugin))

    def _check_unmarked(self, plugin: Any, name: str) -> None:
        for hook_name in hookspecs.HOOK_NAMES:
            method = getattr(plugin, hook_name, None)
            if callable(method) and self.parse_hookimpl_opts(plugin, hook_name) is None:
                raise PluginValidationError(
                    plugin,
                    f"plugin {name!r}: {hook_name} is not marked as a hook; decorate it with @tp.hookimpl",
                )

    def _check_arguments(self, plugin: Any, name: str) -> None:
        # pluggy checks this too, in three lines; one naming the plugin and the hook's arguments
        # is what a user needs.
        for hook_name in hookspecs.HOOK_NAMES:
            method = getattr(plugin, hook_name, None)
            if not callable(method) or self.parse_hookimpl_opts(plugin, hook_name) is None:
                continue
            opts: Mapping[str, object] = self.parse_hookimpl_opts(plugin, hook_name) or {}
            if hook_name == "transform_gradients" and (opts.get("wrapper") or opts.get("hookwrapper")):
                # the chain calls each implementation itself, passing on what it returns
                raise PluginValidationError(
                    plugin,
                    f"plugin {name!r}: transform_gradients cannot be a wrapper; return the new pairs instead",
                )
            spec = getattr(self.hook, hook_name).spec
            try:
                parameters = inspect.signature(method).parameters.values()
            except (TypeError, ValueError):
                continue
            positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
            takes = [p.name for p in parameters if p.kind in positional and p.default is p.empty]
            extra = [arg for arg in takes if arg not in spec.argnames]
            if extra:
                raise PluginValidationError(
                    plugin,
                    f"plugin {name!r}: its {hook_name} takes {', '.join(map(repr, extra))}, which the hook "
                    f"does not pass; {hook_name} passes: {', '.join(spec.argnames)}",
                )

    def _unknown_hook_error(self, plugin: Any) -> PluginValidationError:
        name = self.get_name(plugin) or default_plugin_name(plugin)
        unknown = [
            hook_name
            for hook_name in dir(plugin)
            if not hook_name.startswith("_")
            and self.parse_hookimpl_opts(plugin, hook_name) is not None
            and hook_name not in hookspecs.HOOK_NAMES
        ]
        parts = []
        for hook_name in unknown:
            close = difflib.get_close_matches(hook_name, hookspecs.HOOK_NAMES, n=1)
            parts.append(f"{hook_name!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
        return PluginValidationError(
            plugin,
            f"plugin {name!r} implements unknown hook(s) {', '.join(parts)}; "
            f"tapefit's hooks are: {', '.join(hookspecs.HOOK_NAMES)}",
        )

    def transform_gradients(
        self, trainer: Any, step: int, grads_and_vars: GradsAndVars, logs: dict[str, float]
    ) -> GradsAndVars:
        """Runs the ``transform_gradients`` chain: each implementation gets what the previous returned."""
        hook_impls = self.hook.transform_gradients.get_hookimpls()
        if not hook_impls:
            return grads_and_vars
        values = {"trainer": trainer, "step": step, "logs": logs}
        # pluggy's own call order is the reverse of get_hookimpls(); keep it.
        for impl in reversed(hook_impls):
            values["grads_and_vars"] = grads_and_vars
            result = impl.function(*[values[arg] for arg in impl.argnames])
            if result is not None:
                grads_and_vars = _pairs(result, impl.plugin_name)
        return grads_and_vars

    def call_each(self, hook_name: str, **kwargs: Any) -> None:
        """Calls every implementation of a hook, even when one raises (logged, not re-raised).

        Used for ``on_exception``: one plugin failing to clean up must not stop the others. Each
        failure is one line (with its traceback when debug logging is on): the exception that
        ended the fit is the one the user needs to read.
        """
        for impl in reversed(getattr(self.hook, hook_name).get_hookimpls()):
            try:
                impl.function(*[kwargs[arg] for arg in impl.argnames])
            except Exception as error:
                lines = str(error).strip().splitlines()
                logger.error(
                    "plugin %r raised in %s: %s%s",
                    impl.plugin_name,
                    hook_name,
                    type(error).__name__,
                    f": {lines[0]}" if lines else "",
                    exc_info=logger.isEnabledFor(logging.DEBUG),
                )

    def state_dicts(self) -> dict[str, Any]:
        """``{name: plugin.state_dict()}`` for every plugin that has a ``state_dict`` method."""
        states = {}
        for name, plugin in self.list_name_plugin():
            method = getattr(plugin, "state_dict", None)
            if plugin is not None and callable(method):
                states[name] = method()
        return states

    def load_state_dicts(self, states: Mapping[str, Any]) -> None:
        """Hands every stateful plugin its state back; mismatches are logged as warnings."""
        for name, plugin in self.list_name_plugin():
            method = getattr(plugin, "load_state_dict", None)
            if plugin is None or not callable(method):
                continue
            if name in states:
                method(states[name])
            else:
                logger.warning("checkpoint has no state for plugin %r; it starts fresh", name)
        unused = sorted(set(states) - {name for name, _ in self.list_name_plugin()})
        if unused:
            logger.warning("checkpoint has states for plugins that are not registered: %s", ", ".join(unused))


def _pairs(result: Any, plugin_name: str) -> GradsAndVars:
    """What a ``transform_gradients`` implementation returned, as a list of pairs; else a TypeError naming it."""
    problem = None
    try:
        pairs = result if isinstance(result, list) else list(result)
    except TypeError:
        problem = f"got {type(result).__name__}"
    else:
        for i, pair in enumerate(pairs):
            if not (isinstance(pair, (tuple, list)) and len(pair) == 2):
                problem = f"entry {i} is {type(pair).__name__}"
                break
    if problem is not None:
        raise TypeError(
            f"plugin {plugin_name!r}: transform_gradients must return a list of (gradient, variable) "
            f"pairs, or None to leave them unchanged; {problem}"
        )
    return pairs


def _unique(name: str, taken: set[str]) -> str:
    if name not in taken:
        return name
    i = 2
    while f"{name}-{i}" in taken:
        i += 1
    return f"{name}-{i}"
