"""The ``mlflow`` plugin: params, metrics and the trained model in an MLflow run.

Needs MLflow's client (``pip install "tapefit[mlflow]"``: ``mlflow-skinny``, with SQLAlchemy and
Alembic for the local SQLite store). What it logs into the run:

    params     the run's config (``trainer.config``), one per key path (``optimizer.learning_rate``)
    metrics    every epoch log key (``loss``, ``val_accuracy``) at step = the epoch's index;
               every n-th step's logs as ``step/<key>`` at step = the optimizer step's index
    artifacts  ``model/model.tapefit`` at the end of the fit, with ``log_model``

The run's id is the plugin's checkpointed state, so a resumed fit logs into the same run.
"""

from __future__ import annotations

import logging
import os
import re
import tempfile
import time
from pathlib import Path
from typing import Any

from tapefit.checkpointing.validate import expect_mapping
from tapefit.core.naming import suggest_keywords
from tapefit.plugins.flat_config import flatten_config
from tapefit.plugins.hookspecs import hookimpl

logger = logging.getLogger("tapefit.plugins.mlflow")  # one logger per plugin: users may silence one

MISSING = 'the mlflow plugin needs MLflow\'s client: pip install "tapefit[mlflow]"'

# MLflow's run ids are 32 hexadecimal digits; other stores' ids keep to these characters.
_RUN_ID = re.compile(r"[A-Za-z0-9_-]{1,256}")

# The most entries one log_batch call takes (MLflow's limits).
_PARAMS_PER_CALL = 100
_METRICS_PER_CALL = 1000


def _client_class() -> Any:
    try:
        from mlflow.tracking import MlflowClient
    except ImportError as error:
        raise ImportError(f"{MISSING} ({error})") from None
    return MlflowClient


def _param_text(value: Any) -> str:
    return value if isinstance(value, str) else repr(value) if isinstance(value, float) else str(value)


