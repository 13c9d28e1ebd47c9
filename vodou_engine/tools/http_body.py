"""What the SDK reads of an HTTP response body: bounded, masked and, for a ``tools/call``, watched.

Every body the SDK reads (JSON, or server-sent events) passes through
:class:`ScreenedBody` first, whichever request it answers (``tools/http.py``
puts it there): a JSON body or an event larger than the server's
``maxMessageBytes`` is not read on (at most that much and one chunk is held)
and ends the session, and every message is masked
(``vodou_engine/masking.py``) before the SDK parses it. Events are parsed
here (:class:`Events`) and handed on re-written, one whole event at a time.
For a watched call, each JSON-RPC message on the way is judged
(:func:`verdict`): only a JSON-RPC error the server itself wrote is a
refusal; a body that ends, breaks or goes over the limit without a reply is
noted as no reply, in words.

Imported with ``tools/http.py``, off the trio thread and after the servers
are spawned, so the MCP SDK is imported at the top.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import suppress
from typing import Literal, NamedTuple, TypeVar, cast

import httpx2
import mcp_types
import msgspec
import trio

from vodou_engine.masking import Mask
from vodou_engine.tools.wire import OFF_THREAD_BYTES, CallWatch, HttpWire, RequestId, describe, same_request

__all__ = ["BodyKind", "ScreenedBody", "Verdict", "error_words", "judge"]

BodyKind = Literal["json", "sse", "refused"]
"""What a response body is read as: JSON, server-sent events, or (``refused``: compressed) not at all."""

_In = TypeVar("_In")
_Out = TypeVar("_Out")


def error_words(exc: BaseException) -> str:
    """An exception in a few words, for a message: its type and the first line of what it says."""
    words = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {words[0]}" if words and words[0] else type(exc).__name__


class TooLarge(Exception):
    """A message went over the server's limit; ``size``: the bytes of it that had come."""

    def __init__(self, size: int):
        super().__init__(size)
        self.size = size


class Event:
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


class Events:
    """Server-sent events, parsed from the bytes as they arrive and bounded: each complete
    event comes back whole (comments and unknown fields dropped).

    Holds at most the limit (the event's field lines and the line still coming) plus one
    chunk, as bytes (many short lines are not kept one object each); raises
    :class:`TooLarge` past it."""

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._partial = bytearray()
        self._cr = False  # the last chunk ended with \r: a \n opening the next one belongs to it
        self._event = Event()
        self._size = 0

    def feed(self, chunk: bytes) -> list[Event]:
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
            raise TooLarge(self._size + coming)

    def _lines(self, lines: list[bytes]) -> list[Event]:
        events = []
        for line in lines:
            if not line:
                if self._event:
                    events.append(self._event)
                self._event, self._size = Event(), 0
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


class Verdict(NamedTuple):
    """What one JSON-RPC message of a body is: a reply (its ``id``, and whether it ``is_error``),
    ``bad`` (``reason``: why it is not JSON-RPC), or ``other``: a request or notification from
    the server on the way."""

    what: Literal["reply", "bad", "other"]
    id: RequestId | None = None
    is_error: bool = False
    reason: str | None = None


def judge(data: bytes) -> Verdict:
    """The :class:`Verdict` on one JSON-RPC message of a body."""
    try:
        message = mcp_types.jsonrpc_message_adapter.validate_json(data, by_name=False)
    except ValueError as exc:
        return Verdict("bad", reason=describe(data, exc))
    if isinstance(message, (mcp_types.JSONRPCResponse, mcp_types.JSONRPCError)):
        return Verdict("reply", id=message.id, is_error=isinstance(message, mcp_types.JSONRPCError))
    return Verdict("other")


_NO_MASK = Mask({})


