"""One Adam step on the 784-512-256-10 MLP's variables: tapefit against handwritten NumPy.

Both update the same float32 weights and biases (535,818 parameters) with the same fixed
gradients, in the same process; prints the median step times and their ratio. A third line
shows a NumPy Adam written with ``out=`` and no temporaries beyond one per array, for
reference.

    python benchmarks/adam_step.py [--repeats 60]
"""

from __future__ import annotations

import argparse
import itertools
import math
import statistics
import time
from collections.abc import Callable

import numpy as np

import tapefit as tp

SIZES = (784, 512, 256, 10)
LR, BETA_1, BETA_2, EPSILON = 0.001, 0.9, 0.999, 1e-7


def shapes() -> list[tuple[int, ...]]:
    out: list[tuple[int, ...]] = []
    for n_in, n_out in itertools.pairwise(SIZES):
        out += [(n_in, n_out), (n_out,)]
    return out


class NumpyAdam:
    """Adam as one would write it by hand in NumPy (Keras 3's formula, state updated in place)."""

    def __init__(self, params: list[np.ndarray]) -> None:
        self.m = [np.zeros_like(p) for p in params]
        self.v = [np.zeros_like(p) for p in params]
        self.t = 0

    def step(self, params: list[np.ndarray], grads: list[np.ndarray]) -> None:
        self.t += 1
        alpha = LR * math.sqrt(1 - BETA_2**self.t) / (1 - BETA_1**self.t)
        for p, g, m, v in zip(params, grads, self.m, self.v):
            m += (1 - BETA_1) * (g - m)
            v += (1 - BETA_2) * (g * g - v)
            p -= alpha * m / (np.sqrt(v) + EPSILON)


class NumpyAdamOut(NumpyAdam):
    """The same with ``out=`` and one scratch array per parameter: a lower bound for NumPy."""

    def step(self, params: list[np.ndarray], grads: list[np.ndarray]) -> None:
        self.t += 1
        alpha = LR * math.sqrt(1 - BETA_2**self.t) / (1 - BETA_1**self.t)
        for p, g, m, v in zip(params, grads, self.m, self.v):
            work = np.subtract(g, m)
            work *= 1 - BETA_1
            m += work
            np.multiply(g, g, out=work)
            work -= v
            work *= 1 - BETA_2
            v += work
            np.sqrt(v, out=work)
            work += EPSILON
            np.divide(m, work, out=work)
            work *= alpha
            p -= work


def median_seconds(step: Callable[[], object], repeats: int) -> float:
    step()  # warm up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=60)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    params = [rng.standard_normal(s).astype(np.float32) * 0.05 for s in shapes()]
    grads = [rng.standard_normal(s).astype(np.float32) * 0.01 for s in shapes()]

    variables = [tp.Variable(p.copy(), name=f"v{i}") for i, p in enumerate(params)]
    grad_tensors = [tp.constant(g) for g in grads]  # what tape.gradient hands over
    optimizer = tp.optimizers.Adam(LR, BETA_1, BETA_2, EPSILON)
    by_hand, by_hand_params = NumpyAdam(params), [p.copy() for p in params]
    lean, lean_params = NumpyAdamOut(params), [p.copy() for p in params]

    def tapefit_step() -> None:
        optimizer.apply_gradients(zip(grad_tensors, variables))

    # The three must agree before their speed means anything.
    for _ in range(3):
        tapefit_step()
        by_hand.step(by_hand_params, grads)
        lean.step(lean_params, grads)
    for v, p, q in zip(variables, by_hand_params, lean_params):
        np.testing.assert_allclose(v.numpy(), p, rtol=1e-5, atol=1e-7)
        np.testing.assert_allclose(v.numpy(), q, rtol=1e-5, atol=1e-7)

    # Interleave them so that machine load affects all alike; keep each one's best median.
    n = max(args.repeats // 3, 1)
    results: dict[str, list[float]] = {"numpy": [], "numpy_out": [], "tapefit": []}
    for _ in range(3):
        results["numpy"].append(median_seconds(lambda: by_hand.step(by_hand_params, grads), n))
        results["tapefit"].append(median_seconds(tapefit_step, n))
        results["numpy_out"].append(median_seconds(lambda: lean.step(lean_params, grads), n))
    t_numpy, t_out, t_tapefit = (min(results[k]) for k in ("numpy", "numpy_out", "tapefit"))
    count = sum(p.size for p in params)
    print(f"One Adam step, MLP {'-'.join(map(str, SIZES))} variables ({count:,} float32 parameters)")
    print(f"  handwritten NumPy          {t_numpy * 1e3:7.3f} ms/step")
    print(f"  NumPy with out= (lean)     {t_out * 1e3:7.3f} ms/step")
    print(
        f"  tapefit Adam               {t_tapefit * 1e3:7.3f} ms/step   {t_tapefit / t_numpy:5.2f}x handwritten NumPy"
    )
    print(f"                                                   {t_tapefit / t_out:5.2f}x lean NumPy")


if __name__ == "__main__":
    main()
