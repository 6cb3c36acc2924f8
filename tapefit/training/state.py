"""``TrainState``: where a run stands, the one thing a checkpoint needs from the trainer.

A checkpoint is a ``TrainState`` (its ``to_dict``) plus the model's variables, the optimizer's
state, the plugins' states and the config. The trainer owns one and moves it only at the
boundaries of a step and of an epoch, so that the state it holds is always one a fit can
continue from exactly.
"""

from __future__ import annotations

import dataclasses
from typing import Any

__all__ = ["TrainState"]


@dataclasses.dataclass
class TrainState:
    """The position of a run, its running epoch statistics and its random state.

    Attributes:
        epoch: the index of the epoch in progress (or of the last one that ran).
        next_epoch: the epoch a fit starts or continues with when no epoch is in progress.
        step: the optimizer steps done in the whole run.
        batch_in_epoch: the batches done in the epoch in progress.
        in_epoch: an epoch has begun (its sample order is drawn, its metrics count) and has
            not ended; a resume continues it at ``batch_in_epoch``. An epoch that
            ``stop_training`` cut short stays in progress.
        loss_sum: the sum of the batch losses times their sizes in the epoch in progress.
        loss_count: the samples those losses cover.
        history: ``(epoch, logs)`` of every complete epoch of the run, oldest first.
        stopped: ``{"by": plugin name, "reason": ...}`` when a plugin finished the run.
        data: the batch source's state (its generator, and in an epoch its order or iterator
            position); filled by a snapshot.
        random: the ``tp.random`` generators' states; filled by a snapshot.
        metrics: the metrics' running states in an epoch; filled by a snapshot.
        fit: what a position means only for a fit of the same kind (batch size, samples,
            shuffling, ``drop_last``, the epoch to stop before); see ``resume.check_fits``.
    """

    epoch: int = 0
    next_epoch: int = 0
    step: int = 0
    batch_in_epoch: int = 0
    in_epoch: bool = False
    loss_sum: float = 0.0
    loss_count: int = 0
    history: list[tuple[int, dict[str, float]]] = dataclasses.field(default_factory=list)
    stopped: dict[str, Any] | None = None
    data: dict[str, Any] = dataclasses.field(default_factory=dict)
    random: dict[str, Any] = dataclasses.field(default_factory=dict)
    metrics: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    fit: dict[str, Any] = dataclasses.field(default_factory=dict)

    def start_fit(self, first_epoch: int, continued: bool) -> None:
        """Positions a new fit before ``first_epoch``; a fit that does not continue the last
        one counts its steps from 0."""
        if not continued:
            self.step = 0
        self.epoch = self.next_epoch = first_epoch
        self.batch_in_epoch = 0
        self.in_epoch = False
        self.history = []
        self.stopped = None

    def start_epoch(self, epoch: int) -> None:
        """Begins ``epoch``: no batch done, the running loss at zero."""
        self.epoch = epoch
        self.batch_in_epoch = 0
        self.in_epoch = True
        self.loss_sum, self.loss_count = 0.0, 0

    def end_step(self, loss: float, samples: int) -> None:
        """Counts a finished step of ``samples`` samples whose mean loss was ``loss``."""
        self.loss_sum += loss * samples
        self.loss_count += samples
        self.count_step()

    def count_step(self) -> None:
        """Counts a finished step (its loss went to the loss tracker's sums here)."""
        self.step += 1
        self.batch_in_epoch += 1

    def end_epoch(self, logs: dict[str, float], complete: bool) -> None:
        """Ends the epoch in progress with ``logs``; a complete one goes into the history, one cut
        short stays in progress for a resume (its remaining batches are still to train)."""
        if complete:
            self.history.append((self.epoch, dict(logs)))
        self.in_epoch = not complete
        self.next_epoch = self.epoch + 1

    @property
    def running_loss(self) -> float:
        """The loss averaged over the epoch's batches so far (NaN before the first)."""
        return self.loss_sum / self.loss_count if self.loss_count else float("nan")

    def position(self) -> tuple[int, int, int]:
        """``(epoch, batch in epoch, step)`` a fit resumed from this state starts at."""
        if self.in_epoch:
            return self.epoch, self.batch_in_epoch, self.step
        return self.next_epoch, 0, self.step

    def to_dict(self) -> dict[str, Any]:
        """The checkpoint's ``trainer``, ``loader``, ``random`` and ``metrics`` sections (plain
        data and arrays, no objects)."""
        epoch, batch, _ = self.position()
        data = dict(self.data)
        if not self.in_epoch:
            data["order"] = None  # a new epoch draws its own order from the generator
        return {
            "trainer": {
                **self.fit,
                "epoch": epoch,
                "batch_in_epoch": batch,
                "in_epoch": self.in_epoch,
                "step": self.step,
                "history": [{"epoch": e, "logs": logs} for e, logs in self.history],
                "loss_sum": self.loss_sum if self.in_epoch else 0.0,
                "loss_count": self.loss_count if self.in_epoch else 0,
                "stopped": self.stopped,
            },
            "loader": data,
            "random": self.random,
            "metrics": list(self.metrics) if self.in_epoch else [],
        }

    @classmethod
    def from_dict(cls, contents: dict[str, Any]) -> TrainState:
        """The state ``to_dict`` gave (``contents`` checked by ``resume.check_checkpoint``)."""
        trainer = contents["trainer"]
        epoch, in_epoch = int(trainer["epoch"]), bool(trainer["in_epoch"])
        batch = int(trainer["batch_in_epoch"])
        data = dict(contents["loader"])
        data.setdefault("position", batch)  # tapefit 0.1.0 kept the position in the trainer alone
        stopped = trainer.get("stopped")
        return cls(
            epoch=epoch,
            next_epoch=epoch,
            step=int(trainer["step"]),
            batch_in_epoch=batch,
            in_epoch=in_epoch,
            loss_sum=float(trainer["loss_sum"]),
            loss_count=int(trainer["loss_count"]),
            history=[(int(r["epoch"]), dict(r["logs"])) for r in trainer["history"]],
            stopped=dict(stopped) if isinstance(stopped, dict) else None,
            data=data,
            random=contents["random"],
            metrics=list(contents["metrics"]),
            fit={
                key: trainer[key] for key in ("epochs", "batch_size", "num_samples", "shuffle", "drop_last")
            },
        )
