"""The ``progress`` plugin: a tqdm bar per epoch (or a line per epoch in a log), as Keras's ``verbose``."""

from __future__ import annotations

import io
import math
import os
import sys
import time
from typing import IO, Any

from tqdm import tqdm

from tapefit.core.naming import suggest_keywords
from tapefit.plugins.hookspecs import hookimpl


def format_value(value: float) -> str:
    """A log value as Keras prints it: 4 decimals (``1.0000``), or 4 in scientific notation when
    it is that small or large (``3.2100e-05``)."""
    value = float(value)
    if not math.isfinite(value):
        return str(value)
    return f"{value:.4f}" if value == 0 or 1e-3 <= abs(value) < 1e5 else f"{value:.4e}"


def format_logs(logs: dict[str, float]) -> dict[str, str]:
    """Log values formatted for a progress bar (``format_value``)."""
    return {key: format_value(value) for key, value in logs.items()}


def terminal_columns(stream: Any) -> int:
    """The width of the terminal ``stream`` writes to; 0 when unknown (a new pseudo-terminal
    reports 0 columns until it is sized)."""
    try:
        return os.get_terminal_size(stream.fileno()).columns
    except (AttributeError, OSError, ValueError, io.UnsupportedOperation):
        return 0


FALLBACK_COLUMNS = 100
"""The bar's width on a terminal whose width is unknown (tqdm would draw blank lines)."""


VERBOSE_MODES = ("auto", 0, 1, 2)


def in_notebook() -> bool:
    """Whether this process runs a Jupyter kernel (where tqdm draws a widget, not text)."""
    shell = sys.modules.get("IPython")
    get_ipython = getattr(shell, "get_ipython", None)
    return get_ipython is not None and type(get_ipython()).__name__ == "ZMQInteractiveShell"


def notebook_widgets() -> bool:
    """Whether tqdm can draw its widget bar here: ipywidgets imports (without it tqdm warns
    ``IProgress not found`` and draws a text bar that Jupyter shows in red)."""
    try:
        import tqdm.notebook
    except ImportError:
        return False
    return getattr(tqdm.notebook, "IProgress", None) is not None


def check_verbose(verbose: Any) -> Any:
    """``verbose`` as Keras takes it: ``"auto"``, 0, 1 or 2; anything else is a ``ValueError``."""
    if isinstance(verbose, bool) or verbose not in VERBOSE_MODES:
        raise ValueError(f"verbose must be 'auto', 0, 1 or 2, got {verbose!r}")
    return verbose


