"""The inbox as an ASGI app: ``create_app(service, config)``.

Routes (every page but sign-in needs a session; every POST needs the form token):

====== ============================== =====================================================
GET    ``/``                          the inbox: questions waiting for me, then for others
GET    ``/runs``                      run history (``?state=``)
GET    ``/runs/{run}``                a run: its cards, payloads, fingerprints, preview and
                                      check, who may decide, the forms; steps, timings, charts
POST   ``/runs/{run}/approve``        ``step``, ``approval``, ``fingerprint``: approve that card
POST   ``/runs/{run}/reject``         ``step``, ``approval``, ``fingerprint``, ``reason``
POST   ``/runs/{run}/resume``         drive it again (an expired question is asked again)
GET    ``/recipes``, ``/recipes/{n}`` saved recipes with their plan cards
POST   ``/recipes/{name}/run``        start it (``input:NAME`` fields)
GET    ``/schedules``                 schedules and their last due times
POST   ``/schedules``                 add one; ``/schedules/{n}/pause|resume|remove``
GET    ``/signin``                    ``?token=``: the sign-in page for a one-time link
POST   ``/signin``                    spend the link, get a session cookie
POST   ``/signout``                   end the session
GET    ``/static/app.css``, ``/healthz``
any    ``/mcp``                       the agent MCP server (streamable HTTP), for a bearer token
                                      from ``recipe agent add``: no session, no form token
                                      (``agents.py``)
====== ============================== =====================================================

A GET reads through a read-only store connection, so it cannot change
anything even by mistake. The service runs in the app's lifespan, in the
same trio process: an approval given here is recorded by the run API and
its effect runs on the service's warm servers.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, Awaitable, Callable
from urllib.parse import parse_qs, quote, urlsplit

import jinja2
import trio
from markupsafe import Markup, escape
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, PlainTextResponse, RedirectResponse, Response
from starlette.routing import Route

from ..errors import NotAllowedError, RefusedError, StaleError, UsageError, VodouError
from . import pages
from .config import WebConfig
from .agents import MAX_BODY_BYTES as MCP_MAX_BYTES
from .agents import MCP_PATH, AgentsOverHTTP
from .identity import PRE_COOKIE, SESSION_COOKIE, Signer, new_secret, sha256

logger = logging.getLogger("vodou_engine.web")

MAX_FORM_BYTES = 64 * 1024
CSP = "default-src 'none'; style-src 'self'; img-src 'self' data:; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
SECURITY_HEADERS = [
    (b"content-security-policy", CSP.encode()),
    (b"x-frame-options", b"DENY"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"same-origin"),
    (b"cross-origin-opener-policy", b"same-origin"),
    (b"cross-origin-resource-policy", b"same-origin"),
    (b"permissions-policy", b"camera=(), microphone=(), geolocation=(), payment=()"),
]

DONE = {
    "approved": "Approved. The effect runs in the serving process, on its warm servers; this page shows how it ends.",
    "rejected": "Rejected. The run is declined; nothing after that step runs.",
    "started": "Started. It runs in the serving process; this page shows where it stands.",
    "resumed": "Resumed. A question that expired is asked again.",
    "approved-queued": "Approved. A worker drives the run on (`recipe worker`); this page shows how it ends.",
    "resumed-queued": "Queued: a worker drives the run on (`recipe worker`); a question that expired is asked again.",
    "started-queued": "Queued: a worker starts the run (`recipe worker`); it is listed here once it has started.",
    "added": "Schedule added.",
    "paused": "Schedule paused: no due time fires until it is resumed.",
    "enabled": "Schedule resumed: its next due time is counted from now.",
    "removed": "Schedule removed.",
}


class StorePool:
    """Store connections kept between requests (opening one costs about 2 ms): a request
    takes one for its worker thread and gives it back; one that saw an error is closed."""

    def __init__(self, location: Any, *, readonly: bool, keep: int = 8):
        self.location = location
        self.readonly = readonly
        self.keep = keep
        self._free: list[Any] = []
        self._lock = threading.Lock()

    def take(self) -> Any:
        with self._lock:
            if self._free:
                return self._free.pop()
        from ..store import open_store

        return open_store(None if self.location is None else os.fspath(self.location), create=False, readonly=self.readonly)

    def give(self, store: Any, *, reuse: bool) -> None:
        if reuse:
            with self._lock:
                if len(self._free) < self.keep:
                    self._free.append(store)
                    return
        store.close()

    def close(self) -> None:
        with self._lock:
            free, self._free = self._free, []
        for store in free:
            store.close()


@dataclass
class Me:
    """The signed-in person: a name from the store's approvers, and this session."""

    name: str
    sid: str
    csrf: str


