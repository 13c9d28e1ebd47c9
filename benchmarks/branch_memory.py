"""Memory and wall of N no-op branches in one together, in a process of their own.

``python -m benchmarks.branch_memory N`` prints one JSON object. Case d runs it
once per N (1,000 / 10,000 / 100,000) so one N's peak never hides inside
another's: a process's peak resident set only grows.

What is measured, in this process: the engine imported and one run of 10
branches done first (imports, the store's schema, trio's and the thread
cache's warm-up are a fixed cost, not a branch's); then the collector runs, the
peak is reset (``/proc/self/clear_refs``) and the resident set read as the
baseline. Then the recipe text is made, compiled, and run through
``Runs.start`` as a person's ``recipe run`` would do it. ``peak_rss_bytes`` is
the process's highest resident set from then on, less the baseline: the plan,
the compile's own garbage, the run's node states and times, the store writes
and the report, all of it. Without ``clear_refs`` (not Linux) the peak is
``ru_maxrss``, which also counts the imports; it says so (``peak_source``).

``python -m benchmarks.branch_memory N --traced`` measures the same with
``tracemalloc`` on instead (``traced_peak_bytes``: the most Python held at once
above what it held before the compile): what the engine allocates, without the
allocator's own slack. Its wall is not the engine's (tracing slows every
allocation), so the two are separate processes.
"""

from __future__ import annotations

import gc
import json
import os
import resource
import sys
import time
import tracemalloc
from pathlib import Path

import trio

from .case_d import recipe
from .common import TempDir, bench_runs, open_bench_store, prepared, timed_start


def _status() -> dict[str, int]:
    """VmRSS and VmHWM of this process, in bytes ({} where /proc is not there)."""
    out: dict[str, int] = {}
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(("VmRSS:", "VmHWM:")):
                    out[line[:5]] = int(line.split()[1]) * 1024
    except OSError:
        pass
    return out


def _reset_peak() -> bool:
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        return False
    return "VmHWM" in _status()


def measure(n: int, *, traced: bool = False) -> dict[str, float | int | str]:
    from vodou_engine.compiler import compile_recipe

    with TempDir("mem") as tmp:
        store = open_bench_store(tmp / "runs.db")
        runs = bench_runs(store)
        _, warm = trio.run(timed_start, runs, prepared(compile_recipe(recipe(10, "vodou.noop {}"))))
        assert warm.state == "succeeded", warm.state
        gc.collect()
        resettable = _reset_peak()
        base = _status().get("VmRSS", 0)
        if traced:
            tracemalloc.start()
            held_before = tracemalloc.get_traced_memory()[0]
        t0 = time.perf_counter()
        plan = compile_recipe(recipe(n, "vodou.noop {}"))
        compile_s = time.perf_counter() - t0
        wall, out = trio.run(timed_start, runs, prepared(plan))
        assert out.state == "succeeded", out.state
        if traced:
            traced_peak = tracemalloc.get_traced_memory()[1] - held_before
            tracemalloc.stop()
            store.close()
            return {"n": n, "traced_peak_bytes": traced_peak, "traced_per_branch_bytes": traced_peak / n}
        if resettable:
            peak, source = _status()["VmHWM"] - base, "VmHWM after clear_refs, less the resident set before"
        else:
            peak, source = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, "ru_maxrss (imports included)"
        store.close()
    return {
        "n": n,
        "peak_rss_bytes": peak,
        "peak_per_branch_bytes": peak / n,
        "peak_source": source,
        "compile_s": compile_s,
        "run_wall_s": wall,
        "run_per_branch_s": wall / n,
        "pid": os.getpid(),
    }


if __name__ == "__main__":
    print(json.dumps(measure(int(sys.argv[1]), traced="--traced" in sys.argv[2:])))
