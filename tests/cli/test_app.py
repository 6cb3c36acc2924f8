"""The ``train`` command: bad input exits 2 with one line and leaves runs/ alone; real runs end to end."""

import csv
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

import tapefit as tp
from tapefit.cli import app as cli
from tapefit.cli.config import parse_yaml
from tapefit.cli.run_folder import record, recorded

REPO = Path(__file__).resolve().parents[2]
CONFIGS = REPO / "configs"


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))
    return path


SPIRALS = """\
    name: sp
    data: {type: spirals, n_samples: 200, n_classes: 2}
    model: {type: mlp, hidden_units: [8]}
    loss: sparse_categorical_crossentropy
    metrics: [accuracy]
    optimizer: {type: adam, learning_rate: 0.01}
    trainer: {epochs: 2, batch_size: 50}
    plugins:
      - {type: checkpoint, every_n_epochs: 1}
"""


def snapshot(root: Path) -> dict[str, tuple[bytes, int]]:
    """Every file under ``root`` with its contents and modification time."""
    return {
        str(p.relative_to(root)): (p.read_bytes(), p.stat().st_mtime_ns)
        for p in sorted(root.rglob("*"))
        if p.is_file() and p.name != ".train.lock"  # bookkeeping: the holder's pid
    }


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    """A folder with an earlier run under runs/sp/ that no failed start may touch."""
    monkeypatch.chdir(tmp_path)
    write(tmp_path / "runs/sp/config.yaml", "name: sp  # an earlier run\n")
    write(tmp_path / "runs/sp/history.csv", "epoch,loss\n0,1.0\n")
    record(tmp_path / "runs/sp", ["config.yaml", "history.csv"])  # train made it
    write(tmp_path / "runs/other/notes.txt", "keep me\n")
    return tmp_path


def run_main(args, capsys):
    status = cli.main([str(a) for a in args])
    out, err = capsys.readouterr()
    return status, out, err


def run_and_read_config(config, capsys, *extra):
    """Trains from ``config`` and returns the resolved config the run wrote (with its data-dependent values)."""
    status, _, err = run_main(["--config", config, "--set", "name=probe", "--overwrite", *extra], capsys)
    assert status == 0, err
    return parse_yaml((Path("runs/probe") / "config.yaml").read_text())


def assert_config_error(workdir, capsys, args, message):
    before = snapshot(workdir / "runs")
    status, out, err = run_main(args, capsys)
    assert status == 2, err
    assert err.strip().splitlines() == [message]
    assert "Traceback" not in err and out == ""
    assert snapshot(workdir / "runs") == before  # nothing under runs/ was overwritten or added


# --------------------------------------------------------------------------- bad input: exit 2, one line


def test_unknown_key_suggests_the_closest(workdir, capsys):
    config = write(workdir / "c.yaml", SPIRALS)
    assert_config_error(
        workdir,
        capsys,
        ["--config", config, "--set", "optimizer.learnig_rate=0.1"],
        f"train: error: {config}: optimizer.learnig_rate: unknown key; did you mean 'optimizer.learning_rate'?",
    )
    config = write(workdir / "d.yaml", SPIRALS.replace("trainer: {epochs: 2", "trainer: {epoch: 2"))
    assert_config_error(
        workdir,
        capsys,
        ["--config", config],
        f"train: error: {config}: trainer.epoch: unknown key; did you mean 'trainer.epochs'?",
    )


def test_wrong_type(workdir, capsys):
    config = write(workdir / "c.yaml", SPIRALS)
    assert_config_error(
        workdir,
        capsys,
        ["--config", config, "--set", "trainer.epochs=ten"],
        f"train: error: {config}: trainer.epochs: expected an integer, got 'ten' (a string)",
    )
    assert_config_error(
        workdir,
        capsys,
        ["--config", config, "--set", "model.hidden_units=8"],
        f"train: error: {config}: model.hidden_units: expected a list of integers, got 8 (an integer)",
    )


@pytest.mark.parametrize(
    ("override", "message"),
    [
        (
            "optimizer.learning_rate=true",
            "optimizer.learning_rate: expected a number or a schedule mapping, got true (a boolean)",
        ),
        (
            "optimizer.learning_rate=fast",
            "optimizer.learning_rate: expected a number or a schedule mapping, got 'fast' (a string)",
        ),
        (
            "optimizer.learning_rate=-1",
            "optimizer.learning_rate: 'adam' could not be built: ValueError: `learning_rate` must be in [0, inf], got -1.0",
        ),
        (
            "optimizer.learning_rate={type: cosine_decay, initial_learning_rate: 0.1, decay_steps: -3}",
            "optimizer.learning_rate.decay_steps: 'adam' could not be built: "
            "ValueError: `decay_steps` must be in (0, inf], got -3.0",
        ),
        (
            "optimizer.learning_rate={type: piecewise_constant_decay, boundaries: [9, 2], values: [1.0, 0.1, 0.01]}",
            "optimizer.learning_rate.boundaries: 'adam' could not be built: "
            "ValueError: `boundaries` must be non-decreasing, got [9, 2]",
        ),
    ],
)
def test_optimizer_arguments_are_named_by_their_key_path(workdir, capsys, override, message):
    config = write(workdir / "c.yaml", SPIRALS)
    assert_config_error(
        workdir, capsys, ["--config", config, "--set", override], f"train: error: {config}: {message}"
    )


def test_missing_required_key(workdir, capsys):
    config = write(
        workdir / "c.yaml", SPIRALS.replace("{type: spirals, n_samples: 200, n_classes: 2}", "{type: npz}")
    )
    assert_config_error(
        workdir,
        capsys,
        ["--config", config],
        f"train: error: {config}: data.path: missing required key (data type 'npz' needs it)",
    )
    config = write(workdir / "d.yaml", SPIRALS.replace("    loss: sparse_categorical_crossentropy\n", ""))
    assert_config_error(
        workdir,
        capsys,
        ["--config", config],
        f"train: error: {config}: loss: missing required key (model.type 'mlp' trains with the default step, "
        "which needs a loss; only a model whose class overrides train_step may leave it out)",
    )


def test_unknown_type_lists_the_known_ones(workdir, capsys):
    config = write(workdir / "c.yaml", SPIRALS)
    assert_config_error(
        workdir,
        capsys,
        ["--config", config, "--set", "data.type=digitz"],
        f"train: error: {config}: data.type: unknown data type 'digitz'; did you mean 'digits'? "
        "Known types: csv, digits, grain, npy, npz, spirals, or an import path 'package.module:Name'",
    )
    status, _, err = run_main(["--config", config, "--set", "plugins[0].type=checkpoints"], capsys)
    assert status == 2
    assert f"{config}: plugins[0].type: unknown plugin type 'checkpoints'; did you mean 'checkpoint'? " in err
    for name in (
        "progress",
        "csv_logger",
        "tensorboard",
        "clip_gradients",
        "early_stopping",
        "terminate_on_nan",
    ):
        assert name in err
    status, _, err = run_main(["--config", config, "--set", "optimizer.type=adamm"], capsys)
    assert status == 2
    assert (
        "optimizer.type: unknown optimizer type 'adamm'; did you mean 'adam'? Known types: adagrad, adam"
        in err
    )


def test_import_path_that_does_not_import(workdir, capsys):
    config = write(workdir / "c.yaml", SPIRALS)
    assert_config_error(
        workdir,
        capsys,
        ["--config", config, "--set", "model={type: 'mypkg.nets:Net', units: 3}"],
        f"train: error: {config}: model.type: 'mypkg.nets:Net' does not import: "
        "ModuleNotFoundError: No module named 'mypkg'",
    )
    write(workdir / "mypkg/__init__.py", "")
    write(workdir / "mypkg/nets.py", "import numpy\nraise RuntimeError('nets.py is broken')\n")
    assert_config_error(
        workdir,
        capsys,
        ["--config", config, "--set", "model={type: 'mypkg.nets:Net', units: 3}"],
        f"train: error: {config}: model.type: 'mypkg.nets:Net' does not import: RuntimeError: nets.py is broken",
    )


