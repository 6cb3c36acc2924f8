"""Turning config entries (names, ``{type: ..., ...}`` dicts) into optimizers and schedules."""

from __future__ import annotations

import inspect
import math
import numbers
from collections.abc import Callable, Mapping
from typing import Any

from tapefit.core.messages import shown
from tapefit.core.naming import Registry


def build(config: Mapping[str, Any], registry: Registry[type]) -> Any:
    """Builds ``{type: name, **kwargs}`` (Keras' ``{class_name, config}`` form is accepted too)
    from a class of ``registry`` or at an import path."""
    kind = registry.kind
    if "class_name" in config and "type" not in config:
        name, kwargs = config["class_name"], dict(config.get("config") or {})
    else:
        if "type" not in config:
            raise ValueError(
                f"a {kind} config needs a 'type' key naming the {kind}, got {shown(dict(config))}"
            )
        kwargs = {k: v for k, v in config.items() if k != "type"}
        name = config["type"]
    if not isinstance(name, str):
        raise ValueError(f"{kind} 'type' must be a string, got {shown(name)}")
    cls = registry.lookup(name)
    if not isinstance(cls, type):
        raise ValueError(f"{kind} {shown(name)} is not a class")
    try:
        inspect.signature(cls).bind(**kwargs)
    except TypeError as error:
        accepted = ", ".join(p for p in inspect.signature(cls).parameters if p not in ("self", "kwargs"))
        raise ValueError(f"{kind} {shown(name)}: {error}; it accepts: {accepted}") from None
    return cls(**kwargs)


def serialize(obj: Any, registry: Registry[type]) -> dict[str, Any]:
    """The config form ``{"type": name, **obj.get_config()}``; a class that ``registry`` does
    not hold is named by its import path ``"package.module:Class"``."""
    cls = type(obj)
    name = registry.name_of(cls) or f"{cls.__module__}:{cls.__qualname__}"
    return {"type": name, **obj.get_config()}


def deserialize(
    config: Mapping[str, Any], registry: Registry[type], is_valid: Callable[[Any], bool], expected: str
) -> Any:
    """``build(config, registry)``, checked with ``is_valid``.

    Raises:
        TypeError: the object built (from an import path) is not ``expected``.
    """
    obj = build(config, registry)
    if not is_valid(obj):
        raise TypeError(f"{registry.kind} {shown(config.get('type'))} is not {expected}: {shown(obj)}")
    return obj


def argument_error(kind: type[Exception], argument: str, message: str) -> Exception:
    """``kind(message)`` marked with the keyword ``argument`` at fault (``train`` names its key path)."""
    error = kind(message)
    error.argument = argument  # type: ignore[attr-defined]
    return error


def check_float(
    name: str,
    value: Any,
    low: float | None = None,
    high: float | None = None,
    high_open: bool = False,
    low_open: bool = False,
    finite: bool = False,
) -> float:
    """``value`` as a float in ``[low, high]`` (``high_open``/``low_open`` exclude the bound;
    ``finite`` refuses infinities too).

    Raises:
        TypeError: ``value`` is not a real number (YAML's ``1e-3``, a string, is named).
        ValueError: it lies outside the range.
    """
    if isinstance(value, str):
        hint = " (YAML reads 1e-3 as a string: write 1.0e-3)" if _looks_numeric(value) else ""
        raise argument_error(
            TypeError, name, f"`{name}` must be a number, got the string {shown(value)}{hint}"
        )
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        try:
            value = float(value)  # 0-d arrays and one-element tensors
        except (TypeError, ValueError):
            raise argument_error(
                TypeError, name, f"`{name}` must be a number, got {type(value).__name__} {shown(value)}"
            ) from None
    value = float(value)
    if math.isnan(value) or (finite and math.isinf(value)):
        raise argument_error(ValueError, name, f"`{name}` must be a finite number, got {shown(value)}")
    too_low = low is not None and (value <= low if low_open else value < low)
    too_high = high is not None and (value >= high if high_open else value > high)
    if too_low or too_high:
        lo = "-inf" if low is None else f"{low:g}"
        hi = "inf" if high is None else f"{high:g}"
        interval = f"{'(' if low_open else '['}{lo}, {hi}{')' if high_open else ']'}"
        raise argument_error(ValueError, name, f"`{name}` must be in {interval}, got {shown(value)}")
    return value


def _looks_numeric(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True
