"""e. A chain of sequential no-work steps: the engine's cost per step.

Top-level ``vodou.noop`` steps, each needing the one before. Store writes are
included: ``Runs.start`` (of a prepared plan) returns only after every node
state is committed.
The marginal cost subtracts a one-step run measured alternately.
"""

from __future__ import annotations

import trio

from .common import Case, Config, TempDir, bench_runs, open_bench_store, prepared, profile_text, timed_start

LIMIT_S = 100e-6


def recipe(n: int) -> str:
    return f'recipe "chain {n}"\n' + "".join(f"s{i}: vodou.noop {{}}\n" for i in range(n))


def run(cfg: Config) -> Case:
    from vodou_engine.compiler import compile_recipe

    n = 200 if cfg.quick else 1000
    case = Case("e", f"chain of {n} sequential no-work steps (durable state)")
    plan = compile_recipe(recipe(n))
    one = compile_recipe(recipe(1))
    rows = []
    with TempDir("e") as tmp:
        store = open_bench_store(tmp / "runs.db")
        runs = bench_runs(store)
        plan_ready, one_ready = prepared(plan), prepared(one)
        trio.run(timed_start, runs, plan_ready)
        for _ in range(cfg.runs):
            w1, o1 = trio.run(timed_start, runs, one_ready)
            wn, on = trio.run(timed_start, runs, plan_ready)
            assert on.state == "succeeded" and o1.state == "succeeded"
            saved = store.get_nodes(on.run)
            assert len(saved) == n and all(r.state == "succeeded" for r in saved.values()), "not every step was stored"
            rows.append((wn, w1))
            cfg.log(f"e: {n} steps {wn * 1e3:.1f} ms ({wn / n * 1e6:.0f} µs/step), 1 step {w1 * 1e3:.2f} ms")
        if sorted(r[0] for r in rows)[len(rows) // 2] / n > LIMIT_S:
            case.profiles[f"one {n}-step run (cProfile of the trio thread, by own time)"] = profile_text(
                lambda: trio.run(timed_start, runs, plan_ready)
            )
        store.close()
    case.figure("n_steps", n, "count", "steps in the chain")
    wall = case.figure("run_wall_s", [r[0] for r in rows], "s", f"whole Runs.start of {n} steps")
    case.figure("one_step_run_wall_s", [r[1] for r in rows], "s", "whole Runs.start of 1 step")
    per = case.figure("per_step_s", [r[0] / n for r in rows], "s", "wall / steps")
    case.figure(
        "marginal_per_step_s", [(r[0] - r[1]) / (n - 1) for r in rows], "s", "(wall − 1-step wall) / (steps − 1)"
    )
    case.check("e: per chained step", per, LIMIT_S, unit="s", what="Runs.start wall / steps, store writes included")
    case.bar(f"{n}-step chain", wall_s=wall, sum_s=None, slowest_s=None)
    return case.done()
