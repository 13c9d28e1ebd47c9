"""The inbox in a real browser: Debian's Chromium driven by Playwright, against a real
`recipe serve` process (its own port, store and demo world), stopped with SIGTERM at the end.

Effects are counted on the demo chat server's own call log. A phone-sized (390×844)
screenshot is kept under the test's temporary directory; with VODOU_DOCS_SCREENSHOTS=1 the
screenshots in docs/ are written again too.
"""

from __future__ import annotations

import os
import shutil
import time
import uuid
from contextlib import contextmanager
from pathlib import Path

import pytest
import trio
from conftest import ROOT, demo_calls
from web_helpers import POST, Serving, wait_for

from vodou_engine.cards import mermaid
from vodou_engine.compiler import compile_recipe
from vodou_engine.policy import Policy
from vodou_engine.runs import Runs, new_run_id

CHROMIUM = "/usr/bin/chromium"
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]

try:
    from playwright.sync_api import expect, sync_playwright
except ImportError:  # pragma: no cover - CI installs it with the test extras
    sync_playwright = None
try:
    from axe_playwright_python.sync_playwright import Axe
except ImportError:  # pragma: no cover - CI installs it with the test extras
    Axe = None

if os.environ.get("CI") != "true" and (sync_playwright is None or not Path(CHROMIUM).exists()):
    pytest.skip(
        f"needs playwright and {CHROMIUM} (`apt-get install chromium`; .ci/run installs it)", allow_module_level=True
    )

EXPIRING = 'recipe "expiring"\napprovers: ana\ninputs:\n  text = "x"\npost: slack.slack_post_message {"channel": "#daily", "text": "{text}"}\n  expires: 2s\n'
BRIEFING = (
    (ROOT / "recipes" / "morning-briefing.recipe")
    .read_text()
    .replace(
        'post: slack.slack_post_message {"channel": "#daily", "text": "{briefing}"}',
        'post: slack.slack_post_message {"channel": "#daily", "text": "{briefing}"}\n'
        '    preview: slack.slack_preview_message {"channel": "#daily", "text": "{briefing}"}\n'
        '    check: slack.slack_get_channel {"channel": "#daily"}',
    )
)


BUNDLED = {
    "morning-briefing": {},
    "channel-digest": {},
    "follow-up-mail": {"event": "evt-design", "to": "ana@example.com"},
    "rename-contact": {"email": "ana@example.com", "name": "Ana Souza-Lima"},
    "reschedule": {"event": "evt-design", "start": "2026-12-01T11:00:00+00:00", "end": "2026-12-01T12:00:00+00:00"},
}
"""The bundled recipes that park on the demo servers, with inputs the demo world knows
(release-notes and time-and-git park too, on the published git and time servers; post-fanout
asks nothing)."""


