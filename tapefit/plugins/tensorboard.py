"""The ``tensorboard`` plugin: event files that TensorBoard reads, written with tensorboardX.

Layout under the log folder (default ``<trainer.output_dir>/tensorboard``)::

    train/    the model's graph (from the first step's batch)
              per step:  step/loss, step/learning_rate, step/grad_global_norm,
                         step/learning_rate/<name> for each optimizer when there are several
                         (a GAN's d_optimizer and g_optimizer),
                         weights/<variable path> and gradients/<variable path> histograms
              per epoch: epoch/<key> for every training log key (epoch/loss, epoch/accuracy)
    val/      per epoch: epoch/<key> for every val_ key, prefix dropped (epoch/loss)
    hparams/  the run's hyperparameters and final metrics (hparam/<key>)

``train`` and ``val`` are two runs with the same tags, so TensorBoard draws the
training and validation curve of each key in one chart (as Keras's callback does).
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import logging
import math
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from tapefit.checkpointing.validate import expect_mapping, expect_number
from tapefit.core.files import naming
from tapefit.core.naming import suggest_keywords
from tapefit.plugins.flat_config import flatten_config
from tapefit.plugins.hookspecs import hookimpl

logger = logging.getLogger("tapefit.plugins.tensorboard")  # one logger per plugin: users may silence one

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


def _steps_of(update_freq: Any) -> int:
    """Keras's ``update_freq`` as steps between per-step scalars (0: none, only the epoch's)."""
    if update_freq == "epoch":
        return 0
    if update_freq == "batch":
        return 1
    if isinstance(update_freq, int) and not isinstance(update_freq, bool) and update_freq >= 1:
        return update_freq
    raise ValueError(
        f"update_freq must be 'batch', 'epoch' or a positive number of steps, got {update_freq!r}"
    )


def _learning_rate_of(optimizer: Any) -> float | None:
    """The optimizer's learning rate now, or ``None`` when it has none to read as a number."""
    try:
        return float(optimizer.learning_rate)
    except (AttributeError, TypeError, ValueError):
        return None


def _hparams_summaries(
    values: dict[str, bool | str | float | int], start_time: float, end_time: float
) -> list[Any]:
    """The session start and end summaries of TensorBoard's hparams plugin.

    No experiment summary: without one TensorBoard makes the columns from every session's
    hyperparameters and metrics, so runs with different keys (other plugins) compare in one
    table. (tensorboardX's ``hparams()`` writes one, and leaves the start time at 0.)
    """
    from tensorboardX.proto.api_pb2 import Status
    from tensorboardX.proto.plugin_hparams_pb2 import HParamsPluginData, SessionEndInfo, SessionStartInfo
    from tensorboardX.proto.summary_pb2 import Summary, SummaryMetadata

    start = SessionStartInfo(start_time_secs=start_time)
    for key, value in values.items():
        if isinstance(value, bool):
            start.hparams[key].bool_value = value
        elif isinstance(value, (int, float)):
            start.hparams[key].number_value = float(value)
        else:
            start.hparams[key].string_value = str(value)
    end = SessionEndInfo(status=Status.Value("STATUS_SUCCESS"), end_time_secs=end_time)
    summaries = []
    for tag, data in (
        ("_hparams_/session_start_info", HParamsPluginData(session_start_info=start, version=0)),
        ("_hparams_/session_end_info", HParamsPluginData(session_end_info=end, version=0)),
    ):
        plugin = SummaryMetadata.PluginData(plugin_name="hparams", content=data.SerializeToString())
        summaries.append(
            Summary(value=[Summary.Value(tag=tag, metadata=SummaryMetadata(plugin_data=plugin))])
        )
    return summaries


