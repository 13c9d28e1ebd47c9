"""One validation for every way in: a plan holds only what the recipe language can write.

An actions.json with ``"expires_s": 10**30`` once passed every check, then
crashed writing the approval card (``OverflowError``) and left the run
``interrupted``; every resume crashed again. A negative expiry and one over
365 days were accepted too. Now every plan, from the compiler, a file, the run
API or the store, passes ``bounds.check_plan`` (called by ``graph.verify``):
the value is refused with exit 2, naming the field and the allowed range,
before anything is stored or started. Effects are counted in the rogue
server's own log.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import trio
from conftest import edit_stored_plan, rogue_calls, rogue_server, stored_plan

from vodou_engine.errors import PlanError
from vodou_engine.plan import decode_plan, encode_plan, with_fingerprint
from vodou_engine.runs import Runs

DAY = 86400

RECIPE = """\
recipe "bounds"
inputs:
  channel = "#daily"
approval expires: 30m
approvers: ana, bob
together sources:
  status: ops.get_status {}
    timeout: 30s
    retries: 2
  echo: vodou.echo {"value": 1}
  need: 1 of 2
then:
  ask me:
  - go on?
  note: write a note
  ask me:
  - really?
  post: ops.post_message {"channel": "{channel}", "text": "{note}"}
    expires: 10m
