"""OAuth 2.1 for servers reached by URL (``"auth": "oauth"``), on the MCP SDK's client.

The SDK's :class:`~mcp.client.auth.OAuthClientProvider` does the protocol:
discovery (the server's protected resource metadata, then its authorization
server's metadata), dynamic client registration, the authorization code grant
with PKCE, the ``resource`` indicator, and refreshing an expired access token.
This module gives it what it needs on each side:

* **Signing in** (:func:`sign_in`): once, a person completes the authorization in
  a browser. The engine opens an MCP session to the server with a provider whose
  ``redirect_handler`` hands the authorization URL to the surface (printed by
  ``recipe servers login``, a redirect from ``recipe serve``) and whose
  ``callback_handler`` waits for the browser to come back with the code (a
  loopback listener, :func:`loopback`, or the service's callback route). The
  grant is kept in the sign-in file (``servers/signins.py``) with a new random
  ``grant_id``.
* **Running** (:func:`run_auth`): a run's HTTP session gets a provider backed by
  the stored grant. It refreshes an expired access token (and keeps the new one,
  under the same ``grant_id``); it never starts a sign-in: where the SDK would
  send a person to the browser, :class:`~vodou_engine.errors.SignInRequiredError`
  is raised instead, so a run never waits for a person it cannot reach, and
  nothing reaches a tool without a grant. A server with no grant at all is refused
  before any request is made.

Tokens never leave this module and the HTTP request they authorize: not in a
message, a log line, the run store or a binding (which covers the grant's
identity by digest, ``binding.py``); the transport masks them in everything the
server sends, as it masks ``${VAR}`` values (``OAUTH_ACCESS_TOKEN``,
``OAUTH_REFRESH_TOKEN``).

Imports the SDK's auth client and httpx2: imported by ``tools/http.py``, on a
worker thread, like the rest of the HTTP client.
"""

from __future__ import annotations

import logging
import re
import secrets
import time
import urllib.parse
import webbrowser
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager, suppress

import httpx2
import trio
from mcp.client.auth import AuthorizationCodeResult, OAuthClientProvider
from mcp.client.auth.utils import extract_scope_from_www_auth
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.auth import OAuthClientInformationFull, OAuthClientMetadata, OAuthToken

from vodou_engine.errors import ServerConfigError, SignInRequiredError
from vodou_engine.servers import ResolvedServer
from vodou_engine.servers.signins import Grant, SignIns, resource_key, sign_in_command, sign_in_error

__all__ = [
    "CLIENT_NAME",
    "TOKEN_VARS",
    "loopback",
    "missing",
    "refusal_words",
    "run_auth",
    "sign_in",
    "token_secrets",
]

CLIENT_NAME = "vodou-engine"
"""The ``client_name`` registered with an authorization server (what its consent page shows)."""

TOKEN_VARS = ("OAUTH_ACCESS_TOKEN", "OAUTH_REFRESH_TOKEN")
"""The names a token is masked as in what a server sends (``${OAUTH_ACCESS_TOKEN}``)."""

CALLBACK_PATH = "/callback"

# The SDK logs a failed authorization flow with its traceback ("OAuth flow error") before it
# raises; with no logging configured (the CLI), Python would print that traceback on stderr,
# next to the error the engine words (sign_in). A handler here keeps it for a configured log.
logging.getLogger("mcp.client.auth").addHandler(logging.NullHandler())


def _expiry(tokens: OAuthToken) -> float | None:
    return time.time() + tokens.expires_in if tokens.expires_in is not None else None


def token_secrets(tokens: OAuthToken | None) -> dict[str, str]:
    """What the transport masks, by the name it is shown as."""
    if tokens is None:
        return {}
    out = {TOKEN_VARS[0]: tokens.access_token}
    if tokens.refresh_token:
        out[TOKEN_VARS[1]] = tokens.refresh_token
    return out


# -- running -----------------------------------------------------------------------------


