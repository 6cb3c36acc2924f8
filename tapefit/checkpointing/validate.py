"""What a checkpoint must hold to continue a fit, every field checked before anything is restored.

A checkpoint file is untrusted input: its digest proves that it is whole, not who wrote it
(anyone can recompute a digest). So before a resume changes the model, the optimizer or the
random generators, each field is checked against what it must be (its type, its range, the
model's shapes and dtypes), and the first one that is not is named in a ``CheckpointError``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from tapefit.checkpointing import CheckpointError
from tapefit.core.messages import shown

_SECTIONS = ("trainer", "model", "optimizer", "metrics", "random", "loader", "plugins")
_COUNTERS = ("epoch", "batch_in_epoch", "step", "epochs", "batch_size", "num_samples", "loss_count")


def _is_int(value: Any) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(
        value, (bool, np.bool_)
    )


def expect_mapping(state: Any, keys: tuple[str, ...]) -> dict[str, Any]:
    """``state`` as a mapping that holds every one of ``keys``; else a ``ValueError`` naming what
    it is or the first key it lacks."""
    if not isinstance(state, dict):
        raise ValueError(f"expected a mapping, got {shown(state)}")
    for key in keys:
        if key not in state:
            raise ValueError(f"{key}: missing")
    return state


def expect_count(value: Any, field: str, *, optional: bool = False) -> None:
    """``value`` must be a non-negative integer (or ``None`` when ``optional``)."""
    if optional and value is None:
        return
    if not _is_int(value) or value < 0:
        wanted = "null or a non-negative integer" if optional else "a non-negative integer"
        raise ValueError(f"{field}: expected {wanted}, got {shown(value)}")


def expect_number(value: Any, field: str, *, optional: bool = False, finite: bool = False) -> None:
    """``value`` must be a number, never NaN (nor infinite when ``finite``), or ``None`` when
    ``optional``."""
    if optional and value is None:
        return
    if not _is_number(value) or math.isnan(value) or (finite and math.isinf(value)):
        kind = "a finite number" if finite else "a number"
        wanted = f"null or {kind}" if optional else kind
        raise ValueError(f"{field}: expected {wanted}, got {shown(value)}")


def _check_generator_state(state: Any, field: str) -> None:
    """A NumPy bit generator's state, checked by giving it to a scratch generator."""
    try:
        scratch = np.random.default_rng()
        scratch.bit_generator.state = state
    except Exception:
        raise ValueError(f"{field}: not a random generator state, got {shown(state)}") from None


