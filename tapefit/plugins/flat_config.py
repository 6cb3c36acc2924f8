"""A run's config as one value per key path: what the tensorboard and mlflow plugins log as
hyperparameters. Not a plugin."""

from __future__ import annotations

from typing import Any

import numpy as np


def flatten_config(config: Any) -> dict[str, bool | str | float | int]:
    """One entry per key path: ``{"optimizer": {"lr": 0.1}, "plugins": [{"type": "x"}]}`` ->
    ``{"optimizer.lr": 0.1, "plugins.0.type": "x"}``. Lists are indexed, so each plugin's and
    metric's settings get their own column (a TensorBoard hparam, an MLflow param); other values
    than a number, string or bool become text, and ``None`` is left out."""
    flat: dict[str, bool | str | float | int] = {}
    stack: list[tuple[str, Any]] = [("", config)]
    while stack:
        key, value = stack.pop()
        if isinstance(value, dict) and value:
            children = [(f"{key}.{k}" if key else str(k), v) for k, v in value.items()]
        elif isinstance(value, (list, tuple)) and value:
            children = [(f"{key}.{i}" if key else str(i), v) for i, v in enumerate(value)]
        else:
            if isinstance(value, (bool, str, int, float)):
                flat[key] = value
            elif isinstance(value, np.generic):
                flat[key] = value.item()
            elif value is not None:
                flat[key] = str(value)  # an empty list or dict, or an object
            continue
        stack.extend(reversed(children))  # keys come out in the config's order
    return dict(flat)
