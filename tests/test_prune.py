"""Pruning finished runs: finished runs go, the file shrinks;
parked runs and runs with an effect whose fate is open never go."""

from __future__ import annotations

import sys
from pathlib import Path

import trio

from vodou_engine.runs import Runs
from vodou_engine.servers import ServerConfig

ROGUE = str(Path(__file__).with_name("rogue_server.py"))
BIG = 'big: vodou.echo {"value": "' + "x" * 20000 + '"}\n'


def test_finished_runs_go_parked_and_doubtful_ones_stay_and_the_file_shrinks(tmp_path, cli):
    env = {"ROGUE_LOG": str(tmp_path / "rogue.log"), "ROGUE_MODES": "post_message=hang"}
    config = ServerConfig(command=sys.executable, args=["-I", "-S", ROGUE], env=env)
    config.call_timeout = 0.5
    runs = Runs(store=tmp_path / "runs.db", servers={"ops": config})
    done = [trio.run(lambda: runs.start("big.recipe", text=BIG, actor="ana")).run for _ in range(30)]
    parked = trio.run(
        lambda: runs.start("ask.recipe", text='ask me:\n- go?\nx: vodou.echo {"value": 1}\n', actor="ana")
    ).run
    doubtful = trio.run(
        lambda: runs.start("post.recipe", text='post: ops.post_message {"channel": "#x", "text": "y"}\n', actor="ana")
    ).run
    assert trio.run(lambda: runs.approve(doubtful, "post", actor="ana")).unknown  # timed out: unknown
    trio.run(lambda: runs.cancel(doubtful, actor="ana"))  # ended, but its effect's fate is still open
    assert runs.prune(older_than_s=3600, by="ana").runs == 0  # nothing is that old yet
    report = runs.prune(older_than_s=0, by="ana")
    assert report.runs == 30 and report.bytes_after < report.bytes_before
    left = {r.run for r in runs.list(limit=100)}
    assert left == {parked, doubtful} and not left & set(done)
    assert [a.kind for a in runs.store().audit_log() if a.kind == "runs.pruned"] == ["runs.pruned"] * 2
    runs.close()
    assert "removed 0 finished runs" in cli("prune", "--older-than", "0", "--store", tmp_path / "runs.db", expect=0).out
    assert cli("prune", "--older-than", "0", "--state", "parked", "--store", tmp_path / "runs.db").code == 2
