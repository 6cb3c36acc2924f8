"""train --config with streamed data: npy (memory-mapped), grain sources, worker pipelines."""

import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from tapefit.cli import app as cli

grain = pytest.importorskip("grain")


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


def config(workdir: Path, data: str, model: str = "{type: mlp, hidden_units: [8]}") -> Path:
    path = workdir / "c.yaml"
    path.write_text(
        textwrap.dedent(
            f"""\
            name: streamed
            data: {data}
            model: {model}
            loss: sparse_categorical_crossentropy
            metrics: [accuracy]
            trainer: {{epochs: 2, batch_size: 16}}
            plugins: [{{type: checkpoint}}]
            """
        )
    )
    return path


def run(args, capsys):
    status = cli.main([str(a) for a in args])
    out, err = capsys.readouterr()
    return status, out, err


def spirals(workdir):
    from tapefit.data import make_spirals

    x, y = make_spirals(n_samples=120, n_classes=3, seed=0)
    (workdir / "sp").mkdir()
    np.save(workdir / "sp" / "x.npy", x.astype(np.float32))
    np.save(workdir / "sp" / "y.npy", y)
    return x, y


def test_npy_data_trains_memory_mapped(workdir, capsys):
    spirals(workdir)
    status, out, err = run(["--config", config(workdir, "{type: npy, path: sp, mmap: true}")], capsys)
    assert status == 0, err
    assert "96 training and 24 validation samples of shape (2,)" in out
    assert (workdir / "runs/streamed/checkpoints/last").is_file()


def test_npy_errors_name_the_key_and_the_file(workdir, capsys):
    spirals(workdir)
    (workdir / "sp" / "x.npy").write_text("not numpy\n")
    status, out, err = run(["--config", config(workdir, "{type: npy, path: sp}")], capsys)
    assert status == 2 and out == "" and "Traceback" not in err
    assert err.strip().endswith(
        "data.path: 'sp/x.npy' is not a .npy file (it does not start with NumPy's header)"
    )
    status, _, err = run(["--config", config(workdir, "{type: npy, path: sp, standardize: true}")], capsys)
    assert status == 2 and "data.path" in err  # the bad file is found before the other keys matter


def test_data_workers_train_through_a_pipeline_and_resume(workdir, capsys):
    spirals(workdir)
    path = config(workdir, "{type: npy, path: sp, workers: 2, prefetch: 2}")
    status, out, err = run(["--config", path], capsys)
    assert status == 0, err
    assert "read by 2 worker processes" in out
    status, out, err = run(["--config", path, "--resume", "auto", "--set", "trainer.epochs=3"], capsys)
    assert status == 0, err
    assert "resuming from" in out


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ("data.workers=-1", "data.workers: must be at least 0"),
        ("data.prefetch=0", "data.prefetch: must be at least 1"),
        ("data.map=os:getcwd", "data.map: 'os:getcwd' is not a function marked with @tp.configurable"),
    ],
)
def test_bad_worker_settings_are_config_errors(workdir, capsys, setting, message):
    spirals(workdir)
    status, out, err = run(["--config", config(workdir, "{type: npy, path: sp}"), "--set", setting], capsys)
    assert status == 2 and out == "" and "Traceback" not in err
    assert message in err and len(err.strip().splitlines()) == 1


GRAIN_MODULE = """
import grain
import numpy as np
import tapefit as tp


@tp.configurable
def make_dataset(n=120, batch_size=16):
    x, y = tp.data.make_spirals(n_samples=n, n_classes=3, seed=0)
    rows = list(zip(x.astype(np.float32), y))
    train = grain.MapDataset.source(rows[:96]).shuffle(seed=1).batch(batch_size)
    validation = grain.MapDataset.source(rows[96:]).batch(batch_size)
    return train, validation


@tp.configurable
def make_loader(batch_size=16):
    x, y = tp.data.make_spirals(n_samples=96, n_classes=3, seed=0)
    rows = list(zip(x.astype(np.float32), y))
    sampler = grain.samplers.IndexSampler(len(rows), shuffle=False, num_epochs=1)
    return grain.DataLoader(
        data_source=rows, sampler=sampler, operations=[grain.transforms.Batch(batch_size)], worker_count=0
    )


@tp.configurable
def with_bad_validation():
    train, _ = make_dataset()
    x, y = tp.data.make_spirals(n_samples=32, n_classes=3, seed=1)
    good = (x[:16].astype(np.float32), y[:16])
    bad = (np.zeros((16, 5), np.float32), y[16:])  # 5 features: evaluating it fails
    return train, grain.MapDataset.source([good, bad])


@tp.configurable
def endless(batch_size=16):
    train, validation = make_dataset(batch_size=batch_size)
    return train.repeat(), validation


def unmarked():
    return None
"""


