"""b. The post's latencies as tools on three real MCP stdio servers.

The demo lab servers ``board``, ``recall`` and ``proc`` each answer
``query {"ms": N}`` by blocking a server-side worker for N ms. The hub is
opened here (so server start-up is reported on its own, from the hub's
``started_in``) and handed to the run API as a prepared plan
(``Runs.start(Prepared(..., hub=hub))``); every run after one warm-up run is
measured. The slowest branch's own work is the time the server says its
``time.sleep`` took; node times and outputs are read back with ``Runs.show``.
"""

from __future__ import annotations

import time

import trio

from .common import Case, Config, Seen, TempDir, bench_runs, open_bench_store, prepared, timed_start, together_wall

SERVERS = ("board", "recall", "proc")
RECIPE = """recipe "post fan-out on MCP"
together fanout:
  board:  board.query {"ms": 412, "label": "board"}
  recall: recall.query {"ms": 268, "label": "recall"}
  proc:   proc.query {"ms": 83, "label": "proc"}
"""


async def _raw_fanout(hub) -> dict:
    """The same three calls through the hub in a bare nursery: MCP without the engine."""
    spans: dict[str, tuple] = {}

    async def one(name: str, ms: int) -> None:
        t0 = time.time()
        res = await hub.call(name, "query", {"ms": ms, "label": name})
        spans[name] = (t0, time.time(), res.value["ended"] - res.value["started"])

    t0 = time.perf_counter()
    async with trio.open_nursery() as n:
        for name, ms in zip(SERVERS, (412, 268, 83), strict=True):
            n.start_soon(one, name, ms)
    wall = time.perf_counter() - t0
    return {
        "wall": wall,
        "sum": sum(b - a for a, b, _ in spans.values()),
        "slowest_work": max(w for _, _, w in spans.values()),
    }


def run(cfg: Config) -> Case:
    from vodou_engine.compiler import compile_recipe
    from vodou_engine.planning import missing, resolve
    from vodou_engine.servers import demo_servers
    from vodou_engine.tools.hub import open_hub

    case = Case("b", "post's case on 3 MCP stdio servers (board/recall/proc query)")
    rows: list[dict] = []
    raw: list[dict] = []
    starts: dict[str, float] = {}
    with TempDir("b") as tmp:
        servers = demo_servers(tmp / "demo.db")
        store = open_bench_store(tmp / "runs.db")
        runs = bench_runs(store, servers)
        base = compile_recipe(RECIPE)

        async def main() -> dict:
            t0 = time.perf_counter()
            async with open_hub(servers, SERVERS) as hub:
                opened = time.perf_counter() - t0
                starts.update(hub.started_in)
                status, hints = resolve(base, servers, {n: hub.tools(n) for n in SERVERS})
                assert not missing(status), status
                plan = compile_recipe(RECIPE, hints=hints)
                ready = prepared(plan, servers, hub)
                warm, out = await timed_start(runs, ready)
                assert out.state == "succeeded", out.state
                await _raw_fanout(hub)
                for _ in range(cfg.runs):
                    raw.append(await _raw_fanout(hub))
                    wall, out = await timed_start(runs, ready)
                    assert out.state == "succeeded", out.state
                    seen = Seen(runs, out.run)  # after the timing: a store read
                    tw = together_wall(plan, seen, "join:fanout")
                    outs = seen.outputs
                    work = {k: outs[k]["ended"] - outs[k]["started"] for k in SERVERS}
                    # what the engine saw of each call: the task began it → its end recorded
                    spans = {k: seen.times[k][2] - seen.times[k][1] for k in SERVERS}
                    rows.append(
                        {
                            "run_wall": wall,
                            "together_wall": tw["wall_s"],
                            "sum": tw["sum_s"],
                            "work_sum": tw["work_sum_s"],
                            "slowest_work": max(work.values()),
                            "slowest_span": tw["slowest_s"],
                            "call_overhead": [spans[k] - work[k] for k in SERVERS],
                            # both clocks are time.time() on one machine
                            "server_overlap": min(outs[k]["ended"] for k in SERVERS)
                            > max(outs[k]["started"] for k in SERVERS),
                        }
                    )
                    cfg.log(f"b: together {tw['wall_s'] * 1e3:.1f} ms")
                t1 = time.perf_counter()
            return {"open": opened, "close": time.perf_counter() - t1, "warm": warm}

        hubinfo = trio.run(main)
        store.close()
    col = lambda k: [r[k] for r in rows]  # noqa: E731
    for name in SERVERS:
        case.figure(f"started_in_{name}_s", starts[name], "s", f"server start: {name} (spawn → tools listed)")
    case.figure("hub_open_s", hubinfo["open"], "s", "open_hub for all three (in parallel)")
    case.figure("hub_close_s", hubinfo["close"], "s", "closing the hub (servers exit)")
    case.figure("first_run_wall_s", hubinfo["warm"], "s", "first run after start (not in the medians)")
    wall = case.figure(
        "together_wall_s", col("together_wall"), "s", "together wall (first branch ready → join decided)"
    )
    case.figure("run_wall_s", col("run_wall"), "s", "whole Runs.start with the hub up")
    case.figure("sum_s", col("sum"), "s", "summed branch time (engine spans: ready → ended)")
    total = case.figure(
        "work_sum_s", col("work_sum"), "s", "summed branch work (started → ended, as the run report gives it)"
    )
    slow = case.figure("slowest_work_s", col("slowest_work"), "s", "slowest branch's work, server side")
    case.figure(
        "slowest_span_s",
        col("slowest_span"),
        "s",
        "slowest branch as the engine saw it (ready → ended, MCP round trip included)",
    )
    case.figure(
        "mcp_call_overhead_s",
        [x for r in rows for x in r["call_overhead"]],
        "s",
        "per call: engine span (started → ended) − server-side work",
    )
    case.figure(
        "runs_overlapping_on_servers",
        sum(1 for r in rows if r["server_overlap"]),
        "count",
        "runs whose three server-side sleeps all overlapped",
    )
    ratio = case.figure(
        "wall_over_slowest", [r["together_wall"] / r["slowest_work"] for r in rows], "x", "together wall / slowest work"
    )
    case.figure(
        "run_wall_over_slowest",
        [r["run_wall"] / r["slowest_work"] for r in rows],
        "x",
        "whole run / slowest work (info)",
    )
    rw = case.figure(
        "raw_hub_wall_s", [r["wall"] for r in raw], "s", "baseline: 3 hub.call in a bare trio nursery, wall"
    )
    rs = case.figure("raw_hub_sum_s", [r["sum"] for r in raw], "s", "baseline: 3 hub.call, summed call time")
    rsl = case.figure(
        "raw_hub_slowest_work_s", [r["slowest_work"] for r in raw], "s", "baseline: slowest server-side work"
    )
    case.figure(
        "raw_hub_wall_over_slowest",
        [r["wall"] / r["slowest_work"] for r in raw],
        "x",
        "baseline: bare hub wall / slowest work",
    )
    case.figure(
        "engine_over_raw_hub",
        [r["together_wall"] / b["wall"] for r, b in zip(rows, raw, strict=True)],
        "x",
        "engine together wall / bare hub wall (same run)",
    )
    case.check(
        "b: wall / slowest (servers up)",
        ratio,
        1.05,
        unit="x",
        what="together wall over the slowest server-side work",
        ratio=True,
    )
    case.bar("engine + MCP", wall_s=wall, sum_s=total, slowest_s=slow)
    case.bar("bare hub.call ×3", wall_s=rw, sum_s=rs, slowest_s=rsl)
    return case.done()
