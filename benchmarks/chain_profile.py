"""Where an MCP call's time goes in the engine: the chain of case k, peeled layer by layer.

``python -m benchmarks.chain_profile [--calls 200] [--rounds 7] [--profile]``

On one warm chain server per side (``benchmarks/chain_server.py``), in one
trio process, alternated round by round, 200 chained ``get_count`` calls each
way:

1. ``sdk``: the SDK's ``ClientSession`` over the SDK's own ``stdio_client``;
2. ``engine session``: the same ``ClientSession`` over the engine's own
   transport (``tools/stdio.py``: its pipe reader and writer, the call
   watch), taken from the hub the run API opened, ``Hub.call`` left out;
3. ``hub.call``: ``Hub.call`` on that hub (the call's checks and outcome
   rules, ``results.to_result`` with its depth check);
4. ``run``: ``Runs.start`` of a 200-step recipe on that hub (the scheduler,
   the journal, the store writes on SQLite).

Per layer: per step from the server's timestamps (first → last call / 199),
the median gap between two calls, and CPU time per call: this whole process
(every thread), the trio thread alone (``time.thread_time``), and the
server process (``/proc``, 10 ms ticks: a median over rounds of 200 calls). CPU time is
what the load of other processes on the machine changes least; each layer's
CPU minus the one below is what that layer adds per call.

``--py-spy LAYER``: the layer run over and over for ``--seconds`` in a child
process sampled by py-spy (``pip install py-spy``; ``--gil``: only the thread
holding the GIL is sampled, so what is left follows the CPU time of Python
code; C code that releases the GIL, SQLite's writes among it, is not seen), then
the samples as µs per call: each function's inclusive time (every sample
whose stack holds it) and the leaf functions' own time, the store thread's
``Journal._db_sync`` counted apart.

``--profile``: cProfile of layers 3 and 4 with the trio thread's CPU clock
as its timer (a thread that waits for the CPU does not count), printed as
µs per call for the engine's own functions, and the store thread's CPU per
flush (``Journal._db_sync``, wrapped here, not changed).
"""

from __future__ import annotations

import argparse
import cProfile
import json
import math
import os
import pstats
import statistics
import sys
import tempfile
import time
from contextlib import AsyncExitStack, contextmanager, nullcontext
from pathlib import Path

import trio

from .case_k import Ticks, median_gap, per_step, recipe, sdk_chain, sdk_session, server_config
from .common import ROOT, bench_runs, open_bench_store

LAYERS = ("sdk", "engine session", "hub.call", "run")
"""From the SDK alone to the whole engine, each layer on top of the one before."""


async def session_chain(session, n: int) -> None:
    await sdk_chain(session, n)


async def hub_chain(hub, n: int) -> None:
    after = 0
    for _ in range(n):
        result = await hub.call("chain", "get_count", {"after": after})
        after = result.value["n"]


def server_pids() -> dict[str, int]:
    """This process's chain servers by their log's name (``sdk.log``, ``engine.log``): their pids."""
    out = {}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1]) != os.getpid():
                continue
            if b"chain_server.py" not in (proc / "cmdline").read_bytes():
                continue
            env = dict(x.split(b"=", 1) for x in (proc / "environ").read_bytes().split(b"\0") if b"=" in x)
        except (OSError, ValueError, IndexError):
            continue
        log = env.get(b"CHAIN_LOG", b"").decode()
        out[Path(log).name] = int(proc.name)
    return out


def process_cpu(pid: int) -> float:
    """CPU seconds (user + system) of process ``pid`` so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class StoreThread:
    """``Journal._db_sync`` wrapped: the store thread's CPU per call of it, and how many."""

    def __init__(self) -> None:
        from vodou_engine.runtime.journal import Journal

        self.cpu = 0.0
        self.calls = 0
        self.nodes = 0
        original = Journal._db_sync
        outer = self

        def timed(self, batch, heard, fn, args, kwargs):
            t = time.thread_time()
            try:
                return original(self, batch, heard, fn, args, kwargs)
            finally:
                outer.cpu += time.thread_time() - t
                outer.calls += 1
                outer.nodes += len(batch)

        Journal._db_sync = timed  # type: ignore[method-assign]


