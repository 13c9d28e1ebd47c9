"""c. Baselines that look parallel and are not, and the floor.

* ``time.sleep`` called straight inside coroutines in a trio nursery: the
  event loop thread blocks, so the branches run one after another.
* the same with ``trio.to_thread.run_sync``: what the engine does, minus the engine.
* a plain ``concurrent.futures.ThreadPoolExecutor``: the floor.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor, wait

import trio

from .case_a import LATENCIES_MS
from .common import Case, Config


def _branch_sync(ms: int, spans: list) -> None:
    t0 = time.perf_counter()
    time.sleep(ms / 1000)
    spans.append((t0, time.perf_counter()))


async def _nursery_blocking() -> tuple[float, list]:
    spans: list = []

    async def branch(ms: int) -> None:
        _branch_sync(ms, spans)  # blocks the trio thread: looks concurrent, is not

    t0 = time.perf_counter()
    async with trio.open_nursery() as n:
        for ms in LATENCIES_MS:
            n.start_soon(branch, ms)
    return time.perf_counter() - t0, spans


async def _nursery_threads() -> tuple[float, list]:
    spans: list = []
    t0 = time.perf_counter()
    async with trio.open_nursery() as n:
        for ms in LATENCIES_MS:
            n.start_soon(trio.to_thread.run_sync, _branch_sync, ms, spans)
    return time.perf_counter() - t0, spans


def _pool(pool: ThreadPoolExecutor) -> tuple[float, list]:
    spans: list = []
    t0 = time.perf_counter()
    wait([pool.submit(_branch_sync, ms, spans) for ms in LATENCIES_MS])
    return time.perf_counter() - t0, spans


def run(cfg: Config) -> Case:
    case = Case("c", "baselines: blocking sleep in a trio nursery, trio threads, ThreadPoolExecutor")
    variants = {
        "nursery_blocking": ("trio nursery, time.sleep in coroutines", lambda: trio.run(_nursery_blocking)),
        "trio_threads": ("trio nursery + to_thread (no engine)", lambda: trio.run(_nursery_threads)),
    }
    pool = ThreadPoolExecutor(max_workers=len(LATENCIES_MS))
    variants["thread_pool"] = ("ThreadPoolExecutor(3) (floor)", lambda: _pool(pool))
    rows: dict[str, list] = {k: [] for k in variants}
    try:
        _pool(pool)  # warm the pool's threads
        for _ in range(cfg.runs):
            for key, (_, fn) in variants.items():
                wall, spans = fn()
                rows[key].append((wall, sum(b - a for a, b in spans), max(b - a for a, b in spans)))
            cfg.log("c: " + ", ".join(f"{k} {rows[k][-1][0] * 1e3:.0f} ms" for k in rows))
    finally:
        pool.shutdown()
    for key, (label, _) in variants.items():
        w = case.figure(f"{key}_wall_s", [r[0] for r in rows[key]], "s", f"{label}: wall")
        s = case.figure(f"{key}_sum_s", [r[1] for r in rows[key]], "s", f"{label}: summed branch time")
        sl = case.figure(f"{key}_slowest_s", [r[2] for r in rows[key]], "s", f"{label}: slowest branch")
        case.figure(f"{key}_wall_over_slowest", [r[0] / r[2] for r in rows[key]], "x", f"{label}: wall / slowest")
        case.figure(f"{key}_wall_over_sum", [r[0] / r[1] for r in rows[key]], "x", f"{label}: wall / sum")
        case.bar(label, wall_s=w, sum_s=s, slowest_s=sl)
    case.note(
        "No targets: these say what serial (wall = sum) and the floor (wall = slowest) look like on this machine."
    )
    return case.done()
