"""``python -m tapefit``: the ``train`` command, ``--version`` and ``--help``."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import tapefit as tp


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "tapefit", *args], capture_output=True, text=True, timeout=60
    )


def test_version_prints_what_train_version_prints():
    top, train = run("--version"), run("train", "--version")
    assert (top.returncode, train.returncode) == (0, 0), top.stderr + train.stderr
    assert top.stdout == train.stdout == f"tapefit {tp.__version__}\n"
    assert top.stderr == ""


def test_the_version_is_the_changelogs_newest_section():
    changelog = (Path(__file__).resolve().parents[1] / "CHANGELOG.md").read_text()
    version, status = re.search(r"^## (\d+\.\d+\.\d+)( \(unreleased\))?", changelog, re.M).groups()
    assert tp.__version__ == (f"{version}.dev0" if status else version)


def test_help_mentions_version_and_an_unknown_command_exits_2():
    assert "python -m tapefit --version" in run("--help").stdout
    wrong = run("--versoin")
    assert wrong.returncode == 2
    assert "unknown command '--versoin'" in wrong.stderr and "Traceback" not in wrong.stderr
