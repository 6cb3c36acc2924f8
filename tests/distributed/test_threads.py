"""The BLAS-thread rule of tapefit.distributed.threads and Trainer(threads=...)."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import numpy as np
import pytest
from threadpoolctl import threadpool_info

import tapefit as tp
from tapefit.data.sources import GrainSource
from tapefit.distributed import threads


def test_the_rule_shares_the_cores_and_the_user_wins(monkeypatch):
    monkeypatch.setattr(threads, "usable_cores", lambda: 8)
    assert threads.blas_threads(environ={}) == 8
    assert threads.blas_threads(ranks_on_host=2, environ={}) == 4
    assert threads.blas_threads(ranks_on_host=2, workers=1, environ={}) == 2
    assert threads.blas_threads(ranks_on_host=16, environ={}) == 1  # at least one
    assert threads.blas_threads(environ={"OPENBLAS_NUM_THREADS": "3"}) is None
    assert threads.blas_threads(busy=3, environ={}) == 5  # another run keeps 3 cores busy
    assert threads.blas_threads(busy=12, environ={}) == 1


def test_busy_cores_sees_another_process_spinning():
    if not os.path.exists("/proc/stat"):
        pytest.skip("no /proc/stat here")
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.3)
        busy = threads.busy_cores(0.3)
    finally:
        spinner.kill()
        spinner.wait()
    assert busy >= 1


def test_threads_must_be_auto_none_or_a_count():
    assert threads.resolve_threads(None) is None and threads.resolve_threads(2) == 2
    for bad in (0, -1, 1.5, True, "many"):
        with pytest.raises(ValueError, match="threads must be None, 'auto' or a whole number"):
            threads.resolve_threads(bad)


def blas_threads_now():
    return [pool["num_threads"] for pool in threadpool_info() if pool["user_api"] == "blas"]


def test_the_trainer_limits_blas_inside_fit_only():
    if not blas_threads_now():
        pytest.skip("NumPy here has no BLAS that threadpoolctl can see")
    seen = []

    class Look:
        @tp.hookimpl
        def on_epoch_start(self):
            seen.extend(blas_threads_now())

    before = blas_threads_now()
    x = np.random.default_rng(0).normal(size=(8, 3)).astype(np.float32)
    trainer = tp.Trainer(tp.layers.Dense(2), "sgd", "mse", plugins=[Look()], threads=1)
    trainer.fit(x, x[:, :2], epochs=1, batch_size=4, verbose=0)
    assert seen and set(seen) == {1}
    assert blas_threads_now() == before


@pytest.fixture
def six_idle_cores(monkeypatch):
    """A machine of 6 usable cores that nothing else keeps busy, with no BLAS count set."""
    monkeypatch.setattr(threads, "usable_cores", lambda: 6)
    monkeypatch.setattr(threads, "busy_cores", lambda seconds=0.1: 0)
    for name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        monkeypatch.delenv(name, raising=False)


def test_auto_counts_the_workers_of_the_fits_pipeline(six_idle_cores):
    pytest.importorskip("grain")
    x = np.zeros((8, 2), np.float32)
    y = np.zeros(8, np.int64)
    trainer = tp.Trainer(tp.layers.Dense(2), "sgd", "sparse_categorical_crossentropy", threads="auto")
    assert trainer.threads == 6
    trainer.fit(tp.data.Pipeline(x, y, batch_size=4, workers=2), verbose=0)
    assert trainer.threads == 2  # 6 cores over this process and its 2 workers


@pytest.mark.parametrize("kind", ["pipeline", "grain", "dataloader"])
def test_the_default_sizes_blas_with_the_datas_workers_only_while_they_run(six_idle_cores, kind):
    # Worker processes compete with the step's BLAS threads: by default (threads=None) a fit
    # whose data has workers sizes the BLAS by the rule; a fit on arrays leaves it alone.
    grain = pytest.importorskip("grain")
    x = np.zeros((8, 2), np.float32)
    y = np.zeros(8, np.int64)
    if kind == "pipeline":
        data = tp.data.Pipeline(x, y, batch_size=4, workers=2)
    elif kind == "grain":
        data = GrainSource.of(grain.MapDataset.source(list(zip(x, y))).batch(4), workers=2)
    else:
        source = [(x[i : i + 4], y[i : i + 4]) for i in (0, 4)]
        sampler = grain.samplers.IndexSampler(2, shard_options=grain.sharding.NoSharding(), num_epochs=1)
        data = grain.DataLoader(data_source=source, sampler=sampler, worker_count=2)
    trainer = tp.Trainer(tp.layers.Dense(2), "sgd", "sparse_categorical_crossentropy")
    assert trainer.threads is None
    trainer.fit(data, verbose=0)
    assert trainer.threads == 2  # 6 cores over this process and its 2 workers
    trainer.fit(x, y, verbose=0)
    assert trainer.threads is None
