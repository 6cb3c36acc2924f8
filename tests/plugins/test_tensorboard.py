"""The tensorboard plugin's event files, read back with TensorBoard's own reader."""

from __future__ import annotations

import math
import os
import signal
import time

import numpy as np
import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

import tapefit as tp
from tapefit.plugins.tensorboard import TensorBoard

N, BATCH, EPOCHS = 22, 5, 3
STEPS = math.ceil(N / BATCH) * EPOCHS


def read(folder):
    accumulator = EventAccumulator(str(folder), size_guidance={"scalars": 0, "histograms": 0})
    accumulator.Reload()
    return accumulator


def fit_with_board(tmp_path, make_trainer, make_data, **options):
    x, y = make_data(N)
    xv, yv = make_data(7, seed=1)
    board = TensorBoard(log_dir=str(tmp_path / "tb"), **options)
    trainer = make_trainer([board, {"type": "clip_gradients", "global_norm": 0.5}])
    trainer.config = {"name": "demo", "optimizer": {"type": "adam", "learning_rate": 0.01}, "layers": [8, 3]}
    history = trainer.fit(x, y, epochs=EPOCHS, batch_size=BATCH, validation_data=(xv, yv))
    return trainer, history, tmp_path / "tb"


def test_every_scalar_tag_has_one_value_per_step_or_epoch(tmp_path, make_trainer, make_data):
    _, history, folder = fit_with_board(tmp_path, make_trainer, make_data, histogram_every_n_steps=4)
    train, val = read(folder / "train"), read(folder / "val")
    step_tags = ["step/loss", "step/learning_rate", "step/grad_global_norm"]
    epoch_keys = ["loss", "accuracy"]
    assert set(train.Tags()["scalars"]) == {*step_tags, *(f"epoch/{k}" for k in epoch_keys)}
    assert set(val.Tags()["scalars"]) == {f"epoch/{k}" for k in epoch_keys}
    for tag in step_tags:
        assert [e.step for e in train.Scalars(tag)] == list(range(STEPS)), tag
    for key in epoch_keys:
        train_values = train.Scalars(f"epoch/{key}")
        val_values = val.Scalars(f"epoch/{key}")
        assert [e.step for e in train_values] == [e.step for e in val_values] == list(range(EPOCHS))
        np.testing.assert_allclose([e.value for e in train_values], history.history[key], rtol=1e-6)
        np.testing.assert_allclose([e.value for e in val_values], history.history[f"val_{key}"], rtol=1e-6)
    assert all(e.value == pytest.approx(0.01) for e in train.Scalars("step/learning_rate"))
    # The logged norm is the one before clipping: above the 0.5 bound at least once.
    norms = [e.value for e in train.Scalars("step/grad_global_norm")]
    assert max(norms) > 0.5


def test_histograms_every_n_steps(tmp_path, make_trainer, make_data):
    trainer, _, folder = fit_with_board(tmp_path, make_trainer, make_data, histogram_every_n_steps=4)
    train = read(folder / "train")
    paths = [path for path, _ in trainer.model.named_variables()]
    expected = {f"weights/{p}" for p in paths} | {f"gradients/{p}" for p in paths}
    assert set(train.Tags()["histograms"]) == expected
    for tag in expected:
        events = train.Histograms(tag)
        assert [e.step for e in events] == list(range(0, STEPS, 4)), tag
    # The first Dense kernel has 4x8 values in each histogram.
    kernel = next(p for p in paths if p.endswith("kernel"))
    assert train.Histograms(f"weights/{kernel}")[0].histogram_value.num == 4 * 8


def session_hparams(folder):
    """The hparams TensorBoard reads from the hparams run: (start info, end info)."""
    from tensorboard.plugins.hparams import metadata

    content = read(folder / "hparams").PluginTagToContent("hparams")
    start = metadata.parse_session_start_info_plugin_data(content[metadata.SESSION_START_INFO_TAG])
    end = metadata.parse_session_end_info_plugin_data(content[metadata.SESSION_END_INFO_TAG])
    values = {}
    for key, value in start.hparams.items():
        kind = value.WhichOneof("kind")
        values[key] = getattr(value, kind)
    return values, start, end


