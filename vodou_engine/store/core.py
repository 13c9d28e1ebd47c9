"""One connection, its transactions, and the checks several parts of the store make.

:class:`StoreCore` is the base of every aggregate mixin (``runs.py``,
``approvals.py``, ``saved.py``, ``people.py``, ``schema.py``): it opens no
connection itself (a dialect's store does) but owns the cursor, runs each write
in one explicit transaction, turns driver errors into person-facing ones, and
holds the few checks that cross aggregates: the run exists, its owner still drives
it, an event appended to its log. Statements used by more than one aggregate live
here too, so no mixin imports another.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from .. import logs
from ..errors import LostRunError, RefusedError, UnknownRunError, VodouError
from ..states import RunState
from .dialect import Connection, Cursor, Dialect, Row, _text

RUNS_HINT = "list the runs in this store to find the one you mean"

RUN_EXISTS = "SELECT 1 FROM runs WHERE id = ?"
RECENT_RUN_IDS = "SELECT id FROM runs ORDER BY created_at DESC LIMIT 2000"
RUN_IDS_WITH_PREFIX = "SELECT id FROM runs WHERE substr(id, 1, ?) = ? ORDER BY created_at DESC LIMIT 5"
RUN_OWNER = "SELECT state, owner FROM runs WHERE id = ?"
INSERT_EVENT = "INSERT INTO events (run_id, ts, kind, node_id, actor, data_json) VALUES (?, ?, ?, ?, ?, ?)"
INSERT_AUDIT = "INSERT INTO audit (ts, kind, actor, run_id, data_json) VALUES (?, ?, ?, ?, ?)"


class StoreCore:
    """A run store's connection in autocommit mode, and what every aggregate needs of it.

    Transactions are explicit (``BEGIN`` ... ``COMMIT``) so a write takes the
    engine's write lock up front instead of upgrading a read lock, which is
    where concurrent SQLite writers deadlock. Not thread-safe: one thread at a
    time, though not necessarily the one that opened it.
    """

    def __init__(self, conn: Connection, dialect: Dialect, location: str):
        self._conn: Connection | None = conn  # None once closed
        self._d = dialect
        self._cur = conn.cursor()
        self._depth = 0
        self.location = location
        self._said: list[tuple[Any, ...]] = []
        """Events this transaction recorded, logged (``logs.py``) once it commits."""

    # -- plumbing ---------------------------------------------------------

    def _q(self, sql: str) -> str:
        return self._d.q(sql)

    def _translate(self, exc: Exception) -> Exception:
        return self._d.store_error(exc, self.location) or exc

    @contextmanager
    def _write(self, *, relaxed: bool = False) -> Iterator[Cursor]:
        """One write transaction; nested uses join the outer one, which alone says how it commits.

        ``relaxed``: what it writes may be lost if the database server itself crashes
        (never when this process does), so its commit does not wait for the disk:
        PostgreSQL's ``synchronous_commit = off`` for this transaction, what SQLite's
        ``synchronous=NORMAL`` does for every commit. Only for writes that a crash may
        take back and the run redo (a step's progress, a run's creation): the next
        ordinary commit, on any connection, waits for every earlier one too (one log,
        flushed in order), so an effect's claim, a question, a decision or a run's end
        is never on disk without what led to it (docs/store-schema.md)."""
        cur = self._cur
        if self._depth:
            self._depth += 1
            try:
                yield cur
            finally:
                self._depth -= 1
            return
        try:
            cur.execute(self._d.begin_relaxed if relaxed else self._d.begin_write)
        except self._d.Error as exc:
            raise self._translate(exc) from exc
        self._depth = 1
        try:
            yield cur
        except BaseException as exc:
            self._depth = 0
            self._said.clear()
            self._rollback()
            if isinstance(exc, self._d.Error):
                new = self._translate(exc)
                if new is not exc:
                    raise new from exc
            raise
        self._depth = 0
        try:
            cur.execute("COMMIT")
        except self._d.Error as exc:
            self._said.clear()
            self._rollback()
            raise self._translate(exc) from exc
        if self._said:
            self._tell()

    def _say(self, kind: str, run_id: str, node_id: str | None, actor: str | None, data: Any) -> None:
        """An event to log once the write that records it commits (nothing when nobody listens)."""
        if logs.enabled():
            self._said.append((kind, run_id, node_id, actor, data))

    def _tell(self) -> None:
        said, self._said = self._said, []
        for kind, run_id, node_id, actor, data in said:
            logs.run_event(kind, run_id, node_id, actor, data)

    def _rollback(self) -> None:
        try:
            self._cur.execute("ROLLBACK")
        except self._d.Error:
            pass  # the engine already rolled back (e.g. after a busy or I/O error)

    @contextmanager
    def _read(self) -> Iterator[Cursor]:
        try:
            yield self._cur
        except self._d.Error as exc:
            new = self._translate(exc)
            if new is not exc:
                raise new from exc
            raise

    def _one(self, sql: str, params: tuple[Any, ...]) -> Row | None:
        with self._read() as cur:
            cur.execute(self._q(sql), params)
            return cur.fetchone()

    def _all(self, sql: str, params: tuple[Any, ...]) -> list[Row]:
        with self._read() as cur:
            cur.execute(self._q(sql), params)
            return cur.fetchall()

    def _table_names(self) -> set[str]:
        return {row[0] for row in self._all(self._d.tables_sql, ())}

    # -- checks and writes more than one aggregate makes -------------------

    def _insert_event(
        self, cur: Cursor, run_id: str, kind: str, node_id: str | None, actor: str | None, data_json: Any, ts: float
    ) -> int:
        params = (run_id, ts, kind, node_id, actor, _text(data_json))
        seq = self._d.insert_returning(cur, self._q(INSERT_EVENT), params, "seq")
        self._say(kind, run_id, node_id, actor, data_json)
        return seq

    def _unknown_run(self, run_id: str) -> UnknownRunError:
        message = f"no run {run_id!r} in the store at {self.location}"
        try:
            close = [r[0] for r in self._all(RUN_IDS_WITH_PREFIX, (len(run_id), run_id))]
            if not close:
                recent = [r[0] for r in self._all(RECENT_RUN_IDS, ())]
                close = difflib.get_close_matches(run_id, recent, n=3, cutoff=0.6)
        except (self._d.Error, VodouError):
            close = []  # a failed transaction may refuse further reads; the error still stands
        if close:
            message += f"; did you mean {', '.join(close[:3])}?"
        return UnknownRunError(message, hint=RUNS_HINT)

    def _require_run(self, run_id: str) -> None:
        if self._one(RUN_EXISTS, (run_id,)) is None:
            raise self._unknown_run(run_id)

    def _integrity(self, exc: Exception, run_id: str, duplicate: str) -> Exception:
        kind = self._d.integrity_kind(exc)
        if kind == "foreign_key":
            return self._unknown_run(run_id)
        if kind == "unique":
            return RefusedError(f"{duplicate} already exists in the store at {self.location}; nothing was changed")
        return exc

    def _check_owner(self, cur: Cursor, run_id: str, owner: str | None) -> None:
        """Inside a write: refuse unless ``owner`` still drives ``run_id`` (None: no check)."""
        if owner is None:
            return
        cur.execute(self._q(RUN_OWNER + self._d.for_update), (run_id,))
        row = cur.fetchone()
        if row is None:
            raise self._unknown_run(run_id)
        state, holder = row
        if state != RunState.RUNNING or holder != owner:
            raise LostRunError(
                f"run {run_id} is no longer driven by this process (it is {state}"
                + (f", held by {holder}" if holder and holder != owner else "")
                + "); nothing more was written",
                run=run_id,
                state=state,
            )
