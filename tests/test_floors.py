"""The dependency floors CI tests (.ci/floors.txt) are pyproject.toml's lower bounds."""

from __future__ import annotations

import re
import sys
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]


def test_every_dependency_floor_is_the_version_ci_installs():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    bounds = {}
    for requirement in project["dependencies"]:
        match = re.fullmatch(r"([A-Za-z0-9_.-]+)>=([0-9.]+)(;.*)?", requirement.replace(" ", ""))
        assert match, f"{requirement!r}: every dependency has a >= floor"
        if match.group(3) is None:  # an environment marker: a backport CI's Python does not install
            bounds[match.group(1).lower()] = match.group(2)
    pins = {}
    for line in (ROOT / ".ci" / "floors.txt").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, version = line.split("==")
            pins[name.lower()] = version
    assert sorted(pins) == sorted(bounds)
    for name, floor in bounds.items():
        assert pins[name].split(".")[: len(floor.split("."))] == floor.split("."), name
