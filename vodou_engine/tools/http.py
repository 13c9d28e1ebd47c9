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

Every body the SDK reads (JSON, or server-sent events) passes through
:class:`_ScreenedBody` first, whichever request it answers: a JSON body or
an event larger than the server's ``maxMessageBytes`` is not read on (at
most that much and one chunk is held) and ends the session, and every
message is masked (``vodou_engine/masking.py``) before the SDK parses it.
Events are parsed here and handed on re-written, one whole event at a time.

The SDK lets a failed HTTP request escape into its task group, which would
end the whole session (and every other call in flight on it) for one
refused connection. This transport never lets one through: it records the
failure and hands the SDK a stand-in response (an HTTP 599 for a request,
which the SDK turns into an error for that one call; a 202 for a
notification), so one call's failure stays that call's.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from typing import Any

import httpx2
import trio

from vodou_engine.limits import MAX_MESSAGE_BYTES
from vodou_engine.masking import Mask
from vodou_engine.servers import ServerConfig
from vodou_engine.tools.stdio import OFF_THREAD_BYTES, CallWatch, Wire, _describe, _key, _WatchedWrites

__all__ = ["HttpWire", "session_streams"]

SHUTDOWN_S = 2.0
"""Bound on each request that closes the session (the DELETE), so closing never hangs on a stuck server."""

SDK_EVENT_FACTOR = 8
"""The SDK's own bound on an event, as a multiple of the server's limit: only a backstop,
since every event is bounded here first (masking may lengthen one a little)."""

_STAND_IN = 599
"""The status of the response handed to the SDK in place of one that never came."""


class HttpWire(Wire):
    """What the HTTP transport knows of one server's session (the hub reads it like the stdio ``Wire``)."""

    def __init__(self, shown_url: str, limit: int = MAX_MESSAGE_BYTES, masking: Mask | None = None):
        super().__init__(None, limit)
        self.masking = masking if masking is not None else Mask({})
        """Applied to every message the server sends, before the SDK parses it."""
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

    def overflowed(self, size: int) -> None:
        super().overflowed(size)
        self.lose_session("it sent a message larger than its limit")


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
        # As the SDK tells them apart (it reads a body of either kind, and no other).
        content_type = response.headers.get("content-type", "").lower()
        kind = "json" if content_type.startswith("application/json") else "sse" if content_type.startswith("text/event-stream") else None
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
                response.stream = _ScreenedBody(response, kind, wire, None, rpc_id)  # type: ignore[assignment]
            return response
        # Each response is a new attempt (the SDK follows a redirect on the endpoint's own origin).
        watch.lost = None
        if status == 202:
            watch.lost = "the server answered 202 Accepted, which carries no reply"
        elif 300 <= status < 400:
            watch.lost = f"the server answered {_status_words(response)}, a redirect that was not followed"
        elif status >= 400 and kind != "json":
            watch.lost = f"the server answered {_status_words(response)}"
        elif status < 300 and kind is None:
            shown = content_type.partition(";")[0].strip()
            watch.lost = f"the server answered with content of type {shown or '(none)'}, not JSON-RPC"
        else:
            # A body that carries (or may carry) the reply: read it on its way to the SDK.
            response.stream = _ScreenedBody(response, kind, wire, watch, rpc_id)  # type: ignore[assignment]
            if kind == "refused":
                watch.lost = f"the server sent its reply compressed ({encoding}), which was not asked for; it was not read"
        return response

    def _stand_in(self, request: httpx2.Request, is_request: bool) -> httpx2.Response:
        if request.method == "DELETE":
            return httpx2.Response(204, request=request)
        if not is_request:
            return httpx2.Response(202, request=request)
        return httpx2.Response(_STAND_IN, headers={"content-type": "text/plain"}, request=request)

    async def aclose(self) -> None:
        await self._inner.aclose()


class _TooLarge(Exception):
    """A message went over the server's limit; ``size``: the bytes of it that had come."""

    def __init__(self, size: int):
        super().__init__(size)
        self.size = size


