"""Named crash points, for proving that a crash never doubles an effect.

With ``VODOU_CRASH_AT=NAME`` in the environment, the process kills itself
(SIGKILL: no cleanup, no flush) when it reaches that point, exactly as a
power cut or an OOM kill would. Unset, each check is one dict lookup.
Points: ``reads`` (a read step finished, before its state is stored),
``parking`` (question stored, run not yet parked), ``quorum`` (join decided),
``executing`` (effect claimed, tool not yet called), ``executed`` (tool
returned, outcome not yet stored), ``resume`` (a resumed run was taken).
"""

from __future__ import annotations

import os
import signal

_AT = os.environ.get("VODOU_CRASH_AT")
_RAISE_AT: str | None = None


class SimulatedCrash(BaseException):
    """Raised instead of a kill when a test asks for an in-process crash.

    A BaseException, so no ``except Exception`` in the engine can swallow it;
    it unwinds the run without any of the engine's own bookkeeping.
    """


def simulate(name: str | None) -> None:
    """In-process crash at ``name`` (None: off), for property tests."""
    global _RAISE_AT
    _RAISE_AT = name


def crashpoint(name: str) -> None:
    if _AT is not None and name == _AT:
        os.kill(os.getpid(), signal.SIGKILL)
    if _RAISE_AT is not None and name == _RAISE_AT:
        raise SimulatedCrash(name)
