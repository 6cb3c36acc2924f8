"""The examples gallery: every example trains at its tiny size and prints what its page says;
every example has a page, a picture that is valid SVG, an entry in the nav and a card in the
gallery's index (``scripts/gallery.py`` lists them and redraws the pictures)."""

from __future__ import annotations

import importlib.util
import json
import math
import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = ROOT / "docs" / "examples"

spec = importlib.util.spec_from_file_location("gallery", ROOT / "scripts" / "gallery.py")
gallery = importlib.util.module_from_spec(spec)
spec.loader.exec_module(gallery)
NAMES = list(gallery.GALLERY)
sys.path.insert(0, str(ROOT))  # the examples package, as python -m examples.<name> finds it

FLOAT = r"(\d+\.\d+)"
PRINTS = {
    "digits_cnn": rf"validation accuracy {FLOAT} after \d+ epochs",
    "text_lstm": rf"validation accuracy {FLOAT} \(chance 0\.5\)",
    "char_lm": rf"validation loss {FLOAT} nats per character \(uniform: {FLOAT}\)",
    "timeseries_gru": rf"validation mae {FLOAT}; the last value as forecast: {FLOAT}",
    "gan": rf"sample gap {FLOAT} before training, {FLOAT} after",
    "vae": rf"validation loss {FLOAT} nats per image \(from {FLOAT}\)",
    "multi_input": rf"validation mae {FLOAT}; the mean price as forecast: {FLOAT}",
    "custom_loop": rf"validation accuracy {FLOAT} \(chance 0\.5\)",
}
"""The line each example prints last (or, for char_lm, before its sample), as its page quotes it."""


def learned(name: str, history: dict[str, list[float]], numbers: list[float]) -> None:
    """Fails unless the tiny run learned: a loss fell, and a metric beat chance or a baseline."""
    if name in ("digits_cnn", "text_lstm", "custom_loop"):
        chance = 0.1 if name == "digits_cnn" else 0.5
        assert history["val_accuracy"][-1] > chance + 0.3, history["val_accuracy"]
    elif name in ("timeseries_gru", "multi_input", "char_lm"):
        assert numbers[0] < numbers[1], numbers  # below the baseline or the uniform guess
    elif name == "gan":
        assert numbers[1] < numbers[0], numbers  # the samples came nearer to the data
    elif name == "vae":
        assert numbers[0] < 0.9 * numbers[1], numbers
    if name != "gan":  # a GAN's two losses trade; its sample gap is the measure (above)
        losses = history["val_loss" if "val_loss" in history else "loss"]
        assert losses[-1] < losses[0], losses


@pytest.mark.parametrize("name", NAMES)
def test_each_example_trains_at_its_tiny_size(name, capsys):
    history = gallery.entry(name)(tiny=True)
    printed = capsys.readouterr().out
    assert history and all(len(v) >= 2 and all(math.isfinite(x) for x in v) for v in history.values())
    match = re.search(PRINTS[name], printed)
    assert match, printed
    learned(name, history, [float(n) for n in match.groups()])
    if name == "char_lm":
        assert printed[match.end() :].lstrip("\n").startswith("def ")  # then a sample of its text


def test_an_example_runs_as_a_module(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    result = subprocess.run(
        [sys.executable, "-m", "examples.multi_input", "--tiny"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert re.search(PRINTS["multi_input"], result.stdout), result.stdout


@pytest.mark.parametrize("name", NAMES)
def test_each_example_has_a_page_with_its_picture(name):
    page = (PAGES / f"{name}.md").read_text()
    assert f"python -m examples.{name}" in page
    assert f"]({name}.svg)" in page  # the picture is embedded
    sections = re.findall(r'--8<-- "([^"]*)"', page)
    assert sections, f"{name}.md quotes no code from its file"
    for quoted in sections:  # each a marked section of the example's own file
        path, _, section = quoted.partition(":")
        assert path == f"examples/{name}.py" and re.fullmatch(r"\w+", section), quoted
        assert f"# --8<-- [start:{section}]" in (ROOT / "examples" / f"{name}.py").read_text()
    quoted = re.findall(r"`([^`]*\d\.\d+[^`]*)`", page)
    for line in quoted:  # a printed line the page quotes has the shape the example prints
        if line.startswith(("validation", "sample gap")):
            assert re.fullmatch(PRINTS[name], line), line
    svg = ET.parse(PAGES / f"{name}.svg").getroot()
    assert svg.tag == "{http://www.w3.org/2000/svg}svg"
    assert len(svg.findall("{http://www.w3.org/2000/svg}polyline")) >= 2
    assert name in json.loads((PAGES / "results.json").read_text())


def test_the_gallery_index_and_the_nav_list_every_example():
    index = (PAGES / "index.md").read_text()
    nav = (ROOT / "mkdocs.yml").read_text()
    assert sorted(p.stem for p in PAGES.glob("*.md") if p.stem != "index") == sorted(NAMES)
    for name in NAMES:
        assert f"]({name}.md)" in index and f"]({name}.svg)" in index, name
        assert f"examples/{name}.md" in nav, name
    assert index.index("digits_cnn.md") < index.index("custom_loop.md")  # the gallery's order


def test_training_curves_are_drawn_from_a_history():
    from examples._plot import training_curves

    svg = training_curves(
        {"loss": [2.0, 1.0, 0.5], "val_loss": [2.1, 1.2, 0.9], "accuracy": [0.3, 0.6, 0.9]}, "t"
    )
    root = ET.fromstring(svg)
    lines = root.findall("{http://www.w3.org/2000/svg}polyline")
    assert len(lines) == 3 and root.get("width") == "640"  # two panels: the losses, then accuracy
    assert training_curves({"loss": [1.0, 0.5]}, "t") == training_curves({"loss": [1.0, 0.5]}, "t")
