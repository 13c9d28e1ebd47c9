"""Instructions per MCP call, counted by valgrind's callgrind: the chain of case k, layer by layer.

``python -m benchmarks.chain_instructions [--calls 200] [--layers sdk,hub.call,run]``

Time on a shared machine moves with its load (CPU time too: caches, frequency); the count
of instructions this process executes barely does. Each layer of ``chain_profile``
(``sdk``, ``engine session``, ``hub.call``, ``run``) runs in a child process under
``valgrind --tool=callgrind --instr-atstart=no``: the child starts its chain server,
warms the layer up (two chains), switches counting on (``callgrind_control -i on``),
runs one chain of ``--calls`` calls, and switches it off. The figure is every thread of
that client process, per call, and its ratio to the SDK's chain; the servers are
processes of their own and not counted. Two runs of a layer agree within about 1 %
(``run`` within about 3 %: see below).

Under valgrind the client runs some fifty times slower, so the run's timed writes of
node states (every 0.25 s, ``runtime/journal.py``) come far more often, each with fewer
nodes, than in a real run: their fixed cost per write weighs more here than it does.
How often they come also follows the machine's load (a slower run, more writes), so
the ``run`` figure moves with it by several percent (a tree whose step path counts 2 %
fewer came out 5 % higher at a load of 20 than the tree before on a quiet machine).
``--no-flush`` leaves the timed writes out (the run's
states are still written, all at its end): that figure repeats within 0.1 % whatever the
load, and it is the one to compare two trees' step path by.
Needs ``valgrind`` (with ``callgrind_control``) on the PATH.
"""

from __future__ import annotations

import argparse
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
from contextlib import AsyncExitStack
from pathlib import Path

import trio

from .case_k import recipe, sdk_chain, sdk_session, server_config
from .chain_profile import LAYERS, hub_chain
from .common import ROOT, bench_runs, open_bench_store

_COLLECTED = re.compile(r"Collected\s*:\s*(\d+)")


def _counting(on: bool) -> None:
    subprocess.run(
        ["callgrind_control", "-i", "on" if on else "off", str(os.getpid())], check=True, capture_output=True
    )


def child(layer: str, calls: int, no_flush: bool = False) -> int:
    """Under callgrind: warm ``layer`` up, then count one chain of ``calls``."""
    if no_flush:
        from vodou_engine.runtime import journal

        journal.FLUSH_EVERY_S = math.inf  # the flusher waits for ever; the drive's end writes all
    with tempfile.TemporaryDirectory(prefix="vodou-chain-instr-") as tmp_name:
        tmp = Path(tmp_name)
        store = open_bench_store(tmp / "runs.db")
        runs = bench_runs(store, {"chain": server_config(tmp / "engine.log")})

        async def main() -> None:
            async with AsyncExitStack() as stack:
                session = await sdk_session(stack, tmp / "sdk.log") if layer == "sdk" else None
                async with runs.prepare("chain.recipe", text=recipe(calls)) as ready:

                    async def one() -> None:
                        if layer == "sdk":
                            await sdk_chain(session, calls)
                        elif layer == "engine session":
                            await sdk_chain(ready.hub._servers["chain"].session, calls)
                        elif layer == "hub.call":
                            await hub_chain(ready.hub, calls)
                        else:
                            report = await runs.start(ready, actor="bench")
                            assert report.state == "succeeded", report.state

                    await one()
                    await one()
                    await trio.to_thread.run_sync(_counting, True)
                    await one()
                    await trio.to_thread.run_sync(_counting, False)

        trio.run(main)
        store.close()
    return 0


def count(layer: str, calls: int, no_flush: bool = False) -> int:
    """Instructions of one chain of ``calls`` on ``layer``, in a child process under callgrind."""
    with tempfile.TemporaryDirectory(prefix="vodou-chain-cg-") as tmp:
        proc = subprocess.run(
            [
                "valgrind",
                "--tool=callgrind",
                "--instr-atstart=no",
                f"--callgrind-out-file={Path(tmp) / 'callgrind.out'}",
                sys.executable,
                "-m",
                "benchmarks.chain_instructions",
                "--child",
                layer,
                "--calls",
                str(calls),
                *(["--no-flush"] if no_flush else []),
            ],
            cwd=ROOT,
            capture_output=True,
            text=True,
        )
    found = _COLLECTED.search(proc.stderr)
    if proc.returncode != 0 or found is None:
        raise RuntimeError(f"{layer}: callgrind failed:\n{proc.stderr[-2000:]}")
    return int(found.group(1))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.chain_instructions", description=__doc__.splitlines()[0])
    p.add_argument("--calls", type=int, default=200)
    p.add_argument("--layers", default="sdk,hub.call,run", help=f"comma-separated, of: {', '.join(LAYERS)}")
    p.add_argument("--no-flush", action="store_true", help="no timed writes of node states during a run")
    p.add_argument("--child", choices=LAYERS, default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        return child(args.child, args.calls, args.no_flush)
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        p.error("needs valgrind and callgrind_control on the PATH")
    layers = [x.strip() for x in args.layers.split(",")]
    unknown = [x for x in layers if x not in LAYERS]
    if unknown:
        p.error(f"unknown layer(s) {unknown}; known: {', '.join(LAYERS)}")
    per_call = {}
    for layer in layers:
        per_call[layer] = count(layer, args.calls, args.no_flush) / args.calls
        base = per_call.get("sdk")
        ratio = f"{per_call[layer] / base:6.3f}× the SDK" if base else ""
        print(f"{layer:<16} {per_call[layer]:>12,.0f} instructions per call  {ratio}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
