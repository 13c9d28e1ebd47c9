"""The holes an attack found, each closed and proven.

Where only a process can show it (signals, a dead owner, a closed stdout, a
read-only store, identity) the real CLI runs; the rest goes through the run
API. Effects are counted on the server side: the demo world's call log, or
the rogue server's own log.

The races and crashes (a signal mid-run, two resumes at once, a dead driver's
run taken over, a live one left alone, a driver that lost its run) are decided
by the store, so they run on both stores (``[sqlite]``, ``[postgres]``: the
``both_stores`` mark, tests/conftest.py).
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
import trio
from conftest import rogue_calls, rogue_server

from vodou_engine.errors import RefusedError
from vodou_engine.runs import Runs
from vodou_engine.servers import ServerConfig

ROGUE = str(Path(__file__).with_name("rogue_server.py"))
# A briefing's shape (reads together, a write, a question bound to the post) on the rogue
# server, which starts in tens of ms: these tests are about processes, not about the demo world.
BRIEF = """\
together sources:
  calendar: vodou.echo {"value": {"events": ["standup"]}}
  status:   ops.get_status {}
then:
  briefing: write a morning briefing from {calendar, status}
  ask me:
  - post to #daily?
  post: ops.post_message {"channel": "#daily", "text": "{briefing}"}
