"""Per-op overhead: a chain of 100 small elementwise ops, raw NumPy against tapefit.

Prints microseconds per op for raw NumPy, tapefit with no tape, tapefit recorded on a
tape, and recorded plus the backward pass, with the ratios to raw NumPy. The "wrapper
floor" line is the least any tensor type written in Python pays: the same chain through
an operator or function that unwraps an ndarray, calls the ufunc and wraps the result in a
new object, with no check of any kind.

    python benchmarks/op_overhead.py [--size 8] [--repeats 200]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import numpy as np

import tapefit as tp

CHAIN = 100


def numpy_chain(x: np.ndarray, c: np.ndarray) -> np.ndarray:
    for _ in range(CHAIN // 4):
        x = np.multiply(x, c)
        x = np.add(x, c)
        x = np.sin(x)
        x = np.tanh(x)
    return x


def tapefit_chain(x: tp.Tensor, c: tp.Tensor) -> tp.Tensor:
    for _ in range(CHAIN // 4):
        x = x * c
        x = x + c
        x = tp.sin(x)
        x = tp.tanh(x)
    return x


class Bare:
    """An ndarray in a slotted object, with ``*`` and ``+`` and nothing else."""

    __slots__ = ("value",)

    def __mul__(self, other: Bare) -> Bare:
        out = Bare()
        out.value = np.multiply(self.value, other.value)
        return out

    def __add__(self, other: Bare) -> Bare:
        out = Bare()
        out.value = np.add(self.value, other.value)
        return out


def bare(value: np.ndarray) -> Bare:
    out = Bare()
    out.value = value
    return out


def bare_sin(x: Bare) -> Bare:
    return bare(np.sin(x.value))


def bare_tanh(x: Bare) -> Bare:
    return bare(np.tanh(x.value))


def wrapper_floor(x: Bare, c: Bare) -> Bare:
    for _ in range(CHAIN // 4):
        x = x * c
        x = x + c
        x = bare_sin(x)
        x = bare_tanh(x)
    return x


def recorded(x: tp.Tensor, c: tp.Tensor) -> tp.GradientTape:
    with tp.GradientTape() as tape:
        tape.watch(x)
        tapefit_chain(x, c)
    return tape


def recorded_backward(x: tp.Tensor, c: tp.Tensor) -> None:
    with tp.GradientTape() as tape:
        tape.watch(x)
        y = tapefit_chain(x, c)
    tape.gradient(y, x)


def per_op_us(fn: Callable[[], object], repeats: int) -> float:
    """Median microseconds per op over ``repeats`` runs of the chain."""
    fn()  # warm up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) / CHAIN * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=8, help="elements per array (default 8: tiny)")
    parser.add_argument("--repeats", type=int, default=200)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    xa = rng.standard_normal(args.size).astype(np.float32)
    ca = np.full(args.size, 0.5, np.float32)
    xt, ct = tp.constant(xa), tp.constant(ca)
    np.testing.assert_allclose(tapefit_chain(xt, ct).numpy(), numpy_chain(xa, ca), rtol=1e-5)

    xb, cb = bare(xa), bare(ca)
    rows = [
        ("raw NumPy", per_op_us(lambda: numpy_chain(xa, ca), args.repeats)),
        ("wrapper floor", per_op_us(lambda: wrapper_floor(xb, cb), args.repeats)),
        ("tapefit, no tape", per_op_us(lambda: tapefit_chain(xt, ct), args.repeats)),
        ("tapefit, recorded", per_op_us(lambda: recorded(xt, ct), args.repeats)),
        ("tapefit, recorded + backward", per_op_us(lambda: recorded_backward(xt, ct), args.repeats)),
    ]
    base = rows[0][1]
    print(f"chain of {CHAIN} elementwise ops on float32 arrays of {args.size} elements")
    for name, us in rows:
        print(f"  {name:30s} {us:7.2f} us/op   {us / base:6.2f}x raw NumPy")


if __name__ == "__main__":
    main()
