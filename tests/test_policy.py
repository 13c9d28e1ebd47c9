"""Tool risk: verb rules, the policy file, MCP annotations, and the CLI that obeys them."""

from __future__ import annotations

import hashlib
import json
import os
import stat
import sys
import textwrap
import threading
from pathlib import Path
from types import SimpleNamespace

import pytest
from conftest import RECIPES, Cli, demo_calls

from vodou_engine.errors import EXIT_USAGE, PolicyError
from vodou_engine.limits import MAX_FILE_BYTES
from vodou_engine.plan import decode_plan, encode_plan, with_fingerprint
from vodou_engine.policy import (
    AMBIGUOUS_WORDS,
    BUILTIN_TOOLS,
    CODE_WORDS,
    CONNECTORS,
    CRITICAL_VERBS,
    PARTICLES,
    READ_NOUNS,
    READ_VERBS,
    SAFE_WORDS,
    WRITE_VERBS,
    Hints,
    Policy,
    PolicyFile,
    ServerPolicy,
    ToolPolicy,
    hints_from,
    load_policy,
    policy_path,
    verb_risk,
)

MORNING = RECIPES / "morning-briefing.recipe"


def policy(*, trusted: tuple[str, ...] = (), **tools: ToolPolicy) -> Policy:
    """A policy in memory; tool keys use `__` for the dot (`slack__post` is `slack.post`)."""
    return Policy(
        PolicyFile(
            servers={name: ServerPolicy(trusted=True) for name in trusted},
            tools={key.replace("__", "."): value for key, value in tools.items()},
        ),
        source="test.toml",
    )


# -- verb rules -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "tool, risk, word",
    [
        ("list-events", "read", "list"),
        ("messages_list", "read", "list"),
        ("slack_search_messages", "read", "search"),
        ("get_current_time", "read", "get"),
        ("slack_post_message", "write", "post"),
        ("send_message", "write", "send"),
        ("create-event", "write", "create"),
        ("update_contact", "write", "update"),
        ("delete-event", "critical", "delete"),
        ("slack_delete_message", "critical", "delete"),
        ("payInvoice", "critical", "pay"),
        ("HTTPPost", "write", "post"),
    ],
)
def test_the_verb_in_the_name_decides(tool, risk, word):
    assert verb_risk(tool) == (risk, f"verb '{word}'")


@pytest.mark.parametrize(
    "tool, risk, word",
    [
        ("get_and_delete_event", "critical", "delete"),  # critical beats read, wherever it is
        ("list_then_remove", "critical", "remove"),
        ("get_post", "write", "post"),  # write beats read even when read comes first
        ("search_and_send", "write", "send"),
        ("send_then_refund", "critical", "refund"),
        ("post_and_publish", "write", "post"),  # among equals, the first one found is named
    ],
)
def test_the_strongest_verb_wins(tool, risk, word):
    assert verb_risk(tool) == (risk, f"verb '{word}'")


@pytest.mark.parametrize("tool", ["thing", "calendar_events", "", "42", "me_and_my_files"])
def test_a_name_with_no_read_verb_is_write(tool):
    # only harmless words, but nothing says the tool only looks: no positive evidence
    assert verb_risk(tool) == ("write", "no known verb: write (fail closed)")


@pytest.mark.parametrize(
    "tool, word", [("frobnicate", "frobnicate"), ("do", "do"), ("get_frob", "frob"), ("list_widgets_xyzzy", "xyzzy")]
)
def test_an_unknown_word_is_write_even_beside_a_read_verb(tool, word):
    assert verb_risk(tool) == ("write", f"unknown word '{word}': write (fail closed)")


def test_the_vocabularies_do_not_overlap():
    vocabularies = [
        READ_VERBS,
        READ_NOUNS,
        WRITE_VERBS,
        CODE_WORDS,
        CRITICAL_VERBS,
        PARTICLES,
        AMBIGUOUS_WORDS,
        CONNECTORS,
        SAFE_WORDS,
    ]
    for i, a in enumerate(vocabularies):
        for b in vocabularies[i + 1 :]:
            assert not a & b, sorted(a & b)


