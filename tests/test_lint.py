"""The tree stays at the project's lint and type bar.

pyproject.toml holds the bar: ruff's rules and formatter over the whole tree (the
package, tests/ and benchmarks/), mypy over the whole package with strict settings
for the core, and .ci/run runs all three. These tests hold the same bar, so a change
cannot quietly take a module back below it.

mypy checks the CLEAN packages with ``--strict`` whatever the configuration says,
and follows their imports silently: a module they import that is not strict yet is
read for its types, and its own errors are the whole-package run's.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CLEAN = [
    "vodou_engine/compiler",
    "vodou_engine/graph",
    "vodou_engine/runtime",
    "vodou_engine/store",
    "vodou_engine/policy",
    "vodou_engine/plan.py",
    "vodou_engine/states.py",
    "vodou_engine/errors.py",
    "vodou_engine/limits.py",
    "vodou_engine/bounds.py",
    "vodou_engine/osuser.py",
    "vodou_engine/owners.py",
    "vodou_engine/servers",
    "vodou_engine/tools",
    "vodou_engine/jobs.py",
    "vodou_engine/runs",
    "vodou_engine/cli.py",
    "vodou_engine/commands",
    "vodou_engine/logs.py",
]
# What ruff checks: the whole tree, as .ci/run does (pyproject.toml's excludes apply).
RUFF_PATHS = ["."]


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True, check=False)


@pytest.mark.parametrize("command", [("check",), ("format", "--check")], ids=["check", "format"])
def test_the_tree_passes_ruff(command):
    done = run("ruff", *command, "--no-cache", *RUFF_PATHS)
    assert done.returncode == 0, f"ruff {' '.join(command)} {' '.join(RUFF_PATHS)}:\n{done.stdout}{done.stderr}"


def test_clean_packages_pass_mypy_strict(tmp_path):
    done = run("mypy", "--strict", "--follow-imports=silent", "--cache-dir", str(tmp_path), *CLEAN)
    assert done.returncode == 0, f"mypy --strict {' '.join(CLEAN)}:\n{done.stdout}{done.stderr}"
    assert "Success: no issues found" in done.stdout


def test_the_package_passes_mypy_as_configured(tmp_path):
    """``mypy`` with no arguments, as .ci/run calls it: the whole package (``files`` in
    pyproject.toml), strict where the configuration says so."""
    done = run("mypy", "--cache-dir", str(tmp_path))
    assert done.returncode == 0, f"mypy:\n{done.stdout}{done.stderr}"
    assert "Success: no issues found" in done.stdout
