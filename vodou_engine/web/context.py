"""What every handler of the inbox shares: :class:`Web`, and the signed-in :class:`Me`.

One :class:`Web` per app (``app.state.web``): the service and the configuration,
the signer of cookies and form tokens, the templates, and two pools of store
connections (:class:`StorePool`: a read-only one for pages, one that may write
for actions), used on worker threads so no store call blocks the trio thread.
It also renders a page or an error, reads a form, and writes every refused
attempt to the store's audit log. The templates make every value visible before
escaping it (:func:`templates`), so a page shows what the terminal shows.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from importlib.resources import files
from typing import Any, TypeVar
from urllib.parse import parse_qs, quote

import jinja2
import trio
from markupsafe import Markup, escape
from starlette.requests import Request
from starlette.responses import HTMLResponse, PlainTextResponse, RedirectResponse, Response

from ..errors import NotAllowedError, RefusedError, UsageError, VodouError
from ..runs import Runs
from ..store import open_store
from . import pages
from .config import WebConfig
from .identity import SESSION_COOKIE, Signer, sha256

T = TypeVar("T")

logger = logging.getLogger("vodou_engine.web")

MAX_FORM_BYTES = 64 * 1024
MAX_FORM_FIELDS = 10_100
"""A batch card's form has one tick box per item, and a loop has at most 10,000 items."""

DONE = {
    "approved": "Approved. The effect runs in the serving process, on its warm servers; this page shows how it ends.",
    "rejected": "Rejected. The run is declined; nothing after that step runs.",
    "answered": "Answered. The step's call is made again and its server given your answer; this page shows how it ends.",
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
        return open_store(
            None if self.location is None else os.fspath(self.location), create=False, readonly=self.readonly
        )

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
        self.signer: Signer  # made from the store's key when the app starts (app.py), before any request
        self.hosts = {h.lower() for h in config.hosts()}
        self.env = templates()
        self.css = (files("vodou_engine.web") / "static" / "app.css").read_bytes()
        self.js = (files("vodou_engine.web") / "static" / "live.js").read_bytes()
        self.port: int | None = None
        """The port actually bound (``--port 0`` picks one)."""
        self.sign_ins: Any = None
        """The sign-ins to servers started here (``servers.ServerSignIns``), set by the app's lifespan."""
        location = service.store_location
        self.readers = StorePool(location, readonly=True)
        self.writers = StorePool(location, readonly=False)

    # --- the store, on worker threads -------------------------------------------------------
    async def read(self, fn: Callable[[Runs], T]) -> T:
        """``fn(runs)`` on a worker thread, over a read-only store connection."""
        return await trio.to_thread.run_sync(self._with_runs, self.readers, fn)

    async def write(self, fn: Callable[[Runs], T]) -> T:
        """``fn(runs)`` on a worker thread, over a store connection that may write."""
        return await trio.to_thread.run_sync(self._with_runs, self.writers, fn)

    def _with_runs(self, pool: StorePool, fn: Callable[[Runs], T]) -> T:
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

    async def refused(
        self, me: Me | None, action: str, exc: VodouError | str, *, run: str | None = None, **data: Any
    ) -> None:
        """Every refused attempt goes to the store-wide audit log (and the run's own log
        already has what the store itself refused)."""
        detail = {"action": action, **data}
        if isinstance(exc, VodouError):
            detail.update(code=exc.code, message=exc.message)
        else:
            detail.update(code="web.refused", message=exc)
        try:
            await self.write(
                lambda runs: runs.store().audit("web.refused", actor=me.name if me else None, run_id=run, data=detail)
            )
        except Exception:  # the refusal stands even if it cannot be logged
            logger.exception("could not write the audit row for a refused %s", action)

    # --- responses ----------------------------------------------------------------------------
    def render(self, request: Request, template: str, *, me: Me | None, status: int = 200, **ctx: Any) -> HTMLResponse:
        done = request.query_params.get("done")
        html = self.env.get_template(template).render(
            me=me, request_path=request.url.path, done=DONE.get(done or ""), **ctx
        )
        return HTMLResponse(html, status_code=status)

    def error(
        self,
        request: Request,
        me: Me | None,
        exc: VodouError,
        *,
        back: str | None = None,
        title: str | None = None,
        **ctx: Any,
    ) -> HTMLResponse:
        status = status_for(exc)
        title = title or {403: "Not allowed", 404: "Not found", 400: "That cannot work", 409: "Refused"}.get(
            status, "Something failed"
        )
        return self.render(
            request,
            "error.html",
            me=me,
            status=status,
            title=title,
            message=exc.message,
            hint=exc.hint,
            code=exc.code,
            back=back,
            **ctx,
        )

    def not_signed_in(self, request: Request) -> Response:
        here = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        if request.headers.get("sec-fetch-site") == "cross-site":
            # The session cookie is SameSite=Strict: a link followed from another site
            # (a mail, a chat) arrives without it. Loading the page again from here sends it.
            return self.render(request, "reload.html", me=None, target=here)
        return RedirectResponse("/signin?next=" + quote(here, safe="/"), status_code=303)

    def form_refused(self, request: Request, me: Me | None) -> HTMLResponse:
        why = (
            "You are not signed in (or your session ended)."
            if me is None
            else "This form is not from this inbox, or is from an older session."
        )
        return self.render(
            request,
            "error.html",
            me=me,
            status=403,
            title="Form refused",
            message=why + " Nothing was changed.",
            hint="open the page again and use its form",
            code="web.form",
            back="/",
        )

    async def form(self, request: Request) -> dict[str, str] | Response:
        if request.headers.get("content-type", "").split(";")[0].strip().lower() != "application/x-www-form-urlencoded":
            return PlainTextResponse("forms only (application/x-www-form-urlencoded)\n", status_code=415)
        body = bytearray()
        async for chunk in request.stream():
            body += chunk
            if len(body) > MAX_FORM_BYTES:
                return PlainTextResponse("form too large\n", status_code=413)
        try:
            parsed = parse_qs(
                body.decode("utf-8"), keep_blank_values=True, max_num_fields=MAX_FORM_FIELDS, strict_parsing=False
            )
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
    return Markup(f'<input type="hidden" name="csrf" value="{escape(me.csrf)}">') if me else Markup("")  # noqa: S704 - the token is escaped


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
