"""Configs for ``train``: loading (YAML or TOML), ``--set`` overrides and validation.

A config is a mapping with the top-level keys ``name``, ``seed``, ``data``, ``model``, ``loss``,
``metrics``, ``optimizer``, ``trainer`` and ``plugins`` (``TOP_LEVEL_KEYS``). Sections that pick
an implementation do so with ``type``: a built-in short name or an import path
``package.module:Name``; their other keys are the keyword arguments of what ``type`` names, so
the keys a type accepts, their types and which are required are read from its signature (and
annotations). ``resolve_config`` checks everything that can be checked without running
anything heavy (unknown keys, wrong types, missing keys, unknown types, import paths, data
files) and returns the resolved config: every default filled in, every shorthand expanded.

Each problem is reported as a ``ConfigError`` whose message is one line naming the key path
(``optimizer.learning_rate``, ``plugins[2].global_norm``).
"""

from __future__ import annotations

import copy
import difflib
import inspect
import os
import re
import sys
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import yaml

from tapefit.core import naming
from tapefit.core.files import FileRefused, not_regular, open_untrusted

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib

REQUIRED: Any = inspect.Parameter.empty
"""The default of a key that has none: the config must give it."""

TOP_LEVEL_KEYS = ("name", "seed", "data", "model", "loss", "metrics", "optimizer", "trainer", "plugins")

MAX_VALUES = 10_000
"""The most values (mappings, lists and scalars, each alias counted at every use) a config may hold."""

MAX_DEPTH = 20
"""The deepest a config may nest mappings and lists."""

MAX_BYTES = 2**20
"""The largest a config file may be, in bytes (configs are small: the largest shipped is 2 kB)."""

_CONFIGURABLE = "__tapefit_configurable__"

_T = typing.TypeVar("_T")


def configurable(obj: _T) -> _T:
    """Marks a function or class as one that configs may name by import path and call.

    A config's ``data`` type, and a ``loss`` or metric given as a plain function, must carry
    this mark when named by import path (``type: "mypkg.data:load_frames"``): a config names
    what it calls, and nothing unmarked is called. Models, optimizers, schedules, losses and
    metrics given as classes are recognised by their base class instead (``tp.Module``,
    ``Optimizer``, ``LearningRateSchedule``, ``Loss``, ``Metric``), plugins by their
    ``@tp.hookimpl`` methods. Returns ``obj`` unchanged but for the mark::

        @tp.configurable
        def load_frames(path: str, window: int = 8):
            ...
            return x, y
    """
    try:
        setattr(obj, _CONFIGURABLE, True)
    except (AttributeError, TypeError):
        raise TypeError(f"configurable: cannot mark {obj!r}; decorate a function or class") from None
    return obj


def is_configurable(obj: Any) -> bool:
    """Whether ``obj`` itself (not a base class) was marked with ``@configurable``."""
    return getattr(obj, "__dict__", {}).get(_CONFIGURABLE) is True


