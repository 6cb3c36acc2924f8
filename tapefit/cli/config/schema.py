"""The schema of a config: its sections, the ``trainer`` section derived from ``Trainer``, and ``resolve_config``."""

from __future__ import annotations

import inspect
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from tapefit.cli.config.checking import (
    Kind,
    Param,
    check_list,
    check_mapping,
    check_typed,
    find_target,
    signature_params,
    unknown_key,
)
from tapefit.cli.config.loading import TOP_LEVEL_KEYS, ConfigError
from tapefit.core.files import not_regular


def _at_least(low: float) -> Callable[[Any], str | None]:
    return lambda v: None if v >= low else f"must be at least {low}"


def _check_name(v: str) -> str | None:
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", v) or v in (".", ".."):
        return "must be a folder name of letters, digits, '.', '_' and '-'"
    return None


def _check_split(v: float) -> str | None:
    return None if 0.0 <= v < 1.0 else "must be in [0, 1)"


def _check_file(v: str) -> str | None:
    try:
        kind = not_regular(os.stat(v).st_mode)
    except (OSError, ValueError):
        return f"file {v!r} does not exist"
    return None if kind is None else f"{v!r} is {kind}, not a regular file"


def _check_threads(v: Any) -> str | None:
    if v is None or v == "auto" or (isinstance(v, int) and not isinstance(v, bool) and v >= 1):
        return None
    return "must be auto, null or a whole number >= 1"


_NOT_TRAINER_KEYS = (
    "self",
    "x",
    "y",
    "validation_data",
    "resume_from",
    "initial_epoch",
    "sample_weight",
    "class_weight",
    "validation_split",
    "model",
    "optimizer",
    "loss",
    "loss_weights",
    "metrics",
    "weighted_metrics",
    "plugins",
    "config",
    "callbacks",
)
"""``fit``'s and ``Trainer``'s arguments that other sections or the command itself give (or,
as ``loss_weights`` for a model with several outputs, that a config's one loss has no use for,
and ``weighted_metrics``, which a config's data, without sample weights, has no use for)."""


def trainer_params() -> dict[str, Param]:
    """The ``trainer`` section, derived as every other section is: ``Trainer.fit``'s arguments
    that are not data (``epochs``, ``batch_size``, ``shuffle``, ``drop_last``, ``verbose``,
    ``steps_per_epoch``, ``validation_steps``) and ``Trainer``'s own (``output_dir``,
    ``compile``, ``threads``), with their defaults, checked by the trainer's own rules."""
    from tapefit.training.trainer import FIT_RULES, Trainer

    fit, _ = signature_params(Trainer.fit, skip=_NOT_TRAINER_KEYS)
    init, _ = signature_params(Trainer, skip=_NOT_TRAINER_KEYS)
    params = {**fit, **init}
    for name, param in params.items():
        param.check = FIT_RULES.get(name, _check_threads if name == "threads" else None)
    params["output_dir"].annotation = str | None  # a config names a folder by a string
    return params


DATA_COMMON: dict[str, Param] = {
    "validation_split": Param("validation_split", 0.2, float, _check_split),
    "standardize": Param("standardize", False, bool),
    "seed": Param("seed", None, int | None),
    "workers": Param("workers", 0, int, _at_least(0)),
    "prefetch": Param("prefetch", 2, int, _at_least(1)),
    "map": Param("map", None, str | None),
}
"""Keys every data type takes: the held-out share, standardization, the split's seed, and the
worker processes, batches read ahead and per-sample function of a ``tp.data.Pipeline``."""


@dataclass
class Schema:
    """Everything ``resolve_config`` needs to know about the sections' types.

    Attributes:
        kinds: The typed sections by label: ``data``, ``model``, ``loss``, ``metric``,
            ``optimizer``, ``schedule``, ``plugin``.
        trainer: The keys of the ``trainer`` section.
        default_optimizer: The optimizer when the config has none, or an ``optimizer`` section
            with no ``type`` (``--set optimizer.learning_rate=...`` on a config without one).
    """

    kinds: dict[str, Kind]
    trainer: dict[str, Param] = field(default_factory=trainer_params)
    default_optimizer: str = "rmsprop"


def _default_type(section: Any, default: str) -> Any:
    if section is None:
        return default
    if isinstance(section, Mapping) and "type" not in section:
        return {"type": default, **section}
    return section


