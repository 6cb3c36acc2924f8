"""Every hook of the fit loop, declared and documented in one place, grouped by phase.

A plugin is any object or module whose hook functions are marked with ``@tp.hookimpl``.
An implementation may declare any subset of a hook's arguments, by name (pluggy matches
them by name, not position)::

    class PrintLoss:
        @tp.hookimpl
        def on_epoch_end(self, epoch, logs):
            print(epoch, logs["loss"])

**Call order.** Every hook, the gradient transforms included, calls the plugins in the
order they were given in ``Trainer(plugins=[...])`` (as Keras calls its callbacks).
A plugin registered later with ``trainer.plugins.register(p)`` runs *before* those
(pluggy's last-registered-first rule). ``@tp.hookimpl(tryfirst=True)`` and
``@tp.hookimpl(trylast=True)`` move one implementation to the front or the back; the
built-in plugins use them only for what others see (``terminate_on_nan`` stops a NaN step
before loggers log it, ``reduce_lr_on_plateau`` puts the new rate in the logs first). No
saved state depends on the order: checkpoints are written at ``on_save_point``, after every
plugin has seen the step or the epoch.

**What a plugin may read of the trainer.** The attributes listed in ``tp.Trainer``'s
docstring, and for checkpointing plugins: ``trainer.state`` (the ``TrainState``, read-only),
``trainer.position_key()`` (where a checkpoint taken now resumes), ``trainer.checkpoint_contents()``
and ``trainer.save_checkpoint(path)`` (the state as a checkpoint holds it: between a step's
start and its update the state before the step, plugins' states included; during an epoch's
end the state before it), and ``trainer.update_in_progress`` (from a step's update to the end
of its ``on_train_batch_end`` hooks: an exception there leaves no whole state, as the plugins
after the failing hook never saw the step, so the ``checkpoint`` plugin saves nothing then).

**Return values** are ignored except where a hook says otherwise.

**Logs** are plain dicts of Python floats. ``transform_gradients`` gets ``loss``, this
batch's loss with the regularization losses. ``on_train_batch_end`` gets the epoch's
running values, as Keras's: ``loss`` averaged over the epoch's batches so far, and the
running value of every metric; a plugin may add keys. ``on_epoch_end`` gets the epoch's logs: ``loss`` and every metric averaged over
the epoch, and their ``val_`` versions when there is validation data; keys a plugin adds
there go into the ``History``.

**What ``train`` reads from plugins.** Besides the hooks, the ``train`` command reads these
optional attributes, so any plugin, built-in or not, can take part; it never asks a plugin's
class:

* ``adds_log_keys``: a tuple of the epoch log keys the plugin adds (``("learning_rate",)``
  for ``reduce_lr_on_plateau``, ``()`` for one that adds none). When every plugin of a run
  declares it, a ``monitor`` naming no key of the epoch logs is refused before training;
  otherwise it stays a warning at the first epoch's end.
* ``checkpoint_folder(output_dir)``: for a plugin that saves checkpoints, the folder it saves
  into for a run whose output folder is ``output_dir``; ``--resume auto`` looks there.
* ``interrupted_path``: the checkpoint the plugin saved when an exception ended the last fit,
  or ``None``; ``train`` names it after a Ctrl-C.
* ``failure``: why the plugin ended the last fit as a failure, in words (``train`` prints it
  and exits 1), or ``None``.
"""

from __future__ import annotations

from typing import Any

import pluggy

PROJECT_NAME = "tapefit"

hookspec = pluggy.HookspecMarker(PROJECT_NAME)
hookimpl = pluggy.HookimplMarker(PROJECT_NAME)
"""Marks a plugin's method (or a module's function) as a hook implementation (``tp.hookimpl``)."""

GradsAndVars = list[tuple[Any, Any]]

# ---------------------------------------------------------------------------
# The fit as a whole
# ---------------------------------------------------------------------------


