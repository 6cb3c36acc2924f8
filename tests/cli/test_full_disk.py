"""``train`` on a disk that fills up while it runs: every writer fails with one line naming its file
and the OS error, the last good checkpoint stays, and the run ends with exit 1, never hangs.

The disk is a real tmpfs of a few hundred KB (we mount it; the tests skip where that is not
allowed); the test fills what is left of it once the run has written its first files.
"""

import errno
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tapefit.checkpointing import latest_checkpoint, load_checkpoint

REPO = Path(__file__).resolve().parents[2]

CONFIG = """\
    name: sp
    data: {type: spirals, n_samples: 400, n_classes: 2}
    model: {type: mlp, hidden_units: [16]}
    loss: sparse_categorical_crossentropy
    optimizer: {type: adam, learning_rate: 0.01}
    trainer: {epochs: 100000, batch_size: 50, verbose: 0}
    plugins: [PLUGIN]
"""


@pytest.fixture
def small_disk(tmp_path):
    """A 512 KB tmpfs, unmounted afterwards."""
    if not sys.platform.startswith("linux"):
        pytest.skip("mounts a tmpfs: Linux only")
    disk = tmp_path / "disk"
    disk.mkdir()
    try:
        mounted = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=512k", "tmpfs", str(disk)],
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        pytest.skip(f"cannot mount a small tmpfs to fill: {e}")
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs to fill (needs root): {mounted.stderr.strip()}")
    try:
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(disk)], capture_output=True, timeout=30)


def fill(folder: Path) -> None:
    """Writes into ``folder`` until its file system has no space left."""
    chunk = b"\0" * 4096
    with open(folder / "filler", "wb", buffering=0) as f:
        while True:
            try:
                f.write(chunk)
            except OSError as e:
                assert e.errno == errno.ENOSPC, e
                return


def train_until_full(tmp_path: Path, disk: Path, plugin: str, written: str) -> tuple[int, list[str]]:
    """Starts ``train`` on ``disk``, fills the disk once ``written`` (a glob) exists, and waits
    (at most 60 s: a run that hangs fails the test) for the run to end."""
    config = tmp_path / "c.yaml"
    config.write_text(textwrap.dedent(CONFIG).replace("PLUGIN", plugin))
    script = Path(sys.executable).parent / "train"
    command = [str(script)] if script.exists() else [sys.executable, "-m", "tapefit", "train"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    process = subprocess.Popen(
        [*command, "--config", str(config)],
        cwd=disk,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while not list(disk.glob(written)):
            assert process.poll() is None, process.communicate()
            assert time.monotonic() < deadline, f"{written} never appeared"
            time.sleep(0.02)
        fill(disk)
        _, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    return process.returncode, err.strip().splitlines()


def assert_one_line_naming(status: int, lines: list[str], file_part: str) -> None:
    assert status == 1, lines
    assert not any("Traceback" in line for line in lines), "\n".join(lines)
    [error] = [line for line in lines if " error" in line]
    assert error == lines[-1], lines
    prefix = "train: error while training: OSError: [Errno 28] No space left on device: "
    assert error.startswith(prefix), error
    assert file_part in error, error


def test_a_full_disk_under_tensorboard_ends_the_run_instead_of_hanging(tmp_path, small_disk):
    status, lines = train_until_full(
        tmp_path,
        small_disk,
        "{type: tensorboard, histogram_every_n_steps: 1, log_graph: false}",
        "runs/sp/tensorboard/train/events.out.tfevents.*",
    )
    assert_one_line_naming(status, lines, "runs/sp/tensorboard/train/events.out.tfevents.")


def test_a_full_disk_under_the_csv_log_is_one_line(tmp_path, small_disk):
    status, lines = train_until_full(tmp_path, small_disk, "csv_logger", "runs/sp/history.csv")
    assert_one_line_naming(status, lines, "runs/sp/history.csv")


def test_a_full_disk_during_a_checkpoint_keeps_the_last_good_one(tmp_path, small_disk):
    status, lines = train_until_full(
        tmp_path, small_disk, "{type: checkpoint, every_n_epochs: 1}", "runs/sp/checkpoints/last"
    )
    assert_one_line_naming(status, lines, "runs/sp/checkpoints/")
    folder = small_disk / "runs/sp/checkpoints"
    last = latest_checkpoint(folder)
    assert last is not None and last.name.startswith("epoch")
    assert load_checkpoint(last)["trainer"]["epoch"] >= 0  # whole: its digest checks out
    assert not [p for p in folder.iterdir() if p.name.endswith(".tmp")]  # no half-written file


def test_a_full_disk_under_the_csv_loaders_copy_is_one_line(tmp_path, small_disk):
    # data: {type: csv, mmap: true} streams the table into a float32 file in TMPDIR.
    rows = "\n".join(f"{i % 7}.5,{i % 3}.25,{i % 5}.75,{i % 2}" for i in range(100_000))  # 1.2 MB as float32
    (tmp_path / "table.csv").write_text(rows + "\n")
    config = tmp_path / "c.yaml"
    config.write_text(
        textwrap.dedent(CONFIG)
        .replace(
            "{type: spirals, n_samples: 400, n_classes: 2}",
            f"{{type: csv, path: {tmp_path / 'table.csv'}, mmap: true}}",
        )
        .replace("[PLUGIN]", "[]")
    )
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
        "TMPDIR": str(small_disk),
    }
    result = subprocess.run(
        [sys.executable, "-m", "tapefit", "train", "--config", str(config)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2, result.stderr
    [line] = result.stderr.strip().splitlines()
    assert line.startswith(f"python -m tapefit train: error: {config}: data.mmap: "), line
    assert f"cannot write its float32 copy {small_disk}/tapefit-csv-" in line, line
    assert line.endswith(": No space left on device"), line
    assert not list(small_disk.iterdir())  # the partial copy is gone
