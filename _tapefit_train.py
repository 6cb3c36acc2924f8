"""The ``train`` command's entry point, outside the ``tapefit`` package on purpose.

Importing ``tapefit`` (NumPy, the ops, the layers) takes a noticeable fraction of a second;
a Ctrl-C in that time must end ``train`` like any other Ctrl-C (one line, exit status
130), so the import happens here, inside the handler, and not in the script's first line.
"""

import signal
import sys


def main() -> int:
    """Runs ``train`` (``tapefit.cli.app.main``) and returns its exit status."""
    try:
        from tapefit.cli.app import command

        return command()
    except KeyboardInterrupt:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        print("train: interrupted while starting", file=sys.stderr)
        return 130