"""


def brief(cli, tmp: Path, header: str = "") -> Path:
    """BRIEF in ./brief.recipe, its `ops` server the rogue one in ./mcp.json (calls in ./rogue.log)."""
    cli.servers_file({"ops": rogue_server(tmp / "rogue.log")})
    return write(tmp, "brief.recipe", header + BRIEF)


def posts(cli) -> list[dict]:
    """Posts the server answered, from its own log."""
    return [c for c in rogue_calls(cli.tmp / "rogue.log", "post_message") if c["mode"] == "ok"]


def write(tmp: Path, name: str, text: str) -> Path:
    path = tmp / name
    path.write_text(text)
    return path


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def rogue_file(cli, tmp: Path, modes: Path, **extra) -> Path:
    env = {"ROGUE_LOG": str(tmp / "rogue.log"), "ROGUE_MODES_FILE": str(modes)}
    server = {"command": sys.executable, "args": ["-I", "-S", ROGUE], "env": env, **extra}
    return cli.servers_file({"ops": server})


def rogue_records(tmp: Path) -> list[dict]:
    log = tmp / "rogue.log"
    return [json.loads(line) for line in log.read_text().splitlines() if line.strip()] if log.exists() else []


def wait_for(predicate, what: str, deadline_s: float = 60.0) -> None:
    """Wait for something another process does (a line in its log), not for an amount of time."""
    end = time.monotonic() + deadline_s
    while not predicate():
        assert time.monotonic() < end, f"gave up waiting for {what}"
        time.sleep(0.02)


# --- 4: nothing hangs, nothing is orphaned ---------------------------------------------------------
@pytest.mark.both_stores
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT])
def test_a_signal_stops_the_run_resumably_and_leaves_no_server_behind(cli, tmp_path, sig):
    modes = write(tmp_path, "modes", "get_status=hang")
    rogue_file(cli, tmp_path, modes)
    recipe = write(tmp_path, "wait.recipe", 'status: ops.get_status {}\nnote: vodou.echo {"value": "{status.ok}"}\n')
    proc = cli.popen("run", recipe, "--json")
    wait_for(
        lambda: any(r.get("tool") == "get_status" for r in rogue_records(tmp_path)), "the read to reach the server"
    )
    (server_pid,) = {r["pid"] for r in rogue_records(tmp_path) if r.get("tool")}
    proc.send_signal(sig)
    code = proc.wait(timeout=60)
    assert code == 128 + sig, proc.stderr.read()
    assert not alive(server_pid)  # no server is left under PID 1
    (listed,) = cli("runs", "--json", expect=0).json()
    assert listed["state"] == "interrupted"
    modes.write_text("")
    done = cli("resume", listed["run"], "--json", expect=0).json()
    assert done["state"] == "succeeded"


@pytest.mark.both_stores
def test_two_resumes_at_once_take_the_run_once(cli, tmp_path):
    recipe = brief(cli, tmp_path)
    for _ in range(3):
        run = cli("run", recipe, "--json", expect=3).json()["run"]
        # approved, then the approving process dies right after taking the run
        crashed = cli.proc("approve", run, "post", "--yes", env={"VODOU_CRASH_AT": "resume"})
        assert crashed.code == -9
        before = len(posts(cli))
        procs = [cli.popen("resume", run, "--json") for _ in range(2)]
        codes = sorted(p.wait(timeout=120) for p in procs)
        assert codes in ([0, 0], [0, 5]), codes
        assert len(posts(cli)) == before + 1
        show = cli("show", run, "--json", expect=0).json()
        assert show["state"] == "succeeded"
        assert [e["state"] for e in show["effects"]] == ["executed"]
        assert [a["state"] for a in show["approvals"]] == ["approved"]


@pytest.mark.both_stores
def test_approving_a_run_whose_driver_died_takes_it_over_and_runs_the_effect(cli, tmp_path):
    recipe = brief(cli, tmp_path)
    # killed right after storing the question, before the run was parked: it stays "running"
    assert cli.proc("run", recipe, "--json", env={"VODOU_CRASH_AT": "parking"}).code == -9
    (listed,) = cli("runs", "--json", expect=0).json()
    assert listed["state"] == "interrupted"  # its owner is gone, so it is not shown as running
    res = cli("approve", listed["run"], "post", "--yes", "--json", expect=0)
    assert res.json()["state"] == "succeeded"
    assert len(posts(cli)) == 1


@pytest.mark.both_stores
def test_a_live_driver_is_left_alone_and_picks_up_the_decision(store_location):
    """Another process drives the run: approve records the decision and says so; it does not race it."""
    from vodou_engine.owners import _me

    runs = Runs(store=store_location, servers={}, workers=False)  # approve drives here on either store
    parked = trio.run(
        lambda: runs.start("q.recipe", text='ask me:\n- go on?\nnote: vodou.echo {"value": "on"}\n', actor="ana")
    )
    store = runs.store()
    other = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    try:
        assert store.take_run(parked.run, _me(other.pid), lease_s=60)  # a live process of this host holds it
        res = trio.run(lambda: runs.approve(parked.run, actor="ana"))
        assert res.driven_by == f"process {other.pid}" and res.state == "running"
        assert [a.state for a in store.approvals(parked.run)] == ["approved"]
        with pytest.raises(Exception, match="being driven"):
            trio.run(lambda: runs.resume(parked.run))
    finally:
        other.stdin.close()
        other.wait()
    # its driver is gone now: the run can be taken, and goes on from the decision
    done = trio.run(lambda: runs.resume(parked.run))
    assert done.state == "succeeded"
    runs.close()


@pytest.mark.both_stores
def test_a_driver_that_lost_its_run_writes_nothing_more(store_location):
    from vodou_engine.errors import LostRunError
    from vodou_engine.store import NodeRecord

    runs = Runs(store=store_location, servers={}, workers=False)
    parked = trio.run(
        lambda: runs.start("q.recipe", text='ask me:\n- go on?\nnote: vodou.echo {"value": "on"}\n', actor="ana")
    )
    store = runs.store()
    assert store.take_run(parked.run, "me", lease_s=60)
    assert not store.take_run(parked.run, "someone-else", lease_s=60)  # exclusive while the lease holds
    assert store.take_run(parked.run, "someone-else", lease_s=60, now=time.time() + 120)  # the lease ran out
    with pytest.raises(LostRunError):
        store.save_nodes(parked.run, [NodeRecord(node_id="note", state="succeeded")], owner="me")
    assert not store.renew_lease(parked.run, "me", lease_s=60)
    runs.close()


# --- 5: graph shapes the verifier must handle ------------------------------------------------------
QUESTION_IN_QUORUM = """\
together:
  fast: vodou.echo {"value": 1}
  then:
    ask me:
    - post it?
    post: ops.post_message {"channel": "#ops", "text": "hi"}
  need: 1 of 2
"""
EFFECT_IN_QUORUM = """\
together:
  other: OTHER
  post: ops.post_message {"channel": "#ops", "text": "hi"}
  need: 1 of 2
