"""workers. Scale-out on PostgreSQL: Procrastinate workers against the queue's own floor.

Needs PostgreSQL (``$VODOU_BENCH_PG``, default ``postgresql://postgres@127.0.0.1:5432/test``);
every part works in a schema of its own, dropped afterwards. Run it with
``python -m benchmarks.workers_bench [--quick] [--out FILE]`` (it writes
benchmarks/results/workers.json by default, prints a table on stderr), or
``python -m benchmarks --only w`` with the other cases' machinery.
``--parts throughput`` (or boundary, approve, store) runs only those parts;
``python -m benchmarks.workers_bench profile-worker [N] [cpu]`` gives one warm
worker, then the same-work floor's, N jobs at once and prints where their
time goes: CPU per job by thread from /proc (a worker's engine thread is
``vodou-engine``, its asyncio thread ``python``, the store's ``Trio thread N``),
and py-spy's samples when
``py-spy`` is installed, else cProfile on every thread of the child timed by
that thread's CPU clock (``profiled``; inflates CPU about 4×, read shares
only); with ``cpu``, no profiler at all. ``--workers 1`` and ``--pairs N``
narrow the throughput part for a before/after.

* **runs per second, 1, 2 and 4 workers** (``recipe worker`` processes, 4 runs
  at once each): runs of a recipe with three reads and one effect (``without
  asking``, so one job is one whole run) on a standard-library MCP server
  (tests/rogue_server.py), queued before the workers start; from the first
  run created to the last ended. Against, in the same run and with the same
  processes and concurrency, **the queue's floor**: bare Procrastinate workers
  running a no-op job (first job started → last job ended, from
  Procrastinate's own events). The ratio (floor ÷ runs per second) is what a
  run costs in units of the queue's own per-job cost.
* **the floor that does the same work**: bare Procrastinate workers (same
  processes, same concurrency) whose job makes the same four MCP calls
  (``get_status`` three times, then ``post_message``, in order) through the
  same warm server: one rogue server per worker process, started before the
  worker takes jobs and kept for all of them, one SDK ``ClientSession``
  shared by the jobs in flight (as a worker's warm server pool shares it).
  Both sides are measured on the same window: first job started → last job
  ended (the floor's from Procrastinate's events; the engine's from the runs:
  its worker deletes a succeeded job, events and all, so first step started →
  last run ended). Target: the engine's runs per
  second ≥ 0.8 of this floor, with 1, 2 and 4 workers.
* **the asyncio/trio boundary**: a round trip of ``EngineHost.call`` with a
  no-op on the trio side (median of many), and that as a share of a no-op
  job; and the no-op Procrastinate worker with every job crossing into trio
  and back, against the same worker without (the two rates differ by less
  than their noise).
* **approve → effect start through the queue**, one warm worker: a run of a
  recipe that posts on the demo chat server parks; from just before
  ``Runs.approve`` (which, on PostgreSQL, records the decision and queues the
  resume in one transaction; this process's ``time.time()``) to the moment
  the chat server began the call (its own ``started`` in its call log).
  Target ≤ 50 ms (median): LISTEN/NOTIFY wakes the worker, no polling delay.
* **store operations, PostgreSQL against SQLite**, the same statements the
  driver issues: *park* (the last node states, the approvals looked at, the
  run parked, its event: one transaction), *resume* (the take: read the run,
  take it by compare-and-set, its event, effects caught mid-call marked,
  nodes, effects and approvals read back), *chained step* (one step's end
  and the next one's start written together, checked against the owner);
  and, through the run API, a chain of 20 built-in steps, per step.
"""

from __future__ import annotations

import json
import os
import secrets
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Any

from .common import ROOT, Case, Config, TempDir, clean_env, poll

PG = os.environ.get("VODOU_BENCH_PG", "postgresql://postgres@127.0.0.1:5432/test")
ROGUE = str(ROOT / "tests" / "rogue_server.py")
FANOUT = """recipe "fan-out"
a: rogue.get_status {}
b: rogue.get_status {}
c: rogue.get_status {}
post: rogue.post_message {"channel": "#ops", "text": "done"}
  without asking
"""
POST = 'recipe "post"\ninputs:\n  text = "x"\npost: slack.slack_post_message {"channel": "#daily", "text": "{text}"}\n'
CHAIN = (
    'recipe "chain"\n'
    + 's0: vodou.echo {"value": 0}\n'
    + "".join(f's{i}: vodou.echo {{"value": "{{s{i - 1}}}"}}\n' for i in range(1, 20))
)
CONCURRENCY = 4
NOOP_QUEUE = "bench"


