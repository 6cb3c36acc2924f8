"""Turning config entries (names, ``{type: ..., ...}`` dicts) into optimizers and schedules."""

from __future__ import annotations

import importlib
import inspect
import math
import numbers
from collections.abc import Mapping
from typing import Any


def snake_case(name: str) -> str:
    """``"CosineDecay"`` -> ``"cosine_decay"``; ``"RMSprop"`` -> ``"rmsprop"``."""
    out = []
    for i, ch in enumerate(name):
        if ch.isupper() and i and name[i - 1].islower():
            out.append("_")
        out.append(ch.lower())
    return "".join(out)


def import_object(path: str, kind: str) -> Any:
    """The object named by ``"package.module:Name"``."""
    module_name, _, attr = path.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise ValueError(f"{kind} {path!r}: cannot import module {module_name!r} ({error})") from None
    try:
        return getattr(module, attr)
    except AttributeError:
        raise ValueError(f"{kind} {path!r}: module {module_name!r} has no attribute {attr!r}") from None


def lookup(kind: str, name: str, registry: Mapping[str, type]) -> type:
    """The class registered as ``name`` (any case, CamelCase or snake_case) or at an import path."""
    if ":" in name:
        cls = import_object(name, kind)
        if not isinstance(cls, type):
            raise ValueError(f"{kind} {name!r} is not a class")
        return cls
    key = name.strip().lower()
    for candidate in (key, snake_case(name.strip())):
        if candidate in registry:
            return registry[candidate]
    known = ", ".join(sorted(registry))
    raise ValueError(
        f"unknown {kind} {name!r}; known names: {known} (or an import path 'package.module:Class')"
    )


def build(kind: str, config: Mapping[str, Any], registry: Mapping[str, type]) -> Any:
    """Builds ``{type: name, **kwargs}`` (Keras' ``{class_name, config}`` form is accepted too)."""
    if "class_name" in config and "type" not in config:
        name, kwargs = config["class_name"], dict(config.get("config") or {})
    else:
        if "type" not in config:
            raise ValueError(f"a {kind} config needs a 'type' key naming the {kind}, got {dict(config)!r}")
        kwargs = {k: v for k, v in config.items() if k != "type"}
        name = config["type"]
    if not isinstance(name, str):
        raise ValueError(f"{kind} 'type' must be a string, got {name!r}")
    cls = lookup(kind, name, registry)
    try:
        inspect.signature(cls).bind(**kwargs)
    except TypeError as error:
        accepted = ", ".join(p for p in inspect.signature(cls).parameters if p not in ("self", "kwargs"))
        raise ValueError(f"{kind} {name!r}: {error}; it accepts: {accepted}") from None
    return cls(**kwargs)


def check_float(
    name: str,
    value: Any,
    low: float | None = None,
    high: float | None = None,
    high_open: bool = False,
    low_open: bool = False,
) -> float:
    """``value`` as a float in ``[low, high]`` (``high_open``/``low_open`` exclude the bound).

    Raises:
        TypeError: ``value`` is not a real number (YAML's ``1e-3``, a string, is named).
        ValueError: it lies outside the range.
    """
    if isinstance(value, str):
        hint = " (YAML reads 1e-3 as a string: write 1.0e-3)" if _looks_numeric(value) else ""
        raise TypeError(f"`{name}` must be a number, got the string {value!r}{hint}")
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        try:
            value = float(value)  # 0-d arrays and one-element tensors
        except (TypeError, ValueError):
            raise TypeError(f"`{name}` must be a number, got {type(value).__name__} {value!r}") from None
    value = float(value)
    if math.isnan(value):
        raise ValueError(f"`{name}` must be a number, got nan")
    too_low = low is not None and (value <= low if low_open else value < low)
    too_high = high is not None and (value >= high if high_open else value > high)
    if too_low or too_high:
        lo = "-inf" if low is None else f"{low:g}"
        hi = "inf" if high is None else f"{high:g}"
        interval = f"{'(' if low_open else '['}{lo}, {hi}{')' if high_open else ']'}"
        raise ValueError(f"`{name}` must be in {interval}, got {value!r}")
    return value


def check_int(name: str, value: Any, low: int | None = None) -> int:
    """``value`` as an int (an integral float is accepted), at least ``low``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or value != int(value):
        raise TypeError(f"`{name}` must be an integer, got {value!r}")
    if low is not None and value < low:
        raise ValueError(f"`{name}` must be >= {low}, got {value!r}")
    return int(value)


def _looks_numeric(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True
