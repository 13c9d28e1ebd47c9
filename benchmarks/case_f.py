"""f. A quorum ``need: 2 of 3`` over branches of 0.1, 0.2 and 5 s.

In-process: the delay from the second success (its node's end time) to the
join node's time, and to ``Runs.start`` (of a prepared plan) returning, while
the 5 s thread is still blocked; node times are read back with ``Runs.show``.
As a process: ``python -m vodou_engine run FILE --json`` with its own store;
the process's exit (the moment ``wait`` returns here) is compared with the
run's end as the store recorded it (``runs.ended_at``). Both clocks are
``time.time()`` on the same machine.
"""

from __future__ import annotations

import sqlite3
import subprocess
import time

import trio

from .common import (
    Case,
    Config,
    Seen,
    TempDir,
    bench_runs,
    clean_env,
    engine_argv,
    open_bench_store,
    prepared,
    timed_start,
)

RECIPE = """recipe "quorum"
together q:
  fast: vodou.sleep {"ms": 100}
  mid:  vodou.sleep {"ms": 200}
  slow: vodou.sleep {"ms": 5000}
  need: 2 of 3
then:
  after: vodou.noop {}
"""


def _process_run(tmp, cfg: Config, recipe_path, i: int) -> dict:
    store_path = tmp / f"proc-{i}.db"
    env = clean_env(tmp, cfg, VODOU_STORE=str(store_path))
    t_start = time.time()
    proc = subprocess.Popen(
        engine_argv("run", str(recipe_path), "--json", cfg=cfg),
        cwd=tmp,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
    )
    _out, err = proc.communicate(timeout=120)
    t_exit = time.time()
    if proc.returncode != 0:
        raise RuntimeError(f"run exited {proc.returncode}: {err.decode()[-2000:]}")
    conn = sqlite3.connect(store_path)
    try:
        state, ended, _updated = conn.execute("SELECT state, ended_at, updated_at FROM runs").fetchone()
        # (state, ready, ended): a thread call dropped by the quorum has no start time of its
        # own (the journal makes none up), so "still asleep" is judged from when it was ready
        nodes = {r[0]: (r[1], r[2], r[3]) for r in conn.execute("SELECT node_id, state, ready_at, ended_at FROM nodes")}
    finally:
        conn.close()
    assert state == "succeeded", state
    second = sorted(nodes[k][2] for k in ("fast", "mid"))[-1]
    return {
        "exit_after_end": t_exit - ended,
        "join_after_second": nodes["join:q"][2] - second,
        "end_after_second": ended - second,
        "process_wall": t_exit - t_start,
        "slow_state": nodes["slow"][0],
        "slow_still_blocked": t_exit < nodes["slow"][1] + 5.0,
    }


def run(cfg: Config) -> Case:
    from vodou_engine.compiler import compile_recipe

    case = Case("f", "quorum need 2 of 3 over 0.1 / 0.2 / 5 s: join delay and process exit")
    plan = compile_recipe(RECIPE)
    rows, procs = [], []
    with TempDir("f") as tmp:
        store = open_bench_store(tmp / "runs.db")
        runs = bench_runs(store)
        ready = prepared(plan)
        recipe_path = tmp / "quorum.recipe"
        recipe_path.write_text(RECIPE)
        _process_run(tmp, cfg, recipe_path, -1)  # warm the bytecode cache
        for i in range(cfg.runs):
            wall, out = trio.run(timed_start, runs, ready)
            returned = time.time()
            assert out.state == "succeeded", out.state
            seen = Seen(runs, out.run)
            times = seen.times
            second = sorted(times[k][2] for k in ("fast", "mid"))[-1]
            run_rec = store.get_run(out.run)
            rows.append(
                {
                    "join": times["join:q"][2] - second,
                    "returned": returned - second,
                    "ended": run_rec.ended_at - second,
                    "wall": wall,
                    "slow": seen.states["slow"],
                }
            )
            procs.append(_process_run(tmp, cfg, recipe_path, i))
            cfg.log(
                f"f: join +{rows[-1]['join'] * 1e6:.0f} µs, process exit +{procs[-1]['exit_after_end'] * 1e3:.1f} ms after the run ended"
            )
        store.close()
    col = lambda rs, k: [r[k] for r in rs]  # noqa: E731
    join = case.figure("join_after_second_s", col(rows, "join"), "s", "second success → join (in-process)")
    case.figure(
        "returned_after_second_s", col(rows, "returned"), "s", "second success → Runs.start returned (in-process)"
    )
    case.figure("ended_after_second_s", col(rows, "ended"), "s", "second success → runs.ended_at (in-process)")
    wall = case.figure("run_wall_s", col(rows, "wall"), "s", "whole Runs.start (in-process)")
    case.figure("proc_join_after_second_s", col(procs, "join_after_second"), "s", "second success → join (process)")
    case.figure(
        "proc_end_after_second_s", col(procs, "end_after_second"), "s", "second success → runs.ended_at (process)"
    )
    exit_ = case.figure("exit_after_end_s", col(procs, "exit_after_end"), "s", "runs.ended_at → process exit")
    case.figure("process_wall_s", col(procs, "process_wall"), "s", "whole `run` process")
    case.figure(
        "slow_cancelled_runs",
        sum(1 for r in rows + procs if r.get("slow", r.get("slow_state")) == "cancelled"),
        "count",
        "runs where the 5 s branch ended cancelled",
    )
    case.figure(
        "exit_while_slow_blocked",
        sum(1 for p in procs if p["slow_still_blocked"]),
        "count",
        "processes that exited while the 5 s thread was still asleep",
    )
    case.check("f: join after 2nd success", join, 1e-3, unit="s", what="second success → join node")
    case.check("f: process exit after run end", exit_, 0.1, unit="s", what="runs.ended_at → process exit")
    case.bar("quorum 2 of 3", wall_s=wall, sum_s=None, slowest_s=None)
    return case.done()