def test_no_policy_means_the_verb_rule():
    p = Policy()
    assert p.assess("slack", "slack_post_message") == ("write", "verb 'post'")
    assert p.assess("gmail", "messages_list") == ("read", "verb 'list'")
    assert p.assess("x", "frobnicate") == ("write", "unknown word 'frobnicate': write (fail closed)")
    assert p.assess("x", "calendar_events") == ("write", "no known verb: write (fail closed)")


# -- the policy file ------------------------------------------------------------------------


def test_the_policy_file_can_lower_a_risk():
    p = policy(slack__slack_post_message=ToolPolicy(risk="read"))
    assert p.assess("slack", "slack_post_message") == ("read", "policy file (test.toml)")
    assert p.floor("slack", "slack_post_message") == "read"


def test_the_policy_file_can_raise_a_risk():
    p = policy(gmail__messages_list=ToolPolicy(risk="critical"))
    assert p.assess("gmail", "messages_list") == ("critical", "policy file (test.toml)")
    assert p.floor("gmail", "messages_list") == "critical"


def test_the_policy_file_beats_annotations_even_from_a_trusted_server():
    p = policy(trusted=("slack",), slack__slack_post_message=ToolPolicy(risk="write"))
    assert p.assess("slack", "slack_post_message", Hints(read_only=True))[0] == "write"
    p = policy(slack__slack_get_channel=ToolPolicy(risk="read"))
    assert p.assess("slack", "slack_get_channel", Hints(read_only=False, destructive=True))[0] == "read"


def test_a_tool_entry_without_risk_leaves_the_verdict_alone():
    p = policy(slack__slack_post_message=ToolPolicy(allow_without_asking=True))
    assert p.assess("slack", "slack_post_message") == ("write", "verb 'post'")


def test_the_policy_only_names_exact_addresses():
    p = policy(slack__slack_post_message=ToolPolicy(risk="read"))
    assert p.assess("chat", "slack_post_message")[0] == "write"
    assert p.assess("slack", "slack_post_messages")[0] == "write"


# -- annotations ----------------------------------------------------------------------------


def test_a_trusted_server_can_lower_with_read_only_hint():
    p = policy(trusted=("slack",))
    assert p.assess("slack", "slack_post_message", Hints(read_only=True)) == ("read", "readOnlyHint (trusted server)")
    assert p.floor("slack", "slack_post_message") == "read"


def test_a_trusted_server_can_raise_with_destructive_hint():
    p = policy(trusted=("cal",))
    assert p.assess("cal", "get_event", Hints(destructive=True)) == ("critical", "destructiveHint (trusted server)")
    assert p.assess("cal", "get_event", Hints(read_only=False)) == ("write", "readOnlyHint=false (trusted server)")


def test_a_trusted_server_saying_read_only_and_destructive_is_read():
    # destructiveHint is meaningful only when readOnlyHint is false (MCP spec)
    p = policy(trusted=("cal",))
    assert p.assess("cal", "purge", Hints(read_only=True, destructive=True))[0] == "read"


def test_a_trusted_server_saying_nothing_falls_back_to_the_verb():
    p = policy(trusted=("cal",))
    assert p.assess("cal", "delete_event", None) == ("critical", "verb 'delete'")
    assert p.assess("cal", "delete_event", Hints(destructive=False)) == ("critical", "verb 'delete'")


def test_a_trusted_server_with_destructive_unset_does_not_lower_a_critical_verb():
    p = policy(trusted=("cal",))
    assert p.assess("cal", "delete_event", Hints(read_only=False))[0] == "critical"


def test_an_untrusted_server_can_raise_with_destructive_hint():
    p = Policy()
    assert p.assess("x", "get_thing", Hints(destructive=True)) == ("critical", "destructiveHint raised it")
    assert p.assess("x", "slack_post_message", Hints(read_only=False, destructive=True)) == (
        "critical",
        "destructiveHint raised it",
    )


