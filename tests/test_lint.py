"""The tree stays at the project's lint and type bar.

pyproject.toml holds the bar: ruff's rules and formatter over the whole tree (the
package, tests/ and benchmarks/), mypy over the whole package with strict settings
for the core, and .ci/run runs all three. These tests hold the same bar, so a change
cannot quietly take a module back below it.

The CLEAN packages are held to ``--strict``'s checks by pyproject.toml's overrides (a
test says each is there), so one ``mypy`` run checks the whole package at both bars.
"""

from __future__ import annotations

import subprocess
import sys
import tomllib
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


STRICT = {
    "disallow_any_generics", "disallow_subclassing_any", "disallow_untyped_calls", "disallow_untyped_defs",
    "disallow_incomplete_defs", "check_untyped_defs", "disallow_untyped_decorators", "warn_return_any",
    "strict_equality", "extra_checks",
}  # fmt: skip
"""What ``--strict`` turns on per module (``strict`` itself is global-only in mypy's configuration)."""


def _modules(entry: str) -> list[str]:
    """The module pattern a CLEAN entry stands for (a package's ``name.*`` is itself and everything under it)."""
    name = entry.removesuffix(".py").replace("/", ".")
    return [name] if entry.endswith(".py") else [f"{name}.*"]


def test_the_core_is_held_strict_by_the_configuration():
    """Every CLEAN module is in a pyproject override that turns on each of --strict's checks, so
    the one ``mypy`` run below (and .ci/run's) holds it to the strict bar: no second, slower run
    with other flags is needed."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]
    strict: set[str] = set()
    for override in config.get("overrides", []):
        if {k for k, v in override.items() if v is True} >= STRICT:
            strict.update(override["module"] if isinstance(override["module"], list) else [override["module"]])
    missing = [m for entry in CLEAN for m in _modules(entry) if m not in strict]
    assert not missing, f"held strict in tests/test_lint.py but not in pyproject.toml's mypy overrides: {missing}"
    assert config.get("warn_unused_ignores") is True and config.get("warn_redundant_casts") is True


def test_the_package_passes_mypy_as_configured():
    """``mypy`` with no arguments, as .ci/run calls it: the whole package (``files`` in
    pyproject.toml), strict where the configuration says so. Its cache is the tree's own
    ``.mypy_cache``, so after .ci/run's own mypy step this run only reads it."""
    done = run("mypy")
    assert done.returncode == 0, f"mypy:\n{done.stdout}{done.stderr}"
    assert "Success: no issues found" in done.stdout
