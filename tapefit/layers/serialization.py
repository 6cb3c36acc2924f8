"""Configs: objects as plain JSON values, and back, without running any code a file names.

An object's serialized form is ``{"module": namespace, "class_name": name, "config": {...}}``,
Keras 3's form: ``config`` is what ``get_config()`` returns and ``from_config(config)`` takes.
``module`` is a namespace, never imported: ``"tapefit.layers"``, ``"tapefit.losses"``,
``"tapefit.metrics"``, ``"tapefit.initializers"``, ``"tapefit.regularizers"``, ``"tapefit.constraints"``,
``"tapefit.optimizers"``, ``"tapefit.optimizers.schedules"`` for the built-in classes, and
``"custom"`` for what a user registered with ``register_serializable``. Deserializing looks a
class up in a table of these namespaces: a name that is not there is refused, whatever it is.

A layer's config is the arguments its constructor was called with (``Module`` records them),
defaults filled in, with ``name``, ``trainable`` and ``dtype`` as they are now; activations
by name, initializers, regularizers, constraints and layers nested in their serialized form.
"""

from __future__ import annotations

import contextlib
import inspect
import math
import re
import threading
from collections.abc import Callable, Iterator, Mapping
from typing import Any, TypeVar

import numpy as np

from tapefit.core.messages import shown

_T = TypeVar("_T")

CUSTOM = "custom"
"""The namespace of the classes and functions registered with ``register_serializable``."""

_registered: dict[str, Any] = {}


class ConfigError(ValueError):
    """A config that does not describe an object this process can rebuild without running code
    a file names: an unknown or unregistered class, an unknown key, a bad value. One line."""


def register_serializable(
    obj: _T | None = None, *, package: str | None = None, name: str | None = None
) -> Any:
    """Registers a class (a layer, model, loss, metric, initializer, regularizer, optimizer or
    schedule) or a function (an activation, a ``Lambda``'s function, a loss) so that model
    files can name it and ``tp.models.load_model`` can rebuild it.

    Loading a model file never imports or runs what the file names: it looks each class up among
    the built-in ones and the registered ones only. Register a class in the module that defines
    it, so that importing that module before ``load_model`` registers it::

        @tp.register_serializable
        class Scale(tp.layers.Layer):
            def __init__(self, factor: float = 2.0, name: str | None = None) -> None:
                super().__init__(name=name)
                self.factor = factor

            def call(self, x):
                return x * self.factor

    A layer's config is the arguments its constructor was called with (plain values, layers,
    initializers...), so most layers need no ``get_config`` of their own; override
    ``get_config`` and ``from_config`` when the constructor takes something else.

    As Keras's ``register_keras_serializable(package=...)``, a package makes the name
    ``"package>Name"``, so that two packages may each have a ``Scale``.

    Args:
        obj: the class or function (the decorator form passes it).
        package: the package the name belongs to (none by default: the name alone).
        name: the name files know it by (default: its ``__name__``).

    Returns:
        ``obj`` unchanged (or, called with ``name=`` only, a decorator).

    Raises:
        ValueError: another object is registered under that name.
        TypeError: ``obj`` is neither a class nor a function.
    """

    def register(target: _T) -> _T:
        if not callable(target):
            raise TypeError(f"register_serializable: register a class or a function, got {shown(target)}")
        key = name if name is not None else getattr(target, "__name__", None)
        if not isinstance(key, str) or not key or key.startswith("<"):
            raise ValueError(f"register_serializable: give {shown(target)} a name=")
        if package is not None:
            if not isinstance(package, str) or not package or ">" in package:
                raise ValueError(
                    f"register_serializable: package must be a name without '>', got {shown(package)}"
                )
            key = f"{package}>{key}"
        present = _registered.get(key)
        if present is not None and present is not target and _qualified(present) != _qualified(target):
            raise ValueError(
                f"register_serializable: the name {shown(key)} is taken by {_qualified(present)}; "
                f"pass name= to register {_qualified(target)}"
            )
        _registered[key] = target
        return target

    return register if obj is None else register(obj)


_scope = threading.local()


