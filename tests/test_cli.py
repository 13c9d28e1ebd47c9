"""The `recipe` command as a person meets it, in an isolated home.

Claims about the CLI are checked by running its ``main`` with the arguments a
person types, in this process (tests/test_cli_process.py starts the real
`python -m vodou_engine` for every command and exit code); claims that a command
never calls a tool are checked in the demo servers' own call log, not in the
engine's bookkeeping.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest
from conftest import RECIPES, Cli, demo_calls

from vodou_engine.errors import PlanError
from vodou_engine.plan import decode_plan, encode_plan, with_fingerprint

MORNING = RECIPES / "morning-briefing.recipe"
CHANNEL = RECIPES / "channel-digest.recipe"


# -- helpers -------------------------------------------------------------------------


def no_traceback(res) -> None:
    assert "Traceback" not in res.err, res.err
    assert "Traceback" not in res.out, res.out


def compiled(cli: Cli, recipe: Path = MORNING, name: str = "actions.json") -> Path:
    out = cli.tmp / name
    cli("compile", recipe, "-o", out, expect=0)
    return out


def edit(path: Path, change, *, refingerprint: bool) -> Path:
    """Apply ``change`` to the JSON document at ``path``; optionally re-fingerprint it."""
    doc = json.loads(path.read_text())
    change(doc)
    data = json.dumps(doc, indent=2).encode()
    if refingerprint:
        data = encode_plan(with_fingerprint(decode_plan(data)))
    path.write_bytes(data)
    return path


def drop_post_approval(doc) -> None:
    gate = next(n for n in doc["nodes"] if n["kind"] == "approval" and n["step"] == "post")
    doc["nodes"].remove(gate)
    post = next(n for n in doc["nodes"] if n["id"] == "post")
    post["needs"] = list(gate["needs"])  # its predecessor: the briefing


def time_servers() -> dict:
    return {"time": {"command": sys.executable, "args": ["-m", "mcp_server_time"]}}


def time_recipe(cli: Cli) -> Path:
    path = cli.tmp / "clock.recipe"
    path.write_text('now: time.get_current_time {"timezone": "Europe/Lisbon"}\n')
    return path


# -- compile -------------------------------------------------------------------------


def test_compile_prints_actions_json_to_stdout(cli):
    res = cli("compile", MORNING, expect=0)
    doc = res.json()
    assert doc["format"] == "vodou.actions/1"
    assert doc["fingerprint"].startswith("sha256:")
    assert {n["id"] for n in doc["nodes"]} >= {
        "calendar",
        "mail",
        "slack",
        "join:sources",
        "briefing",
        "approve:post",
        "post",
    }
    assert res.err == ""


def test_compile_output_file_and_identical_bytes_twice(cli):
    first = cli("compile", MORNING, expect=0).out
    second = cli("compile", MORNING, expect=0).out
    assert first == second
    out = cli.tmp / "out" / "actions.json"
    out.parent.mkdir()
    res = cli("compile", MORNING, "-o", out, expect=0)
    assert res.out == ""
    assert out.read_text() == first
    assert not list(out.parent.glob("*.tmp"))


def test_compile_actions_json_reverifies_and_gives_the_same_bytes(cli):
    path = compiled(cli)
    res = cli("compile", path, expect=0)
    assert res.out == path.read_text()


@pytest.mark.parametrize(
    "command", [["compile"], ["plan", "--offline"], ["run", "--json"]], ids=["compile", "plan", "run"]
)
def test_an_actions_json_without_the_posts_approval_is_refused(cli, command):
    path = edit(compiled(cli), drop_post_approval, refingerprint=True)
    res = cli(*command, path, expect=2)
    assert "`post`" in res.err
    assert "approval" in res.err
    assert "hint:" in res.err
    no_traceback(res)
    assert demo_calls(cli.demo_db, tool="slack_post_message") == []
    assert demo_calls(cli.demo_db) == []  # refused before any server was asked anything


def test_an_actions_json_without_the_approval_and_a_stale_fingerprint_names_the_step(cli):
    # without re-fingerprinting: the missing gate is still what the person is told about
    path = edit(compiled(cli), drop_post_approval, refingerprint=False)
    res = cli("plan", "--offline", path, expect=2)
    assert "`post`" in res.err and "approval" in res.err
    no_traceback(res)


def test_a_fingerprint_only_edit_is_refused_until_recompiled(cli):
    path = compiled(cli)

    def retarget(doc):
        next(n for n in doc["nodes"] if n["id"] == "post")["args"]["channel"] = "#random"

    edit(path, retarget, refingerprint=False)
    for command in (["plan", "--offline"], ["run", "--json"]):
        res = cli(*command, path, expect=2)
        assert "fingerprint" in res.err
        assert f"recipe compile {path} -o {path}" in res.err  # the hint says how to accept the edit
        no_traceback(res)
    assert demo_calls(cli.demo_db) == []

    cli("compile", path, "-o", path, expect=0)
    fixed = json.loads(path.read_text())
    assert next(n for n in fixed["nodes"] if n["id"] == "post")["args"]["channel"] == "#random"
    assert fixed["fingerprint"] == with_fingerprint(decode_plan(path.read_bytes())).fingerprint
    cli("plan", "--offline", path, expect=0)
    assert cli("compile", path, expect=0).out == path.read_text()


def test_recompiling_an_edited_file_in_place_keeps_it_when_verification_fails(cli):
    path = edit(compiled(cli), drop_post_approval, refingerprint=False)
    before = path.read_bytes()
    cli("compile", path, "-o", path, expect=2)
    assert path.read_bytes() == before


# -- every command that takes a recipe takes an actions.json -------------------------


def test_plan_offline_and_plan_json_accept_an_actions_json(cli):
    path = compiled(cli)
    card = cli("plan", "--offline", path, expect=0)
    assert "⚠ post" in card.out
    doc = cli("plan", "--offline", "--json", path, expect=0).json()
    assert doc["plan"] == json.loads(path.read_text())
    assert doc["graph"]["approvals"] == {"post": "approve:post"}
    assert doc["graph"]["verified"] is True


def test_run_accepts_an_actions_json_and_parks_before_the_post(cli):
    path = compiled(cli)
    res = cli("run", path, "--json", expect=3)
    doc = res.json()
    assert doc["state"] == "parked"
    assert [p["step"] for p in doc["pending"]] == ["post"]
    assert demo_calls(cli.demo_db, tool="slack_post_message") == []
    assert len(demo_calls(cli.demo_db, tool="slack_search_messages")) == 1


# -- bad input ---------------------------------------------------------------------------

BAD = 'a: slack.slack_search_messages {"query": "x"}\nb: write a thing from {c}\n'


@pytest.mark.parametrize(
    "command", [["compile"], ["plan", "--offline"], ["plan"], ["run"]], ids=["compile", "plan-offline", "plan", "run"]
)
def test_a_bad_recipe_is_exit_2_with_position_caret_and_hint(cli, command):
    path = cli.tmp / "bad.recipe"
    path.write_text(BAD)
    res = cli(*command, path.name, expect=2)
    assert re.search(r"bad\.recipe:2:24: error: unknown name `c`", res.err), res.err
    lines = res.err.splitlines()
    at = next(i for i, line in enumerate(lines) if "b: write a thing from {c}" in line)
    caret = lines[at + 1]
    assert caret.strip() == "^"
    assert lines[at][caret.index("^")] == "c"  # the caret sits under the offending name
    assert "hint:" in res.err
    no_traceback(res)
    assert res.out == ""
    assert demo_calls(cli.demo_db) == []


@pytest.mark.parametrize("command", [["compile"], ["plan", "--offline"], ["run"]], ids=["compile", "plan", "run"])
def test_a_missing_file_is_exit_2(cli, command):
    res = cli(*command, "nowhere.recipe", expect=2)
    assert "nowhere.recipe" in res.err and "hint:" in res.err
    no_traceback(res)


def test_a_directory_is_exit_2(cli):
    res = cli("compile", cli.tmp, expect=2)
    no_traceback(res)


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["frobnicate"],
        ["plan", "--bogus", str(MORNING)],
        ["compile"],
        ["plan", "--format", "svg", str(MORNING)],
        ["reconcile", "r1", "post"],
    ],
    ids=["no-command", "unknown-command", "unknown-flag", "missing-file-arg", "bad-choice", "missing-required-group"],
)
def test_usage_errors_are_exit_2(cli, argv):
    res = cli(*argv, expect=2)
    assert "usage: recipe" in res.err
    no_traceback(res)


def test_an_unknown_format_string_is_refused_by_name(cli):
    path = cli.tmp / "old.json"
    doc = json.loads(compiled(cli).read_text())
    doc["format"] = "vodou.actions/0"
    path.write_text(json.dumps(doc))
    res = cli("plan", "--offline", path, expect=2)
    assert "unsupported format 'vodou.actions/0'" in res.err
    no_traceback(res)


class CountingDecoder:
    """A plan decoder that counts the documents it parses."""

    def __init__(self, inner, parsed: list):
        self.inner, self.parsed = inner, parsed

    def decode(self, data):
        self.parsed.append(self.inner)
        return self.inner.decode(data)


def test_a_plan_is_parsed_once_and_read_again_for_its_format_only_when_it_fails(cli, monkeypatch):
    import vodou_engine.plan as plan_module

    data = compiled(cli).read_bytes()
    parsed: list = []
    monkeypatch.setattr(plan_module, "_decoder", CountingDecoder(plan_module._decoder, parsed))
    monkeypatch.setattr(plan_module, "_head_decoder", CountingDecoder(plan_module._head_decoder, parsed))
    assert decode_plan(data).recipe.name == "morning-briefing"
    assert len(parsed) == 1  # a stored run's plan (16 MB at 100,000 branches) is parsed once per load
    parsed.clear()
    future = json.dumps({"format": "vodou.actions/3", "recipe": {"name": "x", "source_sha256": ""}, "triggers": []})
    with pytest.raises(PlanError, match=r"unsupported format 'vodou\.actions/3'"):
        decode_plan(future)
    assert len(parsed) == 2
    for doc, message in (('{"format": "vodou.actions/1"}', "not a valid actions.json"), ("{", "not valid JSON")):
        with pytest.raises(PlanError, match=message):
            decode_plan(doc)


def test_a_future_format_with_new_fields_is_refused_as_unsupported(cli):
    path = cli.tmp / "future.json"
    path.write_text(
        json.dumps({"format": "vodou.actions/3", "recipe": {"name": "x", "source_sha256": ""}, "triggers": []})
    )
    res = cli("plan", "--offline", path, expect=2)
    assert "unsupported format 'vodou.actions/3'" in res.err


def test_compile_into_a_missing_directory_is_exit_2(cli):
    res = cli("compile", MORNING, "-o", cli.tmp / "no" / "such" / "dir" / "actions.json")
    no_traceback(res)
    assert res.code == 2


def test_an_actions_json_error_does_not_cite_recipe_positions_as_json_positions(cli):
    path = edit(compiled(cli), drop_post_approval, refingerprint=True)
    res = cli("plan", "--offline", path, expect=2)
    assert not re.search(r"actions\.json:\d+:\d+", res.err), res.err


# -- the plan card -------------------------------------------------------------------------


def test_offline_card_for_the_morning_briefing(cli):
    res = cli("plan", "--offline", MORNING, expect=0)
    card = res.out
    for step, address, risk, why in (
        ("calendar", "google-calendar·list-events", "read", "verb 'list'"),
        ("mail", "gmail·messages_list", "read", "verb 'list'"),
        ("slack", "slack·slack_search_messages", "read", "verb 'search'"),
        ("post", "slack·slack_post_message", "write", "verb 'post'"),
    ):
        row = next(line for line in card.splitlines() if re.search(rf"\b{step}\s+{re.escape(address)}", line))
        assert risk in row and why in row, row
    warned = [line for line in card.splitlines() if line.lstrip().startswith("⚠")]
    assert any(re.match(r"⚠ post\s", line) for line in warned)
    assert not any(re.match(rf"⚠ {s}\s", line) for line in warned for s in ("calendar", "mail", "slack", "briefing"))
    assert "the run will stop and ask before `post` runs" in card
    assert "without asking" in card
    assert 'asks "post to #daily?"' in card
    assert "together sources" in card
    assert "join" in card and "needs 2 of 3" in card
    assert "offline: servers not started" in card
    assert "plan sha256:" in card
    assert demo_calls(cli.demo_db) == [] and not cli.demo_db.exists()


def test_plan_json_has_the_plan_and_a_verified_graph(cli):
    doc = cli("plan", "--offline", "--json", MORNING, expect=0).json()
    assert set(doc) == {"plan", "graph"}
    assert doc["plan"]["format"] == "vodou.actions/1"
    assert doc["graph"]["approvals"] == {"post": "approve:post"}
    assert doc["graph"]["effects"] == ["post"]
    assert doc["graph"]["joins"] == {"join:sources": {"need": 2, "of": 3}}
    assert doc["graph"]["verified"] is True
    assert doc["plan"] == cli("compile", MORNING, expect=0).json()


def test_plan_mermaid_is_a_flowchart_with_the_approval(cli):
    res = cli("plan", "--offline", "--format", "mermaid", MORNING, expect=0)
    lines = res.out.splitlines()
    assert lines[0] == "flowchart TD"
    gate = next(line for line in lines if "⚠ approve post" in line)
    gate_id = gate.split("[")[0].strip()
    post_id = next(line for line in lines if "post<br/>slack·slack_post_message" in line).split("[")[0].strip()
    assert f"  {gate_id} --> {post_id}" in lines
    assert f"  style {gate_id} fill:#ffe08a" in lines


def test_help_lists_commands_and_exit_codes(cli):
    res = cli("--help", expect=0)
    for command in ("compile", "plan", "run", "approve", "reject", "resume", "runs", "show", "reconcile"):
        assert re.search(rf"^\s+{command}\b", res.out, re.M), command
    assert "exit codes" in res.out
    for code in ("0 succeeded", "1 failed", "2 invalid input", "3 parked", "4 declined", "5 refused", "6 store"):
        assert code in " ".join(res.out.split()), code


def test_runs_json_on_an_empty_store_is_an_empty_list(cli):
    res = cli("runs", "--json", expect=0)
    assert res.json() == []


# -- online planning (starts servers, lists tools, never calls one) ------------------------


def test_online_plan_lists_tools_and_calls_none(cli):
    res = cli("plan", MORNING, expect=0)
    assert "✗" not in res.out
    assert "servers from embedded defaults; tools listed just now, none called" in res.out
    assert "⚠ post" in res.out
    assert cli.demo_db.exists()  # the servers did start ...
    assert demo_calls(cli.demo_db) == []  # ... and were never called


def test_online_plan_never_calls_previews_either(cli):
    # the channel digest has a preview on its post and a read it could be tempted to try
    res = cli("plan", "--json", CHANNEL, expect=0)
    doc = res.json()
    assert all(v["exists"] for v in doc["tools"].values()), doc["tools"]
    assert "post#preview" in doc["tools"]
    assert doc["graph"]["approvals"] == {"post": "approve:post"}
    assert demo_calls(cli.demo_db) == []


def test_online_plan_shows_a_misspelled_tool_and_the_closest_name(cli):
    path = cli.tmp / "typo.recipe"  # one server to start: the misspelt tool's
    path.write_text('ask me:\n- post it?\npost: slack.slack_post_mesage {"channel": "#daily", "text": "hi"}\n')
    res = cli("plan", path, expect=2)
    row = next(line for line in res.out.splitlines() if re.search(r"\bpost\s", line) and "✗" in line)
    assert "slack·slack_post_mesage" in row
    assert "slack_post_message" in row.replace("slack_post_mesage", "")
    assert "post" in res.err and "does not exist" in res.err
    no_traceback(res)
    assert demo_calls(cli.demo_db) == []


def test_online_plan_shows_an_unconfigured_server(cli):
    path = cli.tmp / "teams.recipe"
    path.write_text(
        'note: slack.slack_get_channel {"channel": "#daily"}\npost: teams.post_message {"text": "{note}"}\n'
    )
    res = cli("plan", path, expect=2)
    row = next(line for line in res.out.splitlines() if "✗" in line)
    assert "teams·post_message" in row and "not configured" in row
    assert demo_calls(cli.demo_db) == []


# -- which servers ---------------------------------------------------------------------------


def test_servers_come_from_flag_env_or_project_file(cli):
    """--servers FILE, $VODOU_SERVERS and ./mcp.json each select the servers."""
    recipe = time_recipe(cli)
    good = cli.tmp / "time-servers.json"
    good.write_text(json.dumps({"mcpServers": time_servers()}))
    empty = cli.tmp / "none.json"
    empty.write_text(json.dumps({"mcpServers": {}}))

    project = cli.tmp / "project"
    project.mkdir()
    (project / "mcp.json").write_text(json.dumps({"mcpServers": time_servers()}))

    cases = {
        # the flag beats the variable
        "flag": (["plan", recipe, "--servers", good], {"VODOU_SERVERS": str(empty)}, cli.tmp, str(good)),
        "env": (["plan", recipe], {"VODOU_SERVERS": str(good)}, cli.tmp, str(good)),
        "project": (["plan", recipe], {}, project, str(project / "mcp.json")),
    }
    for name, (argv, env, cwd, source) in cases.items():
        res = cli(*argv, env=env, cwd=cwd)
        assert res.code == 0, (name, res.out, res.err)
        assert "time·get_current_time" in res.out and "✗" not in res.out, (name, res.out)
        assert f"servers from {source}" in res.out, (name, res.out)


def test_without_a_server_file_time_is_not_configured(cli):
    res = cli("plan", time_recipe(cli), expect=2)
    assert "server `time` is not configured" in res.out
    assert "servers from embedded defaults" in res.out


def test_a_broken_server_file_is_exit_2(cli):
    bad = cli.tmp / "broken.json"
    bad.write_text('{"mcpServers": {"time": {"command": "x",}}}')
    res = cli("plan", time_recipe(cli), "--servers", bad, expect=2)
    assert "broken.json:1:" in res.err
    no_traceback(res)
    res = cli("plan", time_recipe(cli), env={"VODOU_SERVERS": str(cli.tmp / "gone.json")}, expect=2)
    assert "gone.json" in res.err and "VODOU_SERVERS" in res.err
    no_traceback(res)


# -- what `write` steps receive ------------------------------------------------------------


def _node_output(cli: Cli, run_id: str, node: str):
    from vodou_engine.store import open_store

    record = open_store(str(cli.store)).get_nodes(run_id)[node]
    return json.loads(record.output_json)


def test_a_write_step_receives_the_recipe_inputs_it_names(cli):
    path = cli.tmp / "note.recipe"
    path.write_text('inputs:\n  topic = "release"\n\nnote: write a note from {topic}\n')
    doc = cli("run", path, "--json", expect=0).json()
    text = _node_output(cli, doc["run"], "note")
    assert "release" in text and "missing: topic" not in text


def test_the_model_chosen_at_run_is_kept_after_an_approval(cli):
    pytest.importorskip("llm_echo")
    path = cli.tmp / "later.recipe"
    path.write_text("ask me:\n- go on?\nnote: write a note\n")
    doc = cli("run", path, "--model", "echo", "--json", expect=3).json()
    cli("approve", doc["run"], "--yes", "--json", expect=0)
    text = _node_output(cli, doc["run"], "note")
    assert "offline writer" not in text


def test_a_bad_built_in_argument_fails_its_step_not_the_process(cli):
    path = cli.tmp / "nap.recipe"
    path.write_text('recipe "nap"\ntogether:\n  a: vodou.sleep {"ms": "soon"}\n  b: vodou.echo {"value": 1}\n')
    res = cli("run", path.name, "--json", expect=1)
    no_traceback(res)
    show = cli("show", res.json()["run"], "--json", expect=0).json()
    assert show["state"] == "failed"  # the run was ended in the store, not left running
    nodes = {n["node"]: n for n in show["nodes"]}
    assert nodes["a"]["state"] == "failed" and "number of milliseconds" in nodes["a"]["error"]
    assert nodes["b"]["state"] == "succeeded"


@pytest.mark.parametrize("value", ["many", "0", "-2", "1.5"])
def test_a_bad_thread_limit_is_exit_2_and_stores_no_run(cli, value):
    path = cli.tmp / "nap.recipe"
    path.write_text('recipe "nap"\nn: vodou.sleep {"ms": 1}\n')
    res = cli("run", path.name, env={"VODOU_THREADS": value}, expect=2)
    assert "VODOU_THREADS" in res.err and "hint:" in res.err
    no_traceback(res)
    assert cli("runs", "--json", expect=0).json() == []
