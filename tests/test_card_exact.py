"""What the card shows is exactly what the server receives: attacks on the gap between the two.

End to end through the CLI, on a real store and a real MCP server (tests/rogue_server.py),
each effect counted in the server's own log.

* A payload that sets the idempotency field itself is sent with the value its card showed,
  not with the run's key put in its place after the approval.
* A tool its server now declares riskier than the plan says is never called on the plan's
  lower risk, after an approval or on a resume; `recipe approve` refuses before it records
  the decision, on the one server start it makes.
* The plan card prints no control or bidirectional character from a recipe's name, a server
  file's command line or a server's tool names: each is marked, never obeyed.
* A whole number past ±2^53 is sent exactly, and every card says that a server in JavaScript
  reads it as another number, naming that number.
* A person's answer to a server's question is given only to that question: a server that asks
  other words with the same fields when its read is called again gets no answer (it parks again).
* A field the payload leaves out that the tool's schema gives a default is filled with it
  when the question is asked: on the card, in `show --json`, on the decision page, and sent.
* A policy file that appears after the question spends no approval (refused before it is recorded).
* The decision page's effect in words names every field that says where it lands.
* A preview says which tool said it, with the arguments the recipe gives it, on the card and
  the page: any read tool, another server's, may be a step's preview.
* On the decision page a message longer than its box (padded with empty lines to carry its
  last words out of sight) is said above the buttons, with its last line.
* On the decision page a text that reads like another value (`"false"`, `"3"`, `""`) is shown
  in quotes, so it never looks like the boolean, number or nothing it is not; so is a field
  name with a space at its end beside the name without it.
"""

from __future__ import annotations

import html
import json
import re
import sys
from pathlib import Path

from conftest import ROGUE, rogue_calls, rogue_server
from test_cards import run_page_for
from test_mcp_client import SDK_SERVER
from web_helpers import form

from vodou_engine.text_safety import is_hidden


def _posts(cli) -> list[dict]:
    return [c["arguments"] for c in rogue_calls(cli.tmp / "rogue.log", "post_message") if c["mode"] == "ok"]


def _starts(cli) -> list[dict]:
    log = cli.tmp / "rogue.log"
    lines = [json.loads(x) for x in log.read_text().splitlines() if x.strip()] if log.exists() else []
    return [r for r in lines if r.get("event") == "start"]


def _park(cli, text: str) -> dict:
    (cli.tmp / "r.recipe").write_text(text, encoding="utf-8")
    res = cli("run", "r.recipe", "--json")
    assert res.code == 3, res.err
    return res.json()


def test_a_payload_that_sets_its_own_idempotency_key_is_sent_with_the_key_its_card_shows(cli):
    cli.servers_file({"ops": rogue_server(Path(cli.tmp) / "rogue.log")})
    parked = _park(
        cli,
        'recipe "invoice"\n'
        'post: ops.post_message {"channel": "#billing", "text": "invoice 42 sent", "idempotency_key": "invoice-42"}\n',
    )
    run = parked["run"]
    card = cli("show", run, expect=0).out
    assert '"idempotency_key": "invoice-42"' in card
    cli("approve", run, "post", "--yes", expect=0)
    assert _posts(cli) == [{"channel": "#billing", "text": "invoice 42 sent", "idempotency_key": "invoice-42"}]
    (effect,) = cli("show", run, "--json", expect=0).json()["effects"]
    assert effect["payload"]["idempotency_key"] == "invoice-42"


