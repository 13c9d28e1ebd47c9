"""From one sentence to a run, in the inbox: the New page and the recipe editor.

``GET /new`` asks for one sentence. ``POST /new`` drafts a recipe from it with the
very loop ``recipe author`` uses (``agents.drafting.draft``: the ``llm`` library, the
live tool catalogue, the compiler's errors fed back to the model) and shows the
recipe, its card and three buttons: Run once, Save + schedule (with the cron the
draft proposed, editable), Edit recipe. With no model configured it says so, in the
words ``recipe author`` uses, and opens the editor on a starting recipe.

``GET /edit`` (``?recipe=NAME`` for a saved one) and ``POST /edit`` are the editor:
every button is a plain form submit (``op``: preview, edit, run, save, schedule), so
it all works with scripts off. With scripts on, ``static/editor.js`` posts the text
as it is typed (debounced) with ``X-Preview: fragment`` and puts the answer, the
card or the errors, beside the editor. The card is the one the run pages show
(``pages.card_text``, from the one compiler); an error is the compiler's own
rendering (``file:line:col``, the source line, the caret, the hint), as the CLI
prints it.

**Whose recipe it is.** A model's draft is an agent's proposal (``origin="agent"``,
as ``recipe author --save`` stores it): it may not opt out of asking. The page
carries a signed digest of the draft's text; text that still gives it is the
model's, anything else is the person's own (``origin="person"``). Saving,
scheduling and starting go through the run API as the signed-in person
(``Runs.save``, ``Runs.add_schedule``, ``Service.start_text``), with that origin.
"""

from __future__ import annotations

import json
import time
import weakref
from importlib.resources import files
from typing import Any
from urllib.parse import quote

import trio
from starlette.requests import Request
from starlette.responses import HTMLResponse, PlainTextResponse, Response

from ..agents.catalogue import fetch_warm
from ..agents.checks import check_text
from ..agents.drafting import choose_model, draft, parse_schedule
from ..errors import ModelError, UsageError, VodouError
from ..plan import ApprovalNode
from ..scheduler import check as check_cron
from . import pages
from .context import Me, Web
from .handlers import see
from .identity import sha256

CATALOGUE_TTL_S = 60.0
"""How long the warm servers' tool list is kept before it is listed again."""
PREVIEW_HEADER = "x-preview"
"""Sent by ``editor.js``: answer with the card panel alone."""

STARTER = """\
recipe "post to daily"
inputs:
  text = "hello from the inbox"
post: slack.slack_post_message {"channel": "#daily", "text": "{text}"}
"""
"""What the editor opens on when there is no draft: one effect, so it shows the card's question."""


ASSETS = {"editor.js": "text/javascript", "editor.css": "text/css"}
"""The editor's own files under ``static/`` (no inline script: the CSP allows scripts from this site only)."""
_BODIES = {name: (files("vodou_engine.web") / "static" / name).read_bytes() for name in ASSETS}
"""Read once, when the app is built, so serving them never touches the disk on the trio thread."""


async def asset(request: Request) -> Response:
    """``GET /static/editor.js`` and ``/static/editor.css``."""
    name = request.url.path.rsplit("/", 1)[-1]
    if name not in _BODIES:
        return PlainTextResponse("not found\n", status_code=404)
    return Response(_BODIES[name], media_type=ASSETS[name], headers={"cache-control": "max-age=3600"})


# --- compiling for the page ------------------------------------------------------------------------


def preview(
    text: str, *, policy: Any, catalogue: Any = None, servers: Any = None, agent: bool, name: str | None = None
) -> dict[str, Any]:
    """What the card panel shows for ``text``: the card (as the run pages render it) when it
    compiles, every error as the compiler renders it, the ``# schedule:`` line understood.
    Pure and thread-safe: ``benchmarks/editor_bench.py`` times it."""
    checked = check_text(text, name=name or "new", policy=policy, catalogue=catalogue, servers=servers, agent=agent)
    schedule, problem = parse_schedule(text)
    if problem is not None:
        problem.path = f"{name or 'new'}.recipe"
        checked.add(problem)
    plan = checked.plan
    return {
        "ok": checked.ok,
        "card": pages.card_text(plan) if plan is not None else None,
        "recipe": plan.recipe.name if plan is not None else None,
        "errors": [
            {"text": str(exc), "line": getattr(exc, "line", None), "column": getattr(exc, "column", None)}
            for exc in checked.exceptions
        ],
        "warnings": checked.warnings,
        "schedule": schedule,
        "inputs": []
        if plan is None
        else [
            {
                "name": i.name,
                "required": i.required,
                "default": None if i.required else json.dumps(i.default, ensure_ascii=False),
            }
            for i in plan.inputs
        ],
        "steps": 0 if plan is None else sum(1 for n in plan.nodes if not isinstance(n, ApprovalNode)),
    }