class _GrantStorage:
    """The SDK's ``TokenStorage`` over one stored grant, for a run: tokens a refresh gives are
    kept (under the same grant); a new client registration is a new sign-in, which a run never
    makes."""

    def __init__(
        self, signins: SignIns, grant: Grant, on_tokens: Callable[[OAuthToken], None], on_refused: Callable[[], None]
    ):
        self._signins = signins
        self.grant = grant
        self._on_tokens = on_tokens
        self._on_refused = on_refused

    async def get_tokens(self) -> OAuthToken | None:
        return OAuthToken.model_validate_json(self.grant.tokens_json)

    async def set_tokens(self, tokens: OAuthToken) -> None:
        expires_at = _expiry(tokens)
        tokens_json = tokens.model_dump_json(exclude_none=True)
        self.grant.tokens_json, self.grant.expires_at = tokens_json, expires_at
        self._on_tokens(tokens)
        await trio.to_thread.run_sync(
            self._signins.refreshed, self.grant.resource, self.grant.grant_id, tokens_json, expires_at
        )

    def adopt(self, tokens: OAuthToken) -> None:
        """Tokens another process stored for this grant are the ones in use now (to mask them)."""
        self._on_tokens(tokens)

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return OAuthClientInformationFull.model_validate_json(self.grant.client_json)

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self._on_refused()
        raise sign_in_error("", None, "refused")  # the transport names the server


class _RunProvider(OAuthClientProvider):
    """The SDK's provider, told when the stored access token expires (the SDK keeps that in
    memory only, so a token loaded from storage would count as valid until a 401, and the SDK
    answers a 401 with a new sign-in, not a refresh)."""

    _grant_storage: _GrantStorage

    async def _initialize(self) -> None:
        await super()._initialize()
        self.context.token_expiry_time = self._grant_storage.grant.expires_at


class _NoSignInHere(httpx2.Auth):
    """The run's provider, renewed once where the SDK would start a new sign-in, then stopped.

    The SDK answers a 401 (or a 403 ``insufficient_scope``) to the request it authorized
    with the whole authorization flow, ending in the browser; it never tries its refresh
    token there. A run has no browser, but a 401 often needs none:

    * another process (a service and a terminal share the sign-in file) refreshed the
      grant meanwhile, and the tokens in memory are spent (a rotated refresh token is good
      once): the grant is read again, and its newer tokens are used;
    * the server dropped the access token before its time: the refresh token gets a new one.

    The request is sent again once, so. A 401 after that is handed back as it is, to the
    transport, which words it (a server that no longer accepts the sign-in), and
    ``on_refused`` is told. So nothing raises inside the SDK's request (which would end the
    whole session), and discovery, registration and the browser are never reached in a run."""

    requires_response_body = True

    def __init__(self, inner: _RunProvider, signins: SignIns, on_refused: Callable[[], None]):
        self._inner = inner
        self._signins = signins
        self._on_refused = on_refused

    async def async_auth_flow(self, request: httpx2.Request) -> AsyncGenerator[httpx2.Request, httpx2.Response]:
        for attempt in (1, 2):
            flow = self._inner.async_auth_flow(request)
            again = False
            try:
                outgoing = await flow.__anext__()
                while True:
                    response = yield outgoing
                    if outgoing is request and _asks_for_sign_in(response):
                        again = attempt == 1 and await self._renew()
                        if not again:
                            self._on_refused()
                        break
                    outgoing = await flow.asend(response)
            except StopAsyncIteration:
                return
            finally:
                await flow.aclose()
            if not again:
                return

    async def _renew(self) -> bool:
        """Whether there is something to try once more: newer tokens of the same grant in the
        sign-in file, or a refresh token (the SDK then refreshes first)."""
        storage = self._inner._grant_storage
        context = self._inner.context
        stored = await trio.to_thread.run_sync(self._signins.get, storage.grant.resource)
        if stored is None or stored.grant_id != storage.grant.grant_id:
            return False  # signed out, or signed in again: not the grant this session was bound to
        tokens = OAuthToken.model_validate_json(stored.tokens_json)
        used = context.current_tokens
        if used is None or tokens.access_token != used.access_token:
            storage.grant = stored
            storage.adopt(tokens)
            context.current_tokens = tokens
            context.token_expiry_time = stored.expires_at
            return True
        if context.can_refresh_token():
            context.token_expiry_time = 1.0  # long past (0 would read as "never expires"): the SDK refreshes first
            return True
        return False


