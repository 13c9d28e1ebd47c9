"""`recipe plan` keeps each server's tool list per binding, and a run never uses it.

Server starts and listings are counted in the rogue server's own log
(tests/rogue_server.py: a ``start`` line per process, a ``tools/list`` line per
listing), never in the engine's bookkeeping.

The first test runs each ``recipe plan`` as a process of its own, so the list a second
plan uses is the one a first process kept on disk; the others run the commands in this
process (the kept list is a file in the test's own XDG_CACHE_HOME either way).
"""

from __future__ import annotations

import json
from pathlib import Path

from conftest import rogue_calls, rogue_server


def events(cli, kind: str) -> list[dict]:
    log = cli.tmp / "rogue.log"
    if not log.exists():
        return []
    return [r for r in map(json.loads, log.read_text().splitlines()) if r.get("event") == kind]


def home(cli, **env: str):
    cli.servers_file({"ops": rogue_server(cli.tmp / "rogue.log", ROGUE_TOOLS_FILE=str(cli.tmp / "tools"), **env)})
    (cli.tmp / "status.recipe").write_text('recipe "status"\nst: ops.get_status {}\n')
    return cli


def test_a_second_plan_starts_no_server_and_says_how_old_its_list_is(cli):
    home(cli)
    first = cli.proc("plan", "status.recipe", expect=0)
    assert len(events(cli, "start")) == 1 and "tools listed just now" in first.out
    second = cli.proc("plan", "status.recipe", expect=0)
    assert len(events(cli, "start")) == 1, "the second plan started the server"
    assert "kept from then: `plan --refresh` lists them again" in second.out
    assert "ops·get_status" in second.out or "ops.get_status" in second.out
    doc = cli.proc("plan", "status.recipe", "--json", expect=0).json()
    assert doc["tools_listed"]["ops"]["cached"] is True
    assert doc["tools"]["st"]["exists"] is True
    assert len(events(cli, "start")) == 1


def test_an_edited_server_config_is_listed_again(cli):
    home(cli)
    cli("plan", "status.recipe", expect=0)
    cli("plan", "status.recipe", expect=0)
    assert len(events(cli, "start")) == 1
    home(cli, ROGUE_NOTE="another value")  # the binding changes: another environment
    res = cli("plan", "status.recipe", expect=0)
    assert len(events(cli, "start")) == 2 and "tools listed just now" in res.out
    cli("plan", "status.recipe", expect=0)
    assert len(events(cli, "start")) == 2


def test_refresh_lists_again(cli):
    home(cli)
    cli("plan", "status.recipe", expect=0)
    res = cli("plan", "status.recipe", "--refresh", expect=0)
    assert len(events(cli, "tools/list")) == 2 and "tools listed just now" in res.out
    cli("plan", "status.recipe", expect=0)
    assert len(events(cli, "tools/list")) == 2


def test_a_tool_the_kept_list_lacks_is_looked_for_live(cli):
    home(cli)
    (cli.tmp / "tools").write_text("get_status")
    cli("plan", "status.recipe", expect=0)
    cli("plan", "status.recipe", expect=0)
    assert len(events(cli, "tools/list")) == 1
    (cli.tmp / "tools").write_text("get_status,get_status2")  # the server now lists one more; same binding
    (cli.tmp / "status2.recipe").write_text('recipe "status2"\nst: ops.get_status2 {}\n')
    res = cli("plan", "status2.recipe", expect=0)
    assert len(events(cli, "tools/list")) == 2 and "does not exist" not in res.err


def test_a_run_lists_tools_live_and_the_kept_list_never_decides_a_risk(cli):
    """The kept list is edited to say get_next_job is harmless; plan believes it, the run
    lists live, sees the server's destructive annotation and parks before the call."""
    home(cli)
    (cli.tmp / "job.recipe").write_text('recipe "job"\njob: ops.get_next_job {}\n')
    gated = cli("plan", "job.recipe", "--json", expect=0).json()
    assert gated["graph"]["approvals"] == {"job": "approve:job"}
    (kept,) = list((cli.tmp / "cache" / "vodou" / "tools").glob("*.json"))
    doc = json.loads(kept.read_text())
    doc["tools"]["get_next_job"].update(destructive=False, read_only=True)
    kept.write_text(json.dumps(doc))
    stale = cli("plan", "job.recipe", "--json", expect=0).json()
    assert stale["graph"]["approvals"] == {}, "plan reads the kept list"
    lists_before = len(events(cli, "tools/list"))
    run = cli("run", "job.recipe", "--json", expect=3).json()
    assert [p["step"] for p in run["pending"]] == ["job"]
    assert len(events(cli, "tools/list")) == lists_before + 1  # listed live, in the server's own log
    assert rogue_calls(cli.tmp / "rogue.log", "get_next_job") == []


def test_no_cache_when_told(cli):
    home(cli)
    cli("plan", "status.recipe", env={"VODOU_NO_CACHE": "1"}, expect=0)
    cli("plan", "status.recipe", env={"VODOU_NO_CACHE": "1"}, expect=0)
    assert len(events(cli, "start")) == 2
    assert not Path(cli.tmp / "cache" / "vodou" / "tools").exists()
    cli("plan", "status.recipe", expect=0)
    cli("plan", "status.recipe", expect=0)
    assert len(events(cli, "start")) == 3
