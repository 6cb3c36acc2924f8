"""The layering rules of docs/architecture.md, checked by scripts/import_graph.py on the real source."""

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
        [],
    ]


def test_only_the_cli_and_module_export_import_the_export_package():
    edges = {
        "tapefit.layers.module": {"tapefit.export"},  # Module.export, inside the method
        "tapefit.cli.app": {"tapefit.export.onnx_graph"},
        "tapefit.export.onnx_graph": {"tapefit.export.trace", "tapefit.layers.module", "tapefit.core.tensor"},
        "tapefit.training.trainer": {"tapefit.export"},
        "tapefit.layers.core": {"tapefit.export.trace"},
    }
    broken = import_graph.check(edges)
    rules = list(broken)
    assert broken[rules[6]] == [
        "tapefit.training.trainer -> tapefit.export",
        "tapefit.layers.core -> tapefit.export.trace",
    ]
    assert broken[rules[4]] == ["tapefit.layers.core -> tapefit.export.trace"]
    assert not broken[rules[5]]  # export is a subpackage on the ladder, not a stray root module
