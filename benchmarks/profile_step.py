"""Where an eager step's time goes: cProfile of the MLP step and of the recorded op chain.

Prints, for each workload, the CPU time per call and the share of the profiled time spent
in each part of tapefit (summed ``tottime`` by source file) and in NumPy's own functions,
then the costliest functions. This is the profile behind the gaps that
``benchmarks/README.md`` reports; cProfile inflates Python's share, so read the shares as an
order, the per-call times as an upper bound.

    OPENBLAS_NUM_THREADS=1 python benchmarks/profile_step.py [--batch 32] [--top 12] [--calls 300]
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

import numpy as np

import tapefit as tp

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks import suite

ROOT = Path(tp.__file__).resolve().parent


def part_of(filename: str) -> str:
    """``core/record``, ``layers/module``, ... for tapefit's files; ``numpy`` or ``python`` else."""
    path = Path(filename)
    if filename.startswith("~") or filename.startswith("<"):  # built-ins: NumPy's ufuncs, list.append
        return "builtins (NumPy's C functions among them)"
    try:
        return "tapefit/" + str(path.resolve().relative_to(ROOT).with_suffix(""))
    except ValueError:
        return "numpy (Python parts)" if "numpy" in path.parts else "other Python"


def profile(name: str, fn: Callable[[], object], calls: int, top: int) -> None:
    fn()  # warm up: lazy builds
    start = time.thread_time()
    for _ in range(calls):
        fn()
    per_call = (time.thread_time() - start) / calls * 1e3
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(calls):
        fn()
    profiler.disable()
    stats = pstats.Stats(profiler)
    shares: dict[str, float] = defaultdict(float)
    rows = []
    for (filename, line, function), (_, ncalls, tottime, _, _) in stats.stats.items():  # type: ignore[attr-defined]
        shares[part_of(filename)] += tottime
        rows.append((tottime, ncalls, f"{Path(filename).name}:{line}({function})"))
    total = sum(shares.values())
    print(
        f"\n{name}: {per_call:.3f} ms CPU per call unprofiled; {stats.total_calls / calls:.0f} Python calls per call"
    )  # type: ignore[attr-defined]
    for part, seconds in sorted(shares.items(), key=lambda kv: -kv[1]):
        if seconds / total >= 0.01:
            print(f"  {seconds / total:6.1%}  {part}")
    print("  costliest functions (tottime share, calls per call):")
    for tottime, ncalls, where in sorted(rows, reverse=True)[:top]:
        print(f"  {tottime / total:6.1%}  {ncalls / calls:6.1f}  {where}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--top", type=int, default=12)
    parser.add_argument("--calls", type=int, default=300, help="calls timed, then profiled")
    args = parser.parse_args()
    params = suite.init_params()
    rng = np.random.default_rng(0)
    x = rng.standard_normal((args.batch, suite.SIZES[0])).astype(np.float32)
    y = rng.integers(0, suite.SIZES[-1], args.batch)
    lean = suite.LeanMLP([p.copy() for p in params], args.batch)
    step = suite.tapefit_step_fn([p.copy() for p in params], compiled=False)
    xt, yt = tp.constant(x), tp.constant(y)
    profile(f"lean NumPy MLP step, batch {args.batch}", lambda: lean.step(x, y), args.calls, args.top)
    profile(f"eager MLP step, batch {args.batch}", lambda: step(xt, yt), args.calls, args.top)

    chain_x = tp.constant(np.linspace(-1, 1, 16, dtype=np.float32))
    c = tp.constant(np.full(16, 0.5, np.float32))

    def recorded_backward() -> None:
        with tp.GradientTape() as tape:
            tape.watch(chain_x)
            v = chain_x
            for _ in range(25):
                v = tp.tanh(tp.sin(v * c + c))
        tape.gradient(v, chain_x)

    profile("chain of 100 elementwise ops, recorded + backward", recorded_backward, args.calls, args.top)


if __name__ == "__main__":
    main()
