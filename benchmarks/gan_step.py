"""The GAN's training step (``examples/gan.py``) under ``tp.function`` against eager.

The model of ``configs/gan_digits.yaml`` (64 features, latent 16, 64 units; two Dense networks,
two Adam optimizers, two updates a step) trained by ``Trainer.fit`` on batches of 64, once with
``Trainer(compile=True)`` (``tp.function`` over the model's own ``train_step``, traced when the
fit starts) and once eagerly. A plugin times each step from ``on_train_batch_start`` to
``on_train_batch_end``; the first step of a fit, which traces, is left out. The two fits
alternate in one process, and the figure is the median of the per-round ratios of the median
step times.

    python benchmarks/gan_step.py [--pairs 15] [--steps 40]
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

import tapefit as tp

ROOT = Path(__file__).resolve().parents[1]
BATCH = 64


class StepTimer:
    """Seconds of every training step of a fit (the batch-start to batch-end hooks)."""

    def __init__(self) -> None:
        self.seconds: list[float] = []
        self._started = 0.0

    @tp.hookimpl
    def on_train_batch_start(self) -> None:
        self._started = time.perf_counter()

    @tp.hookimpl
    def on_train_batch_end(self) -> None:
        self.seconds.append(time.perf_counter() - self._started)


def gan_trainer(compiled: bool | str) -> tuple[Any, StepTimer]:
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from examples.gan import GAN

    tp.random.set_seed(0)
    timer = StepTimer()
    return tp.Trainer(GAN(features=64, latent_dim=16, units=64), plugins=[timer], compile=compiled), timer


def step_times(pairs: int, steps: int) -> dict[str, list[float]]:
    """The median step time of each round's fit, eager, under ``tp.function`` and (with Numba)
    with fused kernels (``compile="jit"``), alternating."""
    x = np.random.default_rng(0).standard_normal(((steps + 1) * BATCH, 64), dtype=np.float32)
    systems = {"function": gan_trainer(True), "eager": gan_trainer(False)}
    if importlib.util.find_spec("numba") is not None:
        systems["jit"] = gan_trainer("jit")
    times: dict[str, list[float]] = {name: [] for name in systems}
    for round_ in range(pairs + 1):
        for name, (trainer, timer) in systems.items():
            timer.seconds.clear()
            trainer.fit(x, epochs=1, batch_size=BATCH, shuffle=False, verbose=0)
            if round_:  # the first round warms up
                times[name].append(statistics.median(timer.seconds[1:]))  # the first step traces
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=15, help="alternating rounds (default 15)")
    parser.add_argument("--steps", type=int, default=40, help="timed steps per fit (default 40)")
    args = parser.parse_args()
    times = step_times(args.pairs, args.steps)
    ratio = statistics.median(f / e for f, e in zip(times["function"], times["eager"]))
    eager, function = (statistics.median(times[k]) * 1e3 for k in ("eager", "function"))
    print(
        f"GAN step, batch {BATCH}: function/eager {ratio:.2f}x (eager {eager:.3g} ms, function {function:.3g} ms)"
    )
    if "jit" in times:
        fused = statistics.median(j / e for j, e in zip(times["jit"], times["eager"]))
        print(
            f"GAN step, batch {BATCH}: jit/eager {fused:.2f}x (jit {statistics.median(times['jit']) * 1e3:.3g} ms)"
        )


if __name__ == "__main__":
    main()
