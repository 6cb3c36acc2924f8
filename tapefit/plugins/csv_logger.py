"""The ``csv_logger`` plugin: one row per epoch with every log key."""

from __future__ import annotations

import csv
import io
import logging
import os
from pathlib import Path
from typing import IO, Any

from tapefit.core.files import atomic_write, open_regular, writing
from tapefit.core.naming import suggest_keywords
from tapefit.plugins.hookspecs import hookimpl

logger = logging.getLogger("tapefit.plugins.csv_logger")  # one logger per plugin: users may silence one


@suggest_keywords
class CSVLogger:
    """Writes the epoch logs to a CSV file, one row per epoch (config name ``csv_logger``).

    The columns are ``epoch`` then the log keys of the first row, sorted (as Keras's
    ``CSVLogger``); a key missing in a later row is written empty, and a key that
    first appears later is left out (with one warning). Rows are flushed as they are
    written.

    Args:
        filename: the file; default ``<trainer.output_dir>/history.csv``.
        separator: the column separator, one character.
        append: ``True`` appends to an existing file, ``False`` starts it anew; ``None``
            (default) appends when the fit continues an earlier fit of the trainer, or
            resumes from a checkpoint, after dropping the
            rows of epochs the resumed fit will run again (those after the checkpoint),
            and starts anew otherwise.
    """

    plugin_name = "csv_logger"
    adds_log_keys: tuple[str, ...] = ()  # epoch log keys it adds (hookspecs.py)
    chief_only = True  # writes or prints: only rank 0 runs it (hookspecs.py, configure_world)

    def __init__(self, filename: str | None = None, separator: str = ",", append: bool | None = None) -> None:
        if not isinstance(separator, str) or len(separator) != 1:
            raise ValueError(f"csv_logger: separator must be one character, got {separator!r}")
        self.filename = None if filename is None else Path(filename)
        self.separator = separator
        self.append = append
        self.path: Path | None = None
        self._file: IO[str] | None = None
        self._keys: list[str] | None = None
        self._writer: Any = None
        self._warned: set[str] = set()

    @hookimpl
    def on_fit_start(self, trainer: Any) -> None:
        self.path = self.filename if self.filename is not None else Path(trainer.output_dir) / "history.csv"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        append = (trainer.resumed or trainer.continued) if self.append is None else self.append
        self._keys = None
        self._warned = set()
        mode = "w"
        if append and os.path.lexists(self.path) and self.path.stat().st_size:
            keep_before = trainer.epoch if self.append is None else None
            self._keys = self._prepare_existing(keep_before)
            mode = "a"
        # Kept open across epochs; on_fit_end and on_exception close it. Never through a link.
        self._file = open_regular(self.path, mode)
        self._writer = csv.writer(self._file, delimiter=self.separator)

    def _prepare_existing(self, keep_before: int | None) -> list[str] | None:
        """Reads the file's header; drops rows with ``epoch >= keep_before`` (atomically)."""
        assert self.path is not None
        with open_regular(self.path) as f:
            rows = list(csv.reader(f, delimiter=self.separator))
        if not rows or not rows[0] or rows[0][0] != "epoch":
            raise ValueError(f"{self.path}: cannot append, it does not start with an 'epoch' header row")
        header = rows[0]
        if keep_before is not None:
            for number, row in enumerate(rows[1:], start=2):
                if row and not row[0].isdigit():
                    raise ValueError(
                        f"{self.path}: cannot append, row {number} has the epoch {row[0]!r} (not an integer)"
                    )
            kept = [row for row in rows[1:] if row and int(row[0]) < keep_before]
            if len(kept) != len(rows) - 1:
                text = io.StringIO()
                csv.writer(text, delimiter=self.separator).writerows([header, *kept])
                atomic_write(self.path, lambda f: f.write(text.getvalue().encode("utf-8")))
        return header[1:]

    @hookimpl
    def on_epoch_end(self, trainer: Any, epoch: int, logs: dict[str, float]) -> None:
        if self._file is None:
            return
        if self._keys is None:
            self._keys = sorted(logs)
            if trainer.validates_later and not any(k.startswith("val_") for k in logs):
                # validation_freq > 1: the first epoch has no val_ keys yet; Keras's CSVLogger
                # adds their columns then, or the later epochs' validation would not be logged
                self._keys += [f"val_{k}" for k in self._keys]
            self._writer.writerow(["epoch", *self._keys])
        for key in logs:
            if key not in self._keys and key not in self._warned:
                self._warned.add(key)
                logger.warning("csv_logger: %r first appeared after the header was written; not logged", key)
        with writing(self._file.name):  # a full disk: one line naming the file
            self._writer.writerow([epoch, *(_format(logs[k]) if k in logs else "" for k in self._keys)])
            self._file.flush()

    def _close(self) -> None:
        file, self._file = self._file, None
        if file is not None:
            with writing(file.name):
                file.close()  # closed even when its last flush fails

    @hookimpl
    def on_fit_end(self) -> None:
        self._close()

    @hookimpl
    def on_exception(self, exception: BaseException) -> None:
        try:
            self._close()
        except OSError as error:
            # The fit is ending for another reason, which is what the user hears about; when the
            # reason is this very file's error (a full disk), it has been said already.
            if not (isinstance(exception, OSError) and exception.filename == error.filename):
                logger.warning("csv_logger: could not close %s: %s", error.filename, error.strerror)


def _format(value: Any) -> str:
    return repr(float(value)) if isinstance(value, float) else str(value)
