"""The ``early_stopping`` plugin: stops training when a monitored value stops improving."""

from __future__ import annotations

import logging
from typing import Any

import numpy as np

from tapefit.checkpointing.validate import expect_count, expect_mapping, expect_number, expect_weights
from tapefit.core.naming import suggest_keywords
from tapefit.plugins.hookspecs import hookimpl
from tapefit.plugins.monitor import Monitor, decision_level

logger = logging.getLogger("tapefit.plugins.early_stopping")  # one logger per plugin: users may silence one


@suggest_keywords
class EarlyStopping:
    """Stops ``fit`` when ``monitor`` has not improved for ``patience`` epochs (config name ``early_stopping``).

    Keras's ``EarlyStopping``: an epoch improves when the value beats the best so far
    by more than ``min_delta`` (downwards for ``mode="min"``, upwards for ``"max"``).

    Args:
        monitor: the epoch log key to watch.
        patience: epochs without improvement before stopping.
        mode: ``"min"``, ``"max"`` or ``"auto"``.
        min_delta: the smallest change that counts as an improvement.
        restore_best_weights: at the end of the fit, set the model's variables back to
            those of the best epoch (Keras 3 does this whether or not it stopped early). A
            checkpoint saved at the end of the fit holds the weights as trained, so that a
            resume from it is exact; the best weights are in this plugin's checkpoint state.
        baseline: stop unless the value beats this within ``patience`` epochs.
        start_from_epoch: epochs to wait before watching (warm-up).
        verbose: Keras's: 0 says nothing of a stop, 1 always says it; ``None`` (the default)
            says it while ``fit`` shows progress (see ``decision_level``).

    A monitor key missing from the logs gives a warning (naming the keys there) and
    never stops training. The plugin's counters (and best weights) go into checkpoints.
    """

    plugin_name = "early_stopping"
    adds_log_keys: tuple[str, ...] = ()  # epoch log keys it adds (hookspecs.py)

    def __init__(
        self,
        monitor: str = "val_loss",
        *,
        patience: int = 0,
        mode: str = "auto",
        min_delta: float = 0.0,
        restore_best_weights: bool = False,
        baseline: float | None = None,
        start_from_epoch: int = 0,
        verbose: int | None = None,
    ) -> None:
        if not isinstance(patience, int) or patience < 0:
            raise ValueError(f"patience must be a non-negative integer, got {patience!r}")
        self.monitor = monitor
        self.patience = patience
        self._monitor = Monitor("early_stopping", monitor, mode, min_delta, "; it never stops training")
        self.mode, self.min_delta = self._monitor.mode, self._monitor.min_delta
        self.restore_best_weights = bool(restore_best_weights)
        self.baseline = baseline
        self.start_from_epoch = int(start_from_epoch)
        self.verbose = verbose
        self._level = decision_level(verbose, "early_stopping")
        self._reset()

    def _reset(self) -> None:
        self.wait = 0
        self.best: float | None = None
        self.best_epoch: int | None = None
        self.best_weights: dict[str, np.ndarray] | None = None
        self.stopped_epoch: int | None = None
        self._monitor.reset()

    @hookimpl
    def on_fit_start(self) -> None:
        self._reset()

    @hookimpl
    def on_epoch_end(self, trainer: Any, epoch: int, logs: dict[str, float]) -> None:
        value = self._monitor.read(logs)
        if value is None:
            return
        if epoch < self.start_from_epoch:
            return
        self.wait += 1
        if self._monitor.improved(value, self.best):
            self.best = float(value)
            self.best_epoch = epoch
            if self.restore_best_weights:
                self.best_weights = trainer.model.state_dict()
            # A baseline must be beaten before the wait restarts (Keras's rule).
            if self.baseline is None or self._monitor.improved(value, self.baseline):
                self.wait = 0
            return
        if self.wait >= self.patience and epoch > 0:
            self.stopped_epoch = epoch
            reason = (
                # epochs counted from 1, as the progress bar counts them
                f"{self.monitor} did not improve for {self.wait} epochs; stopped after epoch {epoch + 1}, "
                f"best {self.monitor} = {self.best:.6g} at epoch {_counted(self.best_epoch)}"
            )
            trainer.request_stop(self, reason)
            logger.log(self._level, "early_stopping: %s", reason)

    @hookimpl
    def on_fit_end(self, trainer: Any) -> None:
        if self.restore_best_weights and self.best_weights is not None:
            logger.log(
                self._level, "early_stopping: restoring the weights of epoch %s", _counted(self.best_epoch)
            )
            trainer.model.load_state_dict(self.best_weights)

    def state_dict(self) -> dict[str, Any]:
        """Counters, best value and (with ``restore_best_weights``) the best weights."""
        return {
            "wait": self.wait,
            "best": self.best,
            "best_epoch": self.best_epoch,
            "best_weights": self.best_weights,
            "stopped_epoch": self.stopped_epoch,
        }

    def check_state_dict(self, state: Any, model: Any = None) -> None:
        """Checks a saved state before a resume restores anything (``hookspecs``, "Checkpoints"):
        the counters are counts, ``best`` a number, and the best weights ``model``'s, finite."""
        state = expect_mapping(state, ("wait", "best", "best_epoch", "best_weights", "stopped_epoch"))
        expect_count(state["wait"], "wait")
        expect_number(state["best"], "best", optional=True)
        expect_count(state["best_epoch"], "best_epoch", optional=True)
        expect_count(state["stopped_epoch"], "stopped_epoch", optional=True)
        if state["best_weights"] is not None:
            expect_weights(state["best_weights"], "best_weights", model)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restores what ``state_dict`` returned (``check_state_dict`` checked it)."""
        self.wait = int(state["wait"])
        self.best = state["best"]
        self.best_epoch = state["best_epoch"]
        self.best_weights = state["best_weights"]
        self.stopped_epoch = state["stopped_epoch"]


def _counted(epoch: int | None) -> str:
    """An epoch index as the progress bar counts it (from 1)."""
    return "none" if epoch is None else str(epoch + 1)
