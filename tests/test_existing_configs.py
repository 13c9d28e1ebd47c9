"""Server files people already have, and the names real servers use.

A file with ``"disabled": true`` entries (Claude Desktop, Cline, Cursor), VS
Code's ``{"servers": {...}}`` with ``"type"``, a capitalised server key
(``"Everything"``) and tool names with dots (which the MCP spec allows), each
through the CLI against real servers: tests/sdk_server.py (the official SDK's
``MCPServer`` over stdio, tools ``get-env``, ``notes.list``, ``notes.add``),
tests/http_server.py (the SDK over streamable HTTP) and, when npm has it,
the published reference server ``@modelcontextprotocol/server-everything``.

What a server did is read from its own log: a server that is started at all
writes ``{"event": "start"}`` before anything else.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from http_server import HttpServer

from vodou_engine.errors import ServerConfigError
from vodou_engine.servers import parse_servers

SDK_SERVER = str(Path(__file__).with_name("sdk_server.py"))
EVERYTHING = "@modelcontextprotocol/server-everything@2026.8.31"


def sdk_server(log: Path, **extra) -> dict:
    """A server-file entry for tests/sdk_server.py, logging to ``log``."""
    return {"command": sys.executable, "args": [SDK_SERVER], "env": {"SDK_LOG": str(log)}, **extra}


def records(log: Path) -> list[dict]:
    return [json.loads(line) for line in log.read_text().splitlines() if line.strip()] if log.exists() else []


def calls(log: Path, tool: str | None = None) -> list[dict]:
    return [r for r in records(log) if "tool" in r and (tool is None or r["tool"] == tool)]


def starts(log: Path) -> int:
    return sum(1 for r in records(log) if r.get("event") == "start")


def write(path: Path, data: dict) -> Path:
    path.write_text(json.dumps(data, indent=2))
    return path


# --- "disabled": true ---------------------------------------------------------------------------------
@pytest.mark.both_stores
def test_a_disabled_server_is_never_started_and_a_recipe_naming_it_is_refused(cli, tmp_path):
    off_log, on_log = tmp_path / "off.log", tmp_path / "on.log"
    write(
        tmp_path / "mcp.json",
        {"mcpServers": {"notes": sdk_server(off_log, disabled=True), "Everything": sdk_server(on_log, disabled=False)}},
    )
    (tmp_path / "off.recipe").write_text('recipe "off"\nenv: notes.get-env {"name": "HOME"}\n')
    (tmp_path / "on.recipe").write_text('recipe "on"\nenv: Everything.get-env {"name": "HOME"}\n')

    plan = cli("plan", "off.recipe", "--json", expect=2)
    assert plan.json()["tools"]["env"] == {
        "exists": False,
        "note": 'server `notes` is disabled ("disabled": true in the server file), so it is never started',
    }
    card = cli("plan", "off.recipe", expect=2)
    assert "✗ notes·get-env" in card.out and "disabled" in card.out

    refused = cli("run", "off.recipe", expect=2)
    assert f"MCP server 'notes' is disabled in {tmp_path / 'mcp.json'} (\"disabled\": true)" in refused.err, refused.err
    assert 'remove "disabled": true' in refused.err and "Traceback" not in refused.err
    assert cli("runs", "--json", expect=0).json() == []  # refused before anything was stored

    # the same file's other server ("disabled": false) is used as ever
    cli("run", "on.recipe", expect=0)
    assert len(calls(on_log, "get-env")) == 1
    assert not off_log.exists()  # never started: not to plan, not to run


def test_a_disabled_entry_is_not_checked_and_disabled_must_be_a_boolean(tmp_path):
    from vodou_engine.servers import parse_server_file

    path = str(tmp_path / "mcp.json")
    servers, disabled = parse_server_file(
        json.dumps(
            {
                "mcpServers": {
                    "half": {"disabled": True, "type": "sse"},
                    "other": {"disabled": True},
                    "time": {"command": "uvx"},
                }
            }
        ),
        path,
    )
    assert list(servers) == ["time"] and disabled == ["half", "other"]
    with pytest.raises(ServerConfigError) as err:
        parse_servers(json.dumps({"mcpServers": {"time": {"command": "uvx", "disabled": "yes"}}}), path)
    assert "server 'time'" in err.value.message and "`disabled`" in err.value.message and "true" in err.value.hint


# --- VS Code's file ---------------------------------------------------------------------------------
def test_a_vs_code_file_with_stdio_and_http_servers_runs(cli, tmp_path):
    web = HttpServer(tmp_path, "web").start()
    try:
        stdio_log = tmp_path / "stdio.log"
        entry = sdk_server(stdio_log)
        write(
            tmp_path / "mcp.json",
            {
                "inputs": [],
                "servers": {
                    "notes": {"type": "stdio", "command": entry["command"], "args": entry["args"], "env": entry["env"]},
                    "web": {"type": "http", "url": web.url},
                },
            },
        )
        (tmp_path / "both.recipe").write_text(
            'recipe "both"\ntogether:\n  env: notes.get-env {"name": "HOME"}\n  status: web.get_status\n'
        )
        card = cli("plan", "both.recipe", expect=0)
        assert "notes·get-env" in card.out and "web·get_status" in card.out and "✗" not in card.out
        cli("run", "both.recipe", expect=0)
        assert len(calls(stdio_log, "get-env")) == 1
        assert len(web.calls("get_status")) == 1
    finally:
        web.stop()


def test_a_file_with_both_mcpservers_and_servers_is_refused(tmp_path):
    both = json.dumps({"mcpServers": {"a": {"command": "x"}}, "servers": {"b": {"command": "y"}}})
    with pytest.raises(ServerConfigError) as err:
        parse_servers(both, str(tmp_path / "mcp.json"))
    assert 'both "mcpServers" and "servers"' in err.value.message
    with pytest.raises(ServerConfigError) as err:
        parse_servers(json.dumps({"inputs": []}), str(tmp_path / "mcp.json"))
    assert '"mcpServers" (or "servers")' in err.value.message


# --- a capitalised key, tool names with dots -----------------------------------------------------------
CAPITAL = """recipe "notes"
env: Everything.get-env {"name": "SDK_NOTE"}
add: Everything.notes.add {"text": "note {env}"}
list: "Everything"."notes.list"
"""


def test_a_capitalised_server_and_dotted_tools_are_called_by_their_real_names(cli, tmp_path):
    log = tmp_path / "every.log"
    entry = sdk_server(log)
    entry["env"]["SDK_NOTE"] = "from the env"
    write(tmp_path / "mcp.json", {"mcpServers": {"Everything": entry}})
    (tmp_path / "notes.recipe").write_text(CAPITAL)

    card = cli("plan", "notes.recipe", expect=0).out
    assert (
        "Everything·get-env" in card
        and "Everything·notes.add" in card
        and "Everything·notes.list" in card
        and "✗" not in card
    )
    assert "⚠ add" in card  # a dotted name is read by its words like any other: `add` is an effect
    plan = cli("plan", "notes.recipe", "--json", expect=0).json()["plan"]
    assert [(n["server"], n["tool"], n["risk"]) for n in plan["nodes"] if n["kind"] == "tool"] == [
        ("Everything", "get-env", "read"),
        ("Everything", "notes.add", "write"),
        ("Everything", "notes.list", "read"),
    ]

    parked = json.loads(cli("run", "notes.recipe", "--json", expect=3).out)
    (pending,) = parked["pending"]
    assert pending["step"] == "add" and "Everything·notes.add" in pending["card"]
    assert calls(log, "notes.add") == []  # nothing changed before a person said yes
    cli("approve", parked["run"], "add", "--yes", expect=0)
    assert [c["arguments"] for c in calls(log, "notes.add")] == [{"text": 'note {"result": "from the env"}'}]
    assert len(calls(log, "notes.list")) == 1

    # the policy file names the tool by its real names too
    (tmp_path / "policy.toml").write_text('[tools."Everything.notes.add"]\nrisk = "critical"\n')
    plan = cli("plan", "notes.recipe", "--json", "--policy", "policy.toml", expect=0).json()["plan"]
    assert [n["risk"] for n in plan["nodes"] if n.get("tool") == "notes.add"] == ["critical"]


def test_a_misspelt_address_is_told_the_real_one_as_a_recipe_writes_it(cli, tmp_path):
    write(tmp_path / "mcp.json", {"mcpServers": {"My Notes": sdk_server(tmp_path / "log")}})
    (tmp_path / "typo.recipe").write_text('recipe "typo"\nlist: "My Notes".notes.lst\n')
    (tmp_path / "case.recipe").write_text('recipe "case"\nlist: my-notes.notes.list\n')
    tools = cli("plan", "typo.recipe", "--json", expect=2).json()["tools"]
    assert tools["list"]["note"] == 'no tool `notes.lst` on My Notes; closest: "My Notes".notes.list'
    tools = cli("plan", "case.recipe", "--json", expect=2).json()["tools"]
    assert tools["list"]["note"] == 'server `my-notes` is not configured; did you mean `"My Notes"`?'


# --- the published reference server -------------------------------------------------------------------
def everything_cached() -> bool:
    """npm has the published server in its cache here (the test never downloads it): started
    with nothing on its stdin, it exits at once, with 0 only if npx found it."""
    if shutil.which("npx") is None:
        return False
    probe = subprocess.run(
        ["npx", "--offline", "-y", EVERYTHING], capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL
    )
    return probe.returncode == 0


def test_the_published_everything_server_under_its_capitalised_key(cli, tmp_path):
    if not everything_cached():
        pytest.skip(f"npm's cache has no {EVERYTHING} (npx -y {EVERYTHING} puts it there)")
    write(
        tmp_path / "mcp.json",
        {
            "mcpServers": {
                "Everything": {"command": "npx", "args": ["--offline", "-y", EVERYTHING], "startTimeout": 120}
            }
        },
    )
    (tmp_path / "e.recipe").write_text(
        'recipe "everything"\nenv: "Everything".get-env\nsum: Everything.get-sum {"a": 2, "b": 3}\n'
    )
    card = cli("plan", "e.recipe", expect=0).out
    assert "Everything·get-env" in card and "Everything·get-sum" in card and "✗" not in card
    parked = json.loads(cli("run", "e.recipe", "--json", expect=3).out)  # get-sum: `sum` is no known word, so it asks
    assert [p["step"] for p in parked["pending"]] == ["sum"] and "Everything·get-sum" in parked["pending"][0]["card"]
    cli("approve", parked["run"], "sum", "--yes", expect=0)
    nodes = {n["node"]: n for n in cli("show", parked["run"], "--json", expect=0).json()["nodes"]}
    assert nodes["env"]["state"] == nodes["sum"]["state"] == "succeeded" and "5" in json.dumps(nodes["sum"]["output"])


def test_an_actions_json_naming_a_server_with_a_dot_is_refused(cli, tmp_path):
    """`SERVER.TOOL` keys the policy file: with a dot in a server's name, `a.b.c` would be
    server `a.b`'s tool `c` and server `a`'s tool `b.c` at once, so one entry could judge both."""
    (tmp_path / "n.recipe").write_text('recipe "n"\nadd: notes.add {"text": "x"}\n')
    cli("compile", "n.recipe", "-o", "actions.json", expect=0)
    plan = json.loads((tmp_path / "actions.json").read_text())
    (node,) = [n for n in plan["nodes"] if n["kind"] == "tool"]
    node["server"], node["tool"] = "notes.v2", "add"
    (tmp_path / "actions.json").write_text(json.dumps(plan))
    for command in (("compile", "actions.json", "-o", "again.json"), ("plan", "--offline", "actions.json")):
        refused = cli(*command, expect=2)
        assert "'notes.v2'; a server name has no `.`" in refused.err and "Traceback" not in refused.err, refused.err
    assert not (tmp_path / "again.json").exists()