@contextmanager
def _no_deadline():
    """Hub.call with no time limit: no cancel scope deadline registered per call."""
    from vodou_engine.tools.hub import Hub

    original = Hub.call_timeout
    Hub.call_timeout = lambda self, server: math.inf  # type: ignore[method-assign]
    try:
        yield
    finally:
        Hub.call_timeout = original  # type: ignore[method-assign]


@contextmanager
def _no_depth_check():
    """to_result without limits.check_value_depth on the structured content."""
    from vodou_engine.tools import results

    original = results.check_value_depth
    results.check_value_depth = lambda value: None
    try:
        yield
    finally:
        results.check_value_depth = original


@contextmanager
def _fast_flush():
    """The journal's batched node-state writes every 5 ms (its period until 0.25 s)."""
    from vodou_engine.runtime import journal

    original = journal.FLUSH_EVERY_S
    journal.FLUSH_EVERY_S = 0.005
    try:
        yield
    finally:
        journal.FLUSH_EVERY_S = original


VARIANTS = {
    "sdk": ("sdk", nullcontext),
    "engine session": ("engine session", nullcontext),
    "hub.call": ("hub.call", nullcontext),
    "hub.call without deadline": ("hub.call", _no_deadline),
    "hub.call without depth check": ("hub.call", _no_depth_check),
    "run": ("run", nullcontext),
    "run without deadline": ("run", _no_deadline),
    "run flushing every 5 ms": ("run", _fast_flush),
    "run of 1 step": ("run1", nullcontext),
}
"""What-ifs: a layer with one of its parts patched out in this process (the engine's source is not changed)."""


