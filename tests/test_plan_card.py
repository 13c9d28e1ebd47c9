"""The plan card and the Mermaid chart mirror the graph, on every example recipe."""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest
from conftest import RECIPES

from vodou_engine.cards import ToolStatus, mermaid, plan_card, plan_rows
from vodou_engine.compiler import compile_recipe
from vodou_engine.plan import ApprovalNode, JoinNode, QuestionNode, ToolNode
from vodou_engine.policy import Policy, PolicyFile, ToolPolicy

EXAMPLES = sorted(RECIPES.glob("*.recipe"))


def compile_path(path: Path, policy: Policy | None = None):
    return compile_recipe(path.read_text(), str(path), policy=policy)


def compile_name(name: str, policy: Policy | None = None):
    return compile_path(RECIPES / f"{name}.recipe", policy)


def render(plan, **kw) -> str:
    from rich.console import Console

    console = Console(file=io.StringIO(), width=200, record=True, color_system=None)
    console.print(plan_card(plan, **kw))
    return console.export_text()


def steps(rows):
    return [r for r in rows if r[1] is None]


def labels(rows):
    return [r for r in rows if r[1] is not None]


def approvals(plan):
    return [n for n in plan.nodes if isinstance(n, ApprovalNode)]


def post_is_read() -> Policy:
    return Policy(PolicyFile(tools={"slack.slack_post_message": ToolPolicy(risk="read")}), source="p.toml")


# -- ⚠ rows and approval nodes are one-to-one ---------------------------------------------------


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
@pytest.mark.parametrize("policy", [None, post_is_read()], ids=["no-policy", "post-is-read"])
def test_warning_rows_are_exactly_the_gated_steps(path, policy):
    plan = compile_path(path, policy)
    rows = plan_rows(plan)
    gated = [r[2] for r in steps(rows) if r[6]]
    guarded = [a.step for a in approvals(plan)]
    assert sorted(gated) == sorted(guarded)
    assert len(gated) == len(set(gated))
    # and the same holds for what a person sees
    text = render(plan)
    # a step inside a block (a `for each`'s body) is indented under it
    warned = [line.split()[1] for line in text.splitlines() if re.match(r" *⚠ [a-z_]", line) and "·" in line.split()[2]]
    assert sorted(warned) == sorted(guarded)
    asks = re.findall(r"will stop and ask before `([^`]+)` runs", text)
    assert sorted(asks) == sorted(guarded)


def test_a_policy_that_lowers_the_post_removes_both_the_gate_and_the_warning():
    plan = compile_name("morning-briefing", post_is_read())
    assert approvals(plan) == []
    rows = plan_rows(plan)
    post = next(r for r in steps(rows) if r[2] == "post")
    assert post[4] == "read" and not post[6] and "policy file (p.toml)" in post[5]
    assert "⚠" not in render(plan)
    # the recipe's question is still asked, as a plain question
    assert any(r[1] == "ask" and "post to #daily?" in r[2] for r in labels(rows))


def test_rows_follow_the_graph_not_the_risk():
    # a write step that opted out with `without asking` has no approval node, so no ⚠
    plan = compile_name("channel-digest")
    topic = next(r for r in steps(plan_rows(plan)) if r[2] == "topic_line")
    assert topic[4] == "write" and topic[6] is False


# -- structure -----------------------------------------------------------------------------------


def test_morning_briefing_rows():
    rows = plan_rows(compile_name("morning-briefing"))
    assert [(r[0], r[1] or r[2]) for r in rows] == [
        (0, "together sources"),
        (1, "calendar"),
        (1, "mail"),
        (1, "slack"),
        (0, "join"),
        (0, "then"),
        (0, "briefing"),
        (0, "post"),
    ]
    join = next(r for r in rows if r[1] == "join")
    assert join[2] == "needs 2 of 3; the rest are cancelled"
    post = next(r for r in rows if r[2] == "post")
    assert post[3] == "slack·slack_post_message" and post[4] == "write"
    assert post[5] == "verb 'post'; asks \"post to #daily?\""
    briefing = next(r for r in rows if r[2] == "briefing")
    assert briefing[3] == "write from calendar, mail, slack"
    assert "offline writer" in briefing[5]


