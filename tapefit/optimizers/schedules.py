"""Learning-rate schedules: callables of the optimizer step, as ``keras.optimizers.schedules``.

An optimizer given a schedule calls it with its ``iterations`` count before each update
(0 for the first update). Each schedule has a config form for YAML/TOML files::

    optimizer: {type: adam, learning_rate: {type: cosine_decay, initial_learning_rate: 0.01, decay_steps: 1000}}

Schedules return a Python float (Keras returns a scalar tensor; ``float()`` works on both).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from tapefit.core.messages import shown
from tapefit.core.naming import Registry
from tapefit.optimizers import _config

__all__ = [
    "CosineDecay",
    "ExponentialDecay",
    "LearningRateSchedule",
    "PiecewiseConstantDecay",
    "PolynomialDecay",
    "deserialize",
    "get",
    "registry",
    "serialize",
]


def _step(step: Any) -> float:
    """The step as a float: an int, a NumPy scalar, or a one-element Tensor/Variable."""
    if isinstance(step, bool) or isinstance(step, str):
        raise TypeError(f"a schedule's step must be a number, got {shown(step)}")
    try:
        return float(step)
    except (TypeError, ValueError):
        raise TypeError(
            f"a schedule's step must be a number, got {type(step).__name__} {shown(step)}"
        ) from None


class LearningRateSchedule:
    """Base class: subclasses define ``__call__(step)`` and ``get_config()``."""

    def __call__(self, step: Any) -> float:
        """The learning rate at ``step`` (0 for the first update)."""
        raise NotImplementedError(f"{type(self).__name__} must implement __call__(step)")

    def get_config(self) -> dict[str, Any]:
        """The constructor's keyword arguments."""
        raise NotImplementedError(f"{type(self).__name__} must implement get_config()")

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> LearningRateSchedule:
        """A schedule from the keyword arguments ``get_config`` returned."""
        return cls(**config)

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.get_config().items() if k != "name")
        return f"{type(self).__name__}({args})"


class ExponentialDecay(LearningRateSchedule):
    """``initial_learning_rate * decay_rate ** (step / decay_steps)``.

    Args:
        initial_learning_rate: the rate at step 0.
        decay_steps: steps per factor of ``decay_rate`` (> 0).
        decay_rate: the factor per ``decay_steps``.
        staircase: round ``step / decay_steps`` down, so the rate changes in steps.
        name: kept for Keras compatibility.
    """

    def __init__(
        self,
        initial_learning_rate: float,
        decay_steps: int,
        decay_rate: float,
        staircase: bool = False,
        name: str = "ExponentialDecay",
    ) -> None:
        self.initial_learning_rate = _config.check_float("initial_learning_rate", initial_learning_rate)
        self.decay_steps = _config.check_float("decay_steps", decay_steps, low=0.0, low_open=True)
        self.decay_rate = _config.check_float("decay_rate", decay_rate)
        self.staircase = bool(staircase)
        self.name = name

    def __call__(self, step: Any) -> float:
        p = _step(step) / self.decay_steps
        if self.staircase:
            p = math.floor(p)
        return self.initial_learning_rate * self.decay_rate**p

    def get_config(self) -> dict[str, Any]:
        """The constructor's keyword arguments."""
        return {
            "initial_learning_rate": self.initial_learning_rate,
            "decay_steps": _int_if_whole(self.decay_steps),
            "decay_rate": self.decay_rate,
            "staircase": self.staircase,
            "name": self.name,
        }