class ScreenedBody(httpx2.AsyncByteStream):
    """A JSON or event-stream response body on its way to the SDK: bounded, masked, and, for
    a ``tools/call``, watched (``watch``).

    A reply is noted before the SDK sees it, so a caller the SDK wakes finds the note. A
    connection that breaks mid-body ends the body here (noted as lost) instead of raising
    into the SDK's task group. A body or event over the limit ends the session
    (``HttpWire.overflowed``) and wakes the caller at once."""

    def __init__(
        self,
        response: httpx2.Response,
        kind: BodyKind,
        wire: HttpWire,
        watch: CallWatch | None,
        rpc_id: object,
        *,
        masked: bool = True,
    ):
        """``rpc_id``: the id of the request it answers, if a request (a stand-in error carries it).
        ``masked=False``: bounded, not masked (an OAuth answer the SDK reads for its tokens, which
        masking would replace with their names)."""
        # An async client's responses stream asynchronously.
        self._inner = cast(httpx2.AsyncByteStream, response.stream)
        self._declared = response.headers.get("content-length", "")
        self._status = response.status_code
        self._sse = response.headers.get("content-type", "").lower().startswith("text/event-stream")
        self._refused = kind == "refused"
        self._wire = wire
        self._watch = watch
        self._rpc_id = rpc_id
        self._body = bytearray()
        self._events = Events(wire.limit)
        self._iterator: AsyncIterator[bytes]  # set by __aiter__, which comes first
        self._done = False
        self._masked = masked

    @property
    def _masking(self) -> Mask:
        return self._wire.masking if self._masked else _NO_MASK

    def __aiter__(self) -> ScreenedBody:
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
            except TooLarge as exc:
                # The SDK may wait to reconnect before it gives up on an event stream: wake the caller now.
                await self._overflow(exc.size, wake=True)
                raise StopAsyncIteration from None
            if events:
                body, verdicts = await self._off_thread(self._rewrite, events, size=sum(e.size for e in events))
                for one in verdicts:
                    self._note(one, substituted=True)
                return body

    def _rewrite(self, events: list[Event]) -> tuple[bytes, list[Verdict]]:
        """The events masked, as the SDK will read them, and (for a watched call) the verdict
        on each message.

        A message's data is JSON, where a line break is only ever whitespace: it is handed on
        as one line. Another kind of event is only logged by the SDK: its data is dropped."""
        masking = self._masking
        out: list[bytes] = []
        verdicts: list[Verdict] = []
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
                    verdicts.append(judge(data))
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
        if self._rpc_id is None:
            return b""
        error = {"code": -32000, "message": "Connection closed"}
        return msgspec.json.encode({"jsonrpc": "2.0", "id": self._rpc_id, "error": error})

    def _masked_json(self, body: bytes) -> tuple[bytes, list[Verdict]]:
        body = self._masking.message(body)
        return body, [judge(body)] if self._watch is not None else []

    async def _off_thread(self, fn: Callable[[_In], _Out], arg: _In, *, size: int) -> _Out:
        """``fn(arg)``, on a worker thread when the message is large (see ``tools/stdio.py``)."""
        if size < OFF_THREAD_BYTES:
            return fn(arg)
        # Pure work: a caller that stops waiting (the session closing) need not wait for it.
        return await trio.to_thread.run_sync(fn, arg, abandon_on_cancel=True)

    def _ended(self, verdicts: list[Verdict] | None = None) -> None:
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
            watch.lost = f"the connection broke before the reply was complete ({error_words(exc)})"
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

    def _note(self, verdict: Verdict, *, substituted: bool, errors_only: bool = False) -> None:
        """One JSON-RPC message of the body. ``substituted``: the SDK takes any reply here as this
        call's (it puts the request's id on it); else the id must match, as the SDK matches it."""
        watch = self._watch
        if watch is None or watch.answered:
            return
        if verdict.what == "bad":
            if errors_only:
                watch.lost = f"the server answered HTTP {self._status}"
            else:
                watch.answered = True  # the SDK answers the call with a parse error of its own
                watch.bad_reply = verdict.reason
            return
        if errors_only and not (verdict.what == "reply" and verdict.is_error):
            watch.lost = f"the server answered HTTP {self._status}"
            return
        if verdict.what != "reply":
            return  # a request or notification from the server on the way (progress, logging...)
        if not substituted and not same_request(verdict.id, watch.request_id):
            self._wire.stray_ids = [*self._wire.stray_ids, verdict.id][-5:]
            return
        watch.answered = True
        watch.error_reply = verdict.is_error

    async def aclose(self) -> None:
        await self._inner.aclose()