class Web:
    """What every handler shares: the service, the configuration, the signer, the templates."""

    def __init__(self, service: Any, config: WebConfig, *, manage_service: bool):
        self.svc = service
        self.cfg = config
        self.manage_service = manage_service
        self.signer: Signer | None = None
        self.hosts = {h.lower() for h in config.hosts()}
        self.env = templates()
        from importlib.resources import files

        self.css = (files("vodou_engine.web") / "static" / "app.css").read_bytes()
        self.port: int | None = None
        """The port actually bound (``--port 0`` picks one)."""
        location = service.store_location
        self.readers = StorePool(location, readonly=True)
        self.writers = StorePool(location, readonly=False)

    # --- the store, on worker threads -------------------------------------------------------
    async def read(self, fn: Callable[[Any], Any]) -> Any:
        """``fn(runs)`` on a worker thread, over a read-only store connection."""
        return await trio.to_thread.run_sync(self._with_runs, self.readers, fn)

    async def write(self, fn: Callable[[Any], Any]) -> Any:
        """``fn(runs)`` on a worker thread, over a store connection that may write."""
        return await trio.to_thread.run_sync(self._with_runs, self.writers, fn)

    def _with_runs(self, pool: StorePool, fn: Callable[[Any], Any]) -> Any:
        from ..runs import Runs

        store = pool.take()
        ok = False
        try:
            svc = self.svc
            result = fn(Runs(store=store, servers=svc.server_set, policy=svc.policy, clock=svc.clock))
            ok = True
            return result
        finally:
            pool.give(store, reuse=ok)

    def me(self, request: Request, runs: Any) -> Me | None:
        sid = self.signer.unsign(request.cookies.get(SESSION_COOKIE))
        if sid is None:
            return None
        session = runs.store(create=False).get_web_session(sha256(sid), now=time.time())
        return None if session is None else Me(session.name, sid, self.signer.form_token(sid))

    async def refused(self, me: Me | None, action: str, exc: VodouError | str, *, run: str | None = None, **data: Any) -> None:
        """Every refused attempt goes to the store-wide audit log (and the run's own log
        already has what the store itself refused)."""
        detail = {"action": action, **data}
        if isinstance(exc, VodouError):
            detail.update(code=exc.code, message=exc.message)
        else:
            detail.update(code="web.refused", message=exc)
        try:
            await self.write(lambda runs: runs.store().audit("web.refused", actor=me.name if me else None, run_id=run, data=detail))
        except Exception:  # noqa: BLE001 - the refusal stands even if it cannot be logged
            logger.exception("could not write the audit row for a refused %s", action)

    # --- responses ----------------------------------------------------------------------------
    def render(self, request: Request, template: str, *, me: Me | None, status: int = 200, **ctx: Any) -> HTMLResponse:
        done = request.query_params.get("done")
        html = self.env.get_template(template).render(me=me, request_path=request.url.path, done=DONE.get(done or ""), **ctx)
        return HTMLResponse(html, status_code=status)

    def error(self, request: Request, me: Me | None, exc: VodouError, *, back: str | None = None, title: str | None = None, **ctx: Any) -> HTMLResponse:
        status = status_for(exc)
        title = title or {403: "Not allowed", 404: "Not found", 400: "That cannot work", 409: "Refused"}.get(status, "Something failed")
        return self.render(request, "error.html", me=me, status=status, title=title, message=exc.message, hint=exc.hint, code=exc.code, back=back, **ctx)

    def not_signed_in(self, request: Request) -> Response:
        here = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        if request.headers.get("sec-fetch-site") == "cross-site":
            # The session cookie is SameSite=Strict: a link followed from another site
            # (a mail, a chat) arrives without it. Loading the page again from here sends it.
            return self.render(request, "reload.html", me=None, target=here)
        return RedirectResponse("/signin?next=" + quote(here, safe="/"), status_code=303)

    def form_refused(self, request: Request, me: Me | None) -> HTMLResponse:
        why = "You are not signed in (or your session ended)." if me is None else "This form is not from this inbox, or is from an older session."
        return self.render(request, "error.html", me=me, status=403, title="Form refused", message=why + " Nothing was changed.", hint="open the page again and use its form", code="web.form", back="/")

    async def form(self, request: Request) -> dict[str, str] | Response:
        if request.headers.get("content-type", "").split(";")[0].strip().lower() != "application/x-www-form-urlencoded":
            return PlainTextResponse("forms only (application/x-www-form-urlencoded)\n", status_code=415)
        body = bytearray()
        async for chunk in request.stream():
            body += chunk
            if len(body) > MAX_FORM_BYTES:
                return PlainTextResponse("form too large\n", status_code=413)
        try:
            parsed = parse_qs(body.decode("utf-8"), keep_blank_values=True, max_num_fields=200, strict_parsing=False)
        except (UnicodeDecodeError, ValueError):
            return PlainTextResponse("unreadable form\n", status_code=400)
        return {k: v[-1] for k, v in parsed.items()}


