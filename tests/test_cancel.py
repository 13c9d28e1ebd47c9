"""Cancelling a run (issue "Reach", section 4): a parked or running run ends `cancelled`;
its pending approval can no longer be given; an effect already executing finishes and is
recorded. Effects are counted in the rogue server's own log."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import trio

from vodou_engine.errors import LostRunError, VodouError
from vodou_engine.runs import Runs
from vodou_engine.servers import ServerConfig

ROGUE = str(Path(__file__).with_name("rogue_server.py"))
POST = 'post: ops.post_message {"channel": "#x", "text": "y"}\n'


def rogue(tmp_path: Path, modes: str = "") -> dict:
    env = {"ROGUE_LOG": str(tmp_path / "rogue.log"), "ROGUE_MODES": modes}
    return {"ops": ServerConfig(command=sys.executable, args=["-I", "-S", ROGUE], env=env)}


def calls(tmp_path: Path, tool: str) -> int:
    log = tmp_path / "rogue.log"
    return sum(1 for line in log.read_text().splitlines() if json.loads(line).get("tool") == tool) if log.exists() else 0


def test_a_cancelled_parked_run_can_no_longer_be_approved(tmp_path, cli):
    runs = Runs(store=tmp_path / "runs.db", servers=rogue(tmp_path))
    parked = trio.run(lambda: runs.start("p.recipe", text=POST, actor="ana"))
    report = trio.run(lambda: runs.cancel(parked.run, actor="ana", reason="changed my mind"))
    assert report.state == "cancelled" and report.pending == []
    assert [a.state for a in runs.show(parked.run).approvals] == ["withdrawn"]
    with pytest.raises(VodouError, match="withdrawn"):
        trio.run(lambda: runs.approve(parked.run, "post", actor="ana"))
    with pytest.raises(VodouError, match="already ended cancelled"):
        trio.run(lambda: runs.cancel(parked.run, actor="ana"))
    assert calls(tmp_path, "post_message") == 0
    runs.close()


def test_recipe_cancel_on_the_command_line(cli, tmp_path):
    recipe = tmp_path / "brief.recipe"
    recipe.write_text('post: slack.slack_post_message {"channel": "#daily", "text": "x"}\n')
    run = cli("run", recipe, "--json", expect=3).json()["run"]
    out = cli("cancel", run, "--reason", "not needed", "--json", expect=0).json()
    assert out["state"] == "cancelled"
    assert cli("approve", run, "post", "--yes").code == 5
    assert cli("show", run, "--json", expect=0).json()["state"] == "cancelled"


def test_cancelling_a_running_run_lets_its_executing_effect_finish_and_records_it(tmp_path):
    runs = Runs(store=tmp_path / "runs.db", servers=rogue(tmp_path, "post_message=slow:1500"))
    canceller = Runs(store=tmp_path / "runs.db", servers=rogue(tmp_path, "post_message=slow:1500"))
    parked = trio.run(lambda: runs.start("p.recipe", text=POST, actor="ana"))
    outcome: dict = {}

    async def main():
        async def drive():
            try:
                outcome["report"] = await runs.approve(parked.run, "post", actor="ana")
            except LostRunError as exc:
                outcome["lost"] = exc

        async with trio.open_nursery() as nursery:
            nursery.start_soon(drive)
            with trio.fail_after(60):
                while calls(tmp_path, "post_message") == 0:  # the effect reached the server
                    await trio.sleep(0.02)
            outcome["cancelled"] = await canceller.cancel(parked.run, actor="ana")

    trio.run(main)
    assert outcome["cancelled"].state == "cancelled"
    assert "lost" in outcome or outcome["report"].state == "cancelled"
    view = runs.show(parked.run)
    assert view.state == "cancelled"
    (effect,) = view.effects
    assert effect.state == "executed"  # it was executing: it finished and was recorded
    assert calls(tmp_path, "post_message") == 1
    runs.close()
    canceller.close()
