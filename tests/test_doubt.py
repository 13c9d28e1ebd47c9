"""Doubt is ``unknown``, never ``failed``; nothing hangs.

Through the run API against tests/rogue_server.py, a real stdio MCP server that
misbehaves on request. Effects are counted in the server's own log (written
before it misbehaves); what the store says is read back through the API.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import trio

from vodou_engine.runs import Runs
from vodou_engine.servers import ServerConfig

ROGUE = str(Path(__file__).with_name("rogue_server.py"))
POST = 'recipe "ops"\npost: ops.post_message {"channel": "#ops", "text": "hello"}\n'
READ = 'recipe "ops"\nstatus: ops.get_status {}\n'


class Rogue:
    """One rogue server for a test: its configuration never changes, its behaviour may."""

    def __init__(self, tmp: Path, call_timeout: float | None = None):
        self.log = tmp / "rogue.log"
        self.modes = tmp / "modes"
        self.tools = tmp / "tools"
        self.code = tmp / "code"
        env = {
            "ROGUE_LOG": str(self.log),
            "ROGUE_MODES_FILE": str(self.modes),
            "ROGUE_TOOLS_FILE": str(self.tools),
            "ROGUE_RPC_CODE_FILE": str(self.code),
        }
        config = ServerConfig(command=sys.executable, args=["-I", "-S", ROGUE], env=env)
        if call_timeout is not None:
            config.call_timeout = call_timeout
        self.runs = Runs(store=tmp / "runs.db", servers={"ops": config})

    def set(self, modes: str = "", tools: str = "", code: int = -32000) -> None:
        self.modes.write_text(modes)
        self.tools.write_text(tools)
        self.code.write_text(str(code))

    def calls(self, tool: str) -> list[dict]:
        if not self.log.exists():
            return []
        lines = [json.loads(line) for line in self.log.read_text().splitlines() if line.strip()]
        return [r for r in lines if r.get("tool") == tool]

    def start(self, text: str):
        return trio.run(lambda: self.runs.start("ops.recipe", text=text, actor="ana"))

    def approve(self, run: str):
        return trio.run(lambda: self.runs.approve(run, "post", actor="ana"))

    def effect(self, run: str):
        (eff,) = self.runs.show(run).effects
        return eff


@pytest.fixture
def rogue(tmp_path):
    r = Rogue(tmp_path)
    yield r
    r.runs.close()


DOUBT = [
    "post_message=exit1",  # did it, then died
    "post_message=exit0",  # did it, then exited cleanly
    "post_message=bad_schema",  # a success that breaks the tool's own output schema
    "post_message=cutoff",  # half a reply, then gone
    "post_message=garbage",  # a reply that is not JSON-RPC
    "post_message=deep",  # a reply nested 1,000 deep
    "post_message=rpc_error",  # a live server's own -32000
]


@pytest.mark.parametrize("modes", DOUBT)
def test_an_effect_with_no_usable_reply_is_unknown_never_failed(rogue, modes):
    rogue.set()
    parked = rogue.start(POST)
    assert parked.state == "parked" and rogue.calls("post_message") == []
    rogue.set(modes)
    after = rogue.approve(parked.run)
    assert len(rogue.calls("post_message")) == 1  # the request reached the server
    assert after.state == "parked" and list(after.unknown) == ["post"] and after.errors == {}
    assert "may or may not have happened" in after.unknown["post"]
    assert rogue.effect(parked.run).state == "unknown"
    # a person settles it; the run then goes on from it, and nothing is sent again
    rogue.set()
    rogue.runs.reconcile(parked.run, "post", executed=True, actor="ana", reason="saw it in #ops")
    done = trio.run(lambda: rogue.runs.resume(parked.run))
    assert done.state == "succeeded"
    assert len(rogue.calls("post_message")) == 1


def test_an_internal_json_rpc_error_may_come_after_the_effect_so_it_is_unknown(rogue):
    rogue.set()
    parked = rogue.start(POST)
    rogue.set("post_message=rpc_error", code=-32603)
    after = rogue.approve(parked.run)
    assert after.state == "parked" and "JSON-RPC error -32603" in after.unknown["post"]
    assert rogue.effect(parked.run).state == "unknown"


def test_a_tool_error_is_the_servers_word_failed_and_a_person_may_still_settle_it(rogue):
    rogue.set()
    parked = rogue.start(POST)
    rogue.set("post_message=tool_error")
    after = rogue.approve(parked.run)
    assert after.state == "failed" and "quota exceeded" in after.errors["post"]
    eff = rogue.effect(parked.run)
    assert eff.state == "failed" and "quota exceeded" in eff.error
    settled = rogue.runs.reconcile(parked.run, "post", executed=True, actor="ana", reason="the server lied; it posted")
    assert settled.state == "executed" and settled.settled_by == "ana"
    with pytest.raises(Exception, match="settled"):  # once
        rogue.runs.reconcile(parked.run, "post", executed=False, actor="ana")


def test_a_request_refused_as_invalid_never_acted_so_it_is_failed(rogue):
    rogue.set()
    parked = rogue.start(POST)
    rogue.set("post_message=rpc_error", code=-32602)
    after = rogue.approve(parked.run)
    assert after.state == "failed" and "refused the request" in after.errors["post"]
    assert rogue.effect(parked.run).state == "failed"


def test_a_tool_renamed_since_the_question_fails_cleanly_as_not_executed(rogue):
    rogue.set()
    parked = rogue.start(POST)
    rogue.set(tools="post_message2,get_status")
    after = rogue.approve(parked.run)
    assert (
        after.state == "failed"
        and "nothing was executed" in after.errors["post"]
        and "post_message" in after.errors["post"]
    )
    assert rogue.runs.show(parked.run).effects == []  # never claimed: nothing is left `executing`
    assert rogue.calls("post_message") == rogue.calls("post_message2") == []


def test_a_read_that_never_answers_fails_at_its_timeout(tmp_path):
    r = Rogue(tmp_path, call_timeout=0.5)
    r.set("get_status=hang")
    report = r.start(READ)
    assert report.state == "failed" and "callTimeout" in report.errors["status"]
    assert len(r.calls("get_status")) == 1
    r.runs.close()


@pytest.mark.parametrize("modes", ["post_message=hang", "post_message=wrong_id", "post_message=cutoff_hang"])
def test_an_effect_that_never_answers_is_unknown_at_its_timeout(tmp_path, modes):
    r = Rogue(tmp_path, call_timeout=0.5)
    r.set()
    parked = r.start(POST)
    r.set(modes)
    after = r.approve(parked.run)
    assert after.state == "parked" and "post" in after.unknown and "callTimeout" in after.unknown["post"]
    assert r.effect(parked.run).state == "unknown"
    assert len(r.calls("post_message")) == 1
    r.runs.close()
