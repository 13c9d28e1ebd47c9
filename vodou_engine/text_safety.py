"""What a person is shown of a text: every character that hides, and every letter that
passes for another, made visible and marked the same way on every surface.

A card is only worth reading if two different payloads can never look the same.
Some characters draw nothing (zero-width spaces, the soft hyphen, tag characters
U+E0000–E007F, variation selectors, the combining grapheme joiner, U+3164),
some reorder what is around them (bidirectional controls), some break lines
where nobody sees a break (U+2028, U+2029), some look like a space and are not
one, and some letters of another script look exactly like Latin ones (a Cyrillic
``а`` in ``pаypal``). Each of them is shown as a marker, ``⟨U+200B⟩``, never as
itself. So is the marker's own opening bracket ``⟨`` wherever it occurs in a
value: a value that spells ``⟨U+200B⟩`` literally is shown as ``⟨U+27E8⟩U+200B⟩``,
and the marked rendering can be read back to exactly one text.

Three renderings, for three uses:

* :func:`visible`: a value shown as text (a question, a step name, a command
  line): every hidden character, line breaks included, and every look-alike
  letter marked; injective.
* :func:`quote` and :func:`json_text`: a value shown as JSON (a payload, a
  preview, a step's output): JSON's own escapes for ``"``, ``\\``, newline, tab
  and carriage return, markers for the rest; injective, so two payloads that
  differ never render alike.
* :func:`shown`: text that was already composed (a whole card, a tool's error,
  a page): every hidden character marked, newlines and tabs kept. It is what the
  terminal and the web page apply to everything they print, so a character no
  rendering above caught still cannot hide or drive the screen.

:func:`findings` says what a value holds of both kinds (for the card's warning
lines), and :func:`source_warnings` the same of a recipe's text, for the compiler's
warnings.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable
from functools import lru_cache
from typing import Any

OPEN = "\u27e8"
"""``⟨``: opens a marker. Marked itself wherever a value holds it."""
CLOSE = "\u27e9"


def mark(ch: str) -> str:
    """The marker of one character: ``⟨U+200B⟩``."""
    return f"{OPEN}U+{ord(ch):04X}{CLOSE}"


# Unicode's Default_Ignorable_Code_Point (DerivedCoreProperties.txt): drawn as nothing.
_IGNORABLE = (
    (0x00AD, 0x00AD), (0x034F, 0x034F), (0x061C, 0x061C), (0x115F, 0x1160), (0x17B4, 0x17B5),
    (0x180B, 0x180F), (0x200B, 0x200F), (0x202A, 0x202E), (0x2060, 0x206F), (0x3164, 0x3164),
    (0xFE00, 0xFE0F), (0xFEFF, 0xFEFF), (0xFFA0, 0xFFA0), (0xFFF0, 0xFFF8), (0x1BCA0, 0x1BCA3),
    (0x1D173, 0x1D17A), (0xE0000, 0xE0FFF),
)  # fmt: skip
_BLANK_SYMBOLS = frozenset({0x2800})
"""Symbols drawn as nothing (the braille pattern blank)."""
_HIDDEN_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp", "Zs"})
"""Controls, format characters, surrogates, private use, unassigned, line and paragraph
separators, and every space but U+0020 (which is the one space a person can trust)."""

# Letters of other scripts that look like Latin ones (Unicode's confusables for the
# Latin alphabet, the common ones), and Latin letters that pass for others.
_LOOK_ALIKE_LETTERS = frozenset(
    "\u0430\u0432\u0435\u043a\u043c\u043d\u043e\u0440\u0441\u0442\u0443\u0445\u0455\u0456\u0458\u04bb\u04cf\u0501\u051b\u051d"  # Cyrillic small
    "\u0405\u0406\u0408\u0410\u0412\u0415\u041a\u041c\u041d\u041e\u0420\u0421\u0422\u0425\u04ae\u04c0"  # Cyrillic capital
    "\u03b1\u03b9\u03ba\u03bd\u03bf\u03c1\u03c4\u03c5\u03c7"  # Greek small
    "\u0391\u0392\u0395\u0396\u0397\u0399\u039a\u039c\u039d\u039f\u03a1\u03a4\u03a5\u03a7"  # Greek capital
    "\u0585\u057d\u0570\u0578"  # Armenian
    "\u0131\u0251\u0261\u0269"  # Latin: dotless i, alpha, script g, iota
)

_ASCII_UNSAFE = re.compile("[\x00-\x1f\x7f]")
_WORD = re.compile(r"\w+")


@lru_cache(maxsize=8192)
def is_hidden(ch: str) -> bool:
    """Whether ``ch`` draws nothing, draws as a space that is not U+0020, moves or breaks
    the text around it, or may draw anything at all (unassigned, private use)."""
    o = ord(ch)
    if o < 0x80:
        return o < 0x20 or o == 0x7F
    if o in _BLANK_SYMBOLS or any(lo <= o <= hi for lo, hi in _IGNORABLE):
        return True
    return unicodedata.category(ch) in _HIDDEN_CATEGORIES


@lru_cache(maxsize=8192)
def is_look_alike(ch: str) -> bool:
    """A letter or digit outside ASCII that reads as an ASCII one: a Cyrillic or Greek
    twin of a Latin letter, or a compatibility form (fullwidth ``ａ``, mathematical ``𝐚``,
    the ligature ``ﬁ``) that Unicode folds to ASCII letters."""
    if ch.isascii():
        return False
    if ch in _LOOK_ALIKE_LETTERS:
        return True
    if unicodedata.category(ch) not in ("Lu", "Ll", "Lt", "Lm", "Lo", "Nd"):
        return False
    folded = unicodedata.normalize("NFKC", ch)
    return folded != ch and folded.isascii() and folded.isalnum()


def look_alikes(text: str) -> frozenset[int]:
    """Positions of look-alike letters that pass for Latin here: in a word that also has
    ASCII letters (``pаypal``), or making up a whole word's letters in a text that has ASCII
    letters elsewhere (``pay раураl``). A text in one script alone (``привет``) has none."""
    if text.isascii():
        return frozenset()
    found: set[int] = set()
    latin_here = any(c.isascii() and c.isalpha() for c in text)
    for m in _WORD.finditer(text):
        word = m.group()
        suspects = [i for i, c in enumerate(word) if is_look_alike(c)]
        if not suspects:
            continue
        mixed = any(c.isascii() and c.isalpha() for c in word)
        disguised = latin_here and all(is_look_alike(c) or not c.isalpha() for c in word)
        if mixed or disguised:
            found.update(m.start() + i for i in suspects)
        else:  # a compatibility form (fullwidth, mathematical, a ligature) is no script of its own: always marked
            found.update(m.start() + i for i in suspects if word[i] not in _LOOK_ALIKE_LETTERS)
    return frozenset(found)


_JAMO = ((0x1100, 0x11FF), (0xA960, 0xA97F), (0xD7B0, 0xD7FF))
"""Conjoining Hangul jamo: a syllable written as the letters that build it."""


def respelled(text: str) -> frozenset[int]:
    """Positions of the characters that make ``text`` another spelling of a text that looks
    the same: in a text that is not in Unicode's composed form (NFC), every combining mark
    (``e`` + U+0301 is ``é``), conjoining jamo, and character that NFC replaces (the Kelvin
    sign U+212A is ``K``, the Angstrom sign ``Å``). A server compares bytes, a person sees
    glyphs: the two spellings must not look alike on a card."""
    if text.isascii() or unicodedata.is_normalized("NFC", text):
        return frozenset()
    return frozenset(i for i, ch in enumerate(text) if not ch.isascii() and _respelling(ch))


@lru_cache(maxsize=8192)
def _respelling(ch: str) -> bool:
    o = ord(ch)
    return (
        unicodedata.category(ch).startswith("M")
        or any(lo <= o <= hi for lo, hi in _JAMO)
        or unicodedata.normalize("NFC", ch) != ch
    )


def _marked(text: str, keep: str) -> str:
    """``text`` with every hidden character but those in ``keep`` marked, every look-alike
    letter marked, and the marker's opening bracket marked."""
    if text.isascii():
        return _ASCII_UNSAFE.sub(lambda m: m[0] if m[0] in keep else mark(m[0]), text)
    alike = look_alikes(text) | respelled(text)
    out = []
    for i, ch in enumerate(text):
        if ch == OPEN or i in alike or (is_hidden(ch) and ch not in keep):
            out.append(mark(ch))
        else:
            out.append(ch)
    return "".join(out)