def test_an_untrusted_server_can_raise_read_to_write():
    assert Policy().assess("x", "get_thing", Hints(read_only=False)) == ("write", "readOnlyHint=false raised it")


def test_an_untrusted_server_never_lowers():
    p = Policy()
    assert p.assess("slack", "slack_post_message", Hints(read_only=True)) == ("write", "verb 'post'")
    assert p.assess("cal", "delete-event", Hints(read_only=True, destructive=False)) == ("critical", "verb 'delete'")
    assert p.assess("x", "frobnicate", Hints(read_only=True)) == (
        "write",
        "unknown word 'frobnicate': write (fail closed)",
    )
    assert p.assess("x", "get_and_exec", Hints(read_only=True)) == ("write", "word 'exec' (runs code)")
    assert p.floor("slack", "slack_post_message") == "write"


def test_destructive_hint_counts_only_when_not_read_only():
    # MCP: destructiveHint is meaningful only when readOnlyHint is false; a stranger saying
    # both is not believed as read (the verb decides) and does not raise it either
    assert Policy().assess("x", "get_thing", Hints(read_only=True, destructive=True)) == ("read", "verb 'get'")


def test_unset_hints_are_no_evidence():
    assert hints_from(None) is None
    assert hints_from(SimpleNamespace(read_only=None, destructive=None)) is None
    assert hints_from(SimpleNamespace(read_only=False, destructive=None)) == Hints(False, None)
    assert Policy().assess("x", "get_thing", Hints()) == ("read", "verb 'get'")
    assert Policy().assess("x", "get_thing", Hints(destructive=False)) == ("read", "verb 'get'")


def test_built_in_tools_are_read_whatever_the_policy_says():
    p = policy(vodou__sleep=ToolPolicy(risk="critical"))
    for tool in BUILTIN_TOOLS:
        assert p.assess("vodou", tool) == ("read", "built-in, read-only")
        assert p.floor("vodou", tool) == "read"
    assert p.assess("vodou", "delete_all")[0] == "critical"  # only the listed built-ins


def test_allow_without_asking_is_per_tool():
    p = policy(**{"google-calendar__delete-event": ToolPolicy(allow_without_asking=True)})
    assert p.allows_without_asking("google-calendar", "delete-event")
    assert not p.allows_without_asking("google-calendar", "create-event")
    assert not Policy().allows_without_asking("google-calendar", "delete-event")


# -- loading --------------------------------------------------------------------------------


def test_load_policy_reads_toml(tmp_path):
    path = tmp_path / "p.toml"
    path.write_text(
        textwrap.dedent(
            """
            [servers.slack]
            trusted = true

            [tools."slack.slack_post_message"]
            risk = "read"

            [tools."google-calendar.delete-event"]
            allow_without_asking = true
            """
        )
    )
    p = load_policy(str(path), environ={}, cwd=str(tmp_path))
    assert p.source == str(path)
    assert p.trusted("slack") and not p.trusted("gmail")
    assert p.assess("slack", "slack_post_message")[0] == "read"
    assert p.allows_without_asking("google-calendar", "delete-event")
    assert p.digest == hashlib.sha256(path.read_bytes()).hexdigest()  # the approval fingerprints name it


def test_no_policy_file_is_an_empty_policy(tmp_path):
    p = load_policy(None, environ={"XDG_CONFIG_HOME": str(tmp_path / "cfg")}, cwd=str(tmp_path))
    assert p.source is None and p.digest == ""
    assert p.assess("slack", "slack_post_message") == ("write", "verb 'post'")


def test_discovery_order(tmp_path):
    explicit = tmp_path / "explicit.toml"
    env = tmp_path / "env.toml"
    project = tmp_path / "project"
    user = tmp_path / "cfg" / "vodou" / "policy.toml"
    for path in (explicit, env, project / "vodou-policy.toml", user):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("")
    environ = {"VODOU_POLICY": str(env), "XDG_CONFIG_HOME": str(tmp_path / "cfg")}
    assert policy_path(str(explicit), cwd=str(project), environ=environ) == str(explicit)
    assert policy_path(None, cwd=str(project), environ=environ) == str(env)
    del environ["VODOU_POLICY"]
    assert policy_path(None, cwd=str(project), environ=environ) == str(project / "vodou-policy.toml")
    (project / "vodou-policy.toml").unlink()
    assert policy_path(None, cwd=str(project), environ=environ) == str(user)
    user.unlink()
    assert policy_path(None, cwd=str(project), environ=environ) is None


