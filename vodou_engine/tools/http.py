"""The streamable HTTP transport for a server reached by URL, watched like the stdio one.

The session runs over the official SDK's ``streamable_http_client``, given
an httpx2 client of ours: its transport (:class:`_WatchingTransport`) sits
under the SDK and keeps, for every ``tools/call``, the facts ``Hub.call``
judges the outcome by (the same :class:`~vodou_engine.tools.wire.CallWatch`
the stdio transport fills in):

* **Was it sent?** httpcore reports, through the request's ``trace``
  extension, the moment it begins to write a request's headers. Until then
  the request is only ``held``: if the connection cannot be made
  (``ConnectError``, ``ConnectTimeout``, ``PoolTimeout``,
  ``UnsupportedProtocol``: both facts must agree) it provably never left;
  and if its caller is done (timed out, or cancelled by a quorum) before
  writing begins, the write is refused there and then, so "never sent"
  stays true. Once writing has begun the request may have reached the
  server, whatever happens next (a connection reset, a server that was
  exiting: doubt). A call is only ever ``held`` once the trace has been seen
  working, on the handshake's own requests; until then every request handed
  to the SDK counts as possibly sent.
* **Did a reply come, and was it the server's?** The SDK answers a waiting
  call with a JSON-RPC error it makes up itself when an HTTP request fails
  (an HTTP error status, a stream that ended without a reply, an unreadable
  body), indistinguishable from an error the server sent. So the response
  body is read as it passes to the SDK (JSON, or server-sent events): only
  a JSON-RPC error the server itself wrote is a refusal (``error_reply``);
  anything else (an HTTP error status without one, 202 Accepted, a
  redirect, another content type, a body cut off) is no reply, and
  ``lost`` says what happened in words. Requests ask for an uncompressed
  body (``Accept-Encoding: identity``) so it can be read on the way.

Every body the SDK reads passes through ``tools/http_body.py`` first, which
bounds it by the server's ``maxMessageBytes``, masks every message before the
SDK parses it, and judges a watched call's reply.

The SDK lets a failed HTTP request escape into its task group, which would
end the whole session (and every other call in flight on it) for one
refused connection. This transport never lets one through: it records the
failure and hands the SDK a stand-in response (an HTTP 599 for a request,
which the SDK turns into an error for that one call; a 202 for a
notification), so one call's failure stays that call's.

The hub imports this module on a worker thread, once a server reached by URL
is started (it brings httpx2 and the SDK's HTTP client, about a second), so
both are imported at its top.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

import httpx2
import msgspec
import trio
from mcp.client.streamable_http import streamable_http_client

from vodou_engine.limits import MAX_MESSAGE_BYTES
from vodou_engine.masking import Mask
from vodou_engine.servers import ServerConfig
from vodou_engine.tools import oauth
from vodou_engine.tools.http_body import BodyKind, ScreenedBody, error_words
from vodou_engine.tools.wire import CallWatch, HttpWire, WatchedWrites, request_key

if TYPE_CHECKING:
    from mcp.client._transport import ReadStream
    from mcp.shared.message import SessionMessage

try:
    from httpx2._utils import get_environment_proxies
except ImportError:  # pragma: no cover - a later httpx2 moved it: connect directly

    def get_environment_proxies() -> dict[str, str | None]:
        return {}


__all__ = ["HttpWire", "connection_transport", "session_streams"]

SHUTDOWN_S = 2.0
"""Bound on each request that closes the session (the DELETE), so closing never hangs on a stuck server."""

SDK_EVENT_FACTOR = 8
"""The SDK's own bound on an event, as a multiple of the server's limit: only a backstop,
since every event is bounded here first (masking may lengthen one a little)."""

_STAND_IN = 599
"""The status of the response handed to the SDK in place of one that never came."""


class _Withheld(Exception):
    """Raised from the trace hook to stop a request whose caller is done before any byte of it is written."""


_NEVER_SENT = (httpx2.ConnectError, httpx2.ConnectTimeout, httpx2.PoolTimeout, httpx2.UnsupportedProtocol)
"""Failures that happen before a request is written (when its write had not begun, by the trace)."""


def _rpc(request: httpx2.Request) -> tuple[str | None, object]:
    """(method, id) of the JSON-RPC message a POST carries; (None, None) for a reply or anything else."""
    try:
        body = msgspec.json.decode(request.content)
    except Exception:  # noqa: BLE001 - not a JSON body (or a streamed one): nothing to watch
        return None, None
    if not isinstance(body, dict):
        return None, None
    method = body.get("method")
    return (method if isinstance(method, str) else None), body.get("id")


def _oauth_traffic(request: httpx2.Request, wire: HttpWire) -> bool:
    """Whether ``request`` is the SDK's OAuth traffic (discovery, registration, tokens): any
    request of an OAuth session to another place than the MCP endpoint."""
    url = request.url
    return wire.endpoint is not None and (url.scheme, url.host, url.port, url.path) != wire.endpoint


def _status_words(response: httpx2.Response) -> str:
    reason = response.reason_phrase
    return f"HTTP {response.status_code}" + (f" {reason}" if reason else "")


class _WatchingTransport(httpx2.AsyncBaseTransport):
    """The httpx2 transport under the SDK: notes what each request did on the wire (see the module docstring)."""

    def __init__(self, inner: httpx2.AsyncBaseTransport, wire: HttpWire):
        self._inner = inner
        self._wire = wire

    def _tracer(self, watch: CallWatch | None) -> Callable[[str, dict[str, Any]], Awaitable[None]]:
        """httpcore's ``trace`` extension for one request: notes when its write begins."""
        wire = self._wire

        async def trace(event: str, info: dict[str, Any]) -> None:
            if event.endswith("send_request_headers.started"):
                wire.traced = True
                if watch is not None:
                    if watch.held and watch.caller_done:
                        raise _Withheld
                    watch.held = False  # from here on it may reach the server

        return trace

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        wire = self._wire
        # The body is read on its way to the SDK; a compressed one could not be.
        request.headers["accept-encoding"] = "identity"
        method, rpc_id = _rpc(request) if request.method == "POST" else (None, None)
        is_request = method is not None and rpc_id is not None
        watch = (
            wire.calls.get(request_key(rpc_id)) if method == "tools/call" and isinstance(rpc_id, (int, str)) else None
        )
        if request.method == "DELETE":
            request.extensions["timeout"] = dict.fromkeys(("connect", "read", "write", "pool"), SHUTDOWN_S)
        if wire.overflow is not None and request.method == "GET":
            # The SDK's stream of server messages, or its reconnection: nothing more is read from this server.
            return httpx2.Response(_STAND_IN, headers={"content-type": "text/plain"}, request=request)
        if watch is not None and watch.held and watch.caller_done:
            # Its caller gave up (a timeout, a quorum) while it waited for the SDK: it never goes out.
            watch.refused = True
            wire.forget(watch)
            return self._stand_in(request, is_request)
        request.extensions["trace"] = self._tracer(watch)
        try:
            response = await self._inner.handle_async_request(request)
        except _Withheld:
            assert watch is not None
            watch.refused = True
            wire.forget(watch)
            return self._stand_in(request, is_request)
        except Exception as exc:  # raised into the SDK, it would end the whole session
            what = error_words(exc)
            wire.last_failure = f"cannot reach {wire.url} ({what})"
            if watch is not None:
                if watch.held and isinstance(exc, _NEVER_SENT):
                    watch.refused = True
                    watch.lost = f"cannot connect to {wire.url} ({what})"
                else:
                    watch.held = False
                    watch.lost = f"the connection failed before a reply came ({what})"
            if request.method == "GET":
                raise  # the SDK's own stream of server messages: it retries, and says nothing
            return self._stand_in(request, is_request)
        if watch is not None:
            watch.held = False  # an answer came: the request went out, whatever the trace said
        status = response.status_code
        if status == 404 and "mcp-session-id" in request.headers:
            wire.lose_session(
                f"the server no longer knows this session ({_status_words(response)}): it may have restarted"
            )
        # As the SDK tells them apart (it reads a body of either kind, and no other).
        content_type = response.headers.get("content-type", "").lower()
        kind: BodyKind | None = (
            "json"
            if content_type.startswith("application/json")
            else "sse"
            if content_type.startswith("text/event-stream")
            else None
        )
        encoding = response.headers.get("content-encoding", "").strip().lower()
        if kind is not None and encoding not in ("", "identity"):
            # Asked for uncompressed: a compressed body could be neither bounded nor masked on
            # its way (httpx would inflate it after this transport). It is not read at all.
            del response.headers["content-encoding"]
            kind = "refused"
            wire.last_failure = f"{wire.url} sent a compressed body ({encoding}), which was not asked for"
        if watch is None:
            if is_request and status >= 300:
                wire.last_failure = f"{wire.url} answered {_status_words(response)}"
            if kind is not None:
                response.stream = ScreenedBody(
                    response, kind, wire, None, rpc_id, masked=not _oauth_traffic(request, wire)
                )
            return response
        # Each response is a new attempt (the SDK follows a redirect on the endpoint's own origin).
        watch.lost = None
        if status == 202:
            watch.lost = "the server answered 202 Accepted, which carries no reply"
        elif 300 <= status < 400:
            watch.lost = f"the server answered {_status_words(response)}, a redirect that was not followed"
        elif wire.endpoint is not None and status in (401, 403):  # an OAuth server's refusal (tools/oauth.py)
            watch.lost = f"the server answered {_status_words(response)}: {oauth.refusal_words(response)}"
        elif status >= 400 and kind != "json":
            watch.lost = f"the server answered {_status_words(response)}"
        elif status < 300 and kind is None:
            shown = content_type.partition(";")[0].strip()
            watch.lost = f"the server answered with content of type {shown or '(none)'}, not JSON-RPC"
        else:
            # A body that carries (or may carry) the reply: read it on its way to the SDK.
            assert kind is not None  # each status without a body to read is above
            response.stream = ScreenedBody(response, kind, wire, watch, rpc_id)
            if kind == "refused":
                watch.lost = (
                    f"the server sent its reply compressed ({encoding}), which was not asked for; it was not read"
                )
        return response

    def _stand_in(self, request: httpx2.Request, is_request: bool) -> httpx2.Response:
        if request.method == "DELETE":
            return httpx2.Response(204, request=request)
        if not is_request:
            return httpx2.Response(202, request=request)
        return httpx2.Response(_STAND_IN, headers={"content-type": "text/plain"}, request=request)

    async def aclose(self) -> None:
        await self._inner.aclose()


