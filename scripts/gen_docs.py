"""Writes the docs' generated pages: the API reference, the hooks and the config reference.

MkDocs runs this file as a hook (``hooks:`` in ``mkdocs.yml``): ``on_files`` adds the pages to
the build, so they exist only in the built site and cannot drift from the code they are read
from. ``python scripts/gen_docs.py OUT`` writes them into the folder ``OUT`` to read as text.

- The API reference has one page per public namespace: ``tp`` itself (every name of
  ``tp.__all__``) and each public subpackage (its ``__all__``, or for ``tp.nn`` and ``tp.math``,
  which re-export the ops, their public functions). Each name is one ``::: tapefit.X`` block,
  rendered by mkdocstrings from its docstring, so a new public name appears by itself.
- The hooks reference lists every ``@hookspec`` of ``tapefit/plugins/hookspecs.py``.
- The config reference lists every section and key ``train`` accepts, read from the schema
  ``resolve_config`` checks against (``tapefit.cli.config.default_schema``), with each key's
  type, default and the meaning its target's docstring gives.
"""

from __future__ import annotations

import importlib
import inspect
import re
import sys
import types
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

SUBPACKAGES = (
    "layers",
    "optimizers",
    "losses",
    "metrics",
    "activations",
    "initializers",
    "regularizers",
    "constraints",
    "plugins",
    "data",
    "models",
    "nn",
    "math",
    "random",
    "testing",
    "checkpointing",
    "export",
)
"""The public subpackages, as ``tp.<name>``, in the reference's order; one that does not exist
(yet) is left out, and a module ``tp.__all__`` lists that is not here gets a page too."""

REFERENCE = "reference"
HOOKS_PAGE = f"{REFERENCE}/hooks.md"
CONFIG_PAGE = f"{REFERENCE}/config.md"
BENCHMARKS_MARK = "<!-- generated: benchmarks/README.md tables -->"


# --------------------------------------------------------------------------- API reference


def public_names(module: types.ModuleType) -> list[str]:
    """The names ``module`` makes public: its ``__all__``, else what it defines or re-exports
    from tapefit that is not a module and not private."""
    names = getattr(module, "__all__", None)
    if names is not None:
        return list(names)
    found = []
    for name, value in vars(module).items():
        if name.startswith("_") or isinstance(value, types.ModuleType):
            continue
        if getattr(value, "__module__", "").startswith("tapefit"):
            found.append(name)
    return sorted(found)


def subpackages() -> dict[str, types.ModuleType]:
    """``tp.<name>`` for every public subpackage that exists, by name."""
    import tapefit as tp

    found = {}
    listed = [n for n in tp.__all__ if isinstance(getattr(tp, n), types.ModuleType)]
    for name in [*SUBPACKAGES, *(n for n in listed if n not in SUBPACKAGES)]:
        module = getattr(tp, name, None)
        if module is None:
            try:
                module = importlib.import_module(f"tapefit.{name}")
            except ImportError:
                continue
        found[name] = module
    return found


def _anchor_page(name: str) -> str:
    return f"{REFERENCE}/{name}.md"


def _shadowed_by_module(value: Any, name: str) -> bool:
    """Whether ``tp.<name>`` is an object whose defining package also has a submodule ``name``."""
    import importlib.util

    module = getattr(value, "__module__", "") or ""
    package = module.rpartition(".")[0]
    return bool(package) and importlib.util.find_spec(f"{package}.{name}") is not None


