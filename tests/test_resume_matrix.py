"""The exact-resume matrix's quick sample runs green (scripts/resume_matrix.py; the full one is
250 cases, run by hand)."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_the_quick_resume_matrix_passes():
    result = subprocess.run(
        [sys.executable, "scripts/resume_matrix.py", "--quick", "--jobs", "1"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    lines = result.stdout.strip().splitlines()
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert lines[-1].endswith("passed, 0 failed") and not lines[-1].startswith("0 passed"), lines[-1]
