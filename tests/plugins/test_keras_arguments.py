"""Keras 3's callback arguments taken by their plugin twins, with Keras's meaning."""

from __future__ import annotations

import logging

import pytest

import tapefit as tp


@pytest.mark.parametrize(
    ("plugin", "says"),
    [
        (
            lambda v: tp.plugins.EarlyStopping(monitor="loss", patience=0, min_delta=100.0, verbose=v),
            "early_stopping: ",
        ),
        (
            lambda v: tp.plugins.ReduceLROnPlateau(monitor="loss", patience=0, min_delta=100.0, verbose=v),
            "reduce_lr_on_plateau: epoch 2: learning rate",
        ),
    ],
)
def test_verbose_says_a_decision_as_keras_does(make_trainer, make_data, caplog, plugin, says):
    x, y = make_data(12)
    shown = {}
    for verbose in (None, 0, 1):
        caplog.clear()
        with caplog.at_level(logging.DEBUG, logger="tapefit"):
            make_trainer([plugin(verbose)]).fit(x, y, epochs=3, batch_size=4, verbose=0)
        levels = {r.levelno for r in caplog.records if says in r.getMessage()}
        assert len(levels) == 1, caplog.text
        shown[verbose] = levels.pop()
    # 1: always shown, as Keras prints it; 0: silent (Keras's default); None: while fit shows progress
    assert shown == {None: logging.INFO, 0: logging.DEBUG, 1: logging.WARNING}
    with pytest.raises(ValueError, match="verbose must be 0, 1 or null, got 'yes'"):
        plugin("yes")


def test_learning_rate_scheduler_sets_each_epochs_rate_as_keras_does(make_trainer, make_data):
    x, y = make_data(12)
    seen = []
    plugin = tp.plugins.LearningRateScheduler(lambda epoch, rate: rate * 0.5 if epoch else rate)

    class Rates:
        @tp.hookimpl
        def on_train_batch_end(self, trainer):
            seen.append(trainer.learning_rate)

    trainer = make_trainer([plugin, Rates()])
    history = trainer.fit(x, y, epochs=3, batch_size=6, verbose=0)
    assert history.history["learning_rate"] == pytest.approx([0.01, 0.005, 0.0025])
    assert seen == pytest.approx([0.01, 0.01, 0.005, 0.005, 0.0025, 0.0025])
    by_epoch = make_trainer([tp.plugins.LearningRateScheduler(lambda epoch: 0.1 / (epoch + 1))])
    assert by_epoch.fit(x, y, epochs=2, verbose=0).history["learning_rate"] == pytest.approx([0.1, 0.05])
    with pytest.raises(ValueError, match=r"schedule\(0\) must return a finite float, got 'fast'"):
        make_trainer([tp.plugins.LearningRateScheduler(lambda epoch: "fast")]).fit(x, y, verbose=0)
    with pytest.raises(TypeError, match="schedule must be a function, or the import path of one, got 3"):
        tp.plugins.LearningRateScheduler(3)


def test_learning_rate_scheduler_resumes_inside_an_epoch_without_scheduling_it_twice(
    tmp_path, make_trainer, make_data
):
    x, y = make_data(12)

    def run(**fit):
        plugins = [
            tp.plugins.LearningRateScheduler(lambda epoch, rate: rate * 0.5),
            tp.plugins.Checkpoint(dirpath=str(tmp_path / "ck"), every_n_steps=1),
        ]
        trainer = make_trainer(plugins)
        return trainer, trainer.fit(x, y, batch_size=4, verbose=0, shuffle=False, **fit)

    straight, history = run(epochs=3)
    inside_epoch_1 = tmp_path / "ck" / "epoch0001-step00000005.npz"  # 3 steps an epoch: 2 of epoch 1 done
    assert inside_epoch_1.is_file()
    trainer, resumed = run(epochs=3, resume_from=str(inside_epoch_1))
    assert resumed.history["learning_rate"] == history.history["learning_rate"]
    for a, b in zip(straight.model.get_weights(), trainer.model.get_weights()):
        assert (a == b).all()


