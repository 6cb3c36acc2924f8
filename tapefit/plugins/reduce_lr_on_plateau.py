"""The ``reduce_lr_on_plateau`` plugin: lowers the learning rate when a value stops improving."""

from __future__ import annotations

import logging
from typing import Any

from tapefit.checkpointing.validate import expect_count, expect_mapping, expect_number
from tapefit.core.naming import suggest_keywords
from tapefit.plugins.hookspecs import hookimpl
from tapefit.plugins.monitor import Monitor, check_has_optimizer, decision_level

logger = logging.getLogger(
    "tapefit.plugins.reduce_lr_on_plateau"
)  # one logger per plugin: users may silence one


@suggest_keywords
class ReduceLROnPlateau:
    """Multiplies the learning rate by ``factor`` after ``patience`` epochs without improvement.

    Keras's ``ReduceLROnPlateau`` (config name ``reduce_lr_on_plateau``). The optimizer
    needs a float learning rate (a schedule is refused when ``fit`` starts). The rate each
    epoch used goes into its logs as ``learning_rate`` (a cut applies from the next epoch);
    the new rate itself is saved with the optimizer's state in checkpoints, the counters
    with this plugin's.

    Args:
        monitor: the epoch log key to watch.
        factor: the multiplier, in (0, 1).
        patience: epochs without improvement before reducing.
        mode: ``"min"``, ``"max"`` or ``"auto"``.
        min_delta: the smallest change that counts as an improvement.
        cooldown: epochs to wait after a reduction before watching again.
        min_lr: the learning rate never goes below this.
        verbose: Keras's: 0 says nothing of a cut, 1 always says it; ``None`` (the default)
            says it while ``fit`` shows progress (see ``decision_level``).
    """

    plugin_name = "reduce_lr_on_plateau"
    adds_log_keys: tuple[str, ...] = ("learning_rate",)  # epoch log keys it adds (hookspecs.py)

    def __init__(
        self,
        monitor: str = "val_loss",
        factor: float = 0.1,
        patience: int = 10,
        *,
        mode: str = "auto",
        min_delta: float = 1e-4,
        cooldown: int = 0,
        min_lr: float = 0.0,
        verbose: int | None = None,
    ) -> None:
        if not 0.0 < factor < 1.0:
            raise ValueError(f"factor must be in (0, 1) to reduce the learning rate, got {factor!r}")
        if not isinstance(patience, int) or patience < 0:
            raise ValueError(f"patience must be a non-negative integer, got {patience!r}")
        self.monitor = monitor
        self.factor = float(factor)
        self.patience = patience
        self._monitor = Monitor("reduce_lr_on_plateau", monitor, mode, min_delta)
        self.mode, self.min_delta = self._monitor.mode, self._monitor.min_delta
        self.cooldown = int(cooldown)
        self.min_lr = float(min_lr)
        self.verbose = verbose
        self._level = decision_level(verbose, "reduce_lr_on_plateau")
        self._reset()

    def _reset(self) -> None:
        self.wait = 0
        self.cooldown_counter = 0
        self.best: float | None = None
        self._monitor.reset()

    @hookimpl
    def on_fit_start(self, trainer: Any) -> None:
        self._reset()
        check_has_optimizer(trainer, "reduce_lr_on_plateau")
        try:
            # Setting the rate to itself: the optimizer refuses it now, not epochs into the fit,
            # if the rate is a schedule this plugin could never lower.
            trainer.optimizer.learning_rate = trainer.learning_rate
        except TypeError as error:
            raise TypeError(f"reduce_lr_on_plateau: {error}") from None

    # tryfirst: the new rate is in the logs before loggers and checkpoints see them.
    @hookimpl(tryfirst=True)
    def on_epoch_end(self, trainer: Any, epoch: int, logs: dict[str, float]) -> None:
        logs["learning_rate"] = trainer.learning_rate  # the rate this epoch used, as Keras logs it
        value = self._monitor.read(logs)
        if value is not None:
            if self.cooldown_counter > 0:
                self.cooldown_counter -= 1
                self.wait = 0
            if self._monitor.improved(value, self.best):
                self.best = float(value)
                self.wait = 0
            elif self.cooldown_counter <= 0:
                self.wait += 1
                if self.wait >= self.patience:
                    old = trainer.learning_rate
                    new = max(old * self.factor, self.min_lr)
                    if new < old:
                        trainer.optimizer.learning_rate = new
                        logger.log(
                            self._level,
                            "reduce_lr_on_plateau: epoch %d: learning rate %.6g -> %.6g",
                            epoch + 1,  # as the progress bar counts epochs
                            old,
                            new,
                        )
                    self.cooldown_counter = self.cooldown
                    self.wait = 0

    def state_dict(self) -> dict[str, Any]:
        """The counters and the best value."""
        return {"wait": self.wait, "cooldown_counter": self.cooldown_counter, "best": self.best}

    def check_state_dict(self, state: Any, model: Any = None) -> None:
        """Checks a saved state before a resume restores anything (``hookspecs``, "Checkpoints")."""
        state = expect_mapping(state, ("wait", "cooldown_counter", "best"))
        expect_count(state["wait"], "wait")
        expect_count(state["cooldown_counter"], "cooldown_counter")
        expect_number(state["best"], "best", optional=True)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restores what ``state_dict`` returned (``check_state_dict`` checked it)."""
        self.wait = int(state["wait"])
        self.cooldown_counter = int(state["cooldown_counter"])
        self.best = state["best"]
