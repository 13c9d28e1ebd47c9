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


def crashpoint(name: str) -> None:
    if _AT is not None and _AT == name:
        os.kill(os.getpid(), signal.SIGKILL)
