"""Identity never comes from the environment.

`LOGNAME=ana recipe approve …` once approved as ana without ana's secret, and
the audit said "approved by ana": ``getpass.getuser()`` believes ``$LOGNAME``
and ``$USER``. The operating-system user is the name of the real user id
(vodou_engine/osuser.py); an environment that names someone else is ignored
and logged as a refused claim. Proven through the CLI; effects are counted in
the rogue server's own log.
"""

from __future__ import annotations

import json
import os
import pwd
from pathlib import Path

import pytest
from conftest import rogue_calls, rogue_server

pytestmark = pytest.mark.both_stores

REAL = pwd.getpwuid(os.getuid()).pw_name
"""Who the tests run as: the name of the real user id."""

ANA = {"LOGNAME": "ana", "USER": "ana", "USERNAME": "ana"}
"""An environment that claims to be ana."""

POST = 'post: ops.post_message {"channel": "#daily", "text": "hello"}\n'


def recipe(cli, header: str = "") -> Path:
    cli.servers_file({"ops": rogue_server(cli.tmp / "rogue.log")})
    path = cli.tmp / "post.recipe"
    path.write_text(header + POST)
    return path


def posts(cli) -> list[dict]:
    """Posts the server answered, from its own log."""
    return [c for c in rogue_calls(cli.tmp / "rogue.log", "post_message") if c["mode"] == "ok"]


def refused_claims(cli) -> list[tuple[str, str | None, dict]]:
    return [
        (actor, run, json.loads(data))
        for actor, run, data in cli.sql(
            "SELECT actor, run_id, data_json FROM audit WHERE kind = 'identity.refused' ORDER BY seq"
        )
    ]


def test_the_environment_cannot_approve_as_someone_else(cli):
    assert REAL != "ana"
    run = cli("run", recipe(cli, "approvers: ana\n"), "--json", env=ANA, expect=3).json()["run"]
    res = cli("approve", run, "post", "--yes", env=ANA)
    assert res.code == 5, res.err
    assert f"{REAL} may not decide" in res.err and "$LOGNAME names ana" in res.err
    assert posts(cli) == []  # the server never saw a post
    # the store's log names the real user: the refused decision, and the claim itself
    assert cli.sql("SELECT actor FROM events WHERE run_id = ? AND kind = 'approval.refused'", (run,)) == [(REAL,)]
    assert cli.sql("SELECT count(*) FROM events WHERE actor = 'ana'") == [(0,)]
    assert [(a, r, d["claimed"], d["command"], d["via"]) for a, r, d in refused_claims(cli)] == [
        (REAL, None, "ana", "run", "$LOGNAME"),
        (REAL, run, "ana", "approve", "$LOGNAME"),
    ]
    # ana herself, with her secret, approves once; her own name in the environment is no claim
    ana = cli.approver("ana")
    cli("approve", run, "post", "--yes", "--as", "ana", env={**ANA, **ana}, expect=0)
    assert len(posts(cli)) == 1
    assert len(refused_claims(cli)) == 2


def test_a_run_started_under_another_name_is_started_by_the_real_user(cli):
    started = cli("run", recipe(cli), "--json", env=ANA, expect=3).json()
    (pending,) = started["pending"]
    assert pending["approvers"] == [REAL]  # the starter is the default approver: the real one
    assert cli.sql("SELECT started_by FROM runs WHERE id = ?", (started["run"],)) == [(REAL,)]
    assert cli.sql("SELECT actor FROM events WHERE run_id = ? AND kind = 'started'", (started["run"],)) == [(REAL,)]
    assert (
        cli(
            "approve",
            started["run"],
            "post",
            "--yes",
            "--as",
            "ana",
            env={**ANA, "VODOU_APPROVER_TOKEN": "vodou_guess"},
        ).code
        == 5
    )
    assert posts(cli) == []


@pytest.mark.sqlite_only
def test_without_a_passwd_entry_the_user_is_uid_n_never_the_environment(monkeypatch):
    """A container started with a bare numeric --user has no name for its id (unit test of one function)."""
    from vodou_engine.runs import os_user

    def no_entry(uid):
        raise KeyError(f"getpwuid(): uid not found: {uid}")

    for variable, value in ANA.items():
        monkeypatch.setenv(variable, value)
    assert os_user() == REAL
    monkeypatch.setattr(pwd, "getpwuid", no_entry)
    assert os_user() == f"uid:{os.getuid()}"


@pytest.mark.sqlite_only
def test_an_agent_server_started_under_another_name_asks_the_real_user(cli):
    """`recipe mcp` adds the person running it as the approver of an agent's recipe: the real one."""
    import anyio
    from test_agents import POST as SLACK_POST
    from test_agents import Agent

    async def main():
        async with Agent(cli, env=ANA) as agent:
            started = await agent.ok("start_run", recipe=SLACK_POST)
        assert started["approvers_added"] == [REAL]
        assert [p["approvers"] for p in started["pending"]] == [[REAL]]

    anyio.run(main)