def _check_trainer(state: Any, num_samples: int | None) -> None:
    if not isinstance(state, dict):
        raise ValueError(f"trainer: expected a mapping, got {shown(state)}")
    for key in _COUNTERS:
        expect_count(state.get(key), f"trainer.{key}")
    for key in ("in_epoch", "shuffle", "drop_last"):
        if not isinstance(state.get(key), bool):
            raise ValueError(f"trainer.{key}: expected true or false, got {shown(state.get(key))}")
    expect_number(state.get("loss_sum"), "trainer.loss_sum", finite=True)
    if state["batch_size"] < 1 and state["num_samples"] > 0:  # a stream's fit has neither
        raise ValueError(f"trainer.batch_size: expected at least 1, got {state['batch_size']}")
    if num_samples is not None and state["num_samples"] == num_samples:
        batches = -(-num_samples // state["batch_size"])
        if state["batch_in_epoch"] > batches:
            raise ValueError(
                f"trainer.batch_in_epoch: {state['batch_in_epoch']} is past the {batches} batches of an epoch"
            )
    stopped = state.get("stopped")
    if stopped is not None and not (
        isinstance(stopped, dict)
        and isinstance(stopped.get("by"), str)
        and isinstance(stopped.get("reason"), str)
    ):
        raise ValueError(f"trainer.stopped: expected null or {{by, reason}}, got {shown(stopped)}")
    history = state.get("history")
    if not isinstance(history, list):
        raise ValueError(f"trainer.history: expected a list, got {shown(history)}")
    for i, record in enumerate(history):
        if not isinstance(record, dict) or not _is_int(record.get("epoch")) or record["epoch"] < 0:
            raise ValueError(f"trainer.history[{i}]: expected {{epoch, logs}}, got {shown(record)}")
        logs = record.get("logs")
        if not isinstance(logs, dict) or not all(
            isinstance(k, str) and _is_number(v) for k, v in logs.items()
        ):
            raise ValueError(f"trainer.history[{i}].logs: expected a mapping of numbers, got {shown(logs)}")


def expect_weights(saved: Any, field: str, model: Any) -> None:
    """``saved`` must be a model's weights (``{variable path: array}``, finite floats), and
    ``model``'s own when a model is given: the same names, dtypes and shapes."""
    if not isinstance(saved, dict):
        raise ValueError(f"{field}: expected a mapping of arrays, got {shown(saved)}")
    ours = model.state_dict() if model is not None else {}
    if ours and set(saved) != set(ours):
        missing, unexpected = sorted(set(ours) - set(saved)), sorted(set(saved) - set(ours))
        parts = [
            f"{label} {', '.join(names[:4])}{' ...' if len(names) > 4 else ''}"
            for label, names in (("missing", missing), ("unexpected", unexpected))
            if names
        ]
        raise ValueError(f"{field}: the checkpoint holds another model than this one ({'; '.join(parts)})")
    for name, value in saved.items():
        if not isinstance(value, np.ndarray):
            raise ValueError(f"{field}.{name}: expected an array, got {shown(value)}")
        if name in ours:
            expected = np.asarray(ours[name])
            if value.dtype != expected.dtype:
                raise ValueError(
                    f"{field}.{name}: the model's variable is {expected.dtype}, the checkpoint holds {value.dtype}"
                )
            if value.shape != expected.shape:
                raise ValueError(
                    f"{field}.{name}: the model's variable has shape {expected.shape}, the checkpoint {value.shape}"
                )
        if value.dtype.kind == "f" and not np.isfinite(value).all():
            raise ValueError(f"{field}.{name}: holds NaN or infinite values")


def _check_random(state: Any) -> None:
    if not isinstance(state, dict):
        raise ValueError(f"random: expected a mapping, got {shown(state)}")
    expect_count(state.get("seed"), "random.seed", optional=True)
    _check_generator_state(state.get("main"), "random.main")
    by_op_seed = state.get("by_op_seed")
    if not isinstance(by_op_seed, dict):
        raise ValueError(f"random.by_op_seed: expected a mapping, got {shown(by_op_seed)}")
    for key, value in by_op_seed.items():
        if not (isinstance(key, str) and key.isdigit()):
            raise ValueError(f"random.by_op_seed: keys are seeds, got {shown(key)}")
        _check_generator_state(value, f"random.by_op_seed.{key}")


def _check_loader(state: Any, trainer: dict[str, Any]) -> None:
    if not isinstance(state, dict):
        raise ValueError(f"loader: expected a mapping, got {shown(state)}")
    if state.get("kind") is not None:  # a stream's source checks its own state when it is set
        return
    _check_generator_state(state.get("rng"), "loader.rng")
    position = state.get("position", 0)
    if not _is_int(position) or not 0 <= position <= trainer["num_samples"]:
        raise ValueError(f"loader.position: expected a batch index of the epoch, got {shown(position)}")
    order = state.get("order")
    if order is None:
        return
    n = trainer["num_samples"]
    if not isinstance(order, np.ndarray) or order.ndim != 1 or order.dtype.kind not in "iu":
        raise ValueError(f"loader.order: expected a 1-d integer array, got {shown(order)}")
    if order.shape[0] != n or not np.array_equal(np.sort(order), np.arange(n)):
        raise ValueError(f"loader.order: expected an order of all {n} samples, got {order.shape[0]} entries")


def check_plugin_states(
    states: Any, plugins: Iterable[tuple[str, Any]], *, model: Any = None, source: Any
) -> None:
    """Has every plugin check its own saved state, before any is restored.

    A plugin with ``load_state_dict`` may define ``check_state_dict(state, model)``
    (``tapefit.plugins.hookspecs``, "Checkpoints"): it raises ``ValueError`` naming the field
    and the problem. Raises ``CheckpointError`` naming the file, the plugin, the field and the
    problem; a plugin without ``check_state_dict`` trusts its state.

    Args:
        states: the checkpoint's ``plugins`` section (``{name: state}``).
        plugins: ``(registered name, plugin)`` pairs (``PluginManager.list_name_plugin()``).
        model: the model to resume (built), for states that hold its weights.
        source: the file, for the message.
    """
    if not isinstance(states, dict):
        raise CheckpointError(f"{source}: plugins: expected a mapping, got {shown(states)}")
    for name, plugin in plugins:
        check = getattr(plugin, "check_state_dict", None)
        if plugin is None or not callable(check) or name not in states:
            continue
        try:
            check(states[name], model)
        except (ValueError, TypeError, KeyError) as error:
            problem = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
            raise CheckpointError(f"{source}: plugins.{name}: {problem}") from None


def check_checkpoint(
    contents: Any,
    *,
    model: Any = None,
    num_samples: int | None = None,
    plugins: Iterable[tuple[str, Any]] = (),
    optimizers: Mapping[str, tuple[Any, Any]] | None = None,
    source: Any,
) -> None:
    """Checks every field a resume reads; raises ``CheckpointError`` naming the first bad one.

    Args:
        contents: what ``load_checkpoint`` returned.
        model: the model to resume (built): the saved weights must have its dtypes and shapes.
        optimizers: the optimizers to resume by name, each with the variables it will update
            in order (``None`` when that is not known before it runs): ``optimizer`` (the
            trainer's, saved under ``optimizer``) and those the model holds (saved under
            ``optimizers``). Each saved state must be one the optimizer takes, its slots those
            of its variables (``Optimizer.check_state``, as a model file's optimizer state is
            checked).
        num_samples: the fit's number of training samples, when known.
        plugins: ``(registered name, plugin)`` pairs whose saved states are checked by each
            plugin (``check_plugin_states``).
        source: the file, for the message.
    """
    try:
        if not isinstance(contents, dict):
            raise ValueError("expected a mapping of sections")
        for section in _SECTIONS:
            if section not in contents:
                raise ValueError(f"{section}: missing")
        _check_trainer(contents["trainer"], num_samples)
        expect_weights(contents["model"], "model", model)
        if not isinstance(contents["optimizer"], dict):
            raise ValueError(f"optimizer: expected a mapping, got {shown(contents['optimizer'])}")
        if optimizers is not None:
            _check_optimizers(contents, optimizers)
        if not isinstance(contents["metrics"], list) or not all(
            isinstance(m, dict) for m in contents["metrics"]
        ):
            raise ValueError(f"metrics: expected a list of mappings, got {shown(contents['metrics'])}")
        _check_random(contents["random"])
        _check_loader(contents["loader"], contents["trainer"])
        if not isinstance(contents["plugins"], dict):
            raise ValueError(f"plugins: expected a mapping, got {shown(contents['plugins'])}")
    except ValueError as error:
        raise CheckpointError(f"{source}: {error}") from None
    check_plugin_states(contents["plugins"], plugins, model=model, source=source)


def check_fits(contents: dict[str, Any], fit: dict[str, Any], source: Any) -> None:
    """Checks that ``contents`` was written by a fit of the same kind (``batch_size``,
    ``num_samples``, ``shuffle``, ``drop_last``), so that its position means the same batches.

    The one place that says whether a checkpoint can continue a fit; ``Trainer.fit`` and
    ``train --resume`` both ask it. Raises ``CheckpointError`` naming what differs.
    """
    state = {"source": "arrays", **contents.get("trainer", {})}
    fit = {"source": "arrays", **fit}
    theirs = {key: state.get(key) for key in fit if state.get(key) != fit[key]}
    if theirs:
        ours = {key: fit[key] for key in theirs}
        raise CheckpointError(
            f"cannot resume from {source}: it was written by a fit with {theirs}, this fit has {ours}"
        )


def _check_optimizers(contents: dict[str, Any], optimizers: Mapping[str, tuple[Any, Any]]) -> None:
    saved = contents.get("optimizers", {})
    if not isinstance(saved, dict):
        raise ValueError(f"optimizers: expected a mapping, got {shown(saved)}")
    held = sorted(name for name in optimizers if name != "optimizer")
    if sorted(saved) != held:
        raise ValueError(
            f"optimizers: the checkpoint holds the states of {sorted(saved)}, the model holds the "
            f"optimizers {held}"
        )
    for name, (optimizer, variables) in optimizers.items():
        section = "optimizer" if name == "optimizer" else f"optimizers.{name}"
        state = contents["optimizer"] if name == "optimizer" else saved[name]
        try:
            optimizer.check_state(state, variables)
        except (TypeError, ValueError) as error:
            raise ValueError(f"{section}: {_first_line(error)}") from None


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__