class _EventFile:
    """Stands between a tensorboardX writer and its event file, and keeps the file's first error.

    tensorboardX writes events from a thread of its own, which dies on an error (a full disk);
    nothing drains its queue after that, and the next ``add_*`` waits for ever. Through this
    object the thread never raises: the error is kept, later events are dropped, and the
    plugin raises it (naming the file) at its next write, flush or close.
    """

    def __init__(self, events: Any) -> None:
        self._events = events
        self.path = str(getattr(events, "_file_name", ""))
        self.error: OSError | None = None

    def _guarded(self, call: Callable[[], Any]) -> Any:
        if self.error is not None:
            return None
        try:
            return call()
        except OSError as error:
            self.error = naming(error, self.path)
            return None

    def write_event(self, event: Any) -> Any:
        return self._guarded(lambda: self._events.write_event(event))

    def flush(self) -> Any:
        return self._guarded(self._events.flush)

    def close(self) -> None:
        if self.error is None:
            self._guarded(self._events.close)
            if self.error is None:
                return
        # The file holds bytes it cannot write: closing it raises once more, but closes it, so
        # that it does not print the error again when it is collected.
        with contextlib.suppress(OSError, AttributeError):
            self._events._py_recordio_writer.close()


def _guard(writer: Any) -> _EventFile | None:
    """Puts an ``_EventFile`` between ``writer`` (a tensorboardX ``SummaryWriter``) and its file;
    ``None`` when this tensorboardX keeps its pieces elsewhere (its own behaviour stays then)."""
    files: Any = getattr(getattr(writer, "file_writer", None), "event_writer", None)
    events = getattr(files, "_ev_writer", None)
    worker: Any = getattr(files, "_worker", None)
    if events is None or not hasattr(worker, "_record_writer"):
        return None
    guard = _EventFile(events)
    files._ev_writer = guard  # flush and close from this thread
    worker._record_writer = guard  # the writes from tensorboardX's thread
    if not worker.is_alive():  # it failed at its first flush, before it was guarded
        guard.error = OSError(errno.EIO, "tensorboardX's writer thread stopped", guard.path)
    return guard


def _raise_error(guard: _EventFile | None) -> None:
    if guard is not None and guard.error is not None:
        raise guard.error


