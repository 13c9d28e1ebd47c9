"""Checks on the whole text before it is lexed, for mistakes the grammar would explain badly.

A control character, a tab, an empty recipe or an indented first line would
each reach the parser as some unexpected token on some line; said here,
first, each gets its own message and caret.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from . import ast
from .literals import SURROGATE
from .source import Source

# Characters that have no business in a recipe (outside a tab, reported on its own).
_CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\ufeff\ud800-\udfff]|\r(?!\n)")
_ASCII_OK = bytes(b for b in range(128) if not re.match(_CONTROL.pattern, chr(b) + "\n"))


def _clean_ascii(text: str) -> bool:
    """True if ASCII text has nothing _CONTROL would find (a regex search costs 10x more)."""
    return (
        text.isascii()
        and not text.encode("ascii").translate(None, _ASCII_OK)
        and ("\r" not in text or not _CONTROL.search(text))
    )


def _lines(text: str) -> Iterator[str]:
    """``text.split("\n")``, one line at a time, for loops that stop at the first line of substance."""
    start = 0
    while (end := text.find("\n", start)) >= 0:
        yield text[start:end]
        start = end + 1
    yield text[start:]


def precheck(source: Source) -> None:
    """Errors that read better before the lexer sees the text."""
    text = source.text
    bad = None if _clean_ascii(text) else _CONTROL.search(text)
    if bad:
        at = bad.start()
        line = text.count("\n", 0, at) + 1
        col = at - (text.rfind("\n", 0, at) + 1) + 1
        ch = bad.group()
        if ch == "\ufeff":
            message, hint = "a byte-order mark (U+FEFF)", "save the file as UTF-8 without a byte-order mark"
        elif "\ud800" <= ch <= "\udfff":
            message, hint = (
                f"a lone surrogate (U+{ord(ch):04X}), which is not text",
                "the text was decoded wrongly; read the file as UTF-8",
            )
        elif ch == "\r":
            message, hint = (
                "a carriage return that does not end a line",
                "save the file with \\n (or \\r\\n) line endings",
            )
        else:
            message, hint = f"a control character (U+{ord(ch):04X})", "remove it; a recipe is plain text"
        err = source.error(message, ast.Pos(line, col), hint=hint)
        err.source_line = SURROGATE.sub("\ufffd", err.source_line or "")  # printable, whatever it held
        raise err
    tab = text.find("\t")
    if tab >= 0:
        line = text.count("\n", 0, tab) + 1
        start = text.rfind("\n", 0, tab) + 1
        col = tab - start + 1
        if text[start:tab].strip(" "):
            raise source.error(
                "a tab character in the middle of a line; recipes use spaces",
                ast.Pos(line, col),
                hint="replace the tab with a space (inside a JSON string, write \\t)",
            )
        raise source.error(
            "a tab character; recipes are indented with spaces",
            ast.Pos(line, col),
            hint="replace each tab with spaces (two per level is the house style)",
        )
    if not text.strip() or all(not ln.strip() or ln.lstrip().startswith("#") for ln in _lines(text)):
        raise source.error(
            "the recipe is empty: it has no steps",
            ast.Pos(1, 1),
            hint='add a step, e.g. `now: time.get_current_time {"timezone": "UTC"}`',
        )
    for n, line_text in enumerate(_lines(text), 1):
        stripped = line_text.lstrip(" ")
        if stripped and not stripped.startswith("#"):
            if len(stripped) != len(line_text):
                raise source.error(
                    "the first line of a recipe cannot be indented",
                    ast.Pos(n, 1, len(line_text) - len(stripped)),
                    hint="start top-level steps and blocks at column 1",
                )
            break
