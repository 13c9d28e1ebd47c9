"""References inside JSON strings: ``{name}``, ``{name.field.0}``, ``{{`` and ``}}``.

The compiler uses this to check references; the runtime uses the same code to
resolve them, so the two can never disagree about what a string means.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

_REF = re.compile(r"\{([a-z_][a-z0-9_-]*)((?:\.[A-Za-z0-9_-]+)*)\}")
# A doubled brace, a reference, or a brace that is neither (a mistake).
_PART = re.compile(r"\{\{|\}\}|" + _REF.pattern + r"|[{}]")


@dataclass(frozen=True, slots=True)
class Ref:
    name: str
    path: tuple[str, ...]
    start: int  # offset of "{" in the decoded string
    end: int


class TemplateSyntaxError(ValueError):
    def __init__(self, message: str, offset: int, hint: str):
        super().__init__(message)
        self.offset = offset
        self.hint = hint


def parse(text: str) -> list[str | Ref]:
    """Split a string into literal parts and references."""
    if "{" not in text and "}" not in text:
        return [text]
    parts: list[str | Ref] = []
    buf: list[str] = []
    i = 0
    # Brace by brace (each match starts at the next one); the text between is literal.
    for m in _PART.finditer(text):
        j = m.start()
        if j > i:
            buf.append(text[i:j])
        i = m.end()
        token = m.group()
        if token == "{{" or token == "}}":
            buf.append(token[0])
        elif token == "{":
            close = text.find("}", j)
            inner = text[j + 1 : close] if close > 0 else text[j + 1 :]
            if close < 0:
                raise TemplateSyntaxError(
                    "a `{` that starts no reference", j, "write {{ for a literal brace, or close the reference with }"
                )
            raise TemplateSyntaxError(
                f"{{{inner}}} is not a reference",
                j,
                "a reference is {name} or {name.field.0} with a lower-case step or input name; write {{ and }} for literal braces",
            )
        elif token == "}":
            raise TemplateSyntaxError("a `}` that closes no reference", j, "write }} for a literal brace")
        else:
            if buf:
                parts.append("".join(buf))
                buf = []
            dotted = m.group(2)
            parts.append(Ref(m.group(1), tuple(dotted[1:].split(".")) if dotted else (), j, i))
    if i < len(text):
        buf.append(text[i:])
    if buf:
        parts.append("".join(buf))
    return parts


_CACHED_CHARS = 1024
"""Strings up to this long are split once per process (:func:`_parsed`): a recipe's own
arguments, rendered again at every step that uses them."""


@lru_cache(maxsize=4096)
def _parsed(text: str) -> tuple[str | Ref, ...]:
    """:func:`parse`, kept (its parts are immutable); an error is raised again each time."""
    return tuple(parse(text))


def parts_of(text: str) -> tuple[str | Ref, ...] | list[str | Ref]:
    """:func:`parse` for rendering: a short string's parts are kept, not split again per step."""
    return _parsed(text) if len(text) <= _CACHED_CHARS else parse(text)


def ref_names(text: str) -> list[str]:
    """The names ``parse`` would find references to, in order, without building them.

    When every brace in the text belongs to a reference found by the one
    regex, that is all there is to know; anything else (doubled braces, a
    mistake) goes through ``parse``, errors included.
    """
    if "{" not in text and "}" not in text:
        return []
    found = _REF.findall(text)
    if text.count("{") == len(found) == text.count("}"):
        return [name for name, _ in found]
    return [p.name for p in parse(text) if isinstance(p, Ref)]


def iter_strings(value: Any) -> Iterator[str]:
    """Every string value (not key) inside a JSON value."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from iter_strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from iter_strings(v)


def refs(value: Any) -> list[Ref]:
    out: list[Ref] = []
    for s in iter_strings(value):
        out.extend(p for p in parse(s) if isinstance(p, Ref))
    return out


class MissingValue(LookupError):
    """A reference names a value that does not exist at run time."""


def compact(value: Any) -> str:
    """A JSON value in one line, as a card shows it."""
    return json.dumps(value, ensure_ascii=False, separators=(", ", ": "))


def lookup_path(value: Any, ref: Ref, before: tuple[str, ...] = ()) -> Any:
    """The value at ``ref.path`` inside ``value``; ``before``: the path already taken to reach it.
    ``.count`` of a list is its length (a loop's per-item outputs, or any list)."""
    for key in ref.path:
        if isinstance(value, dict) and key in value:
            value = value[key]
        elif isinstance(value, list) and key.isdigit() and int(key) < len(value):
            value = value[int(key)]
        elif isinstance(value, list) and key == "count":
            value = len(value)
        else:
            dotted = ".".join((ref.name, *before, *ref.path))
            where = f"the content of {ref.name}" if before else f"the value of {ref.name}"
            raise MissingValue(f"{{{dotted}}}: {key!r} is not in {where}")
    return value


CONTENT = "content"
"""``{step.content}``: the content blocks of a tool step's answer, unless its value has a
field of that name (docs/recipe-language.md)."""
_PLAIN = frozenset({int, float, bool, type(None)})
"""JSON values that are never templates: a list's are kept without a call to :func:`render`."""


def lookup(ref: Ref, resolve: Callable[[str], Any], content: Callable[[str], Any] | None = None) -> Any:
    """What one reference stands for. ``{step.content...}`` reads the step's content blocks
    (``content(name)``) when its value is not an object with a ``content`` field of its own:
    a recipe that reads such a field today keeps reading it."""
    value = resolve(ref.name)
    path = ref.path
    if content is not None and path and path[0] == CONTENT and not (isinstance(value, dict) and CONTENT in value):
        blocks = content(ref.name)
        if blocks is not None:
            return lookup_path(blocks, Ref(ref.name, ref.path[1:], ref.start, ref.end), (CONTENT,))
    return lookup_path(value, ref)


def render(value: Any, resolve: Callable[[str], Any], content: Callable[[str], Any] | None = None) -> Any:
    """Resolve every reference in a JSON value.

    A string that is exactly one reference takes the value as is (a list stays
    a list); otherwise each value is formatted into the text (strings as they
    are, anything else as compact JSON). ``content``: a step's content blocks, or
    None when it has none (see :func:`lookup`).
    """
    if isinstance(value, str):
        parts = _parsed(value) if len(value) <= _CACHED_CHARS else parse(value)  # parts_of, one call less
        if len(parts) == 1 and isinstance(parts[0], Ref):
            return lookup(parts[0], resolve, content)
        out = []
        for p in parts:
            if isinstance(p, Ref):
                v = lookup(p, resolve, content)
                out.append(v if isinstance(v, str) else json.dumps(v, ensure_ascii=False, sort_keys=True))
            else:
                out.append(p)
        return "".join(out)
    # a number, true/false or null holds no reference: kept without a call (a loop's list
    # written in place may hold thousands; a thousand branches' `{"ms": 10}` a call each)
    if isinstance(value, dict):
        return {k: v if type(v) in _PLAIN else render(v, resolve, content) for k, v in value.items()}
    if isinstance(value, list):
        return [v if type(v) in _PLAIN else render(v, resolve, content) for v in value]
    return value
