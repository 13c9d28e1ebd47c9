"""A step's own `timeout:` and `retries:`.

Reads only are tried again; an effect never is (a compile error says why);
a read past its timeout fails, and inside a quorum that failure counts like
any other. Calls are counted in the rogue server's own log.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import trio

from vodou_engine.compiler import compile_recipe
from vodou_engine.errors import RecipeError
from vodou_engine.runs import Runs
from vodou_engine.servers import ServerConfig

ROGUE = str(Path(__file__).with_name("rogue_server.py"))


def rogue_runs(tmp_path: Path, modes: str) -> Runs:
    env = {"ROGUE_LOG": str(tmp_path / "rogue.log"), "ROGUE_MODES": modes}
    return Runs(
        store=tmp_path / "runs.db",
        servers={"ops": ServerConfig(command=sys.executable, args=["-I", "-S", ROGUE], env=env)},
    )


def calls(tmp_path: Path, tool: str) -> int:
    log = tmp_path / "rogue.log"
    return (
        sum(1 for line in log.read_text().splitlines() if json.loads(line).get("tool") == tool) if log.exists() else 0
    )


def run(runs: Runs, text: str):
    return trio.run(lambda: runs.start("t.recipe", text=text, actor="ana"))


def test_a_read_past_its_timeout_fails_and_counts_against_the_quorum(tmp_path):
    runs = rogue_runs(tmp_path, "get_status=hang")
    report = run(
        runs, 'together:\n  a: ops.get_status {}\n    timeout: 1s\n  b: vodou.echo {"value": 1}\n  need: 2 of 2\n'
    )
    assert report.state == "failed" and "1 s" in report.errors["a"]
    assert "join:1" in report.errors  # the quorum failed because of it
    runs.close()


def test_a_blocking_built_in_past_its_timeout_fails(tmp_path):
    runs = Runs(store=tmp_path / "runs.db", servers={})
    report = run(runs, 's: vodou.sleep {"ms": 600000}\n  timeout: 1s\n')
    assert report.state == "failed" and "timeout of 1 s" in report.errors["s"]
    runs.close()


def test_a_read_is_tried_again_and_succeeds(tmp_path):
    runs = rogue_runs(tmp_path, "get_status=fail_first:2")
    report = run(runs, "s: ops.get_status {}\n  retries: 2\n")
    assert report.state == "succeeded" and calls(tmp_path, "get_status") == 3
    runs.close()


def test_retries_run_out_and_say_so(tmp_path):
    runs = rogue_runs(tmp_path, "get_status=tool_error")
    report = run(runs, "s: ops.get_status {}\n  retries: 1\n")
    assert report.state == "failed" and "tried 2 times" in report.errors["s"] and calls(tmp_path, "get_status") == 2
    runs.close()


def test_retries_on_an_effect_is_a_compile_error_that_says_why():
    with pytest.raises(RecipeError) as info:
        compile_recipe('post: slack.slack_post_message {"channel": "#x", "text": "y"}\n  retries: 2\n', "p.recipe")
    assert info.value.line == 2 and "never tried again" in info.value.message


def test_an_effect_past_its_timeout_is_unknown_not_failed(tmp_path):
    runs = rogue_runs(tmp_path, "post_message=hang")
    parked = run(runs, 'post: ops.post_message {"channel": "#x", "text": "y"}\n  timeout: 1s\n')
    done = trio.run(lambda: runs.approve(parked.run, "post", actor="ana"))
    assert done.state == "parked" and "post" in done.unknown and calls(tmp_path, "post_message") == 1
    runs.close()


def test_the_card_shows_a_steps_timeout_and_retries():
    from vodou_engine.cards import plan_rows

    plan = compile_recipe('s: vodou.echo {"value": 1}\n  timeout: 2m\n  retries: 3\n')
    (row,) = [r for r in plan_rows(plan) if r[2] == "s"]
    assert "timeout 2m" in row[5] and "retries 3" in row[5]
