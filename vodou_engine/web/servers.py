"""Signing the service in to servers that ask for OAuth (``"auth": "oauth"``), from the inbox.

``GET /servers`` lists the servers of the service's server file that sign in, and
whether each is signed in; its "Sign in" form (``POST /servers/{name}/signin``, a
signed-in person with the form token) starts the SDK's authorization flow
(``tools/oauth.py``) in the background and sends the browser to the authorization
server; the browser comes back to ``GET /oauth/callback``, which hands the code to
that flow and shows how it ended. The grant is the service's: kept in the sign-in
file of the operating-system user ``recipe serve`` runs as (servers.md), used by
every run it drives.

The callback takes no session: the session cookie is ``SameSite=Strict``, so a
browser coming back from another site does not send it. It is bound to the flow by
the ``state`` the flow drew (unguessable, good for one use, for
:data:`SIGN_IN_TIMEOUT` seconds), which only the person who started it was sent.
"""

from __future__ import annotations

import logging
import time
import urllib.parse
from typing import Any

import trio
from mcp.client.auth import AuthorizationCodeResult
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from ..errors import ServerConfigError, SignInRequiredError, UsageError, VodouError
from ..servers import ResolvedServer
from ..servers.signins import Grant, SignIns, resource_key, sign_in_command
from ..tools import oauth
from .context import Me, Web

logger = logging.getLogger("vodou_engine.web")

CALLBACK_PATH = "/oauth/callback"
SIGN_IN_TIMEOUT = 300.0
"""Seconds a sign-in started here waits for the browser to come back."""
URL_TIMEOUT = 30.0
"""Seconds to find the authorization address (discovery and registration) before giving up."""


class _Flow:
    """One sign-in under way: the address to send the browser to, then the code it brings back."""

    def __init__(self, name: str):
        self.name = name
        self.state: str | None = None
        self.url: str | None = None
        self.url_known = trio.Event()
        self.send, self.receive = trio.open_memory_channel[dict[str, str]](1)
        self.done = trio.Event()
        self.grant: Grant | None = None
        self.error: str | None = None


class ServerSignIns:
    """The sign-ins started from the inbox, run in the app's background nursery."""

    def __init__(self, nursery: trio.Nursery):
        self._nursery = nursery
        self._by_state: dict[str, _Flow] = {}

    async def start(self, resolved: ResolvedServer, redirect_uri: str) -> _Flow:
        flow = _Flow(resolved.name)

        async def show(url: str) -> None:
            state = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(url).query)).get("state")
            if state:
                flow.state, flow.url = state, url
                self._by_state[state] = flow
            flow.url_known.set()

        async def wait() -> AuthorizationCodeResult:
            params = await flow.receive.receive()
            if "error" in params:
                raise SignInRequiredError(
                    f"the authorization server refused the sign-in: {params['error']}"
                    + (f" ({params['error_description']})" if params.get("error_description") else "")
                )
            return AuthorizationCodeResult(code=params["code"], state=params.get("state"), iss=params.get("iss"))

        async def run() -> None:
            try:
                flow.grant = await oauth.sign_in(resolved, redirect_uri, show, wait, timeout=SIGN_IN_TIMEOUT)
            except VodouError as exc:
                flow.error = exc.message
            finally:
                if flow.state is not None:
                    self._by_state.pop(flow.state, None)
                flow.url_known.set()
                flow.done.set()

        self._nursery.start_soon(run)
        with trio.move_on_after(URL_TIMEOUT):
            await flow.url_known.wait()
        return flow

    def take(self, state: str | None) -> _Flow | None:
        """The flow waiting for ``state``, which is then spent (a second callback finds nothing)."""
        return self._by_state.pop(state, None) if state else None


def _oauth_servers(web: Web) -> dict[str, Any]:
    return {name: c for name, c in web.svc.server_set.servers.items() if c.oauth}


def servers_page(runs: Any, request: Request, me: Me, now: float) -> tuple[str, dict[str, Any]]:
    """The servers that sign in, and whether each is (never a token). Blocking: a worker thread."""
    web: Web = request.app.state.web
    signins = SignIns()
    rows = []
    for name, config in _oauth_servers(web).items():
        row: dict[str, Any] = {
            "name": name,
            "url": config.url,
            "command": sign_in_command(name),
            "problem": None,
            "issuer": None,
            "since": None,
            "expires": None,
            "expired": False,
        }
        try:
            url = config.resolve(name).config.url
        except ServerConfigError as exc:
            row["problem"] = exc.message
            rows.append(row)
            continue
        grant = signins.get(resource_key(url or ""))
        if grant is not None:
            row["issuer"] = grant.issuer
            row["since"] = _when(grant.signed_in_at)
            if grant.expires_at is not None:
                row["expires"] = _when(grant.expires_at)
                row["expired"] = grant.expires_at <= time.time()
        rows.append(row)
    return "servers.html", {"servers": rows, "source": web.svc.server_set.source}


async def sign_in(web: Web, request: Request, me: Me, form: dict[str, str]) -> Response:
    """Start the sign-in of ``{name}`` and send the browser to the authorization server."""
    name = request.path_params["name"]
    config = _oauth_servers(web).get(name)
    if config is None:
        return web.error(
            request,
            me,
            UsageError(f'there is no server {name!r} that signs in ("auth": "oauth") in {web.svc.server_set.source}'),
            back="/servers",
        )
    try:
        resolved = config.resolve(name)
    except ServerConfigError as exc:
        return web.error(request, me, exc, back="/servers")
    base = str(request.base_url).rstrip("/")
    flow = await web.sign_ins.start(resolved, base + CALLBACK_PATH)
    if flow.url is None:
        message = flow.error or f"the authorization server of {name} did not answer within {URL_TIMEOUT:g} s"
        return web.error(request, me, SignInRequiredError(message, server=name), back="/servers")
    logger.info("%s started a sign-in to MCP server %r", me.name, name)
    return RedirectResponse(flow.url, status_code=303)


async def callback(request: Request) -> Response:
    """Where the authorization server sends the browser back: the flow's ``state`` says which."""
    web: Web = request.app.state.web
    params = dict(request.query_params)
    flow = web.sign_ins.take(params.get("state"))
    if flow is None or not ("code" in params or "error" in params):
        return web.render(
            request,
            "error.html",
            me=None,
            status=400,
            title="Sign-in not found",
            message="This sign-in is unknown, over, or was already completed.",
            hint="start it again from the servers page",
            code=SignInRequiredError.code,
            back="/servers",
        )
    flow.send.send_nowait(params)
    with trio.move_on_after(60):
        await flow.done.wait()
    if flow.grant is not None:
        logger.info("the service signed in to MCP server %r", flow.name)
        return web.render(request, "signed_in.html", me=None, name=flow.name, issuer=flow.grant.issuer, error=None)
    return web.render(
        request,
        "signed_in.html",
        me=None,
        status=400,
        name=flow.name,
        issuer=None,
        error=flow.error or "the sign-in did not finish in time",
    )


def _when(epoch: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(epoch))