"""
"""Every bounded thing the language has: an approval lifetime, a step's expiry, timeout and
retries, a quorum, approvers, a question, an input, names and addresses."""

POST = 'post: ops.post_message {"channel": "#daily", "text": "hi"}\n'
STATUS = "status: ops.get_status {}\n"


def node(doc: dict, node_id: str) -> dict:
    (found,) = [n for n in doc["nodes"] if n["id"] == node_id]
    return found


def setter(*path, value):
    """An edit that sets ``value`` at ``path`` (a node id first, or ``options``/``inputs``)."""

    def edit(doc: dict) -> None:
        head, *rest = path
        target = doc[head] if head in ("options", "inputs") else node(doc, head)
        for key in rest[:-1]:
            target = target[key]
        target[rest[-1]] = value

    return edit


def rename_post(doc: dict, new: str = "then") -> None:
    """The effect step renamed (its gate, the gate's id and its need follow), as one would by hand."""
    post, gate = node(doc, "post"), node(doc, "approve:post")
    post["id"], gate["step"], gate["id"], post["needs"] = new, new, f"approve:{new}", [f"approve:{new}"]


def rename_gate(doc: dict) -> None:
    gate = node(doc, "approve:post")
    gate["id"] = node(doc, "post")["needs"][0] = "ok-to-post"


def rename_question(doc: dict) -> None:
    question = node(doc, "ask:1")
    question["id"] = node(doc, "note")["needs"][0] = "ask:0"


def duplicate_input(doc: dict) -> None:
    doc["inputs"].append(dict(doc["inputs"][0]))


# (id, edit, what the message names): each a value the language cannot write
FORGED = [
    ("expiry-1e30", setter("post", "expires_s", value=10**30), r"expires_s.*from 1 to 31536000 \(365 days\)"),
    ("expiry-negative", setter("post", "expires_s", value=-1), r"expires_s.*from 1 to 31536000"),
    ("expiry-zero", setter("post", "expires_s", value=0), r"expires_s.*from 1 to 31536000"),
    ("expiry-366-days", setter("post", "expires_s", value=366 * DAY), r"expires_s.*from 1 to 31536000"),
    ("expiry-bool", setter("post", "expires_s", value=True), r"expires_s"),
    ("expiry-float", setter("post", "expires_s", value=600.5), r"expires_s"),
    ("expiry-infinite", setter("post", "expires_s", value="INFINITY"), r"expires_s|out of range"),
    (
        "approval-expires-1e30",
        setter("options", "approval_expires_s", value=10**30),
        r"approval_expires_s.*from 1 to 31536000",
    ),
    (
        "approval-expires-negative",
        setter("options", "approval_expires_s", value=-900),
        r"approval_expires_s.*from 1 to 31536000",
    ),
    (
        "approval-expires-zero",
        setter("options", "approval_expires_s", value=0),
        r"approval_expires_s.*from 1 to 31536000",
    ),
    (
        "approval-expires-366-days",
        setter("options", "approval_expires_s", value=366 * DAY),
        r"approval_expires_s.*from 1 to 31536000",
    ),
    ("approval-expires-bool", setter("options", "approval_expires_s", value=True), r"approval_expires_s"),
    ("timeout-1e30", setter("status", "timeout_s", value=10**30), r"timeout_s.*from 1 to 86400 \(1 day\)"),
    ("timeout-zero", setter("status", "timeout_s", value=0), r"timeout_s.*from 1 to 86400"),
    ("timeout-negative", setter("status", "timeout_s", value=-5), r"timeout_s.*from 1 to 86400"),
    ("timeout-over-a-day", setter("status", "timeout_s", value=DAY + 1), r"timeout_s.*from 1 to 86400"),
    ("timeout-bool", setter("status", "timeout_s", value=True), r"timeout_s"),
    ("retries-huge", setter("status", "retries", value=10**9), r"retries.*from 1 to 10"),
    ("retries-negative", setter("status", "retries", value=-1), r"retries.*from 1 to 10"),
    ("retries-eleven", setter("status", "retries", value=11), r"retries.*from 1 to 10"),
    ("retries-bool", setter("status", "retries", value=True), r"retries"),
    ("need-bool", setter("join:sources", "need", value=True), r"need"),
    ("where-line-zero", setter("post", "where", "line", value=0), r"where\.line.*1 or more"),
    ("step-named-a-keyword", rename_post, r"nodes\[\d+\]\.id.*reserved word"),
    ("step-named-in-capitals", lambda doc: rename_post(doc, "Post"), r"nodes\[\d+\]\.id.*matches"),
    ("gate-id-not-approve-step", rename_gate, r"nodes\[\d+\]\.id.*approve:post"),
    ("question-id-ask-0", rename_question, r"nodes\[\d+\]\.id.*ask:N"),
    ("server-name", setter("post", "server", value='ops"x'), r"nodes\[\d+\]\.server.*matches"),
    ("tool-name", setter("post", "tool", value='post"message'), r"nodes\[\d+\]\.tool.*matches"),
    (
        "approver-an-agent",
        setter("options", "approvers", value=["agent:bot"]),
        r"options\.approvers\[0\].*approver's name",
    ),
    ("approver-with-a-space", setter("options", "approvers", value=["ana smith"]), r"options\.approvers\[0\]"),
    ("model-name", setter("options", "model", value="gpt; rm -rf"), r"options\.model"),
    ("input-twice", duplicate_input, r"inputs\[1\]\.name"),
]
IDS = [f[0] for f in FORGED]


def compiled(cli) -> dict:
    cli.servers_file({"ops": rogue_server(cli.tmp / "rogue.log")})
    recipe = cli.tmp / "bounds.recipe"
    recipe.write_text(RECIPE)
    cli("compile", recipe, "-o", cli.tmp / "actions.json", expect=0)
    return json.loads((cli.tmp / "actions.json").read_text())


def forged(cli, edit) -> Path:
    """The compiled plan with ``edit`` applied, fingerprinted again when it still decodes (as
    `recipe compile forged.json -o forged.json` used to), so only the bound can refuse it."""
    doc = compiled(cli)
    edit(doc)
    data = json.dumps(doc, indent=2).replace('"INFINITY"', "1e999")
    try:
        data = encode_plan(with_fingerprint(decode_plan(data))).decode()
    except PlanError:
        pass  # the decoder itself refuses it (a type JSON cannot hold there)
    path = cli.tmp / "forged.json"
    path.write_text(data)
    return path


def stored_runs(cli) -> int:
    if not Path(cli.location).exists():
        return 0  # not even a store was made
    return cli.sql("SELECT count(*) FROM runs")[0][0]


def server_calls(cli) -> list[dict]:
    return rogue_calls(cli.tmp / "rogue.log")


@pytest.mark.parametrize(("edit", "names"), [f[1:] for f in FORGED], ids=IDS)
def test_a_forged_value_is_refused_by_every_command_and_nothing_is_stored(cli, edit, names):
    path = forged(cli, edit)
    for command in (("run", path), ("plan", "--offline", path), ("compile", path, "-o", cli.tmp / "refreshed.json")):
        res = cli(*command)
        assert res.code == 2, (command, res.out, res.err)
        assert "Traceback" not in res.err and re.search(names, res.err), (command, res.err)
        assert str(path) in res.err  # the file is named
    assert not (cli.tmp / "refreshed.json").exists()  # compile cannot bless it with a fresh fingerprint
    assert stored_runs(cli) == 0
    assert server_calls(cli) == []  # no server was even asked for its tools


@pytest.mark.parametrize(("edit", "names"), [f[1:] for f in FORGED], ids=IDS)
def test_a_forged_value_is_refused_by_the_run_api_with_the_same_error(cli, edit, names):
    path = forged(cli, edit)
    printed = cli("run", path).err
    runs = Runs(store=cli.location, servers=cli.tmp / "mcp.json")
    with pytest.raises(PlanError) as refused:
        trio.run(lambda: runs.start(str(path)))
    assert refused.value.exit_code == 2 and re.search(names, refused.value.message)
    assert str(refused.value) in printed  # the CLI prints the run API's error, word for word
    assert stored_runs(cli) == 0
    assert server_calls(cli) == []


def _python_plan(cli, **changes):
    """A Plan built in Python with the effect step's fields changed (no decoder in between)."""
    import msgspec

    plan = decode_plan(json.dumps(compiled(cli)))
    nodes = [msgspec.structs.replace(n, **changes) if n.id == "post" else n for n in plan.nodes]
    return msgspec.structs.replace(plan, nodes=nodes)


@pytest.mark.parametrize(
    ("changes", "names"),
    [
        ({"expires_s": float("inf")}, r"expires_s.*from 1 to 31536000"),
        ({"expires_s": 10**30}, r"expires_s.*from 1 to 31536000"),
        ({"expires_s": -1}, r"expires_s.*from 1 to 31536000"),
        ({"timeout_s": float("nan")}, r"timeout_s.*from 1 to 86400"),
        ({"expires_s": True}, r"expires_s"),
        ({"args": {"channel": "#daily", "text": float("nan")}}, r"args.*finite"),
        ({"args": {"channel": "#daily", "text": [1, {"n": float("-inf")}]}}, r"args.*finite"),
    ],
    ids=["expiry-inf", "expiry-1e30", "expiry-negative", "timeout-nan", "expiry-bool", "arg-nan", "arg-nested-inf"],
)
def test_a_plan_built_in_python_is_held_to_the_same_bounds(cli, changes, names):
    """What JSON cannot carry (infinity, NaN) a Plan built in Python can: encoding it would
    write null (so an infinite expiry would quietly become the default); it is refused."""
    plan = _python_plan(cli, **changes)
    runs = Runs(store=cli.location, servers=cli.tmp / "mcp.json")
    with pytest.raises(PlanError) as refused:
        trio.run(lambda: runs.start(plan))
    assert refused.value.exit_code == 2 and re.search(names, refused.value.message), refused.value.message
    assert stored_runs(cli) == 0
    assert server_calls(cli) == []


def test_the_expiry_that_crashed_the_card_never_gets_into_a_run(cli):
    """The original report: 10**30 seconds, fingerprinted again, then `recipe run`."""
    path = forged(cli, setter("post", "expires_s", value=10**30))
    res = cli("run", path, "--json")
    assert res.code == 2 and "Traceback" not in res.err, res.err
    assert (
        "`nodes[6].expires_s` (step `post`) is 1000000000000000000000000000000; an approval lifetime (`expires:`) is a whole number of seconds from 1 to 31536000 (365 days)"
        in res.err
    )
    assert stored_runs(cli) == 0  # no run, so none left `interrupted`
    assert server_calls(cli) == []


def test_a_stored_plan_out_of_bounds_is_refused_before_anything_runs(cli):
    """A run stored with such a value (by an engine before this check) is refused at every
    drive with the same error, never run and never crashed; it can still be cancelled."""
    cli.servers_file({"ops": rogue_server(cli.tmp / "rogue.log")})
    (cli.tmp / "post.recipe").write_text("approvers: ana\n" + POST)
    run = cli("run", cli.tmp / "post.recipe", "--json", expect=3).json()["run"]
    doc = json.loads(stored_plan(cli.location, run))
    node(doc, "post")["expires_s"] = 10**30
    bad = with_fingerprint(decode_plan(json.dumps(doc)))
    edit_stored_plan(cli.location, run, encode_plan(bad).decode(), bad.fingerprint)
    ana = cli.approver("ana")
    for command in (("resume", run), ("approve", run, "post", "--yes", "--as", "ana")):
        res = cli(*command, env=ana)
        assert res.code == 2 and "Traceback" not in res.err, (command, res.err)
        assert "`nodes[1].expires_s` (step `post`)" in res.err and "from 1 to 31536000" in res.err
    assert [c for c in server_calls(cli) if c["tool"] == "post_message"] == []
    assert cli.sql("SELECT state FROM runs WHERE id = ?", (run,)) == [("parked",)]
    cli("cancel", run, expect=0)


def test_the_bounds_are_the_languages():
    """One set of limits: the parser's are bounds.py's, and the name patterns are the grammar's terminals."""
    from importlib import resources

    from vodou_engine import bounds
    from vodou_engine.compiler import build, names

    assert (build.MAX_DURATION, build.MAX_TIMEOUT, build.MAX_RETRIES) == (
        bounds.MAX_DURATION,
        bounds.MAX_TIMEOUT,
        bounds.MAX_RETRIES,
    )
    assert names.RESERVED is bounds.RESERVED  # what the lowering checks names against
    grammar = resources.files("vodou_engine.compiler").joinpath("grammar.lark").read_text()
    terminals = dict(re.findall(r"^([A-Z_]+): /(.*)/$", grammar, re.M))
    assert terminals["NAME"] == bounds.NAME
    for bare in ("_SERVER", "_TOOL", "_QUOTED_NAME"):  # every name the grammar writes, bounds.py accepts
        assert bare in terminals, bare
    server, tool = re.compile(bounds.SERVER), re.compile(bounds.TOOL)
    for name in ("slack", "Everything", "My Server", "get-env", "notes.add", "get env"):
        assert tool.fullmatch(name), name
        assert server.fullmatch(name) or "." in name, name
    for name in ('a"b', "a\\b", "a\nb"):
        assert not tool.fullmatch(name) and not server.fullmatch(name), name
    assert not server.fullmatch("a.b")
    assert terminals["PERSON"] == bounds.PERSON
    assert terminals["MODEL"] == bounds.MODEL


@pytest.mark.parametrize(
    ("recipe", "names"),
    [
        (POST + "  expires: 366d\n", "longer than 365 days"),
        (POST + "  expires: 0m\n", "more than zero"),
        (STATUS + "  timeout: 2d\n", "timeout is at most 1d"),
        (STATUS + "  retries: 11\n", "retries must be from 1 to 10"),
    ],
    ids=["expiry-366-days", "expiry-zero", "timeout-two-days", "retries-eleven"],
)
def test_an_agent_gives_only_recipe_text_and_the_language_refuses_the_same_values(cli, recipe, names):
    """The agent tools take recipe text, never a plan: the compiler's own bounds (the same
    constants) refuse it, with its line and caret, and nothing is stored or started. A plan
    document given as the text is no recipe either."""
    import anyio
    from test_agents import Agent

    document = json.dumps(compiled(cli))

    async def main():
        async with Agent(cli) as agent:
            for tool, args in (
                ("start_run", {"recipe": recipe}),
                ("save_recipe", {"recipe": recipe, "name": "bounded"}),
                ("propose_schedule", {"name": "bounded", "cron": "0 9 * * *", "tz": "UTC", "recipe": recipe}),
                ("start_run", {"recipe": document}),
            ):
                error = await agent.refused(tool, **args)
                assert error["code"] == "recipe.invalid", (tool, error)
                if args["recipe"] is recipe:
                    assert names in error["message"] and error["line"] == 2 and error["caret"], (tool, error)
            checked = await agent.ok("check_recipe", recipe=recipe)
            assert not checked["ok"] and names in checked["errors"][0]["message"]

    anyio.run(main)
    assert stored_runs(cli) == 0
    assert [c for c in server_calls(cli) if c["tool"] in ("post_message", "get_status")] == []
