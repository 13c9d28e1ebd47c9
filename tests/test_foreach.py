"""`for each`: the language, the plan, the verifier and the card (docs/recipe-language.md, Loops)."""

from __future__ import annotations

import json

import msgspec
import pytest

from vodou_engine.cards import mermaid, plan_rows
from vodou_engine.compiler import compile_recipe, load_plan
from vodou_engine.errors import EXIT_USAGE, PlanError, RecipeError
from vodou_engine.plan import ApprovalNode, LoopNode, encode_plan

PATH = "loop.recipe"
MAIL = (
    'unread: gmail.messages_list {"labelIds": ["UNREAD"], "maxResults": 20}\n'
    "for each m in {unread.messages}:\n"
    "  at most 4 at a time\n"
    "  draft: write a short, friendly reply from {m}\n"
    '  reply: gmail.send_message {"to": "{m.from}", "subject": "Re: {m.subject}", "body": "{draft}"}\n'
    'tell: slack.slack_post_message {"channel": "#ops", "text": "replied to {reply.count} mails"}\n'
)
BODY = "for each m in {unread.messages}:\n"
UNREAD = 'unread: gmail.messages_list {"maxResults": 5}\n'

ERRORS = [
    (
        "non-list-object",
        'for each m in {"a": 1}:\n  t: time.get_current_time {}\n',
        1,
        15,
        "goes through a list, and this is a JSON object",
        "JSON list",
    ),
    (
        "non-list-string",
        'for each m in "abc":\n  t: time.get_current_time {}\n',
        1,
        15,
        "this is a string",
        "JSON list",
    ),
    ("non-list-number", "for each m in 3:\n  t: time.get_current_time {}\n", 1, 15, "this is a number", "JSON list"),
    (
        "unknown-loop-variable",
        UNREAD + BODY + '  t: time.get_current_time {"timezone": "{n.tz}"}\n',
        3,
        43,
        "unknown name `n`",
        "the loop variable here is `m`",
    ),
    (
        "loop-variable-outside",
        UNREAD + BODY + "  t: time.get_current_time {}\n" + 'after: time.get_current_time {"timezone": "{m.tz}"}\n',
        4,
        45,
        "`m` is the loop variable of the `for each` on line 2",
        "indented under the `for each`",
    ),
    (
        "body-step-by-list-inside",
        UNREAD + BODY + "  t: time.get_current_time {}\n" + '  u: time.get_current_time {"timezone": "{t.count}"}\n',
        4,
        43,
        "inside it, `{t}` is this item's value",
        "after the block",
    ),
    (
        "unknown-list",
        "for each m in {nothing.here}:\n  t: time.get_current_time {}\n",
        1,
        16,
        "unknown name `nothing`",
        "refer to",
    ),
    (
        "need-k-of-n-in-a-loop",
        UNREAD + BODY + "  need: 2 of 3\n  t: time.get_current_time {}\n",
        3,
        3,
        "known only at run time",
        "of all",
    ),
    (
        "at-most-outside-a-loop",
        "together:\n  at most 2 at a time\n  a: time.get_current_time {}\n  b: time.get_current_time {}\n",
        2,
        3,
        "belongs to a `for each`",
        "indent it",
    ),
    (
        "too-many-max-items",
        UNREAD + BODY + "  max items: 20000\n  t: time.get_current_time {}\n",
        3,
        14,
        "from 1 to 10000",
        "max items",
    ),
    (
        "loop-without-steps",
        UNREAD + BODY + "  at most 2 at a time\n",
        2,
        1,
        "has no steps",
        "indent the steps",
    ),
]


@pytest.mark.parametrize("case_id, text, line, column, message, hint", ERRORS, ids=[c[0] for c in ERRORS])
def test_bad_loops_are_refused_with_place_and_hint(case_id, text, line, column, message, hint):
    with pytest.raises(RecipeError) as info:
        compile_recipe(text, PATH)
    err = info.value
    assert err.exit_code == EXIT_USAGE
    assert message in err.message, str(err)
    assert (err.line, err.column) == (line, column), str(err)
    assert err.hint and hint in err.hint, str(err)
    lines = str(err).split("\n")
    assert lines[0] == f"{PATH}:{line}:{column}: error: {err.message}"
    assert lines[2].startswith("  " + " " * (column - 1) + "^"), str(err)


def test_the_loop_lowers_to_one_node_with_its_body_and_an_approval_inside():
    plan = compile_recipe(MAIL, PATH)
    loops = [n for n in plan.nodes if isinstance(n, LoopNode)]
    assert len(loops) == 1
    loop = loops[0]
    assert (loop.id, loop.var, loop.over, loop.over_text) == ("each:1", "m", "{unread.messages}", "unread.messages")
    assert loop.body == ["draft", "approve:reply", "reply"]
    assert loop.exit == "reply" and loop.at_most == 4 and loop.max_items == 100
    assert loop.needs == ["unread"]
    index = plan.index()
    assert index["draft"].needs == [] and index["reply"].needs == ["approve:reply"]
    assert isinstance(index["approve:reply"], ApprovalNode)
    # what follows the block needs the loop, and reads the list of per-item outputs
    assert index["approve:tell"].needs == ["each:1"]
    # the plan goes through actions.json and back, verified
    again = load_plan(encode_plan(plan), "actions.json")
    assert again == plan