def test_a_grain_source_trains_with_validation(workdir, capsys):
    (workdir / "mydata.py").write_text(GRAIN_MODULE)
    data = "{type: grain, source: 'mydata:make_dataset', n: 120, validation_split: 0}"
    path = config(workdir, data, model="{type: mlp, hidden_units: [8], output_units: 3}")
    status, _, err = run(["--config", path, "--set", "trainer.verbose=2"], capsys)
    assert status == 0, err
    assert "Epoch 2/2 - 6 batches" in err and "val_accuracy" in err  # 96 samples in batches of 16
    sys.modules.pop("mydata", None)


@pytest.mark.parametrize(
    ("data", "model", "message"),
    [
        (
            "{type: grain, source: 'mydata:make_dataset', validation_split: 0.2}",
            "{type: mlp, output_units: 3}",
            "data.validation_split: a grain source is not split by train",
        ),
        (
            "{type: grain, source: 'mydata:make_dataset', validation_split: 0}",
            "{type: mlp}",
            "model.output_units: a grain source is not read before training",
        ),
        (
            "{type: grain, source: 'mydata:unmarked', validation_split: 0}",
            "{type: mlp, output_units: 3}",
            "data.source: 'mydata:unmarked' is not a function marked with @tp.configurable",
        ),
    ],
)
def test_grain_config_errors(workdir, capsys, data, model, message):
    (workdir / "mydata.py").write_text(GRAIN_MODULE)
    status, out, err = run(["--config", config(workdir, data, model=model)], capsys)
    assert status == 2 and out == "" and "Traceback" not in err, err
    assert message in err and len(err.strip().splitlines()) == 1
    sys.modules.pop("mydata", None)


def test_a_grain_source_with_the_data_defaults_trains_quietly(workdir, capsys):
    # validation_split's default (0.2 for arrays) is 0 for a grain source, which gives its own
    # validation set; and Grain's import says nothing about JAX's profiler.
    (workdir / "mydata.py").write_text(GRAIN_MODULE)
    path = config(workdir, "{type: grain, source: 'mydata:make_dataset'}", "{type: mlp, output_units: 3}")
    status, out, err = run(["--config", path], capsys)
    assert status == 0, err
    assert "absl" not in err and "profiler" not in err
    status, out, _ = run(["--config", path, "--print-config"], capsys)
    assert "validation_split: 0.0" in out


def test_an_endless_grain_source_needs_steps_per_epoch(workdir, capsys):
    # Before, a repeat() of no count trained one silent epoch that never ended.
    (workdir / "mydata.py").write_text(GRAIN_MODULE)
    data = "{type: grain, source: 'mydata:endless', validation_split: 0}"
    path = config(workdir, data, model="{type: mlp, hidden_units: [8], output_units: 3}")
    status, out, err = run(["--config", path], capsys)
    assert status == 2 and out == "" and "Traceback" not in err, err
    assert err.strip().splitlines() == [
        f"train: error: {path}: trainer.steps_per_epoch: data.source repeats without end (a MapDataset.repeat() "
        "of no count), so an epoch would never end: set trainer.steps_per_epoch"
    ]
    status, _, err = run(
        ["--config", path, "--set", "trainer.steps_per_epoch=3", "--set", "trainer.verbose=2"], capsys
    )
    assert status == 0, err
    assert "Epoch 2/2 - 3 batches" in err
    sys.modules.pop("mydata", None)


def test_a_grain_config_error_is_one_line_when_jax_is_missing(workdir):
    # Without JAX, importing Grain logs "Failed to load jax profiler" through absl: a stand-in
    # jax package that cannot be imported makes Grain's import take that path here too.
    import os
    import subprocess

    (workdir / "mydata.py").write_text(GRAIN_MODULE)
    (workdir / "nojax" / "jax").mkdir(parents=True)
    (workdir / "nojax" / "jax" / "__init__.py").write_text("raise ImportError('No module named jax')\n")
    data = "{type: grain, source: 'mydata:make_dataset', validation_split: 0}"
    path = config(workdir, data, model="{type: mlp}")  # no output_units: an error after the import
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(workdir / "nojax"), str(root), str(workdir)])}
    done = subprocess.run(
        [sys.executable, "-m", "tapefit", "train", "--config", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=workdir,
        env=env,
    )
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.strip().splitlines() == [
        f"python -m tapefit train: error: {path}: model.output_units: a grain source is not read before "
        "training, so the classes are not known: give output_units"
    ]


def test_a_grain_source_with_workers_reads_every_batch_in_worker_processes(workdir, capsys):
    (workdir / "mydata.py").write_text(GRAIN_MODULE)
    data = "{type: grain, source: 'mydata:make_dataset', validation_split: 0, workers: 2, prefetch: 1}"
    path = config(workdir, data, model="{type: mlp, hidden_units: [8], output_units: 3}")
    status, out, err = run(["--config", path, "--set", "trainer.verbose=2"], capsys)
    assert status == 0, err
    assert "read by 2 worker processes" in out
    assert "Epoch 2/2 - 6 batches" in err  # all 96 samples, not the first batch alone
    status, out, err = run(["--config", path, "--resume", "auto", "--set", "trainer.epochs=3"], capsys)
    assert status == 0, err
    assert "resuming from" in out and "Epoch 3/3 - 6 batches" in err
    sys.modules.pop("mydata", None)


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ("data.map=mydata:make_dataset", "data.map: a grain source's elements are batches"),
        ("data.source=mydata:make_loader", "data.workers: a Grain DataLoader runs its own workers"),
    ],
)
def test_grain_settings_that_cannot_apply_are_config_errors(workdir, capsys, setting, message):
    (workdir / "mydata.py").write_text(GRAIN_MODULE)
    data = "{type: grain, source: 'mydata:make_dataset', validation_split: 0, workers: 2}"
    path = config(workdir, data, model="{type: mlp, hidden_units: [8], output_units: 3}")
    status, out, err = run(["--config", path, "--set", setting], capsys)
    assert status == 2 and out == "" and "Traceback" not in err, err
    assert message in err and len(err.strip().splitlines()) == 1
    sys.modules.pop("mydata", None)