def templates() -> jinja2.Environment:
    """The pages' templates: every value escaped for HTML and, before that, made visible
    (:func:`_shown`), so a page shows what the terminal shows."""
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("vodou_engine.web", "templates"),
        autoescape=True,
        trim_blocks=True,
        lstrip_blocks=True,
        finalize=_shown,
        undefined=jinja2.StrictUndefined,
    )
    env.globals["csrf_field"] = _csrf_field
    return env


def _shown(value: Any) -> Any:
    """Every value a template prints: text with its invisible characters made visible."""
    if value is None:
        return ""
    if isinstance(value, str) and not isinstance(value, Markup):
        return pages.visible(value)
    return value


@jinja2.pass_context
def _csrf_field(ctx: Any) -> Markup:
    """The form token of the signed-in session, as a hidden field (every form has one)."""
    me = ctx.get("me")
    return Markup(f'<input type="hidden" name="csrf" value="{escape(me.csrf)}">') if me else Markup("")


def status_for(exc: VodouError) -> int:
    if isinstance(exc, NotAllowedError) or exc.code == "identity.refused":
        return 403
    if exc.code == "run.unknown":
        return 404
    if isinstance(exc, RefusedError):
        return 409
    if isinstance(exc, UsageError) or exc.code in ("recipe.invalid", "usage"):
        return 400
    return 500


def safe_next(value: str | None) -> str:
    """Only a path on this site (never ``//host`` or a scheme)."""
    if not value or not value.startswith("/") or value.startswith("//") or "\\" in value or any(ord(c) < 32 for c in value):
        return "/"
    return value


def see(path: str) -> RedirectResponse:
    return RedirectResponse(path, status_code=303)


# --- handler shapes ------------------------------------------------------------------------------------

Page = Callable[[Any, Request, Me, float], tuple[str, dict[str, Any]]]


def page(build: Page) -> Callable[[Request], Awaitable[Response]]:
    """A GET for a signed-in person: ``build(runs, request, me, now)`` on a worker thread over a
    read-only store, returning (template, context)."""

    async def endpoint(request: Request) -> Response:
        web: Web = request.app.state.web

        def work(runs: Any) -> tuple[Me | None, Any]:
            me = web.me(request, runs)
            if me is None:
                return None, None
            try:
                return me, build(runs, request, me, time.time())
            except VodouError as exc:
                return me, exc

        me, out = await web.read(work)
        if me is None:
            return web.not_signed_in(request)
        if isinstance(out, Response):
            return out
        if isinstance(out, VodouError):
            return web.error(request, me, out, back="/")
        template, ctx = out
        return web.render(request, template, me=me, **ctx)

    endpoint.__name__ = build.__name__
    return endpoint


Action = Callable[["Web", Request, Me, dict[str, str]], Awaitable[Response]]