def test_hparams_with_final_metrics(tmp_path, make_trainer, make_data):
    before = time.time()
    _, history, folder = fit_with_board(tmp_path, make_trainer, make_data)
    hparams = read(folder / "hparams")
    assert set(hparams.PluginTagToContent("hparams")) == {
        "_hparams_/session_start_info",
        "_hparams_/session_end_info",
    }
    for key in ("loss", "val_loss", "accuracy", "val_accuracy"):
        (event,) = hparams.Scalars(f"hparam/{key}")
        assert event.value == pytest.approx(history.history[key][-1], rel=1e-6)
    values, start, end = session_hparams(folder)
    # one column per key path of the config, with its configured values, nothing twice
    assert values == {
        "name": "demo",
        "optimizer.type": "adam",
        "optimizer.learning_rate": 0.01,
        "layers.0": 8.0,
        "layers.1": 3.0,
    }
    assert before - 1 <= start.start_time_secs <= end.end_time_secs <= time.time() + 1


def test_hparams_without_a_config_show_the_configured_learning_rate(tmp_path, make_trainer, make_data):
    x, y = make_data(N)
    board = TensorBoard(log_dir=str(tmp_path / "tb"))
    # the plateau plugin cuts the rate every epoch; the hparams keep the one the run started with
    trainer = make_trainer(
        [board, {"type": "reduce_lr_on_plateau", "monitor": "loss", "patience": 0, "min_delta": 10.0}]
    )
    trainer.fit(x, y, epochs=3, batch_size=BATCH)
    assert trainer.learning_rate < 0.01
    values, _, _ = session_hparams(tmp_path / "tb")
    assert values == {
        "trainer.epochs": 3.0,
        "trainer.batch_size": float(BATCH),
        "optimizer.type": "Adam",
        "optimizer.learning_rate": pytest.approx(0.01),
    }


def test_flatten_config_gives_one_key_path_per_value():
    from tapefit.plugins.flat_config import flatten_config

    config = {
        "trainer": {"epochs": 20, "compile": False},
        "plugins": [{"type": "progress"}, {"type": "clip_gradients", "global_norm": 1.0}],
        "metrics": [],
        "data": {"path": None},
        "seed": np.int64(3),
    }
    assert flatten_config(config) == {
        "trainer.epochs": 20,
        "trainer.compile": False,
        "plugins.0.type": "progress",
        "plugins.1.type": "clip_gradients",
        "plugins.1.global_norm": 1.0,
        "metrics": "[]",
        "seed": 3,
    }
    assert list(flatten_config(config))[:3] == ["trainer.epochs", "trainer.compile", "plugins.0.type"]


def test_hparams_after_a_resume_are_the_latest_config_with_the_first_start_time(
    tmp_path, make_trainer, make_data
):
    x, y = make_data(N)
    checkpoints = tmp_path / "ckpt"

    def run(epochs, **fit):
        trainer = make_trainer(
            [TensorBoard(log_dir=str(tmp_path / "tb")), {"type": "checkpoint", "dirpath": str(checkpoints)}]
        )
        trainer.config = {"trainer": {"epochs": epochs}, "optimizer": {"type": "sgd", "learning_rate": 0.1}}
        trainer.fit(x, y, epochs=epochs, batch_size=BATCH, **fit)

    run(2)
    _, first_start, _ = session_hparams(tmp_path / "tb")
    run(3, resume_from=checkpoints)
    values, start, _ = session_hparams(tmp_path / "tb")
    assert values["trainer.epochs"] == 3.0 and values["optimizer.learning_rate"] == pytest.approx(0.1)
    assert start.start_time_secs == first_start.start_time_secs  # the run started then
    (event,) = read(tmp_path / "tb" / "hparams").Scalars("hparam/loss")
    assert event.step == 3 * math.ceil(N / BATCH)