"""


def _rogue_runs(tmp_path: Path) -> Runs:
    env = {"ROGUE_LOG": str(tmp_path / "rogue.log")}
    return Runs(
        store=tmp_path / "runs.db",
        servers={"ops": ServerConfig(command=sys.executable, args=["-I", "-S", ROGUE], env=env)},
    )


def _posted(tmp_path: Path) -> int:
    return sum(1 for r in rogue_records(tmp_path) if r.get("tool") == "post_message")


@pytest.mark.parametrize("recipe", [QUESTION_IN_QUORUM, EFFECT_IN_QUORUM.replace("OTHER", 'vodou.echo {"value": 1}')])
def test_a_dropped_branch_has_its_question_withdrawn(tmp_path, recipe):
    runs = _rogue_runs(tmp_path)
    report = trio.run(lambda: runs.start("q.recipe", text=recipe, actor="ana"))
    assert report.state == "succeeded" and report.pending == []
    view = runs.show(report.run)
    assert all(a.state == "withdrawn" for a in view.approvals)
    assert {n.node: n.state for n in view.nodes}["post"] == "cancelled"
    with pytest.raises(RefusedError):  # nobody can approve it afterwards
        trio.run(lambda: runs.approve(report.run, "post", actor="ana"))
    assert _posted(tmp_path) == 0
    runs.close()


BOTH_ASK = """\
together:
  then:
    ask me:
    - wait for this?
    other: vodou.echo {"value": 1}
  post: ops.post_message {"channel": "#ops", "text": "hi"}
  need: 1 of 2
"""


def test_an_effect_in_a_quorum_runs_once_when_approved_and_wins_the_join(tmp_path):
    runs = _rogue_runs(tmp_path)
    parked = trio.run(lambda: runs.start("q.recipe", text=BOTH_ASK, actor="ana"))
    assert parked.state == "parked" and sorted(p.step for p in parked.pending) == ["ask:1", "post"]
    done = trio.run(lambda: runs.approve(parked.run, "post", actor="ana"))
    assert done.state == "succeeded" and done.pending == []
    view = runs.show(parked.run)
    nodes = {n.node: n.state for n in view.nodes}
    assert nodes["post"] == "succeeded" and nodes["ask:1"] == nodes["other"] == "cancelled"
    assert {a.step: a.state for a in view.approvals} == {"post": "approved", "ask:1": "withdrawn"}
    with pytest.raises(Exception, match="withdrawn"):  # the dropped branch's question cannot be answered
        trio.run(lambda: runs.approve(parked.run, "ask:1", actor="ana"))
    assert _posted(tmp_path) == 1
    runs.close()


def test_rejecting_an_effect_in_a_quorum_declines_the_run(tmp_path):
    runs = _rogue_runs(tmp_path)
    parked = trio.run(lambda: runs.start("q.recipe", text=BOTH_ASK, actor="ana"))
    done = trio.run(lambda: runs.reject(parked.run, "post", actor="ana", reason="no"))
    assert done.state == "declined" and done.pending == [] and _posted(tmp_path) == 0
    assert {a.step: a.state for a in runs.show(parked.run).approvals} == {"post": "rejected", "ask:1": "withdrawn"}
    runs.close()


def test_the_verifier_refuses_a_join_whose_members_lost_their_approval(tmp_path):
    from vodou_engine.compiler import compile_recipe, load_plan
    from vodou_engine.errors import PlanError
    from vodou_engine.plan import encode_plan

    plan = compile_recipe(QUESTION_IN_QUORUM.replace("ops.", "slack.").replace("post_message", "slack_post_message"))
    doc = json.loads(encode_plan(plan))
    join = next(n for n in doc["nodes"] if n["kind"] == "join")
    assert ["approve:post", "post"] in join["members"]
    join["members"] = [[m for m in item if m != "approve:post"] for item in join["members"]]
    with pytest.raises(PlanError, match="without its approval"):
        load_plan(json.dumps(doc), refresh=True)
    join["members"] = [["fast"], ["ask:1", "post"]]  # what older compilers wrote: a node that is not in the plan
    with pytest.raises(PlanError, match="not in the plan"):
        load_plan(json.dumps(doc), refresh=True)


# --- 6: bad input, anywhere --------------------------------------------------------------------
DEEP = "[" * 5000 + "]" * 5000


def test_deep_nesting_in_every_input_is_a_clear_error(cli, tmp_path):
    recipe = write(tmp_path, "ok.recipe", 'inputs:\n  v = 1\nx: vodou.echo {"value": "{v}"}\n')
    res = cli("run", recipe, "--set", f"v={DEEP}")
    assert res.code == 2 and "levels deep" in res.err and "Traceback" not in res.err
    servers = write(tmp_path, "deep.json", '{"mcpServers": {"a": {"command": "x", "env": ' + DEEP + "}}}")
    res = cli("plan", recipe, "--servers", servers)
    assert res.code == 2 and "levels deep" in res.err and "Traceback" not in res.err
    plan = json.loads(cli("compile", recipe, expect=0).out)
    plan["nodes"][0]["args"]["value"] = "DEEP"
    actions = write(tmp_path, "deep.json", json.dumps(plan).replace('"DEEP"', DEEP))
    res = cli("run", actions)
    assert res.code == 2 and "levels deep" in res.err and "Traceback" not in res.err
    assert cli("runs", "--json", expect=0).json() == []  # nothing was stored


def test_a_tool_result_nested_too_deep_fails_the_read(tmp_path):
    env = {"ROGUE_LOG": str(tmp_path / "rogue.log"), "ROGUE_MODES": "get_status=deep"}
    runs = Runs(
        store=tmp_path / "runs.db",
        servers={"ops": ServerConfig(command=sys.executable, args=["-I", "-S", ROGUE], env=env)},
    )
    report = trio.run(lambda: runs.start("r.recipe", text="s: ops.get_status {}\n", actor="ana"))
    assert report.state == "failed" and "deep" in report.errors["s"]
    runs.close()


def test_a_tool_results_structured_content_nested_too_deep_fails_the_read(tmp_path):
    """Over a real stdio server: structured content 150 deep is refused, not kept, even though
    the reply's line passes every other check."""
    env = {"ROGUE_LOG": str(tmp_path / "rogue.log"), "ROGUE_MODES": "get_status=deep_structured"}
    runs = Runs(
        store=tmp_path / "runs.db",
        servers={"ops": ServerConfig(command=sys.executable, args=["-I", "-S", ROGUE], env=env)},
    )
    report = trio.run(lambda: runs.start("r.recipe", text="s: ops.get_status {}\n", actor="ana"))
    assert report.state == "failed" and "deep" in report.errors["s"]
    stored = runs.store(create=False).get_nodes(report.run)["s"]
    assert stored.state == "failed" and stored.output_json is None
    runs.close()


