"""The docs site cannot rot: it builds with ``--strict``, its reference documents exactly the
public names, and every Python block of ``docs/*.md`` runs (as ``tests/test_readme.py`` runs the
README's), unless an ``<!-- no-run: reason -->`` line just above it says why it cannot."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS_TOOLS = ("mkdocs", "material", "mkdocstrings", "mkdocstrings_handlers.python")
DOCS = ROOT / "docs"
BLOCK = re.compile(
    r"^(?:<!-- no-run: (?P<reason>[^>]*?) -->\n)?```(?P<lang>\w+)\n(?P<body>.*?)^```", re.S | re.M
)

spec = importlib.util.spec_from_file_location("gen_docs", ROOT / "scripts" / "gen_docs.py")
gen_docs = importlib.util.module_from_spec(spec)
spec.loader.exec_module(gen_docs)


def python_blocks(page: Path) -> list[tuple[int, str, str | None]]:
    """``(line, body, reason not to run)`` of each Python block of ``page``, in order."""
    text = page.read_text()
    return [
        (text.count("\n", 0, m.start("body")), m["body"], m["reason"])
        for m in BLOCK.finditer(text)
        if m["lang"] == "python"
    ]


PAGES = sorted(DOCS.glob("*.md")) + sorted((DOCS / "examples").glob("*.md"))

PRINTS = {
    "index.md": ["tp.Tensor(8.0, shape=(), dtype=float32)"],
    "tape.md": [
        "tp.Tensor(8.0, shape=(), dtype=float32)",
        "[<tp.Tensor shape=() dtype=float32 numpy=6.0>, None, None]",
        "[6.0, 6.0, 6.0]",
        "(3, 2) (2,)",
        "[  4.  32. 108.]",
        "108.0 108.0",
        "[<tp.Tensor shape=() dtype=float32 numpy=1.0>, None]",
    ],
    "models.md": [
        "True [(4, 16), (16,), (16, 2), (2,)]",
        "['accuracy', 'loss', 'val_accuracy', 'val_loss']",
        "(4, 2)",
        "['sequential/scaled/kernel', 'sequential/scaled/scale'] True",
        "[[1.5 1.5]]",
    ],
    "custom-steps.md": [
        "['loss', 'mae']",
        "['d_loss', 'g_loss', 'grad_global_norm']",
        "8 8",
        "['error']",
        "(5, 1)",
        "True",
        "ReturnsTheLoss.train_step returned Tensor; a step returns a dict of log values",
    ],
    "training.md": [
        "['accuracy', 'loss', 'val_accuracy', 'val_loss']",
        "['accuracy', 'loss']",
        "(2, 2)",
        "['loss']",
    ],
    "resuming.md": ["[0, 1, 2, 3]"],
    "plugins.md": ["True"],
    "getting-started.md": ["True", "(3, 2)"],
    "function.md": ["True"],
    "extending.md": ["[1. 0.]"],
    "coming-from-keras.md": ["True", "['accuracy', 'loss']"],
    "coming-from-lightning.md": ["True"],
}
"""What a page's blocks print, as its comments say (the README's tour was checked so)."""


def test_there_are_pages_with_python_blocks():
    assert {"index.md", "tape.md", "models.md", "training.md"} <= {p.name for p in PAGES}
    assert sum(len(python_blocks(p)) for p in PAGES) >= 20


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(DOCS)) for p in PAGES])
def test_python_blocks_run_in_order(page, tmp_path, monkeypatch, capsys):
    """A page's blocks run in one namespace, in order, in an empty folder of their own."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MPLBACKEND", "Agg")
    namespace: dict = {"__name__": "docs"}
    for line, body, reason in python_blocks(page):
        if reason is not None:
            assert reason.strip(), f"{page.name}:{line}: a no-run marker needs a reason"
            continue
        try:
            exec(compile(body, f"docs/{page.relative_to(DOCS)}:{line}", "exec"), namespace)
        except Exception as error:  # pragma: no cover - the message is the point
            pytest.fail(
                f"docs/{page.relative_to(DOCS)} python block at line {line} failed: {error!r}\n{body}"
            )
    printed = capsys.readouterr().out
    for expected in PRINTS.get(str(page.relative_to(DOCS)), []):
        assert expected in printed, f"docs/{page.name} does not print {expected!r}"


def test_no_run_markers_stand_only_above_python_blocks():
    """A marker anywhere else would skip nothing while looking as if it did."""
    for page in PAGES:
        text = page.read_text()
        markers = len(re.findall(r"<!-- no-run:", text))
        honoured = sum(1 for _, _, reason in python_blocks(page) if reason is not None)
        assert markers == honoured, f"docs/{page.name}: a no-run marker not just above a ```python block"


def test_the_reference_documents_every_public_name_once():
    import tapefit as tp

    pages = gen_docs.reference_pages()
    documented = gen_docs.documented_names(
        {f"{gen_docs.REFERENCE}/tp.md": pages[f"{gen_docs.REFERENCE}/tp.md"]}
    )
    assert len(documented) == len(tp.__all__)
    assert sorted(documented) == sorted(f"tapefit.{name}" for name in tp.__all__)
    for name, module in gen_docs.subpackages().items():
        page = pages[f"{gen_docs.REFERENCE}/{name}.md"]
        assert len(re.findall(r"^::: ", page, re.M)) == len(gen_docs.public_names(module)), name


