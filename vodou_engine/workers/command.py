"""``recipe worker``: a Procrastinate worker that drives runs, on a PostgreSQL store.

    VODOU_STORE=postgresql://vodou@db.internal/vodou recipe worker --concurrency 8

Start as many as you like, on as many machines, against one database: each
takes jobs from the queue ``vodou`` in the store's own database (``app.py``),
keeps its MCP servers warm across jobs on a trio loop of its own
(``host.py``, ``engine.py``), and runs the schedules' tick when its turn
comes. docs/scale-out.md tells the whole story.

The first SIGTERM or SIGINT stops taking jobs; running drives get the grace
period (``--grace``, 30 s) to finish, then are cancelled: each leaves its run
``interrupted`` and queues it again for another worker. A second signal stops
every server process at once and exits 128 + the signal.

The CLI wires ``add_arguments`` and ``run``; ``python -m vodou_engine.workers.command``
runs the same command on its own.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import time
from collections.abc import Callable
from typing import Any

from ..errors import UsageError
from ..jobs import load_procrastinate
from ..logs import configure as configure_logging
from ..owners import this_process
from ..standalone import command_main
from .app import (
    HEARTBEAT_S,
    QUEUE,
    RECOVER_EVERY_S,
    STALLED_AFTER_S,
    TICK_CRON,
    build_app,
    claim_waiting,
    ensure_schema,
    private_queue,
    queue_url,
    recover,
    register_worker,
)

logger = logging.getLogger("vodou_engine.workers")

CONCURRENCY = 8
"""Runs one worker drives at once, by default."""
GRACE_S = 30.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags of ``recipe worker``."""
    parser.add_argument(
        "--concurrency",
        type=int,
        default=CONCURRENCY,
        metavar="N",
        help=f"runs driven at once by this worker (default {CONCURRENCY})",
    )
    parser.add_argument(
        "--store",
        metavar="URL",
        help="the PostgreSQL store (default: $VODOU_STORE); the queue lives in the same database and schema",
    )
    parser.add_argument(
        "--servers",
        metavar="FILE",
        help="MCP servers JSON (default: $VODOU_SERVERS, ./mcp.json, ~/.config/vodou/mcp.json, then the demo servers); every worker needs the same",
    )
    parser.add_argument(
        "--policy",
        metavar="FILE",
        help="tool policy file (default: $VODOU_POLICY, ./vodou-policy.toml, ~/.config/vodou/policy.toml); every worker needs the same",
    )
    parser.add_argument(
        "--grace",
        type=float,
        default=GRACE_S,
        metavar="SECONDS",
        help=f"on SIGTERM, how long running steps get to finish before their runs are left interrupted and queued again (default {GRACE_S:.0f})",
    )
    parser.add_argument(
        "--log-format",
        choices=("text", "json"),
        help="how each event (run started, parked, decided, effect, schedule fired, notification) is logged on stderr: text lines or one JSON object a line (default: $VODOU_LOG_FORMAT, else text)",
    )


def run(args: Any) -> int:
    """``recipe worker``: work until a signal; 0 after a clean stop."""
    from ..policy import load_policy  # here: the CLI loads this module for its flags
    from ..servers import load_servers

    configure_logging(getattr(args, "log_format", None), quiet=("procrastinate",))
    concurrency = getattr(args, "concurrency", CONCURRENCY)
    if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
        raise UsageError("--concurrency must be a whole number of at least 1", concurrency=concurrency)
    url = queue_url(getattr(args, "store", None))
    load_procrastinate()  # the workers extra (Procrastinate, psycopg): exit 7 with the install hint
    servers = load_servers(getattr(args, "servers", None))
    policy = load_policy(getattr(args, "policy", None))
    import asyncio  # here: the CLI loads this module for its flags

    got: list[int] = []
    asyncio.run(
        work(url, servers, policy, concurrency=concurrency, grace_s=getattr(args, "grace", GRACE_S), signals=got)
    )
    return 0