def _asks_for_sign_in(response: httpx2.Response) -> bool:
    if response.status_code == 401:
        return True
    challenge = response.headers.get("www-authenticate", "")
    return response.status_code == 403 and "insufficient_scope" in challenge


_SCOPE_TOKEN = re.compile(r"[\x21\x23-\x5b\x5d-\x7e]{1,100}")
"""A scope token as RFC 6749 (3.3) spells one: what a server's challenge may put in a message."""


def refusal_words(response: httpx2.Response) -> str:
    """Why the server refused a request the stored grant authorized (its 401 or 403), in
    words that say what a person does next. A 403 ``insufficient_scope`` names the scopes
    the server asks for (its ``WWW-Authenticate`` challenge): signing in again as before
    would get the same scopes, so the fix is to ask for those (``"scopes"``) first. A run
    never asks for them itself: more scope is a new consent, in a browser."""
    if response.status_code == 403 and "insufficient_scope" in response.headers.get("www-authenticate", ""):
        asked = (extract_scope_from_www_auth(response) or "").split()
        if asked and len(asked) <= 20 and all(_SCOPE_TOKEN.fullmatch(s) for s in asked):
            listed = ", ".join(f'"{s}"' for s in asked)
            return (
                f"the sign-in lacks the scope this needs; the server asks for {listed}: "
                f'put them in the entry\'s "scopes" and sign in again'
            )
        return 'the sign-in lacks the scope this needs: add it to the entry\'s "scopes" and sign in again'
    return "it no longer accepts the sign-in (sign in again)"


def missing(grant: Grant | None, now: float | None = None) -> str | None:
    """Why ``grant`` cannot reach its server without a person (``none``, ``expired``), or None."""
    if grant is None:
        return "none"
    expired = grant.expires_at is not None and grant.expires_at <= (time.time() if now is None else now)
    if expired and not OAuthToken.model_validate_json(grant.tokens_json).refresh_token:
        return "expired"
    return None


def run_auth(
    url: str,
    on_tokens: Callable[[OAuthToken], None],
    on_refused: Callable[[], None],
    signins: SignIns | None = None,
) -> httpx2.Auth:
    """The httpx2 auth of a run's session to ``url`` (the resolved URL of an ``"auth": "oauth"``
    server), from its stored grant. Raises SignInRequiredError (its ``reason`` in ``facts``;
    the caller names the server) when there is none or it cannot be used, before anything
    is sent. ``on_tokens`` is
    told the tokens in use (to mask them), now and at each refresh; ``on_refused`` when the
    server answers a request with a 401 all the same (the grant is no longer honoured; the
    401 goes on to the transport). Blocking (it reads the
    sign-in file): call it off the trio thread."""
    signins = signins or SignIns()
    grant = signins.get(resource_key(url))
    reason = missing(grant)
    if reason is not None:
        raise sign_in_error("", None, reason)
    assert grant is not None

    async def no_browser(authorization_url: str) -> None:  # pragma: no cover - _NoSignInHere stops before
        on_refused()
        raise sign_in_error("", None, "refused")

    async def no_callback() -> AuthorizationCodeResult:  # pragma: no cover - no_browser raised first
        raise AssertionError("a run never completes a sign-in")

    storage = _GrantStorage(signins, grant, on_tokens, on_refused)
    client = OAuthClientInformationFull.model_validate_json(grant.client_json)
    metadata = OAuthClientMetadata(
        client_name=CLIENT_NAME,
        redirect_uris=client.redirect_uris or ["http://127.0.0.1" + CALLBACK_PATH],  # type: ignore[list-item]
        scope=grant.scope,
    )
    provider = _RunProvider(url, metadata, storage, redirect_handler=no_browser, callback_handler=no_callback)
    provider._grant_storage = storage
    on_tokens(OAuthToken.model_validate_json(grant.tokens_json))
    return _NoSignInHere(provider, signins, on_refused)


