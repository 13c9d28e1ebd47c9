"""Every example in recipes/ compiles, deterministically, to a plan that passes
the shipped JSON Schema and the graph checks; and a plan edited to drop a gate
is refused when loaded, whatever the edit does to the fingerprint.
"""

from __future__ import annotations

import gc
import json
import re
from pathlib import Path

import jsonschema
import pytest

import vodou_engine
from vodou_engine.compiler import ast, compile_recipe, load_plan, load_source
from vodou_engine.compiler.parser import parse
from vodou_engine.compiler.source import Source
from vodou_engine.errors import PlanError, UnguardedEffectError
from vodou_engine.plan import (
    ApprovalNode,
    JoinNode,
    QuestionNode,
    ToolNode,
    WriteNode,
    decode_plan,
    encode_plan,
    json_schema,
    with_fingerprint,
)

ROOT = Path(__file__).resolve().parent.parent
RECIPES = sorted((ROOT / "recipes").glob("*.recipe"))
SCHEMA_FILE = Path(vodou_engine.__file__).parent / "schema" / "actions-1.schema.json"

# The example at the top of the language page, verbatim.
SPEC_EXAMPLE = """\
together sources:
  calendar: google-calendar.list-events {"calendarId":"primary"}
  mail:     gmail.messages_list {"labelIds":["UNREAD"]}
  slack:    slack.slack_search_messages {"query":"mentions:me"}
then:
  need: 2 of 3
  briefing: write a morning briefing from {calendar, mail, slack}
  ask me:
  - post to #daily?
"""


def compile_file(path: Path):
    return compile_recipe(path.read_text(encoding="utf-8"), str(path))


def ids(paths):
    return [p.stem for p in paths]


def test_there_are_examples():
    names = {p.name for p in RECIPES}
    assert len(RECIPES) >= 6
    assert {"morning-briefing.recipe", "post-fanout.recipe", "time-and-git.recipe"} <= names


@pytest.mark.parametrize("path", RECIPES, ids=ids(RECIPES))
def test_compiles_to_the_same_bytes_twice(path):
    first = encode_plan(compile_file(path))
    second = encode_plan(compile_file(path))
    assert first == second
    # and the file-reading entry point agrees with the text one
    plan, text = load_source(str(path))
    assert text == path.read_text(encoding="utf-8")
    assert encode_plan(plan) == first


@pytest.fixture(scope="module")
def schema():
    return json.loads(SCHEMA_FILE.read_text(encoding="utf-8"))


def test_shipped_schema_is_the_generated_one(schema):
    assert schema == json_schema(), "regenerate vodou_engine/schema/actions-1.schema.json from plan.json_schema()"


@pytest.mark.parametrize("path", RECIPES, ids=ids(RECIPES))
def test_plan_validates_against_the_schema(path, schema):
    document = json.loads(encode_plan(compile_file(path)))
    jsonschema.validate(document, schema)
    loops = any(n["kind"] == "each" for n in document["nodes"])
    assert document["format"] == ("vodou.actions/2" if loops else "vodou.actions/1")  # 2: with a `for each`
    assert document["fingerprint"].startswith("sha256:")


def test_the_schema_rejects_a_node_of_unknown_kind(schema):
    document = json.loads(encode_plan(compile_file(ROOT / "recipes" / "morning-briefing.recipe")))
    document["nodes"][0]["kind"] = "shell"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(document, schema)


@pytest.mark.parametrize("path", RECIPES, ids=ids(RECIPES))
def test_every_effect_has_exactly_one_approval(path):
    plan = compile_file(path)
    approvals = [n for n in plan.nodes if isinstance(n, ApprovalNode)]
    for node in plan.nodes:
        if not isinstance(node, ToolNode):
            continue
        mine = [a for a in approvals if a.step == node.id]
        if node.effectful and not node.without_asking:
            assert len(mine) == 1, node.id
            assert node.needs == [mine[0].id], "an effect's only need is its own approval"
        else:
            assert mine == [], node.id
    assert len({a.step for a in approvals}) == len(approvals)