def reference_pages() -> dict[str, str]:
    """The API reference: path under ``docs/`` to Markdown."""
    import tapefit as tp

    packages = subpackages()
    pages: dict[str, str] = {}
    top = [
        "# `tp`: the top-level names",
        "",
        "`import tapefit as tp`. Every name of `tp.__all__`, in its order: the tensors, the tape "
        "and the ops first, then the training loop and the public subpackages (each on a page "
        "of its own). Generated from the docstrings.",
        "",
    ]
    for name in tp.__all__:
        value = getattr(tp, name)
        if isinstance(value, types.ModuleType):
            top += [
                f"## `tp.{name}` {{ #tapefit.{name} }}",
                "",
                _first_line(value) + f" See [`tp.{name}`]({name}.md).",
                "",
            ]
        elif _shadowed_by_module(value, name):
            # tapefit.core.function is also a module: by that name the reference would show the
            # module's internals, so this entry names the object itself, under tp's anchor.
            top += [
                f"## `tp.{name}` {{ #tapefit.{name} }}",
                "",
                f"::: {value.__module__}.{name}",
                "    options:",
                "      show_root_heading: false",
                "",
            ]
        else:
            top += [f"::: tapefit.{name}", ""]
    pages[f"{REFERENCE}/tp.md"] = "\n".join(top)
    index = [
        "# API reference",
        "",
        "Generated from the docstrings of the public names: a name in `tp.__all__` or in a public "
        "subpackage's is documented here, and nothing else is public.",
        "",
        "| page | what it holds |",
        "| --- | --- |",
        "| [`tp`](tp.md) | " + _first_line(tp) + " |",
    ]
    for name, module in packages.items():
        index.append(f"| [`tp.{name}`]({name}.md) | {_first_line(module)} |")
        path = "tapefit.checkpointing" if name == "checkpointing" else f"tapefit.{name}"
        lines = [
            f"# `{path if name == 'checkpointing' else 'tp.' + name}`",
            "",
            _doc(module),
            "",
        ]
        for member in public_names(module):
            lines += [f"::: {path}.{member}", ""]
        pages[_anchor_page(name)] = "\n".join(lines)
    index += [
        "| [hooks](hooks.md) | every hook a plugin may implement |",
        "| [configs](config.md) | every section and key of a `train` config |",
        "",
    ]
    pages[f"{REFERENCE}/index.md"] = "\n".join(index)
    return pages


def _doc(obj: Any) -> str:
    return inspect.cleandoc(obj.__doc__ or "")


def _first_line(obj: Any) -> str:
    text = _doc(obj).split("\n\n")[0].replace("\n", " ")
    return text.replace("|", "\\|")


def documented_names(pages: dict[str, str]) -> list[str]:
    """The names the reference documents, from its Markdown: ``::: path`` blocks and the
    ``{ #path }`` headings of subpackages."""
    found = []
    for text in pages.values():
        # a block under a { #path } heading of its own (a name shadowed by a module) is that entry
        found += re.findall(r"^::: (\S+)$(?!\n    options:\n      show_root_heading: false)", text, re.M)
        found += re.findall(r"^## `[^`]+` \{ #(\S+) \}$", text, re.M)
    return found


# --------------------------------------------------------------------------- hooks


def hookspecs() -> list[Callable[..., Any]]:
    """Every hook declared in ``tapefit.plugins.hookspecs``, in the file's order."""
    from tapefit.plugins import hookspecs as specs

    marker = f"{specs.PROJECT_NAME}_spec"
    found = [v for v in vars(specs).values() if inspect.isfunction(v) and hasattr(v, marker)]
    return sorted(found, key=lambda f: f.__code__.co_firstlineno)


def hooks_page() -> str:
    from tapefit.plugins import hookspecs as specs

    hooks = hookspecs()
    marker = f"{specs.PROJECT_NAME}_spec"
    lines = [
        "# Hooks",
        "",
        f"Every hook of the fit loop ({len(hooks)} of them), generated from "
        "`tapefit/plugins/hookspecs.py`. A plugin implements any of them with `@tp.hookimpl`, "
        "taking any subset of the arguments by name. [Training and plugins](../training.md) "
        "shows how.",
        "",
        "| hook | arguments | called |",
        "| --- | --- | --- |",
    ]
    for hook in hooks:
        args = ", ".join(f"`{a}`" for a in inspect.signature(hook).parameters)
        first = getattr(hook, marker, {}).get("firstresult")
        note = " (the first result wins)" if first else ""
        lines.append(
            f"| [`{hook.__name__}`](#tapefit.plugins.hookspecs.{hook.__name__}) | {args} | {_cell(_first_line(hook))}{note} |"
        )
    how = _doc(specs).split("\n\n", 1)[1].replace("::\n", ":\n")  # reST's literal-block mark
    lines += ["", "## How hooks are called", "", how, ""]
    lines += ["## Every hook", ""]
    for hook in hooks:
        lines += [
            f"::: tapefit.plugins.hookspecs.{hook.__name__}",
            "    options:",
            "      heading_level: 3",
            "      show_root_full_path: false",
            "",
        ]
    return "\n".join(lines)