# -- signing in --------------------------------------------------------------------------


class _AskedScopes(OAuthClientMetadata):
    """Client metadata that keeps the scopes the server file asks for (``"scopes"``): the SDK
    puts the server's own choice in their place before it registers and authorizes, which
    would make the setting mean nothing."""

    def __setattr__(self, name: str, value: object) -> None:
        if name == "scope" and self.scope is not None:
            return
        super().__setattr__(name, value)


class _Memory:
    """Storage for a sign-in under way: nothing is kept until the tokens arrive."""

    def __init__(self) -> None:
        self.tokens: OAuthToken | None = None
        self.client: OAuthClientInformationFull | None = None

    async def get_tokens(self) -> OAuthToken | None:
        return self.tokens

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self.tokens = tokens

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self.client

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self.client = client_info


async def sign_in(
    resolved: ResolvedServer,
    redirect_uri: str,
    show_url: Callable[[str], Awaitable[None]],
    wait_for_callback: Callable[[], Awaitable[AuthorizationCodeResult]],
    *,
    signins: SignIns | None = None,
    timeout: float = 300.0,
) -> Grant:
    """Sign in to ``resolved`` (an ``"auth": "oauth"`` server): discover its authorization
    server, register a client (``redirect_uri`` the one the browser comes back to), hand the
    authorization URL to ``show_url``, wait for ``wait_for_callback`` (the code, the state),
    exchange the code (PKCE) and check the tokens work by listing the server's tools; then
    keep the grant. Raises SignInRequiredError (the server named) when it does not complete
    within ``timeout`` seconds or the authorization server refuses it; nothing is kept then."""
    url = resolved.config.url
    if not resolved.template.oauth or url is None:
        raise ServerConfigError(
            f'MCP server {resolved.name!r} is not an OAuth server; only one with "auth": "oauth" is signed in to',
            hint='add "auth": "oauth" to its entry in the server file (it needs a "url")',
        )
    memory = _Memory()
    metadata = (_AskedScopes if resolved.template.scopes else OAuthClientMetadata)(
        client_name=CLIENT_NAME,
        redirect_uris=[redirect_uri],  # type: ignore[list-item]
        grant_types=["authorization_code", "refresh_token"],
        token_endpoint_auth_method="none",
        scope=" ".join(resolved.template.scopes) or None,
    )
    provider = OAuthClientProvider(url, metadata, memory, redirect_handler=show_url, callback_handler=wait_for_callback)
    name = resolved.name
    try:
        with trio.fail_after(timeout):
            async with (
                httpx2.AsyncClient(auth=provider, headers=dict(resolved.config.headers), timeout=30.0) as client,
                streamable_http_client(url, http_client=client) as (read, write),
                ClientSession(read, write) as session,
            ):
                await session.initialize()
                await session.list_tools()
    except trio.TooSlowError:
        raise SignInRequiredError(
            f"the sign-in to MCP server {name!r} was not completed within {timeout:g} s; nothing was kept",
            hint=f"run `{sign_in_command(name)}` again and complete it in the browser",
            server=name,
        ) from None
    except Exception as exc:  # noqa: BLE001 - the SDK's flow errors, an unreachable server: all said in words
        leaf = _leaf(exc)
        if isinstance(leaf, SignInRequiredError):
            raise leaf from None
        raise SignInRequiredError(
            f"the sign-in to MCP server {name!r} ({resolved.template.url}) failed: {_words(leaf, memory)}; nothing was kept",
            hint=f'check that the server is up and that "url" is right, then run `{sign_in_command(name)}` again',
            server=name,
        ) from None
    tokens, client_info = memory.tokens, memory.client
    if tokens is None or client_info is None:
        raise SignInRequiredError(
            f"MCP server {name!r} ({resolved.template.url}) asked for no sign-in: it answered without one",
            hint='remove "auth": "oauth" from its entry if it needs none',
            server=name,
        )
    context = provider.context
    issuer = (
        str(context.oauth_metadata.issuer)
        if context.oauth_metadata is not None
        else context.auth_server_url or context.get_authorization_base_url(url)
    )
    grant = Grant(
        resource=resource_key(url),
        url=resolved.template.url or "",
        server=name,
        issuer=issuer,
        client_id=client_info.client_id,
        grant_id=secrets.token_hex(16),
        client_json=client_info.model_dump_json(exclude_none=True),
        tokens_json=tokens.model_dump_json(exclude_none=True),
        expires_at=_expiry(tokens),
        scope=tokens.scope or metadata.scope,
        signed_in_at=time.time(),
    )
    await trio.to_thread.run_sync((signins or SignIns()).put, grant)
    return grant