def test_a_tool_its_server_now_declares_destructive_is_never_called_on_the_plans_lower_risk(cli):
    """Parked at `post`, with `status` (a read when the run started) after it. Before the
    approval, the server, its binding unchanged, annotates get_status destructive: the
    approval is refused before it is recorded (on the one server start the approval makes),
    nothing is called; a resume leaves the run interrupted and every later drive is refused
    the same way until the server says what it said; then it is approved and goes on."""
    said = cli.tmp / "annotations"
    cli.servers_file({"ops": rogue_server(cli.tmp / "rogue.log", ROGUE_ANNOTATIONS_FILE=str(said))})
    parked = _park(
        cli,
        'recipe "post then status"\n'
        'post: ops.post_message {"channel": "#daily", "text": "hi"}\n'
        'status: ops.get_status {"after": "{post.ts}"}\n',
    )
    run = parked["run"]
    assert [p["step"] for p in parked["pending"]] == ["post"]
    said.write_text("get_status=destructive")
    starts = len(_starts(cli))
    res = cli("approve", run, "post", "--yes")
    assert res.code == 5, res.err
    assert "step `status`: ops.get_status is critical now" in res.err and "planned" in res.err
    assert rogue_calls(cli.tmp / "rogue.log") == []
    # refused before the decision is recorded, on the one server start the approval makes
    assert "the approval was not recorded" in res.err
    (approval,) = cli("show", run, "--json", expect=0).json()["approvals"]
    assert approval["state"] == "pending"
    assert len(_starts(cli)) == starts + 1
    assert cli("resume", run).code == 5
    assert rogue_calls(cli.tmp / "rogue.log") == []
    (shown,) = [r for r in cli("runs", "--json", expect=0).json() if r["run"] == run]
    assert shown["state"] == "interrupted"
    # the card read `write`; its server now says the effect itself is destructive: refused too
    said.write_text("post_message=destructive")
    res = cli("resume", run)
    assert res.code == 5 and "step `post`: ops.post_message is critical now" in res.err
    assert rogue_calls(cli.tmp / "rogue.log") == []
    said.write_text("")
    cli("approve", run, "post", "--yes", expect=0)
    assert [c["tool"] for c in rogue_calls(cli.tmp / "rogue.log")] == ["post_message", "get_status"]


def _fields(page: str) -> dict[str, str]:
    """The decision view's table of a run page, as a browser reads it: name -> value."""
    rows = re.findall(r'<th scope="row"><code>(.*?)</code></th><td class="value">(.*?)</td>', page, re.S)
    return {html.unescape(k): html.unescape(v) for k, v in rows}


def test_a_text_that_reads_like_another_value_is_quoted_on_the_decision_page_and_is_what_is_sent(cli):
    cli.servers_file({"ops": rogue_server(cli.tmp / "rogue.log")})
    post = 'post: ops.post_message {"channel": "#daily", "text": "hi", "notify_all": %s, "count": %s, "cc": %s, "channel ": "#ceo"}\n'
    typed = _park(cli, 'recipe "typed"\n' + post % ("false", "3", "null"))["run"]
    texts = _park(cli, 'recipe "texts"\n' + post % ('"false"', '"3"', '""'))["run"]
    with run_page_for(cli) as (me, _svc):
        typed_fields = _fields(me.get(f"/runs/{typed}").text)
        text_fields = _fields(me.get(f"/runs/{texts}").text)
    assert {k: typed_fields[k] for k in ("notify_all", "count", "cc")} == {
        "notify_all": "false",
        "count": "3",
        "cc": "null",
    }
    assert {k: text_fields[k] for k in ("notify_all", "count", "cc")} == {
        "notify_all": '"false"',
        "count": '"3"',
        "cc": '""',
    }
    assert text_fields["channel"] == "#daily"  # plain text is shown as itself
    assert text_fields['"channel "'] == "#ceo"  # a name with a space at its end, in quotes beside `channel`
    cli("approve", texts, "post", "--yes", expect=0)
    (sent,) = _posts(cli)
    assert (sent["notify_all"], sent["count"], sent["cc"], sent["channel "]) == ("false", "3", "", "#ceo")


def test_the_plan_card_marks_escapes_and_bidi_controls_from_the_recipe_the_server_file_and_the_server(cli):
    clear, rlo = "\x1b[2J\x1b[H", "\u202e"
    entry = rogue_server(cli.tmp / "rogue.log", ROGUE_TOOLS=f"post_message{clear}ok,get_status")
    entry["args"] = ["-I", "-S", ROGUE, f"{clear}{rlo}lab"]  # an extra argument the server ignores
    assert entry["command"] == sys.executable
    cli.servers_file({"ops": entry})
    (cli.tmp / "r.recipe").write_text(
        f'recipe "weekly{rlo}note"\npost: ops.post_mesage {{"channel": "#daily", "text": "hi"}}\n', encoding="utf-8"
    )
    res = cli("plan", "r.recipe", expect=2)  # post_mesage does not exist: the closest name is the server's
    hidden = sorted({f"U+{ord(c):04X}" for c in res.out if c != "\n" and is_hidden(c)})
    assert hidden == [], hidden
    assert "weekly⟨U+202E⟩note" in res.out  # the recipe's name
    assert "'⟨U+001B⟩[2J⟨U+001B⟩[H⟨U+202E⟩lab'" in res.out  # the server file's command line
    assert 'closest: ops."post_message⟨U+001B⟩[2J⟨U+001B⟩[Hok"' in res.out  # the server's tool name