def test_lambda_callback_calls_keras_names_with_keras_arguments(make_trainer, make_data):
    x, y = make_data(8)
    calls = []
    plugin = tp.plugins.LambdaCallback(
        on_train_begin=lambda logs: calls.append(("train_begin", logs)),
        on_epoch_begin=lambda epoch, logs: calls.append(("epoch_begin", epoch)),
        on_train_batch_begin=lambda batch, logs: calls.append(("batch_begin", batch)),
        on_train_batch_end=lambda batch, logs: calls.append(("batch_end", batch, sorted(logs))),
        on_epoch_end=lambda epoch, logs: calls.append(("epoch_end", epoch, sorted(logs))),
        on_train_end=lambda logs: calls.append(("train_end", sorted(logs))),
    )
    make_trainer([plugin]).fit(x, y, epochs=1, batch_size=4, verbose=0)
    assert calls == [
        ("train_begin", {}),
        ("epoch_begin", 0),
        ("batch_begin", 0),
        ("batch_end", 0, ["accuracy", "loss"]),
        ("batch_begin", 1),
        ("batch_end", 1, ["accuracy", "loss"]),
        ("epoch_end", 0, ["accuracy", "loss"]),
        ("train_end", ["accuracy", "loss"]),
    ]
    with pytest.raises(
        TypeError, match=r"unknown argument 'on_batch_end' \(did you mean 'on_train_batch_end'\?\)"
    ):
        tp.plugins.LambdaCallback(on_batch_end=print)


def test_checkpoint_takes_keras_save_freq_threshold_and_verbose(tmp_path, make_trainer, make_data, caplog):
    x, y = make_data(12)
    steps = tmp_path / "steps"
    make_trainer([tp.plugins.Checkpoint(dirpath=str(steps), save_freq=2)]).fit(
        x, y, epochs=2, batch_size=4, verbose=0
    )
    # six steps: saved after steps 2, 4 and 6, and not at epoch ends (step 3)
    assert sorted(p.name for p in steps.glob("*.npz")) == [
        "epoch0000-step00000002.npz",
        "epoch0001-step00000004.npz",
        "epoch0001-step00000006.npz",
    ]
    epochs = tmp_path / "epochs"
    plugin = tp.plugins.Checkpoint(
        dirpath=str(epochs),
        save_freq="epoch",
        monitor="loss",
        save_best_only=True,
        initial_value_threshold=-1.0,  # a loss never goes below: nothing is ever the best
        verbose=1,
    )
    with caplog.at_level(logging.DEBUG, logger="tapefit"):
        make_trainer([plugin]).fit(x, y, epochs=2, batch_size=4, verbose=0)
    assert not list(epochs.glob("*.npz")) and "checkpoint: saved" not in caplog.text
    caplog.clear()
    with caplog.at_level(logging.DEBUG, logger="tapefit"):
        make_trainer([tp.plugins.Checkpoint(dirpath=str(tmp_path / "said"), verbose=1)]).fit(
            x, y, epochs=1, batch_size=4, verbose=0
        )
    said = [r for r in caplog.records if "checkpoint: saved" in r.getMessage()]
    assert len(said) == 1 and said[0].levelno == logging.WARNING
    with pytest.raises(
        ValueError, match="save_freq must be 'epoch' or a positive number of steps, got 'batch'"
    ):
        tp.plugins.Checkpoint(save_freq="batch")
    with pytest.raises(ValueError, match="initial_value_threshold needs a monitor"):
        tp.plugins.Checkpoint(initial_value_threshold=0.5)


def test_tensorboard_takes_keras_update_freq_histograms_graph_and_speed(tmp_path, make_trainer, make_data):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    x, y = make_data(12)
    board = tp.plugins.TensorBoard(
        log_dir=str(tmp_path / "tb"),
        update_freq="epoch",
        histogram_freq=2,
        write_graph=False,
        write_steps_per_second=True,
    )
    make_trainer([board]).fit(x, y, epochs=4, batch_size=4, verbose=0)
    events = EventAccumulator(str(tmp_path / "tb" / "train"), size_guidance={"scalars": 0, "histograms": 0})
    events.Reload()
    assert not [
        tag for tag in events.Tags()["scalars"] if tag.startswith("step/")
    ]  # "epoch": no step scalars
    speeds = events.Scalars("epoch/steps_per_second")
    assert [e.step for e in speeds] == [0, 1, 2, 3] and all(e.value > 0 for e in speeds)
    histograms = events.Tags()["histograms"]
    assert histograms and all(tag.startswith("weights/") for tag in histograms)
    assert [e.step for e in events.Histograms(histograms[0])] == [6, 12]  # the ends of epochs 2 and 4
    assert not events.Tags()["graph"]
    assert tp.plugins.TensorBoard(update_freq="batch").log_every_n_steps == 1
    assert tp.plugins.TensorBoard(update_freq=5).log_every_n_steps == 5
    with pytest.raises(
        ValueError, match="update_freq must be 'batch', 'epoch' or a positive number of steps"
    ):
        tp.plugins.TensorBoard(update_freq="sometimes")


