"""The two shapes of a handler behind the inbox: a page (GET) and an action (POST).

:func:`page` wraps what builds a page: it finds the signed-in person (or
sends them to sign in) and runs the builder on a worker thread over a
read-only store connection, so a GET cannot change anything even by mistake.
:func:`action` wraps what a form does: a session and its form token first
(403 and an audit row otherwise), then the action. Every action answers with
:func:`see`, a redirect to the page that shows what it did.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from ..errors import VodouError
from .context import Me, Web


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
                return me, build(runs, request, me, runs.clock())  # the clock that decides expiry
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
        if me is None or not ok:  # ok implies a session; said again for the type of `me`
            why = "no session" if me is None else ("no form token" if not form.get("csrf") else "wrong form token")
            await web.refused(me, request.url.path, why, path=request.url.path)
            return web.form_refused(request, me)
        return await fn(web, request, me, form)

    endpoint.__name__ = fn.__name__
    return endpoint
