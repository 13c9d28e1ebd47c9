"""``recipe runs``, ``show`` and ``prune``: the runs in a store, read and cleared.

Nothing here starts a server or loads trio: these answer as fast as the store does.
"""

from __future__ import annotations

import re
import time
from datetime import datetime
from typing import Any

import msgspec

from ..errors import StoreMissingError, UsageError
from ..views.report import runs_table, show
from ..views.term import out, say
from .common import _me, _runs, _seconds, _store_flag


def _since(text: str | None) -> float | None:
    if text is None:
        return None
    if re.fullmatch(r"\d+\s*[smhd]", text.strip()):
        return time.time() - _seconds(text)
    try:
        dt = datetime.fromisoformat(text)
    except ValueError:
        raise UsageError(
            f"--since {text!r} is neither an ISO date/time nor an age",
            hint="e.g. --since 2026-11-30, --since 2026-11-30T08:00, --since 2h, --since 7d",
        ) from None
    return (dt if dt.tzinfo else dt.astimezone()).timestamp()


def cmd_runs(args: Any) -> int:
    if args.limit < 1:
        raise UsageError("--limit must be at least 1")
    runs = _runs(args)
    since = _since(args.since)
    try:
        listed = runs.list(state=args.state, recipe=args.recipe, since=since, limit=args.limit)
    except StoreMissingError:
        if args.store:
            raise  # a path typed for this command must name a store
        listed = []  # no run has been stored yet where the defaults point
    filtered = any(v is not None for v in (args.state, args.recipe, args.since))
    runs_table(listed, json_out=args.json, store_flag=_store_flag(args), filtered=filtered)
    return 0


def cmd_show(args: Any) -> int:
    show(_runs(args).show(args.run), json_out=args.json, audit=args.audit, full=args.full, store_flag=_store_flag(args))
    return 0


def cmd_prune(args: Any) -> int:
    age = _seconds(args.older_than)
    runs = _runs(args)
    rep = runs.prune(older_than_s=age, states=args.state, by=_me(runs, "prune"))
    if args.json:
        out(msgspec.json.encode(rep).decode() + "\n")
        return 0
    size = (
        f"; the store went from {rep.bytes_before:,} to {rep.bytes_after:,} bytes"
        if rep.bytes_before is not None and rep.bytes_after is not None
        else ""
    )
    say(f"removed {rep.runs} finished run{'s' if rep.runs != 1 else ''}{size}.")
    return 0
