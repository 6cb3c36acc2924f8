"""One training step of a 784-512-256-10 ReLU MLP at batch 128: tapefit against handwritten NumPy.

Both run forward, softmax cross-entropy, backward and a plain SGD update on the same
float32 arrays in the same process; prints the median step times and their ratio.

    python benchmarks/mlp_step.py [--repeats 30]
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import time
from collections.abc import Callable

import numpy as np

import tapefit as tp

SIZES = (784, 512, 256, 10)
BATCH = 128
LR = np.float32(0.01)


def init_params(rng: np.random.Generator) -> list[np.ndarray]:
    params = []
    for n_in, n_out in itertools.pairwise(SIZES):
        limit = np.sqrt(6.0 / (n_in + n_out))
        params.append(rng.uniform(-limit, limit, (n_in, n_out)).astype(np.float32))
        params.append(np.zeros(n_out, np.float32))
    return params


def numpy_step(params: list[np.ndarray], x: np.ndarray, y: np.ndarray) -> float:
    """Forward, backward and SGD by hand, in place."""
    w1, b1, w2, b2, w3, b3 = params
    h1 = np.maximum(x @ w1 + b1, 0)
    h2 = np.maximum(h1 @ w2 + b2, 0)
    logits = h2 @ w3 + b3
    shifted = logits - logits.max(axis=1, keepdims=True)
    log_probs = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    rows = np.arange(len(y))
    loss = -log_probs[rows, y].mean()
    d3 = np.exp(log_probs)
    d3[rows, y] -= 1
    d3 /= len(y)
    d2 = (d3 @ w3.T) * (h2 > 0)
    d1 = (d2 @ w2.T) * (h1 > 0)
    grads = [x.T @ d1, d1.sum(0), h1.T @ d2, d2.sum(0), h2.T @ d3, d3.sum(0)]
    for p, g in zip(params, grads):
        p -= LR * g
    return float(loss)


def tapefit_step(variables: list[tp.Variable], x: tp.Tensor, y: tp.Tensor) -> float:
    """The same step written as a tapefit user would."""
    w1, b1, w2, b2, w3, b3 = variables
    with tp.GradientTape() as tape:
        h = tp.nn.relu(x @ w1 + b1)
        h = tp.nn.relu(h @ w2 + b2)
        logits = h @ w3 + b3
        loss = tp.reduce_mean(tp.nn.sparse_softmax_cross_entropy_with_logits(y, logits))
    grads = tape.gradient(loss, variables)
    for v, g in zip(variables, grads):
        v.assign_sub(LR * g)
    return float(loss)


def paired_seconds(
    first: Callable[[], float], second: Callable[[], float], repeats: int
) -> tuple[list[float], list[float]]:
    """Times the two steps alternately, so that machine load falls on both alike."""
    first(), second()  # warm up
    times: tuple[list[float], list[float]] = ([], [])
    for _ in range(repeats):
        for step, out in ((first, times[0]), (second, times[1])):
            start = time.perf_counter()
            step()
            out.append(time.perf_counter() - start)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=100)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    x = rng.standard_normal((BATCH, SIZES[0])).astype(np.float32)
    y = rng.integers(0, SIZES[-1], BATCH).astype(np.int32)
    params = init_params(rng)
    variables = [tp.Variable(p.copy()) for p in params]
    xt, yt = tp.constant(x), tp.constant(y)

    # Both implementations must agree before their speed means anything.
    check = [p.copy() for p in params]
    np.testing.assert_allclose(tapefit_step(variables, xt, yt), numpy_step(check, x, y), rtol=1e-5)
    for v, p in zip(variables, check):
        np.testing.assert_allclose(v.numpy(), p, rtol=1e-4, atol=1e-6)

    numpy_times, tapefit_times = paired_seconds(
        lambda: numpy_step(params, x, y), lambda: tapefit_step(variables, xt, yt), args.repeats
    )
    t_numpy, t_tapefit = statistics.median(numpy_times), statistics.median(tapefit_times)
    ratio = statistics.median(t / n for t, n in zip(tapefit_times, numpy_times))
    print(f"MLP {'-'.join(map(str, SIZES))}, batch {BATCH}, forward + backward + SGD ({args.repeats} pairs)")
    print(f"  handwritten NumPy  {t_numpy * 1e3:7.2f} ms/step (median)")
    print(f"  tapefit            {t_tapefit * 1e3:7.2f} ms/step (median)")
    print(f"  tapefit / NumPy    {ratio:7.2f}x (median of per-pair ratios)")


if __name__ == "__main__":
    main()
