"""Runs every example of the gallery at its documented size and redraws its page's picture.

``python scripts/gallery.py`` writes ``docs/examples/<name>.svg`` (the training curves) and
``docs/examples/results.json`` (each example's last value of every series), which the pages
quote. ``python scripts/gallery.py gan vae`` runs only those. Each example also runs as
``python -m examples.<name>``; ``tests/test_examples.py`` runs them all at a tiny size.
"""

from __future__ import annotations

import importlib
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "docs" / "examples"

GALLERY: dict[str, tuple[str, str]] = {
    # name (the module, the page and the picture): (its title, the function taking tiny=)
    "digits_cnn": ("Image classification with a CNN", "main"),
    "text_lstm": ("Text classification with an LSTM and masking", "main"),
    "char_lm": ("A character-level language model", "train"),
    "timeseries_gru": ("Time-series forecasting with a GRU", "main"),
    "gan": ("A GAN with its own train_step", "main"),
    "vae": ("A variational autoencoder with add_loss", "main"),
    "multi_input": ("A functional model with two inputs", "main"),
    "custom_loop": ("A custom training loop with tp.function", "main"),
}
"""The examples, in the order the gallery shows them."""


def entry(name: str) -> Callable[..., dict[str, list[float]]]:
    """The function that trains example ``name`` and returns its per-epoch history."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    return getattr(importlib.import_module(f"examples.{name}"), GALLERY[name][1])


def main(names: list[str]) -> None:
    from examples._plot import training_curves

    results_file = OUT / "results.json"
    results = json.loads(results_file.read_text()) if results_file.exists() else {}
    for name in names or list(GALLERY):
        start = time.perf_counter()
        history = entry(name)(tiny=False)
        seconds = time.perf_counter() - start
        (OUT / f"{name}.svg").write_text(training_curves(history, GALLERY[name][0]))
        results[name] = {
            "epochs": max(len(values) for values in history.values()),
            **{key: round(values[-1], 4) for key, values in history.items()},
        }
        print(f"{name}: {results[name]} ({seconds:.0f} s)", flush=True)
    ordered = {name: results[name] for name in GALLERY if name in results}
    results_file.write_text(json.dumps(ordered, indent=2) + "\n")


if __name__ == "__main__":
    main(sys.argv[1:])
