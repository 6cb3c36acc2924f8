"""``train`` on untrusted input: what a checkpoint's plugin states hold, and what every file
tapefit reads is, claims and holds. Each is refused with one line and exit 2, before training."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np

from tapefit.checkpointing import load_checkpoint, save_checkpoint

REPO = Path(__file__).resolve().parents[1]
TIMEOUT = 60  # a hang fails the test instead of the suite


def train(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run(
        [sys.executable, "-m", "tapefit", "train", *map(str, args)],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )


def refused(result: subprocess.CompletedProcess, *fragments: str) -> str:
    """The one line of a run refused with exit 2; it holds every fragment."""
    assert result.returncode == 2, (result.returncode, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    assert all(fragment in lines[0] for fragment in fragments), lines[0]
    return lines[0]


def npz_data(folder: Path, n: int = 60) -> Path:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(n, 3))
    np.savez(folder / "d.npz", x=x, y=(x[:, 0] > 0).astype(np.int64))
    return folder / "d.npz"


def config(folder: Path, data: str = "{type: npz, path: d.npz}", plugins: str = "", name: str = "c") -> Path:
    path = folder / f"{name}.yaml"
    path.write_text(
        textwrap.dedent(
            f"""\
            name: {name}
            data: {data}
            model: {{type: mlp, hidden_units: [8]}}
            loss: sparse_categorical_crossentropy
            optimizer: {{type: adam, learning_rate: 0.01}}
            trainer: {{epochs: 2, batch_size: 16}}
            plugins: [{plugins}]
            """
        )
    )
    return path


# --------------------------------------------------------------------------- plugin states (item 7)

STATEFUL = (
    "{type: checkpoint}, {type: early_stopping, monitor: loss, patience: 9, restore_best_weights: true}"
)


def test_nan_best_weights_in_a_checkpoint_are_refused_not_exported(tmp_path):
    npz_data(tmp_path)
    cfg = config(tmp_path, plugins=STATEFUL)
    assert train(tmp_path, "--config", cfg).returncode == 0
    contents = load_checkpoint(tmp_path / "runs/c/checkpoints")
    state = contents["plugins"]["early_stopping"]
    state["best"] = -1.0  # never beaten: the fit's end would restore the best weights as saved
    for array in state["best_weights"].values():
        array.fill(np.nan)
    save_checkpoint(
        tmp_path / "nan.npz", {k: v for k, v in contents.items() if k not in ("format", "version")}
    )
    result = train(
        tmp_path, "--config", cfg, "--set", "name=again", "--set", "trainer.epochs=3", "--resume", "nan.npz"
    )
    refused(result, "nan.npz: plugins.early_stopping: best_weights.", "holds NaN or infinite values")
    assert not (tmp_path / "runs/again/model.safetensors").exists()


def test_a_string_where_a_plugin_keeps_a_number_is_refused_before_training(tmp_path):
    npz_data(tmp_path)
    cfg = config(tmp_path, plugins=STATEFUL)
    assert train(tmp_path, "--config", cfg).returncode == 0
    contents = load_checkpoint(tmp_path / "runs/c/checkpoints")
    contents["plugins"]["early_stopping"]["best"] = "low"
    save_checkpoint(
        tmp_path / "str.npz", {k: v for k, v in contents.items() if k not in ("format", "version")}
    )
    result = train(
        tmp_path, "--config", cfg, "--set", "name=again", "--set", "trainer.epochs=3", "--resume", "str.npz"
    )
    refused(result, "str.npz: plugins.early_stopping: best: expected null or a number, got 'low'")
    assert not (tmp_path / "runs/again").exists()  # not trained: no interrupted.npz, no export
