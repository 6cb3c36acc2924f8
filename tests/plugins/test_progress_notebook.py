"""A fit in a Jupyter notebook prints cleanly, with or without ipywidgets (run by nbclient)."""

from __future__ import annotations

import json
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

REPO = Path(__file__).resolve().parents[2]
EPOCHS = 3

SETUP = f"""\
import sys
sys.path.insert(0, {str(REPO)!r})
import numpy as np
import tapefit as tp

rng = np.random.default_rng(0)
x = rng.normal(size=(40, 4)).astype(np.float32)
y = (x[:, 0] > 0).astype(np.int64)
model = tp.layers.Sequential([tp.layers.Dense(8, activation="relu"), tp.layers.Dense(2)])
model.compile("adam", tp.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])
"""

FIT = f"history = model.fit(x, y, epochs={EPOCHS}, batch_size=8, validation_split=0.25)"


def run_notebook(tmp_path, widgets):
    cells = [] if widgets else ['import sys\nsys.modules["ipywidgets"] = None  # as if not installed']
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in [*cells, SETUP, FIT]])
    client = NotebookClient(
        notebook, timeout=60, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    )
    client.execute()
    return notebook


@pytest.mark.parametrize("widgets", [False, True], ids=["without-ipywidgets", "with-ipywidgets"])
def test_fit_prints_every_epoch_without_stderr_or_warnings(tmp_path, widgets):
    notebook = run_notebook(tmp_path, widgets)
    outputs = [output for cell in notebook.cells for output in cell.outputs]
    assert [o for o in outputs if o.output_type == "stream" and o.name == "stderr"] == []
    text = "".join(o.get("text", "") for o in outputs if o.output_type == "stream")
    if widgets:
        assert any("application/vnd.jupyter.widget-view+json" in o.get("data", {}) for o in outputs)
        state = notebook.metadata["widgets"]["application/vnd.jupyter.widget-state+json"]["state"]
        # the bars' text lives in their widgets' state, with figure spaces for spaces
        text += json.dumps(state, ensure_ascii=False).replace("\u2007", " ")
    else:
        assert not any("application/vnd.jupyter.widget-view+json" in o.get("data", {}) for o in outputs)
    assert "TqdmWarning" not in text and "IProgress" not in text
    for epoch in range(1, EPOCHS + 1):
        assert f"Epoch {epoch}/{EPOCHS}" in text
    assert text.count("val_accuracy") >= EPOCHS
    assert text.count("val_loss") >= EPOCHS
