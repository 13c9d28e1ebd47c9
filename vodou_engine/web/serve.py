"""``recipe serve``: one trio process serving the inbox and running the service.

Hypercorn's trio worker serves the Starlette app (``app.py``); the app's
lifespan runs the :class:`~vodou_engine.service.Service` (scheduler, warm
servers, runs driven in the background) in the same trio run.

The first SIGTERM, SIGINT or SIGHUP stops taking work: the scheduler stops
deciding, new runs and approvals are refused, requests in flight get a few
seconds, running steps get the grace period (``--grace``, 30 s) to
finish, and every run is left parked, finished or ``interrupted``
(resumable); then the process exits 0. A second signal stops every server
process at once and exits 128 + the signal.

The CLI wires ``add_arguments`` and ``run``; ``python -m vodou_engine.web.serve``
runs the same command on its own.
"""

from __future__ import annotations

import argparse
import errno
import logging
import os
import signal
import sys
from collections.abc import Awaitable, Callable
from typing import Any

from ..logs import configure as configure_logging
from .config import GRACE_S, WebConfig, from_flags

logger = logging.getLogger("vodou_engine.web")

HTTP_GRACE_S = 5.0
"""How long requests in flight get to finish after a stop is asked for."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags of ``recipe serve``."""
    parser.add_argument("--host", help="address to listen on (default 127.0.0.1: this machine only)")
    parser.add_argument("--port", type=int, help="TCP port (default 8400; 0 picks a free one)")
    parser.add_argument(
        "--store", metavar="PATH", help="run store (default: $VODOU_STORE or ~/.local/share/vodou/runs.db)"
    )
    parser.add_argument(
        "--servers",
        metavar="FILE",
        help="MCP servers JSON (default: $VODOU_SERVERS, ./mcp.json, ~/.config/vodou/mcp.json, then the demo servers)",
    )
    parser.add_argument(
        "--policy",
        metavar="FILE",
        help="tool policy file (default: $VODOU_POLICY, ./vodou-policy.toml, ~/.config/vodou/policy.toml)",
    )
    parser.add_argument(
        "--config",
        metavar="FILE",
        help="serve configuration: the inbox's address and notifications (default: $VODOU_SERVE_CONFIG, ./vodou-serve.toml, ~/.config/vodou/serve.toml; docs/notifications.md)",
    )
    parser.add_argument(
        "--no-signin-link",
        action="store_true",
        help="do not print a one-time sign-in link for the user running serve (printed only when it listens on this machine only)",
    )
    parser.add_argument(
        "--grace",
        type=float,
        metavar="SECONDS",
        help=f"on SIGTERM, how long running steps get to finish before their runs are left interrupted (default {GRACE_S:.0f})",
    )
    parser.add_argument(
        "--log-format",
        choices=("text", "json"),
        help="how each event (run started, parked, decided, effect, schedule fired, notification) is logged on stderr: text lines or one JSON object a line (default: $VODOU_LOG_FORMAT, else text)",
    )


def build(cfg: WebConfig) -> tuple[Any, Any]:
    """(service, app) for ``cfg``: servers and policy read now, so a bad file stops here."""
    from ..policy import load_policy
    from ..servers import load_servers
    from ..service import Service
    from .app import create_app

    servers = load_servers(cfg.servers)
    policy = load_policy(cfg.policy)
    holder: dict[str, Any] = {}
    service = Service(
        store=cfg.store,
        servers=servers,
        policy=policy,
        grace_s=cfg.grace_s,
        on_parked=parked_hook(cfg, lambda: holder["app"].state.web),
    )
    if service.workers:  # a PostgreSQL store: everything goes through the workers' queue
        from ..workers.app import require_procrastinate

        require_procrastinate()
    app = create_app(service, cfg)
    holder["app"] = app
    return service, app


def parked_hook(cfg: WebConfig, web: Callable[[], Any]) -> Callable[[Any], Awaitable[None]] | None:
    """``Service(on_parked=...)``: hand a run that parked to ``vodou_engine.notify.notify_parked``
    when that module is there and its configuration sends anything; otherwise None."""
    if cfg.notify is None or not getattr(cfg.notify, "notifies", False):
        return None
    from .. import notify

    async def on_parked(report: Any) -> None:
        url = cfg.notify.run_url(report.run, default_base=cfg.base_url(web().port))
        await notify.notify_parked(cfg.notify, report, url)

    return on_parked


def run(args: Any) -> int:
    """``recipe serve``: serve until a signal; 0 after a clean stop."""
    configure_logging(getattr(args, "log_format", None))
    cfg = from_flags(args)
    hc, sockets = listen(cfg)  # before anything starts: a busy port ends here, in one line
    service, app = build(cfg)
    import trio

    trio.run(_serve, service, app, cfg, hc, sockets, not getattr(args, "no_signin_link", False))
    return 0