def test_the_hooks_page_lists_every_hook():
    from tapefit.plugins import hookspecs

    page = gen_docs.hooks_page()
    names = [f.__name__ for f in gen_docs.hookspecs()]
    assert len(names) >= 13 and "on_save_point" in names
    specs = [n for n, v in vars(hookspecs).items() if hasattr(v, f"{hookspecs.PROJECT_NAME}_spec")]
    assert sorted(names) == sorted(specs)
    for name in names:
        assert f"::: tapefit.plugins.hookspecs.{name}\n" in page


def test_config_reference_lists_every_key_and_every_built_in_type():
    """Each section of the generated config reference names every key its types take, with a
    meaning for each (this was a test of the README's hand-written table)."""
    from tapefit.cli import app as cli
    from tapefit.cli import config
    from tapefit.plugins.manager import BUILTIN_PLUGINS

    page = gen_docs.config_page()
    sections = dict(re.findall(r"^## `(\w+)` \{ #\w+ \}\n(.*?)(?=^## |\Z)", page, re.M | re.S))
    assert list(sections) == list(config.TOP_LEVEL_KEYS)
    schema = cli.default_schema()
    missing: list[str] = []

    def need(section: str, keys, part: str | None = None) -> None:
        """Each key has a row with a meaning in the section (or in its type's part)."""
        text = sections[section]
        if part is not None:  # from the type's heading to the next heading
            text = text[text.index(part) :]
            text = text[: re.search(r"^#+ |\Z", text[1:], re.M).start() + 1]
        rows = dict(re.findall(r"^\| `(\w+)` \| [^|]* \| [^|]* \| (.*) \|$", text, re.M))
        where = f"{section} ({part})" if part else section
        missing.extend(f"{where}: {key}" for key in keys if key not in rows)
        missing.extend(
            f"{where}: {key} (no meaning)" for key in keys if key in rows and not rows[key].strip()
        )

    need("trainer", schema.trainer)
    sections_of = {"metric": "metrics", "schedule": "optimizer", "plugin": "plugins"}
    for label, kind in schema.kinds.items():
        section = sections_of.get(label, label)
        need(section, kind.common)
        for name in kind.builtins():
            if label == "plugin" and name not in BUILTIN_PLUGINS:
                continue  # an entry point of whatever else is installed
            part = f"{{ #{label}-{name} }}"
            assert part in sections[section], f"{section}: type {name}"
            target = config.find_target(kind, name, f"{label}.type")
            need(section, target.params, part)
    assert not missing, f"the config reference lacks: {', '.join(dict.fromkeys(missing))}"


@pytest.mark.slow
def test_the_site_builds_strict(tmp_path):
    """Broken links, unknown references and docstrings griffe cannot read fail the build."""
    missing = [name for name in DOCS_TOOLS if importlib.util.find_spec(name) is None]
    if missing:
        pytest.skip(f'the docs tools are not installed ({", ".join(missing)}): pip install -e ".[docs]"')
    site = build_site(tmp_path / "site")
    html = (site / "reference" / "tp" / "index.html").read_text()
    import tapefit as tp

    ids = set(re.findall(r'id="(tapefit\.\w+)"', html))
    assert ids == {f"tapefit.{name}" for name in tp.__all__}  # one entry per public name
    assert (site / "reference" / "config" / "index.html").exists()
    assert "on_save_point" in (site / "reference" / "hooks" / "index.html").read_text()
    performance = (site / "performance" / "index.html").read_text()
    assert "generated: benchmarks" not in performance and performance.count("<table>") >= 1
    assert "PyTorch" in performance and "Xeon" in performance


def build_site(out: Path) -> Path:
    """Builds the site into ``out`` with ``mkdocs build --strict``; fails with its output."""
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        env={**__import__("os").environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-5000:]
    return out


def test_the_performance_page_gets_the_benchmark_tables():
    page = (DOCS / "performance.md").read_text()
    assert gen_docs.BENCHMARKS_MARK in page
    rendered = gen_docs.on_page_markdown(page, None, None, None)
    assert gen_docs.BENCHMARKS_MARK not in rendered
    assert gen_docs.benchmark_tables() in rendered and "| --- |" in gen_docs.benchmark_tables()
    assert "PyTorch" in gen_docs.benchmark_tables() and "Xeon" in gen_docs.benchmark_tables()


# What belongs in commit messages and the changelog, not in pages a user reads.
WORK_NOTES = re.compile(
    r"\bissue \d+|\bissues? #\d+|\bcommit [0-9a-f]{7,40}\b|\b[0-9a-f]{7}\.\.[0-9a-f]{7}\b"
    r"|\bthis (?:session|round)\b|\bwork notes\b|\bDESIGN\.md\b|\bAPI\.md\b",
    re.IGNORECASE,
)


def test_user_facing_docs_carry_no_issue_numbers_hashes_or_work_history():
    texts = {str(path.relative_to(ROOT)): path.read_text() for path in sorted(DOCS.rglob("*.md"))}
    texts["README.md"] = (ROOT / "README.md").read_text()
    texts["the performance page's tables"] = gen_docs.benchmark_tables()
    for path in sorted((ROOT / "tapefit").rglob("*.py")):  # docstrings are the API reference
        texts[str(path.relative_to(ROOT))] = path.read_text()
    found = [f"{name}: {m.group(0)!r}" for name, text in texts.items() for m in WORK_NOTES.finditer(text)]
    assert found == []


def test_the_readme_links_into_pages_that_exist():
    links = re.findall(r"\]\((docs/[^)#]+)", (ROOT / "README.md").read_text())
    assert len(links) >= 10
    assert [link for link in links if not (ROOT / link).is_file()] == []
