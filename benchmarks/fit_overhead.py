"""The fit loop's own overhead: one ``Trainer.fit`` epoch against the bare tape+optimizer loop.

Both train the 784-512-256-10 MLP (ReLU, logits, sparse softmax cross-entropy, Adam) on the
same synthetic batches, from the same initial weights, in the same process; the fit runs
with the ``progress`` (drawing into a string buffer, so every redraw is really made) and
``csv_logger`` plugins. Runs alternate; the ratio is taken of the fastest run of each (the
least disturbed by other processes, as ``timeit`` advises), and of the medians. The final weights of
the two must be bit-identical: the trainer does the same arithmetic, only its bookkeeping
costs extra.

    python benchmarks/fit_overhead.py [--samples 4096] [--batch-size 128] [--repeats 10]

On a busy machine, ``OPENBLAS_NUM_THREADS=1`` makes the numbers steadier.
"""

from __future__ import annotations

import argparse
import gc
import io
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

import tapefit as tp
from tapefit.data.loader import BatchLoader
from tapefit.plugins.csv_logger import CSVLogger
from tapefit.plugins.progress import Progress

SIZES = (784, 512, 256, 10)


def _clock() -> tuple[float, float]:
    return time.perf_counter(), time.process_time()


def _elapsed(start: tuple[float, float]) -> tuple[float, float]:
    """(wall, CPU) seconds since ``start``: CPU time is less disturbed by other processes."""
    return time.perf_counter() - start[0], time.process_time() - start[1]


def make_model() -> tp.Module:
    tp.random.set_seed(1)
    layers = [tp.layers.Dense(n, activation="relu") for n in SIZES[1:-1]] + [tp.layers.Dense(SIZES[-1])]
    return tp.layers.Sequential(layers)


def bare_epoch(
    x: np.ndarray, y: np.ndarray, batch_size: int
) -> tuple[tuple[float, float], dict[str, np.ndarray]]:
    """The loop one would write by hand: batches, tape, gradient, apply."""
    model = make_model()
    optimizer = tp.optimizers.Adam(learning_rate=1e-3)
    loss_fn = tp.losses.SparseCategoricalCrossentropy(from_logits=True)
    tp.random.set_seed(2)
    start = _clock()
    loader = BatchLoader(x, y, batch_size=batch_size)  # the seed comes from tp.random, as in fit
    for xb, yb in loader:
        xt, yt = tp.constant(xb), tp.constant(yb)
        with tp.GradientTape() as tape:
            loss = loss_fn(yt, model(xt, training=True))
        variables = model.trainable_variables
        grads = tape.gradient(loss, variables)
        optimizer.apply_gradients(zip(grads, variables))
    return _elapsed(start), model.state_dict()


def fit_epoch(
    x: np.ndarray, y: np.ndarray, batch_size: int, folder: Path
) -> tuple[tuple[float, float], dict[str, np.ndarray]]:
    model = make_model()
    plugins = [Progress(enabled=True, file=io.StringIO()), CSVLogger(str(folder / "history.csv"))]
    trainer = tp.Trainer(
        model,
        tp.optimizers.Adam(learning_rate=1e-3),
        tp.losses.SparseCategoricalCrossentropy(from_logits=True),
        plugins=plugins,
        output_dir=folder,
    )
    tp.random.set_seed(2)
    start = _clock()
    trainer.fit(x, y, epochs=1, batch_size=batch_size)
    return _elapsed(start), model.state_dict()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=4096)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=10)
    args = parser.parse_args()

    rng = np.random.default_rng(0)
    x = rng.normal(size=(args.samples, SIZES[0])).astype(np.float32)
    y = rng.integers(0, SIZES[-1], size=args.samples)
    bare_times, fit_times = [], []
    with tempfile.TemporaryDirectory() as tmp:
        bare_epoch(x[: args.batch_size], y[: args.batch_size], args.batch_size)  # warm-up
        for i in range(args.repeats):
            # Alternate which goes first, so drifts in machine load hit both alike.
            for which in ("bare", "fit") if i % 2 == 0 else ("fit", "bare"):
                gc.collect()  # garbage of the previous run is not charged to the next
                if which == "bare":
                    t, bare_weights = bare_epoch(x, y, args.batch_size)
                    bare_times.append(t)
                else:
                    t, fit_weights = fit_epoch(x, y, args.batch_size, Path(tmp))
                    fit_times.append(t)
    same = all(np.array_equal(a, b) for a, b in zip(bare_weights.values(), fit_weights.values()))
    steps = -(-args.samples // args.batch_size)
    print(
        f"MLP {'-'.join(map(str, SIZES))}, {args.samples} samples, batch {args.batch_size} ({steps} steps/epoch)"
    )
    for kind, index in (("wall", 0), ("CPU", 1)):
        bare_t = [t[index] for t in bare_times]
        fit_t = [t[index] for t in fit_times]
        for label, times in (("bare tape+optimizer loop", bare_t), ("Trainer.fit + progress + csv", fit_t)):
            best, median = min(times), statistics.median(times)
            print(f"{kind:4s} {label:29s} best {best * 1e3:7.1f} ms/epoch, median {median * 1e3:7.1f}")
        best_ratio, median_ratio = (
            min(fit_t) / min(bare_t),
            statistics.median(fit_t) / statistics.median(bare_t),
        )
        print(
            f"{kind:4s} ratio fit / bare: best {best_ratio:.3f}, median {median_ratio:.3f}  (target <= 1.05)"
        )
    print(f"final weights bit-identical: {same}")


if __name__ == "__main__":
    main()
