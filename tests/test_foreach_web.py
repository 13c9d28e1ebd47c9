"""A loop's batch card on the decision page, without a browser: the real app over Starlette's
TestClient, a real SQLite store and the real demo servers kept warm by the service. One row per
item (its text as text, the rest as a small table, its own fingerprint), a tick box per item,
all ticked; the form sends the ticked items and exactly those replies are sent, counted in the
demo mail server's own log."""

from __future__ import annotations

import re
from html import unescape

import msgspec
import pytest
from conftest import demo_calls
from starlette.testclient import TestClient
from web_helpers import form, forms, sign_in, wait_for

from vodou_engine.compiler import compile_recipe
from vodou_engine.policy import Policy
from vodou_engine.servers import ServerSet, demo_servers
from vodou_engine.service import Service
from vodou_engine.web import decide
from vodou_engine.web.app import create_app
from vodou_engine.web.config import WebConfig
from vodou_engine.web.identity import add_approver

REPLY = (
    'recipe "replies"\napprovers: ana\ninputs:\n  text = "x"\n'
    'unread: gmail.messages_list {"labelIds": ["UNREAD"], "maxResults": 20}\n'
    "for each m in {unread.messages}:\n"
    '  reply: gmail.send_message {"to": "{m.from}", "subject": "Re: {m.subject}", "body": "Thanks!\\nSee you, {text}"}\n'
)


@pytest.fixture
def box(tmp_path):
    svc = Service(
        store=str(tmp_path / "runs.db"), servers=ServerSet(demo_servers(tmp_path / "demo.db"), "demo"), policy=Policy()
    )
    runs = svc.runs()
    runs.save("replies.recipe", text=REPLY, by="ana")
    _, link = add_approver(runs, "ana", by="test", base_url="http://testserver")
    app = create_app(svc, WebConfig(allowed_hosts=["testserver"]))
    with TestClient(app, backend="trio", base_url="http://testserver") as client:
        ana = sign_in(client, link, "ana")
        page = ana.get("/recipes/replies")
        fields = form(page.text, "/recipes/replies/run")
        fields["input:text"] = "Ana"
        res = ana.post("/recipes/replies/run", fields, follow=False)
        assert res.status_code == 303, res.text
        run_id = res.headers["location"].split("/runs/")[1].split("?")[0]
        wait_for(lambda: _stored(runs, run_id) and runs.store().pending_approvals(run_id), f"run {run_id} to park")
        yield ana, run_id, runs, tmp_path / "demo.db"
        runs.close()


def _stored(runs, run_id: str) -> bool:
    try:
        runs.store().get_run(run_id)
        return True
    except Exception:  # noqa: BLE001 - not stored yet
        return False


def _batch(runs, run_id: str) -> list[dict]:
    (a,) = runs.store().pending_approvals(run_id)
    return msgspec.json.decode(a.payload_json)["items"]


def test_the_batch_card_shows_one_row_per_item_with_a_tick_box_each(box):
    ana, run_id, runs, _ = box
    items = _batch(runs, run_id)
    assert len(items) >= 3
    html = ana.get(f"/runs/{run_id}").text
    rows = re.findall(r'<li class="batch-item" id="item-reply-(\d+)">(.*?)</li>', html, re.S)
    assert [int(n) for n, _ in rows] == [e["item"] for e in items]
    for (_, row), e in zip(rows, items, strict=True):
        assert e["fingerprint"] in row  # its own fingerprint
        assert '<pre class="text"' in row and "Thanks!\nSee you, Ana</pre>" in row  # text as text, line break kept
        assert f'<td class="value">{e["payload"]["to"]}</td>' in unescape(row)  # the rest as a small table
        assert f'name="item.{e["item"]}" value="on" checked' in row
    (approve,) = forms(html, f"/runs/{run_id}/approve")
    assert approve["fields"]["batch"] == str(len(items))
    assert {k for k in approve["fields"] if k.startswith("item.")} == {f"item.{e['item']}" for e in items}


def test_approving_sends_only_the_ticked_items(box):
    ana, run_id, runs, demo = box
    items = _batch(runs, run_id)
    fields = form(ana.get(f"/runs/{run_id}").text, f"/runs/{run_id}/approve")
    del fields[f"item.{items[1]['item']}"]  # an unticked box is not sent
    res = ana.post(f"/runs/{run_id}/approve", fields)
    assert res.status_code == 200 and "Approved." in res.text, res.text
    wait_for(lambda: str(runs.show(run_id).state) == "succeeded", f"run {run_id} to finish")
    sent = demo_calls(demo, tool="send_message")
    assert sorted(c["arguments"]["to"] for c in sent) == sorted(e["payload"]["to"] for e in items if e is not items[1])
    nodes = {n.node: n for n in runs.show(run_id).nodes}
    assert str(nodes[f"reply[{items[1]['item']}]"].state) == "skipped"


def test_approving_with_nothing_ticked_is_refused_and_sends_nothing(box):
    ana, run_id, runs, demo = box
    fields = form(ana.get(f"/runs/{run_id}").text, f"/runs/{run_id}/approve")
    fields = {k: v for k, v in fields.items() if not k.startswith("item.")}
    res = ana.post(f"/runs/{run_id}/approve", fields)
    assert "no item chosen" in unescape(res.text) and "nothing was changed" in unescape(res.text)
    assert demo_calls(demo, tool="send_message") == []
    assert runs.store().pending_approvals(run_id)  # still asked


def test_each_rows_preview_is_shown_as_a_diff():
    plan = compile_recipe(
        'for each c in ["#daily"]:\n'
        '  post: slack.slack_post_message {"channel": "{c}", "text": "hi"}\n'
        '    preview: slack.slack_preview_message {"channel": "{c}", "text": "hi"}\n',
        "p.recipe",
    )
    entry = {
        "item": 0, "payload": {"channel": "#daily", "text": "hi"}, "fingerprint": "sha256:" + "1" * 64,
        "preview": {"before": {"last_message": "old"}, "after": {"last_message": "hi"}},
    }  # fmt: skip
    shown = decide.decision(plan, "post", {"items": [entry]}, None)
    (row,) = shown["batch"]
    assert row["texts"] == [("text", "hi")] and row["fields"] == [("channel", "#daily")]
    assert ("del", "last_message: old") in row["diff"] and ("add", "last_message: hi") in row["diff"]
    assert shown["does"] == "post message on slack" and shown["message"] is None


def test_a_question_of_its_own_in_a_loop_shows_each_items_part_as_a_row():
    plan = compile_recipe(
        'for each c in ["#daily"]:\n  topic: slack.slack_get_channel {"channel": "{c}"}\n'
        '  ask me:\n  - go on?\n  post: vodou.echo {"value": "{c}"}\n',
        "q.recipe",
    )
    entry = {
        "item": 0, "fingerprint": "sha256:" + "2" * 64,
        "payload": {"question": "go on?", "outputs": {"c": "#daily", "topic": {"topic": "status\nupdates"}}},
    }  # fmt: skip
    shown = decide.decision(plan, "ask:1", {"items": [entry]}, None)
    (row,) = shown["batch"]
    assert shown["question"] == "go on?" and shown["does"] is None
    assert row["fields"][0] == ("c", "#daily") and row["fields"][1][0] == "topic"
    assert '"topic": "status\\nupdates"' in row["fields"][1][1]