# --------------------------------------------------------------------------- configs


def docstring_args(obj: Any) -> dict[str, str]:
    """The ``Args:`` of a Google-style docstring of ``obj`` (a class: its own and its
    ``__init__``'s, and its bases'), name to text on one line."""
    docs = []
    if inspect.isclass(obj):
        for cls in obj.__mro__:
            if cls is object:
                continue
            init = cls.__dict__.get("__init__")
            docs += [cls.__doc__, getattr(init, "__doc__", None)]
    else:
        docs.append(getattr(obj, "__doc__", None))
    found: dict[str, str] = {}
    for doc in docs:
        for name, text in _args_of(inspect.cleandoc(doc or "")):
            found.setdefault(name, text)
    return found


def _args_of(doc: str) -> Iterator[tuple[str, str]]:
    lines = doc.splitlines()
    inside, indent, name, text = False, 0, None, []
    for line in [*lines, ""]:
        stripped = line.strip()
        if re.fullmatch(r"(Args|Arguments|Parameters):", stripped):
            inside, indent, name, text = True, -1, None, []
            continue
        if not inside:
            continue
        depth = len(line) - len(line.lstrip())
        if not stripped:
            if name is not None:
                yield name, " ".join(text)
            inside, name = False, None
            continue
        if indent < 0:
            indent = depth
        if depth == indent:
            match = re.match(r"\**(\w+)(?: \([^)]*\))?:\s*(.*)", stripped)
            if match is None:
                continue
            if name is not None:
                yield name, " ".join(text)
            name, text = match.group(1), [match.group(2)]
        elif depth > indent and name is not None:
            text.append(stripped)
        else:
            if name is not None:
                yield name, " ".join(text)
            inside, name = False, None


def _cell(text: str) -> str:
    text = re.sub(r"``([^`]+)``", r"`\1`", text)
    return text.replace("|", "\\|").replace("\n", " ")


def _default(param: Any) -> str:
    from tapefit.cli import config

    if param.default is config.REQUIRED:
        return "required"
    return f"`{config.dump_config({'v': param.default}).strip()[3:]}`"


def _type(param: Any) -> str:
    if param.annotation is inspect.Parameter.empty:
        return "any"
    return _cell(_words(param.annotation))


def _words(ann: Any) -> str:
    """A key's type in words, as ``train``'s messages say it; a type a config cannot spell (a
    stream, an object) is named, from Python only."""
    import collections.abc
    import typing

    from tapefit.cli import config

    if ann is typing.Any:
        return "any"
    origin = typing.get_origin(ann)
    if origin is typing.Union or origin is types.UnionType:
        return " or ".join(dict.fromkeys(_words(a) for a in typing.get_args(ann)))
    plain = (list, tuple, dict, collections.abc.Sequence, collections.abc.Mapping, typing.Literal)
    if origin is not None and origin not in plain:
        return f"`{getattr(origin, '__name__', origin)}` (from Python only)"
    if isinstance(ann, type) and ann not in (bool, int, float, str, list, tuple, dict, type(None)):
        return f"`{ann.__name__}` (from Python only)"
    return config.describe(ann)


def _key_table(params: dict[str, Any], meanings: dict[str, str], label: str) -> list[str]:
    lines = ["| key | type | default | meaning |", "| --- | --- | --- | --- |"]
    for name, param in params.items():
        meaning = meanings.get(name, "")
        lines.append(f"| `{name}` | {_type(param)} | {_default(param)} | {_cell(meaning)} |")
    return lines


