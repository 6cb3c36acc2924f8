"""``train`` on untrusted input: what a checkpoint's plugin states hold, and what every file
tapefit reads is, claims and holds. Each is refused with one line and exit 2, before training."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import numpy as np
import pytest

from tapefit.checkpointing import load_checkpoint, save_checkpoint
from tests.plugins.test_checkpoint_untrusted import npy_header

REPO = Path(__file__).resolve().parents[2]
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


# --------------------------------------------------------------------------- every file train reads (item 9)

needs_fifo = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="named pipes are POSIX")
needs_dev_zero = pytest.mark.skipif(not os.path.exists("/dev/zero"), reason="no /dev/zero here")


def npy_folder(folder: Path, x: bytes | None = None) -> Path:
    """A data folder of x.npy and y.npy (60 samples), with ``x.npy``'s bytes replaced by ``x``."""
    data = folder / "npy"
    data.mkdir()
    rng = np.random.default_rng(0)
    np.save(data / "x.npy", rng.normal(size=(60, 3)).astype(np.float32))
    np.save(data / "y.npy", rng.integers(0, 2, 60))
    if x is not None:
        (data / "x.npy").write_bytes(x)
    return data


@needs_fifo
def test_a_config_that_is_a_fifo_is_refused(tmp_path):
    os.mkfifo(tmp_path / "c.yaml")  # no writer: reading it would wait for ever
    refused(
        train(tmp_path, "--config", "c.yaml"),
        "config file 'c.yaml' is a named pipe (FIFO), not a regular file",
    )


@needs_dev_zero
def test_a_toml_config_that_is_dev_zero_is_refused(tmp_path):
    (tmp_path / "c.toml").symlink_to("/dev/zero")  # never ends: tomllib would read it into memory for ever
    refused(train(tmp_path, "--config", "c.toml"), "config file 'c.toml' is a character device")


def test_a_config_that_is_a_folder_is_refused(tmp_path):
    (tmp_path / "c.yaml").mkdir()
    refused(train(tmp_path, "--config", "c.yaml"), "config file 'c.yaml' is a folder, not a regular file")


def test_a_config_larger_than_a_megabyte_is_refused_unread(tmp_path):
    npz_data(tmp_path)
    cfg = config(tmp_path)
    cfg.write_text(cfg.read_text() + "# padding\n" * 2**17)  # a valid config of 1.3 MB
    refused(train(tmp_path, "--config", cfg), f"config file '{cfg}' is 1", "bytes, more than the 1048576")


@needs_fifo
@pytest.mark.parametrize("kind", ["npz", "csv"])
def test_a_data_path_that_is_a_fifo_is_named_by_the_config_check(tmp_path, kind):
    os.mkfifo(tmp_path / f"d.{kind}")
    result = train(tmp_path, "--config", config(tmp_path, f"{{type: {kind}, path: d.{kind}}}"))
    refused(result, f"data.path: 'd.{kind}' is a named pipe (FIFO), not a regular file")


@needs_fifo
@pytest.mark.parametrize("mmap", ["true", "false"])
def test_an_npy_shard_that_is_a_fifo_is_refused(tmp_path, mmap):
    data = npy_folder(tmp_path)
    (data / "x.npy").unlink()
    (data / "x").mkdir()
    np.save(data / "x/a.npy", np.zeros((30, 3), np.float32))
    os.mkfifo(data / "x/b.npy")
    result = train(tmp_path, "--config", config(tmp_path, f"{{type: npy, path: npy, mmap: {mmap}}}"))
    refused(result, "data.path: data file 'npy/x/b.npy' is a named pipe (FIFO), not a regular file")


@needs_fifo
def test_an_x_npy_that_is_a_fifo_is_named_as_such(tmp_path):
    data = npy_folder(tmp_path)
    (data / "x.npy").unlink()
    os.mkfifo(data / "x.npy")
    result = train(tmp_path, "--config", config(tmp_path, "{type: npy, path: npy}"))
    refused(result, "data.path: data file 'npy/x.npy' is a named pipe (FIFO), not a regular file")


@needs_dev_zero
def test_an_npy_file_that_is_dev_zero_is_refused(tmp_path):
    data = npy_folder(tmp_path)
    (data / "x.npy").unlink()
    (data / "x.npy").symlink_to("/dev/zero")
    result = train(tmp_path, "--config", config(tmp_path, "{type: npy, path: npy}"))
    refused(result, "data.path: data file 'npy/x.npy' is a character device, not a regular file")


@pytest.mark.parametrize("mmap", ["true", "false"])
def test_an_npy_header_claiming_more_than_the_file_is_refused(tmp_path, mmap):
    npy_folder(tmp_path, x=npy_header("<f4", (10**10, 3)) + bytes(720))  # claims 120 GB, holds 720 bytes
    result = train(tmp_path, "--config", config(tmp_path, f"{{type: npy, path: npy, mmap: {mmap}}}"))
    refused(
        result, "data file 'npy/x.npy' declares 120000000128 bytes of float32 (10000000000, 3), but holds 848"
    )


