"""Trainer(compile=True) and trainer: {compile: true}: the same run as eager, bit for bit."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import numpy as np
import pytest

import tapefit as tp
from tapefit.cli import app as cli
from tapefit.plugins.checkpoint import Checkpoint, load_checkpoint
from tapefit.plugins.clip_gradients import ClipGradients

REPO = Path(__file__).resolve().parents[2]

COMMON = textwrap.dedent(
    """
    import numpy as np
    import tapefit as tp

    rng = np.random.default_rng(0)
    X = rng.normal(size=(22, 4)).astype(np.float32)
    Y = (np.abs(X[:, 0] * 1.5 + X[:, 1]).astype(np.int64)) % 3

    def build(compile, plugins=()):
        tp.random.set_seed(0)
        model = tp.layers.Sequential(
            [
                tp.layers.Dense(8, activation="relu"),
                tp.layers.BatchNormalization(),
                tp.layers.Dropout(0.3),
                tp.layers.Dense(3),
            ]
        )
        schedule = tp.optimizers.schedules.ExponentialDecay(0.02, 3, 0.7)
        return tp.Trainer(
            model,
            tp.optimizers.Adam(learning_rate=schedule),
            tp.losses.SparseCategoricalCrossentropy(from_logits=True),
            metrics=["accuracy"],
            plugins=list(plugins),
            compile=compile,
        )

    def fit(trainer, epochs, resume_from=None):
        return trainer.fit(X, Y, epochs=epochs, batch_size=5, validation_data=(X[:7], Y[:7]), resume_from=resume_from)
    """
)
ns: dict = {}
exec(COMMON, ns)
build, fit = ns["build"], ns["fit"]

RESUME_SCRIPT = COMMON + textwrap.dedent(
    """
    import json, sys
    source, out = sys.argv[1], sys.argv[2]
    trainer = build(compile=True)
    history = fit(trainer, 4, resume_from=source)
    np.savez(out, *[v.numpy() for v in trainer.model.variables])
    with open(out + ".json", "w") as f:
        json.dump({"history": history.history, "step": trainer.step}, f)
    """
)


def _weights(trainer):
    return [v.numpy() for v in trainer.model.variables]


def test_compiled_fit_equals_eager_fit_with_clipping_bit_for_bit():
    runs = []
    for compile in (False, True):
        trainer = build(compile, [ClipGradients(global_norm=0.5)])
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # no fallback to eager
            history = fit(trainer, 3)
        runs.append((history.history, _weights(trainer), trainer.optimizer.get_state()))
    (h_eager, w_eager, o_eager), (h_compiled, w_compiled, o_compiled) = runs
    assert h_eager == h_compiled
    for a, b in zip(w_eager, w_compiled):
        np.testing.assert_array_equal(a, b)
    for key in o_eager:
        np.testing.assert_array_equal(o_eager[key], o_compiled[key], err_msg=key)
    # The step was replayed: one program per batch shape (5 and the last batch of 2).
    assert trainer._compiled_step.experimental_get_tracing_count() == 2


def test_a_compiled_fit_interrupted_mid_epoch_resumes_exactly_in_a_fresh_process(tmp_path):
    straight = build(compile=False)
    reference = fit(straight, 4)
    folder = tmp_path / "ckpt"

    class StopMidEpoch:
        @tp.hookimpl
        def on_train_batch_end(self, trainer, step):
            if step == 7:  # epoch 1, after its 3rd of 5 batches
                trainer.stop_training = True

    stopped = build(True, [StopMidEpoch(), Checkpoint(dirpath=str(folder), every_n_epochs=None)])
    fit(stopped, 4)
    assert load_checkpoint(folder)["trainer"]["step"] == 8
    script = tmp_path / "resume.py"
    script.write_text(RESUME_SCRIPT)
    out = tmp_path / "resumed.npz"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    subprocess.run([sys.executable, str(script), str(folder), str(out)], check=True, env=env, timeout=120)
    info = json.loads(Path(str(out) + ".json").read_text())
    with np.load(out) as f:
        resumed = [f[f"arr_{i}"] for i in range(len(f.files))]
    assert info["history"] == reference.history and info["step"] == straight.step == 20
    for a, b in zip(resumed, _weights(straight)):
        np.testing.assert_array_equal(a, b)


def test_config_key_trainer_compile(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    text = textwrap.dedent(
        """\
        name: sp
        data: {type: spirals, n_samples: 120, n_classes: 2}
        model: {type: mlp, hidden_units: [8]}
        loss: sparse_categorical_crossentropy
        optimizer: {type: adam, learning_rate: 0.01}
        trainer: {epochs: 2, batch_size: 16}
        plugins: [csv_logger]
        """
    )
    (tmp_path / "c.yaml").write_text(text)
    logs = []
    for compile in ("false", "true"):
        args = ["--config", "c.yaml", "--set", f"trainer.compile={compile}", "--set", f"name=run_{compile}"]
        assert cli.main(args) == 0, capsys.readouterr().err
        logs.append((tmp_path / f"runs/run_{compile}/history.csv").read_text())
    assert logs[0] == logs[1]
    assert cli.main(["--config", "c.yaml", "--set", "trainer.compile=3"]) == 2
    assert "trainer.compile" in capsys.readouterr().err
    if importlib.util.find_spec("numba") is not None:  # the fused path: within its tolerance
        assert cli.main(["--config", "c.yaml", "--set", "trainer.compile=jit", "--set", "name=run_jit"]) == 0
        fused = np.loadtxt(tmp_path / "runs/run_jit/history.csv", delimiter=",", skiprows=1)
        eager = np.loadtxt(tmp_path / "runs/run_false/history.csv", delimiter=",", skiprows=1)
        np.testing.assert_allclose(fused, eager, rtol=1e-5)
    assert cli.main(["--config", "c.yaml", "--set", "trainer.compile=fast"]) == 2
    assert "compile must be True, False or 'jit'" in capsys.readouterr().err


def test_freezing_a_layer_between_fits_traces_again_and_stays_equal_to_eager():
    weights = []
    for compile in (False, True):
        trainer = build(compile)
        fit(trainer, 1)
        trainer.model.layers[0].trainable = False  # the step's variables change
        fit(trainer, 2)
        weights.append(_weights(trainer))
    for a, b in zip(*weights):
        np.testing.assert_array_equal(a, b)
    # Replayed programs: batches of 5 before and after freezing, batches of 2 after it (the one
    # batch of 2 before freezing was traced once, never confirmed by a second trace).
    assert trainer._compiled_step.experimental_get_tracing_count() == 3


def _hosted_functions(trainer):
    """The functions each replay of the compiled default step calls as Python."""
    return [
        {
            getattr(value, "__func__", value)
            for value in program._replay.__globals__.values()
            if callable(value)
        }
        for program in trainer._compiled_step._programs.values()
        if program._replay is not None  # traced once, not replayed yet
    ]


@pytest.mark.parametrize("clipped", [False, True], ids=["no-transform", "clipping"])
def test_the_default_compiled_step_traces_its_update_unless_a_hook_transforms_gradients(clipped):
    plugins = [ClipGradients(global_norm=0.5)] if clipped else []
    runs = []
    for compile in (False, True):
        trainer = build(compile, plugins)
        history = fit(trainer, 2)
        runs.append((history.history, _weights(trainer)))
    assert runs[0][0] == runs[1][0]
    for a, b in zip(runs[0][1], runs[1][1]):
        np.testing.assert_array_equal(a, b)
    hosted_by_program = _hosted_functions(trainer)
    assert hosted_by_program
    for hosted in hosted_by_program:
        # Traced: Adam's update is array code in the replay; a transforming hook (clipping) runs
        # with the update as Python on every replay's values.
        assert (tp.Trainer._apply_now in hosted) is clipped


class NumpyMeanError:
    """A metric that is not tapefit's: NumPy in update_state, a Python float from result."""

    name = "numpy_error"

    def __init__(self):
        self.total, self.count = 0.0, 0

    def update_state(self, y_true, y_pred, sample_weight=None):
        predicted = np.argmax(np.asarray(y_pred), axis=-1)
        self.total += float(np.sum(predicted != np.asarray(y_true)))
        self.count += len(predicted)

    def result(self):
        return self.total / self.count if self.count else 0.0

    def reset_state(self):
        self.total, self.count = 0.0, 0


