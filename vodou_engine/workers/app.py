"""The Procrastinate side of the workers: the tasks, deferring from a worker, recovery.

The queue lives in the store's own PostgreSQL database and schema (the
store's URL, ``search_path`` included), so one URL names both and one
backup holds both. Its tables, and deferring a drive in the store's own
transaction (what the run API does), are ``jobs.py``, below the run API,
which this module builds on. Two tasks, on the queue ``vodou``:

``vodou.drive(run_id, [start | saved | firing])``
    Drive one run: start it (when the job says how and it does not exist
    yet), else take it and drive it on, until it parks or ends. Every such
    job is deferred with ``lock=run_id`` (one worker drives a run at a time)
    and ``queueing_lock=run_id`` (a run has at most one job waiting; a second
    request while one waits is already served by it: the driver picks up
    every decision made before it parks).
A worker that cannot drive a run, where another may (a server it does not
have, or that resolves, starts or lists tools differently; another policy;
the recipe file on its disk: ``engine.CannotDriveHere``), leaves the run as
it is, its decisions intact, writes ``handed_back`` in the run's log, and
hands the job back: it goes to the queue :data:`WAITING_QUEUE`, which no
worker takes jobs from, with the workers that could not drive it in its
``declined`` argument. Every worker looks there every
:data:`RECOVER_EVERY_S` seconds and moves a job it has not declined to its
own queue (:func:`private_queue`), which only it takes jobs from: so a
worker that can drive the run gets it, and one that cannot never tries it
twice. A start no live worker can do fails, as before (the run is never
created).

``vodou.tick(timestamp)``
    The schedules' tick, a Procrastinate periodic task (every second by
    default): Procrastinate defers it once per timestamp however many
    processes run the deferrer, and the store decides each due time once
    (``Runs.due``). Each firing becomes a ``vodou.drive`` job with the
    firing's run id as both locks.

A worker that dies (``kill -9``, a machine lost) leaves its jobs ``doing``.
Every worker looks for such jobs every :data:`RECOVER_EVERY_S` seconds and
at start: a job whose worker has sent no heartbeat for :data:`STALLED_AFTER_S`
(the run lease, 30 s, so a job is given back when its run can be taken), or
whose worker is a process of this host that no longer exists (found at
once), is put back in the queue. The worker that picks it up takes the run
with the run API's compare-and-set; an effect found ``executing`` becomes
``unknown``. The queue only makes work *happen*; that nothing happens twice
is the store's doing, so a job run twice is harmless.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import logging
import os
import threading
from collections.abc import Mapping
from typing import Any

from ..errors import StoreError, VodouError
from ..jobs import DRIVE_TASK, QUEUE, drive_options, ensure_queue, load_procrastinate, no_queue
from ..owners import LEASE_S, RENEW_EVERY_S, is_gone, this_process

logger = logging.getLogger("vodou_engine.workers")

WAITING_QUEUE = "vodou.waiting"
"""Drives handed back by a worker that could not do them, until a worker that has not tried takes one."""
TICK_TASK = "vodou.tick"
TICK_CRON = "* * * * * *"
"""The schedules' tick: every second (croniter's sixth field is seconds), as in ``recipe serve``."""
STALLED_AFTER_S = LEASE_S
"""A worker silent this long has its jobs given back: the run lease, so the run can be taken then too."""
HEARTBEAT_S = RENEW_EVERY_S
"""How often a worker says it is alive: as often as a driver renews a run's lease."""
RECOVER_EVERY_S = 2.0
"""How often each worker looks for jobs of dead workers (one small query)."""


def require_procrastinate() -> None:
    """Refuse now (exit 7) a process that will hand work to the workers without Procrastinate."""
    load_procrastinate()


def queue_url(store: str | None = None) -> str:
    """The store's URL (``store``, else ``$VODOU_STORE``); refused unless it is PostgreSQL."""
    # here: the CLI loads this module for its flags, and the store package loads sqlite3
    from ..store import POSTGRES_SCHEMES, default_store_path

    location = os.fspath(store) if store is not None else default_store_path()
    if not location.startswith(POSTGRES_SCHEMES):
        raise no_queue(location)
    return location


