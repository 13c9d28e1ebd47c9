"""The streamable HTTP transport for a server reached by URL, watched like the stdio one.

The session runs over the official SDK's ``streamable_http_client``, given
an httpx2 client of ours: its transport (:class:`_WatchingTransport`) sits
under the SDK and keeps, for every ``tools/call``, the facts ``Hub.call``
judges the outcome by (the same :class:`~vodou_engine.tools.stdio.CallWatch`
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

The SDK lets a failed HTTP request escape into its task group, which would
end the whole session (and every other call in flight on it) for one
refused connection. This transport never lets one through: it records the
failure and hands the SDK a stand-in response (an HTTP 599 for a request,
which the SDK turns into an error for that one call; a 202 for a
notification), so one call's failure stays that call's.
"""

from __future__ import annotations

import codecs
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx2

from vodou_engine.servers import ServerConfig
from vodou_engine.tools.stdio import CallWatch, Wire, _describe, _key, _WatchedWrites

__all__ = ["HttpWire", "session_streams"]

SHUTDOWN_S = 2.0
"""Bound on each request that closes the session (the DELETE), so closing never hangs on a stuck server."""

MAX_EVENT_BYTES = 64 * 1024 * 1024
"""The largest server-sent event accepted (the SDK's default is 1 MiB; tool results can be larger)."""

_STAND_IN = 599
"""The status of the response handed to the SDK in place of one that never came."""


class HttpWire(Wire):
    """What the HTTP transport knows of one server's session (the hub reads it like the stdio ``Wire``)."""

    def __init__(self, shown_url: str):
        super().__init__(None)
        self.url = shown_url
        """The URL as written in the configuration (``${VAR}`` unexpanded), for messages."""
        self.traced = False
        """httpcore's trace events have been seen (the handshake's requests): only then is a
        call ``held`` until its write begins, so "never sent" rests on a mechanism seen working."""
        self.session_lost: str | None = None
        """Why the server no longer serves this session (set: every later call is not sent)."""
        self.last_failure: str | None = None
        """The last request that got no usable answer, in words (a start error shows it)."""

    def holds_requests(self) -> bool:
        return self.traced

    def finish(self, watch: CallWatch) -> None:
        # A held request stays on record: the transport must find it to withhold it.
        watch.caller_done = True
        watch.scope = None
        if watch.request_id is not None and not watch.held and not watch.in_flight:
            self.calls.pop(_key(watch.request_id), None)

    def forget(self, watch: CallWatch) -> None:
        if watch.request_id is not None:
            self.calls.pop(_key(watch.request_id), None)

    def ending(self) -> str:
        return self.session_lost or "the server ended the session"

    def lose_session(self, why: str) -> None:
        self.session_lost = why
        self.eof = True  # ``gone``: a later call is not sent


class _Withheld(Exception):
    """Raised from the trace hook to stop a request whose caller is done before any byte of it is written."""


_NEVER_SENT = (httpx2.ConnectError, httpx2.ConnectTimeout, httpx2.PoolTimeout, httpx2.UnsupportedProtocol)
"""Failures that happen before a request is written (when its write had not begun, by the trace)."""


def _text(exc: BaseException) -> str:
    words = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {words[0]}" if words and words[0] else type(exc).__name__


def _rpc(request: httpx2.Request) -> tuple[str | None, Any]:
    """(method, id) of the JSON-RPC message a POST carries; (None, None) for a reply or anything else."""
    import msgspec

    try:
        body = msgspec.json.decode(request.content)
    except Exception:  # noqa: BLE001 - not a JSON body (or a streamed one): nothing to watch
        return None, None
    if not isinstance(body, dict):
        return None, None
    method = body.get("method")
    return (method if isinstance(method, str) else None), body.get("id")


def _status_words(response: httpx2.Response) -> str:
    reason = response.reason_phrase
    return f"HTTP {response.status_code}" + (f" {reason}" if reason else "")