@contextlib.contextmanager
def custom_object_scope(objects: Mapping[str, Any] | None) -> Iterator[None]:
    """While open, configs may name the classes and functions of ``objects`` (Keras's
    ``custom_objects``): an entry whose class name, or the part of it after ``package>``, is a
    key of ``objects`` gets that object, before the built-in and registered ones.

    Raises:
        TypeError: ``objects`` is not a dict of names to classes or functions.
    """
    objects = dict(objects or {})
    for key, value in objects.items():
        if not isinstance(key, str) or not callable(value):
            raise TypeError(
                f"custom_objects must map names to classes or functions, got {shown(key)}: {shown(value)}"
            )
    outer = getattr(_scope, "objects", {})
    _scope.objects = {**outer, **objects}
    try:
        yield
    finally:
        _scope.objects = outer


def _custom_object(name: str) -> Any:
    """The object a ``custom_object_scope`` gives ``name`` (or ``package>name``), or ``None``."""
    objects = getattr(_scope, "objects", None)
    if not objects:
        return None
    found = objects.get(name)
    return found if found is not None else objects.get(name.rpartition(">")[2])


def _qualified(obj: Any) -> str:
    return f"{getattr(obj, '__module__', '?')}.{getattr(obj, '__qualname__', repr(obj))}"


def registered_name(obj: Any) -> str | None:
    """The name ``obj`` (a class or function) was registered under, or ``None``."""
    return next((key for key, value in _registered.items() if value is obj), None)


# -- the built-in tables -----------------------------------------------------------


def _namespace(cls: type) -> str | None:
    """The namespace of a built-in class (``tapefit.layers.losses.Huber`` -> ``tapefit.losses``)."""
    module = cls.__module__
    for prefix, space in (
        ("tapefit.layers.losses", "tapefit.losses"),
        ("tapefit.layers.metrics", "tapefit.metrics"),
        ("tapefit.layers.initializers", "tapefit.initializers"),
        ("tapefit.layers.regularizers", "tapefit.regularizers"),
        ("tapefit.layers.constraints", "tapefit.constraints"),
        ("tapefit.optimizers.schedules", "tapefit.optimizers.schedules"),
        ("tapefit.optimizers", "tapefit.optimizers"),
        ("tapefit.layers", "tapefit.layers"),
        ("tapefit.core.random", "tapefit.random"),
    ):
        if module == prefix or module.startswith(prefix + "."):
            return space
    return None


def layer_tables() -> dict[str, dict[str, type]]:
    """The built-in classes that layers' configs may name: ``{namespace: {class name: class}}``."""
    from tapefit import layers
    from tapefit.core import random
    from tapefit.layers import constraints, initializers, losses, metrics, regularizers
    from tapefit.layers.module import Module

    # Base classes that leave their work to subclasses (a Module has no call, a Loss no
    # call): a file that names one would load and fail at its first use.
    unfinished: tuple[type, ...] = (Module, layers.Layer, losses.Loss, metrics.Metric)
    unfinished += (initializers.Initializer, regularizers.Regularizer)

    def classes(module: Any, base: type, names: Any) -> dict[str, type]:
        found = {}
        for key in names:
            value = getattr(module, key, None)
            if isinstance(value, type) and issubclass(value, base) and value not in unfinished:
                found[value.__name__] = value
        return found

    return {
        "tapefit.layers": classes(layers, Module, layers.__all__),
        "tapefit.losses": classes(losses, losses.Loss, losses.__all__),
        # every Metric class, "accuracy"'s own chooser included (a trainer's metrics may hold it)
        "tapefit.metrics": classes(metrics, metrics.Metric, vars(metrics)),
        "tapefit.initializers": classes(initializers, initializers.Initializer, initializers.__all__),
        "tapefit.regularizers": classes(regularizers, regularizers.Regularizer, regularizers.__all__),
        "tapefit.constraints": classes(constraints, constraints.Constraint, constraints.__all__),
        # a layer's seed may be a SeedGenerator; its state comes back with the weights
        "tapefit.random": {"SeedGenerator": random.SeedGenerator},
    }


# -- to plain values -----------------------------------------------------------------