# --- the queue's schema --------------------------------------------------------------------
def ensure_schema(url: str) -> None:
    """Create Procrastinate's tables (and ours) in the store's schema, once, whoever races."""
    load_procrastinate()  # psycopg too: exit 7 with the install hint, not an ImportError
    import psycopg

    from ..store.postgres import _safe  # here: with psycopg

    try:
        conn = psycopg.connect(url, autocommit=True, connect_timeout=10)
    except psycopg.OperationalError as exc:
        raise StoreError(
            f"the queue at {_safe(url)} cannot be reached: {str(exc).strip().splitlines()[0]}",
            hint="check that PostgreSQL is running and the URL is right",
        ) from None
    with conn:
        ensure_queue(conn)


# --- the app ------------------------------------------------------------------------------
def build_app(url: str, *, tick_cron: str = TICK_CRON, pool_size: int = 4) -> Any:
    """A Procrastinate app on the store's database, with the engine's two tasks."""
    procrastinate = load_procrastinate()
    connector = procrastinate.PsycopgConnector(conninfo=url, min_size=1, max_size=max(1, pool_size))
    app = procrastinate.App(connector=connector)

    @app.task(name=DRIVE_TASK, queue=QUEUE, pass_context=True)
    async def drive(
        context: Any,
        run_id: str,
        start: dict | None = None,
        saved: dict | None = None,
        firing: dict | None = None,
        declined: list | None = None,
    ) -> dict:
        return await _drive(app, context, run_id, _spec(start=start, saved=saved, firing=firing, declined=declined))

    @app.periodic(cron=tick_cron, periodic_id="schedules")
    @app.task(name=TICK_TASK, queue=QUEUE, lock=TICK_TASK, queueing_lock=TICK_TASK, pass_context=True)
    async def tick(context: Any, timestamp: int) -> dict:
        return await _tick(app, context, timestamp)

    return app


def _spec(**parts: Any) -> dict[str, Any]:
    return {k: v for k, v in parts.items() if v is not None}


async def _drive(app: Any, context: Any, run_id: str, spec: dict[str, Any]) -> dict:
    import asyncio  # here (and msgspec): the CLI loads this module for its flags

    import msgspec

    env = context.additional_context
    host, engine = env["host"], env["engine"]
    try:
        out = await host.call(engine.drive, run_id, spec)
    except asyncio.CancelledError:
        # The worker is stopping: the drive left the run interrupted; another worker goes on
        # (the job keeps the list of workers that could not drive it).
        try:
            await asyncio.shield(defer_drive_async(app, run_id, spec))
        except Exception:  # nothing more to do here; recovery finds it
            logger.exception("could not queue run %s again after stopping its drive", run_id)
        raise
    if out.cannot is not None:
        declined = [*spec.get("declined", []), {"worker": engine.owner, "reason": out.cannot}]
        if out.state is None and not await _another_may(app, declined):
            # A start no live worker can do: it fails, and its run is never created (a
            # schedule's due time is recorded failed, as when its start fails anywhere).
            why = f"no live worker can start run {run_id}: " + "; ".join(
                f"{d['worker']}: {d['reason']}" for d in declined
            )
            if "firing" in spec:
                await host.call(engine.firing_failed, spec["firing"], why)
            raise VodouError(why, run=run_id)
        await hand_back(app, run_id, {**spec, "declined": declined})
    elif out.busy_until is not None:
        # Driven by a live process elsewhere (or one whose lease has not run out yet):
        # look again when the lease would have run out.
        await defer_drive_async(app, run_id, spec, at=out.busy_until + 1.0)
    return msgspec.to_builtins(out)


def private_queue(owner: str) -> str:
    """The queue only the worker ``owner`` (``host:pid:start``) takes jobs from: the drives it
    took from :data:`WAITING_QUEUE`. Short, so its notification channel stays a valid name."""
    return "vodou@" + hashlib.sha256(owner.encode()).hexdigest()[:12]


MERGE_WAITING_SQL = """
UPDATE procrastinate_jobs
   SET queue_name = %(waiting)s,
       args = args || jsonb_build_object('declined', COALESCE(args->'declined', '[]'::jsonb) || %(declined)s::jsonb)
 WHERE queueing_lock = %(run_id)s AND status = 'todo' AND queue_name IN (%(queue)s, %(waiting)s)
"""


