"""Cancelling a run: a parked or running run ends `cancelled`;
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
    return (
        sum(1 for line in log.read_text().splitlines() if json.loads(line).get("tool") == tool) if log.exists() else 0
    )


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


# --- cancel racing every state a node can be in (the store decides: both stores) ---------------

ENDED = {"succeeded", "failed", "cancelled", "skipped", "rejected", "unknown"}


def held(tmp_path: Path) -> dict:
    """The rogue server with every call held until ./release exists (its own log counts them);
    and ``late``, another one, holding its calls until ./release-late exists."""
    env = {
        "ROGUE_LOG": str(tmp_path / "rogue.log"),
        "ROGUE_MODES": "post_message=held,get_status=held",
        "ROGUE_RELEASE": str(tmp_path / "release"),
    }
    late = {
        "ROGUE_LOG": str(tmp_path / "late.log"),
        "ROGUE_MODES": "get_status=held",
        "ROGUE_RELEASE": str(tmp_path / "release-late"),
    }
    return {
        "ops": ServerConfig(command=sys.executable, args=["-I", "-S", ROGUE], env=env),
        "late": ServerConfig(command=sys.executable, args=["-I", "-S", ROGUE], env=late),
    }


async def until(condition, what: str) -> None:
    """Wait for a condition another process makes true (a server's log, the store)."""
    with trio.fail_after(60):
        while not condition():
            await trio.sleep(0.01)


def stored_nodes(runs: Runs, run_id: str) -> dict[str, tuple[str, str | None]]:
    """The node records in the store (not the view, which reads effects over them)."""
    return {nid: (rec.state, rec.error) for nid, rec in runs.store().get_nodes(run_id).items()}


def cancel_mid_drive(tmp_path, store_location, recipe: str, step: str | None, ready) -> tuple[Runs, str, dict]:
    """Start ``recipe`` (it parks), approve ``step`` so a drive takes it on here, wait until
    ``ready(runs, run_id)``, cancel it from another Runs, check the run while the held calls
    are still out, then release them and let the drive end."""
    runs = Runs(store=store_location, servers=held(tmp_path), workers=False)
    canceller = Runs(store=store_location, servers=held(tmp_path), workers=False)
    observer = Runs(
        store=store_location, servers={}, workers=False
    )  # reads only (a Runs that read opened its store read-only)
    parked = trio.run(lambda: runs.start("c.recipe", text=recipe, actor="ana"))
    assert parked.state == "parked", parked
    seen: dict = {}

    async def main():
        async def drive():
            try:
                seen["report"] = await runs.approve(parked.run, step, actor="ana")
            except LostRunError as exc:
                seen["lost"] = exc

        async with trio.open_nursery() as nursery:
            nursery.start_soon(drive)
            await until(lambda: ready(observer, parked.run), "the run to reach the state the test cancels in")
            seen["cancelled"] = await canceller.cancel(parked.run, actor="ana", reason="not now")
            seen["during"] = stored_nodes(observer, parked.run)
            seen["effects_during"] = {e.step: e.state for e in observer.show(parked.run).effects}
            (tmp_path / "release").write_text("")

    trio.run(main)
    canceller.close()
    observer.close()
    assert seen["cancelled"].state == "cancelled"
    assert "lost" in seen or seen["report"].state == "cancelled"
    return runs, parked.run, seen


APPROVED_POST = 'post: ops.post_message {"channel": "#x", "text": "y"}\n'


@pytest.mark.both_stores
def test_a_run_cancelled_while_its_approved_effect_executes_records_the_effect_and_ends_every_step(
    tmp_path, store_location
):
    def executing(runs, run_id):
        return calls(tmp_path, "post_message") == 1

    runs, run_id, seen = cancel_mid_drive(tmp_path, store_location, APPROVED_POST, "post", executing)
    # while the call was out: the step was not left running; the effect is in doubt until its driver says
    assert (
        seen["during"]["post"][0] == "unknown"
        and "cancelled while this effect was executing" in seen["during"]["post"][1]
    )
    assert seen["effects_during"] == {"post": "unknown"}
    # the call came back: the record says it executed, and the step says so too, in the store itself
    assert stored_nodes(runs, run_id) == {"approve:post": ("succeeded", None), "post": ("succeeded", None)}
    view = runs.show(run_id)
    assert view.state == "cancelled" and [(e.step, e.state) for e in view.effects] == [("post", "executed")]
    assert [n.state for n in view.nodes] == ["succeeded", "succeeded"]
    events = [e.kind for e in runs.store().events(run_id)]
    assert events.index("cancelled") < events.index("effect.after_drive")  # the log says it came after the cancel
    assert calls(tmp_path, "post_message") == 1
    runs.close()


EVERY_STATE = """\
ask me:
- start?
together:
  post: ops.post_message {"channel": "#x", "text": "y"}
    without asking
  status: ops.get_status {}
  ask me:
  - and then?
then:
  done: vodou.echo {"value": "ok"}
"""


@pytest.mark.both_stores
def test_a_run_cancelled_with_an_effect_a_read_and_a_question_out_leaves_no_step_open(tmp_path, store_location):
    def all_out(runs, run_id):
        pending = [a.step for a in runs.show(run_id).approvals if a.state == "pending"]
        return calls(tmp_path, "post_message") == 1 and calls(tmp_path, "get_status") == 1 and pending == ["ask:2"]

    runs, run_id, seen = cancel_mid_drive(tmp_path, store_location, EVERY_STATE, None, all_out)
    during = seen["during"]
    assert during["status"] == ("cancelled", "the run was cancelled by ana: not now")  # the read in flight
    assert during["ask:2"][0] == "cancelled" and during["done"][0] == "cancelled" and during["join:1"][0] == "cancelled"
    assert during["post"][0] == "unknown"  # its driver is still calling
    final = stored_nodes(runs, run_id)
    assert final["post"] == ("succeeded", None) and {s for s, _ in final.values()} <= ENDED
    assert set(final) == {
        n.node for n in runs.show(run_id).nodes
    }  # every node of the plan has ended, even those never begun
    view = runs.show(run_id)
    assert [a.state for a in view.approvals if a.step == "ask:2"] == ["withdrawn"]
    assert [(e.step, e.state) for e in view.effects] == [("post", "executed")]
    assert calls(tmp_path, "post_message") == 1
    runs.close()


QUORUM = """\
ask me:
- start?
together:
  post: ops.post_message {"channel": "#x", "text": "y"}
    without asking
  quick: late.get_status {}
  need: 1 of 2
then:
  done: vodou.echo {"value": "ok"}
"""


@pytest.mark.both_stores
def test_a_run_cancelled_after_its_quorum_dropped_an_executing_effect_records_it(tmp_path, store_location):
    def decided(runs, run_id):
        if calls(tmp_path, "post_message") == 1:
            (tmp_path / "release-late").write_text("")  # the effect is out: now `quick` wins the join
        states = {n.node: n.state for n in runs.show(run_id).nodes}
        return states["done"] == "succeeded"

    runs, run_id, seen = cancel_mid_drive(tmp_path, store_location, QUORUM, None, decided)
    assert seen["during"]["join:1"][0] == "succeeded" and seen["during"]["post"][0] == "unknown"
    final = stored_nodes(runs, run_id)
    assert final["post"] == ("succeeded", None) and {s for s, _ in final.values()} <= ENDED
    assert [(e.step, e.state) for e in runs.show(run_id).effects] == [("post", "executed")]
    assert calls(tmp_path, "post_message") == 1
    runs.close()


@pytest.mark.both_stores
def test_a_parked_run_cancelled_or_declined_leaves_no_step_waiting_or_pending(tmp_path, store_location):
    two = 'together:\n  ask me:\n  - first?\n  ask me:\n  - second?\nthen:\n  done: vodou.echo {"value": "x"}\n'
    runs = Runs(store=store_location, servers={}, workers=False)
    cancelled = trio.run(lambda: runs.start("two.recipe", text=two, actor="ana"))
    declined = trio.run(lambda: runs.start("two.recipe", text=two, actor="ana"))
    assert cancelled.state == declined.state == "parked"
    trio.run(lambda: runs.cancel(cancelled.run, actor="ana"))
    assert trio.run(lambda: runs.reject(declined.run, "ask:1", actor="ana", reason="no")).state == "declined"
    for run_id in (cancelled.run, declined.run):
        final = stored_nodes(runs, run_id)
        assert set(final) == {"ask:1", "ask:2", "join:1", "done"} and {s for s, _ in final.values()} <= ENDED, final
        assert {a.state for a in runs.show(run_id).approvals} <= {"withdrawn", "rejected"}
    assert stored_nodes(runs, declined.run)["ask:1"][0] == "rejected"
    runs.close()


def test_a_run_declined_by_its_driver_leaves_no_other_branch_waiting(tmp_path):
    """Rejected while the driver still drives (the decision is picked up before it parks)."""
    two = (
        "together:\n  ask me:\n  - first?\n  ask me:\n  - second?\n  need: 1 of 2\n"  # one no does not decide the join
    )
    runs = Runs(store=tmp_path / "runs.db", servers={}, workers=False)
    parked = trio.run(lambda: runs.start("two.recipe", text=two, actor="ana"))
    runs.store().decide(
        next(a.id for a in runs.store().pending_approvals(parked.run) if a.step == "ask:1"), "rejected", by="ana"
    )
    assert trio.run(lambda: runs.resume(parked.run)).state == "declined"
    final = stored_nodes(runs, parked.run)
    assert final["ask:1"][0] == "rejected" and final["ask:2"] == ("cancelled", "the run ended declined")
    runs.close()