def action(fn: Action) -> Callable[[Request], Awaitable[Response]]:
    """A POST: a session and its form token first (403 and an audit row otherwise), then ``fn``."""

    async def endpoint(request: Request) -> Response:
        web: Web = request.app.state.web
        form = await web.form(request)
        if isinstance(form, Response):
            return form

        def check(runs: Any) -> tuple[Me | None, bool]:
            me = web.me(request, runs)
            ok = me is not None and web.signer.form_token_ok(me.sid, form.get("csrf"))
            return me, ok

        me, ok = await web.write(check)
        if not ok:
            why = "no session" if me is None else ("no form token" if not form.get("csrf") else "wrong form token")
            await web.refused(me, request.url.path, why, path=request.url.path)
            return web.form_refused(request, me)
        return await fn(web, request, me, form)

    endpoint.__name__ = fn.__name__
    return endpoint


# --- pages ------------------------------------------------------------------------------------------------


def inbox(runs: Any, request: Request, me: Me, now: float) -> tuple[str, dict[str, Any]]:
    return "inbox.html", pages.inbox(runs, me.name, now)


def history(runs: Any, request: Request, me: Me, now: float) -> tuple[str, dict[str, Any]]:
    from ..states import RUN_STATES

    state = request.query_params.get("state") or None
    if state is not None and state not in RUN_STATES:
        raise UsageError(f"there is no run state {state!r}", hint="states: " + ", ".join(sorted(RUN_STATES)))
    return "runs.html", {"runs": pages.history(runs, now, state), "state": state, "states": sorted(RUN_STATES)}


def run_page(runs: Any, request: Request, me: Me, now: float) -> tuple[str, dict[str, Any]]:
    from ..errors import UnknownRunError

    run_id = request.path_params["run"]
    try:
        data = pages.run_page(runs, run_id, me.name, now)
    except UnknownRunError:
        if request.query_params.get("done") == "started":
            return "starting.html", {"run": run_id}
        raise
    return "run.html", {"run": run_id, **data}


def recipes(runs: Any, request: Request, me: Me, now: float) -> tuple[str, dict[str, Any]]:
    return "recipes.html", {"recipes": pages.recipes(runs, now)}


def recipe(runs: Any, request: Request, me: Me, now: float) -> tuple[str, dict[str, Any]]:
    version = request.query_params.get("version")
    if version is not None and not version.isdigit():
        raise UsageError(f"version {version!r} is not a version number", hint="versions are 1, 2, 3…")
    return "recipe.html", {"r": pages.recipe(runs, request.path_params["name"], now, version=int(version) if version else None)}


def schedules(runs: Any, request: Request, me: Me, now: float) -> tuple[str, dict[str, Any]]:
    return "schedules.html", {"schedules": pages.schedules(runs, now), "recipes": [r.name for r in runs.saved_recipes()], "chosen": request.query_params.get("recipe")}


# --- decisions ------------------------------------------------------------------------------------------


def _card_fields(form: dict[str, str]) -> tuple[str, str, str]:
    step, approval, fingerprint = form.get("step", ""), form.get("approval", ""), form.get("fingerprint", "")
    if not step or not fingerprint:
        raise UsageError("the form names no step or fingerprint; nothing was changed", hint="use the form on the run's page")
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
        await web.svc.approve(run_id, step, actor=me.name, fingerprint=fingerprint, proof="web-session")
    except VodouError as exc:
        if exc.code == "refused" and not web.svc.accepting:
            return web.render(request, "error.html", me=me, status=503, title="Recorded, not yet run", message="Your approval was recorded, but this inbox is stopping; the run goes on when it is next driven (the inbox starting again, or `recipe resume`).", hint=None, code=exc.code, back=f"/runs/{run_id}")
        await web.refused(me, "approve", exc, run=run_id, step=form.get("step"), fingerprint=form.get("fingerprint"))
        return web.error(request, me, exc, back=f"/runs/{run_id}", run=run_id)
    return see(f"/runs/{quote(run_id)}?done=" + ("approved-queued" if getattr(web.svc, "workers", False) else "approved"))


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


async def run_recipe(web: Web, request: Request, me: Me, form: dict[str, str]) -> Response:
    name = request.path_params["name"]
    try:
        inputs = pages.parse_inputs(form)

        def check(runs: Any) -> None:
            from ..runs import resolve_inputs

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


