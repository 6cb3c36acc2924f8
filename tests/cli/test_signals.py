"""SIGTERM and SIGHUP end ``train`` as Ctrl-C does: an interrupted checkpoint at the next safe point,
temporary files removed, one line, exit status 128 + the signal's number. Real signals to real
processes (and to every rank of a real ``mpiexec``)."""

import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = Path(sys.executable).parent / "train"
COMMAND = [str(SCRIPT)] if SCRIPT.exists() else [sys.executable, "-m", "tapefit", "train"]
PROG = "train" if SCRIPT.exists() else "python -m tapefit train"

if not hasattr(signal, "SIGHUP"):
    pytest.skip("POSIX signals", allow_module_level=True)

# A CSV table read with mmap: the loader streams it into a temporary .f32 file that must go.
CONFIG = """\
    name: sig
    data: {type: csv, path: table.csv, mmap: true}
    model: {type: mlp, hidden_units: [8]}
    loss: sparse_categorical_crossentropy
    optimizer: {type: adam, learning_rate: 0.01}
    trainer: {epochs: 100000, batch_size: 50, verbose: 0}
    plugins:
      - {type: checkpoint, every_n_epochs: 1}
"""


def write_run(folder: Path) -> Path:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(2000, 3))
    y = (x[:, 0] > 0).astype(int)
    rows = [",".join([*(f"{v:.5f}" for v in row), str(label)]) for row, label in zip(x, y)]
    (folder / "table.csv").write_text("\n".join(rows) + "\n")
    config = folder / "c.yaml"
    config.write_text(textwrap.dedent(CONFIG))
    (folder / "tmp").mkdir()
    return config


def environment(folder: Path) -> dict[str, str]:
    return {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
        "TMPDIR": str(folder / "tmp"),  # where the CSV loader's .f32 file goes
    }


def wait_for(process: subprocess.Popen, path: Path, pattern: str) -> None:
    deadline = time.monotonic() + 60
    while not list(path.glob(pattern)):
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, f"no {pattern} in {path}"
        time.sleep(0.02)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
def test_a_signal_saves_the_state_cleans_up_and_exits_128_plus_its_number(tmp_path, signum):
    config = write_run(tmp_path)
    process = subprocess.Popen(
        [*COMMAND, "--config", str(config)],
        cwd=tmp_path,
        env=environment(tmp_path),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    checkpoints = tmp_path / "runs/sig/checkpoints"
    try:
        wait_for(process, checkpoints, "epoch*.npz")
        assert list((tmp_path / "tmp").glob("tapefit-csv-*.f32"))  # the loader's file, while it runs
        process.send_signal(signum)
        _, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    name = signal.Signals(signum).name
    assert process.returncode == 128 + signum, err
    assert "Traceback" not in err
    lines = [line for line in err.strip().splitlines() if not line.startswith(f"{PROG}: WARNING")]
    assert lines == [
        f"{PROG}: stopped by {name}; the state was saved to runs/sig/checkpoints/interrupted.npz "
        "(continue with --resume auto)"
    ]
    assert (checkpoints / "interrupted.npz").is_file()
    assert not list((tmp_path / "tmp").iterdir())  # the .f32 file is gone
    resumed = subprocess.run(
        [*COMMAND, "--config", str(config), "--resume", "auto", "--set", "trainer.epochs=1"],
        cwd=tmp_path,
        env=environment(tmp_path),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert resumed.returncode == 0, resumed.stderr
    assert "resuming from runs/sig/checkpoints/interrupted.npz" in resumed.stdout


@pytest.mark.parametrize(
    "signum, status, word", [(signal.SIGINT, 130, "interrupted"), (signal.SIGTERM, 143, "SIGTERM")]
)
def test_a_signal_while_train_starts_is_one_line(tmp_path, signum, status, word):
    if not SCRIPT.exists() or not Path("/proc/self/maps").exists():
        pytest.skip("needs the installed train script and /proc")
    config = write_run(tmp_path)
    process = subprocess.Popen(
        [str(SCRIPT), "--config", str(config)],
        cwd=tmp_path,
        env=environment(tmp_path),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    maps = Path(f"/proc/{process.pid}/maps")
    deadline = time.monotonic() + 30
    # Once NumPy's library is mapped: the import of tapefit is under way.
    while time.monotonic() < deadline and process.poll() is None:
        try:
            if "numpy" in maps.read_text():
                break
        except OSError:
            pass
        time.sleep(0.001)
    process.send_signal(signum)
    _, err = process.communicate(timeout=60)
    assert process.returncode == status, err
    assert len(err.strip().splitlines()) == 1 and word in err and "Traceback" not in err


MPIEXEC = Path(sys.executable).parent / "mpiexec"


def test_sigterm_to_every_rank_stops_them_together_and_saves(tmp_path):
    pytest.importorskip("mpi4py")
    mpiexec = str(MPIEXEC) if MPIEXEC.exists() else shutil.which("mpiexec")
    if mpiexec is None:
        pytest.skip("needs mpiexec")
    config = write_run(tmp_path)
    config.write_text(config.read_text() + "  - {type: distributed, timeout: 20}\n")
    # In a session of its own, as a scheduler signals every process of the job.
    process = subprocess.Popen(
        [mpiexec, "-n", "2", *COMMAND, "--config", str(config)],
        cwd=tmp_path,
        env=environment(tmp_path),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        wait_for(process, tmp_path / "runs/sig/checkpoints", "epoch*.npz")
        os.killpg(process.pid, signal.SIGTERM)
        _, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.communicate()
    assert process.returncode == 143, err
    assert "Traceback" not in err
    lines = [
        line for line in err.strip().splitlines() if ": INFO: " not in line and ": WARNING: " not in line
    ]
    assert lines == [
        f"{PROG}: stopped by SIGTERM; the state was saved to runs/sig/checkpoints/interrupted.npz "
        "(continue with --resume auto)"
    ], err  # rank 0 speaks for both
    assert (tmp_path / "runs/sig/checkpoints/interrupted.npz").is_file()
    assert not list((tmp_path / "tmp").iterdir())


def test_fit_holds_sigterm_only_where_train_asked_for_it():
    from tapefit.training.boundary import Terminated, _InterruptGuard, raise_terminated

    previous = signal.signal(signal.SIGTERM, raise_terminated)
    try:
        with _InterruptGuard() as guard:
            guard.hold = True
            os.kill(os.getpid(), signal.SIGTERM)  # held until the step ends
            with pytest.raises(Terminated) as raised:
                guard.release()
            assert raised.value.signum == signal.SIGTERM and isinstance(raised.value, KeyboardInterrupt)
        assert signal.getsignal(signal.SIGTERM) is raise_terminated  # put back
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        with _InterruptGuard():  # a program that did not ask keeps SIGTERM's default (the process ends)
            assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    finally:
        signal.signal(signal.SIGTERM, previous)
