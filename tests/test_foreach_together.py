"""A `for each` as a branch of a `together` (directly, or inside a `then:` branch): it compiles,
it counts as one branch (it succeeds or fails as a whole), a quorum met by the other branch
drops it while it runs (its items cancelled, its open batch question withdrawn), an effect in
it is asked on one card as anywhere else, and after the together its steps' lists are there.
End to end through `recipe` on the demo servers, each call counted in the servers' own log;
both stores with VODOU_TEST_STORE=sqlite,postgres."""

from __future__ import annotations

import json
import os
from pathlib import Path

import msgspec
import pytest
from conftest import demo_calls, demo_server

from vodou_engine.compiler import compile_recipe, load_plan
from vodou_engine.demo import db as demo
from vodou_engine.errors import PlanError
from vodou_engine.reports import together_stats

pytestmark = pytest.mark.both_stores  # the store decides every claim and decision: both must hold

BRANCH = (
    "together:\n"
    '  ops: slack.slack_get_channel {"channel": "#general"}\n'
    '  for each c in ["#daily", "#general"]:\n'
    '    got: slack.slack_get_channel {"channel": "{c}"}\n'
    'done: vodou.echo {"value": "{got.count} channels; the first about {got.0.topic}"}\n'
)

IN_THEN = (
    "together:\n"
    '  ops: slack.slack_get_channel {"channel": "#general"}\n'
    "  then:\n"
    '    names: vodou.echo {"value": ["#daily", "#general"]}\n'
    "    for each c in {names}:\n"
    '      got: slack.slack_get_channel {"channel": "{c}"}\n'
    '    last: vodou.echo {"value": "{got.count}"}\n'
    'done: vodou.echo {"value": "{got.count} channels; the first about {got.0.topic}"}\n'
)

POSTS = (
    "together:\n"
    '  ops: slack.slack_get_channel {"channel": "#general"}\n'
    '  for each c in ["#daily", "#general"]:\n'
    '    post: slack.slack_post_message {"channel": "{c}", "text": "status for {c}"}\n'
    'done: vodou.echo {"value": "posted {post.count}"}\n'
)


def _write(cli, text: str, name: str = "branch.recipe") -> Path:
    path = cli.tmp / name
    path.write_text(text)
    return path


def _show(cli, run: str) -> dict:
    return {n["node"]: n for n in cli("show", run, "--json", expect=0).json()["nodes"]}


@pytest.mark.parametrize("text", [BRANCH, IN_THEN], ids=["branch", "in-then"])
def test_a_loop_of_reads_as_a_together_branch_compiles_runs_and_lists_after(cli, text):
    path = _write(cli, text)
    cli("compile", path, expect=0)
    res = cli("run", path, "--json", expect=0)
    assert res.json()["state"] == "succeeded"
    channels = [c["arguments"]["channel"] for c in demo_calls(cli.demo_db, tool="slack_get_channel")]
    assert sorted(channels) == ["#daily", "#general", "#general"]  # the branch's read and each item's, once
    nodes = _show(cli, res.json()["run"])
    topic = nodes["got[0]"]["output"]["topic"]
    assert topic == "Daily status updates"
    assert nodes["done"]["output"] == f"2 channels; the first about {topic}"
    assert nodes["join:1"]["state"] == "succeeded" and nodes["each:1"]["state"] == "succeeded"


def test_the_plan_card_json_and_mermaid_show_the_loop_inside_the_together(cli):
    path = _write(cli, BRANCH)
    card = cli("plan", "--offline", path, expect=0).out
    lines = card.splitlines()
    at = {
        key: next(i for i, line in enumerate(lines) if line.lstrip().startswith(key))
        for key in ("together", "ops", "for each c in", "got", "join", "done")
    }
    assert at["together"] < at["ops"] < at["for each c in"] < at["got"] < at["join"] < at["done"]
    assert lines[at["for each c in"]].startswith("  for each")  # one level in: a branch of the together
    graph = cli("plan", "--offline", "--json", path, expect=0).json()["graph"]
    assert graph["joins"] == {"join:1": {"need": 2, "of": 2}}
    assert graph["loops"]["each:1"]["body"] == ["got"]
    mermaid = cli("plan", "--offline", "--format", "mermaid", path, expect=0).out
    assert "for each c in" in mermaid and "join:1" in mermaid


