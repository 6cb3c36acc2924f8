"""The ``checkpoint`` plugin: when to save a checkpoint and which ones to keep.

The file format, atomic writes and loading live in ``tapefit.checkpointing``.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import re
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from tapefit.checkpointing import (
    FORMAT_NAME,
    LAST_POINTER,
    TEMPORARY_SUFFIX,
    CheckpointError,
    atomic_write,
    latest_checkpoint,
    load_checkpoint,
    resolve_checkpoint,
    save_checkpoint,
    write_pointer,
)
from tapefit.checkpointing.validate import expect_mapping, expect_number
from tapefit.core.naming import suggest_keywords
from tapefit.plugins.hookspecs import hookimpl
from tapefit.plugins.monitor import Monitor, decision_level, infer_mode

logger = logging.getLogger("tapefit.plugins.checkpoint")  # one logger per plugin: users may silence one

BEST_POINTER = "best"
INTERRUPTED_NAME = "interrupted.npz"

OWN_NAME = re.compile(r"epoch\d{4,}-step\d{8,}\.npz|interrupted\.npz|last|best")
"""The names of the files the checkpoint plugin writes in its folder (and nothing else)."""

_OWN_TEMPORARY = re.compile(rf"\.(?:{OWN_NAME.pattern})\.[0-9a-f]{{12}}{re.escape(TEMPORARY_SUFFIX)}")


def remove_stale_temporaries(folder: str | os.PathLike[str]) -> list[Path]:
    """Deletes the temporary files that a killed checkpoint write left in ``folder``; returns them.

    Only ``atomic_write``'s temporaries of the plugin's own file names
    (``.epoch0003-step00000120.npz.<12 hex digits>.tmp``: a temporary keeps a name of up to
    ``TEMPORARY_NAME_KEPT`` characters whole, and the plugin's names are shorter); a user's
    ``.draft.tmp`` stays.
    """
    removed = []
    for tmp in Path(folder).glob(f".*{TEMPORARY_SUFFIX}"):
        if not _OWN_TEMPORARY.fullmatch(tmp.name) or not tmp.is_file():
            continue
        with contextlib.suppress(OSError):
            tmp.unlink()
            removed.append(tmp)
    return removed


__all__ = [
    "BEST_POINTER",
    "FORMAT_NAME",
    "INTERRUPTED_NAME",
    "LAST_POINTER",
    "OWN_NAME",
    "Checkpoint",
    "CheckpointError",
    "atomic_write",
    "latest_checkpoint",
    "load_checkpoint",
    "remove_stale_temporaries",
    "resolve_checkpoint",
    "save_checkpoint",
    "write_pointer",
]


def _all_finite(state: Any) -> bool:
    arrays = state.values() if isinstance(state, dict) else state
    return all(np.isfinite(a).all() for a in arrays if a.dtype.kind == "f")


@suggest_keywords
class Checkpoint:
    """Saves checkpoints during ``fit`` (config name ``checkpoint``).

    A checkpoint holds the model's variables, the optimizer's state and step count, the
    trainer's epoch, step and position in the epoch, the metrics' running state, the
    random generators' states (shuffle order, dropout), every plugin's state and the
    resolved config; ``Trainer.fit(..., resume_from=folder_or_file)`` continues from it
    exactly. Files are named ``epoch{E:04d}-step{S:08d}.npz`` (``E`` the epoch index,
    ``S`` the optimizer steps done), written atomically, and the pointer file ``last``
    names the newest (``best`` the best one when ``monitor`` is set).

    Args:
        dirpath: the folder; default ``<trainer.output_dir>/checkpoints``.
        every_n_epochs: save at the end of every n-th epoch (``None`` or 0: never).
        every_n_steps: save after every n-th optimizer step (``None`` or 0: never).
        keep_last: keep only the newest n checkpoints (``None``: keep all). The best
            one (with ``monitor``) is never deleted; ``interrupted.npz`` is deleted only by
            a later fit that ends well and saved past it.
        monitor: an epoch log key (``"val_loss"``) to rank checkpoints by; checked at
            epoch ends.
        mode: ``"min"``, ``"max"`` or ``"auto"`` (max for accuracy/AUC, else min), as Keras.
        save_best_only: with ``monitor``, save at an epoch end only when it improved.
        save_on_exception: save ``interrupted.npz`` when an exception (also
            ``KeyboardInterrupt``) ends the fit after its first epoch started, and point
            ``last`` at it.
        save_on_fit_end: when ``fit`` ends after a step that was not saved, save it; not
            with ``save_best_only``. A fit stopped in the middle of an epoch is saved at the
            batch that stopped it, before the partial epoch's ``on_epoch_end`` hooks.
        save_freq: Keras's: ``"epoch"`` saves at every epoch's end, a number ``n`` after every
            n-th step (and not at epoch ends); it replaces ``every_n_epochs`` and
            ``every_n_steps``. ``None`` (the default): those two decide.
        initial_value_threshold: Keras's: with ``monitor``, the value a checkpoint must beat
            to be the best (with ``save_best_only``, to be saved at all).
        verbose: Keras's: 1 says each save (``checkpoint: saved ...``, always shown); 0 (the
            default) says nothing of routine saves.

    Keras's ``filepath`` and ``save_weights_only`` have no twin: a checkpoint is the whole
    training state, in a folder whose file names and pointers a resume reads. A ``dirpath``
    that looks like Keras's ``filepath`` (a ``.keras`` or ``.h5`` name, a ``{epoch}``
    template) is refused. Arguments after ``dirpath`` are keyword-only (their order is not
    Keras's).

    Attributes:
        interrupted_path: the ``interrupted.npz`` written when an exception ended the
            last fit, else ``None``.

    A state whose model weights are not finite, or that the last step reached from a
    non-finite loss, is never saved (a warning says so), so after a NaN the last good
    checkpoint stays the newest.
    """

    plugin_name = "checkpoint"
    adds_log_keys: tuple[str, ...] = ()  # epoch log keys it adds (hookspecs.py)
    chief_only = True  # writes or prints: only rank 0 runs it (hookspecs.py, configure_world)

    def __init__(
        self,
        dirpath: str | None = None,
        *,
        every_n_epochs: int | None = 1,
        every_n_steps: int | None = None,
        keep_last: int | None = None,
        monitor: str | None = None,
        mode: str = "auto",
        save_best_only: bool = False,
        save_on_exception: bool = True,
        save_on_fit_end: bool = True,
        save_freq: str | int | None = None,
        initial_value_threshold: float | None = None,
        verbose: int = 0,
    ) -> None:
        if save_freq == "epoch":
            every_n_epochs, every_n_steps = 1, None
        elif isinstance(save_freq, int) and not isinstance(save_freq, bool) and save_freq >= 1:
            every_n_epochs, every_n_steps = 0, save_freq
        elif save_freq is not None:
            raise ValueError(f"save_freq must be 'epoch' or a positive number of steps, got {save_freq!r}")
        if save_best_only and save_freq not in (None, "epoch"):
            # Keras saves such a step only when the batch logs' monitor improved; here the step
            # checkpoints are resume points, saved every n-th step whatever the monitor says
            warnings.warn(
                f"checkpoint: save_best_only ranks epoch ends only; with save_freq={save_freq!r} "
                "every n-th step is saved whatever the monitor (Keras saves a step only when it "
                "improved). Use save_freq='epoch' to keep only the best",
                UserWarning,
                stacklevel=2,
            )
        for name, value in (("every_n_epochs", every_n_epochs), ("every_n_steps", every_n_steps)):
            if value is not None and (not isinstance(value, int) or value < 0):
                raise ValueError(f"{name} must be a non-negative integer or None, got {value!r}")
        if keep_last is not None and (not isinstance(keep_last, int) or keep_last < 1):
            raise ValueError(f"keep_last must be a positive integer or None, got {keep_last!r}")
        if save_best_only and monitor is None:
            raise ValueError("save_best_only=True needs a monitor (an epoch log key such as 'val_loss')")
        if dirpath is not None and ("{" in str(dirpath) or Path(dirpath).suffix in (".keras", ".h5")):
            # Keras's ModelCheckpoint(filepath) names a file; here it would silently be a folder
            raise ValueError(
                f"checkpoint: dirpath is a folder, not Keras's filepath template, got {str(dirpath)!r}; "
                "checkpoint files are named epoch{E}-step{S}.npz inside it"
            )
        self.dirpath = None if dirpath is None else Path(dirpath)
        self.every_n_epochs = every_n_epochs or 0
        self.every_n_steps = every_n_steps or 0
        self.keep_last = keep_last
        self.monitor = monitor
        self._monitor = Monitor("checkpoint", monitor, mode) if monitor else None
        self.mode = self._monitor.mode if self._monitor else mode
        infer_mode("", self.mode)  # refuses a bad mode even without a monitor
        self.save_best_only = bool(save_best_only)
        self.save_on_exception = bool(save_on_exception)
        self.save_on_fit_end = bool(save_on_fit_end)
        self.save_freq = save_freq
        if initial_value_threshold is not None and monitor is None:
            raise ValueError("initial_value_threshold needs a monitor (an epoch log key such as 'val_loss')")
        self.initial_value_threshold = (
            None if initial_value_threshold is None else float(initial_value_threshold)
        )
        self.verbose = verbose
        self._level = decision_level(verbose, "checkpoint")
        self._reset()

    def _reset(self) -> None:
        self._fitting = False
        self.saved: list[str] = []
        self.best_value: float | None = self.initial_value_threshold
        self.best_name: str | None = None
        self._last_saved: tuple[int, int, bool] | None = None
        self._bad_loss: tuple[int, float] | None = None
        if self._monitor is not None:
            self._monitor.reset()
        self.interrupted_path: Path | None = None

    def checkpoint_folder(self, output_dir: str | os.PathLike[str]) -> Path:
        """Where this plugin saves for a run whose output folder is ``output_dir`` (hookspecs.py)."""
        return self.dirpath if self.dirpath is not None else Path(output_dir) / "checkpoints"

    # -- state -------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """The files saved so far and the best monitored value."""
        return {"saved": list(self.saved), "best_value": self.best_value, "best_name": self.best_name}

    def check_state_dict(self, state: Any, model: Any = None) -> None:
        """Checks a saved state's types before a resume restores anything (``hookspecs``,
        "Checkpoints"); which names are this plugin's own ``load_state_dict`` decides."""
        state = expect_mapping(state, ())
        saved = state.get("saved", [])
        if not isinstance(saved, list) or not all(isinstance(name, str) for name in saved):
            raise ValueError(f"saved: expected a list of file names, got {saved!r:.60}")
        expect_number(state.get("best_value"), "best_value", optional=True)
        best_name = state.get("best_name")
        if best_name is not None and not isinstance(best_name, str):
            raise ValueError(f"best_name: expected null or a file name, got {best_name!r:.60}")

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restores what ``state_dict`` returned (``check_state_dict`` checked its types).

        A checkpoint is untrusted input and ``keep_last`` deletes the files this list names:
        a name that is not a plain file name of this plugin's own pattern (``/home/x``,
        ``../../x``) is dropped with a warning, never deleted.
        """
        saved = state.get("saved")
        self.saved = [name for name in saved if self._own(name, "saved")] if isinstance(saved, list) else []
        best_value = state.get("best_value")
        self.best_value = (
            float(best_value)
            if isinstance(best_value, (int, float)) and not isinstance(best_value, bool)
            else None
        )
        best_name = state.get("best_name")
        self.best_name = best_name if best_name is None or self._own(best_name, "best_name") else None

    @staticmethod
    def _own(name: Any, field: str) -> bool:
        if isinstance(name, str) and OWN_NAME.fullmatch(name) and name not in (LAST_POINTER, BEST_POINTER):
            return True
        logger.warning(
            "checkpoint: ignoring %r in the resumed checkpoint's %s: not a checkpoint file name of this plugin",
            name,
            field,
        )
        return False

    # -- hooks -------------------------------------------------------------

    @hookimpl
    def on_fit_start(self, trainer: Any) -> None:
        if trainer.continued:  # a second fit goes on with the files and the best value it has
            self._fitting, self._bad_loss, self.interrupted_path = False, None, None
        else:
            self._reset()
        self.folder = self.checkpoint_folder(trainer.output_dir)
        self.folder.mkdir(parents=True, exist_ok=True)
        for tmp in remove_stale_temporaries(self.folder):
            logger.info("removed %s, left by an interrupted checkpoint write", tmp)
        # Resuming from a step counts as saved, so fit end does not save it again.
        self._last_saved = trainer.position_key()

    @hookimpl
    def on_epoch_start(self) -> None:
        # Not at fit start: the plugins' states are loaded after on_fit_start, so a failure
        # before here would save fresh states over the resumed ones; and the state has not
        # moved since the start or the checkpoint resumed from.
        self._fitting = True

    @hookimpl
    def on_train_batch_end(self, step: int, logs: dict[str, float]) -> None:
        loss = logs.get("loss")
        self._bad_loss = None if loss is None or math.isfinite(loss) else (step, loss)

    @hookimpl
    def on_save_point(self, trainer: Any, after: str, logs: dict[str, float], last: bool) -> None:
        # Saved at save points only: there every plugin has seen the step or the epoch (a
        # learning-rate cut, a plateau count), whatever the plugins' order, and the state is whole.
        at_end = last and self.save_on_fit_end and not self.save_best_only
        if after == "step":
            if (self.every_n_steps and trainer.step % self.every_n_steps == 0) or at_end:
                self._save(trainer)
            return
        if self.every_n_epochs and (trainer.epoch + 1) % self.every_n_epochs == 0:
            self._save_epoch(trainer, logs)
        if at_end and trainer.position_key() != self._last_saved:
            self._save(trainer)

    def _save_epoch(self, trainer: Any, logs: dict[str, float]) -> None:
        improved = False
        if self._monitor is not None:
            value = self._monitor.read(logs)
            improved = (
                value is not None and math.isfinite(value) and self._monitor.improved(value, self.best_value)
            )
        if self.save_best_only and not improved:
            return
        previous = self.best_value, self.best_name
        if improved:
            # Set before saving, so the checkpoint's own plugin state knows it is the best.
            self.best_value, self.best_name = float(logs[self.monitor]), self._name(trainer)  # type: ignore[index]
        path = self._save(trainer)
        if path is None:
            self.best_value, self.best_name = previous
        elif improved:
            write_pointer(self.folder, BEST_POINTER, path.name)

    @hookimpl
    def on_fit_end(self) -> None:
        self._fitting = False
        # A fit that ended well has moved past an earlier interrupted state; once ``last`` names
        # a newer checkpoint, interrupted.npz would only be resumed from by mistake.
        interrupted = self.folder / INTERRUPTED_NAME
        if interrupted.is_file() and latest_checkpoint(self.folder) not in (None, interrupted):
            with contextlib.suppress(OSError):
                interrupted.unlink()
                logger.info("checkpoint: removed %s: the run went on past it", interrupted)

    @hookimpl
    def on_exception(self, trainer: Any, exception: BaseException) -> None:
        fitting, self._fitting = self._fitting, False
        if not self.save_on_exception or not fitting:
            return  # no epoch had started: nothing new to save
        if trainer.update_in_progress:
            logger.warning(
                "checkpoint: %s arrived between a step's update and the end of its "
                "on_train_batch_end hooks; no interrupted checkpoint is saved (no state is whole "
                "there: plugins after the failing one never saw the step), so a resume starts "
                "from the last checkpoint",
                type(exception).__name__,
            )
            return
        try:
            path = self._write(trainer, self.folder / INTERRUPTED_NAME)
            if path is not None:
                write_pointer(self.folder, LAST_POINTER, path.name)
        except OSError as error:  # a full disk: what was saved before stays, and the fit's error is said
            logger.warning(
                "checkpoint: could not save %s after %s (%s); %s",
                INTERRUPTED_NAME,
                type(exception).__name__,
                error,
                self._newest_stays(),
            )
            return
        if path is not None:
            self.interrupted_path = path
            logger.warning("checkpoint: saved %s after %s", path, type(exception).__name__)

    def _newest_stays(self) -> str:
        newest = latest_checkpoint(self.folder)
        return "no checkpoint was saved before" if newest is None else f"the newest checkpoint stays {newest}"

    # -- saving --------------------------------------------------------------

    def _write(self, trainer: Any, path: Path) -> Path | None:
        if self._bad_loss is not None:
            # The step's update came from a non-finite loss, even if the weights look finite.
            logger.warning(
                "checkpoint: not saving %s: the loss of step %d was %s; the last good checkpoint stays",
                path.name,
                *self._bad_loss,
            )
            return None
        contents = trainer.checkpoint_contents()
        if not _all_finite(contents["model"]):
            logger.warning(
                "checkpoint: not saving %s at step %d: the model has non-finite weights; "
                "the last good checkpoint stays",
                path.name,
                trainer.step,
            )
            return None
        return save_checkpoint(path, contents)

    @staticmethod
    def _name(trainer: Any) -> str:
        return f"epoch{trainer.epoch:04d}-step{trainer.step:08d}.npz"

    def _save(self, trainer: Any) -> Path | None:
        name = self._name(trainer)
        # The list is settled before the contents are gathered, so the checkpoint's own state
        # names it: a fit resumed from it then deletes it in turn under keep_last.
        previous = self.saved
        saved = [n for n in self.saved if n != name] + [name]
        drop: list[str] = []
        if self.keep_last is not None:
            keep = set(saved[-self.keep_last :])
            drop = [n for n in saved if n not in keep and n != self.best_name]
        self.saved = [n for n in saved if n not in drop]
        path = None
        try:
            path = self._write(trainer, self.folder / name)
        finally:
            if path is None:  # not saved (non-finite weights) or the write failed
                self.saved = previous
        # Saved or refused (a non-finite loss or weights, already warned about): either way the
        # fit's end need not try this position again.
        self._last_saved = trainer.position_key()
        if path is None:
            return None
        write_pointer(self.folder, LAST_POINTER, name)
        for old in drop:
            with contextlib.suppress(FileNotFoundError):
                (self.folder / old).unlink()
        logger.log(self._level, "checkpoint: saved %s", path)
        return path