def test_missing_data_file(workdir, capsys):
    config = write(
        workdir / "c.yaml",
        SPIRALS.replace("{type: spirals, n_samples: 200, n_classes: 2}", "{type: csv, path: data/train.csv}"),
    )
    assert_config_error(
        workdir,
        capsys,
        ["--config", config],
        f"train: error: {config}: data.path: file 'data/train.csv' does not exist",
    )


def test_missing_config_file_and_bad_command_lines(workdir, capsys):
    assert_config_error(
        workdir, capsys, ["--config", "nope.yaml"], "train: error: config file 'nope.yaml' does not exist"
    )
    before = snapshot(workdir / "runs")
    status, _, err = run_main(["--config"], capsys)
    assert status == 2 and "argument --config: expected one argument" in err
    status, _, err = run_main(["--config", "c.yaml", "--sett", "a=1"], capsys)
    assert status == 2 and "unrecognized arguments: --sett a=1" in err
    config = write(workdir / "c.yaml", SPIRALS)
    assert_config_error(
        workdir,
        capsys,
        ["--config", config, "--set", "trainer.epochs"],
        "train: error: --set 'trainer.epochs': expected KEY=VALUE, for example --set trainer.epochs=3",
    )
    assert_config_error(
        workdir,
        capsys,
        ["--config", config, "--resume", "auto", "--overwrite"],
        "train: error: --overwrite deletes the run that --resume would continue; give one of them "
        "(see train --help)",
    )
    assert snapshot(workdir / "runs") == before


def test_problems_found_while_building_are_config_errors(workdir, capsys):
    config = write(workdir / "c.yaml", SPIRALS)
    assert_config_error(
        workdir,
        capsys,
        ["--config", config, "--set", "model.output_units=1"],
        f"train: error: {config}: model: the model gives 1 class scores per sample, but the labels go from 0 to 1 "
        "(the model needs 2 outputs)",
    )
    assert_config_error(
        workdir,
        capsys,
        ["--config", config, "--set", "model={type: cnn}"],
        f"train: error: {config}: model.type: 'cnn' needs images of shape (samples, height, width, channels), "
        "but the data has shape (160, 2)",
    )
    assert_config_error(
        workdir,
        capsys,
        ["--config", config, "--set", "data.n_classes=1"],
        f"train: error: {config}: data.n_classes: n_classes must be at least 2, got 1",
    )
    assert_config_error(
        workdir,
        capsys,
        ["--config", config, "--set", "plugins[0]={type: progress, file: progress.log, enabled: true}"],
        f"train: error: {config}: plugins[0]: 'progress' could not be built: TypeError: plugin 'progress': "
        "file must be a text stream with a write method (standard error by default), got the string 'progress.log'",
    )
    status, _, err = run_main(["--config", config, "--set", "plugins[0].save_best_only=true"], capsys)
    assert status == 2
    assert err.startswith(
        f"train: error: {config}: plugins[0]: 'checkpoint' could not be built: ValueError: "
    )
    assert "needs a monitor" in err


def test_a_metric_that_does_not_fit_the_labels_is_a_config_error(workdir, capsys):
    # checked on two samples like the model and the loss (it failed with exit 1 in the first step)
    config = write(workdir / "c.yaml", SPIRALS)
    assert_config_error(
        workdir,
        capsys,
        ["--config", config, "--set", "metrics=[accuracy, mse]"],
        f"train: error: {config}: metrics[1]: 'mse' cannot compare labels of shape (2,) with model outputs of "
        "shape (2, 2): ValueError: mse: y_true has shape (2,) but y_pred has shape (2, 2)",
    )


def test_drop_last_with_a_batch_larger_than_the_data_is_a_config_error(workdir, capsys):
    config = write(workdir / "c.yaml", SPIRALS)
    assert_config_error(
        workdir,
        capsys,
        ["--config", config, "--set", "trainer.batch_size=500", "--set", "trainer.drop_last=true"],
        f"train: error: {config}: trainer.batch_size: 500 is more than the 160 training samples, and "
        "trainer.drop_last is true, so there would be no batch",
    )


def test_a_built_in_metric_may_be_renamed(workdir, capsys):
    config = write(workdir / "c.yaml", SPIRALS)
    metrics = "metrics=[accuracy, {type: accuracy, name: acc2}]"
    status, out, err = run_main(["--config", config, "--set", "name=two", "--set", metrics], capsys)
    assert status == 0, err
    assert "accuracy " in out and "acc2 " in out and "val_acc2 " in out


def test_a_monitor_that_is_not_a_log_key_is_a_config_error(workdir, capsys):
    config = write(workdir / "c.yaml", SPIRALS)
    assert_config_error(
        workdir,
        capsys,
        ["--config", config, "--set", "plugins[0]={type: early_stopping, monitor: val_acc}"],
        f"train: error: {config}: plugins[0].monitor: 'val_acc' is not a key of this run's epoch logs; "
        "did you mean 'val_accuracy'? The keys are: loss, accuracy, val_loss, val_accuracy",
    )
    assert_config_error(
        workdir,
        capsys,
        [
            "--config",
            config,
            "--set",
            "data.validation_split=0",
            "--set",
            "plugins[0]={type: checkpoint, monitor: val_loss, save_best_only: true}",
        ],
        f"train: error: {config}: plugins[0].monitor: 'val_loss' is not a key of this run's epoch logs "
        "(there is no validation data: data.validation_split is 0); did you mean 'loss'? The keys are: "
        "loss, accuracy",
    )
    # learning_rate is there when reduce_lr_on_plateau adds it; and a user's plugin may add any key.
    write(
        workdir / "addkey.py",
        """\
        import tapefit as tp

        class AddKey:
            @tp.hookimpl
            def on_epoch_end(self, logs):
                logs["mine"] = 1.0
        """,
    )
    for plugins in (
        "[reduce_lr_on_plateau, {type: checkpoint, monitor: learning_rate}]",
        "[{type: 'addkey:AddKey'}, {type: early_stopping, monitor: mine}]",
    ):
        status, _, err = run_main(
            ["--config", config, "--set", f"plugins={plugins}", "--print-config"], capsys
        )
        assert status == 0, err


@pytest.mark.parametrize(
    "loss, activation, message",
    [
        (
            "{type: sparse_categorical_crossentropy, from_logits: true}",
            "softmax",
            "model.output_activation: 'softmax' gives probabilities, but loss.from_logits is true, so the "
            "loss would apply softmax a second time; leave output_activation out (or null)",
        ),
        (
            "sparse_categorical_crossentropy",
            "null",
            "model.output_activation: null gives logits, but loss.from_logits is false, so the loss would "
            "read them as probabilities; set loss.from_logits: true, or leave output_activation out",
        ),
        (
            "{type: binary_crossentropy, from_logits: true}",
            "sigmoid",
            "model.output_activation: 'sigmoid' gives probabilities, but loss.from_logits is true, so the "
            "loss would apply sigmoid a second time; leave output_activation out (or null)",
        ),
    ],
)
def test_an_output_activation_that_contradicts_from_logits(workdir, capsys, loss, activation, message):
    config = write(workdir / "c.yaml", SPIRALS)
    args = ["--config", config, "--set", f"loss={loss}", "--set", f"model.output_activation={activation}"]
    if "binary" in loss:
        args += ["--set", "model.output_units=1", "--set", "metrics=[]"]
    assert_config_error(workdir, capsys, args, f"train: error: {config}: {message}")


def test_a_user_model_that_fails_to_build(workdir, capsys):
    write(
        workdir / "usermodels.py",
        """\
        import tapefit as tp

        class Picky(tp.Module):
            def __init__(self, units: int):
                super().__init__()
                if units > 4:
                    raise ValueError(f"at most 4 units, got {units}")
                self.dense = tp.layers.Dense(units)

            def call(self, x):
                return self.dense(x)
        """,
    )
    config = write(workdir / "c.yaml", SPIRALS)
    assert_config_error(
        workdir,
        capsys,
        ["--config", config, "--set", "model={type: 'usermodels:Picky', units: 9}"],
        f"train: error: {config}: model: 'usermodels:Picky' could not be built: ValueError: at most 4 units, got 9",
    )
    assert_config_error(
        workdir,
        capsys,
        ["--config", config, "--set", "model={type: 'usermodels:Picky', unit: 2}"],
        f"train: error: {config}: model.unit: unknown key; did you mean 'model.units'?",
    )


