"""One training step of a 784-512-256-10 ReLU MLP: tapefit against handwritten NumPy.

All run forward, softmax cross-entropy, backward and a plain SGD update on the same float32
arrays in the same process, alternating: tapefit's ops written out by a user, NumPy as most
people write it (allocating every intermediate), and the reference, the lean NumPy step of
``suite.LeanMLP`` (every buffer allocated once, ``out=`` throughout, as an expert writes it).
Prints the median step times and the medians of the per-round ratios to the lean step.

    python benchmarks/mlp_step.py [--batch 128] [--repeats 100]
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import sys
from pathlib import Path

import numpy as np

import tapefit as tp

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.suite import LeanMLP, paired, ratio

SIZES = (784, 512, 256, 10)
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=100)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    x = rng.standard_normal((args.batch, SIZES[0])).astype(np.float32)
    y = rng.integers(0, SIZES[-1], args.batch).astype(np.int32)
    params = init_params(rng)
    variables = [tp.Variable(p.copy()) for p in params]
    xt, yt = tp.constant(x), tp.constant(y)

    # The implementations must agree before their speed means anything.
    check = [p.copy() for p in params]
    np.testing.assert_allclose(tapefit_step(variables, xt, yt), numpy_step(check, x, y), rtol=1e-5)
    for v, p in zip(variables, check):
        np.testing.assert_allclose(v.numpy(), p, rtol=1e-4, atol=1e-6)
    lean = LeanMLP([p.copy() for p in params], args.batch)
    np.testing.assert_allclose(lean.step(x, y), numpy_step([p.copy() for p in params], x, y), rtol=1e-5)

    times = paired(
        {
            "lean NumPy": lambda: lean.step(x, y),
            "allocating NumPy": lambda: numpy_step(params, x, y),
            "tapefit": lambda: tapefit_step(variables, xt, yt),
        },
        args.repeats,
    )
    print(
        f"MLP {'-'.join(map(str, SIZES))}, batch {args.batch}, forward + backward + SGD ({args.repeats} rounds)"
    )
    for name, seconds in times.items():
        print(
            f"  {name:17s} {statistics.median(seconds) * 1e3:7.2f} ms/step (median)   "
            f"{ratio(times, name, 'lean NumPy'):5.2f}x the lean step (median of per-round ratios)"
        )


if __name__ == "__main__":
    main()
