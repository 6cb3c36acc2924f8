"""Under ``mpiexec`` every rank checks, before the first collective, that it runs the same resolved
config on data of the same shape; a rank started with other ``--set`` values ends the job with
exit 2 and one line naming the first key that differs. Real ranks, started by MPICH's
``mpiexec``, with a short collective timeout: a regression fails in seconds, not after 600."""

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("mpi4py")

REPO = Path(__file__).resolve().parents[2]
MPIEXEC = Path(sys.executable).parent / "mpiexec"
SCRIPT = Path(sys.executable).parent / "train"
COMMAND = [str(SCRIPT)] if SCRIPT.exists() else [sys.executable, "-m", "tapefit", "train"]
PROG = "train" if SCRIPT.exists() else "python -m tapefit train"

CONFIG = """\
    name: sp
    data: {type: spirals, n_samples: 200, n_classes: 2}
    model: {type: mlp, hidden_units: [8]}
    loss: sparse_categorical_crossentropy
    optimizer: {type: adam, learning_rate: 0.01}
    trainer: {epochs: 2, batch_size: 50, verbose: 0}
    plugins: [checkpoint, {type: distributed, timeout: 5}]
"""

# Runs train with the arguments of its rank: RANK0_ARGS for rank 0, RANK1_ARGS for rank 1.
PER_RANK = """\
    import json, os, sys

    rank = os.environ.get("PMI_RANK", "0")
    extra = json.loads(os.environ["RANK1_ARGS" if rank == "1" else "RANK0_ARGS"])
    command = json.loads(os.environ["TRAIN_COMMAND"])
    args = [*command, "--config", "c.yaml", *extra]
    os.execv(args[0], args)
"""


def run_ranks(
    tmp_path: Path, rank0: list[str], rank1: list[str], config: str = CONFIG
) -> subprocess.CompletedProcess:
    mpiexec = str(MPIEXEC) if MPIEXEC.exists() else shutil.which("mpiexec")
    if mpiexec is None:
        pytest.skip("needs mpiexec")
    (tmp_path / "c.yaml").write_text(textwrap.dedent(config))
    (tmp_path / "per_rank.py").write_text(textwrap.dedent(PER_RANK))
    command = COMMAND if SCRIPT.exists() else [sys.executable, "-m", "tapefit", "train"]
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO), str(tmp_path), os.environ.get("PYTHONPATH", "")]),
        "RANK0_ARGS": json_list(rank0),
        "RANK1_ARGS": json_list(rank1),
        "TRAIN_COMMAND": json_list(command),
    }
    return subprocess.run(
        [mpiexec, "-n", "2", sys.executable, "per_rank.py"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=90,
    )


def json_list(values: list[str]) -> str:
    import json

    return json.dumps(values)


@pytest.mark.parametrize(
    ("key", "rank0", "rank1", "values"),
    [
        ("model.hidden_units", "[8]", "[16]", "rank 0 has [8], rank 1 has [16]"),
        ("trainer.epochs", "2", "3", "rank 0 has 2, rank 1 has 3"),
        ("data.seed", "1", "2", "rank 0 has 1, rank 1 has 2"),
        ("data.n_samples", "200", "240", "rank 0 has 200, rank 1 has 240"),
    ],
)
def test_a_rank_with_another_config_ends_the_job_naming_the_key(tmp_path, key, rank0, rank1, values):
    result = run_ranks(tmp_path, ["--set", f"{key}={rank0}"], ["--set", f"{key}={rank1}"])
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    lines = [line for line in result.stderr.strip().splitlines() if ": INFO: " not in line]
    assert lines == [
        f"{PROG}: error: c.yaml: {key}: differs between the MPI ranks ({values}); every rank must run "
        "the same config"
    ], result.stderr
    assert not (tmp_path / "runs/sp/config.yaml").exists()  # nothing written, nothing trained


def test_ranks_with_the_same_config_given_in_another_order_train(tmp_path):
    result = run_ranks(
        tmp_path,
        ["--set", "trainer.epochs=2", "--set", "data.seed=3"],
        ["--set", "data.seed=3", "--set", "trainer.epochs=2"],
    )
    assert result.returncode == 0, result.stderr
    assert "train: done: sp, 2 epochs" in result.stdout


def test_a_rank_whose_data_has_another_shape_ends_the_job(tmp_path):
    # The same config, but a loader that reads each rank's own files (here: its rank number).
    (tmp_path / "rankdata.py").write_text(
        textwrap.dedent(
            """\
            import os

            import numpy as np

            import tapefit as tp


            @tp.configurable
            def load(n: int = 100):
                n += 20 * int(os.environ.get("PMI_RANK", "0"))
                x = np.random.default_rng(0).normal(size=(n, 2)).astype(np.float32)
                return x, (x[:, 0] > 0).astype(np.int64)
            """
        )
    )
    config = CONFIG.replace("{type: spirals, n_samples: 200, n_classes: 2}", "{type: 'rankdata:load'}")
    result = run_ranks(tmp_path, [], [], config=config)
    assert result.returncode == 2, result.stderr
    lines = [line for line in result.stderr.strip().splitlines() if ": INFO: " not in line]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(
        f"{PROG}: error: data: differs between the MPI ranks (rank 0 has 80 training"
    ), lines
    assert "rank 1 has 96 training samples" in lines[0], lines


def test_ranks_that_resume_from_other_checkpoints_end_the_job(tmp_path):
    (tmp_path / "c.yaml").write_text(textwrap.dedent(CONFIG))
    # Trained once in one process (the distributed plugin is harmless there).
    first = subprocess.run(
        [*COMMAND, "--config", "c.yaml"], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert first.returncode == 0, first.stderr
    epoch0 = "runs/sp/checkpoints/epoch0000-step00000004.npz"
    assert (tmp_path / epoch0).is_file()
    epochs = ["--set", "trainer.epochs=3"]
    result = run_ranks(tmp_path, [*epochs, "--resume", epoch0], [*epochs, "--resume", "auto"])
    assert result.returncode == 2, result.stderr
    lines = [line for line in result.stderr.strip().splitlines() if ": INFO: " not in line]
    assert lines == [
        f"{PROG}: error: --resume: differs between the MPI ranks (rank 0 has '{epoch0}', rank 1 has "
        "'runs/sp/checkpoints/epoch0001-step00000008.npz'); every rank must run the same config"
    ], result.stderr