def serialize(obj: Any, where: str = "") -> dict[str, Any]:
    """``{"module", "class_name", "config"}`` for an object with ``get_config``, or for a
    registered function (its config is ``{}``).

    Raises:
        ConfigError: the object's class is neither built in nor registered, or its config
            holds a value that is not plain data (the message names where).
    """
    where = where or type(obj).__name__
    if not isinstance(obj, type) and callable(getattr(obj, "get_config", None)):
        config = obj.get_config()
        if not isinstance(config, Mapping):
            raise ConfigError(
                f"{where}: {type(obj).__name__}.get_config() returned {type(config).__name__}, not a dict"
            )
        return entry(type(obj), config, where)
    name = registered_name(obj)
    if name is not None:
        return {"module": CUSTOM, "class_name": name, "config": {}}
    if callable(obj):
        raise ConfigError(
            f"{where}: {shown(obj, 120)} cannot be saved in a model file (a file holds no code); decorate it "
            "with @tp.register_serializable"
        )
    raise ConfigError(
        f"{where}: a {type(obj).__name__} ({shown(obj)}) is not a plain value a config can hold; "
        "write get_config/from_config for the class that takes it"
    )


def entry(cls: type, config: Mapping[str, Any], where: str) -> dict[str, Any]:
    """``{"module", "class_name", "config"}`` for an object of class ``cls`` with ``config``.

    Raises:
        ConfigError: ``cls`` is neither built in nor registered, or ``config`` holds a value
            that is not plain data.
    """
    name = registered_name(cls)
    space = CUSTOM if name is not None else _namespace(cls)
    if space is None or (name is None and cls.__name__.startswith("_") and space != "tapefit.metrics"):
        raise ConfigError(
            f"{where}: {cls.__module__}.{cls.__qualname__} is not a built-in class; decorate it "
            "with @tp.register_serializable so that a model file can name it"
        )
    return {"module": space, "class_name": name or cls.__name__, "config": to_plain(dict(config), where)}