def test_an_npy_header_claiming_less_than_the_file_is_refused(tmp_path):
    x = np.random.default_rng(0).normal(size=(60, 3)).astype(np.float32)
    npy_folder(
        tmp_path, x=npy_header("<f4", (60, 3)) + x.tobytes() + bytes(4096)
    )  # 4 kB that no header names
    result = train(tmp_path, "--config", config(tmp_path, "{type: npy, path: npy, mmap: false}"))
    refused(result, "data file 'npy/x.npy' declares 848 bytes of float32 (60, 3), but holds 4944")


def test_an_npz_member_header_claiming_more_than_the_file_is_refused(tmp_path):
    with zipfile.ZipFile(tmp_path / "d.npz", "w") as zf:
        zf.writestr("x.npy", npy_header("<f4", (10**10, 3)) + bytes(720))
        zf.writestr("y.npy", npy_header("<i8", (60,)) + bytes(480))
    refused(
        train(tmp_path, "--config", config(tmp_path)),
        "'d.npz': the array 'x' declares 120000000128 bytes of float32 (10000000000, 3), but holds 848",
    )


def test_npz_arrays_whose_headers_claim_different_sample_counts_are_refused(tmp_path):
    np.savez(tmp_path / "d.npz", x=np.zeros((60, 3)), y=np.zeros(59, np.int64))
    refused(
        train(tmp_path, "--config", config(tmp_path)),
        "data.path: 'd.npz': its headers declare 60 samples of 'x' but 59 of 'y'",
    )


@pytest.mark.parametrize("kind", ["npz", "npy read on demand"])
def test_nan_and_inf_features_are_named_by_sample_and_feature(tmp_path, kind):
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(60, 3)).astype(np.float32), rng.integers(0, 2, 60)
    x[37, 2] = np.inf
    if kind == "npz":
        np.savez(tmp_path / "d.npz", x=x, y=y)
        data = "{type: npz, path: d.npz}"
    else:
        (tmp_path / "npy").mkdir()
        np.save(tmp_path / "npy/x.npy", x)
        np.save(tmp_path / "npy/y.npy", y)
        data = "{type: npy, path: npy}"
    refused(
        train(tmp_path, "--config", config(tmp_path, data)),
        "the features contain NaN or infinite values (the first: inf at sample 37, feature 2)",
    )


def test_labels_beyond_the_class_count_are_caught_when_the_loss_is_named_by_import_path(tmp_path):
    rng = np.random.default_rng(0)
    y = rng.integers(0, 2, 60)
    y[45] = 4  # deep in the file
    np.savez(tmp_path / "d.npz", x=rng.normal(size=(60, 3)), y=y)
    cfg = config(tmp_path)
    loss = "tapefit.layers.losses:SparseCategoricalCrossentropy"
    result = train(tmp_path, "--config", cfg, "--set", f"loss.type={loss}", "--set", "model.output_units=2")
    refused(result, "model: the model gives 2 class scores per sample, but the labels go from 0 to 4")
    y[45] = -1
    np.savez(tmp_path / "d.npz", x=rng.normal(size=(60, 3)), y=y)
    result = train(tmp_path, "--config", cfg, "--set", f"loss.type={loss}")
    refused(result, "data: 'sparse_categorical_crossentropy' needs class indices", "labels go from -1 to 1")


def test_a_label_far_beyond_the_sample_count_does_not_size_the_model(tmp_path):
    rng = np.random.default_rng(0)
    y = rng.integers(0, 2, 60)
    y[3] = 10**6  # an identifier column taken for the labels: a million outputs
    np.savez(tmp_path / "d.npz", x=rng.normal(size=(60, 3)), y=y)
    refused(
        train(tmp_path, "--config", config(tmp_path)),
        "data: the highest label is 1000000, so the model would need 1000001 outputs for 60 labels",
    )


@needs_fifo
def test_a_checkpoint_that_is_a_fifo_is_refused(tmp_path):
    npz_data(tmp_path)
    os.mkfifo(tmp_path / "ck.npz")
    result = train(tmp_path, "--config", config(tmp_path), "--resume", "ck.npz")
    refused(result, "--resume: checkpoint 'ck.npz' is a named pipe (FIFO), not a regular file")


@pytest.mark.parametrize("label", ["4294967297", "1e300"])
def test_a_csv_label_past_int32_is_refused_before_any_cast(label, tmp_path):
    rows = [f"{i % 5}.5,{i % 3}.25,{i % 2}" for i in range(40)]
    rows[6] = f"1.5,2.25,{label}"  # line 7: 4294967297 would wrap to class 1, 1e300 warn of its cast
    (tmp_path / "t.csv").write_text("\n".join(rows) + "\n")
    line = refused(train(tmp_path, "--config", config(tmp_path, "{type: csv, path: t.csv}")))  # no warning
    assert line.endswith(
        f"data.label_dtype: 't.csv' line 7, column 3: the label '{label}' is outside the range of class "
        "indices (int32, -2147483648 to 2147483647); for regression targets set label_dtype: float"
    ), line