def test_an_existing_run_is_not_replaced_by_a_fresh_start(workdir, capsys):
    config = write(workdir / "c.yaml", SPIRALS)
    assert_config_error(
        workdir,
        capsys,
        ["--config", config],
        "train: error: runs/sp already holds a run; continue it with --resume auto, start over with --overwrite, "
        "or pick another name (--set name=...)",
    )
    assert_config_error(
        workdir,
        capsys,
        ["--config", config, "--set", "name=other", "--overwrite"],
        "train: error: runs/other holds files and is not a tapefit run folder (train did not make it); not "
        "writing into it: pick another name (--set name=...) or trainer.output_dir",
    )
    assert_config_error(
        workdir,
        capsys,
        ["--config", config, "--resume", "runs/sp/checkpoints/nope.npz"],
        "train: error: --resume: no checkpoint at runs/sp/checkpoints/nope.npz",
    )


def test_resume_auto_without_checkpoint_writes_only_into_a_run_folder(workdir, capsys):
    config = write(workdir / "c.yaml", SPIRALS)
    assert_config_error(
        workdir,
        capsys,
        ["--config", config, "--set", "name=other", "--resume", "auto"],
        "train: error: --resume auto: it has no checkpoint, and runs/other holds files and is not a tapefit "
        "run folder (train did not make it); not writing into it: pick another name (--set name=...) or "
        "trainer.output_dir",
    )


def test_resume_auto_with_nothing_to_resume_says_it_starts_fresh(workdir, capsys):
    config = write(workdir / "c.yaml", SPIRALS)
    status, out, err = run_main(["--config", config, "--set", "name=new", "--resume", "auto"], capsys)
    assert status == 0, err
    assert (
        "train: --resume auto: no checkpoint in runs/new/checkpoints yet, so training starts from the "
        "beginning" in out
    )
    assert "train: done: new, 2 epochs in" in out


def test_resume_from_another_runs_checkpoint_does_not_write_into_an_existing_run(workdir, capsys):
    config = write(workdir / "c.yaml", SPIRALS)
    status, _, err = run_main(["--config", config, "--set", "name=a"], capsys)
    assert status == 0, err
    assert_config_error(
        workdir,
        capsys,
        ["--config", config, "--resume", "runs/a/checkpoints", "--set", "trainer.epochs=3"],
        "train: error: --resume runs/a/checkpoints: runs/sp already holds another run and the checkpoint is "
        "not one of its own; continue it in a new folder (--set name=...)",
    )
    # into a new folder, or from the run's own checkpoints, resuming goes on
    for name in ("a2", "a"):
        args = ["--config", config, "--set", f"name={name}", "--resume", "runs/a/checkpoints"]
        status, _, err = run_main([*args, "--set", "trainer.epochs=3"], capsys)
        assert status == 0, err


def test_resume_from_a_file_that_is_not_a_checkpoint(workdir, capsys):
    config = write(workdir / "c.yaml", SPIRALS)
    assert_config_error(
        workdir,
        capsys,
        ["--config", config, "--resume", config],
        f"train: error: --resume: {config}: not a tapefit checkpoint (checkpoints are the .npz files that "
        "the checkpoint plugin writes)",
    )


def test_resume_with_another_optimizer_is_a_config_error(workdir, capsys):
    config = write(workdir / "c.yaml", SPIRALS)
    status, _, err = run_main(["--config", config, "--set", "name=r"], capsys)
    assert status == 0, err
    status, _, err = run_main(
        [
            "--config",
            config,
            "--set",
            "name=r",
            "--resume",
            "auto",
            "--set",
            "optimizer={type: sgd, momentum: 0.9}",
        ],
        capsys,
    )
    assert status == 2
    assert err.startswith(
        "train: error: --resume: runs/r/checkpoints/epoch0001-step00000008.npz holds the state of another "
        "optimizer than the config's (set_state: unexpected entries ['velocity/0'"
    )
    assert len(err.strip().splitlines()) == 1
    assert parse_yaml((workdir / "runs/r/config.yaml").read_text())["optimizer"]["type"] == "adam"


def test_overwrite_replaces_an_earlier_run(workdir, capsys):
    config = write(workdir / "c.yaml", SPIRALS)
    status, out, err = run_main(
        ["--config", config, "--set", "name=fresh", "--set", "trainer.epochs=1"], capsys
    )
    assert status == 0, err
    assert "train: done: fresh, 1 epoch in" in out
    write(workdir / "runs/fresh/checkpoints/epoch0009-step00000099.npz", "a run's checkpoint\n")
    write(workdir / "runs/fresh/NOTES.md", "the user's own\n")
    status, out, err = run_main(["--config", config, "--set", "name=fresh", "--overwrite"], capsys)
    assert status == 0, err
    assert "train: --overwrite kept what no run wrote in runs/fresh: NOTES.md" in out
    assert (workdir / "runs/fresh/NOTES.md").read_text() == "the user's own\n"  # train never wrote it
    assert sorted(p.name for p in (workdir / "runs/fresh/checkpoints").glob("*.npz")) == [
        "epoch0000-step00000004.npz",
        "epoch0001-step00000008.npz",
    ]


def test_a_users_plugin_by_import_path(workdir, capsys):
    write(
        workdir / "myplugins.py",
        """\
        import tapefit as tp

        class EpochNotes:
            def __init__(self, path: str):
                self.path = path

            @tp.hookimpl
            def on_epoch_end(self, epoch, logs):
                with open(self.path, "a") as f:
                    f.write(f"{epoch} {sorted(logs)}\\n")

        class Misspelt:
            @tp.hookimpl
            def on_epoch_ends(self, epoch):
                pass
        """,
    )
    config = write(workdir / "c.yaml", SPIRALS)
    assert_config_error(
        workdir,
        capsys,
        ["--config", config, "--set", "name=p", "--set", "plugins=[progress, {type: 'myplugins:Misspelt'}]"],
        f"train: error: {config}: plugins[1]: plugin 'misspelt' implements unknown hook(s) "
        "'on_epoch_ends' (did you mean 'on_epoch_end'?); tapefit's hooks are: "
        + ", ".join(__import__("tapefit.plugins.hookspecs").plugins.hookspecs.HOOK_NAMES),
    )
    status, _, err = run_main(
        [
            "--config",
            config,
            "--set",
            "name=p",
            "--set",
            "plugins[0]={type: 'myplugins:EpochNotes', path: notes.txt}",
        ],
        capsys,
    )
    assert status == 0, err
    assert (workdir / "notes.txt").read_text().splitlines() == [
        "0 ['accuracy', 'loss', 'val_accuracy', 'val_loss']",
        "1 ['accuracy', 'loss', 'val_accuracy', 'val_loss']",
    ]


def install_fake_distribution(root: Path, entry_points: str) -> None:
    """Makes ``root`` look like site-packages holding a distribution with ``tapefit`` entry points."""
    write(
        root / "tapefit_hello/__init__.py",
        """\
        import tapefit as tp

        class Hello:
            def __init__(self, greeting: str = "hello"):
                self.greeting = greeting

            @tp.hookimpl
            def on_epoch_end(self, epoch):
                print(f"{self.greeting} {epoch}", flush=True)
        """,
    )
    write(
        root / "tapefit_hello-0.1.dist-info/METADATA",
        "Metadata-Version: 2.1\nName: tapefit-hello\nVersion: 0.1\n",
    )
    write(root / "tapefit_hello-0.1.dist-info/entry_points.txt", "[tapefit]\n" + entry_points)