@pytest.mark.parametrize("shape", ["branch", "in-then"])
def test_an_effect_in_a_loop_branch_is_asked_on_one_card_and_each_post_sent_once(cli, shape):
    text = POSTS
    if shape == "in-then":
        text = text.replace("  for each", "  then:\n    for each").replace("    post:", "      post:")
    path = _write(cli, text)
    doc = cli("run", path, "--json", expect=3).json()
    (pending,) = doc["pending"]  # one question for the loop's items
    assert pending["step"] == "post"
    assert "status for #daily" in pending["card"] and "status for #general" in pending["card"]
    assert demo_calls(cli.demo_db, tool="slack_post_message") == []  # nothing before the yes
    res = cli("approve", doc["run"], "post", "--yes", "--json", expect=0)
    assert res.json()["state"] == "succeeded"
    sent = demo_calls(cli.demo_db, tool="slack_post_message")
    assert sorted((c["arguments"]["channel"], c["arguments"]["text"]) for c in sent) == [
        ("#daily", "status for #daily"),
        ("#general", "status for #general"),
    ]
    assert len({c["idempotency_key"] for c in sent}) == 2
    assert _show(cli, doc["run"])["done"]["output"] == "posted 2"
    cli("resume", doc["run"], expect=None)  # nothing runs twice
    assert len(demo_calls(cli.demo_db, tool="slack_post_message")) == 2


def test_a_quorum_met_by_the_other_branch_drops_a_loop_waiting_at_its_batch(cli):
    """The loop's items wait at their batch question when the other branch is approved and
    meets `need: 1 of 2`: the loop is dropped, its question withdrawn, none of its posts sent."""
    text = (
        "together:\n"
        "  need: 1 of 2\n"
        '  tell: slack.slack_post_message {"channel": "#general", "text": "one"}\n'
        '  for each c in ["#daily", "#general"]:\n'
        '    post: slack.slack_post_message {"channel": "{c}", "text": "loop {c}"}\n'
        "note: write a note from {post}\n"
    )
    doc = cli("run", _write(cli, text), "--json", expect=3).json()
    assert sorted(p["step"] for p in doc["pending"]) == ["post", "tell"]
    res = cli("approve", doc["run"], "tell", "--yes", "--json", expect=0)
    assert res.json()["state"] == "succeeded"
    sent = demo_calls(cli.demo_db, tool="slack_post_message")
    assert [(c["arguments"]["channel"], c["arguments"]["text"]) for c in sent] == [("#general", "one")]
    nodes = _show(cli, doc["run"])
    assert nodes["each:1"]["state"] == "cancelled"
    assert all(nodes[f"post[{i}]"]["state"] == "cancelled" for i in (0, 1))
    # the loop's question is gone: approving it now is refused, and sends nothing
    later = cli("approve", doc["run"], "post", "--yes", expect=None)
    assert later.code != 0
    assert len(demo_calls(cli.demo_db, tool="slack_post_message")) == 1
    assert cli("runs", "--json", expect=0).json()[0]["state"] == "succeeded"


def test_a_quorum_met_by_the_other_branch_cancels_a_loop_read_in_flight(cli, tmp_path):
    """The other branch returns exactly when the loop's first item's read has reached the chat
    server (its arrival is reported, then the read takes long): the quorum drops the loop with
    that read in flight, which is cancelled, and the next item never starts."""
    arrivals = tmp_path / "arrivals"
    os.mkfifo(arrivals)
    servers = cli.servers_file(
        {
            "slack": demo_server(
                "chat_server",
                cli.demo_db,
                VODOU_DEMO_ARRIVALS=str(arrivals),
                VODOU_DEMO_LATENCY="slack_get_channel=60000",
            ),
            "lab": demo_server("lab_server", cli.demo_db),
        }
    )
    text = (
        "together:\n"
        "  need: 1 of 2\n"
        f'  quick: lab.get_arrival {{"fifo": "{arrivals}"}}\n'
        '  for each c in ["#daily", "#general"]:\n'
        "    at most 1 at a time\n"
        '    got: slack.slack_get_channel {"channel": "{c}"}\n'
        "after: write a note from {got}\n"
    )
    res = cli("run", _write(cli, text), "--servers", servers, "--json", expect=0)
    assert res.json()["state"] == "succeeded"
    nodes = _show(cli, res.json()["run"])
    assert nodes["quick"]["output"]["arrived"] == "slack.slack_get_channel"
    assert nodes["got[0]"]["state"] == "cancelled"  # dropped mid-call, not waited for
    assert nodes["got[1]"]["state"] == "cancelled"  # never started
    assert nodes["each:1"]["state"] == "cancelled"
    # the server never answered a read for the loop: the first was cut off, the second never sent
    assert demo_calls(cli.demo_db, tool="slack_get_channel") == []


