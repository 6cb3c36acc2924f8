"""Training: ``Trainer`` and ``History``, the fit loop and everything it keeps to resume exactly.

``trainer`` holds ``Trainer`` (``fit``, ``evaluate``, ``predict``, and the checkpoint contents
plugins read) and ``History``; ``state`` holds ``TrainState``, the position in the run, the
epoch's running sums and the completed epochs' logs that a checkpoint saves. The loop reaches
plugins only through the hooks of ``tapefit.plugins.hookspecs``.
"""

from tapefit.training.trainer import History, Trainer

__all__ = ["History", "Trainer"]