def listen(cfg: WebConfig) -> tuple[Any, Any]:
    """(Hypercorn's configuration, its listening sockets) for ``cfg``: the address is taken
    here, before the service or a server starts, so a port already in use (or an address
    this machine does not have) is a :class:`UsageError` (exit 2) naming the fix."""
    from hypercorn.config import Config as HypercornConfig

    from ..errors import UsageError

    hc = HypercornConfig()
    host = f"[{cfg.host}]" if ":" in cfg.host and not cfg.host.startswith("[") else cfg.host
    hc.bind = [f"{host}:{cfg.port}"]
    hc.graceful_timeout = HTTP_GRACE_S
    hc.shutdown_timeout = cfg.grace_s + 30
    hc.startup_timeout = 120
    hc.accesslog = None
    hc.errorlog = logging.getLogger("hypercorn.error")  # through this process's logging, once
    hc.include_server_header = False
    hc.keep_alive_timeout = 20
    try:
        sockets = hc.create_sockets()
        for sock in sockets.insecure_sockets:
            sock.listen(hc.backlog)
    except OSError as exc:
        busy = exc.errno == errno.EADDRINUSE
        raise UsageError(
            f"cannot listen on {host}:{cfg.port}: "
            + ("another process already listens there" if busy else (exc.strerror or str(exc)))
            + "; nothing was started",
            hint=(
                f"choose another port (--port {cfg.port + 1 if cfg.port else 8401}, or --port 0 for any free one), or stop what listens there"
                if busy
                else "choose another --host or --port"
            ),
            host=cfg.host,
            port=cfg.port,
        ) from None
    return hc, sockets


async def _serve(service: Any, app: Any, cfg: WebConfig, hc: Any, sockets: Any, signin_link: bool = False) -> None:
    import trio
    from hypercorn.trio.run import worker_serve
    from hypercorn.utils import wrap_app

    shutdown = trio.Event()
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM, signal.SIGHUP) as signals:
        async with trio.open_nursery() as nursery:

            async def watch() -> None:
                seen = 0
                async for signum in signals:
                    seen += 1
                    if seen == 1:
                        logger.warning(
                            "%s: stopping; running steps get %g s to finish", signal.Signals(signum).name, cfg.grace_s
                        )
                        service.stop()
                        shutdown.set()
                    else:
                        from ..tools.process import stop_all_now

                        stop_all_now()
                        os._exit(128 + signum)

            async def serving(task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
                try:
                    await worker_serve(
                        wrap_app(app, hc.wsgi_max_body_size, "asgi"),
                        hc,
                        sockets=sockets,
                        shutdown_trigger=shutdown.wait,
                        task_status=task_status,
                    )
                finally:
                    nursery.cancel_scope.cancel()

            nursery.start_soon(watch)
            binds = await nursery.start(serving)
            port = _port(binds)
            app.state.web.port = port
            from ..store import default_store_path
            from ..store.postgres import _safe

            where = _safe(str(cfg.store or default_store_path()))
            if service.workers:
                where += "; runs go on in `recipe worker` processes, schedules through their queue"
            print(
                f"vodou inbox: serving on {cfg.base_url(port)} (store {where}); stop with Ctrl-C or SIGTERM",
                file=sys.stderr,
                flush=True,
            )
            found = await trio.to_thread.run_sync(_first_run_link, service, cfg, port) if signin_link else None
            if found is not None:
                name, link = found
                print(
                    f"vodou inbox: sign in as {name} (you, who started this serve; it works once, within 15 minutes):\n  {link}",
                    file=sys.stderr,
                    flush=True,
                )
    logger.info("stopped")


def _first_run_link(service: Any, cfg: WebConfig, port: int | None) -> tuple[str, str] | None:
    """The person who started ``serve`` and their one-time sign-in link, when it listens on
    this machine only (``signin.first_run_link``); else None."""
    from .signin import first_run_link, local_only  # here: the CLI loads this module for its flags

    if not local_only(cfg.host):
        return None
    runs = service.runs()
    try:
        return first_run_link(runs, cfg.base_url(port))
    finally:
        runs.close()


def _port(binds: list[str]) -> int | None:
    for b in binds or []:
        try:
            return int(b.rsplit(":", 1)[1])
        except (IndexError, ValueError):
            continue
    return None


def main(argv: list[str] | None = None) -> int:
    """``python -m vodou_engine.web.serve``: the command without the rest of the CLI."""
    from ..standalone import command_main

    return command_main(
        argv,
        prog="recipe serve",
        description="Serve the approval inbox and run saved recipes on their schedules.",
        add_arguments=add_arguments,
        run=run,
    )


if __name__ == "__main__":  # pragma: no cover - a process entry point
    sys.exit(main())
