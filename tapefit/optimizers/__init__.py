"""Optimizers and learning-rate schedules, as ``keras.optimizers`` (Keras 3 update rules).

Every update changes variables through ``Variable.assign``, ``assign_add`` or ``assign_sub``,
and is never recorded by an active ``GradientTape``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

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
    "schedules",
    "serialize",
]

_REGISTRY: dict[str, type] = {
    "sgd": SGD,
    "adam": Adam,
    "adamw": AdamW,
    "rmsprop": RMSprop,
    "adagrad": Adagrad,
}


def serialize(optimizer: Optimizer) -> dict[str, Any]:
    """The config form ``{"type": "adam", **optimizer.get_config()}``.

    An optimizer class outside this package is named by its import path.
    """
    cls = type(optimizer)
    name = next((k for k, v in _REGISTRY.items() if v is cls), f"{cls.__module__}:{cls.__qualname__}")
    return {"type": name, **optimizer.get_config()}


def deserialize(config: Mapping[str, Any]) -> Optimizer:
    """An optimizer from ``{"type": name or "package.module:Class", **kwargs}``."""
    optimizer = _config.build("optimizer", config, _REGISTRY)
    if not isinstance(optimizer, Optimizer):
        raise TypeError(f"optimizer {config.get('type')!r} is not a tapefit Optimizer: {optimizer!r}")
    return optimizer


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
    known = ", ".join(sorted(_REGISTRY))
    raise TypeError(
        f"expected an Optimizer, a name ({known}) or a config dict like {{'type': 'adam', ...}}, "
        f"got {type(identifier).__name__} {identifier!r}"
    )
