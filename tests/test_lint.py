"""The code base is ruff-clean: `ruff check` and `ruff format --check` over the repository."""

import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.parametrize("command", [["check"], ["format", "--check"]], ids=["check", "format"])
def test_ruff(command):
    done = subprocess.run(
        [sys.executable, "-m", "ruff", *command, "."], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, f"ruff {' '.join(command)} found problems:\n{done.stdout}{done.stderr}"
