"""One card for a loop's effects: every item that reached the effect is asked about in one
question (each item's frozen payload with its own fingerprint, and a fingerprint over the set);
approving it runs exactly those payloads, once each, counted in the mail server's own log;
rejecting it runs none; an item whose payload is no longer the approved one does not run.
The store-decided ones on both stores with VODOU_TEST_STORE=sqlite,postgres."""

from __future__ import annotations

import msgspec
import pytest
from conftest import RECIPES, demo_calls

from vodou_engine.demo import db as demo
from vodou_engine.errors import StaleError
from vodou_engine.store import open_store

# Marked both_stores: the tests whose outcome the store decides (a decision on the batch or on
# some items, what is stored per item and restored on resume, a kill, a stale item, reconcile).
# What the card shows and which items reach it is decided before anything is stored: SQLite.

REPLY = (
    'unread: gmail.messages_list {"labelIds": ["UNREAD"], "maxResults": 20}\n'
    "for each m in {unread.messages}:\n"
    "  at most 2 at a time\n"
    '  who: gmail.get_contact {"email": "{m.from}"}\n'
    '  reply: gmail.send_message {"to": "{m.from}", "subject": "Re: {m.subject}", "body": "Thanks, {who.name}!"}\n'
    'done: vodou.echo {"value": "sent {reply.count} replies"}\n'
)


def _parked(cli) -> dict:
    path = cli.tmp / "reply.recipe"
    path.write_text(REPLY)
    doc = cli("run", path, "--json", expect=3).json()
    assert doc["state"] == "parked"
    return doc


def _nodes(cli, run: str) -> dict:
    return {n["node"]: n for n in cli("show", run, "--json", expect=0).json()["nodes"]}


def test_a_loops_effect_is_asked_once_for_every_item_with_each_payload(cli):
    doc = _parked(cli)
    (pending,) = doc["pending"]  # one question, not one per item
    assert pending["step"] == "reply"
    unread = _nodes(cli, doc["run"])["unread"]["output"]["messages"]
    assert len(unread) >= 2
    card = pending["card"]
    for m in unread:
        assert m["from"] in card and f"Re: {m['subject']}" in card
    stored = cli.sql("SELECT payload_json, fingerprint FROM approvals WHERE run_id = ?", (doc["run"],))
    ((payload_json, fingerprint),) = stored
    items = msgspec.json.decode(payload_json)["items"]
    assert [e["item"] for e in items] == list(range(len(unread)))
    assert [e["payload"]["to"] for e in items] == [m["from"] for m in unread]
    fps = {e["fingerprint"] for e in items}
    assert len(fps) == len(unread) and fingerprint not in fps  # each its own, and one over the set
    for e in items:
        assert e["fingerprint"] in card
    assert demo_calls(cli.demo_db, tool="send_message") == []  # nothing ran before the decision


@pytest.mark.both_stores
def test_approving_the_batch_sends_each_reply_once(cli):
    doc = _parked(cli)
    res = cli("approve", doc["run"], "reply", "--yes", "--json", expect=0)
    assert res.json()["state"] == "succeeded"
    sent = demo_calls(cli.demo_db, tool="send_message")
    nodes = _nodes(cli, doc["run"])
    unread = nodes["unread"]["output"]["messages"]
    assert sorted(c["arguments"]["to"] for c in sent) == sorted(m["from"] for m in unread)
    keys = [c["idempotency_key"] for c in sent]
    assert len(set(keys)) == len(unread)  # the key includes the item
    for i in range(len(unread)):
        assert nodes[f"reply[{i}]"]["state"] == "succeeded"
    assert nodes["done"]["output"] == f"sent {len(unread)} replies"
    # resuming again runs nothing twice
    cli("resume", doc["run"], expect=None)
    assert len(demo_calls(cli.demo_db, tool="send_message")) == len(unread)


@pytest.mark.both_stores
def test_rejecting_the_batch_sends_nothing(cli):
    doc = _parked(cli)
    res = cli("reject", doc["run"], "reply", "--json", expect=4)
    assert res.json()["state"] == "declined"
    assert demo_calls(cli.demo_db, tool="send_message") == []