# --- signing in and out ---------------------------------------------------------------------------------


async def signin_page(request: Request) -> Response:
    web: Web = request.app.state.web
    token = request.query_params.get("token") or ""
    nxt = safe_next(request.query_params.get("next"))

    def work(runs: Any) -> tuple[Me | None, Any, str | None]:
        me = web.me(request, runs)
        if not token:
            return me, None, None
        store = runs.store(create=False, readonly=True)
        link = store.get_web_link(sha256(token))
        if link is None:
            return me, None, "this sign-in link is not known to this inbox (mistyped, or made for another store)"
        return me, link, store.web_link_usable(link)

    me, link, why = await web.read(work)
    pre = new_secret()
    response = web.render(
        request, "signin.html", me=me, token=token if link is not None and why is None else "", name=link.name if link is not None else None,
        why=why, next=nxt, signin_csrf=web.signer.form_token("pre:" + pre), signed_out=request.query_params.get("done") == "out",
    )  # fmt: skip
    response.set_cookie(PRE_COOKIE, web.signer.sign(pre, "pre"), max_age=3600, path="/signin", httponly=True, samesite="strict", secure=web.cfg.secure)
    return response


async def signin(request: Request) -> Response:
    web: Web = request.app.state.web
    form = await web.form(request)
    if isinstance(form, Response):
        return form
    pre = web.signer.unsign(request.cookies.get(PRE_COOKIE), "pre")
    if pre is None or not web.signer.form_token_ok("pre:" + pre, form.get("csrf")):
        await web.refused(None, "signin", "sign-in form without its cookie or token")
        return web.form_refused(request, None)
    token = form.get("token", "")
    sid = new_secret()
    ttl = web.cfg.session_ttl_s
    ua = request.headers.get("user-agent")
    session, why = await web.write(lambda runs: runs.store().use_web_link(sha256(token), sha256(sid), session_expires_at=time.time() + ttl, user_agent=ua))
    if session is None:
        return web.render(request, "error.html", me=None, status=403, title="Not signed in", message=f"{why[0].upper()}{why[1:]}; nothing was changed.", hint="ask for a new sign-in link (`recipe approver add NAME` prints one)", code="web.signin", back="/signin")
    response = see(safe_next(form.get("next")))
    response.set_cookie(SESSION_COOKIE, web.signer.sign(sid), max_age=int(ttl), path="/", httponly=True, samesite="strict", secure=web.cfg.secure)
    response.delete_cookie(PRE_COOKIE, path="/signin", httponly=True, samesite="strict", secure=web.cfg.secure)
    return response


async def signout(web: Web, request: Request, me: Me, form: dict[str, str]) -> Response:
    await web.write(lambda runs: runs.store().end_web_session(sha256(me.sid), by=me.name))
    response = see("/signin?done=out")
    response.delete_cookie(SESSION_COOKIE, path="/", httponly=True, samesite="strict", secure=web.cfg.secure)
    return response


async def stylesheet(request: Request) -> Response:
    return Response(request.app.state.web.css, media_type="text/css", headers={"cache-control": "max-age=3600"})


async def healthz(request: Request) -> Response:
    svc = request.app.state.web.svc
    return PlainTextResponse("ok\n" if svc.accepting else "stopping\n", status_code=200 if svc.accepting else 503)


# --- the guard in front of every request ----------------------------------------------------------------


