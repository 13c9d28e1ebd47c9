"""What the run page shows of one step beyond its state and output: its content blocks (an
image inline only when the page may show it, a link only when it is http(s)), a server's
question as the fields of a form, and the latest progress its server reported."""

from __future__ import annotations

import re
from typing import Any

from ..text_safety import shown
from ..tools.results import describe_block

INLINE_IMAGES = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp"})
"""Images the run page shows inline, as a ``data:`` URL (the page's CSP allows ``img-src data:``
and nothing else from outside): raster types only, which carry no script of their own."""
MAX_INLINE_IMAGE = 2 * 1024 * 1024
"""The largest base64 text shown as an image; a larger one is described, and `show --json` has it."""
_BASE64 = re.compile(r"[A-Za-z0-9+/]*={0,2}")


def content_item(block: Any) -> dict[str, Any]:
    """One content block as the run page shows it: its line (``describe_block``), an image's
    ``data:`` URL when it is one the page may show, a link's address when it is http(s)."""
    item: dict[str, Any] = {"line": shown(describe_block(block)), "image": None, "href": None}
    if not isinstance(block, dict):
        return item
    data, mime = block.get("data"), block.get("mimeType")
    if (
        block.get("type") == "image"
        and mime in INLINE_IMAGES
        and isinstance(data, str)
        and len(data) <= MAX_INLINE_IMAGE
        and _BASE64.fullmatch(data)
    ):
        item["image"] = f"data:{mime};base64,{data}"
    uri = block.get("uri") if block.get("type") == "resource_link" else None
    if isinstance(uri, str) and uri.lower().startswith(("https://", "http://")):
        item["href"] = uri
    return item


def asked_fields(payload: Any) -> list[dict[str, Any]] | None:
    """A server's question as form fields (name, input type, required, choices, default,
    description), or None for an approval or a recipe's own question."""
    asked = payload.get("elicitation") if isinstance(payload, dict) and set(payload) == {"elicitation"} else None
    if not isinstance(asked, dict):
        return None
    schema = asked.get("schema") or {}
    required = set(schema.get("required") or [])
    fields = []
    for name, prop in (schema.get("properties") or {}).items():
        prop = prop if isinstance(prop, dict) else {}
        kind = prop.get("type", "string")
        fmt = str(prop.get("format") or "")
        widget = {"boolean": "checkbox", "integer": "number", "number": "number"}.get(
            kind, {"email": "email", "date": "date", "uri": "url"}.get(fmt, "text")
        )
        default = prop.get("default")
        fields.append({
            "name": shown(name), "widget": widget, "kind": kind, "required": name in required,
            "choices": [shown(v) for v in prop.get("enum", [])], "step": "any" if kind == "number" else "1",
            "default": "" if default is None else shown(", ".join(default) if isinstance(default, list) else default),
            "checked": default is True, "description": shown(prop.get("description", "")),
        })  # fmt: skip
    return fields


def progress_line(doc: dict[str, Any]) -> str:
    """A server's latest progress on a step's call: ``3/10 step 3`` (``3`` with no total); the
    message is a server's text, shown as every card shows one."""
    value, total = doc.get("progress"), doc.get("total")
    amount = f"{value:g}/{total:g}" if isinstance(total, (int, float)) else f"{value}"
    return shown(amount + (f" {doc['message']}" if doc.get("message") else ""))
