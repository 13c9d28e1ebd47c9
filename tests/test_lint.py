"""The packages brought up to the project's lint and type bar stay there.

pyproject.toml holds the bar: ruff's rules and formatter, and mypy strict for
the core. Until every module meets it (docs/architecture.md, "Where does a
change go"; then .ci/run runs ruff and mypy over the whole tree), these tests
hold the packages that already do, so a change cannot quietly take one back.

mypy checks the clean packages with ``--strict`` whatever the configuration
says, and follows their imports silently: a module they import that is not
clean yet is read for its types, and its own errors are not this test's.
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
    "vodou_engine/logs.py",
]
# Brought up to ruff's bar (lint and format) but not yet to mypy strict.
RUFF_CLEAN = [
    "vodou_engine/web",
    "vodou_engine/notify",
    "vodou_engine/workers",
    "vodou_engine/views",
    "vodou_engine/demo",
    "vodou_engine/agents",
    "vodou_engine/service.py",
    "vodou_engine/cards.py",
    "vodou_engine/reports.py",
    "vodou_engine/planning.py",
    "vodou_engine/toolcache.py",
    "vodou_engine/scheduler.py",
    "vodou_engine/masking.py",
    "vodou_engine/gcpause.py",
    "vodou_engine/standalone.py",
    "vodou_engine/__init__.py",
    "vodou_engine/__main__.py",
]


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True, check=False)


@pytest.mark.parametrize("command", [("check",), ("format", "--check")], ids=["check", "format"])
def test_clean_packages_pass_ruff(command):
    paths = [*CLEAN, *RUFF_CLEAN]
    done = run("ruff", *command, "--no-cache", *paths)
    assert done.returncode == 0, f"ruff {' '.join(command)} {' '.join(paths)}:\n{done.stdout}{done.stderr}"


def test_clean_packages_pass_mypy_strict(tmp_path):
    done = run("mypy", "--strict", "--follow-imports=silent", "--cache-dir", str(tmp_path), *CLEAN)
    assert done.returncode == 0, f"mypy --strict {' '.join(CLEAN)}:\n{done.stdout}{done.stderr}"
    assert "Success: no issues found" in done.stdout