@contextmanager
def schema() -> Iterator[str]:
    import psycopg

    name = f"wb_{secrets.token_hex(4)}"
    with psycopg.connect(PG, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{name}"')
    try:
        yield f"{PG}{'&' if '?' in PG else '?'}options=-csearch_path%3D{name}"
    finally:
        with psycopg.connect(PG, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA "{name}" CASCADE')


def wait(predicate, what: str, timeout: float = 300.0, every: float = 0.01) -> Any:
    return poll(predicate, what, timeout=timeout, every=every)


def _sql(url: str, query: str, params: tuple = ()) -> list[tuple]:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        cur = conn.execute(query, params)
        return cur.fetchall() if cur.description else []


def _stop(procs: list[subprocess.Popen]) -> None:
    for p in procs:
        p.terminate()
    for p in procs:
        try:
            p.wait(60)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


# --- the queue's floor: bare Procrastinate workers with a no-op job -----------------------------
def noop_worker(url: str, concurrency: int, trio_side: bool) -> None:
    """``python -m benchmarks.workers_bench noop-worker URL C [trio]``: a bare Procrastinate worker."""
    import asyncio
    import logging
    import signal

    import procrastinate
    from procrastinate.worker import Worker

    logging.getLogger("procrastinate").setLevel(
        logging.ERROR
    )  # it warns about an app in __main__, which this is on purpose

    async def main() -> None:
        app = procrastinate.App(
            connector=procrastinate.PsycopgConnector(conninfo=url, min_size=1, max_size=min(concurrency, 4) + 2)
        )
        host = None
        if trio_side:
            from vodou_engine.workers.host import EngineHost

            host = EngineHost()
            await host.start()

        async def nothing() -> None:
            return None

        @app.task(name="bench.noop", queue=NOOP_QUEUE)
        async def noop() -> None:
            if host is not None:
                await host.call(nothing)

        async with app.open_async():
            worker = Worker(
                app, concurrency=concurrency, delete_jobs="never", install_signal_handlers=False, listen_notify=True
            )
            asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, worker.stop)
            await worker.run()
        if host is not None:
            host.stop()

    asyncio.run(main())
    os._exit(0)


def floor(url: str, tmp: Path, cfg: Config, workers: int, jobs: int, *, trio_side: bool = False) -> float:
    """Jobs per second of ``workers`` bare no-op workers (first job started → last job ended)."""
    import procrastinate
    import psycopg
    from procrastinate import jobs as jobs_module

    from vodou_engine.workers.app import ensure_schema

    ensure_schema(url)
    app = procrastinate.App(connector=procrastinate.SyncPsycopgConnector(conninfo=url))
    with psycopg.connect(url, autocommit=True) as conn:
        app.job_manager.batch_defer_jobs(
            [
                jobs_module.Job(queue=NOOP_QUEUE, task_name="bench.noop", lock=None, queueing_lock=None)
                for _ in range(jobs)
            ],
            connection=conn,
        )
    env = clean_env(tmp, cfg, PYTHONPATH=str(ROOT))
    argv = [sys.executable, "-m", "benchmarks.workers_bench", "noop-worker", url, str(CONCURRENCY)] + (
        ["trio"] if trio_side else []
    )
    procs = [
        subprocess.Popen(
            argv, cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        for _ in range(workers)
    ]
    try:
        wait(
            lambda: (
                _sql(
                    url,
                    "SELECT count(*) FROM procrastinate_jobs WHERE task_name = 'bench.noop' AND status = 'succeeded'",
                )[0][0]
                >= jobs
            ),
            "the no-op jobs",
            every=0.02,
        )
    finally:
        _stop(procs)
    ((first, last),) = _sql(
        url,
        "SELECT min(e.at) FILTER (WHERE e.type = 'started'), max(e.at) FILTER (WHERE e.type = 'succeeded') "
        "FROM procrastinate_events e JOIN procrastinate_jobs j ON j.id = e.job_id WHERE j.task_name = 'bench.noop'",
    )
    _sql(url, "DELETE FROM procrastinate_jobs WHERE task_name = 'bench.noop'")
    return jobs / (last - first).total_seconds()


# --- the floor that does the same work: four MCP calls per bare Procrastinate job -----------------
MCP_TASK = "bench.mcp"
CALLS = (
    ("get_status", {}),
    ("get_status", {}),
    ("get_status", {}),
    ("post_message", {"channel": "#ops", "text": "done"}),
)
"""What one run of FANOUT calls, in order: the floor's job makes the same calls."""


def mcp_worker(url: str, concurrency: int) -> None:
    """``python -m benchmarks.workers_bench mcp-worker URL C``: a bare Procrastinate worker whose
    job makes FANOUT's four calls through one warm rogue server (an SDK session of its own)."""
    import asyncio
    import logging
    import signal
    from contextlib import AsyncExitStack

    import procrastinate
    from mcp.client.session import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client
    from procrastinate.worker import Worker

    logging.getLogger("procrastinate").setLevel(logging.ERROR)

    async def main() -> None:
        app = procrastinate.App(
            connector=procrastinate.PsycopgConnector(conninfo=url, min_size=1, max_size=min(concurrency, 4) + 2)
        )
        async with AsyncExitStack() as stack:
            read, write = await stack.enter_async_context(
                stdio_client(StdioServerParameters(command=sys.executable, args=["-I", "-S", ROGUE]))
            )
            session = await stack.enter_async_context(ClientSession(read, write))
            await session.initialize()
            await session.list_tools()

            @app.task(name=MCP_TASK, queue=NOOP_QUEUE)
            async def four_calls() -> None:
                for tool, args in CALLS:
                    result = await session.call_tool(tool, args)
                    if result.is_error:
                        raise RuntimeError(f"{tool} failed: {result.content}")

            async with app.open_async():
                worker = Worker(
                    app, concurrency=concurrency, delete_jobs="never", install_signal_handlers=False, listen_notify=True
                )
                asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, worker.stop)
                await worker.run()

    asyncio.run(main())
    os._exit(0)


def job_window(url: str, task: str) -> tuple[int, float]:
    """(jobs succeeded, seconds from the first job started to the last one ended) of ``task``, from Procrastinate's events."""
    ((n, first, last),) = _sql(
        url,
        "SELECT count(DISTINCT j.id) FILTER (WHERE j.status = 'succeeded'), min(e.at) FILTER (WHERE e.type = 'started'), max(e.at) FILTER (WHERE e.type = 'succeeded') "
        "FROM procrastinate_events e JOIN procrastinate_jobs j ON j.id = e.job_id WHERE j.task_name = %s",
        (task,),
    )
    return n, (last - first).total_seconds()


def mcp_floor(url: str, tmp: Path, cfg: Config, workers: int, jobs: int) -> float:
    """Jobs per second of ``workers`` bare workers whose job makes the four calls (first job started → last ended)."""
    import procrastinate
    import psycopg
    from procrastinate import jobs as jobs_module

    from vodou_engine.workers.app import ensure_schema

    ensure_schema(url)
    app = procrastinate.App(connector=procrastinate.SyncPsycopgConnector(conninfo=url))
    with psycopg.connect(url, autocommit=True) as conn:
        app.job_manager.batch_defer_jobs(
            [jobs_module.Job(queue=NOOP_QUEUE, task_name=MCP_TASK, lock=None, queueing_lock=None) for _ in range(jobs)],
            connection=conn,
        )
    env = clean_env(tmp, cfg, PYTHONPATH=str(ROOT))
    argv = [sys.executable, "-m", "benchmarks.workers_bench", "mcp-worker", url, str(CONCURRENCY)]
    procs = []
    for i in range(workers):
        with open(tmp / f"mcp-floor-{workers}-{i}.log", "wb") as log:  # the child holds its own copy
            procs.append(
                subprocess.Popen(
                    argv, cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT
                )
            )
    try:
        wait(
            lambda: (
                _sql(
                    url,
                    "SELECT count(*) FROM procrastinate_jobs WHERE task_name = %s AND status IN ('succeeded', 'failed')",
                    (MCP_TASK,),
                )[0][0]
                >= jobs
            ),
            "the MCP floor's jobs",
            every=0.02,
        )
    finally:
        _stop(procs)
    n, seconds = job_window(url, MCP_TASK)
    if n != jobs:
        raise RuntimeError(f"{jobs - n} of the MCP floor's jobs failed; see {tmp}/mcp-floor-*.log")
    _sql(url, "DELETE FROM procrastinate_jobs WHERE task_name = %s", (MCP_TASK,))
    return jobs / seconds


# --- the engine: runs per second ------------------------------------------------------------------
def engine_rate(
    url: str,
    tmp: Path,
    cfg: Config,
    workers: int,
    runs: int,
    *,
    recipe_text: str = FANOUT,
    servers: dict | None = None,
    concurrency: int = CONCURRENCY,
) -> tuple[float, dict]:
    """Runs per second of ``workers`` ``recipe worker`` processes (first run created → last ended);
    the facts hold the same measured as the floors are (``job_rate``: first job started → last job ended)."""
    from vodou_engine.runs import Runs

    if servers is None:
        servers = {"rogue": {"command": sys.executable, "args": ["-I", "-S", ROGUE]}}
    recipe = tmp / "fan-out.recipe"
    recipe.write_text(recipe_text)
    servers_file = tmp / "mcp.json"
    servers_file.write_text(json.dumps({"mcpServers": servers}))
    queuer = Runs(store=url)
    try:
        ids = [queuer.queue(recipe, actor="bench") for _ in range(runs)]  # `recipe run --queue`
    finally:
        queuer.close()
    env = clean_env(tmp, cfg, VODOU_STORE=url, VODOU_SERVERS=str(servers_file), PYTHONPATH=str(ROOT))
    argv = [sys.executable, "-m", "vodou_engine", "worker", "--concurrency", str(concurrency)]
    procs = []
    for i in range(workers):
        with open(tmp / f"worker-{workers}-{i}.log", "wb") as log:  # the child holds its own copy
            procs.append(
                subprocess.Popen(argv, cwd=tmp, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
            )
    marks = ",".join(["%s"] * len(ids))
    try:
        wait(
            lambda: (
                _sql(url, f"SELECT count(*) FROM runs WHERE state = 'succeeded' AND id IN ({marks})", tuple(ids))[0][0]
                == runs
            ),
            f"{runs} runs",
            every=0.02,
        )
    finally:
        _stop(procs)
    ((first, last, states),) = _sql(
        url, f"SELECT min(created_at), max(ended_at), count(DISTINCT state) FROM runs WHERE id IN ({marks})", tuple(ids)
    )
    # The worker deletes a job once it succeeded (and Procrastinate its events with it): the
    # window the floors are measured on is taken from the runs instead, first step started →
    # last run ended (the first job's pick-up, a few ms once, is left out).
    ((began,),) = _sql(url, f"SELECT min(started_at) FROM nodes WHERE run_id IN ({marks})", tuple(ids))
    return runs / (last - first), {"states": states, "job_rate": runs / (last - began)}


# --- approve -> effect start ------------------------------------------------------------------------
def approve_to_effect(url: str, tmp: Path, cfg: Config, samples: int) -> dict[str, list[float]]:
    import trio

    from vodou_engine.demo import db as demo
    from vodou_engine.runs import Runs
    from vodou_engine.servers import demo_servers

    slack = demo_servers(tmp / "demo.db")["slack"]
    servers = tmp / "mcp-demo.json"
    servers.write_text(
        json.dumps({"mcpServers": {"slack": {"command": slack.command, "args": slack.args, "env": slack.env}}})
    )
    recipe = tmp / "post.recipe"
    recipe.write_text(POST)
    env = clean_env(tmp, cfg, VODOU_STORE=url, VODOU_SERVERS=str(servers), PYTHONPATH=str(ROOT))
    with open(tmp / "worker-latency.log", "wb") as log:  # the child holds its own copy
        proc = subprocess.Popen(
            [sys.executable, "-m", "vodou_engine", "worker", "--concurrency", str(CONCURRENCY)],
            cwd=tmp,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    out: dict[str, list[float]] = {"latency": [], "approve": []}
    decider = Runs(store=url, servers=servers)
    try:
        for i in range(samples + 1):
            text = f"workers bench {secrets.token_hex(5)}"
            run_id = decider.queue(recipe, actor="bench", inputs={"text": text})
            wait(
                lambda run_id=run_id: _sql(url, "SELECT state FROM runs WHERE id = %s", (run_id,)) == [("parked",)],
                "the run to park",
                every=0.005,
            )
            # the worker's job that parked the run has ended (its lock is free): the next job starts at once
            wait(
                lambda run_id=run_id: (
                    not _sql(url, "SELECT 1 FROM procrastinate_jobs WHERE lock = %s AND status = 'doing'", (run_id,))
                ),
                "the parking job to end",
                every=0.005,
            )
            sent = time.time()
            a = time.perf_counter()
            report = trio.run(partial(decider.approve, run_id, "post", actor="bench", proof="bench"))
            b = time.perf_counter()
            if not report.queued:
                raise RuntimeError(f"the approval of {run_id} was not queued: {report}")
            call = wait(
                lambda text=text: [
                    x
                    for x in demo.calls(tmp / "demo.db", tool="slack_post_message")
                    if x["arguments"].get("text") == text
                ],
                "the effect",
                every=0.002,
            )[0]
            if i == 0:
                continue  # the first: the chat server was started by the job that parked it, the rest is warm too now
            out["latency"].append(call["started"] - sent)
            out["approve"].append(b - a)
            cfg.log(
                f"workers: approve → effect {out['latency'][-1] * 1e3:.1f} ms (of which Runs.approve, with the queue insert, {out['approve'][-1] * 1e3:.1f} ms)"
            )
    finally:
        decider.close()
        _stop([proc])
    return out


# --- the boundary, in process -------------------------------------------------------------------------
def boundary_round_trip(n: int) -> list[float]:
    import asyncio

    from vodou_engine.workers.host import EngineHost

    async def nothing() -> None:
        return None

    async def main() -> list[float]:
        host = EngineHost()
        await host.start()
        out = []
        for _ in range(n):
            t = time.perf_counter()
            await host.call(nothing)
            out.append(time.perf_counter() - t)
        host.stop()
        await host.wait_stopped(5)
        return out

    return asyncio.run(main())


# --- store operations -------------------------------------------------------------------------------------
def store_ops(store: Any, n: int) -> dict[str, list[float]]:
    """The statements the driver issues to park, to resume (the take) and per chained step."""
    import msgspec

    from vodou_engine.owners import LEASE_S
    from vodou_engine.states import NodeState, RunState
    from vodou_engine.store import ApprovalRecord, NodeRecord

    owner, other = "bench:1:1", "bench:2:2"
    out: dict[str, list[float]] = {"park": [], "resume": [], "chained_step": []}
    out_json = msgspec.json.encode({"text": "x" * 200}).decode()
    for _i in range(n):
        run_id = f"b-{secrets.token_hex(6)}"
        store.create_run(
            run_id, recipe_name="bench", recipe_path=None, source_sha256="ab" * 32, plan_json='{"nodes":[]}', plan_fingerprint="fp",
            inputs_json="{}", started_by="bench", state=RunState.RUNNING, owner=owner, lease_s=LEASE_S,
        )  # fmt: skip
        now = time.time()
        t = time.perf_counter()
        store.save_nodes(
            run_id,
            [
                NodeRecord(node_id="a", state=NodeState.SUCCEEDED, output_json=out_json, started_at=now, ended_at=now),
                NodeRecord(node_id="b", state=NodeState.RUNNING, started_at=now),
            ],
            owner=owner,
        )
        out["chained_step"].append(time.perf_counter() - t)
        store.ask(
            ApprovalRecord(
                id=f"ap-{run_id}",
                run_id=run_id,
                node_id="approve_post",
                step="post",
                payload_json="{}",
                fingerprint="fp",
                asked_at=now,
                card_text="go?",
                approvers_json='["bench"]',
            ),
            owner=owner,
        )
        t = time.perf_counter()
        with store.transaction():
            store.save_nodes(
                run_id,
                [
                    NodeRecord(
                        node_id="b", state=NodeState.SUCCEEDED, output_json=out_json, started_at=now, ended_at=now
                    ),
                    NodeRecord(node_id="approve_post", state=NodeState.WAITING),
                ],
                owner=owner,
            )
            store.approvals(run_id)
            store.set_run_state(run_id, RunState.PARKED, expected=(RunState.RUNNING,), owner=owner)
            store.append_event(run_id, "parked", data_json='{"waiting": ["approve_post"]}')
        out["park"].append(time.perf_counter() - t)
        t = time.perf_counter()
        store.get_run(run_id)
        with store.transaction():
            store.take_run(run_id, other, lease_s=LEASE_S)
            store.append_event(run_id, "resumed", data_json='{"pid": 2}')
        store.mark_unknown(run_id)
        store.events(run_id, limit=1)
        store.get_nodes(run_id), store.effects(run_id), store.approvals(run_id)
        store.get_run(run_id)
        out["resume"].append(time.perf_counter() - t)
    return out


def chain_per_step(location: str, n: int) -> list[float]:
    import trio

    from vodou_engine.policy import Policy
    from vodou_engine.runs import Runs
    from vodou_engine.servers import ServerSet

    runs = Runs(store=location, servers=ServerSet({}, "bench"), policy=Policy())
    plan = runs.load("chain.recipe", text=CHAIN)[0]
    out = []
    try:
        for i in range(n + 1):
            t = time.perf_counter()
            report = trio.run(lambda: runs.start(plan, actor="bench"))
            if report.state != "succeeded":
                raise RuntimeError(f"the chain ended {report.state}")
            if i:
                out.append((time.perf_counter() - t) / 20)
    finally:
        runs.close()
    return out


# --- where a worker's time goes ------------------------------------------------------------------------
def thread_cpu(pid: int) -> dict[str, float]:
    """CPU seconds (user + system) per thread of ``pid``, by thread name (names that repeat are summed)."""
    tick = os.sysconf("SC_CLK_TCK")
    out: dict[str, float] = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            name = (task / "comm").read_text().strip()
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # the thread ended meanwhile
        out[name] = out.get(name, 0.0) + (int(fields[11]) + int(fields[12])) / tick
    return out


def profile_worker(
    url: str, tmp: Path, cfg: Config, runs: int, *, rate: int = 250, floor_side: bool = False, profile: bool = True
) -> str:
    """One warm worker (``recipe worker``, or with ``floor_side`` the same-work floor's bare
    worker) given ``runs`` jobs at once: CPU per run of each of its threads (from /proc), and
    py-spy's samples of the thread holding the GIL, as µs per run (``pip install py-spy``)."""
    import shutil
    import signal
    from collections import Counter

    from vodou_engine.runs import Runs

    recipe = tmp / "fan-out.recipe"
    recipe.write_text(FANOUT)
    servers_file = tmp / "mcp.json"
    servers_file.write_text(
        json.dumps({"mcpServers": {"rogue": {"command": sys.executable, "args": ["-I", "-S", ROGUE]}}})
    )
    if floor_side:
        import procrastinate
        from procrastinate import jobs as jobs_module

        from vodou_engine.workers.app import ensure_schema

        ensure_schema(url)
        app = procrastinate.App(connector=procrastinate.SyncPsycopgConnector(conninfo=url))
        env = clean_env(tmp, cfg, PYTHONPATH=str(ROOT))
        argv = [sys.executable, "-m", "benchmarks.workers_bench", "mcp-worker", url, str(CONCURRENCY)]

        def give(n: int) -> None:
            import psycopg

            with psycopg.connect(url, autocommit=True) as conn:
                app.job_manager.batch_defer_jobs(
                    [
                        jobs_module.Job(queue=NOOP_QUEUE, task_name=MCP_TASK, lock=None, queueing_lock=None)
                        for _ in range(n)
                    ],
                    connection=conn,
                )

        def done() -> int:
            return _sql(
                url,
                "SELECT count(*) FROM procrastinate_jobs WHERE task_name = %s AND status = 'succeeded'",
                (MCP_TASK,),
            )[0][0]
    else:
        queuer = Runs(store=url)
        env = clean_env(tmp, cfg, VODOU_STORE=url, VODOU_SERVERS=str(servers_file), PYTHONPATH=str(ROOT))
        argv = [sys.executable, "-m", "vodou_engine", "worker", "--concurrency", str(CONCURRENCY)]

        def give(n: int) -> None:
            for _ in range(n):
                queuer.queue(recipe, actor="bench")

        def done() -> int:
            return _sql(url, "SELECT count(*) FROM runs WHERE state = 'succeeded'")[0][0]

    exe = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    spying = profile and os.path.exists(exe)
    stats_file = tmp / f"profile-{'floor' if floor_side else 'worker'}.pstats"
    if profile and not spying:  # cProfile on every thread of the child instead, by each thread's CPU clock
        argv = [sys.executable, "-m", "benchmarks.workers_bench", "profiled", str(stats_file), "--", *argv[2:]]
        env = {**env, "PYTHONPATH": str(ROOT)}
    with open(tmp / f"profile-{'floor' if floor_side else 'worker'}.log", "wb") as log:  # the child holds its own copy
        proc = subprocess.Popen(
            argv,
            cwd=tmp if not floor_side else ROOT,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    spy = None
    try:
        give(2)  # warm: the server started, the first statements prepared
        wait(lambda: done() >= 2, "the warm-up jobs", every=0.02)
        before = thread_cpu(proc.pid)
        raw = tmp / "worker-stacks.txt"
        if spying:
            spy = subprocess.Popen(
                [
                    exe,
                    "record",
                    "--gil",
                    "--threads",
                    "-r",
                    str(rate),
                    "-f",
                    "raw",
                    "-o",
                    str(raw),
                    "-p",
                    str(proc.pid),
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
            )
            time.sleep(0.5)  # py-spy attached
        t0 = time.perf_counter()
        give(runs)
        wait(lambda: done() >= runs + 2, f"{runs} jobs", every=0.02)
        seconds = time.perf_counter() - t0
        after = thread_cpu(proc.pid)
        if spy is not None:
            spy.send_signal(signal.SIGINT)
            spy.wait(60)
    finally:
        if spy is not None and spy.poll() is None:
            spy.kill()
        _stop([proc])
        if not floor_side:
            queuer.close()
    per_run = lambda s: s / runs * 1e6  # noqa: E731
    lines = [
        f"{'the same-work floor (bare Procrastinate + SDK session)' if floor_side else 'recipe worker'}, {CONCURRENCY} at once, {runs} jobs in {seconds:.1f} s ({runs / seconds:.1f}/s)"
    ]
    lines.append("CPU per job, by thread (/proc):")
    total = 0.0
    for name in sorted(after, key=lambda n: -(after[n] - before.get(n, 0.0))):
        used = after[name] - before.get(name, 0.0)
        total += used
        if used > 0:
            lines.append(f"  {per_run(used):8.0f} µs  {name}")
    lines.append(f"  {per_run(total):8.0f} µs  the whole process")
    counts: Counter = Counter()
    by_thread: Counter = Counter()
    if raw.exists():
        for line in raw.read_text().splitlines():
            stack, _, count = line.rpartition(" ")
            frames = stack.split(";")
            c = int(count)
            by_thread[frames[0]] += c
            seen = set()
            for f in frames[1:]:
                fn, _, where = f.rpartition(" (")
                path = where.rstrip(")").rsplit(":", 1)[0].split("site-packages/")[-1].replace(str(ROOT) + "/", "")
                seen.add(f"{fn} ({path})")
            for x in seen:
                counts[x] += c
    if stats_file.exists():  # cProfile's, warm-up and start included: CPU µs per job
        import pstats

        st = pstats.Stats(str(stats_file))
        rows = [
            (ct, tt, nc, f"{fn} ({path.split('site-packages/')[-1].replace(str(ROOT) + '/', '')}:{line})")
            for (path, line, fn), (_, nc, tt, ct, _) in st.stats.items()  # type: ignore[attr-defined]
        ]
        lines.append("cProfile (thread CPU clock), cumulative µs per job, calls per job, own µs per job:")
        for ct, tt, nc, name in sorted(rows, key=lambda r: -r[0])[:90]:
            lines.append(f"  {per_run(ct):8.0f} {nc / runs:7.1f} {per_run(tt):7.0f}  {name}")
        lines.append("by own time:")
        for _, tt, nc, name in sorted(rows, key=lambda r: -r[1])[:40]:
            lines.append(f"  {per_run(tt):8.0f} {nc / runs:7.1f}  {name}")
    us = lambda samples: samples / rate / runs * 1e6  # noqa: E731
    lines.append(
        "py-spy, the thread holding the GIL, µs per job: "
        + ", ".join(f"{k} {us(v):.0f}" for k, v in by_thread.most_common(6))
    )
    lines.append("inclusive, µs per job (a sample counts for every function on its stack):")
    for name, c in counts.most_common(110):
        lines.append(f"  {us(c):8.0f}  {name}")
    return "\n".join(lines)


def profiled(out: str, argv: list[str]) -> None:
    """``python -m benchmarks.workers_bench profiled OUT -- ARGV...``: run ``python -m ARGV``
    (``vodou_engine worker ...`` or this module's ``mcp-worker``) with cProfile on every
    thread, timed by the thread's own CPU clock (``time.thread_time``: waiting costs nothing),
    and write the merged stats to OUT when the process ends (its ``os._exit``, or a return)."""
    import cProfile
    import pstats
    import runpy
    import threading

    profiles: list[cProfile.Profile] = []
    run_thread = threading.Thread.run

    def run(self: threading.Thread) -> None:
        prof = cProfile.Profile(time.thread_time)
        profiles.append(prof)
        prof.enable()
        try:
            run_thread(self)
        finally:
            prof.disable()

    threading.Thread.run = run  # type: ignore[method-assign]
    main = cProfile.Profile(time.thread_time)
    profiles.append(main)
    real_exit = os._exit

    def dump() -> None:
        main.disable()
        stats = None
        for prof in profiles:
            try:
                prof.create_stats()
                stats = pstats.Stats(prof) if stats is None else stats.add(prof)
            except Exception:  # noqa: BLE001 - a thread's profile being written just now is left out
                continue
        if stats is not None:
            stats.dump_stats(out)

    def exit_after_dump(code: int) -> None:
        dump()
        real_exit(code)

    os._exit = exit_after_dump  # type: ignore[assignment]
    sys.argv = [argv[0], *argv[1:]]
    main.enable()
    try:
        runpy.run_module(argv[0], run_name="__main__", alter_sys=True)
    finally:
        dump()


PARTS = ("throughput", "boundary", "approve", "store")


def run(
    cfg: Config, parts: tuple[str, ...] = PARTS, workers: tuple[int, ...] = (1, 2, 4), pairs: int | None = None
) -> Case:
    case = Case(
        "w",
        "workers: runs per second on 1, 2, 4 workers against the queue's floor and a floor that makes the same MCP calls; approve → effect through the queue; store operations on PostgreSQL against SQLite",
    )
    runs_n = 60 if cfg.quick else 200
    jobs_n = 300 if cfg.quick else 1000
    samples = 5 if cfg.quick else 20
    ops_n = 50 if cfg.quick else 300
    with TempDir("workers") as tmp:
        # --- throughput, and the floors, 1/2/4 workers -------------------------------------------------
        for k in workers if "throughput" in parts else ():
            with schema() as url:
                noop = floor(url, tmp, cfg, k, jobs_n)
            same_work, rates, jobs_rates = [], [], []
            for _ in range(
                pairs or (1 if cfg.quick else 2)
            ):  # alternated, so a burst of load elsewhere hits both sides alike
                with schema() as url:
                    same_work.append(mcp_floor(url, tmp, cfg, k, runs_n))
                with schema() as url:
                    rate, facts = engine_rate(url, tmp, cfg, k, runs_n)
                rates.append(rate)
                jobs_rates.append(facts["job_rate"])
                cfg.log(
                    f"workers: {k} worker(s): {jobs_rates[-1]:.1f} runs/s, same-work floor {same_work[-1]:.1f} jobs/s (ratio {jobs_rates[-1] / same_work[-1]:.2f})"
                )
            case.figure(
                f"noop_jobs_per_s_{k}",
                noop,
                "1/s",
                f"bare Procrastinate no-op jobs per second, {k} worker(s) × {CONCURRENCY}",
            )
            floor_rate = case.figure(
                f"mcp_floor_jobs_per_s_{k}",
                same_work,
                "1/s",
                f"floor: bare Procrastinate jobs making the same 4 MCP calls, per second, {k} worker(s) × {CONCURRENCY} (first job started → last ended)",
            )
            case.figure(
                f"runs_per_s_{k}",
                rates,
                "1/s",
                f"runs per second (3 reads + 1 effect each), {k} worker(s) × {CONCURRENCY} (first run created → last ended)",
            )
            jobs_rate = case.figure(
                f"runs_per_s_jobs_{k}",
                jobs_rates,
                "1/s",
                f"runs per second, {k} worker(s) × {CONCURRENCY}, measured as the floors are (first step started → last run ended)",
            )
            case.figure(
                f"run_cost_in_noop_jobs_{k}",
                noop / jobs_rate,
                "x",
                f"one run costs this many no-op jobs, {k} worker(s)",
            )
            ratio = case.figure(
                f"runs_over_mcp_floor_{k}",
                [e / f for e, f in zip(jobs_rates, same_work, strict=True)],
                "x",
                f"engine runs per second ÷ the floor making the same MCP calls, {k} worker(s) (per alternated pair)",
            )
            case.check(
                f"w: runs/s ÷ the same-work floor, {k} worker(s)",
                ratio,
                0.8,
                unit="x",
                what="from the first job (step) started to the last one ended, both sides, same run",
                ratio=True,
                at_least=True,
            )
            cfg.log(
                f"workers: {k} worker(s): {jobs_rate:.1f} runs/s, same-work floor {floor_rate:.1f} jobs/s (ratio {ratio:.2f}), no-op floor {noop:.0f} jobs/s"
            )
        case.extra_json["runs_per_run_measure"] = runs_n
        # --- the boundary ---------------------------------------------------------------------------------
        if "boundary" in parts:
            _boundary(case, tmp, cfg, jobs_n)
        # --- approve -> effect -------------------------------------------------------------------------------
        if "approve" in parts:
            with schema() as url:
                lat = approve_to_effect(url, tmp, cfg, samples)
            m = case.figure(
                "approve_to_effect_s",
                lat["latency"],
                "s",
                "approve → the chat server begins the post, through the queue, one warm worker",
            )
            case.figure(
                "approve_api_s",
                lat["approve"],
                "s",
                "Runs.approve (decision and queued resume, one transaction), in the approving process",
            )
            case.check(
                "workers: approve → effect start through the queue", m, 0.050, unit="s", what="median, warm worker"
            )
        # --- store operations ----------------------------------------------------------------------------------
        if "store" in parts:
            _store_part(case, tmp, cfg, ops_n)
        case.note(f"load average at the end: {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
    return case.done()


def _boundary(case: Case, tmp: Path, cfg: Config, jobs_n: int) -> None:
    trips = boundary_round_trip(200 if cfg.quick else 2000)
    case.figure("boundary_round_trip_s", trips, "s", "asyncio → trio → asyncio round trip of EngineHost.call (no-op)")
    plain, crossing = [], []
    with schema() as url:
        for _ in range(1 if cfg.quick else 5):  # alternated, so a change in the machine's load hits both alike
            plain.append(floor(url, tmp, cfg, 1, jobs_n))
            crossing.append(floor(url, tmp, cfg, 1, jobs_n, trio_side=True))
    p = case.figure(
        "noop_jobs_per_s_plain",
        plain,
        "1/s",
        f"no-op jobs per second, 1 worker × {CONCURRENCY} (median of {len(plain)}, alternated with the next)",
    )
    x = case.figure(
        "noop_jobs_per_s_trio",
        crossing,
        "1/s",
        f"no-op jobs per second, every job crossing into trio and back, 1 worker × {CONCURRENCY} (median of {len(crossing)})",
    )
    case.figure("noop_trio_over_plain", x / p, "x", "no-op jobs per second crossing into trio ÷ plain")
    case.figure(
        "boundary_share_of_noop_job",
        statistics.median(trips) * p,
        "x",
        "one round trip as a share of one no-op job's time (round trip × no-op jobs per second)",
    )


def _store_part(case: Case, tmp: Path, cfg: Config, ops_n: int) -> None:
    from vodou_engine.store import open_store

    with schema() as url:
        pg = open_store(url)
        sq = open_store(str(tmp / "ops.db"))
        try:
            pg_ops, sq_ops = store_ops(pg, ops_n), store_ops(sq, ops_n)
        finally:
            pg.close()
            sq.close()
        pg_chain = chain_per_step(url, 3 if cfg.quick else 10)
    sq_chain = chain_per_step(str(tmp / "chain.db"), 3 if cfg.quick else 10)
    for op in ("park", "resume", "chained_step"):
        p, s = (
            case.figure(f"pg_{op}_s", pg_ops[op], "s", f"store: {op}, PostgreSQL"),
            case.figure(f"sqlite_{op}_s", sq_ops[op], "s", f"store: {op}, SQLite"),
        )
        case.figure(f"pg_over_sqlite_{op}", p / s, "x", f"store: {op}, PostgreSQL ÷ SQLite")
    p, s = (
        case.figure(
            "pg_chain_step_s", pg_chain, "s", "a chain of 20 built-in steps through the run API, per step, PostgreSQL"
        ),
        case.figure("sqlite_chain_step_s", sq_chain, "s", "the same on SQLite"),
    )
    case.figure("pg_over_sqlite_chain_step", p / s, "x", "chain step through the run API, PostgreSQL ÷ SQLite")


def _table(c: Case) -> str:
    rows = []
    for _key, f in c.figures.items():
        v = f["value"]
        shown = f"{v * 1e3:.2f} ms" if f["unit"] == "s" else f"{v:.2f}{'×' if f['unit'] == 'x' else ' /s'}"
        rows.append(f"| {f['label']} | {shown} |")
    for ch in c.checks:
        rows.append(
            f"| target: {ch['name']} ({'≥' if ch.get('at_least') else '≤'} {ch['limit']:g}) | {ch['measured']:.3f}: {'met' if ch['met'] else 'not met'} |"
        )
    return "\n".join(["| figure | measured |", "|---|---|", *rows])


def main(argv: list[str]) -> int:
    import argparse

    from .common import DEFAULT_OUT
    from .report import load_average, machine_info

    p = argparse.ArgumentParser(
        prog="python -m benchmarks.workers_bench",
        description="Scale-out on PostgreSQL: workers against the queue's floor (needs $VODOU_BENCH_PG).",
    )
    p.add_argument("--quick", action="store_true", help="smaller N, for a look")
    p.add_argument(
        "--out",
        type=Path,
        default=DEFAULT_OUT / "workers.json",
        metavar="FILE",
        help="where the figures go (default benchmarks/results/workers.json)",
    )
    p.add_argument("--parts", default=",".join(PARTS), help=f"comma-separated, of {', '.join(PARTS)} (default all)")
    p.add_argument("--workers", default="1,2,4", help="throughput: the numbers of workers (default 1,2,4)")
    p.add_argument(
        "--pairs",
        type=int,
        default=None,
        help="throughput: alternated engine/floor pairs per count (default 2; 1 quick)",
    )
    args = p.parse_args(argv)
    parts = tuple(x.strip() for x in args.parts.split(",") if x.strip())
    if any(x not in PARTS for x in parts):
        p.error(f"--parts: choose among {', '.join(PARTS)}")
    import logging

    logging.getLogger("procrastinate").setLevel(
        logging.ERROR
    )  # it warns about an app in __main__, which this module is on purpose
    before = load_average()
    c = run(
        Config(quick=args.quick, log=lambda m: print(m, file=sys.stderr)),
        parts,
        tuple(int(k) for k in args.workers.split(",")),
        args.pairs,
    )
    print(_table(c), file=sys.stderr)
    doc = {
        "generated": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "command": "python -m benchmarks.workers_bench"
        + (" --quick" if args.quick else "")
        + (f" --parts {args.parts}" if parts != PARTS else ""),
        "machine": machine_info(),
        "postgresql": PG.split("@")[-1],
        "load_before": before,
        "load_after": load_average(),
        "case": c.to_json(),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=2, default=str) + "\n")
    print(f"wrote {args.out}", file=sys.stderr)
    return 0 if all(ch["met"] for ch in c.checks) else 1


if __name__ == "__main__":  # pragma: no cover - `python -m benchmarks.workers_bench [--quick] [--out FILE]`
    if len(sys.argv) > 1 and sys.argv[1] == "noop-worker":
        noop_worker(sys.argv[2], int(sys.argv[3]), len(sys.argv) > 4 and sys.argv[4] == "trio")
    if len(sys.argv) > 1 and sys.argv[1] == "mcp-worker":
        mcp_worker(sys.argv[2], int(sys.argv[3]))
    if len(sys.argv) > 3 and sys.argv[1] == "profiled":
        profiled(sys.argv[2], sys.argv[4:] if sys.argv[3] == "--" else sys.argv[3:])
        sys.exit(0)
    if (
        len(sys.argv) > 1 and sys.argv[1] == "profile-worker"
    ):  # `... profile-worker [N]`: where a worker's time goes, and the floor's
        n = int(sys.argv[2]) if len(sys.argv) > 2 else 200
        cpu_only = len(sys.argv) > 3 and sys.argv[3] == "cpu"  # CPU per job by thread, no profiler
        with TempDir("workers-profile") as tmp:
            for floor_side in (False, True):
                with schema() as url:
                    print(
                        profile_worker(
                            url,
                            tmp,
                            Config(log=lambda m: print(m, file=sys.stderr)),
                            n,
                            floor_side=floor_side,
                            profile=not cpu_only,
                        ),
                        flush=True,
                    )
        sys.exit(0)
    sys.exit(main(sys.argv[1:]))