def visible(text: str) -> str:
    """A value as one line of text a person can trust: every hidden character (newline and
    tab too), every look-alike letter and every ``⟨`` marked. Injective."""
    return _marked(text, "")


def shown(text: Any) -> str:
    """Text already composed (a card, a server's error, a page's words), made safe to show:
    every hidden character marked, newlines and tabs kept. Idempotent on its own output and
    on :func:`visible`'s; it does not mark ``⟨`` (a marker already in the text stays one)."""
    s = text if isinstance(text, str) else str(text)
    if s.isascii():
        return _ASCII_UNSAFE.sub(lambda m: m[0] if m[0] in "\n\t" else mark(m[0]), s)
    table = hidden_in(s, keep="\n\t")
    return s.translate({ord(ch): mark(ch) for ch in table}) if table else s


def hidden_in(text: str, keep: str = "") -> list[str]:
    """The distinct hidden characters of ``text`` but those in ``keep`` (each looked at once,
    so a long text costs one pass in C and a look at each character it uses)."""
    return [ch for ch in set(text) if ch not in keep and is_hidden(ch)]


_JSON_ESCAPES = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\t": "\\t", "\r": "\\r"}


def quote(text: str) -> str:
    """A string as a JSON string literal, with markers instead of hidden and look-alike
    characters (and ``⟨``); ``"``, ``\\``, newline, tab and carriage return get JSON's
    escapes. Injective."""
    if text.isascii():
        body = text.replace("\\", "\\\\").replace('"', '\\"')
        if _ASCII_UNSAFE.search(body):
            body = _ASCII_UNSAFE.sub(lambda m: _JSON_ESCAPES.get(m[0]) or mark(m[0]), body)
        return f'"{body}"'
    alike = look_alikes(text) | respelled(text)
    out = ['"']
    for i, ch in enumerate(text):
        esc = _JSON_ESCAPES.get(ch)
        if esc is not None:
            out.append(esc)
        elif ch == OPEN or i in alike or is_hidden(ch):
            out.append(mark(ch))
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def json_text(value: Any, indent: int | None = 2) -> str:
    """A JSON value as a person reads it: keys sorted, ``indent`` spaces a level (``None``: on
    one line, as ``json.dumps`` writes it), strings through :func:`quote`, numbers as Python
    writes them (``1`` and ``1.0`` differ, so do ``1`` and ``"1"`` and ``true``). Two values
    that differ never render alike."""
    out: list[str] = []
    _json(value, out, 0, None if indent is None else " " * indent)
    return "".join(out)


