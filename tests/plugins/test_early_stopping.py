"""The early_stopping plugin (Keras's EarlyStopping rules)."""

from __future__ import annotations

import numpy as np
import pytest

import tapefit as tp
from tapefit.plugins.early_stopping import EarlyStopping
from tapefit.plugins.monitor import infer_mode


def scripted(values):
    """A plugin that puts ``values[epoch]`` into the epoch logs as ``score``."""

    class Script:
        @tp.hookimpl
        def on_epoch_end(self, epoch, logs):
            logs["score"] = values[epoch]

    return Script()


def run(make_trainer, make_data, values, plugin, epochs=None):
    x, y = make_data(12)
    trainer = make_trainer([scripted(values), plugin])
    history = trainer.fit(x, y, epochs=epochs or len(values), batch_size=6)
    return trainer, history


@pytest.mark.parametrize(
    ("values", "patience", "mode", "stopped"),
    [
        ([5, 4, 4.5, 4.2, 3, 2], 2, "min", 3),  # two epochs without a new minimum
        ([5, 4, 3, 2, 1, 0], 1, "min", None),  # always improving
        ([1, 2, 2, 2, 2, 2], 0, "max", 2),  # patience 0: the first non-improvement
        ([1, 0.5, 0.4, 0.3], 1, "max", 1),
    ],
)
def test_stops_after_patience_epochs_without_improvement(
    make_trainer, make_data, values, patience, mode, stopped
):
    plugin = EarlyStopping(monitor="score", patience=patience, mode=mode)
    _, history = run(make_trainer, make_data, values, plugin)
    assert plugin.stopped_epoch == stopped
    assert history.epoch == list(range(len(values) if stopped is None else stopped + 1))


def test_min_delta_and_baseline(make_trainer, make_data):
    plugin = EarlyStopping(monitor="score", patience=1, min_delta=0.5)
    run(make_trainer, make_data, [5, 4.8, 4.6, 1, 0], plugin)
    assert plugin.stopped_epoch == 1  # 4.8 is not 0.5 below 5
    # Without a baseline the first epoch resets the wait; with one not beaten it does not.
    plugin = EarlyStopping(monitor="score", patience=2)
    run(make_trainer, make_data, [5, 6, 7, 8], plugin)
    assert plugin.stopped_epoch == 2
    plugin = EarlyStopping(monitor="score", patience=2, baseline=1.0)
    run(make_trainer, make_data, [5, 6, 7, 8], plugin)
    assert plugin.stopped_epoch == 1


def test_a_nan_is_never_the_best(make_trainer, make_data):
    # A NaN first epoch became the best, which nothing beats: training stopped while the value
    # improved, and restore_best_weights went back to the NaN epoch.
    plugin = EarlyStopping(monitor="score", patience=1, restore_best_weights=True)
    _, history = run(make_trainer, make_data, [float("nan"), 3, 2, 1], plugin)
    assert plugin.stopped_epoch is None and history.epoch == [0, 1, 2, 3]
    assert (plugin.best, plugin.best_epoch) == (1, 3)


def test_restore_best_weights(make_trainer, make_data):
    weights = []

    class Keep:
        @tp.hookimpl
        def on_epoch_end(self, trainer):
            weights.append(trainer.model.state_dict())

    plugin = EarlyStopping(monitor="score", patience=2, restore_best_weights=True)
    x, y = make_data(12)
    trainer = make_trainer([scripted([3, 1, 2, 2, 2]), Keep(), plugin])
    trainer.fit(x, y, epochs=5, batch_size=6)
    assert plugin.stopped_epoch == 3 and plugin.best_epoch == 1
    final = trainer.model.state_dict()
    for key in final:
        np.testing.assert_array_equal(final[key], weights[1][key])
    assert not np.array_equal(next(iter(weights[3].values())), next(iter(weights[1].values())))


def test_state_goes_into_checkpoints_and_resumes(tmp_path, make_trainer, make_data):
    x, y = make_data(12)
    folder = tmp_path / "ckpt"
    values = [3, 1, 2, 2.5, 2, 2]
    plugin = EarlyStopping(monitor="score", patience=3, restore_best_weights=True)
    trainer = make_trainer([scripted(values), plugin, {"type": "checkpoint", "dirpath": str(folder)}])
    trainer.fit(x, y, epochs=3, batch_size=6)
    assert (plugin.wait, plugin.best) == (1, 1)
    resumed_plugin = EarlyStopping(monitor="score", patience=3, restore_best_weights=True)
    resumed = make_trainer([scripted(values), resumed_plugin])
    resumed.fit(x, y, epochs=6, batch_size=6, resume_from=folder)
    assert resumed_plugin.best_epoch == 1
    assert resumed_plugin.stopped_epoch == 4  # epochs 2, 3, 4 without improvement, counted across the resume


def test_a_checkpoint_at_the_end_of_the_fit_resumes_exactly_with_restore_best_weights(
    tmp_path, make_trainer, make_data
):
    # The best weights were restored before the checkpoint saved the fit's end, so that
    # checkpoint paired the epoch-0 weights with the optimizer state of epoch 1.
    x, y = make_data(12)
    values = [1, 2, 3, 4]  # epoch 0 stays the best

    def plugins(*extra):
        return [
            scripted(values),
            EarlyStopping(monitor="score", patience=9, restore_best_weights=True),
            *extra,
        ]

    straight = make_trainer(plugins())
    straight.fit(x, y, epochs=4, batch_size=6)
    folder = tmp_path / "ckpt"
    make_trainer(plugins({"type": "checkpoint", "dirpath": str(folder), "every_n_epochs": None})).fit(
        x, y, epochs=2, batch_size=6
    )
    resumed = make_trainer(plugins())
    resumed.fit(x, y, epochs=4, batch_size=6, resume_from=folder)
    assert resumed.history.history == straight.history.history
    for key, value in straight.optimizer.get_state().items():
        np.testing.assert_array_equal(resumed.optimizer.get_state()[key], value, err_msg=key)


def test_missing_monitor_warns_once_and_never_stops(make_trainer, make_data, caplog):
    plugin = EarlyStopping(monitor="val_los", patience=0)
    _, history = run(make_trainer, make_data, [1, 2, 3], plugin)
    assert history.epoch == [0, 1, 2]
    assert caplog.text.count("monitor 'val_los' is not in the epoch logs") == 1


def test_mode_inference_and_errors():
    assert infer_mode("val_accuracy", "auto") == "max"
    assert infer_mode("acc", "auto") == "max"
    assert infer_mode("val_loss", "auto") == "min"
    with pytest.raises(ValueError, match="mode must be"):
        EarlyStopping(mode="up")
    with pytest.raises(ValueError, match="patience must be a non-negative integer"):
        EarlyStopping(patience=-1)


def test_messages_count_epochs_as_the_progress_bar_does(make_trainer, make_data, caplog):
    import logging

    x, y = make_data(16)
    stopper = tp.plugins.EarlyStopping(monitor="loss", patience=1, min_delta=1e9, restore_best_weights=True)
    trainer = make_trainer([stopper])
    with caplog.at_level(logging.INFO, logger="tapefit.plugins.early_stopping"):
        trainer.fit(x, y, epochs=5, batch_size=8, verbose=0)
    # the bar's first epoch is "Epoch 1/5": the best (the first) is epoch 1, the stop after epoch 2
    assert "stopped after epoch 2, best loss" in caplog.text and "at epoch 1" in caplog.text
    assert "restoring the weights of epoch 1" in caplog.text