class PiecewiseConstantDecay(LearningRateSchedule):
    """A constant rate per interval of steps.

    ``values[0]`` while ``step <= boundaries[0]``, ``values[i]`` while
    ``boundaries[i-1] < step <= boundaries[i]``, ``values[-1]`` after the last boundary.

    Args:
        boundaries: non-decreasing step numbers.
        values: the rates, one more than ``boundaries``.
        name: kept for Keras compatibility.
    """

    def __init__(
        self, boundaries: Sequence[float], values: Sequence[float], name: str = "PiecewiseConstant"
    ) -> None:
        if isinstance(boundaries, (str, bytes)) or not isinstance(boundaries, Sequence):
            raise _config.argument_error(
                TypeError,
                "boundaries",
                f"`boundaries` must be a list of step numbers, got {shown(boundaries)}",
            )
        if isinstance(values, (str, bytes)) or not isinstance(values, Sequence):
            raise _config.argument_error(
                TypeError, "values", f"`values` must be a list of learning rates, got {shown(values)}"
            )
        if len(values) != len(boundaries) + 1:
            raise ValueError(
                f"`values` must have one more entry than `boundaries`, got {len(boundaries)} "
                f"boundaries {shown(list(boundaries))} and {len(values)} values {shown(list(values))}"
            )
        self.boundaries = [_config.check_float(f"boundaries[{i}]", b) for i, b in enumerate(boundaries)]
        self.values = [_config.check_float(f"values[{i}]", v) for i, v in enumerate(values)]
        if any(a > b for a, b in zip(self.boundaries, self.boundaries[1:])):
            raise _config.argument_error(
                ValueError,
                "boundaries",
                f"`boundaries` must be non-decreasing, got {shown(list(boundaries))}",
            )
        self.name = name

    def __call__(self, step: Any) -> float:
        s = _step(step)
        for boundary, value in zip(self.boundaries, self.values):
            if s <= boundary:
                return value
        return self.values[-1]

    def get_config(self) -> dict[str, Any]:
        """The constructor's keyword arguments."""
        return {
            "boundaries": [_int_if_whole(b) for b in self.boundaries],
            "values": list(self.values),
            "name": self.name,
        }


class CosineDecay(LearningRateSchedule):
    """Cosine decay, with an optional linear warmup first (Keras 3's ``CosineDecay``).

    Without warmup: ``lr * ((1 - alpha) * 0.5 * (1 + cos(pi * s / decay_steps)) + alpha)`` with
    ``s = min(step, decay_steps)``. With ``warmup_target``: the rate goes linearly from
    ``initial_learning_rate`` to ``warmup_target`` over ``warmup_steps``, then decays from
    ``warmup_target`` as above over the next ``decay_steps``.

    Args:
        initial_learning_rate: the rate at step 0.
        decay_steps: the length of the decay (> 0).
        alpha: the final rate as a fraction of the rate the decay starts from.
        warmup_target: the rate reached at the end of the warmup; ``None`` for no warmup.
        warmup_steps: the length of the warmup.
        name: kept for Keras compatibility.
    """

    def __init__(
        self,
        initial_learning_rate: float,
        decay_steps: int,
        alpha: float = 0.0,
        name: str = "CosineDecay",
        warmup_target: float | None = None,
        warmup_steps: int = 0,
    ) -> None:
        self.initial_learning_rate = _config.check_float("initial_learning_rate", initial_learning_rate)
        self.decay_steps = _config.check_float("decay_steps", decay_steps, low=0.0, low_open=True)
        self.alpha = _config.check_float("alpha", alpha)
        self.warmup_target = (
            None if warmup_target is None else _config.check_float("warmup_target", warmup_target)
        )
        self.warmup_steps = _config.check_float("warmup_steps", warmup_steps, low=0.0)
        self.name = name

    def _decay(self, s: float, decay_from: float) -> float:
        cosine = 0.5 * (1.0 + math.cos(math.pi * s / self.decay_steps))
        return decay_from * ((1.0 - self.alpha) * cosine + self.alpha)

    def __call__(self, step: Any) -> float:
        s = _step(step)
        if self.warmup_target is None:
            return self._decay(min(s, self.decay_steps), self.initial_learning_rate)
        s = min(s, self.decay_steps + self.warmup_steps)
        if s < self.warmup_steps:
            fraction = s / self.warmup_steps
            return (self.warmup_target - self.initial_learning_rate) * fraction + self.initial_learning_rate
        return self._decay(s - self.warmup_steps, self.warmup_target)

    def get_config(self) -> dict[str, Any]:
        """The constructor's keyword arguments."""
        return {
            "initial_learning_rate": self.initial_learning_rate,
            "decay_steps": _int_if_whole(self.decay_steps),
            "alpha": self.alpha,
            "name": self.name,
            "warmup_target": self.warmup_target,
            "warmup_steps": _int_if_whole(self.warmup_steps),
        }