def connection_transport() -> httpx2.AsyncBaseTransport:
    """What makes the connections under the watching transport (a test puts a slow one here)."""
    return httpx2.AsyncHTTPTransport()


def _proxies(wire: HttpWire) -> dict[str, httpx2.AsyncBaseTransport | None]:
    """``HTTP_PROXY`` / ``HTTPS_PROXY`` / ``ALL_PROXY`` and ``NO_PROXY``, as httpx2 reads them for a
    client of its own, each proxy watched like a direct connection. (httpx2 leaves them out
    for a client given its own transport, as this one is.)"""
    return {
        pattern: None if proxy is None else _WatchingTransport(httpx2.AsyncHTTPTransport(proxy=proxy), wire)
        for pattern, proxy in get_environment_proxies().items()
    }


@asynccontextmanager
async def session_streams(
    config: ServerConfig, shown_url: str, *, limit: int = MAX_MESSAGE_BYTES, masking: Mask | None = None
) -> AsyncIterator[tuple[ReadStream[SessionMessage | Exception], WatchedWrites, HttpWire]]:
    """The (read, write) message streams a ``ClientSession`` takes, over streamable HTTP to
    ``config.url`` (a resolved configuration: its headers hold the values themselves),
    and the :class:`HttpWire` that watches them. ``shown_url`` is the URL as written, for messages;
    ``limit`` the largest message read (bytes); ``masking`` applied to each before the SDK parses it.

    Every time limit is the hub's (``startTimeout``, ``callTimeout``), not httpx2's: the
    client waits as long as its caller does, except the DELETE that ends the session.
    """
    wire = HttpWire(shown_url, limit, masking)
    auth: httpx2.Auth | None = None
    if config.oauth:
        assert config.url is not None
        endpoint = httpx2.URL(config.url)
        wire.endpoint = (endpoint.scheme, endpoint.host, endpoint.port, endpoint.path)
        base = wire.masking

        def use(tokens: Any) -> None:
            wire.masking = base.with_values(oauth.token_secrets(tokens))

        def refused() -> None:
            wire.sign_in_refused = True

        # Reads the sign-in file; raises SignInRequiredError, before any request, without a grant.
        auth = await trio.to_thread.run_sync(oauth.run_auth, config.url, use, refused)
    transport = _WatchingTransport(connection_transport(), wire)
    client = httpx2.AsyncClient(
        headers=dict(config.headers),
        timeout=httpx2.Timeout(None),
        transport=transport,
        mounts=_proxies(wire),
        auth=auth,
    )
    async with client:
        assert config.url is not None
        async with streamable_http_client(
            config.url, http_client=client, max_sse_event_size=SDK_EVENT_FACTOR * limit
        ) as (read, write):
            yield read, WatchedWrites(write, wire), wire
