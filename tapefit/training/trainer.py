"""``tp.Trainer``: the fit/evaluate/predict loop, with everything optional left to plugins.

One training step::

    with tp.GradientTape() as tape:
        loss = loss_fn(y, model(x, training=True)) + tp.add_n(model.losses)
    grads = tape.gradient(loss, model.trainable_variables)
    pairs = <transform_gradients hooks>(zip(grads, variables))
    optimizer.apply_gradients(pairs)

around which the hooks of ``tapefit.plugins.hookspecs`` are called.
"""

from __future__ import annotations

import contextlib
import copy
import inspect
import itertools
import logging
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from tapefit.checkpointing import CheckpointError, load_checkpoint, save_checkpoint
from tapefit.checkpointing.validate import check_checkpoint, check_fits
from tapefit.core import nest
from tapefit.core import random as _random
from tapefit.core.function import Function, function, guard, host_call, tracing, unchanged
from tapefit.core.ops import add_n, reduce_mean, reduce_sum
from tapefit.core.tape import GradientTape
from tapefit.core.tensor import Tensor, Variable
from tapefit.data.adapters import (
    Batches,
    adapt,
    batch_len,
    float32_inputs,
    in_batch,
    require_targets,
    sample_weights,
    stream_batch,
    streamed,
)
from tapefit.data.loader import BatchLoader
from tapefit.data.sources import as_source, split_batch
from tapefit.distributed.data_parallel import DataParallel
from tapefit.distributed.threads import limited, resolve_threads
from tapefit.distributed.world import World
from tapefit.layers.preprocessing.encoding import takes_strings
from tapefit.plugins.manager import PluginManager, create_plugin
from tapefit.training.boundary import STOP_SIGNALS, Boundary
from tapefit.training.compiled_metrics import read_result, resolve_metrics, update_metrics
from tapefit.training.output_losses import resolve_losses
from tapefit.training.state import TrainState
from tapefit.training.step import (
    CompiledMetrics,
    LossTracker,
    metric_results,
    overridden_step,
    pack_x_y_sample_weight,
    step_logs,
    unpack_x_y_sample_weight,
)

logger = logging.getLogger("tapefit")

__all__ = ["FIT_RULES", "History", "Trainer"]


class History:
    """What ``fit`` returns, as Keras's ``History``.

    Attributes:
        history: ``{"loss": [...], "val_loss": [...], metric: [...]}``, one value per
            epoch run (a resumed fit includes the epochs before the checkpoint).
        epoch: the epoch indices those values belong to.
        params: ``epochs``, ``batch_size`` and ``steps`` (batches per epoch) of the fit.
    """

    def __init__(self) -> None:
        self.history: dict[str, list[float]] = {}
        self.epoch: list[int] = []
        self.params: dict[str, Any] = {}

    def _append(self, epoch: int, logs: dict[str, float]) -> None:
        # A key that appears late (or goes missing) keeps the lists aligned with NaN.
        for key in logs:
            if key not in self.history:
                self.history[key] = [float("nan")] * len(self.epoch)
        for key, values in self.history.items():
            values.append(logs.get(key, float("nan")))
        self.epoch.append(epoch)

    def __repr__(self) -> str:
        return f"History(epochs={self.epoch}, keys={sorted(self.history)})"


_METRIC_SIGNATURES = 8  # batch shapes the metrics are traced for, at most


def _to_tensors(data: Any) -> Any:
    if data is None:
        return None
    if isinstance(data, dict):
        return {k: _to_tensors(v) for k, v in data.items()}
    if isinstance(data, (list, tuple)):
        return type(data)(_to_tensors(v) for v in data)
    if isinstance(data, np.ndarray) and data.dtype.kind in "US":
        return data  # strings, for a model whose preprocessing layers take them
    return Tensor(data)


def _accepts_training(model: Any) -> bool:
    from tapefit.layers import Module  # the layers package imports the trainer's package lazily

    if isinstance(model, Module):
        return True  # Module.__call__ passes training= on only where it is taken
    try:
        params = inspect.signature(model).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(p.name == "training" or p.kind is inspect.Parameter.VAR_KEYWORD for p in params)


def _not_a_class(value: Any, argument: str, what: str) -> None:
    # A class is callable and has the methods, so it would only fail later, obscurely.
    if isinstance(value, type):
        raise TypeError(
            f"{argument}: got the class {value.__name__}, not {what}; pass an instance: {value.__name__}(...)"
        )


def _resolve_loss(loss: Any) -> Any:
    _not_a_class(loss, "loss", "a loss")
    if loss is None:
        return None  # the loss comes from add_loss or the model's train_step
    if isinstance(loss, str):
        from tapefit.layers import losses

        return losses.get(loss)
    if not callable(loss):
        raise TypeError(
            f"loss must be a loss name (such as 'mse') or a callable(y_true, y_pred), got {loss!r}"
        )
    return loss


def _is_optimizer(value: Any) -> bool:
    return hasattr(value, "apply_gradients") and hasattr(value, "get_state") and not isinstance(value, type)


def _resolve_optimizer(optimizer: Any) -> Any:
    _not_a_class(optimizer, "optimizer", "an optimizer")
    if optimizer is None:
        return None  # a model whose train_step uses optimizers of its own
    if isinstance(optimizer, str):
        from tapefit import optimizers

        return optimizers.get(optimizer)
    if not hasattr(optimizer, "apply_gradients"):
        raise TypeError(
            f"optimizer must be an optimizer name (such as 'adam') or an object with apply_gradients, "
            f"got {optimizer!r}"
        )
    return optimizer


def _resolve_metric(metric: Any, loss: Any) -> Any:
    """One metric object from a name (``"accuracy"`` resolves against ``loss``) or an object."""
    _not_a_class(metric, "metrics", "a metric")
    if isinstance(metric, str):
        from tapefit.layers import metrics as metrics_module

        metric = metrics_module.get(metric, loss=loss)
    if not (hasattr(metric, "update_state") and hasattr(metric, "result")):
        raise TypeError(f"a metric must be a name (such as 'accuracy') or a metric object, got {metric!r}")
    return metric


def _metric_state(metric: Any) -> dict[str, Any]:
    """A metric's running state for checkpoints: ``metric.get_state()`` (tapefit's metrics keep
    sums and counts). A metric without ``get_state`` restarts its running value on a resume."""
    get_state = getattr(metric, "get_state", None)
    return {"state": get_state() if callable(get_state) else None}


def _load_metric_state(metric: Any, state: dict[str, Any]) -> None:
    if "attributes" in state:  # tapefit 0.1.0's checkpoints: the metric's numeric attributes
        chosen = state.get("nested", {}).get("chosen")
        source = chosen if chosen is not None else state
        state = {"state": {**source["attributes"], "kind": chosen["class"] if chosen else None}}
    if state.get("state") is not None:
        metric.set_state(state["state"])


def _whole(low: int, none: bool = False) -> Callable[[Any], str | None]:
    """A rule: a whole number of at least ``low`` (or ``None`` with ``none``)."""
    words = {0: "a non-negative integer", 1: "a positive integer"}[low] + (" or None" if none else "")

    def rule(value: Any) -> str | None:
        if none and value is None:
            return None
        whole = not isinstance(value, bool) and isinstance(value, (int, np.integer))
        return None if whole and value >= low else f"must be {words}"

    return rule


def _verbose(value: Any) -> str | None:
    return None if not isinstance(value, bool) and value in ("auto", 0, 1, 2) else "must be 'auto', 0, 1 or 2"


FIT_RULES: dict[str, Callable[[Any], str | None]] = {
    "epochs": _whole(0),
    "batch_size": _whole(1),
    "verbose": _verbose,
    "initial_epoch": _whole(0, none=True),
    "steps_per_epoch": _whole(1, none=True),
    "validation_steps": _whole(1, none=True),
    "validation_batch_size": _whole(1, none=True),
    "validation_freq": _whole(1),
}
"""The rules of ``fit``'s arguments that are not data: each returns the problem in words, or
``None``. ``fit`` applies them, and the ``train`` command checks its ``trainer`` section with
the same ones before anything is built."""


def _check_fit_arguments(arguments: dict[str, Any], resume_from: Any) -> None:
    """``fit``'s arguments that are not data, checked by ``FIT_RULES`` as Keras takes them."""
    for name, rule in FIT_RULES.items():
        problem = rule(arguments[name])
        if problem is not None:
            raise ValueError(f"{name} {problem}, got {arguments[name]!r}")
    if arguments["initial_epoch"] is not None and resume_from is not None:
        raise ValueError("initial_epoch and resume_from both say where to start; give one of them")


def _check_verbose(verbose: Any) -> None:
    """``verbose`` of ``evaluate`` and ``predict``: taken as Keras's, which print a bar; tapefit's
    print nothing, so only the value is checked."""
    problem = _verbose(verbose)
    if problem is not None:
        raise ValueError(f"verbose {problem}, got {verbose!r}")


