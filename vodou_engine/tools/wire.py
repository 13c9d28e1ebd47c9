"""What a transport saw of each call: the facts ``Hub.call`` judges its outcome by.

The SDK folds what happened to a request into one error code (a server's own
-32000 error and a closed connection look the same), so each transport keeps
its own account, from the bytes it writes and reads: a :class:`CallWatch`
per ``tools/call`` (did the request reach the pipe or the socket, did a line
with its id come back and of what kind) and a :class:`Wire` per server
connection (has its output ended, mid-line or not; did a message go over its
``maxMessageBytes``). ``tools/stdio.py`` fills them in for a server started
here, ``tools/http.py`` (an :class:`HttpWire`) for one reached by URL; the
hub puts the call's watch in :data:`CURRENT_CALL` before it calls the SDK,
and :class:`WatchedWrites` files it under the request's id on its way out.

The MCP SDK is imported by the functions that need it, never here: the hub
imports this module before it spawns the servers, and the SDK after
(docs/architecture.md, "Why the hub spawns servers itself").
"""

from __future__ import annotations

from contextvars import ContextVar
from typing import TYPE_CHECKING, TypeAlias

from vodou_engine.limits import MAX_MESSAGE_BYTES
from vodou_engine.masking import Mask

if TYPE_CHECKING:
    import trio
    from mcp.client._transport import WriteStream
    from mcp.shared.message import SessionMessage

    from vodou_engine.tools.stdio import ServerProcess

__all__ = [
    "CURRENT_CALL",
    "OFF_THREAD_BYTES",
    "CallWatch",
    "HttpWire",
    "RequestId",
    "WatchedWrites",
    "Wire",
    "describe",
    "request_key",
    "same_request",
]

RequestId: TypeAlias = int | str
"""A JSON-RPC request's id, as the SDK types it."""

_STRAY_KEPT = 5

OFF_THREAD_BYTES = 1 << 20
"""A message at least this long is masked and parsed on a worker thread: the trio thread
keeps serving timeouts and the other sessions meanwhile."""


class CallWatch:
    """What the transport saw of one ``tools/call``: the facts ``Hub.call`` judges its outcome by.

    The hub puts one in :data:`CURRENT_CALL` before it calls the SDK; the
    transport fills it in from the bytes it writes and reads.
    """

    __slots__ = (
        "answered",
        "bad_reply",
        "caller_done",
        "error_reply",
        "flat_reply",
        "held",
        "lost",
        "refused",
        "request_id",
        "scope",
    )

    def __init__(self, scope: trio.CancelScope | None = None):
        self.request_id: RequestId | None = None
        """Set when the request reaches the transport (the SDK chose its id)."""
        self.refused = False
        """The transport's writer was gone when the request was handed to it: it provably never left."""
        self.answered = False
        """A line with this request's id came back (well-formed or not)."""
        self.error_reply = False
        """That line was a JSON-RPC error object the server itself wrote."""
        self.flat_reply = False
        """Every line with this request's id held no more opening brackets than ``limits.MAX_DEPTH``
        (``limits.surely_within_depth``): nothing the SDK made of it can nest deeper, so the hub
        need not walk the result to know (unset: it walks it)."""
        self.bad_reply: str | None = None
        """Why a line with this request's id could not be parsed as JSON-RPC."""
        self.scope = scope
        """Cancelled by the transport when a reply for this call arrives unreadable:
        the SDK would otherwise wait for a well-formed one until the call times out."""
        self.caller_done = False
        """``Hub.call`` has returned or raised (an answer, a timeout, or its caller was cancelled)."""
        self.held = False
        """The transport has the request but has not begun to write it, and never will once
        ``caller_done`` is set (HTTP: the POST waits for a connection; see ``tools/http.py``)."""
        self.lost: str | None = None
        """What went wrong with this call as the transport saw it, in words for a message
        (HTTP: the connection could not be made, broke mid-reply, an HTTP error status...)."""

    @property
    def may_have_left(self) -> bool:
        """False only when the request provably never reached the server (its pipe, or its socket)."""
        return self.request_id is not None and not self.refused and not self.held

    @property
    def in_flight(self) -> bool:
        return self.may_have_left and not self.answered


CURRENT_CALL: ContextVar[CallWatch | None] = ContextVar("vodou_current_call", default=None)
"""The call the current task is making; read by the transport when the SDK writes a ``tools/call``."""