class _Loader(yaml.SafeLoader):
    """PyYAML's safe loader, reading ``1e-3`` as a float as YAML 1.2 does (1.1 wants ``1.0e-3``).

    A key given twice in one mapping is an error (YAML forbids it; PyYAML would keep the
    last one silently, so an edit to the first would do nothing).
    """

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        first_lines: dict[Any, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue  # "<<: *base" may be overridden by the keys next to it
            key = self.construct_object(key_node, deep=True)
            try:
                seen = key in first_lines
            except TypeError:  # an unhashable key: SafeConstructor reports it
                continue
            if seen:
                raise yaml.constructor.ConstructorError(
                    None,
                    None,
                    f"the key {key!r} appears twice (first at line {first_lines[key] + 1})",
                    key_node.start_mark,
                )
            first_lines[key] = key_node.start_mark.line
        return super().construct_mapping(node, deep=deep)


_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?[0-9][0-9_]*(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789"),
)


def parse_yaml(text: str) -> Any:
    """Parses YAML text the way config files are read (``1e-3`` is a float)."""
    return yaml.load(text, Loader=_Loader)  # a SafeLoader subclass: no code runs


def check_size(data: Any, where: str) -> None:
    """Refuses a loaded config that nests deeper than ``MAX_DEPTH`` or holds more than ``MAX_VALUES``.

    YAML aliases are counted at every use, as whatever walks the config later sees them, so
    an alias bomb (a few hundred bytes that expand to billions of values) stops here after
    ``MAX_VALUES`` steps, without being expanded.

    Raises:
        ConfigError: naming ``where`` (the file, or the ``--set`` item).
    """
    count = 0
    stack: list[tuple[Any, int]] = [(data, 1)]
    while stack:
        value, depth = stack.pop()
        count += 1
        if count > MAX_VALUES:
            raise ConfigError(
                f"{where}: the config holds more than {MAX_VALUES} values once its YAML aliases are "
                "expanded (an alias bomb?); configs are small"
            )
        if isinstance(value, (dict, list)):
            if depth > MAX_DEPTH:
                raise ConfigError(f"{where}: nested too deeply (a config nests at most {MAX_DEPTH} levels)")
            children = value.values() if isinstance(value, dict) else value
            stack.extend((child, depth + 1) for child in children)


class ConfigError(Exception):
    """A config (or ``--set`` override) that cannot be used; the message is one line.

    Attributes:
        key: The key path at fault (``"trainer.epochs"``), or ``None`` for the file as a whole.
    """

    def __init__(self, message: str, key: str | None = None) -> None:
        super().__init__(message)
        self.key = key


# --------------------------------------------------------------------------- loading


def load_config_file(path: str) -> dict[str, Any]:
    """Reads a YAML (``.yaml``/``.yml``) or TOML (``.toml``) config file into a dict.

    Raises:
        ConfigError: If the file is missing, unreadable, not valid YAML/TOML, or not a mapping.
    """
    ext = os.path.splitext(path)[1].lower()
    if ext not in (".yaml", ".yml", ".toml"):
        raise ConfigError(
            f"config file {path!r}: unknown format {ext or '(no extension)'!r}; use .yaml, .yml or .toml"
        )
    try:
        with open_untrusted(path, "config file", max_bytes=MAX_BYTES) as f:
            raw = f.read(MAX_BYTES + 1)
    except FileRefused as e:
        raise ConfigError(str(e)) from None
    except OSError as e:
        raise ConfigError(f"cannot read config file {path!r}: {e.strerror or e}") from e
    if len(raw) > MAX_BYTES:  # it grew after it was opened
        raise ConfigError(f"config file {path!r} is more than the {MAX_BYTES} bytes a config file may have")
    try:
        if ext == ".toml":
            data = tomllib.loads(raw.decode("utf-8"))
        else:
            data = yaml.load(raw.decode("utf-8"), Loader=_Loader)  # a SafeLoader subclass: no code runs
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{path}: not valid TOML: {e}") from e
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise ConfigError(f"{path}: not valid YAML{where}: {problem}") from e
    except UnicodeDecodeError as e:
        raise ConfigError(f"{path}: not a text file ({e.reason})") from e
    except RecursionError:
        raise ConfigError(f"{path}: nested too deeply (a config nests at most {MAX_DEPTH} levels)") from None
    check_size(data, path)
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(
            f"{path}: the config must be a mapping of keys (name, data, model, ...), got {_kind(data)}"
        )
    return data


# --------------------------------------------------------------------------- --set overrides

_PART = re.compile(r"([^.\[\]]+)((?:\[-?\d+\])*)")


def parse_key_path(key: str) -> list[str | int]:
    """Splits ``"plugins[2].global_norm"`` (or ``"plugins.2.global_norm"``) into its parts.

    Raises:
        ConfigError: If ``key`` is not a dotted key path.
    """
    parts: list[str | int] = []
    for piece in key.split("."):
        match = _PART.fullmatch(piece.strip())
        if not match:
            shown = key if len(key) <= 60 else key[:57] + "..."
            raise ConfigError(
                f"--set {shown!r}: not a key path like trainer.epochs or plugins[1].every_n_epochs"
            )
        name, indices = match.groups()
        parts.append(int(name) if re.fullmatch(r"-?\d+", name) else name)
        parts.extend(int(i) for i in re.findall(r"-?\d+", indices))
    return parts


def format_key_path(parts: Sequence[str | int]) -> str:
    """The inverse of ``parse_key_path``: ``["plugins", 2, "x"]`` gives ``"plugins[2].x"``."""
    text = ""
    for part in parts:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


def apply_overrides(config: Mapping[str, Any], overrides: Sequence[str]) -> dict[str, Any]:
    """Returns a copy of ``config`` with each ``KEY=VALUE`` of ``overrides`` applied in order.

    ``VALUE`` is parsed as YAML (``3`` an int, ``1e-3`` a float, ``true`` a bool, ``null``
    None, ``[64, 64]`` a list, anything else a string). Missing mappings on the way are
    created; a section written as a bare type name (``optimizer: adam``) becomes
    ``{type: adam}`` first, so ``--set optimizer.learning_rate=0.01`` works on it. An index
    one past the end of a list appends (``--set plugins[2]=tensorboard`` on two plugins).

    Raises:
        ConfigError: If an override is not ``KEY=VALUE``, its value is not valid YAML, or its
            path runs through something that is not a mapping or list, or past a list's end.
    """
    result = copy.deepcopy(dict(config))
    for item in overrides:
        shown = item if len(item) <= 60 else item[:57] + "..."
        key, sep, text = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--set {shown!r}: expected KEY=VALUE, for example --set trainer.epochs=3")
        parts = parse_key_path(key.strip())
        try:
            value = parse_yaml(text) if text.strip() else None
        except yaml.YAMLError as e:
            raise ConfigError(
                f"--set {shown!r}: the value is not valid YAML ({getattr(e, 'problem', e)})"
            ) from e
        except RecursionError:
            raise ConfigError(
                f"--set {shown!r}: nested too deeply (a config nests at most {MAX_DEPTH} levels)"
            ) from None
        check_size(value, f"--set {shown!r}")
        node: Any = result
        for depth, part in enumerate(parts):
            last = depth == len(parts) - 1
            where = format_key_path(parts[: depth + 1])
            if isinstance(node, list):
                if not isinstance(part, int):
                    raise ConfigError(
                        f"--set {shown!r}: {format_key_path(parts[:depth])} is a list; index it"
                    )
                if part == len(node):
                    node.append(None)  # one past the end adds an entry
                if not -len(node) <= part < len(node):
                    listed = format_key_path(parts[:depth])
                    raise ConfigError(
                        f"--set {shown!r}: {listed} has {len(node)} entries, there is no [{part}] "
                        f"({listed}[{len(node)}]=... adds one at the end)"
                    )
            elif isinstance(node, dict):
                part = str(part)
            else:
                raise ConfigError(f"--set {shown!r}: {format_key_path(parts[:depth])} is not a mapping")
            if last:
                node[part] = value
                break
            child = node.get(part) if isinstance(node, dict) else node[part]
            if child is None:
                child = [] if isinstance(parts[depth + 1], int) else {}
            elif isinstance(child, str) and not isinstance(parts[depth + 1], int):
                child = {"type": child}  # a bare type name becomes a mapping to add keys to
            elif not isinstance(child, (dict, list)):
                raise ConfigError(f"--set {shown!r}: {where} is {_kind(child)}, not a mapping")
            node[part] = child
            node = child
    check_size(result, "--set")
    return result


# --------------------------------------------------------------------------- describing values and types


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a float"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, (list, tuple)):
        return "a list"
    if isinstance(value, dict):
        return "a mapping"
    return type(value).__name__


def _show(value: Any) -> str:
    """A short rendering of a config value, as the user wrote it."""
    if isinstance(value, str):
        text = repr(value)
    else:
        text = yaml.safe_dump(_plain(value), default_flow_style=True, width=1000).strip()
        text = text.removesuffix("\n...").removesuffix("...").strip()
    return text if len(text) <= 60 else text[:57] + "..."


def _plain(value: Any) -> Any:
    """``value`` with tuples turned into lists, so YAML can write it."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _is_plain(value: Any) -> bool:
    """Whether ``value`` can appear in a config (so a signature default can be shown)."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return True
    if isinstance(value, (list, tuple)):
        return all(_is_plain(v) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _is_plain(v) for k, v in value.items())
    return False


def _matches(value: Any, ann: Any) -> bool | None:
    """Whether a config ``value`` fits the annotation ``ann``; ``None`` when it cannot tell."""
    if ann is Any or ann is object or ann is inspect.Parameter.empty:
        return True
    if ann is None or ann is type(None):
        return value is None
    origin = typing.get_origin(ann)
    if origin is typing.Union or origin is types.UnionType:
        answers = [_matches(value, a) for a in typing.get_args(ann)]
        if any(a is True for a in answers):
            return True
        return None if any(a is None for a in answers) else False
    if origin is typing.Literal:
        return value in typing.get_args(ann)
    if ann is bool:
        return isinstance(value, bool)
    if ann is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if ann is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if ann is str:
        return isinstance(value, str)
    container = origin or ann
    if container in (list, tuple, Sequence) or (
        isinstance(container, type) and container.__name__ == "Sequence"
    ):
        if not isinstance(value, (list, tuple)):
            return False
        args = [a for a in typing.get_args(ann) if a is not Ellipsis]
        if len(args) == 1 or (container is tuple and len(set(args)) == 1 and args):
            answers = [_matches(v, args[0]) for v in value]
            if any(a is False for a in answers):
                return False
        return True
    if container in (dict, Mapping):
        return isinstance(value, dict)
    return None  # a class the config cannot spell (a schedule object, a callable, ...)


def _describe(ann: Any) -> str:
    """The annotation ``ann`` in words, for "expected ..." messages."""
    if ann is None or ann is type(None):
        return "null"
    origin = typing.get_origin(ann)
    if origin is typing.Union or origin is types.UnionType:
        names = [_describe(a) for a in typing.get_args(ann)]
        return " or ".join(dict.fromkeys(names))
    if origin is typing.Literal:
        return "one of " + ", ".join(_show(a) for a in typing.get_args(ann))
    simple = {bool: "true or false", int: "an integer", float: "a number", str: "a string"}
    if ann in simple:
        return simple[ann]
    container = origin or ann
    if container in (dict, Mapping):
        return "a mapping"
    if container in (list, tuple, Sequence) or typing.get_args(ann):
        args = [a for a in typing.get_args(ann) if a is not Ellipsis]
        if args:
            inner = _describe(args[0])
            inner = inner.removeprefix("an ").removeprefix("a ")
            return f"a list of {inner}s" if " or " not in inner else f"a list of ({inner})"
        return "a list"
    return getattr(ann, "__name__", str(ann))


# --------------------------------------------------------------------------- keys and their targets


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


def import_object(path: str, key: str) -> Callable[..., Any]:
    """``core.naming.import_object`` for a config's ``key``: the current directory is searched
    too, as ``python -m`` does, so a project's own ``examples/`` or ``mypackage/`` is found when
    ``train`` runs from its root; the object must be a class, a function or a module.

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
    """

    label: str
    builtins: Callable[[], Mapping[str, Callable[..., Any]]]
    common: dict[str, Param] = field(default_factory=dict)
    skip: tuple[str, ...] = ()
    nested: dict[str, str] = field(default_factory=dict)
    fill_defaults: bool = True
    call_functions: bool = True
    accepts: Callable[[Any], str | None] | None = None


def find_target(kind: Kind, type_name: Any, key: str) -> Target:
    """Resolves a ``type`` value of a ``kind`` entry at ``key`` (the ``....type`` path).

    Raises:
        ConfigError: For a non-string, an unknown short name (listing the known ones) or an
            import path that does not import.
    """
    if not isinstance(type_name, str):
        raise ConfigError(f"{key}: expected a type name, got {_show(type_name)} ({_kind(type_name)})", key)
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
    ok = _matches(value, param.annotation)
    if ok is False:
        raise ConfigError(
            f"{key}: expected {_describe(param.annotation)}, got {_show(value)} ({_kind(value)})", key
        )
    if param.check is not None:
        problem = param.check(value)
        if problem:
            raise ConfigError(f"{key}: {problem}, got {_show(value)}", key)


def _unknown_key(name: str, valid: Sequence[str], prefix: str, what: str) -> ConfigError:
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
        raise ConfigError(f"{prefix}: expected a mapping, got {_show(value)} ({_kind(value)})", prefix)
    for name in value:
        if name not in params:
            raise _unknown_key(name, list(params), prefix, what)
    resolved: dict[str, Any] = {}
    for name, param in params.items():
        key = f"{prefix}.{name}" if prefix else name
        if name in value:
            _check_value(value[name], param, key)
            resolved[name] = value[name]
        elif param.default is REQUIRED:
            raise ConfigError(f"{key}: missing required key ({what} needs it)", key)
        elif fill_defaults and _is_plain(param.default):
            resolved[name] = _plain(param.default)
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
            f"got {_show(value)} ({_kind(value)})",
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
    if plain and not any(_matches(value, a) for a in plain):
        expected = " or ".join(_describe(a) for a in plain)
        raise ConfigError(
            f"{key}: expected {expected} or a {nested_label} mapping, got {_show(value)} ({_kind(value)})",
            key,
        )


def check_list(value: Any, kind: Kind, prefix: str, kinds: Mapping[str, Kind]) -> list[Any]:
    """Validates a list of typed entries (``metrics``, ``plugins``); ``null`` is an empty list."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise ConfigError(f"{prefix}: expected a list, got {_show(value)} ({_kind(value)})", prefix)
    return [check_typed(item, kind, f"{prefix}[{i}]", kinds) for i, item in enumerate(value)]


# --------------------------------------------------------------------------- the schema of a config


def _at_least(low: float) -> Callable[[Any], str | None]:
    return lambda v: None if v >= low else f"must be at least {low}"


def _check_name(v: str) -> str | None:
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", v) or v in (".", ".."):
        return "must be a folder name of letters, digits, '.', '_' and '-'"
    return None


def _check_split(v: float) -> str | None:
    return None if 0.0 <= v < 1.0 else "must be in [0, 1)"


def _check_file(v: str) -> str | None:
    try:
        kind = not_regular(os.stat(v).st_mode)
    except (OSError, ValueError):
        return f"file {v!r} does not exist"
    return None if kind is None else f"{v!r} is {kind}, not a regular file"


def _check_threads(v: Any) -> str | None:
    if v is None or v == "auto" or (isinstance(v, int) and not isinstance(v, bool) and v >= 1):
        return None
    return "must be auto, null or a whole number >= 1"


_NOT_TRAINER_KEYS = (
    "self",
    "x",
    "y",
    "validation_data",
    "resume_from",
    "initial_epoch",
    "sample_weight",
    "class_weight",
    "validation_split",
    "model",
    "optimizer",
    "loss",
    "metrics",
    "plugins",
    "config",
)
"""``fit``'s and ``Trainer``'s arguments that other sections or the command itself give."""


def trainer_params() -> dict[str, Param]:
    """The ``trainer`` section, derived as every other section is: ``Trainer.fit``'s arguments
    that are not data (``epochs``, ``batch_size``, ``shuffle``, ``drop_last``, ``verbose``,
    ``steps_per_epoch``, ``validation_steps``) and ``Trainer``'s own (``output_dir``,
    ``compile``, ``threads``), with their defaults, checked by the trainer's own rules."""
    from tapefit.training.trainer import FIT_RULES, Trainer

    fit, _ = signature_params(Trainer.fit, skip=_NOT_TRAINER_KEYS)
    init, _ = signature_params(Trainer, skip=_NOT_TRAINER_KEYS)
    params = {**fit, **init}
    for name, param in params.items():
        param.check = FIT_RULES.get(name, _check_threads if name == "threads" else None)
    params["output_dir"].annotation = str | None  # a config names a folder by a string
    return params


