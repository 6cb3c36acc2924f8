"""The reduce_lr_on_plateau plugin (Keras's ReduceLROnPlateau rules)."""

from __future__ import annotations

import pytest

import tapefit as tp
from tapefit.plugins.reduce_lr_on_plateau import ReduceLROnPlateau


def scripted(values):
    class Script:
        @tp.hookimpl(tryfirst=True)  # before reduce_lr_on_plateau, itself tryfirst
        def on_epoch_end(self, epoch, logs):
            logs["score"] = values[epoch]

    return Script()


def run(make_trainer, make_data, values, plugin, **fit_kwargs):
    x, y = make_data(12)
    trainer = make_trainer([scripted(values), plugin])
    history = trainer.fit(x, y, epochs=len(values), batch_size=6, **fit_kwargs)
    return trainer, history


def test_reduces_after_patience_and_logs_the_rate(make_trainer, make_data):
    plugin = ReduceLROnPlateau(monitor="score", factor=0.5, patience=2, min_delta=0.0)
    trainer, history = run(make_trainer, make_data, [1.0, 1.0, 1.0, 0.5, 0.6, 0.6, 0.6, 0.6], plugin)
    # lr 0.01: epochs 1, 2 without improvement -> halved at epoch 2; 4, 5 -> halved at 5; 6, 7 -> at 7.
    # Each epoch logs the rate it trained with, as Keras does: a cut shows from the next epoch.
    assert history.history["learning_rate"] == pytest.approx(
        [0.01, 0.01, 0.01, 0.005, 0.005, 0.005, 0.0025, 0.0025]
    )
    assert trainer.optimizer.learning_rate == pytest.approx(0.00125)


def test_cooldown_and_min_lr(make_trainer, make_data):
    plugin = ReduceLROnPlateau(monitor="score", factor=0.1, patience=1, cooldown=2, min_lr=0.0005)
    _, history = run(make_trainer, make_data, [1.0] * 7, plugin)
    # Reduced at epoch 1; cooldown epochs 2 and 3 (the counter runs out at 3, which then counts
    # as a plateau epoch again, as in Keras); reduced at 3 to min_lr, where it stays.
    assert history.history["learning_rate"] == pytest.approx(
        [0.01, 0.01, 0.001, 0.001, 0.0005, 0.0005, 0.0005]
    )


def test_the_new_rate_and_counters_survive_a_resume(tmp_path, make_trainer, make_data):
    x, y = make_data(12)
    folder = tmp_path / "ckpt"
    values = [1.0, 1.0, 1.0, 1.0, 1.0]
    first = make_trainer(
        [
            scripted(values),
            ReduceLROnPlateau(monitor="score", factor=0.5, patience=2),
            {"type": "checkpoint", "dirpath": str(folder)},
        ]
    )
    first.fit(x, y, epochs=4, batch_size=6)
    straight = make_trainer([scripted(values), ReduceLROnPlateau(monitor="score", factor=0.5, patience=2)])
    straight_history = straight.fit(x, y, epochs=5, batch_size=6)
    resumed = make_trainer([scripted(values), ReduceLROnPlateau(monitor="score", factor=0.5, patience=2)])
    resumed_history = resumed.fit(x, y, epochs=5, batch_size=6, resume_from=folder)
    assert resumed_history.history["learning_rate"] == straight_history.history["learning_rate"]
    assert resumed.optimizer.learning_rate == straight.optimizer.learning_rate


def test_argument_errors():
    with pytest.raises(ValueError, match="factor must be in"):
        ReduceLROnPlateau(factor=1.0)
    with pytest.raises(ValueError, match="patience must be a non-negative integer"):
        ReduceLROnPlateau(patience=-2)


def test_a_schedule_is_refused_before_the_first_epoch(make_data):
    x, y = make_data(12)
    epochs = []

    class Count:
        @tp.hookimpl
        def on_epoch_start(self, epoch):
            epochs.append(epoch)

    schedule = tp.optimizers.schedules.ExponentialDecay(0.1, decay_steps=10, decay_rate=0.5)
    trainer = tp.Trainer(
        tp.layers.Dense(3),
        tp.optimizers.SGD(schedule),
        "sparse_categorical_crossentropy",
        plugins=[ReduceLROnPlateau(monitor="loss"), Count()],
    )
    with pytest.raises(
        TypeError, match=r"reduce_lr_on_plateau: this optimizer's learning rate is the schedule"
    ):
        trainer.fit(x, y, epochs=3, batch_size=6)
    assert epochs == []
