"""k. A chain of MCP calls through the engine against the official SDK's own chain.

Both chains call ``get_count`` on the same stdio server program
(``benchmarks/chain_server.py``, built on the official SDK), 200 times in a
row, each call's argument taken from the previous call's answer:

* **the SDK's chain**: a ``ClientSession`` over the SDK's ``stdio_client``,
  ``call_tool("get_count", {"after": n})`` 200 times, ``n`` read from the
  previous result's structured content (the session lists the tools once
  first, so its output-schema check runs on every call, as the engine's
  does);
* **the engine's chain**: a recipe of 200 read steps ``sN: chain.get_count
  {"after": "{sN-1.n}"}``, started with the run API (``Runs.start`` of a
  plan prepared on a warm server: servers bound to the run, every step's
  states and output written to a SQLite store).

Both run on trio in this process, alternated, each on a server process of
its own started once (a warm server, as a long-lived process keeps it).
Per step is measured on the server's side: the time between the first and
the last call reaching the tool (its own ``time.time()``, written to a log
per call), divided by 199. That leaves out what only happens once per run
(the run stored, the server's session bound) and counts everything a client
does between two calls. The asyncio SDK chain is measured too, for
information (the SDK's default backend; the engine is trio).

Target: the engine's chain ≤ 1.10× the SDK's (median of the per-run ratios).
"""

from __future__ import annotations

import itertools
import json
import os
import statistics
import sys
import time
from pathlib import Path

from .common import ROOT, Case, Config, TempDir, bench_runs, median, open_bench_store, stats_text

N = 200
LIMIT = 1.10
SERVER = str(ROOT / "benchmarks" / "chain_server.py")


def recipe(n: int) -> str:
    return (
        f'recipe "mcp chain {n}"\n'
        + 's0: chain.get_count {"after": 0}\n'
        + "".join(f's{i}: chain.get_count {{"after": "{{s{i - 1}.n}}"}}\n' for i in range(1, n))
    )


def server_config(log: Path):
    from vodou_engine.servers import ServerConfig

    return ServerConfig(command=sys.executable, args=[SERVER], env={"CHAIN_LOG": str(log)})


class Ticks:
    """The server's log of one server process: the timestamps of the calls since the last look."""

    def __init__(self, path: Path):
        self.path = path
        self.seen = 0

    def new(self) -> list[float]:
        if not self.path.exists():
            return []
        lines = self.path.read_text().splitlines()
        fresh, self.seen = lines[self.seen :], len(lines)
        return [json.loads(x)["at"] for x in fresh]


def median_gap(ticks: list[float]) -> float:
    return statistics.median(b - a for a, b in itertools.pairwise(ticks))


def per_step(ticks: list[float], n: int = N) -> float:
    if len(ticks) != n:
        raise RuntimeError(f"the server saw {len(ticks)} calls, not {n}")
    return (ticks[-1] - ticks[0]) / (n - 1)


async def sdk_session(stack, log: Path):
    """An initialized SDK session on a chain server of its own, its tools listed."""
    from mcp.client.session import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    params = StdioServerParameters(command=sys.executable, args=[SERVER], env={"CHAIN_LOG": str(log)})
    read, write = await stack.enter_async_context(stdio_client(params))
    session = await stack.enter_async_context(ClientSession(read, write))
    await session.initialize()
    await session.list_tools()
    return session


async def sdk_chain(session, n: int = N) -> None:
    after = 0
    for _ in range(n):
        result = await session.call_tool("get_count", {"after": after})
        if result.is_error:
            raise RuntimeError(f"get_count failed: {result.content}")
        after = result.structured_content["n"]


def asyncio_sdk_chain(log: Path, runs: int) -> list[float]:
    """The SDK's chain on asyncio (its default backend): per step, one figure per run."""
    from contextlib import AsyncExitStack

    import anyio

    ticks = Ticks(log)

    async def main() -> list[float]:
        out = []
        async with AsyncExitStack() as stack:
            session = await sdk_session(stack, log)
            await sdk_chain(session, 10)
            ticks.new()
            for _ in range(runs):
                await sdk_chain(session)
                out.append(per_step(ticks.new()))
        return out

    return anyio.run(main, backend="asyncio")