def measure(calls: int, rounds: int, profile: bool, store_url: str | None, variants: list[str]) -> dict:
    out: dict = {v: [] for v in variants}
    out["calls"] = calls
    profiles: dict[str, cProfile.Profile] = {}
    store_thread = StoreThread()
    with tempfile.TemporaryDirectory(prefix="vodou-chain-profile-") as tmp_name:
        tmp = Path(tmp_name)
        sdk_log, engine_log = tmp / "sdk.log", tmp / "engine.log"
        store = open_bench_store(tmp / "runs.db") if store_url is None else store_url
        runs = bench_runs(store, {"chain": server_config(engine_log)}) if store_url is None else None
        if runs is None:
            from vodou_engine.policy import Policy
            from vodou_engine.runs import Runs
            from vodou_engine.servers import ServerSet

            runs = Runs(
                store=store_url,
                servers=ServerSet({"chain": server_config(engine_log)}, "bench"),
                policy=Policy(),
                workers=False,
            )
        sdk_ticks, engine_ticks = Ticks(sdk_log), Ticks(engine_log)

        async def main() -> None:
            async with AsyncExitStack() as stack:
                session = await sdk_session(stack, sdk_log)
                async with (
                    runs.prepare("chain.recipe", text=recipe(calls)) as ready,
                    runs.prepare("one.recipe", text=recipe(1), hub=ready.hub) as ready1,
                ):
                    hub = ready.hub
                    engine_session = hub._servers["chain"].session  # the SDK session on the engine's transport

                    async def one(layer: str) -> None:
                        if layer == "sdk":
                            await session_chain(session, calls)
                        elif layer == "engine session":
                            await session_chain(engine_session, calls)
                        elif layer == "hub.call":
                            await hub_chain(hub, calls)
                        else:
                            report = await runs.start(ready if layer == "run" else ready1, actor="bench")
                            assert report.state == "succeeded", report.state

                    for v in variants:  # warm every path once
                        layer, patch = VARIANTS[v]
                        with patch():
                            await one(layer)
                    sdk_ticks.new(), engine_ticks.new()
                    servers = server_pids()
                    for _ in range(rounds):
                        for v in variants:
                            layer, patch = VARIANTS[v]
                            store_thread.cpu = store_thread.calls = store_thread.nodes = 0
                            server = servers.get("sdk.log" if layer == "sdk" else "engine.log")
                            with patch():
                                s0 = process_cpu(server) if server else math.nan
                                p0, t0 = time.process_time(), time.thread_time()
                                await one(layer)
                                p1, t1 = time.process_time(), time.thread_time()
                                s1 = process_cpu(server) if server else math.nan
                            ticks = (sdk_ticks if layer == "sdk" else engine_ticks).new()
                            if layer == "run1":  # one call: its figures are per run, not per call
                                out[v].append(
                                    {
                                        "per_step": math.nan,
                                        "gap": math.nan,
                                        "cpu": p1 - p0,
                                        "trio_cpu": t1 - t0,
                                        "store_cpu": store_thread.cpu,
                                        "flushes": store_thread.calls,
                                        "nodes": store_thread.nodes,
                                        "server_cpu": s1 - s0,
                                    }
                                )
                                continue
                            out[v].append({
                                "per_step": per_step(ticks, calls), "gap": median_gap(ticks), "cpu": (p1 - p0) / calls, "trio_cpu": (t1 - t0) / calls,
                                "store_cpu": store_thread.cpu / calls, "flushes": store_thread.calls, "nodes": store_thread.nodes, "server_cpu": (s1 - s0) / calls,
                            })  # fmt: skip
                    if profile:
                        for layer in [x for x in ("sdk", "hub.call", "run") if x in variants]:
                            prof = cProfile.Profile(time.thread_time)
                            for _ in range(3):
                                prof.enable()
                                try:
                                    await one(layer)
                                finally:
                                    prof.disable()
                            profiles[layer] = prof

        trio.run(main)
        if store_url is None:
            store.close()
        runs.close()
    cpu = {
        layer: statistics.median(r["trio_cpu"] for r in out[layer]) if out.get(layer) else None for layer in profiles
    }
    out["profiles"] = {k: per_call_table(p, 3 * calls, cpu[k]) for k, p in profiles.items()}
    return out


WATCHED = (
    (
        "vodou_engine/runtime/scheduler.py",
        "_run_one",
        "Scheduler._run_one: one step, whole (a chain of reads runs in one task)",
    ),
    ("vodou_engine/runtime/scheduler.py", "_read", "  Scheduler._read (render + Tools.read)"),
    ("vodou_engine/compiler/template.py", "render", "    template.render: the step's arguments"),
    ("vodou_engine/runtime/calls.py", "read", "    Tools.read"),
    ("vodou_engine/tools/hub.py", "call", "      Hub.call"),
    ("mcp/client/session.py", "call_tool", "        ClientSession.call_tool (the SDK)"),
    ("mcp/client/session.py", "validate_tool_result", "          its output-schema check (jsonschema)"),
    ("vodou_engine/tools/results.py", "to_result", "        results.to_result"),
    ("vodou_engine/limits.py", "check_value_depth", "          limits.check_value_depth"),
    ("vodou_engine/tools/wire.py", "finish", "        Wire.finish"),
    ("vodou_engine/runtime/journal.py", "set", "  Journal.set (RUNNING, SUCCEEDED)"),
    (
        "vodou_engine/runtime/scheduler.py",
        "_after_in_task",
        "  Scheduler._after_in_task → _try_start (the next read handed to this task)",
    ),
    ("vodou_engine/runtime/scheduler.py", "_try_start", "    Scheduler._try_start"),
    ("trio/_core/_run.py", "start_soon", "      Nursery.start_soon (a task spawned)"),
    ("vodou_engine/runtime/journal.py", "flusher", "Journal.flusher: batched node writes (the trio side)"),
    ("vodou_engine/runtime/journal.py", "db", "  Journal.db: the hop to the store thread"),
    ("vodou_engine/runtime/journal.py", "_take_dirty", "    Journal._take_dirty: NodeRecords, outputs encoded"),
    ("vodou_engine/tools/stdio.py", "read_pipe", "transport: read_pipe (reply lines parsed)"),
    ("vodou_engine/tools/stdio.py", "write_pipe", "transport: write_pipe (requests serialised)"),
    ("vodou_engine/tools/wire.py", "send", "transport: WatchedWrites.send"),
    ("vodou_engine/tools/wire.py", "request_key", "transport: request_key (coerce_request_id)"),
    ("mcp/client/stdio.py", "stdout_reader", "the SDK's stdio_client: stdout_reader"),
    ("mcp/client/stdio.py", "stdin_writer", "the SDK's stdio_client: stdin_writer"),
    ("trio/_core/_run.py", "unrolled_run", "trio's run loop, its own time (not inside any task)", "own"),
    ("trio/_core/_io_epoll.py", "get_events", "trio's run loop: epoll"),
    ("trio/_core/_run.py", "expire", "trio's run loop: deadlines expired (sleeps, timeouts)"),
)
"""Functions whose inclusive time per call the cProfile tables show, in call-tree order."""