class Served:
    def __init__(self, tmp: Path, serving: Serving, context, link: str, pw=None):
        self.tmp = tmp
        self.serving = serving
        self.url = serving.url
        self.context = context
        self.link = link
        self.pw = pw

    def page(self, width: int = 1100, height: int = 900):
        page = self.context.new_page()
        page.set_viewport_size({"width": width, "height": height})
        page.set_default_timeout(20_000)
        return page

    @contextmanager
    def scripts_off(self):
        """A page in a browser with JavaScript disabled, signed in as ana (the same session)."""
        browser = self.pw.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True)
        try:
            context = browser.new_context(java_script_enabled=False)
            context.add_cookies(self.context.cookies())
            page = context.new_page()
            page.set_default_timeout(20_000)
            yield page
            context.close()
        finally:
            browser.close()

    def posts(self, text: str) -> list[dict]:
        return [
            c
            for c in demo_calls(self.serving.demo_db, tool="slack_post_message")
            if c["arguments"].get("text") == text and c["outcome"] == "ok"
        ]

    def park(self, page, recipe: str = "post", text: str | None = None, inputs: dict | None = None) -> tuple[str, str]:
        """Start ``recipe`` from its page and wait on the run page until it asks; (run id, text)."""
        text = text or f"browser {uuid.uuid4().hex[:8]}"
        page.goto(f"{self.url}/recipes/{recipe}")
        field = page.locator('input[name="input:text"]')
        if field.count():
            field.fill(text)
        for name, value in (inputs or {}).items():
            page.locator(f'input[name="input:{name}"]').fill(value)
        page.get_by_role("button", name=f"Run {recipe}").click()
        page.wait_for_url("**/runs/*")
        run_id = page.url.split("/runs/")[1].split("?")[0].split("#")[0]

        def asking() -> bool:
            if page.locator("section.decide").count():
                return True
            page.goto(f"{self.url}/runs/{run_id}")
            return False

        wait_for(asking, f"run {run_id} to ask", every=0.2)
        return run_id, text

    def state_is(self, page, run_id: str, state: str) -> None:
        def reached() -> bool:
            page.goto(f"{self.url}/runs/{run_id}")
            return page.locator(f"h1 .badge.s-{state}").count() == 1

        wait_for(reached, f"run {run_id} to be {state}", every=0.2)


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    from vodou_engine.policy import Policy
    from vodou_engine.runs import Runs
    from vodou_engine.web.identity import add_approver

    tmp = tmp_path_factory.mktemp("browser")
    serving = Serving(tmp)
    runs = Runs(store=serving.store, policy=Policy())
    for text, name in ((POST, None), (EXPIRING, None), (BRIEFING, "morning-briefing")):
        runs.save(f"{name or 'x'}.recipe", text=text, name=name, by="ana")
    for name in BUNDLED:
        if name != "morning-briefing":
            runs.save(f"{name}.recipe", text=(ROOT / "recipes" / f"{name}.recipe").read_text(), name=name, by="ana")
    _, link = add_approver(runs, "ana", by="test", base_url="http://placeholder")
    runs.close()
    serving.start()
    link = link.replace("http://placeholder", serving.url)
    pw = sync_playwright().start()
    context = None
    try:
        context = pw.chromium.launch_persistent_context(
            str(tmp / "chromium-profile"), executable_path=CHROMIUM, args=ARGS, headless=True
        )
        page = context.new_page()
        page.goto(link)
        page.get_by_role("button", name="Sign in as ana").click()
        page.wait_for_url(f"{serving.url}/")
        assert "signed in as" in page.inner_text("header")
        page.close()
        yield Served(tmp, serving, context, link, pw)
    finally:
        if context is not None:
            context.close()
        pw.stop()
        try:
            code, alive = serving.stop()
        finally:
            serving.kill()
        assert code == 0, f"serve exited {code} on SIGTERM:\n{serving.log.read_text()}"
        assert alive == set(), f"server processes left behind: {alive}"


def test_sign_in_open_the_inbox_and_approve_with_the_keyboard_runs_the_effect_once(served):
    page = served.page()
    run_id, text = served.park(page)
    page.goto(f"{served.url}/")
    item = page.locator(f'a[href="/runs/{run_id}#q-post"]')
    assert item.count() == 1
    assert "expires in 15 min" in item.locator("xpath=..").inner_text()
    item.click()
    card = page.locator("section.decide")
    assert "frozen: exactly this runs if approved" in card.inner_text() and text in card.inner_text()
    page.focus("button.approve")
    page.keyboard.press("Enter")
    page.wait_for_url("**done=approved")
    assert "Approved." in page.inner_text("main")
    served.state_is(page, run_id, "succeeded")
    assert len(served.posts(text)) == 1
    page.close()


def test_reject_with_a_reason_runs_nothing(served):
    page = served.page()
    _, text = served.park(page)
    page.fill("textarea[name=reason]", "wrong channel")
    page.get_by_role("button", name="Reject post").click()
    page.wait_for_url("**done=rejected")
    assert "declined" in page.inner_text("h1") and "wrong channel" in page.inner_text("main")
    time.sleep(0.3)
    assert served.posts(text) == []
    page.close()


