"""Saved recipes and their schedules: a recipe's text and plan saved as numbered versions,
a cron schedule over a saved recipe, its firings (each due time decided once, whoever
else is deciding), and starting the run a firing decided. ``scheduler.py`` has the rules
for due times; the store decides each one once.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from typing import Any

import msgspec

from ..errors import RefusedError, UsageError, VodouError
from ..plan import encode_plan
from ..reports import RunReport
from ..runtime.plans import check_saved_text, check_stored_plan
from ..scheduler import DEFAULT_CATCH_UP_S, check, decide, firing, next_after
from ..store import FiringRecord, RecipeRecord, ScheduleRecord
from .common import in_thread, plain
from .inputs import new_run_id, refuse_agent_opt_out, resolve_inputs
from .lifecycle import LifecycleMixin

ORPHAN_AFTER_S = 60.0
"""A fired due time with no run after this long was left by a scheduler that died."""


class SavedMixin(LifecycleMixin):
    """``save``, ``saved``, the schedules, ``due``, ``start_firing``, ``start_saved``."""

    def save(
        self,
        source: str | os.PathLike[str],
        *,
        text: str | None = None,
        name: str | None = None,
        by: str,
        origin: str = "person",
    ) -> Any:
        """Store the recipe's text and the plan it compiles to as a new version of ``name``
        (default: the recipe's name). Saving again keeps every older version."""
        plan, recipe_text, _ = self.load(source, text=text)
        if recipe_text is None:
            raise UsageError(
                "only a recipe can be saved, not an actions.json: a saved recipe is compiled again each time it runs",
                hint="save the .recipe file",
            )
        name = name or plan.recipe.name
        _check_name(name, "recipe")
        if origin == "agent":
            refuse_agent_opt_out(plan)
        return self.store().save_recipe(
            name,
            source=recipe_text,
            plan_json=encode_plan(plan),
            plan_fingerprint=plan.fingerprint,
            by=by,
            origin=origin,
        )

    def saved(self, name: str, version: int | None = None) -> RecipeRecord:
        return self.store(create=False, readonly=True).get_recipe(name, version)

    def saved_recipes(self) -> list[Any]:
        return self.store(create=False, readonly=True).recipes_latest()

    def add_schedule(
        self,
        name: str,
        *,
        recipe: str,
        cron: str,
        tz: str = "UTC",
        inputs: Mapping[str, Any] | None = None,
        catch_up_s: float | None = None,
        by: str,
        origin: str = "person",
        version: int | None = None,
    ) -> Any:
        """Run the saved recipe ``recipe`` on a cron schedule: its latest version at each
        firing, or ``version`` only. A schedule an agent proposes starts paused (only a
        person enables it: ``resume_schedule``) and runs one version, the one it was
        proposed with (``version``, else the latest now), never a later one: a version
        saved after the proposal was never seen by the person who enables it. That version
        may not opt out of asking."""
        _check_name(name, "schedule")
        check(cron, tz)
        catch_up = DEFAULT_CATCH_UP_S if catch_up_s is None else float(catch_up_s)
        if not catch_up >= 0:
            raise UsageError("the catch-up window must be 0 seconds or more", catch_up_s=catch_up_s)
        store = self.store()
        saved = store.get_recipe(recipe, version)
        plan = check_stored_plan(saved.plan_json, saved.plan_fingerprint)
        resolve_inputs(plan, inputs or {})  # a run it could never start is refused now
        if origin == "agent":
            refuse_agent_opt_out(plan, what="schedule")
        now = self.clock()
        active = origin != "agent"
        record = ScheduleRecord(
            name=name, recipe=recipe, cron=cron, tz=tz, inputs_json=msgspec.json.encode(dict(inputs or {})).decode(),
            state="active" if active else "paused", catch_up_s=catch_up, next_due=next_after(cron, tz, now) if active else None,
            created_at=now, created_by=by, origin=origin, updated_at=now,
            recipe_version=saved.version if origin == "agent" or version is not None else None,
        )  # fmt: skip
        store.add_schedule(record)
        return record

    def pause_schedule(self, name: str, *, by: str) -> Any:
        store = self.store(create=False)
        if not store.set_schedule_state(name, "paused", expected=("active",), next_due=None, by=by, now=self.clock()):
            s = store.get_schedule(name)
            raise RefusedError(
                f"schedule {name!r} is already {s.state}; nothing was changed", schedule=name, state=s.state
            )
        return store.get_schedule(name)

    def resume_schedule(self, name: str, *, by: str) -> Any:
        """Enable a paused schedule; its next due time is counted from now (what was missed
        while paused is not run)."""
        store = self.store(create=False)
        s = store.get_schedule(name)
        now = self.clock()
        if not store.set_schedule_state(
            name, "active", expected=("paused",), next_due=next_after(s.cron, s.tz, now), by=by, now=now
        ):
            raise RefusedError(
                f"schedule {name!r} is already {store.get_schedule(name).state}; nothing was changed", schedule=name
            )
        return store.get_schedule(name)

    def remove_schedule(self, name: str, *, by: str) -> None:
        store = self.store(create=False)
        if not store.remove_schedule(name, by=by, now=self.clock()):
            raise RefusedError(f"there is no schedule {name!r}; nothing was changed", schedule=name)

    def schedules(self) -> list[Any]:
        return self.store(create=False, readonly=True).schedules()

    def firings(self, name: str, limit: int = 50) -> list[Any]:
        return self.store(create=False, readonly=True).firings(name, limit)

    def due(self, *, now: float | None = None, by: str = "scheduler") -> list[Any]:
        """Decide every due time reached by ``now`` (each exactly once, whoever else is
        deciding) and return the firings whose runs this caller must start, including
        firings left without a run by a scheduler that died (docs/serve.md)."""
        store = self.store()
        now = self.clock() if now is None else now
        to_start = list(store.orphan_firings(decided_before=now - ORPHAN_AFTER_S))
        for s in store.due_schedules(now):
            try:
                decisions, next_due = decide(s, now)
            except VodouError as exc:
                # a row that can no longer be read (a zone gone from tzdata, an edited row) stops
                # itself only: its due time is recorded failed, saying why, and it is due no more
                assert s.next_due is not None  # a schedule that is due has a due time
                store.decide_firing(
                    FiringRecord(s.name, s.next_due, "failed", now, by, None, exc.message), next_due=None
                )
                continue
            for i, d in enumerate(decisions):
                after = decisions[i + 1].due_at if i + 1 < len(decisions) else next_due
                f = firing(s, d, now=now, by=by, run_id=new_run_id() if d.outcome == "fired" else None)
                if not store.decide_firing(f, next_due=after):
                    break  # another scheduler is deciding this schedule
                if d.outcome == "fired":
                    to_start.append(f)
        return to_start

    @plain
    async def start_firing(
        self, f: Any, *, on_change: Callable[[str, str], None] | None = None, hub: Any = None
    ) -> RunReport | None:
        """Start the run a firing decided, under the id it reserved; None if another process
        started it first. A firing whose run cannot even be created is marked failed."""
        store = self.store()
        try:
            s, saved = await in_thread(self.firing_recipe, f)
            try:
                inputs = msgspec.json.decode(s.inputs_json, type=dict[str, Any])
            except (msgspec.DecodeError, msgspec.ValidationError) as exc:  # the row was edited in the store
                raise UsageError(
                    f"schedule {s.name!r}: its stored inputs are not a JSON object of inputs ({exc}); nothing was run",
                    hint="remove the schedule and add it again",
                ) from None
            return await self.start_saved(
                saved,
                inputs=inputs,
                actor=s.created_by,
                run_id=f.run_id,
                schedule=s.name,
                on_change=on_change,
                hub=hub,
                origin=s.origin,
            )
        except RefusedError as exc:
            if "already exists" in exc.message:
                return None  # the same firing was started by another process
            await in_thread(store.firing_failed, f.schedule, f.due_at, exc.message)
            raise
        except VodouError as exc:
            await in_thread(store.firing_failed, f.schedule, f.due_at, exc.message)
            raise

    def firing_recipe(self, f: Any) -> tuple[Any, Any]:
        """(schedule, saved recipe version) a firing runs: the version the schedule names,
        else the latest."""
        store = self.store()
        s = store.get_schedule(f.schedule)
        return s, store.get_recipe(s.recipe, s.recipe_version)

    @plain
    async def start_saved(
        self,
        saved: Any,
        *,
        inputs: Mapping[str, Any] | None = None,
        actor: str | None = None,
        run_id: str | None = None,
        schedule: str | None = None,
        model: str | None = None,
        on_change: Callable[[str, str], None] | None = None,
        hub: Any = None,
        origin: str = "person",
    ) -> RunReport:
        """Start a run of a saved recipe version (a RecipeRecord, or a name for the latest),
        compiled again from its text under the policy and servers in effect. ``origin="agent"``
        (a schedule an agent proposed): the plan that would run, as compiled now, may not
        opt out of asking."""
        if isinstance(saved, str):
            saved = self.store().get_recipe(saved)
        path = f"{saved.name}.recipe"
        plan, _, _ = self.load(path, text=saved.source)
        check_saved_text(saved, plan)  # the text is the one saved, not one edited in the store since
        if origin == "agent":
            refuse_agent_opt_out(plan, what="schedule")
        resolve_inputs(plan, inputs or {})
        async with self.prepare(path, text=saved.source, hub=hub) as prepared:
            prepared.path = None  # the text lives in the store, not in a file to compare with
            if origin == "agent":
                refuse_agent_opt_out(prepared.plan, what="schedule")
            return await self._start(prepared, inputs, actor, model, on_change, run_id, saved=saved, schedule=schedule)


def _check_name(name: str, what: str) -> None:
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._ -]{0,99}", name or ""):
        raise UsageError(
            f"{name!r} is not a usable {what} name",
            hint="letters, digits, spaces, '.', '_' and '-', starting with a letter or digit, at most 100",
            name=name,
        )