@hookspec
def on_fit_start(trainer: Any) -> None:
    """Called once at the start of ``Trainer.fit``, before the first batch.

    When resuming (``fit(..., resume_from=...)``) the model, optimizer, counters and
    random generators are already restored (``trainer.resumed`` is True,
    ``trainer.epoch`` and ``trainer.step`` hold where training continues), and the
    plugins' own states are restored right *after* this hook, so a plugin may reset
    itself here unconditionally.

    Args:
        trainer: the ``tp.Trainer`` running the fit.
    """


@hookspec
def on_fit_end(trainer: Any, logs: dict[str, float]) -> None:
    """Called once when ``fit`` finishes normally (also after ``stop_training``).

    Plugins that own files flush and close them here.

    Args:
        trainer: the ``tp.Trainer``.
        logs: the last complete epoch's logs (Keras's ``on_train_end`` gets them), ``{}``
            when none completed.
    """


@hookspec
def on_exception(trainer: Any, exception: BaseException) -> None:
    """Called when an exception (``KeyboardInterrupt`` too) escapes the fit loop.

    ``on_fit_end`` is not called then. Plugins close their files here, and the
    ``checkpoint`` plugin saves an ``interrupted`` checkpoint. The exception is re-raised
    after every implementation ran; an implementation that raises itself is logged and
    does not stop the others.

    Args:
        trainer: the ``tp.Trainer``.
        exception: the exception that ended the fit.
    """


@hookspec(firstresult=True)
def configure_world(trainer: Any) -> Any:
    """Called at the start of every ``fit``, before anything is restored or trained: returns the
    ``tapefit.distributed.world.World`` the fit runs in, or ``None`` (one process).

    The first implementation that returns a world wins; the ``distributed`` plugin returns an
    MPI one under a launcher. The trainer then shards each global batch over its processes,
    sums the epoch statistics across them, broadcasts rank 0's variables, optimizer state and
    generators, and on the other ranks unregisters the plugins whose class sets
    ``chief_only = True`` (those that write files or print).

    Args:
        trainer: the ``tp.Trainer``.
    """


# ---------------------------------------------------------------------------
# Epochs
# ---------------------------------------------------------------------------


@hookspec
def on_epoch_start(trainer: Any, epoch: int) -> None:
    """Called at the start of every epoch.

    When a fit resumes in the middle of an epoch it is called again for that epoch;
    ``trainer.batch_in_epoch`` then tells how many of its batches are already done.

    Args:
        trainer: the ``tp.Trainer``.
        epoch: the epoch's index, counting from 0 over the whole run.
    """


@hookspec
def on_validation_end(trainer: Any, epoch: int, logs: dict[str, float]) -> None:
    """Called after the validation pass of an epoch, before ``on_epoch_end``.

    Only called when ``fit`` got ``validation_data``.

    Args:
        trainer: the ``tp.Trainer``.
        epoch: the epoch's index.
        logs: the validation results, keys prefixed with ``val_`` (``val_loss``, ...).
    """


@hookspec
def on_epoch_end(trainer: Any, epoch: int, logs: dict[str, float]) -> None:
    """Called at the end of every epoch (also a partial one ended by ``stop_training``).

    Args:
        trainer: the ``tp.Trainer``.
        epoch: the epoch's index.
        logs: ``loss`` and the metrics averaged over the epoch, and the ``val_`` keys.
            Plugins may add keys (``reduce_lr_on_plateau`` adds ``learning_rate``);
            the dict is appended to the ``History`` after every plugin ran.
    """


# ---------------------------------------------------------------------------
# Training batches
# ---------------------------------------------------------------------------


@hookspec
def on_train_batch_start(trainer: Any, step: int) -> None:
    """Called before the forward pass of every training batch.

    Args:
        trainer: the ``tp.Trainer``.
        step: the index of the optimizer step this batch makes, counting from 0 over
            the whole run (``trainer.epoch`` and ``trainer.batch_in_epoch`` give the
            position in the epoch).
    """