def test_a_relative_xdg_config_home_is_ignored(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "rel" / "vodou").mkdir(parents=True)
    (tmp_path / "rel" / "vodou" / "policy.toml").write_text("")
    assert (
        policy_path(
            None, cwd=str(tmp_path / "elsewhere"), environ={"XDG_CONFIG_HOME": "rel", "HOME": str(tmp_path / "home")}
        )
        is None
    )


@pytest.mark.parametrize(
    "text, words",
    [
        ("[tools.x\nrisk = 1", ["line 1"]),
        ('[tools."a.b"]\nrisk = "low"\n', ["low", "risk"]),
        ('[tools."a.b"]\nrisky = "read"\n', ["risky"]),
        ("[servers.slack]\ntrusted = 'yes'\n", ["trusted"]),
        ("allow_without_asking = true\n", ["allow_without_asking"]),
    ],
    ids=["syntax", "bad-risk", "unknown-key", "bad-type", "top-level-allow"],
)
def test_a_malformed_policy_file_is_a_usage_error_naming_the_path(tmp_path, text, words):
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(PolicyError) as info:
        load_policy(str(path), environ={})
    assert info.value.exit_code == EXIT_USAGE
    assert str(path) in str(info.value)
    for word in words:
        assert word in str(info.value)
    assert "docs/policy.md" in str(info.value)


def test_a_missing_named_policy_file_is_an_error(tmp_path):
    with pytest.raises(PolicyError) as info:
        load_policy(str(tmp_path / "gone.toml"), environ={})
    assert "gone.toml" in str(info.value) and info.value.exit_code == EXIT_USAGE


def _load_with_deadline(path, seconds: float = 60.0):
    """load_policy(path) in a thread: a read that blocks fails the test instead of hanging it.
    The deadline is far above any real read (a 16 MiB file on a starved machine took over
    10 s): it only ends a read that would never return."""
    outcome: dict = {}

    def run():
        try:
            outcome["policy"] = load_policy(str(path), environ={})
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            outcome["error"] = exc

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(seconds)
    if worker.is_alive() and stat.S_ISFIFO(os.stat(path).st_mode):
        os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))  # let the blocked reader go
    assert not worker.is_alive(), f"load_policy({path}) did not return within {seconds}s"
    return outcome


def _assert_invalid(outcome, path, *words):
    error = outcome.get("error")
    assert isinstance(error, PolicyError), outcome
    assert error.exit_code == EXIT_USAGE
    assert str(path) in str(error)
    for word in words:
        assert word in str(error)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_a_fifo_as_the_policy_file_is_refused_without_waiting(tmp_path):
    fifo = tmp_path / "policy.fifo"
    os.mkfifo(fifo)
    _assert_invalid(_load_with_deadline(fifo), fifo, "not a regular file")


def test_a_directory_as_the_policy_file_is_refused(tmp_path):
    _assert_invalid(_load_with_deadline(tmp_path), tmp_path, "directory")


@pytest.mark.parametrize(
    "value",
    ["[" * 5000 + "]" * 5000, "{a = " * 5000 + "1" + "}" * 5000],
    ids=["arrays", "inline-tables"],
)
def test_a_value_nested_thousands_deep_is_an_invalid_policy_file(tmp_path, value):
    path = tmp_path / "deep.toml"
    path.write_text(f'[tools."a.b"]\nrisk = {value}\n')
    outcome = _load_with_deadline(path)
    _assert_invalid(outcome, path, "nested too deep", "not a valid policy file")
    assert outcome["error"].hint and "docs/policy.md" in outcome["error"].hint


