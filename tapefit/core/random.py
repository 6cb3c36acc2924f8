"""Seeded random numbers: ``tp.random.set_seed`` makes a program repeat itself exactly.

One global NumPy generator serves ops without a ``seed``; an op-level ``seed`` gets
its own generator derived from (global seed, op seed), as in TensorFlow. A ``seed`` may also
be a ``SeedGenerator`` (Keras 3's): its state is a Variable, so a model that holds one keeps
it in its weights, its checkpoints and its model files.
"""

from __future__ import annotations

import operator
from typing import Any

import numpy as np
import numpy.typing as npt

from tapefit.core import dtypes as _dt
from tapefit.core.function import draw as _draw
from tapefit.core.ops.creation import checked_shape
from tapefit.core.tensor import Tensor, Variable, _wrap

_DEFAULT_GLOBAL_SEED = 87654321  # used for op seeds when no global seed was set, as TF does


class _Generators:
    def __init__(self) -> None:
        self.seed: int | None = None
        self.main = np.random.default_rng()
        self.by_op_seed: dict[int, np.random.Generator] = {}

    def get(self, seed: Any) -> np.random.Generator:
        if seed is None:
            return self.main
        if isinstance(seed, SeedGenerator):
            return seed._next_generator()
        seed = _seed(seed, "seed")
        generator = self.by_op_seed.get(seed)
        if generator is None:
            base = _DEFAULT_GLOBAL_SEED if self.seed is None else self.seed
            generator = self.by_op_seed[seed] = np.random.default_rng([base, seed])
        return generator


_generators = _Generators()

_INT64 = np.iinfo(np.int64)


class SeedGenerator:
    """A seed that moves on with every draw (Keras 3's ``keras.random.SeedGenerator``).

    Pass it as the ``seed`` of ``tp.random.normal``, ``uniform``, ``tp.nn.dropout`` (or of a
    layer that takes a seed): each draw uses the state and advances it, so draws differ from
    call to call and repeat from the seed. The state is ``state``, a non-trainable int64
    Variable ``[seed, draws so far]``; a layer or model that holds the generator as an
    attribute holds that Variable as one of its weights, so checkpoints and model files keep
    it and restore it exactly. Inside a ``tp.function`` every call draws afresh.

    Args:
        seed: an int; ``None`` draws one from the global generator (``tp.random.set_seed``
            makes it repeat).
        name: the generator's name (default ``"seed_generator"``).

    Example::

        gen = tp.random.SeedGenerator(seed=42)
        a = tp.random.normal((2, 3), seed=gen)
        b = tp.random.normal((2, 3), seed=gen)   # other numbers than a
    """

    def __init__(self, seed: int | None = None, name: str | None = None) -> None:
        self._initial_seed = seed
        if seed is None:
            value = int(_generators.main.integers(1, 10**9))
        else:
            if isinstance(seed, bool):
                raise TypeError(f"SeedGenerator: seed must be an int or None, got {seed!r}")
            try:
                value = operator.index(seed)
            except TypeError:
                raise TypeError(f"SeedGenerator: seed must be an int or None, got {seed!r}") from None
            if not _INT64.min <= value <= _INT64.max:
                raise ValueError(f"SeedGenerator: seed must fit in int64, got {value}")
        if name is not None and not isinstance(name, str):
            raise TypeError(f"SeedGenerator: name must be a string, got {name!r}")
        self.name = name or "seed_generator"
        self.state = Variable(
            np.array([value, 0], dtype=np.int64), trainable=False, name="seed_generator_state"
        )

    def _next_generator(self) -> np.random.Generator:
        """A NumPy generator for the current state; advances the state (outside any trace: a
        ``tp.function`` replay calls the draw again, which comes here again)."""
        seed, count = (int(v) for v in self.state._value)
        # a new array rather than a write into it: a tape or a caller may hold the old one
        self.state._value = np.array([seed, count + 1], dtype=np.int64)
        return np.random.default_rng([seed % 2**64, count % 2**64])

    def next(self) -> Tensor:
        """The state before this call (``[seed, draws so far]``, int64); advances it, as a draw does."""
        before = np.array(self.state._value)
        self._next_generator()
        return Tensor(before)

    def _tracked_items(self) -> list[tuple[str, Any]]:
        """What a module that holds this generator tracks: its state Variable."""
        return [("state", self.state)]

    def get_config(self) -> dict[str, Any]:
        """``seed`` as given (``None`` stays ``None``) and ``name``, as Keras's."""
        return {"seed": self._initial_seed, "name": self.name}

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> SeedGenerator:
        return cls(**config)

    def __repr__(self) -> str:
        seed, count = (int(v) for v in self.state._value)
        return f"<SeedGenerator {self.name!r} seed={seed} draws={count}>"


def _seed(seed: Any, what: str) -> int:
    """``seed`` as a non-negative int: 1.5 or "1" are errors, never truncated or parsed in silence."""
    if isinstance(seed, Tensor):
        seed = seed._value.item() if seed.size == 1 else seed
    try:
        value = operator.index(seed)
    except TypeError:
        raise TypeError(f"random: {what} must be an int, got {seed!r}") from None
    return value % 2**64  # TensorFlow's seeds are int64; NumPy takes non-negative ones


def set_seed(seed: int | None) -> None:
    """Sets the global seed: the same seed and program give the same numbers.

    ``None`` clears it (fresh, unrepeatable numbers), as in TensorFlow.
    """
    _generators.seed = None if seed is None else _seed(seed, "set_seed")
    _generators.main = np.random.default_rng(_generators.seed)
    _generators.by_op_seed.clear()


def seeded_generator(seed: int) -> np.random.Generator:
    """A fresh NumPy generator for ``seed``; negative seeds work, as in ``set_seed`` (TF's int64)."""
    return np.random.default_rng(_seed(seed, "seed"))


