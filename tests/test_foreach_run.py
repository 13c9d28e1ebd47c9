"""`for each` at run time, end to end through `recipe run` on the demo servers and a real
store (the store-decided ones on both stores with VODOU_TEST_STORE=sqlite,postgres): items run, each read counted
in the mail server's own call log; bounds before any item runs; quorum; nesting; and an
effect that runs without asking inside a loop refused before anything runs."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import RECIPES, demo_calls

# Marked both_stores: the tests whose outcome the store decides (each item's stored result, the
# quorum's decisions). Scheduling, bounds, types and the compiler's refusal are decided before
# or outside the store: SQLite.

READS = (
    'unread: gmail.messages_list {"labelIds": ["UNREAD"], "maxResults": 20}\n'
    "for each m in {unread.messages}:\n"
    '  full: gmail.messages_get {"id": "{m.id}"}\n'
    '  who: gmail.get_contact {"email": "{full.from}"}\n'
    "  note: write a one-line note from {m, who}\n"
    'count: vodou.echo {"value": "read {full.count} mails; the first from {who.0.email}"}\n'
)


def _write(cli, text: str, name: str = "loop.recipe") -> Path:
    path = cli.tmp / name
    path.write_text(text)
    return path


def _show(cli, run: str) -> dict:
    doc = cli("show", run, "--json", expect=0).json()
    return {n["node"]: n for n in doc["nodes"]}


@pytest.mark.both_stores
def test_a_loop_of_reads_runs_each_item_once_through_the_cli(cli):
    res = cli("run", _write(cli, READS), "--json", expect=0)
    run = res.json()["run"]
    gets = demo_calls(cli.demo_db, tool="messages_get")
    ids = [c["arguments"]["id"] for c in gets]
    nodes = _show(cli, run)
    listed = nodes["unread"]["output"]["messages"]
    assert len(listed) >= 2
    assert sorted(ids) == sorted(m["id"] for m in listed)  # each item read once, on the server
    assert len(demo_calls(cli.demo_db, tool="get_contact")) == len(listed)
    # per item: its own node, its own output; after the block, the list in item order
    for i, m in enumerate(listed):
        assert nodes[f"full[{i}]"]["state"] == "succeeded"
        assert nodes[f"full[{i}]"]["output"]["id"] == m["id"]
    assert [f["id"] for f in nodes["full"]["output"]] == [m["id"] for m in listed]
    assert nodes["each:1"]["output"]["items"] == len(listed)
    assert nodes["count"]["output"] == f"read {len(listed)} mails; the first from {listed[0]['from']}"


def test_at_most_one_at_a_time_reads_one_item_after_the_other(cli):
    text = READS.replace(
        "for each m in {unread.messages}:\n", "for each m in {unread.messages}:\n  at most 1 at a time\n"
    )
    cli("run", _write(cli, text), expect=0)
    gets = demo_calls(cli.demo_db, tool="messages_get")
    contacts = demo_calls(cli.demo_db, tool="get_contact")
    assert len(gets) >= 2
    # one item at a time: each item's first read begins after the previous item's last read ended
    for before, after in zip(contacts, gets[1:], strict=False):
        assert after["started"] >= before["ended"]


def test_too_many_items_fail_the_loop_before_any_item_runs(cli):
    text = READS.replace("for each m in {unread.messages}:\n", "for each m in {unread.messages}:\n  max items: 1\n")
    res = cli("run", _write(cli, text), "--json", expect=1)
    doc = res.json()
    assert doc["state"] == "failed"
    n = len(_show(cli, doc["run"])["unread"]["output"]["messages"])
    assert f"{n} items, more than the 1 this loop allows" in doc["errors"]["each:1"]
    assert demo_calls(cli.demo_db, tool="messages_get") == []  # no item ran


def test_an_empty_list_skips_the_block_and_counts_zero(cli):
    text = READS.replace('"labelIds": ["UNREAD"]', '"labelIds": ["NO-SUCH-LABEL"]').replace(
        "; the first from {who.0.email}", ""
    )
    res = cli("run", _write(cli, text), "--json", expect=0)
    nodes = _show(cli, res.json()["run"])
    assert demo_calls(cli.demo_db, tool="messages_get") == []
    assert nodes["full"]["output"] == [] and nodes["each:1"]["output"]["items"] == 0
    assert nodes["count"]["output"] == "read 0 mails"


def test_a_value_that_is_not_a_list_fails_with_its_type_and_path(cli):
    text = READS.replace("{unread.messages}", "{unread.resultSizeEstimate}")
    res = cli("run", _write(cli, text), "--json", expect=1)
    error = res.json()["errors"]["each:1"]
    assert "unread.resultSizeEstimate is a number, not a list" in error
    assert demo_calls(cli.demo_db, tool="messages_get") == []


@pytest.mark.both_stores
def test_quorum_over_items_succeeds_with_k_and_fails_below(cli):
    body = '  full: gmail.messages_get {"id": "{m}"}\n'
    after = 'got: vodou.echo {"value": "{full}"}\n'
    ok = (
        'for each m in ["msg-001", "no-such-message", "msg-002"]:\n  need: 2 of all\n  at most 1 at a time\n'
        + body
        + after
    )
    res = cli("run", _write(cli, ok), "--json", expect=0)
    nodes = _show(cli, res.json()["run"])
    assert nodes["full[1]"]["state"] == "failed"
    assert [f["id"] if f else None for f in nodes["full"]["output"]] == ["msg-001", None, "msg-002"]
    assert len(demo_calls(cli.demo_db, tool="messages_get")) == 3
    every = 'for each m in ["msg-001", "no-such-message"]:\n  at most 1 at a time\n' + body + after
    res = cli("run", _write(cli, every, "all.recipe"), "--json", expect=1)
    assert "needs 2 of 2 items, but 1 did not succeed" in res.json()["errors"]["each:1"]


def test_nested_loops_give_lists_of_lists(cli):
    text = (
        'unread: gmail.messages_list {"labelIds": ["UNREAD"], "maxResults": 2}\n'
        "for each m in {unread.messages}:\n"
        "  for each label in {m.labelIds}:\n"
        '    tag: vodou.echo {"value": "{m.id}:{label}"}\n'
        '  n: vodou.echo {"value": "{tag.count}"}\n'
        'all: vodou.echo {"value": "{tag}"}\n'
    )
    res = cli("run", _write(cli, text), "--json", expect=0)
    nodes = _show(cli, res.json()["run"])
    listed = nodes["unread"]["output"]["messages"]
    expected = [[f"{m['id']}:{label}" for label in m["labelIds"]] for m in listed]
    assert nodes["all"]["output"] == expected
    assert nodes["n"]["output"] == [len(m["labelIds"]) for m in listed]  # one whole reference: the value as is
    assert nodes["tag[0][1]"]["output"] == expected[0][1]


def test_an_effect_in_a_loop_that_runs_without_asking_is_refused_before_anything_runs(cli):
    text = (
        'unread: gmail.messages_list {"labelIds": ["UNREAD"]}\n'
        "for each m in {unread.messages}:\n"
        '  for each to in ["a@example.com"]:\n'
        '    reply: gmail.send_message {"to": "{to}", "subject": "Re: {m.subject}", "body": "ok"}\n'
        "      without asking\n"
    )
    res = cli("run", _write(cli, text), expect=2)
    assert "loop.recipe:4:5: error: `reply` (gmail.send_message, write) runs without asking and is inside" in res.err
    assert "hint:" in res.err
    assert demo_calls(cli.demo_db) == []  # not even the list was read
    listed = cli("runs", "--json")
    assert listed.code == 6 or listed.json() == []  # no run stored (on SQLite, no store made at all)


def test_without_asking_in_a_loop_is_refused_by_the_compiler_so_no_plan_promises_it(cli):
    """The refusal is the compiler's: `recipe plan` and `recipe compile` say it (file, line,
    column, caret, the fix) instead of a plan card that says the effect will run without asking."""
    path = _write(
        cli,
        'for each m in ["ana@example.com", "bo@example.com"]:\n'
        '  reply: gmail.send_message {"to": "{m}", "subject": "hi", "body": "ok"}\n'
        "    without asking\n",
    )
    for command in ("plan", "compile"):
        res = cli(command, path, expect=2)
        assert "loop.recipe:2:3: error: `reply` (gmail.send_message, write) runs without asking" in res.err, res.err
        assert "inside `for each m` (line 1)" in res.err
        assert "\n    ^" in res.err and "hint: remove `without asking`" in res.err
        assert "WITHOUT ASKING" not in res.out
    assert demo_calls(cli.demo_db) == []


def test_the_bundled_loop_recipe_reads_every_unread_mail_then_parks_before_the_post(cli):
    res = cli("run", RECIPES / "unread-senders.recipe", "--json", expect=3)
    doc = res.json()
    assert [p["step"] for p in doc["pending"]] == ["post"]
    nodes = _show(cli, doc["run"])
    n = len(nodes["unread"]["output"]["messages"])
    assert n >= 2 and len(demo_calls(cli.demo_db, tool="get_contact")) == n
    assert len(nodes["line"]["output"]) == n
    assert demo_calls(cli.demo_db, tool="slack_post_message") == []
    # approved: the run resumes after the loop, from the lists the loop stored
    assert cli("approve", doc["run"], "post", "--yes", "--json", expect=0).json()["state"] == "succeeded"
    (posted,) = demo_calls(cli.demo_db, tool="slack_post_message")
    for contact in nodes["sender"]["output"]:
        assert contact["name"] in posted["arguments"]["text"]