async def work(
    url: str,
    servers: Any,
    policy: Any,
    *,
    concurrency: int = CONCURRENCY,
    grace_s: float = GRACE_S,
    clock: Callable[[], float] = time.time,
    tick_cron: str = TICK_CRON,
    signals: list[int] | None = None,
    on_ready: Callable[[], None] | None = None,
    stop: Any = None,
) -> None:
    """One worker, until a signal (``signals`` is not None: SIGINT/SIGTERM handled here) or
    ``stop`` (an ``asyncio.Event``) is set."""
    import asyncio  # here: the CLI loads this module for its flags

    from procrastinate.worker import Worker

    from .engine import Engine  # here: the run API and trio, when a worker starts
    from .host import EngineHost  # here: asyncio

    owner = this_process()
    await asyncio.to_thread(ensure_schema, url)
    engine = Engine(url, servers, policy, clock=clock, keep=concurrency, owner=owner)
    host = EngineHost(engine.setup)
    await host.start()
    app = build_app(url, tick_cron=tick_cron, pool_size=min(concurrency, 4) + 2)
    loop = asyncio.get_running_loop()
    try:
        async with app.open_async():
            worker = Worker(
                app,
                queues=[QUEUE, private_queue(owner)],  # its own: runs other workers handed back that it took
                name=f"vodou {owner}",
                concurrency=concurrency,
                listen_notify=True,
                delete_jobs="successful",
                additional_context={"host": host, "engine": engine},
                install_signal_handlers=False,
                update_heartbeat_interval=HEARTBEAT_S,
                stalled_worker_timeout=STALLED_AFTER_S,
                shutdown_graceful_timeout=grace_s,
            )
            if signals is not None:
                _handle_signals(loop, worker, signals)
            keeper = asyncio.create_task(_keep_recovering(app, worker, owner, on_ready))
            stopper = asyncio.create_task(_stop_when(stop, worker)) if stop is not None else None
            try:
                await worker.run()
                logger.debug("the worker stopped taking jobs")
            finally:
                for t in (keeper, stopper):
                    if t is not None:
                        t.cancel()
                await asyncio.gather(keeper, *(t for t in [stopper] if t), return_exceptions=True)
    finally:
        host.stop()
        await host.wait_stopped(timeout=grace_s + 10)
        logger.debug("the engine thread stopped")


async def _stop_when(stop: Any, worker: Any) -> None:
    await stop.wait()
    worker.stop()


def _handle_signals(loop: Any, worker: Any, got: list[int]) -> None:
    def on_signal(signum: int) -> None:
        got.append(signum)
        if len(got) == 1:
            logger.warning("%s: stopping; running steps get their grace period", signal.Signals(signum).name)
            worker.stop()
        else:
            from ..tools.process import stop_all_now  # here: subprocess, only on a second signal

            stop_all_now()
            os._exit(128 + signum)

    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        loop.add_signal_handler(sig, on_signal, sig)


async def _keep_recovering(app: Any, worker: Any, owner: str, on_ready: Callable[[], None] | None) -> None:
    """Say which process this worker is, then, now and every few seconds, look for jobs of
    dead workers and take the runs other workers handed back that this one has not tried."""
    import asyncio  # here: the CLI loads this module for its flags

    while worker.worker_id is None:  # noqa: ASYNC110 - procrastinate sets worker_id and signals nothing
        await asyncio.sleep(0.01)
    await register_worker(app, worker.worker_id, owner)
    if on_ready is not None:
        on_ready()
    while True:
        try:
            await recover(app, worker.worker_id)
            await claim_waiting(app, owner)
        except asyncio.CancelledError:
            raise
        except Exception:  # a failed look is tried again next time
            logger.exception("looking for jobs of dead workers failed")
        await asyncio.sleep(RECOVER_EVERY_S)


def main(argv: list[str] | None = None) -> int:
    """``python -m vodou_engine.workers.command``: the command without the rest of the CLI."""
    return command_main(
        argv,
        prog="recipe worker",
        description="Drive runs from the queue in the PostgreSQL store; start as many as you like.",
        add_arguments=add_arguments,
        run=run,
    )


if __name__ == "__main__":  # pragma: no cover - a process entry point
    code = main()
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    os._exit(code)  # as `recipe` does: servers stopped, output flushed; the interpreter's teardown would add a second
