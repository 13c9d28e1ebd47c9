"""agents. `recipe mcp` as an agent sees it: how soon it answers, how fast a check round-trips.

Both figures are taken over real stdio against a real
``python -m vodou_engine.agents.mcp_server`` process, in one run, beside a
floor measured the same way in the same run:

* initialize: from starting the process to the answer to ``initialize``,
  against a bare ``MCPServer`` of the same SDK with no tools (what any server
  on this SDK costs). Target: ours ≤ the floor + 100 ms (best of the runs,
  each side).
* check_recipe: 25 round trips of ``check_recipe`` on the morning briefing
  once the server is up (the catalogue already listed). Target: median ≤ 20 ms.

``python -m benchmarks.agents_bench [--quick]`` prints one JSON object.
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from contextlib import AsyncExitStack
from pathlib import Path

from .common import Case, Config

ROOT = Path(__file__).resolve().parent.parent
MORNING = (ROOT / "recipes" / "morning-briefing.recipe").read_text()
BARE = "from mcp.server.mcpserver import MCPServer\nMCPServer('bare').run()\n"


async def _session(stack: AsyncExitStack, argv: list[str], cwd: str, env: dict) -> tuple[object, float]:
    """An initialized client session with ``argv`` over stdio; seconds from start to initialize answered."""
    from mcp.client.session import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    t0 = time.perf_counter()
    read, write = await stack.enter_async_context(
        stdio_client(StdioServerParameters(command=argv[0], args=argv[1:], env=env, cwd=cwd))
    )
    session = await stack.enter_async_context(ClientSession(read, write))
    await session.initialize()
    return session, time.perf_counter() - t0


def run(cfg: Config) -> Case:
    import trio

    case = Case("m", "recipe mcp: initialize against the SDK's floor, check_recipe round trip")
    starts = 2 if cfg.quick else 3
    with tempfile.TemporaryDirectory(prefix="vodou-agents-bench-") as tmp:
        env = {
            **os.environ,
            "HOME": tmp,
            "VODOU_STORE": str(Path(tmp) / "runs.db"),
            "VODOU_DEMO_DB": str(Path(tmp) / "demo.db"),
        }
        ours_argv = [sys.executable, "-m", "vodou_engine.agents.mcp_server"]
        bare_argv = [sys.executable, "-c", BARE]

        async def main() -> tuple[list[float], list[float], list[float]]:
            bare, ours, trips = [], [], []
            for _ in range(starts):
                async with AsyncExitStack() as stack:
                    bare.append((await _session(stack, bare_argv, tmp, env))[1])
                async with AsyncExitStack() as stack:
                    ours.append((await _session(stack, ours_argv, tmp, env))[1])
            async with AsyncExitStack() as stack:
                session, _ = await _session(stack, ours_argv, tmp, env)
                await session.call_tool("check_recipe", {"recipe": MORNING})  # the catalogue, listed once
                for _ in range(25):
                    t0 = time.perf_counter()
                    result = await session.call_tool("check_recipe", {"recipe": MORNING})
                    trips.append(time.perf_counter() - t0)
                    if result.is_error:
                        raise RuntimeError(f"check_recipe failed: {result.content}")
            return bare, ours, trips

        bare, ours, trips = trio.run(main)
    case.figure("initialize_bare_s", bare, "s", "bare MCPServer: process start → initialize answered")
    case.figure("initialize_ours_s", ours, "s", "recipe mcp: process start → initialize answered")
    case.figure("check_recipe_ms", [t * 1000 for t in trips], "ms", "check_recipe round trip, warm server")
    case.check(
        "agents: initialize within the SDK floor + 100 ms",
        min(ours) - min(bare),
        0.100,
        unit="s",
        what="best of each, ours - bare",
    )
    case.check(
        "agents: check_recipe round trip median", statistics.median(trips) * 1000, 20.0, unit="ms", what="median of 25"
    )
    return case.done()


if __name__ == "__main__":  # pragma: no cover - `python -m benchmarks.agents_bench [--quick]`
    import json

    c = run(Config(quick="--quick" in sys.argv, log=lambda m: print(m, file=sys.stderr)))
    print(json.dumps(c.to_json(), indent=2, default=str))
