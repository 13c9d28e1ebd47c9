"""A loop's batch card in a real browser (Chromium over Playwright, a real `recipe serve`
process; fixtures from test_browser.py): on a phone the question and Approve are in the first
screen for a small batch; with scripts off, unticking an item and approving sends exactly the
ticked replies, counted in the demo mail server's own log."""

from __future__ import annotations

import msgspec
from conftest import demo_calls
from test_browser import served  # noqa: F401 - the fixture: a serve process and a signed-in browser
from web_helpers import wait_for

from vodou_engine.policy import Policy
from vodou_engine.runs import Runs

REPLY = (
    'recipe "replies"\ninputs:\n  text = "x"\n'
    'unread: gmail.messages_list {"labelIds": ["UNREAD"], "maxResults": 20}\n'
    "for each m in {unread.messages}:\n"
    '  reply: gmail.send_message {"to": "{m.from}", "subject": "Re: {m.subject}", "body": "Thanks!\\nSee you, {text}"}\n'
)


def _save(served) -> Runs:  # noqa: F811
    runs = Runs(store=served.serving.store, policy=Policy())
    runs.save("replies.recipe", text=REPLY, name="replies", by="ana")
    return runs


def _items(runs: Runs, run_id: str) -> list[dict]:
    (a,) = runs.store().pending_approvals(run_id)
    return msgspec.json.decode(a.payload_json)["items"]


def test_a_small_batch_shows_its_rows_and_approve_in_a_phones_first_screen(served, tmp_path):  # noqa: F811
    runs = _save(served)
    phone = served.page(390, 844)
    run_id, text = served.park(phone, "replies")
    items = _items(runs, run_id)
    phone.goto(f"{served.url}/runs/{run_id}")
    section = phone.locator("section.decide").first
    rows = section.locator("li.batch-item")
    assert rows.count() == len(items) >= 3
    for i, e in enumerate(items):
        row = rows.nth(i)
        assert row.locator("input[type=checkbox]").is_checked()
        assert f"Thanks!\nSee you, {text}" == row.locator("pre.text").inner_text()
        assert e["fingerprint"] == row.locator("code.fp").get_attribute("title")
    box = section.locator("button.approve").bounding_box()
    phone.screenshot(path=str(tmp_path / "batch-phone.png"), full_page=True)  # kept as an artifact
    assert box is not None and box["y"] + box["height"] <= 844, f"Approve ends at {box} on a 844 px screen"
    assert phone.evaluate("document.documentElement.scrollWidth") <= 390
    phone.close()
    runs.close()


def test_with_scripts_off_approving_the_ticked_items_sends_exactly_those(served):  # noqa: F811
    runs = _save(served)
    page = served.page()
    run_id, _ = served.park(page, "replies")
    page.close()
    items = _items(runs, run_id)
    before = len(demo_calls(served.serving.demo_db, tool="send_message"))
    with served.scripts_off() as off:
        off.goto(f"{served.url}/runs/{run_id}")
        off.get_by_label(f"item {items[0]['item']}", exact=True).uncheck()
        off.get_by_role("button", name="Approve reply").click()
        off.wait_for_url("**done=approved")
    wait_for(lambda: str(runs.show(run_id).state) == "succeeded", f"run {run_id} to finish")
    sent = demo_calls(served.serving.demo_db, tool="send_message")[before:]
    assert sorted(c["arguments"]["to"] for c in sent) == sorted(e["payload"]["to"] for e in items[1:])
    runs.close()
