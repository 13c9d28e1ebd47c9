"""d. Scale: N parallel branches of 10 ms blocking work, and of no work.

Engine runs (``vodou.sleep {"ms": 10}`` / ``vodou.noop {}`` in one together of
N) alternate with the floor, a ``ThreadPoolExecutor(N)`` running N
``time.sleep(0.01)``: once with a pool whose threads already exist (warm, the
strict floor; the engine's worker threads are warm too after its first run)
and once with a fresh pool (cold, thread creation included). Two rows without
the engine give context: N × ``trio.to_thread.run_sync`` in a nursery (trio's
own per-call hand-off), and N calls through the engine's batched hand-off
(``runtime.threads.Blocking``) alone, both with the engine's thread limit.
Memory: 1,000 / 10,000 / 100,000 no-op branches, each N compiled and run in a
process of its own (``benchmarks/branch_memory.py``), the peak resident set per
branch and the run's wall per branch (linear in N when the per-branch wall
stays flat). A
branch's engine span (ready → ended) includes waiting for one of those thread
slots, so the summed branch time grows with N; the run report's own figure
(``Together.sum_s``, each branch's started → ended) leaves the queueing out
and reports it apart (``queued_s``), and both are given. Runs go through
``Runs.start`` of a prepared plan; node times come back through ``Runs.show``.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor, wait
from functools import partial

import trio

from .common import (
    ROOT,
    Case,
    Config,
    Seen,
    TempDir,
    bench_runs,
    open_bench_store,
    prepared,
    profile_text,
    timed_start,
    together_wall,
)

SLEEP_MS = 10
PEAK_PER_BRANCH_B = 2048
"""Target: peak resident set per no-op branch at 100,000 branches (compile and run included)."""
LINEAR_WITHIN = 1.5
"""Target: wall per branch at the largest N at most this many times the wall per branch at 1,000."""
POOL_RATIO = 1.20
"""Target: 1,000 × 10 ms branches against a warm ThreadPoolExecutor(1000)."""
NO_WORK_S = 20e-6
"""Target: engine wall / N for N = 1,000 no-work branches."""


def recipe(n: int, tool: str) -> str:
    return f'recipe "scale {n}"\ntogether wide:\n' + "".join(f"  b{i}: {tool}\n" for i in range(n))


def _pool_once(pool: ThreadPoolExecutor, n: int) -> float:
    t0 = time.perf_counter()
    wait([pool.submit(time.sleep, SLEEP_MS / 1000) for _ in range(n)])
    return time.perf_counter() - t0


def _cold_pool(n: int) -> float:
    t0 = time.perf_counter()
    with ThreadPoolExecutor(max_workers=n) as pool:
        wait([pool.submit(time.sleep, SLEEP_MS / 1000) for _ in range(n)])
        wall = time.perf_counter() - t0
    return wall


async def _bare_trio(n: int, limit: int) -> float:
    """N × trio.to_thread.run_sync(time.sleep) in a nursery: trio's own floor, no engine."""
    limiter = trio.CapacityLimiter(limit)
    t0 = time.perf_counter()
    async with trio.open_nursery() as nursery:
        for _ in range(n):
            nursery.start_soon(lambda: trio.to_thread.run_sync(time.sleep, SLEEP_MS / 1000, limiter=limiter))
    return time.perf_counter() - t0


async def _bare_blocking(n: int, limit: int) -> float:
    """N × time.sleep through the engine's own thread hand-off, no engine around it."""
    from vodou_engine.runtime.threads import Blocking

    threads = Blocking(limit)
    t0 = time.perf_counter()
    async with trio.open_nursery() as nursery:
        for _ in range(n):
            nursery.start_soon(threads.run, time.sleep, SLEEP_MS / 1000)
    return time.perf_counter() - t0


def _thread_limit() -> int:
    from vodou_engine.runs import thread_limit

    return thread_limit()


def sizes(cfg: Config) -> tuple[int, ...]:
    return (10, 100) if cfg.quick else (10, 100, 1000)


def memory_sizes(cfg: Config) -> tuple[int, ...]:
    return (1000, 10000) if cfg.quick else (1000, 10000, 100000)