@pytest.mark.parametrize(
    "make",
    [
        lambda mode: tp.plugins.EarlyStopping(monitor="val_precision", mode=mode),
        lambda mode: tp.plugins.ReduceLROnPlateau(monitor="val_precision", mode=mode),
        lambda mode: tp.plugins.Checkpoint(monitor="val_precision", mode=mode),
    ],
)
def test_auto_mode_says_when_it_cannot_tell_the_direction(make):
    """Keras 3 refuses mode="auto" for a key it cannot place (or asks the metric: precision goes
    up); minimizing it without a word would stop or cut on the wrong side."""
    with pytest.warns(UserWarning, match="mode='auto' cannot tell whether 'val_precision'"):
        assert make("auto").mode == "min"
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert make("max").mode == "max"


@pytest.mark.parametrize("key", ["loss", "val_loss", "val_out_loss", "accuracy", "val_auc", "val_mae", "mse"])
def test_auto_mode_is_quiet_for_keys_it_knows(key):
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        tp.plugins.EarlyStopping(monitor=key)


@pytest.mark.parametrize(
    "call",
    [
        lambda: tp.plugins.EarlyStopping("val_loss", 0.01),  # Keras: min_delta=0.01
        lambda: tp.plugins.ReduceLROnPlateau("val_loss", 0.5, 2, 1),  # Keras: verbose=1
        lambda: tp.plugins.TensorBoard("logs", 1),  # Keras: histogram_freq=1
        lambda: tp.plugins.Checkpoint("ckpt", "val_loss"),  # Keras: monitor="val_loss"
    ],
)
def test_arguments_placed_otherwise_than_keras_are_keyword_only(call):
    """Where the plugin's positional order is not Keras's, a Keras call by position fails
    instead of setting another argument (TensorBoard("logs", 1) was log_every_n_steps=1)."""
    with pytest.raises(TypeError, match="positional"):
        call()


@pytest.mark.parametrize("path", ["best.keras", "w.weights.h5", "ckpt/{epoch:02d}-{val_loss:.2f}"])
def test_checkpoint_refuses_a_keras_filepath(path):
    with pytest.raises(ValueError, match="dirpath is a folder, not Keras's filepath"):
        tp.plugins.Checkpoint(path)


def test_checkpoint_says_save_best_only_does_not_rank_steps():
    """Keras's ModelCheckpoint(save_freq=n, save_best_only=True) saves a step only when the
    batch logs' monitor improved; tapefit's step checkpoints are resume points, saved anyway."""
    import warnings

    with pytest.warns(UserWarning, match="save_best_only ranks epoch ends only; with save_freq=2"):
        tp.plugins.Checkpoint(monitor="loss", save_best_only=True, save_freq=2)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        tp.plugins.Checkpoint(monitor="loss", save_best_only=True, save_freq="epoch")
        tp.plugins.Checkpoint(monitor="loss", save_best_only=True)


def test_a_key_a_plugin_adds_reaches_plugins_listed_before_it(make_trainer, make_data):
    # Keras: only callbacks after ReduceLROnPlateau see its learning_rate; here every plugin
    # does (documented on the Coming from Keras page)
    x, y = make_data(12)
    seen = []

    class Reads:
        @tp.hookimpl
        def on_epoch_end(self, logs):
            seen.append(logs.get("learning_rate"))

    plugins = [Reads(), tp.plugins.ReduceLROnPlateau(monitor="loss", patience=5)]
    make_trainer(plugins).fit(x, y, epochs=2, batch_size=4, verbose=0)
    assert seen == [pytest.approx(0.01), pytest.approx(0.01)]