def to_plain(value: Any, where: str) -> Any:
    """``value`` as JSON values: tuples as lists, NumPy numbers as Python ones, dtypes by name,
    built-in activations by name, objects with ``get_config`` and registered functions in
    their serialized form.

    Raises:
        ConfigError: a value that none of these covers (naming ``where`` and the value).
    """
    from tapefit.layers import activations

    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        if not math.isfinite(value):
            raise ConfigError(f"{where}: {shown(value)} is not a finite number, which JSON cannot hold")
        return float(value)
    if isinstance(value, np.bool_):
        return bool(value)
    if isinstance(value, np.dtype):
        return value.name
    if isinstance(value, (list, tuple)):
        return [to_plain(v, f"{where}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, Mapping):
        if not all(isinstance(k, str) for k in value):
            raise ConfigError(f"{where}: a dict with keys that are not strings cannot be saved")
        return {k: to_plain(v, f"{where}.{k}") for k, v in value.items()}
    if callable(value) and not isinstance(value, type) and registered_name(value) is None:
        name = activations.registry.name_of(value)
        if name is not None:
            return name
    return serialize(value, where)


# -- from plain values ---------------------------------------------------------------

_ENTRY_KEYS = ("module", "class_name", "config")


def is_entry(value: Any) -> bool:
    """Whether ``value`` is an object's serialized form (a dict with a ``class_name``)."""
    return isinstance(value, dict) and "class_name" in value


def lookup(entry: Any, tables: Mapping[str, Mapping[str, type]], where: str) -> tuple[Any, dict[str, Any]]:
    """The class (or registered function) an entry names, and its config.

    Raises:
        ConfigError: the entry is malformed, or names a class that is neither in ``tables``
            nor registered (an import path is refused as such: files import nothing).
    """
    if not isinstance(entry, dict):
        raise ConfigError(f"{where}: expected an object's config, got {type(entry).__name__}")
    unknown = sorted(set(entry) - set(_ENTRY_KEYS))
    if unknown:
        raise ConfigError(
            f"{where}: unknown key {shown(unknown[0])} (an object's entry has {', '.join(_ENTRY_KEYS)})"
        )
    missing = [k for k in _ENTRY_KEYS if k not in entry]
    if missing:
        raise ConfigError(f"{where}: the object's entry has no {shown(missing[0])}")
    space, name, config = entry["module"], entry["class_name"], entry["config"]
    if not isinstance(name, str) or not isinstance(space, str):
        raise ConfigError(f"{where}: 'module' and 'class_name' must be strings")
    if not isinstance(config, dict):
        raise ConfigError(f"{where}: the config of {shown(name)} must be a dict, got {type(config).__name__}")
    quoted = shown(name)
    scoped = _custom_object(name)
    if scoped is not None:
        return scoped, config
    if space == CUSTOM:
        target = _registered.get(name)
        if target is None:
            path = " (model files name classes, they never import them)" if _looks_like_path(name) else ""
            raise ConfigError(
                f"{where}: the class {quoted} is not registered{path}; import the module that defines it, "
                "decorated with @tp.register_serializable, before loading"
            )
        return target, config
    table = tables.get(space)
    if table is None:
        raise ConfigError(
            f"{where}: unknown module {shown(space)} (known: {', '.join(sorted(tables))}, custom)"
        )
    target = table.get(name)
    if target is None:
        if _looks_like_path(name):
            raise ConfigError(
                f"{where}: the class name {quoted} is an import path, and model files import nothing; "
                "register the class with @tp.register_serializable"
            )
        raise ConfigError(
            f"{where}: {quoted} is not a class of {space}; a class of your own needs "
            "@tp.register_serializable (and 'module': 'custom')"
        )
    return target, config


def _looks_like_path(name: str) -> bool:
    return any(c in name for c in ".:/")


def deserialize(entry: Any, tables: Mapping[str, Mapping[str, type]], where: str) -> Any:
    """The object an entry describes: ``cls.from_config(config)``, or a registered function.

    Raises:
        ConfigError: as ``lookup``, or the class refuses its config (the message names it).
    """
    target, config = lookup(entry, tables, where)
    if not isinstance(target, type):
        if config:
            raise ConfigError(f"{where}: the function {shown(entry['class_name'])} takes no config")
        return target
    from_config = getattr(target, "from_config", None)
    if from_config is None:
        raise ConfigError(f"{where}: {target.__name__} has no from_config")
    try:
        obj = from_config(config)
        forget_default_name(obj)
        return obj
    except ConfigError:
        raise
    except (
        TypeError,
        ValueError,
        KeyError,
        IndexError,
        OverflowError,
        MemoryError,
        NotImplementedError,
    ) as error:
        message = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise ConfigError(f"{where}: {target.__name__}: {message}") from None


def forget_default_name(obj: Any) -> None:
    """Treats a rebuilt module's name as the default it was (``dense_3`` for a Dense) rather than
    one given, so that its variable paths are those of the same model built by code."""
    from tapefit.layers.module import Module, _class_snake_name

    if isinstance(obj, Module) and obj._name_given:
        if re.fullmatch(re.escape(_class_snake_name(type(obj))) + r"(_\d+)?", obj.name):
            obj._name_given = False


def serialize_layer(layer: Any) -> dict[str, Any]:
    """A layer (or model) as ``{"module", "class_name", "config"}`` plain values
    (``keras.layers.serialize``); ``deserialize_layer`` makes it again.

    Raises:
        ConfigError: the layer's class is neither built in nor registered, or its config
            holds what a file cannot describe (named).
    """
    return serialize(layer, f"serialize: {type(layer).__name__}")


def deserialize_layer(config: Mapping[str, Any], custom_objects: Mapping[str, Any] | None = None) -> Any:
    """A new layer (or model) from ``serialize_layer``'s form (``keras.layers.deserialize``).

    Args:
        config: the serialized layer.
        custom_objects: classes and functions by name, beside the built-in and registered ones.

    Raises:
        ConfigError: an unknown class or key, named.
    """
    with custom_object_scope(custom_objects):
        return deserialize(
            dict(config) if isinstance(config, Mapping) else config, layer_tables(), "deserialize"
        )


def from_plain(value: Any, tables: Mapping[str, Mapping[str, type]], where: str) -> Any:
    """``value`` with every serialized object in it (``is_entry``) deserialized."""
    if is_entry(value):
        return deserialize(value, tables, where)
    if isinstance(value, list):
        return [from_plain(v, tables, f"{where}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, dict):
        return {k: from_plain(v, tables, f"{where}.{k}") for k, v in value.items()}
    return value


# -- configs from constructor arguments ------------------------------------------------


def constructor_config(obj: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    """The config of ``obj`` from the arguments its constructor was called with: every
    parameter of ``__init__`` (defaults filled in), then ``name``, ``trainable`` and ``dtype``
    as the object has them now. Values are left as they are (``serialize`` makes them plain).

    Raises:
        ConfigError: the constructor takes ``*args`` and was given some (write a ``get_config``).
    """
    cls = type(obj)
    signature = inspect.signature(cls.__init__)
    try:
        bound = signature.bind(obj, *args, **kwargs)
    except TypeError as error:
        raise ConfigError(f"{cls.__name__}: its constructor arguments do not bind ({error})") from None
    bound.apply_defaults()
    config: dict[str, Any] = {}
    for position, (key, parameter) in enumerate(signature.parameters.items()):
        if position == 0:
            continue  # self
        if parameter.kind is parameter.VAR_POSITIONAL:
            if bound.arguments.get(key):
                raise ConfigError(
                    f"{cls.__name__} was given positional *{key}; define get_config/from_config for it"
                )
        elif parameter.kind is parameter.VAR_KEYWORD:
            config.update(bound.arguments.get(key, {}))
            config.update({k: v for k, v in _inherited_defaults(cls).items() if k not in config})
        else:
            config[key] = bound.arguments[key]
    if "name" in config:
        config["name"] = obj.name
    if "trainable" in config:
        config["trainable"] = bool(obj.trainable)
    if "dtype" in config and isinstance(getattr(obj, "dtype", None), np.dtype):
        config["dtype"] = obj.dtype.name
    return config


def _inherited_defaults(cls: type) -> dict[str, Any]:
    """The keyword arguments with defaults that a constructor's ``**kwargs`` passes on to the
    constructors above it (``LSTM(units, **kwargs)`` reaches ``SimpleRNN``'s ``return_sequences``)."""
    defaults: dict[str, Any] = {}
    for base in cls.__mro__[1:]:
        init = base.__dict__.get("__init__")
        if init is None or base is object:
            continue
        parameters = inspect.signature(init).parameters
        for key, parameter in parameters.items():
            if parameter.default is not parameter.empty and parameter.kind is not parameter.POSITIONAL_ONLY:
                defaults.setdefault(key, parameter.default)
        if not any(p.kind is p.VAR_KEYWORD for p in parameters.values()):
            break
    return defaults


def check_arguments(cls: type, config: Mapping[str, Any], function: Callable[..., Any] | None = None) -> None:
    """Checks that ``config``'s keys are arguments of ``cls``'s constructor (or of ``function``).

    Raises:
        ConfigError: naming the first unknown key and the known ones.
    """
    if not isinstance(config, Mapping):
        raise ConfigError(f"{cls.__name__}: a config must be a dict, got {type(config).__name__}")
    parameters = inspect.signature(function if function is not None else cls.__init__).parameters  # type: ignore[misc]
    if any(p.kind is p.VAR_KEYWORD for p in parameters.values()):
        return
    known = [k for k, p in parameters.items() if p.kind not in (p.VAR_POSITIONAL,) and k != "self"]
    for key in config:
        if key not in known:
            raise ConfigError(
                f"{cls.__name__}: unknown key {shown(str(key))} in its config (known: {', '.join(known)})"
            )


def from_constructor_config(cls: type[_T], config: Mapping[str, Any]) -> _T:
    """``cls(**config)`` with its serialized values deserialized, once every key is known to be
    an argument of ``cls``'s constructor.

    Raises:
        ConfigError: an unknown key, or a nested object that cannot be rebuilt.
    """
    check_arguments(cls, config)
    values = from_plain(dict(config), layer_tables(), cls.__name__)
    return cls(**values)


def attribute_config(obj: Any) -> dict[str, Any]:
    """The config of an object that keeps each constructor argument in the attribute of that
    name (losses, metrics, initializers, regularizers), as plain values.

    Raises:
        ConfigError: an argument the object keeps under no attribute of its name.
    """
    cls = type(obj)
    config = {}
    for key, parameter in inspect.signature(cls.__init__).parameters.items():
        if key == "self" or parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
            continue
        if not hasattr(obj, key):
            raise ConfigError(f"{cls.__name__} keeps no attribute {shown(key)}; define its get_config")
        config[key] = getattr(obj, key)
    return to_plain(config, cls.__name__)
