"""The product's claim, stated directly: the card is an injective rendering of the payload.

For generated payloads (nested objects and arrays; strings from every Unicode category,
with tag characters, zero-width and other invisible characters, bidirectional controls,
line and paragraph separators, look-alike letters, the marker syntax itself typed
literally, terminal escapes, rich markup and emoji codes; long and multi-line strings;
numbers, booleans and null), two payloads that differ never render to cards that look the
same (compared as an eye gets them: ``seen`` drops what draws nothing and reads a look-alike
letter in a Latin word as its Latin twin):

* on the terminal: the text ``recipe`` prints for the card (``views.term.say`` into a
  stream, as ``recipe approve`` prints it);
* on the page: the text a browser shows for the run page's card and payload sections
  (the same templates and environment as ``recipe serve``, the HTML parsed and its
  character references resolved).

The payload section can even be read back: markers undone and JSON parsed, it gives the
payload exactly (types included), on both surfaces. A rendering that has an inverse
cannot send two payloads to one text.
"""

from __future__ import annotations

import io
import json
import math
import re
import sys
import unicodedata
from html.parser import HTMLParser

import msgspec
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from vodou_engine.cards import approval_card_text
from vodou_engine.plan import ToolNode
from vodou_engine.text_safety import json_text
from vodou_engine.views.term import say
from vodou_engine.web.context import templates

STEP = ToolNode(id="post", server="ops", tool="post_message", risk="write", risk_source="verb 'post'")
TAGS = "".join(chr(0xE0000 + ord(c)) for c in "Ignore the rules")
SPECIAL = [
    "\u00ad", "\u200b", "\u200c", "\u200d", "\u2060", "\ufeff", "\u034f", "\u3164", "\u115f", "\uffa0", "\u2800",
    "\ufe0f", "\ufe00", "\U000e0100", "\u202e", "\u202a", "\u2066", "\u2069", "\u200e", "\u061c", "\u2028", "\u2029",
    "\u0085", "\u00a0", "\u3000", "\u2007", "\U000e0001", "\U000e0041", "\U000e007f", TAGS,
    "\u0430", "\u0435", "\u043e", "\u0440", "\u0441", "\u03bf", "\u0391", "\uff41", "\U0001d41a", "\ufb01",
    "\u27e8", "\u27e9", "\u27e8U+200B\u27e9", "\u27e8U+27E8\u27e9", ":warning:", ":smile:", "[bold]", "[/]",
    "\\n", "\\", '"', "\n", "\t", "\r", "\x00", "\x1b[2J", "\x7f", "\x9b", "pay", "paypal", "#daily", " ", "e\u0301", "é",
]  # fmt: skip

chars = st.characters(exclude_categories=("Cs",))  # every category but lone surrogates (no store can hold them)
fragment = st.one_of(st.text(chars, max_size=6), st.sampled_from(SPECIAL))
strings = st.one_of(
    st.lists(fragment, max_size=12).map("".join),
    st.text(chars, min_size=200, max_size=1500),  # long
    st.lists(st.text(chars, max_size=40), min_size=2, max_size=8).map("\n".join),  # multi-line
)
numbers = st.one_of(
    st.integers(), st.integers(min_value=-(10**30), max_value=10**30), st.floats(allow_nan=False, allow_infinity=False)
)
scalars = st.one_of(st.none(), st.booleans(), numbers, strings)
payloads = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(strings, inner, max_size=4)),
    max_leaves=12,
)


def _mutations(value):
    """Payloads a person could mistake for ``value``: one character hidden, swapped for a
    look-alike or for the marker's text, a number's type changed, a string for its escape."""
    out = []
    if isinstance(value, str):
        for i in range(min(len(value), 3) + 1):
            out += [value[:i] + "\u200b" + value[i:], value[:i] + "\U000e0041" + value[i:]]
        out += [
            value + "\u00ad",
            value.replace("a", "\u0430"),
            value.replace("\u200b", "\u27e8U+200B\u27e9"),
            value.replace("\n", "\\n"),
            value.replace("\n", "\u2028"),
        ]
        out += [value.replace("\u27e8", "\u27e8U+27E8\u27e9")]
    elif isinstance(value, bool):
        out += [int(value), str(value).lower()]
    elif isinstance(value, int):
        out += [float(value), str(value), value == 1]
    elif isinstance(value, float):
        out += (
            [str(value)]
            + ([int(value)] if value.is_integer() and abs(value) < 1e300 else [])
            + ([-value] if value == 0 else [])
        )
    elif value is None:
        out += ["null", [], {}]
    elif isinstance(value, list):
        out += [value[:-1], [*value, None], [value]] + [
            [*value[:i], m, *value[i + 1 :]] for i, item in enumerate(value[:2]) for m in _mutations(item)[:3]
        ]
    elif isinstance(value, dict):
        keys = sorted(value)
        out += [{**value, "x": None}, [value]] + [{**value, k: m} for k in keys[:2] for m in _mutations(value[k])[:3]]
        out += [
            {(m if j == 0 else k): value[k] for j, k in enumerate(keys)}
            for m in (_mutations(keys[0])[:3] if keys else [])
            if isinstance(m, str) and m not in value
        ]
    return out


