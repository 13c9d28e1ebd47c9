"""Who drives a run: this process's name, and whether another's is gone.

A run is driven by one process at a time. Taking it is a compare-and-set in
the store on its owner and lease (``store.take_run``); the owner renews the
lease while it drives. Another process may take the run over when the lease
has run out, or at once when the owner is a process on this host that no
longer exists: a ``kill -9`` must not leave an approval waiting for a
driver that will never come back.

An owner is ``host:pid:start``, where ``start`` is the process's start time
(from ``/proc``), so a pid reused by an unrelated process is not mistaken
for the owner.
"""

from __future__ import annotations

import os
import socket
from functools import cache

LEASE_S = 30.0
"""How long a claim on a run holds without renewal."""
RENEW_EVERY_S = 10.0
"""How often a driver renews it: a third of the lease, so two missed renewals are survived."""

HOST = socket.gethostname()


def _start_time(pid: int) -> str:
    """The process's start time in clock ticks since boot, or '' where /proc has no such file."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return ""
    # Field 22, counted after the command name, which may itself hold spaces and parentheses.
    fields = stat[stat.rfind(b")") + 2 :].split()
    return fields[19].decode() if len(fields) > 19 else ""


@cache
def _me(pid: int) -> str:
    return f"{HOST}:{pid}:{_start_time(pid)}"


def this_process() -> str:
    return _me(os.getpid())


def is_gone(owner: str | None) -> bool:
    """True when ``owner`` is certainly not running: a process of this host that has
    exited (or whose pid now belongs to another process). An owner on another host
    is never judged here: its lease decides."""
    if not owner:
        return True
    parts = owner.rsplit(":", 2)
    if len(parts) != 3:
        return False
    host, pid_text, start = parts
    if host != HOST or not pid_text.isdigit():
        return False
    pid = int(pid_text)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        pass  # alive, another user's
    now = _start_time(pid)
    return bool(start and now and now != start)


def describe(owner: str | None) -> str:
    if not owner:
        return "no process"
    parts = owner.rsplit(":", 2)
    if len(parts) != 3:
        return owner
    host, pid, _ = parts
    return f"process {pid}" + ("" if host == HOST else f" on {host}")