class Guard:
    """Security headers on every response; a Host the inbox answers to (no DNS
    rebinding); unsafe methods only from this site; bounded bodies; Server-Timing."""

    def __init__(self, app: Any, web: Web):
        self.app = app
        self.web = web
        self.public = urlsplit(web.cfg.url).netloc.lower() if web.cfg.url else ""
        """The host and port people reach the inbox at (a proxy may send another Host)."""

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        started = time.perf_counter()
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        host = headers.get("host", "")
        hostname = urlsplit(f"//{host}").hostname or ""
        method = scope.get("method", "GET")
        mcp = scope.get("path") == MCP_PATH  # the agents' MCP endpoint: a bearer token, no forms
        problem = None
        if hostname.lower() not in self.web.hosts:
            problem = (421, f"this inbox does not answer to {host!r}; it answers to the address it listens on, localhost and [inbox] base_url's host")
        elif method not in ("GET", "HEAD", "POST") and not (mcp and method == "DELETE"):
            problem = (405, "only GET and POST")
        elif method == "POST":
            origin = headers.get("origin")
            site = headers.get("sec-fetch-site")
            if site is not None and site not in ("same-origin", "none"):
                problem = (403, "a form from another site; nothing was changed")
            elif origin is not None and origin != "null" and urlsplit(origin).netloc.lower() not in (host.lower(), self.public):
                problem = (403, "a form from another origin; nothing was changed")
            elif int(headers.get("content-length") or 0) > (MCP_MAX_BYTES if mcp else MAX_FORM_BYTES):
                problem = (413, "form too large")
        began = False

        async def send_with_headers(message: dict) -> None:
            nonlocal began
            if message["type"] == "http.response.start":
                began = True
                extra = list(SECURITY_HEADERS)
                names = {k.lower() for k, _ in message.get("headers", [])}
                if b"cache-control" not in names:
                    extra.append((b"cache-control", b"no-store"))
                extra.append((b"server-timing", f"app;dur={(time.perf_counter() - started) * 1000:.2f}".encode()))
                message = {**message, "headers": [*message.get("headers", []), *extra]}
            await send(message)

        if problem is not None:
            status, text = problem
            response = PlainTextResponse(text + "\n", status_code=status)
            return await response(scope, receive, send_with_headers)
        try:
            await self.app(scope, receive, send_with_headers)
        except Exception:
            logger.exception("%s %s failed", method, scope.get("path"))
            if began:
                raise
            response = PlainTextResponse("something failed on the server; nothing more is known here (see the serve log)\n", status_code=500)
            await response(scope, receive, send_with_headers)


# --- the app ---------------------------------------------------------------------------------------------


def create_app(service: Any, config: WebConfig | None = None, *, manage_service: bool = True) -> Starlette:
    """The inbox over ``service``. ``manage_service``: run the service in the app's
    lifespan (``recipe serve`` and tests do); False when the caller runs it."""
    config = config or WebConfig()
    web = Web(service, config, manage_service=manage_service)
    agents = AgentsOverHTTP(web)

    @asynccontextmanager
    async def lifespan(app: Starlette):
        def key() -> str:
            runs = service.runs()
            try:
                return runs.store().web_key()  # creates (or upgrades) the store on first start
            finally:
                runs.close()

        web.signer = Signer(await trio.to_thread.run_sync(key))
        try:
            if not manage_service:
                async with agents.running():
                    yield
                return
            async with trio.open_nursery() as nursery:
                await nursery.start(service.serve)
                try:
                    async with agents.running():
                        yield
                finally:
                    service.stop()
        finally:
            web.readers.close()
            web.writers.close()

    routes = [
        Route("/", page(inbox)),
        Route("/runs", page(history)),
        Route("/runs/{run}", page(run_page)),
        Route("/runs/{run}/approve", action(approve), methods=["POST"]),
        Route("/runs/{run}/reject", action(reject), methods=["POST"]),
        Route("/runs/{run}/resume", action(resume), methods=["POST"]),
        Route("/recipes", page(recipes)),
        Route("/recipes/{name}", page(recipe)),
        Route("/recipes/{name}/run", action(run_recipe), methods=["POST"]),
        Route("/schedules", page(schedules)),
        Route("/schedules", action(add_schedule), methods=["POST"]),
        Route("/schedules/{name}/pause", action(schedule_action("pause")), methods=["POST"]),
        Route("/schedules/{name}/resume", action(schedule_action("resume")), methods=["POST"]),
        Route("/schedules/{name}/remove", action(schedule_action("remove")), methods=["POST"]),
        Route("/signin", signin_page),
        Route("/signin", signin, methods=["POST"]),
        Route("/signout", action(signout), methods=["POST"]),
        Route("/static/app.css", stylesheet),
        Route("/healthz", healthz),
        Route(MCP_PATH, agents),
    ]
    app = Starlette(routes=routes, lifespan=lifespan)
    app.state.web = web
    app.add_middleware(Guard, web=web)
    return app
