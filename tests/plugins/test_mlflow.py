"""The mlflow plugin's runs, read back from a real local store with MLflow's own client."""

from __future__ import annotations

import math
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from mlflow.tracking import MlflowClient

import tapefit as tp
from tapefit.plugins.mlflow import MLFlowLogger

REPO = Path(__file__).resolve().parents[2]

N, BATCH, EPOCHS = 22, 5, 3
STEPS_PER_EPOCH = math.ceil(N / BATCH)
STEPS = STEPS_PER_EPOCH * EPOCHS
CONFIG = {"name": "demo", "optimizer": {"type": "adam", "learning_rate": 0.01}, "layers": [8, 3]}


@pytest.fixture(autouse=True)
def _no_user_tracking_uri(monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)


def history(client, run_id, key):
    return [(m.step, m.value) for m in client.get_metric_history(run_id, key)]


def fit(tmp_path, make_trainer, make_data, plugins, **kwargs):
    x, y = make_data(N)
    trainer = make_trainer(plugins, output_dir=tmp_path / "run")
    trainer.config = CONFIG
    result = trainer.fit(
        x, y, epochs=EPOCHS, batch_size=BATCH, validation_data=make_data(7, seed=1), verbose=0, **kwargs
    )
    return trainer, result


def test_params_metrics_and_model_in_the_default_store(tmp_path, make_trainer, make_data):
    logger = MLFlowLogger(experiment_name="demo", run_name="first", log_every_n_steps=2, log_model=True)
    trainer, result = fit(tmp_path, make_trainer, make_data, [logger])
    # the default store is created inside the run's output folder
    assert (tmp_path / "run" / "mlruns" / "mlflow.db").is_file()
    client = MlflowClient(logger.resolved_tracking_uri)
    run = client.get_run(logger.run_id)
    assert run.info.status == "FINISHED"
    assert run.info.run_name == "first"
    assert client.get_experiment(run.info.experiment_id).name == "demo"
    assert run.data.params == {
        "name": "demo",
        "optimizer.type": "adam",
        "optimizer.learning_rate": "0.01",
        "layers.0": "8",
        "layers.1": "3",
    }
    for key in ("loss", "accuracy", "val_loss", "val_accuracy"):
        logged = history(client, logger.run_id, key)
        assert [step for step, _ in logged] == list(range(EPOCHS)), key
        np.testing.assert_allclose([v for _, v in logged], result.history[key], rtol=1e-6)
    for key in ("step/loss", "step/accuracy"):
        assert [step for step, _ in history(client, logger.run_id, key)] == list(range(0, STEPS, 2))
    artifacts = [a.path for a in client.list_artifacts(logger.run_id, "model")]
    assert artifacts == ["model/model.tapefit"]
    saved = Path(client.download_artifacts(logger.run_id, "model/model.tapefit", str(tmp_path / "dl")))
    loaded = tp.models.load_model(saved)
    x, _ = make_data(4)
    np.testing.assert_allclose(loaded.predict(x), trainer.model.predict(x), rtol=1e-6)


def test_tracking_uri_option_and_environment(tmp_path, make_trainer, make_data, monkeypatch):
    uri = f"sqlite:///{tmp_path / 'mine.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    logger = MLFlowLogger(log_every_n_steps=0)
    fit(tmp_path, make_trainer, make_data, [logger])
    assert logger.resolved_tracking_uri == uri
    assert not (tmp_path / "run" / "mlruns").exists()
    run = MlflowClient(uri).get_run(logger.run_id)
    assert set(run.data.metrics) == {"loss", "accuracy", "val_loss", "val_accuracy"}
    explicit = f"sqlite:///{tmp_path / 'explicit.db'}"
    logger = MLFlowLogger(tracking_uri=explicit)
    fit(tmp_path, make_trainer, make_data, [logger])
    assert logger.resolved_tracking_uri == explicit  # the option wins over the environment
    assert MlflowClient(explicit).get_run(logger.run_id).info.status == "FINISHED"