def test_two_tabs_approving_the_same_card_run_it_once_and_the_other_is_told_why(served):
    """The second tab has scripts off, so it still shows the card the first tab approved."""
    first = served.page()
    with served.scripts_off() as second:
        run_id, text = served.park(first)
        second.goto(f"{served.url}/runs/{run_id}")
        first.get_by_role("button", name="Approve post").click()
        first.wait_for_url("**done=approved")
        second.get_by_role("button", name="Approve post").click()
        told = second.inner_text("main")
        assert "Refused" in told and "was already approved by ana" in told and "nothing was changed" in told
        served.state_is(first, run_id, "succeeded")
        assert len(served.posts(text)) == 1
    first.close()


def test_a_second_tab_with_scripts_on_stops_offering_the_card_once_the_first_approved_it(served):
    first, second = served.page(), served.page()
    run_id, text = served.park(first)
    second.goto(f"{served.url}/runs/{run_id}")
    first.get_by_role("button", name="Approve post").click()
    first.wait_for_url("**done=approved")
    expect(second.locator("button.approve")).to_have_count(0, timeout=20_000)
    expect(second.locator("h1 .badge.s-succeeded")).to_have_count(1, timeout=20_000)
    assert len(served.posts(text)) == 1
    first.close()
    second.close()


def test_an_expired_card_is_refused_and_can_be_asked_again(served):
    page = served.page()
    run_id, text = served.park(page, "expiring")
    asked = page.locator(".decide .expiry").inner_text()
    assert asked.startswith("expires in") and asked.endswith(" s")
    time.sleep(2.1)
    page.get_by_role("button", name="Approve post").click()
    told = page.inner_text("main")
    assert "expired at" in told and "nothing was changed" in told
    assert served.posts(text) == []
    page.goto(f"{served.url}/runs/{run_id}")
    page.get_by_role("button", name="Ask again").click()
    page.wait_for_url("**done=resumed")
    wait_for(
        lambda: (
            page.goto(f"{served.url}/runs/{run_id}")
            and page.locator("section.decide .expiry").count()
            and "expires in" in page.locator("section.decide .expiry").inner_text()
        ),
        "the question to be asked again",
        every=0.1,
    )
    page.get_by_role("button", name="Approve post").click()
    page.wait_for_url("**done=approved")
    served.state_is(page, run_id, "succeeded")
    assert len(served.posts(text)) == 1
    page.close()


def test_on_a_phone_sized_screen(served, tmp_path):
    """390×844: nothing wider than the screen; screenshots kept as artifacts (and for docs/)."""
    docs = os.environ.get("VODOU_DOCS_SCREENSHOTS") == "1"
    desktop = served.page(1100, 900)
    if docs:  # the briefing, for its together chart: three more servers to start
        run_id, _ = served.park(desktop, "morning-briefing")
        served.park(desktop)
    else:
        run_id, _ = served.park(desktop)
    phone = served.page(390, 844)
    shots = {}
    for name, path in (("inbox", "/"), ("run-page", f"/runs/{run_id}")):
        phone.goto(served.url + path)
        width = phone.evaluate("document.documentElement.scrollWidth")
        assert width <= 390, f"{path} is {width} px wide on a 390 px screen"
        shots[name] = tmp_path / f"{name}-phone.png"
        phone.screenshot(path=str(shots[name]), full_page=name == "inbox")
        assert shots[name].stat().st_size > 10_000
    assert phone.locator("button.approve").first.bounding_box()["height"] >= 44  # a finger's size
    if docs:
        folder = ROOT / "docs"
        desktop.goto(f"{served.url}/")
        desktop.screenshot(path=str(folder / "inbox.png"))
        desktop.goto(f"{served.url}/runs/{run_id}")
        desktop.screenshot(path=str(folder / "run-page.png"), full_page=True)
        shutil.copy(shots["run-page"], folder / "run-page-phone.png")
    desktop.close()
    phone.close()


