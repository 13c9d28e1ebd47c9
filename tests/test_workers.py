"""Scale-out: Procrastinate workers driving runs on a PostgreSQL store (docs/scale-out.md).

Every test gets a schema of its own in the PostgreSQL server at
``$VODOU_TEST_PG`` (default ``postgresql://postgres@127.0.0.1:5432/test``),
created by the test and dropped after it; without PostgreSQL they fail
saying so. Effects are counted where they land: the call log the server
itself writes (tests/rogue_server.py, a standard-library MCP server that
starts in tens of ms, fsyncing one line per call before it acts). Waiting is
always polling the database for the state wanted, under a deadline.

The bulk tests run ``recipe worker`` itself (``python -m vodou_engine worker``)
and queue and approve through the run API (``Runs.queue``, ``Runs.approve``),
the calls ``recipe run --queue``, ``recipe approve`` and the inbox make.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import re
import signal
import time
from collections import Counter
from datetime import UTC, datetime
from functools import partial

import pytest
import trio
import trio.lowlevel
from conftest import rogue_calls, rogue_server
from workers_helpers import Workers, fresh_schema, pg_or_fail, queue_counts, run_states, wait_for

from vodou_engine.workers import Queue

RUNS = int(os.environ.get("VODOU_TEST_WORKER_RUNS", "200"))
"""Runs in each of the two bulk tests (the issue's figure; lower it locally to go faster)."""
FANOUT = """recipe "fan-out"
a: rogue.get_status {}
b: rogue.get_status {}
c: rogue.get_status {}
post: rogue.post_message {"channel": "#ops", "text": "done"}
"""
FINAL = {"succeeded", "failed", "declined", "cancelled"}


def setup_files(tmp_path, **rogue_env):
    log = tmp_path / "rogue.log"
    servers = tmp_path / "mcp.json"
    servers.write_text(json.dumps({"mcpServers": {"rogue": rogue_server(log, **rogue_env)}}))
    recipe = tmp_path / "fan-out.recipe"
    recipe.write_text(FANOUT)
    return log, servers, recipe


def approve_all(url: str, servers, ids: list[str], lanes: int = 4) -> None:
    """The script that approves in bulk, ``lanes`` approvals at a time: ``Runs.approve`` on a
    PostgreSQL store records each decision and queues the run's resume in one transaction;
    the workers drive it on."""
    from vodou_engine.runs import Runs

    async def lane(mine: list[str]) -> None:
        runs = Runs(store=url, servers=servers)  # one operation at a time per Runs: one per lane
        assert runs.workers
        try:
            for run_id in mine:
                report = await runs.approve(run_id, "post", actor="ana", proof="test")
                assert report.queued and report.run == run_id
        finally:
            runs.close()

    async def approve() -> None:
        async with trio.open_nursery() as nursery:
            for i in range(lanes):
                nursery.start_soon(lane, ids[i::lanes])

    trio.run(approve)


def queue_runs(url: str, recipe, n: int, lanes: int = 4) -> list[str]:
    """``recipe run --queue FILE``, ``n`` times, through the run API it calls, ``lanes`` at a time."""
    from concurrent.futures import ThreadPoolExecutor

    from vodou_engine.runs import Runs

    def lane(count: int) -> list[str]:
        runs = Runs(store=url)
        try:
            return [runs.queue(recipe, actor="ana") for _ in range(count)]
        finally:
            runs.close()

    with ThreadPoolExecutor(lanes) as pool:
        return [
            run_id for part in pool.map(lane, [n // lanes + (i < n % lanes) for i in range(lanes)]) for run_id in part
        ]


def effects(url: str) -> dict[str, tuple[str, str]]:
    """(state, idempotency key) of every run's effect, from the store."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        return {r: (s, k) for r, s, k in conn.execute("SELECT run_id, state, idempotency_key FROM effects").fetchall()}


def rogue_starts(log) -> list[int]:
    """The pid of every rogue server start, from its own log."""
    lines = [json.loads(line) for line in log.read_text().splitlines() if line.strip()] if log.exists() else []
    return [r["pid"] for r in lines if r.get("event") == "start"]


def leftover_jobs(url: str) -> list[dict]:
    """Jobs still in the queue (a successful one is deleted), with what Procrastinate recorded of each."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        jobs = conn.execute(
            "SELECT id, task_name, status::text, lock, attempts, worker_id, args::text FROM procrastinate_jobs ORDER BY id"
        ).fetchall()
        events = conn.execute("SELECT job_id, type::text, at FROM procrastinate_events ORDER BY id").fetchall()
    return [{"job": j, "events": [e for e in events if e[0] == j[0]]} for j in jobs]


def queue_empty(url: str) -> bool:
    counts = queue_counts(url)
    return not counts.get("todo") and not counts.get("doing")


def test_four_workers_drive_runs_and_run_every_effect_exactly_once(tmp_path):
    log, servers, recipe = setup_files(tmp_path)

    with fresh_schema() as url, Workers(url, servers, tmp_path) as workers:
        workers.start(4, concurrency=4, recipe=True)
        ids = queue_runs(url, recipe, RUNS)  # while the workers boot
        workers.wait_ready(4)
        wait_for(
            lambda: set(run_states(url, ids).values()) == {"parked"},
            "every run to park at its approval",
            timeout=120,
            every=0.2,
        )
        assert rogue_calls(log, "post_message") == []  # nothing before a person's yes
        approve_all(url, servers, ids)
        wait_for(
            lambda: set(run_states(url, ids).values()) == {"succeeded"}, "every run to succeed", timeout=120, every=0.2
        )
        wait_for(lambda: queue_empty(url), "the queue to empty")
        assert queue_counts(url) == {}, (
            leftover_jobs(url),
            workers.logs(),
        )  # every drive succeeded (and was deleted), none failed
        done = effects(url)
        assert workers.stop() == [0, 0, 0, 0]

    posts = rogue_calls(log, "post_message")
    keys = Counter(c["arguments"]["idempotency_key"] for c in posts)
    assert len(posts) == RUNS and set(keys.values()) == {1}  # every effect exactly once, server side
    assert keys.keys() == {k for _, k in done.values()} and {s for s, _ in done.values()} == {"executed"}
    assert len(rogue_calls(log, "get_status")) == 3 * RUNS
    servers_used = {c["pid"] for c in rogue_calls(log)}
    assert 2 <= len(servers_used) <= 4  # one warm server per worker, kept across every job it ran


def test_a_worker_killed_midway_doubles_no_effect_and_leaves_nothing_stuck(tmp_path, cli):
    # Each effect takes 100 ms at the server, and the approvals go on while the worker is
    # killed: the victim is one with an effect executing at that moment.
    import threading

    log, servers, recipe = setup_files(tmp_path, ROGUE_MODES="post_message=slow:100")

    with fresh_schema() as url, Workers(url, servers, tmp_path) as workers:
        workers.start(4, concurrency=4, recipe=True)
        ids = queue_runs(url, recipe, RUNS)
        workers.wait_ready(4)
        wait_for(
            lambda: set(run_states(url, ids).values()) == {"parked"},
            "every run to park at its approval",
            timeout=120,
            every=0.2,
        )
        approving = threading.Thread(target=approve_all, args=(url, servers, ids))
        approving.start()
        victim = wait_for(
            lambda: len(rogue_calls(log, "post_message")) >= RUNS // 4 and executing_worker(url),
            "a quarter of the effects, and a worker with an effect executing",
        )
        os.kill(victim, signal.SIGKILL)
        killed_at = time.monotonic()
        next(
            p for p in workers.procs if p.pid == victim
        ).wait()  # reaped, as a supervisor would (a zombie still looks alive)
        approving.join()

        def settled() -> bool:
            states = run_states(url, ids)
            return all(s in FINAL or s == "parked" for s in states.values()) and queue_empty(url)

        wait_for(settled, "every run to end or park, and the queue to empty", timeout=120, every=0.2)
        recovered_in = time.monotonic() - killed_at
        states, done = run_states(url, ids), effects(url)
        taken_over = took_over(url, victim)
        survivors = [p for p in workers.procs if p.pid != victim]
        for p in survivors:
            p.send_signal(signal.SIGTERM)
        assert [p.wait(30) for p in survivors] == [0, 0, 0]

        posts = Counter(c["arguments"]["idempotency_key"] for c in rogue_calls(log, "post_message"))
        assert max(posts.values()) == 1, "an effect ran twice"
        unknown = []
        for run_id in ids:
            state, key = done[run_id]
            if states[run_id] == "succeeded":
                assert state == "executed" and posts[key] == 1
            else:  # its driver died mid-effect: doubt, for a person to settle, never a retry
                assert (states[run_id], state) == ("parked", "unknown"), (run_id, states[run_id], state)
                unknown.append(run_id)
        assert taken_over, "no run of the dead worker was taken over"
        for run_id in unknown[:3]:
            shown = cli("show", run_id, "--store", url, expect=None).out
            assert (
                f"recipe reconcile {run_id} post --executed" in shown
                and f"recipe reconcile {run_id} post --not-executed" in shown
            )
        assert all(states[r] == "succeeded" for r in ids if r not in unknown)
    print(
        f"\nkilled worker {victim}: {len(taken_over)} runs taken over, {len(unknown)} effects unknown, settled {recovered_in:.1f} s after the kill"
    )


def executing_worker(url: str) -> int | None:
    """The pid of the worker (on this host) with the most effects executing right now."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT r.owner FROM effects e JOIN runs r ON r.id = e.run_id WHERE e.state = 'executing' "
            "GROUP BY r.owner ORDER BY count(*) DESC LIMIT 1"
        ).fetchone()
    return int(row[0].rsplit(":", 2)[1]) if row else None


def took_over(url: str, pid: int) -> list[str]:
    """Runs whose drive was taken over from the process ``pid`` (the store's own events)."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute("SELECT run_id, data_json FROM events WHERE kind = 'resumed'").fetchall()
    return [r for r, data in rows if (json.loads(data or "{}").get("took_over") or "").split(":")[1:2] == [str(pid)]]


def test_two_serving_schedulers_and_four_workers_fire_each_due_time_once(tmp_path):
    """A schedule firing every minute, on a clock 40 times faster (a minute every 1.5 s), the
    tick deferred by two `recipe serve` processes and by every worker, run by four workers;
    the serve processes drive nothing (they start no MCP server)."""
    from vodou_engine.runs import Runs

    log, servers, _ = setup_files(tmp_path)
    t0 = datetime(2026, 3, 2, 8, 0, 0, tzinfo=UTC).timestamp()
    start, speed = time.time(), 40.0
    fast = {"VODOU_TEST_CLOCK_T0": str(t0), "VODOU_TEST_CLOCK_START": str(start), "VODOU_TEST_CLOCK_SPEED": str(speed)}
    clock = lambda: t0 + (time.time() - start) * speed  # noqa: E731
    wanted = 3
    with fresh_schema() as url, Workers(url, servers, tmp_path, env=fast) as procs:
        runs = Runs(store=url, servers=servers, clock=clock)
        runs.save(
            "tick.recipe",
            text='recipe "tick"\npost: rogue.post_message {"channel": "#tick", "text": "tick"}\n  without asking\n',
            by="ana",
        )
        serving = procs.serve(2)
        procs.start(4, concurrency=2)
        procs.wait_ready(4)
        procs.wait_serving()
        schedule = runs.add_schedule(
            "every-minute", recipe="tick", cron="* * * * *", tz="UTC", by="ana"
        )  # first due in under 1.5 s
        last_due = schedule.next_due + 60 * (wanted - 1)

        def done() -> bool:
            upto = [f for f in runs.firings("every-minute", limit=100) if f.due_at <= last_due]
            states = run_states(url)
            return len(upto) == wanted and all(
                states.get(f.run_id) == "succeeded" for f in upto if f.outcome == "fired"
            )

        wait_for(done, f"{wanted} due times", timeout=60, every=0.1)
        assert [procs.children(p) for p in serving] == [set(), set()]  # no server started: serve queues, workers drive
        assert procs.stop() == [0] * 6
        firings = runs.firings("every-minute", limit=100)
        stored = run_states(url)
        runs.close()

    due = sorted(f.due_at for f in firings)
    assert (
        due[0] == schedule.next_due
        and len(due) == len(set(due))
        and all(b - a == 60 for a, b in itertools.pairwise(due))
    )  # each minute decided once
    ran = [f for f in firings if f.outcome == "fired" and f.due_at <= last_due]
    assert len(ran) >= wanted - 1  # a tick late by a whole (fast) minute folds that due time into the next
    assert all(stored[f.run_id] == "succeeded" for f in ran)
    assert set(stored) <= {f.run_id for f in firings if f.outcome == "fired"}  # no run but a firing's: one per due time
    posts = Counter(c["arguments"]["idempotency_key"] for c in rogue_calls(log, "post_message"))
    assert len(posts) == len(stored) and set(posts.values()) == {1}  # each due time's effect once, server side


TEAM = """recipe "team"
approvers: ana
a: rogue.get_status {}
post: rogue.post_message {"channel": "#team", "text": "from the inbox"}
"""


def test_on_postgresql_the_cli_and_the_inbox_queue_work_and_a_worker_does_it(tmp_path, cli, monkeypatch):
    """On a PostgreSQL store, `recipe run --queue` queues a start; `recipe approve` and the
    inbox's approve button record the decision and queue the resume, driving nothing;
    `--here` drives here; the inbox's service defers the schedules' tick and starts no
    server. Then one `recipe worker` does all that was queued, each effect once at the server,
    every one from a server of the worker."""
    from starlette.testclient import TestClient
    from web_helpers import form, sign_in

    from vodou_engine.policy import Policy
    from vodou_engine.runs import Runs
    from vodou_engine.servers import load_servers
    from vodou_engine.service import Service
    from vodou_engine.web.app import create_app
    from vodou_engine.web.config import WebConfig
    from vodou_engine.web.identity import add_approver

    log, servers, recipe = setup_files(tmp_path)
    team = tmp_path / "team.recipe"
    team.write_text(TEAM)
    monkeypatch.chdir(tmp_path)  # where the worker runs: a run started here is bound to the servers it keeps warm
    with fresh_schema() as url, Workers(url, servers, tmp_path) as workers:
        store = ("--store", url)
        runs = Runs(store=url, servers=servers)
        runs.save(team, by="ana")
        d = trio.run(lambda: runs.start(team, actor="ana")).run  # driven here (the API's start): parks
        assert run_states(url, [d]) == {d: "parked"}

        # the inbox over a service on this store: it queues, defers the tick, drives nothing
        svc = Service(store=url, servers=load_servers(str(servers)), policy=Policy())
        assert svc.workers
        started = len(rogue_starts(log))
        with TestClient(
            create_app(svc, WebConfig(allowed_hosts=["testserver"])), backend="trio", base_url="http://testserver"
        ) as client:
            _, link = add_approver(runs, "ana", by="test", base_url="http://testserver")
            ana = sign_in(client, link, "ana")
            res = ana.post(f"/runs/{d}/approve", form(ana.get(f"/runs/{d}").text, f"/runs/{d}/approve"))
            assert res.status_code == 200 and "A worker drives the run on" in res.text
            res = ana.post("/recipes/team/run", form(ana.get("/recipes/team").text, "/recipes/team/run"), follow=False)
            assert res.status_code == 303 and "done=started-queued" in res.headers["location"]
            e = res.headers["location"].split("run=")[1]
            wait_for(
                lambda: {"vodou.tick", e} <= {j["lock"] for j in Queue(url).jobs()},
                "the service to queue the run and defer the schedules' tick",
            )
        assert len(rogue_starts(log)) == started  # the service started no server
        assert run_states(url, [d]) == {d: "parked"} and [a.state for a in runs.show(d).approvals] == ["approved"]

        (worker,) = workers.start(1, concurrency=4, recipe=True)  # boots while the CLI queues more

        queued = cli("run", "--queue", recipe, *store, "--json", expect=0).json()
        a = queued["run"]
        assert queued == {"run": a, "queued": True}
        b = cli("run", recipe, *store, "--json", expect=3).json()["run"]  # no --queue: driven here, parks
        approved = cli("approve", b, "post", "--yes", *store, expect=0)
        assert f"run {b} is queued for the workers" in approved.out and f"recipe show {b} --store {url}" in approved.out
        c = cli("run", recipe, *store, "--json", expect=3).json()["run"]
        here = cli("approve", c, "post", "--yes", "--here", *store, expect=0)
        assert f"run {c} succeeded" in here.out

        wait_for(
            lambda: (
                run_states(url, [a, b, c, d, e])
                == {a: "parked", b: "succeeded", c: "succeeded", d: "succeeded", e: "parked"}
            ),
            "the worker to do what was queued",
        )
        wait_for(lambda: queue_empty(url), "the queue to empty")
        done = effects(url)
        warm = workers.children(worker)  # the worker's servers, still running
        assert workers.stop() == [0]
        runs.close()

    posts = {c["arguments"]["idempotency_key"]: c for c in rogue_calls(log, "post_message")}
    assert len(rogue_calls(log, "post_message")) == len(posts) == 3 and set(posts) == {
        done[r][1] for r in (b, c, d)
    }  # each once
    assert posts[done[b][1]]["pid"] in warm and posts[done[d][1]]["pid"] in warm  # approved here, done by the worker
    assert posts[done[c][1]]["pid"] not in warm  # --here: driven by the approving process


# --- the parts, without worker processes -------------------------------------------------------
def test_a_run_has_one_driver_and_at_most_one_waiting_job():

    with fresh_schema() as url, Queue(url) as q:
        assert q.defer_resume("r-1") is True
        assert q.defer_resume("r-1") is False  # one already waits: it serves this request too
        assert q.defer_resume("r-2") is True
        jobs = q.jobs()
        assert [(j["task"], j["status"], j["lock"], j["queueing_lock"]) for j in jobs] == [
            ("vodou.drive", "todo", "r-1", "r-1"),
            ("vodou.drive", "todo", "r-2", "r-2"),
        ]


def test_a_request_served_by_a_waiting_job_holds_it_until_its_own_writes_are_visible():
    """Queueing in the store's transaction (the run API's way: a decision and its resume):
    with a job already waiting for the run, nothing is added, and that job is row-locked
    until the transaction ends, so no worker starts it before the decision is visible."""
    from vodou_engine.jobs import defer_drive_in, store_queue
    from vodou_engine.store import open_store

    with fresh_schema() as url:
        store = open_store(url)
        conn = store_queue(store)
        with store.transaction():
            assert defer_drive_in(conn, "r-1") is True
        other = pg_or_fail()
        other.execute(f"SET search_path = {url.rsplit('%3D', 1)[1]}")
        (worker,) = other.execute("INSERT INTO procrastinate_workers DEFAULT VALUES RETURNING id").fetchone()

        def fetch():  # what a worker runs to take its next job
            return other.execute(
                "SELECT id, status::text FROM procrastinate_fetch_job_v2(ARRAY['vodou'], %s) WHERE id IS NOT NULL",
                (worker,),
            ).fetchall()

        with store.transaction():
            assert defer_drive_in(conn, "r-1") is False  # the waiting job serves this request too
            assert fetch() == []  # skipped while this transaction holds it
        ((_job, status),) = fetch()  # committed: the next fetch takes it
        assert status == "doing" and [j["status"] for j in Queue(url).jobs()] == ["doing"]
        other.close()
        store.close()


def test_the_queue_needs_a_postgresql_store(tmp_path, cli):
    from vodou_engine.errors import QueueError
    from vodou_engine.runs import Runs

    sqlite = str(tmp_path / "runs.db")
    with pytest.raises(QueueError, match="PostgreSQL store"):
        Queue(sqlite)
    runs = Runs(store=sqlite)
    assert (
        not runs.workers
        and Runs(store="postgresql://db/vodou").workers
        and not Runs(store="postgresql://db/vodou", workers=False).workers
    )
    with pytest.raises(QueueError, match="PostgreSQL store") as refused:
        runs.queue(tmp_path / "nothing.recipe", actor="ana")
    assert (refused.value.code, refused.value.exit_code) == ("queue.unavailable", 7)
    (tmp_path / "a.recipe").write_text(FANOUT)
    for res in (cli("run", "--queue", tmp_path / "a.recipe"), cli.proc("worker")):  # the real entry point too
        assert (
            res.code == 7
            and "need a PostgreSQL store" in res.err
            and "postgresql://" in res.err
            and "Traceback" not in res.err
        ), res
    assert not (tmp_path / "runs.db").exists()  # nothing was created for nothing


def test_without_postgresql_these_tests_fail_saying_so(monkeypatch):
    import pg_helpers

    monkeypatch.setattr(pg_helpers, "PG", "postgresql://postgres@127.0.0.1:1/test")
    with (
        pytest.raises(
            pytest.fail.Exception,
            match=re.escape("PostgreSQL is not reachable at postgresql://postgres@127.0.0.1:1/test"),
        ),
        fresh_schema(),
    ):
        pass


def test_the_engine_thread_returns_raises_and_cancels_across_the_boundary():
    import threading

    from vodou_engine.workers.host import EngineHost

    host = EngineHost()
    ended: list[str] = []
    running = threading.Event()

    async def add(a, b):
        await trio.lowlevel.checkpoint()
        return a + b

    async def boom():
        raise KeyError("from trio")

    async def forever():
        running.set()
        try:
            await trio.sleep_forever()
        finally:
            with trio.CancelScope(shield=True):
                await trio.sleep(0.05)  # a drive leaving its run interrupted, before the job ends
            ended.append("cleaned up")

    async def main():
        await host.start()
        assert await host.call(add, 2, 3) == 5
        with pytest.raises(KeyError, match="from trio"):
            await host.call(boom)
        task = asyncio.create_task(host.call(forever))
        await asyncio.to_thread(running.wait, 10)  # the trio side has started it
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert ended == ["cleaned up"]  # the trio side had finished before the cancellation returned
        host.stop()
        await host.wait_stopped(5)

    asyncio.run(main())


def test_a_job_of_a_silent_worker_on_another_host_comes_back_after_the_lease(tmp_path):
    """A worker on another machine cannot be checked by pid: its jobs come back once it has
    been silent for the lease (30 s), simulated here by an old heartbeat; a run it still
    holds under a live lease is looked at again when that lease runs out."""
    from vodou_engine.owners import LEASE_S
    from vodou_engine.workers.app import build_app, recover

    with fresh_schema() as url, Queue(url) as q:
        q.defer_resume("r-far")
        conn = pg_or_fail()
        conn.execute(f"SET search_path = {url.rsplit('%3D', 1)[1]}")
        (worker,) = conn.execute("INSERT INTO procrastinate_workers DEFAULT VALUES RETURNING id").fetchone()
        conn.execute("INSERT INTO vodou_queue_workers (worker_id, owner) VALUES (%s, 'elsewhere:4242:1')", (worker,))
        conn.execute("UPDATE procrastinate_jobs SET status = 'doing', worker_id = %s", (worker,))

        async def look() -> list[int]:
            app = build_app(url, pool_size=1)
            async with app.open_async():
                return await recover(app, None)

        assert asyncio.run(look()) == []  # alive as far as anyone can tell: left alone
        conn.execute(
            "UPDATE procrastinate_workers SET last_heartbeat = now() - make_interval(secs => %s)", (LEASE_S + 1,)
        )
        assert len(asyncio.run(look())) == 1
        assert [(j["status"], j["attempts"], j["worker_id"]) for j in q.jobs()] == [("todo", 1, None)]
        conn.close()


def test_a_retried_start_goes_on_with_its_run_and_a_run_driven_elsewhere_waits_for_its_lease(tmp_path):
    """A start job run twice (its first worker died after creating the run) drives the one
    run on; a run held by a live driver on another host is left alone and looked at again
    when that driver's lease would run out."""
    from vodou_engine.owners import LEASE_S
    from vodou_engine.policy import load_policy
    from vodou_engine.runs import Runs
    from vodou_engine.servers import load_servers
    from vodou_engine.workers.engine import Engine

    log, servers, recipe = setup_files(tmp_path)
    spec = {"start": {"text": FANOUT, "path": str(recipe), "actor": "ana"}}
    with fresh_schema() as url:
        engine = Engine(url, load_servers(str(servers)), load_policy(None))

        async def drive_twice_then_busy(runs):
            async with trio.open_nursery() as nursery:
                close = await engine.setup(nursery)
                try:
                    first = await engine.drive("r-once", spec)
                    again = await engine.drive("r-once", spec)
                    assert runs.store().take_run(
                        "r-once", "elsewhere:4242:1", lease_s=LEASE_S
                    )  # a live driver on another host
                    busy = await engine.drive("r-once")
                    return first, again, busy
                finally:
                    close()

        runs = Runs(store=url, servers=servers)
        first, again, busy = trio.run(drive_twice_then_busy, runs)
        assert (first.state, again.state) == ("parked", "parked") and [r.run for r in runs.list()] == ["r-once"]
        assert len(rogue_calls(log, "get_status")) == 3  # its reads were not run again
        held = runs.store().get_run("r-once")
        assert held.state == "running" and held.owner == "elsewhere:4242:1"  # left to its driver
        assert (busy.busy_until, busy.owner) == (
            held.lease_expires_at,
            "elsewhere:4242:1",
        )  # looked at again when its lease runs out
        runs.close()
        assert rogue_calls(log, "post_message") == []


def test_a_worker_compiles_a_queued_recipe_at_most_once_per_run(tmp_path, monkeypatch):
    """A worker starts the same queued recipe again and again: it compiles it (offline, to
    know its servers, then with their annotations) no more than once per run, and every
    run still does its effect once (the server's own log)."""
    import vodou_engine.compiler as compiler
    from vodou_engine.policy import load_policy
    from vodou_engine.servers import load_servers
    from vodou_engine.workers.engine import Engine

    log, servers, recipe = setup_files(tmp_path)
    text = FANOUT + "  without asking\n"  # one job is one whole run
    compiles = []
    real = compiler._compile
    monkeypatch.setattr(compiler, "_compile", lambda *a, **k: compiles.append(1) or real(*a, **k))
    with fresh_schema() as url:
        engine = Engine(url, load_servers(str(servers)), load_policy(None))
        spec = {"start": {"text": text, "path": str(recipe), "actor": "ana"}}

        async def drive_all():
            async with trio.open_nursery() as nursery:
                close = await engine.setup(nursery)
                try:
                    return [await engine.drive(f"r-{i}", spec) for i in range(4)]
                finally:
                    close()

        outs = trio.run(drive_all)
    assert [o.state for o in outs] == ["succeeded"] * 4
    assert len(rogue_calls(log, "post_message")) == 4
    assert 1 <= len(compiles) <= len(outs)


COMMIT_MODES = """
CREATE TABLE commit_modes (seq bigint GENERATED ALWAYS AS IDENTITY, tbl text, op text, mode text);
CREATE FUNCTION commit_mode() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO commit_modes (tbl, op, mode) VALUES (TG_TABLE_NAME, TG_OP, current_setting('synchronous_commit'));
  RETURN NULL;
END $$;
""" + "".join(
    f"CREATE TRIGGER seen_{t} AFTER INSERT OR UPDATE ON {t} FOR EACH STATEMENT EXECUTE FUNCTION commit_mode();\n"
    for t in ("runs", "nodes", "effects", "approvals")
)


def test_on_postgresql_a_claim_a_question_and_a_runs_end_wait_for_the_disk_and_progress_does_not(tmp_path):
    """A step's progress and a run's creation commit without waiting for the WAL flush (a
    database crash may take them back; the run redoes them), every write an effect or a
    person rests on waits for it, as PostgreSQL itself records it in each transaction
    (``synchronous_commit``, seen by a trigger on every table the run writes). The states
    still pending when an effect is claimed commit in the claim's own transaction, as it does."""
    import psycopg

    from vodou_engine.runs import Runs

    modes = tmp_path / "modes"
    modes.write_text("get_status=slow:1000")  # a read long enough for a batch of states on its own
    log, servers, recipe = setup_files(tmp_path, ROGUE_MODES_FILE=str(modes))
    unasked = tmp_path / "unasked.recipe"
    unasked.write_text(FANOUT + "  without asking\n")
    with fresh_schema() as url:
        runs = Runs(store=url, servers=servers)
        runs.store()  # the tables, for the triggers
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(COMMIT_MODES)

        def modes() -> list[tuple[str, str, str]]:
            with psycopg.connect(url, autocommit=True) as conn:
                return conn.execute("SELECT tbl, op, mode FROM commit_modes ORDER BY seq").fetchall()

        done = trio.run(lambda: runs.start(unasked, actor="ana"))
        ran = modes()
        parked = trio.run(lambda: runs.start(recipe, actor="ana"))
        asked = modes()[len(ran) :]
        runs.close()
    assert (done.state, parked.state) == ("succeeded", "parked")
    assert len(rogue_calls(log, "get_status")) == 6 and len(rogue_calls(log, "post_message")) == 1
    for seen in (ran, asked):
        assert seen[0] == ("runs", "INSERT", "off")  # created relaxed
        assert ("nodes", "INSERT", "off") in seen  # progress on its own, relaxed
        assert [x for x in seen if x[0] == "runs"][-1] == ("runs", "UPDATE", "on")  # ended, parked
    assert [m for t, _, m in ran if t == "effects"] == ["on", "on"]  # claimed, then how it ended
    claim = next(i for i, x in enumerate(ran) if x[0] == "effects")
    assert ran[claim - 1][0::2] == ("nodes", "on")  # the reads' ends, written with the claim
    assert not [t for t, _, _ in ran if t == "approvals"]  # nothing asked, nothing to withdraw: not a statement
    assert ("approvals", "INSERT", "on") in asked  # the question
    assert {m for t, _, m in ran + asked if t == "approvals"} == {"on"}  # and every withdrawal


def test_in_a_worker_a_runs_end_is_on_disk_with_its_jobs_completion_and_its_effect_before_it_is_called(tmp_path):
    """A worker's run: its effect's claim and outcome wait for the WAL flush; its end does
    not, and the job's completion, committed right after it on the same database, does:
    one flush of the log for both, so the end is on disk before the queue hears the job
    is done (as PostgreSQL records it in each transaction, by a trigger on each table)."""
    import psycopg

    from vodou_engine.runs import Runs
    from vodou_engine.workers.app import ensure_schema

    log, servers, _ = setup_files(tmp_path)
    unasked = tmp_path / "unasked.recipe"
    unasked.write_text(FANOUT + "  without asking\n")
    with fresh_schema() as url:
        ensure_schema(url)
        Runs(store=url).store().close()  # the tables, for the triggers
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(COMMIT_MODES)
            conn.execute(
                "CREATE TRIGGER seen_jobs AFTER UPDATE OR DELETE ON procrastinate_jobs "
                "FOR EACH STATEMENT EXECUTE FUNCTION commit_mode()"
            )
        (run_id,) = queue_runs(url, unasked, 1)
        with Workers(url, servers, tmp_path) as workers:
            workers.start(1, recipe=True)
            wait_for(lambda: run_states(url, [run_id])[run_id] == "succeeded", "the run to end")
            wait_for(lambda: not [j for j in Queue(url).jobs() if j["task"] == "vodou.drive"], "its job to be done")
        with psycopg.connect(url, autocommit=True) as conn:
            seen = conn.execute("SELECT tbl, op, mode FROM commit_modes ORDER BY seq").fetchall()
    assert len(rogue_calls(log, "post_message")) == 1
    assert [m for t, _, m in seen if t == "effects"] == ["on", "on"]  # claimed, then how it ended
    ended = max(i for i, x in enumerate(seen) if x[0] == "runs")
    assert seen[ended] == ("runs", "UPDATE", "off")  # the run's end
    assert ("procrastinate_jobs", "DELETE", "on") in seen[ended + 1 :]  # then the job done, waiting for both


def test_a_stopping_worker_leaves_its_runs_interrupted_and_queued_for_another(tmp_path):
    """SIGTERM: running drives get the grace period, then are cancelled; each run is left
    interrupted and queued again, and the next worker goes on with it."""
    modes = tmp_path / "modes"
    modes.write_text("get_status=slow:600000")  # read by each server as it starts
    log, servers, recipe = setup_files(tmp_path, ROGUE_MODES_FILE=str(modes))

    with fresh_schema() as url, Workers(url, servers, tmp_path) as workers:
        (first,) = workers.start(1, concurrency=2, grace=0.2)
        (run_id,) = queue_runs(url, recipe, 1)
        wait_for(lambda: len(rogue_calls(log, "get_status")) >= 1, "the slow read to be running")
        first.send_signal(signal.SIGTERM)
        assert first.wait(30) == 0
        assert run_states(url, [run_id]) == {run_id: "interrupted"}
        drives = [(j["status"], j["queueing_lock"]) for j in Queue(url).jobs() if j["task"] == "vodou.drive"]
        assert drives == [("aborted", run_id), ("todo", run_id)]  # the job stopped, and the drive queued again
        modes.write_text("")  # the next server answers at once
        workers.start(1, concurrency=2)
        wait_for(lambda: run_states(url, [run_id])[run_id] == "parked", "the next worker to take the run on")
    assert rogue_calls(log, "post_message") == []


# --- a worker that cannot drive a run hands it back -------------------------------------------------
NEEDS_EXTRA = """recipe "needs extra"
approvers: ana
post: extra.post_message {"channel": "#extra", "text": "started by a worker that has it"}
"""
BLOCKER = 'recipe "blocker"\nwait: extra.get_status {}\n'


def events_of(url: str, run_id: str, kind: str) -> list[dict]:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT actor, data_json FROM events WHERE run_id = %s AND kind = %s ORDER BY seq", (run_id, kind)
        ).fetchall()
    return [{"actor": a, **json.loads(d or "{}")} for a, d in rows]


def test_a_worker_that_cannot_drive_a_run_hands_it_back_and_one_that_can_drives_it(tmp_path):
    """Worker B's server file resolves `rogue` differently (and has no `extra`); worker A has the
    run's own servers but is busy (one job at a time, held by a read until a file appears). Three
    approved runs go to B, which cannot drive them: each stays approved, with B's reason in its
    log, the inbox and its page say so (never "expired"), and B never tries it again. A queued
    start that needs `extra` is handed back too. Once A is free, it drives them all: each effect
    once, at A's own server."""
    from starlette.testclient import TestClient
    from web_helpers import sign_in

    from vodou_engine.policy import Policy
    from vodou_engine.runs import Runs
    from vodou_engine.servers import load_servers
    from vodou_engine.service import Service
    from vodou_engine.web.app import create_app
    from vodou_engine.web.config import WebConfig
    from vodou_engine.web.identity import add_approver

    log, extra_log, release = tmp_path / "rogue.log", tmp_path / "extra.log", tmp_path / "release"
    extra = rogue_server(extra_log, ROGUE_MODES="get_status=held", ROGUE_RELEASE=str(release))
    servers_a, servers_b = tmp_path / "a.json", tmp_path / "b.json"
    servers_a.write_text(json.dumps({"mcpServers": {"rogue": rogue_server(log), "extra": extra}}))
    servers_b.write_text(json.dumps({"mcpServers": {"rogue": rogue_server(log, ROGUE_ELSEWHERE="1")}}))
    team, needs, blocker = tmp_path / "team.recipe", tmp_path / "needs.recipe", tmp_path / "blocker.recipe"
    team.write_text(TEAM)
    needs.write_text(NEEDS_EXTRA)
    blocker.write_text(BLOCKER)
    with fresh_schema() as url, Workers(url, servers_a, tmp_path) as workers:
        runs = Runs(store=url, servers=servers_a)
        ids = [trio.run(lambda: runs.start(team, actor="ana")).run for _ in range(3)]  # driven here: they park
        assert set(run_states(url, ids).values()) == {"parked"}
        (a,) = workers.start(1, concurrency=1, recipe=True)
        busy = runs.queue(blocker, actor="ana")
        wait_for(lambda: rogue_calls(extra_log, "get_status"), "worker A to be held by the blocker's read")
        (b,) = workers.start(1, concurrency=2, recipe=True, env={"VODOU_SERVERS": str(servers_b)})
        workers.wait_ready(2)
        for run_id in ids:
            assert trio.run(partial(runs.approve, run_id, "post", actor="ana", proof="test")).queued
        started = runs.queue(needs, actor="ana")
        wait_for(lambda: all(events_of(url, r, "handed_back") for r in ids), "worker B to hand the three runs back")
        wait_for(
            lambda: "cannot start it, handing it back" in b.log.read_text(), "worker B to hand the queued start back"
        )

        # the record and the pages say what happened: approved, waiting for a worker that can
        for run_id in ids:
            (back,) = events_of(url, run_id, "handed_back")
            assert (
                back["code"] == "servers.mismatch"
                and f":{b.pid}:" in back["worker"]
                and "'rogue': env ROGUE_ELSEWHERE" in back["reason"]
            )
            assert run_states(url, [run_id])[run_id] == "parked" and [x.state for x in runs.show(run_id).approvals] == [
                "approved"
            ]
        svc = Service(store=url, servers=load_servers(str(servers_a)), policy=Policy())
        with TestClient(
            create_app(svc, WebConfig(allowed_hosts=["testserver"])), backend="trio", base_url="http://testserver"
        ) as client:
            _, link = add_approver(runs, "ana", by="test", base_url="http://testserver")
            ana = sign_in(client, link, "ana")
            inbox = ana.get("/").text
            page = ana.get(f"/runs/{ids[0]}").text
        for text in (inbox, page):
            assert (
                "expired" not in text
                and "Approved by ana" in text
                and "waiting for a worker" in text
                and "could not drive it" in text
            )
        assert "Ask again" not in page

        release.write_text("")  # A is free: it takes what B handed back
        wait_for(
            lambda: (
                run_states(url, [*ids, started, busy])
                == {**dict.fromkeys(ids, "succeeded"), started: "parked", busy: "succeeded"}
            ),
            "worker A to drive every run on",
        )
        wait_for(lambda: queue_empty(url), "the queue to empty")
        warm_a = workers.children(a)
        assert workers.stop() == [0, 0]
        handed = {r: events_of(url, r, "handed_back") for r in ids}
        runs.close()

    assert all(len(h) == 1 for h in handed.values())  # B never tried a run it had handed back again
    posts = rogue_calls(log, "post_message")
    assert len(posts) == 3 and len({p["arguments"]["idempotency_key"] for p in posts}) == 3  # each effect once
    assert {p["pid"] for p in posts} <= warm_a  # at A's own server
    assert rogue_calls(extra_log, "post_message") == []  # the started run parks before its effect


def test_a_run_taken_by_a_worker_that_died_waits_again_for_one_that_can(tmp_path):
    """A drive a worker took from the waiting queue, when that worker is gone, goes back there
    (not to the queue every worker takes from), knowing who could not drive it."""
    from vodou_engine.workers.app import WAITING_QUEUE, build_app, private_queue, recover

    gone = f"{os.uname().nodename}:999999999:1"  # a process of this host that does not exist
    with fresh_schema() as url, Queue(url) as q:
        q.defer_resume("r-waits")
        conn = pg_or_fail()
        conn.execute(f"SET search_path = {url.rsplit('%3D', 1)[1]}")
        conn.execute(
            'UPDATE procrastinate_jobs SET queue_name = %s, args = args || \'{"declined": [{"worker": "b", "reason": "x"}]}\'::jsonb',
            (private_queue(gone),),
        )

        async def look() -> list[int]:
            app = build_app(url, pool_size=1)
            async with app.open_async():
                return await recover(app, None)

        assert len(asyncio.run(look())) == 1
        (row,) = conn.execute("SELECT status::text, queue_name, args->'declined' FROM procrastinate_jobs").fetchall()
        assert row == ("todo", WAITING_QUEUE, [{"worker": "b", "reason": "x"}])
        conn.close()


@pytest.mark.parametrize("what", ["a server that does not start here", "a tool not listed here", "another policy here"])
def test_a_worker_hands_back_a_run_for_anything_only_it_gets_wrong(tmp_path, what):
    """The same binding (server file, command, environment) and yet this worker cannot drive
    the run: its server exits as it starts, lists other tools, or its policy is another. The
    run is left approved, the reason in its log; a worker configured right drives it, once."""
    from vodou_engine.policy import Policy, load_policy
    from vodou_engine.runs import Runs
    from vodou_engine.servers import load_servers
    from vodou_engine.workers.engine import Engine

    settings = tmp_path / "settings"
    log, servers, _ = setup_files(
        tmp_path, ROGUE_MODES_FILE=str(settings / "modes"), ROGUE_TOOLS_FILE=str(settings / "tools")
    )
    settings.mkdir()
    team = tmp_path / "team.recipe"
    team.write_text(TEAM)
    policy = tmp_path / "policy.toml"
    policy.write_text('[tools."rogue.get_status"]\nrisk = "read"\n')
    with fresh_schema() as url:
        runs = Runs(store=url, servers=servers, workers=False)
        run_id = trio.run(lambda: runs.start(team, actor="ana")).run
        trio.run(
            lambda: runs.approve(run_id, "post", actor="ana", drive=False)
        )  # the decision only, as an approval that queues
        if what == "a server that does not start here":
            (settings / "modes").write_text("post_message=no-such-mode")  # the server exits as it starts
        elif what == "a tool not listed here":
            (settings / "tools").write_text("get_status")
        wrong = Engine(
            url,
            load_servers(str(servers)),
            load_policy(str(policy)) if what == "another policy here" else Policy(),
            owner="elsewhere:1:1",
        )

        async def drive(engine):
            async with trio.open_nursery() as nursery:
                close = await engine.setup(nursery)
                try:
                    return await engine.drive(run_id)
                finally:
                    close()
                    nursery.cancel_scope.cancel()

        out = trio.run(drive, wrong)
        expected = {
            "a server that does not start here": "did not start on this worker",
            "a tool not listed here": "do not list rogue.post_message",
            "another policy here": "another tool policy",
        }[what]
        assert out.state == "parked" and expected in out.cannot
        (back,) = runs.store().events(run_id)[-1:]
        assert (
            back.kind == "handed_back"
            and expected in json.loads(back.data_json)["reason"]
            and back.actor == "worker process 1 on elsewhere"
        )
        assert [a.state for a in runs.show(run_id).approvals] == ["approved"]  # the decision stands
        assert rogue_calls(log, "post_message") == []
        for f in settings.iterdir():
            f.unlink()
        out = trio.run(drive, Engine(url, load_servers(str(servers)), Policy()))
        assert out.state == "succeeded" and out.cannot is None
        runs.close()
    assert len(rogue_calls(log, "post_message")) == 1


def test_a_start_no_live_worker_can_do_fails_saying_why_and_a_due_time_is_recorded_failed(tmp_path):
    """The only worker has no server `extra`: a queued start that needs it, and a schedule's due
    time that needs it, are not handed back to nobody: the start's job fails and its run is
    never created; the due time is recorded failed with the reason. Nothing is called."""
    from vodou_engine.runs import Runs

    log = tmp_path / "rogue.log"
    servers = tmp_path / "mcp.json"
    servers.write_text(json.dumps({"mcpServers": {"rogue": rogue_server(log)}}))
    needs = tmp_path / "needs.recipe"
    needs.write_text(NEEDS_EXTRA)
    t0 = datetime(2026, 3, 2, 8, 0, 0, tzinfo=UTC).timestamp()
    start, speed = time.time(), 40.0
    fast = {"VODOU_TEST_CLOCK_T0": str(t0), "VODOU_TEST_CLOCK_START": str(start), "VODOU_TEST_CLOCK_SPEED": str(speed)}
    with fresh_schema() as url, Workers(url, servers, tmp_path, env=fast) as workers:
        runs = Runs(store=url, servers=servers, clock=lambda: t0 + (time.time() - start) * speed)
        workers.start(1, concurrency=2)
        workers.wait_ready(1)
        queued = runs.queue(needs, actor="ana")
        runs.save(needs, by="ana")
        runs.add_schedule("extra", recipe="needs extra", cron="* * * * *", by="ana")

        def failed_jobs() -> list:
            return [j for j in leftover_jobs(url) if j["job"][1] == "vodou.drive" and j["job"][2] == "failed"]

        wait_for(lambda: len(failed_jobs()) >= 2, "the start and the due time to fail")
        (firing,) = [f for f in runs.firings("extra") if f.outcome == "failed"][:1]
        assert "no live worker can start run" in firing.note and "no server 'extra'" in firing.note
        assert queued not in run_states(url) and run_states(url) == {}  # no run was created
        assert "no live worker can start run " + queued in workers.logs()
        runs.close()
    assert rogue_calls(log) == []
