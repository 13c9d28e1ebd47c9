"""Built-in tools, addressed as ``vodou.TOOL``: blocking work on real threads.

They exist so a recipe (and the benchmark) can hold blocking Python work
without a server: ``vodou.sleep`` blocks its thread like a sync SDK call
would, and must run off the trio thread; ``noop`` and ``echo`` do no work at
all and run inline, which measures the engine's own cost per step.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from ..errors import ToolError

MAX_SLEEP_MS = 7 * 86_400_000
"""A week: longer than any run should wait on a thread, far below what time.sleep refuses."""


def sleep(args: dict[str, Any]) -> dict[str, Any]:
    ms = args.get("ms", 0) if isinstance(args, dict) else None
    if isinstance(ms, bool) or not isinstance(ms, (int, float)) or not 0 <= ms <= MAX_SLEEP_MS:
        # A step's arguments are data: a bad value fails the step, it never crashes the run.
        raise ToolError(
            f"vodou.sleep needs `ms`, a number of milliseconds from 0 to {MAX_SLEEP_MS} (a week); it got {ms!r}"
        )
    started = time.time()
    time.sleep(ms / 1000.0)
    return {"label": args.get("label", ""), "ms": ms, "started": started, "ended": time.time()}


def noop(args: dict[str, Any]) -> dict[str, Any]:
    return {}


def echo(args: dict[str, Any]) -> Any:
    return args.get("value", args)


# name -> (function, blocking: runs on a worker thread)
TOOLS: dict[str, tuple[Callable[[dict[str, Any]], Any], bool]] = {
    "sleep": (sleep, True),
    "noop": (noop, False),
    "echo": (echo, False),
}