class _Event:
    """One server-sent event: its data lines joined, and the last ``event``, ``id`` and
    ``retry`` it gave (the ones that count)."""

    __slots__ = ("data", "event", "id", "retry")

    def __init__(self) -> None:
        self.data: bytearray | None = None
        self.event: bytes | None = None
        self.id: bytes | None = None
        self.retry: bytes | None = None

    def __bool__(self) -> bool:
        return self.data is not None or self.event is not None or self.id is not None or self.retry is not None

    @property
    def size(self) -> int:
        return len(self.data) if self.data is not None else 0


class _Events:
    """Server-sent events, parsed from the bytes as they arrive and bounded: each complete
    event comes back whole (comments and unknown fields dropped).

    Holds at most the limit (the event's field lines and the line still coming) plus one
    chunk, as bytes (many short lines are not kept one object each); raises
    :class:`_TooLarge` past it."""

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._partial = bytearray()
        self._cr = False  # the last chunk ended with \r: a \n opening the next one belongs to it
        self._event = _Event()
        self._size = 0

    def feed(self, chunk: bytes) -> list[_Event]:
        if self._cr and chunk[:1] == b"\n":
            chunk = chunk[1:]
        self._cr = chunk[-1:] == b"\r"
        if b"\r" in chunk:
            chunk = chunk.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        if b"\n" not in chunk:
            self._partial += chunk
            self._check(len(self._partial))
            return []
        lines = chunk.split(b"\n")
        lines[0] = bytes(self._partial) + lines[0]
        self._partial = bytearray(lines.pop())
        events = self._lines(lines)
        self._check(len(self._partial))
        return events

    def _check(self, coming: int) -> None:
        if self._size + coming > self._limit:
            raise _TooLarge(self._size + coming)

    def _lines(self, lines: list[bytes]) -> list[_Event]:
        events = []
        for line in lines:
            if not line:
                if self._event:
                    events.append(self._event)
                self._event, self._size = _Event(), 0
                continue
            if line[:1] == b":":
                continue
            self._size += len(line)
            self._check(0)
            name, _, value = line.partition(b":")
            value = value[1:] if value[:1] == b" " else value
            event = self._event
            if name == b"data":
                if event.data is None:
                    event.data = bytearray(value)
                else:
                    event.data += b"\n" + value
            elif name == b"event":
                event.event = value
            elif name == b"id":
                event.id = value
            elif name == b"retry":
                event.retry = value
        return events


def _verdict(data: bytes) -> tuple[str, Any, Any]:
    """What one JSON-RPC message of a body is: ("reply", id, is_error), ("bad", reason, None),
    or ("other", None, None) for a request or notification from the server on the way."""
    import mcp_types

    try:
        message = mcp_types.jsonrpc_message_adapter.validate_json(data, by_name=False)
    except ValueError as exc:
        return "bad", _describe(data, exc), None
    if isinstance(message, (mcp_types.JSONRPCResponse, mcp_types.JSONRPCError)):
        return "reply", message.id, isinstance(message, mcp_types.JSONRPCError)
    return "other", None, None