def _check_positive(value: Any, name: str) -> None:
    problem = _whole(1, none=True)(value)
    if problem is not None:
        raise ValueError(f"{name} {problem}, got {value!r}")


@contextlib.contextmanager
def _fit_output(plugins: PluginManager, verbose: Any) -> Iterator[None]:
    """What a fit shows when no plugin was asked to: Keras's ``verbose`` progress, and the
    plugins' log messages when the program has not configured logging."""
    added: list[Any] = []
    handler: logging.Handler | None = None
    plugin_logger = logging.getLogger("tapefit.plugins")
    if verbose != 0:
        if plugins.get_plugin("progress") is None:
            progress = create_plugin({"type": "progress", "verbose": verbose})
            plugins.register(progress, name="progress")
            added.append(progress)
        if not plugin_logger.hasHandlers():
            handler = logging.StreamHandler(sys.stderr)
            handler.setFormatter(logging.Formatter("%(message)s"))
            handler.setLevel(logging.INFO)
            plugin_logger.addHandler(handler)
    level = plugin_logger.level
    if handler is not None and plugin_logger.getEffectiveLevel() > logging.INFO:
        plugin_logger.setLevel(logging.INFO)
    try:
        yield
    finally:
        for plugin in added:
            plugins.unregister(plugin)
        if handler is not None:
            plugin_logger.removeHandler(handler)
            plugin_logger.setLevel(level)


def _copied(state: Any) -> Any:
    """``state`` with its dicts and lists copied; arrays and other values are shared (states
    hold fresh arrays, which plugins replace rather than write into)."""
    if isinstance(state, dict):
        return {key: _copied(value) for key, value in state.items()}
    if type(state) is list:
        return [_copied(value) for value in state]
    return state


def _keras_result(logs: dict[str, float], return_dict: bool) -> Any:
    """Logs as Keras's ``*_on_batch`` return them: the dict, or one value, or a list."""
    if return_dict:
        return logs
    values = list(logs.values())
    return values[0] if len(values) == 1 else values


def _prefixed(logs: dict[str, float], prefix: str) -> dict[str, float]:
    return {prefix + k: v for k, v in logs.items()}


class _Optimizers:
    """The run's optimizers as one state: the trainer's under ``optimizer`` (as a checkpoint has
    always kept it), the model's own under ``optimizers`` by attribute name."""

    def __init__(self, optimizers: dict[str, Any]) -> None:
        self.optimizers = optimizers

    def get_state(self) -> dict[str, Any]:
        main = self.optimizers.get("optimizer")
        state: dict[str, Any] = {"optimizer": main.get_state() if main is not None else {}}
        others = {name: o.get_state() for name, o in self.optimizers.items() if name != "optimizer"}
        if others:
            state["optimizers"] = others
        return state

    def set_state(self, state: dict[str, Any]) -> None:
        """Restores what ``get_state`` gave (checked by ``check_checkpoint``, or broadcast by
        rank 0 of the same run)."""
        for name, optimizer in self.optimizers.items():
            optimizer.set_state(state["optimizer"] if name == "optimizer" else state["optimizers"][name])