def _json(value: Any, out: list[str], depth: int, pad: str | None) -> None:
    if isinstance(value, str):
        out.append(quote(value))
    elif value is None:
        out.append("null")
    elif value is True:
        out.append("true")
    elif value is False:
        out.append("false")
    elif isinstance(value, (int, float)):
        out.append(repr(value) if isinstance(value, float) else str(value))
    elif isinstance(value, dict):
        if not value:
            out.append("{}")
            return
        inner, close = ("\n" + pad * (depth + 1), "\n" + pad * depth) if pad is not None else (" ", "")
        out.append("{")
        for i, key in enumerate(sorted(value, key=str)):
            out.append(("," if i else "") + (inner if i or pad is not None else "") + quote(str(key)) + ": ")
            _json(value[key], out, depth + 1, pad)
        out.append(close + "}")
    elif isinstance(value, (list, tuple)):
        if not value:
            out.append("[]")
            return
        inner, close = ("\n" + pad * (depth + 1), "\n" + pad * depth) if pad is not None else (" ", "")
        out.append("[")
        for i, item in enumerate(value):
            out.append(("," if i else "") + (inner if i or pad is not None else ""))
            _json(item, out, depth + 1, pad)
        out.append(close + "]")
    else:  # not JSON (a value no store or tool hands over): shown by its text, marked
        out.append(visible(str(value)))


# --- what a value holds --------------------------------------------------------------------------


