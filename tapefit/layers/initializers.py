"""Weight initializers, by Keras's names and formulas.

An initializer is called as ``init(shape, dtype=None)`` and returns a Tensor.
Without a ``seed`` it draws from tapefit's global generator
(``tp.random.set_seed`` makes it repeat); with a ``seed`` it gives the same
values on every call, as a seeded Keras initializer does.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from tapefit.core import dtypes as _dt
from tapefit.core import random as _random
from tapefit.core.messages import shown
from tapefit.core.naming import Registry
from tapefit.core.tensor import Tensor, _wrap


def compute_fans(shape: tuple[int, ...]) -> tuple[int, int]:
    """``(fan_in, fan_out)`` as Keras computes them.

    A kernel ``(in, out)`` has fans ``in`` and ``out``; a convolution kernel
    ``(*spatial, in, out)`` multiplies both by the receptive field size.
    """
    if len(shape) == 0:
        return 1, 1
    if len(shape) == 1:
        return shape[0], shape[0]
    if len(shape) == 2:
        return shape[0], shape[1]
    receptive = math.prod(shape[:-2])
    return shape[-2] * receptive, shape[-1] * receptive


class Initializer:
    """Base class: subclasses define ``sample(shape, rng) -> float64 ndarray``."""

    def __init__(self, seed: int | None = None) -> None:
        self.seed = seed

    def _generator(self) -> np.random.Generator:
        if self.seed is None:
            return _random.get_global_generator()
        return _random.seeded_generator(self.seed)

    def sample(self, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
        """The values, in float64."""
        raise NotImplementedError

    def __call__(self, shape: Any, dtype: Any = None) -> Tensor:
        """A Tensor of ``shape`` and ``dtype`` (default float32)."""
        shape = tuple(int(n) for n in shape)
        dtype = _dt.float32 if dtype is None else _dt.as_dtype(dtype)
        return _wrap(np.asarray(self.sample(shape, self._generator()), dtype=dtype))

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"

    def get_config(self) -> dict[str, Any]:
        """The constructor's arguments as the initializer holds them now (Keras's ``get_config``)."""
        from tapefit.layers import serialization

        return serialization.attribute_config(self)

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> Initializer:
        """An initializer from what ``get_config`` returned.

        Raises:
            ValueError: a key its constructor does not take (named).
        """
        from tapefit.layers import serialization

        return serialization.from_constructor_config(cls, config)


class Zeros(Initializer):
    """All zeros."""

    def sample(self, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
        return np.zeros(shape)


class Ones(Initializer):
    """All ones."""

    def sample(self, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
        return np.ones(shape)


class Constant(Initializer):
    """Every element ``value``."""

    def __init__(self, value: float = 0.0) -> None:
        super().__init__()
        self.value = float(value)

    def sample(self, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
        return np.full(shape, self.value)


class Identity(Initializer):
    """``gain`` times the identity matrix (ones on the main diagonal of a 2-D shape, which
    need not be square).

    Args:
        gain: the factor applied to the matrix.
    """

    def __init__(self, gain: float = 1.0) -> None:
        super().__init__()
        self.gain = float(gain)

    def sample(self, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
        if len(shape) != 2:
            raise ValueError(f"Identity needs a 2-D shape, got {shape}")
        return self.gain * np.eye(*shape)


class RandomNormal(Initializer):
    """Normal with ``mean`` and ``stddev`` (Keras default stddev 0.05)."""

    def __init__(self, mean: float = 0.0, stddev: float = 0.05, seed: int | None = None) -> None:
        super().__init__(seed)
        self.mean, self.stddev = float(mean), float(stddev)

    def sample(self, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
        return rng.normal(self.mean, self.stddev, shape)


class RandomUniform(Initializer):
    """Uniform on ``[minval, maxval)`` (Keras default ``[-0.05, 0.05)``)."""

    def __init__(self, minval: float = -0.05, maxval: float = 0.05, seed: int | None = None) -> None:
        super().__init__(seed)
        self.minval, self.maxval = float(minval), float(maxval)

    def sample(self, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
        return rng.uniform(self.minval, self.maxval, shape)


def _truncated_normal(rng: np.random.Generator, stddev: float, shape: tuple[int, ...]) -> np.ndarray:
    """Normal(0, stddev) with values beyond two standard deviations drawn again."""
    values = rng.standard_normal(shape)
    outside = np.abs(values) > 2.0
    while outside.any():
        values[outside] = rng.standard_normal(int(outside.sum()))
        outside = np.abs(values) > 2.0
    return values * stddev


class TruncatedNormal(Initializer):
    """Normal with ``mean`` and ``stddev``, redrawn beyond two standard deviations."""

    def __init__(self, mean: float = 0.0, stddev: float = 0.05, seed: int | None = None) -> None:
        super().__init__(seed)
        self.mean, self.stddev = float(mean), float(stddev)

    def sample(self, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
        return _truncated_normal(rng, self.stddev, shape) + self.mean


class VarianceScaling(Initializer):
    """Keras's ``VarianceScaling``: variance ``scale / n`` with ``n`` chosen by ``mode``.

    Args:
        scale: the variance scale.
        mode: ``"fan_in"``, ``"fan_out"`` or ``"fan_avg"``.
        distribution: ``"truncated_normal"``, ``"untruncated_normal"`` or ``"uniform"``.
        seed: makes every call give the same values.
    """

    _MODES = ("fan_in", "fan_out", "fan_avg")
    _DISTRIBUTIONS = ("truncated_normal", "untruncated_normal", "normal", "uniform")

    def __init__(
        self,
        scale: float = 1.0,
        mode: str = "fan_in",
        distribution: str = "truncated_normal",
        seed: int | None = None,
    ) -> None:
        super().__init__(seed)
        if scale <= 0:
            raise ValueError(f"VarianceScaling: scale must be positive, got {shown(scale)}")
        if mode not in self._MODES:
            raise ValueError(f"VarianceScaling: mode must be one of {self._MODES}, got {shown(mode)}")
        if distribution not in self._DISTRIBUTIONS:
            raise ValueError(
                f"VarianceScaling: distribution must be one of {self._DISTRIBUTIONS}, got {shown(distribution)}"
            )
        self.scale, self.mode, self.distribution = float(scale), mode, distribution

    def sample(self, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
        fan_in, fan_out = compute_fans(shape)
        n = {"fan_in": fan_in, "fan_out": fan_out, "fan_avg": (fan_in + fan_out) / 2}[self.mode]
        variance = self.scale / max(1.0, n)
        if self.distribution == "truncated_normal":
            # The stddev of a unit normal truncated at two stddevs is 0.8796...; undo it.
            return _truncated_normal(rng, math.sqrt(variance) / 0.87962566103423978, shape)
        if self.distribution in ("untruncated_normal", "normal"):
            return rng.normal(0.0, math.sqrt(variance), shape)
        limit = math.sqrt(3.0 * variance)
        return rng.uniform(-limit, limit, shape)


class GlorotUniform(VarianceScaling):
    """Uniform on ``[-limit, limit]``, ``limit = sqrt(6 / (fan_in + fan_out))``."""

    def __init__(self, seed: int | None = None) -> None:
        super().__init__(1.0, "fan_avg", "uniform", seed)


class GlorotNormal(VarianceScaling):
    """Truncated normal with stddev ``sqrt(2 / (fan_in + fan_out))``."""

    def __init__(self, seed: int | None = None) -> None:
        super().__init__(1.0, "fan_avg", "truncated_normal", seed)


class HeNormal(VarianceScaling):
    """Truncated normal with stddev ``sqrt(2 / fan_in)``."""

    def __init__(self, seed: int | None = None) -> None:
        super().__init__(2.0, "fan_in", "truncated_normal", seed)


class HeUniform(VarianceScaling):
    """Uniform on ``[-limit, limit]``, ``limit = sqrt(6 / fan_in)``."""

    def __init__(self, seed: int | None = None) -> None:
        super().__init__(2.0, "fan_in", "uniform", seed)


class LecunNormal(VarianceScaling):
    """Truncated normal with stddev ``sqrt(1 / fan_in)``."""

    def __init__(self, seed: int | None = None) -> None:
        super().__init__(1.0, "fan_in", "truncated_normal", seed)


class LecunUniform(VarianceScaling):
    """Uniform on ``[-limit, limit]``, ``limit = sqrt(3 / fan_in)``."""

    def __init__(self, seed: int | None = None) -> None:
        super().__init__(1.0, "fan_in", "uniform", seed)


class Orthogonal(Initializer):
    """Keras's ``Orthogonal``: a random orthogonal matrix (of the last axis against the others
    flattened) times ``gain``, from the QR decomposition of a normal matrix with the signs of
    ``R``'s diagonal, so that the distribution is uniform over orthogonal matrices.

    Args:
        gain: the factor applied to the matrix.
        seed: makes every call give the same values.
    """

    def __init__(self, gain: float = 1.0, seed: int | None = None) -> None:
        super().__init__(seed)
        self.gain = float(gain)

    def sample(self, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
        if len(shape) < 2:
            raise ValueError(f"Orthogonal needs a shape of rank >= 2, got {shape}")
        rows, cols = int(np.prod(shape[:-1])), shape[-1]
        flat = rng.normal(0.0, 1.0, (max(rows, cols), min(rows, cols)))
        q, r = np.linalg.qr(flat)
        q *= np.sign(np.diag(r))
        if rows < cols:
            q = q.T
        return self.gain * q.reshape(shape)


registry: Registry[type[Initializer]] = Registry(
    "initializer",
    {
        "zeros": Zeros,
        "ones": Ones,
        "constant": Constant,
        "random_normal": RandomNormal,
        "random_uniform": RandomUniform,
        "uniform": RandomUniform,
        "normal": RandomNormal,
        "truncated_normal": TruncatedNormal,
        "variance_scaling": VarianceScaling,
        "glorot_uniform": GlorotUniform,
        "glorot_normal": GlorotNormal,
        "he_normal": HeNormal,
        "he_uniform": HeUniform,
        "lecun_normal": LecunNormal,
        "lecun_uniform": LecunUniform,
        "orthogonal": Orthogonal,
        "orthogonal_initializer": Orthogonal,
        "identity": Identity,
        "identity_initializer": Identity,
        "one": Ones,
        "zero": Zeros,
    },
    instantiate=True,
    callable_form=" (shape, dtype) -> value",
)
"""The initializer classes by name (``registry.names()``)."""


def get(identifier: str | Callable[..., Any]) -> Callable[..., Any]:
    """An initializer from its name (``"glorot_uniform"``, ``"GlorotUniform"``, ...) or a callable.

    Raises:
        ValueError: an unknown name (the message lists the known ones).
        TypeError: neither a string nor a callable.
    """
    return registry.get(identifier)


def serialize(initializer: Any) -> Any:
    """``{"module", "class_name", "config"}`` of an initializer, as model files hold it (Keras 3's
    ``serialize``); ``None`` gives ``None``."""
    from tapefit.layers import serialization

    if initializer is None:
        return None
    return serialization.serialize(initializer, type(initializer).__name__)


def deserialize(config: Any) -> Any:
    """The initializer ``serialize`` described (a built-in class, or one registered with
    ``tp.register_serializable``); a name is taken as ``get`` takes it.

    Raises:
        tp.layers.serialization.ConfigError: an unknown class or a bad config.
    """
    from tapefit.layers import serialization

    if isinstance(config, str):
        return get(config)
    return serialization.deserialize(config, serialization.layer_tables(), "initializer")


__all__ = [
    "Constant",
    "GlorotNormal",
    "GlorotUniform",
    "HeNormal",
    "HeUniform",
    "Identity",
    "Initializer",
    "LecunNormal",
    "LecunUniform",
    "Ones",
    "Orthogonal",
    "RandomNormal",
    "RandomUniform",
    "TruncatedNormal",
    "VarianceScaling",
    "Zeros",
    "compute_fans",
    "deserialize",
    "get",
    "registry",
    "serialize",
]


def __dir__() -> list[str]:
    return sorted(__all__)
