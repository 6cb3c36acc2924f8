"""A second ``fit`` on the same trainer continues the run, as Keras users expect."""

from __future__ import annotations

import csv

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

import tapefit as tp
from tests.plugins.conftest import make_data, make_trainer


def step_losses(folder):
    accumulator = EventAccumulator(str(folder), size_guidance={"scalars": 0})
    accumulator.Reload()
    return [event.step for event in accumulator.Scalars("step/loss")]


def test_a_second_fit_continues_epochs_steps_csv_checkpoints_and_tensorboard(tmp_path):
    x, y = make_data()
    plugins = [
        tp.plugins.CSVLogger(filename=str(tmp_path / "h.csv")),
        tp.plugins.Checkpoint(dirpath=str(tmp_path / "ck"), keep_last=3),
        tp.plugins.TensorBoard(log_dir=str(tmp_path / "tb"), log_graph=False),
    ]
    trainer = make_trainer(plugins)
    first = trainer.fit(x, y, epochs=2, batch_size=8)  # 3 steps an epoch
    second = trainer.fit(x, y, epochs=2, batch_size=8)
    assert first.epoch == [0, 1] and second.epoch == [2, 3]
    assert trainer.step == 12 and int(trainer.optimizer.iterations) == 12
    with open(tmp_path / "h.csv", newline="") as f:
        assert [int(row["epoch"]) for row in csv.DictReader(f)] == [0, 1, 2, 3]
    names = sorted(p.name for p in (tmp_path / "ck").glob("epoch*.npz"))
    assert names == ["epoch0001-step00000006.npz", "epoch0002-step00000009.npz", "epoch0003-step00000012.npz"]
    assert sorted(step_losses(tmp_path / "tb" / "train")) == list(range(12))  # every step once


def test_initial_epoch_is_the_keras_start_index():
    x, y = make_data()
    trainer = make_trainer()
    history = trainer.fit(x, y, epochs=5, batch_size=8, initial_epoch=3)
    assert history.epoch == [3, 4] and trainer.step == 6
    with pytest.raises(ValueError, match="initial_epoch must be a non-negative integer"):
        trainer.fit(x, y, initial_epoch=-1)
    with pytest.raises(ValueError, match="give one of them"):
        trainer.fit(x, y, initial_epoch=1, resume_from="somewhere")


def stopping_trainer(folder, with_early_stopping=True):
    plugins = [tp.plugins.Checkpoint(dirpath=str(folder))]
    if with_early_stopping:
        # Nothing improves by 100: the run stops after its second epoch.
        plugins.append(tp.plugins.EarlyStopping(monitor="loss", patience=1, min_delta=100.0))
    return make_trainer(plugins)


def test_resuming_a_run_that_early_stopping_finished_trains_nothing(tmp_path, caplog):
    x, y = make_data()
    history = stopping_trainer(tmp_path / "ck").fit(x, y, epochs=10, batch_size=8)
    assert history.epoch == [0, 1]
    files = sorted(p.name for p in (tmp_path / "ck").iterdir())
    resumed = stopping_trainer(tmp_path / "ck")
    caplog.set_level("INFO", logger="tapefit")
    history = resumed.fit(x, y, epochs=20, batch_size=8, resume_from=tmp_path / "ck")
    assert resumed.step == 6 and history.epoch == [0, 1]
    assert "the run was finished by early_stopping: loss did not improve for 1 epochs" in caplog.text
    assert sorted(p.name for p in (tmp_path / "ck").iterdir()) == files
    # Without early stopping in the run, the resume trains on.
    on = stopping_trainer(tmp_path / "ck", with_early_stopping=False)
    assert on.fit(x, y, epochs=4, batch_size=8, resume_from=tmp_path / "ck").epoch == [0, 1, 2, 3]
