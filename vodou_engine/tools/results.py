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

__all__ = [
    "CONTENT_EVENT",
    "ToolInfo",
    "ToolResult",
    "blocks_of",
    "byte_words",
    "describe_block",
    "is_plain",
    "stored_contents",
    "to_result",
    "tool_info",
]


_canonical = msgspec.json.Encoder(order="deterministic")

CONTENT_EVENT = "content"
"""The run event that keeps a tool step's content blocks, ``{"content": [block, ...]}``,
written with the step's state when its value alone does not give them back."""


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
    task_required: bool = False
    """Listed as callable only as a task (MCP 2025-11-25, ``execution.taskSupport: "required"``):
    kept with the rest, so a card made from a kept listing refuses it as a live one does."""


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
    content: list[dict[str, Any]] | None = None
    """Every content block as the server sent it (its JSON form: images, audio, resource
    links, embedded resources, text, each with its annotations and ``_meta``), in order;
    None when ``value`` gives them back whole (:func:`is_plain`: one plain text block that is
    the value, or its JSON), so the record keeps it once. What a recipe reads as ``{step.content}`` (docs/recipe-language.md)."""


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
        task_required=tool.execution is not None and tool.execution.task_support == "required",
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


def is_plain(blocks: list[dict[str, Any]], value: Any) -> bool:
    """Whether the value alone gives back every block (:func:`blocks_of`): no block at all
    and no value, or one text block with no annotations and no ``_meta`` whose text is the
    value itself, or an object or array that is the value (the structured content a server
    also sends as text, or a text decoded as JSON). Then nothing is kept twice."""
    if not blocks:
        return value is None
    if len(blocks) != 1:
        return False
    block = blocks[0]
    if len(block) != 2 or block.get("type") != "text" or "text" not in block:  # keys: type and text, no more
        return False
    text = block["text"]
    if text == value:
        return True
    if not isinstance(value, (dict, list)) or not isinstance(text, str) or text.lstrip()[:1] not in ("{", "["):
        return False
    try:
        same = msgspec.json.decode(text)
    except msgspec.DecodeError:
        return False
    # compared as JSON, not as Python values: `true` is not `1`, nor `1.0` `1`
    return bool(_canonical.encode(same) == _canonical.encode(value))


def blocks_of(value: Any) -> list[dict[str, Any]]:
    """The content blocks of an answer the value gives back whole (:func:`is_plain`): its one
    text block (an object or array written as compact JSON), or none."""
    if value is None:
        return []
    text = value if isinstance(value, str) else msgspec.json.encode(value).decode()
    return [{"type": "text", "text": text}]


_PLAIN_TEXT_FIELDS = frozenset({"type", "text", "annotations", "meta"})
_plain_text_class: dict[type, bool] = {}
"""Per content block class: whether it is the SDK's text block as it stands (these fields and
no extra ones kept), so that one with no annotations and no ``_meta`` dumps to its type and text."""


def _block_doc(block: Any) -> dict[str, Any]:
    """A content block as JSON (``model_dump``): a bare text block, the answer of most tools,
    written out directly (a tenth of the dump's cost, the same document)."""
    cls = type(block)
    plain = _plain_text_class.get(cls)
    if plain is None:
        plain = _plain_text_class[cls] = set(cls.model_fields) == _PLAIN_TEXT_FIELDS and cls.model_config.get(
            "extra"
        ) in (None, "ignore")
    if plain and block.type == "text" and block.annotations is None and block.meta is None:
        return {"type": "text", "text": block.text}
    return block.model_dump(mode="json", by_alias=True, exclude_none=True)  # type: ignore[no-any-return]