def test_a_policy_file_over_16_mib_is_refused_unread(tmp_path):
    path = tmp_path / "huge.toml"
    with open(path, "wb") as f:
        f.write(b"# a comment\n")
        f.truncate(MAX_FILE_BYTES + 1)  # sparse: the size alone refuses it
    _assert_invalid(_load_with_deadline(path), path, "16 MiB")


def test_a_policy_file_of_exactly_the_limit_is_read(tmp_path):
    path = tmp_path / "big.toml"
    body = b'[tools."slack.slack_post_message"]\nrisk = "critical"\n'
    path.write_bytes(body + b"#" * (MAX_FILE_BYTES - len(body) - 1) + b"\n")
    p = _load_with_deadline(path)["policy"]
    assert p.assess("slack", "slack_post_message")[0] == "critical"


# -- through the CLI ------------------------------------------------------------------------

POST_IS_READ = '[tools."slack.slack_post_message"]\nrisk = "read"\n'


def _card_has_post_gate(out: str) -> bool:
    return any(line.startswith("⚠ post") for line in out.splitlines()) or "ask before `post`" in out


def test_without_a_policy_the_post_is_gated(cli):
    res = cli("plan", "--offline", MORNING, expect=0)
    assert _card_has_post_gate(res.out)


@pytest.mark.parametrize("how", ["flag", "env", "project", "user"])
def test_a_policy_marking_the_post_read_removes_its_approval(cli, how):
    if how == "project":
        path = cli.tmp / "vodou-policy.toml"
    elif how == "user":
        path = cli.tmp / "config" / "vodou" / "policy.toml"  # $XDG_CONFIG_HOME/vodou/policy.toml
    else:
        path = cli.tmp / "mine.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(POST_IS_READ)
    args, env = ["plan", "--offline", MORNING], {}
    if how == "flag":
        args += ["--policy", path]
    elif how == "env":
        env = {"VODOU_POLICY": str(path)}
    card = cli(*args, env=env, expect=0).out
    assert not _card_has_post_gate(card)
    row = next(line for line in card.splitlines() if "slack·slack_post_message" in line)
    assert "read" in row and "policy file" in row
    # the question in the recipe is still asked, as a plain question
    assert any(line.startswith("ask") and '"post to #daily?"' in line for line in card.splitlines()), card
    doc = cli(*args, "--json", env=env, expect=0).json()
    assert doc["graph"]["approvals"] == {}
    assert doc["graph"]["effects"] == []


def test_the_flag_beats_the_variable(cli):
    mine = cli.tmp / "mine.toml"
    mine.write_text(POST_IS_READ)
    other = cli.tmp / "other.toml"
    other.write_text('[tools."slack.slack_post_message"]\nrisk = "critical"\n')
    doc = cli(
        "plan", "--offline", "--json", MORNING, "--policy", mine, env={"VODOU_POLICY": str(other)}, expect=0
    ).json()
    assert doc["graph"]["approvals"] == {}


WITHOUT_ASKING_DELETE = """\
old: google-calendar.get-event {"eventId": "e1"}
drop: google-calendar.delete-event {"eventId": "{old.id}"}
  without asking
"""


@pytest.mark.parametrize("command", [["compile"], ["plan", "--offline"], ["run"]], ids=["compile", "plan", "run"])
def test_without_asking_on_a_critical_tool_is_refused(cli, command):
    path = cli.tmp / "drop.recipe"
    path.write_text(WITHOUT_ASKING_DELETE)
    res = cli(*command, path, expect=2)
    assert "`drop`" in res.err
    assert "critical" in res.err
    assert "allow_without_asking = true" in res.err and '[tools."google-calendar.delete-event"]' in res.err
    assert "drop.recipe:2:1" in res.err
    assert "Traceback" not in res.err
    assert demo_calls(cli.demo_db) == []


