"""The ``terminate_on_nan`` plugin: stops training at the first non-finite loss."""

from __future__ import annotations

import logging
import math
from typing import Any

from tapefit.core.naming import suggest_keywords
from tapefit.plugins.hookspecs import hookimpl

logger = logging.getLogger("tapefit.plugins.terminate_on_nan")  # one logger per plugin: users may silence one


@suggest_keywords
class TerminateOnNaN:
    """Stops ``fit`` after the first batch whose loss is NaN or infinite (config name ``terminate_on_nan``).

    Keras's ``TerminateOnNaN``, reading the batch's ``loss`` and every ``*_loss`` value (a
    custom step's ``d_loss`` and ``g_loss``, each output's loss): the batch's step is named in a warning and
    ``trainer.stop_training`` is set, so the fit ends after that batch. The step's
    update has already been applied by then, so the model is no longer usable; the
    ``checkpoint`` plugin refuses to save non-finite weights, so the last good
    checkpoint stays the newest one to resume from.

    Args:
        raise_error: raise a ``RuntimeError`` naming the step instead of stopping, as
            Keras's ``raise_error=True``: the fit ends with the exception, and no plugin's
            ``on_fit_end`` runs (``on_exception`` does; no interrupted checkpoint is saved,
            as the update was applied).

    Attributes:
        stopped_step: the step whose loss was not finite, or ``None``.
    """

    plugin_name = "terminate_on_nan"
    adds_log_keys: tuple[str, ...] = ()  # epoch log keys it adds (hookspecs.py)

    def __init__(self, raise_error: bool = False) -> None:
        if not isinstance(raise_error, bool):
            raise TypeError(f"raise_error must be true or false, got {raise_error!r}")
        self.raise_error = raise_error
        self.stopped_step: int | None = None

    @property
    def failure(self) -> str | None:
        """Why the last fit failed, in words, or ``None`` (read by ``train``; hookspecs.py)."""
        if self.stopped_step is None:
            return None
        return f"the training loss was not finite at step {self.stopped_step}, so terminate_on_nan stopped the run"

    @hookimpl
    def on_fit_start(self) -> None:
        self.stopped_step = None

    @hookimpl(tryfirst=True)
    def on_train_batch_end(self, trainer: Any, step: int, logs: dict[str, float]) -> None:
        losses = [(k, v) for k, v in logs.items() if k == "loss" or k.endswith("_loss")]
        key, loss = next(((k, v) for k, v in losses if not math.isfinite(v)), (None, None))
        if key is not None:
            self.stopped_step = step
            if self.raise_error:
                raise RuntimeError(
                    f"terminate_on_nan: the {key} is {loss} at step {step} (epoch {trainer.epoch + 1}, "
                    f"batch {trainer.batch_in_epoch - 1})"
                )
            trainer.stop_training = True
            logger.warning(
                "terminate_on_nan: step %d (epoch %d, batch %d): %s is %s, terminating training",
                step,
                trainer.epoch + 1,  # as the progress bar counts epochs
                trainer.batch_in_epoch - 1,
                key,
                loss,
            )
