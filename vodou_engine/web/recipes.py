"""Saved recipes and their schedules, in the inbox.

Pages: the saved recipes with their plan cards, one recipe, the schedules.
Actions: start a saved recipe (its ``input:NAME`` fields checked first, so a
run that could not start is refused here), and add, pause, resume or remove a
schedule. Each is done by the run API, as the person signed in.
"""

from __future__ import annotations

import difflib
from typing import Any
from urllib.parse import quote

from starlette.requests import Request
from starlette.responses import Response

from ..errors import UsageError, VodouError
from ..runs import resolve_inputs
from . import pages
from .context import Me, Web
from .handlers import Action, see

# --- pages ------------------------------------------------------------------------------------------------


def recipes(runs: Any, request: Request, me: Me, now: float) -> tuple[str, dict[str, Any]]:
    return "recipes.html", {"recipes": pages.recipes(runs, now)}


def recipe(runs: Any, request: Request, me: Me, now: float) -> tuple[str, dict[str, Any]]:
    version = request.query_params.get("version")
    if version is not None and not version.isdigit():
        raise UsageError(f"version {version!r} is not a version number", hint="versions are 1, 2, 3…")
    r = pages.recipe(runs, request.path_params["name"], now, version=int(version) if version else None)
    saved = request.query_params.get("saved")
    return "recipe.html", {
        "r": r,
        "changes": changes(runs, r["name"], r["version"]),
        "saved_notice": f"Saved as version {saved}." if saved and saved.isdigit() else None,
    }


def changes(runs: Any, name: str, version: int) -> dict[str, Any] | None:
    """What ``version`` changed from the one before it: a unified diff (``difflib``), each
    side with who saved it and whether a person wrote it or an agent proposed it (the
    store's ``origin``). None for a first version."""
    if version <= 1:
        return None
    new, old = runs.saved(name, version), runs.saved(name, version - 1)
    lines = list(
        difflib.unified_diff(
            old.source.splitlines(), new.source.splitlines(), f"v{old.version}", f"v{new.version}", lineterm="", n=2
        )
    )
    kinds = []
    for line in lines[2:]:
        kind = (
            "at" if line.startswith("@@") else "add" if line.startswith("+") else "del" if line.startswith("-") else ""
        )
        kinds.append({"kind": kind, "text": line})
    return {
        "old": {"version": old.version, "by": old.saved_by, "origin": old.origin},
        "new": {"version": new.version, "by": new.saved_by, "origin": new.origin},
        "lines": kinds,
    }


def schedules(runs: Any, request: Request, me: Me, now: float) -> tuple[str, dict[str, Any]]:
    return "schedules.html", {
        "schedules": pages.schedules(runs, now),
        "recipes": [r.name for r in runs.saved_recipes()],
        "chosen": request.query_params.get("recipe"),
    }


# --- starting a saved recipe ----------------------------------------------------------------------------


async def run_recipe(web: Web, request: Request, me: Me, form: dict[str, str]) -> Response:
    name = request.path_params["name"]
    try:
        inputs = pages.parse_inputs(form)

        def check(runs: Any) -> None:
            resolve_inputs(pages.stored_plan(runs.saved(name)), inputs)  # a run that could not start is refused here

        await web.read(check)
        run_id = web.svc.start_saved(name, inputs=inputs, actor=me.name)
    except VodouError as exc:
        await web.refused(me, "run", exc, recipe=name)
        return web.error(request, me, exc, back=f"/recipes/{quote(name)}")
    if getattr(web.svc, "workers", False):
        return see(f"/runs?done=started-queued&run={quote(run_id)}")
    return see(f"/runs/{quote(run_id)}?done=started")


# --- schedules --------------------------------------------------------------------------------------------


async def add_schedule(web: Web, request: Request, me: Me, form: dict[str, str]) -> Response:
    try:
        catch_up = form.get("catch_up_min", "").strip()
        try:
            catch_up_s = None if not catch_up else float(catch_up) * 60
        except ValueError:
            raise UsageError(f"catch-up {catch_up!r} is not a number of minutes") from None
        inputs = pages.parse_pairs(form.get("inputs", ""))
        await web.write(lambda runs: runs.add_schedule(
            form.get("name", "").strip(), recipe=form.get("recipe", ""), cron=form.get("cron", "").strip(), tz=form.get("tz", "").strip() or "UTC",
            inputs=inputs, catch_up_s=catch_up_s, by=me.name, origin="person",
        ))  # fmt: skip
    except VodouError as exc:
        await web.refused(me, "schedule.add", exc, schedule=form.get("name"))
        return web.error(request, me, exc, back="/schedules")
    return see("/schedules?done=added")


def schedule_action(verb: str) -> Action:
    async def change(web: Web, request: Request, me: Me, form: dict[str, str]) -> Response:
        name = request.path_params["name"]
        try:
            if verb == "pause":
                await web.write(lambda runs: runs.pause_schedule(name, by=me.name))
            elif verb == "resume":
                await web.write(lambda runs: runs.resume_schedule(name, by=me.name))
            else:
                await web.write(lambda runs: runs.remove_schedule(name, by=me.name))
        except VodouError as exc:
            await web.refused(me, f"schedule.{verb}", exc, schedule=name)
            return web.error(request, me, exc, back="/schedules")
        return see("/schedules?done=" + {"pause": "paused", "resume": "enabled", "remove": "removed"}[verb])

    change.__name__ = f"schedule_{verb}"
    return change
