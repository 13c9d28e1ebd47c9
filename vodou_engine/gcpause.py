"""The cyclic garbage collector around the MCP SDK's import, in a process the CLI owns.

Importing the SDK builds some hundred thousand objects that live until exit
(the pydantic models of its protocol types). Left on, the collector makes a
couple of hundred passes over them during the import, about 15% of its time,
and every later full pass walks them again (about 0.1 s each, a stall of the
whole process). A process that is the CLI's own pauses the collector for the
import, then freezes what exists (``gc.freeze``), so the collector never
looks at those objects again. A program that embeds vodou_engine keeps its
own collector as it set it: nothing here acts unless ``own_process`` was
called.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

_owned = False


def own_process() -> None:
    """Called by the CLI's entry point: this interpreter is ours to tune."""
    global _owned
    _owned = True


@contextmanager
def paused_for_import() -> Iterator[None]:
    if not _owned or not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        gc.enable()
