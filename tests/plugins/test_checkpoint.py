"""Checkpoints: file format, digests, atomic writes under SIGKILL, the plugin, and exact resume."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import numpy as np
import pytest

import tapefit as tp
from tapefit.plugins.checkpoint import (
    Checkpoint,
    CheckpointError,
    atomic_write,
    latest_checkpoint,
    load_checkpoint,
    resolve_checkpoint,
    save_checkpoint,
)
from tapefit.plugins.terminate_on_nan import TerminateOnNaN

REPO = Path(__file__).resolve().parents[2]

# Shared by this process and the fresh processes that resume: same data, model, optimizer.
COMMON = textwrap.dedent(
    """
    import numpy as np
    import tapefit as tp

    rng = np.random.default_rng(0)
    X = rng.normal(size=(22, 4)).astype(np.float32)
    Y = (np.abs(X[:, 0] * 1.5 + X[:, 1]).astype(np.int64)) % 3
    XV = rng.normal(size=(7, 4)).astype(np.float32)
    YV = (np.abs(XV[:, 0] * 1.5 + XV[:, 1]).astype(np.int64)) % 3

    def build(plugins=()):
        tp.random.set_seed(0)
        model = tp.layers.Sequential(
            [tp.layers.Dense(8, activation="relu"), tp.layers.Dropout(0.3), tp.layers.Dense(3)]
        )
        return tp.Trainer(
            model,
            tp.optimizers.Adam(learning_rate=0.01),
            tp.losses.SparseCategoricalCrossentropy(from_logits=True),
            metrics=["accuracy"],
            plugins=list(plugins),
        )

    def fit(trainer, epochs, resume_from=None):
        return trainer.fit(X, Y, epochs=epochs, batch_size=5, validation_data=(XV, YV), resume_from=resume_from)
    """
)
ns: dict = {}
exec(COMMON, ns)
build, fit = ns["build"], ns["fit"]

RESUME_SCRIPT = COMMON + textwrap.dedent(
    """
    import json, sys
    source, out = sys.argv[1], sys.argv[2]
    trainer = build()
    history = fit(trainer, 4, resume_from=source)
    np.savez(out, **trainer.model.state_dict())
    with open(out + ".json", "w") as f:
        json.dump({"history": history.history, "epoch": history.epoch, "step": trainer.step}, f)
    """
)


def run_fresh_process(tmp_path: Path, source: Path) -> tuple[dict, dict]:
    """Resumes from ``source`` to 4 epochs in a new Python process; returns (weights, history info)."""
    script = tmp_path / "resume.py"
    script.write_text(RESUME_SCRIPT)
    out = tmp_path / "resumed.npz"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    subprocess.run([sys.executable, str(script), str(source), str(out)], check=True, env=env, timeout=120)
    with np.load(out) as f:
        weights = dict(f)
    return weights, json.loads(Path(str(out) + ".json").read_text())


@pytest.fixture(scope="module")
def reference():
    """Four epochs straight through: weights, history and step count."""
    trainer = build()
    history = fit(trainer, 4)
    return trainer.model.state_dict(), history, trainer.step


def assert_same_run(reference, weights, info):
    ref_weights, ref_history, ref_step = reference
    # Models built in one process get numbered names (dense_3/...): compare in variable order.
    assert len(weights) == len(ref_weights) == 4
    for (key, value), ref in zip(weights.items(), ref_weights.values()):
        assert value.dtype == ref.dtype
        np.testing.assert_array_equal(value, ref, err_msg=key)  # bit for bit
    assert info["history"] == ref_history.history
    assert info["epoch"] == ref_history.epoch == [0, 1, 2, 3]
    assert info["step"] == ref_step == 20


# -- exact resume --------------------------------------------------------------------------


def test_resume_after_two_epochs_in_a_fresh_process_is_bit_exact(tmp_path, reference):
    folder = tmp_path / "ckpt"
    first = build([Checkpoint(dirpath=str(folder))])
    fit(first, 2)
    assert load_checkpoint(folder)["trainer"]["epoch"] == 2
    # Sanity: the runs really differ by their randomness (dropout, shuffling) and weights.
    first_kernel = next(iter(first.model.state_dict().values()))
    ref_kernel = next(iter(reference[0].values()))
    assert not np.array_equal(first_kernel, ref_kernel)
    weights, info = run_fresh_process(tmp_path, folder)
    assert_same_run(reference, weights, info)


def test_resume_from_the_middle_of_an_epoch_is_bit_exact(tmp_path, reference):
    folder = tmp_path / "ckpt"

    class StopMidEpoch:
        @tp.hookimpl
        def on_train_batch_end(self, trainer, step):
            if step == 7:  # epoch 1, after its 3rd of 5 batches
                trainer.stop_training = True

    stopped = build([StopMidEpoch(), Checkpoint(dirpath=str(folder), every_n_epochs=None)])
    fit(stopped, 4)
    contents = load_checkpoint(folder)
    assert (
        contents["trainer"]["epoch"],
        contents["trainer"]["batch_in_epoch"],
        contents["trainer"]["step"],
    ) == (1, 3, 8)
    weights, info = run_fresh_process(tmp_path, folder)
    assert_same_run(reference, weights, info)


def test_a_fit_stopped_in_the_middle_of_an_epoch_resumes_exactly_with_stateful_plugins(tmp_path):
    # The stopped fit's partial epoch still runs on_epoch_end (as in Keras): here it cut the
    # learning rate and counted a plateau, and the checkpoint saved at fit end kept both, so the
    # resumed epoch ran at the cut rate. The stop step is saved before those hooks run.
    def plugins():
        return [
            {"type": "reduce_lr_on_plateau", "monitor": "loss", "patience": 0, "min_delta": 9.0},
            {"type": "early_stopping", "monitor": "loss", "patience": 9, "min_delta": 9.0},
        ]

    class StopMidEpoch:
        @tp.hookimpl
        def on_train_batch_end(self, trainer, step):
            if step == 7:
                trainer.stop_training = True

    straight = build(plugins())
    fit(straight, 4)
    folder = tmp_path / "ckpt"
    fit(build([*plugins(), StopMidEpoch(), Checkpoint(dirpath=str(folder), every_n_epochs=None)]), 4)
    resumed = build(plugins())
    fit(resumed, 4, resume_from=folder)
    assert resumed.history.history == straight.history.history
    for key, value in straight.optimizer.get_state().items():
        np.testing.assert_array_equal(resumed.optimizer.get_state()[key], value, err_msg=key)
    assert resumed.plugins.state_dicts() == straight.plugins.state_dicts()


STATEFUL = [
    {"type": "reduce_lr_on_plateau", "monitor": "loss", "patience": 0, "min_delta": 9.0},
    {"type": "early_stopping", "monitor": "loss", "patience": 9, "min_delta": 9.0},
]


def assert_same_state(resumed, straight):
    """Same history, weights, optimizer state (the cut learning rate) and plugin states."""
    assert resumed.history.history == straight.history.history
    for key, value in straight.model.state_dict().items():
        np.testing.assert_array_equal(resumed.model.state_dict()[key], value, err_msg=key)
    for key, value in straight.optimizer.get_state().items():
        np.testing.assert_array_equal(resumed.optimizer.get_state()[key], value, err_msg=key)
    assert resumed.plugins.state_dicts() == straight.plugins.state_dicts()


@pytest.mark.parametrize("first", [True, False], ids=["checkpoint-first", "checkpoint-last"])
def test_epoch_checkpoints_resume_exactly_whatever_the_plugin_order(tmp_path, first):
    # The checkpoint is written after every plugin's on_epoch_end (the on_save_point hook), so a
    # learning-rate cut made by a plugin that runs after it is in the file either way.
    straight = build(STATEFUL)
    fit(straight, 4)
    folder = tmp_path / "ckpt"
    checkpoint = Checkpoint(dirpath=str(folder))
    fit(build([checkpoint, *STATEFUL] if first else [*STATEFUL, checkpoint]), 2)
    resumed = build(STATEFUL)
    fit(resumed, 4, resume_from=folder / "epoch0001-step00000010.npz")
    assert_same_state(resumed, straight)


@pytest.mark.parametrize("hook", ["on_validation_end", "on_epoch_end"])
def test_an_exception_in_the_epoch_end_hooks_saves_the_state_before_them(tmp_path, hook):
    # reduce_lr_on_plateau has cut the rate and counted the plateau when the failing plugin
    # raises: the interrupted checkpoint is the state before the epoch's end, and the resume
    # runs the epoch's validation and every epoch-end hook again.
    folder = tmp_path / "ckpt"

    class Fail:
        @tp.hookimpl
        def on_validation_end(self, epoch):
            if hook == "on_validation_end" and epoch == 1:
                raise RuntimeError("disk on fire")

        @tp.hookimpl
        def on_epoch_end(self, epoch):
            if hook == "on_epoch_end" and epoch == 1:
                raise RuntimeError("disk on fire")

    straight = build(STATEFUL)
    fit(straight, 4)
    failing = build([*STATEFUL, Fail(), Checkpoint(dirpath=str(folder))])
    with pytest.raises(RuntimeError, match="disk on fire"):
        fit(failing, 4)
    saved = load_checkpoint(folder / "interrupted.npz")["trainer"]
    assert (saved["epoch"], saved["batch_in_epoch"], saved["in_epoch"], saved["step"]) == (1, 5, True, 10)
    resumed = build(STATEFUL)
    fit(resumed, 4, resume_from=folder)
    assert_same_state(resumed, straight)


def test_every_n_steps_checkpoints_resume_exactly(tmp_path, reference):
    folder = tmp_path / "ckpt"
    fit(build([Checkpoint(dirpath=str(folder), every_n_steps=3, every_n_epochs=None)]), 4)
    saved = sorted(p.name for p in folder.glob("*.npz"))
    assert saved[:3] == [
        "epoch0000-step00000003.npz",
        "epoch0001-step00000006.npz",
        "epoch0001-step00000009.npz",
    ]
    # Step 9: epoch 1, 4 of 5 batches done; resumed here in this process.
    trainer = build()
    history = fit(trainer, 4, resume_from=folder / "epoch0001-step00000009.npz")
    assert_same_run(
        reference,
        trainer.model.state_dict(),
        {"history": history.history, "epoch": history.epoch, "step": trainer.step},
    )


# Step 10 is the first batch of epoch 2: its shuffled order was drawn, no batch of it ran yet.
@pytest.mark.parametrize("at_step", [12, 10])
@pytest.mark.parametrize("error", [RuntimeError("disk on fire"), KeyboardInterrupt()])
def test_exception_saves_an_interrupted_checkpoint_that_resumes(tmp_path, reference, error, at_step):
    folder = tmp_path / "ckpt"
    seen = []

    class Fail:
        @tp.hookimpl
        def on_train_batch_start(self, step):
            if step == at_step:
                raise error

        @tp.hookimpl
        def on_exception(self, exception):
            seen.append(exception)

    csv = tp.plugins.create_plugin({"type": "csv_logger", "filename": str(tmp_path / "h.csv")})
    board = tp.plugins.create_plugin({"type": "tensorboard", "log_dir": str(tmp_path / "tb")})
    trainer = build([Fail(), csv, board, Checkpoint(dirpath=str(folder))])
    with pytest.raises(type(error)):
        fit(trainer, 4)
    assert seen == [error]
    assert csv._file is None and board._writers == {}  # files closed
    assert (folder / "last").read_text().strip() == "interrupted.npz"
    assert load_checkpoint(folder)["trainer"]["step"] == at_step
    resumed = build()
    history = fit(resumed, 4, resume_from=folder)
    assert_same_run(
        reference,
        resumed.model.state_dict(),
        {"history": history.history, "epoch": history.epoch, "step": resumed.step},
    )


@pytest.mark.parametrize("hook", ["transform_gradients", "loss"])
def test_an_exception_inside_a_step_saves_the_state_before_it(tmp_path, reference, hook):
    # Raised after the forward pass drew its dropout mask (and, for "loss", while the tape
    # records): the interrupted checkpoint must hold the state before the step, or the
    # resumed step draws another mask.
    folder = tmp_path / "ckpt"

    class Fail:
        @tp.hookimpl
        def transform_gradients(self, step):
            if hook == "transform_gradients" and step == 7:
                raise RuntimeError("disk on fire")

    trainer = build([Fail(), Checkpoint(dirpath=str(folder))])
    if hook == "loss":
        original = trainer.loss

        def failing(y_true, y_pred, **kwargs):
            if trainer.step == 7:
                raise RuntimeError("disk on fire")
            return original(y_true, y_pred, **kwargs)

        trainer.loss = failing
    with pytest.raises(RuntimeError, match="disk on fire"):
        fit(trainer, 4)
    assert load_checkpoint(folder)["trainer"]["step"] == 7
    resumed = build()
    history = fit(resumed, 4, resume_from=folder)
    assert_same_run(
        reference,
        resumed.model.state_dict(),
        {"history": history.history, "epoch": history.epoch, "step": resumed.step},
    )


class _Counter:
    """A third-party plugin whose state moves in a step's and an epoch's hooks."""

    def __init__(self, style):
        self.style, self.steps, self.epochs = style, 0, 0

    @tp.hookimpl
    def on_train_batch_start(self, step):
        self.steps += 1

    @tp.hookimpl
    def on_epoch_end(self, trainer, logs):
        self.epochs += 1
        logs["counted"] = float(self.steps * 100 + self.epochs)

    def _state(self):
        return {"steps": self.steps, "epochs": self.epochs}

    def _load(self, state):
        self.steps, self.epochs = int(state["steps"]), int(state["epochs"])


class _DictCounter(_Counter):
    def state_dict(self):
        return self._state()

    def load_state_dict(self, state):
        self._load(state)


class _HookCounter(_Counter):
    @tp.hookimpl
    def on_save_checkpoint(self, trainer, checkpoint):
        checkpoint["plugins"][trainer.plugins.get_name(self)] = self._state()

    @tp.hookimpl
    def on_load_checkpoint(self, trainer, checkpoint):
        self._load(checkpoint["plugins"][trainer.plugins.get_name(self)])


@pytest.mark.parametrize("style", [_DictCounter, _HookCounter], ids=["state_dict", "hooks"])
@pytest.mark.parametrize("where", ["transform_gradients", "on_epoch_end"])
def test_an_exception_saves_the_plugins_states_from_the_same_boundary(tmp_path, style, where):
    # The interrupted checkpoint puts the model, the data and the generators back to the
    # state before the failed step or epoch end: a plugin's own state must come from there
    # too, or the resumed run counts the step or the epoch twice.
    folder = tmp_path / "ckpt"

    class Fail:
        @tp.hookimpl
        def transform_gradients(self, step):
            if where == "transform_gradients" and step == 7:
                raise RuntimeError("disk on fire")

        @tp.hookimpl
        def on_epoch_end(self, epoch):
            if where == "on_epoch_end" and epoch == 1:
                raise RuntimeError("disk on fire")

    straight = build([style("straight")])
    fit(straight, 4)
    # Hooks run in list order: the counter has counted when Fail raises.
    failing = build([style("failing"), Fail(), Checkpoint(dirpath=str(folder))])
    with pytest.raises(RuntimeError, match="disk on fire"):
        fit(failing, 4)
    resumed = build([style("resumed")])
    fit(resumed, 4, resume_from=folder)
    assert resumed.history.history == straight.history.history
    for key, value in straight.model.state_dict().items():
        np.testing.assert_array_equal(resumed.model.state_dict()[key], value, err_msg=key)


class _BatchEndCounter:
    """Counts the steps it saw end, in its state and in the epoch logs."""

    def __init__(self):
        self.ends = 0

    @tp.hookimpl
    def on_train_batch_end(self):
        self.ends += 1

    @tp.hookimpl
    def on_epoch_end(self, logs):
        logs["ends"] = float(self.ends)

    def state_dict(self):
        return {"ends": self.ends}

    def load_state_dict(self, state):
        self.ends = int(state["ends"])


def test_a_ctrl_c_inside_a_step_waits_for_every_plugins_batch_end(tmp_path):
    # The Ctrl-C arrives during the forward pass: it is raised once the step and every
    # on_train_batch_end hook have run, so the checkpoint is the state after the whole step.
    folder = tmp_path / "ckpt"
    straight = build([_BatchEndCounter()])
    fit(straight, 4)
    failing = build([_BatchEndCounter(), Checkpoint(dirpath=str(folder))])
    original = failing.loss

    def loss_with_ctrl_c(y_true, y_pred, **kwargs):
        if failing.step == 7:
            os.kill(os.getpid(), signal.SIGINT)
        return original(y_true, y_pred, **kwargs)

    failing.loss = loss_with_ctrl_c
    with pytest.raises(KeyboardInterrupt):
        fit(failing, 4)
    assert load_checkpoint(folder)["trainer"]["step"] == 8
    resumed = build([_BatchEndCounter()])
    fit(resumed, 4, resume_from=folder)
    assert resumed.history.history == straight.history.history


def test_an_exception_in_the_batch_end_hooks_saves_no_half_seen_step(tmp_path, caplog):
    # The failing plugin runs first: the counter after it never sees step 7 end. No state is
    # whole there, so no interrupted checkpoint is written; `last` stays on the epoch before,
    # which resumes exactly.
    folder = tmp_path / "ckpt"

    class Fail:
        @tp.hookimpl
        def on_train_batch_end(self, step):
            if step == 7:
                raise RuntimeError("disk on fire")

    straight = build([_BatchEndCounter()])
    fit(straight, 4)
    failing = build([Fail(), _BatchEndCounter(), Checkpoint(dirpath=str(folder))])
    with pytest.raises(RuntimeError, match="disk on fire"), caplog.at_level("WARNING"):
        fit(failing, 4)
    assert not (folder / "interrupted.npz").exists()
    assert "no interrupted checkpoint is saved" in caplog.text
    assert load_checkpoint(folder)["trainer"]["step"] == 5
    resumed = build([_BatchEndCounter()])
    fit(resumed, 4, resume_from=folder)
    assert resumed.history.history == straight.history.history


def test_resume_with_a_different_batch_size_is_refused(tmp_path):
    folder = tmp_path / "ckpt"
    fit(build([Checkpoint(dirpath=str(folder))]), 1)
    trainer = build()
    with pytest.raises(ValueError, match=r"cannot resume.*'batch_size': 5.*'batch_size': 4"):
        trainer.fit(ns["X"], ns["Y"], epochs=2, batch_size=4, resume_from=folder)


def test_resume_with_a_different_drop_last_is_refused(tmp_path):
    folder = tmp_path / "ckpt"
    fit(build([Checkpoint(dirpath=str(folder))]), 1)
    trainer = build()
    with pytest.raises(ValueError, match=r"cannot resume.*'drop_last': False.*'drop_last': True"):
        trainer.fit(ns["X"], ns["Y"], epochs=2, batch_size=5, resume_from=folder, drop_last=True)


def test_resume_past_the_last_epoch_trains_nothing(tmp_path):
    folder = tmp_path / "ckpt"
    first = build([Checkpoint(dirpath=str(folder))])
    fit(first, 2)
    again = build()
    history = fit(again, 2, resume_from=folder)
    assert again.step == 10 and history.epoch == [0, 1]


class _ScaledByVariable(tp.Module):
    """A lazy Dense next to a Variable made in __init__: the model has variables before its first call."""

    def __init__(self):
        super().__init__()
        self.dense = tp.layers.Dense(2)
        self.temperature = tp.Variable(1.5, name="temperature")

    def call(self, x):
        return self.dense(x) * self.temperature


def test_resume_builds_lazy_layers_of_a_model_that_already_has_variables(tmp_path):
    # The trainer built the model before loading only when it had no variables at all, so the
    # Dense here stayed unbuilt and the checkpoint's dense/kernel was "unexpected".
    x, y = np.ones((6, 3), np.float32), np.ones((6, 2), np.float32)
    first = tp.Trainer(_ScaledByVariable(), "adam", "mse", plugins=[Checkpoint(dirpath=str(tmp_path))])
    first.fit(x, y, epochs=1, batch_size=3)
    fresh = _ScaledByVariable()
    again = tp.Trainer(fresh, "adam", "mse")
    again.fit(x, y, epochs=1, batch_size=3, resume_from=tmp_path)
    for mine, theirs in zip(fresh.variables, first.model.variables):
        np.testing.assert_array_equal(mine.numpy(), theirs.numpy())


class _HookState:
    """Keeps its state through the checkpoint hooks, as hookspecs.py says: under its registered name."""

    def __init__(self):
        self.count = 0

    @tp.hookimpl
    def on_train_batch_end(self):
        self.count += 1

    @tp.hookimpl
    def on_save_checkpoint(self, trainer, checkpoint):
        checkpoint["plugins"][trainer.plugins.get_name(self)] = {"count": self.count}

    @tp.hookimpl
    def on_load_checkpoint(self, trainer, checkpoint):
        self.count = int(checkpoint["plugins"][trainer.plugins.get_name(self)]["count"])


def test_the_documented_checkpoint_hook_pattern_resumes_without_a_warning(tmp_path, caplog):
    fit(build([_HookState(), Checkpoint(dirpath=str(tmp_path))]), 2)
    plugin = _HookState()
    fit(build([plugin, Checkpoint(dirpath=str(tmp_path))]), 3, resume_from=tmp_path)
    assert plugin.count == 15
    assert "not registered" not in caplog.text


# -- file format -------------------------------------------------------------------------


def test_round_trip_of_nested_contents(tmp_path):
    contents = {
        "a": np.arange(6, dtype=np.float32).reshape(2, 3),
        "nested": {"ints": np.array([1, 2], np.int64), "flag": np.bool_(True), "none": None},
        "list": [1, 2.5, "x", np.float32(0.5), [np.zeros(0)]],
        "big": 2**100,
        "nan": float("nan"),
    }
    path = save_checkpoint(tmp_path / "c.npz", contents)
    back = load_checkpoint(path)
    np.testing.assert_array_equal(back["a"], contents["a"])
    assert back["a"].dtype == np.float32
    assert back["nested"]["ints"].dtype == np.int64
    assert back["nested"]["flag"] is True and back["nested"]["none"] is None
    assert back["list"][:3] == [1, 2.5, "x"]
    assert back["list"][3].dtype == np.float32 and back["list"][3] == 0.5
    assert back["list"][4][0].shape == (0,)
    assert back["big"] == 2**100 and np.isnan(back["nan"])
    # It is a plain npz whose members load without pickle.
    with np.load(path, allow_pickle=False) as npz:
        assert "a" in npz.files and "__metadata__" in npz.files


def test_zero_dimensional_arrays_and_numpy_scalars_keep_their_shape(tmp_path):
    # A scalar Variable's value, an optimizer slot of one, or a plugin's best = np.min(...):
    # each came back with shape (1,), so a model with a scalar Variable could not resume.
    contents = {
        "scalar": np.array(2.5, np.float32),
        "np_scalar": np.int64(3),
        "state": {"best": np.float64(0.25)},
    }
    back = load_checkpoint(save_checkpoint(tmp_path / "c.npz", contents))
    assert back["scalar"].shape == () and back["scalar"].dtype == np.float32 and back["scalar"] == 2.5
    assert back["np_scalar"].shape == () and back["np_scalar"].dtype == np.int64 and back["np_scalar"] == 3
    assert back["state"]["best"].shape == () and back["state"]["best"] == 0.25


def test_unstorable_values_are_refused_by_name(tmp_path):
    with pytest.raises(TypeError, match=r"'plugins/x/fn': cannot store a function"):
        save_checkpoint(tmp_path / "c.npz", {"plugins": {"x": {"fn": lambda: 0}}})
    with pytest.raises(TypeError, match="cannot store arrays of dtype object"):
        save_checkpoint(tmp_path / "c.npz", {"a": np.array([None, 1], dtype=object)})
    assert not list(tmp_path.iterdir())


def test_truncated_checkpoint_is_refused_naming_the_file(tmp_path):
    path = save_checkpoint(tmp_path / "c.npz", {"w": np.arange(1000, dtype=np.float32)})
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match=re.escape(str(path)) + ".*truncated or corrupted"):
        load_checkpoint(path)


def test_flipped_byte_is_refused_naming_the_file(tmp_path):
    path = save_checkpoint(tmp_path / "c.npz", {"w": np.arange(1000, dtype=np.float32)})
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match=re.escape(str(path))):
        load_checkpoint(path)


def test_digest_mismatch_is_refused(tmp_path):
    # A well-formed zip whose array was changed after the digest was taken.
    path = save_checkpoint(tmp_path / "c.npz", {"w": np.arange(10, dtype=np.float32)})
    with np.load(path) as npz:
        members = dict(npz)
    members["w"] = members["w"] + 1
    tampered = tmp_path / "t.npz"
    np.savez(tampered, **members)
    with pytest.raises(CheckpointError, match=re.escape(str(tampered)) + ".*digest does not match"):
        load_checkpoint(tampered)


def test_other_files_are_not_checkpoints(tmp_path):
    np.savez(tmp_path / "plain.npz", a=np.zeros(2))
    with pytest.raises(CheckpointError, match="not a tapefit checkpoint"):
        load_checkpoint(tmp_path / "plain.npz")
    (tmp_path / "text.npz").write_text("hello")
    with pytest.raises(CheckpointError, match=r"text\.npz: not a tapefit checkpoint") as info:
        load_checkpoint(tmp_path / "text.npz")
    assert "pickle" not in str(info.value)
    (tmp_path / "empty.npz").write_bytes(b"")
    with pytest.raises(CheckpointError, match=r"empty\.npz: the file is empty \(a truncated checkpoint\)"):
        load_checkpoint(tmp_path / "empty.npz")


def test_resolve_and_latest(tmp_path):
    assert latest_checkpoint(tmp_path) is None
    with pytest.raises(FileNotFoundError, match="without a 'last' pointer"):
        resolve_checkpoint(tmp_path)
    path = save_checkpoint(tmp_path / "a.npz", {"x": 1})
    (tmp_path / "last").write_text("a.npz\n")
    assert resolve_checkpoint(tmp_path) == path == latest_checkpoint(tmp_path)
    assert resolve_checkpoint(tmp_path / "a") == path
    (tmp_path / "last").write_text("gone.npz\n")
    with pytest.raises(CheckpointError, match=r"names 'gone\.npz'"):
        resolve_checkpoint(tmp_path)


def test_atomic_write_keeps_the_old_file_when_writing_fails(tmp_path):
    path = tmp_path / "f.bin"
    path.write_bytes(b"old")

    def failing(f):
        f.write(b"partial new contents")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        atomic_write(path, failing)
    assert path.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["f.bin"]


@pytest.mark.skipif(os.name != "posix", reason="POSIX permission bits")
def test_atomic_write_gives_the_permissions_of_a_plain_write(tmp_path):
    old = os.umask(0o022)
    try:
        atomic_write(tmp_path / "new.bin", lambda f: f.write(b"new"))
    finally:
        os.umask(old)
    # mkstemp's 0600 made checkpoints, pointers and a rewritten history.csv private to the owner.
    assert (tmp_path / "new.bin").stat().st_mode & 0o777 == 0o644


KILL_SCRIPT = COMMON + textwrap.dedent(
    """
    import sys, time
    from tapefit.plugins import checkpoint as ck

    folder, where = sys.argv[1], sys.argv[2]

    class SlowFile:
        # Passes writes through, and stops for good after the first chunk of array data.
        def __init__(self, f):
            self.f, self.written = f, 0
        def write(self, data):
            n = self.f.write(data)
            self.written += len(data)
            if self.written > 2000:
                self.f.flush()
                print("WRITING", flush=True)
                time.sleep(600)
            return n
        def __getattr__(self, name):
            return getattr(self.f, name)

    class Stall:
        @tp.hookimpl
        def on_train_batch_end(self, step):
            if step != 1:
                return
            if where == "mid_write":
                from tapefit.checkpointing import format as checkpointing

                original = checkpointing._write_npz
                checkpointing._write_npz = lambda f, members: original(SlowFile(f), members)
            else:
                def stalled_pointer(folder, name, target):
                    print("RENAMED", flush=True)
                    time.sleep(600)
                ck.write_pointer = stalled_pointer

    trainer = build([Stall(), ck.Checkpoint(dirpath=folder, every_n_steps=1)])
    fit(trainer, 4)
    """
)


@pytest.mark.parametrize(("where", "signal_line"), [("mid_write", "WRITING"), ("before_pointer", "RENAMED")])
def test_sigkill_while_saving_leaves_the_previous_checkpoint_and_last_intact(tmp_path, where, signal_line):
    folder = tmp_path / "ckpt"
    script = tmp_path / "kill.py"
    script.write_text(KILL_SCRIPT)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    process = subprocess.Popen(
        [sys.executable, str(script), str(folder), where], stdout=subprocess.PIPE, text=True, env=env
    )
    try:
        line = process.stdout.readline().strip()
        assert line == signal_line
        os.kill(process.pid, signal.SIGKILL)
        process.wait(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == -signal.SIGKILL
    first, second = "epoch0000-step00000001.npz", "epoch0000-step00000002.npz"
    assert (folder / "last").read_text().strip() == first
    assert load_checkpoint(folder)["trainer"]["step"] == 1
    leftovers = list(folder.glob(".*.tmp"))
    if where == "mid_write":
        assert not (folder / second).exists()
        assert len(leftovers) == 1 and leftovers[0].name.startswith(f".{second}.")
        with pytest.raises(CheckpointError):  # the half-written file really is incomplete
            load_checkpoint(leftovers[0])
    else:
        assert load_checkpoint(folder / second)["trainer"]["step"] == 2  # complete, just not pointed at
    # Resuming works, and the next run clears what the killed writer left.
    trainer = build([Checkpoint(dirpath=str(folder), every_n_epochs=None)])
    fit(trainer, 1, resume_from=folder)
    assert trainer.step == 5
    assert not list(folder.glob(".*.tmp"))


# -- the plugin's policies ---------------------------------------------------------------------


def test_keep_last_deletes_the_oldest(tmp_path):
    folder = tmp_path / "ckpt"
    fit(build([Checkpoint(dirpath=str(folder), keep_last=2)]), 4)
    assert sorted(p.name for p in folder.glob("*.npz")) == [
        "epoch0002-step00000015.npz",
        "epoch0003-step00000020.npz",
    ]
    assert (folder / "last").read_text().strip() == "epoch0003-step00000020.npz"


def test_keep_last_holds_across_a_resume(tmp_path):
    folder = tmp_path / "ckpt"
    fit(build([Checkpoint(dirpath=str(folder), keep_last=2)]), 2)
    # The checkpoint lists itself among the files saved, so the resumed fit deletes it in turn.
    assert load_checkpoint(folder)["plugins"]["checkpoint"]["saved"] == [
        "epoch0000-step00000005.npz",
        "epoch0001-step00000010.npz",
    ]
    fit(build([Checkpoint(dirpath=str(folder), keep_last=2)]), 4, resume_from=folder)
    assert sorted(p.name for p in folder.glob("*.npz")) == [
        "epoch0002-step00000015.npz",
        "epoch0003-step00000020.npz",
    ]


@pytest.mark.parametrize("mode", ["min", "max"])
def test_best_only_on_a_monitored_key(tmp_path, mode):
    folder = tmp_path / "ckpt"
    scores = [3.0, 1.0, 2.0, 0.5]

    class Score:
        @tp.hookimpl
        def on_epoch_end(self, epoch, logs):
            logs["score"] = scores[epoch]

    plugin = Checkpoint(dirpath=str(folder), monitor="score", mode=mode, save_best_only=True)
    fit(build([Score(), plugin]), 4)
    improved = [0, 1, 3] if mode == "min" else [0]
    steps = [5 * (e + 1) for e in improved]
    names = [f"epoch{e:04d}-step{s:08d}.npz" for e, s in zip(improved, steps)]
    assert sorted(p.name for p in folder.glob("*.npz")) == names
    assert (folder / "best").read_text().strip() == names[-1]
    assert plugin.best_value == (0.5 if mode == "min" else 3.0)
    assert load_checkpoint(folder / names[-1])["plugins"]["checkpoint"]["best_value"] == plugin.best_value


def test_keep_last_never_deletes_the_best(tmp_path):
    folder = tmp_path / "ckpt"

    class Score:
        @tp.hookimpl
        def on_epoch_end(self, epoch, logs):
            logs["score"] = [0.1, 1.0, 2.0, 3.0][epoch]

    fit(build([Score(), Checkpoint(dirpath=str(folder), monitor="score", mode="min", keep_last=1)]), 4)
    assert sorted(p.name for p in folder.glob("*.npz")) == [
        "epoch0000-step00000005.npz",
        "epoch0003-step00000020.npz",
    ]


def test_non_finite_weights_are_never_saved(tmp_path, caplog):
    folder = tmp_path / "ckpt"

    class Poison:
        @tp.hookimpl
        def on_train_batch_end(self, trainer, step):
            if step == 6:
                kernel = trainer.model.trainable_variables[0]
                kernel.assign(np.full(kernel.shape, np.nan, np.float32))

    fit(build([Poison(), Checkpoint(dirpath=str(folder), every_n_steps=1, every_n_epochs=None)]), 2)
    assert (folder / "last").read_text().strip() == "epoch0001-step00000006.npz"
    assert "non-finite weights" in caplog.text
    assert "the last good checkpoint stays" in caplog.text


def test_a_state_after_a_non_finite_loss_is_never_saved(tmp_path, caplog):
    folder = tmp_path / "ckpt"

    class InfiniteLoss:
        # The loss log says inf at step 7 (index 6) while the weights stay finite.
        @tp.hookimpl(tryfirst=True)
        def on_train_batch_end(self, step, logs):
            if step == 6:
                logs["loss"] = float("inf")

    trainer = build(
        [
            InfiniteLoss(),
            TerminateOnNaN(),
            Checkpoint(dirpath=str(folder), every_n_steps=4, every_n_epochs=None),
        ]
    )
    fit(trainer, 3)
    assert trainer.step == 7
    assert all(np.isfinite(v.numpy()).all() for v in trainer.model.variables)
    assert (folder / "last").read_text().strip() == "epoch0000-step00000004.npz"
    assert sorted(p.name for p in folder.glob("*.npz")) == ["epoch0000-step00000004.npz"]
    assert "the loss of step 6 was inf" in caplog.text


def test_argument_errors():
    with pytest.raises(ValueError, match="save_best_only=True needs a monitor"):
        Checkpoint(save_best_only=True)
    with pytest.raises(ValueError, match="keep_last must be a positive integer"):
        Checkpoint(keep_last=0)
    with pytest.raises(ValueError, match="mode must be"):
        Checkpoint(monitor="val_loss", mode="lowest")
    with pytest.raises(ValueError, match="mode must be"):
        Checkpoint(mode="lowest")


def test_default_folder_is_under_output_dir(tmp_path):
    trainer = build([Checkpoint()])
    trainer.output_dir = tmp_path / "run"
    fit(trainer, 1)
    assert (tmp_path / "run" / "checkpoints" / "last").is_file()


def test_config_and_plugin_states_are_in_the_checkpoint(tmp_path):
    folder = tmp_path / "ckpt"

    class Stateful:
        plugin_name = "stateful"

        def state_dict(self):
            return {"seen": np.arange(3)}

        def load_state_dict(self, state):
            self.loaded = state

    trainer = build([Stateful(), Checkpoint(dirpath=str(folder))])
    trainer.config = {"name": "demo", "optimizer": {"type": "adam"}}
    fit(trainer, 1)
    contents = load_checkpoint(folder)
    assert contents["config"] == {"name": "demo", "optimizer": {"type": "adam"}}
    np.testing.assert_array_equal(contents["plugins"]["stateful"]["seen"], np.arange(3))
    assert contents["optimizer"]["iterations"] == 5
    assert set(contents["random"]) == {"seed", "main", "by_op_seed"}
    resumed_plugin = Stateful()
    fit(build([resumed_plugin]), 2, resume_from=folder)
    np.testing.assert_array_equal(resumed_plugin.loaded["seen"], np.arange(3))


def test_npz_member_names_are_readable(tmp_path):
    path = save_checkpoint(tmp_path / "c.npz", {"model": {"dense/kernel": np.zeros(2)}})
    with zipfile.ZipFile(path) as zf:
        assert "model/dense/kernel.npy" in zf.namelist()


def test_no_interrupted_checkpoint_when_the_fit_never_started(tmp_path):
    folder = tmp_path / "ckpt"
    plugin = Checkpoint(dirpath=str(folder))
    fit(build([plugin]), 1)  # a first fit, so the plugin has run before

    class FailAtStart:
        @tp.hookimpl
        def on_fit_start(self):
            raise RuntimeError("cannot start")

    with pytest.raises(RuntimeError, match="cannot start"):
        fit(build([FailAtStart(), plugin]), 2)
    assert not (folder / "interrupted.npz").exists()
    assert (folder / "last").read_text().strip() == "epoch0000-step00000005.npz"


@pytest.mark.parametrize("hook", ["on_fit_start", "on_load_checkpoint"])
def test_a_resume_that_fails_to_start_keeps_last_and_the_plugin_states(tmp_path, hook):
    folder = tmp_path / "ckpt"
    stopper = {"type": "early_stopping", "monitor": "val_loss", "patience": 5}
    fit(build([Checkpoint(dirpath=str(folder)), stopper]), 2)
    saved = load_checkpoint(folder)["plugins"]

    class FailLate:
        # Runs after the checkpoint plugin started, before the plugins' states are loaded.
        @tp.hookimpl(trylast=True)
        def on_fit_start(self):
            if hook == "on_fit_start":
                raise RuntimeError("cannot start")

        @tp.hookimpl
        def on_load_checkpoint(self):
            if hook == "on_load_checkpoint":
                raise RuntimeError("cannot start")

    with pytest.raises(RuntimeError, match="cannot start"):
        fit(build([Checkpoint(dirpath=str(folder)), stopper, FailLate()]), 4, resume_from=folder)
    assert not (folder / "interrupted.npz").exists()
    assert (folder / "last").read_text().strip() == "epoch0001-step00000010.npz"
    assert load_checkpoint(folder)["plugins"] == saved


def test_a_failed_write_leaves_the_saved_list_as_it_was(tmp_path, monkeypatch):
    plugin = Checkpoint(dirpath=str(tmp_path / "ckpt"), every_n_steps=1, every_n_epochs=None)

    class DiskFullFromTheThirdStep:
        @tp.hookimpl
        def on_train_batch_start(self, step):
            if step == 2:
                monkeypatch.setattr(
                    "tapefit.plugins.checkpoint.save_checkpoint",
                    lambda *a: (_ for _ in ()).throw(OSError("disk full")),
                )

    with pytest.raises(OSError, match="disk full"):
        fit(build([DiskFullFromTheThirdStep(), plugin]), 1)
    assert plugin.saved == ["epoch0000-step00000001.npz", "epoch0000-step00000002.npz"]
