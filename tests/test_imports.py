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
