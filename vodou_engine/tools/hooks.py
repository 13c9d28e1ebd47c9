"""What a caller of ``Hub.call`` hears while its call is out: the server's progress, and
the server's questions (MCP elicitation, form mode).

A server may report progress on a call (``notifications/progress``, against the token
the client sent with it) and may ask the user a question in the middle of one
(``elicitation/create``). Neither names the call on the wire in every transport (over
stdio an elicitation carries no request id of the call it belongs to), so the hub keeps
each server's calls in flight with their hooks (``LiveServer.calls``) and routes a
question to the one call out on that server; with several out at once nobody can tell
which step asked, and the question is answered ``cancel`` (docs/servers.md).

Nothing here imports the MCP SDK: the hub imports it before the servers are spawned.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Literal

__all__ = ["ACTIONS", "Answer", "CallHooks", "Question"]

ACTIONS = ("accept", "decline", "cancel")
"""A person's answer to a server's question, as MCP spells it."""


@dataclass(frozen=True)
class Question:
    """A server's question in the middle of a call (form mode): its words and the fields it wants."""

    message: str
    schema: dict[str, Any]


@dataclass(frozen=True)
class Answer:
    """What the server is told: ``accept`` with ``content`` (checked against its schema), ``decline`` or ``cancel``."""

    action: Literal["accept", "decline", "cancel"]
    content: dict[str, Any] | None = None


@dataclass(frozen=True)
class CallHooks:
    """A caller's ears on one call. ``on_progress(progress, total, message)`` is called for every
    progress notification the server sends for it (a token goes with the call only when set);
    ``on_question`` answers a question the server asks while the call is out (unset: ``cancel``)."""

    on_progress: Callable[[float, float | None, str | None], None] | None = None
    on_question: Callable[[Question], Awaitable[Answer]] | None = None