def test_a_metric_that_is_not_tapefits_runs_as_python_in_a_compiled_step():
    histories = []
    for compile in (False, True):
        tp.random.set_seed(0)
        model = tp.layers.Sequential([tp.layers.Dense(8, activation="relu"), tp.layers.Dense(3)])
        trainer = tp.Trainer(
            model,
            tp.optimizers.SGD(0.1),
            tp.losses.SparseCategoricalCrossentropy(from_logits=True),
            metrics=[NumpyMeanError(), "accuracy"],
            compile=compile,
        )
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # a compiled step that fell back to eager would warn
            histories.append(trainer.fit(ns["X"], ns["Y"], epochs=3, batch_size=5, verbose=0).history)
    assert histories[0] == histories[1]
    errors = histories[1]["numpy_error"]
    assert len(set(errors)) > 1  # each epoch's own value, not the trace's
    assert all(abs(e + a - 1) < 1e-6 for e, a in zip(errors, histories[1]["accuracy"]))


def test_evaluate_replays_a_compiled_test_step_with_eagers_results():
    results = []
    for compile in (False, True):
        trainer = build(compile)
        fit(trainer, 1)
        results.append([trainer.evaluate(ns["X"], ns["Y"], batch_size=4, verbose=0) for _ in range(3)])
    assert results[0] == results[1]
    # One program per batch shape (4 and the last batch of 2), replayed on later batches.
    assert trainer._compiled_test.experimental_get_tracing_count() == 2
