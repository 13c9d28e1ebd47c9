"""``recipe compile``: a recipe (or an actions.json) verified and written out as actions.json.

It loads the compiler and nothing of the run API or the store, so it stays as
fast as the compiler is; ``recipe run`` warns about hidden characters with the
same ``_warn_hidden``.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from ..compiler import load_source
from ..errors import UsageError
from ..plan import encode_plan
from ..policy import load_policy
from ..text_safety import source_warnings
from ..views.term import say


def cmd_compile(args: Any) -> int:
    plan, text = load_source(args.file, policy=load_policy(args.policy), refresh=True, memo=True)
    _warn_hidden(text, args.file)
    _write(encode_plan(plan), args.output)
    return 0


def _warn_hidden(text: str | None, path: str) -> None:
    """Warn about characters written into the recipe that nobody reading it sees (cards mark them)."""
    for w in source_warnings(text or "", path):
        say(f"warning: {w}", style="yellow", err=True)


def _write(data: bytes, out: str | None) -> None:
    if out:
        tmp = out + ".tmp"
        try:
            with open(tmp, "wb") as f:
                f.write(data)
            os.replace(tmp, out)
        except OSError as exc:
            raise UsageError(
                f"cannot write {out}: {exc.strerror or exc}", hint="check that the directory exists and is writable"
            ) from None
    else:
        sys.stdout.buffer.write(data)
