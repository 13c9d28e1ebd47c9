"""Server processes without trio: start one, stop one, and start them early.

Kept free of trio and the MCP SDK so ``recipe approve`` can start the
servers a parked run needs before it imports either: the servers then boot
on the other core while this process imports (trio and the SDK together
take over a second here). ``tools/stdio.py`` takes the processes over.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from contextlib import suppress
from typing import IO

from vodou_engine.errors import ServerConfigError
from vodou_engine.servers import ServerConfig

__all__ = ["Prespawned", "default_environment", "forget", "start", "stop_all_now", "stop_now"]

_LIVE: dict[int, subprocess.Popen[bytes]] = {}
"""Every server this process started and has not yet stopped, by pid: what a second
Ctrl-C (or SIGTERM) kills on the way out, so no server outlives the command."""

_INHERITED = ("HOME", "LOGNAME", "PATH", "SHELL", "TERM", "USER")
"""What a server inherits from our environment: the SDK's own list (``tests/test_hub.py``
checks the two agree), so a server sees the same world whichever starts it."""

STDIN_GRACE_S = 2.0
"""How long a server gets to exit on its own once its stdin is closed."""
TERM_GRACE_S = 2.0
"""How long after SIGTERM before SIGKILL."""


def default_environment() -> dict[str, str]:
    env = {}
    for key in _INHERITED:
        value = os.environ.get(key)
        # A shell function exported by bash starts with "()"; never hand one on.
        if value is not None and not value.startswith("()"):
            env[key] = value
    return env


def start(config: ServerConfig, stderr: IO[bytes]) -> subprocess.Popen[bytes]:
    """Start the server process now, with no protocol traffic and no trio needed.

    ``config`` is a resolved one (``ServerConfig.resolve(...).config``): its
    values are used as they are, ``${VAR}`` is not expanded again.

    A blocking call of a few milliseconds: inside trio, ``stdio.spawn`` runs it
    on a worker thread; :class:`Prespawned` runs it before trio is imported.
    Raises OSError (FileNotFoundError, PermissionError, …) when it cannot run.
    """
    assert config.command is not None  # resolved: ServerConfig.check saw to it
    popen = subprocess.Popen(
        [config.command, *config.args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=stderr,
        env=default_environment() | dict(config.env),
        cwd=config.cwd,
        start_new_session=sys.platform != "win32",
    )
    _LIVE[popen.pid] = popen
    return popen


def forget(popen: subprocess.Popen[bytes]) -> None:
    """A server that has been stopped and reaped."""
    _LIVE.pop(popen.pid, None)


def stop_all_now() -> None:
    """Kill every server process group this process started (no grace: the process is
    about to exit because it was told twice to stop)."""
    for popen in list(_LIVE.values()):
        signal_group(popen, signal.SIGKILL)
        forget(popen)


def stop_now(popen: subprocess.Popen[bytes]) -> None:
    """``stdio.stop`` for a process no trio task took over (blocking; at most a few seconds)."""
    if popen.stdin is not None:
        with suppress(OSError):
            popen.stdin.close()
    for sig, grace in ((None, STDIN_GRACE_S), (signal.SIGTERM, TERM_GRACE_S), (signal.SIGKILL, None)):
        if sig is not None:
            signal_group(popen, sig)
        try:
            popen.wait(timeout=grace)
            break
        except subprocess.TimeoutExpired:
            continue
    signal_group(popen, signal.SIGKILL, leader_too=False)
    forget(popen)
    if popen.stdout is not None:
        with suppress(OSError):
            popen.stdout.close()


def signal_group(popen: subprocess.Popen[bytes], sig: int, *, leader_too: bool = True) -> None:
    if sys.platform == "win32":  # pragma: no cover - no process groups
        if leader_too:
            popen.kill()
        return
    try:
        os.killpg(popen.pid, sig)
    except (ProcessLookupError, PermissionError):
        if leader_too and popen.poll() is None:
            with suppress(ProcessLookupError):
                os.kill(popen.pid, sig)


class Prespawned:
    """Servers started before the runtime was imported, waiting for a hub to take them over.

    Whatever no hub took is stopped by :meth:`close`, so an approval that is
    refused (or a person who answers no) leaves no process behind.
    """

    def __init__(self) -> None:
        self._waiting: dict[str, tuple[subprocess.Popen[bytes], IO[bytes], float]] = {}

    def start(self, name: str, config: ServerConfig) -> None:
        """Start ``config`` (as written: its ``${VAR}`` are taken from this process's
        environment now). Anything that would not start (an HTTP server, which has
        no process; a variable that is not set; a command that cannot run) is left
        to the hub, which reports it."""
        if config.transport != "stdio":
            return
        try:
            resolved = config.resolve(name).config
        except ServerConfigError:
            return
        stderr = tempfile.TemporaryFile(prefix=f"vodou-{name}-", suffix=".stderr")  # noqa: SIM115 - the hub that takes it over closes it
        started = time.perf_counter()
        try:
            popen = start(resolved, stderr)
        except OSError:
            stderr.close()  # the hub starts it again and reports why it cannot run
            return
        self._waiting[name] = (popen, stderr, started)

    @property
    def any_waiting(self) -> bool:
        """Whether a process was started here that no hub has taken yet."""
        return bool(self._waiting)

    def take(self, name: str) -> tuple[subprocess.Popen[bytes], IO[bytes], float] | None:
        """The process, its stderr file and when it was started; the caller now owns them."""
        return self._waiting.pop(name, None)

    def __enter__(self) -> Prespawned:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def close(self) -> None:
        waiting, self._waiting = self._waiting, {}
        for popen, stderr, _ in waiting.values():
            stop_now(popen)
            stderr.close()
