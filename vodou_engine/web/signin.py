"""Signing in with a one-time link, and signing out.

``GET /signin?token=`` shows the sign-in page for a link (it spends nothing);
``POST /signin`` spends the link and sets the session cookie. The sign-in form
carries a token of its own, tied to a short-lived cookie set with the page, so
another site cannot sign someone in to a session of its choosing. ``next`` is
followed only to a path on this site (:func:`safe_next`).

**The first run** (:func:`first_run_link`): ``recipe serve`` bound to this machine
only prints, once it listens, a one-time sign-in link for the operating-system user
who started it, the name ``recipe run`` records as who started a run (``osuser.py``).
That person opens it and decides, in the inbox, the runs they started from the CLI.
It is safe for the same reason ``recipe approve`` at that person's terminal is: only
someone who can read what this process prints (the person who started it) has the
link, the inbox answers on the loopback address only, and the link works once, for
:data:`FIRST_RUN_TTL_S`.
"""

from __future__ import annotations

import ipaddress
import time
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from ..osuser import os_user
from .context import Me, Web
from .handlers import see
from .identity import PRE_COOKIE, SESSION_COOKIE, new_secret, sha256, sign_in_link

FIRST_RUN_TTL_S = 15 * 60.0
"""How long the link ``recipe serve`` prints at start can be used (once)."""


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


# --- the first run ---------------------------------------------------------------------------------


def local_only(host: str) -> bool:
    """Whether ``host`` (what ``serve`` binds to) is reachable from this machine only."""
    name = host.strip("[]").lower()
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def first_run_link(runs: Any, base_url: str, *, ttl_s: float = FIRST_RUN_TTL_S) -> tuple[str, str]:
    """(the OS user running this process, a one-time sign-in link for them). The name is made
    an approver if it is not one yet (with a secret nobody is shown: ``recipe approver add``
    gives one for ``--as``); an approver's existing secret and sessions are left alone."""
    name = os_user()
    runs.ensure_approver(name, by=name)  # at once with another serve on this store: both go on
    return name, sign_in_link(runs, name, by=name, base_url=base_url, ttl_s=ttl_s)


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
        why = why or "this sign-in link cannot be used"  # the store always says why
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
