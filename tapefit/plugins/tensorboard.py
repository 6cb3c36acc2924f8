"""The ``tensorboard`` plugin: event files that TensorBoard reads, written with tensorboardX.

Layout under the log folder (default ``<trainer.output_dir>/tensorboard``)::

    train/    per step:  step/loss, step/learning_rate, step/grad_global_norm,
                         weights/<variable path> and gradients/<variable path> histograms
              per epoch: epoch/<key> for every training log key (epoch/loss, epoch/accuracy)
    val/      per epoch: epoch/<key> for every val_ key, prefix dropped (epoch/loss)
    hparams/  the run's hyperparameters and final metrics (hparam/<key>)

``train`` and ``val`` are two runs with the same tags, so TensorBoard draws the
training and validation curve of each key in one chart (as Keras's callback does).
"""

from __future__ import annotations

import itertools
import logging
import math
import os
import time
from pathlib import Path
from typing import Any

import numpy as np

from tapefit.plugins.hookspecs import hookimpl

logger = logging.getLogger("tapefit")

_writer_numbers = itertools.count()


def _unique_suffix() -> str:
    """Fixed-width, so names sort in creation order (a bare counter put 10 before 9)."""
    return f".{time.time_ns():020d}.{os.getpid()}.{next(_writer_numbers):06d}"


# tensorboardX bins histograms as TensorFlow does, with edges up to about +-1e20; a value past
# them is left out of every bin, and a tensor with none inside raises "The histogram is empty".
_HISTOGRAM_LIMIT = 1e20


def _global_norm(grads: list[Any]) -> float:
    total = 0.0
    # float64 holds the squares of any float32 gradient; a diverging run's inf or NaN norm is
    # logged as it is, without NumPy's overflow warnings.
    with np.errstate(over="ignore", invalid="ignore"):
        for g in grads:
            if g is not None:
                a = np.asarray(g, dtype=np.float64).ravel()
                total += float(np.dot(a, a))
    return math.sqrt(total)


def _drop_unnamed_nan_notice(record: logging.LogRecord) -> bool:
    # tensorboardX warns "NaN or Inf found in input tensor." for every such value it writes,
    # without saying which; terminate_on_nan and the histogram skip above name them instead.
    return record.getMessage() != "NaN or Inf found in input tensor."


logging.getLogger("tensorboardX.x2num").addFilter(_drop_unnamed_nan_notice)


def _flatten_config(config: Any, prefix: str = "") -> dict[str, bool | str | float | int]:
    """``{"optimizer": {"learning_rate": 0.1}}`` -> ``{"optimizer.learning_rate": 0.1}``; lists as text."""
    flat: dict[str, bool | str | float | int] = {}
    if isinstance(config, dict):
        for key, value in config.items():
            flat.update(_flatten_config(value, f"{prefix}{key}."))
        return flat
    key = prefix[:-1]
    if isinstance(config, (bool, str, int, float)):
        flat[key] = config
    elif config is not None:
        flat[key] = str(config)
    return flat