COMMON_MEANINGS = {
    "data": {
        "validation_split": "the share of the samples held out for validation (the last ones, as "
        "Keras); 0 for none",
        "standardize": "scale each feature to zero mean and unit variance, with the training "
        "split's statistics",
        "seed": "the seed of the split (and of generated data); default the top-level `seed`",
        "workers": "worker processes reading the samples through a `tp.data.Pipeline` (0: none)",
        "prefetch": "batches made ahead of the step when there are workers",
        "map": "an import path of a `@tp.configurable` per-sample function, run on the training samples only",
    },
}
"""Meanings of the keys a section takes for every type (``Kind.common``): these have no
docstring of their own, as ``train`` itself handles them."""

TRAINER_MEANINGS = {
    "output_dir": "where the run's files go: the resolved config, checkpoints, logs and the "
    "final weights; `null`: `runs/<name>`",
}
"""Meanings of ``trainer`` keys whose docstring speaks of ``Trainer`` from Python, where the
default differs from the command's."""

SECTIONS = {
    "name": "The run's name: its outputs go to `runs/<name>/`. Default: the config file's name, "
    "`_` read as `-`. One folder name (no `/`, not `.` or `..`).",
    "seed": "The global seed (default `0`): the same seed gives the same run, bit for bit.",
    "data": "What to train on: a built-in `type` or an import path of a `@tp.configurable` "
    "function returning `(x, y)`.",
    "model": "The model: a built-in `type` or an import path of a `tp.Module` subclass, built "
    "with the section's other keys.",
    "loss": "The loss: a name or `{type: ..., ...}`; an import path of a `Loss` subclass or a "
    "`@tp.configurable` function.",
    "metrics": "A list of metrics, each a name or `{type: ..., ...}`; `name` is shown in the logs.",
    "optimizer": "The optimizer, a name or `{type: ..., ...}`; its `learning_rate` may be a "
    "schedule (below).",
    "trainer": "How `fit` runs: the arguments of `Trainer.fit` and `Trainer` that are not data.",
    "plugins": "A list of plugins, each a name or `{type: ..., option: value}`.",
}
"""One sentence per top-level key; the generator refuses a top-level key missing here."""

KIND_OF_SECTION = {
    "data": "data",
    "model": "model",
    "loss": "loss",
    "metrics": "metric",
    "optimizer": "optimizer",
    "plugins": "plugin",
}


def config_page() -> str:
    from tapefit.cli import config
    from tapefit.plugins.manager import BUILTIN_PLUGINS
    from tapefit.training.trainer import Trainer

    missing = [key for key in config.TOP_LEVEL_KEYS if key not in SECTIONS]
    if missing:
        raise RuntimeError(f"scripts/gen_docs.py: describe the new config section(s) {missing}")
    the = config.default_schema()
    lines = [
        "# Config reference",
        "",
        "Every section and key of a `train` config, generated from the schema `train` checks "
        "configs against, so this page lists exactly what is accepted. Types, defaults and "
        "meanings come from the signatures and docstrings of what each `type` names. "
        "`train --config FILE --print-config` shows a config with every default filled in; "
        "[Configs](../configs.md) is the guide.",
        "",
        "| section | what it is |",
        "| --- | --- |",
    ]
    lines += [f"| [`{key}`](#{key}) | {SECTIONS[key]} |" for key in config.TOP_LEVEL_KEYS]
    lines.append("")
    for key in config.TOP_LEVEL_KEYS:
        lines += [f"## `{key}` {{ #{key} }}", "", SECTIONS[key], ""]
        if key == "trainer":
            meanings = {**docstring_args(Trainer), **docstring_args(Trainer.fit), **TRAINER_MEANINGS}
            lines += _key_table(the.trainer, meanings, "trainer")
            lines.append("")
        elif key == "optimizer":
            lines += [f"The default optimizer is `{the.default_optimizer}`.", ""]
            lines += _kind_sections(the, "optimizer", key, BUILTIN_PLUGINS)
            lines += [
                "### Learning-rate schedules {#schedules}",
                "",
                "`optimizer.learning_rate` may be a mapping with a schedule's `type`:",
                "",
            ]
            lines += _kind_sections(the, "schedule", "optimizer.learning_rate", BUILTIN_PLUGINS, level=4)
        elif key in KIND_OF_SECTION:
            lines += _kind_sections(the, KIND_OF_SECTION[key], key, BUILTIN_PLUGINS)
    return "\n".join(lines)


