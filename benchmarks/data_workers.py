"""Per-sample Python work in worker processes: ``tp.data.Pipeline`` with 2 workers against 0.

Each sample's ``map`` does about 1 ms of pure-Python work (the kind of decoding or
augmentation that holds the GIL); the training step of a small MLP runs on every batch, so
the workers' work overlaps the step. The two configurations alternate (0, 2, 0, 2, ...) in one
run; the result is the median of the per-pair ratios of samples per second after each fit's
first batch (the workers start once per fit, about a second here; shown apart).

    python benchmarks/data_workers.py [--samples 4096] [--epochs 2] [--pairs 3]
"""

from __future__ import annotations

import argparse
import multiprocessing.pool
import statistics
import time

import numpy as np

import tapefit as tp

WORK_SECONDS = 0.001
startups: dict[int, list[float]] = {0: [], 2: []}


def decode(sample: tuple[np.ndarray, np.int64]) -> tuple[np.ndarray, np.int64]:
    """About 1 ms of Python work per sample, then the sample."""
    x, y = sample
    deadline = time.perf_counter() + WORK_SECONDS
    total = 0
    while time.perf_counter() < deadline:
        total += 1
    return x + np.float32(total * 0.0), y


def python_work(seconds: float) -> int:
    """Units of pure-Python work done in ``seconds`` of wall time."""
    deadline, done = time.perf_counter() + seconds, 0
    while time.perf_counter() < deadline:
        for i in range(1000):
            done += i & 1
    return done


def parallel_ceiling(pool: multiprocessing.pool.Pool) -> float:
    """How much more pure-Python work two processes do than one in the same time: the most
    2 workers can give on this machine (2.0 on two free cores; less when the cores are shared,
    are hyper-threads of one core, or another program runs)."""
    alone = pool.apply(python_work, (0.5,))
    together = sum(pool.map(python_work, [0.5, 0.5], chunksize=1))
    return together / alone


def fit_rate(x: np.ndarray, y: np.ndarray, workers: int, batch_size: int, epochs: int) -> float:
    """Samples per second of a fit reading through a pipeline with ``workers`` (started once)."""
    tp.random.set_seed(0)
    model = tp.layers.Sequential([tp.layers.Dense(64, activation="relu"), tp.layers.Dense(10)])
    trainer = tp.Trainer(
        model, "sgd", tp.losses.SparseCategoricalCrossentropy(from_logits=True), threads="auto"
    )
    pipeline = tp.data.Pipeline(x, y, batch_size=batch_size, map=decode, workers=workers, prefetch=4, seed=0)
    marks: list[float] = []

    class FirstBatch:  # the workers start with the fit: their start-up is timed apart
        @tp.hookimpl
        def on_train_batch_end(self, step: int) -> None:
            if step == 0:
                marks.append(time.perf_counter())

    trainer.plugins.register(FirstBatch())
    started = time.perf_counter()
    trainer.fit(pipeline, epochs=epochs, verbose=0)
    ended = time.perf_counter()
    startups[workers].append(marks[0] - started)
    return (epochs * len(x) - batch_size) / (ended - marks[0])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=4096)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--pairs", type=int, default=3)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    x = rng.standard_normal((args.samples, 64), dtype=np.float32)
    y = rng.integers(0, 10, args.samples)
    fit_rate(x[:64], y[:64], 2, args.batch_size, 1)  # warm up: imports, the first worker start
    ratios, rates, ceilings = [], {0: [], 2: []}, []
    with multiprocessing.get_context("spawn").Pool(2) as pool:
        for _ in range(args.pairs):
            ceilings.append(parallel_ceiling(pool))
            for workers in (0, 2):
                rates[workers].append(fit_rate(x, y, workers, args.batch_size, args.epochs))
            ratios.append(rates[2][-1] / rates[0][-1])
    for workers in (0, 2):
        print(
            f"{workers} workers: {statistics.median(rates[workers]):8.0f} samples/s after the first batch, "
            f"first batch after {statistics.median(startups[workers]):.2f} s (medians of {args.pairs})"
        )
    print(
        f"2 workers / 0 workers: {statistics.median(ratios):.2f}x (median of per-pair ratios; target >= 1.7x)"
    )
    print(
        f"this machine's ceiling: 2 processes do {statistics.median(ceilings):.2f}x the Python work "
        "of 1 (median; 2.00 on two free cores)"
    )


if __name__ == "__main__":
    main()
