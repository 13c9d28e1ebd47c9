"""Helpers for the worker tests (tests/test_workers.py): a fresh PostgreSQL schema per test,
worker processes, and waiting on the database (never on time).

PostgreSQL is expected at ``$VODOU_TEST_PG`` (default
``postgresql://postgres@127.0.0.1:5432/test``); when it cannot be reached the
tests fail with that message instead of being skipped.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import web_helpers
from pg_helpers import PG, fresh_schema, pg_or_fail  # noqa: F401 - the tests import them from here too

ROOT = Path(__file__).resolve().parent.parent
PROC = str(Path(__file__).with_name("workers_proc.py"))


def wait_for(check: Callable[[], Any], what: str, *, timeout: float = 60, every: float = 0.05) -> Any:
    """web_helpers.wait_for with the longer deadline that queued work gets."""
    return web_helpers.wait_for(check, what, timeout=timeout, every=every)


class Workers:
    """Worker processes on one store: ``recipe worker`` itself (``python -m vodou_engine worker``),
    or ``python tests/workers_proc.py`` (the same ``work()`` with an optional fast clock and
    tick for schedule tests); and ``recipe serve`` processes (``serve()``)."""

    def __init__(self, url: str, servers: Path, tmp: Path, *, env: dict | None = None):
        self.url = url
        self.servers = servers
        self.tmp = tmp
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("VODOU_")}
        self.env.update(
            VODOU_STORE=url,
            VODOU_SERVERS=str(servers),
            XDG_CONFIG_HOME=str(tmp / "config"),
            XDG_DATA_HOME=str(tmp / "data"),
            PYTHONPATH=str(ROOT),
        )
        self.env.update(env or {})
        self.procs: list[subprocess.Popen] = []

    def start(
        self, n: int, *, concurrency: int = 4, env: dict | None = None, grace: float = 30.0, recipe: bool = False
    ) -> list[subprocess.Popen]:
        """``n`` workers: ``recipe worker`` itself (``recipe=True``), else workers_proc.py (a fast clock)."""
        if recipe:
            argv = ["-m", "vodou_engine", "worker"]
        else:
            argv = [*([os.environ["VODOU_TEST_WRAP"]] if os.environ.get("VODOU_TEST_WRAP") else []), PROC, "worker"]
        return [
            self._spawn("worker", [*argv, "--concurrency", str(concurrency), "--grace", str(grace)], env)
            for _ in range(n)
        ]

    def serve(self, n: int) -> list[subprocess.Popen]:
        """``n`` ``recipe serve`` processes on free ports (on this store they queue, never drive)."""
        return [self._spawn("serve", ["-m", "vodou_engine", "serve", "--port", "0"], None) for _ in range(n)]

    def _spawn(self, role: str, argv: list[str], env: dict | None) -> subprocess.Popen:
        with open(self.tmp / f"{role}-{len(self.procs)}.log", "wb") as log:  # the child holds its own copy
            p = subprocess.Popen(
                [sys.executable, *argv], env={**self.env, **(env or {})}, cwd=self.tmp, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            )  # fmt: skip
        p.role = role  # type: ignore[attr-defined]
        p.log = self.tmp / f"{role}-{len(self.procs)}.log"  # type: ignore[attr-defined]
        self.procs.append(p)
        return p

    def children(self, p: subprocess.Popen) -> set[int]:
        """Every live process below ``p`` (the MCP servers it started, their children)."""
        return web_helpers.descendants(p.pid)

    def registered(self) -> int:
        with pg_or_fail() as conn:
            conn.execute(f"SET search_path = {self._schema()}")
            if conn.execute("SELECT to_regclass('vodou_queue_workers')").fetchone()[0] is None:
                return 0
            return conn.execute("SELECT count(*) FROM vodou_queue_workers").fetchone()[0]

    def wait_ready(self, n: int, timeout: float = 60) -> None:
        def ready() -> bool:
            for p in self.procs:
                if p.poll() is not None:
                    raise AssertionError(f"a {p.role} exited {p.returncode} before it was ready:\n{self.logs()}")
            return self.registered() >= n

        wait_for(ready, f"{n} workers to register", timeout=timeout)

    def wait_serving(self, timeout: float = 60) -> None:
        """Until every ``recipe serve`` process says it is serving."""

        def serving() -> bool:
            for p in self.procs:
                if p.role == "serve" and p.poll() is not None:
                    raise AssertionError(f"a serve exited {p.returncode}:\n{self.logs()}")
            return all("serving on" in p.log.read_text(errors="replace") for p in self.procs if p.role == "serve")

        wait_for(serving, "the serve processes to listen", timeout=timeout)

    def _schema(self) -> str:
        return self.url.rsplit("%3D", 1)[1]

    def logs(self) -> str:
        return "\n".join(
            f"--- {f.name}\n{f.read_text(errors='replace')[-3000:]}" for f in sorted(self.tmp.glob("*.log"))
        )

    def stop(self, timeout: float = 30) -> list[int | None]:
        for p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        codes = []
        for p in self.procs:
            try:
                codes.append(p.wait(timeout))
            except subprocess.TimeoutExpired:
                p.kill()
                codes.append(p.wait())
        return codes

    def __enter__(self) -> Workers:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def queue_counts(url: str, task: str | None = "vodou.drive") -> dict[str, int]:
    """Jobs of the queue by status: the drives of runs (``task=None``: every job, the
    schedules' tick too, which the workers defer every second)."""
    from vodou_engine.workers import Queue

    with Queue(url) as q:
        out: dict[str, int] = {}
        for j in q.jobs():
            if task is None or j["task"] == task:
                out[j["status"]] = out.get(j["status"], 0) + 1
        return out


def run_states(url: str, ids: list[str] | None = None) -> dict[str, str]:
    """Each run's stored state, in one query (by id)."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute("SELECT id, state FROM runs").fetchall()
    states = dict(rows)
    return states if ids is None else {i: states.get(i) for i in ids}