def to_result(result: CallToolResult, duration: float, *, flat: bool = False) -> ToolResult:
    """The answer as the next steps read it, every content block kept beside the value.

    Raises ``limits.TooDeep`` when the result nests deeper than ``limits.MAX_DEPTH``;
    ``flat``: the transport saw that the reply's message could not (``CallWatch.flat_reply``),
    so the blocks and structured content are not walked. A text decoded as JSON is
    checked either way (it nests inside a string). The blocks need no bound of their
    own: they came in one message, which the transport bounded
    (``limits.MAX_MESSAGE_BYTES``) before the SDK parsed it.
    """
    blocks = [_block_doc(block) for block in result.content]
    texts = [block["text"] for block in blocks if block.get("type") == "text"]
    if not flat:
        for block in blocks:
            check_value_depth(block)
    if result.structured_content is not None:
        if not flat:
            check_value_depth(result.structured_content)
        value: Any = result.structured_content
    elif texts:
        parsed = [maybe_json(t) for t in texts]
        value = parsed[0] if len(parsed) == 1 else parsed
    else:
        # Only images/resources: hand them on as their JSON form rather than dropping them.
        value = [block for block in blocks if block.get("type") != "text"] or None
    return ToolResult(
        value=value,
        is_error=bool(result.is_error),
        text="\n".join(texts),
        duration_s=duration,
        content=None if is_plain(blocks, value) else blocks,
    )


def stored_contents(events: list[Any]) -> dict[str, list[Any]]:
    """Each step's content blocks from a run's events (the latest per step, should a crash
    have repeated a read)."""
    out: dict[str, list[Any]] = {}
    for e in events:
        if e.kind == CONTENT_EVENT and e.node_id:
            out[e.node_id] = msgspec.json.decode(e.data_json or "{}").get("content") or []
    return out


def byte_words(size: int) -> str:
    """A number of bytes as a person skims it: ``812 bytes``, ``1.2 KB``, ``3.4 MB`` (1 KB = 1,024 bytes)."""
    if size < 1024:
        return f"{size:,} byte" + ("" if size == 1 else "s")
    if size < 1024 * 1024:
        return f"{size / 1024:.1f} KB"
    return f"{size / (1024 * 1024):.1f} MB"


def _base64_size(data: Any) -> int:
    """How many bytes a base64 text decodes to, without decoding it."""
    if not isinstance(data, str):
        return 0
    text = data.strip()
    return max(0, len(text) * 3 // 4 - text[-2:].count("="))


def _annotations(block: dict[str, Any]) -> str:
    ann = block.get("annotations")
    if not isinstance(ann, dict) or not ann:
        return ""
    parts = []
    for key in sorted(ann):
        value = ann[key]
        parts.append(f"{key}: {', '.join(map(str, value)) if isinstance(value, list) else value}")
    return " [" + "; ".join(parts) + "]"


def describe_block(block: Any) -> str:
    """One content block in a line, for ``recipe show`` and the run page: its kind, media type
    and size, a link's URI and name, its annotations (``image/png, 1.2 KB``;
    ``link file:///a.txt (a.txt), text/plain``). Server text: the caller escapes it."""
    if not isinstance(block, dict):
        return "a block of unknown shape"
    kind = block.get("type")
    if kind in ("image", "audio"):
        line = f"{kind} {block.get('mimeType') or 'of unstated type'}, {byte_words(_base64_size(block.get('data')))}"
    elif kind == "resource_link":
        line = f"link {block.get('uri', '')}"
        if block.get("name"):
            line += f" ({block['name']})"
        if block.get("mimeType"):
            line += f", {block['mimeType']}"
        if isinstance(block.get("size"), int):
            line += f", {byte_words(block['size'])}"
    elif kind == "resource":
        found = block.get("resource")
        res: dict[str, Any] = found if isinstance(found, dict) else {}
        line = f"resource {res.get('uri', '')}"
        if res.get("mimeType"):
            line += f", {res['mimeType']}"
        if isinstance(res.get("text"), str):
            line += f", text of {len(res['text']):,} characters"
        elif "blob" in res:
            line += f", {byte_words(_base64_size(res.get('blob')))}"
    elif kind == "text":
        text = block.get("text")
        line = f"text, {len(text) if isinstance(text, str) else 0:,} characters"
    else:
        line = f"{kind or 'untyped'} block"
    return line + _annotations(block)