class PolynomialDecay(LearningRateSchedule):
    """``(initial - end) * (1 - s / decay_steps) ** power + end``.

    ``s = min(step, decay_steps)``; with ``cycle=True`` the decay restarts instead:
    ``decay_steps`` is stretched to the first multiple of it at or above ``step``.

    Args:
        initial_learning_rate: the rate at step 0.
        decay_steps: the length of the decay (> 0).
        end_learning_rate: the rate at the end.
        power: the polynomial's power (1.0: linear).
        cycle: restart the decay after each ``decay_steps`` instead of staying at the end.
        name: kept for Keras compatibility.
    """

    def __init__(
        self,
        initial_learning_rate: float,
        decay_steps: int,
        end_learning_rate: float = 0.0001,
        power: float = 1.0,
        cycle: bool = False,
        name: str = "PolynomialDecay",
    ) -> None:
        self.initial_learning_rate = _config.check_float("initial_learning_rate", initial_learning_rate)
        self.decay_steps = _config.check_float("decay_steps", decay_steps, low=0.0, low_open=True)
        self.end_learning_rate = _config.check_float("end_learning_rate", end_learning_rate)
        self.power = _config.check_float("power", power)
        self.cycle = bool(cycle)
        self.name = name

    def __call__(self, step: Any) -> float:
        s = _step(step)
        decay_steps = self.decay_steps
        if self.cycle:
            decay_steps *= 1.0 if s == 0 else math.ceil(s / self.decay_steps)
        else:
            s = min(s, decay_steps)
        p = s / decay_steps
        span = self.initial_learning_rate - self.end_learning_rate
        return span * (1.0 - p) ** self.power + self.end_learning_rate

    def get_config(self) -> dict[str, Any]:
        """The constructor's keyword arguments."""
        return {
            "initial_learning_rate": self.initial_learning_rate,
            "decay_steps": _int_if_whole(self.decay_steps),
            "end_learning_rate": self.end_learning_rate,
            "power": self.power,
            "cycle": self.cycle,
            "name": self.name,
        }


def _int_if_whole(x: float) -> float | int:
    return int(x) if float(x).is_integer() else x


registry: Registry[type] = Registry(
    "learning-rate schedule",
    {
        "exponential_decay": ExponentialDecay,
        "piecewise_constant_decay": PiecewiseConstantDecay,
        "cosine_decay": CosineDecay,
        "polynomial_decay": PolynomialDecay,
    },
    import_paths=True,
)
"""The schedule classes by config name (``registry.names()``)."""


def serialize(schedule: LearningRateSchedule) -> dict[str, Any]:
    """The config form ``{"type": "cosine_decay", **schedule.get_config()}``.

    A schedule class outside this module is named by its import path.
    """
    return _config.serialize(schedule, registry)


def deserialize(config: Mapping[str, Any]) -> LearningRateSchedule:
    """A schedule from its config form ``{"type": name or "package.module:Class", **kwargs}``."""
    return _config.deserialize(config, registry, callable, "callable")


def get(identifier: LearningRateSchedule | Mapping[str, Any]) -> LearningRateSchedule:
    """A schedule from an instance (returned as is) or a config dict ``{type: ..., ...}``."""
    if isinstance(identifier, LearningRateSchedule):
        return identifier
    if isinstance(identifier, Mapping):
        return deserialize(identifier)
    known = ", ".join(registry.names())
    raise TypeError(
        f"expected a LearningRateSchedule or a config dict like {{'type': 'cosine_decay', ...}} "
        f"(known types: {known}), got {type(identifier).__name__} {shown(identifier)}"
    )