@hookspec
def transform_gradients(
    trainer: Any, step: int, grads_and_vars: GradsAndVars, logs: dict[str, float]
) -> GradsAndVars | None:
    """Transforms the gradients before the optimizer applies them (clipping, noise, ...).

    The implementations are chained, in the call order described at the top of this
    module: each gets the pairs the previous one returned, and the last one's pairs go
    to ``optimizer.apply_gradients``. Returning ``None`` passes the pairs on unchanged
    (for plugins that only look). A gradient may be ``None`` (a variable the loss does
    not depend on); transforms must pass such pairs through.

    Args:
        trainer: the ``tp.Trainer``.
        step: the optimizer step about to be made.
        grads_and_vars: a list of ``(gradient, variable)`` pairs.
        logs: the batch's logs so far (``loss``); a transform may add keys
            (``clip_gradients`` adds the pre-clip ``grad_global_norm``).

    Returns:
        A new list of ``(gradient, variable)`` pairs, or ``None``.
    """


@hookspec
def on_train_batch_end(trainer: Any, step: int, logs: dict[str, float]) -> None:
    """Called after the optimizer step of every training batch.

    Setting ``trainer.stop_training = True`` here ends ``fit`` after this batch;
    ``trainer.request_stop(self, reason)`` does the same and records that this plugin finished
    the run, so a resume of it trains nothing while the plugin is in the run.

    Args:
        trainer: the ``tp.Trainer``.
        step: the index of the optimizer step just made (``trainer.step`` is already
            ``step + 1``).
        logs: ``loss`` of this batch, the running epoch value of every metric, and
            what transforms added.
    """


@hookspec
def on_save_point(trainer: Any, after: str, logs: dict[str, float], last: bool) -> None:
    """Called where the training state is whole, so a checkpoint taken here resumes exactly.

    That is after every step's ``on_train_batch_end`` hooks (``after="step"``) and after the
    ``on_epoch_end`` hooks of every epoch that ran all its batches (``after="epoch"``): every
    plugin has seen the step or the epoch, whatever their order. The ``checkpoint`` plugin
    saves here. An implementation must not change the model, the optimizer or the plugins'
    states.

    Args:
        trainer: the ``tp.Trainer``.
        after: ``"step"`` or ``"epoch"``.
        logs: the step's logs, or the epoch's (with the keys plugins added).
        last: the fit trains nothing after this point (the last epoch ended, or a plugin
            stopped the run).
    """


# ---------------------------------------------------------------------------
# Checkpoints
# ---------------------------------------------------------------------------
# A plugin's own state goes into checkpoints in one of two ways:
#  * the plugin object has ``state_dict()`` / ``load_state_dict(state)`` methods
#    (as Lightning callbacks): the trainer stores ``state_dict()`` under the plugin's
#    registered name and hands it back on resume; or
#  * it implements the two hooks below and edits ``checkpoint["plugins"]`` itself, under its
#    registered name: ``checkpoint["plugins"][trainer.plugins.get_name(self)] = {...}``
#    (a resume warns about entries that name no registered plugin).
# A checkpoint is untrusted input, plugin states included. A plugin that reads its state (in
# ``load_state_dict`` or ``on_load_checkpoint``) also defines ``check_state_dict(state, model)``:
# on every resume (``fit(resume_from=...)`` and ``train --resume``), before anything is restored
# or trained, it gets its saved state and the model (built) and raises ``ValueError`` whose
# message names the field and the problem (``"best_weights.dense/kernel: holds NaN or infinite
# values"``); the resume is refused with one line naming the file and the plugin. It changes
# nothing. ``tapefit.checkpointing.validate`` has the checks the built-in plugins use (``expect_mapping``,
# ``expect_count``, ``expect_number``, ``expect_weights``). A plugin without it trusts its state.
# States are nested dicts/lists of JSON values (str, int, float, bool, None) and
# NumPy arrays; no pickle is ever written or read. The trainer takes the states before every
# step and every epoch's end (an exception there saves the state from before it), copying
# the dicts and lists but not the arrays: a state hands out arrays the plugin will not write
# into afterwards (fresh copies, or arrays it replaces rather than updates in place).


