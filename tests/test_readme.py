"""Every code block of README.md runs here: the Python ones in order, the shell ones for real."""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

try:
    import tomllib
except ImportError:  # Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
BLOCK = re.compile(r"^```(\w+)\n(.*?)^```", re.S | re.M)


def blocks(language: str) -> list[str]:
    text = (ROOT / "README.md").read_text()
    return [body for lang, body in BLOCK.findall(text) if lang == language]


def commands() -> list[str]:
    """The shell commands of the README, split at ``&&``, in order."""
    found = []
    for body in blocks("bash"):
        for line in body.strip().splitlines():
            found.extend(part.strip() for part in line.split("&&"))
    return found


def test_python_blocks_run_in_order(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    namespace: dict = {"__name__": "readme"}
    for number, body in enumerate(blocks("python"), 1):
        try:
            exec(compile(body, f"README.md python block {number}", "exec"), namespace)
        except Exception as error:  # pragma: no cover - the message is the point
            pytest.fail(f"README python block {number} failed: {error!r}\n{body}")
    printed = capsys.readouterr().out
    assert "tp.Tensor(8.0, shape=(), dtype=float32)" in printed
    assert "108.0 108.0" in printed
    assert "['accuracy', 'loss', 'val_accuracy', 'val_loss']" in printed
    # The README's longer tour moved to docs/; tests/test_docs.py runs it and checks its output.


def test_toml_blocks_parse():
    for body in blocks("toml"):
        assert tomllib.loads(body)["project"]["entry-points"]["tapefit"]


def test_the_test_command_is_what_ci_runs():
    ci = (ROOT / ".ci" / "run").read_text()
    test_line = next(body for body in blocks("bash") if "pytest" in body).strip()
    install, run_tests = [part.strip() for part in test_line.split("&&")][2:]
    assert install.replace("pip install", "python -m pip install --quiet") in ci
    assert run_tests in ci


def test_shell_commands_run(tmp_path):
    """Install steps are CI's business; every ``train`` command runs for real, in order."""
    shutil.copytree(ROOT / "configs", tmp_path / "configs")
    ran = []
    for command in commands():
        words = shlex.split(command)
        if words[0] in ("python3", ".", "pip") or words[:3] == ["python", "-m", "pytest"]:
            continue  # venv creation, activation, installation, the test suite itself
        if words[0] == "tensorboard":
            assert words[1:] == ["--logdir", "runs"]
            assert list((tmp_path / "runs").glob("*/tensorboard/**/events.out.tfevents.*"))
            continue
        launcher: list[str] = []
        if words[0] == "mpiexec":  # mpiexec -n N train ...: the distributed section
            assert words[1] == "-n", command
            launcher, words = [str(Path(sys.executable).parent / "mpiexec"), *words[1:3]], words[3:]
        assert words[0] == "train", f"unexpected README command: {command}"
        result = subprocess.run(
            [*launcher, sys.executable, "-m", "tapefit", *words],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert result.returncode == 0, f"{command}\n{result.stderr[-2000:]}"
        ran.append(command)
    assert any("--resume auto" in c for c in ran) and any(c.endswith("digits_mlp.yaml") for c in ran)
    assert (tmp_path / "runs" / "digits-mlp" / "history.csv").read_text().count("\n") >= 30


# The config table moved out of the README into the generated config reference:
# tests/test_docs.py checks that it names every key of every built-in type.