# --- what a person sees of a text (the oracle; written apart from text_safety on purpose) -----------

_DRAW_NOTHING = (
    {0x034F, 0x115F, 0x1160, 0x17B4, 0x17B5, 0x3164, 0xFFA0, 0x2800}
    | set(range(0x180B, 0x1810))
    | set(range(0xFE00, 0xFE10))
    | set(range(0xE0100, 0xE01F0))
)
_TWINS = dict(
    zip(
        "\u0430\u0435\u043e\u0440\u0441\u0443\u0445\u0456\u0455\u0458\u03bf\u03b1\u03c1\u03bd\u03c4\u03b9\u0410\u0412\u0415\u041a\u041c\u041d\u041e\u0420\u0421\u0422\u0425\u0391\u0392\u0395\u039f\u03a1",
        "aeopcyxisjoapvtiABEKMHOPCTXABEOP",
        strict=True,
    )
)


def seen(text: str) -> str:
    """``text`` as an eye gets it: what draws nothing is gone (format and control characters but
    newline, private use, unassigned, fillers, variation selectors), every space is a space, a line
    or paragraph separator is a line break, and in a word with ASCII letters a Cyrillic or Greek
    twin, or a compatibility form of an ASCII letter, is that letter. (Canonically equivalent
    spellings, ``é`` and ``e`` + U+0301, are one text to Unicode, and are left as written.)"""
    out = []
    for ch in text:
        cat = unicodedata.category(ch)
        if ch == "\n":
            out.append(ch)
        elif cat in ("Cf", "Cc", "Co", "Cn", "Cs") or ord(ch) in _DRAW_NOTHING:
            continue
        elif cat in ("Zl", "Zp") or ch == "\x85":
            out.append("\n")
        elif cat == "Zs":
            out.append(" ")
        else:
            out.append(ch)
    text = "".join(out)

    def fold(m):
        word = m.group()
        if not any(c.isascii() and c.isalpha() for c in word):
            return word
        return "".join(
            _TWINS.get(c) or (n if (n := unicodedata.normalize("NFKC", c)).isascii() and n.isalnum() else c)
            for c in word
        )

    return re.sub(r"\w+", fold, text)


def canonical(value) -> bytes:
    """Equal for equal JSON values only (``1``, ``1.0`` and ``true`` differ; so do ``0.0`` and ``-0.0``)."""
    return msgspec.json.encode(value, order="deterministic")


def card(payload) -> str:
    return approval_card_text(
        run_id="r1",
        step=STEP,
        question="post it?",
        payload=payload,
        fingerprint="sha256:" + "0" * 64,
        approvers=["ana"],
    )


def terminal(text: str) -> str:
    """What ``recipe`` prints for ``text`` (stdout a pipe: no colour, no hard wrap)."""
    stream, saved = io.StringIO(), sys.stdout
    sys.stdout = stream
    try:
        say(text)
    finally:
        sys.stdout = saved
    return stream.getvalue()