def test_a_loop_that_fails_fails_its_together_withdrawing_the_other_branchs_question(cli):
    """A together that needs both branches fails when its loop does: the other branch's
    question (asked meanwhile) is withdrawn, and what follows the together never runs."""
    text = (
        "together:\n"
        '  tell: slack.slack_post_message {"channel": "#general", "text": "starting"}\n'
        '  for each c in ["#daily", "#no-such-channel"]:\n'
        "    at most 1 at a time\n"
        '    got: slack.slack_get_channel {"channel": "{c}"}\n'
        'done: slack.slack_post_message {"channel": "#general", "text": "read {got.count}"}\n'
        "  without asking\n"
    )
    res = cli("run", _write(cli, text), "--json", expect=1)
    doc = res.json()
    assert doc["state"] == "failed" and doc["pending"] == []
    assert "needs 2 of 2, but 1 item(s) did not succeed" in doc["errors"]["join:1"]
    assert "needs 2 of 2 items, but 1 did not succeed" in doc["errors"]["each:1"]
    calls = demo_calls(cli.demo_db, tool="slack_get_channel")
    assert [(c["arguments"]["channel"], c["outcome"]) for c in calls] == [
        ("#daily", "ok"),
        ("#no-such-channel", "error"),
    ]
    assert cli("approve", doc["run"], "tell", "--yes", expect=None).code != 0  # no question left to approve
    assert demo_calls(cli.demo_db, tool="slack_post_message") == []
    assert demo.channel_messages(cli.demo_db, "#general")[-1]["text"] != "starting"


def test_a_loop_that_fails_under_a_quorum_the_other_branch_meets_leaves_the_run_succeeded(cli):
    text = (
        "together:\n"
        "  need: 1 of 2\n"
        '  tell: slack.slack_post_message {"channel": "#general", "text": "starting"}\n'
        "  then:\n"
        '    for each c in ["#no-such-channel"]:\n'
        '      got: slack.slack_get_channel {"channel": "{c}"}\n'
        "note: write a note from {got}\n"
    )
    doc = cli("run", _write(cli, text), "--json", expect=3).json()
    assert [p["step"] for p in doc["pending"]] == ["tell"]
    assert _show(cli, doc["run"])["each:1"]["state"] == "failed"  # one branch failed: the quorum can still be met
    res = cli("approve", doc["run"], "tell", "--yes", "--json", expect=0)
    assert res.json()["state"] == "succeeded"
    (posted,) = demo_calls(cli.demo_db, tool="slack_post_message")
    assert posted["arguments"]["text"] == "starting"
    (read,) = demo_calls(cli.demo_db, tool="slack_get_channel")
    assert read["outcome"] == "error"


def test_a_tool_argument_cannot_rely_on_a_loop_a_quorum_may_drop(cli):
    """After a together with `need: K of N`, a loop branch's list may not exist (the loop was
    dropped): a tool argument or a loop's list naming it is a compile error, a `write` may."""
    head = (
        "together:\n"
        "  need: 1 of 2\n"
        '  ops: slack.slack_get_channel {"channel": "#general"}\n'
        '  for each c in ["#daily"]:\n'
        '    got: slack.slack_get_channel {"channel": "{c}"}\n'
    )
    dropped = "`got` may be dropped by `need: 1 of 2` on line 2 (a branch the quorum leaves out has no value)"
    for tail, column, use, hint in (
        ('done: vodou.echo {"value": "{got.count}"}\n', 30, "a tool argument", "pass it through a `write` step"),
        (
            'for each g in {got}:\n  x: vodou.echo {"value": "{g}"}\n',
            16,
            "the list of a `for each`",
            # not through a `write`: its output is text, never a list to loop over
            "make that together need all 2 items (`need: 2 of 2`, or no `need:`), or loop in the same branch",
        ),
    ):
        res = cli("compile", _write(cli, head + tail), expect=2)
        assert f"branch.recipe:6:{column}: error: {dropped}, so {use} cannot rely on it" in res.err, res.err
        assert "\n" + " " * (column + 1) + "^^^" in res.err and f"hint: {hint}" in res.err
    cli("compile", _write(cli, head + "note: write a note from {got}\n"), expect=0)
    cli(
        "compile", _write(cli, head.replace("  need: 1 of 2\n", "") + 'done: vodou.echo {"value": "{got}"}\n'), expect=0
    )


def test_a_loop_branchs_work_is_its_items_work():
    """`recipe show`'s together line: the loop branch's work is the union of its items' steps'
    spans (copies such as ``got[0]``), not the zero-length list its step holds afterwards."""
    plan = compile_recipe(BRANCH)
    times = {
        "ops": (0.0, 0.0, 1.0),
        "got[0]": (0.0, 0.5, 2.0),
        "got[1]": (0.0, 1.5, 3.0),  # overlaps got[0]: counted once
        "got": (3.0, 3.0, 3.0),
        "done": (3.0, 3.0, 3.0),
    }
    states = dict.fromkeys(["ops", "each:1", "got", "got[0]", "got[1]", "join:1", "done"], "succeeded")
    (stats,) = together_stats(plan, times, states)
    assert stats.branches == 2 and stats.slowest == "each:1"
    assert stats.slowest_s == pytest.approx(2.5) and stats.sum_s == pytest.approx(3.5)
    assert stats.wall_s == pytest.approx(3.0)


