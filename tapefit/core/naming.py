"""Tables of built-ins by name: ``activation="relu"``, ``loss="mse"``, a config's ``type: adam``.

Activations, initializers, regularizers, losses, metrics, optimizers and schedules each keep
one ``Registry``: the same lookup rules, the same error for an unknown name, and a public
list of the names (``tp.losses.registry.names()``) for configs and the command line.

It uses nothing from tapefit, so it sits at the bottom of the package ladder, where layers
and optimizers can both import it.
"""

from __future__ import annotations

import difflib
import functools
import importlib
import inspect
import re
from collections.abc import Iterator, Mapping
from typing import Any, Generic, TypeVar

from tapefit.core.messages import shown

T = TypeVar("T")

_UNSET: Any = object()


def to_snake_case(name: str) -> str:
    """``"BatchNormalization"`` -> ``"batch_normalization"``, ``"Conv2D"`` -> ``"conv2d"``."""
    name = re.sub(r"(.)([A-Z][a-z]+)", r"\1_\2", name)
    return re.sub(r"([a-z])([A-Z])", r"\1_\2", name).lower()


CONFIGURABLE_MARK = "__tapefit_configurable__"
"""The attribute ``@tp.configurable`` sets on what configs may call by import path."""


def configured_callable(value: Any, key: str) -> Any:
    """``value`` if callable, else the ``@tp.configurable`` function its import path
    ``"package.module:name"`` names (a config gives callables that way).

    Raises:
        TypeError: naming ``key``, when ``value`` is neither, or names an unmarked object.
    """
    if callable(value):
        return value
    if not isinstance(value, str):
        raise TypeError(f"{key} must be a function, or the import path of one, got {value!r}")
    try:
        obj = import_object(value, key)
    except ValueError as error:
        raise TypeError(str(error)) from None
    if not callable(obj) or not getattr(obj, CONFIGURABLE_MARK, False):
        raise TypeError(f"{key}: {value!r} is not a function marked with @tp.configurable")
    return obj


C = TypeVar("C", bound=type)


def suggest_keywords(cls: C) -> C:
    """Class decorator: a keyword argument ``cls()`` does not take raises a one-line
    ``TypeError`` naming it, the closest argument it does take, and all of them, as a config's
    unknown key does (Python before 3.12 says only "unexpected keyword argument")."""
    init = cls.__init__  # type: ignore[misc]
    parameters = inspect.signature(init).parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()):
        return cls  # anything goes: checked further down
    names = [
        n for n, p in parameters.items() if n != "self" and p.kind is not inspect.Parameter.VAR_POSITIONAL
    ]

    @functools.wraps(init)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        for key in kwargs:
            if key not in parameters:
                close = difflib.get_close_matches(key, names, n=1)
                hint = f" (did you mean {close[0]!r}?)" if close else ""
                raise TypeError(
                    f"{cls.__name__}: unknown argument {key!r}{hint}; it takes: {', '.join(names)}"
                )
        init(self, *args, **kwargs)

    cls.__init__ = __init__  # type: ignore[misc]
    return cls


def import_object(path: str, kind: str = "") -> Any:
    """The object named by ``"package.module:Name"`` (``Name`` may be dotted: ``Outer.Inner``).

    The one import of objects by path, for registries (``optimizers.get("pkg.mod:MyAdam")``),
    plugins and configs.

    Args:
        path: the import path.
        kind: what the object is, to begin the message with (``"optimizer"``); none by default.

    Raises:
        ValueError: ``path`` is not of that form, or does not import (any error while the
            module imports is the module's own, named with its type), or lacks the name.
    """
    what = f"{kind} {path!r}" if kind else repr(path)
    module_name, _, attr = path.partition(":")
    if not module_name or not attr or not all(part.isidentifier() for part in module_name.split(".")):
        raise ValueError(f"{what} is not an import path of the form 'package.module:Name'")
    try:
        obj: Any = importlib.import_module(module_name)
    except Exception as error:
        detail = f"{type(error).__name__}: {error}".splitlines()[0]
        raise ValueError(f"{what} does not import: {detail}") from error
    for name in attr.split("."):
        if not hasattr(obj, name):
            raise ValueError(f"{what} does not import: module {module_name!r} has no attribute {name!r}")
        obj = getattr(obj, name)
    return obj