def test_a_plugin_from_an_installed_distributions_entry_point(tmp_path):
    site = tmp_path / "site"
    install_fake_distribution(site, "hello = tapefit_hello:Hello\n")
    config = write(tmp_path / "c.yaml", SPIRALS)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), str(site)])}
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "tapefit",
            "train",
            "--config",
            str(config),
            "--set",
            "plugins=[{type: hello, greeting: hi}]",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert "hi 0\nhi 1\n" in result.stdout


def test_an_entry_point_that_does_not_load_is_a_config_error(workdir, capsys, monkeypatch):
    install_fake_distribution(workdir / "site", "broken = tapefit_hello:Missing\n")
    monkeypatch.syspath_prepend(str(workdir / "site"))
    config = write(workdir / "c.yaml", SPIRALS)
    assert_config_error(
        workdir,
        capsys,
        ["--config", config, "--set", "plugins=[broken]"],
        f"train: error: {config}: plugins[0].type: plugin type 'broken' does not load: cannot load plugin "
        "'broken' from its entry point: module 'tapefit_hello' has no attribute 'Missing'",
    )


def test_debug_shows_the_traceback(workdir, capsys):
    config = write(workdir / "c.yaml", SPIRALS)
    status, _, err = run_main(["--config", config, "--set", "trainer.epochs=ten", "--debug"], capsys)
    assert status == 2
    assert "Traceback (most recent call last)" in err
    assert (
        err.strip().splitlines()[-1]
        == f"train: error: {config}: trainer.epochs: expected an integer, got 'ten' (a string)"
    )


# --------------------------------------------------------------------------- the user's own data files


def file_config(workdir: Path, data: str, loss: str = "sparse_categorical_crossentropy") -> Path:
    return write(
        workdir / "f.yaml",
        f"""\
        name: files
        data: {data}
        model: {{type: mlp, hidden_units: [8]}}
        loss: {loss}
        trainer: {{epochs: 1}}
        """,
    )


def test_npz_data_trains_and_bad_arrays_are_config_errors(workdir, capsys):
    rng = np.random.default_rng(0)
    np.savez(
        workdir / "d.npz",
        features=rng.normal(size=(40, 3)),
        labels=rng.integers(0, 3, 40),
        text=np.array(["a"] * 40),
    )
    config = file_config(workdir, "{type: npz, path: d.npz, x_key: features, y_key: labels}")
    status, out, err = run_main(["--config", config], capsys)
    assert status == 0, err
    assert "32 training and 8 validation samples of shape (3,)" in out
    assert_config_error(
        workdir,
        capsys,
        ["--config", config, "--set", "data.x_key=x"],
        f"train: error: {config}: data.x_key: 'd.npz' has no array 'x'; it holds: features, labels, text",
    )
    assert_config_error(
        workdir,
        capsys,
        ["--config", config, "--set", "data.x_key=text"],
        f"train: error: {config}: data: data.type 'npz': the features must be numbers, got dtype <U1",
    )


def test_a_negative_seed_seeds_the_data_too(workdir, capsys):
    # tp.random.set_seed takes negative seeds, as TensorFlow does; the split and spirals did not.
    rng = np.random.default_rng(0)
    np.savez(workdir / "d.npz", x=rng.normal(size=(40, 3)), y=rng.integers(0, 3, 40))
    config = file_config(workdir, "{type: npz, path: d.npz}")
    status, out, err = run_main(["--config", config, "--set", "seed=-1"], capsys)
    assert status == 0, err
    assert "32 training and 8 validation samples" in out
    config = write(workdir / "c.yaml", SPIRALS)
    status, out, err = run_main(["--config", config, "--set", "data.seed=-3", "--print-config"], capsys)
    assert status == 0, err
    assert parse_yaml(out)["data"]["seed"] == -3


def test_class_labels_are_checked_over_all_the_data(workdir, capsys):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(40, 3))
    y = (x[:, 0] > 0).astype(np.int64)
    config = file_config(workdir, "{type: npz, path: d.npz}")
    np.savez(workdir / "d.npz", x=x, y=y - 1)
    assert_config_error(
        workdir,
        capsys,
        ["--config", config],
        f"train: error: {config}: data: 'sparse_categorical_crossentropy' needs class indices 0, 1, 2, ... "
        "as labels, but the labels go from -1 to 0",
    )
    labels = y.astype(np.float64)
    labels[-1] = 0.5  # one label deep in the file, not among the first samples
    np.savez(workdir / "d.npz", x=x, y=labels)
    assert_config_error(
        workdir,
        capsys,
        ["--config", config],
        f"train: error: {config}: data: 'sparse_categorical_crossentropy' needs class indices 0, 1, 2, ... "
        "as labels, but some labels are not whole numbers (0.5)",
    )
    # Whole-number float labels are class indices, as Keras reads them: two classes, two outputs.
    np.savez(workdir / "d.npz", x=x, y=y.astype(np.float64))
    assert run_and_read_config(config, capsys)["model"]["output_units"] == 2
    # Binary cross-entropy with labels 1 and 2 (a common slip): named, not trained on.
    np.savez(workdir / "d.npz", x=x, y=y + 1)
    config = file_config(workdir, "{type: npz, path: d.npz}", loss="binary_crossentropy")
    assert_config_error(
        workdir,
        capsys,
        ["--config", config],
        f"train: error: {config}: data: 'binary_crossentropy' needs labels between 0 and 1, but the labels "
        "go from 1 to 2 (for class indices use sparse_categorical_crossentropy)",
    )


def test_output_units_count_the_classes_of_the_validation_part_too(workdir, capsys):
    x = np.arange(40, dtype=np.float64)[:, None]
    y = np.zeros(40, dtype=np.int64)
    y[7] = 4  # one sample of the highest class, which the seeded split puts into validation
    np.savez(workdir / "d.npz", x=x, y=y)
    config = file_config(workdir, "{type: npz, path: d.npz}")
    assert run_and_read_config(config, capsys)["model"]["output_units"] == 5


def test_csv_regression_gets_a_linear_output(workdir, capsys):
    rows = "\n".join(f"{i},{i % 3},{0.5 * i}" for i in range(30))
    write(workdir / "d.csv", "a,b,target\n" + rows + "\n")
    config = file_config(
        workdir, "{type: csv, path: d.csv, label_column: target, standardize: true}", loss="mse"
    )
    resolved = run_and_read_config(config, capsys)
    assert resolved["model"]["output_units"] == 1 and resolved["model"]["output_activation"] is None
    assert resolved["data"] == {
        "type": "csv",
        "validation_split": 0.2,
        "standardize": True,
        "seed": 0,
        "workers": 0,
        "prefetch": 2,
        "map": None,
        "path": "d.csv",
        "label_column": "target",
        "header": "auto",
        "delimiter": ",",
        "label_dtype": "auto",
        "mmap": False,
    }
    status, out, err = run_main(["--config", config], capsys)
    assert status == 0, err
    assert "24 training and 6 validation samples of shape (2,)" in out
    assert_config_error(
        workdir,
        capsys,
        ["--config", config, "--set", "data.label_column=label"],
        f"train: error: {config}: data.label_column: 'd.csv' has no column 'label'; its columns: a, b, target",
    )


# --------------------------------------------------------------------------- --print-config and --help