class Trainer:
    """Trains a model with an optimizer and a loss, calling plugins' hooks around every step.

    Args:
        model: a ``tp.Module`` (or a callable with ``trainable_variables``); it gets
            ``training=True`` in ``fit`` and ``training=False`` in ``evaluate``/``predict``.
        optimizer: an optimizer object or name (``"adam"``, ``"sgd"``, ...).
        loss: a loss object, a callable ``(y_true, y_pred)`` giving a scalar or per-sample
            values (averaged, as Keras does), or a name (``"mse"``,
            ``"sparse_categorical_crossentropy"``, ...); for a model with several outputs,
            one loss for all of them, a list (one per output, ``None`` for none) or a dict
            keyed by output name (``Model.output_names``), as Keras's ``compile``: the
            logs then hold ``loss`` (the weighted total) and each output's
            ``<name>_loss`` (without its loss weight). The model's regularization
            losses (``model.losses``) are added to it, read at every step; when they are
            empty at the first step of a fit they are not read again in that fit
            (tapefit's regularizers are fixed when a layer is made).
        metrics: metric objects or names (``"accuracy"`` resolves against the loss), updated
            without sample weights; for a model with several outputs, a list with one entry
            (a metric, a list of them or ``None``) per output or a dict keyed by output name,
            each logged as ``<output>_<metric>``, as Keras's ``compile``.
        plugins: plugin objects or modules, built-in short names, or config dicts
            ``{"type": name, ...}``; their hooks run in this order.
        output_dir: where plugins put their files by default (``tensorboard/``,
            ``checkpoints/``, ``history.csv``); default ``runs/default``.
        config: the run's resolved config, saved in checkpoints and logged as
            TensorBoard hyperparameters.
        compile: run each training step as a ``tp.function`` (traced once per batch shape,
            then replayed; bit for bit the eager results): the default step or a model's own
            ``train_step``, updates and metrics included, and the default evaluation step. A
            plugin that transforms gradients still sees and changes them on every replay: the
            hooks and the update then run as Python, as in eager mode. ``"jit"``: the same with
            fused kernels (``tp.function(jit_compile=True)``, needs Numba), within 1e-6
            relative of eager per step instead of bit for bit. Default eager.
        threads: the BLAS threads during ``fit``, ``evaluate`` and ``predict``: ``None``
            (default) leaves them as NumPy set them, unless the data has worker processes
            (a Pipeline's or Grain's): then, as ``"auto"``, the rule sizes them together with
            the workers; ``"auto"`` takes this process's share of the cores it may run on
            (``tapefit.distributed.threads``: a count the user set in
            ``OPENBLAS_NUM_THREADS``/``OMP_NUM_THREADS`` wins), so runs side by side do not
            oversubscribe the cores; a number sets it.
        loss_weights: the weight of each output's loss in the total (Keras's ``compile``
            argument): a list in the order of the outputs, a dict keyed by output name, or
            a number for a model with one output; default 1 each.
        weighted_metrics: metrics updated with the batch's sample weights (``sample_weight``,
            and the weights ``class_weight`` gives), in the forms ``metrics`` takes (Keras's
            ``compile`` argument). One whose log name an unweighted metric already has logs
            as ``weighted_<name>``.

    Attributes a plugin may read: ``model``, ``optimizer``, ``loss``, ``metrics``,
    ``plugins`` (the ``PluginManager``), ``output_dir``, ``config``, ``epoch`` (index of
    the current epoch), ``step`` (optimizer steps done in the whole run),
    ``batch_in_epoch`` (batches done in the current epoch), ``steps_per_epoch``,
    ``epochs`` (the index of the epoch the fit stops before), ``batch_size``, ``resumed`` (the
    fit resumed from a checkpoint), ``continued`` (the fit continues an earlier ``fit`` of this
    trainer: plugins keep their files and counters going), ``history``, ``learning_rate``,
    ``running_loss`` (the mean loss of the epoch's batches so far), ``world`` (the processes
    training together), ``batch_rows`` (``(rows of this process, rows of all processes)`` in
    the last batch), ``state`` (the ``TrainState``: position, running loss, completed epochs;
    never written by plugins); and set ``stop_training`` or call ``request_stop``.
    Checkpointing plugins also use ``position_key()``, ``checkpoint_contents()``,
    ``save_checkpoint(path)`` and ``update_in_progress`` (``tapefit.plugins.hookspecs``).
    """

    def __init__(
        self,
        model: Any,
        optimizer: Any = None,
        loss: Any = None,
        metrics: Any = None,
        plugins: Any = None,
        *,
        output_dir: str | os.PathLike[str] | None = None,
        config: dict[str, Any] | None = None,
        compile: bool | str = False,
        threads: int | str | None = None,
        loss_weights: Any = None,
        weighted_metrics: Any = None,
    ) -> None:
        self.model = model
        self.optimizer = _resolve_optimizer(optimizer)
        # As given (names stay names), for save: a model file rebuilds them the same way.
        self._compile_args = {
            "loss": loss,
            "metrics": metrics,
            "loss_weights": loss_weights,
            "weighted_metrics": weighted_metrics,
        }
        self.loss, output_losses = resolve_losses(loss, loss_weights, model, _resolve_loss)
        compiled = resolve_metrics(metrics, weighted_metrics, loss, model, _resolve_metric)
        self.metrics = compiled + output_losses
        self.plugins = PluginManager()
        if plugins is not None and not isinstance(plugins, (list, tuple)):
            plugins = [plugins]  # one plugin, name or config dict given on its own
        self.plugins.register_all(plugins or [])
        self.plugins.register_launcher_plugins()
        self.output_dir = Path(output_dir) if output_dir is not None else Path("runs") / "default"
        self.config: dict[str, Any] = dict(config) if config else {}
        self.stop_training = False
        self.history = History()
        self.state = TrainState()
        self.steps_per_epoch: int | None = 0  # None: a stream of unknown length
        self.epochs = 0
        self.batch_size = 0
        self.resumed = False
        self.continued = False
        self._parallel = DataParallel()
        if compile not in (False, True, "jit") or compile.__class__ not in (bool, str):
            raise ValueError(f"Trainer: compile must be True, False or 'jit', got {compile!r}")
        self.compile = bool(compile)
        self._jit = compile == "jit"
        self.threads = resolve_threads(threads)
        self._threads_setting = threads
        self._compiled_step = function(self._default_update, jit_compile=self._jit) if self.compile else None
        self._compiled_test = function(self._default_test, jit_compile=self._jit) if self.compile else None
        # The built-in metrics are tapefit ops: replayed, they cost less than run op by op, so the
        # default steps update and read them as a tp.function in eager mode too.
        self._metric_step = Function(self._update_metrics)
        self._pass_training = _accepts_training(model)
        self._has_losses: bool | None = None  # None: not known yet (see _total_loss)
        self._loader: Batches | None = None
        self._validation_data: tuple[Any, Any, Any] | None = None  # of the current fit
        self._validation: tuple[int | None, int | None, int] = (
            None,
            None,
            1,
        )  # steps, batch size, every n epochs
        # The last consistent boundary, while the trainer is past it: an exception there saves
        # the state from the boundary. An epoch's end (validation, on_epoch_end) keeps the whole
        # checkpoint contents from before it; a step keeps the data's and the plugins' states
        # from before its batch was read (the step itself puts the model and generators back).
        self._boundary = Boundary(self._contents, self._step_plugin_states)
        self._loss_tracker = LossTracker(lambda: self.state)
        self._compiled_view = CompiledMetrics(self.metrics)
        self._logged_metrics: list[Any] = list(self.metrics)  # what a default step logs (per fit)
        self._custom_steps: dict[str, Any] = {}  # the model's step overrides, found per fit
        self._last_logs: dict[str, float] = {}  # a custom train_step's last batch logs
        self._updates = 0  # updates through apply in the step in progress
        self._probing = False  # see _build_by_step
        self._fitting = False  # see _one_fit
        self._step_extra: dict[str, float] = {}  # what transform_gradients hooks add in a custom step
        if hasattr(model, "_bind_trainer"):
            model._bind_trainer(self)  # self.optimizer, compute_loss, metrics inside the model's steps

    # -- model files -----------------------------------------------------------

    def save(self, path: str | os.PathLike[str]) -> None:
        """Writes the model, the optimizer (config and state), the loss, the metrics and the loss
        weights to one ``.tapefit`` file (Keras's ``model.save`` of a compiled model), and the
        state of every optimizer the model holds itself (a GAN's two; its config makes them).

        ``Trainer.load(path)`` makes a trainer that continues exactly where this one stands;
        ``tp.models.load_model(path)`` gives the model alone. The trainer's position (epoch,
        History), its plugins and the random generators are not saved: checkpoints hold those.
        A trainer without an optimizer or loss (a model whose ``train_step`` brings its own)
        saves as well.

        Args:
            path: the file; its name must end in ``.tapefit`` and its folder must exist.

        Raises:
            ValueError: the model, loss, metrics or optimizer hold what a file cannot describe
                (an unregistered class or function), named.
        """
        from tapefit import models

        models.save_model(self.model, path, optimizer=self.optimizer, **self._compile_args)

    @classmethod
    def load(cls, path: str | os.PathLike[str], **kwargs: Any) -> Trainer:
        """A trainer from a file ``Trainer.save`` wrote: its model with the weights (and the
        states of the optimizers the model holds), its optimizer with its state, its loss,
        metrics and loss weights. A model whose class overrides ``train_step`` may come without
        an optimizer and a loss, from ``Module.save`` too.

        Args:
            path: the ``.tapefit`` file.
            **kwargs: the other arguments of ``Trainer`` (``plugins``, ``output_dir``, ...).

        Raises:
            FileNotFoundError: there is no such file.
            ValueError: (``tp.models.ModelFileError``) the file is refused (one line naming
                it), or holds a model trained by the default step without an optimizer or a
                loss (``Module.save`` wrote it).
        """
        from tapefit import models

        compiled = models.load_compiled(path)
        own_step = overridden_step(compiled.model, "train_step") is not None
        if not own_step and (compiled.optimizer is None or compiled.loss is None):
            raise models.ModelFileError(
                f"Trainer.load: '{path}' holds a model without an optimizer and loss (Module.save wrote "
                "it); use tp.models.load_model and make a Trainer"
            )
        return cls(
            compiled.model,
            compiled.optimizer,
            compiled.loss,
            compiled.metrics,
            loss_weights=compiled.loss_weights,
            weighted_metrics=compiled.weighted_metrics,
            **kwargs,
        )

    # -- small helpers ---------------------------------------------------------

    @property
    def learning_rate(self) -> float:
        """The learning rate of the optimizer's next step, as a float (the first of the model's own
        optimizers when the trainer has none; NaN without any)."""
        optimizer = self.optimizer or next(iter(self.optimizers.values()), None)
        return float(optimizer.learning_rate) if optimizer is not None else float("nan")

    @property
    def world(self) -> World:
        """The processes training together (one ``World`` outside a launcher)."""
        return self._parallel.world

    @property
    def batch_rows(self) -> tuple[int, int]:
        """``(rows of this process, rows of all processes)`` in the last batch."""
        return self._parallel.batch_rows

    @property
    def update_in_progress(self) -> bool:
        """From a step's optimizer update to the end of its ``on_train_batch_end`` hooks: no state
        is whole, so a checkpoint is not taken (``tapefit.plugins.hookspecs``)."""
        return self._boundary.update_in_progress

    @property
    def validates_later(self) -> bool:
        """Whether this fit validates, but not after every epoch (``validation_freq`` > 1): an
        epoch's logs may lack the ``val_`` keys that later ones have."""
        return self._validation_data is not None and self._validation[2] > 1

    @property
    def running_loss(self) -> float:
        """The loss averaged over the epoch's batches so far (NaN before the first), as Keras's bar shows it."""
        return self.state.running_loss

    @property
    def epoch(self) -> int:
        """The index of the epoch in progress (or of the last one that ran)."""
        return self.state.epoch

    @property
    def step(self) -> int:
        """The optimizer steps done in the whole run."""
        return self.state.step

    @property
    def batch_in_epoch(self) -> int:
        """The batches done in the epoch in progress."""
        return self.state.batch_in_epoch

    def request_stop(self, plugin: Any, reason: str) -> None:
        """Ends the fit after the current batch (as ``stop_training = True``) and records which
        plugin finished the run and why.

        A checkpoint taken after it holds that record, and resuming it trains nothing while
        that plugin is still in the run (``early_stopping`` ends a run this way): the run is
        finished. Without the plugin, the resume trains on.
        """
        self.stop_training = True
        self.state.stopped = {
            "by": self.plugins.get_name(plugin) or type(plugin).__name__,
            "reason": str(reason),
        }

    def _call(self, x: Any, training: bool) -> Any:
        if self._pass_training:
            return self.model(x, training=training)
        return self.model(x)

    def _total_loss(self, y: Any, y_pred: Any, weights: Any = None) -> Any:
        return self.compute_loss(None, y, y_pred, weights)

    # -- what a model's step methods reach (tapefit.layers.training_methods) ------

    def compute_loss(self, x: Any, y: Any, y_pred: Any, sample_weight: Any = None) -> Any:
        """The compiled loss of ``(y, y_pred)`` plus the sum of each of ``model.losses``
        (``model.compute_loss`` calls it).

        Raises:
            ValueError: no compiled loss and no ``model.losses``, or a compiled loss without ``y``.
        """
        loss = None
        if self.loss is not None:
            if y is None:
                raise ValueError("compute_loss: the compiled loss needs targets, got y=None")
            loss = (
                self.loss(y, y_pred)
                if sample_weight is None
                else self.loss(y, y_pred, sample_weight=sample_weight)
            )
            if getattr(loss, "ndim", 0):  # a loss function's per-sample values: their mean, as Keras's
                loss = reduce_mean(loss)
        if self._has_losses is not False:
            added = getattr(self.model, "losses", None)
            # Walking the model for its losses costs about 1% of an MLP step; a model without
            # regularizers or add_loss after its first (building) call has none later, so stop asking.
            self._has_losses = bool(added)
            if added:
                # Keras sums each added loss to a scalar.
                total = add_n([term if term.ndim == 0 else reduce_sum(term) for term in added])
                loss = total if loss is None else loss + total
        if loss is None:
            raise ValueError(
                f"{type(self.model).__name__}: there is no loss to minimize: give the trainer a loss "
                "(loss='mse', ...), or add one in the model's call with self.add_loss(...)"
            )
        return loss

    def compiled_metrics(self) -> list[Any]:
        """The loss tracker (named ``loss``), then the compiled metrics as one ``CompiledMetrics``
        (when there are any): how ``model.metrics`` starts, as in Keras."""
        return [self._loss_tracker, self._compiled_view] if self.metrics else [self._loss_tracker]

    def metric_results(self, metrics: list[Any]) -> dict[str, Any]:
        """``{name: result}`` of ``metrics`` (a ``CompiledMetrics`` adds each of its own)."""
        return metric_results(metrics)

    def update_compiled_metrics(self, y: Any, y_pred: Any, sample_weight: Any = None) -> None:
        """Updates the compiled metrics with a batch: ``weighted_metrics`` with ``sample_weight``,
        ``metrics`` without it, as Keras."""
        update_metrics(self.metrics, y, y_pred, sample_weight)

    def _epoch_metrics(self) -> list[Any]:
        """The metrics an epoch resets and a checkpoint saves: the compiled ones, then those the
        model lists in ``metrics`` (its own trackers); the loss tracker lives in ``state``."""
        metrics = list(self.metrics)
        for metric in getattr(self.model, "metrics", []) if hasattr(self.model, "_bind_trainer") else []:
            if isinstance(metric, (LossTracker, CompiledMetrics)):
                continue
            if all(metric is not m for m in metrics):
                metrics.append(metric)
        return metrics

    @property
    def optimizers(self) -> dict[str, Any]:
        """Every optimizer of the run, each once, by name: ``optimizer`` (the trainer's, or one
        assigned to ``model.optimizer``), then those the model and its layers hold as attributes
        (``tapefit.layers.training_methods.held_optimizers``: a GAN's ``d_optimizer``)."""
        from tapefit.layers.training_methods import held_optimizers

        found: dict[str, Any] = {}
        if self.optimizer is not None:
            found["optimizer"] = self.optimizer
        assigned = getattr(self.model, "__dict__", {}).get("_optimizer")  # model.optimizer = ...
        if _is_optimizer(assigned):
            found["optimizer"] = assigned  # the one the model's step reaches as self.optimizer
        for name, optimizer in held_optimizers(self.model).items():
            if all(optimizer is not known for known in found.values()):
                found[name] = optimizer
        return found

    def apply(self, grads_and_vars: Any, optimizer: Any = None, logs: dict[str, float] | None = None) -> Any:
        """The one point every update of a step passes through, whoever wrote the step: the
        ``transform_gradients`` hooks (clipping, the MPI average), then ``optimizer`` (default:
        the trainer's) applies the pairs. An optimizer the run holds comes here by itself
        while ``fit`` runs (``optimizer.apply_gradients`` and ``optimizer.apply``).

        Returns:
            The optimizer's ``iterations``.
        """
        pairs = list(grads_and_vars)
        if not tracing():
            return self._apply_now(pairs, optimizer, logs)
        if self._probing or not self._no_transforms():
            # A compiled step: the hooks and the update run on every replay's values.
            return host_call(self._apply_now, pairs, optimizer, logs)
        # No hook transforms gradients: the update itself is traced (an optimizer writes it as
        # ops), and only the step's bookkeeping runs as Python on every replay. A plugin that
        # transforms gradients, registered later, makes the next call trace again.
        guard(self._no_transforms)
        update = self._update_of(optimizer)
        host_call(self._updating)
        return update(pairs)

    def _no_transforms(self) -> bool:
        """Whether no plugin implements ``transform_gradients`` (a compiled step's guard)."""
        return not self.plugins.hook.transform_gradients.get_hookimpls()

    def _updating(self) -> None:
        self._boundary.updating()
        self._updates += 1

    def _update_of(self, optimizer: Any) -> Any:
        """The update of ``optimizer`` (default: the trainer's), as it is when nobody holds it."""
        optimizer = self.optimizer if optimizer is None else optimizer
        if optimizer is None:
            raise ValueError(
                f"{type(self.model).__name__}: the step applies gradients but the trainer has no optimizer; "
                "give one (Trainer(model, optimizer='adam', ...)) or apply them with the model's own"
            )
        unbound = getattr(optimizer, "_apply_unbound", None)  # a tapefit optimizer's update itself
        return unbound if unbound is not None else optimizer.apply_gradients

    def _apply_now(self, pairs: list[Any], optimizer: Any, logs: dict[str, float] | None) -> Any:
        update = self._update_of(optimizer)
        if self._probing:  # building the model for a resume: what it updates is restored after
            return update(pairs)
        pairs = self.plugins.transform_gradients(
            self, self.step, pairs, self._step_extra if logs is None else logs
        )
        self._updating()
        return update(pairs)

    def _through_trainer(self, optimizer: Any, grads_and_vars: Any) -> Any:
        return self.apply(grads_and_vars, optimizer)

    @contextlib.contextmanager
    def _one_fit(self) -> Iterator[None]:
        """Refuses a fit of this trainer inside its own (a hook calling ``fit``), which would
        interleave two runs' positions and histories."""
        if self._fitting:
            raise RuntimeError(
                "fit: this trainer's fit is running (a plugin or callback called fit from a hook); "
                "a run inside a run needs a Trainer of its own"
            )
        self._fitting = True
        try:
            yield
        finally:
            self._fitting = False

    @contextlib.contextmanager
    def _bound(self) -> Iterator[None]:
        """For the length of a fit: the model's step methods reach this trainer, and every
        optimizer of the run applies its updates through ``apply``."""
        if hasattr(self.model, "_bind_trainer"):
            self.model._bind_trainer(self)
        optimizers = [o for o in self.optimizers.values() if hasattr(o, "_through")]
        previous = [o._through for o in optimizers]
        for optimizer in optimizers:
            optimizer._through = self._through_trainer
        try:
            yield
        finally:
            for optimizer, through in zip(optimizers, previous):
                optimizer._through = through

    def _find_steps(self) -> None:
        """The model's step overrides, checked, as the model has them now; a compiled trainer
        traces its train_step."""
        self._custom_steps = {}
        self._logged_metrics = self._epoch_metrics()
        for name in ("train_step", "test_step", "predict_step"):
            method = overridden_step(self.model, name)
            if method is not None:
                self._custom_steps[name] = (
                    function(method, jit_compile=self._jit)
                    if self.compile and name == "train_step"
                    else method
                )

    def default_train_step(self, data: Any) -> dict[str, float]:
        """The default training step on ``data`` (``tp.Module.train_step`` runs it)."""
        x, y, weights = unpack_x_y_sample_weight(data)
        return self._default_train(x, y, weights, tuple(self.model.trainable_variables))

    def _default_train(
        self, x: Any, y: Any, weights: Any, variables: tuple[Variable, ...]
    ) -> dict[str, float]:
        logs: dict[str, float] = {}
        self._step_extra = logs  # transform_gradients hooks get the batch's own loss, and add theirs
        # The variables before the call are part of a compiled step's signature: a model that
        # builds in its first call, or a layer made (non-)trainable, traces again.
        step = self._default_update if self._compiled_step is None else self._compiled_step
        results = step(x, y, weights, variables)
        # As Keras: a batch's logs hold the epoch's running values, the loss's included, and
        # every metric of the model's (a layer's own too); under MPI, this process's.
        logs["loss"] = self.state.running_loss
        for metric, result in zip(self._logged_metrics, results):
            logs[metric.name] = float(result)
        return logs

    def _default_update(self, x: Any, y: Any, weights: Any, variables: tuple[Variable, ...]) -> list[Any]:
        """The default step but its logs: the forward and backward pass, the update, the loss
        tracker and the compiled metrics; returns the logged metrics' results. With
        ``compile=True`` it is one ``tp.function``, whose replay runs the update as array code
        when no plugin transforms gradients, and the built-in metrics' updates and results."""
        loss, y_pred, grads, variables = self._loss_and_gradients(x, y, weights)
        host_call(self._batch_loss, loss)
        optimizer = self.optimizer
        if getattr(optimizer, "_through", None) is not None:
            optimizer.apply_gradients(zip(grads, variables))  # reaches apply, as a custom step's does
        else:
            self.apply(zip(grads, variables))
        host_call(self._count_batch_loss, batch_len(y if y is not None else x))
        return self._metrics_of_batch(y, y_pred, weights)

    def _metrics_of_batch(self, y: Any, y_pred: Any, weights: Any) -> list[Any]:
        """``_update_metrics`` through ``_metric_step`` (traced inline into a compiled step). Data
        of many shapes (sequences of every length) would make it trace for each: past
        ``_METRIC_SIGNATURES`` signatures, the metrics run op by op instead."""
        if self._metric_step._signature_count() < _METRIC_SIGNATURES:
            return self._metric_step(y, y_pred, weights)
        return self._update_metrics(y, y_pred, weights)

    def _update_metrics(self, y: Any, y_pred: Any, weights: Any) -> list[Any]:
        """Updates the compiled metrics with a batch; returns the results of the metrics the
        steps log (``_logged_metrics``, set per fit and evaluation)."""
        logged = self._logged_metrics
        guard(unchanged((self, "_logged_metrics")))  # a replay reads the metrics it was traced with
        update_metrics(self.metrics, y, y_pred, weights)
        return [read_result(metric) for metric in logged]

    def _batch_loss(self, loss: Any) -> None:
        self._step_extra["loss"] = float(loss)

    def _count_batch_loss(self, samples: int) -> None:
        self._loss_tracker.add(self._step_extra["loss"], samples)

    def default_test_step(self, data: Any) -> dict[str, float]:
        """The default evaluation step on ``data`` (``tp.Module.test_step`` runs it)."""
        x, y, weights = unpack_x_y_sample_weight(data)
        step = self._default_test if self._compiled_test is None else self._compiled_test
        results = step(x, y, weights)
        logs = {"loss": self.state.running_loss}
        for metric, result in zip(self._logged_metrics, results):
            logs[metric.name] = float(result)
        return logs

    def _default_test(self, x: Any, y: Any, weights: Any) -> list[Any]:
        """The default evaluation step but its logs (one ``tp.function`` with ``compile=True``):
        returns the logged metrics' results."""
        y_pred = self._call(x, training=False)
        loss = self._total_loss(y, y_pred, weights)
        host_call(self._count_test_loss, loss, batch_len(y if y is not None else x))
        return self._metrics_of_batch(y, y_pred, weights)

    def _count_test_loss(self, loss: Any, samples: int) -> None:
        self._loss_tracker.add(float(loss), samples)

    def default_predict_step(self, data: Any) -> Any:
        """The default prediction step: the model's outputs for ``data``'s inputs."""
        x, _, _ = unpack_x_y_sample_weight(data)
        return self._call(x, training=False)

    def _custom_logs(self, name: str, result: Any) -> dict[str, float]:
        return step_logs(f"{type(self.model).__name__}.{name}", result)

    def _reset_epoch_metrics(self) -> None:
        for metric in self._epoch_metrics():
            metric.reset_state()

    def _metric_logs(self, needs_batches: str = "") -> dict[str, float]:
        """The running loss and metrics, over every process; with ``needs_batches`` (who asks),
        a ``ValueError`` if no process counted a batch."""
        with self._parallel.global_epoch():
            if needs_batches and self.state.loss_count == 0:
                raise ValueError(f"{needs_batches}: the data gave no batch")
            logs = {"loss": self.state.running_loss}
            for metric in self._logged_metrics:
                logs[metric.name] = float(metric.result())
        self._parallel.average_moving_statistics(self.model)
        return logs

    def _step_epoch_logs(self, last: dict[str, float]) -> dict[str, float]:
        """A custom step's epoch logs, by Keras's rule: the results of ``model.metrics`` (over
        every process) when the step's logs have exactly their keys, else its last batch's logs."""
        metrics = getattr(self.model, "metrics", None) if hasattr(self.model, "_bind_trainer") else None
        with self._parallel.global_epoch():
            results = self.metric_results(self.compiled_metrics() if metrics is None else list(metrics))
            logs = {k: float(v) for k, v in results.items()} if set(results) == set(last) else dict(last)
        self._parallel.average_moving_statistics(self.model)
        return logs

    def _metric_states(self) -> list[dict[str, Any]]:
        return [_metric_state(metric) for metric in self._epoch_metrics()]

    def _set_metric_states(self, states: list[dict[str, Any]]) -> None:
        metrics = self._epoch_metrics()
        if len(states) != len(metrics):
            raise ValueError(
                f"the checkpoint has {len(states)} metric states, this trainer has {len(metrics)} metrics "
                f"({[m.name for m in metrics]})"
            )
        for metric, state in zip(metrics, states):
            _load_metric_state(metric, state)

    # -- fit -------------------------------------------------------------------

    def fit(
        self,
        x: Any,
        y: Any = None,
        *,
        epochs: int = 1,
        batch_size: int = 32,
        validation_data: tuple[Any, ...] | None = None,
        shuffle: bool = True,
        resume_from: str | os.PathLike[str] | None = None,
        drop_last: bool = False,
        initial_epoch: int | None = None,
        verbose: Any = "auto",
        sample_weight: Any = None,
        class_weight: dict[int, float] | None = None,
        validation_split: float = 0.0,
        steps_per_epoch: int | None = None,
        validation_steps: int | None = None,
        callbacks: list[Any] | None = None,
        validation_batch_size: int | None = None,
        validation_freq: int = 1,
    ) -> History:
        """Trains the model for ``epochs`` epochs.

        All arguments after ``y`` are keyword-only: Keras's third and fourth positional
        arguments are ``batch_size`` and ``epochs``, tapefit's were ``epochs`` and
        ``batch_size``, so ``fit(x, y, 32, 10)`` would have meant another run in each.

        Args:
            x: the inputs: an array, or a dict/list of arrays (memory-mapped ones too, see
                ``tp.data.open_npy``); float64 arrays are used as float32, as in Keras. Or a
                stream of ``(x, y)`` batches: a ``tp.data.Pipeline``, a Grain ``MapDataset``,
                ``IterDataset`` or ``DataLoader``, or any Python iterable or generator (a
                list or tuple of ``(x, y)`` pairs too, when ``y`` is not given). A
                Pipeline's or Grain's position goes into checkpoints and resumes exactly; a
                plain iterable's cannot (a resume restarts its stream, with a warning).
            y: the targets (``None`` when ``x`` is a stream: its batches carry them).
            epochs: how many epochs to train. A second ``fit`` on the same trainer continues
                the run: its epochs and steps go on from where the last one stopped (a new
                epoch), so the logs, CSV rows, checkpoint names and TensorBoard steps of both
                fits follow each other. With ``initial_epoch`` or ``resume_from`` it is, as in
                Keras, the index of the epoch to stop before: a resume continues from the
                checkpoint's epoch and step up to this epoch.
            batch_size: samples per batch.
            validation_data: ``(x_val, y_val)`` or ``(x_val, y_val, val_sample_weight)``,
                evaluated after every epoch into the ``val_`` logs (the loss weighted by
                ``val_sample_weight``, as in Keras), or a stream of ``(x, y)`` batches.
            shuffle: draw a new sample order every epoch (seeded by ``tp.random``).
            resume_from: a checkpoint file, or a folder with a ``last`` pointer, to
                continue from exactly (model, optimizer, position in the epoch, random
                generators, metrics, plugin states, history).
            drop_last: drop the last batch of an epoch when it is smaller than ``batch_size``.
            initial_epoch: the index of the first epoch to train (Keras's ``initial_epoch``);
                ``None``: 0 for a trainer's first fit, else the epoch after the last one.
            verbose: as Keras: ``"auto"`` (a progress bar on a terminal and in Jupyter, one
                line per epoch when the output is a file or a pipe), 0 (silent), 1 (bars),
                2 (a line per epoch). A ``progress`` plugin of the trainer decides instead
                when there is one. Unless 0, the plugins' decisions (early stopping's
                restore, a learning-rate cut) are logged to standard error when logging is
                not configured (the loggers are ``tapefit.plugins.<name>``).
            sample_weight: one non-negative weight per training sample; each sample's loss is
                multiplied by it, and a batch's loss is the weighted sum over the batch size
                (Keras's ``sum_over_batch_size``). ``weighted_metrics`` are weighted by it (and
                by ``class_weight``), ``metrics`` are not, as in Keras. Needs a
                ``tp.losses.Loss`` loss.
            class_weight: ``{class index: weight}``, multiplying the weight of each sample by
                its class's (class indices, or one-hot labels by their argmax); a class it does
                not list weighs 1, as in Keras. Unlike Keras 3, it may be given with
                ``sample_weight``: the two multiply (as in Keras 2).
            validation_split: with arrays, the fraction of the samples held out for
                validation: the last ones, before any shuffling (Keras's rule), with their
                ``sample_weight`` weighing the validation loss.
            steps_per_epoch: with a stream, end each epoch after this many batches (else
                when the stream is exhausted); the next epoch goes on with the stream where
                the last one stopped, and starts it over once it ran out, as in Keras.
            validation_steps: with a stream as validation data, evaluate this many batches.
            validation_batch_size: samples per batch of validation arrays (``None``:
                ``batch_size``).
            validation_freq: validate after every n-th epoch only, as Keras (the other
                epochs' logs have no ``val_`` keys).
            callbacks: plugins for this fit only, as Keras's ``fit(callbacks=...)``: the
                same objects as ``Trainer(plugins=...)`` (``tp.plugins.EarlyStopping``...),
                registered when the fit starts and removed when it ends. Their hooks run in
                list order, before the trainer's own plugins' (so a key they add to the
                logs reaches those). A resume needs the same callbacks again: their states
                are in the checkpoint.

        Returns:
            A ``History``.
        """
        # a Keras user's callbacks, for this fit
        with self._one_fit(), self.plugins.registered(callbacks), self._bound():
            self._find_steps()
            _check_fit_arguments(
                {
                    "epochs": epochs,
                    "batch_size": batch_size,
                    "verbose": verbose,
                    "initial_epoch": initial_epoch,
                    "steps_per_epoch": steps_per_epoch,
                    "validation_steps": validation_steps,
                    "validation_batch_size": validation_batch_size,
                    "validation_freq": validation_freq,
                },
                resume_from,
            )
            source, validation_data = adapt(
                x,
                y,
                batch_size=batch_size,
                shuffle=shuffle,
                drop_last=drop_last,
                loss=self.loss,
                sample_weight=sample_weight,
                class_weight=class_weight,
                targets="train_step" not in self._custom_steps and self.loss is not None,
                strings=takes_strings(self.model),
                validation_split=validation_split,
                validation_data=validation_data,
                steps_per_epoch=steps_per_epoch,
            )
            checkpoint = load_checkpoint(resume_from) if resume_from is not None else None
            self._start_fit(source, epochs, initial_epoch, resumed=checkpoint is not None)
            self._validation = (validation_steps, validation_batch_size, validation_freq)
            self._validation_data = validation_data
            if checkpoint is not None:
                self._restore(checkpoint, source, resume_from)
                if self.finished_by(checkpoint) is not None:
                    logger.info("%s; nothing to train", self.finished_by(checkpoint))
                    return self.history  # before any collective: every rank returns here alike
            self._join_world(source)
            hooks = self.plugins.hook
            with (
                self._boundary.guard(self._parallel.agreement(STOP_SIGNALS)),
                _fit_output(self.plugins, verbose if self.world.is_chief else 0),
                limited(self.threads),
            ):
                try:
                    hooks.on_fit_start(trainer=self)
                    if checkpoint is not None:
                        self.plugins.load_state_dicts(checkpoint.get("plugins", {}))
                        hooks.on_load_checkpoint(trainer=self, checkpoint=checkpoint)
                    self._fit_epochs(source, validation_data)
                    # a fit stopped inside an epoch moved them since its end
                    self._parallel.average_moving_statistics(self.model)
                    last = self.state.history[-1][1] if self.state.history else {}
                    hooks.on_fit_end(trainer=self, logs=dict(last))
                except BaseException as exception:
                    self.plugins.call_each("on_exception", trainer=self, exception=exception)
                    self._boundary.update_in_progress = False
                    raise
            return self.history

    def _start_fit(self, source: Batches, epochs: int, initial_epoch: int | None, resumed: bool) -> None:
        """Sets the fit's counters, history and BLAS threads: a second fit continues the first."""
        self._loader = source
        if self._threads_setting in ("auto", None) and source.worker_processes:
            self.threads = resolve_threads("auto", workers=source.worker_processes)  # workers share the cores
        elif self._threads_setting is None:
            self.threads = None
        continued = not resumed and self.step > 0
        first_epoch = (
            self.state.next_epoch if initial_epoch is None and continued else int(initial_epoch or 0)
        )
        self.epochs = first_epoch + int(epochs) if initial_epoch is None and not resumed else int(epochs)
        self.batch_size = source.batch_size
        self.steps_per_epoch = source.num_batches
        self.stop_training = False
        self._has_losses = None
        self.history = History()
        self.history.params = {
            "epochs": self.epochs,
            "batch_size": self.batch_size,
            "steps": self.steps_per_epoch,
        }
        self.continued = continued
        self.state.start_fit(first_epoch, continued)
        self.state.fit = {"epochs": self.epochs, **source.kind()}
        self._boundary.reset()
        self._plugins_save_by_hook = bool(self.plugins.hook.on_save_checkpoint.get_hookimpls())
        self.resumed = resumed

    def _join_world(self, source: Batches) -> None:
        """Finds the processes training together (``configure_world``) and shares the data and
        rank 0's state among them; only rank 0 keeps the plugins that write and print."""
        self._parallel = DataParallel(
            self.plugins.hook.configure_world(trainer=self), epoch=lambda: (self.state, self._epoch_metrics())
        )
        source.check_shards(self.world.size)
        # A source that can read one process's part (a Pipeline, a Grain MapDataset) does; others
        # are read whole on every process and their batches split by rows.
        if source.shard(self.world.rank, self.world.size):
            self.steps_per_epoch = source.num_batches
        if not self.world.is_chief:
            for plugin in [p for p in self.plugins.get_plugins() if getattr(p, "chief_only", False) is True]:
                self.plugins.unregister(plugin)
        self._parallel.synchronize(self.model, _Optimizers(self.optimizers), source)

    def _fit_epochs(self, loader: Batches, validation_data: tuple[Any, Any, Any] | None) -> None:
        """The epochs of a fit: each runs its batches, then ends (validation, the epoch hooks)."""
        state, hooks = self.state, self.plugins.hook
        continuing = self.resumed and state.in_epoch
        for epoch in range(state.position()[0], self.epochs):
            if not continuing:
                loader.start_epoch()
                state.start_epoch(epoch)
                self._reset_epoch_metrics()
            continuing = False
            hooks.on_epoch_start(trainer=self, epoch=epoch)
            complete = self._run_batches(loader, epoch)
            if state.batch_in_epoch == 0 and complete:
                logger.warning(
                    "epoch %d got no batch: the data ran out (a generator is spent after one pass: give "
                    "fit a re-iterable, or a generator that never ends with steps_per_epoch); training stops",
                    epoch + 1,
                )
                state.in_epoch = False
                break
            logs = self._end_epoch(epoch, validation_data, complete)
            if complete:
                last = self.stop_training or epoch + 1 >= self.epochs
                hooks.on_save_point(trainer=self, after="epoch", logs=logs, last=last)
            if self.stop_training:
                break

    def _run_batches(self, loader: Batches, epoch: int) -> bool:
        """Trains on the epoch's batches until the data ends or a plugin stops the fit; returns
        whether the epoch is complete."""
        state, boundary, hooks = self.state, self._boundary, self.plugins.hook
        while not self.stop_training:
            if loader.num_batches is not None and state.batch_in_epoch >= loader.num_batches:
                return True  # also an epoch resumed after its last batch, before its end
            step = self.step
            boundary.snapshot_step(loader)
            try:
                x, y, weights = loader.next_batch(state.batch_in_epoch)
            except StopIteration:
                boundary.no_step()
                return True
            hooks.on_train_batch_start(trainer=self, step=step)
            x, y, weights = self._parallel.shard(x, y, weights, own=loader.sharded)
            with boundary.step():
                try:
                    logs = self._train_step(x, y, step, weights)
                except (ValueError, TypeError) as error:
                    if not loader.stream:
                        raise
                    # A stream's batch may differ from the ones before it: say which one.
                    raise in_batch(error, f"batch {state.batch_in_epoch} of epoch {epoch + 1}") from error
                hooks.on_train_batch_end(trainer=self, step=step, logs=logs)
            complete = loader.num_batches is not None and state.batch_in_epoch >= loader.num_batches
            hooks.on_save_point(
                trainer=self, after="step", logs=logs, last=self.stop_training and not complete
            )
            if complete:
                return True
        return False

    def _end_epoch(
        self, epoch: int, validation_data: tuple[Any, Any, Any] | None, complete: bool
    ) -> dict[str, float]:
        """Validation and the epoch hooks; a checkpoint taken during them is the state before."""
        hooks = self.plugins.hook
        with self._boundary.epoch_end():
            logs = (
                self._metric_logs()
                if "train_step" not in self._custom_steps
                else self._step_epoch_logs(self._last_logs)
            )
            steps, batch_size, every = self._validation
            if validation_data is not None and (epoch + 1) % every == 0:
                x_val, y_val, weights = validation_data
                val_logs = self.evaluate(
                    x_val,
                    y_val,
                    batch_size=batch_size or self.batch_size or 32,
                    steps=steps,
                    sample_weight=weights,
                )
                val_logs = _prefixed(val_logs, "val_")
                hooks.on_validation_end(trainer=self, epoch=epoch, logs=val_logs)
                logs.update(val_logs)
            with self._boundary.committing():
                hooks.on_epoch_end(trainer=self, epoch=epoch, logs=logs)
                self.state.end_epoch(logs, complete)
                self.history._append(epoch, logs)
        return logs

    def _train_step(self, x: Any, y: Any, step: int, weights: Any = None) -> dict[str, float]:
        x, y = _to_tensors(x), _to_tensors(y)
        weights = None if weights is None else _to_tensors(weights)
        # What the forward pass moves before the update (dropout's generators,
        # BatchNormalization's statistics): put back if an exception ends the step before the
        # update, so that the interrupted checkpoint is the state before the step.
        before_step = self._moving_state()
        self._updates = 0
        try:
            custom = self._custom_steps.get("train_step")
            if custom is None:
                logs = self._default_train(x, y, weights, before_step[3])
            else:
                logs = self._custom_train(custom, pack_x_y_sample_weight(x, y, weights))
            self.state.count_step()
            self._boundary.counted()
        except BaseException:
            # A model that built its layers in this step drew their weights too: keep that.
            built_now = len(getattr(self.model, "variables", [])) != before_step[2]
            if not self._boundary.update_in_progress and self.step == step and not built_now:
                self._set_moving_state(before_step)
            raise
        return logs

    def _custom_train(self, train_step: Callable[[Any], Any], data: Any) -> dict[str, float]:
        """Runs the model's own ``train_step``: its logs, with what plugins added to the update's."""
        self._step_extra = {}
        logs = self._custom_logs("train_step", train_step(data))
        if self._updates == 0:
            raise ValueError(
                f"{type(self.model).__name__}.train_step applied no update; a training step applies its "
                "gradients with an optimizer (self.optimizer.apply(grads, self.trainable_variables))"
            )
        for key, value in self._step_extra.items():
            logs.setdefault(key, value)
        self._last_logs = logs
        return logs

    def _moving_state(self) -> tuple[Any, list[np.ndarray], int, tuple[Variable, ...]]:
        """The random generators and the non-trainable variables, as a step may move them, how
        many variables the model has, and its trainable variables (one walk of a Module)."""
        lists = getattr(self.model, "_variable_lists", None)
        if lists is not None:
            variables, trainable = lists()
        else:
            variables = getattr(self.model, "variables", [])
            trainable = getattr(self.model, "trainable_variables", [])
        fixed = [np.array(v.numpy()) for v in variables if not v.trainable]
        return _random.get_state(), fixed, len(variables), tuple(trainable)

    def _set_moving_state(self, state: tuple[Any, list[np.ndarray], int, tuple[Variable, ...]]) -> None:
        generators, values = state[0], state[1]
        _random.set_state(generators)
        fixed = [v for v in getattr(self.model, "variables", []) if not v.trainable]
        for variable, value in zip(fixed, values):
            variable.assign(value)

    def _loss_and_gradients(
        self, x: Any, y: Any, weights: Any = None, _signature: Any = None
    ) -> tuple[Any, Any, Any, Any]:
        """The forward and backward pass of a step (traced and replayed with ``compile=True``)."""
        with GradientTape() as tape:
            y_pred = self._call(x, training=True)
            loss = self._total_loss(y, y_pred, weights)
        variables = self.model.trainable_variables
        return loss, y_pred, tape.gradient(loss, variables), variables

    # -- evaluate / predict ------------------------------------------------------

    def _batches(
        self,
        x: Any,
        y: Any,
        batch_size: int,
        steps: int | None,
        targets: bool,
        weights: Any = None,
        optional: bool = False,
    ) -> Iterator[Any]:
        """The batches of ``evaluate`` (``(x, y, weights or None)``) and ``predict`` (``x``): of
        arrays in order, or of a stream (at most ``steps``)."""
        _check_positive(steps, "steps")
        if streamed(x, y):
            if y is not None or weights is not None:
                raise ValueError(
                    f"{'y' if y is not None else 'sample_weight'} must be None when x is a data set or a "
                    "generator: its batches carry the targets"
                )
            source = as_source(x, steps)
            source.start_epoch()
            for index in itertools.count():
                try:
                    batch = source.next_batch()
                except StopIteration:
                    return
                if optional:  # a custom test_step: (x, y, w) when the batch has them, else x
                    x_b, y_b, _ = split_batch(batch, index, targets=False)
                    yield (
                        stream_batch(batch, index, True)
                        if y_b is not None
                        else (stream_batch(x_b, index, False), None, None)
                    )
                else:
                    yield stream_batch(batch, index, targets)
            return
        if targets and not optional:
            require_targets(y, "evaluate")
        if targets and y is None:
            for xb in self._batches(x, None, batch_size, None, targets=False):
                yield xb, None, None
            return
        if steps is not None:
            raise ValueError("steps is for data sets and generators; with arrays every sample is used")
        # a dict keeps targets of several outputs a structure beside the weights
        targets_of = float32_inputs(y) if weights is None else {"y": float32_inputs(y), "w": weights}
        loader = BatchLoader(
            float32_inputs(x), targets_of if targets else None, batch_size=batch_size, shuffle=False
        )
        for index in range(loader.num_batches):
            batch = loader.batch(None, index)
            if not targets:
                yield batch
            else:
                xb, yb = batch
                yield (xb, yb["y"], yb["w"]) if weights is not None else (xb, yb, None)

    def evaluate(
        self,
        x: Any,
        y: Any = None,
        batch_size: int = 32,
        *,
        steps: int | None = None,
        sample_weight: Any = None,
        return_dict: bool = True,
        callbacks: list[Any] | None = None,
        verbose: Any = "auto",
    ) -> dict[str, float]:
        """The loss (with regularization, as Keras) and metrics over ``(x, y)``, as a dict.

        ``x`` may be arrays with targets ``y``, or a stream of ``(x, y)`` batches as ``fit``
        takes (``steps``: evaluate at most this many of its batches). ``sample_weight`` (with
        arrays) weighs each sample's loss and the ``weighted_metrics`` as in ``fit``. The metrics'
        running training state is kept, so this can be called in the middle of a fit.

        ``steps`` and ``sample_weight`` are keyword-only (Keras's fourth positional argument
        is ``verbose``). The result is always a dict, as Keras's ``return_dict=True``; the
        argument is taken for Keras's scripts, and ``return_dict=False`` (Keras's list) is an
        error. ``callbacks`` are plugins (or Keras-style callback objects) for this evaluation
        only: their ``on_test_*`` hooks run.
        """
        _check_verbose(verbose)
        if return_dict is not True:
            raise ValueError(
                "evaluate: return_dict=False (Keras's list of values) is not supported; "
                "evaluate always returns a dict keyed by log name"
            )
        # a stream's batches carry their own targets: _batches refuses weights beside them
        weights = sample_weight if streamed(x, y) else sample_weights(y, sample_weight, None, self.loss)
        with self.plugins.registered(callbacks), self._bound():
            custom = overridden_step(self.model, "test_step")
            self._logged_metrics = self._epoch_metrics()
            saved_states = self._metric_states()
            saved_loss = self.state.loss_sum, self.state.loss_count
            try:
                self._reset_epoch_metrics()
                self.state.loss_sum, self.state.loss_count = 0.0, 0
                is_streamed = streamed(x, y)
                optional = custom is not None or self.loss is None
                batches = self._batches(
                    x, y, batch_size, steps, targets=True, weights=weights, optional=optional
                )
                logs: dict[str, float] | None = None
                hooks = self.plugins.hook
                hooks.on_test_start(trainer=self)
                for index, batch in enumerate(batches):
                    xb, yb, wb = self._parallel.shard(*batch)
                    if self.batch_rows[0] == 0:
                        continue  # a batch smaller than the processes: this one has no rows of it
                    hooks.on_test_batch_start(trainer=self, batch=index)
                    try:
                        data = pack_x_y_sample_weight(_to_tensors(xb), _to_tensors(yb), _to_tensors(wb))
                        if custom is None:
                            logs = self.default_test_step(data)
                        else:
                            logs = self._custom_logs("test_step", custom(data))
                    except (ValueError, TypeError) as error:
                        if not is_streamed:
                            raise
                        raise in_batch(error, f"batch {index}") from error  # as fit names it
                    hooks.on_test_batch_end(trainer=self, batch=index, logs=dict(logs))
                if custom is None:
                    result = self._metric_logs(needs_batches="evaluate")
                elif logs is None:
                    raise ValueError("evaluate: the data gave no batch")
                else:
                    result = self._step_epoch_logs(logs)
                hooks.on_test_end(trainer=self, logs=dict(result))
                return result
            finally:
                self._set_metric_states(saved_states)
                self.state.loss_sum, self.state.loss_count = saved_loss

    def train_on_batch(
        self,
        x: Any,
        y: Any = None,
        sample_weight: Any = None,
        class_weight: Any = None,
        return_dict: bool = False,
    ) -> Any:
        """One training step on one batch, as Keras's ``train_on_batch``: the model's step (its
        own ``train_step`` or the default), every update through ``apply``; no epoch, and no
        hooks but ``transform_gradients``. Metrics keep running across calls until
        ``model.reset_metrics()``.

        Returns:
            The step's logs: a dict with ``return_dict=True``, else the loss alone when that is
            the only value, else the values in the logs' order (Keras's list).
        """
        with self._one_fit(), self._bound():
            self._find_steps()
            targets = "train_step" not in self._custom_steps and self.loss is not None
            if targets:
                require_targets(y, "train_on_batch")
            weights = sample_weights(y, sample_weight, class_weight, self.loss, by_step=not targets)
            x = float32_inputs(x)
            y = None if y is None else float32_inputs(y)
            with self._boundary.step():
                logs = self._train_step(x, y, self.step, weights)
        return _keras_result(logs, return_dict)

    def test_on_batch(
        self, x: Any, y: Any = None, sample_weight: Any = None, return_dict: bool = False
    ) -> Any:
        """``evaluate`` of one batch, returned as Keras's ``test_on_batch`` returns it."""
        logs = self.evaluate(x, y, batch_size=max(1, batch_len(x)), sample_weight=sample_weight)
        return _keras_result(logs, return_dict)

    def predict(
        self,
        x: Any,
        batch_size: int = 32,
        *,
        steps: int | None = None,
        callbacks: list[Any] | None = None,
        verbose: Any = "auto",
    ) -> Any:
        """The model's outputs for ``x`` (``training=False``), batch by batch, as one ndarray.

        ``x`` may be arrays or a stream as ``fit`` takes (of ``x`` or ``(x, y)`` batches; at
        most ``steps`` of them, keyword-only: Keras's third positional argument is
        ``verbose``). A model with several outputs (a tuple, list or dict of tensors) gets the
        same structure back with one ndarray per output, as Keras's ``predict``. ``callbacks``
        are plugins (or Keras-style callback objects) for this prediction only: their
        ``on_predict_*`` hooks run.
        """
        _check_verbose(verbose)
        with self.plugins.registered(callbacks):  # for this predict only, as evaluate's
            return self._predict(x, batch_size, steps)

    def _predict(self, x: Any, batch_size: int, steps: int | None) -> Any:
        structure: Any = None
        columns: list[list[np.ndarray]] = []
        is_streamed = streamed(x, None)
        with self._bound():
            custom = overridden_step(self.model, "predict_step")
        hooks = self.plugins.hook
        hooks.on_predict_start(trainer=self)
        for index, batch in enumerate(self._batches(x, None, batch_size, steps, targets=False)):
            hooks.on_predict_batch_start(trainer=self, batch=index)
            try:
                if custom is None:
                    outputs = self._call(_to_tensors(batch), training=False)
                else:
                    with self._bound():
                        outputs = custom(pack_x_y_sample_weight(_to_tensors(batch)))
            except (ValueError, TypeError) as error:
                if not is_streamed:
                    raise
                raise in_batch(error, f"batch {index}") from error  # as fit names it
            leaves = nest.flatten(outputs)
            if structure is None:
                structure, columns = outputs, [[] for _ in leaves]
            for column, leaf in zip(columns, leaves):
                column.append(np.asarray(leaf))
            hooks.on_predict_batch_end(trainer=self, batch=index, outputs=outputs)
        if structure is None:
            raise ValueError("predict: the data gave no batch")
        hooks.on_predict_end(trainer=self)
        arrays = [np.concatenate(column, axis=0) for column in columns]
        return nest.pack_sequence_as(structure, arrays) if nest.is_nested(structure) else arrays[0]

    # -- checkpoints ---------------------------------------------------------------

    def finished_by(self, checkpoint: dict[str, Any]) -> str | None:
        """Why ``checkpoint`` ends its run, when a plugin of this trainer finished it, else ``None``.

        A plugin that ended the run with ``request_stop`` (``early_stopping``) finished it; a
        resume of it trains nothing while that plugin is registered.
        """
        stopped = checkpoint.get("trainer", {}).get("stopped")
        if not isinstance(stopped, dict) or self.plugins.get_plugin(str(stopped.get("by"))) is None:
            return None
        return f"the run was finished by {stopped['by']}: {stopped.get('reason', '')}".rstrip(": ")

    def position_key(self) -> tuple[int, int, int]:
        """``(epoch, batch in epoch, step)`` a checkpoint taken now would resume at."""
        return self._boundary.position(self.state.position())

    def train_state(self) -> TrainState:
        """A snapshot of the training state as a checkpoint takes it: the position, the running
        epoch statistics, the data's, the generators' and the metrics' states (copies)."""
        snapshot = copy.deepcopy(self.state)
        snapshot.stopped = self.state.stopped if self.stop_training else None
        loader = self._loader
        snapshot.data = self._boundary.data_state(lambda: loader.get_state() if loader is not None else {})
        snapshot.random = _random.get_state()
        snapshot.metrics = self._metric_states()
        self._parallel.as_global(snapshot)
        return snapshot

    def _contents(self) -> dict[str, Any]:
        """The checkpoint contents of the current state, with what the ``on_save_checkpoint``
        hooks add (plugins' states are copies: later hooks do not change them)."""
        contents = {
            **self.train_state().to_dict(),
            "model": self.model.state_dict(),
            **_Optimizers(self.optimizers).get_state(),
            "plugins": _copied(self.plugins.state_dicts()),
            "config": self.config,
        }
        self.plugins.hook.on_save_checkpoint(trainer=self, checkpoint=contents)
        return contents

    def _step_plugin_states(self) -> dict[str, Any]:
        """The plugins' states as a checkpoint taken now would hold them (before every step)."""
        if self._plugins_save_by_hook:  # their states come only with the whole contents
            return self._contents()["plugins"]
        return _copied(self.plugins.state_dicts())

    def checkpoint_contents(self) -> dict[str, Any]:
        """Everything a checkpoint holds to resume exactly from the current state.

        Past the last consistent boundary, that is the state at the boundary: while an epoch
        ends (its validation and ``on_epoch_end`` hooks) the state before its end, and during
        a step that has not updated the model (an exception in a hook, the loss or the
        gradients) the state before the step, plugins' included; a resume runs it again.
        Calls the ``on_save_checkpoint`` hooks, so plugins can add to it (at the boundary).
        """
        if self._loader is None:
            raise RuntimeError("checkpoint_contents is only available during fit")
        return self._boundary.checkpoint_contents()

    def save_checkpoint(self, path: str | os.PathLike[str]) -> Path:
        """Writes a checkpoint of the current state to ``path`` (atomically); only during ``fit``."""
        return save_checkpoint(path, self.checkpoint_contents())

    def _optimizer_variables(self) -> dict[str, tuple[Any, Any]]:
        """Each optimizer of the run with the variables it will update, in order, where known:
        those it has seen; the model's trainable variables for the default step's optimizer;
        else ``None`` (a model's own optimizer that its step has not used yet)."""
        default = "train_step" not in self._custom_steps
        result: dict[str, tuple[Any, Any]] = {}
        for name, optimizer in self.optimizers.items():
            seen = list(getattr(optimizer, "_variables", ()))
            if not seen and default and optimizer is self.optimizer:
                seen = list(self.model.trainable_variables)
            result[name] = (optimizer, seen or None)
        return result

    def _build_by_step(self, batch: tuple[Any, Any, Any]) -> None:
        """Runs the model's own ``train_step`` once on a first ``(x, y, weights)`` batch, without
        plugins: only it knows which layers see what (a GAN's generator its noise), so only it
        builds them and its optimizers' slots, in the order of the run. The random generators are
        put back; the checkpoint then overwrites the variables, the optimizers and the metrics
        (``train --export`` builds a model this way before it loads a checkpoint's weights)."""
        x, y, weights = batch
        generators = _random.get_state()
        step = overridden_step(self.model, "train_step")
        assert step is not None
        self._probing = True
        try:
            step(pack_x_y_sample_weight(_to_tensors(x), _to_tensors(y), _to_tensors(weights)))
        finally:
            self._probing = False
            _random.set_state(generators)

    def _restore(self, checkpoint: dict[str, Any], loader: Batches, source: Any) -> None:
        check_checkpoint(checkpoint, source=source)  # the fields read below; the model's after it is built
        check_fits(checkpoint, loader.kind(), source)
        # One call builds the lazy layers; the model may have Variables of its own already.
        modules = [self.model, *getattr(self.model, "submodules", [])]
        if not all(getattr(module, "built", True) for module in modules):
            if "train_step" in self._custom_steps:
                self._build_by_step(loader.first_batch())
            else:
                self._call(_to_tensors(loader.first_inputs()), training=False)
        check_checkpoint(
            checkpoint,
            model=self.model,
            num_samples=loader.num_samples,
            plugins=self.plugins.list_name_plugin(),
            optimizers=self._optimizer_variables(),
            source=source,
        )
        self.model.load_state_dict(checkpoint["model"])
        _Optimizers(self.optimizers).set_state(checkpoint)
        state = TrainState.from_dict(checkpoint)
        if state.metrics:
            self._set_metric_states(state.metrics)
        _random.set_state(state.random)
        try:
            loader.set_state(state.data)
        except ValueError as error:
            raise CheckpointError(f"{source}: {error}") from None
        if state.in_epoch and not loader.checkpointable:
            logger.warning(
                "resuming epoch %d at batch %d: the data is a plain iterable, whose position cannot be "
                "restored; its stream starts again from the beginning",
                state.epoch + 1,
                state.batch_in_epoch,
            )
        state.fit = self.state.fit
        self.state = state
        for epoch, logs in state.history:
            self.history._append(epoch, logs)