@pytest.mark.both_stores
def test_an_item_whose_payload_changed_after_the_question_does_not_run(cli):
    """What an item's payload is made from is stored per item; when it is no longer what the
    approved payload was made from (here: edited in the store), that item does not run and
    says why, and the approved others still do."""
    doc = _parked(cli)
    unread = _nodes(cli, doc["run"])["unread"]["output"]["messages"]
    changed = unread[0]["from"]
    forged = msgspec.json.encode({"email": changed, "name": "Someone Else", "version": 9}).decode()
    cli.sql("UPDATE nodes SET output_json = ? WHERE run_id = ? AND node_id = 'who[0]'", (forged, doc["run"]))
    res = cli("approve", doc["run"], "reply", "--yes", "--json", expect=None)
    sent = demo_calls(cli.demo_db, tool="send_message")
    assert all("Someone Else" not in c["arguments"]["body"] for c in sent)
    assert sorted(c["arguments"]["subject"] for c in sent) == sorted(f"Re: {m['subject']}" for m in unread[1:])
    assert res.code != 0
    errors = res.json()["errors"]
    assert "is not among those approved" in errors["approve:reply[0]"], errors


@pytest.mark.both_stores
def test_approving_some_items_sends_exactly_those_and_declines_the_rest(cli):
    doc = _parked(cli)
    unread = _nodes(cli, doc["run"])["unread"]["output"]["messages"]
    assert len(unread) >= 3
    res = cli("approve", doc["run"], "reply", "--yes", "--items", "0,2", "--json", expect=0)
    assert res.json()["state"] == "succeeded"
    sent = demo_calls(cli.demo_db, tool="send_message")
    assert sorted((c["arguments"]["to"], c["arguments"]["subject"]) for c in sent) == sorted(
        (unread[i]["from"], f"Re: {unread[i]['subject']}") for i in (0, 2)
    )
    nodes = _nodes(cli, doc["run"])
    assert nodes["reply[0]"]["state"] == nodes["reply[2]"]["state"] == "succeeded"
    assert nodes["reply[1]"]["state"] == "skipped"
    assert "declined" in nodes["approve:reply[1]"]["error"]
    assert nodes["reply"]["output"][1] is None and nodes["done"]["output"] == f"sent {len(unread)} replies"


@pytest.mark.both_stores
def test_items_outside_the_batch_or_on_a_question_that_is_no_batch_are_refused(cli):
    doc = _parked(cli)
    res = cli("approve", doc["run"], "reply", "--yes", "--items", "0,99", expect=5)
    assert "item 99 is not in" in res.err and "nothing was changed" in res.err
    res = cli("approve", doc["run"], "reply", "--yes", "--items", "x", expect=2)
    assert "not a list of item numbers" in res.err
    assert demo_calls(cli.demo_db, tool="send_message") == []
    assert cli("approve", doc["run"], "reply", "--yes", "--json", expect=0).json()["state"] == "succeeded"


@pytest.mark.both_stores
@pytest.mark.parametrize("point", ["reads", "parking", "executing", "executed"])
def test_a_kill_at_a_batch_never_sends_an_item_twice(cli, point):
    """SIGKILL between items (a read ended, not yet stored), where the batch is asked (question
    stored, run not parked), and where an item's
    effect is claimed or has returned: on resume no item is sent twice; an item whose effect
    may have happened is `unknown` for that item only, and the others go on."""
    path = cli.tmp / "reply.recipe"
    path.write_text(REPLY)
    env = {"VODOU_CRASH_AT": point}
    if point in ("reads", "parking"):
        assert cli.proc("run", path, env=env).code == -9
        (run,) = cli("runs", "--json", expect=0).json()
        doc = cli("resume", run["run"], "--json", expect=3).json()  # asked once, not twice
        assert [p["step"] for p in doc["pending"]] == ["reply"]
        run_id = doc["run"]
        cli("approve", run_id, "reply", "--yes", expect=0)
    else:
        run_id = _parked(cli)["run"]
        assert cli.proc("approve", run_id, "reply", "--yes", env=env).code == -9
        cli("resume", run_id, expect=None)
    nodes = _nodes(cli, run_id)
    unread = nodes["unread"]["output"]["messages"]
    sent = demo_calls(cli.demo_db, tool="send_message")
    keys = [c["idempotency_key"] for c in sent]
    assert len(keys) == len(set(keys)) <= len(unread)  # no item twice
    states = [nodes[f"reply[{i}]"]["state"] for i in range(len(unread))]
    assert set(states) <= {"succeeded", "unknown"}, states
    if point in ("reads", "parking"):
        assert states == ["succeeded"] * len(unread) and len(sent) == len(unread)
    else:
        assert "unknown" in states  # the item whose call the kill cut is in doubt, for a person
        assert states.count("succeeded") >= 1 or len(unread) == 1  # the others went on
        assert len(sent) >= states.count("succeeded")