# --- the decision page: decided from in seconds, on a phone, without scripts, live with them ------------


@pytest.mark.parametrize("recipe", sorted(BUNDLED))
def test_every_bundled_recipe_that_parks_shows_the_question_and_approve_in_a_phones_first_screen(served, recipe):
    """390×844: the question, what will happen in words, the message and Approve, all above the fold."""
    phone = served.page(390, 844)
    run_id, _ = served.park(phone, recipe, inputs=BUNDLED[recipe])
    phone.goto(f"{served.url}/runs/{run_id}")
    section = phone.locator("section.decide").first
    approve = section.locator("button.approve")
    box = approve.bounding_box()
    assert box is not None and box["y"] + box["height"] <= 844, f"{recipe}: Approve ends at {box} on a 844 px screen"
    question = section.locator("h2.question").bounding_box()
    assert question["y"] >= 0 and question["y"] + question["height"] <= box["y"]
    does = section.locator("p.does").inner_text()
    assert ("Approving will" in does and " on " in does) or "no effect of its own" in does
    width = phone.evaluate("document.documentElement.scrollWidth")
    assert width <= 390, f"{recipe}: the page is {width} px wide on a 390 px screen"
    phone.close()


def test_the_decision_page_says_what_will_happen_and_shows_the_message_and_the_preview_as_a_diff(served):
    page = served.page(1100, 900)
    run_id, _ = served.park(page, "morning-briefing")
    section = page.locator("section.decide")
    assert section.locator("h2.question").inner_text() == "post to #daily?"
    assert section.locator("p.does").inner_text() == "Approving will post message to #daily on slack."
    message = section.locator("figure.message pre.text").first.inner_text()
    assert "\\n" not in message and message.count("\n") >= 2  # its line breaks, not JSON escapes
    assert section.locator("pre.diff .add").count() >= 1 and section.locator("pre.diff .del").count() >= 1
    assert section.locator("table.fields").inner_text().split() == ["channel", "#daily"]
    raw = section.locator("details[id^=d-card-]")
    assert not raw.get_attribute("open") and "frozen; exactly this runs if approved" in raw.text_content()
    plan = compile_recipe(BRIEFING, "morning-briefing.recipe")  # the nodes of `recipe plan --format mermaid`
    drawn = page.locator("svg.graph g.node").evaluate_all("gs => gs.map(g => g.dataset.node)")
    assert drawn == [n.id for n in plan.nodes] and page.locator("svg.graph path.edge").count() == mermaid(plan).count(
        "-->"
    )
    assert page.locator('svg.graph g.node.s-waiting[data-node="approve:post"]').count() == 1
    assert page.locator("details#d-eng").get_attribute("open") is None
    page.goto(f"{served.url}/")
    item = page.locator(f'a[href="/runs/{run_id}#q-post"]').locator("xpath=..")
    assert "post message to #daily on slack" in item.inner_text() and "“" in item.inner_text()
    page.close()


def test_approving_works_with_scripts_off_and_the_effect_runs_once(served):
    with served.scripts_off() as page:
        run_id, text = served.park(page)
        assert page.locator("p.does").inner_text() == "Approving will post message to #daily on slack."
        page.get_by_role("button", name="Approve post").click()
        page.wait_for_url("**done=approved")
        served.state_is(page, run_id, "succeeded")
        assert len(served.posts(text)) == 1