def test_ctrl_c_during_a_step_leaves_no_hole_in_the_step_scalars(tmp_path, make_trainer, make_data):
    x, y = make_data(N)
    checkpoints = tmp_path / "ckpt"
    reference = make_trainer([TensorBoard(log_dir=str(tmp_path / "straight"))])
    reference.fit(x, y, epochs=EPOCHS, batch_size=BATCH)

    trainer = make_trainer(
        [TensorBoard(log_dir=str(tmp_path / "tb")), {"type": "checkpoint", "dirpath": str(checkpoints)}]
    )
    apply = trainer.optimizer.apply_gradients
    calls = []

    def apply_with_ctrl_c(pairs):
        calls.append(1)
        if len(calls) == 8:  # step 7, in the second epoch
            os.kill(os.getpid(), signal.SIGINT)  # held until the step is done, then raised
        return apply(pairs)

    trainer.optimizer.apply_gradients = apply_with_ctrl_c
    with pytest.raises(KeyboardInterrupt):
        trainer.fit(x, y, epochs=EPOCHS, batch_size=BATCH)
    assert trainer.step == 8
    resumed = make_trainer([TensorBoard(log_dir=str(tmp_path / "tb"))], seed=5)
    resumed.fit(x, y, epochs=EPOCHS, batch_size=BATCH, resume_from=checkpoints / "interrupted.npz")
    train, straight = read(tmp_path / "tb" / "train"), read(tmp_path / "straight" / "train")
    for tag in ("step/loss", "step/learning_rate", "step/grad_global_norm"):
        assert [e.step for e in train.Scalars(tag)] == list(range(STEPS)), tag
        # the same calls on the same shapes: the resumed run's values are the straight run's
        assert [e.value for e in train.Scalars(tag)] == [e.value for e in straight.Scalars(tag)], tag


def test_log_every_n_steps_and_no_histograms_by_default(tmp_path, make_trainer, make_data):
    _, _, folder = fit_with_board(tmp_path, make_trainer, make_data, log_every_n_steps=3)
    train = read(folder / "train")
    assert [e.step for e in train.Scalars("step/loss")] == list(range(0, STEPS, 3))
    assert train.Tags()["histograms"] == []


def test_learning_rate_is_the_one_each_step_used(tmp_path, make_data):
    x, y = make_data(12)
    used = []

    class Spy:
        @tp.hookimpl
        def on_train_batch_start(self, trainer):
            used.append(trainer.learning_rate)

    schedule = tp.optimizers.schedules.PiecewiseConstantDecay([1, 2], [0.5, 0.25, 0.125])
    model = tp.layers.Sequential([tp.layers.Dense(3)])
    board = TensorBoard(log_dir=str(tmp_path / "tb"))
    trainer = tp.Trainer(
        model, tp.optimizers.SGD(schedule), "sparse_categorical_crossentropy", plugins=[Spy(), board]
    )
    trainer.fit(x, y, epochs=1, batch_size=3)
    assert used == [0.5, 0.5, 0.25, 0.125]
    logged = [e.value for e in read(tmp_path / "tb" / "train").Scalars("step/learning_rate")]
    assert logged == used


def test_closed_on_exception_and_readable(tmp_path, make_trainer, make_data):
    x, y = make_data(N)

    class Fail:
        @tp.hookimpl
        def on_train_batch_start(self, step):
            if step == 7:
                raise RuntimeError("stop here")

    board = TensorBoard(log_dir=str(tmp_path / "tb"))
    trainer = make_trainer([Fail(), board])
    with pytest.raises(RuntimeError, match="stop here"):
        trainer.fit(x, y, epochs=3, batch_size=BATCH)
    assert board._writers == {}
    train = read(tmp_path / "tb" / "train")
    assert [e.step for e in train.Scalars("step/loss")] == list(range(7))
    assert [e.step for e in train.Scalars("epoch/loss")] == [0]


def test_default_folder_and_argument_errors(tmp_path, make_trainer, make_data):
    x, y = make_data(N)
    trainer = make_trainer(["tensorboard"], output_dir=tmp_path / "run")
    trainer.fit(x, y, epochs=1, batch_size=BATCH)
    assert list((tmp_path / "run" / "tensorboard" / "train").glob("events.out.tfevents.*"))
    with pytest.raises(ValueError, match="log_every_n_steps must be a positive integer"):
        TensorBoard(log_every_n_steps=0)