def test_interrupted_then_resumed_fit_continues_the_run(tmp_path, make_trainer, make_data):
    x, y = make_data(N)
    checkpoints = tmp_path / "ckpt"
    uri = f"sqlite:///{tmp_path / 'm.db'}"
    straight = MLFlowLogger(tracking_uri=uri, log_every_n_steps=1)
    make_trainer([straight], output_dir=tmp_path / "a").fit(x, y, epochs=EPOCHS, batch_size=BATCH, verbose=0)

    logger = MLFlowLogger(tracking_uri=uri, log_every_n_steps=1)
    trainer = make_trainer(
        [logger, {"type": "checkpoint", "dirpath": str(checkpoints)}], output_dir=tmp_path / "b"
    )
    apply = trainer.optimizer.apply_gradients
    calls = []

    def apply_with_ctrl_c(pairs):
        calls.append(1)
        if len(calls) == 8:  # step 7, in the second epoch: the checkpoint is the state before it
            raise KeyboardInterrupt
        return apply(pairs)

    trainer.optimizer.apply_gradients = apply_with_ctrl_c
    with pytest.raises(KeyboardInterrupt):
        trainer.fit(x, y, epochs=EPOCHS, batch_size=BATCH, verbose=0)
    client = MlflowClient(uri)
    first_id = logger.run_id
    assert client.get_run(first_id).info.status == "KILLED"
    assert [s for s, _ in history(client, first_id, "step/loss")] == list(range(7))
    assert [s for s, _ in history(client, first_id, "loss")] == [0]

    resumed_logger = MLFlowLogger(tracking_uri=uri, log_every_n_steps=1)
    resumed = make_trainer([resumed_logger], seed=5, output_dir=tmp_path / "b")
    resumed.fit(x, y, epochs=EPOCHS, batch_size=BATCH, verbose=0, resume_from=checkpoints / "interrupted.npz")
    assert resumed_logger.run_id == first_id
    run = client.get_run(first_id)
    assert run.info.status == "FINISHED"
    assert len(client.search_runs([run.info.experiment_id])) == 2  # the straight one and this one
    for key in ("step/loss", "step/accuracy", "loss", "accuracy"):
        logged, reference = history(client, first_id, key), history(client, straight.run_id, key)
        # every step and epoch once, with the values of the run that was never interrupted
        assert logged == reference, key
    assert [s for s, _ in history(client, first_id, "step/loss")] == list(range(STEPS))


def test_check_state_dict_refuses_what_is_no_run_id():
    logger = MLFlowLogger()
    logger.check_state_dict({"run_id": None})
    logger.check_state_dict({"run_id": "0123456789abcdef0123456789abcdef"})
    for bad in ("../../etc", "", 7, ["x"]):
        with pytest.raises(ValueError, match="run_id"):
            logger.check_state_dict({"run_id": bad})
    with pytest.raises(ValueError):
        logger.check_state_dict(["run_id"])


def test_options_are_checked():
    with pytest.raises(ValueError, match="log_every_n_steps"):
        MLFlowLogger(log_every_n_steps=-1)
    with pytest.raises(ValueError, match="experiment_name"):
        MLFlowLogger(experiment_name="")


def test_missing_mlflow_names_the_extra():
    code = textwrap.dedent(
        """
        import sys
        sys.modules["mlflow"] = None
        import tapefit as tp
        try:
            tp.plugins.create_plugin("mlflow")
        except ImportError as error:
            print(error)
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert 'pip install "tapefit[mlflow]"' in out


def test_train_config_with_an_mlflow_plugin(tmp_path):
    (tmp_path / "run.yaml").write_text(
        textwrap.dedent(
            """\
            name: sp
            data: {type: spirals, n_samples: 200, n_classes: 2}
            model: {type: mlp, hidden_units: [8]}
            loss: sparse_categorical_crossentropy
            metrics: [accuracy]
            optimizer: {type: adam, learning_rate: 0.01}
            trainer: {epochs: 2, batch_size: 50}
            plugins:
              - {type: mlflow, experiment_name: cli, log_every_n_steps: 1}
            """
        )
    )
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])
    done = subprocess.run(
        [sys.executable, "-m", "tapefit", "train", "--config", "run.yaml"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    store = tmp_path / "runs" / "sp" / "mlruns" / "mlflow.db"
    client = MlflowClient(f"sqlite:///{store}")
    (run,) = client.search_runs([client.get_experiment_by_name("cli").experiment_id])
    assert run.info.status == "FINISHED"
    assert run.data.params["optimizer.type"] == "adam"
    assert run.data.params["trainer.epochs"] == "2"
    assert run.data.params["plugins.0.type"] == "mlflow"
    assert [s for s, _ in history(client, run.info.run_id, "val_accuracy")] == [0, 1]
    assert [s for s, _ in history(client, run.info.run_id, "step/loss")] == list(range(8))
    assert "mlruns/" in done.stdout  # listed among the run's outputs
