"""``python -m benchmarks [--quick] [--rounds N] [--json PATH]``: runs the suite, prints its table, writes JSON."""

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

from suite import as_json, run, table


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes and two rounds (a smoke test)")
    parser.add_argument("--json", default="benchmarks/results.json", help="where to write the figures")
    parser.add_argument("--rounds", type=int, default=40, help="alternating rounds per figure (default 40)")
    args = parser.parse_args()
    rows = run(quick=args.quick, rounds=args.rounds)
    print(table(rows))
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(as_json(rows), indent=2) + "\n")
    print(f"\nwrote {args.json}")


if __name__ == "__main__":
    main()
