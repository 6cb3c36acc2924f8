"""``python -m tapefit train ...``: the ``train`` command; ``python -m tapefit --version``."""

import sys

from tapefit.cli.app import command

USAGE = (
    "usage: python -m tapefit train --config FILE [--set KEY=VALUE ...] [--resume auto|PATH]\n"
    "       python -m tapefit --version"
)

if __name__ == "__main__":
    args = sys.argv[1:]
    if args[:1] == ["train"]:
        sys.exit(command(args[1:], prog="python -m tapefit train"))
    if args == ["--version"]:
        from tapefit import __version__

        print(f"tapefit {__version__}")  # as 'train --version' prints it (a test keeps them equal)
        sys.exit(0)
    if args[:1] in (["-h"], ["--help"]):
        print(f"{USAGE}\n\n'python -m tapefit train --help' describes the command.")
        sys.exit(0)
    what = f"unknown command {args[0]!r}" if args else "no command given"
    print(f"{USAGE}\npython -m tapefit: error: {what}; the command is 'train'", file=sys.stderr)
    sys.exit(2)
