"""The `recipe` entry point as a real process: every command at least once, every exit code.

Behaviour is proven elsewhere, mostly in-process (the run API, or ``cli.main`` with
the arguments a person types). Here ``python -m vodou_engine`` is started as a
process for each command, so the real entry point is proven to parse, dispatch,
flush and exit with the documented code (docs/exit-codes.md). The runs are on
built-in tools and the rogue server (tests/rogue_server.py, standard library
only), whose own log counts the posts.

Real processes elsewhere, for what only a process shows: 129, 130 and 143 (a signal
mid-run) in test_holes.py and test_cli_polish.py; kill -9 at each crash point in
test_safety.py and test_holes.py; prompts on a terminal (a pty) in
test_cli_polish.py; twenty `approve` processes racing in test_run_e2e.py and two
`resume` in test_holes.py; a closed stdout and a store read as another user in
test_holes.py; `recipe mcp` from the documented command lines in test_agents.py;
`recipe serve` stopped by SIGTERM in test_web.py.
"""

from __future__ import annotations

import pytest
from conftest import rogue_calls, rogue_server

POST = 'recipe "post"\npost: ops.post_message {"channel": "#ops", "text": "hi"}\n'


@pytest.fixture
def home(cli):
    """./mcp.json with the rogue server as `ops` (its mode read from ./modes at each start) and ./post.recipe."""
    cli.servers_file({"ops": rogue_server(cli.tmp / "rogue.log", ROGUE_MODES_FILE=str(cli.tmp / "modes"))})
    (cli.tmp / "post.recipe").write_text(POST)
    return cli


def posts(cli) -> list[dict]:
    return [c for c in rogue_calls(cli.tmp / "rogue.log", "post_message") if c["mode"] == "ok"]


def no_traceback(res) -> None:
    assert "Traceback" not in res.out + res.err, res.err


def test_run_parks_3_approve_runs_it_0_and_again_is_refused_5(home):
    cli = home
    parked = cli.proc("run", "post.recipe", "--json", expect=3).json()
    assert [p["step"] for p in parked["pending"]] == ["post"] and posts(cli) == []
    run = parked["run"]
    assert "post" in cli.proc("show", run, expect=0).out
    assert [r["run"] for r in cli.proc("runs", "--json", expect=0).json()] == [run]
    done = cli.proc("approve", run, "post", "--yes", "--fingerprint", parked["pending"][0]["fingerprint"], expect=0)
    assert "succeeded" in done.out + done.err
    again = cli.proc("approve", run, "post", "--yes", expect=5)
    assert "already approved" in again.err
    assert len(posts(cli)) == 1
    no_traceback(again)


def test_reject_4_cancel_reconcile_and_resume_0(home):
    cli = home
    # the runs are started in-process; each command that decides is a process of its own
    to_reject = cli("run", "post.recipe", "--json", expect=3).json()["run"]
    to_cancel = cli("run", "post.recipe", "--json", expect=3).json()["run"]
    to_settle = cli("run", "post.recipe", "--json", expect=3).json()["run"]
    (cli.tmp / "modes").write_text("post_message=exit1")  # the server acts, then dies before it answers
    doubt = cli("approve", to_settle, "post", "--yes", "--json", expect=3).json()
    assert list(doubt["unknown"]) == ["post"]
    (cli.tmp / "modes").write_text("")

    rejected = cli.proc("reject", to_reject, "post", "--reason", "not today", expect=4)
    assert "declined" in rejected.out + rejected.err
    cli.proc("cancel", to_cancel, "--reason", "changed my mind", expect=0)
    settled = cli.proc("reconcile", to_settle, "post", "--executed", expect=0)
    assert f"recipe resume {to_settle}" in settled.out
    cli.proc("resume", to_settle, expect=0)
    states = {r["run"]: r["state"] for r in cli("runs", "--json", expect=0).json()}
    assert states == {to_reject: "declined", to_cancel: "cancelled", to_settle: "succeeded"}
    assert len(rogue_calls(cli.tmp / "rogue.log", "post_message")) == 1  # the one in doubt, never retried


def test_compile_plan_and_the_failures_1_2_and_6(home):
    cli = home
    assert cli.proc("--version", expect=0).out.startswith("recipe (vodou_engine) ")
    assert "exit codes" in cli.proc("--help", expect=0).out
    cli.proc("compile", "post.recipe", "-o", "post.json", expect=0)
    assert "⚠ post" in cli.proc("plan", "--offline", "post.json", expect=0).out
    assert "usage: recipe" in cli.proc("frobnicate", expect=2).err
    bad = cli.proc("compile", "nowhere.recipe", expect=2)
    assert "nowhere.recipe" in bad.err
    (cli.tmp / "nap.recipe").write_text('recipe "nap"\nnap: vodou.sleep {"ms": "soon"}\n')
    failed = cli.proc("run", "nap.recipe", expect=1)
    assert "number of milliseconds" in failed.out + failed.err
    (cli.tmp / "notes.txt").write_text("not a store\n")
    assert "notes.txt" in cli.proc("runs", "--store", "notes.txt", expect=6).err
    for res in (bad, failed):
        no_traceback(res)


def test_approvers_policy_save_schedules_and_author(home):
    cli = home
    secret = cli.proc("approver", "add", "ana", expect=0).out.strip()
    assert secret and cli.proc("approver", "list", expect=0).out.split() == ["ana"]
    assert "/signin?token=" in cli.proc("approver", "link", "ana", expect=0).out
    cli.proc("approver", "remove", "ana", expect=0)
    (cli.tmp / "vodou-policy.toml").write_text('[tools."ops.post_mesage"]\nrisk = "write"\n')
    assert "ops.post_mesage" in cli.proc("policy", "check", expect=2).out  # a typo names nothing
    cli.proc("save", "post.recipe", expect=0)
    cli.proc("schedule", "add", "post", "--cron", "0 8 * * 1-5", expect=0)
    for action in ("pause", "resume"):
        cli.proc("schedule", action, "post", expect=0)
    assert cli.proc("schedule", "list", "--json", expect=0).json()[0]["state"] == "active"
    cli.proc("schedule", "remove", "post", expect=0)
    assert "removed 0 finished runs" in cli.proc("prune", "--older-than", "30d", expect=0).out
    # no model configured: said before any server starts
    author = cli.proc(
        "author", "brief me every morning", env={"LLM_USER_PATH": str(cli.tmp / "llm"), "OPENAI_API_KEY": ""}, expect=2
    )
    assert "no model is configured" in author.err
    assert rogue_calls(cli.tmp / "rogue.log") == []