@suggest_keywords
class MLFlowLogger:
    """Logs a fit to an MLflow run (config name ``mlflow``), as Lightning's ``MLFlowLogger``.

    Args:
        experiment_name: the MLflow experiment; created when it does not exist.
        run_name: the run's name; ``None``: MLflow makes one up.
        tracking_uri: where MLflow keeps runs. ``None`` (default): the ``MLFLOW_TRACKING_URI``
            environment variable when it is set, else a SQLite store in ``<output_dir>/mlruns``
            (``mlflow.db``, with the artifacts in ``artifacts/``), created there.
        log_every_n_steps: log every n-th step's logs (the epoch's running values, as the
            progress bar shows them) as ``step/<key>``; 0: the epoch metrics only.
        log_model: at the end of the fit, save the trainer (``Trainer.save``) and log the file
            as the artifact ``model/model.tapefit``.
        tags: tags set on the run.

    Epoch metrics are logged at step = the epoch's index (0 for the first), per-step ones at
    the optimizer step's index. Metrics are sent in batches at each epoch's end. A fit that
    an exception ends sends those of the steps and epochs a checkpoint taken then holds, and
    marks the run ``KILLED`` (Ctrl-C) or ``FAILED``; a fit resumed from that checkpoint logs
    into the same run (its id is in the checkpoint), from where the checkpoint stands, so
    each step and epoch is logged once. A later ``fit`` of the same trainer continues the
    run too.
    """

    plugin_name = "mlflow"
    adds_log_keys: tuple[str, ...] = ()  # epoch log keys it adds (hookspecs.py)
    chief_only = True  # writes or prints: only rank 0 runs it (hookspecs.py, configure_world)

    def __init__(
        self,
        experiment_name: str = "tapefit",
        run_name: str | None = None,
        tracking_uri: str | None = None,
        *,
        log_every_n_steps: int = 50,
        log_model: bool = False,
        tags: dict[str, str] | None = None,
    ) -> None:
        if not isinstance(experiment_name, str) or not experiment_name:
            raise ValueError(f"mlflow: experiment_name must be a non-empty string, got {experiment_name!r}")
        if (
            not isinstance(log_every_n_steps, int)
            or isinstance(log_every_n_steps, bool)
            or log_every_n_steps < 0
        ):
            raise ValueError(
                f"mlflow: log_every_n_steps must be a whole number >= 0, got {log_every_n_steps!r}"
            )
        _client_class()  # a missing MLflow is said when the plugin is made, before any training
        self.experiment_name = experiment_name
        self.run_name = run_name
        self.tracking_uri = tracking_uri
        self.log_every_n_steps = log_every_n_steps
        self.log_model = bool(log_model)
        self.tags = {str(k): str(v) for k, v in (tags or {}).items()}
        self.run_id: str | None = None
        """The MLflow run's id, once the fit has started it (or a checkpoint named it)."""
        self.resolved_tracking_uri: str | None = None
        self._client: Any = None
        self._config: dict[str, Any] = {}
        self._artifacts: str | None = None
        self._opened = False  # the run is started or reattached in this fit
        # (step or None for an epoch metric, position it belongs to, Metric) waiting to be sent
        self._pending: list[tuple[str, int, Any]] = []

    # -- the run ------------------------------------------------------------------------

    def _resolve_uri(self, trainer: Any) -> tuple[str, str | None]:
        """The tracking URI and, for the default local store, the artifact folder."""
        if self.tracking_uri is not None:
            return self.tracking_uri, None
        from_env = os.environ.get("MLFLOW_TRACKING_URI")
        if from_env:
            return from_env, None
        folder = (Path(trainer.output_dir) / "mlruns").resolve()
        folder.mkdir(parents=True, exist_ok=True)
        return f"sqlite:///{folder / 'mlflow.db'}", (folder / "artifacts").as_uri()

    @hookimpl
    def on_fit_start(self, trainer: Any) -> None:
        uri, artifacts = self._resolve_uri(trainer)
        self.resolved_tracking_uri = uri
        self._artifacts = artifacts
        self._client = _client_class()(tracking_uri=uri)
        self._pending = []
        self._config = dict(trainer.config or {})
        # A resume's run id arrives after this hook (load_state_dict): the run opens at first use.
        self._opened = False

    def _run(self) -> str:
        """The run's id, starting the run or reattaching to it on first use in a fit."""
        if self._opened and self.run_id is not None:
            return self.run_id
        client = self._client
        if self.run_id is not None:
            try:
                client.get_run(self.run_id)
            except Exception as error:
                logger.warning(
                    "mlflow: cannot continue run %s at %s (%s); starting a new run",
                    self.run_id,
                    self.resolved_tracking_uri,
                    error,
                )
                self.run_id = None
            else:
                client.update_run(self.run_id, status="RUNNING")
        if self.run_id is None:
            experiment = client.get_experiment_by_name(self.experiment_name)
            if experiment is None:
                experiment_id = client.create_experiment(
                    self.experiment_name, artifact_location=self._artifacts
                )
            else:
                experiment_id = experiment.experiment_id
            run = client.create_run(experiment_id, run_name=self.run_name, tags=self.tags or None)
            self.run_id = run.info.run_id
        self._opened = True
        self._log_params()
        return self.run_id

    def _log_params(self) -> None:
        """The config's values that the run does not hold yet; MLflow's params never change, so
        a value that differs from the run's (a resume that adds epochs) is left as it was."""
        from mlflow.entities import Param

        assert self.run_id is not None
        if not self._config:  # a Trainer made in code, without a config: nothing to log
            return
        logged = self._client.get_run(self.run_id).data.params
        values = {key: _param_text(value) for key, value in flatten_config(self._config).items()}
        changed = sorted(k for k, v in values.items() if k in logged and logged[k] != v)
        if changed:
            logger.info("mlflow: run %s keeps its first value of %s", self.run_id, ", ".join(changed))
        new = [Param(k, v) for k, v in values.items() if k not in logged]
        for start in range(0, len(new), _PARAMS_PER_CALL):
            self._client.log_batch(self.run_id, params=new[start : start + _PARAMS_PER_CALL])

    # -- metrics ------------------------------------------------------------------------

    def _queue(self, kind: str, position: int, logs: dict[str, float], prefix: str) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        for key, value in logs.items():
            self._pending.append((kind, position, Metric(f"{prefix}{key}", float(value), now, position)))

    def _send(self, keep: Any = None) -> None:
        """Sends the queued metrics (those ``keep(kind, position)`` accepts, when given)."""
        pending, self._pending = self._pending, []
        metrics = [metric for kind, position, metric in pending if keep is None or keep(kind, position)]
        if not metrics:
            return
        run_id = self._run()
        for start in range(0, len(metrics), _METRICS_PER_CALL):
            self._client.log_batch(run_id, metrics=metrics[start : start + _METRICS_PER_CALL])

    @hookimpl
    def on_train_batch_end(self, step: int, logs: dict[str, float]) -> None:
        if self.log_every_n_steps and step % self.log_every_n_steps == 0:
            self._queue("step", step, logs, "step/")

    @hookimpl
    def on_epoch_end(self, epoch: int, logs: dict[str, float]) -> None:
        self._queue("epoch", epoch, logs, "")

    @hookimpl
    def on_save_point(self, after: str) -> None:
        # After every plugin's on_epoch_end: the epoch is whole, and a checkpoint holds it.
        if after == "epoch":
            self._send()

    @hookimpl
    def on_fit_end(self, trainer: Any) -> None:
        self._send()
        run_id = self._run()
        if self.log_model:
            with tempfile.TemporaryDirectory(prefix="tapefit-mlflow-") as folder:
                path = Path(folder) / "model.tapefit"
                trainer.save(path)
                self._client.log_artifact(run_id, str(path), artifact_path="model")
        self._client.set_terminated(run_id, status="FINISHED")
        self._opened = False

    @hookimpl
    def on_exception(self, trainer: Any, exception: BaseException) -> None:
        if self._client is None:
            return
        # Only what a checkpoint taken now holds: a fit resumed from it logs the rest, once.
        epoch, _, step = trainer.position_key()
        try:
            self._send(lambda kind, position: position < (step if kind == "step" else epoch))
        finally:
            if self.run_id is not None and self._opened:
                status = "KILLED" if isinstance(exception, KeyboardInterrupt) else "FAILED"
                self._client.set_terminated(self.run_id, status=status)
            self._opened = False

    # -- checkpoints ----------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """The MLflow run's id, so that a resumed fit continues the run."""
        return {"run_id": self.run_id}

    def check_state_dict(self, state: Any, model: Any = None) -> None:
        """Checks a saved state before a resume restores anything (``hookspecs``, "Checkpoints")."""
        state = expect_mapping(state, ())
        run_id = state.get("run_id")
        if run_id is not None and not (isinstance(run_id, str) and _RUN_ID.fullmatch(run_id)):
            raise ValueError(f"run_id: expected an MLflow run id (letters, digits, - and _), got {run_id!r}")

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restores ``state_dict`` (``check_state_dict`` checked it)."""
        self.run_id = state.get("run_id")
        self._opened = False
