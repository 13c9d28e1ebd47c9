"""a. The post's case: blocking branches of 412, 268 and 83 ms in one together.

Each branch is ``vodou.sleep``, a blocking ``time.sleep`` on a worker thread.
The slowest branch's own work is the time its ``time.sleep`` took, as the
tool itself reports it; the together's wall runs from the first branch's
start to the moment the join was decided.
"""

from __future__ import annotations

import trio

from .common import Case, Config, TempDir, engine_times, open_bench_store, timed_start, together_wall

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
        trio.run(timed_start, plan, store)  # warm-up: thread cache, statement cache
        for _ in range(cfg.runs):
            wall, out = trio.run(timed_start, plan, store)
            assert out.state == "succeeded", out.state
            times = engine_times(out)
            tw = together_wall(plan, times, "join:fan")
            work = {k: out.engine.outputs[k]["ended"] - out.engine.outputs[k]["started"] for k in "abc"}
            rows.append({
                "run_wall": wall,
                "together_wall": tw["wall_s"],
                "sum": tw["sum_s"],
                "slowest_span": tw["slowest_s"],
                "slowest_work": max(work.values()),
                "join_delay": times["join:fan"][1] - max(times[k][1] for k in "abc"),
                "dispatch": max(times[k][0] for k in "abc") - min(times[k][0] for k in "abc"),
            })
            cfg.log(f"a: together {tw['wall_s'] * 1e3:.1f} ms, run {wall * 1e3:.1f} ms")
        store.close()
    col = lambda k: [r[k] for r in rows]  # noqa: E731
    wall = case.figure("together_wall_s", col("together_wall"), "s", "together wall (first branch start → join decided)")
    case.figure("run_wall_s", col("run_wall"), "s", "whole start_run (store create → run ended)")
    total = case.figure("sum_s", col("sum"), "s", "summed branch time (engine spans)")
    slow = case.figure("slowest_work_s", col("slowest_work"), "s", "slowest branch's own work (time.sleep inside the tool)")
    case.figure("slowest_span_s", col("slowest_span"), "s", "slowest branch as the engine saw it (thread hop included)")
    case.figure("join_delay_s", col("join_delay"), "s", "last branch end → join decided")
    case.figure("dispatch_s", col("dispatch"), "s", "first → last branch start")
    ratio = case.figure("wall_over_slowest", [r["together_wall"] / r["slowest_work"] for r in rows], "x", "together wall / slowest work")
    case.figure("run_wall_over_slowest", [r["run_wall"] / r["slowest_work"] for r in rows], "x", "whole run / slowest work (info)")
    case.figure("wall_over_sum", [r["together_wall"] / r["sum"] for r in rows], "x", "together wall / sum (info)")
    case.check("a: wall / slowest", ratio, 1.01, unit="x", what="together wall over the slowest branch's work", ratio=True)
    case.bar("engine", wall_s=wall, sum_s=total, slowest_s=slow)
    return case.done()