class TensorBoard:
    """Writes TensorBoard event files during ``fit`` (config name ``tensorboard``).

    Args:
        log_dir: the folder; default ``<trainer.output_dir>/tensorboard``.
        log_every_n_steps: write the per-step scalars every n-th step.
        histogram_every_n_steps: write weight and gradient histograms every n-th step
            (``None`` or 0: never).
        log_grad_norm: write the gradients' global norm per step (before any clipping;
            computing it costs one pass over the gradients).
        log_hparams: at the end of the fit, write the hyperparameters (the trainer's
            config, flattened, plus optimizer, learning rate, batch size, epochs) with the
            final epoch logs as their metrics.
        flush_secs: tensorboardX's flush interval; files are also flushed at every epoch end.

    A histogram of values that TensorBoard cannot bin (NaN, infinite, or beyond
    +-1e20, as when training diverges) is skipped rather than failing the fit, so
    ``terminate_on_nan`` can still stop it cleanly; the first skip of a fit logs a
    warning and ``skipped_histograms`` counts them all.

    Files are flushed at each epoch end and closed at the end of the fit and on
    exceptions. A resumed fit purges the events after the resumed step (tensorboardX's
    ``purge_step``), so TensorBoard does not show the interrupted run's extra steps twice.
    """

    plugin_name = "tensorboard"

    def __init__(
        self,
        log_dir: str | None = None,
        log_every_n_steps: int = 1,
        histogram_every_n_steps: int | None = None,
        log_grad_norm: bool = True,
        log_hparams: bool = True,
        flush_secs: int = 120,
    ) -> None:
        if not isinstance(log_every_n_steps, int) or log_every_n_steps < 1:
            raise ValueError(f"log_every_n_steps must be a positive integer, got {log_every_n_steps!r}")
        if histogram_every_n_steps is not None and (
            not isinstance(histogram_every_n_steps, int) or histogram_every_n_steps < 0
        ):
            raise ValueError(
                f"histogram_every_n_steps must be a non-negative integer, got {histogram_every_n_steps!r}"
            )
        self.log_dir = None if log_dir is None else Path(log_dir)
        self.log_every_n_steps = log_every_n_steps
        self.histogram_every_n_steps = histogram_every_n_steps or 0
        self.log_grad_norm = bool(log_grad_norm)
        self.log_hparams = bool(log_hparams)
        self.flush_secs = int(flush_secs)
        self.folder: Path | None = None
        self._writers: dict[str, Any] = {}
        self._purge_step: int | None = None
        self._step_learning_rate = float("nan")
        self._last_logs: dict[str, float] = {}
        self.skipped_histograms = 0

    def _writer(self, run: str) -> Any:
        writer = self._writers.get(run)
        if writer is None:
            from tensorboardX import SummaryWriter  # slow to import: only when used

            assert self.folder is not None
            # Event file names carry the time in seconds only: a suffix in nanoseconds keeps a fit
            # that resumes within the same second (in this process or another) from overwriting
            # the previous file, and sorts after it, so TensorBoard applies the purge step.
            writer = SummaryWriter(
                str(self.folder / run),
                purge_step=self._purge_step,
                flush_secs=self.flush_secs,
                filename_suffix=_unique_suffix(),
            )
            self._writers[run] = writer
        return writer

    @hookimpl
    def on_fit_start(self, trainer: Any) -> None:
        self.close()
        self.folder = self.log_dir if self.log_dir is not None else Path(trainer.output_dir) / "tensorboard"
        self.folder.mkdir(parents=True, exist_ok=True)
        self._purge_step = trainer.step if trainer.resumed else None
        self._last_logs = {}
        self.skipped_histograms = 0
        self._writer("train")

    def _logs_step(self, step: int) -> bool:
        return step % self.log_every_n_steps == 0

    def _histogram_step(self, step: int) -> bool:
        return bool(self.histogram_every_n_steps) and step % self.histogram_every_n_steps == 0

    def _add_histogram(self, tag: str, values: Any, step: int) -> None:
        values = np.asarray(values)
        if values.size == 0:
            return
        finite = bool(np.isfinite(values).all())
        if finite and float(np.abs(values).max()) <= _HISTOGRAM_LIMIT:
            self._writer("train").add_histogram(tag, values, step)
            return
        if not self.skipped_histograms:
            problem = "non-finite values" if not finite else f"values beyond +-{_HISTOGRAM_LIMIT:g}"
            logger.warning(
                "tensorboard: step %d: %s has %s; skipping histograms that TensorBoard cannot bin "
                "(this one and any later ones; the plugin's skipped_histograms counts them)",
                step,
                tag,
                problem,
            )
        self.skipped_histograms += 1

    @hookimpl(tryfirst=True)
    def transform_gradients(
        self, trainer: Any, step: int, grads_and_vars: list[Any], logs: dict[str, float]
    ) -> None:
        # tryfirst: sees the gradients before clipping; changes nothing.
        if self._logs_step(step):
            # Read before the update: afterwards the optimizer reports the next step's rate.
            self._step_learning_rate = trainer.learning_rate
            if self.log_grad_norm:
                logs["grad_global_norm"] = _global_norm([g for g, _ in grads_and_vars])
        if self._histogram_step(step):
            for path, grad in zip(self._paths(trainer, grads_and_vars), (g for g, _ in grads_and_vars)):
                if grad is not None:
                    self._add_histogram(f"gradients/{path}", grad, step)

    @staticmethod
    def _paths(trainer: Any, grads_and_vars: list[Any]) -> list[str]:
        named = getattr(trainer.model, "named_variables", None)
        by_id = {id(v): p for p, v in named()} if callable(named) else {}
        return [
            by_id.get(id(v), getattr(v, "name", f"variable_{i}")) for i, (_, v) in enumerate(grads_and_vars)
        ]

    @hookimpl
    def on_train_batch_end(self, trainer: Any, step: int, logs: dict[str, float]) -> None:
        writer = self._writer("train")
        if self._logs_step(step):
            writer.add_scalar("step/loss", logs["loss"], step)
            writer.add_scalar("step/learning_rate", self._step_learning_rate, step)
            if "grad_global_norm" in logs:
                writer.add_scalar("step/grad_global_norm", logs["grad_global_norm"], step)
        if self._histogram_step(step):
            named = getattr(trainer.model, "named_variables", None)
            pairs = named() if callable(named) else [(v.name, v) for v in trainer.model.trainable_variables]
            for path, variable in pairs:
                self._add_histogram(f"weights/{path}", variable.numpy(), step)

    @hookimpl
    def on_epoch_end(self, epoch: int, logs: dict[str, float]) -> None:
        for key, value in logs.items():
            run, tag = ("val", key[4:]) if key.startswith("val_") else ("train", key)
            self._writer(run).add_scalar(f"epoch/{tag}", value, epoch)
        self._last_logs = dict(logs)
        for writer in self._writers.values():
            writer.flush()

    def hparams(self, trainer: Any) -> dict[str, bool | str | float | int]:
        """The hyperparameters logged at the end of the fit."""
        values: dict[str, bool | str | float | int] = {
            "optimizer": type(trainer.optimizer).__name__,
            "batch_size": trainer.batch_size,
            "epochs": trainer.epochs,
        }
        try:
            values["learning_rate"] = trainer.learning_rate
        except (TypeError, ValueError):
            pass
        values.update(_flatten_config(trainer.config))
        return values

    def _write_hparams(self, trainer: Any) -> None:
        from tensorboardX import SummaryWriter
        from tensorboardX.summary import hparams

        assert self.folder is not None
        metrics = {f"hparam/{k}": float(v) for k, v in self._last_logs.items()}
        experiment, start, end = hparams(self.hparams(trainer), metrics)
        suffix = _unique_suffix()
        with SummaryWriter(str(self.folder / "hparams"), filename_suffix=suffix) as writer:
            writer.file_writer.add_summary(experiment)
            writer.file_writer.add_summary(start)
            writer.file_writer.add_summary(end)
            for key, value in metrics.items():
                writer.add_scalar(key, value, trainer.step)

    def close(self) -> None:
        """Flushes and closes the event files."""
        for writer in self._writers.values():
            writer.close()
        self._writers = {}

    @hookimpl
    def on_fit_end(self, trainer: Any) -> None:
        try:
            if self.log_hparams and self._last_logs:
                self._write_hparams(trainer)
        finally:
            self.close()

    @hookimpl
    def on_exception(self) -> None:
        self.close()
