"""o. DBOS (durable execution on PostgreSQL), a peer, in the same run, against the engine on PostgreSQL.

Optional: needs ``dbos`` (``pip install -e '.[bench]'``), PostgreSQL
(``$VODOU_BENCH_PG``, default ``postgresql://postgres@127.0.0.1:5432/test``)
and, for the engine's queue, Procrastinate; without them the case is skipped
and says so. DBOS gets a database of its own, ``vodou_bench_dbos``, created
here and dropped at the end; it runs in a process of its own
(``benchmarks/peer_dbos.py``: DBOS is one global instance per process). The
engine works in a schema of its own, dropped afterwards.

Side by side:

* **a durable step**: DBOS, a workflow of 20 no-op steps (each step's outcome
  checkpointed before the next), wall / 20. The engine: a chain of 20
  built-in steps through ``Runs.start`` on the PostgreSQL store, per step.
  Not the same promise: the engine writes a read's state in batches (a crash
  may repeat a read, which its contract allows; an effect is written and
  committed before the engine moves past it), DBOS checkpoints every step.
* **a parked workflow woken**: DBOS, a workflow parked on ``DBOS.recv``,
  from just before ``DBOS.send`` to the next step beginning. The engine: a
  run parked at a question (``ask me``), from just before ``Runs.approve``
  (on this process: the decision recorded, the run taken and driven on) to
  the next step's start as the store has it.
* **a queue's workflows per second**: DBOS, 100 workflows of 3 no-op steps
  + 1 enqueued on a queue (DBOS's defaults), one process: workflows / (first
  step begun → last step ended). The engine: 100 queued runs of the same
  four built-in steps, one ``recipe worker`` process (its default
  concurrency), first job started → last job ended.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from functools import partial

from .common import ROOT, Case, Config, TempDir, clean_env
from .peers import INSTALL, missing, skipped

DBOS_DB = "vodou_bench_dbos"
STEPS = 20
PARK = 'recipe "park"\nfirst: vodou.noop {}\nask me:\n- go on?\nnext: vodou.noop {}\n'
FOUR = 'recipe "four"\n' + "".join(f"s{i}: vodou.noop {{}}\n" for i in range(4))
CHAIN = f'recipe "chain {STEPS}"\n' + "".join(f"s{i}: vodou.noop {{}}\n" for i in range(STEPS))


def _database_url(base: str, name: str) -> str:
    """``base`` with its database replaced by ``name`` (query string kept)."""
    head, _, query = base.partition("?")
    root = head.rsplit("/", 1)[0]
    return f"{root}/{name}" + (f"?{query}" if query else "")


def _reachable(url: str) -> str | None:
    try:
        import psycopg

        with psycopg.connect(url, autocommit=True, connect_timeout=5):
            return None
    except Exception as exc:  # noqa: BLE001 - any failure means: skip, and say why
        return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__


def dbos_side(pg: str, tmp, cfg: Config, samples: int, queued: int) -> dict:
    """DBOS's figures, from benchmarks/peer_dbos.py in a process of its own, on a database of its own."""
    import psycopg

    url = _database_url(pg, DBOS_DB)
    with psycopg.connect(pg, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{DBOS_DB}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{DBOS_DB}"')
    try:
        env = clean_env(tmp, cfg, PYTHONPATH=str(ROOT))
        argv = [
            sys.executable,
            "-m",
            "benchmarks.peer_dbos",
            url,
            "--steps",
            str(STEPS),
            "--samples",
            str(samples),
            "--queued",
            str(queued),
        ]
        proc = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
        if proc.returncode != 0:
            raise RuntimeError(f"the DBOS side failed:\n{proc.stderr[-3000:]}")
        return json.loads(proc.stdout.strip().splitlines()[-1])
    finally:
        with psycopg.connect(pg, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{DBOS_DB}" WITH (FORCE)')


def engine_chain(url: str, samples: int) -> list[float]:
    import trio

    from vodou_engine.policy import Policy
    from vodou_engine.runs import Runs
    from vodou_engine.servers import ServerSet

    runs = Runs(store=url, servers=ServerSet({}, "bench"), policy=Policy(), workers=False)
    plan = runs.load("chain.recipe", text=CHAIN)[0]
    out = []
    try:
        for i in range(samples + 1):
            t = time.perf_counter()
            report = trio.run(lambda: runs.start(plan, actor="bench"))
            if report.state != "succeeded":
                raise RuntimeError(f"the chain ended {report.state}")
            if i:
                out.append((time.perf_counter() - t) / STEPS)
    finally:
        runs.close()
    return out


def engine_wake(url: str, samples: int) -> list[float]:
    """Runs.approve of a parked question (driven on in this process) → the next step's start."""
    import trio

    from vodou_engine.policy import Policy
    from vodou_engine.runs import Runs
    from vodou_engine.servers import ServerSet

    runs = Runs(store=url, servers=ServerSet({}, "bench"), policy=Policy(), workers=False)
    plan = runs.load("park.recipe", text=PARK)[0]
    out = []
    try:
        for i in range(samples + 1):
            report = trio.run(lambda: runs.start(plan, actor="bench"))
            if report.state != "parked":
                raise RuntimeError(f"the run ended {report.state}, not parked")
            sent = time.time()
            done = trio.run(partial(runs.approve, report.run, actor="bench", proof="bench"))
            if done.state != "succeeded":
                raise RuntimeError(f"the approved run ended {done.state}")
            started = {n.node: n.started_at for n in runs.show(report.run).nodes}["next"]
            if i:
                out.append(started - sent)
    finally:
        runs.close()
    return out


def run(cfg: Config) -> Case:
    case = Case(
        "o",
        "DBOS, same run: a durable step, a parked workflow woken (send → next step), a queue's workflows per second; against the engine on PostgreSQL",
    )
    absent = missing("dbos", "psycopg", "procrastinate")
    if absent:
        return skipped(case, f"{', '.join(absent)} not installed: {INSTALL} to measure it")
    from .workers_bench import PG, engine_rate, schema

    why = _reachable(PG)
    if why is not None:
        return skipped(
            case,
            f"PostgreSQL at {PG.split('@')[-1]} cannot be reached ({why}); set VODOU_BENCH_PG to a server the benchmark may create a database on",
        )
    samples = 3 if cfg.quick else cfg.runs
    queued = 40 if cfg.quick else 100
    with TempDir("o") as tmp:
        peer = dbos_side(PG, tmp, cfg, samples, queued)
        with schema() as url:
            chain = engine_chain(url, samples)
            wake = engine_wake(url, samples)
        with schema() as url:
            rate, facts = engine_rate(url, tmp, cfg, 1, queued, recipe_text=FOUR, servers={}, concurrency=8)
    d_step = case.figure(
        "dbos_step_s",
        peer["step_s"],
        "s",
        f"DBOS: a workflow of {STEPS} no-op steps, wall / {STEPS} (every step checkpointed)",
    )
    e_step = case.figure(
        "engine_step_pg_s",
        chain,
        "s",
        f"engine: {STEPS} built-in steps through Runs.start on PostgreSQL, per step (read states written in batches)",
    )
    d_wake = case.figure(
        "dbos_send_to_step_s",
        peer["send_to_step_s"],
        "s",
        "DBOS: a workflow parked on recv: send → the next step begins",
    )
    e_wake = case.figure(
        "engine_approve_to_step_s",
        wake,
        "s",
        "engine: a run parked at a question: Runs.approve (driven on in this process) → the next step starts",
    )
    d_rate = case.figure(
        "dbos_queue_per_s",
        peer["queue_per_s"],
        "1/s",
        f"DBOS: {peer['queued']} queued workflows of 3 no-op steps + 1, one process, per second",
    )
    e_rate = case.figure(
        "engine_queue_per_s",
        facts["job_rate"],
        "1/s",
        f"engine: {queued} queued runs of 4 built-in steps, one recipe worker (concurrency 8), per second (first step started → last run ended)",
    )
    case.figure(
        "engine_queue_per_s_from_creation",
        rate,
        "1/s",
        "engine: the same, first run created → last ended (the worker's start included; info)",
    )
    case.versus(
        f"a durable step (chain of {STEPS} no-op steps), per step",
        e_step,
        d_step,
        "s",
        peer="DBOS",
        note="engine: read states batched; DBOS: every step checkpointed",
    )
    case.versus(
        "parked → woken → next step begins",
        e_wake,
        d_wake,
        "s",
        peer="DBOS",
        note="engine: Runs.approve in this process; DBOS: send → recv",
    )
    case.versus(
        "queue: workflows (3 no-op steps + 1) per second, one process",
        e_rate,
        d_rate,
        "1/s",
        peer="DBOS",
        note="engine: recipe worker, concurrency 8; DBOS: queue defaults",
    )
    case.note(
        f"DBOS ran in a process of its own on database {DBOS_DB} (created and dropped here); medians of {samples}."
    )
    case.extra_json["engine_over_dbos"] = {
        "step": e_step / d_step,
        "wake": e_wake / d_wake,
        "queue_rate": e_rate / d_rate,
        "median_of": samples,
    }
    return case.done()
