"""a. The post's case: blocking branches of 412, 268 and 83 ms in one together.

Each branch is ``vodou.sleep``, a blocking ``time.sleep`` on a worker thread.
The slowest branch's own work is the time its ``time.sleep`` took, as the
tool itself reports it; the together's wall runs from the first branch
becoming ready (handed to the thread queue) to the moment the join was
decided. Runs go through the run API (``Runs.start`` of a prepared plan);
node times are read back afterwards with ``Runs.show``.
"""

from __future__ import annotations

import trio

from .common import Case, Config, Seen, TempDir, bench_runs, open_bench_store, prepared, timed_start, together_wall

LATENCIES_MS = (412, 268, 83)
RECIPE = """recipe "post case"
together fan:
  a: vodou.sleep {"ms": 412, "label": "a"}
  b: vodou.sleep {"ms": 268, "label": "b"}
  c: vodou.sleep {"ms": 83, "label": "c"}
"""


def run(cfg: Config) -> Case:
    from vodou_engine.compiler import compile_recipe

    case = Case("a", "post's case: 412 + 268 + 83 ms blocking branches (vodou.sleep)")
    plan = compile_recipe(RECIPE)
    rows = []
    with TempDir("a") as tmp:
        store = open_bench_store(tmp / "runs.db")
        runs = bench_runs(store)
        ready = prepared(plan)
        trio.run(timed_start, runs, ready)  # warm-up: thread cache, statement cache
        for _ in range(cfg.runs):
            wall, out = trio.run(timed_start, runs, ready)
            assert out.state == "succeeded", out.state
            seen = Seen(runs, out.run)
            times = seen.times
            tw = together_wall(plan, seen, "join:fan")
            work = {k: seen.outputs[k]["ended"] - seen.outputs[k]["started"] for k in "abc"}
            rows.append(
                {
                    "run_wall": wall,
                    "together_wall": tw["wall_s"],
                    "sum": tw["sum_s"],
                    "work_sum": tw["work_sum_s"],
                    "queued": tw["queued_s"],
                    "slowest_span": tw["slowest_s"],
                    "slowest_work": max(work.values()),
                    "join_delay": times["join:fan"][2] - max(times[k][2] for k in "abc"),
                    "dispatch": max(times[k][1] for k in "abc") - min(times[k][1] for k in "abc"),
                }
            )
            cfg.log(f"a: together {tw['wall_s'] * 1e3:.1f} ms, run {wall * 1e3:.1f} ms")
        store.close()
    col = lambda k: [r[k] for r in rows]  # noqa: E731
    wall = case.figure(
        "together_wall_s", col("together_wall"), "s", "together wall (first branch ready → join decided)"
    )
    case.figure("run_wall_s", col("run_wall"), "s", "whole Runs.start (run stored → run ended)")
    case.figure("sum_s", col("sum"), "s", "summed branch time (engine spans: ready → ended)")
    total = case.figure(
        "work_sum_s", col("work_sum"), "s", "summed branch work (started → ended, as the run report gives it)"
    )
    case.figure("queued_s", col("queued"), "s", "time branches waited for a thread (ready → started, summed)")
    slow = case.figure(
        "slowest_work_s", col("slowest_work"), "s", "slowest branch's own work (time.sleep inside the tool)"
    )
    case.figure(
        "slowest_span_s",
        col("slowest_span"),
        "s",
        "slowest branch as the engine saw it (ready → ended, thread hop included)",
    )
    case.figure("join_delay_s", col("join_delay"), "s", "last branch end → join decided")
    case.figure("dispatch_s", col("dispatch"), "s", "first → last branch start (a worker took the call)")
    ratio = case.figure(
        "wall_over_slowest", [r["together_wall"] / r["slowest_work"] for r in rows], "x", "together wall / slowest work"
    )
    case.figure(
        "run_wall_over_slowest",
        [r["run_wall"] / r["slowest_work"] for r in rows],
        "x",
        "whole run / slowest work (info)",
    )
    case.figure(
        "wall_over_sum", [r["together_wall"] / r["work_sum"] for r in rows], "x", "together wall / summed work (info)"
    )
    case.check(
        "a: wall / slowest", ratio, 1.01, unit="x", what="together wall over the slowest branch's work", ratio=True
    )
    case.bar("engine", wall_s=wall, sum_s=total, slowest_s=slow)
    return case.done()
