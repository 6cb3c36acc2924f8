"""Keys and what they name: a section's ``type``, the keyword arguments it takes, and their checks.

A typed section's keys are read from the signature of what its ``type`` names
(``signature_params``); ``check_typed``, ``check_mapping`` and ``check_list`` check an entry
against them and return it resolved, raising a ``ConfigError`` that names the key path.
"""

from __future__ import annotations

import dataclasses
import difflib
import inspect
import os
import sys
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from tapefit.cli.config.loading import ConfigError
from tapefit.cli.config.values import describe, is_plain, kind_of, matches, plain, show
from tapefit.core import naming

REQUIRED: Any = inspect.Parameter.empty
"""The default of a key that has none: the config must give it."""


@dataclass
class Param:
    """One key a config section accepts.

    Attributes:
        name: The key.
        default: Its default, or ``REQUIRED``.
        annotation: Its type (a typing object), or ``inspect.Parameter.empty`` if unknown.
        check: Extra validation: returns the problem in words, or ``None`` if the value is fine.
    """

    name: str
    default: Any = REQUIRED
    annotation: Any = inspect.Parameter.empty
    check: Callable[[Any], str | None] | None = None


@dataclass
class Target:
    """What a section's ``type`` names: the callable and the keyword arguments it takes.

    Attributes:
        type_name: The ``type`` as written in the config.
        obj: The class or function.
        params: The keys it accepts, in signature order.
        open: True when it also takes ``**kwargs`` that cannot be traced, so any key goes.
    """

    type_name: str
    obj: Callable[..., Any]
    params: dict[str, Param] = field(default_factory=dict)
    open: bool = False


def _hints(func: Callable[..., Any]) -> dict[str, Any]:
    try:
        return typing.get_type_hints(func)
    except Exception:  # annotations a config cannot be checked against: skip the type checks
        return {}


def signature_params(obj: Callable[..., Any], skip: Sequence[str] = ()) -> tuple[dict[str, Param], bool]:
    """The keyword arguments ``obj`` accepts, from its signature and type hints.

    For a class whose ``__init__`` takes ``**kwargs``, the keyword arguments of the base
    classes' ``__init__`` are added (the Keras pattern of passing ``**kwargs`` to ``super()``).

    Args:
        obj: A class or function.
        skip: Names that are not config keys (filled in by ``train`` itself).

    Returns:
        ``(params, open)``: the keys, and whether ``**kwargs`` still accepts any other key.
    """
    if inspect.isclass(obj):
        funcs = [c.__dict__["__init__"] for c in obj.__mro__ if "__init__" in c.__dict__ and c is not object]
    else:
        funcs = [obj]
    params: dict[str, Param] = {}
    is_open = not funcs
    for func in funcs:
        try:
            signature = inspect.signature(func)
        except (TypeError, ValueError):
            return params, True
        hints = _hints(func)
        has_var_kw = False
        for i, p in enumerate(signature.parameters.values()):
            if inspect.isclass(obj) and i == 0 and p.kind is p.POSITIONAL_OR_KEYWORD:
                continue  # self
            if p.kind is p.VAR_KEYWORD:
                has_var_kw = True
            elif (
                p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
                and p.name not in params
                and p.name not in skip
            ):
                params[p.name] = Param(p.name, p.default, hints.get(p.name, inspect.Parameter.empty))
        is_open = has_var_kw
        if not has_var_kw:
            break
    return params, is_open


def search_beside(config_file: str | os.PathLike[str]) -> None:
    """Lets a config file's import paths name modules beside it: after the current directory
    and ``sys.path``, the file's folder and the folder above it are searched, so a project's
    ``configs/x.yaml`` finds its ``examples/`` or ``mypackage/`` from any working directory."""
    folder = Path(config_file).resolve().parent
    for root in (str(folder), str(folder.parent)):
        if root not in sys.path:
            sys.path.append(root)  # last: an installed package of the same name wins


def import_object(path: str, key: str) -> Callable[..., Any]:
    """``core.naming.import_object`` for a config's ``key``: the current directory is searched
    too, as ``python -m`` does, so a project's own ``examples/`` or ``mypackage/`` is found when
    ``train`` runs from its root (and beside the config file, see ``search_beside``); the
    object must be a class, a function or a module.

    Raises:
        ConfigError: naming ``key`` and what is wrong.
    """
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        obj = naming.import_object(path)
    except ValueError as e:
        raise ConfigError(f"{key}: {e}", key) from e
    if not callable(obj) and not inspect.ismodule(obj):  # a module: a plugin's hooks may be functions
        raise ConfigError(f"{key}: {path!r} is {type(obj).__name__}, not a class or function", key)
    return cast(Callable[..., Any], obj)


# --------------------------------------------------------------------------- sections


