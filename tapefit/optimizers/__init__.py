"""Optimizers and learning-rate schedules, as ``keras.optimizers`` (Keras 3 update rules).

Every update changes variables through ``Variable.assign``, ``assign_add`` or ``assign_sub``,
and is never recorded by an active ``GradientTape``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tapefit.core.messages import shown
from tapefit.core.naming import Registry
from tapefit.optimizers import _config, schedules
from tapefit.optimizers.adagrad import Adagrad
from tapefit.optimizers.adam import Adam
from tapefit.optimizers.adamw import AdamW
from tapefit.optimizers.optimizer import Optimizer
from tapefit.optimizers.rmsprop import RMSprop
from tapefit.optimizers.sgd import SGD

__all__ = [
    "SGD",
    "Adagrad",
    "Adam",
    "AdamW",
    "Optimizer",
    "RMSprop",
    "deserialize",
    "get",
    "registry",
    "schedules",
    "serialize",
]

registry: Registry[type] = Registry(
    "optimizer",
    {"sgd": SGD, "adam": Adam, "adamw": AdamW, "rmsprop": RMSprop, "adagrad": Adagrad},
    import_paths=True,
)
"""The optimizer classes by config name (``registry.names()``)."""


def serialize(optimizer: Optimizer) -> dict[str, Any]:
    """The config form ``{"type": "adam", **optimizer.get_config()}``.

    An optimizer class outside this package is named by its import path.
    """
    return _config.serialize(optimizer, registry)


def deserialize(config: Mapping[str, Any]) -> Optimizer:
    """An optimizer from ``{"type": name or "package.module:Class", **kwargs}``."""
    return _config.deserialize(
        config, registry, lambda obj: isinstance(obj, Optimizer), "a tapefit Optimizer"
    )


def get(identifier: Optimizer | str | Mapping[str, Any]) -> Optimizer:
    """An optimizer from an instance (returned as is), a name or a config dict.

    Args:
        identifier: an ``Optimizer``; a name (``"sgd"``, ``"adam"``, ``"adamw"``,
            ``"rmsprop"``, ``"adagrad"``, any case, or ``"package.module:Class"``) for the
            defaults; or ``{"type": name, **kwargs}`` such as
            ``{"type": "adam", "learning_rate": {"type": "cosine_decay", ...}}``.

    Raises:
        ValueError: an unknown name (the message lists the known ones) or a bad keyword.
    """
    if isinstance(identifier, Optimizer):
        return identifier
    if isinstance(identifier, str):
        return deserialize({"type": identifier})
    if isinstance(identifier, Mapping):
        return deserialize(identifier)
    known = ", ".join(registry.names())
    raise TypeError(
        f"expected an Optimizer, a name ({known}) or a config dict like {{'type': 'adam', ...}}, "
        f"got {type(identifier).__name__} {shown(identifier)}"
    )


def __dir__() -> list[str]:
    return sorted(__all__)
