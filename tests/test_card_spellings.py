"""Two spellings of one visible text are two payloads, and the card tells them apart.

``é`` can be stored as one code point (U+00E9, NFC) or as ``e`` followed by U+0301 COMBINING
ACUTE ACCENT (NFD); the Kelvin sign U+212A is ``K`` to the eye, the Angstrom sign U+212B is
``Å``, Hangul can be written as syllables or as the jamo that build them, and fullwidth
digits (U+FF11...) are ``100`` in another form. A server gets the bytes, not what they look like (an
address, a file name, an account compared byte for byte), so the card of one spelling must
not read like the card of the other. Through the CLI on a real MCP server (the rogue server),
whose own log shows what it received.
"""

from __future__ import annotations

import json
import re
import unicodedata

import pytest
from conftest import rogue_server
from test_card_injective import payload_section, read_back
from test_cards import AGENT_RECIPE, park, posts, write

SPELLINGS = {
    "nfd-accent": ("pay café", "pay cafe\u0301"),
    "kelvin-sign-alone": ("K", "\u212a"),
    "angstrom-sign": ("\u00c5", "\u212b"),
    "hangul-jamo": ("\ud55c", "\u1112\u1161\u11ab"),
    "fullwidth-digits-alone": ("100", "\uff11\uff10\uff10"),
}


@pytest.fixture
def ops(cli):
    """./mcp.json: `ops` is the rogue server, logging every call to ./rogue.log."""
    cli.servers_file({"ops": rogue_server(cli.tmp / "rogue.log")})


def as_the_eye_reads(text: str) -> str:
    """What a person sees: canonically and compatibly equivalent spellings look alike."""
    return unicodedata.normalize("NFKC", text)


@pytest.mark.parametrize("plain, other", list(SPELLINGS.values()), ids=list(SPELLINGS))
def test_two_spellings_of_one_text_get_cards_that_read_apart_and_the_marked_one_runs(cli, tmp_path, ops, plain, other):
    recipe = write(tmp_path, "note.recipe", AGENT_RECIPE)
    cards = {}
    for text in (plain, other):
        run = park(cli, recipe, "--set", f"text={json.dumps(text)}")["run"]
        cards[text] = (run, cli("show", run, "--json", expect=0).json()["approvals"][0]["card"])
    shown = {text: payload_section(card) for text, (_, card) in cards.items()}
    assert as_the_eye_reads(shown[plain]) != as_the_eye_reads(shown[other]), shown
    assert (
        "\u26a0" in cards[other][1].split("payload (frozen", 1)[1]
        and "\u26a0" not in cards[plain][1].split("payload (frozen", 1)[1]
    )  # said under the payload
    # what the card shows reads back to exactly the bytes, and those are what the server gets
    assert read_back(shown[other])["text"] == other
    cli("approve", cards[other][0], "post", "--yes", expect=0)
    assert posts(cli) == [other]


# --- right-to-left text next to numbers ----------------------------------------------------------------

# "12 א 34" and "12 34 א" are different payloads, and a screen that lays out bidirectional text
# (a browser, some terminals) shows both as "12 34 א": the number after a Hebrew letter joins its
# right-to-left run. No character in them is hidden, so nothing was marked.
REORDERED = ("pay 12 \u05d0 34", "pay 12 34 \u05d0")


def test_right_to_left_text_next_to_numbers_is_said_and_the_page_shows_it_in_the_order_it_is_sent(cli, tmp_path, ops):
    from test_cards import run_page_for

    recipe = write(tmp_path, "note.recipe", AGENT_RECIPE)
    runs = [park(cli, recipe, "--set", f"text={json.dumps(text)}")["run"] for text in REORDERED]
    for run in runs:
        card = cli("show", run, "--json", expect=0).json()["approvals"][0]["card"]
        assert "mixes right-to-left letters with numbers or Latin text" in card, card
    plain = park(cli, recipe, "--set", "text=pay 12 34")["run"]
    assert "right-to-left" not in cli("show", plain, "--json", expect=0).json()["approvals"][0]["card"]
    with run_page_for(cli) as (me, _):
        page = me.get(f"/runs/{runs[0]}").text
        assert '<pre class="card"' in page and "mixes right-to-left letters" in page
        warned = page.split('<ul class="problem warnings">')[1].split("</ul>")[
            0
        ]  # before the buttons, not only on the card
        assert "mixes right-to-left letters" in warned and page.index(warned) < page.index('class="approve"')
        css = me.get("/static/app.css").text
    # the card's block is laid out in stored order, left to right, whatever its letters
    rule = re.search(r"pre\.card, pre\.payload \{([^}]*)\}", css)
    assert rule is not None and "unicode-bidi: bidi-override" in rule.group(1) and "direction: ltr" in rule.group(1)
    cli("approve", runs[0], "post", "--yes", expect=0)
    assert posts(cli) == [REORDERED[0]]