def run(cfg: Config) -> Case:
    from contextlib import AsyncExitStack

    import trio

    case = Case(
        "k",
        f"chain of {N} MCP calls: the engine against the official SDK's ClientSession, same server, server-side timestamps",
    )
    rows: list[dict] = []
    pairs = 2 * cfg.runs + 1
    with TempDir("k") as tmp:
        sdk_log, engine_log = tmp / "sdk.log", tmp / "engine.log"
        store = open_bench_store(tmp / "runs.db")
        runs = bench_runs(store, {"chain": server_config(engine_log)})
        sdk_ticks, engine_ticks = Ticks(sdk_log), Ticks(engine_log)
        profile: dict[str, str] = {}

        async def main() -> None:
            async with AsyncExitStack() as stack:
                session = await sdk_session(stack, sdk_log)
                async with runs.prepare("chain.recipe", text=recipe(N)) as ready:
                    # warm both sides: the first engine run pays the store's first writes
                    await sdk_chain(session)
                    report = await runs.start(ready, actor="bench")
                    assert report.state == "succeeded", report.state
                    sdk_ticks.new(), engine_ticks.new()
                    for _ in range(pairs):
                        row = {}
                        for side in ("sdk", "engine"):
                            w0, c0 = time.perf_counter(), time.process_time()
                            if side == "sdk":
                                await sdk_chain(session)
                            else:
                                report = await runs.start(ready, actor="bench")
                                assert report.state == "succeeded", report.state
                            row[f"{side}_wall"], row[f"{side}_cpu"] = time.perf_counter() - w0, time.process_time() - c0
                            ticks = (sdk_ticks if side == "sdk" else engine_ticks).new()
                            row[side], row[f"{side}_gap"] = per_step(ticks), median_gap(ticks)
                        rows.append(row)
                        cfg.log(
                            f"k: per step: engine {row['engine'] * 1e6:.0f} µs, SDK {row['sdk'] * 1e6:.0f} µs, ratio {row['engine'] / row['sdk']:.3f}; "
                            f"median gap ratio {row['engine_gap'] / row['sdk_gap']:.3f}; CPU per call engine {row['engine_cpu'] / N * 1e6:.0f} µs, SDK {row['sdk_cpu'] / N * 1e6:.0f} µs"
                        )
                    if median(r["engine"] / r["sdk"] for r in rows) > LIMIT:
                        profile["text"] = await _profile_engine(runs, ready)

        trio.run(main)
        asyncio_rows = asyncio_sdk_chain(tmp / "sdk-asyncio.log", cfg.runs)
        store.close()
    col = lambda k: [r[k] for r in rows]  # noqa: E731
    sdk = case.figure(
        "sdk_per_step_s",
        col("sdk"),
        "s",
        f"the SDK's ClientSession chain (trio), per step: server-side first → last call / {N - 1}",
    )
    engine = case.figure(
        "engine_per_step_s",
        col("engine"),
        "s",
        "the engine's chain (Runs.start, SQLite store), per step, measured the same way",
    )
    case.figure(
        "engine_minus_sdk_per_step_s",
        [r["engine"] - r["sdk"] for r in rows],
        "s",
        "what the engine adds per call (engine − SDK, per pair)",
    )
    ratio = case.figure(
        "engine_over_sdk",
        [r["engine"] / r["sdk"] for r in rows],
        "x",
        f"engine per step ÷ SDK per step (per pair, {pairs} pairs alternated)",
    )
    case.figure(
        "sdk_median_gap_s",
        col("sdk_gap"),
        "s",
        "the SDK's chain: median time between two calls reaching the tool (robust to a stall)",
    )
    case.figure("engine_median_gap_s", col("engine_gap"), "s", "the engine's chain: the same")
    case.figure(
        "engine_over_sdk_median_gap",
        [r["engine_gap"] / r["sdk_gap"] for r in rows],
        "x",
        "engine ÷ SDK, median gap between calls (per pair)",
    )
    sc = case.figure(
        "sdk_cpu_per_call_s",
        [r["sdk_cpu"] / N for r in rows],
        "s",
        "CPU time of this process per call, the SDK's chain (all threads; the server's CPU is not in it)",
    )
    ec = case.figure(
        "engine_cpu_per_call_s",
        [r["engine_cpu"] / N for r in rows],
        "s",
        "CPU time of this process per call, the engine's chain (store writes included)",
    )
    case.figure(
        "engine_over_sdk_cpu",
        [r["engine_cpu"] / r["sdk_cpu"] for r in rows],
        "x",
        "engine ÷ SDK, client CPU per call (per pair; what the load on the machine does not change)",
    )
    case.figure("sdk_wall_s", col("sdk_wall"), "s", f"the SDK's chain of {N}, client-side wall")
    case.figure(
        "engine_wall_s",
        col("engine_wall"),
        "s",
        f"the engine's run of {N} steps, Runs.start wall (the run stored and ended included)",
    )
    aio = case.figure(
        "sdk_asyncio_per_step_s",
        asyncio_rows,
        "s",
        "the SDK's chain on asyncio (its default backend), per step (info: a server process of its own, measured after)",
    )
    case.figure(
        "engine_over_sdk_asyncio", engine / aio, "x", "engine per step ÷ the asyncio SDK chain's per step (info)"
    )
    case.check(
        f"k: chain of {N} MCP calls, engine / SDK",
        ratio,
        LIMIT,
        unit="x",
        what="per step from the server's timestamps, same run, median of per-pair ratios",
        ratio=True,
    )
    case.bar(f"engine, {N} MCP calls", wall_s=engine * (N - 1), sum_s=None, slowest_s=None)
    case.bar(f"SDK ClientSession, {N} MCP calls", wall_s=sdk * (N - 1), sum_s=None, slowest_s=None)
    case.note(
        f"CPU per call in this process: engine {ec * 1e6:.0f} µs, SDK {sc * 1e6:.0f} µs; load average at the end {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores."
    )
    if profile:
        case.profiles[f"one {N}-step engine run on the warm server (cProfile of the trio thread, by own time)"] = (
            profile["text"]
        )
    return case.done()


async def _profile_engine(runs, ready) -> str:
    import cProfile

    prof = cProfile.Profile()
    prof.enable()
    try:
        await runs.start(ready, actor="bench")
    finally:
        prof.disable()
    return stats_text(prof, 16)


if __name__ == "__main__":  # pragma: no cover - `python -m benchmarks.case_k [--quick]`
    c = run(
        Config(
            runs=3 if "--quick" in sys.argv else 5, quick="--quick" in sys.argv, log=lambda m: print(m, file=sys.stderr)
        )
    )
    print(json.dumps(c.to_json(), indent=2, default=str))