def test_a_number_a_javascript_server_reads_as_another_is_said_on_every_card_and_sent_exactly(cli):
    cli.servers_file({"ops": rogue_server(cli.tmp / "rogue.log")})
    big = 12345678901234567890  # a JavaScript server reads 12345678901234567168: another message
    run = _park(
        cli, f'recipe "drop"\npost: ops.post_message {{"channel": "#daily", "text": "x", "message_id": {big}}}\n'
    )["run"]
    warning = f"{big} reads there as 12345678901234567168"
    assert warning in cli("show", run, expect=0).out
    (approval,) = cli("show", run, "--json", expect=0).json()["approvals"]
    assert warning in approval["card"]
    with run_page_for(cli) as (me, _svc):
        page = html.unescape(me.get(f"/runs/{run}").text)
    warnings = re.search(r'<ul class="problem warnings">(.*?)</ul>', page, re.S)
    assert warnings is not None and warning in warnings.group(1)  # above Approve, not only in the card
    cli("approve", run, "post", "--yes", expect=0)
    (sent,) = _posts(cli)
    assert sent["message_id"] == big and type(sent["message_id"]) is int


def test_a_message_whose_end_is_out_of_its_box_is_said_above_the_buttons_with_its_last_line(cli):
    cli.servers_file({"ops": rogue_server(cli.tmp / "rogue.log")})
    text = "Thanks all, see you Monday." + "\\n" * 40 + "P.S. also wire 5000 EUR to account 7"
    run = _park(cli, f'recipe "note"\npost: ops.post_message {{"channel": "#daily", "text": "{text}"}}\n')["run"]
    with run_page_for(cli) as (me, _svc):
        page = html.unescape(me.get(f"/runs/{run}").text)
    warnings = re.search(r'<ul class="problem warnings">(.*?)</ul>', page, re.S)
    assert warnings is not None, "nothing is said above the buttons"
    said = warnings.group(1)
    assert "`text` is 41 lines long" in said and "39 empty lines in a row" in said
    assert "its last line reads: P.S. also wire 5000 EUR to account 7" in said
    assert page.index("its last line reads: P.S. also wire") < page.index('<form method="post"')  # above the buttons
    cli("approve", run, "post", "--yes", expect=0)
    assert [p["text"] for p in _posts(cli)] == [
        "Thanks all, see you Monday." + "\n" * 40 + "P.S. also wire 5000 EUR to account 7"
    ]


def test_an_answer_is_given_only_to_the_question_it_answers_not_to_other_words_with_the_same_fields(cli, tmp_path):
    """A person answers "Whom should I greet?"; when the read is called again its server asks
    something else with the same fields. The answer is not given to words nobody read: the
    step parks again with the new question on its card."""
    log, words = tmp_path / "sdk.log", tmp_path / "words"
    entry = {"command": sys.executable, "args": [SDK_SERVER], "env": {"SDK_LOG": str(log), "SDK_ASK_FILE": str(words)}}
    cli.servers_file({"sdk": entry})
    run = _park(cli, 'recipe "greet"\ngreeting: sdk.get-name {}\nsaid: vodou.echo {"text": "{greeting}"}\n')["run"]
    other = "Transfer 5000 EUR to account 7? Type your name to confirm."
    words.write_text(other, encoding="utf-8")
    res = cli("answer", run, "greeting", "--fields", '{"name": "Ada"}', "--json")
    assert res.code == 3, res.err  # parked again, on the new words
    (pending,) = res.json()["pending"]
    assert pending["asks"]["message"] == other and other in pending["card"]
    answers = [r for r in map(json.loads, log.read_text().splitlines()) if r.get("tool") == "get-name"]
    assert [a["answer"] for a in answers] == ["cancel", "cancel"]  # never "accept" to the words nobody read
    # answered on the card of the words it asks now, the answer reaches it, once
    cli("answer", run, "greeting", "--fields", '{"name": "Ada"}', "--fingerprint", pending["fingerprint"], expect=0)
    answers = [r for r in map(json.loads, log.read_text().splitlines()) if r.get("tool") == "get-name"]
    assert [a["answer"] for a in answers] == ["cancel", "cancel", "accept"]


