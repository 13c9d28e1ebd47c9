"""Saved recipes, schedules and their firings: what runs without a person starting it.

A saved recipe is numbered per name, each version kept. A schedule fires a saved
recipe at cron times; each due time gets one firing row, decided by exactly one
scheduler however many race (the firing's key, and a compare-and-set on the
schedule's next due time, in one transaction).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import msgspec

from ..errors import RefusedError
from .core import INSERT_AUDIT, StoreCore
from .dialect import _cols, _in, _json, _now, _required_row, _text, _values
from .records import FiringRecord, RecipeRecord, ScheduleRecord

_RECIPE_COLS = _cols(RecipeRecord)
_SCHEDULE_COLS = _cols(ScheduleRecord)
_FIRING_COLS = _cols(FiringRecord)

LAST_RECIPE_VERSION = "SELECT MAX(version) FROM recipes WHERE name = ?"
INSERT_RECIPE = f"INSERT INTO recipes ({_RECIPE_COLS}) VALUES {_values(RecipeRecord)}"
SELECT_RECIPE = f"SELECT {_RECIPE_COLS} FROM recipes WHERE name = ? AND version = ?"
SELECT_RECIPE_LATEST = f"SELECT {_RECIPE_COLS} FROM recipes WHERE name = ? ORDER BY version DESC LIMIT 1"
SELECT_RECIPE_VERSIONS = f"SELECT {_RECIPE_COLS} FROM recipes WHERE name = ? ORDER BY version"
SELECT_RECIPES_LATEST = (
    f"SELECT {_cols(RecipeRecord, 'r.')} FROM recipes r WHERE r.version = "
    "(SELECT MAX(version) FROM recipes WHERE name = r.name) ORDER BY r.name"
)
INSERT_SCHEDULE = f"INSERT INTO schedules ({_SCHEDULE_COLS}) VALUES {_values(ScheduleRecord)}"
SELECT_SCHEDULE = f"SELECT {_SCHEDULE_COLS} FROM schedules WHERE name = ?"
SELECT_SCHEDULES = f"SELECT {_SCHEDULE_COLS} FROM schedules ORDER BY name"
SELECT_DUE = f"SELECT {_SCHEDULE_COLS} FROM schedules WHERE state = 'active' AND next_due IS NOT NULL AND next_due <= ? ORDER BY next_due, name"
SET_SCHEDULE_STATE = "UPDATE schedules SET state = ?, next_due = ?, updated_at = ? WHERE name = ? AND state IN "
DELETE_SCHEDULE = "DELETE FROM schedules WHERE name = ?"
INSERT_FIRING = (
    f"INSERT INTO firings ({_FIRING_COLS}) VALUES {_values(FiringRecord)} ON CONFLICT (schedule, due_at) DO NOTHING"
)
MOVE_NEXT_DUE = "UPDATE schedules SET next_due = ?, updated_at = ? WHERE name = ? AND next_due = ? AND state = 'active'"
SELECT_FIRINGS = f"SELECT {_FIRING_COLS} FROM firings WHERE schedule = ? ORDER BY due_at DESC LIMIT ?"
SELECT_ORPHAN_FIRINGS = (
    f"SELECT {_cols(FiringRecord, 'f.')} FROM firings f WHERE f.outcome = 'fired' AND f.decided_at < ? "
    "AND NOT EXISTS (SELECT 1 FROM runs r WHERE r.id = f.run_id) ORDER BY f.decided_at"
)
FIRING_FAILED = (
    "UPDATE firings SET outcome = 'failed', note = ? WHERE schedule = ? AND due_at = ? AND outcome = 'fired'"
)


class SavedMixin(StoreCore):
    """Saved recipes, schedules and firings."""

    # -- saved recipes ------------------------------------------------------

    def save_recipe(
        self,
        name: str,
        *,
        source: str,
        plan_json: Any,
        plan_fingerprint: str,
        by: str,
        origin: str = "person",
        now: float | None = None,
    ) -> RecipeRecord:
        """Store a new version of ``name`` (1 for the first); older versions stay."""
        now = _now(now)
        with self._write() as cur:
            self._d.lock(cur, f"recipe:{name}")  # two saves of one name number their versions in turn
            cur.execute(self._q(LAST_RECIPE_VERSION), (name,))
            version: int = (_required_row(cur.fetchone())[0] or 0) + 1
            rec = RecipeRecord(name, version, source, _text(plan_json), plan_fingerprint, now, by, origin)
            cur.execute(self._q(INSERT_RECIPE), msgspec.structs.astuple(rec))
            cur.execute(
                self._q(INSERT_AUDIT),
                (now, "recipe.saved", by, None, _json({"name": name, "version": version, "origin": origin})),
            )
        return rec

    def get_recipe(self, name: str, version: int | None = None) -> RecipeRecord:
        row = self._one(SELECT_RECIPE_LATEST, (name,)) if version is None else self._one(SELECT_RECIPE, (name, version))
        if row is None:
            which = f"{name!r}" + ("" if version is None else f" version {version}")
            raise RefusedError(
                f"no saved recipe {which} in the store at {self.location}",
                hint="list the saved recipes to find it",
                recipe=name,
                version=version,
            )
        return RecipeRecord(*row)

    def recipe_versions(self, name: str) -> list[RecipeRecord]:
        return [RecipeRecord(*r) for r in self._all(SELECT_RECIPE_VERSIONS, (name,))]

    def recipes_latest(self) -> list[RecipeRecord]:
        return [RecipeRecord(*r) for r in self._all(SELECT_RECIPES_LATEST, ())]

    # -- schedules ----------------------------------------------------------

    def add_schedule(self, schedule: ScheduleRecord) -> None:
        try:
            with self._write() as cur:
                cur.execute(self._q(INSERT_SCHEDULE), msgspec.structs.astuple(schedule))
                data = {
                    "name": schedule.name,
                    "recipe": schedule.recipe,
                    "cron": schedule.cron,
                    "tz": schedule.tz,
                    "state": schedule.state,
                    "origin": schedule.origin,
                }
                cur.execute(
                    self._q(INSERT_AUDIT),
                    (schedule.created_at, "schedule.added", schedule.created_by, None, _json(data)),
                )
        except self._d.IntegrityError as exc:
            raise RefusedError(
                f"a schedule named {schedule.name!r} already exists; nothing was changed",
                hint="choose another name, or remove the old schedule first",
                schedule=schedule.name,
            ) from exc

    def get_schedule(self, name: str) -> ScheduleRecord:
        row = self._one(SELECT_SCHEDULE, (name,))
        if row is None:
            raise RefusedError(
                f"no schedule {name!r} in the store at {self.location}",
                hint="list the schedules to find it",
                schedule=name,
            )
        return ScheduleRecord(*row)

    def schedules(self) -> list[ScheduleRecord]:
        return [ScheduleRecord(*r) for r in self._all(SELECT_SCHEDULES, ())]

    def due_schedules(self, now: float) -> list[ScheduleRecord]:
        return [ScheduleRecord(*r) for r in self._all(SELECT_DUE, (now,))]

    def set_schedule_state(
        self,
        name: str,
        state: str,
        *,
        expected: Iterable[str],
        next_due: float | None,
        by: str,
        now: float | None = None,
    ) -> bool:
        """Pause or resume (compare-and-set on the state); resuming sets the next due time afresh."""
        now = _now(now)
        states = tuple(expected)
        with self._write() as cur:
            cur.execute(self._q(SET_SCHEDULE_STATE + _in(len(states))), (state, next_due, now, name, *states))
            won = cur.rowcount == 1
            if won:
                cur.execute(self._q(INSERT_AUDIT), (now, f"schedule.{state}", by, None, _json({"name": name})))
        return won

    def remove_schedule(self, name: str, *, by: str, now: float | None = None) -> bool:
        now = _now(now)
        with self._write() as cur:
            cur.execute(self._q(DELETE_SCHEDULE), (name,))
            gone = cur.rowcount == 1
            if gone:
                cur.execute(self._q(INSERT_AUDIT), (now, "schedule.removed", by, None, _json({"name": name})))
        return gone

    def decide_firing(self, firing: FiringRecord, *, next_due: float | None) -> bool:
        """Record one due time's fate and move the schedule past it, in one transaction.

        True for exactly one caller per (schedule, due time), however many
        schedulers race for it: the firing's key decides, and moving
        ``next_due`` is a compare-and-set on the due time being decided.
        """
        try:
            with self._write() as cur:
                cur.execute(self._q(INSERT_FIRING), msgspec.structs.astuple(firing))
                if cur.rowcount != 1:
                    return False
                cur.execute(self._q(MOVE_NEXT_DUE), (next_due, firing.decided_at, firing.schedule, firing.due_at))
                if cur.rowcount != 1:
                    raise _Lost  # paused, removed or moved meanwhile: roll the firing back
                if firing.outcome == "fired" and firing.run_id:
                    self._say("schedule.fired", firing.run_id, None, firing.decided_by, {"schedule": firing.schedule})
        except _Lost:
            return False
        return True

    def firings(self, schedule: str, limit: int = 50) -> list[FiringRecord]:
        return [FiringRecord(*r) for r in self._all(SELECT_FIRINGS, (schedule, limit))]

    def orphan_firings(self, *, decided_before: float) -> list[FiringRecord]:
        """Firings whose run was never created (the scheduler died in between): to start now."""
        return [FiringRecord(*r) for r in self._all(SELECT_ORPHAN_FIRINGS, (decided_before,))]

    def firing_failed(self, schedule: str, due_at: float, error: str) -> None:
        """A fired due time whose run could not even be created (the recipe no longer compiles...)."""
        with self._write() as cur:
            cur.execute(self._q(FIRING_FAILED), (error, schedule, due_at))


class _Lost(Exception):
    """A compare-and-set lost inside a transaction that must then leave no trace."""