def test_nested_together_headers_come_outermost_first_before_their_first_member():
    rows = plan_rows(compile_name("follow-up-mail"))
    flat = [(r[0], r[1] or r[2]) for r in rows]
    assert flat[:7] == [
        (0, "together"),
        (1, "meeting"),
        (1, "together people"),
        (2, "contact"),
        (2, "thread"),
        (1, "join"),
        (0, "join"),
    ]
    assert [r[2] for r in rows if r[1] == "join"] == ["waits for all 2", "waits for all 2"]


def test_a_nested_together_as_the_first_item_gets_both_headers_in_a_row():
    rows = plan_rows(compile_name("channel-digest"))
    flat = [(r[0], r[1] or r[2]) for r in rows]
    assert flat[:4] == [(0, "together sources"), (1, "together"), (2, "mentions"), (2, "about")]
    assert flat.index((1, "join")) < flat.index((1, "chat_notes"))
    assert flat.index((0, "join")) < flat.index((0, "then")) < flat.index((0, "current"))


def test_every_together_has_one_header_and_one_join_row():
    for path in EXAMPLES:
        plan = compile_path(path)
        rows = plan_rows(plan)
        joins = [n for n in plan.nodes if isinstance(n, JoinNode)]
        headers = [r for r in rows if r[1] and r[1].startswith("together")]
        assert len(headers) == len(joins), path
        assert len([r for r in rows if r[1] == "join"]) == len(joins), path
        named = sorted(f"together {j.block}" for j in joins if j.block)
        assert sorted(r[1] for r in headers if r[1] != "together") == named, path


def test_the_then_row_follows_a_top_level_join_only():
    for path in EXAMPLES:
        rows = plan_rows(compile_path(path))
        for i, r in enumerate(rows):
            if r[1] == "then":
                assert r[0] == 0
                assert rows[i - 1][1] == "join" and rows[i - 1][0] == 0, path
    rows = plan_rows(compile_name("rename-contact"))  # no together at all
    assert not any(r[1] == "then" for r in rows)


def test_without_asking_rows_say_so():
    for name, step in (("channel-digest", "topic_line"), ("time-and-git", "add")):
        plan = compile_name(name)
        row = next(r for r in steps(plan_rows(plan)) if r[2] == step)
        assert row[5].endswith("; WITHOUT ASKING") and row[6] is False
        text = render(plan)
        assert f"✗ `{step}`" in text and "will run WITHOUT ASKING" in text


def test_a_critical_without_asking_allowed_by_policy_is_shown_in_red_words():
    text = 'drop: google-calendar.delete-event {"eventId": "e1"}\n  without asking\n'
    policy = Policy(PolicyFile(tools={"google-calendar.delete-event": ToolPolicy(allow_without_asking=True)}))
    plan = compile_recipe(text, "drop.recipe", policy=policy)
    (row,) = steps(plan_rows(plan))
    assert row[4] == "critical" and "WITHOUT ASKING" in row[5] and not row[6]
    assert "✗ `drop` (google-calendar·delete-event, critical) will run WITHOUT ASKING." in render(plan)


def test_previews_and_checks_are_sub_rows_never_warned():
    rows = plan_rows(compile_name("follow-up-mail"))
    i = next(i for i, r in enumerate(rows) if r[2] == "send")
    assert rows[i + 1][2:5] == ("↳ preview", "gmail·preview_message", "read")
    assert rows[i + 2][2:5] == ("↳ check", "gmail·get_contact", "read")
    assert rows[i + 1][0] == rows[i][0] + 1 and not rows[i + 1][6] and not rows[i + 2][6]