def has_own_train_step(obj: Any) -> bool:
    """Whether what a ``model.type`` names is a ``tp.Module`` class that overrides ``train_step``
    (a function that builds a model cannot be told before it is called: ``False``)."""
    from tapefit.layers import Module

    return inspect.isclass(obj) and issubclass(obj, Module) and obj.train_step is not Module.train_step


def _loss_needed(model_type: str, model: Any) -> str:
    """Why a config whose model trains with the default step must give a loss, in words."""
    if ":" in model_type and not inspect.isclass(model):  # a user's function; built-ins are known
        return (
            f"model.type {model_type!r} is a function, and train cannot know before calling it whether its "
            "model has its own train_step, so it trains with the default step, which needs a loss; name the "
            "model's class in model.type when the class overrides train_step"
        )
    return (
        f"model.type {model_type!r} trains with the default step, which needs a loss; only a model whose "
        "class overrides train_step may leave it out"
    )


def resolve_config(config: Mapping[str, Any], schema: Schema, default_name: str = "run") -> dict[str, Any]:
    """Validates a config and returns it resolved: defaults filled in, shorthands expanded.

    Nothing is built and nothing is written; files named by ``data.path`` must exist and
    import paths must import.

    Args:
        config: The config as loaded (and overridden).
        schema: The sections' types.
        default_name: The run's name when the config has none (the config file's stem).

    Returns:
        The resolved config, keys in the order of ``TOP_LEVEL_KEYS``.

    Raises:
        ConfigError: For the first problem found, naming its key path.
    """
    for name in config:
        if name not in TOP_LEVEL_KEYS:
            raise unknown_key(name, TOP_LEVEL_KEYS, "", "a config")
    top: dict[str, Param] = {
        "name": Param("name", default_name, str, _check_name),
        "seed": Param("seed", 0, int),
    }
    for key in ("data", "model"):
        if key not in config:
            raise ConfigError(f"{key}: missing required key (a config needs data and model)", key)
    resolved: dict[str, Any] = check_mapping({k: config[k] for k in top if k in config}, top, "", "a config")
    kinds = schema.kinds
    resolved["data"] = check_typed(config["data"], kinds["data"], "data", kinds)
    for name, value in resolved["data"].items():
        if name == "path" and isinstance(value, str):
            # npy data may be a folder (x.npy and y.npy, or folders of shards)
            problem = (
                None if resolved["data"]["type"] == "npy" and os.path.isdir(value) else _check_file(value)
            )
            if problem:
                raise ConfigError(f"data.path: {problem}", "data.path")
    if resolved["data"].get("seed") is None:
        resolved["data"]["seed"] = resolved["seed"]
    resolved["model"] = check_typed(config["model"], kinds["model"], "model", kinds)
    model = find_target(kinds["model"], resolved["model"]["type"], "model.type").obj
    own_step = has_own_train_step(model)
    if config.get("loss") is not None:
        resolved["loss"] = check_typed(config["loss"], kinds["loss"], "loss", kinds)
    elif own_step:
        resolved["loss"] = None  # the model's train_step computes its own losses
    else:
        what = "missing required key" if "loss" not in config else "is null"
        raise ConfigError(f"loss: {what} ({_loss_needed(resolved['model']['type'], model)})", "loss")
    resolved["metrics"] = check_list(config.get("metrics"), kinds["metric"], "metrics", kinds)
    optimizer = config.get("optimizer")
    if optimizer is None and own_step:
        resolved["optimizer"] = None  # the model's train_step uses optimizers of its own
    else:
        if own_step and isinstance(optimizer, Mapping) and "type" not in optimizer:
            keys = ", ".join(f"optimizer.{k}" for k in optimizer) or "optimizer"
            raise ConfigError(
                f"optimizer.type: missing required key ({keys} given, but the config has no optimizer: "
                f"model.type {resolved['model']['type']!r} trains with its own train_step and optimizers; "
                "set the model's own keys, or give optimizer.type for an optimizer of the trainer)",
                "optimizer.type",
            )
        resolved["optimizer"] = check_typed(
            _default_type(optimizer, schema.default_optimizer), kinds["optimizer"], "optimizer", kinds
        )
    resolved["trainer"] = check_mapping(config.get("trainer") or {}, schema.trainer, "trainer", "trainer")
    resolved["plugins"] = check_list(config.get("plugins"), kinds["plugin"], "plugins", kinds)
    return resolved
