"""What the peer cases share: whether a peer is installed, and how a case says it was skipped."""

from __future__ import annotations

import importlib.util

from .common import Case

INSTALL = "pip install -e '.[bench]'"
"""The optional extra that brings the peers (pyproject.toml: ``bench``)."""


def missing(*modules: str) -> list[str]:
    """The modules of ``modules`` this interpreter cannot import."""
    return [m for m in modules if importlib.util.find_spec(m) is None]


def skipped(case: Case, reason: str) -> Case:
    """The case, marked skipped with ``reason`` (a line that says how to run it)."""
    case.skipped = reason
    return case.done()