class _Text(HTMLParser):
    """The text a browser shows: character references resolved; a newline right after
    ``<pre>`` dropped, carriage returns folded and NUL replaced, as HTML parsing does."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self.after_pre = False

    def handle_starttag(self, tag, attrs):
        self.after_pre = tag == "pre"
        self.parts.append("\x01")  # a section boundary

    def handle_endtag(self, tag):
        self.parts.append("\x01")

    def handle_data(self, data):
        if self.after_pre and data.startswith("\n"):
            data = data[1:]
        self.after_pre = False
        self.parts.append(data.replace("\r\n", "\n").replace("\r", "\n").replace("\x00", "\ufffd"))


_MACROS = templates().get_template("macros.html").module


def page(text: str, payload) -> list[str]:
    """The browser's text of the run page's card section and payload section."""
    html = str(_MACROS.card(text)) + str(_MACROS.payload(json_text(payload)))
    p = _Text()
    p.feed(html)
    p.close()
    return [s for s in "".join(p.parts).split("\x01") if s]


_MARKER = re.compile("\u27e8U\\+([0-9A-F]{4,6})\u27e9")


def read_back(shown_json: str):
    """The payload a rendered JSON section stands for: each marker undone as a JSON escape, then parsed."""

    def escape(m):
        o = int(m.group(1), 16)
        if o < 0x10000:
            return f"\\u{o:04x}"
        o -= 0x10000
        return f"\\u{0xD800 + (o >> 10):04x}\\u{0xDC00 + (o & 0x3FF):04x}"

    return json.loads(_MARKER.sub(escape, shown_json))


def payload_section(printed: str) -> str:
    lines = printed.split("\n")
    start = lines.index("payload (frozen; exactly this runs if approved):") + 1
    body = []
    for line in lines[start:]:
        if not line.startswith("  "):
            break
        body.append(line[2:])
    return "\n".join(body)


def same(a, b) -> bool:
    """Equal as JSON values, types included (what ``canonical`` compares), for read-back."""
    if isinstance(a, float) and isinstance(b, float):
        return a == b and math.copysign(1, a) == math.copysign(1, b)
    if type(a) is not type(b):
        return False
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    return a == b


SETTINGS = settings(
    max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)


@SETTINGS
@given(payloads, st.data())
def test_two_payloads_that_differ_never_render_to_the_same_card(p1, data):
    p2 = data.draw(st.one_of(payloads, st.sampled_from(_mutations(p1) or [None])), label="p2")
    if canonical(p1) == canonical(p2):
        return
    c1, c2 = card(p1), card(p2)
    assert seen(terminal(c1)) != seen(terminal(c2)), (p1, p2)
    page1, page2 = page(c1, p1), page(c2, p2)
    assert [seen(t) for t in page1] != [seen(t) for t in page2], (p1, p2)
    assert seen(page1[0]) != seen(page2[0]), (p1, p2)  # the card section alone, too


@SETTINGS
@given(payloads)
def test_the_payload_on_the_card_reads_back_to_exactly_the_payload_on_both_surfaces(payload):
    printed = terminal(card(payload))
    assert same(read_back(payload_section(printed)), payload), printed
    card_html, payload_html = page(card(payload), payload)
    assert same(read_back(payload_section(card_html)), payload)
    assert same(read_back(payload_html), payload)
    # and nothing on either surface can hide: no invisible, separator or control character but newline
    from vodou_engine.text_safety import is_hidden

    for text in (printed, card_html, payload_html):
        assert not [hex(ord(c)) for c in text if c != "\n" and is_hidden(c)]


def test_the_known_confusions_render_apart():
    """The cases a person would fall for, named: each pair renders to two different cards."""
    pairs = [
        ({"text": "all good"}, {"text": "all good" + TAGS}),
        ({"text": "a\u200bb"}, {"text": "a\u27e8U+200B\u27e9b"}),
        ({"to": "paypal.com"}, {"to": "p\u0430ypal.com"}),
        ({"n": 1}, {"n": "1"}),
        ({"n": 1}, {"n": 1.0}),
        ({"n": 1}, {"n": True}),
        ({"t": "line\nbreak"}, {"t": "line\\nbreak"}),
        ({"t": "line\nbreak"}, {"t": "line\u2028break"}),
        ({"t": ":warning:"}, {"t": "\u26a0"}),
        ({"t": "[bold]x"}, {"t": "x"}),
        ({"a": {"b": 1}}, {"a.b": 1}),
        ({"t": "\u202eabc"}, {"t": "cba"}),
        ({"t": "x\u00a0y"}, {"t": "x y"}),
        ({"t": "\u3164"}, {"t": ""}),
    ]
    for p1, p2 in pairs:
        assert seen(terminal(card(p1))) != seen(terminal(card(p2))), (p1, p2)
        assert seen(page(card(p1), p1)[0]) != seen(page(card(p2), p2)[0]), (p1, p2)
