"""Signing in with a one-time link, and signing out.

``GET /signin?token=`` shows the sign-in page for a link (it spends nothing);
``POST /signin`` spends the link and sets the session cookie. The sign-in form
carries a token of its own, tied to a short-lived cookie set with the page, so
another site cannot sign someone in to a session of its choosing. ``next`` is
followed only to a path on this site (:func:`safe_next`).
"""

from __future__ import annotations

import time
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from .context import Me, Web
from .handlers import see
from .identity import PRE_COOKIE, SESSION_COOKIE, new_secret, sha256


def safe_next(value: str | None) -> str:
    """Only a path on this site (never ``//host`` or a scheme)."""
    if (
        not value
        or not value.startswith("/")
        or value.startswith("//")
        or "\\" in value
        or any(ord(c) < 32 for c in value)
    ):
        return "/"
    return value


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
    response.set_cookie(
        PRE_COOKIE,
        web.signer.sign(pre, "pre"),
        max_age=3600,
        path="/signin",
        httponly=True,
        samesite="strict",
        secure=web.cfg.secure,
    )
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
    session, why = await web.write(
        lambda runs: runs.store().use_web_link(
            sha256(token), sha256(sid), session_expires_at=time.time() + ttl, user_agent=ua
        )
    )
    if session is None:
        return web.render(
            request,
            "error.html",
            me=None,
            status=403,
            title="Not signed in",
            message=f"{why[0].upper()}{why[1:]}; nothing was changed.",
            hint="ask for a new sign-in link (`recipe approver link NAME` prints one; your approver secret stays as it is)",
            code="web.signin",
            back="/signin",
        )
    response = see(safe_next(form.get("next")))
    response.set_cookie(
        SESSION_COOKIE,
        web.signer.sign(sid),
        max_age=int(ttl),
        path="/",
        httponly=True,
        samesite="strict",
        secure=web.cfg.secure,
    )
    response.delete_cookie(PRE_COOKIE, path="/signin", httponly=True, samesite="strict", secure=web.cfg.secure)
    return response


async def signout(web: Web, request: Request, me: Me, form: dict[str, str]) -> Response:
    await web.write(lambda runs: runs.store().end_web_session(sha256(me.sid), by=me.name))
    response = see("/signin?done=out")
    response.delete_cookie(SESSION_COOKIE, path="/", httponly=True, samesite="strict", secure=web.cfg.secure)
    return response
