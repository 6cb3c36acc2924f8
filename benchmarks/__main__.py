"""``python -m benchmarks [--quick] [--rounds N] [--cores N] [--json PATH]``: runs the suite, prints its table, writes JSON.

Every system gets the same cores: ``--cores 1`` (the default) pins the process to one core and
gives NumPy's BLAS and PyTorch one thread each. Thread-count variables alone do not bound XLA,
whose pool otherwise takes every core while NumPy's BLAS runs on one, so ``jax.jit`` would be
timed on twice the hardware. ``--cores 0`` leaves the process and every library as they are.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

# PyTorch's OpenMP threads spin after each op by default, taking the cores NumPy's BLAS threads
# need next in the alternation; passive waiting is fair to the systems timed after it.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

sys.path.insert(0, str(Path(__file__).parent))


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes and two rounds (a smoke test)")
    parser.add_argument("--json", default="benchmarks/results.json", help="where to write the figures")
    parser.add_argument("--rounds", type=int, default=40, help="alternating rounds per figure (default 40)")
    parser.add_argument(
        "--cores",
        type=int,
        default=1,
        help="cores every system gets (default 1; 0: all, each library's threads as it chooses; "
        "the busy-neighbour row needs two)",
    )
    args = parser.parse_args()
    if args.cores < 0:
        parser.error(f"--cores must be 0 or more, got {args.cores}")
    return args


def share_cores(cores: int) -> None:
    """Pins this process to its first ``cores`` cores and sets the thread counts to match.

    Runs before NumPy, PyTorch or JAX is imported: they read the thread variables then, and
    XLA's threads keep the process's affinity.
    """
    allowed = sorted(os.sched_getaffinity(0))
    if cores > len(allowed):
        sys.exit(f"--cores {cores}: this process may run on {len(allowed)} core(s)")
    os.sched_setaffinity(0, allowed[:cores])
    for variable in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[variable] = str(cores)


def main() -> None:
    args = parse_args()
    if args.cores:
        share_cores(args.cores)
    from suite import as_json, run, table

    rows = run(quick=args.quick, rounds=args.rounds)
    print(table(rows))
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(as_json(rows), indent=2) + "\n")
    print(f"\nwrote {args.json}")


if __name__ == "__main__":
    main()