def test_questions_before_an_effect_are_its_approval_and_others_are_ask_rows():
    plan = compile_name("release-notes")
    rows = plan_rows(plan)
    assert not [r for r in rows if r[1] == "ask"]  # both questions became approvals
    cleanup = next(r for r in rows if r[2] == "cleanup")
    assert cleanup[4] == "critical" and cleanup[6]
    assert 'asks "delete the draft now that the notes are posted?"' in cleanup[5]
    plan = compile_name("channel-digest")
    asks = [r for r in plan_rows(plan) if r[1] == "ask"]
    assert [a[2] for a in asks] == ['"does the digest read well?" — the run stops here until you answer yes']
    assert len([n for n in plan.nodes if isinstance(n, QuestionNode)]) == 1


def test_critical_and_write_notes_differ():
    text = render(compile_name("reschedule"))
    assert "google-calendar·delete-event cannot be undone, so the run will stop and ask before `drop` runs." in text
    assert (
        "google-calendar·create-event changes something outside vodou, so the run will stop and ask before `moved` runs."
        in text
    )


def test_a_critical_steps_note_does_not_suggest_an_opt_out_the_compiler_refuses():
    text = render(compile_name("reschedule"))
    line = next(line for line in text.splitlines() if "before `drop` runs" in line)
    assert "Write `without asking`" not in line


# -- tool status -------------------------------------------------------------------------------


def test_a_missing_tool_shows_a_cross_and_the_note():
    plan = compile_name("channel-digest")
    status = {
        "post": ToolStatus(False, "no tool `slack_post_mesage` on slack; closest: slack.slack_post_message"),
        "post#preview": ToolStatus(False, "server `chat` is not configured"),
        "current": ToolStatus(True),
    }
    rows = plan_rows(plan, status)
    post = next(r for r in rows if r[2] == "post")
    assert (
        post[3] == "✗ slack·slack_post_message  no tool `slack_post_mesage` on slack; closest: slack.slack_post_message"
    )
    preview = next(r for r in rows if r[2] == "↳ preview")
    assert preview[3].startswith("✗ ") and "not configured" in preview[3]
    current = next(r for r in rows if r[2] == "current")
    assert current[3] == "slack·slack_get_channel"
    text = render(plan, status=status)
    assert "✗ slack·slack_post_message  no tool" in text


def test_the_card_names_source_servers_writer_and_fingerprint():
    plan = compile_name("morning-briefing")
    text = render(plan, source="recipes/x.recipe", servers_note="offline: servers not started", writer="model gpt-x")
    first = text.splitlines()[0]
    assert first.startswith("Here is how this would run: morning-briefing") and "(recipes/x.recipe)" in first
    assert "offline: servers not started" in text
    assert '"a morning briefing" (model gpt-x)' in text
    assert f"plan {plan.fingerprint[:19]}…" in text


# -- Mermaid ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_mermaid_has_every_node_and_edge_and_one_shape_per_approval(path):
    plan = compile_path(path)
    chart = mermaid(plan)
    lines = chart.splitlines()
    assert lines[0] == "flowchart TD" and chart.endswith("\n")
    defs = [line for line in lines if re.match(r"  n\d+[\[\(\{]", line)]
    assert len(defs) == len(plan.nodes)
    edges = [line for line in lines if "-->" in line]
    assert len(edges) == sum(len(n.needs) for n in plan.nodes)
    gates = [line for line in lines if "⚠ approve " in line]
    assert sorted(re.search(r"⚠ approve ([^\"]+)", g).group(1) for g in gates) == sorted(
        a.step for a in approvals(plan)
    )
    assert len([line for line in lines if line.endswith("fill:#ffe08a")]) == len(gates)
    effectful = [n for n in plan.nodes if isinstance(n, ToolNode) and n.risk != "read"]
    assert len([line for line in lines if "stroke:#d33" in line]) == len(effectful)


def test_mermaid_escapes_quotes():
    plan = compile_recipe('ask me:\n- say "hi"?\nx: slack.slack_search_messages {}\n', "q.recipe")
    chart = mermaid(plan)
    assert "ask: say #quot;hi#quot;?" in chart
    assert '"hi"' not in chart