def _leaf(exc: BaseException) -> BaseException:
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


def _words(exc: BaseException, memory: _Memory) -> str:
    """An error in words, with any token the flow already holds masked out."""
    text = f"{type(exc).__name__}: {exc}"
    for var, value in token_secrets(memory.tokens).items():
        text = text.replace(value, f"${{{var}}}")
    return text


async def open_browser(url: str) -> None:
    """Open ``url`` in the person's browser, if there is one (off the trio thread: it may start one)."""
    await trio.to_thread.run_sync(webbrowser.open, url)


# -- the loopback callback ---------------------------------------------------------------

_PAGE = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/html; charset=utf-8\r\nConnection: close\r\nCache-Control: no-store\r\n\r\n"
    b"<!doctype html><title>Signed in</title><p>You can close this tab and go back to the terminal.</p>"
)
_NOT_FOUND = b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"


@asynccontextmanager
async def loopback(
    host: str = "127.0.0.1",
) -> AsyncIterator[tuple[str, Callable[[], Awaitable[AuthorizationCodeResult]]]]:
    """A one-shot HTTP listener on a free port of the loopback interface, for a sign-in at a
    terminal: yields (the redirect URI, what waits for the browser to come back to it).
    Only a GET of :data:`CALLBACK_PATH` with a ``code`` (or an ``error``) completes it."""
    listeners = await trio.open_tcp_listeners(0, host=host)
    port = listeners[0].socket.getsockname()[1]
    send, receive = trio.open_memory_channel[dict[str, str]](1)

    async def handle(stream: trio.SocketStream) -> None:
        async with stream:
            data = b""
            with trio.move_on_after(10):
                while b"\r\n\r\n" not in data and len(data) < 65536:
                    chunk = await stream.receive_some(4096)
                    if not chunk:
                        break
                    data += chunk
            line = data.split(b"\r\n", 1)[0].decode("latin-1").split(" ")
            target = urllib.parse.urlsplit(line[1]) if len(line) >= 2 and line[0] == "GET" else None
            params = dict(urllib.parse.parse_qsl(target.query)) if target is not None else {}
            if target is None or target.path != CALLBACK_PATH or not ("code" in params or "error" in params):
                await stream.send_all(_NOT_FOUND)
                return
            await stream.send_all(_PAGE)
            with suppress(trio.WouldBlock):  # the first one counts
                send.send_nowait(params)

    async def wait() -> AuthorizationCodeResult:
        params = await receive.receive()
        if "error" in params:
            raise SignInRequiredError(
                f"the authorization server refused the sign-in: {params['error']}"
                + (f" ({params['error_description']})" if params.get("error_description") else "")
            )
        return AuthorizationCodeResult(code=params["code"], state=params.get("state"), iss=params.get("iss"))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(trio.serve_listeners, handle, listeners)
        try:
            yield f"http://{host}:{port}{CALLBACK_PATH}", wait
        finally:
            nursery.cancel_scope.cancel()
