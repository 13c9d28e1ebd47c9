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
from pathlib import Path

import pytest
from conftest import ROOT, demo_calls
from web_helpers import POST, Serving, wait_for

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
    from playwright.sync_api import sync_playwright
except ImportError:  # pragma: no cover - CI installs it with the test extras
    sync_playwright = None

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


class Served:
    def __init__(self, tmp: Path, serving: Serving, context, link: str):
        self.tmp = tmp
        self.serving = serving
        self.url = serving.url
        self.context = context
        self.link = link

    def page(self, width: int = 1100, height: int = 900):
        page = self.context.new_page()
        page.set_viewport_size({"width": width, "height": height})
        page.set_default_timeout(20_000)
        return page

    def posts(self, text: str) -> list[dict]:
        return [
            c
            for c in demo_calls(self.serving.demo_db, tool="slack_post_message")
            if c["arguments"].get("text") == text and c["outcome"] == "ok"
        ]

    def park(self, page, recipe: str = "post", text: str | None = None) -> tuple[str, str]:
        """Start ``recipe`` from its page and wait on the run page until it asks; (run id, text)."""
        text = text or f"browser {uuid.uuid4().hex[:8]}"
        page.goto(f"{self.url}/recipes/{recipe}")
        field = page.locator('input[name="input:text"]')
        if field.count():
            field.fill(text)
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
        yield Served(tmp, serving, context, link)
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
    _run_id, text = served.park(page)
    page.fill("textarea[name=reason]", "wrong channel")
    page.get_by_role("button", name="Reject post").click()
    page.wait_for_url("**done=rejected")
    assert "declined" in page.inner_text("h1") and "wrong channel" in page.inner_text("main")
    time.sleep(0.3)
    assert served.posts(text) == []
    page.close()


def test_two_tabs_approving_the_same_card_run_it_once_and_the_other_is_told_why(served):
    first, second = served.page(), served.page()
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
