"""Where runs live between processes: parked at an approval, resumed later.

``open_store`` is the one way in; it picks the implementation from the
location so the CLI and runtime never name a backend.
"""

from __future__ import annotations

import os
from pathlib import Path

from .base import SqlRunStore, latest_version
from .postgres import PostgresRunStore
from .protocol import RunStore
from .records import (
    APPROVAL_STATES,
    DECISION_STATES,
    EFFECT_STATES,
    RUN_STATES,
    TERMINAL_RUN_STATES,
    AgentRecord,
    ApprovalRecord,
    ApproverRecord,
    AuditRecord,
    EffectRecord,
    EventRecord,
    FiringRecord,
    NodeRecord,
    RecipeRecord,
    RunRecord,
    ScheduleRecord,
)
from .sqlite import SqliteRunStore

POSTGRES_SCHEMES = ("postgresql://", "postgres://")


def default_store_path() -> str:
    """``$VODOU_STORE``, else the XDG data directory; a str so a URL survives."""
    explicit = os.environ.get("VODOU_STORE")
    if explicit:
        return explicit
    data_home = os.environ.get("XDG_DATA_HOME")
    # The XDG spec says relative values are invalid and must be ignored.
    base = Path(data_home) if data_home and os.path.isabs(data_home) else Path.home() / ".local" / "share"
    return str(base / "vodou" / "runs.db")


def open_store(
    path_or_url: str | os.PathLike[str] | None = None, *, readonly: bool = False, create: bool = True
) -> RunStore:
    """The store at a path (SQLite) or URL. ``readonly``: for commands that only
    look, on a file this user may not be able to write. ``create=False``: an
    absent store is an error naming the path, not a new empty store."""
    location = default_store_path() if path_or_url is None else os.fspath(path_or_url)
    if location.startswith(POSTGRES_SCHEMES):
        return PostgresRunStore(location, readonly=readonly, create=create)
    return SqliteRunStore(location, readonly=readonly, create=create)


__all__ = [
    "APPROVAL_STATES",
    "DECISION_STATES",
    "EFFECT_STATES",
    "RUN_STATES",
    "TERMINAL_RUN_STATES",
    "AgentRecord",
    "ApprovalRecord",
    "ApproverRecord",
    "AuditRecord",
    "EffectRecord",
    "EventRecord",
    "FiringRecord",
    "NodeRecord",
    "RecipeRecord",
    "RunRecord",
    "RunStore",
    "ScheduleRecord",
    "SqlRunStore",
    "SqliteRunStore",
    "default_store_path",
    "latest_version",
    "open_store",
]