class Authoring:
    """Per app: the warm servers' tool catalogue, listed once and kept a minute."""

    def __init__(self, web: Web):
        self.web = web
        self._catalogue: Any = None
        self._lock = trio.Lock()

    async def catalogue(self) -> Any:
        async with self._lock:
            cat = self._catalogue
            if cat is None or time.time() - cat.fetched_at > CATALOGUE_TTL_S:
                svc = self.web.svc
                cat = await fetch_warm(svc.pool, svc.server_set, svc.policy)
                self._catalogue = cat
            return cat

    async def preview(self, text: str, *, agent: bool, name: str | None) -> dict[str, Any]:
        cat = await self.catalogue()
        svc = self.web.svc
        return await trio.to_thread.run_sync(
            lambda: preview(
                text, policy=svc.policy, catalogue=cat, servers=svc.server_set, agent=agent, name=name or None
            )
        )


_AUTHORING: weakref.WeakKeyDictionary[Web, Authoring] = weakref.WeakKeyDictionary()


def authoring(web: Web) -> Authoring:
    """The app's :class:`Authoring`, made on first use (on the trio thread: no lock needed)."""
    found = _AUTHORING.get(web)
    if found is None:
        found = _AUTHORING[web] = Authoring(web)
    return found


# --- whose text it is -------------------------------------------------------------------------------


def draft_seal(web: Web, text: str) -> str:
    """The signed digest of a model's draft: text that still gives it is the model's."""
    assert web.signer is not None  # set when the app starts
    return web.signer.sign(sha256(text), "draft")


def origin_of(web: Web, text: str, seal: str | None) -> str:
    assert web.signer is not None
    return "agent" if seal and web.signer.unsign(seal, "draft") == sha256(text) else "person"


# --- pages ------------------------------------------------------------------------------------------


async def _me(web: Web, request: Request) -> Me | None:
    return await web.read(lambda runs: web.me(request, runs))


async def new_page(request: Request) -> Response:
    """``GET /new``: one sentence."""
    web: Web = request.app.state.web
    me = await _me(web, request)
    if me is None:
        return web.not_signed_in(request)
    try:
        model = (await trio.to_thread.run_sync(choose_model, None)).model_id
        missing = None
    except UsageError as exc:
        model, missing = None, f"{exc.message}. To draft from a sentence, {exc.hint}." if exc.hint else exc.message
    return web.render(request, "new.html", me=me, sentence="", problem=None, model=model, missing=missing)


async def editor_page(request: Request) -> Response:
    """``GET /edit``: the editor on a saved recipe (``?recipe=NAME``), else on a starting recipe."""
    web: Web = request.app.state.web
    me = await _me(web, request)
    if me is None:
        return web.not_signed_in(request)
    name = request.query_params.get("recipe")
    text, seal, origin = STARTER, "", "person"
    if name:
        try:
            rec = await web.read(lambda runs: runs.saved(name))
        except VodouError as exc:
            return web.error(request, me, exc, back="/recipes")
        text = rec.source
        if rec.origin == "agent":  # saved unchanged, it stays the agent's proposal
            seal, origin = draft_seal(web, text), "agent"
    return await _editor(web, request, me, text=text, name=name or "", seal=seal, mode="edit", origin=origin)


async def _editor(
    web: Web,
    request: Request,
    me: Me,
    *,
    text: str,
    name: str,
    seal: str,
    mode: str,
    origin: str,
    status: int = 200,
    **ctx: Any,
) -> Response:
    shown = await authoring(web).preview(text, agent=origin == "agent", name=name or None)
    schedule = shown["schedule"] or {}
    ctx.setdefault("cron", schedule.get("cron", ""))
    ctx.setdefault("tz", schedule.get("tz", "UTC"))
    ctx.setdefault("notice", None)
    ctx.setdefault("model", None)
    ctx.setdefault("sentence", "")
    ctx.setdefault("replies", 0)
    ctx.setdefault("problem", None)
    return web.render(
        request,
        "author.html",
        me=me,
        status=status,
        text=text,
        name=name,
        seal=seal,
        mode=mode,
        origin=origin,
        p=shown,
        **ctx,
    )


# --- drafting ---------------------------------------------------------------------------------------


async def draft_action(web: Web, request: Request, me: Me, form: dict[str, str]) -> Response:
    """``POST /new``: draft from the sentence, then the recipe, its card and the three buttons."""
    sentence = (form.get("sentence") or "").strip()
    if not sentence:
        return web.render(
            request,
            "new.html",
            me=me,
            status=400,
            sentence="",
            problem="Say what the recipe should do, in one sentence.",
        )

    async def starter(notice: dict[str, str]) -> Response:
        """The editor on a starting recipe, the person's, saying why nothing was drafted."""
        return await _editor(
            web, request, me, text=STARTER, name="", seal="", mode="edit", origin="person", notice=notice,
            sentence=sentence,
        )  # fmt: skip

    try:
        model = await trio.to_thread.run_sync(choose_model, None)
    except UsageError as exc:
        return await starter(
            {
                "title": "No model is configured to draft recipes with, so nothing was drafted.",
                "text": f"{exc.message}. To draft from a sentence, {exc.hint}." if exc.hint else exc.message,
                "after": "Meanwhile, here is a starting recipe to edit: the card beside it follows what you type.",
            }
        )
    svc = web.svc
    cat = await authoring(web).catalogue()
    try:
        result = await trio.to_thread.run_sync(
            lambda: draft(sentence, model=model, catalogue=cat, policy=svc.policy, servers=svc.server_set)
        )
    except (ModelError, UsageError) as exc:
        return await starter(
            {
                "title": "The model could not draft a recipe.",
                "text": str(exc),
                "after": "Here is a starting recipe to edit.",
            }
        )
    text = result.recipe or STARTER
    seal = draft_seal(web, text) if result.recipe else ""
    problem = None
    if not result.ok:
        problem = (
            f"The draft still does not compile after {len(result.rounds)} replies from {result.model_id}; "
            "nothing was run or saved. Fix it here: the errors are beside it."
        )
    return await _editor(
        web, request, me, text=text, name="", seal=seal, origin="agent" if seal else "person",
        mode="view" if result.ok else "edit", model=result.model_id, sentence=sentence, replies=len(result.rounds),
        problem=problem,
    )  # fmt: skip