class Findings:
    """Hidden characters and look-alike letters found in a value, by code point."""

    def __init__(self) -> None:
        self.hidden: dict[str, int] = {}
        self.alike: dict[str, int] = {}
        self.tags: list[str] = []
        """Texts spelled in tag characters (U+E0020–E007E stand for ASCII), one per string."""
        self.respelled: dict[str, int] = {}
        """Characters that make a text another spelling of one that looks the same (:func:`respelled`)."""
        self.mixed_direction = 0
        """Strings that hold right-to-left letters next to digits or Latin letters: a screen
        that lays out bidirectional text may show their parts in another order than sent."""
        self.inexact: list[int] = []
        """Whole numbers beyond ±2^53 (:data:`EXACT_INT`): sent exactly, but a server in
        JavaScript (most published MCP servers) reads each as the nearest double, another number."""

    def __bool__(self) -> bool:
        return bool(self.hidden or self.alike or self.respelled or self.mixed_direction or self.inexact)

    def add(self, text: str, newlines: bool = True) -> None:
        """``newlines``: whether a newline or tab in this text counts (inside a JSON string it
        is shown as an escape, so it hides nothing)."""
        if text.isascii():
            for ch in _ASCII_UNSAFE.findall(text):
                if newlines or ch not in "\n\t\r":
                    self.hidden[ch] = self.hidden.get(ch, 0) + 1
            return
        alike, other = look_alikes(text), respelled(text)
        tag = []
        rtl = ltr = False
        for i, ch in enumerate(text):
            if ch.isascii():
                ltr = ltr or ch.isalnum()
            elif not rtl and unicodedata.bidirectional(ch) in ("R", "AL"):
                rtl = True
            if i in alike:
                self.alike[ch] = self.alike.get(ch, 0) + 1
            elif i in other:
                self.respelled[ch] = self.respelled.get(ch, 0) + 1
            elif is_hidden(ch) and (newlines or ch not in "\n\t\r"):
                self.hidden[ch] = self.hidden.get(ch, 0) + 1
            if 0xE0020 <= ord(ch) <= 0xE007E:
                tag.append(chr(ord(ch) - 0xE0000))
            elif tag and not (0xE0000 <= ord(ch) <= 0xE007F):
                self.tags.append("".join(tag))
                tag = []
        if tag:
            self.tags.append("".join(tag))
        if rtl and (ltr or any(ch.isdigit() for ch in text)):
            self.mixed_direction += 1

    def lines(self, what: str, most: int = 6) -> list[str]:
        """The card's warning lines about ``what`` (``the payload``), or none."""
        out = []
        if self.hidden:
            n = sum(self.hidden.values())
            out.append(
                f"⚠ {what} holds {n} hidden character{'s' if n != 1 else ''}, each shown as ⟨U+…⟩ above: "
                + _listed(self.hidden, most)
            )
        for text in self.tags:
            out.append(f"⚠ its tag characters spell {quote(text)}")
        if self.alike:
            n = sum(self.alike.values())
            out.append(
                f"⚠ {what} holds {n} letter{'s' if n != 1 else ''} of another script that pass{'es' if n == 1 else ''} for Latin, each shown as ⟨U+…⟩ above: "
                + _listed(self.alike, most)
            )
        if self.mixed_direction:
            n = self.mixed_direction
            out.append(
                f"⚠ {what} mixes right-to-left letters with numbers or Latin text in {n} string{'s' if n != 1 else ''}: "
                "a screen that lays such text out right to left may show its parts in another order than they are sent; "
                "the inbox shows them in the order they are sent, left to right"
            )
        if self.inexact:
            n = len(self.inexact)
            first = self.inexact[0]
            out.append(
                f"⚠ {what} holds {n} whole number{'s' if n != 1 else ''} beyond ±2^53, past what a server written in "
                f"JavaScript reads exactly: {first} reads there as {as_double(first)}"
                + (f" (and {n - 1} more)" if n > 1 else "")
                + "; an id that large is safe only as text"
            )
        if self.respelled:
            n = sum(self.respelled.values())
            out.append(
                f"⚠ {what} holds {n} character{'s' if n != 1 else ''} of a text spelled otherwise than the same text looks "
                f"(not in Unicode's composed form), each shown as ⟨U+…⟩ above: " + _listed(self.respelled, most)
            )
        return out


_CONTROL_NAMES = {
    0x00: "NULL",
    0x08: "BACKSPACE",
    0x09: "CHARACTER TABULATION",
    0x0A: "LINE FEED",
    0x0B: "LINE TABULATION",
    0x0C: "FORM FEED",
    0x0D: "CARRIAGE RETURN",
    0x1B: "ESCAPE",
    0x7F: "DELETE",
    0x85: "NEXT LINE",
    0x9B: "CONTROL SEQUENCE INTRODUCER",
}