def per_call_table(prof: cProfile.Profile, n: int, cpu_per_call: float | None = None) -> str:
    """Inclusive CPU time on the trio thread per call of the chain, for the functions in WATCHED.

    cProfile's own cost inflates every figure; ``cpu_per_call`` (measured without the profiler)
    scales them back, as an estimate (the inflation is larger where calls are many and short)."""
    stats = pstats.Stats(prof).stats  # type: ignore[attr-defined]
    total = sum(tt for (_f, _l, _n), (_cc, _nc, tt, _ct, _c) in stats.items())
    scale = (cpu_per_call * n / total) if cpu_per_call else 1.0
    lines = [
        f"cProfile on the trio thread (its CPU clock): {total / n * 1e6:.0f} µs per call profiled"
        + (
            f", {cpu_per_call * 1e6:.0f} µs measured without the profiler: figures scaled by {scale:.2f}"
            if cpu_per_call
            else ""
        ),
        f"{'µs/call':>8}  function (inclusive: its time and everything it called)",
    ]
    for suffix, name, label, *how in WATCHED:
        ct = sum(v[2] if how else v[3] for (f, _l, fn), v in stats.items() if fn == name and f.endswith(suffix))
        if ct:
            lines.append(f"{ct / n * 1e6 * scale:8.0f}  {label}")
    return "\n".join(lines)


def summary(out: dict, variants: list[str]) -> str:
    med = lambda v, key: statistics.median(r[key] for r in out[v])  # noqa: E731
    lines = [
        f"{'variant':<26} {'per step':>9} {'median gap':>11} {'CPU/call':>9} {'trio thread':>12} {'store thread':>13} {'flushes/run':>12} {'÷ sdk per step':>15} {'÷ sdk CPU':>10} {'server CPU':>11}"
    ]
    base, base_cpu = med(variants[0], "per_step"), med(variants[0], "cpu")
    for v in variants:
        lines.append(
            f"{v:<26} {med(v, 'per_step') * 1e6:7.0f}µs {med(v, 'gap') * 1e6:9.0f}µs {med(v, 'cpu') * 1e6:7.0f}µs {med(v, 'trio_cpu') * 1e6:10.0f}µs "
            f"{med(v, 'store_cpu') * 1e6:11.0f}µs {med(v, 'flushes'):12.0f} {med(v, 'per_step') / base:14.3f}× {med(v, 'cpu') / base_cpu:9.3f}× {med(v, 'server_cpu') * 1e6:9.0f}µs"
        )
    if "run" in out and "run of 1 step" in out:
        n = out["calls"]
        rows = list(zip(out["run"], out["run of 1 step"], strict=True))
        marginal = lambda key: statistics.median((a[key] * n - b[key]) / (n - 1) for a, b in rows)  # noqa: E731
        lines.append(
            "(the run of 1 step: its figures are per run, not per call: what a run costs once, whatever its length)"
        )
        lines.append(
            f"{'run, marginal per step':<26} {'':>9} {'':>11} {marginal('cpu') * 1e6:7.0f}µs {marginal('trio_cpu') * 1e6:10.0f}µs {marginal('store_cpu') * 1e6:11.0f}µs "
            f"{'':>12} {'':>15} {marginal('cpu') / base_cpu:9.3f}×   ((200-step run − 1-step run) / 199)"
        )
    return "\n".join(lines)