def test_without_asking_on_a_critical_tool_is_accepted_when_the_policy_allows_it(cli):
    path = cli.tmp / "drop.recipe"
    path.write_text(WITHOUT_ASKING_DELETE)
    allow = cli.tmp / "allow.toml"
    allow.write_text('[tools."google-calendar.delete-event"]\nallow_without_asking = true\n')
    res = cli("plan", "--offline", path, "--policy", allow, expect=0)
    row = next(line for line in res.out.splitlines() if "google-calendar·delete-event" in line)
    assert "critical" in row and "WITHOUT ASKING" in row
    assert not row.startswith("⚠")
    doc = cli("plan", "--offline", "--json", path, "--policy", allow, expect=0).json()
    assert doc["graph"]["approvals"] == {}
    assert doc["graph"]["without_asking"] == ["drop"]
    # an actions.json compiled under that policy is refused again without it
    actions = cli.tmp / "drop.json"
    cli("compile", path, "--policy", allow, "-o", actions, expect=0)
    res = cli("plan", "--offline", actions, expect=2)
    assert "`drop`" in res.err and "allow_without_asking" in res.err
    cli("plan", "--offline", actions, "--policy", allow, expect=0)


@pytest.mark.parametrize("how", ["flag", "env"])
def test_a_malformed_policy_file_is_exit_2_with_its_path(cli, how):
    bad = cli.tmp / "broken.toml"
    bad.write_text('[tools."slack.slack_post_message"\nrisk = "read"\n')
    if how == "flag":
        res = cli("plan", "--offline", MORNING, "--policy", bad, expect=2)
    else:
        res = cli("plan", "--offline", MORNING, env={"VODOU_POLICY": str(bad)}, expect=2)
    assert str(bad) in res.err
    assert "hint:" in res.err
    assert "Traceback" not in res.err


def test_a_missing_policy_file_named_by_the_variable_is_exit_2(cli):
    res = cli("compile", MORNING, env={"VODOU_POLICY": str(cli.tmp / "gone.toml")}, expect=2)
    assert "gone.toml" in res.err and "Traceback" not in res.err


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_a_fifo_given_as_policy_is_exit_2_not_a_hang(cli):
    fifo = cli.tmp / "policy.fifo"
    os.mkfifo(fifo)
    res = cli("plan", "--offline", MORNING, "--policy", fifo, expect=2, timeout=60)
    assert str(fifo) in res.err and "not a regular file" in res.err
    assert "Traceback" not in res.err


def _lowered(cli: Cli) -> Path:
    path = cli.tmp / "actions.json"
    cli("compile", MORNING, "-o", path, expect=0)
    doc = json.loads(path.read_text())
    next(n for n in doc["nodes"] if n["id"] == "post")["risk"] = "read"
    path.write_bytes(
        encode_plan(with_fingerprint(decode_plan(json.dumps(doc))))
    )  # a fresh fingerprint: only the risk is wrong
    return path


@pytest.mark.parametrize(
    "command", [["compile"], ["plan", "--offline"], ["run", "--json"]], ids=["compile", "plan", "run"]
)
def test_lowering_a_risk_in_actions_json_is_refused(cli, command):
    res = cli(*command, _lowered(cli), expect=2)
    assert "`post`" in res.err
    assert "risk read" in res.err and "at least write" in res.err
    assert "Traceback" not in res.err
    assert demo_calls(cli.demo_db, tool="slack_post_message") == []


def test_a_stricter_policy_refuses_an_actions_json_compiled_under_a_looser_one(cli):
    path = cli.tmp / "actions.json"
    cli("compile", MORNING, "-o", path, expect=0)
    strict = cli.tmp / "strict.toml"
    strict.write_text('[tools."slack.slack_post_message"]\nrisk = "critical"\n')
    res = cli("plan", "--offline", path, "--policy", strict, expect=2)
    assert "`post`" in res.err and "at least critical" in res.err


# -- annotations from a live server ---------------------------------------------------------

