"""``python -m tapefit train ...``: the ``train`` command."""

import sys

from tapefit.cli import main

USAGE = "usage: python -m tapefit train --config FILE [--set KEY=VALUE ...] [--resume auto|PATH]"

if __name__ == "__main__":
    args = sys.argv[1:]
    if args[:1] == ["train"]:
        sys.exit(main(args[1:], prog="python -m tapefit train"))
    if args[:1] in (["-h"], ["--help"]):
        print(f"{USAGE}\n\n'python -m tapefit train --help' describes the command.")
        sys.exit(0)
    what = f"unknown command {args[0]!r}" if args else "no command given"
    print(f"{USAGE}\npython -m tapefit: error: {what}; the command is 'train'", file=sys.stderr)
    sys.exit(2)
