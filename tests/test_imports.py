"""The subpackages users see at the top (``tp.losses``) import by their dotted names too."""

from __future__ import annotations

import importlib

import pytest

import tapefit as tp


@pytest.mark.parametrize(
    "name",
    ["activations", "initializers", "losses", "math", "metrics", "nn", "random", "regularizers", "testing"],
)
def test_dotted_import_gives_the_module_behind_the_attribute(name):
    assert importlib.import_module(f"tapefit.{name}") is getattr(tp, name)


def test_all_is_the_public_api_and_tab_completion_shows_only_it():
    assert len(tp.__all__) == len(set(tp.__all__))
    assert all(hasattr(tp, name) for name in tp.__all__)
    for internal in ("cli", "core", "distributed", "training", "world", "train_state", "resume", "config"):
        assert internal not in tp.__all__ and internal not in dir(tp)
    assert {"Trainer", "Module", "GradientTape", "layers", "plugins", "checkpointing", "data"} <= set(
        tp.__all__
    )
    assert dir(tp) == sorted([*tp.__all__, "__version__"])