async def hand_back(app: Any, run_id: str, spec: Mapping[str, Any]) -> None:
    """Queue the drive of ``run_id`` on :data:`WAITING_QUEUE`, for a worker not among
    ``spec["declined"]``. A job for the run that already waits (a decision made meanwhile)
    waits there too, knowing who declined."""
    procrastinate = load_procrastinate()
    try:
        await app.configure_task(DRIVE_TASK, lock=run_id, queueing_lock=run_id, queue=WAITING_QUEUE).defer_async(
            run_id=run_id, **dict(spec)
        )
    except procrastinate.exceptions.AlreadyEnqueued:
        await app.connector.execute_query_async(
            query=MERGE_WAITING_SQL,
            waiting=WAITING_QUEUE,
            queue=QUEUE,
            run_id=run_id,
            declined=json.dumps(spec.get("declined", [])),
        )


LIVE_WORKERS_SQL = """
SELECT p.owner FROM vodou_queue_workers p JOIN procrastinate_workers w ON w.id = p.worker_id
 WHERE w.last_heartbeat >= now() - make_interval(secs => %(stalled_after)s)
"""


async def _live_owners(app: Any, stalled_after: float = STALLED_AFTER_S) -> set[str]:
    rows = await app.connector.execute_query_all_async(query=LIVE_WORKERS_SQL, stalled_after=float(stalled_after))
    return {r["owner"] for r in rows if not is_gone(r["owner"])}


async def _another_may(app: Any, declined: list[dict]) -> bool:
    """Whether a live worker has not tried this job yet."""
    return bool(await _live_owners(app) - {d.get("worker") for d in declined})


CLAIM_SQL = """
WITH mine AS (
    SELECT j.id FROM procrastinate_jobs j
     WHERE j.queue_name = %(waiting)s AND j.status = 'todo'
       AND (NOT COALESCE(j.args->'declined', '[]'::jsonb) @> jsonb_build_array(jsonb_build_object('worker', %(owner)s::text))
            OR EXISTS (SELECT 1 FROM runs r WHERE r.id = j.queueing_lock AND r.state IN ('succeeded', 'failed', 'declined', 'cancelled')))
     ORDER BY j.id LIMIT %(limit)s FOR UPDATE SKIP LOCKED
)
UPDATE procrastinate_jobs j SET queue_name = %(mine)s FROM mine WHERE j.id = mine.id RETURNING j.id
"""


async def claim_waiting(app: Any, owner: str, *, limit: int = 20) -> list[int]:
    """Move drives handed back by other workers, that ``owner`` has not declined, to its own
    queue (and those of runs that have ended meanwhile, which any worker closes); the ids."""
    rows = await app.connector.execute_query_all_async(
        query=CLAIM_SQL, waiting=WAITING_QUEUE, owner=owner, mine=private_queue(owner), limit=limit
    )
    ids = [r["id"] for r in rows]
    if ids:
        await app.connector.execute_query_async(
            query="SELECT pg_notify(%(channel)s, %(payload)s)",
            channel=f"procrastinate_queue_v1#{private_queue(owner)}",
            payload=json.dumps({"type": "job_inserted", "job_id": ids[0]}),
        )
        logger.info("took %d run(s) other workers handed back: jobs %s", len(ids), ids)
    return ids


async def _tick(app: Any, context: Any, timestamp: int) -> dict:
    env = context.additional_context
    host, engine = env["host"], env["engine"]
    fired = await host.call(engine.due, f"worker {this_process()}")
    for f in fired:
        await defer_drive_async(app, f["run_id"], {"firing": f})
    return {"timestamp": timestamp, "fired": [f["run_id"] for f in fired]}


async def defer_drive_async(
    app: Any, run_id: str, spec: Mapping[str, Any] | None = None, *, at: float | None = None
) -> bool:
    """Queue a drive of ``run_id`` (from a worker's loop); False when one is already waiting."""
    procrastinate = load_procrastinate()
    try:
        await app.configure_task(DRIVE_TASK, **drive_options(run_id, at)).defer_async(run_id=run_id, **dict(spec or {}))
    except procrastinate.exceptions.AlreadyEnqueued:
        return False
    return True


