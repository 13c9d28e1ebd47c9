"""``recipe save`` and ``schedule``: recipes kept in the store, and when they run.

A saved recipe is a new version each time (older ones are kept); a schedule runs
one on a cron expression, fired by ``recipe serve``.
"""

from __future__ import annotations

from typing import Any

import msgspec

from ..errors import StoreMissingError
from ..views.report import when
from ..views.term import out, say
from .common import _inputs, _me, _runs, _seconds


def cmd_save(args: Any) -> int:
    runs = _runs(args)
    saved = runs.save(args.file, name=args.name, by=_me(runs, "save", create=True))
    say(f"saved {saved.name} version {saved.version} ({saved.plan_fingerprint}).")
    return 0


def cmd_schedule(args: Any) -> int:
    runs = _runs(args)
    me = _me(
        runs,
        f"schedule {args.schedule_command}",
        acts=args.schedule_command != "list",
        create=args.schedule_command == "add",
    )
    action = args.schedule_command
    if action == "add":
        s = runs.add_schedule(
            args.schedule_name or args.name,
            recipe=args.name,
            cron=args.cron,
            tz=args.tz,
            inputs=_inputs(args.set),
            catch_up_s=_seconds(args.catch_up),
            by=me,
        )
        say(
            f"schedule {s.name}: {s.recipe} at {s.cron!r} ({s.tz}); next due {when(s.next_due)}. `recipe serve` fires it."
        )
    elif action == "pause":
        say(f"schedule {runs.pause_schedule(args.name, by=me).name} is paused.")
    elif action == "resume":
        s = runs.resume_schedule(args.name, by=me)
        pinned = f"; it runs version {s.recipe_version} of {s.recipe} only" if s.recipe_version is not None else ""
        say(f"schedule {s.name} is active{pinned}; next due {when(s.next_due)}.")
    elif action == "remove":
        runs.remove_schedule(args.name, by=me)
        say(f"schedule {args.name} removed; its record of past due times is kept.")
    else:
        try:
            listed = runs.schedules()
        except StoreMissingError:
            listed = []
        if args.json:
            out(
                msgspec.json.format(
                    msgspec.json.encode(
                        [
                            {
                                **msgspec.structs.asdict(s),
                                "last": [msgspec.structs.asdict(f) for f in runs.firings(s.name, 3)],
                            }
                            for s in listed
                        ]
                    ),
                    indent=2,
                ).decode()
                + "\n"
            )
            return 0
        if not listed:
            say("no schedules yet.")
        for s in listed:
            state = s.state + (
                " (proposed by an agent: a person resumes it)" if s.origin == "agent" and s.state == "paused" else ""
            )
            version = f" version {s.recipe_version}" if s.recipe_version is not None else ""
            say(f"{s.name}: {s.recipe}{version} at {s.cron!r} ({s.tz}), {state}; next due {when(s.next_due)}")
            for f in runs.firings(s.name, 3):
                say(
                    f"  {when(f.due_at)}: {f.outcome}"
                    + (f" (run {f.run_id})" if f.run_id else "")
                    + (f": {f.note}" if f.note else "")
                )
    return 0