def test_the_bundled_reply_recipe_asks_one_card_and_sends_the_chosen_replies(cli):
    doc = cli("run", RECIPES / "reply-unread.recipe", "--json", expect=3).json()
    (pending,) = doc["pending"]
    assert pending["step"] == "reply"
    unread = _nodes(cli, doc["run"])["unread"]["output"]["messages"]
    res = cli("approve", doc["run"], "reply", "--yes", "--items", "1", "--json", expect=3).json()
    assert [p["step"] for p in res["pending"]] == ["tell"]  # the run went on to the next card
    (sent,) = demo_calls(cli.demo_db, tool="send_message")
    assert sent["arguments"]["to"] == unread[1]["from"]


@pytest.mark.both_stores
def test_approving_the_batch_does_not_read_or_write_the_items_again(cli):
    """The items' reads and writes done before the question are stored per item and restored
    when the run resumes: the payloads approved are the ones that run, not new ones."""
    doc = _parked(cli)
    n = len(_nodes(cli, doc["run"])["unread"]["output"]["messages"])
    assert len(demo_calls(cli.demo_db, tool="get_contact")) == n
    cli("approve", doc["run"], "reply", "--yes", expect=0)
    assert len(demo_calls(cli.demo_db, tool="get_contact")) == n  # each item's read once in all
    assert len(demo_calls(cli.demo_db, tool="send_message")) == n


def test_an_item_whose_payload_the_tool_would_refuse_is_never_on_the_card(cli):
    """The tool's inputSchema holds each item's payload before the batch is asked: an item the
    server would refuse (`to` a number) fails at its gate and is not on the card; the others are
    asked about and, approved, sent once each."""
    path = cli.tmp / "mixed.recipe"
    path.write_text(
        'for each m in [{"to": "ana@example.com"}, {"to": 42}, {"to": "bo@example.com"}]:\n'
        "  need: 2 of all\n"
        '  reply: gmail.send_message {"to": "{m.to}", "subject": "hi", "body": "hello"}\n'
    )
    doc = cli("run", path, "--json", expect=3).json()
    (pending,) = doc["pending"]
    (payload_json,) = cli.sql("SELECT payload_json FROM approvals WHERE run_id = ?", (doc["run"],))[0]
    items = msgspec.json.decode(payload_json)["items"]
    assert [(e["item"], e["payload"]["to"]) for e in items] == [(0, "ana@example.com"), (2, "bo@example.com")]
    assert '"to": 42' not in pending["card"]
    nodes = _nodes(cli, doc["run"])
    assert nodes["approve:reply[1]"]["state"] == "failed" and "input schema" in nodes["approve:reply[1]"]["error"]
    assert cli("approve", doc["run"], "reply", "--yes", "--json", expect=0).json()["state"] == "succeeded"
    sent = demo_calls(cli.demo_db, tool="send_message")
    assert sorted(c["arguments"]["to"] for c in sent) == ["ana@example.com", "bo@example.com"]


GUARDED = (
    'for each c in ["#daily", "#general"]:\n'
    '  post: slack.slack_post_message {"channel": "{c}", "text": "hello {c}"}\n'
    '    preview: slack.slack_preview_message {"channel": "{c}", "text": "hello {c}"}\n'
    '    check: slack.slack_get_channel {"channel": "{c}"}\n'
)