def test_print_config_shows_the_resolved_config_and_writes_nothing(workdir, capsys):
    config = write(workdir / "fresh.yaml", SPIRALS.replace("    name: sp\n", ""))
    toml = write(
        workdir / "fresh.toml",
        """\
        metrics = ["accuracy"]
        plugins = [{type = "checkpoint", every_n_epochs = 1}]
        data = {type = "spirals", n_samples = 200, n_classes = 2}
        model = {type = "mlp", hidden_units = [8]}
        loss = "sparse_categorical_crossentropy"
        optimizer = {type = "adam", learning_rate = 0.01}
        trainer = {epochs = 2, batch_size = 50}
        """,
    )
    before = snapshot(workdir)
    status, out, err = run_main(["--config", config, "--print-config", "--set", "seed=7"], capsys)
    assert status == 0, err
    resolved = parse_yaml(out)
    assert resolved["name"] == "fresh"  # the file's stem
    assert resolved["seed"] == 7 and resolved["data"]["seed"] == 7
    assert resolved["model"] == {
        "type": "mlp",
        "hidden_units": [8],
        "activation": "relu",
        "dropout": 0.0,
        "output_units": None,  # filled from the labels when a run reads the data
        "output_activation": "auto",
    }
    assert resolved["trainer"]["epochs"] == 2 and resolved["trainer"]["shuffle"] is True
    assert resolved["optimizer"]["type"] == "adam" and resolved["optimizer"]["beta_1"] == 0.9
    assert resolved["plugins"][0]["type"] == "checkpoint"
    status, out_toml, _ = run_main(["--config", toml, "--print-config", "--set", "seed=7"], capsys)
    assert status == 0 and out_toml == out
    assert snapshot(workdir) == before


def test_help_has_examples(capsys):
    status, out, _ = run_main(["--help"], capsys)
    assert status == 0
    assert "train --config configs/digits_mlp.yaml --resume auto" in out
    assert "--print-config" in out and "exit status: 0 done, 2 bad command line or config" in out


# --------------------------------------------------------------------------- end to end, in a subprocess