class Registry(Mapping[str, T], Generic[T]):
    """A read-only table ``{name: entry}`` of one kind of built-in, with Keras-style lookup.

    ``lookup`` takes a name as given, else lower-cased, else the snake_case of a class name
    (``"MeanSquaredError"`` -> ``"mean_squared_error"``); an unknown name is a ``ValueError``
    listing the known ones. ``get`` is what a ``get(identifier)`` function of Keras does for
    the kinds that accept a name or a callable.

    Args:
        kind: what an entry is, for messages (``"activation"``, ``"loss"``).
        entries: the names and their entries (functions, classes or factories).
        instantiate: whether ``get`` calls the entry (a class or factory) with no arguments.
        none: what ``get(None)`` returns; by default ``None`` is rejected.
        callable_form: how a callable is described in ``get``'s TypeError
            (``" (y_true, y_pred) -> scalar"``).
        import_paths: whether ``lookup`` also takes ``"package.module:Name"``, a user's class.
    """

    def __init__(
        self,
        kind: str,
        entries: Mapping[str, T],
        *,
        instantiate: bool = False,
        none: Any = _UNSET,
        callable_form: str = "",
        import_paths: bool = False,
    ) -> None:
        self.kind = kind
        self._entries = dict(entries)
        self._instantiate = instantiate
        self._none = none
        self._callable_form = callable_form
        self._import_paths = import_paths

    def __getitem__(self, name: str) -> T:
        return self._entries[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def __repr__(self) -> str:
        return f"<Registry of {self.kind}s: {', '.join(self.names())}>"

    def names(self) -> list[str]:
        """The known names, sorted."""
        return sorted(self._entries)

    def lookup(self, name: str) -> T:
        """The entry called ``name``: as given, lower-cased, or as snake_case (or the object at
        an import path, where the registry takes them).

        Raises:
            ValueError: no entry has that name (the message lists the known ones), or an import
                path does not import.
        """
        if self._import_paths and ":" in name:
            return import_object(name, self.kind)
        for candidate in (name, name.strip().lower(), to_snake_case(name.strip())):
            if candidate in self._entries:
                return self._entries[candidate]
        hint = " (or an import path 'package.module:Class')" if self._import_paths else ""
        raise ValueError(f"unknown {self.kind} {shown(name)}; known: {', '.join(self.names())}{hint}")

    def name_of(self, entry: Any) -> str | None:
        """The first name registered for ``entry`` (the entry itself, by identity), else ``None``."""
        return next((name for name, e in self._entries.items() if e is entry), None)

    # Keras's get(identifier) on purpose, not Mapping.get(key, default): the Keras-style
    # functions (activations.get, losses.get, ...) are this method.
    def get(self, identifier: Any) -> Any:  # type: ignore[override]
        """The object for ``identifier``: a name (its entry, called if ``instantiate``), a callable
        (returned as is) or ``None`` (where the registry was given what it means).

        Raises:
            ValueError: an unknown name (the message lists the known ones).
            TypeError: anything else.
        """
        if identifier is None and self._none is not _UNSET:
            return self._none
        if isinstance(identifier, str):
            entry = self.lookup(identifier)
            return entry() if self._instantiate else entry  # type: ignore[operator]
        if callable(identifier):
            return identifier
        article = "an" if self.kind[0] in "aeiou" else "a"
        accepted = "None, a name" if self._none is not _UNSET else "a name"
        raise TypeError(
            f"{article} {self.kind} must be {accepted} or a callable{self._callable_form}, got {identifier!r}"
        )


__all__ = ["Registry", "import_object", "to_snake_case"]
