"""``configs/gan_digits.yaml``: a model with its own train_step and optimizers, trained by
``train`` without a loss or an optimizer in its config, resumed and exported."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import tapefit as tp
from tapefit.cli import app as cli
from tapefit.cli.config import parse_yaml

REPO = Path(__file__).resolve().parents[2]
GAN = REPO / "configs" / "gan_digits.yaml"


def train(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run(
        [sys.executable, "-m", "tapefit", "train", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_gan_config_trains_resumes_and_exports(tmp_path):
    first = train(tmp_path, "--config", str(GAN), "--set", "trainer.epochs=2")
    assert first.returncode == 0, first.stderr
    assert "done: gan-digits, 2 epochs" in first.stdout
    run = tmp_path / "runs" / "gan-digits"
    lines = (run / "history.csv").read_text().splitlines()
    assert lines[0] == "epoch,d_loss,g_loss" and len(lines) == 3
    resolved = parse_yaml((run / "config.yaml").read_text())
    assert resolved["loss"] is None and resolved["optimizer"] is None
    contents = tp.checkpointing.load_checkpoint(run / "checkpoints")
    steps = 2 * 29  # 1797 digits in batches of 64
    assert contents["optimizer"] == {}  # the trainer has none
    assert sorted(contents["optimizers"]) == ["d_optimizer", "g_optimizer"]
    for state in contents["optimizers"].values():
        assert state["iterations"] == steps

    resumed = train(tmp_path, "--config", str(GAN), "--resume", "auto", "--set", "trainer.epochs=3")
    assert resumed.returncode == 0, resumed.stderr
    assert "done: gan-digits, 1 epoch" in resumed.stdout and "(3 in all)" in resumed.stdout
    assert len((run / "history.csv").read_text().splitlines()) == 4

    exported = train(tmp_path, "--config", str(GAN), "--export", str(tmp_path / "gan.safetensors"))
    assert exported.returncode == 0, exported.stderr
    sys.path.insert(0, str(REPO))
    from examples.gan import GAN as GANModel

    last = tp.checkpointing.load_checkpoint(run / "checkpoints")
    model = GANModel()
    model.discriminator(model.generator(tp.zeros((1, model.latent_dim))))  # builds both
    model.load_weights(tmp_path / "gan.safetensors")  # train built the model by its step to export it
    assert {k: v.tolist() for k, v in model.state_dict().items()} == {
        k: v.tolist() for k, v in last["model"].items()
    }


def run_main(capsys, *args):
    status = cli.main([str(a) for a in args])
    _, err = capsys.readouterr()
    return status, err.strip()


def test_a_model_with_the_default_step_still_needs_a_loss(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    config = tmp_path / "c.yaml"
    config.write_text("data: {type: digits}\nmodel: {type: mlp}\n")
    status, err = run_main(capsys, "--config", config)
    assert status == 2
    assert err == (
        f"train: error: {config}: loss: missing required key (model.type 'mlp' trains with the default "
        "step, which needs a loss; only a model whose class overrides train_step may leave it out)"
    )
    status, err = run_main(capsys, "--config", config, "--set", "loss=null")
    assert status == 2 and err.startswith(f"train: error: {config}: loss: is null (model.type 'mlp'")
    assert not (tmp_path / "runs").exists()


def test_what_assumes_a_trainer_optimizer_works_or_says_so(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    status, err = run_main(capsys, "--config", GAN, "--set", "optimizer.learning_rate=0.1")
    assert status == 2
    assert err == (
        f"train: error: {GAN}: optimizer.type: missing required key (optimizer.learning_rate given, but the "
        "config has no optimizer: model.type 'examples.gan:GAN' trains with its own train_step and "
        "optimizers; set the model's own keys, or give optimizer.type for an optimizer of the trainer)"
    )
    assert cli.main(["--config", str(GAN), "--print-config"]) == 0
    printed = parse_yaml(capsys.readouterr().out)
    assert printed["loss"] is None and printed["optimizer"] is None and printed["metrics"] == []
    # A learning-rate plugin sets the trainer's optimizer's rate: one line saying there is none.
    plateau = "plugins=[{type: reduce_lr_on_plateau, monitor: d_loss}]"
    status, err = run_main(capsys, "--config", GAN, "--set", plateau, "--set", "trainer.epochs=1")
    assert status == 1
    assert err == (
        "train: error while training: ValueError: reduce_lr_on_plateau: the trainer has no optimizer whose "
        "learning rate it could set (GAN's train_step uses optimizers of its own: d_optimizer, g_optimizer); "
        "set their rates in the model, or give the trainer the optimizer the step uses (self.optimizer) "
        "(--debug shows the traceback)"
    )


def test_a_learning_rate_schedule_plugin_without_a_trainer_optimizer_is_one_error():
    sys.path.insert(0, str(REPO))
    from examples.gan import GAN as GANModel

    trainer = tp.Trainer(GANModel(), plugins=[{"type": "learning_rate_scheduler", "schedule": lambda e: 0.1}])
    with pytest.raises(ValueError, match=r"^learning_rate_scheduler: the trainer has no optimizer whose"):
        trainer.fit(tp.random.normal((8, 64)).numpy(), epochs=1, batch_size=4, verbose=0)


# A GAN's step whose noise is a function of each sample: what a rank computes then does not
# depend on how the global batch is split, so two ranks must train as one process does. (The
# shipped GAN draws noise for the rows it holds, as Keras's example does on each replica: its
# ranks agree with each other, not with one process.)
FIXED_NOISE = """\
import tapefit as tp
from examples.gan import GAN