# --- the tick, deferred by processes that run no jobs (recipe serve) ----------------------------
async def defer_ticks(url: str, *, tick_cron: str = TICK_CRON) -> None:
    """Defer the schedules' tick at every time of ``tick_cron`` (Procrastinate's periodic
    deferrer alone: this process defers, workers run). Every worker runs the same
    deferrer; Procrastinate inserts one job per timestamp however many processes try.
    Runs until cancelled."""
    import asyncio  # here: the CLI loads this module for its flags

    from procrastinate.periodic import PeriodicDeferrer

    await asyncio.to_thread(ensure_schema, url)
    app = build_app(url, tick_cron=tick_cron, pool_size=1)
    async with app.open_async():
        await PeriodicDeferrer(registry=app.periodic_registry, **app.periodic_defaults).worker()


class TickThread:
    """:func:`defer_ticks` on an asyncio loop in a thread of its own, for a trio program
    (``recipe serve`` on a PostgreSQL store): ``start()`` before serving, ``stop()`` after."""

    def __init__(self, url: str, *, tick_cron: str = TICK_CRON):
        self.url = queue_url(url)
        self.tick_cron = tick_cron
        self._loop: Any = None  # the thread's asyncio loop
        self._task: Any = None
        self._thread: Any = None

    def start(self) -> None:
        import asyncio  # here: the CLI loads this module for its flags

        started = threading.Event()

        def main() -> None:
            async def body() -> None:
                self._loop = asyncio.get_running_loop()
                self._task = asyncio.current_task()
                started.set()
                try:
                    await defer_ticks(self.url, tick_cron=self.tick_cron)
                except asyncio.CancelledError:
                    pass
                except Exception:  # the web app goes on; workers defer ticks too
                    logger.exception("deferring the schedules' tick stopped")

            asyncio.run(body())

        self._thread = threading.Thread(target=main, name="vodou-tick", daemon=True)
        self._thread.start()
        started.wait()

    def stop(self, timeout: float = 5.0) -> None:
        if self._loop is not None and self._task is not None:
            try:
                self._loop.call_soon_threadsafe(self._task.cancel)
            except RuntimeError:
                pass
        if self._thread is not None:
            self._thread.join(timeout)


# --- deferring from anywhere else (the CLI, the web app): plain blocking calls ----------------
class Queue:
    """The queue on a connection of its own, for what is not a run API call: deferring a
    drive by hand, and reading the jobs (tests, benchmarks). Blocking calls; from an async
    program, call them on a worker thread. The run API queues work itself, in the store's
    own transaction (``Runs.queue``, ``Runs.approve``, ``Runs.queue_resume``)."""

    def __init__(self, store: str | None = None):
        self.url = queue_url(store)
        self._app: Any = None
        self._conn: Any = None

    def _connection(self) -> Any:
        import psycopg

        if self._conn is None or self._conn.closed:
            ensure_schema(self.url)
            self._conn = psycopg.connect(self.url, autocommit=True, connect_timeout=10)
        if self._app is None:
            procrastinate = load_procrastinate()
            self._app = procrastinate.App(connector=procrastinate.SyncPsycopgConnector(conninfo=self.url))
        return self._conn

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def __enter__(self) -> Queue:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def defer_drive(self, run_id: str, spec: Mapping[str, Any] | None = None, *, at: float | None = None) -> bool:
        """Queue a drive of ``run_id``; False when a job for it was already waiting (it serves this request too)."""
        procrastinate = load_procrastinate()
        conn = self._connection()
        try:
            self._app.configure_task(DRIVE_TASK, connection=conn, **drive_options(run_id, at)).defer(
                run_id=run_id, **dict(spec or {})
            )
        except procrastinate.exceptions.AlreadyEnqueued:
            return False
        return True

    def defer_resume(self, run_id: str) -> bool:
        """A worker drives ``run_id`` on (the run API does this itself: ``Runs.queue_resume``)."""
        return self.defer_drive(run_id)

    # --- reading the queue (for tests, benchmarks, `recipe worker --status` later) --------------
    def jobs(self, *, status: str | None = None) -> list[dict[str, Any]]:
        conn = self._connection()
        rows = conn.execute(
            "SELECT id, task_name, status::text, lock, queueing_lock, attempts, worker_id FROM procrastinate_jobs"
            + (" WHERE status = %s::procrastinate_job_status" if status else "")
            + " ORDER BY id",
            (status,) if status else (),
        ).fetchall()
        keys = ("id", "task", "status", "lock", "queueing_lock", "attempts", "worker_id")
        return [dict(zip(keys, r, strict=True)) for r in rows]


