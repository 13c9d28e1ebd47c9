"""What a server's answers become: a tool as it lists it, and a call's result.

:class:`ToolInfo` is one tool from ``tools/list``, its behaviour hints left
unset when the server leaves them unset; :class:`ToolResult` is a call that
reached the server and got an answer, its value what the next steps consume.
A result nested deeper than ``limits.MAX_DEPTH`` is refused here
(``limits.TooDeep``), at the door, rather than breaking whatever handles it
later; ``Hub.call`` records that as no usable reply.

Only the MCP SDK's types are read here, never imported at run time: the hub
imports this module before it spawns the servers, and the SDK after.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import msgspec

from vodou_engine.limits import check_json_depth, check_value_depth

if TYPE_CHECKING:
    from mcp_types import CallToolResult, Tool

__all__ = ["ToolInfo", "ToolResult", "to_result", "tool_info"]


class ToolInfo(msgspec.Struct, frozen=True):
    """What a server says about one tool.

    The behaviour hints stay ``None`` when the server leaves them unset, so a
    caller can tell "the server said false" from "the server said nothing" and
    apply the spec's defaults (read-only false, destructive true, idempotent
    false, open-world true) itself.
    """

    name: str
    description: str = ""
    input_schema: dict[str, Any] = {}
    read_only: bool | None = None
    destructive: bool | None = None
    idempotent: bool | None = None
    title: str | None = None
    open_world: bool | None = None
    output_schema: dict[str, Any] | None = None


class ToolResult(msgspec.Struct):
    """The outcome of one tool call that reached the server and got an answer.

    ``value`` is what downstream steps consume: the structured content when
    the server sends one, else the text block(s) decoded as JSON where they
    are JSON, else the text. ``text`` is always the plain text, for people and
    for error messages. A tool that failed is ``is_error=True`` rather than an
    exception because whether a failed step stops the run is the engine's
    decision, not the transport's. ``error_code`` is set when the server
    refused the request at the protocol level (a JSON-RPC error) instead of
    returning a tool result.
    """

    value: Any
    is_error: bool
    text: str
    duration_s: float
    error_code: int | None = None


def tool_info(tool: Tool) -> ToolInfo:
    """One tool from the server's listing."""
    ann = tool.annotations
    return ToolInfo(
        name=tool.name,
        description=tool.description or "",
        input_schema=dict(tool.input_schema or {}),
        read_only=ann.read_only_hint if ann else None,
        destructive=ann.destructive_hint if ann else None,
        idempotent=ann.idempotent_hint if ann else None,
        title=tool.title or (ann.title if ann else None),
        open_world=ann.open_world_hint if ann else None,
        output_schema=tool.output_schema,
    )


def maybe_json(text: str) -> Any:
    """The text decoded as JSON where it is JSON, else the text itself.

    Raises ``limits.TooDeep`` for JSON nested deeper than ``limits.MAX_DEPTH``:
    such a value would break whatever handles it later (a recursion limit,
    far from the server that sent it), so it is refused here, at the door.
    """
    if text.lstrip()[:1] in ("[", "{"):  # only an array or object can nest
        check_json_depth(text)
    try:
        return msgspec.json.decode(text)
    except msgspec.DecodeError:
        return text


def to_result(result: CallToolResult, duration: float) -> ToolResult:
    """Raises ``limits.TooDeep`` when the result nests deeper than ``limits.MAX_DEPTH``."""
    texts: list[str] = []
    others: list[dict[str, Any]] = []
    for block in result.content:
        if block.type == "text":
            texts.append(block.text)
        else:
            others.append(block.model_dump(mode="json", by_alias=True, exclude_none=True))
    for other in others:
        check_value_depth(other)
    if result.structured_content is not None:
        check_value_depth(result.structured_content)
        value: Any = result.structured_content
    elif texts:
        parsed = [maybe_json(t) for t in texts]
        value = parsed[0] if len(parsed) == 1 else parsed
    else:
        # Only images/resources: hand them on as their JSON form rather than dropping them.
        value = others or None
    return ToolResult(value=value, is_error=bool(result.is_error), text="\n".join(texts), duration_s=duration)
