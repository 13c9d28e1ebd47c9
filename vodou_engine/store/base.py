"""The run store every backend shares, composed from one mixin per aggregate.

The statements are written once, with ``?`` placeholders and SQL that
SQLite (>= 3.24) and PostgreSQL both accept; a :class:`Dialect` supplies the
few things that differ (placeholder style, how a write transaction starts,
row locks, identity columns, how driver errors read). A concrete store only
opens the connection and picks its dialect, so both stores obey the same
compare-and-set rules and run the same test suite.

Where each part lives (none of the mixins imports another; what they share is
in ``core.py`` and ``dialect.py``):

- ``schema.py``: the migration files, the schema version, bringing a store up to date;
- ``dialect.py``: :class:`Dialect`, and the helpers that build statements and values;
- ``core.py``: the connection, its transactions, the checks several aggregates make;
- ``runs.py``: runs, owners and leases, nodes, events, pruning;
- ``approvals.py``: questions and decisions, effects, the inbox's reads;
- ``saved.py``: saved recipes, schedules, firings;
- ``people.py``: approvers, agents, sign-in links and sessions, the audit log.

The names other modules import from here (``sqlite.py``, ``postgres.py``,
``vodou_engine/runs.py``) are re-exported, so they keep the one address.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from ..errors import StoreError
from .approvals import ApprovalsMixin, describe_decision
from .dialect import Dialect
from .people import PeopleMixin
from .runs import RunsMixin
from .saved import SavedMixin
from .schema import CORE_TABLES, TABLES_SINCE, SchemaMixin, latest_version, newer_store_error

__all__ = [
    "CORE_TABLES",
    "TABLES_SINCE",
    "Dialect",
    "SqlRunStore",
    "describe_decision",
    "latest_version",
    "newer_store_error",
]


class SqlRunStore(SchemaMixin, RunsMixin, ApprovalsMixin, SavedMixin, PeopleMixin):
    """A run store over one DB-API connection in autocommit mode.

    Every write is one explicit transaction, and the store is not thread-safe
    (:class:`~.core.StoreCore` says why). Each aggregate is a mixin over that
    core; this class adds what a caller does with the store as a whole: group
    writes, compact it, close it.
    """

    @contextmanager
    def transaction(self, *, relaxed: bool = False) -> Iterator[None]:
        """Group several writes so they commit, or vanish, together. ``relaxed``: everything
        in it may be lost if the database server crashes, and redone (``StoreCore._write``)."""
        with self._write(relaxed=relaxed):
            yield

    @property
    def kind(self) -> str:
        """The database behind the store: ``"sqlite"`` or ``"postgresql"``."""
        return self._d.name

    def connection(self) -> Any:
        """The store's own DB-API connection, for a write that must commit or vanish with
        the store's in one :meth:`transaction` (a job queued with the decision that asked
        for it: ``workers/app.py``). Nothing else should use it."""
        return self._conn

    def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()

    def __enter__(self) -> SqlRunStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.location!r})"

    def compact(self) -> None:
        """Give the space of removed rows back to the file system (a dialect may do nothing)."""
        if self._conn is None:
            raise StoreError(f"the store at {self.location} is closed; nothing was compacted")
        self._d.compact(self._conn)