# --- recovery: jobs of workers that died --------------------------------------------------------
ORPHANS_SQL = """
SELECT j.id, j.worker_id, j.queueing_lock, j.queue_name, p.owner,
       (w.id IS NULL OR w.last_heartbeat < now() - make_interval(secs => %(stalled_after)s)) AS silent
  FROM procrastinate_jobs j
  LEFT JOIN procrastinate_workers w ON w.id = j.worker_id
  LEFT JOIN vodou_queue_workers p ON p.worker_id = j.worker_id
 WHERE j.status = 'doing' AND (j.queue_name = %(queue)s OR j.queue_name LIKE 'vodou@%%')
   AND j.worker_id IS DISTINCT FROM %(me)s
"""
PRIVATE_TODO_SQL = "SELECT id, queue_name FROM procrastinate_jobs WHERE status = 'todo' AND queue_name LIKE 'vodou@%%'"
BACK_TO_WAITING_SQL = "UPDATE procrastinate_jobs SET queue_name = %(waiting)s WHERE id = %(id)s AND status = 'todo' AND queue_name = %(queue)s"


async def register_worker(app: Any, worker_id: int, owner: str) -> None:
    await app.connector.execute_query_async(
        query="INSERT INTO vodou_queue_workers (worker_id, owner) VALUES (%(worker_id)s, %(owner)s) ON CONFLICT (worker_id) DO UPDATE SET owner = EXCLUDED.owner",
        worker_id=worker_id,
        owner=owner,
    )


async def recover(app: Any, me: int | None, *, stalled_after: float = STALLED_AFTER_S) -> list[int]:
    """Give back the jobs of dead workers; the ids of the jobs given back (or closed because
    another job for the same run was already waiting)."""
    procrastinate = load_procrastinate()
    rows = await app.connector.execute_query_all_async(
        query=ORPHANS_SQL, stalled_after=float(stalled_after), queue=QUEUE, me=me
    )
    dead_workers: set[int] = set()
    recovered: list[int] = []
    for row in rows:
        gone = row["silent"] or (row["owner"] is not None and is_gone(row["owner"]))
        if not gone:
            continue
        if row["worker_id"] is not None:
            dead_workers.add(row["worker_id"])
        manager = app.job_manager
        # A drive a worker had taken from the waiting queue goes back there, for a worker that can.
        queue = WAITING_QUEUE if row["queue_name"] != QUEUE else None
        try:
            await manager.retry_job_by_id_async(
                job_id=row["id"], retry_at=datetime.datetime.now(datetime.UTC), queue=queue
            )
        except procrastinate.exceptions.UniqueViolation:
            # Another job for this run waits already: it drives the run; this one is closed.
            try:
                await manager.finish_job_by_id_async(
                    job_id=row["id"], status=procrastinate.jobs.Status.FAILED, delete_job=False
                )
            except procrastinate.exceptions.ConnectorException:
                continue
        except procrastinate.exceptions.ConnectorException:
            continue  # another worker recovered it first
        recovered.append(row["id"])
        logger.warning(
            "job %s (%s) of a dead worker (%s) is back in the queue",
            row["id"],
            row["queueing_lock"],
            row["owner"] or f"worker {row['worker_id']}",
        )
    if dead_workers:
        await app.connector.execute_query_async(
            query="DELETE FROM procrastinate_workers WHERE id = ANY(%(ids)s)", ids=sorted(dead_workers)
        )
    waiting = await app.connector.execute_query_all_async(query=PRIVATE_TODO_SQL)
    if waiting:
        live = {private_queue(o) for o in await _live_owners(app, stalled_after)}
        for row in waiting:
            if row["queue_name"] not in live:  # taken from the waiting queue by a worker that died since
                await app.connector.execute_query_async(
                    query=BACK_TO_WAITING_SQL, waiting=WAITING_QUEUE, id=row["id"], queue=row["queue_name"]
                )
                recovered.append(row["id"])
                logger.warning(
                    "job %s, taken by a worker that is gone, waits again for a worker that can drive it", row["id"]
                )
    if recovered:
        # A job put back by an UPDATE sends no notification of its own: wake the workers.
        await app.connector.execute_query_async(
            query="SELECT pg_notify(%(channel)s, %(payload)s)",
            channel=f"procrastinate_queue_v1#{QUEUE}",
            payload=json.dumps({"type": "job_inserted", "job_id": recovered[0]}),
        )
    return recovered
