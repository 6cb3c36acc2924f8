"""The run folder at the file system's edge: what ``--overwrite`` may delete, links planted in a
run folder, broken ``last`` pointers, and run folders that cannot be locked. Each test is a
reproduction from the trust review; every refusal is one line, exit 2, and loses nothing."""

import json
import os
import subprocess
import textwrap
from pathlib import Path

import pytest

from tapefit.checkpointing import CheckpointError, open_regular, read_pointer, resume_point, save_checkpoint
from tapefit.cli import app as cli
from tapefit.cli.run_folder import MARKER_NAME, is_run_folder, record, recorded, remove_recorded

SPIRALS = """\
    name: sp
    seed: 0
    data: {type: spirals, n_samples: 200, n_classes: 2}
    model: {type: mlp, hidden_units: [8]}
    loss: sparse_categorical_crossentropy
    metrics: [accuracy]
    optimizer: {type: adam, learning_rate: 0.01}
    trainer: {epochs: 3, batch_size: 50}
    plugins:
      - {type: checkpoint, every_n_epochs: 1}
      - {type: csv_logger}
"""


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))
    return path


def files(root: Path) -> dict[str, bytes]:
    """Every file under ``root`` (links as their target's name) but for the lock's pid."""
    found = {}
    for p in sorted(root.rglob("*")):
        if p.is_symlink():
            found[str(p.relative_to(root))] = os.readlink(p).encode()
        elif p.is_file() and p.name != ".train.lock":
            found[str(p.relative_to(root))] = p.read_bytes()
    return found