@suggest_keywords
class TensorBoard:
    """Writes TensorBoard event files during ``fit`` (config name ``tensorboard``).

    Args:
        log_dir: the folder; default ``<trainer.output_dir>/tensorboard``.
        log_every_n_steps: write the per-step scalars every n-th step.
        histogram_every_n_steps: write weight and gradient histograms every n-th step
            (``None`` or 0: never).
        log_grad_norm: write the gradients' global norm per step (before any clipping;
            computing it costs one pass over the gradients).
        log_hparams: at the end of the fit, write the hyperparameters (one per key path of
            the trainer's config; see ``hparams``) with the final epoch logs as their metrics.
        log_graph: after the first step of a fit that is not a resume, write the model's
            graph (the Graphs tab) from one inference forward pass on the first batch,
            recorded on a tape: ops named by the modules that ran them
            (``sequential/dense_1/MatMul``), shapes on the edges.
        flush_secs: tensorboardX's flush interval; files are also flushed at every epoch end.
        update_freq: Keras's: ``"batch"`` writes the per-step scalars every step, a number
            ``n`` every n-th step, ``"epoch"`` only the epoch scalars; it replaces
            ``log_every_n_steps``. ``None`` (the default): ``log_every_n_steps`` decides.
        histogram_freq: Keras's: write the weights' histograms at the end of every n-th
            epoch (0: never), beside ``histogram_every_n_steps``'s per-step ones.
        write_graph: Keras's name for ``log_graph``; ``None`` leaves ``log_graph`` to decide.
        write_steps_per_second: Keras's: write each epoch's training steps per second
            (``epoch/steps_per_second``).

    The per-step ``step/loss`` is each batch's own loss (the logs of a batch hold the
    epoch's running mean). Keras's ``write_images``, ``profile_batch``, ``embeddings_freq``
    and ``embeddings_metadata`` have no twin: weight images, TensorFlow's profiler and the
    embedding projector are TensorFlow's.

    A histogram of values that TensorBoard cannot bin (NaN, infinite, or beyond
    +-1e20, as when training diverges) is skipped rather than failing the fit, so
    ``terminate_on_nan`` can still stop it cleanly; the first skip of a fit logs a
    warning and ``skipped_histograms`` counts them all.

    Files are flushed at each epoch end and closed at the end of the fit and on
    exceptions. A file that cannot be written (a full disk) ends the fit with an
    ``OSError`` naming it, at the next write, flush or close after the failure. A resumed
    fit purges the events after the resumed step (tensorboardX's ``purge_step``), so
    TensorBoard does not show the interrupted run's extra steps twice.
    """

    plugin_name = "tensorboard"
    adds_log_keys: tuple[str, ...] = ()  # epoch log keys it adds (hookspecs.py)
    chief_only = True  # writes or prints: only rank 0 runs it (hookspecs.py, configure_world)

    def __init__(
        self,
        log_dir: str | None = None,
        *,
        log_every_n_steps: int = 1,
        histogram_every_n_steps: int | None = None,
        log_grad_norm: bool = True,
        log_hparams: bool = True,
        log_graph: bool = True,
        flush_secs: int = 120,
        update_freq: str | int | None = None,
        histogram_freq: int = 0,
        write_graph: bool | None = None,
        write_steps_per_second: bool = False,
    ) -> None:
        if update_freq is not None:
            log_every_n_steps = _steps_of(update_freq)
        if not isinstance(histogram_freq, int) or isinstance(histogram_freq, bool) or histogram_freq < 0:
            raise ValueError(
                f"histogram_freq must be a non-negative number of epochs, got {histogram_freq!r}"
            )
        if write_graph is not None:
            log_graph = write_graph
        if update_freq is None and (not isinstance(log_every_n_steps, int) or log_every_n_steps < 1):
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
        self.log_graph = bool(log_graph)
        self.update_freq = update_freq
        self.histogram_freq = histogram_freq
        self.write_steps_per_second = bool(write_steps_per_second)
        self._epoch_started: tuple[float, int] | None = None  # (time, trainer.step) at the epoch's start
        self._step_loss: float | None = None  # None: the step's logs have no loss (a custom step)
        self._graph_due = False
        self.flush_secs = int(flush_secs)
        self.folder: Path | None = None
        self._writers: dict[str, Any] = {}
        self._files: dict[str, _EventFile | None] = {}
        self._purge_step: int | None = None
        self._step_learning_rate = float("nan")
        self._step_learning_rates: dict[str, float | None] = {}  # by optimizer, when there are several
        self._rates_step: int | None = None  # the step whose rates were read
        self._last_logs: dict[str, float] = {}
        self.skipped_histograms = 0
        self._start_time: float | None = None
        self._configured_learning_rate: float | None = None
        # (step, logs) of the step in progress, until its scalars are written
        self._pending: tuple[int, dict[str, float]] | None = None

    def _writer(self, run: str) -> Any:
        """The writer of ``run``; raises the error that an earlier write of it met (``_EventFile``)."""
        writer = self._writers.get(run)
        if writer is not None:
            _raise_error(self._files[run])
        else:
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
            self._files[run] = _guard(writer)
        return writer

    @hookimpl
    def on_fit_start(self, trainer: Any) -> None:
        self.close()
        self.folder = self.log_dir if self.log_dir is not None else Path(trainer.output_dir) / "tensorboard"
        self.folder.mkdir(parents=True, exist_ok=True)
        self._purge_step = trainer.step if trainer.resumed else None
        self._graph_due = self.log_graph and not (trainer.resumed or trainer.continued)
        if not (trainer.resumed or trainer.continued):
            # A resumed fit gets both back from the checkpoint (load_state_dict).
            self._start_time = time.time()
            self._configured_learning_rate = _learning_rate_of(trainer.optimizer)
        self._last_logs = {}
        self._pending = None
        self._rates_step = None
        self.skipped_histograms = 0
        self._writer("train")

    def _logs_step(self, step: int) -> bool:
        return bool(self.log_every_n_steps) and step % self.log_every_n_steps == 0

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
        self._pending = (step, logs)
        self._step_loss = logs.get(
            "loss"
        )  # the batch's own; at the batch's end the logs hold the running mean
        first_update = self._rates_step != step  # a step may make several (a GAN's two)
        self._rates_step = step
        if self._logs_step(step):
            if first_update:
                # Read before the step's updates: afterwards an optimizer reports its next step's rate.
                self._step_learning_rate = trainer.learning_rate
                optimizers = trainer.optimizers
                self._step_learning_rates = (
                    {name: _learning_rate_of(o) for name, o in optimizers.items()}
                    if len(optimizers) > 1
                    else {}
                )
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
        self._write_step(trainer, step, logs)
        if self._graph_due:
            # After the first step, not at the fit's start: the lazy layers are built by now, in
            # the training run's own order of random draws.
            self._graph_due = False
            self._write_graph(trainer)

    def _write_graph(self, trainer: Any) -> None:
        from tensorboardX.proto.event_pb2 import Event

        from tapefit.core import random as tp_random
        from tapefit.plugins.model_graph import to_graph_def, trace_graph

        # The one piece of the trainer this needs: an input batch to trace the model with.
        loader = getattr(trainer, "_loader", None)
        if loader is None or loader.stream:  # a stream's next batch is the training's to read
            logger.debug("tensorboard: no input batch to trace the model's graph with")
            return
        state = tp_random.get_state()
        try:
            inputs = loader.first_inputs()
            graph = to_graph_def(trace_graph(trainer.model, inputs))
        except Exception as error:  # the graph is a view: never the reason a fit fails
            logger.warning(
                "tensorboard: could not write the model's graph: %s: %s", type(error).__name__, error
            )
            return
        finally:
            tp_random.set_state(state)  # the forward draws nothing; this makes sure
        self._writer("train").file_writer.add_event(Event(graph_def=graph.SerializeToString()))

    def _write_step(self, trainer: Any, step: int, logs: dict[str, float]) -> None:
        self._pending = None
        writer = self._writer("train")
        if self._logs_step(step):
            if self._step_loss is not None:
                writer.add_scalar("step/loss", self._step_loss, step)
            writer.add_scalar("step/learning_rate", self._step_learning_rate, step)
            for name, rate in self._step_learning_rates.items():
                if rate is not None:
                    writer.add_scalar(f"step/learning_rate/{name}", rate, step)
            if "grad_global_norm" in logs:
                writer.add_scalar("step/grad_global_norm", logs["grad_global_norm"], step)
        if self._histogram_step(step):
            self._weight_histograms(trainer, step)

    def _weight_histograms(self, trainer: Any, step: int) -> None:
        named = getattr(trainer.model, "named_variables", None)
        pairs = named() if callable(named) else [(v.name, v) for v in trainer.model.trainable_variables]
        for path, variable in pairs:
            self._add_histogram(f"weights/{path}", variable.numpy(), step)

    @hookimpl
    def on_epoch_start(self, trainer: Any) -> None:
        self._epoch_started = (time.monotonic(), trainer.step)

    @hookimpl
    def on_epoch_end(self, trainer: Any, epoch: int, logs: dict[str, float]) -> None:
        for key, value in logs.items():
            run, tag = ("val", key[4:]) if key.startswith("val_") else ("train", key)
            self._writer(run).add_scalar(f"epoch/{tag}", value, epoch)
        if self.write_steps_per_second and self._epoch_started is not None:
            started, first_step = self._epoch_started
            seconds = max(time.monotonic() - started, 1e-9)
            self._writer("train").add_scalar(
                "epoch/steps_per_second", (trainer.step - first_step) / seconds, epoch
            )
        if self.histogram_freq and (epoch + 1) % self.histogram_freq == 0:
            self._weight_histograms(trainer, trainer.step)
        self._last_logs = dict(logs)
        for run, writer in self._writers.items():
            writer.flush()
            _raise_error(self._files[run])

    def hparams(self, trainer: Any) -> dict[str, bool | str | float | int]:
        """The hyperparameters logged at the end of the fit, one per config key path.

        With a config (``trainer.config``, as ``train`` passes it): every key path of it
        (``trainer.epochs``, ``optimizer.learning_rate``, ``plugins.0.type``), with the
        configured values. Without one: ``trainer.epochs``, ``trainer.batch_size``,
        ``optimizer.type`` and ``optimizer.learning_rate``, the rate the run started with
        (not the current one, which a plateau may have cut); for a trainer without an optimizer,
        ``<name>.type`` and ``<name>.learning_rate`` of each optimizer the model holds
        (``d_optimizer.type``).
        """
        if trainer.config:
            return flatten_config(trainer.config)
        values: dict[str, bool | str | float | int] = {
            "trainer.epochs": trainer.epochs,
            "trainer.batch_size": trainer.batch_size,
        }
        if trainer.optimizer is not None:
            values["optimizer.type"] = type(trainer.optimizer).__name__
            rate = self._configured_learning_rate
            if rate is None:
                rate = _learning_rate_of(trainer.optimizer)
            if rate is not None:
                values["optimizer.learning_rate"] = rate
            return values
        for name, optimizer in trainer.optimizers.items():
            values[f"{name}.type"] = type(optimizer).__name__
            rate = _learning_rate_of(optimizer)
            if rate is not None:
                values[f"{name}.learning_rate"] = rate
        return values

    def _write_hparams(self, trainer: Any) -> None:
        from tensorboardX import SummaryWriter

        assert self.folder is not None
        metrics = {f"hparam/{k}": float(v) for k, v in self._last_logs.items()}
        folder = self.folder / "hparams"
        earlier = list(folder.glob("events.out.tfevents.*")) if folder.is_dir() else []
        start_time = self._start_time if self._start_time is not None else time.time()
        with SummaryWriter(str(folder), filename_suffix=_unique_suffix()) as writer:
            guard = _guard(writer)
            for summary in _hparams_summaries(self.hparams(trainer), start_time, time.time()):
                writer.file_writer.add_summary(summary, trainer.step)
            for key, value in metrics.items():
                writer.add_scalar(key, value, trainer.step)
        _raise_error(guard)
        # TensorBoard keeps the first session info a run holds: an earlier fit's (a resumed
        # run's first part, with its epochs) would hide this one's. The new file is complete, so
        # the older ones go.
        for path in earlier:
            with contextlib.suppress(OSError):
                path.unlink()

    def state_dict(self) -> dict[str, Any]:
        """What a resumed fit needs: the run's start time and its configured learning rate."""
        return {"start_time": self._start_time, "learning_rate": self._configured_learning_rate}

    def check_state_dict(self, state: Any, model: Any = None) -> None:
        """Checks a saved state before a resume restores anything (``hookspecs``, "Checkpoints")."""
        state = expect_mapping(state, ())
        expect_number(state.get("start_time"), "start_time", optional=True, finite=True)
        expect_number(state.get("learning_rate"), "learning_rate", optional=True, finite=True)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restores ``state_dict`` (``check_state_dict`` checked it)."""
        start, rate = state.get("start_time"), state.get("learning_rate")
        self._start_time = None if start is None else float(start)
        self._configured_learning_rate = None if rate is None else float(rate)

    def close(self) -> None:
        """Flushes and closes the event files; raises the first error one of them met (an
        ``OSError`` naming the file), after closing them all."""
        writers, files = self._writers, self._files
        self._writers, self._files = {}, {}
        for writer in writers.values():
            writer.close()
        for guard in files.values():
            _raise_error(guard)

    @hookimpl
    def on_fit_end(self, trainer: Any) -> None:
        try:
            if self.log_hparams and self._last_logs:
                self._write_hparams(trainer)
        finally:
            self.close()

    @hookimpl
    def on_exception(self, trainer: Any, exception: BaseException) -> None:
        try:
            # A Ctrl-C during a step is held until the step is done and counted (trainer.step
            # moved past it), then raised before on_train_batch_end: the resumed run starts
            # after that step, so its scalars are written now or never.
            if self._pending is not None and self._writers and trainer.step > self._pending[0]:
                self._write_step(trainer, *self._pending)
        except OSError:
            pass  # a file's error (a full disk), which closing it raises again
        finally:
            self._close_after(exception)

    def _close_after(self, exception: BaseException) -> None:
        """Closes the files while another exception ends the fit: an error of theirs is a warning,
        and none when it is that very exception (a full disk, said once)."""
        try:
            self.close()
        except OSError as error:
            if not (isinstance(exception, OSError) and exception.filename == error.filename):
                logger.warning("tensorboard: could not write %s: %s", error.filename, error.strerror)