@pytest.mark.parametrize("path", RECIPES, ids=ids(RECIPES))
def test_round_trips_through_load_plan(path):
    plan = compile_file(path)
    loaded = load_plan(encode_plan(plan), str(path))
    assert loaded == plan
    assert encode_plan(loaded) == encode_plan(plan)


# --- the morning briefing ------------------------------------------------------

BRIEFING = ROOT / "recipes" / "morning-briefing.recipe"


def test_morning_briefing_is_the_spec_example_plus_a_post():
    text = BRIEFING.read_text(encoding="utf-8")
    lines = text.splitlines(keepends=True)
    header = [line for line in lines if line.startswith("# ")]
    assert header and lines[: len(header)] == header  # the header comments come first
    body = "".join(lines[len(header) :])
    assert body == SPEC_EXAMPLE + '  post: slack.slack_post_message {"channel": "#daily", "text": "{briefing}"}\n'


def test_the_spec_example_alone_compiles():
    plan = compile_recipe(SPEC_EXAMPLE)
    join = plan.node("join:sources")
    assert isinstance(join, JoinNode) and (join.need, join.of) == (2, 3)
    # no effect follows the question, so it stays a plain yes/no gate
    assert [type(n) for n in plan.nodes if isinstance(n, (QuestionNode, ApprovalNode))] == [QuestionNode]


def test_morning_briefing_question_is_the_posts_approval():
    plan = compile_file(BRIEFING)
    approvals = [n for n in plan.nodes if isinstance(n, ApprovalNode)]
    assert len(approvals) == 1
    (gate,) = approvals
    assert gate.step == "post" and gate.id == "approve:post"
    assert gate.question == "post to #daily?"
    assert not [n for n in plan.nodes if isinstance(n, QuestionNode)], "one question, not two"
    assert gate.needs == ["briefing"]
    post = plan.node("post")
    assert isinstance(post, ToolNode) and post.risk == "write" and post.needs == ["approve:post"]
    assert post.refs == ["briefing"]
    briefing = plan.node("briefing")
    assert isinstance(briefing, WriteNode) and briefing.inputs == ["calendar", "mail", "slack"]
    assert briefing.needs == ["join:sources"]
    assert plan.recipe.name == "morning-briefing"


# --- editing actions.json cannot drop a gate -------------------------------------


def _document(path=BRIEFING) -> dict:
    return json.loads(encode_plan(compile_file(path)))


def _refingerprint(document: dict) -> bytes:
    return encode_plan(with_fingerprint(decode_plan(json.dumps(document))))


def _without_approval(document: dict) -> dict:
    nodes = document["nodes"]
    (gate,) = [n for n in nodes if n["kind"] == "approval" and n["step"] == "post"]
    nodes.remove(gate)
    (post,) = [n for n in nodes if n["id"] == "post"]
    post["needs"] = gate["needs"]
    return document


def test_removing_the_approval_is_refused():
    edited = json.dumps(_without_approval(_document()))
    with pytest.raises(UnguardedEffectError, match=r"`post`"):
        load_plan(edited)


def test_removing_the_approval_is_refused_with_a_fresh_fingerprint():
    edited = _refingerprint(_without_approval(_document()))
    with pytest.raises(UnguardedEffectError, match=r"`post`") as info:
        load_plan(edited)
    assert info.value.exit_code == 2
    with pytest.raises(UnguardedEffectError, match=r"`post`"):
        load_plan(edited, refresh=True)


@pytest.mark.parametrize("refingerprint", [False, True], ids=["stale-fingerprint", "fresh-fingerprint"])
@pytest.mark.parametrize("drop_gate", [False, True], ids=["gate-kept", "gate-dropped"])
def test_lowering_a_risk_to_read_is_refused(refingerprint, drop_gate):
    document = _document()
    if drop_gate:
        _without_approval(document)
    (post,) = [n for n in document["nodes"] if n["id"] == "post"]
    assert post["risk"] == "write"
    post["risk"] = "read"
    data = _refingerprint(document) if refingerprint else json.dumps(document)
    with pytest.raises(UnguardedEffectError, match=r"`post`"):
        load_plan(data)