def test_resume_purges_the_steps_after_the_checkpoint(tmp_path, make_trainer, make_data):
    x, y = make_data(N)
    checkpoints = tmp_path / "ckpt"

    class Fail:
        @tp.hookimpl
        def on_train_batch_start(self, step):
            if step == 8:
                raise RuntimeError("crash")

    first = make_trainer(
        [
            Fail(),
            TensorBoard(log_dir=str(tmp_path / "tb")),
            {"type": "checkpoint", "dirpath": str(checkpoints)},
        ]
    )
    with pytest.raises(RuntimeError):
        first.fit(x, y, epochs=3, batch_size=BATCH)
    # Resume from the end of epoch 0 (step 5), not from the interrupted step 8.
    resumed = make_trainer([TensorBoard(log_dir=str(tmp_path / "tb"))])
    resumed.fit(x, y, epochs=3, batch_size=BATCH, resume_from=checkpoints / "epoch0000-step00000005.npz")
    train = read(tmp_path / "tb" / "train")
    assert [e.step for e in train.Scalars("step/loss")] == list(range(STEPS))
    assert [e.step for e in train.Scalars("epoch/loss")] == [0, 1, 2]


def _poison_at(step_to_poison, value):
    """A plugin that sets the first kernel to ``value`` before step ``step_to_poison``."""

    class Poison:
        @tp.hookimpl
        def on_train_batch_start(self, trainer, step):
            if step == step_to_poison:
                kernel = trainer.model.trainable_variables[0]
                kernel.assign(np.full(kernel.shape, value, dtype=kernel.dtype))

    return Poison()


def test_non_finite_histograms_are_skipped_and_terminate_on_nan_stops(
    tmp_path, make_trainer, make_data, caplog
):
    x, y = make_data(N)
    board = TensorBoard(log_dir=str(tmp_path / "tb"), histogram_every_n_steps=1)
    trainer = make_trainer([_poison_at(6, np.nan), board, "terminate_on_nan"])
    with caplog.at_level("WARNING", logger="tapefit"):
        history = trainer.fit(x, y, epochs=EPOCHS, batch_size=BATCH)
    assert trainer.plugins.get_plugin("terminate_on_nan").stopped_step == 6
    assert len(history.epoch) == 2  # stopped in the second epoch
    train = read(tmp_path / "tb" / "train")
    tags = train.Tags()["histograms"]
    paths = [path for path, _ in trainer.model.named_variables()]
    assert set(tags) == {f"weights/{p}" for p in paths} | {f"gradients/{p}" for p in paths}
    written_at_6 = [tag for tag in tags if 6 in [e.step for e in train.Histograms(tag)]]
    for tag in tags:  # every histogram of the finite steps is there
        assert [e.step for e in train.Histograms(tag)][:6] == list(range(6)), tag
    # At step 6 every gradient and every weight the NaN reached is skipped, and counted.
    assert board.skipped_histograms == len(tags) - len(written_at_6) > 0
    assert caplog.text.count("skipping histograms") == 1
    assert "step 6" in caplog.text


def test_non_finite_values_are_logged_quietly(tmp_path, make_trainer, make_data, caplog, recwarn):
    x, y = make_data(N)
    board = TensorBoard(log_dir=str(tmp_path / "tb"))
    trainer = make_trainer([_poison_at(2, 1e30), board], metrics=())
    trainer.fit(x, y, epochs=1, batch_size=BATCH)
    norms = [e.value for e in read(tmp_path / "tb" / "train").Scalars("step/grad_global_norm")]
    assert len(norms) == math.ceil(N / BATCH) and norms[2] > 1e29  # summed in float64: no overflow
    # Neither NumPy's overflow warning nor tensorboardX's unnamed "NaN or Inf" line is shown.
    assert not [r for r in caplog.records if "NaN or Inf found" in r.getMessage()]
    assert not [w for w in recwarn if "tensorboard.py" in w.filename]


def test_histograms_beyond_tensorboards_bins_are_skipped(tmp_path, make_trainer, make_data, caplog):
    x, y = make_data(N)
    board = TensorBoard(log_dir=str(tmp_path / "tb"), histogram_every_n_steps=1, log_grad_norm=False)
    trainer = make_trainer([_poison_at(2, 1e30), board], metrics=())
    with caplog.at_level("WARNING", logger="tapefit"):
        trainer.fit(x, y, epochs=1, batch_size=BATCH)
    kernel = next(p for p, _ in trainer.model.named_variables() if p.endswith("kernel"))
    steps = [e.step for e in read(tmp_path / "tb" / "train").Histograms(f"weights/{kernel}")]
    assert 2 not in steps and steps[:2] == [0, 1]
    assert board.skipped_histograms >= 1
    assert caplog.text.count("skipping histograms") == 1


