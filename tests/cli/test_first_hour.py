"""What a new user meets in the first hour of train: advice that fits what is installed, shipped
configs from any folder, errors that name the fix."""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from tapefit.cli import app as cli

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    return tmp_path


def run(args, capsys):
    status = cli.main([str(a) for a in args])
    out, err = capsys.readouterr()
    return status, out, err


SPIRALS = """\
    name: sp
    data: {type: spirals, n_samples: 100, n_classes: 2}
    model: {type: mlp, hidden_units: [4]}
    loss: sparse_categorical_crossentropy
    trainer: {epochs: 1, batch_size: 50}
    plugins: [tensorboard]
"""


@pytest.mark.parametrize("installed", [True, False])
def test_the_tensorboard_advice_fits_what_is_installed(workdir, capsys, monkeypatch, installed):
    (workdir / "c.yaml").write_text(textwrap.dedent(SPIRALS))
    real_which = cli.shutil.which
    monkeypatch.setattr(
        cli.shutil, "which", lambda name: (real_which(name) or "/bin/tb") if installed else None
    )
    status, out, err = run(["--config", "c.yaml"], capsys)
    assert status == 0, err
    line = next(line for line in out.splitlines() if line.strip().startswith("tensorboard/"))
    if installed:
        assert line.endswith("TensorBoard (tensorboard --logdir runs)")
    else:
        assert line.endswith(
            "TensorBoard (to watch: pip install tensorboard, then tensorboard --logdir runs)"
        )


def test_shipped_configs_find_their_modules_from_any_folder(tmp_path):
    # Only the package on the path (not the repository root, where examples/ lives).
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "tapefit").symlink_to(REPO / "tapefit")
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "site")}
    for name in ("char_lm.yaml", "custom_module.yaml"):
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "tapefit",
                "train",
                "--config",
                str(REPO / "configs" / name),
                "--print-config",
            ],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert result.returncode == 0, result.stderr
        assert "examples." in result.stdout


def test_standardize_on_memory_mapped_npy_says_to_set_mmap_false(workdir, capsys):
    rng = np.random.default_rng(0)
    (workdir / "d").mkdir()
    np.save(workdir / "d" / "x.npy", rng.normal(size=(40, 2)).astype(np.float32))
    np.save(workdir / "d" / "y.npy", (rng.random(40) > 0.5).astype(np.int64))
    config = textwrap.dedent(SPIRALS).replace(
        "{type: spirals, n_samples: 100, n_classes: 2}", "{type: npy, path: d, mmap: true, standardize: true}"
    )
    (workdir / "c.yaml").write_text(config)
    status, out, err = run(["--config", "c.yaml"], capsys)
    assert status == 2 and out == ""
    assert err.strip().splitlines() == [
        "train: error: c.yaml: data.standardize: needs the features in memory, and they are "
        "memory-mapped: set data.mmap: false to load them, or standardize them once and save them"
    ]


def test_set_an_optimizer_key_on_a_config_without_one_uses_the_default_type(workdir, capsys):
    (workdir / "c.yaml").write_text(textwrap.dedent(SPIRALS))
    status, out, err = run(
        ["--config", "c.yaml", "--set", "optimizer.learning_rate=0.02", "--print-config"], capsys
    )
    assert status == 0, err
    assert "optimizer:\n  type: rmsprop\n  learning_rate: 0.02\n" in out
