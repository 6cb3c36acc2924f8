"""Reading a config file: YAML or TOML, bounded in size and depth, and writing one back.

A config file is untrusted input: ``load_config_file`` reads only a regular file of at most
``MAX_BYTES``, and ``check_size`` bounds how many values it holds and how deep they nest, so a
crafted file fails with one line instead of exhausting memory. ``configurable`` marks what a
config may name by import path.
"""

from __future__ import annotations

import os
import re
import sys
import typing
from collections.abc import Mapping
from typing import Any

import yaml

from tapefit.cli.config.values import kind_of, plain
from tapefit.core import naming
from tapefit.core.files import FileRefused, open_untrusted

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib


TOP_LEVEL_KEYS = ("name", "seed", "data", "model", "loss", "metrics", "optimizer", "trainer", "plugins")

MAX_VALUES = 10_000
"""The most values (mappings, lists and scalars, each alias counted at every use) a config may hold."""

MAX_DEPTH = 20
"""The deepest a config may nest mappings and lists."""

MAX_BYTES = 2**20
"""The largest a config file may be, in bytes (configs are small: the largest shipped is 2 kB)."""

_CONFIGURABLE = naming.CONFIGURABLE_MARK

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
            f"{path}: the config must be a mapping of keys (name, data, model, ...), got {kind_of(data)}"
        )
    return data


class _Dumper(yaml.SafeDumper):
    """Mappings in block style, lists of plain values on one line (``hidden_units: [64, 64]``)."""


def _represent_list(dumper: yaml.SafeDumper, value: list[Any]) -> yaml.Node:
    flow = all(v is None or isinstance(v, (bool, int, float, str)) for v in value)
    return dumper.represent_sequence("tag:yaml.org,2002:seq", value, flow_style=flow)


_Dumper.add_representer(list, _represent_list)


def dump_config(config: Mapping[str, Any]) -> str:
    """The config as YAML text, keys in their order; ``parse_yaml`` reads it back unchanged."""
    return yaml.dump(
        plain(dict(config)), Dumper=_Dumper, sort_keys=False, default_flow_style=False, width=100
    )