def test_loop_options_and_nesting_compile():
    text = (
        UNREAD
        + "for each m in {unread.messages}:\n"
        + "  need: 50%\n"
        + "  max items: 500\n"
        + "  for each to in {m.to}:\n"
        + "    need: 1 of all\n"
        + '    t: time.get_current_time {"timezone": "{to}", "x": "{m.id}"}\n'
        + '  u: time.get_current_time {"timezone": "{t.count}"}\n'
        + 'done: time.get_current_time {"timezone": "{u.count}", "y": "{t}"}\n'
    )
    plan = compile_recipe(text, PATH)
    outer, inner = (n for n in plan.nodes if isinstance(n, LoopNode))
    assert outer.need_percent == 50 and outer.max_items == 500 and outer.need is None
    assert inner.need == 1 and inner.over == "{m.to}"
    assert outer.body == ["each:2", "u"] and inner.body == ["t"]
    assert [n.id for n in plan.nodes].index("each:2") < [n.id for n in plan.nodes].index("t")


def test_a_literal_list_is_the_loops_items():
    plan = compile_recipe('for each tz in ["UTC", "Europe/Lisbon"]:\n  t: time.get_current_time {"timezone": "{tz}"}\n')
    (loop,) = (n for n in plan.nodes if isinstance(n, LoopNode))
    assert loop.over == ["UTC", "Europe/Lisbon"]
    rows = plan_rows(plan)
    assert rows[0][1] == 'for each tz in ["UTC", "Europe/Lisbon"]' and "(2 items)" in rows[0][2]


def test_the_card_shows_the_loop_its_body_and_the_batch_gate():
    plan = compile_recipe(MAIL, PATH)
    rows = plan_rows(plan)
    labels = [(r[0], r[1], r[2], r[6]) for r in rows]
    loop_row = next(r for r in rows if r[1] and r[1].startswith("for each"))
    assert loop_row[1] == "for each m in unread.messages"
    assert "(count known at run time)" in loop_row[2] and "at most 4 at a time" in loop_row[2]
    assert "one card for all" in loop_row[2]
    assert (1, None, "draft", False) in labels
    assert (1, None, "reply", True) in labels  # ⚠: gated, inside the loop
    assert (0, None, "tell", True) in labels
    graph = mermaid(plan)
    assert "for each m in unread.messages" in graph and "subgraph" in graph


def test_plan_json_and_mermaid_through_the_cli(cli):
    (cli.tmp / "mail.recipe").write_text(MAIL)
    res = cli("plan", "mail.recipe", "--json", expect=0)
    doc = json.loads(res.out)
    assert doc["graph"]["loops"] == {
        "each:1": {"var": "m", "over": "unread.messages", "body": ["draft", "approve:reply", "reply"], "max_items": 100}
    }
    assert doc["graph"]["kinds"]["each"] == 1
    res = cli("plan", "mail.recipe", expect=0)
    assert "for each m in unread.messages" in res.out and "(count known at run time)" in res.out
    assert "⚠ reply" in res.out
    res = cli("plan", "mail.recipe", "--format", "mermaid", expect=0)
    assert "subgraph" in res.out


def _edited(plan, node_id, **changes):
    doc = msgspec.to_builtins(plan)
    for n in doc["nodes"]:
        if n["id"] == node_id:
            n.update(changes)
    doc["fingerprint"] = ""
    return json.dumps(doc)


def test_the_verifier_keeps_an_effect_inside_its_loop_behind_its_approval():
    plan = compile_recipe(MAIL, PATH)
    # the approval taken out of the body: the effect's gate is no longer the batch's
    bad = _edited(plan, "each:1", body=["draft", "reply"])
    with pytest.raises(PlanError, match="across the edge of a loop's body"):
        load_plan(bad, "a.json", refresh=True)
    # an edge from outside into the body
    bad = _edited(plan, "draft", needs=["unread"])
    with pytest.raises(PlanError, match="across the edge of a loop's body"):
        load_plan(bad, "a.json", refresh=True)
    # the effect moved out of the loop, its gate left in
    doc = msgspec.to_builtins(plan)
    for n in doc["nodes"]:
        if n["id"] == "each:1":
            n["body"] = ["draft", "approve:reply"]
            n["exit"] = "approve:reply"
    with pytest.raises(PlanError, match="across the edge of a loop's body"):
        load_plan(json.dumps(doc), "a.json", refresh=True)


def test_a_plan_with_a_loop_is_format_2_and_others_stay_format_1():
    plan = compile_recipe(MAIL, PATH)
    assert plan.format == "vodou.actions/2"
    assert compile_recipe(UNREAD).format == "vodou.actions/1"
    doc = msgspec.to_builtins(plan)
    doc["format"] = "vodou.actions/1"
    with pytest.raises(PlanError, match=r"a plan with a loop is format 'vodou\.actions/2'"):
        load_plan(json.dumps(doc), "a.json", refresh=True)