@dataclass
class Kind:
    """A config section whose entries pick a ``type`` (data, model, optimizer, loss, ...).

    Attributes:
        label: What an entry is, in messages ("data", "plugin").
        builtins: Returns the built-in types, short name to class or function.
        common: Keys every type of this section takes, handled by ``train`` itself.
        skip: Keyword arguments that ``train`` fills in, never config keys.
        nested: Keys whose mapping value is itself a typed entry of another kind
            (``optimizer.learning_rate`` may be a schedule).
        fill_defaults: Whether the resolved config lists every default of the type.
        call_functions: Whether a function named by ``type`` is called with the entry's keys
            (data loaders, model builders); otherwise it is used as it is and takes no keys
            (a loss or metric function ``(y_true, y_pred)``).
        accepts: Checks what an import path names before anything of it is called or
            instantiated: returns ``None`` when it is the right kind of thing, else what it
            must be in words (``"a tp.Module subclass"``). ``None``: anything callable.
        type_defaults: For a built-in type, other defaults of common keys: a default must not
            be wrong for one kind of entry (a grain source is not split by ``train``, so its
            ``validation_split`` is 0).
    """

    label: str
    builtins: Callable[[], Mapping[str, Callable[..., Any]]]
    common: dict[str, Param] = field(default_factory=dict)
    skip: tuple[str, ...] = ()
    nested: dict[str, str] = field(default_factory=dict)
    fill_defaults: bool = True
    call_functions: bool = True
    accepts: Callable[[Any], str | None] | None = None
    type_defaults: dict[str, dict[str, Any]] = field(default_factory=dict)


def find_target(kind: Kind, type_name: Any, key: str) -> Target:
    """Resolves a ``type`` value of a ``kind`` entry at ``key`` (the ``....type`` path).

    Raises:
        ConfigError: For a non-string, an unknown short name (listing the known ones) or an
            import path that does not import.
    """
    if not isinstance(type_name, str):
        raise ConfigError(f"{key}: expected a type name, got {show(type_name)} ({kind_of(type_name)})", key)
    if ":" in type_name:
        obj = import_object(type_name, key)
        if kind.accepts is not None:
            required = kind.accepts(obj)
        else:
            required = "a class or function" if inspect.ismodule(obj) else None
        if required is not None:
            raise ConfigError(
                f"{key}: {type_name!r} is {_what_is(obj)}, not {required}; a config calls only what its "
                "section takes (nothing was called)",
                key,
            )
    else:
        known = kind.builtins()
        type_name = _canonical(type_name, known)
        if type_name not in known:
            names = sorted(known)
            close = difflib.get_close_matches(type_name, names, n=1)
            module, dot, attribute = type_name.rpartition(".")
            if dot and module and attribute.isidentifier():
                hint = f"; did you mean the import path '{module}:{attribute}'?"
            else:
                hint = f"; did you mean {close[0]!r}?" if close else "."
            raise ConfigError(
                f"{key}: unknown {kind.label} type {type_name!r}{hint} Known types: {', '.join(names)}, "
                "or an import path 'package.module:Name'",
                key,
            )
        try:
            obj = known[type_name]
        except Exception as e:  # a lazily loaded type (a plugin's entry point) that fails to import
            detail = str(e).splitlines()[0] if str(e) else type(e).__name__
            raise ConfigError(f"{key}: {kind.label} type {type_name!r} does not load: {detail}", key) from e
    if not kind.call_functions and not inspect.isclass(obj):
        return Target(type_name, obj)
    params, is_open = signature_params(obj, kind.skip)
    return Target(type_name, obj, params, is_open)


def _what_is(obj: Any) -> str:
    """``obj`` in a few words, for "is ..., not ..." messages."""
    if inspect.isclass(obj):
        return f"the class {obj.__module__}.{obj.__qualname__}"
    if inspect.ismodule(obj):
        return f"the module {obj.__name__}"
    if callable(obj):
        name = getattr(obj, "__qualname__", None) or type(obj).__name__
        module = getattr(obj, "__module__", None)
        return f"the function {module}.{name}" if module else f"the callable {name}"
    return f"a {type(obj).__name__}"


def _canonical(name: str, known: Mapping[str, Any]) -> str:
    """The built-in short name that ``name`` spells (``"Adam"``, ``"CosineDecay"``), else ``name``."""
    for candidate in (name, name.strip().lower(), naming.to_snake_case(name)):
        if candidate in known:
            return candidate
    return name


def _check_value(value: Any, param: Param, key: str) -> None:
    ok = matches(value, param.annotation)
    if ok is False:
        raise ConfigError(
            f"{key}: expected {describe(param.annotation)}, got {show(value)} ({kind_of(value)})", key
        )
    if param.check is not None:
        problem = param.check(value)
        if problem:
            raise ConfigError(f"{key}: {problem}, got {show(value)}", key)


def unknown_key(name: str, valid: Sequence[str], prefix: str, what: str) -> ConfigError:
    key = f"{prefix}.{name}" if prefix else str(name)
    close = difflib.get_close_matches(str(name), list(valid), n=1, cutoff=0.6)
    if close:
        hint = f"did you mean {(prefix + '.' if prefix else '') + close[0]!r}?"
    else:
        hint = f"{what} takes: {', '.join(valid) or 'no keys'}"
    return ConfigError(f"{key}: unknown key; {hint}", key)