def test_graph_is_written_once_and_changes_no_number_of_the_run(tmp_path, make_trainer, make_data):
    x, y = make_data(N)
    with_graph = make_trainer([TensorBoard(log_dir=str(tmp_path / "tb"))])
    with_graph.fit(x, y, epochs=2, batch_size=BATCH)
    without = make_trainer([TensorBoard(log_dir=str(tmp_path / "plain"), log_graph=False)])
    without.fit(x, y, epochs=2, batch_size=BATCH)
    # the same calls on the same shapes: the traced forward moved no weight and drew no number
    for key, value in without.model.state_dict().items():
        np.testing.assert_array_equal(with_graph.model.state_dict()[key], value)
    graph = read(tmp_path / "tb" / "train").Graph()
    names = [node.name for node in graph.node]
    root = with_graph.model.name
    first = f"{root}/{with_graph.model.layers[0].name}/"
    assert names[0] == "input" and any(name.startswith(first) for name in names)
    assert len(names) == len(set(names))
    assert not read(tmp_path / "plain" / "train").Tags()["graph"]


def test_train_resume_that_extends_epochs_shows_the_new_value_and_configured_rate(tmp_path, monkeypatch):
    from tapefit.cli import app as cli

    config = tmp_path / "run.yaml"
    config.write_text(
        "name: hp\nseed: 0\n"
        "data: {type: spirals, n_samples: 60, n_classes: 3}\n"
        "model: {type: mlp, hidden_units: [4]}\n"
        "loss: sparse_categorical_crossentropy\n"
        "optimizer: {type: sgd, learning_rate: 0.1}\n"
        "trainer: {epochs: 2, batch_size: 20}\n"
        "plugins:\n"
        "  - {type: tensorboard}\n"
        "  - {type: reduce_lr_on_plateau, monitor: loss, patience: 0, min_delta: 10.0}\n"
        "  - {type: checkpoint}\n"
    )
    monkeypatch.chdir(tmp_path)
    assert cli.main(["--config", str(config)]) == 0
    assert cli.main(["--config", str(config), "--resume", "auto", "--set", "trainer.epochs=3"]) == 0
    values, _, _ = session_hparams(tmp_path / "runs" / "hp" / "tensorboard")
    assert values["trainer.epochs"] == 3.0
    assert values["optimizer.learning_rate"] == pytest.approx(0.1)  # configured, not the cut rate
    assert values["plugins.1.type"] == "reduce_lr_on_plateau" and values["optimizer.type"] == "sgd"
    assert "epochs" not in values and "optimizer" not in values and "learning_rate" not in values


def test_each_optimizer_of_a_gan_has_its_learning_rate_and_its_hparams(tmp_path):
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from examples.gan import GAN

    tp.random.set_seed(0)
    model = GAN(features=4, latent_dim=2, units=4)
    schedule = tp.optimizers.schedules.PiecewiseConstantDecay([1, 2], [0.5, 0.25, 0.125])
    model.d_optimizer = tp.optimizers.Adam(schedule)
    board = TensorBoard(log_dir=str(tmp_path / "tb"))
    trainer = tp.Trainer(model, plugins=[board])  # no optimizer, no loss: the model's step has its own
    x = np.random.default_rng(0).normal(size=(12, 4)).astype(np.float32)
    trainer.fit(x, epochs=1, batch_size=3, verbose=0)
    train = read(tmp_path / "tb" / "train")
    tags = set(train.Tags()["scalars"])
    assert "step/loss" not in tags  # the step's logs have no loss of the batch
    rates = {tag: [e.value for e in train.Scalars(tag)] for tag in tags if tag.startswith("step/learning")}
    # Each read before the step's updates: the discriminator's update does not show its next rate.
    assert rates["step/learning_rate/d_optimizer"] == [0.5, 0.5, 0.25, 0.125]
    assert rates["step/learning_rate/g_optimizer"] == [pytest.approx(3e-4)] * 4
    assert rates["step/learning_rate"] == rates["step/learning_rate/d_optimizer"]  # the first one
    values, _, _ = session_hparams(tmp_path / "tb")
    assert values == {
        "trainer.epochs": 1.0,
        "trainer.batch_size": 3.0,
        "d_optimizer.type": "Adam",
        "d_optimizer.learning_rate": 0.125,
        "g_optimizer.type": "Adam",
        "g_optimizer.learning_rate": pytest.approx(3e-4),
    }
