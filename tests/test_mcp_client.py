"""The engine's MCP client says what it can do, and does it (docs/servers.md, "What the client declares").

Through the CLI against real server processes: tests/sdk_server.py (the official SDK's
``MCPServer`` over stdio) reports progress on ``get-count``, asks the user a question
(form elicitation) in ``get-name``, and lists ``research`` as callable only as a task.
What a server received is read from its own log.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from http_server import HttpServer

from vodou_engine.store import open_store

SDK_SERVER = str(Path(__file__).with_name("sdk_server.py"))


def setup(tmp_path: Path, recipe: str) -> Path:
    log = tmp_path / "sdk.log"
    servers = {"mcpServers": {"sdk": {"command": sys.executable, "args": [SDK_SERVER], "env": {"SDK_LOG": str(log)}}}}
    (tmp_path / "mcp.json").write_text(json.dumps(servers))
    (tmp_path / "case.recipe").write_text(recipe)
    return log


def logged(log: Path, tool: str) -> list[dict]:
    lines = log.read_text().splitlines() if log.exists() else []
    return [r for r in map(json.loads, lines) if r.get("tool") == tool]


def events(store_location: str, run_id: str, kind: str) -> list[dict]:
    store = open_store(store_location, create=False)
    try:
        return [json.loads(e.data_json) | {"node": e.node_id} for e in store.events(run_id) if e.kind == kind]
    finally:
        store.close()


# --- progress --------------------------------------------------------------------------------------
def test_a_servers_progress_on_a_call_is_recorded_with_the_run_and_shown(cli, tmp_path, store_location):
    log = setup(tmp_path, 'recipe "count"\ncount: sdk.get-count {"steps": 3}\n')
    rep = cli("run", "case.recipe", "--json", expect=0).json()
    assert [r["progress"] for r in logged(log, "get-count")] == [1, 2, 3]  # the server sent three
    heard = events(store_location, rep["run"], "progress")
    assert heard and all(h["node"] == "count" and h["total"] == 3 for h in heard)
    assert heard[-1] == {"node": "count", "progress": 3, "total": 3, "message": "step 3"}  # the latest is kept
    view = cli("show", rep["run"], "--json", expect=0).json()
    assert view["nodes"][0]["progress"] == {"progress": 3, "total": 3, "message": "step 3"}
    assert "progress 3/3 step 3" in cli("show", rep["run"], expect=0).out


# --- elicitation -----------------------------------------------------------------------------------
ASK = 'recipe "greet"\ngreeting: sdk.get-name {}\nsaid: vodou.echo {"text": "{greeting}"}\n'


def test_a_servers_question_parks_the_run_and_the_answer_reaches_the_server_once(cli, tmp_path, store_location):
    log = setup(tmp_path, ASK)
    parked = cli("run", "case.recipe", "--json", expect=3).json()
    run = parked["run"]
    assert [p["step"] for p in parked["pending"]] == ["greeting"]
    asks = parked["pending"][0]["asks"]
    assert asks["message"] == "Whom should I greet?" and asks["schema"]["required"] == ["name"]
    assert (
        "Whom should I greet?" in parked["pending"][0]["card"]
        and "name (string, required)" in parked["pending"][0]["card"]
    )
    assert [r["answer"] for r in logged(log, "get-name")] == ["cancel"]  # told cancel while the run parks

    # an answer that does not fit the schema is refused, nothing recorded
    bad = cli("answer", run, "greeting", "--fields", '{"excited": "very"}', expect=2)
    assert "does not fit" in bad.err and "'name' is a required property" in bad.err
    # approving is not answering
    assert "answer to its server's question" in cli("approve", run, "greeting", "--yes", expect=2).err

    done = cli("answer", run, "greeting", "--fields", '{"name": "Ada", "excited": true}', "--json", expect=0).json()
    assert done["state"] == "succeeded"
    answers = logged(log, "get-name")
    assert [a for a in answers if a["answer"] == "accept"] == [
        {"tool": "get-name", "answer": "accept", "content": {"name": "Ada", "excited": True}, "pid": answers[-1]["pid"]}
    ]  # the server received the answer exactly once
    view = cli("show", run, "--json", expect=0).json()
    assert next(n for n in view["nodes"] if n["node"] == "greeting")["output"] == {"result": "hello Ada!"}
    decided = events(store_location, run, "approval.decided")
    assert json.loads(decided[-1]["reason"]) == {"action": "accept", "content": {"name": "Ada", "excited": True}}
    assert len(events(store_location, run, "elicitation.supplied")) == 1


def on_a_terminal(cli, *args: str, dialogue: list[tuple[bytes, bytes]]) -> tuple[int, str]:
    """``recipe ARGS`` on a pseudo-terminal: for each (prompt, typed), wait for the prompt and type;
    then read to the end. (exit code, everything printed)."""
    import pty
    import select

    pid, fd = pty.fork()
    if pid == 0:  # the child: the command, on the terminal
        try:
            os.chdir(cli.tmp)
            os.execve(sys.executable, cli.argv(*args), cli.env)
        finally:
            os._exit(127)
    out = b""
    deadline = time.monotonic() + 120

    def more() -> bytes:
        ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
        assert ready, f"nothing within 120 s:\n{out.decode(errors='replace')}"
        try:
            return os.read(fd, 65536)
        except OSError:  # the terminal closed: the command ended
            return b""

    try:
        seen = 0
        for prompt, typed in dialogue:
            while prompt not in out[seen:]:
                chunk = more()
                assert chunk, f"ended before {prompt!r}:\n{out.decode(errors='replace')}"
                out += chunk
            seen = out.index(prompt, seen) + len(prompt)
            os.write(fd, typed)
        while chunk := more():
            out += chunk
    finally:
        os.close(fd)
        _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status), out.decode(errors="replace").replace("\r\n", "\n")


def test_at_a_terminal_the_run_asks_the_servers_question_field_by_field(cli, tmp_path):
    log = setup(tmp_path, ASK)
    code, out = on_a_terminal(
        cli, "run", "case.recipe",
        dialogue=[(b"decide later:", b"a\n"), (b"name (string, required):", b"\n"),
                  (b"name (string, required):", b"Grace\n"), (b"excited (boolean):", b"maybe\n"),
                  (b"excited (boolean):", b"y\n")],
    )  # fmt: skip
    assert code == 0, out
    assert "Whom should I greet?" in out and "name is required" in out and "answer y or n" in out
    assert [(a["answer"], a["content"]) for a in logged(log, "get-name")] == [
        ("cancel", None),
        ("accept", {"name": "Grace", "excited": True}),
    ]


def test_a_declined_question_is_declined_to_the_server(cli, tmp_path):
    log = setup(tmp_path, ASK)
    run = cli("run", "case.recipe", "--json", expect=3).json()["run"]
    done = cli("answer", run, "greeting", "--decline", "--json", expect=0).json()
    assert done["state"] == "succeeded"
    assert [r["answer"] for r in logged(log, "get-name")] == ["cancel", "decline"]
    view = cli("show", run, "--json", expect=0).json()
    assert next(n for n in view["nodes"] if n["node"] == "greeting")["output"] == {"result": "declined"}


def test_a_question_waiting_for_an_answer_is_not_asked_again_on_resume(cli, tmp_path):
    log = setup(tmp_path, ASK)
    run = cli("run", "case.recipe", "--json", expect=3).json()["run"]
    again = cli("resume", run, "--json", expect=3).json()
    assert [p["step"] for p in again["pending"]] == ["greeting"]
    assert len(logged(log, "get-name")) == 1  # the server was not called again while nobody answered


def test_a_question_during_an_effect_is_cancelled_and_logged(cli, tmp_path, store_location):
    log = setup(tmp_path, 'recipe "send"\nsent: sdk.send-note {"text": "hi"}\n')
    run = cli("run", "case.recipe", "--json", expect=3).json()["run"]  # the effect parks for its approval
    cli("approve", run, "sent", "--yes", expect=0)
    assert [r["answer"] for r in logged(log, "send-note")] == ["cancel"]  # called once, told cancel at once
    cancelled = events(store_location, run, "elicitation.cancelled")
    assert [(d["node"], d["message"]) for d in cancelled] == [("sent", "Send it?")]
    assert cli("show", run, "--json", expect=0).json()["approvals"][-1]["state"] == "approved"


def test_over_streamable_http_the_question_and_the_progress_come_the_same_way(cli, tmp_path, store_location):
    server = HttpServer(tmp_path).start()
    try:
        (tmp_path / "mcp.json").write_text(json.dumps({"mcpServers": {"web": {"url": server.url}}}))
        (tmp_path / "case.recipe").write_text('recipe "who"\nwho: web.get_name {}\n')
        parked = cli("run", "case.recipe", "--json", expect=3).json()
        run = parked["run"]
        assert parked["pending"][0]["asks"]["message"] == "Who is it?"
        done = cli("answer", run, "who", "--fields", '{"name": "Lin"}', "--json", expect=0).json()
        assert done["state"] == "succeeded"
        got = [(c["answer"], c["content"]) for c in server.calls("get_name")]
        assert got == [("cancel", None), ("accept", {"name": "Lin"})]  # the answer reached it once
        assert events(store_location, run, "progress")[-1] == {
            "node": "who", "progress": 2, "total": 2, "message": "answered"
        }  # fmt: skip
    finally:
        server.stop()


# --- tasks -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("command", ["plan", "run"])
def test_a_tool_callable_only_as_a_task_is_refused_before_anything_runs(cli, tmp_path, command):
    log = setup(tmp_path, 'recipe "research"\nfind: sdk.research {"topic": "bees"}\n')
    out = cli(command, "case.recipe", expect=2)
    assert 'can only be called as a task (its server lists it with execution.taskSupport "required")' in (
        out.out + out.err
    )
    assert "Traceback" not in out.err
    assert logged(log, "research") == []  # never called
    if command == "plan":
        tools = cli("plan", "case.recipe", "--json", expect=2).json()["tools"]
        assert tools["find"]["exists"] is False and "sdk.research" in tools["find"]["note"]


def test_an_agent_checking_a_recipe_hears_that_a_task_only_tool_is_refused(cli, tmp_path):
    from test_agents import Agent, run

    log = setup(tmp_path, "")

    async def main() -> None:
        async with Agent(cli, "--servers", str(tmp_path / "mcp.json")) as agent:
            data = await agent.ok("check_recipe", recipe='find: sdk.research {"topic": "bees"}\n')
            (e,) = data["errors"]
            assert e["code"] == "tool.unknown" and "can only be called as a task" in e["message"]
            assert e["line"] == 1 and e["caret"].strip() == "^" * len("sdk.research")

    run(main)
    assert logged(log, "research") == []


# --- the published reference server ----------------------------------------------------------------
EVERYTHING = "@modelcontextprotocol/server-everything@2026.8.31"


def everything_cached() -> bool:
    """npm has the published server in its cache here (the test never downloads it)."""
    if shutil.which("npx") is None:
        return False
    probe = subprocess.run(
        ["npx", "--offline", "-y", EVERYTHING], capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL
    )
    return probe.returncode == 0


def test_the_reference_servers_question_progress_and_task_tool(cli, tmp_path, store_location):
    if not everything_cached():
        pytest.skip(f"npm's cache has no {EVERYTHING} (npx -y {EVERYTHING} puts it there)")
    servers = {"mcpServers": {"everything": {"command": "npx", "args": ["--offline", "-y", EVERYTHING]}}}
    (tmp_path / "mcp.json").write_text(json.dumps(servers))
    # Its question tool is named like an effect; the person who runs it says it only asks.
    (tmp_path / "vodou-policy.toml").write_text('[tools."everything.trigger-elicitation-request"]\nrisk = "read"\n')
    (tmp_path / "task.recipe").write_text('recipe "t"\nfind: everything.simulate-research-query {"topic": "bees"}\n')
    note = cli("plan", "task.recipe", "--json", expect=2).json()["tools"]["find"]["note"]
    assert "can only be called as a task" in note

    (tmp_path / "ask.recipe").write_text('recipe "a"\nform: everything.trigger-elicitation-request {}\n')
    parked = cli("run", "ask.recipe", "--json", expect=3).json()
    run, card = parked["run"], parked["pending"][0]
    assert card["asks"]["schema"]["required"] == ["name"] and "name (string, required)" in card["card"]
    bad = cli("answer", run, "form", "--fields", '{"name": "Ada", "email": "not an address"}', expect=2)
    assert "`email`: 'not an address' is not a 'email'" in bad.err
    done = cli("answer", run, "form", "--fields", '{"name": "Ada Lovelace", "integer": 7}', "--json", expect=0).json()
    assert done["state"] == "succeeded"
    out = cli("show", run, "--json", expect=0).json()["nodes"][0]["output"]
    said = "\n".join(out)  # the server says what it received
    assert "- Name: Ada Lovelace" in said and '"action": "accept"' in said

    (tmp_path / "long.recipe").write_text(
        'recipe "l"\nlong: everything.trigger-long-running-operation {"duration": 0.3, "steps": 3}\n'
    )
    run = cli("run", "long.recipe", "--json", expect=3).json()["run"]  # named like an effect: approved first
    cli("approve", run, "long", "--yes", expect=0)
    heard = events(store_location, run, "progress")
    assert heard and heard[-1] == {"node": "long", "progress": 3, "total": 3}
