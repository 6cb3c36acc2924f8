"""The layering rules of DESIGN.md, checked by scripts/import_graph.py on the real source."""

from __future__ import annotations

import importlib.util
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "import_graph.py"
spec = importlib.util.spec_from_file_location("import_graph", SCRIPT)
import_graph = importlib.util.module_from_spec(spec)
spec.loader.exec_module(import_graph)


def test_the_source_keeps_every_layering_rule():
    edges = import_graph.graph()
    assert (
        "tapefit.plugins.manager" in edges["tapefit.training.trainer"]
    )  # the graph is read, function imports too
    assert "tapefit.checkpointing" in edges["tapefit.cli.app"]
    broken = import_graph.check(edges)
    assert all(not items for items in broken.values()), broken


def test_each_rule_catches_what_it_forbids():
    edges = {
        "tapefit.layers.module": {"tapefit.plugins.manager"},
        "tapefit.plugins.csv_logger": {"tapefit.plugins.checkpoint", "tapefit.plugins.monitor"},
        "tapefit.cli.app": {"tapefit.plugins.terminate_on_nan", "tapefit.plugins.manager"},
        "tapefit.core.tape": {"tapefit.layers"},
        "tapefit.data.loader": {"tapefit.training.trainer", "tapefit.layers.module"},
        "tapefit.trainer": set(),
    }
    broken = list(import_graph.check(edges).values())
    assert broken == [
        [
            "tapefit.layers.module -> tapefit.plugins.manager",
            "tapefit.cli.app -> tapefit.plugins.terminate_on_nan",
        ],
        ["tapefit.plugins.csv_logger -> tapefit.plugins.checkpoint"],
        ["tapefit.cli.app -> tapefit.plugins.terminate_on_nan"],
        ["tapefit.core.tape -> tapefit.layers"],
        [
            "tapefit.layers.module -> tapefit.plugins.manager",
            "tapefit.core.tape -> tapefit.layers",
            "tapefit.data.loader -> tapefit.training.trainer",
        ],
        ["tapefit.trainer"],
    ]