def _posts(cli) -> list[str]:
    return sorted(c["arguments"]["channel"] for c in demo_calls(cli.demo_db, tool="slack_post_message"))


@pytest.mark.both_stores
def test_each_items_preview_is_on_the_card_and_a_stale_item_alone_is_asked_again(cli):
    """`preview:` and `check:` on an effect in a loop are read per item and frozen in the item's
    entry (the card shows each preview); an item whose check read changed after the approval does
    not run and is asked about again on a card of its own, while the other approved item runs;
    approving that card runs it, and nothing runs twice."""
    path = cli.tmp / "guarded.recipe"
    path.write_text(GUARDED)
    doc = cli("run", path, "--json", expect=3).json()
    (pending,) = doc["pending"]
    (payload_json,) = cli.sql("SELECT payload_json FROM approvals WHERE run_id = ?", (doc["run"],))[0]
    items = msgspec.json.decode(payload_json)["items"]
    assert [e["preview"]["after"]["last_message"] for e in items] == ["hello #daily", "hello #general"]
    assert [e["check"]["args"] for e in items] == [{"channel": "#daily"}, {"channel": "#general"}]
    assert '"last_message": "hello #general"' in pending["card"]
    assert _posts(cli) == []

    demo.set_channel_topic(cli.demo_db, "#general", "the world moved")  # changed between question and yes
    res = cli("approve", doc["run"], "post", "--yes", "--json", expect=3).json()
    assert _posts(cli) == ["#daily"]  # the approved item that is still as approved ran
    (again,) = res["pending"]
    assert again["step"] == "post" and again["fingerprint"] != pending["fingerprint"]
    rows = cli.sql("SELECT payload_json, state FROM approvals WHERE run_id = ? ORDER BY asked_at", (doc["run"],))
    assert [s for _, s in rows] == ["approved", "pending"]  # the first approval stands for item 0
    asked = msgspec.json.decode(rows[1][0])["items"]
    assert [e["item"] for e in asked] == [1] and asked[0]["check"]["result"]["topic"] == "the world moved"

    done = cli("approve", doc["run"], "post", "--yes", "--json", expect=0).json()
    assert done["state"] == "succeeded"
    assert _posts(cli) == ["#daily", "#general"]  # each once
    cli("resume", doc["run"], expect=None)
    assert _posts(cli) == ["#daily", "#general"]


@pytest.mark.both_stores
def test_a_claim_with_an_approval_a_later_question_replaced_for_that_item_is_refused(cli):
    """The store's own check: once an item was asked about again, the earlier approval no longer
    lets that item run, though it still lets the others."""
    path = cli.tmp / "guarded.recipe"
    path.write_text(GUARDED)
    doc = cli("run", path, "--json", expect=3).json()
    demo.set_channel_topic(cli.demo_db, "#general", "the world moved")
    cli("approve", doc["run"], "post", "--yes", expect=3)
    ((first_id, payload_json),) = cli.sql(
        "SELECT id, payload_json FROM approvals WHERE run_id = ? AND state = 'approved'", (doc["run"],)
    )
    item = msgspec.json.decode(payload_json)["items"][1]
    store = open_store(cli.location)
    with pytest.raises(StaleError, match="asked about again"):
        store.begin_effect(
            doc["run"], "post[1]", approval_id=first_id, fingerprint=item["fingerprint"],
            idempotency_key="k", payload_json=item["payload"],
        )  # fmt: skip
    assert _posts(cli) == ["#daily"]


