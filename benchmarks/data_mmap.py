"""One epoch on a memory-mapped ``.npy`` data set larger than the memory it may use.

Writes ``x.npy`` (float32, ``--gigabytes`` of it) and ``y.npy`` into a temporary folder,
trains one shuffled epoch of a small MLP on them with ``tp.data.load_npy`` in a fresh Python
process, reports that process's peak resident memory and samples per second, and removes the
folder. The reference in the same run: the peak memory of a fresh process that only imports
tapefit and builds the model (what the epoch adds to it is the data's share).

    python benchmarks/data_mmap.py [--gigabytes 2] [--features 256] [--batch-size 1024]
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]

CHILD = textwrap.dedent(
    """
    import json, sys, time
    import numpy as np
    import tapefit as tp

    folder, batch_size, train = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "train"
    tp.random.set_seed(0)
    model = tp.layers.Sequential([tp.layers.Dense(64, activation="relu"), tp.layers.Dense(10)])
    trainer = tp.Trainer(model, "sgd", tp.losses.SparseCategoricalCrossentropy(from_logits=True))
    x, y = tp.data.load_npy(folder)
    model(tp.constant(np.zeros((1, x.shape[1]), np.float32)))
    started = time.perf_counter()
    if train:
        trainer.fit(x, y, epochs=1, batch_size=batch_size, verbose=0)
    seconds = time.perf_counter() - started
    # VmHWM, not ru_maxrss: the latter keeps the parent's peak across fork and exec.
    with open("/proc/self/status") as f:
        peak_mb = next(int(line.split()[1]) for line in f if line.startswith("VmHWM")) / 1024
    print(json.dumps({"peak_mb": peak_mb, "seconds": seconds, "samples": len(x), "steps": trainer.step}))
    """
)


def write_data(folder: Path, gigabytes: float, features: int) -> int:
    """Writes x.npy and y.npy block by block (never the whole array in memory); returns the rows."""
    rows = int(gigabytes * 2**30 / (4 * features))
    rng = np.random.default_rng(0)
    x = np.lib.format.open_memmap(folder / "x.npy", mode="w+", dtype=np.float32, shape=(rows, features))
    block = 65536
    for start in range(0, rows, block):
        stop = min(rows, start + block)
        x[start:stop] = rng.standard_normal((stop - start, features), dtype=np.float32)
    x.flush()
    del x
    np.save(folder / "y.npy", rng.integers(0, 10, rows).astype(np.int64))
    return rows


def run_child(folder: Path, batch_size: int, mode: str) -> dict[str, float]:
    env_path = str(ROOT)
    out = subprocess.run(
        [sys.executable, "-c", CHILD, str(folder), str(batch_size), mode],
        capture_output=True,
        text=True,
        check=True,
        env={"PYTHONPATH": env_path, "PATH": "/usr/bin:/bin", "OPENBLAS_NUM_THREADS": "1"},
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gigabytes", type=float, default=2.0)
    parser.add_argument("--features", type=int, default=256)
    parser.add_argument("--batch-size", type=int, default=1024)
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="tapefit-mmap-"))
    try:
        rows = write_data(folder, args.gigabytes, args.features)
        size = sum(p.stat().st_size for p in folder.iterdir()) / 2**30
        baseline = run_child(folder, args.batch_size, "build")
        epoch = run_child(folder, args.batch_size, "train")
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    print(
        f"data set: {rows} x {args.features} float32 on disk, {size:.2f} GB, rows read as batches need them"
    )
    print(f"peak RSS, import + model only        {baseline['peak_mb']:7.0f} MB")
    print(f"peak RSS, one shuffled epoch          {epoch['peak_mb']:7.0f} MB  (target < 400 MB)")
    print(
        f"epoch: {epoch['steps']} steps in {epoch['seconds']:.1f} s, {rows / epoch['seconds']:,.0f} samples/s"
    )


if __name__ == "__main__":
    main()
