"""The ``progress`` plugin: a tqdm bar per epoch, with the loss and metrics in its postfix."""

from __future__ import annotations

import sys
import time
from typing import IO, Any

from tqdm.auto import tqdm

from tapefit.plugins.hookspecs import hookimpl


def format_logs(logs: dict[str, float]) -> dict[str, str]:
    """Log values shortened for a progress bar (4 significant digits)."""
    return {key: f"{value:.4g}" for key, value in logs.items()}


class Progress:
    """Shows one tqdm progress bar per epoch (config name ``progress``).

    The bar shows ``Epoch i/N``, batches done, speed, and the batch logs (this
    batch's loss, running metrics) as its postfix; at the epoch's end the postfix
    shows the epoch logs with the ``val_`` keys.

    Args:
        refresh_per_second: at most this many redraws a second; between redraws a
            batch costs one clock read.
        enabled: ``True`` always shows the bars, ``False`` never; ``None`` (default)
            shows them only when ``file`` is a terminal, so logs of batch jobs stay clean.
        leave: keep each epoch's finished bar on screen.
        file: where to draw; default standard error.
    """

    plugin_name = "progress"
    adds_log_keys: tuple[str, ...] = ()  # epoch log keys it adds (hookspecs.py)

    def __init__(
        self,
        refresh_per_second: float = 4.0,
        enabled: bool | None = None,
        leave: bool = True,
        file: IO[str] | None = None,
    ) -> None:
        if refresh_per_second <= 0:
            raise ValueError(f"refresh_per_second must be positive, got {refresh_per_second!r}")
        if file is not None and not callable(getattr(file, "write", None)):
            got = f"the string {file!r}" if isinstance(file, str) else f"{type(file).__name__} {file!r}"
            raise TypeError(
                f"file must be a text stream with a write method (standard error by default), got {got}"
            )
        self.interval = 1.0 / float(refresh_per_second)
        self.enabled = enabled
        self.leave = bool(leave)
        self.file = file
        self._bar: Any = None
        self._active = False
        self._pending = 0
        self._next_draw = 0.0

    def _stream(self) -> IO[str]:
        return self.file if self.file is not None else sys.stderr

    @hookimpl
    def on_fit_start(self) -> None:
        if self.enabled is None:
            isatty = getattr(self._stream(), "isatty", None)
            self._active = bool(isatty and isatty())
        else:
            self._active = bool(self.enabled)

    @hookimpl
    def on_epoch_start(self, trainer: Any, epoch: int) -> None:
        if not self._active:
            return
        self._close()
        self._bar = tqdm(
            total=trainer.steps_per_epoch,
            initial=trainer.batch_in_epoch,
            desc=f"Epoch {epoch + 1}/{trainer.epochs}",
            file=self._stream(),
            leave=self.leave,
            dynamic_ncols=True,
            mininterval=self.interval,
            unit="batch",
        )
        self._pending = 0
        self._next_draw = time.monotonic() + self.interval

    @hookimpl
    def on_train_batch_end(self, logs: dict[str, float]) -> None:
        if self._bar is None:
            return
        self._pending += 1
        now = time.monotonic()
        if now >= self._next_draw:
            self._bar.set_postfix(format_logs(logs), refresh=False)
            self._bar.update(self._pending)
            self._pending = 0
            self._next_draw = now + self.interval

    @hookimpl
    def on_epoch_end(self, logs: dict[str, float]) -> None:
        if self._bar is None:
            return
        self._bar.set_postfix(format_logs(logs), refresh=False)
        self._bar.update(self._pending)
        self._pending = 0
        self._close()

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
