"""The distributed plugin under a real MPI launcher (the ``mpi`` extra, also in ``dev``)."""

import json
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

pytest.importorskip("mpi4py")

MPIEXEC = str(Path(sys.executable).parent / "mpiexec")
if not Path(MPIEXEC).exists():
    MPIEXEC = shutil.which("mpiexec") or MPIEXEC
ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}


def mpirun(n, script, tmp_path, timeout=120, args=(), name="script.py"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(script))
    command = [sys.executable, str(path), *map(str, args)]
    if n > 1:
        command = [MPIEXEC, "-n", str(n), *command]
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout, cwd=tmp_path, env=ENV)


def test_collectives_sum_broadcast_and_agree(tmp_path):
    result = mpirun(
        3,
        """
        import numpy as np
        from tapefit.distributed.world import MPIWorld
        w = MPIWorld(timeout=60)
        s = w.allreduce_sum(np.arange(3, dtype=np.float32) * (w.rank + 1), "sum")
        assert s.dtype == np.float32 and s.tolist() == [0.0, 6.0, 12.0], s
        assert w.any(w.rank == 2, "flag") and not w.any(False, "flag")
        a, b = w.broadcast([np.full(2, w.rank, np.float32), np.array([w.rank + 5])], "bcast")
        assert a.tolist() == [0.0, 0.0] and b.tolist() == [5], (a, b)
        assert w.hosts == [w.hosts[0]] * 3 and w.local_size == 3
        with open(f"rank{w.rank}.txt", "w") as f:  # not stdout: the ranks' lines interleave there
            f.write(f"ok {w.rank} {w.shard(10)}")
        """,
        tmp_path,
    )
    assert result.returncode == 0, result.stderr
    assert [(tmp_path / f"rank{r}.txt").read_text() for r in range(3)] == [
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
        from tapefit.distributed.world import MPIWorld
        w = MPIWorld(timeout=1)
        if w.rank == 2:
            time.sleep(60)
        w.allreduce_sum(np.ones(2), "gradient Allreduce")
        """,
        tmp_path,
        timeout=40,
    )
    assert result.returncode != 0
    # stdout too: a run that ended without this line once (under load) printed nothing to stderr.
    shown = f"returncode {result.returncode}\nstdout:\n{result.stdout}\nstderr:\n{result.stderr}"
    assert "rank 2 did not reach the gradient Allreduce within 1 s" in result.stderr, shown
    assert result.stderr.count("did not reach") == 1, shown


# --------------------------------------------------------------------------- training on several ranks

FIT = """
import json, sys
import numpy as np
import tapefit as tp

out, epochs, batch_size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
resume = sys.argv[4] if len(sys.argv) > 4 else None
tp.random.set_seed(0)
rng = np.random.default_rng(0)
x = rng.normal(size=(70, 4)).astype(np.float32)
y = (x[:, 0] + x[:, 1] > 0).astype(np.int64)
model = tp.layers.Sequential([tp.layers.Dense(8, activation="relu"), tp.layers.Dense(2)])
trainer = tp.Trainer(
    model,
    tp.optimizers.Adam(0.01),
    tp.losses.SparseCategoricalCrossentropy(from_logits=True),
    metrics=["accuracy"],
    plugins=[
        tp.plugins.CSVLogger(filename=out + ".csv"),
        tp.plugins.TensorBoard(log_dir=out + ".tb", log_graph=False),
        tp.plugins.Checkpoint(dirpath=out + ".ck"),
    ],
)
history = trainer.fit(
    x, y, epochs=epochs, batch_size=batch_size, validation_data=(x[:9], y[:9]), verbose=0, resume_from=resume
)
if trainer.world.is_chief:
    np.savez(out + ".npz", **model.state_dict())
    with open(out + ".json", "w") as f:
        json.dump({"history": history.history, "size": trainer.world.size}, f)
"""


def fit_on(n, tmp_path, out, epochs=3, batch_size=16, resume=None):
    args = [out, epochs, batch_size] + ([resume] if resume else [])
    result = mpirun(n, FIT, tmp_path, args=args, name="fit.py")
    assert result.returncode == 0, result.stderr
    with open(tmp_path / f"{out}.json") as f:
        info = json.load(f)
    assert info["size"] == n
    return dict(np.load(tmp_path / f"{out}.npz")), info["history"], result


def assert_same_training(a, b, history_a, history_b):
    # Each rank's gradient sums its own rows; the Allreduce adds those partial sums in another
    # order than one matmul over the whole batch does, so results agree to float32 rounding
    # accumulated over the steps (about 1e-7 relative per step), not bit for bit.
    assert sorted(a) == sorted(b)
    for key in a:
        np.testing.assert_allclose(a[key], b[key], rtol=1e-5, atol=1e-6)
    assert sorted(history_a) == sorted(history_b)
    for key in history_a:
        np.testing.assert_allclose(history_a[key], history_b[key], rtol=1e-5)


@pytest.mark.parametrize("ranks", [2, 3])
def test_several_ranks_train_as_one_process_on_the_same_global_batches(tmp_path, ranks):
    one, history_one, _ = fit_on(1, tmp_path, "one")
    many, history_many, result = fit_on(ranks, tmp_path, "many")  # 70 samples in batches of 16: uneven shards
    assert_same_training(one, many, history_one, history_many)
    with open(tmp_path / "many.csv") as f:
        assert [line.split(",")[0] for line in f.read().splitlines()] == [
            "epoch",
            "0",
            "1",
            "2",
        ]  # one writer
    assert sorted(p.name for p in (tmp_path / "many.tb").iterdir()) == ["hparams", "train", "val"]
    assert result.stdout == ""


@pytest.mark.parametrize(("first_on", "resume_on"), [(2, 1), (2, 3), (1, 2)])
def test_a_checkpoint_resumes_on_other_rank_counts(tmp_path, first_on, resume_on):
    straight, history, _ = fit_on(1, tmp_path, "straight", epochs=4)
    fit_on(first_on, tmp_path, "first", epochs=2)
    resumed, resumed_history, _ = fit_on(
        resume_on, tmp_path, "first", epochs=4, resume=str(tmp_path / "first.ck")
    )
    assert_same_training(straight, resumed, history, resumed_history)


STOP_MID_EPOCH = """
class Stop:
    # Every rank stops at the same step, inside an epoch: the fit ends there and the
    # checkpoint plugin saves the state in the middle of the epoch.
    @tp.hookimpl
    def on_train_batch_end(self, trainer, step, logs):
        if step == int(sys.argv[5]) and not trainer.resumed:
            trainer.stop_training = True
tp.random.set_seed(0)"""


@pytest.mark.parametrize(("first_on", "resume_on"), [(2, 2), (3, 1), (1, 3)])
def test_a_mid_epoch_checkpoint_holds_the_sums_of_every_rank(tmp_path, first_on, resume_on):
    # 70 samples in batches of 16 are 5 steps an epoch; stopping after step 6 leaves epoch 2
    # with 2 of its batches counted in every rank's partial loss and metric sums.
    script = FIT.replace("    plugins=[", "    plugins=[Stop(), ").replace(
        "tp.random.set_seed(0)", STOP_MID_EPOCH
    )
    straight, history, _ = fit_on(1, tmp_path, "straight", epochs=3)
    for n, resume in ((first_on, None), (resume_on, str(tmp_path / "cut.ck"))):
        args = ["cut", 3, 16, resume or "", 6]
        result = mpirun(
            n, script.replace("sys.argv[4] if", "sys.argv[4] or None if"), tmp_path, args=args, name="cut.py"
        )
        assert result.returncode == 0, result.stderr
    resumed = dict(np.load(tmp_path / "cut.npz"))
    with open(tmp_path / "cut.json") as f:
        resumed_history = json.load(f)["history"]
    assert_same_training(straight, resumed, history, resumed_history)


def test_an_exception_on_one_rank_ends_every_rank_with_one_message(tmp_path):
    script = FIT.replace(
        "    plugins=[",
        "    plugins=[Fail(), ",
    ).replace(
        "tp.random.set_seed(0)",
        "class Fail:\n"
        "    @tp.hookimpl\n"
        "    def on_train_batch_start(self, trainer, step):\n"
        "        if step == 3 and trainer.world.rank == 1:\n"
        "            raise RuntimeError('rank one broke at step 3')\n"
        "tp.random.set_seed(0)",
    )
    result = mpirun(2, script, tmp_path, args=["x", 3, 16], timeout=60, name="fail.py")
    assert result.returncode != 0
    assert result.stderr.count("rank one broke at step 3") == 1
    assert "train: rank 1 of 2: RuntimeError: rank one broke at step 3" in result.stderr


def test_a_batch_smaller_than_the_ranks_is_refused_before_training(tmp_path):
    result = mpirun(3, FIT, tmp_path, args=["x", 1, 2], name="fit.py")
    assert result.returncode != 0
    assert "a batch of 2 samples cannot be split over 3 processes" in result.stderr


SPIRALS = """\
name: sp
data: {type: spirals, n_samples: 200, n_classes: 2}
model: {type: mlp, hidden_units: [8]}
loss: sparse_categorical_crossentropy
metrics: [accuracy]
optimizer: {type: adam, learning_rate: 0.01}
trainer: {epochs: 2, batch_size: 50}
plugins: [csv_logger, checkpoint]
"""


def train_on(n, tmp_path, *args):
    (tmp_path / "c.yaml").write_text(SPIRALS)
    command = [MPIEXEC, "-n", str(n), sys.executable, "-m", "tapefit", "train", "--config", "c.yaml", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=120, cwd=tmp_path, env=ENV)


def test_train_under_mpiexec_switches_distributed_on_and_only_rank_0_speaks(tmp_path):
    result = train_on(2, tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("train: done: sp, 2 epochs") == 1
    [line] = [line for line in result.stderr.splitlines() if "distributed:" in line]
    assert "distributed: 2 ranks on 1 host(s)" in line and "BLAS thread" in line
    assert (tmp_path / "runs/sp/history.csv").read_text().count("\n") == 3


def test_train_refuses_a_batch_smaller_than_the_ranks_with_exit_2(tmp_path):
    result = train_on(3, tmp_path, "--set", "trainer.batch_size=2")
    assert result.returncode != 0
    lines = [line for line in result.stderr.splitlines() if line.strip() and "=====" not in line]
    assert lines[0].startswith(
        "python -m tapefit train: error: c.yaml: trainer.batch_size: a batch of 2 samples"
    )
    assert result.stderr.count("cannot be split over 3 processes") == 1
    assert not (tmp_path / "runs").exists()


def test_batch_normalization_moving_statistics_agree_across_ranks(tmp_path):
    result = mpirun(
        2,
        """
        import numpy as np
        import tapefit as tp

        tp.random.set_seed(0)
        x = np.random.default_rng(0).normal(size=(40, 3)).astype(np.float32)
        y = (x[:, 0] > 0).astype(np.int64)
        model = tp.layers.Sequential([tp.layers.Dense(4), tp.layers.BatchNormalization(), tp.layers.Dense(2)])
        trainer = tp.Trainer(model, "sgd", tp.losses.SparseCategoricalCrossentropy(from_logits=True))
        trainer.fit(x, y, epochs=2, batch_size=10, verbose=0)
        stats = np.concatenate([v.numpy().ravel() for v in model.non_trainable_variables])
        # Built as mean 0 and variance 1: statistics that never moved would agree trivially.
        initial = np.concatenate([np.zeros(4), np.ones(4)]).astype(stats.dtype)
        assert np.abs(stats - initial).min() > 1e-3, stats
        everyone = trainer.world.allreduce_sum(stats, "check") / trainer.world.size
        assert np.array_equal(stats, everyone.astype(stats.dtype)), (stats, everyone)
        """,
        tmp_path,
    )
    assert result.returncode == 0, result.stderr


def test_ctrl_c_through_the_launcher_stops_every_rank_at_one_step(tmp_path):
    (tmp_path / "c.yaml").write_text(
        SPIRALS.replace("epochs: 2", "epochs: 100000").replace("n_samples: 200", "n_samples: 4000")
    )
    command = [MPIEXEC, "-n", "2", sys.executable, "-m", "tapefit", "train", "--config", "c.yaml"]
    # In a session of its own, as a terminal's Ctrl-C reaches the launcher's process group.
    process = subprocess.Popen(
        command,
        cwd=tmp_path,
        env=ENV,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 60
        while not list((tmp_path / "runs/sp/checkpoints").glob("epoch*.npz")) and time.monotonic() < deadline:
            assert process.poll() is None, process.communicate()
            time.sleep(0.05)
        os.killpg(process.pid, signal.SIGINT)
        _, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    assert process.returncode == 130, err
    assert (tmp_path / "runs/sp/checkpoints/interrupted.npz").is_file()
    assert "Traceback" not in err
    resume = [
        sys.executable,
        "-m",
        "tapefit",
        "train",
        "--config",
        "c.yaml",
        "--resume",
        "auto",
        "--set",
        "trainer.epochs=1",
    ]
    resumed = subprocess.run(resume, cwd=tmp_path, env=ENV, capture_output=True, text=True, timeout=120)
    assert resumed.returncode == 0, resumed.stderr


def test_each_rank_gets_its_share_of_the_cores_unless_the_user_chose(monkeypatch):
    from tapefit.plugins import distributed

    limits = []
    monkeypatch.setattr("tapefit.distributed.threads.usable_cores", lambda: 8)
    monkeypatch.setattr("threadpoolctl.threadpool_limits", lambda limits, user_api: limits_seen(limits))

    def limits_seen(value):
        limits.append(value)

    assert distributed.blas_threads_per_rank(3, environ={}) == 2
    assert distributed.blas_threads_per_rank(16, environ={}) == 1  # at least one
    assert limits == [2, 1]
    assert distributed.blas_threads_per_rank(3, environ={"OMP_NUM_THREADS": "4"}) is None
    assert limits == [2, 1]  # the user's setting wins: nothing changed


def test_a_pipeline_is_read_in_parts_by_the_ranks(tmp_path):
    pytest.importorskip("grain")
    script = """
        import json
        import numpy as np
        import tapefit as tp
        from tapefit.distributed.world import launcher_rank

        tp.random.set_seed(0)
        x = np.arange(40, dtype=np.float32).reshape(20, 2)
        y = (np.arange(20) % 2).astype(np.int64)
        model = tp.layers.Sequential([tp.layers.Dense(4, activation="relu"), tp.layers.Dense(2)])
        trainer = tp.Trainer(model, "sgd", tp.losses.SparseCategoricalCrossentropy(from_logits=True))
        trainer.fit(tp.data.Pipeline(x, y, batch_size=3, seed=5), epochs=2, verbose=0)
        with open(f"rank{launcher_rank()}.json", "w") as f:
            json.dump({"steps": trainer.step, "w": [v.numpy().tolist() for v in model.variables]}, f)
    """
    result = mpirun(2, script, tmp_path)
    assert result.returncode == 0, result.stderr
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    assert ranks[0]["w"] == ranks[1]["w"]  # the same model on every rank
    assert ranks[0]["steps"] == ranks[1]["steps"] == 8  # 10 samples each: batches of 3, 3, 3, 1


GRAIN_PARTS = """
    import json
    import sys
    import grain
    import numpy as np
    import tapefit as tp
    from tapefit.distributed.world import launcher_rank

    batch_size = int(sys.argv[1])
    ids = np.arange(20)
    x = np.stack([ids / 20.0, (ids % 3) / 3.0], axis=1).astype(np.float32)
    y = (ids % 2).astype(np.int64)
    seen = []


    def load(i):
        seen.append(int(i))
        return x[i], y[i]


    def main():
        tp.random.set_seed(0)
        model = tp.layers.Sequential([tp.layers.Dense(4, activation="relu"), tp.layers.Dense(2)])
        trainer = tp.Trainer(model, "sgd", tp.losses.SparseCategoricalCrossentropy(from_logits=True))
        dataset = grain.MapDataset.range(20).map(load).batch(batch_size)
        trainer.fit(dataset, epochs=2, verbose=0)
        with open(f"rank{launcher_rank()}.json", "w") as f:
            json.dump({"steps": trainer.step, "seen": seen, "w": [v.numpy().tolist() for v in model.variables]}, f)


    if __name__ == "__main__":
        main()
"""


def test_a_grain_map_dataset_is_read_in_parts_by_the_ranks(tmp_path):
    pytest.importorskip("grain")
    one = mpirun(1, GRAIN_PARTS, tmp_path, args=[4])  # batches of 4: rows 4k..4k+3
    assert one.returncode == 0, one.stderr
    alone = json.loads((tmp_path / "rank0.json").read_text())
    result = mpirun(2, GRAIN_PARTS, tmp_path, args=[2])  # batches of 2, every other one per rank
    assert result.returncode == 0, result.stderr
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    assert ranks[0]["steps"] == ranks[1]["steps"] == alone["steps"] == 10  # 5 steps an epoch
    read = [set(rank["seen"]) for rank in ranks]
    assert read[0] == {0, 1, 4, 5, 8, 9, 12, 13, 16, 17} and read[1] == set(range(20)) - read[0]
    assert ranks[0]["w"] == ranks[1]["w"]
    for ours, theirs in zip(ranks[0]["w"], alone["w"], strict=True):  # step k: batches 2k and 2k + 1
        np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-6)


GRAIN_RESUME = """
    import json
    import sys
    import grain
    import numpy as np
    import tapefit as tp
    from tapefit.distributed.world import launcher_rank

    out, stop = sys.argv[1], int(sys.argv[2])
    resume = sys.argv[3] if len(sys.argv) > 3 else None
    ids = np.arange(40)
    x = np.stack([ids / 40.0, (ids % 3) / 3.0], axis=1).astype(np.float32)
    rows = list(zip(x, (ids % 2).astype(np.int64)))


    class StopAt:
        @tp.hookimpl
        def on_train_batch_end(self, trainer, step):
            if step == stop:
                trainer.stop_training = True


    def main():
        tp.random.set_seed(0)
        model = tp.layers.Sequential([tp.layers.Dense(4, activation="relu"), tp.layers.Dense(2)])
        plugins = [StopAt(), tp.plugins.Checkpoint(dirpath=out + ".ck", every_n_epochs=None)]
        trainer = tp.Trainer(model, tp.optimizers.Adam(0.01), "sparse_categorical_crossentropy", plugins=plugins)
        dataset = grain.MapDataset.source(rows).shuffle(seed=3).batch(4)
        trainer.fit(dataset, epochs=2, verbose=0, resume_from=resume)
        with open(f"{out}{launcher_rank()}.json", "w") as f:
            json.dump({"steps": trainer.step, "w": [v.numpy().tolist() for v in model.variables]}, f)


    if __name__ == "__main__":
        main()
"""


def test_a_grain_map_dataset_read_in_parts_resumes_inside_an_epoch(tmp_path):
    pytest.importorskip("grain")
    from tapefit.checkpointing import load_checkpoint

    for args in (["straight", -1], ["cut", 2]):  # cut: stopped after batch 3 of 5 of the first epoch
        result = mpirun(2, GRAIN_RESUME, tmp_path, args=args)
        assert result.returncode == 0, result.stderr
    saved = load_checkpoint(tmp_path / "cut.ck")
    assert saved["trainer"]["in_epoch"] and saved["trainer"]["batch_in_epoch"] == 3
    assert saved["loader"]["ranks"] == 2
    result = mpirun(1, GRAIN_RESUME, tmp_path, args=["one", -1, tmp_path / "cut.ck"])
    assert result.returncode != 0 and "read in parts by 2 processes, and this fit runs on 1" in result.stderr
    result = mpirun(2, GRAIN_RESUME, tmp_path, args=["cut", -1, tmp_path / "cut.ck"])
    assert result.returncode == 0, result.stderr
    straight, resumed = (json.loads((tmp_path / f"{name}0.json").read_text()) for name in ("straight", "cut"))
    assert straight["steps"] == resumed["steps"] == 10  # 10 batches of 4 an epoch, 5 a rank
    assert straight["w"] == resumed["w"]  # bit for bit: the same steps on the same batches
