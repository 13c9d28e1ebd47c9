"""The inbox, the run pages, and the decisions made on them.

Pages: the inbox (questions waiting for me, then for others), run history and
one run. Actions: approve or reject a card, answer a server's question, and resume a run. A form names the
card it answers (step, approval, fingerprint); one for a question that has
since been asked again is refused here, and the run API refuses a changed
fingerprint too. Every decision is handed to the service, which runs the
approved effect on its warm servers.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from starlette.requests import Request
from starlette.responses import Response

from ..errors import StaleError, UnknownRunError, UsageError, VodouError
from ..states import RUN_STATES
from . import live, pages
from .context import Me, Web
from .handlers import see

# --- pages ------------------------------------------------------------------------------------------------


def inbox(runs: Any, request: Request, me: Me, now: float) -> tuple[str, dict[str, Any]]:
    token = live.inbox_token(runs.store(create=False, readonly=True))  # before the page: a change between shows
    return "inbox.html", {**pages.inbox(runs, me.name, now), "live": live.inbox_live(token)}


def history(runs: Any, request: Request, me: Me, now: float) -> tuple[str, dict[str, Any]]:
    state = request.query_params.get("state") or None
    if state is not None and state not in RUN_STATES:
        raise UsageError(f"there is no run state {state!r}", hint="states: " + ", ".join(sorted(RUN_STATES)))
    return "runs.html", {"runs": pages.history(runs, now, state), "state": state, "states": sorted(RUN_STATES)}


def run_page(runs: Any, request: Request, me: Me, now: float) -> tuple[str, dict[str, Any]]:
    run_id = request.path_params["run"]
    try:
        token = live.run_token(runs.store(create=False, readonly=True), run_id)
        data = pages.run_page(runs, run_id, me.name, now)
    except UnknownRunError:
        if request.query_params.get("done") == "started":
            return "starting.html", {"run": run_id, "live": live.run_live(run_id, live.NOT_YET)}
        raise
    return "run.html", {"run": run_id, **data, "live": live.run_live(run_id, token)}


# --- decisions ------------------------------------------------------------------------------------------


def _card_fields(form: dict[str, str]) -> tuple[str, str, str]:
    step, approval, fingerprint = form.get("step", ""), form.get("approval", ""), form.get("fingerprint", "")
    if not step or not fingerprint:
        raise UsageError(
            "the form names no step or fingerprint; nothing was changed", hint="use the form on the run's page"
        )
    return step, approval, fingerprint


async def _still_the_card(web: Web, run_id: str, step: str, approval: str, fingerprint: str) -> None:
    """Refuse a form for a question that has since been asked again (the run API refuses a
    changed fingerprint too; this also catches a card asked again with the same payload)."""
    card = await web.read(lambda runs: runs.pending(run_id, step))
    if approval and card.approval != approval:
        raise StaleError(
            f"the question for `{step}` was asked again since the card you read (fingerprint {fingerprint}); "
            f"the current card has fingerprint {card.fingerprint}; nothing was changed",
            hint="read the current card on the run's page and decide again",
            run=run_id, step=step, fingerprint=card.fingerprint, given=fingerprint, known=True,
        )  # fmt: skip


async def approve(web: Web, request: Request, me: Me, form: dict[str, str]) -> Response:
    run_id = request.path_params["run"]
    try:
        step, approval, fingerprint = _card_fields(form)
        await _still_the_card(web, run_id, step, approval, fingerprint)
        items = ticked_items(form)
        await web.svc.approve(run_id, step, actor=me.name, fingerprint=fingerprint, proof="web-session", items=items)
    except VodouError as exc:
        if exc.code == "refused" and not web.svc.accepting:
            return web.render(
                request,
                "error.html",
                me=me,
                status=503,
                title="Recorded, not yet run",
                message="Your approval was recorded, but this inbox is stopping; the run goes on when it is next driven (the inbox starting again, or `recipe resume`).",
                hint=None,
                code=exc.code,
                back=f"/runs/{run_id}",
            )
        await web.refused(me, "approve", exc, run=run_id, step=form.get("step"), fingerprint=form.get("fingerprint"))
        return web.error(request, me, exc, back=f"/runs/{run_id}", run=run_id)
    return see(
        f"/runs/{quote(run_id)}?done=" + ("approved-queued" if getattr(web.svc, "workers", False) else "approved")
    )


def ticked_items(form: dict[str, str]) -> list[int] | None:
    """A batch card's ticked items (``item.N`` boxes; a box left unticked is not sent), or
    None for a card that is no batch. None ticked is an empty list, which the run API
    refuses, saying to reject instead."""
    if "batch" not in form:
        return None
    items = []
    for key in form:
        if key.startswith("item."):
            try:
                items.append(int(key[5:]))
            except ValueError:
                raise UsageError(
                    f"the form names an item {key[5:]!r}, not an item number; nothing was changed",
                    hint="use the form on the run's page",
                ) from None
    return sorted(items)


async def answer(web: Web, request: Request, me: Me, form: dict[str, str]) -> Response:
    """A server's question answered from its form: each field typed as its schema says (the run
    API checks the whole against the schema), or declined, or cancelled."""
    run_id = request.path_params["run"]
    try:
        step, approval, fingerprint = _card_fields(form)
        await _still_the_card(web, run_id, step, approval, fingerprint)
        card = await web.read(lambda runs: runs.pending(run_id, step))
        action = form.get("action", "accept")
        content = answer_fields(card.asks or {}, form) if action == "accept" else None
        await web.svc.answer(
            run_id, step, actor=me.name, action=action, content=content, fingerprint=fingerprint, proof="web-session"
        )
    except VodouError as exc:
        await web.refused(me, "answer", exc, run=run_id, step=form.get("step"), fingerprint=form.get("fingerprint"))
        return web.error(request, me, exc, back=f"/runs/{run_id}", run=run_id)
    return see(f"/runs/{quote(run_id)}?done=answered")


def answer_fields(asks: dict[str, Any], form: dict[str, str]) -> dict[str, Any]:
    """The answer's fields from the form (``field.NAME``), typed by the schema the server asked
    with; an empty field is left out (a required one is then refused by the schema), an
    unchecked box is false."""
    schema = asks.get("schema") or {}
    content: dict[str, Any] = {}
    for name, prop in (schema.get("properties") or {}).items():
        prop = prop if isinstance(prop, dict) else {}
        kind = prop.get("type")
        raw = form.get(f"field.{name}")
        if kind == "boolean":
            content[name] = raw is not None
            continue
        text = (raw or "").strip()
        if not text:
            continue
        if kind in ("integer", "number"):
            try:
                content[name] = int(text) if kind == "integer" else float(text)
            except ValueError:
                raise UsageError(
                    f"`{name}` must be a{'n integer' if kind == 'integer' else ' number'}, not {text!r}; nothing was changed"
                ) from None
        elif kind == "array":
            content[name] = [part.strip() for part in text.split(",") if part.strip()]
        else:
            content[name] = text
    return content


async def reject(web: Web, request: Request, me: Me, form: dict[str, str]) -> Response:
    run_id = request.path_params["run"]
    reason = (form.get("reason") or "").strip()[:2000] or None
    try:
        step, approval, fingerprint = _card_fields(form)
        await _still_the_card(web, run_id, step, approval, fingerprint)
        await web.svc.reject(run_id, step, actor=me.name, reason=reason, fingerprint=fingerprint, proof="web-session")
    except VodouError as exc:
        await web.refused(me, "reject", exc, run=run_id, step=form.get("step"), fingerprint=form.get("fingerprint"))
        return web.error(request, me, exc, back=f"/runs/{run_id}", run=run_id)
    return see(f"/runs/{quote(run_id)}?done=rejected")


async def resume(web: Web, request: Request, me: Me, form: dict[str, str]) -> Response:
    run_id = request.path_params["run"]
    try:
        await web.read(lambda runs: runs.show(run_id))  # an unknown run is refused here
        resume_in_service(web.svc, run_id)
    except VodouError as exc:
        await web.refused(me, "resume", exc, run=run_id)
        return web.error(request, me, exc, back=f"/runs/{run_id}")
    return see(f"/runs/{quote(run_id)}?done=" + ("resumed-queued" if getattr(web.svc, "workers", False) else "resumed"))


def resume_in_service(svc: Any, run_id: str) -> None:
    """Drive the run again on the service's warm servers, in the background."""
    svc.resume(run_id)
