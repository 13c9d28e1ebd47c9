"""Saved recipes on cron schedules: when each is due, and each due time decided once.

Cron expressions are read by ``cronsim`` (five fields, the classic syntax)
in the schedule's IANA time zone (``zoneinfo``). On daylight-saving days it
does what Debian's cron does: a time that does not exist that day (the
hour skipped in spring) runs at the first minute after the gap; a time that
happens twice (the hour repeated in autumn) runs once, the first time.

Every due time a schedule reaches is decided exactly once, by the store: a
row keyed by (schedule, due time) is inserted and the schedule's
``next_due`` moved past it in one transaction, so two schedulers on one
store (two ``recipe serve`` processes) cannot both fire it; the loser sees
the key taken and does nothing. What happens to due times missed while
nothing was serving:

* missed by more than the catch-up window (default one hour, per
  schedule): skipped, and recorded as skipped with the reason;
* several missed within the window: only the latest runs, the earlier ones
  are recorded as folded into it (a briefing missed three times is sent
  once, not three times).

The run a firing starts gets its id when the firing is decided, in the same
row; a scheduler that dies between deciding and creating the run leaves a
firing with no run, which the next tick (in any process) starts under that
same id, so it happens once.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

import msgspec

from .errors import UsageError
from .store import FiringRecord, ScheduleRecord

DEFAULT_CATCH_UP_S = 3600.0
TICK_S = 1.0
"""How often a serving process looks for due schedules."""


def _zone(tz: str) -> Any:
    # here: zoneinfo and cronsim cost ~4 ms, which `recipe runs` and `show` do without
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

    try:
        return ZoneInfo(tz)
    except (ZoneInfoNotFoundError, ValueError):
        raise UsageError(
            f"unknown time zone {tz!r}", hint="use an IANA name such as Europe/Lisbon, America/New_York or UTC", tz=tz
        ) from None


def check(cron: str, tz: str) -> None:
    """Refuse an expression or zone that cannot work, before anything is stored."""
    next_after(cron, tz, time.time())


def next_after(cron: str, tz: str, after: float) -> float:
    """The first due time strictly after ``after`` (epoch seconds)."""
    from cronsim import CronSim, CronSimError  # here: see _zone

    zone = _zone(tz)
    start = datetime.fromtimestamp(after, UTC).astimezone(zone)
    if len(cron.split()) != 5:
        raise UsageError(
            f"cron expression {cron!r} needs five fields: minute hour day-of-month month day-of-week",
            hint='e.g. "0 8 * * 1-5" for 8:00 on weekdays',
            cron=cron,
        )
    try:
        due = next(CronSim(cron, start))
    except CronSimError as exc:
        raise UsageError(
            f"cron expression {cron!r} is not valid: {exc}", hint='e.g. "0 8 * * 1-5" for 8:00 on weekdays', cron=cron
        ) from None
    except StopIteration:
        raise UsageError(f"cron expression {cron!r} never comes due", cron=cron) from None
    return due.timestamp()


class Decision(msgspec.Struct, frozen=True):
    due_at: float
    outcome: str  # "fired" | "skipped"
    note: str | None = None


def decide(schedule: ScheduleRecord, now: float) -> tuple[list[Decision], float]:
    """What to do with every due time of ``schedule`` up to ``now``, and its next due time."""
    if schedule.next_due is None or schedule.next_due > now:
        return [], schedule.next_due or next_after(schedule.cron, schedule.tz, now)
    due_times: list[float] = []
    due = schedule.next_due
    while due <= now and len(due_times) < 10_000:
        due_times.append(due)
        due = next_after(schedule.cron, schedule.tz, due)
    window = now - schedule.catch_up_s
    in_window = [d for d in due_times if d >= window]
    latest = in_window[-1] if in_window else None
    decisions = []
    for d in due_times:
        if d < window:
            decisions.append(
                Decision(
                    d,
                    "skipped",
                    f"missed by {now - d:.0f} s, beyond the catch-up window of {schedule.catch_up_s:.0f} s",
                )
            )
        elif d != latest:
            decisions.append(Decision(d, "skipped", f"folded into the due time at {_iso(latest)}"))
        else:
            late = now - d
            decisions.append(Decision(d, "fired", f"caught up {late:.0f} s late" if late >= 60 else None))
    return decisions, due


def _iso(ts: float | None) -> str:
    return "—" if ts is None else datetime.fromtimestamp(ts, UTC).isoformat(timespec="seconds")


def firing(schedule: ScheduleRecord, d: Decision, *, now: float, by: str, run_id: str | None) -> FiringRecord:
    return FiringRecord(
        schedule=schedule.name,
        due_at=d.due_at,
        outcome=d.outcome,
        decided_at=now,
        decided_by=by,
        run_id=run_id,
        note=d.note,
    )
