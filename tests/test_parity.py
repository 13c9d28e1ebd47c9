"""Safety parity: a program that embeds the engine gets exactly the gating the CLI gets.

Each case is driven twice, through the run API (``vodou_engine.Runs``) and
through the ``recipe`` command, and both must end the same way, counted on the
server side (the rogue server's own log).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import trio

import vodou_engine
from vodou_engine.servers import ServerConfig, ServerSet, load_servers

ROGUE = str(Path(__file__).with_name("rogue_server.py"))
# A tool whose name reads like a read; only its server's annotations say it destroys.
TAKE = 'recipe "take"\njob: ops.get_next_job {}\n'
POST = 'recipe "post"\npost: ops.post_message {"channel": "#ops", "text": "hi"}\n'


def calls(log: Path, tool: str) -> int:
    if not log.exists():
        return 0
    return sum(1 for line in log.read_text().splitlines() if json.loads(line).get("tool") == tool)


@pytest.fixture
def rogue(tmp_path):
    log = tmp_path / "rogue.log"
    servers = {"ops": {"command": sys.executable, "args": ["-I", "-S", ROGUE], "env": {"ROGUE_LOG": str(log)}}}
    (tmp_path / "mcp.json").write_text(json.dumps({"mcpServers": servers}))
    return tmp_path, log


def api_runs(tmp_path: Path) -> vodou_engine.Runs:
    # as an embedding program would build it: the server file loaded the usual way
    return vodou_engine.Runs(store=tmp_path / "api.db", servers=load_servers(tmp_path / "mcp.json"))


def test_annotations_raise_the_risk_through_the_api_as_through_the_cli(cli, rogue):
    tmp, log = rogue
    runs = api_runs(tmp)
    report = trio.run(lambda: runs.start("take.recipe", text=TAKE, actor="ana"))
    assert report.state == "parked" and [p.step for p in report.pending] == ["job"]
    assert "destructiveHint" in report.pending[0].card
    (tmp / "take.recipe").write_text(TAKE)
    res = cli("run", tmp / "take.recipe", "--json", "--servers", tmp / "mcp.json", expect=3)
    assert [p["step"] for p in res.json()["pending"]] == ["job"]
    assert calls(log, "get_next_job") == 0  # neither surface ran it unasked
    runs.close()


def test_a_rejection_declines_the_run_through_the_api_as_through_the_cli(cli, rogue):
    tmp, log = rogue
    runs = api_runs(tmp)
    parked = trio.run(lambda: runs.start("post.recipe", text=POST, actor="ana"))
    declined = trio.run(lambda: runs.reject(parked.run, "post", actor="ana", reason="not now"))
    assert declined.state == "declined" and runs.show(parked.run).state == "declined"
    (tmp / "post.recipe").write_text(POST)
    run = cli("run", tmp / "post.recipe", "--json", "--servers", tmp / "mcp.json", expect=3).json()["run"]
    cli("reject", run, "post", "--reason", "not now", expect=4)
    assert cli("show", run, "--json", expect=0).json()["state"] == "declined"
    assert calls(log, "post_message") == 0
    # and neither run can be approved afterwards
    with pytest.raises(vodou_engine.VodouError):
        trio.run(lambda: runs.approve(parked.run, "post", actor="ana"))
    assert cli("approve", run, "post", "--yes", "--servers", tmp / "mcp.json").code == 5
    assert calls(log, "post_message") == 0
    runs.close()


def test_an_approval_runs_the_effect_once_through_the_api_as_through_the_cli(cli, rogue):
    tmp, log = rogue
    runs = api_runs(tmp)
    parked = trio.run(lambda: runs.start("post.recipe", text=POST, actor="ana"))
    card = runs.pending(parked.run, "post")
    done = trio.run(lambda: runs.approve(parked.run, "post", actor="ana", fingerprint=card.fingerprint))
    assert done.state == "succeeded" and calls(log, "post_message") == 1
    with pytest.raises(vodou_engine.VodouError) as again:
        trio.run(lambda: runs.approve(parked.run, "post", actor="ana"))
    assert again.value.code == "approval.decided" and again.value.exit_code == 5
    (tmp / "post.recipe").write_text(POST)
    run = cli("run", tmp / "post.recipe", "--json", "--servers", tmp / "mcp.json", expect=3).json()["run"]
    cli("approve", run, "post", "--yes", "--servers", tmp / "mcp.json", expect=0)
    assert cli("approve", run, "post", "--yes", "--servers", tmp / "mcp.json").code == 5
    assert calls(log, "post_message") == 2  # one per run, never more
    runs.close()


def test_errors_carry_a_code_and_facts_not_cli_words(tmp_path):
    runs = vodou_engine.Runs(store=tmp_path / "runs.db", servers=ServerSet({}, "none"))
    trio.run(lambda: runs.start("q.recipe", text='ask me:\n- go?\nnote: vodou.echo {"value": 1}\n', actor="ana"))
    with pytest.raises(vodou_engine.VodouError) as info:
        runs.show("r-no-such-run")
    assert info.value.code == "run.unknown" and "recipe " not in str(info.value)
    with pytest.raises(vodou_engine.VodouError) as info:
        trio.run(lambda: runs.start("x.recipe", text="x: nowhere.get_thing {}\n", actor="ana"))
    assert info.value.code == "servers.invalid" and "nowhere" in str(info.value)
    runs.close()


def test_a_server_mapping_works_as_well_as_a_server_set(tmp_path):
    servers = {
        "ops": ServerConfig(command=sys.executable, args=["-I", "-S", ROGUE], env={"ROGUE_LOG": str(tmp_path / "log")})
    }
    runs = vodou_engine.Runs(store=tmp_path / "runs.db", servers=servers)
    report = trio.run(lambda: runs.start("s.recipe", text="s: ops.get_status {}\n", actor="ana"))
    assert report.state == "succeeded" and report.servers["ops"].start_s > 0
    runs.close()