@pytest.mark.both_stores
@pytest.mark.parametrize("executed", [True, False], ids=["executed", "not-executed"])
def test_reconcile_settles_one_items_unknown_effect(cli, executed):
    """SIGKILL while an item's effect is claimed: that item is `unknown`; `recipe reconcile RUN
    reply[N] --executed|--not-executed` settles it alone, and a resume sends nothing again: with
    --executed the run ends succeeded, with --not-executed that item failed and the loop with it."""
    run_id = _parked(cli)["run"]
    assert cli.proc("approve", run_id, "reply", "--yes", env={"VODOU_CRASH_AT": "executing"}).code == -9
    cli("resume", run_id, expect=None)
    nodes = _nodes(cli, run_id)
    n = len(nodes["unread"]["output"]["messages"])
    doubtful = [f"reply[{i}]" for i in range(n) if nodes[f"reply[{i}]"]["state"] == "unknown"]
    assert len(doubtful) == 1, [nodes[f"reply[{i}]"]["state"] for i in range(n)]
    (step,) = doubtful
    sent = len(demo_calls(cli.demo_db, tool="send_message"))
    flag = "--executed" if executed else "--not-executed"
    said = cli("reconcile", run_id, step, flag, "--reason", "checked the outbox", expect=0).out
    assert f"effect {step} of run {run_id} settled as {'executed' if executed else 'not executed'}" in said
    effects = {e["step"]: e for e in cli("show", run_id, "--json", expect=0).json()["effects"]}
    assert effects[step]["state"] == ("executed" if executed else "failed") and effects[step]["settled_by"]
    others = [f"reply[{i}]" for i in range(n) if f"reply[{i}]" != step]
    assert all(_nodes(cli, run_id)[o]["state"] == "succeeded" for o in others)  # settling one left the others
    res = cli("resume", run_id, "--json", expect=None).json()
    nodes = _nodes(cli, run_id)
    assert len(demo_calls(cli.demo_db, tool="send_message")) == sent  # nothing sent again
    if executed:
        assert res["state"] == "succeeded" and nodes[step]["state"] == "succeeded"
        assert nodes["done"]["output"] == f"sent {n} replies"
    else:
        assert res["state"] == "failed" and nodes[step]["state"] == "failed"
    again = cli("reconcile", run_id, step, "--executed", expect=None)
    assert again.code != 0 and "nothing was changed" in again.err  # settled once


ASKED = (
    'for each c in ["#daily", "#general"]:\n'
    '  topic: slack.slack_get_channel {"channel": "{c}"}\n'
    "  ask me:\n"
    "  - post to this channel?\n"
    '  post: vodou.echo {"value": "{c}"}\n'
    'tell: slack.slack_post_message {"channel": "#daily", "text": "went on with {post}"}\n'
)


def test_a_question_of_its_own_in_a_loop_is_asked_once_for_every_item(cli):
    """`ask me` in a loop with no effect after it is one question for all the items, each item's
    part frozen with its own fingerprint (the item and the outputs it follows, the item's own);
    approving some lets exactly those go on, the others are declined and never run."""
    path = cli.tmp / "asked.recipe"
    path.write_text(ASKED)
    doc = cli("run", path, "--json", expect=3).json()
    (pending,) = doc["pending"]  # one question, not one per item
    assert pending["step"] == "ask:1" and pending["items"] == [0, 1]
    (payload_json,) = cli.sql("SELECT payload_json FROM approvals WHERE run_id = ?", (doc["run"],))[0]
    items = msgspec.json.decode(payload_json)["items"]
    assert [e["payload"]["outputs"]["c"] for e in items] == ["#daily", "#general"]
    assert [e["payload"]["outputs"]["topic"]["channel"] for e in items] == ["#daily", "#general"]
    for e in items:
        assert f"item {e['item']}  fingerprint {e['fingerprint']}:" in pending["card"]
    assert '"channel": "#general"' in pending["card"]
    res = cli("approve", doc["run"], "ask:1", "--yes", "--items", "1", "--json", expect=3).json()
    assert [p["step"] for p in res["pending"]] == ["tell"]  # the run went on to the effect after the loop
    nodes = _nodes(cli, doc["run"])
    assert nodes["post[1]"]["output"] == "#general" and nodes["post[0]"]["state"] == "skipped"
    assert "declined" in nodes["ask:1[0]"]["error"]
    cli("approve", doc["run"], "tell", "--yes", expect=0)
    (told,) = demo_calls(cli.demo_db, tool="slack_post_message")
    assert told["arguments"]["text"] == 'went on with [null, "#general"]'


NESTED = (
    'for each t in [{"to": ["ana@example.com", "bo@example.com"]}, {"to": ["cy@example.com"]}]:\n'
    "  for each who in {t.to}:\n"
    '    send: gmail.send_message {"to": "{who}", "subject": "hi", "body": "hello {who}"}\n'
    'done: vodou.echo {"value": "{send}"}\n'
)