def test_a_preview_says_which_tool_said_it_and_with_what_on_the_card_and_the_page(cli):
    """The preview of a transfer is any read tool the recipe names (here another server's,
    with arguments of its own): the card and the page say which, so a benign before/after
    is never read as the effect's own server's word about this payload."""
    cli.servers_file({"ops": rogue_server(cli.tmp / "rogue.log"), "notes": rogue_server(cli.tmp / "notes.log")})
    run = _park(
        cli,
        'recipe "pay"\n'
        'post: ops.post_message {"channel": "#ceo", "text": "wire 5000 EUR"}\n'
        '  preview: notes.get_status {"about": "#daily"}\n',
    )["run"]
    said = 'what notes·get_status said, called with {"about": "#daily"}'
    assert said in cli("show", run, expect=0).out
    (approval,) = cli("show", run, "--json", expect=0).json()["approvals"]
    assert said in approval["card"]
    with run_page_for(cli) as (me, _svc):
        page = html.unescape(me.get(f"/runs/{run}").text)
    preview = re.search(r"<h3>Preview(.*?)</h3>", page, re.S)
    assert preview is not None and 'notes·get_status {"about": "#daily"}' in re.sub(r"<[^>]+>", "", preview.group(1))


def test_a_policy_that_lowers_a_risk_after_the_question_spends_no_approval(cli):
    """A policy file appears (./vodou-policy.toml) after the question that makes the run's
    next effect a read: the approval is refused before it is recorded, and nothing runs."""
    cli.servers_file({"ops": rogue_server(cli.tmp / "rogue.log")})
    run = _park(
        cli,
        'recipe "two posts"\n'
        'post: ops.post_message {"channel": "#daily", "text": "hi"}\n'
        'second: ops.post_message {"channel": "#ceo", "text": "x"}\n',
    )["run"]
    (cli.tmp / "vodou-policy.toml").write_text('[tools."ops.post_message"]\nrisk = "read"\n')
    res = cli("approve", run, "post", "--yes")
    assert res.code == 5 and "another tool policy" in res.err
    assert rogue_calls(cli.tmp / "rogue.log", "post_message") == []
    (approval,) = cli("show", run, "--json", expect=0).json()["approvals"]
    assert approval["state"] == "pending"


def test_the_effect_in_words_names_every_field_that_says_where_it_lands(cli):
    """A decoy `channel` beside the `to` a tool acts on: the page's one-line summary of the
    effect names both, never only the first it knows."""
    cli.servers_file({"ops": rogue_server(cli.tmp / "rogue.log")})
    run = _park(
        cli, 'recipe "p"\npost: ops.post_message {"channel": "#daily", "to": "ceo@evil.example", "text": "hi"}\n'
    )["run"]
    with run_page_for(cli) as (me, _svc):
        page = html.unescape(me.get(f"/runs/{run}").text)
    does = re.search(r'<p class="does">Approving will <strong>(.*?)</strong>', page, re.S)
    assert does is not None and does.group(1) == "post message to #daily, to ceo@evil.example on ops"


def test_a_field_the_payload_leaves_out_is_sent_with_the_schema_default_the_card_shows(cli):
    """post_message's schema says `"broadcast": {"type": "boolean", "default": true}`; the
    recipe leaves it out. The card (CLI, `show --json`, the decision page) shows broadcast
    true, and the server receives broadcast true: never a default the card did not show.
    The server lowering its default between the question and the approval changes nothing
    that is sent: the approved card is what runs."""
    defaults = cli.tmp / "defaults"
    defaults.write_text(json.dumps({"post_message": {"broadcast": {"type": "boolean", "default": True}}}))
    cli.servers_file({"ops": rogue_server(cli.tmp / "rogue.log", ROGUE_DEFAULTS_FILE=str(defaults))})
    run = _park(cli, 'recipe "note"\npost: ops.post_message {"channel": "#all", "text": "lunch is here"}\n')["run"]
    card = cli("show", run, expect=0).out
    assert '"broadcast": true' in card
    assert "from ops·post_message's schema defaults (the recipe leaves them out; sent as shown): broadcast" in card
    (approval,) = cli("show", run, "--json", expect=0).json()["approvals"]
    assert approval["payload"] == {"channel": "#all", "text": "lunch is here", "broadcast": True}
    assert '"broadcast": true' in approval["card"]
    with run_page_for(cli) as (me, _svc):
        assert _fields(me.get(f"/runs/{run}").text)["broadcast"] == "true"
    defaults.write_text(json.dumps({"post_message": {"broadcast": {"type": "boolean", "default": False}}}))
    cli("approve", run, "post", "--yes", expect=0)
    (sent,) = _posts(cli)
    assert sent.pop("idempotency_key").startswith("vodou-")  # the run's key, where the schema has a place for it
    assert sent == {"channel": "#all", "text": "lunch is here", "broadcast": True}


