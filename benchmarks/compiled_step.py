"""``tp.function`` against the eager tape and ``jax.jit``, and a compiled ``Trainer.fit``.

The MLP step: 784-512-256-10, ReLU, float32, softmax cross-entropy on one-hot labels, SGD,
written once and run eagerly and through ``tp.function``; JAX (if installed) runs the same
step under ``jax.jit``. The fit: the spirals config's model and optimizer (2-64-64-3 MLP,
Adam with cosine decay, batch 32, accuracy metric) on 1200 samples, eager against
``Trainer(compile=True)``. Systems alternate (A, B, A, B...) in one process; the results are
medians of per-pair time ratios, as the machines are shared.

    python benchmarks/compiled_step.py [--batches 32 128] [--pairs 15]

``OPENBLAS_NUM_THREADS=1`` makes the numbers steadier on a busy machine.
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import time
from collections.abc import Callable

import numpy as np

import tapefit as tp


def tapefit_step(batch: int) -> tuple[Callable[..., tp.Tensor], tp.Tensor, tp.Tensor]:
    tp.random.set_seed(0)
    model = tp.layers.Sequential(
        [
            tp.layers.Dense(512, activation="relu"),
            tp.layers.Dense(256, activation="relu"),
            tp.layers.Dense(10),
        ]
    )
    optimizer = tp.optimizers.SGD(0.01)
    rng = np.random.default_rng(0)
    x = tp.constant(rng.normal(size=(batch, 784)).astype(np.float32))
    y = tp.constant(np.eye(10, dtype=np.float32)[rng.integers(0, 10, batch)])

    def step(x: tp.Tensor, y: tp.Tensor) -> tp.Tensor:
        with tp.GradientTape() as tape:
            loss = tp.reduce_mean(tp.nn.softmax_cross_entropy_with_logits(y, model(x)))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    return step, x, y


def jax_step(batch: int) -> Callable[[], None] | None:
    try:
        import jax
        import jax.numpy as jnp
    except ImportError:
        return None
    rng = np.random.default_rng(0)
    sizes = [784, 512, 256, 10]
    params = [
        (jnp.asarray(rng.normal(size=(a, b)).astype(np.float32) * 0.05), jnp.zeros(b, jnp.float32))
        for a, b in itertools.pairwise(sizes)
    ]
    x = jnp.asarray(rng.normal(size=(batch, 784)).astype(np.float32))
    y = jnp.asarray(np.eye(10, dtype=np.float32)[rng.integers(0, 10, batch)])

    def loss_fn(params, x, y):
        h = x
        for i, (w, b) in enumerate(params):
            h = h @ w + b
            if i < len(params) - 1:
                h = jax.nn.relu(h)
        return jnp.mean(-jnp.sum(y * jax.nn.log_softmax(h), axis=-1))

    @jax.jit
    def step(params, x, y):
        loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
        return jax.tree_util.tree_map(lambda p, g: p - 0.01 * g, params, grads), loss

    state = {"params": params}

    def run() -> None:
        state["params"], loss = step(state["params"], x, y)
        loss.block_until_ready()

    return run


def per_call(fn: Callable[[], object], n: int) -> float:
    start = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - start) / n


def compare(fns: dict[str, Callable[[], object]], pairs: int, n: int) -> dict[str, list[float]]:
    for fn in fns.values():
        for _ in range(5):  # tracing, warm caches
            fn()
    times: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(pairs):
        for k, fn in fns.items():
            times[k].append(per_call(fn, n))
    return times


def ratio(times: dict[str, list[float]], a: str, b: str) -> float:
    return statistics.median(x / y for x, y in zip(times[a], times[b]))


def mlp(batch: int, pairs: int) -> str:
    step, x, y = tapefit_step(batch)
    compiled = tp.function(step)
    fns: dict[str, Callable[[], object]] = {"eager": lambda: step(x, y), "compiled": lambda: compiled(x, y)}
    jitted = jax_step(batch)
    if jitted is not None:
        fns["jax.jit"] = jitted
    times = compare(fns, pairs, 10)
    line = f"MLP step, batch {batch}: compiled/eager {ratio(times, 'compiled', 'eager'):.2f}"
    line += (
        f", compiled/jax.jit {ratio(times, 'compiled', 'jax.jit'):.2f}"
        if jitted
        else " (jax not installed: no jax.jit column)"
    )
    medians = ", ".join(f"{k} {1000 * statistics.median(v):.2f}" for k, v in times.items())
    return f"{line}   [ms per step: {medians}]"


def spirals_fit(pairs: int) -> str:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(1200, 2)).astype(np.float32)
    y = rng.integers(0, 3, 1200)

    def trainer(compile: bool) -> tp.Trainer:
        tp.random.set_seed(0)
        model = tp.layers.Sequential(
            [
                tp.layers.Dense(64, activation="relu"),
                tp.layers.Dense(64, activation="relu"),
                tp.layers.Dense(3),
            ]
        )
        optimizer = tp.optimizers.Adam(tp.optimizers.schedules.CosineDecay(0.01, 1520))
        t = tp.Trainer(
            model, optimizer, "sparse_categorical_crossentropy", metrics=["accuracy"], compile=compile
        )
        t.fit(x, y, epochs=1, batch_size=32, shuffle=False, verbose=0)  # builds, traces
        return t

    trainers = {"eager": trainer(False), "compiled": trainer(True)}
    # No shuffling: the two trainers would take turns drawing from the one global generator.
    fns = {
        k: (lambda t=t: t.fit(x, y, epochs=1, batch_size=32, shuffle=False, verbose=0))
        for k, t in trainers.items()
    }
    times = compare(fns, pairs, 1)
    weights = [[v.numpy() for v in t.model.variables] for t in trainers.values()]
    same = all(np.array_equal(a, b) for a, b in zip(*weights))
    return (
        f"spirals fit epoch: eager/compiled {ratio(times, 'eager', 'compiled'):.2f}x faster "
        f"(weights bit-identical: {same})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--batches", type=int, nargs="+", default=[32, 128])
    parser.add_argument("--pairs", type=int, default=15)
    args = parser.parse_args()
    for batch in args.batches:
        print(mlp(batch, args.pairs), flush=True)
    print(spirals_fit(args.pairs), flush=True)


if __name__ == "__main__":
    main()