class _WatchingTransport(httpx2.AsyncBaseTransport):
    """The httpx2 transport under the SDK: notes what each request did on the wire (see the module docstring)."""

    def __init__(self, inner: httpx2.AsyncBaseTransport, wire: HttpWire):
        self._inner = inner
        self._wire = wire

    def _tracer(self, watch: CallWatch | None) -> Any:
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
        watch = wire.calls.get(_key(rpc_id)) if method == "tools/call" and rpc_id is not None else None
        if request.method == "DELETE":
            request.extensions["timeout"] = dict.fromkeys(("connect", "read", "write", "pool"), SHUTDOWN_S)
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
        except Exception as exc:  # noqa: BLE001 - raised into the SDK, it would end the whole session
            what = _text(exc)
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
            wire.lose_session(f"the server no longer knows this session ({_status_words(response)}): it may have restarted")
        if watch is None:
            if is_request and status >= 300:
                wire.last_failure = f"{wire.url} answered {_status_words(response)}"
            return response
        # Each response is a new attempt (the SDK follows a redirect on the endpoint's own origin).
        watch.lost = None
        content_type = response.headers.get("content-type", "").partition(";")[0].strip().lower()
        if status == 202:
            watch.lost = "the server answered 202 Accepted, which carries no reply"
        elif 300 <= status < 400:
            watch.lost = f"the server answered {_status_words(response)}, a redirect that was not followed"
        elif status >= 400 and content_type != "application/json":
            watch.lost = f"the server answered {_status_words(response)}"
        elif status < 300 and content_type not in ("application/json", "text/event-stream"):
            watch.lost = f"the server answered with content of type {content_type or '(none)'}, not JSON-RPC"
        else:
            # A body that carries (or may carry) the reply: read it on its way to the SDK.
            response.stream = _WatchedBody(response.stream, watch, wire, status, content_type)  # type: ignore[assignment]
        return response

    def _stand_in(self, request: httpx2.Request, is_request: bool) -> httpx2.Response:
        if request.method == "DELETE":
            return httpx2.Response(204, request=request)
        if not is_request:
            return httpx2.Response(202, request=request)
        return httpx2.Response(_STAND_IN, headers={"content-type": "text/plain"}, request=request)

    async def aclose(self) -> None:
        await self._inner.aclose()


_LINE_BREAK = re.compile(r"\r\n|\r|\n")


class _Events:
    """The ``data`` of each server-sent event of type ``message``, fed text as it arrives."""

    def __init__(self) -> None:
        self._pending = ""
        self._data: list[str] = []
        self._event = ""

    def feed(self, text: str) -> list[str]:
        text = self._pending + text
        held = ""
        if text.endswith("\r"):  # maybe the first half of a \r\n: wait for the next chunk
            text, held = text[:-1], "\r"
        lines = _LINE_BREAK.split(text)
        self._pending = lines.pop() + held
        return self._lines(lines)

    def flush(self) -> list[str]:
        """At the end of the body: the lines still complete; an event not ended by a blank line is dropped (as the SDK drops it)."""
        text, self._pending = self._pending, ""
        if text.endswith("\r"):
            text = text[:-1] + "\n"
        lines = _LINE_BREAK.split(text)
        lines.pop()
        return self._lines(lines)

    def _lines(self, lines: list[str]) -> list[str]:
        out = []
        for line in lines:
            if not line:
                if self._data and (self._event or "message") == "message":
                    data = "\n".join(self._data)
                    if data:
                        out.append(data)
                self._data, self._event = [], ""
                continue
            if line.startswith(":"):
                continue
            field, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            if field == "data":
                self._data.append(value)
            elif field == "event":
                self._event = value
        return out