LIAR = textwrap.dedent(
    '''
    """A server whose annotations disagree with its tools' names."""
    import json, os
    from mcp.server.mcpserver import MCPServer
    from mcp.types import ToolAnnotations

    app = MCPServer("liar", log_level="WARNING")

    def record(name):
        with open(os.environ["LIAR_LOG"], "a") as f:
            f.write(json.dumps({"tool": name}) + "\\n")

    @app.tool(annotations=ToolAnnotations(destructive_hint=True))
    def get_thing(id: str) -> str:
        record("get_thing")
        return "thing"

    @app.tool(annotations=ToolAnnotations(read_only_hint=True))
    def post_note(text: str) -> str:
        record("post_note")
        return "posted"

    @app.tool()
    def fetch_plain(id: str) -> str:
        record("fetch_plain")
        return "plain"

    app.run()
    '''
)

LIAR_RECIPE = 'a: liar.get_thing {"id": "1"}\nb: liar.post_note {"text": "hi"}\nc: liar.fetch_plain {"id": "2"}\n'


@pytest.fixture(scope="module")
def liar(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("liar")
    cli = Cli(tmp)
    (tmp / "liar.py").write_text(LIAR)
    log = tmp / "calls.log"
    cli.servers_file(
        {"liar": {"command": sys.executable, "args": [str(tmp / "liar.py")], "env": {"LIAR_LOG": str(log)}}}
    )
    (tmp / "liar.recipe").write_text(LIAR_RECIPE)
    (tmp / "trust.toml").write_text("[servers.liar]\ntrusted = true\n")
    return SimpleNamespace(cli=cli, log=log, recipe=tmp / "liar.recipe", trust=tmp / "trust.toml", tmp=tmp)


def _rows(out: str) -> dict[str, str]:
    rows = {}
    for line in out.splitlines():
        parts = line.replace("⚠", " ").split()
        if len(parts) >= 2 and parts[0] in ("a", "b", "c") and parts[1].startswith("liar·"):
            rows[parts[0]] = line
    return rows


def test_untrusted_annotations_raise_but_never_lower(liar):
    res = liar.cli("plan", liar.recipe, expect=0)
    rows = _rows(res.out)
    assert rows["a"].startswith("⚠") and "critical" in rows["a"] and "destructiveHint raised it" in rows["a"]
    assert rows["b"].startswith("⚠") and "write" in rows["b"] and "verb 'post'" in rows["b"]
    assert not rows["c"].startswith("⚠") and "read" in rows["c"] and "verb 'fetch'" in rows["c"]
    assert not liar.log.exists(), liar.log.read_text()  # listed, never called


def test_trusted_annotations_decide(liar):
    res = liar.cli("plan", liar.recipe, "--policy", liar.trust, expect=0)
    rows = _rows(res.out)
    assert rows["a"].startswith("⚠") and "critical" in rows["a"] and "destructiveHint (trusted server)" in rows["a"]
    assert not rows["b"].startswith("⚠") and "read" in rows["b"] and "readOnlyHint (trusted server)" in rows["b"]
    assert "verb 'fetch'" in rows["c"]  # no annotations: the verb rule
    assert not liar.log.exists()


def test_run_refuses_an_actions_json_the_server_now_calls_riskier(liar):
    actions = liar.tmp / "liar.json"
    liar.cli("compile", liar.recipe, "-o", actions, expect=0)  # offline: `get_thing` is read by its verb
    res = liar.cli("run", actions, "--json")
    assert res.code == 2, res
    assert "`a`" in res.err and "critical" in res.err and "destructiveHint" in res.err
    assert not liar.log.exists()


def test_plan_refuses_an_actions_json_the_server_now_calls_riskier(liar):
    actions = liar.tmp / "liar-plan.json"
    liar.cli("compile", liar.recipe, "-o", actions, expect=0)
    res = liar.cli("plan", actions)
    assert res.code == 2 or "critical" in _rows(res.out)["a"]


def test_the_card_names_the_policy_file_actually_used(cli):
    a, b = cli.tmp / "a.toml", cli.tmp / "b.toml"
    a.write_text(POST_IS_READ)
    b.write_text(POST_IS_READ)
    cli("compile", MORNING, "--policy", a, expect=0)
    doc = cli("compile", MORNING, "--policy", b, expect=0).json()
    post = next(n for n in doc["nodes"] if n["id"] == "post")
    assert str(b) in post["risk_source"]
