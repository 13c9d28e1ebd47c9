"""A worker with a fast clock as its own process, for tests/test_workers.py.

    python tests/workers_proc.py worker [--concurrency N] [--grace SECONDS]

It is ``recipe worker``'s own ``work()`` (vodou_engine/workers/command.py) on
``$VODOU_STORE``, ``$VODOU_SERVERS`` and the usual policy, and stops cleanly on
SIGTERM; the tests that need no fast clock run ``recipe worker`` itself.

For schedule tests, a fast clock: with ``VODOU_TEST_CLOCK_T0`` (epoch seconds),
``VODOU_TEST_CLOCK_START`` (the real time it corresponds to) and
``VODOU_TEST_CLOCK_SPEED`` (fake seconds per real second), the engine's clock
(``Runs.clock``: due times, node timings) reads
``T0 + (time.time() - START) * SPEED``, the same in every process.
``VODOU_TEST_TICK`` replaces the tick's cron (default every second).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def clock():
    t0 = os.environ.get("VODOU_TEST_CLOCK_T0")
    if not t0:
        return time.time
    t0f, start, speed = (
        float(t0),
        float(os.environ["VODOU_TEST_CLOCK_START"]),
        float(os.environ.get("VODOU_TEST_CLOCK_SPEED", "1")),
    )
    return lambda: t0f + (time.time() - start) * speed


def main() -> int:
    import logging

    logging.basicConfig(
        level=logging.DEBUG if os.environ.get("VODOU_TEST_DEBUG") else logging.INFO,
        format="%(asctime)s %(process)d %(name)s %(levelname)s %(message)s",
        stream=sys.stderr,
    )
    logging.getLogger("procrastinate").setLevel(logging.WARNING)
    p = argparse.ArgumentParser()
    p.add_argument("role", choices=["worker"])
    p.add_argument("--concurrency", type=int, default=4)
    p.add_argument("--grace", type=float, default=30.0)
    args = p.parse_args()
    from vodou_engine.workers.app import TICK_CRON, queue_url

    url = queue_url(None)
    tick = os.environ.get("VODOU_TEST_TICK") or TICK_CRON
    from vodou_engine.policy import load_policy
    from vodou_engine.servers import load_servers
    from vodou_engine.workers.command import work

    asyncio.run(
        work(
            url,
            load_servers(None),
            load_policy(None),
            concurrency=args.concurrency,
            clock=clock(),
            tick_cron=tick,
            grace_s=args.grace,
            signals=[],
        )
    )
    return 0


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # as `recipe` does: everything is stopped and flushed; tearing the interpreter down costs a second