def test_an_unedited_plan_loads_and_an_edited_fingerprint_does_not():
    document = _document()
    load_plan(json.dumps(document))
    document["nodes"][0]["args"]["calendarId"] = "someone-else"
    with pytest.raises(Exception, match="fingerprint"):
        load_plan(json.dumps(document))


def test_a_compile_leaves_nothing_for_the_cycle_collector():
    # compile_recipe switches the collector off while it works: what it
    # leaves behind must go by reference counting alone, or pile up
    compile_file(BRIEFING)
    gc.collect()
    compile_file(BRIEFING)
    assert gc.collect() == 0


def test_a_second_way_past_the_gate_is_refused():
    document = _document()
    (post,) = [n for n in document["nodes"] if n["id"] == "post"]
    post["needs"] = ["approve:post", "briefing"]  # the gate is no longer its only way in
    with pytest.raises(UnguardedEffectError, match=r"`post` .* without passing its approval `approve:post`"):
        load_plan(_refingerprint(document))


def test_needs_out_of_order_are_fine_and_a_cycle_is_refused():
    document = _document()
    document["nodes"].reverse()  # every need now comes after its node: the full search decides
    plan = load_plan(_refingerprint(document))
    assert len(plan.nodes) == len(document["nodes"])
    (first,) = [n for n in document["nodes"] if n["id"] == "calendar"]
    first["needs"] = ["post"]
    with pytest.raises(PlanError, match=r"the plan has a cycle: .*calendar"):
        load_plan(_refingerprint(document))


def _edited(edit):
    """A briefing plan edited by ``edit``, decoded without any check (as the runtime reads a stored plan)."""
    document = _document()
    edit(document)
    return decode_plan(_refingerprint(document))


def _second_way_in(document):
    (post,) = [n for n in document["nodes"] if n["id"] == "post"]
    post["needs"] = ["approve:post", "briefing"]


def _cycle(document):
    document["nodes"].reverse()
    (first,) = [n for n in document["nodes"] if n["id"] == "calendar"]
    first["needs"] = ["post"]


def _risk_lowered(document):
    (post,) = [n for n in document["nodes"] if n["id"] == "post"]
    post["risk"] = "read"


@pytest.mark.parametrize(
    ("edit", "error", "match"),
    [
        (_without_approval, UnguardedEffectError, r"`post`"),
        (_second_way_in, UnguardedEffectError, r"without passing its approval"),
        (_cycle, PlanError, r"the plan has a cycle"),
        (_risk_lowered, UnguardedEffectError, r"claims risk read"),
    ],
    ids=["gate-removed", "second-way-in", "cycle", "risk-lowered"],
)
def test_the_runtime_check_refuses_what_verify_refuses(edit, error, match):
    """``check`` (what a resume runs on a stored plan) is ``verify`` without the returned graph."""
    from vodou_engine.graph.verify import check, verify
    from vodou_engine.policy import Policy

    plan = _edited(edit)
    for fn in (verify, check):
        with pytest.raises(error, match=match):
            fn(plan, Policy())


