"""The ``learning_rate_scheduler`` plugin: sets the learning rate from a function of the epoch."""

from __future__ import annotations

import inspect
import logging
import math
from collections.abc import Callable
from typing import Any

from tapefit.core.naming import configured_callable, suggest_keywords
from tapefit.plugins.hookspecs import hookimpl
from tapefit.plugins.monitor import check_has_optimizer, decision_level

logger = logging.getLogger(
    "tapefit.plugins.learning_rate_scheduler"
)  # one logger per plugin: users may silence one


@suggest_keywords
class LearningRateScheduler:
    """Sets the learning rate at each epoch's start to ``schedule(epoch, rate)`` (config name
    ``learning_rate_scheduler``), as Keras's ``LearningRateScheduler``.

    ``schedule`` takes the epoch index (from 0) and the current rate and returns the new rate
    as a float; a function of the epoch alone is called with it alone. The rate each epoch used
    goes into its logs as ``learning_rate``. The rate is part of the optimizer's state, so a
    checkpoint holds it; an epoch resumed in its middle keeps the rate it had (``schedule`` is
    not called twice for it). For a rate that changes every step, give the optimizer a
    schedule from ``tp.optimizers.schedules`` instead.

    Args:
        schedule: ``(epoch, rate) -> rate`` or ``epoch -> rate``; in a config, the import path
            of a ``@tp.configurable`` function.
        verbose: Keras's: 0 says nothing of a new rate, 1 always says it; ``None`` (the
            default) says it while ``fit`` shows progress.
    """

    plugin_name = "learning_rate_scheduler"
    adds_log_keys: tuple[str, ...] = ("learning_rate",)  # epoch log keys it adds (hookspecs.py)

    def __init__(self, schedule: Callable[..., float] | str, verbose: int | None = None) -> None:
        self.schedule = configured_callable(schedule, "learning_rate_scheduler: schedule")
        self.verbose = verbose
        self._level = decision_level(verbose, "learning_rate_scheduler")
        self._takes_rate = _takes_two(self.schedule)

    @hookimpl
    def on_fit_start(self, trainer: Any) -> None:
        check_has_optimizer(trainer, self.plugin_name)
        try:  # a schedule object in the optimizer cannot be overwritten: say so now
            trainer.optimizer.learning_rate = trainer.learning_rate
        except TypeError as error:
            raise TypeError(f"learning_rate_scheduler: {error}") from None

    # tryfirst: the other plugins' epoch start sees the epoch's rate
    @hookimpl(tryfirst=True)
    def on_epoch_start(self, trainer: Any, epoch: int) -> None:
        if trainer.batch_in_epoch > 0:
            return  # a resumed epoch: its rate was set before the checkpoint
        old = trainer.learning_rate
        new = self.schedule(epoch, old) if self._takes_rate else self.schedule(epoch)
        if isinstance(new, bool) or not isinstance(new, (int, float)) or not math.isfinite(float(new)):
            raise ValueError(
                f"learning_rate_scheduler: schedule({epoch}) must return a finite float, got {new!r}"
            )
        trainer.optimizer.learning_rate = float(new)
        if float(new) != old:
            logger.log(
                self._level,
                "learning_rate_scheduler: epoch %d: learning rate %.6g -> %.6g",
                epoch + 1,
                old,
                new,
            )

    @hookimpl(tryfirst=True)
    def on_epoch_end(self, trainer: Any, logs: dict[str, float]) -> None:
        logs["learning_rate"] = trainer.learning_rate


def _takes_two(fn: Callable[..., Any]) -> bool:
    """Whether ``fn`` takes ``(epoch, rate)``, not ``epoch`` alone (Keras tries both)."""
    try:
        parameters = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return True
    if any(p.kind is inspect.Parameter.VAR_POSITIONAL for p in parameters):
        return True
    positional = [p for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return len(positional) >= 2