@pytest.fixture
def here(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    return tmp_path


def run(capsys, *args):
    status = cli.main([str(a) for a in args])
    out, err = capsys.readouterr()
    return status, out, err


def refused(capsys, *args):
    """Runs ``train`` expecting exit 2 with one line and no traceback; returns the line."""
    status, out, err = run(capsys, *args)
    assert status == 2, (out, err)
    assert "Traceback" not in err
    [line] = err.strip().splitlines()
    return line


# --------------------------------------------------------------------------- 1. --overwrite


def test_overwrite_never_deletes_a_folder_that_train_did_not_make(here, capsys):
    # A project folder whose own config.yaml has all nine top-level keys and names itself as the
    # run folder: before the marker, --overwrite took it for a run and deleted NOTES.md and src/.
    config = write(here / "project/config.yaml", SPIRALS + "    # trainer.output_dir below\n")
    config.write_text(config.read_text().replace("batch_size: 50}", "batch_size: 50, output_dir: project}"))
    write(here / "project/NOTES.md", "my notes\n")
    write(here / "project/src/model.py", "print('mine')\n")
    before = files(here / "project")
    line = refused(capsys, "--config", config, "--overwrite")
    assert line == (
        "train: error: project holds files and is not a tapefit run folder (train did not make it); not "
        "writing into it: pick another name (--set name=...) or trainer.output_dir"
    )
    assert files(here / "project") == before


def test_overwrite_removes_only_what_runs_wrote(here, capsys):
    config = write(here / "c.yaml", SPIRALS)
    assert run(capsys, "--config", config)[0] == 0
    folder = here / "runs/sp"
    assert is_run_folder(folder)
    assert recorded(folder) == ["checkpoints", "config.yaml", "history.csv", "model.safetensors"]
    write(folder / "NOTES.md", "added by the user\n")
    write(folder / "mine/data.txt", "also the user's\n")
    status, out, err = run(capsys, "--config", config, "--overwrite", "--set", "trainer.epochs=1")
    assert status == 0, err
    assert "--overwrite kept what no run wrote in runs/sp: NOTES.md, mine" in out
    assert (folder / "NOTES.md").read_text() == "added by the user\n"
    assert (folder / "mine/data.txt").read_text() == "also the user's\n"
    # the earlier run's three epochs are gone; the new run wrote one
    assert sorted(p.name for p in (folder / "checkpoints").glob("*.npz")) == ["epoch0000-step00000004.npz"]


def test_a_marker_cannot_name_anything_outside_its_folder(tmp_path):
    victim = write(tmp_path / "victim.txt", "keep\n")
    folder = tmp_path / "run"
    for names in (["..", "x"], ["../victim.txt"], ["/etc"], [""], "config.yaml", [3]):
        write(
            folder / MARKER_NAME,
            json.dumps({"format": "tapefit-run", "version": 1, "written": names}),
        )
        assert recorded(folder) is None and not is_run_folder(folder)
        with pytest.raises(Exception, match="not a tapefit run folder"):
            remove_recorded(folder)
    assert victim.read_text() == "keep\n"
    write(folder / MARKER_NAME, "x" * (2**20 + 1))  # larger than a marker can be: not read
    assert recorded(folder) is None


def test_overwrite_deletes_a_link_a_run_wrote_never_what_it_points_at(tmp_path):
    victim = write(tmp_path / "victim/data.txt", "keep\n")
    folder = tmp_path / "run"
    folder.mkdir()
    (folder / "tensorboard").symlink_to(victim.parent)
    record(folder, ["tensorboard"])
    assert remove_recorded(folder) == []
    assert not os.path.lexists(folder / "tensorboard")
    assert victim.read_text() == "keep\n"


# --------------------------------------------------------------------------- 2. links and odd files


@pytest.mark.parametrize("name", [".train.lock", "config.yaml", "history.csv", "checkpoints", MARKER_NAME])
def test_a_link_planted_in_a_run_folder_is_refused_and_never_written_through(here, capsys, name):
    config = write(here / "c.yaml", SPIRALS)
    assert run(capsys, "--config", config)[0] == 0
    victim = write(here / "victim/file", "the user's\n")
    target = victim.parent if name == "checkpoints" else victim
    path = here / "runs/sp" / name
    if path.is_dir():
        import shutil

        shutil.rmtree(path)
    else:
        path.unlink()
    path.symlink_to(target)
    for extra in ([], ["--resume", "auto"], ["--overwrite"]):
        line = refused(capsys, "--config", config, "--set", "trainer.epochs=4", *extra)
        assert line == (
            f"train: error: runs/sp/{name} is a symbolic link; train writes its files inside the run folder, "
            "never through a link: remove it"
        )
        assert files(here / "victim") == {"file": b"the user's\n"}
        assert os.path.islink(path)


@pytest.mark.parametrize("kind", ["folder", "fifo"])
def test_a_lock_file_that_is_a_folder_or_a_fifo_is_one_line(here, capsys, kind):
    config = write(here / "c.yaml", SPIRALS)
    lock = here / "runs/sp/.train.lock"
    lock.parent.mkdir(parents=True)
    if kind == "folder":
        lock.mkdir()
        expected = "train: error: runs/sp/.train.lock is a folder; it is train's lock file: remove it"
    else:
        os.mkfifo(lock)
        expected = (
            "train: error: runs/sp/.train.lock is not a regular file; it is train's lock file: remove it"
        )
    assert refused(capsys, "--config", config) == expected


def test_open_regular_refuses_links_fifos_and_folders(tmp_path):
    write(tmp_path / "real.csv", "epoch\n")
    (tmp_path / "link.csv").symlink_to(tmp_path / "real.csv")
    os.mkfifo(tmp_path / "fifo.csv")
    for mode in ("r", "w", "a"):
        with pytest.raises(OSError, match=r"link\.csv is a symbolic link"):
            open_regular(tmp_path / "link.csv", mode)
        with pytest.raises(OSError, match=r"fifo\.csv is a named pipe \(FIFO\), not a regular file"):
            open_regular(tmp_path / "fifo.csv", mode)
    assert (tmp_path / "real.csv").read_text() == "epoch\n"
    with open_regular(tmp_path / "real.csv", "a") as f:
        f.write("0\n")
    assert (tmp_path / "real.csv").read_text() == "epoch\n0\n"


def test_a_csv_log_named_through_a_link_is_never_written(here, capsys):
    victim = write(here / "victim.csv", "the user's\n")
    (here / "logs").mkdir()
    (here / "logs/h.csv").symlink_to(victim)
    config = write(here / "c.yaml", SPIRALS)
    status, _, err = run(capsys, "--config", config, "--set", "plugins[1].filename=logs/h.csv")
    assert status == 1
    [line] = err.strip().splitlines()
    assert "logs/h.csv is a symbolic link" in line, err
    assert victim.read_text() == "the user's\n"


# --------------------------------------------------------------------------- 3. the last pointer


@pytest.fixture
def three_epochs(here, capsys):
    """A run with a checkpoint after each of its three epochs (keep_last: all)."""
    config = write(here / "c.yaml", SPIRALS)
    assert run(capsys, "--config", config)[0] == 0
    folder = here / "runs/sp/checkpoints"
    assert (folder / "last").read_text().strip() == "epoch0002-step00000012.npz"
    return config, folder


def resume_epochs(capsys, config, epochs=4):
    status, out, err = run(
        capsys, "--config", config, "--resume", "auto", "--set", f"trainer.epochs={epochs}"
    )
    assert status == 0, err
    return out


@pytest.mark.parametrize(
    "breakage",
    ["target deleted", "pointer deleted", "pointer is a link", "pointer names /dev/zero", "pointer of 10 MB"],
)
def test_a_broken_last_pointer_resumes_from_the_newest_intact_checkpoint(three_epochs, capsys, breakage):
    config, folder = three_epochs
    pointer = folder / "last"
    if breakage == "target deleted":
        (folder / "epoch0002-step00000012.npz").unlink()
        newest = "epoch0001-step00000008.npz"
    else:
        newest = "epoch0002-step00000012.npz"
        pointer.unlink()
        if breakage == "pointer is a link":
            pointer.symlink_to("/dev/zero")
        elif breakage == "pointer names /dev/zero":
            pointer.write_text("/dev/zero\n")
        elif breakage == "pointer of 10 MB":
            pointer.write_text("x" * 10_000_000)
    out = resume_epochs(capsys, config)
    assert f"continuing from the newest intact checkpoint, runs/sp/checkpoints/{newest}" in out
    assert f"train: resuming from runs/sp/checkpoints/{newest}" in out
    history = (folder.parent / "history.csv").read_text().splitlines()
    epochs_done = 2 if breakage == "target deleted" else 3
    assert [row.split(",")[0] for row in history[1:]] == [str(e) for e in range(4)]
    assert f"{4 - epochs_done} epoch" in out  # it continued; it did not start over


def test_a_pointer_with_no_intact_checkpoint_left_is_an_error_that_keeps_the_run(three_epochs, capsys):
    config, folder = three_epochs
    for path in folder.glob("*.npz"):
        path.write_bytes(b"PK" + b"\0" * 40)  # none intact
    before = files(folder.parent)
    line = refused(capsys, "--config", config, "--resume", "auto")
    assert line.startswith(
        "train: error: --resume auto: the pointer runs/sp/checkpoints/last names 'epoch0002-step00000012.npz'"
    ) or line.startswith("train: error: --resume: runs/sp/checkpoints/epoch0002"), line
    (folder / "last").unlink()
    line = refused(capsys, "--config", config, "--resume", "auto")
    assert line == (
        "train: error: --resume auto: runs/sp/checkpoints has no 'last' pointer, and runs/sp/checkpoints holds "
        "no intact checkpoint to continue from; not starting over on top of the run (repair the pointer, or "
        "start afresh with --overwrite)"
    )
    assert files(folder.parent) == {k: v for k, v in before.items() if k != "checkpoints/last"}


def test_a_last_pointer_that_is_a_folder_is_an_error_not_a_fallback(three_epochs, capsys):
    # A fallback would train and then fail to write the pointer over the folder.
    config, folder = three_epochs
    (folder / "last").unlink()
    (folder / "last").mkdir()
    assert refused(capsys, "--config", config, "--resume", "auto") == (
        "train: error: --resume auto: runs/sp/checkpoints/last is a folder where the 'last' pointer belongs; "
        "remove it; not starting over on top of the run (repair the pointer, or start afresh with --overwrite)"
    )


@pytest.mark.parametrize(
    "text, problem",
    [
        ("", "holds '', which is not a file name in its folder"),
        ("../../etc/passwd", "holds '../../etc/passwd', which is not a file name in its folder"),
        ("x" * 300, "holds 'x+[.][.][.]', which is not a file name in its folder"),
        ("\udcff", "cannot be read"),
    ],
)
def test_read_pointer_names_what_is_wrong(tmp_path, text, problem):
    pointer = tmp_path / "last"
    if text == "\udcff":
        pointer.write_bytes(b"\xff\xfe")
    else:
        pointer.write_text(text)
    with pytest.raises(CheckpointError, match="the pointer .*last " + problem):
        read_pointer(pointer)
    pointer.unlink()
    pointer.symlink_to(tmp_path)
    with pytest.raises(CheckpointError, match="is a symbolic link, not the file that train writes"):
        read_pointer(pointer)


def test_resume_point_takes_the_furthest_position_not_the_newest_file(tmp_path):
    early = save_checkpoint(tmp_path / "b.npz", {"trainer": {"step": 4}})
    late = save_checkpoint(tmp_path / "a.npz", {"trainer": {"step": 8}})
    os.utime(late, (1, 1))  # older on disk, further in the run
    path, note = resume_point(tmp_path)
    assert path == late and "has no 'last' pointer; continuing from the newest intact checkpoint" in note
    assert early.is_file()
    assert resume_point(tmp_path / "empty") == (None, None)


# --------------------------------------------------------------------------- 8. refused up front


@pytest.mark.parametrize(
    "output_dir, reason",
    [
        ("/proc/tapefit-run", "cannot make or lock the run folder '/proc/tapefit-run': "),
        ("runs/" + "x" * 300, "File name too long"),
        ("existing/" + "x" * 300, "File name too long"),  # the parent exists: stat fails otherwise
        ('"runs/a\\0b"', "embedded null byte"),
        ("c.yaml/run", "Not a directory"),
    ],
)
def test_a_run_folder_that_cannot_be_locked_is_one_line(here, capsys, output_dir, reason):
    config = write(here / "c.yaml", SPIRALS)
    (here / "existing").mkdir()
    config.write_text(
        config.read_text().replace("batch_size: 50}", f"batch_size: 50, output_dir: {output_dir}}}")
    )
    line = refused(capsys, "--config", config)
    assert line.startswith(
        f"train: error: {config}: trainer.output_dir: cannot make or lock the run folder "
    ), line
    assert reason in line


def test_a_read_only_file_system_is_one_line(here, capsys):
    ro = here / "ro"
    ro.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", str(ro)], capture_output=True
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a read-only tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        config = write(here / "c.yaml", SPIRALS)
        line = refused(capsys, "--config", config, "--set", "trainer.output_dir=ro/run")
        assert line.endswith("cannot make or lock the run folder 'ro/run': Read-only file system"), line
    finally:
        subprocess.run(["umount", str(ro)], check=True)


def test_a_failed_export_leaves_no_lock_and_no_folder(here, capsys):
    config = write(here / "c.yaml", SPIRALS)
    line = refused(capsys, "--config", config, "--export", "w.safetensors")
    assert line == "train: error: --export: there is no checkpoint to export (the run has not saved one yet)"
    assert not (here / "runs").exists()


@pytest.mark.parametrize(
    "setting, message",
    [
        (
            "optimizer.learning_rate=.inf",
            "optimizer.learning_rate: 'adam' could not be built: ValueError: `learning_rate` must be a finite "
            "number, got inf",
        ),
        (
            "plugins[1].separator=''",
            "plugins[1]: 'csv_logger' could not be built: ValueError: csv_logger: separator must be one "
            "character, got ''",
        ),
        (
            "plugins[1].separator=ab",
            "plugins[1]: 'csv_logger' could not be built: ValueError: csv_logger: separator must be one "
            "character, got 'ab'",
        ),
    ],
)
def test_values_that_fail_at_run_time_are_refused_up_front(here, capsys, setting, message):
    config = write(here / "c.yaml", SPIRALS)
    assert refused(capsys, "--config", config, "--set", setting) == f"train: error: {config}: {message}"
    assert not (here / "runs").exists()


# --------------------------------------------------------------------------- kept: the learning rate


def test_a_learning_rate_set_on_a_resume_is_said_to_be_unused(three_epochs, capsys):
    config, _ = three_epochs
    status, out, err = run(
        capsys,
        "--config",
        config,
        "--resume",
        "auto",
        "--set",
        "trainer.epochs=4",
        "--set",
        "optimizer.learning_rate=0.5",
    )
    assert status == 0, err
    assert (
        "train: --set optimizer.learning_rate is not used on a resume: the optimizer continues with the "
        "checkpoint's learning rate, 0.01" in out
    )
