"""JSON literals in recipe text: the fast ways to decode them, and their positions later.

Most tool arguments are a one-line JSON object (a JSON_FLAT or JSON_LINE
token, grammar.lark). The lexer, the tree builder and lowering each need to
decode one or to say where its strings were; the rules for that live here
so the three agree.
"""

from __future__ import annotations

import json
import re
from typing import Any, NoReturn

from . import ast

FLAT_PART = re.compile(r'"(?:[^"\\\n]|\\.)*"|[^\s{}\[\]:,"]+|[{}\[\]:,]')
"""The parts of a JSON_FLAT token: a string (escapes and all), a number or word, a bracket, a colon or a comma."""
LITERALS = {"true": True, "false": False, "null": None}
SURROGATE = re.compile("[\ud800-\udfff]")
"""A lone surrogate: not text, whether written raw or as a ``\\u`` escape."""


class NotPlain(Exception):
    """The text needs the positioned rules: they find the mistake and say where it is."""


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):
        raise NotPlain  # a duplicate key: the positioned scan reports it
    return out


MAX_PLAIN_DIGITS = 4000
"""Below Python's limit on converting digits to an int; longer goes the positioned way, which refuses it."""


def _finite(text: str) -> float:
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise NotPlain  # too large: the positioned scan reports it
    return value


def _no_constant(text: str) -> NoReturn:
    raise NotPlain  # NaN and Infinity are not JSON, whatever json.loads says


PLAIN = json.JSONDecoder(object_pairs_hook=_pairs, parse_float=_finite, parse_constant=_no_constant, strict=False)


def plain_json(raw: str) -> dict[str, Any] | None:
    """A one-line JSON object decoded by ``json`` alone, or None if it needs the rules.

    Most tool arguments are a one-line object of plain strings, and most of
    their strings will never be pointed at. Without a backslash there is
    nothing to check but duplicate keys, numbers too large and that it is
    one object and nothing more, so the object is decoded in C, and
    positions are computed only if lowering finds a mistake in it
    (``positioned_args``).
    """
    if "\\" in raw:
        return None
    try:
        value, end = PLAIN.raw_decode(raw)
    except (NotPlain, ValueError):
        return None
    return value if end == len(raw) and type(value) is dict else None


# The parts of a JSON text without backslashes: a string, a number or word,
# a bracket (colons and commas fall between them).
_JSON_PART = re.compile(r'"[^"]*"|[^ {}\[\]:,"]+|[{}\[\]]')


def positioned_args(call: ast.ToolCall) -> dict[str, Any]:
    """The arguments of a call decoded by ``plain_json``, again, each string with its position.

    json took the token without complaint, so this only has to say where
    each string was, as the JSON rules would have for its STRING token.
    """
    assert call.flat is not None, "only a call read from one-line JSON has positions to find"
    text, line, column = call.flat
    parts = iter(_JSON_PART.finditer(text))

    def value(m: re.Match[str]) -> Any:
        part = m.group()
        if part == "{":
            out: dict[str, Any] = {}
            for k in parts:
                if k.group() == "}":
                    return out
                out[k.group()[1:-1]] = value(next(parts))
        if part == "[":
            items: list[Any] = []
            for v in parts:
                if v.group() == "]":
                    return items
                items.append(value(v))
        if part[0] == '"':
            s = ast.JStr(part[1:-1])
            s.pos = ast.Pos(line, column + m.start(), len(part))
            s.raw = part
            return s
        return LITERALS[part] if part in LITERALS else json.loads(part)  # JSON_LINE: decoded cleanly already

    args: dict[str, Any] = value(next(parts))  # the text is one object: plain_json took it
    return args
