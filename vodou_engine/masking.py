"""Secret values kept out of everything a server sends, before anything reads it.

A server is given values from the caller's environment (``${VAR}`` in its
configuration, ``inherit``): API keys, tokens, passwords. A server that
echoes one (an error saying which key it was given, a debug dump of its
request, a log line) would put it in a run's results, its errors, the
store, the CLI's output and the web page. So every message a server sends
is masked where the transport receives it (``tools/stdio.py``,
``tools/http.py``), before the MCP SDK parses it: each value, wherever it
appears in a string, becomes its ``${VAR}``. Nothing downstream (the hub,
the store, a report, the SDK's own log) ever holds the value. The same
masking applies to the other text a server produces (its stderr) and to
the engine's messages about it.

What is found, in every string of a message (keys and numbers included),
also inside text that is itself JSON:

* the value as it is;
* the value JSON-escaped, to any depth (``\\"``, ``\\\\``, ``\\/``, ``\\n``...),
  ``\\u``-escaped (either case of hex), and Python's ``\\x`` escapes;
* percent-encoded (either case), ``+`` for a space;
* HTML-escaped (``&quot;``, ``&#34;``, ``&amp;``... for ``" & < > '``);
* any mix of those within one occurrence (``s3\\u0063r%65t``);
* base64 and URL-safe base64, at any of the three alignments, for values of
  at least :data:`BASE64_MIN` bytes (the part of the encoding that depends
  on the value alone: a few bits at either end can remain);
* split across the consecutive text blocks of one tool result.

What is not: other transformations (hex, a hash, a value reversed, split
across two messages, or encoded twice in different ways). Masking guards
against a server echoing what it was given; a server that means to leak a
value it holds can always encode it some other way, or send it elsewhere.

Values shorter than :data:`MASK_MIN` characters are not masked: they are no
secret worth the name (a port, a flag, a region), and masking every place a
server's text happens to contain them would change results.

Cost: a server given no value costs nothing. Otherwise a message is first
searched for the two halves of the value's longest run of letters, digits
and ``-._~`` (escapes of such characters decoded first, where there are
any): a few substring searches. Only a message that holds one is decoded
and each of its strings matched against the pattern of every spelling.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Mapping
from itertools import pairwise
from typing import Any, overload

import msgspec

__all__ = ["BASE64_MIN", "MASK_MIN", "Mask"]

MASK_MIN = 8
"""Values taken from the environment shorter than this (in characters) are not masked."""

BASE64_MIN = 8
"""Values of at least this many bytes are also found base64-encoded (shorter ones would
leave so few characters to match that unrelated base64 data would match them)."""

_SHORT = {'"': '"', "/": "/", "\b": "b", "\f": "f", "\n": "n", "\r": "r", "\t": "t", "'": "'"}
"""Characters with a one-letter backslash escape (JSON's, and Python's ``\\'``)."""

_HTML = {"&": "amp", "<": "lt", ">": "gt", '"': "quot", "'": "apos"}

_ESC = r"\\(?<!\\\\)\\*+"
"""A backslash, or a run of them (an escape inside text that was itself escaped again),
taken whole: only where the run starts, and never given back. Every spelling begins with a
literal character, so the engine skips ahead to the few characters that can start one;
taking a run whole keeps a long run of backslashes linear instead of quadratic."""


def _hex(number: int, width: int) -> str:
    """``number`` in hex as a pattern that takes either case of each letter."""
    return "".join(f"[{d}{d.upper()}]" if d.isalpha() else d for d in f"{number:0{width}x}")


def _spellings(c: str) -> list[str]:
    """Patterns for every spelling of one character (see the module docstring), each
    starting with a literal character. ``"\\"`` stands for a run of backslashes."""
    if c == "\\":
        return [_ESC, *(start + "(?:" + _hex(0x5C, 2) + ")" for start in ("%", _ESC + "u00", _ESC + "x"))]
    o = ord(c)
    out = [re.escape(c)]
    escapes = []
    if o <= 0xFFFF:
        escapes.append("u" + _hex(o, 4))
    else:
        high, low = 0xD800 + ((o - 0x10000) >> 10), 0xDC00 + ((o - 0x10000) & 0x3FF)
        escapes.append("u" + _hex(high, 4) + _ESC + "u" + _hex(low, 4))
        escapes.append("U" + _hex(o, 8))
    if o < 0x100:
        escapes.append("x" + _hex(o, 2))
    if c in _SHORT:
        escapes.append(re.escape(_SHORT[c]))
    out.append(_ESC + "(?:" + "|".join(escapes) + ")")
    percent = [_hex(b, 2) for b in c.encode("utf-8", "surrogatepass")]
    rest = "".join("(?:%|" + _ESC + "u0025)" + h for h in percent[1:])
    out += ["%" + percent[0] + rest, _ESC + "u0025" + percent[0] + rest]
    if o >= 0x80:  # the bytes of its UTF-8 form in Python's repr of bytes
        out.append("".join(_ESC + "x" + h for h in percent))
    if c == " ":
        out.append(r"\+")
    if c in _HTML:
        entity = f"(?:{_HTML[c]}|#0*{o}|#[xX]0*{_hex(o, 2)});"
        out += ["&" + entity, _ESC + "u0026" + entity]
    return out


def _units(text: str) -> list[str]:
    """The characters of ``text``, a run of backslashes taken as one."""
    return [m.group()[0] for m in re.finditer(r"\\+|.", text, re.S)]


def _spelled(text: str) -> list[str]:
    """Alternatives matching every spelling of ``text``; each starts with a literal character."""
    units = _units(text)
    rest = []
    for before, c in pairwise(units):
        spellings = _spellings(c)
        if before == "\\":
            # The run of backslashes before it was taken whole, the one that starts this
            # character's escape with it (a backslash as it is, then an escaped character).
            spellings += ["(?<=\\\\)" + s[len(_ESC) :] for s in spellings if s.startswith(_ESC)]
        rest.append("(?:" + "|".join(spellings) + ")")
    return [first + "".join(rest) for first in _spellings(units[0])]


def _base64_forms(value: bytes) -> list[str]:
    """The parts of ``value``'s base64 encodings that depend on ``value`` alone, at each of the
    three positions it can start at within a group of three bytes."""
    forms = []
    for before in range(3):
        total = before + len(value)
        start = (0, 2, 3)[before]  # the first characters of a group mix in the bytes before it
        end = 4 * (total // 3) + total % 3  # and the last ones the bytes after it
        padded = b"\0" * before + value
        for encode in (base64.b64encode, base64.urlsafe_b64encode):
            forms.append(encode(padded)[start:end].decode("ascii"))
    return list(dict.fromkeys(forms))


_PLAIN = re.compile(r"[A-Za-z0-9._~-]+")
"""Characters no encoder escapes unless it escapes everything (JSON, URLs, HTML, base64 all
leave them be): a run of them is how a value is looked for before anything costlier."""

_PLAIN_ESCAPE = (
    _ESC
    + r"(?:u00([2-7][0-9a-fA-F])|x([2-7][0-9a-fA-F]))|%([2-7][0-9a-fA-F])|&#(?:[xX]0*([2-7][0-9a-fA-F])|0*(\d{2,3}));"
)
_PLAIN_ESCAPES = re.compile(_PLAIN_ESCAPE)
_PLAIN_ESCAPES_BYTES = re.compile(_PLAIN_ESCAPE.encode())
"""An escape of a printable ASCII character: decoded before the runs are looked for, so a value
spelled with such escapes (all of them, or a mix) is found too. Escapes of anything else (a
quote, a newline, non-ASCII text) are left alone: they cannot spell a plain character, and
JSON is full of them."""


def _plain_char(groups: tuple) -> str | None:
    u, x, percent, hex_entity, decimal = groups
    code = int(u or x or percent or hex_entity, 16) if decimal is None else int(decimal)
    c = chr(code)
    return c if _PLAIN.fullmatch(c) else None


def _unescaped(text: str) -> str:
    # A search for one character, then for a few, is far faster than the pattern's (JSON
    # inside a string has a backslash before every quote).
    if not (("\\" in text and ("\\u00" in text or "\\x" in text)) or "%" in text or ("&" in text and "&#" in text)):
        return text
    return _PLAIN_ESCAPES.sub(lambda m: _plain_char(m.groups()) or m.group(), text)


def _unescaped_bytes(data: bytes | bytearray) -> bytes | bytearray:
    if not (
        (b"\\" in data and (b"\\u00" in data or b"\\x" in data)) or b"%" in data or (b"&" in data and b"&#" in data)
    ):
        return data

    def plain(m: re.Match[bytes]) -> bytes:
        c = _plain_char(tuple(g.decode() if g is not None else None for g in m.groups()))
        return c.encode() if c is not None else m.group()

    return _PLAIN_ESCAPES_BYTES.sub(plain, data)


def _needles(value: str) -> list[str]:
    """What every spelling of ``value`` contains once plain escapes are decoded: the two halves
    of its longest plain run (one of them is whole even when the value is split in two), or
    the run itself when it is short. None: only the full pattern can tell."""
    runs = _PLAIN.findall(value)
    longest = max(runs, key=len, default="")
    if len(longest) >= 8:
        half = len(longest) // 2
        return [longest[:half], longest[half:]]
    return [longest] if len(longest) >= 4 else []


class _Secret:
    __slots__ = ("needles", "needles_bytes", "pattern", "value", "var")

    def __init__(self, var: str, value: str):
        self.var = var
        self.value = value
        forms = _spelled(value)
        needles = _needles(value)
        raw = value.encode("utf-8", "surrogatepass")
        if len(raw) >= BASE64_MIN and needles:
            for form in _base64_forms(raw):
                forms += _spelled(form)
                needles.append(max(_PLAIN.findall(form), key=len))
        self.pattern = re.compile("|".join(forms))
        needles = list(dict.fromkeys(needles))
        self.needles: list[str] | None = needles or None
        self.needles_bytes = [n.encode() for n in needles] or None

    def maybe_in(self, plain: str) -> bool:
        """``plain``: a text with its plain escapes decoded."""
        if self.needles is None:
            return self.pattern.search(plain) is not None
        return any(n in plain for n in self.needles)


class Mask:
    """Replaces each value of ``secrets`` (variable -> value) with ``${VARIABLE}``, in every
    spelling the module docstring lists. Built cheaply; the patterns are compiled on first use.

    Each text is looked at in two steps: a few substring searches for pieces of the value
    (after decoding escapes of plain characters, which are rare), and only where one is found,
    the full pattern of every spelling, which finds and replaces it."""

    __slots__ = ("_secrets", "_values")

    def __init__(self, secrets: Mapping[str, str]):
        seen: dict[str, str] = {}
        for var, value in secrets.items():
            if len(value) >= MASK_MIN:
                seen.setdefault(value, var)
        # Longest first, so a value that contains another is named by itself.
        self._values = sorted(((var, value) for value, var in seen.items()), key=lambda s: len(s[1]), reverse=True)
        self._secrets: list[_Secret] | None = None

    def __bool__(self) -> bool:
        return bool(self._values)

    def with_values(self, more: Mapping[str, str]) -> Mask:
        """This mask and ``more`` (variable -> value) besides: for values a session only learns
        as it goes (an OAuth server's tokens, ``tools/oauth.py``)."""
        return Mask({**dict(self._values), **more})

    def _compiled(self) -> list[_Secret]:
        if self._secrets is None:
            self._secrets = [_Secret(var, value) for var, value in self._values]
        return self._secrets

    # -- text -------------------------------------------------------------

    def text(self, text: str) -> str:
        """``text`` with every value found replaced by its ``${VAR}``."""
        if not self._values or not text:
            return text
        plain = _unescaped(text)
        spans = [
            (m.start(), m.end(), s.var) for s in self._compiled() if s.maybe_in(plain) for m in s.pattern.finditer(text)
        ]
        return _replace(text, spans) if spans else text

    # -- messages ---------------------------------------------------------

    @overload
    def message(self, data: bytes) -> bytes: ...
    @overload
    def message(self, data: bytearray) -> bytes | bytearray: ...
    def message(self, data: bytes | bytearray) -> bytes | bytearray:
        """One JSON-RPC message as a server sent it, masked: every string in it (and every
        number, which becomes the string ``${VAR}`` if it is a value), each text block of a
        result with its neighbours. The message's ``id`` is left as it is (it matches the reply
        to its request). Not JSON: masked as text (the SDK refuses it anyway)."""
        if not self._values or not self._maybe_in(data):
            return data
        try:
            decoded = msgspec.json.decode(data)
        except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
            return self.text(data.decode("utf-8", "replace")).encode()
        if isinstance(decoded, dict):
            masked = {
                k if k == "id" else self._value(k): (v if k == "id" else self._value(v)) for k, v in decoded.items()
            }
            result = masked.get("result")
            if isinstance(result, dict) and isinstance(result.get("content"), list):
                self._blocks(result["content"])
        else:
            masked = self._value(decoded)
        return msgspec.json.encode(masked)

    def _maybe_in(self, data: bytes | bytearray) -> bool:
        plain = _unescaped_bytes(data)
        for secret in self._compiled():
            if secret.needles_bytes is None:
                return True  # a value with no plain run: the message is decoded and looked at string by string
            if any(n in plain for n in secret.needles_bytes):
                return True
        return False

    def _value(self, value: Any) -> Any:
        # Iterative: a message may nest as deep as the decoder allowed.
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            text = msgspec.json.encode(value).decode()
            shown = self.text(text)
            return value if shown == text else shown
        if not isinstance(value, (dict, list)):
            return value
        root: list[Any] = [value]
        stack: list[tuple[Any, Any, Any]] = [(root, 0, value)]
        while stack:
            parent, key, item = stack.pop()
            if isinstance(item, dict):
                copy: dict[Any, Any] = {}
                for k, v in item.items():
                    copy[self.text(k) if isinstance(k, str) else k] = v
                parent[key] = copy
                stack.extend((copy, k, v) for k, v in copy.items() if isinstance(v, (dict, list, str, int, float)))
            elif isinstance(item, list):
                copy_list = list(item)
                parent[key] = copy_list
                stack.extend(
                    (copy_list, i, v) for i, v in enumerate(copy_list) if isinstance(v, (dict, list, str, int, float))
                )
            else:
                parent[key] = self._value(item)
        return root[0]

    def _blocks(self, content: list[Any]) -> None:
        """A value split across consecutive text blocks (each masked alone already): the parts."""
        run: list[dict] = []
        for block in [*content, None]:
            if isinstance(block, dict) and block.get("type") == "text" and isinstance(block.get("text"), str):
                run.append(block)
                continue
            if len(run) > 1:
                self._across(run)
            run = []

    def _across(self, blocks: list[dict]) -> None:
        texts = [b["text"] for b in blocks]
        joined = "".join(texts)
        plain = _unescaped(joined)
        spans = [
            (m.start(), m.end(), s.var)
            for s in self._compiled()
            if s.maybe_in(plain)
            for m in s.pattern.finditer(joined)
        ]
        if not spans:
            return
        starts = [0]
        for t in texts:
            starts.append(starts[-1] + len(t))
        cuts: list[list[tuple[int, int, str]]] = [[] for _ in blocks]
        for start, end, var in _merged(spans):
            for i in range(len(texts)):
                lo, hi = max(start, starts[i]), min(end, starts[i + 1])
                if lo < hi:
                    cuts[i].append((lo - starts[i], hi - starts[i], var))
        for block, text, spans in zip(blocks, texts, cuts, strict=True):
            if spans:
                block["text"] = _replace(text, spans)


def _merged(spans: list[tuple[int, int, str]]) -> list[tuple[int, int, str]]:
    """Overlapping spans as one, named after the longest of them."""
    out: list[tuple[int, int, str]] = []
    longest = 0
    for start, end, var in sorted(spans):
        if out and start < out[-1][1]:
            last_start, last_end, last_var = out[-1]
            if end - start > longest:
                last_var, longest = var, end - start
            out[-1] = (last_start, max(last_end, end), last_var)
        else:
            out.append((start, end, var))
            longest = end - start
    return out


def _replace(text: str, spans: list[tuple[int, int, str]]) -> str:
    parts = []
    at = 0
    for start, end, var in _merged(spans):
        parts.append(text[at:start])
        parts.append(f"${{{var}}}")
        at = end
    parts.append(text[at:])
    return "".join(parts)