DATA_COMMON: dict[str, Param] = {
    "validation_split": Param("validation_split", 0.2, float, _check_split),
    "standardize": Param("standardize", False, bool),
    "seed": Param("seed", None, int | None),
    "workers": Param("workers", 0, int, _at_least(0)),
    "prefetch": Param("prefetch", 2, int, _at_least(1)),
    "map": Param("map", None, str | None),
}
"""Keys every data type takes: the held-out share, standardization, the split's seed, and the
worker processes, batches read ahead and per-sample function of a ``tp.data.Pipeline``."""


@dataclass
class Schema:
    """Everything ``resolve_config`` needs to know about the sections' types.

    Attributes:
        kinds: The typed sections by label: ``data``, ``model``, ``loss``, ``metric``,
            ``optimizer``, ``schedule``, ``plugin``.
        trainer: The keys of the ``trainer`` section.
        default_optimizer: The optimizer when the config has none.
    """

    kinds: dict[str, Kind]
    trainer: dict[str, Param] = field(default_factory=trainer_params)
    default_optimizer: str = "rmsprop"


def resolve_config(config: Mapping[str, Any], schema: Schema, default_name: str = "run") -> dict[str, Any]:
    """Validates a config and returns it resolved: defaults filled in, shorthands expanded.

    Nothing is built and nothing is written; files named by ``data.path`` must exist and
    import paths must import.

    Args:
        config: The config as loaded (and overridden).
        schema: The sections' types.
        default_name: The run's name when the config has none (the config file's stem).

    Returns:
        The resolved config, its sections in the order of ``TOP_LEVEL_KEYS``.

    Raises:
        ConfigError: For the first problem found, naming its key path.
    """
    for name in config:
        if name not in TOP_LEVEL_KEYS:
            raise _unknown_key(name, TOP_LEVEL_KEYS, "", "a config")
    top: dict[str, Param] = {
        "name": Param("name", default_name, str, _check_name),
        "seed": Param("seed", 0, int),
    }
    for key in ("data", "model", "loss"):
        if key not in config:
            raise ConfigError(f"{key}: missing required key (a config needs data, model and loss)", key)
    resolved: dict[str, Any] = check_mapping({k: config[k] for k in top if k in config}, top, "", "a config")
    kinds = schema.kinds
    resolved["data"] = check_typed(config["data"], kinds["data"], "data", kinds)
    for name, value in resolved["data"].items():
        if name == "path" and isinstance(value, str):
            # npy data may be a folder (x.npy and y.npy, or folders of shards)
            problem = (
                None if resolved["data"]["type"] == "npy" and os.path.isdir(value) else _check_file(value)
            )
            if problem:
                raise ConfigError(f"data.path: {problem}", "data.path")
    if resolved["data"].get("seed") is None:
        resolved["data"]["seed"] = resolved["seed"]
    resolved["model"] = check_typed(config["model"], kinds["model"], "model", kinds)
    resolved["loss"] = check_typed(config["loss"], kinds["loss"], "loss", kinds)
    resolved["metrics"] = check_list(config.get("metrics"), kinds["metric"], "metrics", kinds)
    resolved["optimizer"] = check_typed(
        config.get("optimizer", schema.default_optimizer), kinds["optimizer"], "optimizer", kinds
    )
    resolved["trainer"] = check_mapping(config.get("trainer") or {}, schema.trainer, "trainer", "trainer")
    resolved["plugins"] = check_list(config.get("plugins"), kinds["plugin"], "plugins", kinds)
    return resolved


class _Dumper(yaml.SafeDumper):
    """Mappings in block style, lists of plain values on one line (``hidden_units: [64, 64]``)."""


def _represent_list(dumper: yaml.SafeDumper, value: list[Any]) -> yaml.Node:
    flow = all(v is None or isinstance(v, (bool, int, float, str)) for v in value)
    return dumper.represent_sequence("tag:yaml.org,2002:seq", value, flow_style=flow)


_Dumper.add_representer(list, _represent_list)


def dump_config(config: Mapping[str, Any]) -> str:
    """The config as YAML text, keys in their order; ``parse_yaml`` reads it back unchanged."""
    return yaml.dump(
        _plain(dict(config)), Dumper=_Dumper, sort_keys=False, default_flow_style=False, width=100
    )