def test_a_default_the_schema_gives_after_the_question_asks_again_instead_of_running_unseen(cli):
    """At the question post_message has no `broadcast`; before the approval its server adds
    `"broadcast": {"default": true}` (its binding unchanged). Sent as approved, the server
    would broadcast out of sight of the card: nothing is sent, and the step asks again with
    broadcast on its card; approved, that is what runs."""
    defaults = cli.tmp / "defaults"
    cli.servers_file({"ops": rogue_server(cli.tmp / "rogue.log", ROGUE_DEFAULTS_FILE=str(defaults))})
    run = _park(cli, 'recipe "note"\npost: ops.post_message {"channel": "#all", "text": "lunch is here"}\n')["run"]
    assert "broadcast" not in cli("show", run, expect=0).out
    defaults.write_text(json.dumps({"post_message": {"broadcast": {"type": "boolean", "default": True}}}))
    res = cli("approve", run, "post", "--yes", "--json")
    assert res.code == 3, res.err
    assert _posts(cli) == []
    again = res.json()
    assert again["asked_again"]["post"]["fields"] == ["broadcast"]
    (pending,) = again["pending"]
    assert '"broadcast": true' in pending["card"]
    cli("approve", run, "post", "--yes", "--fingerprint", pending["fingerprint"], expect=0)
    (sent,) = _posts(cli)
    assert sent["broadcast"] is True and sent["text"] == "lunch is here"


def test_an_approval_on_the_decision_page_is_refused_before_it_is_recorded_when_a_risk_rose(cli):
    """The same attack through `recipe serve`'s decision page: the approval is refused before
    it is recorded (the question stays pending), on the warm server the drive would use;
    nothing is called."""
    said = cli.tmp / "annotations"
    cli.servers_file({"ops": rogue_server(cli.tmp / "rogue.log", ROGUE_ANNOTATIONS_FILE=str(said))})
    run = _park(
        cli,
        'recipe "post then status"\n'
        'post: ops.post_message {"channel": "#daily", "text": "hi"}\n'
        'status: ops.get_status {"after": "{post.ts}"}\n',
    )["run"]
    said.write_text("get_status=destructive")
    with run_page_for(cli) as (me, _svc):
        fields = form(me.get(f"/runs/{run}").text, f"/runs/{run}/approve")
        refused = me.post(f"/runs/{run}/approve", fields)
        assert "ops.get_status is critical now" in html.unescape(refused.text)
        assert "the approval was not recorded" in html.unescape(refused.text)
    assert rogue_calls(cli.tmp / "rogue.log") == []
    (approval,) = cli("show", run, "--json", expect=0).json()["approvals"]
    assert approval["state"] == "pending"


def test_a_loops_items_are_sent_with_the_schema_default_their_batch_card_shows(cli):
    """The same default in a loop: each item's frozen payload on the batch card holds
    broadcast true, and each is sent with it, once."""
    defaults = cli.tmp / "defaults"
    defaults.write_text(json.dumps({"post_message": {"broadcast": {"type": "boolean", "default": True}}}))
    cli.servers_file({"ops": rogue_server(cli.tmp / "rogue.log", ROGUE_DEFAULTS_FILE=str(defaults))})
    run = _park(
        cli,
        'recipe "notes"\nfor each c in ["#daily", "#general"]:\n  post: ops.post_message {"channel": "{c}", "text": "hi"}\n',
    )["run"]
    (approval,) = cli("show", run, "--json", expect=0).json()["approvals"]
    assert [e["payload"] for e in approval["payload"]["items"]] == [
        {"channel": c, "text": "hi", "broadcast": True} for c in ("#daily", "#general")
    ]
    cli("approve", run, "post", "--yes", expect=0)
    sent = sorted(_posts(cli), key=lambda p: p["channel"])
    assert [(p["channel"], p["broadcast"]) for p in sent] == [("#daily", True), ("#general", True)]
