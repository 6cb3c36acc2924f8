"""The "Argument by argument" tables of ``docs/coming-from-keras.md`` list every argument of the
Keras 3 signatures they cover, and no other: the names come from
``tests/data/keras_signatures.json``, which ``scripts/keras_signatures.py`` wrote with Keras
installed (CI has none). A row's status must also agree with tapefit: what is "same" is taken,
what is "not taken" is not (so adding an argument means flipping its row)."""

from __future__ import annotations

import inspect
import json
import re
from pathlib import Path

import pytest

import tapefit as tp

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "coming-from-keras.md"
NAMES = json.loads((ROOT / "tests" / "data" / "keras_signatures.json").read_text())
STATUSES = {"same", "differs on purpose", "not taken"}
LISTS = ("activations", "initializers", "regularizers", "constraints", "losses", "metrics")
ROW = re.compile(r"^\| `(?P<name>[^`]+)` \| (?P<status>[^|]+?) \|(?P<note>.*)\|$", re.M)


def sections() -> dict[str, str]:
    """``### heading`` -> its text, within the page's "Argument by argument" section."""
    text = PAGE.read_text().split("\n## Argument by argument\n", 1)[1].split("\n## ", 1)[0]
    parts = re.split(r"^### (.+)$", text, flags=re.M)
    return {parts[i].strip(): parts[i + 1] for i in range(1, len(parts), 2)}


def rows(heading: str) -> dict[str, str]:
    found = [(m["name"], m["status"].strip()) for m in ROW.finditer(sections()[heading])]
    names = [name for name, _ in found]
    assert len(names) == len(set(names)), f"{heading}: a row twice"
    return dict(found)


HEADINGS = [h for h in NAMES if h != "keras_version"]


def twin(heading: str):
    """The tapefit callable a table is about (``None`` for the name lists)."""
    plugins = {
        "EarlyStopping": "EarlyStopping",
        "ReduceLROnPlateau": "ReduceLROnPlateau",
        "TerminateOnNaN": "TerminateOnNaN",
        "CSVLogger": "CSVLogger",
        "ModelCheckpoint": "Checkpoint",
        "TensorBoard": "TensorBoard",
        "BackupAndRestore": "Checkpoint",
        "LearningRateScheduler": "LearningRateScheduler",
        "LambdaCallback": "LambdaCallback",
        "ProgbarLogger": "Progress",
    }
    trainer = {"Model.compile": tp.Trainer.__init__, "Model.fit": tp.Trainer.fit}
    trainer.update({"Model.evaluate": tp.Trainer.evaluate, "Model.predict": tp.Trainer.predict})
    if heading in LISTS:
        return None
    if heading in trainer:
        return trainer[heading]
    if heading in plugins:
        return getattr(tp.plugins, plugins[heading])
    if heading == "SeedGenerator":
        return tp.random.SeedGenerator
    return getattr(tp.layers, heading)


def taken(obj) -> set[str]:
    """The argument names ``obj`` takes (for LSTM and GRU, their base's too: ``**kwargs``)."""
    classes = obj.__mro__ if inspect.isclass(obj) else ()
    functions = [c.__init__ for c in classes if "__init__" in vars(c)] or [obj]
    names: set[str] = set()
    for function in functions:
        parameters = inspect.signature(function).parameters
        names |= set(parameters)
        if not any(p.kind is p.VAR_KEYWORD for p in parameters.values()):
            break
    return names


def test_the_saved_names_are_keras_3s():
    assert NAMES["keras_version"][0].startswith("3.")
    assert {"Model.fit", "EarlyStopping", "Dense", "LSTM", "activations", "constraints"} <= set(NAMES)
    assert "validation_freq" in NAMES["Model.fit"] and "raise_error" in NAMES["TerminateOnNaN"]


def test_every_signature_has_its_table():
    assert sorted(sections()) == sorted(HEADINGS)


@pytest.mark.parametrize("heading", HEADINGS)
def test_a_table_lists_every_keras_argument_once_and_no_other(heading):
    listed = rows(heading)
    assert sorted(listed) == sorted(NAMES[heading]), heading
    assert set(listed.values()) <= STATUSES, f"{heading}: {set(listed.values()) - STATUSES}"


@pytest.mark.parametrize("heading", [h for h in HEADINGS if h not in LISTS and NAMES[h]])
def test_a_rows_status_agrees_with_tapefit(heading):
    names = taken(twin(heading))
    for argument, status in rows(heading).items():
        if status == "same":
            assert argument in names, f"{heading}({argument}) is 'same' but tapefit does not take it"
        elif status == "not taken":
            assert argument not in names, f"{heading}({argument}) is taken now: flip its row"


@pytest.mark.parametrize("heading", ["activations", "initializers", "regularizers"])
def test_a_listed_names_status_agrees_with_tapefit(heading):
    module = getattr(tp.layers, heading)
    for name, status in rows(heading).items():
        if status == "same":
            module.get(name)
        elif status == "not taken":
            with pytest.raises(ValueError):
                module.get(name)


@pytest.mark.parametrize("heading", ["losses", "metrics"])
def test_a_namespace_rows_status_agrees_with_tapefit(heading):
    module = getattr(tp, heading)
    for name, status in rows(heading).items():
        if status == "same":
            assert name in module.__all__, f"tp.{heading}.{name} is 'same' but tapefit has none"
        else:
            assert name not in module.__all__, f"tp.{heading}.{name} exists now: flip its row"
        if status == "not taken":
            with pytest.raises(ValueError):
                module.get(name)
        elif status == "differs on purpose":
            module.get(name)