def test_an_effect_in_a_loop_inside_another_asks_once_per_outer_item(cli):
    """An effect in a nested loop: one question per outer item (`send[0]`, `send[1]`), each
    listing that item's inner items with their own fingerprints; each is decided on its own,
    all or some, and exactly the approved payloads are sent once each."""
    path = cli.tmp / "nested.recipe"
    path.write_text(NESTED)
    doc = cli("run", path, "--json", expect=3).json()
    pending = {p["step"]: p for p in doc["pending"]}
    assert set(pending) == {"send[0]", "send[1]"}
    assert pending["send[0]"]["items"] == [0, 1] and pending["send[1]"]["items"] == [0]
    assert "hello bo@example.com" in pending["send[0]"]["card"] and "cy@" not in pending["send[0]"]["card"]
    assert demo_calls(cli.demo_db, tool="send_message") == []
    res = cli("approve", doc["run"], "send[0]", "--yes", "--items", "1", "--json", expect=3).json()
    assert [p["step"] for p in res["pending"]] == ["send[1]"]
    assert [c["arguments"]["to"] for c in demo_calls(cli.demo_db, tool="send_message")] == ["bo@example.com"]
    done = cli("approve", doc["run"], "send[1]", "--yes", "--json", expect=0).json()
    assert done["state"] == "succeeded"
    sent = demo_calls(cli.demo_db, tool="send_message")
    assert sorted(c["arguments"]["to"] for c in sent) == ["bo@example.com", "cy@example.com"]
    assert len({c["idempotency_key"] for c in sent}) == 2
    nodes = _nodes(cli, doc["run"])
    assert nodes["send[0][0]"]["state"] == "skipped" and nodes["send[0][1]"]["state"] == "succeeded"
    lists = nodes["send"]["output"]  # outer item 0 ended in the drive before: its list is kept
    assert lists[0][0] is None and lists[0][1] is not None and lists[1][0] is not None
    cli("resume", doc["run"], expect=None)
    assert len(demo_calls(cli.demo_db, tool="send_message")) == 2


@pytest.mark.both_stores
def test_a_nested_batch_card_names_the_outer_item_it_asks_for(cli):
    """Each outer item's card says which copy of the step it decides (`send[0]`, `send[1]`, the
    names `recipe approve` takes), not the bare step both share, as asked and as shown later."""
    path = cli.tmp / "nested.recipe"
    path.write_text(NESTED)
    doc = cli("run", path, "--json", expect=3).json()
    pending = {p["step"]: p for p in doc["pending"]}
    assert pending["send[0]"]["card"].startswith("⚠ send[0]: gmail·send_message")
    assert pending["send[1]"]["card"].startswith("⚠ send[1]: gmail·send_message")
    asked = {a["step"]: a["card"] for a in cli("show", doc["run"], "--json", expect=0).json()["approvals"]}
    assert asked["send[0]"].startswith("⚠ send[0]:") and asked["send[1]"].startswith("⚠ send[1]:")
    stored = dict(cli.sql("SELECT step, card_text FROM approvals WHERE run_id = ?", (doc["run"],)))
    assert stored["send[0]"].startswith("⚠ send[0]:") and stored["send[1]"].startswith("⚠ send[1]:")
    assert demo_calls(cli.demo_db, tool="send_message") == []


IMPOSSIBLE = (
    'for each t in [[{"to": "ana@example.com"}, {"name": "no address"}, {"name": "none either"}], '
    '[{"to": "bo@example.com"}, {"to": "cy@example.com"}]]:\n'
    "  need: 1 of all\n"
    "  for each m in {t}:\n"
    "    at most 1 at a time\n"
    "    need: 2 of all\n"
    '    send: gmail.send_message {"to": "{m.to}", "subject": "hi", "body": "hello"}\n'
    'done: vodou.echo {"value": "{send}"}\n'
)