@suggest_keywords
class Progress:
    """Shows the progress of ``fit`` (config name ``progress``), as Keras's ``verbose``.

    ``verbose=1`` draws one tqdm bar per epoch: ``Epoch i/N``, batches done, speed, and as
    its postfix the running mean of the loss over the epoch and the running metrics; at the
    epoch's end the postfix shows the epoch logs with the ``val_`` keys. ``verbose=2``
    prints one line per epoch instead. ``"auto"`` (the default) draws the bar on a terminal
    and in Jupyter, and writes lines when the output is a file or a pipe (a log).

    In Jupyter the bar is tqdm's widget when ipywidgets is installed (``pip install
    "tapefit[notebook]"``); without it, bars and lines alike become one line per epoch on
    standard output (unless ``file`` is given), so nothing shows in red and no log is cut.

    Args:
        refresh_per_second: at most this many redraws a second; between redraws a
            batch costs one clock read.
        enabled: ``True`` is ``verbose=1``, ``False`` is ``verbose=0``; ``None`` (default)
            leaves ``verbose`` to decide.
        leave: keep each epoch's finished bar on screen.
        file: where to draw; default standard error.
        verbose: ``"auto"``, 0 (silent), 1 (bars) or 2 (a line per epoch).
    """

    plugin_name = "progress"
    adds_log_keys: tuple[str, ...] = ()  # epoch log keys it adds (hookspecs.py)
    chief_only = True  # writes or prints: only rank 0 runs it (hookspecs.py, configure_world)

    def __init__(
        self,
        refresh_per_second: float = 4.0,
        enabled: bool | None = None,
        leave: bool = True,
        file: IO[str] | None = None,
        verbose: Any = "auto",
    ) -> None:
        if refresh_per_second <= 0:
            raise ValueError(f"refresh_per_second must be positive, got {refresh_per_second!r}")
        if file is not None and not callable(getattr(file, "write", None)):
            got = f"the string {file!r}" if isinstance(file, str) else f"{type(file).__name__} {file!r}"
            raise TypeError(
                f"file must be a text stream with a write method (standard error by default), got {got}"
            )
        check_verbose(verbose)
        self.interval = 1.0 / float(refresh_per_second)
        self.verbose = verbose if enabled is None else (1 if enabled else 0)
        self.enabled = enabled
        self.leave = bool(leave)
        self.file = file
        self._bar: Any = None
        self._widget = False  # the bar is tqdm's notebook widget
        self._notebook_text = False  # in Jupyter without ipywidgets: lines on standard output
        self._mode = 0
        self._pending = 0
        self._next_draw = 0.0
        self._epoch_started = 0.0

    def _stream(self) -> IO[str]:
        if self.file is not None:
            return self.file
        return sys.stdout if self._notebook_text else sys.stderr

    @hookimpl
    def on_fit_start(self) -> None:
        self._mode = self.verbose
        notebook = self.file is None and in_notebook()
        self._widget = notebook and notebook_widgets()
        self._notebook_text = notebook and not self._widget
        if self._notebook_text and self._mode != 0:
            self._mode = 2  # tqdm's text bar there: red, and cut at 100 columns
        if self._mode == "auto":
            isatty = getattr(self._stream(), "isatty", None)
            self._mode = 1 if (isatty is not None and isatty()) or notebook else 2

    @hookimpl
    def on_epoch_start(self, trainer: Any, epoch: int) -> None:
        self._epoch_started = time.monotonic()
        if self._mode != 1:
            return
        self._close()
        # The widget is as wide as the cell; a width would cut its text (and the logs with it).
        known = self._widget or terminal_columns(self._stream()) > 0
        bar: Any = tqdm
        if self._widget:
            from tqdm.notebook import tqdm as notebook_tqdm

            bar = notebook_tqdm
        self._bar = bar(
            total=trainer.steps_per_epoch,
            initial=trainer.batch_in_epoch,
            desc=f"Epoch {epoch + 1}/{trainer.epochs}",
            file=self._stream(),
            leave=self.leave,
            dynamic_ncols=known and not self._widget,
            ncols=None if known else FALLBACK_COLUMNS,
            mininterval=self.interval,
            unit="batch",
        )
        self._pending = 0
        self._next_draw = time.monotonic() + self.interval

    @hookimpl
    def on_train_batch_end(self, trainer: Any, logs: dict[str, float]) -> None:
        if self._bar is None:
            return
        self._pending += 1
        now = time.monotonic()
        if now >= self._next_draw:
            # the logs hold the epoch's running values, as Keras's bar shows them
            self._bar.set_postfix(format_logs(logs), refresh=False)
            self._bar.update(self._pending)
            self._pending = 0
            self._next_draw = now + self.interval

    @hookimpl
    def on_epoch_end(self, trainer: Any, epoch: int, logs: dict[str, float]) -> None:
        if self._mode == 2:
            seconds = time.monotonic() - self._epoch_started
            values = " - ".join(f"{k}: {format_value(v)}" for k, v in logs.items())
            print(
                f"Epoch {epoch + 1}/{trainer.epochs} - {trainer.batch_in_epoch} batches - {seconds:.1f}s - {values}",
                file=self._stream(),
                flush=True,
            )
        if self._bar is None:
            return
        self._bar.set_postfix(format_logs(logs), refresh=False)
        self._bar.update(self._pending)
        self._pending = 0
        whole = self._bar.format_meter(**{**self._bar.format_dict, "ncols": 0})
        width = self._bar.ncols or terminal_columns(self._stream()) or FALLBACK_COLUMNS
        self._close()
        if (
            self.leave and not self._widget and len(whole) > width
        ):  # the bar cut the logs at the terminal's edge: all of them
            values = " - ".join(f"{k}: {format_value(v)}" for k, v in logs.items())
            print(f"  {values}", file=self._stream(), flush=True)

    def _close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None

    @hookimpl
    def on_fit_end(self) -> None:
        self._close()

    @hookimpl
    def on_exception(self) -> None:
        self._close()