MAPS_MODULE = """
import numpy as np
import tapefit as tp


@tp.configurable
def quadruple(sample):
    x, y = sample
    return x, y, y, y


@tp.configurable
def broken(sample):
    raise KeyError("no such field")


@tp.configurable
def squares(sample):  # 2 features in, 4 out: the model must be built for 4
    x, y = sample
    return np.concatenate([x, x * x]), y
"""


@pytest.mark.parametrize(
    ("name", "message"),
    [
        (
            "quadruple",
            "data.map: 'mymaps:quadruple': its first batch: ValueError: batch 0 of the data: expected an "
            "(x, y) or (x, y, sample_weight) tuple, or a dict with keys 'x' and 'y' (and 'sample_weight'), "
            "got a tuple of 4 items",
        ),
        ("broken", "data.map: 'mymaps:broken' failed on the first batch: KeyError: 'no such field'"),
    ],
)
def test_a_bad_map_is_a_config_error_before_training(workdir, capsys, name, message):
    spirals(workdir)
    (workdir / "mymaps.py").write_text(MAPS_MODULE)
    path = config(workdir, f"{{type: npy, path: sp, map: 'mymaps:{name}'}}")
    status, out, err = run(["--config", path], capsys)
    assert status == 2 and out == "" and "Traceback" not in err, err
    assert err.strip().endswith(message) and len(err.strip().splitlines()) == 1
    assert not (workdir / "runs").exists()
    sys.modules.pop("mymaps", None)


def test_the_model_is_checked_and_built_on_mapped_samples(workdir, capsys):
    spirals(workdir)
    (workdir / "mymaps.py").write_text(MAPS_MODULE)
    path = config(workdir, "{type: npy, path: sp, map: 'mymaps:squares', validation_split: 0}")
    status, out, err = run(["--config", path], capsys)
    assert status == 0, err
    status, out, err = run(["--config", path, "--set", "data.validation_split=0.2"], capsys)
    assert status == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert err.strip().endswith(
        "data.map: 'mymaps:squares' turns samples of shape (2,) into (4,), but the validation samples are "
        "used as stored (the map runs on training batches only): set data.validation_split: 0"
    )
    sys.modules.pop("mymaps", None)


def test_steps_per_epoch_and_validation_steps_come_from_the_trainer_section(workdir, capsys):
    (workdir / "mydata.py").write_text(GRAIN_MODULE)
    data = "{type: grain, source: 'mydata:with_bad_validation', validation_split: 0}"
    path = config(workdir, data, model="{type: mlp, hidden_units: [8], output_units: 3}")
    settings = ["--set", "trainer.verbose=2", "--set", "trainer.steps_per_epoch=4"]
    status, _, err = run(["--config", path, *settings, "--set", "trainer.validation_steps=1"], capsys)
    assert status == 0, err
    assert "Epoch 2/2 - 4 batches" in err and "val_loss" in err  # the bad second batch is not read
    status, _, err = run(
        ["--config", path, *settings, "--set", "name=all", "--set", "trainer.validation_steps=2"], capsys
    )
    assert status == 1 and "last dimension 2, got shape (16, 5)" in err
    sys.modules.pop("mydata", None)


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ("trainer.steps_per_epoch=0", "trainer.steps_per_epoch: must be a positive integer or None, got 0"),
        ("trainer.validation_steps=two", "trainer.validation_steps: expected an integer or null, got 'two'"),
        (
            "trainer.steps_per_epoch=3",
            "trainer.steps_per_epoch: is for streamed data (data.type grain, data.workers or data.map); "
            "with arrays an epoch is one pass over them",
        ),
        (
            "trainer.validation_steps=3",
            "trainer.validation_steps: is for a streamed validation (the second data set of a grain source); "
            "this run's validation samples are arrays, evaluated whole",
        ),
    ],
)
def test_bad_step_counts_are_config_errors(workdir, capsys, setting, message):
    spirals(workdir)
    status, out, err = run(["--config", config(workdir, "{type: npy, path: sp}"), "--set", setting], capsys)
    assert status == 2 and out == "" and "Traceback" not in err, err
    assert message in err and len(err.strip().splitlines()) == 1
