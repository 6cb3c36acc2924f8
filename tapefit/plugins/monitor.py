"""A watched epoch-log value: the one mechanism behind ``checkpoint``'s best-only saving,
``early_stopping`` and ``reduce_lr_on_plateau``; and what the plugins that decide share (how
loudly they say so, the optimizer a learning-rate plugin sets)."""

from __future__ import annotations

import logging
import math
import warnings
from typing import Any

logger = logging.getLogger("tapefit")


def decision_level(verbose: int | None, plugin: str) -> int:
    """The logging level of a plugin's decisions (a stop, a cut) from Keras's ``verbose``.

    ``None`` (tapefit's default): ``INFO``, shown while ``fit`` shows progress; ``0`` (Keras's
    default): ``DEBUG``, silent; ``1``: ``WARNING``, always shown, as Keras prints them.
    """
    if verbose is None:
        return logging.INFO
    if isinstance(verbose, bool) or verbose not in (0, 1):
        raise ValueError(f"{plugin}: verbose must be 0, 1 or null, got {verbose!r}")
    return logging.DEBUG if verbose == 0 else logging.WARNING


def infer_mode(monitor: str, mode: str) -> str:
    """``"min"`` or ``"max"``; ``"auto"`` is max for accuracy/AUC keys, else min (as Keras)."""
    if mode not in ("auto", "min", "max"):
        raise ValueError(f"mode must be 'auto', 'min' or 'max', got {mode!r}")
    if mode != "auto":
        return mode
    name = monitor.removeprefix("val_")
    return "max" if name.startswith(("acc", "auc")) or name.endswith(("accuracy", "auc")) else "min"


_DOWN = ("loss", "mse", "mae", "mean_squared_error", "mean_absolute_error", "crossentropy", "error")


def _direction_known(monitor: str) -> bool:
    """Whether ``"auto"`` can tell ``monitor``'s direction from its name: a loss or one of the
    built-in metrics (Keras 3 asks the metric itself, and refuses a key it cannot place)."""
    name = monitor.removeprefix("val_")
    return infer_mode(monitor, "auto") == "max" or name.endswith(_DOWN)


class Monitor:
    """Reads one key of the epoch logs and says whether a value improves on another.

    Args:
        plugin: the plugin's name, for the warning.
        key: the epoch log key, such as ``"val_loss"``.
        mode: ``"min"``, ``"max"`` or ``"auto"`` (see ``infer_mode``).
        min_delta: the smallest change that counts as an improvement.
        missing_note: added to the warning when the key is missing from the logs.
    """

    def __init__(
        self, plugin: str, key: str, mode: str, min_delta: float = 0.0, missing_note: str = ""
    ) -> None:
        self.plugin = plugin
        self.key = key
        self.mode = infer_mode(key, mode)
        if mode == "auto" and not _direction_known(key):
            # Keras 3 raises here (or reads the metric's own direction: precision goes up);
            # guessing min without a word would stop or cut on the wrong side.
            warnings.warn(
                f"{plugin}: mode='auto' cannot tell whether {key!r} should go down or up; "
                "minimizing it. Pass mode='min' or mode='max' (Keras 3 refuses to guess)",
                UserWarning,
                stacklevel=3,
            )
        self.min_delta = abs(float(min_delta))
        self.missing_note = missing_note
        self.reset()

    def reset(self) -> None:
        """Forgets that the missing key was warned about (once per fit)."""
        self._warned = False

    def read(self, logs: dict[str, float]) -> float | None:
        """The value in ``logs``, or ``None`` with one warning per fit naming the keys there."""
        value = logs.get(self.key)
        if value is None and not self._warned:
            logger.warning(
                "%s: monitor %r is not in the epoch logs (keys: %s)%s",
                self.plugin,
                self.key,
                ", ".join(sorted(logs)),
                self.missing_note,
            )
            self._warned = True
        return value

    def improved(self, value: float, reference: float | None) -> bool:
        """Whether ``value`` beats ``reference`` by more than ``min_delta``.

        Any value but NaN beats ``None``; a NaN never improves (as the best, nothing would beat it).
        """
        if math.isnan(value):
            return False
        if reference is None:
            return True
        if self.mode == "min":
            return value < reference - self.min_delta
        return value > reference + self.min_delta


def check_has_optimizer(trainer: Any, plugin: str) -> None:
    """A plugin that sets ``trainer.optimizer``'s learning rate needs the trainer to have one: a
    model whose own ``train_step`` uses optimizers of its own (a GAN's two) gives it none.

    Raises:
        ValueError: the trainer has no optimizer, naming the model's own ones.
    """
    if trainer.optimizer is not None:
        return
    own = ", ".join(trainer.optimizers) or "none"
    raise ValueError(
        f"{plugin}: the trainer has no optimizer whose learning rate it could set ({type(trainer.model).__name__}'s "
        f"train_step uses optimizers of its own: {own}); set their rates in the model, or give the trainer "
        "the optimizer the step uses (self.optimizer)"
    )