@pytest.mark.both_stores
def test_a_loop_whose_quorum_can_no_longer_be_met_fails_without_asking(cli):
    """Outer item 0's loop needs 2 of its 3 items, and two of them fail before its effect: as a
    together would, that loop fails at once, and nobody is asked about its one item left; the
    run parks for outer item 1's batch alone, and approving it sends exactly its two mails."""
    path = cli.tmp / "impossible.recipe"
    path.write_text(IMPOSSIBLE)
    doc = cli("run", path, "--json", expect=3).json()
    assert [p["step"] for p in doc["pending"]] == ["send[1]"]
    assert "needs 2 of 3 items" in doc["errors"]["each:2[0]"]
    asked = [a["step"] for a in cli("show", doc["run"], "--json", expect=0).json()["approvals"]]
    assert asked == ["send[1]"]  # never asked, not even for a moment
    assert demo_calls(cli.demo_db, tool="send_message") == []
    done = cli("approve", doc["run"], "send[1]", "--yes", "--json", expect=0).json()
    assert done["state"] == "succeeded"
    sent = demo_calls(cli.demo_db, tool="send_message")
    assert sorted(c["arguments"]["to"] for c in sent) == ["bo@example.com", "cy@example.com"]
    nodes = _nodes(cli, doc["run"])
    assert nodes["send[0][0]"]["state"] == "cancelled" and nodes["approve:send[0][0]"]["state"] == "cancelled"


OUTER_QUORUM = (
    'for each t in [["ana@example.com"], ["bo@example.com"]]:\n'
    "  need: 1 of all\n"
    "  for each who in {t}:\n"
    '    send: gmail.send_message {"to": "{who}", "subject": "hi", "body": "hello {who}"}\n'
    'tell: slack.slack_post_message {"channel": "#daily", "text": "sent {send.count}"}\n'
)


@pytest.mark.both_stores
def test_a_batch_an_outer_quorum_drops_is_withdrawn(cli):
    """The outer loop needs one of its two items: once outer item 1's batch is approved and its
    mail sent, outer item 0 is dropped, and its batch question with it; the run then parks
    for the post alone, and approving `send[0]` is refused."""
    path = cli.tmp / "outer-quorum.recipe"
    path.write_text(OUTER_QUORUM)
    doc = cli("run", path, "--json", expect=3).json()
    assert sorted(p["step"] for p in doc["pending"]) == ["send[0]", "send[1]"]
    res = cli("approve", doc["run"], "send[1]", "--yes", "--json", expect=3).json()
    assert [p["step"] for p in res["pending"]] == ["tell"]
    assert [c["arguments"]["to"] for c in demo_calls(cli.demo_db, tool="send_message")] == ["bo@example.com"]
    asked = {a["step"]: a["state"] for a in cli("show", doc["run"], "--json", expect=0).json()["approvals"]}
    assert asked["send[0]"] == "withdrawn"
    assert cli("approve", doc["run"], "send[0]", "--yes", expect=None).code != 0
    assert [c["arguments"]["to"] for c in demo_calls(cli.demo_db, tool="send_message")] == ["bo@example.com"]


@pytest.mark.both_stores
def test_a_question_in_a_loop_inside_another_is_asked_per_outer_item_and_the_lists_survive_resumes(cli):
    """`ask me` in a nested loop: one question per outer item; each decided in its own drive,
    and after the outer loop the lists hold every outer item's values, those of an outer item
    that ended in an earlier drive too."""
    path = cli.tmp / "nested-ask.recipe"
    path.write_text(
        'for each t in [["#daily", "#general"], ["#daily"]]:\n'
        "  for each c in {t}:\n"
        '    topic: slack.slack_get_channel {"channel": "{c}"}\n'
        "    ask me:\n"
        "    - fine?\n"
        '    ok: vodou.echo {"value": "{c}"}\n'
        'done: vodou.echo {"value": "{ok}"}\n'
    )
    doc = cli("run", path, "--json", expect=3).json()
    assert sorted(p["step"] for p in doc["pending"]) == ["ask:1[0]", "ask:1[1]"]
    cli("approve", doc["run"], "ask:1[0]", "--yes", "--items", "0", expect=3)
    cli("approve", doc["run"], "ask:1[1]", "--yes", expect=0)
    assert _nodes(cli, doc["run"])["done"]["output"] == [["#daily", None], ["#daily"]]
