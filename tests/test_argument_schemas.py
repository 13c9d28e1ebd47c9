"""The card never shows a payload the server will refuse: arguments against the tool's inputSchema.

``recipe plan`` (online) holds the literal parts of every tool step's arguments against
the tool's own input schema and refuses a wrong type, a missing required field or a value
outside an enum with the schema's words at file:line:col, caret and all; a reference's
value is left to the run. At the gate the frozen payload is checked before the question
is stored: one that breaks the schema is never asked about, and the server is never
called (its own log says so). Against tests/sdk_server.py, the official SDK's server,
whose ``notes.tag`` takes ``text`` and ``priority`` (``low``/``normal``/``high``),
both required, and an integer ``copies``.
"""

from __future__ import annotations

import sys
from pathlib import Path

from test_existing_configs import calls, write

from vodou_engine.compiler.places import argument_places
from vodou_engine.tools.schema_check import problems

SDK_SERVER = str(Path(__file__).with_name("sdk_server.py"))
SCHEMA = {
    "type": "object",
    "properties": {
        "text": {"type": "string"},
        "priority": {"enum": ["low", "normal", "high"], "type": "string"},
        "copies": {"type": "integer"},
    },
    "required": ["text", "priority"],
}


def _servers(tmp_path: Path, log: Path) -> None:
    write(
        tmp_path / "mcp.json",
        {"mcpServers": {"sdk": {"command": sys.executable, "args": [SDK_SERVER], "env": {"SDK_LOG": str(log)}}}},
    )


def test_the_schema_words_for_each_fault_and_references_left_to_the_run():
    said = problems(SCHEMA, {"text": "x", "priority": "urgent", "copies": "two"})
    assert [(p.path, p.keyword, p.message) for p in said] == [
        (("copies",), "type", "'two' is not of type 'integer'"),
        (("priority",), "enum", "'urgent' is not one of ['low', 'normal', 'high']"),
    ]
    assert [(p.path, p.message) for p in problems(SCHEMA, {"copies": 1})] == [
        ((), "'text' is a required property"),
        ((), "'priority' is a required property"),
    ]
    # a reference fills `priority` and `copies` at run time: only the rest is judged now
    assert problems(SCHEMA, {"priority": "{p}", "copies": "{n}"}, templated=[("priority",), ("copies",)]) == [
        problems(SCHEMA, {"priority": "low"})[0]
    ]
    assert problems({"type": "nonsense"}, {"a": 1}) == []  # a schema no validator can apply is the server's to judge


def test_each_argument_is_found_again_in_the_text():
    text = 'recipe "x"\nt: sdk.notes.tag {"text": "a",  # why\n   "copies": "two", "tags": [1, {"k": true}]}\n'
    places = argument_places(text, 2, 1)
    assert (places.values[("copies",)].line, places.values[("copies",)].column) == (3, 14)
    assert places.values[("copies",)].width == 5
    assert (places.keys[("tags",)].line, places.keys[("tags",)].column) == (3, 21)
    assert (places.values[("tags", 1, "k")].line, places.values[("tags", 1, "k")].column) == (3, 39)


def test_plan_refuses_a_wrong_type_a_missing_field_and_a_bad_enum_with_line_and_column(cli, tmp_path):
    log = tmp_path / "sdk.log"
    _servers(tmp_path, log)
    (tmp_path / "t.recipe").write_text(
        'recipe "tags"\n'
        "who: sdk.notes.list\n"
        'one: sdk.notes.tag {"text": "a", "priority": "urgent"}\n'
        'two: sdk.notes.tag {"text": "b", "priority": "low", "copies": "two"}\n'
        'three: sdk.notes.tag {"copies": 2,\n'
        '  "text": "{who}"}\n'
    )
    refused = cli("plan", "t.recipe", expect=2)
    err = refused.err
    assert "Traceback" not in err
    assert (
        "t.recipe:3:46: error: step `one`: sdk.notes.tag at `priority`: 'urgent' is not one of ['low', 'normal', 'high']"
        in err
    )
    assert '  one: sdk.notes.tag {"text": "a", "priority": "urgent"}\n' + " " * 47 + "^^^^^^^^\n" in err
    assert "t.recipe:4:63: error: step `two`: sdk.notes.tag at `copies`: 'two' is not of type 'integer'" in err
    assert "t.recipe:5:22: error: step `three`: sdk.notes.tag: 'priority' is a required property" in err
    assert "hint: the server's input schema says so" in err
    # the literal parts pass, the reference is left to the run: planned
    (tmp_path / "ok.recipe").write_text(
        'recipe "ok"\nwho: sdk.notes.list\nt: sdk.notes.tag {"text": "{who}", "priority": "low"}\n'
    )
    cli("plan", "ok.recipe", expect=0)
    assert not calls(log, "notes.tag")  # plan lists tools, calls none
    # `recipe run` refuses it too, before anything runs
    ran = cli("run", "t.recipe", expect=2)
    assert "t.recipe:3:46: error: step `one`" in ran.err and not calls(log)


def test_a_resolved_payload_that_breaks_the_schema_is_never_asked_about_nor_sent(cli, tmp_path):
    log = tmp_path / "sdk.log"
    _servers(tmp_path, log)
    # `who` reads {"result": ""} (an unset variable): the literal parts pass at plan time; the frozen payload's
    # `copies` is that object, which the schema's integer refuses
    (tmp_path / "r.recipe").write_text(
        'recipe "tag"\nwho: sdk.get-env {"name": "VODOU_UNSET_FOR_TEST"}\n'
        't: sdk.notes.tag {"text": "x", "priority": "low", "copies": "{who}"}\n'
    )
    cli("plan", "r.recipe", expect=0)
    out = cli("run", "r.recipe", "--json", expect=1).json()
    assert out["state"] == "failed" and out["pending"] == []
    view = cli("show", out["run"], "--json", expect=0).json()
    assert view["approvals"] == []  # nothing was asked
    gate = next(n for n in view["nodes"] if n["node"] == "approve:t")
    assert gate["state"] == "failed"
    assert (
        "step `t`: the payload breaks sdk.notes.tag's input schema, so nobody was asked and nothing was called"
        in gate["error"]
    )
    assert "copies: {'result': ''} is not of type 'integer'" in gate["error"]
    assert calls(log, "get-env") and not calls(log, "notes.tag")  # the server's own log: never called