class _ScreenedBody(httpx2.AsyncByteStream):
    """A JSON or event-stream response body on its way to the SDK: bounded, masked, and, for
    a ``tools/call``, watched (``watch``).

    A reply is noted before the SDK sees it, so a caller the SDK wakes finds the note. A
    connection that breaks mid-body ends the body here (noted as lost) instead of raising
    into the SDK's task group. A body or event over the limit ends the session
    (``HttpWire.overflowed``) and wakes the caller at once."""

    def __init__(self, response: httpx2.Response, kind: str, wire: HttpWire, watch: CallWatch | None, rpc_id: Any):
        """``kind``: ``"json"``, ``"sse"``, or ``"refused"`` (a compressed body: nothing of it is read)."""
        self._inner = response.stream
        self._declared = response.headers.get("content-length", "")
        self._status = response.status_code
        self._sse = response.headers.get("content-type", "").lower().startswith("text/event-stream")
        self._refused = kind == "refused"
        self._wire = wire
        self._watch = watch
        self._rpc_id = rpc_id
        self._body = bytearray()
        self._events = _Events(wire.limit)
        self._iterator: Any = None
        self._done = False

    def __aiter__(self) -> _ScreenedBody:  # type: ignore[override]
        self._iterator = self._inner.__aiter__()
        return self

    async def __anext__(self) -> bytes:
        if self._done:
            raise StopAsyncIteration
        if self._refused:
            self._done = True
            with suppress(Exception):
                await self._inner.aclose()
            if self._sse:
                raise StopAsyncIteration  # an event stream that ends without a reply
            return self._stand_in()
        if not self._sse:
            return await self._whole()
        while True:
            try:
                chunk = await self._iterator.__anext__()
            except StopAsyncIteration:
                self._ended()  # an event the body ended in the middle of is dropped, as the SDK drops it
                raise
            except httpx2.TransportError as exc:
                # The SDK takes an event stream that ends without a reply as "no reply" (quietly).
                self._done = True
                self._broken(exc)
                raise StopAsyncIteration from None
            try:
                events = self._events.feed(chunk)
            except _TooLarge as exc:
                # The SDK may wait to reconnect before it gives up on an event stream: wake the caller now.
                await self._overflow(exc.size, wake=True)
                raise StopAsyncIteration from None
            if events:
                body, verdicts = await self._off_thread(self._rewrite, events, size=sum(e.size for e in events))
                for verdict in verdicts:
                    self._note(verdict, substituted=True)
                return body

    def _rewrite(self, events: list[_Event]) -> tuple[bytes, list[tuple[str, Any, Any]]]:
        """The events masked, as the SDK will read them, and (for a watched call) the verdict
        on each message.

        A message's data is JSON, where a line break is only ever whitespace: it is handed on
        as one line. Another kind of event is only logged by the SDK: its data is dropped."""
        masking = self._wire.masking
        out: list[bytes] = []
        verdicts = []
        for event in events:
            kind = event.event or b"message"
            if event.event is not None:
                out.append(b"event: " + masking.text(event.event.decode("utf-8", "replace")).encode() + b"\n")
            if event.id is not None:
                out.append(b"id: " + masking.text(event.id.decode("utf-8", "replace")).encode() + b"\n")
            if event.retry is not None:
                out.append(b"retry: " + event.retry + b"\n")
            if event.data is not None and kind == b"message":
                data = masking.message(bytes(event.data)).replace(b"\n", b" ")
                if data and self._watch is not None:
                    verdicts.append(_verdict(data))
                out.append(b"data: " + data + b"\n")
            elif event.data is not None:
                out.append(b"data:\n")
            out.append(b"\n")
        return b"".join(out), verdicts

    async def _whole(self) -> bytes:
        """A JSON body, read whole before the SDK gets it (it reads it whole anyway). One cut
        off or too large is replaced by a stand-in error for the call, as the SDK's own
        stand-ins are: the SDK would otherwise log a parse failure as if the server had sent
        garbage."""
        limit = self._wire.limit
        stand_in = self._stand_in()
        self._done = True
        if self._declared.isdigit() and int(self._declared) > limit:
            await self._overflow(int(self._declared))
            return stand_in
        try:
            async for chunk in self._iterator:
                self._body += chunk
                if len(self._body) > limit:
                    await self._overflow(len(self._body))
                    return stand_in
        except httpx2.TransportError as exc:
            self._broken(exc)
            return stand_in
        body, verdicts = await self._off_thread(self._masked_json, bytes(self._body), size=len(self._body))
        self._body = bytearray()
        self._ended(verdicts)
        return body

    def _stand_in(self) -> bytes:
        """What the SDK gets instead of a body it must not read: for a request, an error of the
        kind it makes up itself for a connection that closed; nothing, for anything else."""
        import msgspec

        if self._rpc_id is None:
            return b""
        error = {"code": -32000, "message": "Connection closed"}
        return msgspec.json.encode({"jsonrpc": "2.0", "id": self._rpc_id, "error": error})

    def _masked_json(self, body: bytes) -> tuple[bytes, list[tuple[str, Any, Any]]]:
        body = self._wire.masking.message(body)
        return body, [_verdict(body)] if self._watch is not None else []

    async def _off_thread(self, fn: Any, arg: Any, *, size: int) -> Any:
        """``fn(arg)``, on a worker thread when the message is large (see ``tools/stdio.py``)."""
        if size < OFF_THREAD_BYTES:
            return fn(arg)
        # Pure work: a caller that stops waiting (the session closing) need not wait for it.
        return await trio.to_thread.run_sync(fn, arg, abandon_on_cancel=True)

    def _ended(self, verdicts: list[tuple[str, Any, Any]] | None = None) -> None:
        self._done = True
        watch = self._watch
        if watch is None:
            return
        if verdicts:
            if self._status >= 400:
                self._note(verdicts[0], substituted=True, errors_only=True)
            else:
                self._note(verdicts[0], substituted=False)
        if not watch.answered and watch.lost is None:
            watch.lost = "the server ended the response without a reply"

    def _broken(self, exc: Exception) -> None:
        self._done = True
        watch = self._watch
        if watch is not None and not watch.answered:
            watch.lost = f"the connection broke before the reply was complete ({_text(exc)})"
            self._wire.last_failure = watch.lost

    async def _overflow(self, size: int, *, wake: bool = False) -> None:
        self._done = True
        self._body = bytearray()
        self._wire.overflowed(size)
        watch = self._watch
        if wake and watch is not None and not watch.answered and watch.scope is not None:
            watch.scope.cancel()
        with suppress(Exception):
            await self._inner.aclose()

    def _note(self, verdict: tuple[str, Any, Any], *, substituted: bool, errors_only: bool = False) -> None:
        """One JSON-RPC message of the body. ``substituted``: the SDK takes any reply here as this
        call's (it puts the request's id on it); else the id must match, as the SDK matches it."""
        watch = self._watch
        if watch is None or watch.answered:
            return
        what, first, is_error = verdict
        if what == "bad":
            if errors_only:
                watch.lost = f"the server answered HTTP {self._status}"
            else:
                watch.answered = True  # the SDK answers the call with a parse error of its own
                watch.bad_reply = first
            return
        if errors_only and not (what == "reply" and is_error):
            watch.lost = f"the server answered HTTP {self._status}"
            return
        if what != "reply":
            return  # a request or notification from the server on the way (progress, logging...)
        if not substituted and _key(first) != _key(watch.request_id):
            self._wire.stray_ids = [*self._wire.stray_ids, first][-5:]
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
async def session_streams(
    config: ServerConfig, shown_url: str, *, limit: int = MAX_MESSAGE_BYTES, masking: Mask | None = None
) -> AsyncIterator[tuple[Any, Any, HttpWire]]:
    """The (read, write) message streams a ``ClientSession`` takes, over streamable HTTP to
    ``config.url`` (a resolved configuration: its headers hold the values themselves),
    and the :class:`HttpWire` that watches them. ``shown_url`` is the URL as written, for messages;
    ``limit`` the largest message read (bytes); ``masking`` applied to each before the SDK parses it.

    Every time limit is the hub's (``startTimeout``, ``callTimeout``), not httpx2's: the
    client waits as long as its caller does, except the DELETE that ends the session.
    """
    await load_sdk()
    from mcp.client.streamable_http import streamable_http_client

    wire = HttpWire(shown_url, limit, masking)
    transport = _WatchingTransport(connection_transport(), wire)
    client = httpx2.AsyncClient(
        headers=dict(config.headers), timeout=httpx2.Timeout(None), transport=transport, mounts=_proxies(wire)
    )
    async with client:
        assert config.url is not None
        async with streamable_http_client(config.url, http_client=client, max_sse_event_size=SDK_EVENT_FACTOR * limit) as (read, write):
            yield read, _WatchedWrites(write, wire), wire
