"""From one sentence to a run, in a real browser: Debian's Chromium driven by Playwright
against a real `recipe serve` whose `llm` has a scripted model (tests/scripted_llm, on the
serve process's PYTHONPATH only: no network).

One walk: a sentence → the drafted recipe and its card → Edit → typing changes the card → a
typo shows the compiler's error at its line and column, with the caret and the closest name
→ fixed → Run once → the run parks → Approve on the page → the post counted in the demo chat
server's own log. From Run once on, the run's page is never reloaded: it follows the run over
server-sent events (static/live.js). Then the same editor with scripts off.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import uuid
from pathlib import Path

import pytest
from conftest import ROOT, demo_calls
from web_helpers import Serving

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking"]

try:
    from playwright.sync_api import expect, sync_playwright
except ImportError:  # pragma: no cover - CI installs it with the test extras
    sync_playwright = None

if os.environ.get("CI") != "true" and (sync_playwright is None or not Path(CHROMIUM).exists()):
    pytest.skip(
        f"needs playwright and {CHROMIUM} (`apt-get install chromium`; .ci/run installs it)", allow_module_level=True
    )
pytest.importorskip("llm")

NOTE = f"drafted in the browser {uuid.uuid4().hex[:8]}"
DRAFT = f"""\
# schedule: 0 8 * * 1-5 Europe/Lisbon
recipe "daily note"
inputs:
  text = "{NOTE}"