def _kind_sections(the: Any, label: str, key: str, plugins: dict[str, str], level: int = 3) -> list[str]:
    from tapefit.cli import config

    kind = the.kinds[label]
    lines: list[str] = []
    if kind.common:
        lines += [f"Every `{key}` type also takes:", ""]
        lines += _key_table(kind.common, COMMON_MEANINGS.get(label, {}), key)
        lines.append("")
    names = [n for n in kind.builtins() if label != "plugin" or n in plugins]
    hashes = "#" * level
    for name in names:
        target = config.find_target(kind, name, f"{key}.type")
        where = _where(target.obj)
        lines += [f"{hashes} `{name}` {{ #{label}-{name} }}", "", f"`{key}: {{type: {name}}}`: {where}", ""]
        summary = _first_line(target.obj)
        if summary:
            lines += [_cell(summary), ""]
        if target.params:
            meanings = docstring_args(target.obj)
            for nested in kind.nested:  # optimizer.learning_rate: a schedule
                meanings[nested] = (
                    f"{meanings.get(nested, '')} In a config, a mapping with a "
                    f"[{kind.nested[nested]}'s `type`](#schedules)."
                ).strip()
            lines += _key_table(target.params, meanings, key)
            lines.append("")
        if target.open:
            lines += ["Other keys are passed on as keyword arguments.", ""]
    return lines


def _where(obj: Any) -> str:
    module = getattr(obj, "__module__", "")
    name = getattr(obj, "__qualname__", getattr(obj, "__name__", ""))
    return f"`{module}.{name}`"


# --------------------------------------------------------------------------- benchmarks


def benchmark_tables() -> str:
    """The ``## Results`` section of ``benchmarks/README.md`` (what a user asks: how fast, on
    which machine, how to rerun), without its heading; the file's work notes stay out of the site."""
    text = (ROOT / "benchmarks" / "README.md").read_text()
    start = text.index("\n## Results\n") + len("\n## Results\n")
    end = text.find("\n## ", start)
    section = text[start : end if end != -1 else len(text)].strip()
    return section.replace("](../docs/", "](")  # the README's links, as the site's pages see them


# --------------------------------------------------------------------------- MkDocs


def pages() -> dict[str, str]:
    """Every generated page: path under ``docs/`` to Markdown."""
    found = reference_pages()
    found[HOOKS_PAGE] = hooks_page()
    found[CONFIG_PAGE] = config_page()
    return found


def reference_nav() -> list[Any]:
    """The reference's entries of the site's navigation, after its index page."""
    names = {"checkpointing": "tapefit.checkpointing"}
    return [
        {"tp": f"{REFERENCE}/tp.md"},
        *({names.get(name, f"tp.{name}"): _anchor_page(name)} for name in subpackages()),
        {"Hooks": HOOKS_PAGE},
        {"Configs": CONFIG_PAGE},
    ]


def on_config(config: Any) -> Any:
    """MkDocs hook: lists the generated reference pages under the navigation's "Reference"."""
    for entry in config["nav"] or []:
        if isinstance(entry, dict) and "Reference" in entry:
            entry["Reference"] = [f"{REFERENCE}/index.md", *reference_nav()]
    return config


def on_files(files: Any, config: Any) -> Any:
    """MkDocs hook: adds the generated pages to the build."""
    from mkdocs.structure.files import File

    for path, text in pages().items():
        files.append(File.generated(config, path, content=text))
    return files


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    """MkDocs hook: puts the benchmark tables where a page asks for them."""
    if BENCHMARKS_MARK in markdown:
        markdown = markdown.replace(BENCHMARKS_MARK, benchmark_tables())
    return markdown


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python scripts/gen_docs.py OUT_FOLDER", file=sys.stderr)
        return 2
    out = Path(argv[0])
    for path, text in pages().items():
        (out / path).parent.mkdir(parents=True, exist_ok=True)
        (out / path).write_text(text)
    print(f"wrote {len(pages())} pages under {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