class Wire:
    """The transport's own knowledge of one server connection."""

    def __init__(self, process: ServerProcess | None, limit: int = MAX_MESSAGE_BYTES):
        self.process = process
        self.limit = limit
        """The largest message read from this server, in bytes (its ``maxMessageBytes``)."""
        self.overflow: int | None = None
        """Set when a message went over ``limit``: how many of its bytes had come. Nothing was
        read from the server after that, and the session has ended (``gone``)."""
        self.calls: dict[RequestId, CallWatch] = {}
        """Calls by request id, from the moment they are sent until they are answered, or
        until their caller is done with them: a call its caller abandoned stays here,
        unanswered, and makes the shutdown skip the stdin grace (:meth:`in_doubt`)."""
        self.outstanding: set[RequestId] = set()
        """Ids of every request written and not yet answered (the SDK's own included)."""
        self.eof = False
        """The server's output has ended (or the transport was shut down)."""
        self.cut_off = 0
        """Bytes of an unfinished line the output ended with."""
        self.unfinished = 0
        """Bytes of a line received so far without its newline."""
        self.write_failed = False
        """Writing to the server's stdin failed: it is gone, or closed its input."""
        self.stray_ids: list[RequestId | None] = []
        """Ids of the last replies that matched no request in flight."""
        self.bad_lines = 0
        """Lines that were not JSON-RPC and named no call in flight."""
        self.last_bad_line: str | None = None

    @property
    def gone(self) -> bool:
        """Nothing sent now can be answered: the server's output ended or its input broke.

        (Not "the process exited": a launcher may exit and leave the real server,
        its child, serving on the same pipes.)"""
        return self.eof or self.write_failed

    def holds_requests(self) -> bool:
        """Whether a request handed to this transport is only ``held`` until it begins to be
        written, and withheld for good if its caller is done first. The pipe writes at once: no."""
        return False

    def in_doubt(self) -> bool:
        """Some call was sent and not answered. Asked at shutdown, when every caller has
        returned: such a call was given up on (cancelled, or timed out) while the server
        may still be working on it."""
        return any(watch.in_flight for watch in self.calls.values())

    def finish(self, watch: CallWatch) -> None:
        """The caller is done with ``watch``; an unanswered call stays on record until its reply comes."""
        watch.caller_done = True
        watch.scope = None  # nobody left to wake
        if watch.request_id is not None and not watch.in_flight:
            self.calls.pop(request_key(watch.request_id), None)

    # -- the transport's side ---------------------------------------------

    def request_written(self, request_id: RequestId) -> None:
        self.outstanding.add(request_key(request_id))

    def reply_read(self, request_id: RequestId | None, *, error: bool, flat: bool = False) -> None:
        """A well-formed reply; ``flat``: its line proves no value in it nests deeper than
        ``limits.MAX_DEPTH`` (``limits.surely_within_depth``)."""
        key = request_key(request_id) if request_id is not None else None
        if key is not None and key in self.outstanding:
            self.outstanding.discard(key)
        else:
            self.stray_ids = [*self.stray_ids, request_id][-_STRAY_KEPT:]
        watch = self.calls.get(key) if key is not None else None
        if key is not None and watch is not None:
            # A second line with the same id (a server's mistake) leaves it unproven.
            watch.flat_reply = flat and not watch.answered
            watch.answered = True
            watch.error_reply = error
            if watch.caller_done:  # a late reply to a call given up on: nothing more to keep
                del self.calls[key]

    def bad_line_read(self, request_id: RequestId | None, reason: str) -> None:
        """A line that is not JSON-RPC: ``request_id`` is the top-level id it names, if any
        (``stdio._top_level_id``), ``reason`` why it is not (:func:`describe`)."""
        key = request_key(request_id) if request_id is not None else None
        watch = self.calls.get(key) if key is not None else None
        if key is None or watch is None:
            self.bad_lines += 1
            self.last_bad_line = reason
            return
        self.outstanding.discard(key)
        watch.answered = True
        watch.bad_reply = reason
        if watch.caller_done:
            del self.calls[key]
        elif watch.scope is not None:
            watch.scope.cancel()

    def ended(self, unfinished: int) -> None:
        self.eof = True
        self.cut_off = unfinished

    def overflowed(self, size: int) -> None:
        """A message went over the limit: the session ends (every call in flight gets no
        reply, a later one is not sent), whatever the server writes next."""
        self.overflow = size
        self.eof = True