def test_an_absurd_sleep_fails_its_step(tmp_path):
    runs = Runs(store=tmp_path / "runs.db", servers={})
    report = trio.run(lambda: runs.start("s.recipe", text='s: vodou.sleep {"ms": 1e300}\n', actor="ana"))
    assert report.state == "failed" and "milliseconds" in report.errors["s"]
    runs.close()


@pytest.mark.parametrize("kind", ["fifo", "zero"])
def test_only_regular_files_are_read_as_recipes(cli, tmp_path, kind):
    path = tmp_path / "pipe.recipe"
    if kind == "fifo":
        os.mkfifo(path)
    else:
        path = Path("/dev/zero")
    res = cli.proc("compile", path, timeout=30)  # a real process: refused, never blocked
    assert res.code == 2 and "not a regular file" in res.err


def test_server_text_cannot_drive_the_terminal(cli, tmp_path):
    modes = write(tmp_path, "modes", "get_status=escape")
    rogue_file(cli, tmp_path, modes)
    recipe = write(tmp_path, "s.recipe", "s: ops.get_status {}\n")
    res = cli("run", recipe)
    assert res.code == 1
    both = res.out + res.err
    assert "\x1b" not in both  # no escape reaches the terminal
    assert "⟨U+001B⟩[2J" in both and "run succeeded. (fake)" in both  # it is shown, marked, harmless


def test_a_live_servers_own_minus_32000_is_its_error_not_a_dead_connection(tmp_path):
    env = {"ROGUE_LOG": str(tmp_path / "rogue.log"), "ROGUE_MODES": "get_status=rpc_error"}
    runs = Runs(
        store=tmp_path / "runs.db",
        servers={"ops": ServerConfig(command=sys.executable, args=["-I", "-S", ROGUE], env=env)},
    )
    report = trio.run(lambda: runs.start("r.recipe", text="s: ops.get_status {}\n", actor="ana"))
    assert report.state == "failed" and "rogue failure" in report.errors["s"] and "closed" not in report.errors["s"]
    runs.close()


AS_NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]