@hookspec
def on_save_checkpoint(trainer: Any, checkpoint: dict[str, Any]) -> None:
    """Called while a checkpoint's contents are gathered: before a checkpoint is written, and
    before every epoch's end and (when a plugin implements this hook) every step, where the
    trainer keeps the contents in memory for a checkpoint that an exception there saves.

    Args:
        trainer: the ``tp.Trainer``.
        checkpoint: the checkpoint's contents; ``checkpoint["plugins"]`` maps plugin
            names to their states, and a plugin may add its own entry under its registered
            name, ``trainer.plugins.get_name(self)`` (a resume warns about entries under
            other keys, as states of plugins that are not registered).
    """


@hookspec
def on_load_checkpoint(trainer: Any, checkpoint: dict[str, Any]) -> None:
    """Called on resume, after the model, optimizer and plugin states were restored.

    Args:
        trainer: the ``tp.Trainer``.
        checkpoint: the checkpoint's contents as read from the file.
    """


# ---------------------------------------------------------------------------
# Evaluation and prediction (Keras's on_test_* and on_predict_*)
# ---------------------------------------------------------------------------


@hookspec
def on_test_start(trainer: Any) -> None:
    """Called when ``evaluate`` starts, also for a fit's validation (as Keras's ``on_test_begin``).

    Args:
        trainer: the ``tp.Trainer``.
    """


@hookspec
def on_test_batch_start(trainer: Any, batch: int) -> None:
    """Called before each batch of ``evaluate``.

    Args:
        trainer: the ``tp.Trainer``.
        batch: the batch's index in this evaluation.
    """


@hookspec
def on_test_batch_end(trainer: Any, batch: int, logs: dict[str, float]) -> None:
    """Called after each batch of ``evaluate``.

    Args:
        trainer: the ``tp.Trainer``.
        batch: the batch's index in this evaluation.
        logs: the running loss and metrics of the evaluation so far (this process's).
    """


@hookspec
def on_test_end(trainer: Any, logs: dict[str, float]) -> None:
    """Called when ``evaluate`` ends, with what it returns (without the ``val_`` prefix a fit's
    validation adds afterwards).

    Args:
        trainer: the ``tp.Trainer``.
        logs: the evaluation's loss and metrics.
    """


@hookspec
def on_predict_start(trainer: Any) -> None:
    """Called when ``predict`` starts.

    Args:
        trainer: the ``tp.Trainer``.
    """


@hookspec
def on_predict_batch_start(trainer: Any, batch: int) -> None:
    """Called before each batch of ``predict``.

    Args:
        trainer: the ``tp.Trainer``.
        batch: the batch's index in this prediction.
    """


@hookspec
def on_predict_batch_end(trainer: Any, batch: int, outputs: Any) -> None:
    """Called after each batch of ``predict`` (Keras passes ``{"outputs": ...}`` as its logs).

    Args:
        trainer: the ``tp.Trainer``.
        batch: the batch's index in this prediction.
        outputs: the model's outputs for the batch, as ``predict_step`` gave them.
    """


@hookspec
def on_predict_end(trainer: Any) -> None:
    """Called when ``predict`` ends.

    Args:
        trainer: the ``tp.Trainer``.
    """


# The hook names, in the order of a fit, for documentation and error messages.
HOOK_NAMES: tuple[str, ...] = (
    "configure_world",
    "on_fit_start",
    "on_epoch_start",
    "on_train_batch_start",
    "transform_gradients",
    "on_train_batch_end",
    "on_validation_end",
    "on_epoch_end",
    "on_save_point",
    "on_fit_end",
    "on_exception",
    "on_save_checkpoint",
    "on_load_checkpoint",
    "on_test_start",
    "on_test_batch_start",
    "on_test_batch_end",
    "on_test_end",
    "on_predict_start",
    "on_predict_batch_start",
    "on_predict_batch_end",
    "on_predict_end",
)