post: slack.slack_post_message {{"channel": "#daily", "text": "{{text}}"}}
"""
MISTAKE = DRAFT.replace('"#daily",', '"#daily",,')
SENTENCE = "every weekday at 8, post a short note to #daily"


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    from vodou_engine.policy import Policy
    from vodou_engine.runs import Runs

    tmp = tmp_path_factory.mktemp("authoring-browser")
    script = tmp / "replies.json"
    script.write_text(json.dumps([MISTAKE, DRAFT]))
    env = {
        "PYTHONPATH": os.pathsep.join(
            [str(ROOT / "tests" / "scripted_llm"), os.environ.get("PYTHONPATH") or str(ROOT)]
        ),
        "VODOU_TEST_LLM_SCRIPT": str(script),
        "VODOU_TEST_LLM_PROMPTS": str(tmp / "prompts.jsonl"),
        "VODOU_MODEL": "scripted-web",
        "LLM_USER_PATH": str(tmp / "llm"),
        # the demo chat server takes its time to post, so the run's page is open while the post
        # is under way: the post done comes to that page by a live update or not at all
        "VODOU_DEMO_LATENCY": "slack_post_message=1500",
    }
    serving = Serving(tmp, "--no-signin-link", env=env)
    runs = Runs(store=serving.store, policy=Policy())
    runs.add_approver("ana", by="test")
    runs.close()
    serving.start()
    pw = sync_playwright().start()
    browser = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True)
    try:
        yield serving, browser, None, tmp
    finally:
        browser.close()
        pw.stop()
        try:
            code, alive = serving.stop()
        finally:
            serving.kill()
        assert code == 0, f"serve exited {code} on SIGTERM:\n{serving.log.read_text()}"
        assert alive == set(), f"server processes left behind: {alive}"


def signed_in(served, **options):
    """A new browser context signed in as ana with a link of its own (a link works once)."""
    from vodou_engine.policy import Policy
    from vodou_engine.runs import Runs
    from vodou_engine.web.identity import sign_in_link

    serving, browser, _, _ = served
    runs = Runs(store=serving.store, policy=Policy())
    link = sign_in_link(runs, "ana", by="test", base_url=serving.url)
    runs.close()
    context = browser.new_context(viewport={"width": 1200, "height": 900}, **options)
    page = context.new_page()
    page.set_default_timeout(30_000)
    page.goto(link)
    page.get_by_role("button", name="Sign in as ana").click()
    page.wait_for_url(f"{serving.url}/")
    return context, page


def posts(serving, text: str) -> list[dict]:
    return [
        c
        for c in demo_calls(serving.demo_db, tool="slack_post_message")
        if c["arguments"].get("text") == text and c["outcome"] == "ok"
    ]


def test_a_sentence_becomes_a_card_is_edited_live_runs_once_and_is_approved_on_the_page(served):
    serving, _, _, tmp = served
    context, page = signed_in(served)
    shots = tmp / "shots"
    shots.mkdir(exist_ok=True)

    # a sentence → the drafted recipe, its card, the three buttons
    page.get_by_role("link", name="New").click()
    page.get_by_label("What should it do?").fill(SENTENCE)
    page.get_by_role("button", name="Draft it").click()
    expect(page.locator("h1")).to_have_text("Drafted: daily note")
    card = page.locator("#preview pre.card")
    expect(card).to_contain_text("Here is how this would run: daily note")
    expect(page.locator("#preview")).to_contain_text("origin: agent")
    assert "after 1 correction from the compiler's errors" in page.inner_text("main")
    for button in ("Run once", "Edit recipe", "Save + schedule"):
        expect(page.get_by_role("button", name=button, exact=True)).to_be_visible()
    expect(page.get_by_label("Cron (minute hour day-of-month month day-of-week)")).to_have_value("0 8 * * 1-5")
    prompts = [json.loads(line) for line in (tmp / "prompts.jsonl").read_text().splitlines()]
    assert SENTENCE in prompts[0] and "malformed JSON" in prompts[1]  # recipe author's loop, in the server
    page.screenshot(path=str(shots / "drafted.png"), full_page=True)

    # Edit: typing changes the card beside the text, with no page load
    page.get_by_role("button", name="Edit recipe").click()
    editor = page.get_by_role("textbox", name="Recipe", exact=True)
    expect(editor).to_be_visible()
    page.evaluate("window.__same_page = true")
    editor.click()
    editor.press("Control+End")
    editor.press_sequentially('look: slack.slack_get_channel {"channel": "#daily"}\n', delay=5)
    expect(card).to_contain_text("look  slack·slack_get_channel")
    expect(page.locator("#preview")).to_contain_text("origin: person")  # edited: the person's recipe now

    # a typo: the compiler's error at its line and column, the caret, the closest name
    editor.press_sequentially("say: write a note from {lok}", delay=5)
    error = page.locator("#preview pre.error")
    expect(error).to_contain_text("new.recipe:7:25: error: unknown name `lok`")
    shown = error.inner_text()
    assert "  say: write a note from {lok}\n" + " " * 26 + "^^^\n  hint: did you mean `look`?" in shown
    expect(page.locator("#preview .errors")).to_contain_text("first at line 7, column 25")
    page.screenshot(path=str(shots / "editor-error.png"), full_page=True)
    editor.press("ArrowLeft")
    editor.press("Backspace")
    editor.press("Backspace")
    editor.press_sequentially("ook", delay=5)
    expect(error).to_have_count(0)
    expect(card).to_contain_text("say   write from look")
    assert page.evaluate("window.__same_page") is True  # every card came without a reload

    # Run once → the run parks → Approve on the page → the post, once, in the chat server's log;
    # the run's page follows the run by itself (server-sent events), never reloaded
    page.get_by_role("button", name="Run once").click()
    page.wait_for_url("**/runs/*")
    run_id = page.url.split("/runs/")[1].split("?")[0]
    expect(page.locator("main")).to_contain_text("Started.")
    page.evaluate("window.__run_page = true")
    # the post has nothing to wait for: the run parks on it as it starts, mostly before this page is
    # served; whichever came first, the page shows it without a reload
    expect(page.locator("h1 .badge.s-parked")).to_have_count(1, timeout=20_000)
    expect(page.locator("section.decide")).to_contain_text(NOTE)
    approve = page.get_by_role("button", name="Approve post")
    expect(approve).to_be_visible()
    assert page.evaluate("window.__run_page") is True, "the run's page reloaded to show the run parked"
    assert posts(serving, NOTE) == []
    approve.click()
    page.wait_for_url(f"**/runs/{run_id}?done=approved")
    page.evaluate("window.__approved_page = true")
    # the post takes its time: done comes to this page by a live update
    expect(page.locator("#effects .badge.s-executed")).to_have_count(1, timeout=20_000)
    expect(page.locator("h1 .badge.s-succeeded")).to_have_count(1, timeout=20_000)
    assert page.evaluate("window.__approved_page") is True, "the run's page reloaded to show the post done"
    assert page.locator("#main[data-updated]").count() == 1  # put in place by live.js, not a page load
    assert page.locator("section.decide").count() == 0
    assert len(posts(serving, NOTE)) == 1
    context.close()
    if os.environ.get("VODOU_DOCS_SCREENSHOTS") == "1":
        shutil.copy(shots / "drafted.png", ROOT / "docs" / "new-recipe.png")
        shutil.copy(shots / "editor-error.png", ROOT / "docs" / "editor.png")


def test_on_a_phone_sized_screen_nothing_is_wider_than_it(served, tmp_path):
    serving, _, _, _ = served
    context, page = signed_in(served)
    page.set_viewport_size({"width": 390, "height": 844})
    for path in ("/new", "/edit"):
        page.goto(serving.url + path)
        width = page.evaluate("document.documentElement.scrollWidth")
        assert width <= 390, f"{path} is {width} px wide on a 390 px screen"
    for name in ("Run once", "Save", "Save + schedule"):
        assert page.get_by_role("button", name=name, exact=True).bounding_box()["height"] >= 44  # a finger's size
    page.screenshot(path=str(tmp_path / "editor-phone.png"), full_page=True)
    if os.environ.get("VODOU_DOCS_SCREENSHOTS") == "1":
        shutil.copy(tmp_path / "editor-phone.png", ROOT / "docs" / "editor-phone.png")
    context.close()


def test_the_editor_with_scripts_off_compiles_on_its_button(served):
    serving, _, _, _ = served
    context, page = signed_in(served, java_script_enabled=False)
    page.goto(f"{serving.url}/edit")
    editor = page.get_by_role("textbox", name="Recipe", exact=True)
    text = editor.input_value()
    editor.fill(text.replace("{text}", "{txet}"))
    page.get_by_role("button", name="Compile / preview").click()
    expect(page.locator("#preview pre.error")).to_contain_text("unknown name `txet`")
    assert re.search(r"hint: did you mean `text`\?", page.locator("#preview pre.error").inner_text())
    page.get_by_role("textbox", name="Recipe", exact=True).fill(text)
    page.get_by_role("button", name="Compile / preview").click()
    expect(page.locator("#preview pre.card")).to_contain_text("Here is how this would run: post to daily")
    context.close()


def test_the_new_page_and_the_editor_have_no_serious_or_critical_accessibility_violation(served):
    """axe-core over each state of the pages: the sentence, the editor with its card, and with an error."""
    axe_sync = pytest.importorskip("axe_playwright_python.sync_playwright")
    serving, _, _, _ = served
    context, page = signed_in(served)
    axe = axe_sync.Axe()

    def serious(where: str) -> None:
        found = [
            f"{v['id']} ({v['impact']}): {v['help']} at {[n['target'] for n in v['nodes']]}"
            for v in axe.run(page).response["violations"]
            if v["impact"] in ("serious", "critical")
        ]
        assert not found, f"{where}: " + "; ".join(found)

    page.goto(f"{serving.url}/new")
    serious("/new")
    page.goto(f"{serving.url}/edit")
    serious("/edit")
    editor = page.get_by_role("textbox", name="Recipe", exact=True)
    editor.fill(editor.input_value().replace("{text}", "{txet}"))
    expect(page.locator("#preview pre.error")).to_contain_text("unknown name `txet`")
    serious("/edit with an error")
    context.close()
