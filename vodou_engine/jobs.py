"""The workers' queue in the store's own database, as far as the run API writes to it.

The queue is Procrastinate's tables in the store's PostgreSQL database and
schema (docs/scale-out.md), so one URL names both and one backup holds both.
A run's drive is a job of the task :data:`DRIVE_TASK` on the queue
:data:`QUEUE`, deferred on the store's own connection inside the transaction
that records what the drive acts on (a decision, a new run): both are
committed, or neither.

This module holds that much: the names, the queue's tables (created once,
whoever races), the refusal on a store that has no queue (SQLite), and
deferring a drive. The run API (``runs/``) defers through it, and so do the
workers (``workers/app.py``: the tasks, handing a job back, recovering the jobs
of dead workers); the run API never imports the workers. Importing it costs
nothing where the CLI starts: Procrastinate is imported when a job is deferred.
"""

from __future__ import annotations

import datetime
import weakref
from collections.abc import Mapping
from typing import Any

from .errors import QueueError, StoreError

QUEUE = "vodou"
"""The queue every worker takes drives from."""
DRIVE_TASK = "vodou.drive"
"""The task that drives one run (``workers/app.py`` runs it)."""
SCHEMA_LOCK = 0x766F7175  # "voqu": one advisory lock key for creating the queue's schema

WORKERS_TABLE = """
CREATE TABLE IF NOT EXISTS vodou_queue_workers (
    worker_id bigint PRIMARY KEY REFERENCES procrastinate_workers(id) ON DELETE CASCADE,
    owner text NOT NULL,
    started_at timestamp with time zone NOT NULL DEFAULT now()
)
"""
"""Which process each Procrastinate worker is (``host:pid:start``), so a dead one on this host is seen at once."""


def load_procrastinate() -> Any:
    """The ``procrastinate`` module; :class:`QueueError` (exit 7) when it or psycopg (the
    ``workers`` extra) is not installed: the queue needs both, and the fix is the same."""
    try:
        import procrastinate
        import psycopg  # noqa: F401 - Procrastinate imports it lazily; missing, the worker would fail later
    except ImportError as exc:
        missing = "psycopg" if (exc.name or "").startswith("psycopg") else "Procrastinate"
        raise QueueError(
            f"the workers' queue needs {missing}, which is not installed; nothing was queued",
            hint='install the workers extra: pip install "vodou_engine[workers]"',
            reason="not installed",
        ) from None
    return procrastinate


def no_queue(location: str) -> QueueError:
    """The refusal for work handed to the workers on a store that has no queue (SQLite)."""
    return QueueError(
        f"workers and their queue need a PostgreSQL store, and {location} is a SQLite file; nothing was queued",
        hint="set VODOU_STORE (or --store) to a postgresql:// URL; on SQLite a run is driven by the process that starts or approves it",
        store=location,
        reason="sqlite",
    )


# --- the queue's tables --------------------------------------------------------------------
def ensure_queue(conn: Any) -> None:
    """Create Procrastinate's tables (and ours) in the store's schema, once, whoever races,
    on an open autocommit connection, outside any transaction."""
    if _has_queue(conn):
        return
    # A session lock taken before the transaction: the check after it runs in a
    # transaction of its own, so it sees the tables a racing process just committed.
    conn.execute("SELECT pg_advisory_lock(%s)", (SCHEMA_LOCK,))
    try:
        if not _has_queue(conn):
            from procrastinate.schema import SchemaManager

            with conn.transaction():
                conn.execute(SchemaManager.get_schema())
                conn.execute(WORKERS_TABLE)
    finally:
        conn.execute("SELECT pg_advisory_unlock(%s)", (SCHEMA_LOCK,))


def _has_queue(conn: Any) -> bool:
    row = conn.execute(
        "SELECT to_regclass('procrastinate_jobs') IS NOT NULL AND to_regclass('vodou_queue_workers') IS NOT NULL"
    ).fetchone()
    return bool(row[0])


# --- deferring in the store's own transaction ----------------------------------------------
_READY: Any = None  # a WeakSet of store objects whose database has the queue's tables
_JOBS_APP: Any = None  # a Procrastinate app that only builds jobs, on connections it is given


def store_queue(store: Any) -> Any:
    """The store's own connection, its database holding the queue's tables (created now
    if this is the first use). Refused (:class:`QueueError`) for a store with no queue."""
    global _READY

    if getattr(store, "kind", None) != "postgresql":
        raise no_queue(getattr(store, "location", "the store"))
    load_procrastinate()
    if _READY is None:
        _READY = weakref.WeakSet()
    conn = store.connection()
    if store not in _READY:
        try:
            ensure_queue(conn)
        except Exception as exc:  # noqa: BLE001 - psycopg's errors, in the store's words
            raise StoreError(
                f"cannot create the workers' queue in the store at {store.location}: {str(exc).strip().splitlines()[0]}",
                hint="the database user needs to create tables in the store's schema",
            ) from None
        _READY.add(store)
    return conn


def drive_options(run_id: str, at: float | None = None) -> dict[str, Any]:
    """How every drive of ``run_id`` is deferred: one worker drives a run at a time
    (``lock``), and a run has at most one job waiting (``queueing_lock``); ``at``: not
    before then (epoch seconds)."""
    options: dict[str, Any] = {"lock": run_id, "queueing_lock": run_id, "queue": QUEUE}
    if at is not None:
        options["schedule_at"] = datetime.datetime.fromtimestamp(at, datetime.UTC)
    return options


def defer_drive_in(conn: Any, run_id: str, spec: Mapping[str, Any] | None = None) -> bool:
    """Queue a drive of ``run_id`` inside the transaction open on ``conn`` (the store's
    connection, from :func:`store_queue`), so it commits with the store's writes (a
    decision, a new run's record) or not at all. False when a job for the run already
    waits: it serves this request too, and it is row-locked until this transaction ends,
    so no worker starts it before what this transaction records is visible."""
    global _JOBS_APP
    procrastinate = load_procrastinate()
    if _JOBS_APP is None:
        _JOBS_APP = procrastinate.App(connector=procrastinate.SyncPsycopgConnector())
    for _ in range(10):
        waiting = conn.execute(
            "SELECT id FROM procrastinate_jobs WHERE queueing_lock = %s AND status = 'todo' FOR UPDATE", (run_id,)
        ).fetchone()
        if waiting is not None:
            return False
        conn.execute("SAVEPOINT vodou_defer")
        try:
            _JOBS_APP.configure_task(DRIVE_TASK, connection=conn, **drive_options(run_id)).defer(
                run_id=run_id, **dict(spec or {})
            )
        except procrastinate.exceptions.AlreadyEnqueued:
            # Another process queued one between the look and the insert: lock that one.
            conn.execute("ROLLBACK TO SAVEPOINT vodou_defer")
            continue
        except procrastinate.exceptions.ConnectorException as exc:
            raise StoreError(
                f"could not queue run {run_id} for the workers: {exc.__cause__ or exc}; nothing was recorded",
                run=run_id,
            ) from None
        conn.execute("RELEASE SAVEPOINT vodou_defer")
        return True
    raise StoreError(
        f"could not queue run {run_id} for the workers: its waiting job kept changing; nothing was recorded",
        hint="retry",
        run=run_id,
    )