def test_the_runtime_check_of_a_compiled_plan_does_not_load_networkx(tmp_path):
    import subprocess
    import sys

    actions = tmp_path / "actions.json"
    actions.write_bytes(encode_plan(compile_file(BRIEFING)))
    code = (
        "import sys; from vodou_engine.plan import decode_plan; from vodou_engine.graph.verify import check; "
        "from vodou_engine.policy import Policy; "
        f"check(decode_plan(open({str(actions)!r}, 'rb').read()), Policy()); "
        "assert 'networkx' not in sys.modules, 'networkx was imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


# --- the examples between them use every construct --------------------------------


def _walk(items, parents=()):
    for item in items:
        yield item, parents
        if isinstance(item, ast.Block):
            yield from _walk(item.items, (*parents, item))


def test_examples_cover_every_construct():
    seen: set[str] = set()
    for path in RECIPES:
        text = path.read_text(encoding="utf-8")
        tree = parse(Source(text, str(path)))
        plan = compile_file(path)
        if tree.title:
            seen.add("title")
        if any(d.required for d in tree.inputs):
            seen.add("required input")
        if any(not d.required for d in tree.inputs):
            seen.add("input with a default")
        if tree.approvers:
            seen.add("approvers")
        if tree.expires:
            seen.add("approval expires")
        items = list(_walk(tree.items))
        for _i, (item, parents) in enumerate(items):
            parent = parents[-1] if parents else None
            if isinstance(item, ast.Block) and parent is not None and parent.kind == "together":
                seen.add(f"{item.kind} inside a together")
            if isinstance(item, ast.Need):
                if parent is not None and parent.kind == "together":
                    seen.add("need inside a together")
                elif parent is not None and parent.kind == "then" and parent.items[0] is item:
                    seen.add("need first in the next then")
            if isinstance(item, ast.Ask) and len(item.questions) > 1:
                seen.add("ask me with several questions")
            if isinstance(item, ast.Step):
                for option in item.options:
                    seen.add(option.kind)
        for node in plan.nodes:
            if isinstance(node, WriteNode):
                seen.add("write")
            if isinstance(node, ToolNode):
                strings = json.dumps(node.args)
                if re.search(r"\{[a-z_][a-z0-9_-]*(\.[A-Za-z0-9_-]+)*\.[0-9]+(\.[A-Za-z0-9_-]+)*\}", strings):
                    seen.add("reference with a path")
                if any(r in {i.name for i in plan.inputs} for r in node.refs):
                    seen.add("reference to an input")
            if isinstance(node, ApprovalNode) and node.question:
                seen.add("question as approval")
            if isinstance(node, QuestionNode):
                seen.add("question as its own gate")
        if re.search(r"\{[ ]*(#.*)?\n", text):
            seen.add("multi-line JSON")
        if re.search(r"^[ ]*without asking", text, re.M):
            seen.add("without asking")
        if re.search(r"^[ ]*don't ask", text, re.M):
            seen.add("don't ask")
    expected = {
        "title",
        "required input",
        "input with a default",
        "approvers",
        "approval expires",
        "together inside a together",
        "then inside a together",
        "need inside a together",
        "need first in the next then",
        "ask me with several questions",
        "preview",
        "check",
        "expires",
        "without_asking",
        "without asking",
        "don't ask",
        "write",
        "reference with a path",
        "reference to an input",
        "question as approval",
        "question as its own gate",
        "multi-line JSON",
    }
    assert expected - seen == set()


def test_time_and_git_commits_with_the_time():
    plan = compile_file(ROOT / "recipes" / "time-and-git.recipe")
    assert [i.name for i in plan.inputs if i.required] == ["repo"]
    now, status = plan.node("now"), plan.node("status")
    assert (now.address, status.address) == ("time.get_current_time", "git.git_status")
    assert now.risk == status.risk == "read"
    assert now.needs == status.needs == []
    add, commit = plan.node("add"), plan.node("commit")
    assert add.address == "git.git_add" and add.risk == "write" and add.without_asking
    assert add.needs == ["join:reads"]
    assert commit.address == "git.git_commit" and commit.risk == "write" and not commit.without_asking
    assert "now" in commit.refs and "{now." in commit.args["message"]
    assert plan.node("approve:commit").step == "commit"
    assert commit.check is not None and commit.check.address == "git.git_status"


def test_post_fanout_runs_three_branches_together():
    plan = compile_file(ROOT / "recipes" / "post-fanout.recipe")
    (join,) = [n for n in plan.nodes if isinstance(n, JoinNode)]
    assert join.needs == ["board", "recall", "proc"] and (join.need, join.of) == (3, 3)
    assert [plan.node(n).server for n in join.needs] == ["board", "recall", "proc"]
    assert [plan.node(n).args["ms"] for n in join.needs] == [412, 268, 83]
    assert all(plan.node(n).needs == [] for n in join.needs)


def test_the_language_page_example_compiles():
    page = (ROOT / "docs" / "recipe-language.md").read_text(encoding="utf-8")
    example = re.search(r"```\n(.*?)```", page, re.S).group(1)
    plan = compile_recipe(example, "docs.recipe")
    assert plan.recipe.name == "Morning briefing"
    gate = plan.node("approve:post")
    assert gate.question == "post to #daily?"
    assert plan.node("post").preview is not None and plan.node("post").check is not None