def get_global_generator() -> np.random.Generator:
    """The NumPy generator behind ops without an op seed (layers draw from it too)."""
    return _generators.main


def generator(seed: Any = None) -> np.random.Generator:
    """The generator an op with this ``seed`` draws from (a ``SeedGenerator`` advances)."""
    return _generators.get(seed)


def get_state() -> dict[str, Any]:
    """Every generator's state as plain JSON-able data, for checkpoints."""
    return {
        "seed": _generators.seed,
        "main": _generators.main.bit_generator.state,
        "by_op_seed": {str(k): g.bit_generator.state for k, g in _generators.by_op_seed.items()},
    }


def set_state(state: dict[str, Any]) -> None:
    """Restores what ``get_state`` returned."""
    _generators.seed = state["seed"]
    _generators.main = np.random.default_rng()
    _generators.main.bit_generator.state = state["main"]
    _generators.by_op_seed.clear()
    for key, value in state["by_op_seed"].items():
        g = np.random.default_rng()
        g.bit_generator.state = value
        _generators.by_op_seed[int(key)] = g


def _param(value: Any, dtype: npt.DTypeLike, name: str, label: str) -> np.ndarray:
    """A distribution parameter (Python number, ndarray or Tensor) as a ``dtype`` array."""
    try:
        return np.asarray(value, dtype)
    except OverflowError:
        raise ValueError(f"random.{name}: {label} {value!r} does not fit {np.dtype(dtype).name}") from None
    except (TypeError, ValueError):
        raise TypeError(f"random.{name}: {label} must be a number or a tensor, got {value!r}") from None


def _fitted(sample: np.ndarray, shape: tuple[int, ...], name: str, params: str) -> np.ndarray:
    """``sample``, unless its parameters made it some other shape than the one asked for."""
    if sample.shape != shape:
        raise ValueError(
            f"random.{name}: {params} must broadcast to the requested shape {shape}, "
            f"which they would change to {sample.shape}"
        )
    return sample


def _float_dtype(dtype: Any, name: str) -> np.dtype:
    dtype = _dt.float32 if dtype is None else _dt.as_dtype(dtype)
    if dtype.kind != "f":
        raise TypeError(f"random.{name}: dtype must be floating, got {dtype.name}")
    return dtype


def normal(
    shape: Any,
    mean: float = 0.0,
    stddev: float = 1.0,
    dtype: Any = _dt.float32,
    seed: int | SeedGenerator | None = None,
) -> Tensor:
    """Samples from a normal distribution.

    ``seed``: ``None`` (the global generator), an op seed (an int), or a ``SeedGenerator``.
    """
    dtype = _float_dtype(dtype, "normal")
    shape = checked_shape(shape, "random.normal")
    work = np.float64 if dtype == _dt.float64 else np.float32
    mean_a, stddev_a = _param(mean, work, "normal", "mean"), _param(stddev, work, "normal", "stddev")

    def sample() -> np.ndarray:  # a tp.function replay draws again, from the generator as it is then
        draw = generator(seed).standard_normal(shape, dtype=work)
        try:
            values = draw * stddev_a + mean_a
        except ValueError:
            raise ValueError(
                f"random.normal: mean (shape {mean_a.shape}) and stddev (shape {stddev_a.shape}) do not "
                f"broadcast to the requested shape {shape}"
            ) from None
        return _fitted(values, shape, "normal", "mean and stddev").astype(dtype, copy=False)

    return _wrap(_draw(sample))


def uniform(
    shape: Any,
    minval: float = 0.0,
    maxval: float | None = None,
    dtype: Any = _dt.float32,
    seed: int | SeedGenerator | None = None,
) -> Tensor:
    """Samples uniformly from ``[minval, maxval)``.

    ``maxval`` defaults to 1 for floating dtypes; integer dtypes need it (and ``minval < maxval``).
    ``seed``: ``None`` (the global generator), an op seed (an int), or a ``SeedGenerator``.
    """
    dtype = _dt.float32 if dtype is None else _dt.as_dtype(dtype)
    shape = checked_shape(shape, "random.uniform")
    if dtype.kind in "iu":
        if maxval is None:
            raise ValueError(f"random.uniform: an integer dtype ({dtype.name}) needs maxval")
        low, high = (
            int(_param(minval, dtype, "uniform", "minval")),
            int(_param(maxval, dtype, "uniform", "maxval")),
        )
        if low >= high:
            raise ValueError(f"random.uniform: needs minval < maxval, got minval={low}, maxval={high}")
        return _wrap(_draw(lambda: generator(seed).integers(low, high, shape, dtype=dtype)))
    dtype = _float_dtype(dtype, "uniform")
    work = np.float64 if dtype == _dt.float64 else np.float32
    low_a = _param(minval, work, "uniform", "minval")
    high_a = _param(1.0 if maxval is None else maxval, work, "uniform", "maxval")

    def sample() -> np.ndarray:  # a tp.function replay draws again, from the generator as it is then
        draw = generator(seed).random(shape, dtype=work)
        try:
            values = draw * (high_a - low_a) + low_a
        except ValueError:
            raise ValueError(
                f"random.uniform: minval (shape {low_a.shape}) and maxval (shape {high_a.shape}) do not "
                f"broadcast to the requested shape {shape}"
            ) from None
        return _fitted(values, shape, "uniform", "minval and maxval").astype(dtype, copy=False)

    return _wrap(_draw(sample))


__all__ = [
    "SeedGenerator",
    "generator",
    "get_global_generator",
    "get_state",
    "normal",
    "set_seed",
    "set_state",
    "uniform",
]


def __dir__() -> list[str]:
    return sorted(__all__)
