"""The benchmark suite runs, and its lean NumPy reference computes what tapefit computes."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np

import tapefit as tp

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from suite import Floor, LeanMLP, init_params, tapefit_mlp  # noqa: E402


def test_the_lean_mlp_gives_tapefits_loss_and_gradients():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((16, 784), dtype=np.float32)
    y = rng.integers(0, 10, 16)
    params = init_params(seed=1)
    lean = LeanMLP([p.copy() for p in params], 16)
    loss = lean.gradients(x, y)
    model, loss_fn, _ = tapefit_mlp(params)
    with tp.GradientTape() as tape:
        expected = loss_fn(tp.constant(y), model(tp.constant(x)))
    grads = tape.gradient(expected, model.trainable_variables)
    np.testing.assert_allclose(loss, float(expected), rtol=1e-5)
    for mine, theirs in zip(lean.grads, grads, strict=True):  # different call shapes: a tolerance
        np.testing.assert_allclose(mine, theirs.numpy(), rtol=1e-4, atol=1e-6)
    before = [p.copy() for p in lean.params]
    lean.step(x, y)
    for after, start, grad in zip(lean.params, before, lean.grads):
        np.testing.assert_allclose(after, start - grad, rtol=1e-6, atol=1e-7)  # grads hold lr * g
    Floor(params, 16).step(x, y)  # the matmuls alone run on the same shapes


def test_python_m_benchmarks_quick_writes_the_table_and_json(tmp_path):
    out = tmp_path / "results.json"
    result = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--quick", "--json", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "OPENBLAS_NUM_THREADS": "1"},
    )
    assert result.returncode == 0, result.stderr
    assert "| MLP step, batch 32 |" in result.stdout and "eager/lean" in result.stdout
    figures = json.loads(out.read_text())
    names = [row["name"] for row in figures["rows"]]
    assert names[:3] == ["op, no tape (per op)", "op, recorded + backward (per op)", "MLP step, batch 32"]
    assert all(value > 0 for row in figures["rows"] for value in row["ratios"].values())
    assert figures["machine"]["numpy"] == np.__version__


def test_the_step_profile_names_tapefits_parts(tmp_path):
    result = subprocess.run(
        [sys.executable, "benchmarks/profile_step.py", "--batch", "4", "--calls", "3", "--top", "3"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "OPENBLAS_NUM_THREADS": "1"},
    )
    assert result.returncode == 0, result.stderr
    assert "eager MLP step, batch 4" in result.stdout
    assert "tapefit/core/record" in result.stdout and "tapefit/core/tape" in result.stdout