def train(cwd: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run(
        [sys.executable, "-m", "tapefit", "train", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def read_csv(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_spirals_config_end_to_end_and_resume_auto(tmp_path):
    first = train(tmp_path, "--config", str(CONFIGS / "spirals_mlp.yaml"), "--set", "trainer.epochs=3")
    assert first.returncode == 0, first.stderr
    run = tmp_path / "runs/spirals-mlp"
    assert sorted(p.name for p in run.iterdir()) == [
        ".tapefit-run",
        ".train.lock",
        "checkpoints",
        "config.yaml",
        "history.csv",
        "model.safetensors",
    ]
    # the marker names every entry the run wrote, so that --overwrite removes exactly those
    assert recorded(run) == ["checkpoints", "config.yaml", "history.csv", "model.safetensors"]
    resolved = parse_yaml((run / "config.yaml").read_text())
    assert resolved["trainer"]["epochs"] == 3 and resolved["model"]["output_units"] == 3
    rows = read_csv(run / "history.csv")
    assert [r["epoch"] for r in rows] == ["0", "1", "2"]
    assert "train: done: spirals-mlp, 3 epochs" in first.stdout
    assert "val_accuracy" in first.stdout and "runs/spirals-mlp" in first.stdout
    # the same command again would replace the run: refused
    again = train(tmp_path, "--config", str(CONFIGS / "spirals_mlp.yaml"), "--set", "trainer.epochs=3")
    assert again.returncode == 2 and "already holds a run" in again.stderr
    assert read_csv(run / "history.csv") == rows
    # --resume auto continues from the newest checkpoint (saved at the end of the fit)
    resumed = train(
        tmp_path,
        "--config",
        str(CONFIGS / "spirals_mlp.yaml"),
        "--set",
        "trainer.epochs=5",
        "--resume",
        "auto",
    )
    assert resumed.returncode == 0, resumed.stderr
    assert "resuming from runs/spirals-mlp/checkpoints/" in resumed.stdout
    assert "train: done: spirals-mlp, 2 epochs in" in resumed.stdout
    assert "s (5 in all)" in resumed.stdout
    rows_after = read_csv(run / "history.csv")
    assert [r["epoch"] for r in rows_after] == ["0", "1", "2", "3", "4"]
    assert rows_after[:3] == rows  # the first three epochs were not trained again


def test_digits_mlp_config_reaches_95_percent(tmp_path):
    result = train(tmp_path, "--config", str(CONFIGS / "digits_mlp.yaml"))
    assert result.returncode == 0, result.stderr
    run = tmp_path / "runs/digits-mlp"
    rows = read_csv(run / "history.csv")
    assert len(rows) == 20
    assert float(rows[-1]["val_accuracy"]) >= 0.95
    assert list((run / "tensorboard").rglob("events.out.tfevents.*"))
    assert (run / "checkpoints/last").is_file()
    assert len(list((run / "checkpoints").glob("*.npz"))) == 3  # keep_last: 3


def test_custom_module_config_trains_the_users_module(tmp_path):
    result = train(
        REPO,
        "--config",
        str(CONFIGS / "custom_module.yaml"),
        "--set",
        "trainer.epochs=2",
        "--set",
        f"trainer.output_dir={tmp_path / 'run'}",
    )
    assert result.returncode == 0, result.stderr
    from tapefit.plugins.checkpoint import load_checkpoint

    checkpoint = load_checkpoint(tmp_path / "run/checkpoints")
    names = sorted(checkpoint["model"])
    assert len(names) == 12  # project, 2 blocks of 2 Dense layers, head: kernel and bias each
    assert all(name.startswith("residual_mlp") for name in names), names
    rows = read_csv(tmp_path / "run/history.csv")
    assert float(rows[-1]["val_accuracy"]) > 0.8  # far above chance (0.1) after two epochs


def test_a_failure_while_training_exits_1(tmp_path):
    write(
        tmp_path / "failing.py",
        """\
        import tapefit as tp

        class FailsInTraining(tp.Module):
            def __init__(self):
                super().__init__()
                self.dense = tp.layers.Dense(2, activation="softmax")

            def call(self, x, training=False):
                if training:
                    raise RuntimeError("boom in training")
                return self.dense(x)
        """,
    )
    config = write(
        tmp_path / "c.yaml", SPIRALS.replace("{type: mlp, hidden_units: [8]}", "'failing:FailsInTraining'")
    )
    result = train(tmp_path, "--config", str(config))
    assert result.returncode == 1
    assert result.stderr.strip().splitlines()[-1] == (
        "python -m tapefit train: error while training: RuntimeError: boom in training (--debug shows the traceback)"
    )


def test_a_loss_that_turns_nan_exits_1(tmp_path):
    write(
        tmp_path / "nanmodel.py",
        """\
        import tapefit as tp

        class NaNInTraining(tp.Module):
            def __init__(self):
                super().__init__()
                self.dense = tp.layers.Dense(2, activation="softmax")

            def call(self, x, training=False):
                y = self.dense(x)
                return y * float("nan") if training else y
        """,
    )
    config = write(
        tmp_path / "c.yaml",
        SPIRALS.replace("{type: mlp, hidden_units: [8]}", "'nanmodel:NaNInTraining'").replace(
            "  - {type: checkpoint", "  - terminate_on_nan\n      - {type: checkpoint"
        ),
    )
    result = train(tmp_path, "--config", str(config))
    assert result.returncode == 1, result.stderr
    lines = result.stderr.strip().splitlines()
    assert "terminate_on_nan: step 0 (epoch 1, batch 0): loss is nan, terminating training" in lines[0]
    assert lines[-1] == (
        "python -m tapefit train: error: the training loss was not finite at step 0, so terminate_on_nan stopped the run"
    )


def test_interrupt_exits_130_after_saving_and_resumes(tmp_path):
    config = write(
        tmp_path / "c.yaml",
        SPIRALS.replace("n_samples: 200", "n_samples: 4000").replace("epochs: 2", "epochs: 100000"),
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    process = subprocess.Popen(
        [sys.executable, "-m", "tapefit", "train", "--config", str(config)],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    checkpoints = tmp_path / "runs/sp/checkpoints"
    deadline = time.monotonic() + 60
    while not list(checkpoints.glob("epoch*.npz")) and time.monotonic() < deadline and process.poll() is None:
        time.sleep(0.05)
    process.send_signal(signal.SIGINT)
    _, err = process.communicate(timeout=60)
    assert process.returncode == 130, err
    assert "interrupted" in err and "--resume auto" in err
    assert (checkpoints / "interrupted.npz").is_file()
    resumed = train(tmp_path, "--config", str(config), "--resume", "auto", "--set", "trainer.epochs=1")
    assert resumed.returncode == 0, resumed.stderr
    assert "resuming from runs/sp/checkpoints/interrupted.npz" in resumed.stdout


def test_interrupt_message_says_exactly_what_was_saved(workdir, capsys):
    write(
        workdir / "interrupt.py",
        """\
        import tapefit as tp

        class Interrupt:
            @tp.hookimpl
            def on_train_batch_start(self, step):
                if step == 6:
                    raise KeyboardInterrupt
        """,
    )
    config = write(workdir / "c.yaml", SPIRALS)
    plugins = "plugins=[{type: 'interrupt:Interrupt'}, {type: checkpoint, save_on_exception: %s}]"
    status, _, err = run_main(["--config", config, "--set", "name=a", "--set", plugins % "true"], capsys)
    assert status == 130
    assert err.splitlines()[-1] == (
        "train: interrupted; the state was saved to runs/a/checkpoints/interrupted.npz (continue with --resume auto)"
    )
    status, _, err = run_main(["--config", config, "--set", "name=b", "--set", plugins % "false"], capsys)
    assert status == 130
    assert err.splitlines()[-1] == (
        "train: interrupted; the newest checkpoint is runs/b/checkpoints/epoch0000-step00000004.npz "
        "(continue from it with --resume auto)"
    )
    status, _, err = run_main(
        ["--config", config, "--set", "name=c", "--set", "plugins=[{type: 'interrupt:Interrupt'}]"], capsys
    )
    assert status == 130
    assert (
        err.splitlines()[-1]
        == "train: interrupted; no checkpoint was saved (the run has no checkpoint plugin)"
    )


def test_training_result_matches_a_python_trainer(tmp_path):
    """The command builds what the config says: the same run through tp.Trainer gives the same weights."""
    import tapefit as tp
    from tapefit import data
    from tapefit.cli import models
    from tapefit.plugins.checkpoint import load_checkpoint

    config = write(
        tmp_path / "c.yaml",
        SPIRALS.replace("  - {type: checkpoint, every_n_epochs: 1}\n", "  - checkpoint\n"),
    )
    result = train(tmp_path, "--config", str(config))
    assert result.returncode == 0, result.stderr
    tp.random.set_seed(0)
    x, y = data.make_spirals(n_samples=200, n_classes=2, seed=0)
    (x_train, y_train), validation = data.validation_split(x, y, 0.2, seed=0)
    model = models.mlp(hidden_units=[8], output_units=2, output_activation="softmax")
    model(tp.constant(x_train[:2]))
    trainer = tp.Trainer(
        model, tp.optimizers.Adam(learning_rate=0.01), "sparse_categorical_crossentropy", metrics=["accuracy"]
    )
    trainer.fit(x_train, y_train, epochs=2, batch_size=50, validation_data=validation)
    saved = load_checkpoint(tmp_path / "runs/sp/checkpoints")["model"]
    ours = model.state_dict()
    assert sorted(saved) == sorted(ours)
    for name in ours:
        np.testing.assert_array_equal(saved[name], ours[name])


@pytest.mark.parametrize("name", sorted(p.name for p in CONFIGS.glob("*.yaml")))
def test_shipped_configs_are_valid(name, monkeypatch, capsys):
    monkeypatch.chdir(REPO)  # custom_module.yaml imports examples/ from the repository root
    status, out, err = run_main(["--config", CONFIGS / name, "--print-config"], capsys)
    assert status == 0, err
    resolved = parse_yaml(out)
    assert resolved["name"] == name.removesuffix(".yaml").replace("_", "-")
    assert {"progress", "checkpoint"} <= {p["type"] for p in resolved["plugins"]}


def test_all_plugins_config_shows_every_builtin_plugin_and_runs(tmp_path):
    from tapefit.plugins.manager import BUILTIN_PLUGINS

    text = (CONFIGS / "all_plugins.yaml").read_text()
    types = [p if isinstance(p, str) else p["type"] for p in parse_yaml(text)["plugins"]]
    # these two take functions, which a config names by import path: a project's own; the
    # last runs a Keras-style callback object given to fit
    takes_functions = {"learning_rate_scheduler", "lambda_callback", "keras_callback"}
    needs_an_extra = {"mlflow"}  # the config runs with tapefit alone; docs/training.md shows it
    assert sorted(types) == sorted(set(BUILTIN_PLUGINS) - takes_functions - needs_an_extra)
    result = train(tmp_path, "--config", str(CONFIGS / "all_plugins.yaml"), "--set", "trainer.epochs=2")
    assert result.returncode == 0, result.stderr
    run = tmp_path / "runs/all-plugins"
    assert sorted(p.name for p in run.iterdir()) == [
        ".tapefit-run",
        ".train.lock",
        "checkpoints",
        "config.yaml",
        "history.csv",
        "model.safetensors",
        "tensorboard",
    ]
    assert (run / "checkpoints/best").is_file() and (run / "checkpoints/last").is_file()
    rows = read_csv(run / "history.csv")
    assert len(rows) == 2 and "learning_rate" in rows[0]


# --------------------------------------------------------------------------- import paths are checked before any call

HOSTILE_SECTIONS = {
    "model": "model={type: 'shutil:rmtree', path: victim}",
    "data": "data={type: 'shutil:rmtree', path: victim}",
    "optimizer": "optimizer={type: 'shutil:rmtree', path: victim}",
    "schedule": "optimizer={type: adam, learning_rate: {type: 'shutil:rmtree', path: victim}}",
    "loss": "loss={type: 'shutil:rmtree'}",
    "metric": "metrics=[{type: 'shutil:rmtree'}]",
    "plugin": "plugins=[{type: 'shutil:rmtree', path: victim}]",
}


@pytest.mark.parametrize("print_config", [False, True])
@pytest.mark.parametrize("section", sorted(HOSTILE_SECTIONS))
def test_a_callable_of_the_wrong_kind_is_refused_before_it_is_called(workdir, capsys, section, print_config):
    victim = workdir / "victim"
    write(victim / "thesis.tex", "years of work\n")
    config = write(workdir / "c.yaml", SPIRALS)
    args = ["--config", config, "--set", HOSTILE_SECTIONS[section]] + (
        ["--print-config"] if print_config else []
    )
    before = snapshot(workdir / "runs")
    status, out, err = run_main(args, capsys)
    assert status == 2, err
    assert victim.joinpath("thesis.tex").read_text() == "years of work\n"
    assert snapshot(workdir / "runs") == before and out == ""
    [line] = err.strip().splitlines()
    assert "'shutil:rmtree' is the function shutil.rmtree, not " in line and "nothing was called" in line


@pytest.mark.parametrize(
    ("override", "required"),
    [
        (
            "data={type: 'os:system', command: 'touch pwned'}",
            "a function or class marked with @tp.configurable",
        ),
        ("model={type: 'os:system', command: 'touch pwned'}", "a tp.Module subclass"),
        ("plugins=[{type: 'subprocess:Popen', args: 'touch pwned'}]", "a plugin class or module"),
        ("model={type: 'subprocess:Popen', args: 'touch pwned'}", "a tp.Module subclass"),
        ("loss={type: 'builtins:eval'}", "a Loss subclass or a @tp.configurable loss function"),
    ],
)
def test_shell_commands_are_never_run_from_a_config(workdir, capsys, override, required):
    config = write(workdir / "c.yaml", SPIRALS)
    status, _, err = run_main(["--config", config, "--set", override], capsys)
    assert status == 2, err
    assert f"not {required}" in err and len(err.strip().splitlines()) == 1
    assert not (workdir / "pwned").exists()


def test_marked_functions_and_subclasses_by_import_path_train(workdir, capsys):
    write(
        workdir / "userparts.py",
        """\
        import numpy as np
        import tapefit as tp

        @tp.configurable
        def blobs(n: int = 120, seed: int = 0):
            rng = np.random.default_rng(seed)
            y = rng.integers(0, 2, n)
            return rng.normal(size=(n, 2)) + y[:, None] * 3.0, y

        @tp.configurable
        def hinge_like(y_true, y_pred):
            return tp.reduce_mean(tp.square(y_pred - tp.one_hot(tp.cast(y_true, tp.int32), 2)))

        @tp.configurable
        def top_is_one(y_true, y_pred):
            return tp.cast(tp.argmax(y_pred, axis=-1) == tp.cast(y_true, tp.int64), tp.float32)

        class Net(tp.Module):
            def __init__(self, units: int = 4):
                super().__init__()
                self.hidden = tp.layers.Dense(units, activation="relu")
                self.out = tp.layers.Dense(2)

            def call(self, x):
                return self.out(self.hidden(x))

        class Halving(tp.optimizers.schedules.LearningRateSchedule):
            def __init__(self, initial: float = 0.1):
                self.initial = initial

            def __call__(self, step):
                return self.initial * 0.5 ** (step // 10)
        """,
    )
    config = write(workdir / "c.yaml", SPIRALS)
    overrides = [
        "data={type: 'userparts:blobs', n: 100}",
        "model={type: 'userparts:Net', units: 6}",
        "loss={type: 'userparts:hinge_like'}",
        "metrics=[{type: 'userparts:top_is_one'}]",
        "optimizer={type: sgd, learning_rate: {type: 'userparts:Halving', initial: 0.05}}",
        "name=user",
    ]
    args = ["--config", config] + [a for o in overrides for a in ("--set", o)]
    status, _, err = run_main(args, capsys)
    assert status == 0, err
    assert (workdir / "runs/user/config.yaml").exists()


def test_configurable_refuses_what_it_cannot_mark():
    for thing in (3, len):  # a number; a builtin function has no attributes to set
        with pytest.raises(TypeError, match="decorate a function or class"):
            tp.configurable(thing)


# --------------------------------------------------------------------------- hostile YAML and TOML

ALIAS_BOMB = """\
a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]
b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]
c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]
d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]
e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]
f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]
g: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f]
h: &h [*g,*g,*g,*g,*g,*g,*g,*g,*g]
model: {type: mlp, hidden_units: *h}
"""


def run_subprocess(args, cwd):
    # In a subprocess with a deadline: a regression here would otherwise hang the suite or eat memory.
    return subprocess.run(
        [sys.executable, "-m", "tapefit", "train", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=cwd,
    )


def test_an_alias_bomb_is_refused_without_expanding_it(workdir):
    spirals = textwrap.dedent(SPIRALS).replace("model: {type: mlp, hidden_units: [8]}\n", "")
    config = write(workdir / "bomb.yaml", spirals + ALIAS_BOMB)
    result = run_subprocess(["--config", config], workdir)
    assert result.returncode == 2, result.stderr
    [line] = result.stderr.strip().splitlines()
    assert "more than 10000 values once its YAML aliases are expanded" in line and len(line) < 300
    result = run_subprocess(["--config", config, "--print-config"], workdir)
    assert result.returncode == 2 and result.stdout == ""


def test_an_alias_bomb_in_a_set_value_is_refused(workdir, capsys):
    config = write(workdir / "c.yaml", SPIRALS)
    bomb = (
        "{" + ALIAS_BOMB.replace("\n", ", ").replace("model: {type: mlp, hidden_units: *h}, ", "z: *h") + "}"
    )
    status, _, err = run_main(["--config", config, "--set", f"model.extra={bomb}"], capsys)
    assert status == 2
    [line] = err.strip().splitlines()
    assert "more than 10000 values" in line and len(line) < 300


@pytest.mark.parametrize("form", ["yaml", "toml", "set", "set-path"])
def test_a_value_nested_500_deep_is_one_line_and_exit_2(workdir, capsys, form):
    deep = "[" * 500 + "]" * 500
    config = write(workdir / "c.yaml", SPIRALS)
    if form == "yaml":
        config = write(workdir / "deep.yaml", textwrap.dedent(SPIRALS) + f"extra: {deep}\n")
        args = ["--config", config]
    elif form == "toml":
        config = write(workdir / "deep.toml", f'name = "x"\nextra = {deep}\n')
        args = ["--config", config]
    elif form == "set":
        args = ["--config", config, "--set", f"model.hidden_units={deep}"]
    else:
        args = ["--config", config, "--set", ".".join(["k"] * 500) + "=1"]
    result = run_subprocess(args, workdir)
    assert result.returncode == 2, result.stderr[-2000:]
    [line] = result.stderr.strip().splitlines()
    assert "nested too deeply" in line and "Traceback" not in result.stderr and len(line) < 300


# --------------------------------------------------------------------------- one process per run folder


def start_long_run(tmp_path, name="locked"):
    config = write(
        tmp_path / "long.yaml",
        SPIRALS.replace("n_samples: 200", "n_samples: 4000").replace("epochs: 2", "epochs: 100000"),
    )
    process = subprocess.Popen(
        [sys.executable, "-m", "tapefit", "train", "--config", str(config), "--set", f"name={name}"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    run = tmp_path / "runs" / name
    deadline = time.monotonic() + 60
    while not list(run.glob("checkpoints/epoch*.npz")) and time.monotonic() < deadline:
        assert process.poll() is None, process.communicate()
        time.sleep(0.05)
    return process, config, run


def test_a_second_process_on_a_running_run_exits_2_naming_the_holder(tmp_path):
    process, config, run = start_long_run(tmp_path)
    written = (run / "config.yaml").read_text()
    try:
        for extra in ([], ["--resume", "auto"], ["--overwrite"]):
            second = train(tmp_path, "--config", str(config), "--set", "name=locked", *extra)
            assert second.returncode == 2, second.stderr
            [line] = second.stderr.strip().splitlines()
            assert f"runs/locked is in use by process {process.pid}" in line, line
        assert process.poll() is None  # the first run goes on, undisturbed
        process.send_signal(signal.SIGINT)
        _, err = process.communicate(timeout=60)
        assert process.returncode == 130, err
        assert "Traceback" not in err
    finally:
        if process.poll() is None:
            process.kill()
    assert (run / "config.yaml").read_text() == written  # nobody else wrote into the run
    assert (run / "checkpoints/interrupted.npz").is_file()
    # The lock went with the process: the run continues.
    resumed = train(
        tmp_path,
        "--config",
        str(config),
        "--set",
        "name=locked",
        "--resume",
        "auto",
        "--set",
        "trainer.epochs=1",
    )
    assert resumed.returncode == 0, resumed.stderr


def test_a_killed_run_leaves_no_stale_lock(tmp_path):
    process, config, _ = start_long_run(tmp_path, name="killed")
    process.kill()
    process.communicate(timeout=60)
    resumed = train(
        tmp_path,
        "--config",
        str(config),
        "--set",
        "name=killed",
        "--resume",
        "auto",
        "--set",
        "trainer.epochs=1",
    )
    assert resumed.returncode == 0, resumed.stderr


# --------------------------------------------------------------------------- Ctrl-C at the edges


def test_a_double_ctrl_c_is_still_one_line_and_exit_130(tmp_path):
    process, _, _ = start_long_run(tmp_path, name="twice")
    try:
        process.send_signal(signal.SIGINT)
        time.sleep(0.01)
        process.send_signal(signal.SIGINT)
        _, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 130, err
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert [line for line in lines if "train: interrupted" in line] == [lines[-1]]  # said once, last


@pytest.mark.parametrize("name", ["..", "../x", "/abs", "", "a/b", "."])
def test_a_run_name_that_is_not_one_folder_is_refused(workdir, capsys, name):
    config = write(workdir / "c.yaml", SPIRALS)
    status, _, err = run_main(["--config", config, "--set", f"name='{name}'"], capsys)
    assert status == 2, err
    assert "name: must be a folder name" in err and len(err.strip().splitlines()) == 1


def test_output_paths_outside_runs_are_allowed_by_design(workdir, capsys):
    # Documented: trainer.output_dir and a plugin's path may point anywhere the user can write.
    config = write(workdir / "c.yaml", SPIRALS)
    outside = f"../{workdir.name}-outside"
    overrides = [f"trainer.output_dir={outside}", f"plugins[0].dirpath={workdir / 'ck'}"]
    status, _, err = run_main(["--config", config, *(a for o in overrides for a in ("--set", o))], capsys)
    assert status == 0, err
    assert (workdir / outside / "config.yaml").is_file() and list((workdir / "ck").glob("*.npz"))


# --------------------------------------------------------------------------- the trained weights, exported


def test_a_run_writes_its_final_weights_as_safetensors(workdir, capsys):
    from safetensors.numpy import load_file

    config = write(workdir / "c.yaml", SPIRALS)
    plugins = (
        "plugins=[{type: checkpoint}, {type: early_stopping, monitor: val_loss, restore_best_weights: true}]"
    )
    status, out, err = run_main(["--config", config, "--set", "name=w", "--set", plugins], capsys)
    assert status == 0, err
    assert "model.safetensors" in out
    weights = load_file(workdir / "runs/w/model.safetensors")
    from tapefit.plugins.checkpoint import latest_checkpoint, load_checkpoint

    last = load_checkpoint(latest_checkpoint(workdir / "runs/w/checkpoints"))
    best = last["plugins"]["early_stopping"]["best_weights"]  # restored at the end of the fit
    assert sorted(weights) == sorted(best)
    for key in best:
        np.testing.assert_array_equal(weights[key], best[key])


def test_export_writes_a_checkpoints_weights_without_training(workdir, capsys):
    from safetensors.numpy import load_file

    from tapefit.plugins.checkpoint import load_checkpoint

    config = write(workdir / "c.yaml", SPIRALS)
    status, _, err = run_main(["--config", config, "--set", "name=e"], capsys)
    assert status == 0, err
    before = snapshot(workdir / "runs/e")
    first = workdir / "runs/e/checkpoints/epoch0000-step00000004.npz"
    status, out, err = run_main(
        ["--config", config, "--set", "name=e", "--resume", first, "--export", "w.safetensors"], capsys
    )
    assert status == 0, err
    assert f"exported the weights of {first}" in out
    weights, saved = load_file(workdir / "w.safetensors"), load_checkpoint(first)["model"]
    assert sorted(weights) == sorted(saved)
    for key in saved:
        np.testing.assert_array_equal(weights[key], saved[key])
    assert snapshot(workdir / "runs/e") == before  # nothing trained, nothing rewritten
    status, _, err = run_main(["--config", config, "--set", "name=none", "--export", "x.safetensors"], capsys)
    assert status == 2 and "no checkpoint to export" in err
    status, _, err = run_main(["--config", config, "--export", "x.npz"], capsys)
    assert status == 2 and "must end in '.safetensors'" in err


def test_a_resume_with_nothing_to_train_writes_nothing(workdir, capsys):
    config = write(workdir / "c.yaml", SPIRALS)
    status, _, err = run_main(["--config", config, "--set", "name=done"], capsys)
    assert status == 0, err
    before = snapshot(workdir / "runs/done")
    status, out, err = run_main(["--config", config, "--set", "name=done", "--resume", "auto"], capsys)
    assert status == 0, err
    assert "nothing to train" in out
    assert snapshot(workdir / "runs/done") == before


def test_a_non_finite_run_is_reported_as_stopped_not_done(workdir, capsys):
    config = write(workdir / "c.yaml", SPIRALS)
    overrides = ["name=nan", "optimizer={type: sgd, learning_rate: 1.0e+30}", "plugins=[terminate_on_nan]"]
    with np.errstate(all="ignore"):
        status, out, err = run_main(
            ["--config", config, *(a for o in overrides for a in ("--set", o))], capsys
        )
    assert status == 1
    assert "train: done" not in out and "train: stopped: nan, 1 epoch" in out
    assert err.strip().splitlines()[-1].startswith("train: error: the training loss was not finite at step ")
    assert not (workdir / "runs/nan/model.safetensors").exists()


def test_a_plugin_that_declares_its_log_keys_lets_train_check_monitors(workdir, capsys):
    write(
        workdir / "declared.py",
        """\
        import tapefit as tp

        class Declared:
            adds_log_keys = ()

            @tp.hookimpl
            def on_epoch_end(self, logs):
                pass
        """,
    )
    config = write(workdir / "c.yaml", SPIRALS)
    plugins = "plugins=[{type: 'declared:Declared'}, {type: early_stopping, monitor: mine}]"
    status, _, err = run_main(["--config", config, "--set", plugins], capsys)
    assert status == 2 and "plugins[1].monitor: 'mine' is not a key of this run's epoch logs" in err


def test_a_checkpoint_with_a_bad_field_is_exit_2_naming_it(workdir, capsys):
    from tapefit.plugins.checkpoint import load_checkpoint, save_checkpoint

    config = write(workdir / "c.yaml", SPIRALS)
    status, _, err = run_main(["--config", config, "--set", "name=f"], capsys)
    assert status == 0, err
    contents = load_checkpoint(workdir / "runs/f/checkpoints")
    contents["trainer"]["epoch"] = "many"
    save_checkpoint(
        workdir / "bad.npz", {k: v for k, v in contents.items() if k not in ("format", "version")}
    )
    status, out, err = run_main(["--config", config, "--set", "name=g", "--resume", "bad.npz"], capsys)
    assert status == 2 and out == ""
    [line] = err.strip().splitlines()
    assert "bad.npz: trainer.epoch: expected a non-negative integer, got 'many'" in line


def test_resume_auto_after_early_stopping_says_so_and_trains_nothing(workdir, capsys):
    config = write(workdir / "c.yaml", SPIRALS)
    plugins = "plugins=[checkpoint, {type: early_stopping, monitor: loss, patience: 1, min_delta: 100.0}]"
    args = ["--config", config, "--set", "name=es", "--set", plugins, "--set", "trainer.epochs=10"]
    status, out, err = run_main(args, capsys)
    assert status == 0, err
    before = snapshot(workdir / "runs/es")
    status, out, err = run_main([*args, "--resume", "auto", "--set", "trainer.epochs=30"], capsys)
    assert status == 0, err
    finished = [line for line in out.splitlines() if "finished by early_stopping" in line]
    assert len(finished) == 1 and "nothing to train" in finished[0]
    assert snapshot(workdir / "runs/es") == before


def test_a_resume_with_another_batch_size_is_exit_2_with_the_fits_message(workdir, capsys):
    config = write(workdir / "c.yaml", SPIRALS)
    status, _, err = run_main(["--config", config, "--set", "name=bs"], capsys)
    assert status == 0, err
    args = ["--config", config, "--set", "name=bs", "--resume", "auto", "--set", "trainer.batch_size=40"]
    status, out, err = run_main(args, capsys)
    assert status == 2 and out == ""
    [line] = err.strip().splitlines()
    assert "it was written by a fit with {'batch_size': 50}, this fit has {'batch_size': 40}" in line


def test_a_resume_with_another_model_names_the_variables_that_differ(workdir, capsys):
    config = write(workdir / "c.yaml", SPIRALS)
    status, _, err = run_main(["--config", config, "--set", "name=m"], capsys)
    assert status == 0, err
    args = [
        "--config",
        config,
        "--set",
        "name=m",
        "--resume",
        "auto",
        "--set",
        "model.hidden_units=[16, 16, 16]",
    ]
    status, out, err = run_main(args, capsys)
    assert status == 2 and out == ""
    [line] = err.strip().splitlines()
    assert "model: the checkpoint holds another model than this one (missing " in line
    assert "dense_3/kernel" in line, line


def test_trainer_threads_is_checked_and_auto_trains(workdir, capsys):
    config = write(workdir / "c.yaml", SPIRALS)
    assert_config_error(
        workdir,
        capsys,
        ["--config", config, "--set", "trainer.threads=0"],
        f"train: error: {config}: trainer.threads: must be auto, null or a whole number >= 1, got 0",
    )
    status, _, err = run_main(
        ["--config", config, "--set", "name=t", "--set", "trainer.threads=auto"], capsys
    )
    assert status == 0, err
