"""The char-level Transformer example: its data, its config under train, and generation."""

import csv
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import tapefit as tp

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from examples import char_lm  # noqa: E402


def test_windows_and_their_next_characters():
    x, y = char_lm.load_text(context=16, stride=8, limit=2000)
    assert x.shape == y.shape and x.shape[1] == 16 and x.dtype == np.int64
    np.testing.assert_array_equal(x[:, 1:], y[:, :-1])  # the target is the window one step later
    text = "".join(char_lm.vocabulary()[i] for i in x[0])
    assert text == char_lm.corpus()[:16]


def test_the_config_trains_and_the_weights_generate(tmp_path, capsys):
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    # 4 epochs of 6 steps, the warmup and decay shortened to fit them: the smallest run whose
    # loss falls clearly (validation loss 4.30 -> 3.59, chance ln(100) = 4.6; ~2-7 s)
    result = subprocess.run(
        [sys.executable, "-m", "tapefit", "train", "--config", "configs/char_lm.yaml",
         "--set", "data.limit=3000", "--set", "trainer.epochs=4", "--set", "model.width=16",
         "--set", "model.heads=2", "--set", "optimizer.learning_rate.warmup_steps=6",
         "--set", "optimizer.learning_rate.decay_steps=60",
         "--set", f"trainer.output_dir={tmp_path / 'run'}"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "RuntimeWarning" not in result.stderr  # the compiled step was not given up for eager
    with open(tmp_path / "run" / "history.csv", newline="") as file:
        val_loss = [float(row["val_loss"]) for row in csv.DictReader(file)]
    assert len(val_loss) == 4 and val_loss[-1] < 0.9 * val_loss[0], val_loss  # the model learns
    weights = tmp_path / "run" / "model.safetensors"
    char_lm.main(
        [
            "generate",
            "--weights",
            str(weights),
            "--prompt",
            "def ",
            "--length",
            "30",
            "--width",
            "16",
            "--heads",
            "2",
        ]
    )
    assert capsys.readouterr().out.startswith("def ")
    model = char_lm.CharTransformer(context=64, width=16, heads=2, blocks=2)
    model(tp.constant(np.zeros((1, 64), np.int64)))
    model.load_weights(weights)
    text = char_lm.generate(model, "def ", length=30)
    assert len(text) == 34 and set(text) <= set(char_lm.vocabulary())


def test_a_prompt_with_unknown_characters_is_refused():
    tp.random.set_seed(0)
    model = char_lm.CharTransformer(context=8, width=8, heads=2, blocks=1)
    with pytest.raises(ValueError, match="characters the model never saw"):
        char_lm.generate(model, "\u00e9t\u00e9", length=1)