def test_approving_from_the_keyboard_alone(served):
    page = served.page(390, 844)
    run_id, text = served.park(page)
    page.goto(f"{served.url}/runs/{run_id}")
    page.keyboard.press("Tab")  # the skip link first
    assert page.evaluate("document.activeElement.textContent") == "Skip to content"
    page.keyboard.press("Enter")
    for _ in range(3):  # the message (a scrollable region), then Approve
        page.keyboard.press("Tab")
        if page.evaluate("document.activeElement.id") == "approve-post":
            break
    assert page.evaluate("document.activeElement.id") == "approve-post"
    page.keyboard.press("Enter")
    page.wait_for_url("**done=approved")
    served.state_is(page, run_id, "succeeded")
    assert len(served.posts(text)) == 1
    page.close()


def test_an_open_run_page_shows_the_effect_done_without_a_reload(served):
    watching, deciding = served.page(), served.page()
    run_id, text = served.park(watching)
    watching.goto(f"{served.url}/runs/{run_id}")
    watching.evaluate("window.stillThisPage = true")
    watching.fill("#reason-post", "half typed")
    deciding.goto(f"{served.url}/runs/{run_id}")
    deciding.get_by_role("button", name="Approve post").click()
    deciding.wait_for_url("**done=approved")
    expect(watching.locator("#effects .badge.s-executed")).to_have_count(1, timeout=20_000)
    expect(watching.locator("h1 .badge.s-succeeded")).to_have_count(1, timeout=20_000)
    assert watching.evaluate("window.stillThisPage") is True  # the same document: no reload
    assert watching.locator("section.decide").count() == 0
    assert len(served.posts(text)) == 1
    watching.close()
    deciding.close()


def test_a_run_page_opened_before_its_run_is_stored_shows_the_run_live_without_a_reload(served):
    """The page Run once lands on when the run is not stored yet ("Starting") follows it too:
    no timed refresh, the run's page put in place when the run appears."""
    page = served.page()
    run_id = new_run_id()
    page.goto(f"{served.url}/runs/{run_id}?done=started")
    expect(page.locator("h1")).to_contain_text("Starting")
    page.evaluate("window.stillThisPage = true")
    runs = Runs(store=served.serving.store, policy=Policy())
    try:
        recipe = 'recipe "starting"\nask me:\n- go on?\nx: vodou.echo {"value": 1}\n'
        trio.run(lambda: runs.start("starting.recipe", text=recipe, run_id=run_id, actor="ana"))
    finally:
        runs.close()
    expect(page.locator("h1 .badge.s-parked")).to_have_count(1, timeout=20_000)
    expect(page.locator("h1")).to_contain_text("starting")
    assert page.evaluate("window.stillThisPage") is True  # the same document: no reload
    page.close()


def test_the_inbox_lists_a_new_question_without_a_reload(served):
    inbox, starting = served.page(), served.page()
    inbox.goto(f"{served.url}/")
    inbox.evaluate("window.stillThisPage = true")
    run_id, _ = served.park(starting)
    expect(inbox.locator(f'a[href="/runs/{run_id}#q-post"]')).to_have_count(1, timeout=20_000)
    assert inbox.evaluate("window.stillThisPage") is True
    inbox.close()
    starting.close()


@pytest.mark.skipif(Axe is None, reason="needs axe-playwright-python (the test extra)")
def test_no_serious_or_critical_accessibility_violation_on_the_inbox_the_run_page_and_the_decision_page(served):
    page = served.page()
    asking, _ = served.park(page, "morning-briefing")
    done, _ = served.park(page)
    page.get_by_role("button", name="Approve post").click()
    served.state_is(page, done, "succeeded")
    axe = Axe()
    for path in ("/", f"/runs/{done}", f"/runs/{asking}"):
        for width, height in ((1100, 900), (390, 844)):
            page.set_viewport_size({"width": width, "height": height})
            page.goto(served.url + path)
            page.evaluate("document.querySelectorAll('details').forEach(d => d.open = true)")
            found = axe.run(page).response["violations"]
            bad = [
                (v["id"], v["impact"], [n["target"] for n in v["nodes"]][:3])
                for v in found
                if v["impact"] in ("serious", "critical")
            ]
            assert bad == [], f"{path} at {width}×{height}: {bad}"
    page.close()