async def _spin_loop(one, stop: trio.Event, ends: list[float]) -> None:
    """The layer, over and over until ``stop``; when each chain ended (time.monotonic)."""
    while not stop.is_set():
        await one()
        ends.append(time.monotonic())


def spin(layer: str, calls: int) -> int:
    """``--spin LAYER``: warm the layer up, say ``ready``, run it over and over until stdin
    closes; then print when each chain ended (``time.monotonic``, the same clock in every process)."""
    with tempfile.TemporaryDirectory(prefix="vodou-chain-spin-") as tmp_name:
        tmp = Path(tmp_name)
        store = open_bench_store(tmp / "runs.db")
        runs = bench_runs(store, {"chain": server_config(tmp / "engine.log")})
        ends: list[float] = []

        async def main() -> None:
            async with AsyncExitStack() as stack:
                session = await sdk_session(stack, tmp / "sdk.log") if layer == "sdk" else None
                async with runs.prepare("chain.recipe", text=recipe(calls)) as ready:

                    async def one() -> None:
                        if layer == "sdk":
                            await session_chain(session, calls)
                        elif layer == "hub.call":
                            await hub_chain(ready.hub, calls)
                        else:
                            await runs.start(ready, actor="bench")

                    await one()
                    stop = trio.Event()

                    async def watch_stdin() -> None:
                        await trio.to_thread.run_sync(sys.stdin.read)
                        stop.set()

                    print("ready", flush=True)
                    async with trio.open_nursery() as n:
                        n.start_soon(watch_stdin)
                        await _spin_loop(one, stop, ends)

        trio.run(main)
        store.close()
    print(json.dumps({"layer": layer, "calls_per_chain": calls, "ends": ends}), flush=True)
    return 0


