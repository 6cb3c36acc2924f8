"""The ``train`` command's entry point, outside the ``tapefit`` package on purpose.

Importing ``tapefit`` (NumPy, the ops, the layers) takes a noticeable fraction of a second;
a Ctrl-C, SIGTERM or SIGHUP in that time must end ``train`` like any other (one line, exit
status 130, 143 or 129), so the import happens here, inside the handler, and not in the
script's first line.
"""

import signal
import sys

_received: list[int] = []


def _stop(signum: int, frame: object) -> None:
    _received.append(signum)
    raise KeyboardInterrupt


def main() -> int:
    """Runs ``train`` (``tapefit.cli.app.main``) and returns its exit status."""
    signals = [getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, name)]
    for signum in signals:
        signal.signal(signum, _stop)
    try:
        from tapefit.cli.app import command

        # fit holds a Ctrl-C back over Python's own handler (train installs its own for the others)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        return command()
    except KeyboardInterrupt as e:
        signum = getattr(e, "signum", _received[0] if _received else signal.SIGINT)
    except ImportError:
        # A signal inside an extension module's import (NumPy's) can come out as an ImportError.
        if not _received:
            raise
        signum = _received[0]
    for each in signals:
        signal.signal(each, signal.SIG_IGN)
    what = "interrupted" if signum == signal.SIGINT else f"stopped by {signal.Signals(signum).name}"
    print(f"train: {what} while starting", file=sys.stderr)
    return 128 + signum
