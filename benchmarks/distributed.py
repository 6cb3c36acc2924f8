"""Data-parallel throughput: the digits MLP and CNN on 1 and 2 MPI ranks (samples/s, Allreduce ms/step).

Run ``python benchmarks/distributed.py`` (it launches itself under ``mpiexec``); needs the
``mpi`` extra and scikit-learn. Each configuration runs ``--repeats`` times, alternating the
rank counts, and the table shows medians. On one host the ranks share its cores, so 2 ranks
on 2 cores show what the communication costs more than what a cluster would gain.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np


def worker(model_type: str, epochs: int) -> None:
    import tapefit as tp
    from tapefit import data
    from tapefit.cli import models

    tp.random.set_seed(0)
    x, y = data.load_digits(flatten=model_type == "mlp")
    x = x.astype(np.float32)
    model = (
        models.mlp(hidden_units=[64, 64], output_units=10, output_activation="softmax")
        if model_type == "mlp"
        else models.cnn(output_units=10, output_activation="softmax")
    )
    trainer = tp.Trainer(model, "adam", "sparse_categorical_crossentropy", plugins=["distributed"])
    trainer.fit(x[:64], y[:64], epochs=1, batch_size=64, verbose=0)  # builds and warms up
    world = trainer.world
    gradient_seconds = getattr(world, "gradient_seconds", 0.0)
    steps = trainer.step
    started = time.perf_counter()
    trainer.fit(x, y, epochs=epochs, batch_size=64, verbose=0)
    seconds = time.perf_counter() - started
    if world.is_chief:
        steps = trainer.step - steps
        waited = getattr(world, "gradient_seconds", 0.0) - gradient_seconds
        print(json.dumps({"samples_per_s": len(x) * epochs / seconds, "allreduce_ms": 1e3 * waited / steps}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--worker", choices=["mlp", "cnn"])
    args = parser.parse_args()
    if args.worker:
        worker(args.worker, args.epochs)
        return
    mpiexec = str(Path(sys.executable).parent / "mpiexec")
    results: dict[tuple[str, int], list[dict[str, float]]] = {}
    for _ in range(args.repeats):
        for model_type in ("mlp", "cnn"):
            for ranks in (1, 2):
                command = [sys.executable, __file__, "--worker", model_type, "--epochs", str(args.epochs)]
                out = subprocess.run(
                    [mpiexec, "-n", str(ranks), *command], capture_output=True, text=True, check=True
                )
                results.setdefault((model_type, ranks), []).append(
                    json.loads(out.stdout.strip().splitlines()[-1])
                )
    print("| model | ranks | samples/s | speed-up | Allreduce ms/step |")
    print("| --- | --- | --- | --- | --- |")
    for (model_type, ranks), runs in results.items():
        speed = float(np.median([r["samples_per_s"] for r in runs]))
        base = float(np.median([r["samples_per_s"] for r in results[(model_type, 1)]]))
        allreduce = float(np.median([r["allreduce_ms"] for r in runs]))
        print(f"| {model_type} | {ranks} | {speed:,.0f} | {speed / base:.2f}x | {allreduce:.3f} |")


if __name__ == "__main__":
    main()
