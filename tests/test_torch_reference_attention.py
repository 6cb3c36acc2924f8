"""scripts/torch_reference_attention.py: it reproduces the saved PyTorch references, and its
comparison names what differs."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "torch_reference_attention.py"
spec = importlib.util.spec_from_file_location("torch_reference_attention", SCRIPT)
torch_reference = importlib.util.module_from_spec(spec)
spec.loader.exec_module(torch_reference)


def test_the_script_reproduces_the_saved_file(capsys):
    pytest.importorskip("torch")
    assert torch_reference.main(["--check"]) == 0, capsys.readouterr().out
    assert "reproduced" in capsys.readouterr().out


def test_the_saved_file_is_small_and_has_every_case():
    assert torch_reference.PATH.stat().st_size < 80_000
    with np.load(torch_reference.PATH, allow_pickle=False) as saved:
        prefixes = {key.split("/")[0] for key in saved.files}
    cases = {f"conv2d_{n}" for n in range(len(torch_reference.CONV2D))}
    cases |= {f"conv1d_{n}" for n in range(len(torch_reference.CONV1D))}
    assert prefixes == {"mha", "mha_none", "mha_causal", "mha_padding", "conv2d", "conv1d"} | cases


def test_the_comparison_names_every_difference(tmp_path):
    computed = {
        "a/x": np.ones(3, np.float32),
        "a/output": np.ones(2, np.float32),
        "a/d_x": np.ones(3, np.float32),
        "a/gone": np.ones(1, np.float32),
    }
    saved = {
        "a/x": np.array([1, 1, 2], np.float32),  # an input: must be equal
        "a/output": np.ones(2, np.float32) + 1e-8,  # PyTorch's result: rounding is fine
        "a/d_x": np.ones(3, np.float32) + 1e-3,
        "a/extra": np.ones(1, np.float32),
    }
    np.savez(tmp_path / "saved.npz", **saved)
    with np.load(tmp_path / "saved.npz") as file:
        problems = torch_reference.compare(computed, file)
    assert problems == [
        "a/gone: missing",
        "a/extra: unexpected",
        "a/d_x: differs by up to 0.001",
        "a/x: differs",
    ]