# --- the editor's buttons ----------------------------------------------------------------------------


async def edit_action(web: Web, request: Request, me: Me, form: dict[str, str]) -> Response:
    """``POST /edit``: ``op`` preview (the card panel alone for ``editor.js``), edit, run, save, schedule."""
    text = (form.get("text") or "").replace("\r\n", "\n")  # a textarea sends CRLF; the form is bounded at 64 KiB
    name = (form.get("name") or "").strip()
    seal = form.get("draft") or ""
    origin = origin_of(web, text, seal)
    seal = seal if origin == "agent" else ""
    op = form.get("op") or "preview"
    keep: dict[str, Any] = {
        "model": form.get("model") or None,
        "sentence": form.get("sentence") or "",
        "cron": (form.get("cron") or "").strip(),
        "tz": (form.get("tz") or "").strip() or "UTC",
    }
    if op == "preview" and request.headers.get(PREVIEW_HEADER) == "fragment":
        shown = await authoring(web).preview(text, agent=origin == "agent", name=name or None)
        html = web.env.get_template("author_preview.html").render(p=shown, origin=origin, model=keep["model"])
        return HTMLResponse(html)
    if op in ("preview", "edit"):
        return await _editor(web, request, me, text=text, name=name, seal=seal, mode="edit", origin=origin, **keep)
    shown = await authoring(web).preview(text, agent=origin == "agent", name=name or None)
    if not shown["ok"]:
        return await _editor(
            web, request, me, text=text, name=name, seal=seal, mode="edit", origin=origin, status=400,
            problem="It does not compile yet: fix what is shown beside the editor; nothing was run or saved.", **keep,
        )  # fmt: skip
    try:
        if op == "run":
            inputs = pages.parse_inputs(form)
            return await _run_once(web, me, text, name or shown["recipe"] or "new", origin, inputs)
        if op in ("save", "schedule"):
            return await _save(
                web, me, text, name, origin, schedule=op == "schedule", cron=str(keep["cron"]), tz=str(keep["tz"])
            )
    except VodouError as exc:
        await web.refused(me, f"author.{op}", exc, recipe=name or shown["recipe"])
        return await _editor(
            web, request, me, text=text, name=name, seal=seal, mode="edit", origin=origin,
            status=400, problem=str(exc), **keep,
        )  # fmt: skip
    return web.error(
        request, me, UsageError(f"unknown editor action {op!r}", hint="use the page's buttons"), back="/edit"
    )


async def _run_once(web: Web, me: Me, text: str, name: str, origin: str, inputs: dict[str, Any]) -> Response:
    svc = web.svc
    source = f"{name}.recipe"
    if getattr(svc, "workers", False):
        run_id = await web.write(
            lambda runs: runs.queue(source, text=text, inputs=inputs, actor=me.name, origin=origin)
        )
        return see(f"/runs?done=started-queued&run={quote(run_id)}")
    run_id, _ = await svc.start_text(source, text, inputs=inputs, actor=me.name, origin=origin)
    return see(f"/runs/{quote(run_id)}?done=started")


async def _save(web: Web, me: Me, text: str, name: str, origin: str, *, schedule: bool, cron: str, tz: str) -> Response:
    if schedule:
        if not cron:
            raise UsageError(
                "Save + schedule needs a cron schedule; nothing was saved",
                hint="write five cron fields, e.g. `0 8 * * 1-5` for weekdays at 8",
            )
        check_cron(cron, tz)  # before anything is saved

    def save(runs: Any) -> tuple[Any, Any]:
        saved = runs.save(f"{name or 'new'}.recipe", text=text, name=name or None, by=me.name, origin=origin)
        record = None
        if schedule:  # the person chose the schedule on this page: theirs, active
            record = runs.add_schedule(saved.name, recipe=saved.name, cron=cron, tz=tz, by=me.name, origin="person")
        return saved, record

    saved, record = await web.write(save)
    if record is not None:
        return see(f"/schedules?done=added#s-{quote(record.name)}")
    return see(f"/recipes/{quote(saved.name)}?saved={saved.version}")
