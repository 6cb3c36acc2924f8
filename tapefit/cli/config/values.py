"""Describing values and types in one-line messages, and checking a value against a type hint."""

from __future__ import annotations

import inspect
import types
import typing
from collections.abc import Mapping, Sequence
from typing import Any

import yaml


def kind_of(value: Any) -> str:
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


def show(value: Any) -> str:
    """A short rendering of a config value, as the user wrote it."""
    if isinstance(value, str):
        text = repr(value)
    else:
        text = yaml.safe_dump(plain(value), default_flow_style=True, width=1000).strip()
        text = text.removesuffix("\n...").removesuffix("...").strip()
    return text if len(text) <= 60 else text[:57] + "..."


def plain(value: Any) -> Any:
    """``value`` with tuples turned into lists, so YAML can write it."""
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return value


def is_plain(value: Any) -> bool:
    """Whether ``value`` can appear in a config (so a signature default can be shown)."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return True
    if isinstance(value, (list, tuple)):
        return all(is_plain(v) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and is_plain(v) for k, v in value.items())
    return False


def matches(value: Any, ann: Any) -> bool | None:
    """Whether a config ``value`` fits the annotation ``ann``; ``None`` when it cannot tell."""
    if ann is Any or ann is object or ann is inspect.Parameter.empty:
        return True
    if ann is None or ann is type(None):
        return value is None
    origin = typing.get_origin(ann)
    if origin is typing.Union or origin is types.UnionType:
        answers = [matches(value, a) for a in typing.get_args(ann)]
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
            answers = [matches(v, args[0]) for v in value]
            if any(a is False for a in answers):
                return False
        return True
    if container in (dict, Mapping):
        return isinstance(value, dict)
    return None  # a class the config cannot spell (a schedule object, a callable, ...)


def describe(ann: Any) -> str:
    """The annotation ``ann`` in words, for "expected ..." messages."""
    if ann is None or ann is type(None):
        return "null"
    origin = typing.get_origin(ann)
    if origin is typing.Union or origin is types.UnionType:
        names = [describe(a) for a in typing.get_args(ann)]
        return " or ".join(dict.fromkeys(names))
    if origin is typing.Literal:
        return "one of " + ", ".join(show(a) for a in typing.get_args(ann))
    simple = {bool: "true or false", int: "an integer", float: "a number", str: "a string"}
    if ann in simple:
        return simple[ann]
    container = origin or ann
    if container in (dict, Mapping):
        return "a mapping"
    if container in (list, tuple, Sequence):
        args = [a for a in typing.get_args(ann) if a is not Ellipsis]
        if args:
            inner = describe(args[0])
            inner = inner.removeprefix("an ").removeprefix("a ")
            return f"a list of {inner}s" if " or " not in inner else f"a list of ({inner})"
        return "a list"
    return getattr(container, "__name__", str(ann))  # a type no config spells (IO[str]: "IO")