@tp.register_serializable
class FixedNoiseGAN(GAN):
    def train_step(self, data):
        real = data[0] if isinstance(data, tuple) else data
        features = tp.tanh(real[:, : self.latent_dim])
        normal, uniform = tp.random.normal, tp.random.uniform
        tp.random.normal = lambda shape, *args, **kwargs: features
        tp.random.uniform = lambda shape, *args, **kwargs: tp.zeros(shape)
        try:
            return super().train_step(data)
        finally:
            tp.random.normal, tp.random.uniform = normal, uniform
"""


def mpiexec() -> str:
    beside = Path(sys.executable).parent / "mpiexec"
    found = str(beside) if beside.exists() else shutil.which("mpiexec")
    if found is None:
        pytest.skip("needs mpiexec")
    return found


def train_ranks(cwd: Path, ranks: int, *args: str) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO), str(cwd), os.environ.get("PYTHONPATH", "")]),
    }
    command = [
        sys.executable,
        "-m",
        "tapefit",
        "train",
        "--config",
        str(GAN),
        "--set",
        "trainer.epochs=2",
        *args,
    ]
    return subprocess.run(
        [mpiexec(), "-n", str(ranks), *command], cwd=cwd, env=env, capture_output=True, text=True, timeout=120
    )


def test_two_mpi_ranks_train_the_gan_config_as_one_process(tmp_path):
    pytest.importorskip("mpi4py")
    shipped = train_ranks(tmp_path, 2)
    assert shipped.returncode == 0, shipped.stderr
    assert shipped.stdout.count("train: done: gan-digits, 2 epochs") == 1  # rank 0 alone speaks
    assert "distributed: 2 ranks" in shipped.stderr
    run = tmp_path / "runs" / "gan-digits"
    assert (run / "history.csv").read_text().splitlines()[0] == "epoch,d_loss,g_loss"
    saved = tp.checkpointing.load_checkpoint(run / "checkpoints")
    assert [state["iterations"] for state in saved["optimizers"].values()] == [58, 58]

    (tmp_path / "fixed_noise.py").write_text(FIXED_NOISE)
    weights = {}
    for ranks in (1, 2):
        name = f"fixed-{ranks}"
        result = train_ranks(
            tmp_path, ranks, "--set", "model.type=fixed_noise:FixedNoiseGAN", "--set", f"name={name}"
        )
        assert result.returncode == 0, result.stderr
        weights[ranks] = tp.checkpointing.load_checkpoint(tmp_path / "runs" / name / "checkpoints")["model"]
    assert weights[1].keys() == weights[2].keys()
    for key, value in weights[1].items():  # measured: at most 3e-8 apart, on weights of about 0.3
        np.testing.assert_allclose(weights[2][key], value, rtol=0, atol=1e-6, err_msg=key)
