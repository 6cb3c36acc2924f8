"""The ``train`` command (the configuration-driven trainer arrives with the CLI issue)."""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``train``; not implemented yet, so it says so and exits with status 2."""
    print("train: not implemented yet (tapefit's command line is still being built)", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