def request_key(request_id: RequestId) -> RequestId:
    """The key the SDK correlates ``request_id`` by ("7" and 7 are one id), so we match what it matches."""
    if type(request_id) is int:  # the SDK's own ids, every call: the SDK keeps an int as it is
        return request_id
    from mcp.shared.dispatcher import coerce_request_id  # loaded with the session (see the module docstring)

    return coerce_request_id(request_id)


def same_request(a: RequestId | None, b: RequestId | None) -> bool:
    """Whether two ids name one request, as the SDK correlates them (no id names none but itself)."""
    return (request_key(a) if a is not None else None) == (request_key(b) if b is not None else None)


def describe(line: bytes | bytearray, exc: Exception) -> str:
    """Why a line is not JSON-RPC, in a few words (pydantic's own report lists every union member)."""
    from pydantic import ValidationError  # loaded with the SDK, whose validation raised ``exc``

    if not isinstance(exc, ValidationError):  # say what it says
        text = str(exc).strip().splitlines()
        return text[0][:200] if text else type(exc).__name__
    errors = exc.errors()
    if errors and str(errors[0].get("msg", "")).startswith("Invalid JSON"):
        return "invalid JSON: " + str(errors[0]["msg"]).removeprefix("Invalid JSON: ")[:200]
    member = "JSONRPCError" if b'"error"' in line else "JSONRPCResponse"
    for error in errors:
        loc = tuple(error.get("loc", ()))
        if loc[:1] == (member,):
            where = ".".join(str(part) for part in loc[1:])
            return f"not a valid JSON-RPC reply ({where}: {error.get('msg', '')})"[:200]
    return "not a valid JSON-RPC message"


class WatchedWrites:
    """The session's write stream: notes, in the caller's own task, which call a
    ``tools/call`` request belongs to before handing it to the pipe writer."""

    def __init__(self, inner: WriteStream[SessionMessage], wire: Wire):
        # Loaded with the session (see the module docstring): looked up once per session, not per message.
        import anyio
        from mcp_types import JSONRPCRequest

        self._inner = inner
        self._wire = wire
        self._request_type = JSONRPCRequest
        self._broken = anyio.BrokenResourceError

    async def send(self, item: SessionMessage) -> None:
        watch = CURRENT_CALL.get()
        message = item.message
        if (
            watch is None
            or watch.request_id is not None
            or not isinstance(message, self._request_type)
            or message.method != "tools/call"
        ):
            await self._inner.send(item)
            return
        watch.request_id = message.id
        watch.held = self._wire.holds_requests()
        self._wire.calls[request_key(message.id)] = watch
        try:
            await self._inner.send(item)
        except self._broken:
            # anyio raises this only when the item was not taken: the writer had already ended.
            watch.refused = True
            raise

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def __aenter__(self) -> WatchedWrites:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


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
        self.endpoint: tuple[str, str, int | None, str] | None = None
        """For a server reached with OAuth: (scheme, host, port, path) of its MCP endpoint. The
        answers to other requests (discovery, registration, tokens) are the SDK's own, bounded
        and handed on unmasked (masking would replace the tokens the SDK reads in them)."""
        self.sign_in_refused = False
        """The authorization server no longer honours the server's sign-in (``tools/oauth.py``)."""

    def holds_requests(self) -> bool:
        return self.traced

    def finish(self, watch: CallWatch) -> None:
        # A held request stays on record: the transport must find it to withhold it.
        watch.caller_done = True
        watch.scope = None
        if watch.request_id is not None and not watch.held and not watch.in_flight:
            self.calls.pop(request_key(watch.request_id), None)

    def forget(self, watch: CallWatch) -> None:
        if watch.request_id is not None:
            self.calls.pop(request_key(watch.request_id), None)

    def ending(self) -> str:
        return self.session_lost or "the server ended the session"

    def lose_session(self, why: str) -> None:
        self.session_lost = why
        self.eof = True  # ``gone``: a later call is not sent

    def overflowed(self, size: int) -> None:
        super().overflowed(size)
        self.lose_session("it sent a message larger than its limit")