def py_spy(layer: str, seconds: float, calls: int, rate: int, top: int) -> str:
    """Sample ``--spin LAYER`` with py-spy for ``seconds`` once it is warm; the samples as µs per call."""
    import shutil
    import subprocess
    from collections import Counter

    exe = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    with tempfile.TemporaryDirectory(prefix="vodou-chain-spy-") as tmp:
        raw = Path(tmp) / "stacks.txt"
        child = subprocess.Popen(
            [sys.executable, "-m", "benchmarks.chain_profile", "--spin", layer, "--calls", str(calls)],
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert child.stdout is not None and child.stdin is not None
            if child.stdout.readline().strip() != "ready":
                raise RuntimeError("the spinning process did not start")
            t0 = time.monotonic()
            proc = subprocess.run(
                [
                    exe,
                    "record",
                    "--gil",
                    "-r",
                    str(rate),
                    "-f",
                    "raw",
                    "--threads",
                    "-d",
                    str(int(seconds)),
                    "-o",
                    str(raw),
                    "-p",
                    str(child.pid),
                ],
                capture_output=True,
                text=True,
            )
            t1 = time.monotonic()
            child.stdin.close()
            report = json.loads(child.stdout.read().strip().splitlines()[-1])
        finally:
            child.wait(60)
        if proc.returncode != 0:
            raise RuntimeError(proc.stderr[-2000:])
        ends = [e for e in report["ends"] if t0 <= e <= t1]
        n = len(ends) * calls  # chains that ended while sampled (one begun before t0 makes up for one after t1)
        inclusive: Counter = Counter()
        own: Counter = Counter()
        threads: Counter = Counter()
        store = 0
        for line in raw.read_text().splitlines():
            stack, _, count = line.rpartition(" ")
            c = int(count)
            frames = stack.split(";")
            thread = frames[0] if frames and frames[0].startswith("thread") else "?"
            names = []
            for f in frames[1:] if thread != "?" else frames:
                fn, _, where = f.rpartition(" (")
                path = where.rstrip(")").rsplit(":", 1)[0].replace(sys.prefix, "<venv>").replace(str(ROOT) + "/", "")
                path = path.split("site-packages/")[-1]
                names.append(f"{fn or f} ({path})")
            if any(x.startswith(("_db_sync ", "StoreThread")) for x in names):
                store += c
                thread = "store"
            threads[thread] += c
            for x in set(names):
                inclusive[x] += c
            if names:
                own[names[-1]] += c
    us = lambda samples: samples / rate / n * 1e6 if n else float("nan")  # noqa: E731
    lines = [
        f"py-spy, layer {layer!r}: {n} calls in {t1 - t0:.1f} s sampled, {rate} samples/s (the thread holding the GIL only)"
    ]
    lines.append("per thread, µs per call: " + ", ".join(f"{k} {us(v):.0f}" for k, v in threads.most_common()))
    lines.append("inclusive (every sample whose stack holds the function), µs per call:")
    for name, c in inclusive.most_common(top):
        lines.append(f"  {us(c):8.1f}  {name}")
    lines.append("own time (leaf frames), µs per call:")
    for name, c in own.most_common(top):
        lines.append(f"  {us(c):8.1f}  {name}")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.chain_profile", description=__doc__.split("\n\n")[0])
    p.add_argument("--calls", type=int, default=200)
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument(
        "--profile", action="store_true", help="cProfile the hub.call and run layers (trio thread CPU clock)"
    )
    p.add_argument("--store", default=None, help="a postgresql:// URL to run the chain on instead of a SQLite file")
    p.add_argument(
        "--variants",
        default=None,
        help="comma-separated, the first is the base (default: all: " + ", ".join(VARIANTS) + ")",
    )
    p.add_argument("--json", type=Path, default=None, help="write every sample here")
    p.add_argument(
        "--py-spy",
        dest="py_spy",
        choices=LAYERS,
        default=None,
        help="sample this layer with py-spy instead (sdk, hub.call or run)",
    )
    p.add_argument("--seconds", type=float, default=20.0, help="how long --py-spy samples")
    p.add_argument("--rate", type=int, default=500, help="py-spy samples per second")
    p.add_argument("--top", type=int, default=45, help="rows per py-spy table")
    p.add_argument("--spin", choices=LAYERS, default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.spin:
        return spin(args.spin, args.calls)
    if args.py_spy:
        print(py_spy(args.py_spy, args.seconds, args.calls, args.rate, args.top))
        return 0
    variants = [v.strip() for v in args.variants.split(",")] if args.variants else list(VARIANTS)
    unknown = [v for v in variants if v not in VARIANTS]
    if unknown:
        p.error(f"unknown variant(s) {unknown}; known: {', '.join(VARIANTS)}")
    out = measure(args.calls, args.rounds, args.profile, args.store, variants)
    print(
        f"{args.rounds} rounds of {args.calls} chained calls per variant, alternated; medians; load average {os.getloadavg()[0]:.2f} after"
    )
    print(summary(out, variants))
    for layer, text in out.pop("profiles").items():
        print(f"\n--- {layer}: cProfile, trio thread CPU, per call ---\n{text}")
    if args.json:
        args.json.write_text(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
