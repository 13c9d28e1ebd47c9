"""A chain of MCP tool calls: the hub against the SDK's own client, on one stdio server.

What each call costs the engine beyond the SDK's floor (its transport watching
the bytes, bounding each message, masking ``${VAR}`` values), measured on
``tests/rogue_server.py`` (standard library only, so the server's own cost is
small and the same for both clients): ``N`` calls of ``get_status`` one after
another, per call, for

* a small reply (about 200 bytes) and a 64 KiB one (``huge_result:65536``);
* a server given no value from the environment, and one given a secret
  (``API_TOKEN: ${CHAIN_BENCH_SECRET}``), whose every message is then searched;
* ``hub.call`` and the SDK's ``stdio_client`` + ``ClientSession.call_tool``.

The figure is this process's CPU time per call (``time.process_time``: the
client's own work, which a busy machine distorts far less than wall time),
the median of the rounds' means; rounds alternate the two clients so load
hits both alike. Wall time per call is shown beside it. Run it on its own::

    python -m benchmarks.chain_calls [--calls 200] [--rounds 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from contextlib import AsyncExitStack
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ROGUE = str(ROOT / "tests" / "rogue_server.py")
SECRET_VAR = "CHAIN_BENCH_SECRET"


def _env(mode: str, secret: bool) -> dict[str, str]:
    env = {"ROGUE_MODES": f"get_status={mode}"}
    if secret:
        env["API_TOKEN"] = f"${{{SECRET_VAR}}}"
    return env


async def _sdk_calls(mode: str, secret: bool, calls: int) -> tuple[float, float]:
    from mcp.client.session import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    env = {k: v.replace(f"${{{SECRET_VAR}}}", os.environ[SECRET_VAR]) for k, v in _env(mode, secret).items()}
    async with AsyncExitStack() as stack:
        params = StdioServerParameters(command=sys.executable, args=["-I", "-S", ROGUE], env=env)
        read, write = await stack.enter_async_context(stdio_client(params))
        session = await stack.enter_async_context(ClientSession(read, write))
        await session.initialize()
        await session.call_tool("get_status", {})  # warm: the output schema's validator
        t0, c0 = time.perf_counter(), time.process_time()
        for _ in range(calls):
            await session.call_tool("get_status", {})
        return (time.process_time() - c0) / calls, (time.perf_counter() - t0) / calls


async def _hub_calls(mode: str, secret: bool, calls: int) -> tuple[float, float]:
    from vodou_engine.servers import ServerConfig
    from vodou_engine.tools.hub import open_hub

    config = ServerConfig(command=sys.executable, args=["-I", "-S", ROGUE], env=_env(mode, secret))
    async with open_hub({"ops": config}, ["ops"]) as hub:
        await hub.call("ops", "get_status", {})
        t0, c0 = time.perf_counter(), time.process_time()
        for _ in range(calls):
            await hub.call("ops", "get_status", {})
        return (time.process_time() - c0) / calls, (time.perf_counter() - t0) / calls


def main(argv: list[str] | None = None) -> None:
    import trio

    p = argparse.ArgumentParser(prog="python -m benchmarks.chain_calls", description=__doc__.splitlines()[0])
    p.add_argument("--calls", type=int, default=200, help="calls per chain (default 200)")
    p.add_argument("--rounds", type=int, default=5, help="chains per client and case (default 5)")
    args = p.parse_args(argv)
    os.environ.setdefault(SECRET_VAR, "chain-bench-" + "s3cr3t" * 4)
    print(f"{args.calls} calls per chain, median of {args.rounds} chains; per call, CPU (wall):")
    print(f"{'reply':<8} {'secret':<7} {'SDK':>16} {'hub':>16} {'hub - SDK':>10}")
    for mode, label in (("ok", "small"), ("huge_result:65536", "64 KiB")):
        for secret in (False, True):
            sdk, hub = [], []
            for _ in range(args.rounds):
                sdk.append(trio.run(_sdk_calls, mode, secret, args.calls))
                hub.append(trio.run(_hub_calls, mode, secret, args.calls))
            s, h = (statistics.median(c for c, _ in runs) * 1e6 for runs in (sdk, hub))
            sw, hw = (statistics.median(w for _, w in runs) * 1e6 for runs in (sdk, hub))
            print(
                f"{label:<8} {'yes' if secret else 'no':<7} {s:>6.0f}µs ({sw:>5.0f}) {h:>6.0f}µs ({hw:>5.0f}) {h - s:>+8.0f}µs",
                flush=True,
            )


if __name__ == "__main__":
    main()
