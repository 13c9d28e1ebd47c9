"""An error as data, for an agent or a model: ``code``, ``message``, ``hint``, the place
(``line``, ``column``, ``source_line`` and the ``caret`` under it), ``facts``, and ``text``,
the whole rendering a person would read.

Light on purpose (the error tree only): the agent MCP server turns every failed tool call
into one of these before anything heavier (the compiler, the store) is loaded.
"""

from __future__ import annotations

from typing import Any

from ..errors import VodouError

MAX_ERROR_TEXT = 2000


def caret_line(exc: Any) -> str | None:
    """The line of spaces and carets that goes under ``exc.source_line``."""
    source: str | None = getattr(exc, "source_line", None)
    column: int | None = getattr(exc, "column", None)
    if source is None or column is None:
        return None
    text = source.rstrip("\n").expandtabs(1)
    width = max(1, getattr(exc, "width", 1) or 1)
    return " " * (column - 1) + "^" * min(width, max(1, len(text) - column + 1))


def error_data(exc: BaseException) -> dict[str, Any]:
    """An error as data: ``code``, ``message``, ``hint``, ``line``/``column``/``source_line``/
    ``caret`` for a recipe error, ``facts``, and ``text`` (the whole rendering)."""
    if not isinstance(exc, VodouError):
        return {
            "code": "failed",
            "message": f"{type(exc).__name__}: {exc}"[:MAX_ERROR_TEXT],
            "text": f"{type(exc).__name__}: {exc}"[:MAX_ERROR_TEXT],
        }
    out: dict[str, Any] = {"code": exc.code, "message": exc.message}
    if exc.hint:
        out["hint"] = exc.hint
    line = getattr(exc, "line", None)
    if line is not None:
        out["line"] = line
        out["column"] = getattr(exc, "column", None)
        source = getattr(exc, "source_line", None)
        if source is not None:
            out["source_line"] = source.rstrip("\n").expandtabs(1)
            caret = caret_line(exc)
            if caret is not None:
                out["caret"] = caret
    facts = {k: v for k, v in exc.facts.items() if k not in ("line", "column", "source_line", "path") and _plain(v)}
    if facts:
        out["facts"] = facts
    out["text"] = str(exc)[:MAX_ERROR_TEXT]
    return out


def _plain(value: Any) -> bool:
    return (
        value is None
        or isinstance(value, (str, int, float, bool))
        or (isinstance(value, (list, tuple)) and all(isinstance(v, (str, int, float, bool)) for v in value))
    )