def check_mapping(
    value: Any, params: Mapping[str, Param], prefix: str, what: str, fill_defaults: bool = True
) -> dict[str, Any]:
    """Validates a mapping against ``params``: no unknown keys, types right, required present.

    Args:
        value: The mapping from the config.
        params: The keys it may have.
        prefix: Its key path (``"trainer"``), for messages.
        what: What it is in words (``"trainer"``, ``"data.type 'npz'"``), for messages.
        fill_defaults: Whether to add the missing keys' defaults to the result.

    Returns:
        A new dict in ``params`` order, then any extra keys.
    """
    if not isinstance(value, dict):
        raise ConfigError(f"{prefix}: expected a mapping, got {show(value)} ({kind_of(value)})", prefix)
    for name in value:
        if name not in params:
            raise unknown_key(name, list(params), prefix, what)
    resolved: dict[str, Any] = {}
    for name, param in params.items():
        key = f"{prefix}.{name}" if prefix else name
        if name in value:
            _check_value(value[name], param, key)
            resolved[name] = value[name]
        elif param.default is REQUIRED:
            raise ConfigError(f"{key}: missing required key ({what} needs it)", key)
        elif fill_defaults and is_plain(param.default):
            resolved[name] = plain(param.default)
    return resolved


def check_typed(value: Any, kind: Kind, prefix: str, kinds: Mapping[str, Kind]) -> dict[str, Any]:
    """Validates one typed entry (``{type: ..., key: value, ...}`` or a bare type name).

    Args:
        value: The entry from the config.
        kind: Its section.
        prefix: Its key path (``"optimizer"``, ``"plugins[1]"``).
        kinds: Every section by label, for nested entries (schedules).

    Returns:
        The entry as a mapping: ``type`` first, then the section's common keys, then the
        type's keys with their defaults filled in.
    """
    if isinstance(value, str):
        value = {"type": value}
    if not isinstance(value, dict):
        raise ConfigError(
            f"{prefix}: expected a {kind.label} type name or a mapping with a 'type' key, "
            f"got {show(value)} ({kind_of(value)})",
            prefix,
        )
    if "type" not in value:
        names = ", ".join(sorted(kind.builtins()))
        raise ConfigError(
            f"{prefix}.type: missing required key (one of: {names}, or 'package.module:Name')",
            prefix + ".type",
        )
    target = find_target(kind, value["type"], f"{prefix}.type")
    what = f"{kind.label} type {target.type_name!r}"
    # A common key wins over the type's own argument of that name (data's seed seeds both).
    params = {**kind.common, **{k: v for k, v in target.params.items() if k not in kind.common}}
    for name, default in kind.type_defaults.get(target.type_name, {}).items():
        params[name] = dataclasses.replace(params[name], default=default)
    resolved: dict[str, Any] = {"type": target.type_name}
    rest = {k: v for k, v in value.items() if k != "type"}
    nested: dict[str, Any] = {}
    for name, nested_label in kind.nested.items():
        if name not in rest or name not in params:
            continue
        if isinstance(rest[name], dict):
            nested[name] = check_typed(rest.pop(name), kinds[nested_label], f"{prefix}.{name}", kinds)
        else:
            _check_unnested(rest[name], params[name], f"{prefix}.{name}", nested_label)
    if target.open:
        known = {k: v for k, v in rest.items() if k in params}
        extra = {k: v for k, v in rest.items() if k not in params}
        resolved.update(check_mapping(known, params, prefix, what, kind.fill_defaults))
        resolved.update(extra)
    else:
        resolved.update(check_mapping(rest, params, prefix, what, kind.fill_defaults))
    for name, entry in nested.items():
        resolved[name] = entry
    return resolved


def _check_unnested(value: Any, param: Param, key: str, nested_label: str) -> None:
    """A nested key given as a plain value must fit the plain part of its annotation.

    ``float | LearningRateSchedule | Callable`` cannot be decided for ``true`` or ``'fast'``
    as a whole (a class might take them), but a config spells a schedule only as a mapping.
    """
    ann = param.annotation
    options = typing.get_args(ann) if typing.get_origin(ann) in (typing.Union, types.UnionType) else (ann,)
    plain = [a for a in options if a in (bool, int, float, str, type(None))]
    if plain and not any(matches(value, a) for a in plain):
        expected = " or ".join(describe(a) for a in plain)
        raise ConfigError(
            f"{key}: expected {expected} or a {nested_label} mapping, got {show(value)} ({kind_of(value)})",
            key,
        )


def check_list(value: Any, kind: Kind, prefix: str, kinds: Mapping[str, Kind]) -> list[Any]:
    """Validates a list of typed entries (``metrics``, ``plugins``); ``null`` is an empty list."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise ConfigError(f"{prefix}: expected a list, got {show(value)} ({kind_of(value)})", prefix)
    return [check_typed(item, kind, f"{prefix}[{i}]", kinds) for i, item in enumerate(value)]