class _WatchedBody(httpx2.AsyncByteStream):
    """A ``tools/call`` response body, read as it passes to the SDK.

    Each reply is noted before the SDK sees it, so a caller the SDK wakes
    finds the note. A connection that breaks mid-body ends the body here
    (noted as lost) instead of raising into the SDK's task group."""

    def __init__(self, inner: Any, watch: CallWatch, wire: HttpWire, status: int, content_type: str):
        self._inner = inner
        self._watch = watch
        self._wire = wire
        self._status = status
        self._sse = content_type == "text/event-stream"
        self._json = content_type == "application/json"
        self._body = bytearray()
        self._events = _Events()
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self._iterator: Any = None
        self._done = False

    def __aiter__(self) -> _WatchedBody:  # type: ignore[override]
        self._iterator = self._inner.__aiter__()
        return self

    async def __anext__(self) -> bytes:
        if self._done:
            raise StopAsyncIteration
        if self._json:
            return await self._whole()
        try:
            chunk = await self._iterator.__anext__()
        except StopAsyncIteration:
            self._ended()
            raise
        except httpx2.TransportError as exc:
            # The SDK takes an event stream that ends without a reply as "no reply" (quietly).
            self._done = True
            if not self._watch.answered:
                self._watch.lost = f"the connection broke before the reply was complete ({_text(exc)})"
                self._wire.last_failure = self._watch.lost
            raise StopAsyncIteration from None
        for data in self._events.feed(self._decoder.decode(chunk)):
            self._message(data.encode(), substituted=True)
        return chunk

    async def _whole(self) -> bytes:
        """A JSON body, read whole before the SDK gets it (it reads it whole anyway). One cut
        off is replaced by a stand-in error for the call, as the SDK's own stand-ins are: the
        SDK would otherwise log a parse failure as if the server had sent garbage."""
        import msgspec

        try:
            async for chunk in self._iterator:
                self._body += chunk
        except httpx2.TransportError as exc:
            self._done = True
            self._watch.lost = f"the connection broke before the reply was complete ({_text(exc)})"
            self._wire.last_failure = self._watch.lost
            error = {"code": -32000, "message": "Connection closed"}
            return msgspec.json.encode({"jsonrpc": "2.0", "id": self._watch.request_id, "error": error})
        self._ended()
        return bytes(self._body)

    def _ended(self) -> None:
        self._done = True
        watch = self._watch
        if self._sse:
            for data in self._events.feed(self._decoder.decode(b"", final=True)) + self._events.flush():
                self._message(data.encode(), substituted=True)
        elif self._json:
            if self._status >= 400:
                self._message(bytes(self._body), substituted=True, errors_only=True)
            else:
                self._message(bytes(self._body), substituted=False)
        if not watch.answered and watch.lost is None:
            watch.lost = "the server ended the response without a reply"

    def _message(self, data: bytes, *, substituted: bool, errors_only: bool = False) -> None:
        """One JSON-RPC message of the body. ``substituted``: the SDK takes any reply here as this
        call's (it puts the request's id on it); else the id must match, as the SDK matches it."""
        import mcp_types

        watch = self._watch
        if watch.answered:
            return
        try:
            message = mcp_types.jsonrpc_message_adapter.validate_json(data, by_name=False)
        except ValueError as exc:
            if errors_only:
                watch.lost = f"the server answered HTTP {self._status}"
            else:
                watch.answered = True  # the SDK answers the call with a parse error of its own
                watch.bad_reply = _describe(data, exc)
            return
        is_error = isinstance(message, mcp_types.JSONRPCError)
        if errors_only and not is_error:
            watch.lost = f"the server answered HTTP {self._status}"
            return
        if not isinstance(message, (mcp_types.JSONRPCResponse, mcp_types.JSONRPCError)):
            return  # a request or notification from the server on the way (progress, logging...)
        if not substituted and _key(message.id) != _key(watch.request_id):
            self._wire.stray_ids = [*self._wire.stray_ids, message.id][-5:]
            return
        watch.answered = True
        watch.error_reply = is_error

    async def aclose(self) -> None:
        await self._inner.aclose()


def connection_transport() -> httpx2.AsyncBaseTransport:
    """What makes the connections under the watching transport (a test puts a slow one here)."""
    return httpx2.AsyncHTTPTransport()


def _proxies(wire: HttpWire) -> dict[str, Any]:
    """``HTTP_PROXY`` / ``HTTPS_PROXY`` / ``ALL_PROXY`` and ``NO_PROXY``, as httpx2 reads them for a
    client of its own, each proxy watched like a direct connection. (httpx2 leaves them out
    for a client given its own transport, as this one is.)"""
    try:
        from httpx2._utils import get_environment_proxies
    except ImportError:  # pragma: no cover - a later httpx2 moved it: connect directly
        return {}
    return {
        pattern: None if proxy is None else _WatchingTransport(httpx2.AsyncHTTPTransport(proxy=proxy), wire)
        for pattern, proxy in get_environment_proxies().items()
    }


def _import_sdk() -> None:
    from ..gcpause import paused_for_import

    with paused_for_import():
        import mcp.client.session  # noqa: F401
        import mcp.client.streamable_http  # noqa: F401
        import mcp_types  # noqa: F401


async def load_sdk() -> None:
    """Import the SDK's HTTP client off the trio thread (about a second), once per process."""
    import sys

    import trio

    if "mcp.client.streamable_http" not in sys.modules:
        await trio.to_thread.run_sync(_import_sdk)


@asynccontextmanager
async def session_streams(config: ServerConfig, shown_url: str) -> AsyncIterator[tuple[Any, Any, HttpWire]]:
    """The (read, write) message streams a ``ClientSession`` takes, over streamable HTTP to
    ``config.url`` (a resolved configuration: its headers hold the values themselves),
    and the :class:`HttpWire` that watches them. ``shown_url`` is the URL as written, for messages.

    Every time limit is the hub's (``startTimeout``, ``callTimeout``), not httpx2's: the
    client waits as long as its caller does, except the DELETE that ends the session.
    """
    await load_sdk()
    from mcp.client.streamable_http import streamable_http_client

    wire = HttpWire(shown_url)
    transport = _WatchingTransport(connection_transport(), wire)
    client = httpx2.AsyncClient(
        headers=dict(config.headers), timeout=httpx2.Timeout(None), transport=transport, mounts=_proxies(wire)
    )
    async with client:
        assert config.url is not None
        async with streamable_http_client(config.url, http_client=client, max_sse_event_size=MAX_EVENT_BYTES) as (read, write):
            yield read, _WatchedWrites(write, wire), wire
