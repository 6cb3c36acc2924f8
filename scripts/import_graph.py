"""Prints tapefit's internal import graph and checks the layering rules of docs/architecture.md.

Run ``python scripts/import_graph.py`` (``--edges`` also prints every edge). Each rule is
reported on its own line, ``ok`` or the imports that break it; the exit status is 1 when any
rule is broken. The imports are read from the source with ``ast``, function-level ones too.

The rules:

1. Outside ``tapefit/plugins/``, only the trainer, the CLI and the package root import from
   ``tapefit.plugins``, and only the plugin machinery (``manager``, ``hookspecs``, the package).
2. No plugin module imports another plugin module (shared helpers that are not plugins,
   ``monitor`` and ``model_graph``, and the machinery may be imported).
3. The CLI imports no concrete plugin class (it reads plugins through documented attributes).
4. ``tapefit.core`` imports nothing of tapefit outside ``tapefit.core``.
5. The ladder of docs/architecture.md: ``core`` <- ``layers``, ``optimizers`` <- ``data``,
   ``checkpointing``, ``distributed``, ``models`` <- ``training``, ``plugins`` <- ``cli`` <- the public faces
   at the root; no import runs back up it.
6. The package root holds only the public faces (``__init__``, ``__main__``, ``linalg``,
   ``math``, ``nn``, ``utils``);
   everything else lives in a subpackage named for what it does.
7. ``tapefit.export`` (on the rung of ``data``: it reads ``core`` and ``layers``) is imported
   only by the CLI and by ``Module.export`` in ``tapefit.layers.module``, lazily, inside the
   method: an edge that runs up the ladder, allowed because it runs only when called.
8. ``tapefit.training`` is imported from below only by ``tapefit.layers.training_methods``
   (``model.compile`` and ``model.predict`` make a ``Trainer``), lazily, inside the methods.
"""

from __future__ import annotations

import argparse
import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1] / "tapefit"
MACHINERY = {"tapefit.plugins", "tapefit.plugins.manager", "tapefit.plugins.hookspecs"}
HELPERS = {"tapefit.plugins.monitor", "tapefit.plugins.model_graph", "tapefit.plugins.flat_config"}


LADDER = {
    "tapefit.core": 0,
    "tapefit.layers": 1,
    "tapefit.optimizers": 1,
    "tapefit.data": 2,
    "tapefit.checkpointing": 2,
    "tapefit.distributed": 2,
    "tapefit.models": 2,
    "tapefit.export": 2,
    "tapefit.training": 3,
    "tapefit.plugins": 3,
    "tapefit.cli": 4,
}
FACES = {"tapefit", "tapefit.__main__", "tapefit.linalg", "tapefit.math", "tapefit.nn", "tapefit.utils"}
# Who may import tapefit.export (Module.export imports it inside the method).
EXPORT_USERS = ("tapefit.layers.module", "tapefit.cli")
# The edges allowed to run up the ladder, each made inside a method (imported only when called).
UPWARD = {
    ("tapefit.layers.module", "tapefit.export"),
    ("tapefit.layers.training_methods", "tapefit.training"),
}


def rung(module: str) -> int:
    """The module's rung on the ladder (the public faces stand above every package)."""
    for package, level in LADDER.items():
        if module == package or module.startswith(package + "."):
            return level
    return len(LADDER)


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path) -> set[str]:
    """The tapefit modules ``path`` imports (``from a import b`` counts ``a.b`` when it is a module)."""
    found: set[str] = set()
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = module_name(path) if path.name == "__init__.py" else module_name(path).rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name.startswith("tapefit"))
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(
                    package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else [])
                )
            if not base.startswith("tapefit"):
                continue
            for alias in node.names:
                candidate = f"{base}.{alias.name}"
                if (ROOT.parent / Path(*candidate.split("."))).with_suffix(".py").exists() or (
                    ROOT.parent / Path(*candidate.split(".")) / "__init__.py"
                ).exists():
                    found.add(candidate)  # a submodule: the edge goes to it, not to its package
                elif alias.name != "__version__":  # the version string is data, not code
                    found.add(base)
    return found


def graph() -> dict[str, set[str]]:
    return {module_name(path): imports(path) for path in sorted(ROOT.rglob("*.py"))}


def check(edges: dict[str, set[str]]) -> dict[str, list[str]]:
    """Each rule's name with the imports that break it (empty: the rule holds)."""
    broken: dict[str, list[str]] = {
        "outside plugins/, only trainer, cli and the package root import the plugin machinery": [],
        "no plugin imports another plugin": [],
        "the CLI imports no concrete plugin class": [],
        "tapefit.core imports only tapefit.core": [],
        "no import runs back up the ladder (core, layers/optimizers, data/checkpointing/distributed/models, "
        "training/plugins, cli)": [],
        "the package root holds only the public faces": [],
        "only the CLI and Module.export (lazily) import tapefit.export": [],
    }
    rules = list(broken)
    for source, targets in edges.items():
        if rung(source) == len(LADDER) and source not in FACES:
            broken[rules[5]].append(source)
        in_plugins = source.startswith("tapefit.plugins")
        for target in sorted(targets):
            plugin_target = target.startswith("tapefit.plugins")
            if not in_plugins and plugin_target:
                allowed = source == "tapefit" or source.startswith(("tapefit.training", "tapefit.cli"))
                allowed = allowed and target in MACHINERY
                if not allowed:
                    broken[rules[0]].append(f"{source} -> {target}")
                if source.startswith("tapefit.cli") and target not in MACHINERY:
                    broken[rules[2]].append(f"{source} -> {target}")
            if in_plugins and plugin_target and source not in MACHINERY and target not in MACHINERY | HELPERS:
                if target != source:
                    broken[rules[1]].append(f"{source} -> {target}")
            if source.startswith("tapefit.core") and not target.startswith("tapefit.core"):
                broken[rules[3]].append(f"{source} -> {target}")
            to_export = target == "tapefit.export" or target.startswith("tapefit.export.")
            if to_export and not source.startswith(("tapefit.export", *EXPORT_USERS)):
                broken[rules[6]].append(f"{source} -> {target}")
            upward = (source, "tapefit.export" if to_export else target) in UPWARD
            if rung(target) > rung(source) and not upward:
                broken[rules[4]].append(f"{source} -> {target}")
    return broken


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--edges", action="store_true", help="print every import edge too")
    args = parser.parse_args(argv)
    edges = graph()
    if args.edges:
        for source, targets in edges.items():
            for target in sorted(targets):
                print(f"{source} -> {target}")
    failed = False
    for rule, breaks in check(edges).items():
        print(f"{'ok    ' if not breaks else 'BROKEN'} {rule}")
        for item in breaks:
            print(f"         {item}")
        failed = failed or bool(breaks)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