def _memory_once(n: int, *, traced: bool = False) -> dict:
    """One N in a fresh process: its peak is its own (``benchmarks/branch_memory.py``)."""
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.branch_memory", str(n), *(["--traced"] if traced else [])],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"branch_memory {n} failed:\n{proc.stderr[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def memory(case: Case, cfg: Config) -> None:
    """Peak memory and wall per no-op branch at each N; the N alternate within each round."""
    ns = memory_sizes(cfg)
    rounds = 1 if cfg.quick else min(cfg.runs, 3)
    seen: dict[int, list[dict]] = {n: [] for n in ns}
    for _ in range(rounds):
        for n in ns:
            m = _memory_once(n)
            m.update(_memory_once(n, traced=True))
            seen[n].append(m)
            cfg.log(
                f"d: {n} no-op branches in a process of their own: peak {m['peak_per_branch_bytes']:.0f} B/branch, "
                f"run {m['run_per_branch_s'] * 1e6:.1f} µs/branch, compile {m['compile_s']:.2f} s"
            )
    per: dict[int, float] = {}
    for n in ns:
        rows = seen[n]
        peak = case.figure(
            f"memory_{n}_peak_per_branch_b",
            [r["peak_per_branch_bytes"] for r in rows],
            "B",
            f"N={n} no-op branches: peak resident set / N (compile + run, own process; {rows[0]['peak_source']})",
        )
        traced = case.figure(
            f"memory_{n}_traced_per_branch_b",
            [r["traced_per_branch_bytes"] for r in rows],
            "B",
            f"N={n} no-op branches: tracemalloc peak / N (compile + run, own process)",
        )
        per[n] = case.figure(
            f"memory_{n}_run_per_branch_s",
            [r["run_per_branch_s"] for r in rows],
            "s",
            f"N={n} no-op branches: Runs.start wall / N (own process)",
        )
        case.figure(f"memory_{n}_compile_s", [r["compile_s"] for r in rows], "s", f"N={n}: compile of the recipe")
        if n == max(ns):
            case.check(
                f"d: peak memory per branch (N={n})",
                peak,
                PEAK_PER_BRANCH_B,
                unit="B",
                what="peak resident set of compile + run over the process's own before, / N",
            )
            case.check(
                f"d: peak Python memory per branch (N={n})",
                traced,
                PEAK_PER_BRANCH_B,
                unit="B",
                what="tracemalloc peak of compile + run, / N",
            )
    small, big = min(ns), max(ns)
    case.check(
        f"d: wall linear in N ({big} vs {small})",
        per[big] / per[small],
        LINEAR_WITHIN,
        unit="x",
        what=f"wall per branch at N={big} over wall per branch at N={small}",
        ratio=True,
    )


def run(cfg: Config) -> Case:
    from vodou_engine.compiler import compile_recipe

    case = Case("d", "scale: N parallel branches of 10 ms blocking work, and of no work")
    big = max(sizes(cfg))
    limit = _thread_limit()
    with TempDir("d") as tmp:
        store = open_bench_store(tmp / "runs.db")
        runs = bench_runs(store)
        for n in sizes(cfg):
            sleep_plan = compile_recipe(recipe(n, f'vodou.sleep {{"ms": {SLEEP_MS}}}'))
            noop_plan = compile_recipe(recipe(n, "vodou.noop {}"))
            sleep_ready, noop_ready = prepared(sleep_plan), prepared(noop_plan)
            pool = ThreadPoolExecutor(max_workers=n)
            rows: list[dict] = []
            try:
                _pool_once(pool, n)  # create the pool's threads
                trio.run(timed_start, runs, sleep_ready)  # warm trio's thread cache
                trio.run(timed_start, runs, noop_ready)
                for _ in range(cfg.runs):
                    warm = _pool_once(pool, n)
                    cold = _cold_pool(n)
                    barel = trio.run(_bare_trio, n, limit)
                    baren = trio.run(_bare_trio, n, n) if limit != n else barel
                    blocking = trio.run(_bare_blocking, n, limit)
                    wall, out = trio.run(timed_start, runs, sleep_ready)
                    assert out.state == "succeeded", out.state
                    tw = together_wall(sleep_plan, Seen(runs, out.run), "join:wide")
                    nwall, nout = trio.run(timed_start, runs, noop_ready)
                    assert nout.state == "succeeded", nout.state
                    ntw = together_wall(noop_plan, Seen(runs, nout.run), "join:wide")
                    rows.append(
                        {
                            "barel": barel,
                            "baren": baren,
                            "blocking": blocking,
                            "warm": warm,
                            "cold": cold,
                            "wall": wall,
                            "tw": tw["wall_s"],
                            "sum": tw["sum_s"],
                            "work_sum": tw["work_sum_s"],
                            "queued": tw["queued_s"],
                            "slowest": tw["slowest_s"],
                            "nwall": nwall,
                            "ntw": ntw["wall_s"],
                        }
                    )
                    cfg.log(
                        f"d: N={n} sleep {wall * 1e3:.0f} ms (pool {warm * 1e3:.0f}/{cold * 1e3:.0f} ms), noop {nwall * 1e3:.1f} ms"
                    )
            finally:
                pool.shutdown()
            col = lambda k, rows=rows: [r[k] for r in rows]  # noqa: E731
            w = case.figure(f"sleep_{n}_run_wall_s", col("wall"), "s", f"N={n} × 10 ms: whole Runs.start")
            case.figure(f"sleep_{n}_together_wall_s", col("tw"), "s", f"N={n} × 10 ms: together wall")
            case.figure(
                f"sleep_{n}_sum_s",
                col("sum"),
                "s",
                f"N={n} × 10 ms: summed branch time (engine spans, queueing included)",
            )
            s = case.figure(
                f"sleep_{n}_work_sum_s",
                col("work_sum"),
                "s",
                f"N={n} × 10 ms: summed branch work (as the run report gives it)",
            )
            case.figure(
                f"sleep_{n}_queued_s", col("queued"), "s", f"N={n} × 10 ms: summed wait for a thread (ready → started)"
            )
            sl = case.figure(
                f"sleep_{n}_slowest_s", col("slowest"), "s", f"N={n} × 10 ms: slowest branch (engine span)"
            )
            pw = case.figure(f"pool_{n}_warm_wall_s", col("warm"), "s", f"ThreadPoolExecutor({n}), threads exist: wall")
            case.figure(f"pool_{n}_cold_wall_s", col("cold"), "s", f"ThreadPoolExecutor({n}), fresh: wall")
            bl = case.figure(
                f"bare_trio_{n}_limit{limit}_s",
                col("barel"),
                "s",
                f"bare trio: {n} × to_thread.run_sync, limiter {limit} (no engine)",
            )
            if limit != n:
                case.figure(
                    f"bare_trio_{n}_limit{n}_s",
                    col("baren"),
                    "s",
                    f"bare trio: {n} × to_thread.run_sync, limiter {n} (no engine)",
                )
            bb = case.figure(
                f"bare_blocking_{n}_s",
                col("blocking"),
                "s",
                f"bare hand-off: {n} × threads.Blocking({limit}).run (no engine)",
            )
            case.figure(
                f"bare_trio_{n}_limit{limit}_over_pool_warm",
                [r["barel"] / r["warm"] for r in rows],
                "x",
                f"N={n}: bare trio ({limit}) / warm pool",
            )
            if limit != n:
                case.figure(
                    f"bare_trio_{n}_limit{n}_over_pool_warm",
                    [r["baren"] / r["warm"] for r in rows],
                    "x",
                    f"N={n}: bare trio ({n}) / warm pool",
                )
            case.figure(
                f"bare_blocking_{n}_over_pool_warm",
                [r["blocking"] / r["warm"] for r in rows],
                "x",
                f"N={n}: bare hand-off ({limit}) / warm pool",
            )
            case.figure(
                f"sleep_{n}_over_bare_trio",
                [r["wall"] / r["barel"] for r in rows],
                "x",
                f"N={n}: engine wall / bare trio with the same limit ({limit})",
            )
            case.figure(
                f"sleep_{n}_over_bare_blocking",
                [r["wall"] / r["blocking"] for r in rows],
                "x",
                f"N={n}: engine wall / its own hand-off alone ({limit})",
            )
            ratio = case.figure(
                f"sleep_{n}_over_pool_warm",
                [r["wall"] / r["warm"] for r in rows],
                "x",
                f"N={n}: engine wall / warm pool (thread limit {limit})",
            )
            case.figure(
                f"sleep_{n}_over_pool_cold",
                [r["wall"] / r["cold"] for r in rows],
                "x",
                f"N={n}: engine wall / fresh pool",
            )
            nw = case.figure(f"noop_{n}_run_wall_s", col("nwall"), "s", f"N={n} no-work: whole Runs.start")
            case.figure(f"noop_{n}_together_wall_s", col("ntw"), "s", f"N={n} no-work: together wall")
            per = case.figure(
                f"noop_{n}_per_branch_s", [r["nwall"] / n for r in rows], "s", f"N={n} no-work: engine wall / N"
            )
            case.bar(f"{n}×10 ms", wall_s=w, sum_s=s, slowest_s=sl)
            case.bar(f"bare trio({n}, {limit})", wall_s=bl, sum_s=None, slowest_s=None)
            case.bar(f"bare hand-off({n}, {limit})", wall_s=bb, sum_s=None, slowest_s=None)
            case.bar(f"pool({n})", wall_s=pw, sum_s=None, slowest_s=None)
            if n == big:
                if not case.check(
                    f"d: {n}×10 ms / pool floor",
                    ratio,
                    POOL_RATIO,
                    unit="x",
                    what=f"engine wall over a warm ThreadPoolExecutor({n}), same run",
                    ratio=True,
                ):
                    case.profiles[f"one run of {n} × 10 ms (cProfile of the trio thread, by own time)"] = profile_text(
                        partial(trio.run, timed_start, runs, sleep_ready)
                    )
                if not case.check(f"d: no-work branch (N={n})", per, NO_WORK_S, unit="s", what="engine wall / N"):
                    case.profiles[f"one run of {n} no-work branches (cProfile of the trio thread, by own time)"] = (
                        profile_text(partial(trio.run, timed_start, runs, noop_ready))
                    )
                case.figure("thread_limit", limit, "count", "engine thread limit in effect for Runs.start")
                case.bar(f"{n} no-work", wall_s=nw, sum_s=None, slowest_s=None)
        store.close()
    memory(case, cfg)
    return case.done()