def name_of(ch: str) -> str:
    """A character's Unicode name (controls have none there: their usual one, or what they are)."""
    name = unicodedata.name(ch, "")
    if name:
        return name
    o = ord(ch)
    if o in _CONTROL_NAMES:
        return _CONTROL_NAMES[o]
    cat = unicodedata.category(ch)
    return {"Cc": "a control character", "Co": "a private-use character", "Cs": "a lone surrogate"}.get(
        cat, "an unassigned code point"
    )


def _listed(counts: dict[str, int], most: int) -> str:
    tags = sum(n for ch, n in counts.items() if 0xE0000 <= ord(ch) <= 0xE007F)
    items = sorted(
        ((ch, n) for ch, n in counts.items() if not 0xE0000 <= ord(ch) <= 0xE007F), key=lambda kv: (-kv[1], ord(kv[0]))
    )
    words = [f"U+{ord(ch):04X} {name_of(ch)}" + (f" ×{n}" if n > 1 else "") for ch, n in items[:most]]
    if tags:
        words.insert(0, f"TAG characters (U+E0000–E007F) ×{tags}")
    if len(items) > most:
        rest = len(items) - most
        words.append(f"and {rest} more kind{'s' if rest != 1 else ''}")
    return ", ".join(words)


def findings(value: Any, into: Findings | None = None, *, json: bool = True) -> Findings:
    """Hidden and look-alike characters anywhere in a JSON value (keys too). ``json``: the
    value is shown as JSON, where newline and tab are escapes, not hidden characters."""
    found = into if into is not None else Findings()
    for text in _strings(value):
        found.add(text, newlines=not json)
    found.inexact.extend(_inexact_ints(value))
    return found


EXACT_INT = 2**53
"""Past this, whole numbers are no longer all exact as IEEE doubles, JavaScript's only numbers."""


def as_double(n: int) -> str:
    """The whole number a server in JavaScript reads for ``n``: the nearest double, exactly."""
    try:
        return str(int(float(n)))
    except OverflowError:
        return "Infinity" if n > 0 else "-Infinity"


def _inexact_ints(value: Any) -> Iterable[int]:
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, int) and not isinstance(v, bool):
            if abs(v) > EXACT_INT and as_double(v) != str(v):
                yield v
        elif isinstance(v, dict):
            stack.extend(v.values())
        elif isinstance(v, (list, tuple)):
            stack.extend(v)


def _strings(value: Any) -> Iterable[str]:
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, str):
            yield v
        elif isinstance(v, dict):
            for k, item in v.items():
                yield str(k)
                stack.append(item)
        elif isinstance(v, (list, tuple)):
            stack.extend(v)


# --- a recipe's text --------------------------------------------------------------------------------


def source_warnings(text: str, path: str | None = None) -> list[str]:
    """One warning per line of a recipe that holds a hidden character or a look-alike letter
    written as itself. An escape such as ``\\u200b`` is visible in the file, so it is not
    warned about; a card marks the character either way."""
    if text.isascii() and not _ASCII_UNSAFE.search(text.replace("\n", "").replace("\t", "").replace("\r", "")):
        return []
    out = []
    for number, line in enumerate(text.split("\n"), 1):
        line = line.removesuffix("\r")
        alike = look_alikes(line) | respelled(line)
        odd = [(i, ch) for i, ch in enumerate(line) if (is_hidden(ch) and ch != "\t") or i in alike]
        if not odd:
            continue
        names: list[str] = []
        for i, ch in odd:
            name = f"U+{ord(ch):04X} {name_of(ch)}" + (" (a look-alike letter)" if i in alike else "")
            if name not in names:
                names.append(name)
        listed = ", ".join(names[:4]) + (f" and {len(names) - 4} more" if len(names) > 4 else "")
        out.append(
            f"{path or '<recipe>'}:{number}:{odd[0][0] + 1}: {listed} written as itself, where nobody reading the recipe sees it; "
            f"cards show it marked: {visible(line.strip())}. Write it as an escape (\\u200b) if it is meant, else delete it"
        )
    return out
