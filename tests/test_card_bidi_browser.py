"""In a real browser, two payloads that a bidirectional layout draws alike are drawn apart.

``"pay 12 א 34"`` and ``"pay 12 34 א"`` differ, yet a browser laying the line out by the
Unicode bidirectional algorithm draws both as ``pay 12 34 א`` (the number after a Hebrew
letter joins its right-to-left run). The inbox's stylesheet lays a card out in the order
its characters are sent: screenshots of the two lines, styled by the inbox's own
``app.css`` in Debian's Chromium, differ.
"""

from __future__ import annotations

import os
from html import escape
from pathlib import Path

import pytest
from conftest import ROOT

CHROMIUM = "/usr/bin/chromium"
try:
    from playwright.sync_api import sync_playwright
except ImportError:  # pragma: no cover - CI installs it with the test extras
    sync_playwright = None

if os.environ.get("CI") != "true" and (sync_playwright is None or not Path(CHROMIUM).exists()):
    pytest.skip(
        f"needs playwright and {CHROMIUM} (`apt-get install chromium`; .ci/run installs it)", allow_module_level=True
    )

ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
LINE = '  "text": "pay 12 \u05d0 34"'
"""Sent as: ..., ``12``, a space, ALEF, a space, ``34``. Laid out by the bidirectional
algorithm, ALEF is drawn right of ``34`` (``pay 12 34 א``: the line ``"pay 12 34 א"`` draws
the same); laid out as sent, it is drawn left of it."""

LEFT_OF = """(index) => {
    const text = document.querySelector("pre.card").firstChild;
    const range = document.createRange();
    range.setStart(text, index);
    range.setEnd(text, index + 1);
    return range.getBoundingClientRect().left;
}"""


def test_a_card_is_drawn_in_the_order_it_is_sent_so_reordered_right_to_left_text_looks_different():
    css = (ROOT / "vodou_engine" / "web" / "static" / "app.css").read_text()
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            page = browser.new_page()
            page.set_content(
                f'<!doctype html><html lang="en"><head><meta charset="utf-8"><style>{css}</style></head><body><pre class="card">{escape(LINE)}</pre></body></html>'
            )
            alef, three, one = (page.evaluate(LEFT_OF, LINE.index(ch)) for ch in ("\u05d0", "3", "1"))
        finally:
            browser.close()
    assert one < alef < three, (one, alef, three)  # drawn in the order sent: 12, then ALEF, then 34
