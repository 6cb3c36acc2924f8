"""``--set key.path=value`` overrides: parsing a key path and applying values to a config."""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping, Sequence
from typing import Any

import yaml

from tapefit.cli.config.loading import MAX_DEPTH, ConfigError, check_size, parse_yaml
from tapefit.cli.config.values import kind_of

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
                raise ConfigError(f"--set {shown!r}: {where} is {kind_of(child)}, not a mapping")
            node[part] = child
            node = child
    check_size(result, "--set")
    return result
