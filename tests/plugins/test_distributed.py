"""The distributed plugin under a real MPI launcher (the ``mpi`` extra, also in ``dev``)."""

import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("mpi4py")

MPIEXEC = shutil.which("mpiexec") or str(Path(sys.executable).parent / "mpiexec")


def mpirun(n, script, tmp_path, timeout=120, args=()):
    path = tmp_path / "script.py"
    path.write_text(textwrap.dedent(script))
    return subprocess.run(
        [MPIEXEC, "-n", str(n), sys.executable, str(path), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=tmp_path,
    )


def test_collectives_sum_broadcast_and_agree(tmp_path):
    result = mpirun(
        3,
        """
        import numpy as np
        from tapefit.plugins.distributed import MPIWorld
        w = MPIWorld(timeout=60)
        s = w.allreduce_sum(np.arange(3, dtype=np.float32) * (w.rank + 1), "sum")
        assert s.dtype == np.float32 and s.tolist() == [0.0, 6.0, 12.0], s
        assert w.any(w.rank == 2, "flag") and not w.any(False, "flag")
        a, b = w.broadcast([np.full(2, w.rank, np.float32), np.array([w.rank + 5])], "bcast")
        assert a.tolist() == [0.0, 0.0] and b.tolist() == [5], (a, b)
        assert w.hosts == [w.hosts[0]] * 3 and w.local_size == 3
        print("ok", w.rank, w.shard(10))
        """,
        tmp_path,
    )
    assert result.returncode == 0, result.stderr
    assert sorted(result.stdout.split("\n")[:3]) == [
        "ok 0 slice(0, 4, None)",
        "ok 1 slice(4, 7, None)",
        "ok 2 slice(7, 10, None)",
    ]


def test_a_rank_that_never_arrives_is_named_and_the_run_aborts(tmp_path):
    result = mpirun(
        3,
        """
        import time
        import numpy as np
        from tapefit.plugins.distributed import MPIWorld
        w = MPIWorld(timeout=1)
        if w.rank == 2:
            time.sleep(60)
        w.allreduce_sum(np.ones(2), "gradient Allreduce")
        """,
        tmp_path,
        timeout=40,
    )
    assert result.returncode != 0
    assert "rank 2 did not reach the gradient Allreduce within 1 s" in result.stderr
    assert result.stderr.count("did not reach") == 1
