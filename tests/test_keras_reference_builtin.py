"""scripts/keras_reference_builtin.py: its saved file is small and has every case; with Keras
installed, it reproduces the file."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "keras_reference_builtin.py"
spec = importlib.util.spec_from_file_location("keras_reference_builtin", SCRIPT)
keras_reference = importlib.util.module_from_spec(spec)
spec.loader.exec_module(keras_reference)


def test_the_saved_file_is_small_and_has_every_case():
    assert keras_reference.PATH.stat().st_size < 450_000
    with np.load(keras_reference.PATH, allow_pickle=False) as saved:
        cases = {key.split("/")[0] for key in saved.files}
        keys = set(saved.files)
    assert cases == set(keras_reference.CASES)
    assert {
        "callback_events/events",
        "model_checkpoint/saved_epochs",
        "weighted_metrics/evaluate/loss",
    } <= keys


def test_the_comparison_names_every_difference():
    a = {"x": np.ones(2, np.float32), "e": np.asarray(["a:0:", "b:1:loss"]), "z": np.ones(3, np.float32)}
    b = {
        "x": np.full(2, 2.0, np.float32),
        "e": np.asarray(["a:0:", "b:1:"]),
        "z": np.ones(2, np.float32),
        "w": a["x"],
    }
    assert keras_reference.compare(a, b) == [
        "extra: w",
        "e: differs",
        "x: differs by 1",
        "z: shape (3,) against (2,)",
    ]
    assert keras_reference.compare(a, a) == []


def test_the_script_reproduces_the_saved_file(capsys):
    pytest.importorskip("tensorflow")
    pytest.importorskip("keras")
    assert keras_reference.main(["--check"]) == 0, capsys.readouterr().out