def _with_members(plan, members) -> str:
    doc = msgspec.to_builtins(plan)
    for n in doc["nodes"]:
        if n["id"] == "join:1":
            n["members"] = members
    doc["fingerprint"] = ""
    return json.dumps(doc)


def test_the_verifier_wants_a_loop_branch_whole_in_its_joins_item():
    """A quorum drops an item whole: an item that lists a loop lists its body with it (the
    batch gate too), and a body's step is listed only with its loop."""
    plan = compile_recipe(POSTS)
    (join,) = [n for n in plan.nodes if n.id == "join:1"]
    assert join.members == [["ops"], ["each:1", "approve:post", "post"]]
    load_plan(_with_members(plan, join.members), "a.json", refresh=True)  # as compiled: fine
    for members, message in (
        ([["ops"], ["each:1", "post"]], "lists loop `each:1` in an item without `approve:post` of its body"),
        ([["ops"], ["each:1"]], "lists loop `each:1` in an item without `approve:post`"),
        ([["ops", "post"], ["each:1", "approve:post"]], "lists `post`, which is not in the same loop body"),
    ):
        with pytest.raises(PlanError, match=message):
            load_plan(_with_members(plan, members), "a.json", refresh=True)


@pytest.mark.parametrize("shape", ["together-in-loop", "loop-branch-in-loop"])
def test_a_together_inside_a_loop_is_decided_after_its_batch_is_approved(cli, shape):
    """A together in a loop's body whose effect is asked on the batch card: the approval
    resumes the run in a new drive, where what each item's join already had (its read branch,
    restored) still counts, so the join decides when the approved posts are done."""
    if shape == "together-in-loop":
        text = (
            'for each d in ["#daily", "#general"]:\n'
            "  together:\n"
            '    a: slack.slack_get_channel {"channel": "{d}"}\n'
            '    p: slack.slack_post_message {"channel": "{d}", "text": "hello {d}"}\n'
            'done: vodou.echo {"value": "{p.count}"}\n'
        )
        step, expected = "p", [("#daily", "hello #daily"), ("#general", "hello #general")]
    else:
        text = (
            'for each d in ["#daily"]:\n'
            "  together:\n"
            '    a: slack.slack_get_channel {"channel": "{d}"}\n'
            '    for each e in ["#general", "#daily"]:\n'
            '      p: slack.slack_post_message {"channel": "{e}", "text": "hello {e} from {d}"}\n'
            'done: vodou.echo {"value": "{p.0.count}"}\n'
        )
        step, expected = "p[0]", [("#daily", "hello #daily from #daily"), ("#general", "hello #general from #daily")]
    doc = cli("run", _write(cli, text), "--json", expect=3).json()
    assert [p["step"] for p in doc["pending"]] == [step]
    res = cli("approve", doc["run"], step, "--yes", "--json", expect=0)
    assert res.json()["state"] == "succeeded"
    sent = demo_calls(cli.demo_db, tool="slack_post_message")
    assert sorted((c["arguments"]["channel"], c["arguments"]["text"]) for c in sent) == expected
    assert _show(cli, doc["run"])["done"]["output"] == 2


def test_a_quorum_decided_inside_a_loop_item_stays_decided_after_a_park(cli):
    """Each item's `need: 1 of 2` is met by its read and drops the other branch's effect; the
    items then park at the post after the together. Approved, the run resumes in a new drive
    where the dropped branches stay dropped: the posts are sent, the dropped effects never."""
    text = (
        'for each d in ["#daily", "#general"]:\n'
        "  together:\n"
        "    need: 1 of 2\n"
        '    a: slack.slack_get_channel {"channel": "{d}"}\n'
        '    b: slack.slack_set_topic {"channel": "{d}", "topic": "never"}\n'
        '  post: slack.slack_post_message {"channel": "{d}", "text": "read {d}"}\n'
    )
    doc = cli("run", _write(cli, text), "--json", expect=3).json()
    assert [p["step"] for p in doc["pending"]] == ["post"]
    res = cli("approve", doc["run"], "post", "--yes", "--json", expect=0)
    assert res.json()["state"] == "succeeded"
    sent = demo_calls(cli.demo_db, tool="slack_post_message")
    assert sorted(c["arguments"]["text"] for c in sent) == ["read #daily", "read #general"]
    assert demo_calls(cli.demo_db, tool="slack_set_topic") == []