def _closed_to_other_users(env: dict) -> str | None:
    """Why another user could not run this checkout's `recipe` here (not root, or the checkout
    sits in a directory closed to them), or None when they can: tried, not guessed."""
    if os.geteuid() != 0:
        return "switching to another user needs root"
    probe = subprocess.run(
        [*AS_NOBODY, sys.executable, "-c", "import vodou_engine"],
        cwd="/",
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    return None if probe.returncode == 0 else (probe.stderr.strip().splitlines() or [f"exit {probe.returncode}"])[-1]


def test_a_read_only_store_can_still_be_read(cli, tmp_path):
    closed = _closed_to_other_users(cli.env)
    if closed:
        pytest.skip(f"reading a store as another user: {closed}")
    recipe = write(tmp_path, "e.recipe", 'x: vodou.echo {"value": 1}\n')
    run = cli("run", recipe, "--json", expect=0).json()["run"]
    conn = sqlite3.connect(cli.store)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    import shutil
    import tempfile

    outer = Path(tempfile.mkdtemp(prefix="vodou-sealed-"))  # pytest's own directories are closed to other users
    os.chmod(outer, 0o755)
    sealed = outer / "sealed"
    sealed.mkdir()
    store = sealed / "runs.db"
    store.write_bytes(cli.store.read_bytes())
    os.chmod(store, 0o444)
    os.chmod(sealed, 0o555)
    before = store.read_bytes()
    for args in (["runs", "--json"], ["show", run, "--json"]):
        proc = subprocess.run(
            [*AS_NOBODY, *cli.argv(*args, "--store", str(store))],
            cwd="/",
            env=cli.env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert proc.returncode == 0, proc.stderr
    assert store.read_bytes() == before
    os.chmod(sealed, 0o755)
    shutil.rmtree(outer)


def test_a_closed_stdout_does_not_stop_the_run(cli, tmp_path):
    recipe = brief(cli, tmp_path)
    run = cli("run", recipe, "--json", expect=3).json()["run"]
    proc = cli.popen("approve", run, "post", "--yes")
    proc.stdout.readline()
    proc.stdout.close()  # like `| head -1`
    assert proc.wait(timeout=120) == 0, proc.stderr.read()
    assert len(posts(cli)) == 1
    assert cli("show", run, "--json", expect=0).json()["state"] == "succeeded"


# --- 7: who may act -------------------------------------------------------------------------------------
def test_acting_as_someone_else_needs_their_secret_and_is_audited(cli, tmp_path):
    recipe = brief(cli, tmp_path, "approvers: ana\n")
    run = cli("run", recipe, "--json", expect=3).json()["run"]
    refused = cli("approve", run, "post", "--yes", "--as", "ana")
    assert refused.code == 5 and "secret" in refused.err
    wrong = cli("approve", run, "post", "--yes", "--as", "ana", env={"VODOU_APPROVER_TOKEN": "vodou_guess"})
    assert wrong.code == 5
    assert posts(cli) == []
    conn = sqlite3.connect(cli.store)
    audited = conn.execute("SELECT kind, run_id, data_json FROM audit WHERE kind = 'identity.refused'").fetchall()
    conn.close()
    assert len(audited) == 2 and all(r[1] == run and json.loads(r[2])["claimed"] == "ana" for r in audited)
    ana = cli.approver("ana")
    cli("approve", run, "post", "--yes", "--as", "ana", env=ana, expect=0)
    assert len(posts(cli)) == 1


def test_a_policy_entry_for_a_tool_that_does_not_exist_is_reported(cli, tmp_path):
    # the demo chat server alone: the typo is one letter away from a tool it really lists
    from vodou_engine.servers import demo_servers

    slack = demo_servers(cli.demo_db)["slack"]
    cli.servers_file({"slack": {"command": slack.command, "args": slack.args, "env": slack.env}})
    policy = write(
        tmp_path, "vodou-policy.toml", '[tools."slack.slack_delete_messages"]\nallow_without_asking = true\n'
    )
    recipe = write(tmp_path, "post.recipe", 'post: slack.slack_post_message {"channel": "#daily", "text": "hi"}\n')
    plan = cli("plan", recipe, "--policy", policy)
    assert (
        plan.code == 0
        and "warning" in plan.err
        and "slack_delete_messages" in plan.err
        and "slack_delete_message" in plan.err
    )
    check = cli("policy", "check", "--policy", policy)
    assert check.code == 2 and "slack.slack_delete_messages" in check.out
    write(tmp_path, "vodou-policy.toml", '[tools."slack.slack_delete_message"]\nallow_without_asking = true\n')
    cli("policy", "check", "--policy", policy, expect=0)
