"""`recipe run` / `approve` / `reject` end to end: real servers, a real store, and a real
process wherever the claim is about one (an approval from another process, twenty
approvals racing); the rest runs the CLI in this process.

Effects are counted where they land: in the demo servers' own call log, the rogue
server's log, or the git repository's history.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import RECIPES, demo_calls, demo_server, rogue_calls, rogue_server

MORNING = RECIPES / "morning-briefing.recipe"


def _run_parked(cli, recipe=MORNING, *extra):
    res = cli("run", recipe, "--json", *extra, expect=3)
    doc = res.json()
    assert doc["state"] == "parked"
    return doc


def test_morning_briefing_parks_then_posts_once_when_approved_from_another_process(cli):
    doc = _run_parked(cli)
    assert [p["step"] for p in doc["pending"]] == ["post"]
    assert demo_calls(cli.demo_db, tool="slack_post_message") == []  # the gate held
    reads_before = len(demo_calls(cli.demo_db, tool="list-events"))
    assert reads_before == 1

    assert set(doc["servers"]) == {"google-calendar", "gmail", "slack"}
    res = cli.proc("approve", doc["run"], "post", "--yes", "--json", expect=0)  # another process
    assert res.json()["state"] == "succeeded"
    # only the server the rest of the run needs was started, and it says how long that took
    assert list(res.json()["servers"]) == ["slack"] and res.json()["servers"]["slack"]["start_s"] > 0
    posts = demo_calls(cli.demo_db, tool="slack_post_message")
    assert len(posts) == 1 and posts[0]["outcome"] == "ok"
    assert posts[0]["arguments"]["channel"] == "#daily"
    assert "morning briefing" in posts[0]["arguments"]["text"]
    assert posts[0]["idempotency_key"]
    # finished steps never run again: the reads happened once, before the park
    assert len(demo_calls(cli.demo_db, tool="list-events")) == reads_before
    assert len(demo_calls(cli.demo_db, tool="slack_search_messages")) == 1

    # approving again changes nothing, and says so
    again = cli("approve", doc["run"], "post", "--yes")
    assert again.code == 5 and "approved" in again.err
    assert len(demo_calls(cli.demo_db, tool="slack_post_message")) == 1

    show = cli("show", doc["run"], "--json", expect=0).json()
    assert show["state"] == "succeeded"
    (effect,) = show["effects"]
    assert effect["step"] == "post" and effect["state"] == "executed"
    assert effect["fingerprint"] == doc["pending"][0]["fingerprint"]
    assert effect["payload"] == posts[0]["arguments"]
    assert show["together"] and show["together"][0]["join"] == "join:sources"


def test_rejected_run_posts_nothing_and_ends_declined(cli):
    doc = _run_parked(cli)
    res = cli("reject", doc["run"], "post", "--reason", "not today")
    assert res.code == 4
    assert demo_calls(cli.demo_db, tool="slack_post_message") == []
    show = cli("show", doc["run"], "--json", expect=0).json()
    assert show["state"] == "declined"
    assert show["approvals"][0]["state"] == "rejected"
    # and a later approve cannot revive it
    late = cli("approve", doc["run"], "post", "--yes")
    assert late.code == 5
    assert demo_calls(cli.demo_db, tool="slack_post_message") == []


@pytest.mark.both_stores
def test_twenty_concurrent_approvals_execute_once(cli):
    """Twenty `recipe approve` processes race for one question, on each store: the database
    decides who wins. The post goes to the rogue server (standard library, tens of ms to
    start), so the race costs twenty approvals, not twenty demo server starts; the post is
    counted in that server's own log."""
    log = cli.tmp / "rogue.log"
    servers = cli.servers_file({"ops": rogue_server(log)})
    recipe = cli.tmp / "post.recipe"
    recipe.write_text('post: ops.post_message {"channel": "#daily", "text": "once"}\n')
    doc = _run_parked(cli, recipe, "--servers", servers)
    procs = [cli.popen("approve", doc["run"], "post", "--yes") for _ in range(20)]
    results = [(p.wait(timeout=300), p.stdout.read(), p.stderr.read()) for p in procs]
    codes = sorted(code for code, _, _ in results)
    assert codes.count(0) == 1, results
    assert codes.count(5) == 19, results
    for code, _, err in results:
        if code == 5:
            assert "already" in err or "approved" in err
    (post,) = rogue_calls(log, "post_message")
    assert post["mode"] == "ok" and post["arguments"]["text"] == "once"


def test_post_fanout_runs_each_branch_once_on_its_own_server(cli):
    res = cli("run", RECIPES / "post-fanout.recipe", "--json", expect=0)
    assert res.json()["state"] == "succeeded"
    calls = [c for c in demo_calls(cli.demo_db, tool="query") if c["server"] in ("board", "recall", "proc")]
    assert sorted(c["server"] for c in calls) == ["board", "proc", "recall"]
    assert {c["server"]: c["arguments"]["ms"] for c in calls} == {"board": 412, "recall": 268, "proc": 83}


def test_branches_on_three_servers_are_in_flight_at_once(cli, tmp_path):
    """Without a clock: each call can only end once the next server's call has arrived.

    ``board`` returns when a call arrives at ``recall`` (fifo ``one``); ``recall``'s
    arrival is written into ``one`` and it then returns when a call arrives at ``proc``
    (fifo ``two``); ``proc`` arrives by writing into ``two``. A fifo's write waits for
    its reader, so if the engine ran any of the three only after another had ended the
    run would never end (the cli's timeout fails the test): all three were in flight
    at the same moment, on three server processes."""
    one, two = tmp_path / "one", tmp_path / "two"
    os.mkfifo(one)
    os.mkfifo(two)

    servers = cli.servers_file(
        {
            "board": demo_server("lab_server", cli.demo_db, VODOU_DEMO_NAME="board"),
            "recall": demo_server("lab_server", cli.demo_db, VODOU_DEMO_NAME="recall", VODOU_DEMO_ARRIVALS=str(one)),
            "proc": demo_server("lab_server", cli.demo_db, VODOU_DEMO_NAME="proc", VODOU_DEMO_ARRIVALS=str(two)),
        }
    )
    recipe = tmp_path / "rendezvous.recipe"
    recipe.write_text(
        "together:\n"
        f'  board: board.get_arrival {{"fifo": "{one}"}}\n'
        f'  recall: recall.get_arrival {{"fifo": "{two}"}}\n'
        '  proc: proc.query {"ms": 0, "label": "proc"}\n'
        "then:\n"
        "  note: write what arrived from {board, recall, proc}\n"
    )
    res = cli("run", recipe, "--servers", servers, "--json", expect=0)
    assert res.json()["state"] == "succeeded"
    outputs = {n["node"]: n.get("output") for n in cli("show", res.json()["run"], "--json", expect=0).json()["nodes"]}
    assert "recall.get_arrival" in json.dumps(outputs["board"]) and "proc.query" in json.dumps(outputs["recall"])


def test_blocking_builtin_branches_run_on_real_threads(cli, tmp_path):
    recipe = tmp_path / "threads.recipe"
    recipe.write_text(
        "together:\n"
        '  a: vodou.sleep {"ms": 412, "label": "a"}\n'
        '  b: vodou.sleep {"ms": 268, "label": "b"}\n'
        '  c: vodou.sleep {"ms": 83, "label": "c"}\n'
        "then:\n"
        "  note: write timings from {a, b, c}\n"
    )
    res = cli("run", recipe, "--json", expect=0)
    run = res.json()["run"]
    show = cli("show", run, "--json", expect=0).json()
    nodes = {n["node"]: n for n in show["nodes"]}
    starts = [nodes[k]["started_at"] for k in "abc"]
    ends = [nodes[k]["ended_at"] for k in "abc"]
    assert max(starts) < min(ends)  # all three were in flight together


def test_quorum_proceeds_at_k_and_cancels_the_slow_branch(cli, tmp_path):
    recipe = tmp_path / "quorum.recipe"
    recipe.write_text(
        "together:\n"
        '  fast: vodou.sleep {"ms": 10}\n'
        '  slow: vodou.sleep {"ms": 60000}\n'
        '  quick: vodou.echo {"value": "hi"}\n'
        "  need: 2 of 3\n"
        "then:\n"
        "  summary: write what came back from {fast, slow, quick}\n"
    )
    # a 60 s branch would hit the timeout if the join waited for it
    res = cli("run", recipe, "--json", expect=0, timeout=50)
    show = cli("show", res.json()["run"], "--json", expect=0).json()
    nodes = {n["node"]: n for n in show["nodes"]}
    assert nodes["slow"]["state"] == "cancelled"
    assert nodes["fast"]["state"] == nodes["quick"]["state"] == "succeeded"
    assert nodes["summary"]["state"] == "succeeded"


def test_quorum_fails_at_once_when_k_is_impossible(cli, tmp_path):
    recipe = tmp_path / "impossible.recipe"
    recipe.write_text(
        "together:\n"
        '  bad1: slack.slack_get_channel {"channel": "#nope"}\n'
        '  bad2: slack.slack_get_channel {"channel": "#nope-either"}\n'
        '  slow: vodou.sleep {"ms": 60000}\n'
        "  need: 2 of 3\n"
        "then:\n"
        "  summary: write it from {bad1, bad2, slow}\n"
    )
    res = cli("run", recipe, "--json", timeout=50)
    assert res.code == 1, res.err
    show = cli("show", res.json()["run"], "--json", expect=0).json()
    nodes = {n["node"]: n for n in show["nodes"]}
    assert nodes["bad1"]["state"] == nodes["bad2"]["state"] == "failed"
    assert nodes["slow"]["state"] == "cancelled"
    assert nodes["join:1"]["state"] == "failed"
    assert nodes["summary"]["state"] == "skipped"


def test_write_gets_the_inputs_that_exist_and_names_the_missing(cli, tmp_path):
    recipe = tmp_path / "missing.recipe"
    recipe.write_text(
        "together:\n"
        '  good: vodou.echo {"value": "present value"}\n'
        '  bad: slack.slack_get_channel {"channel": "#nope"}\n'
        "  need: 1 of 2\n"
        "then:\n"
        "  note: write a note from {good, bad}\n"
        '  out: vodou.echo {"value": "{note}"}\n'
    )
    res = cli("run", recipe, "--json", expect=0)
    show = cli("show", res.json()["run"], "--json", expect=0).json()
    assert {n["node"]: n["state"] for n in show["nodes"]}["note"] == "succeeded"
    runs_db = cli.store
    import sqlite3

    (out,) = sqlite3.connect(runs_db).execute("SELECT output_json FROM nodes WHERE node_id='note'").fetchone()
    text = json.loads(out)
    assert "present value" in text and "missing: bad" in text


def test_write_uses_a_model_through_llm(cli, tmp_path):
    pytest.importorskip("llm_echo")
    recipe = tmp_path / "model.recipe"
    recipe.write_text('src: vodou.echo {"value": "the facts"}\nnote: write a summary from {src}\n')
    cli("run", recipe, "--json", "--model", "echo", expect=0)
    import sqlite3

    (out,) = sqlite3.connect(cli.store).execute("SELECT output_json FROM nodes WHERE node_id='note'").fetchone()
    text = json.loads(out)
    assert "the facts" in text and "offline writer" not in text


def test_a_recipe_can_name_its_model(cli, tmp_path):
    pytest.importorskip("llm_echo")
    recipe = tmp_path / "named.recipe"
    recipe.write_text('model: echo\nsrc: vodou.echo {"value": "the facts"}\nnote: write a summary from {src}\n')
    cli("run", recipe, "--json", expect=0)
    import sqlite3

    (out,) = sqlite3.connect(cli.store).execute("SELECT output_json FROM nodes WHERE node_id='note'").fetchone()
    assert "the facts" in json.loads(out) and "offline writer" not in json.loads(out)


def test_an_executing_effect_is_not_cancelled_by_the_quorum(cli, tmp_path):
    """The quorum is met (``quick`` returns) exactly when the post has reached the chat
    server, so the post is in flight when the join drops it: it must finish anyway."""
    arrivals = tmp_path / "arrivals"
    os.mkfifo(arrivals)
    servers = cli.servers_file(
        {
            # arrival reported first, then a slow body: the drop lands mid-call
            "slack": demo_server(
                "chat_server",
                cli.demo_db,
                VODOU_DEMO_ARRIVALS=str(arrivals),
                VODOU_DEMO_LATENCY="slack_post_message=1500",
            ),
            "lab": demo_server("lab_server", cli.demo_db),
        }
    )
    recipe = tmp_path / "shield.recipe"
    recipe.write_text(
        "together:\n"
        f'  quick: lab.get_arrival {{"fifo": "{arrivals}"}}\n'
        '  post: slack.slack_post_message {"channel": "#daily", "text": "in flight"}\n'
        "    without asking\n"
        "  need: 1 of 2\n"
        "after: vodou.noop {}\n"
    )
    res = cli("run", recipe, "--servers", servers, "--json")
    assert res.code == 0, res.err
    posts = demo_calls(cli.demo_db, tool="slack_post_message")
    assert len(posts) == 1 and posts[0]["outcome"] == "ok"
    from vodou_engine.demo import db as demo

    assert any(m["text"] == "in flight" for m in demo.channel_messages(cli.demo_db, "#daily"))


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout


@pytest.fixture
def git_repo(tmp_path) -> Path:
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q")
    _git(repo, "config", "user.email", "test@example.invalid")
    _git(repo, "config", "user.name", "Test")
    (repo / "a.txt").write_text("one\n")
    _git(repo, "add", "a.txt")
    _git(repo, "commit", "-qm", "first")
    (repo / "a.txt").write_text("two\n")
    return repo


def test_time_and_git_reads_together_commit_gated_once(cli, git_repo):
    servers = cli.servers_file(
        {
            "time": {"command": sys.executable, "args": ["-m", "mcp_server_time"]},
            "git": {"command": sys.executable, "args": ["-m", "mcp_server_git", "--repository", str(git_repo)]},
        }
    )

    def count() -> int:
        return int(_git(git_repo, "rev-list", "--count", "HEAD"))

    assert count() == 1
    first = cli(
        "run", RECIPES / "time-and-git.recipe", "--servers", servers, "--set", f"repo={git_repo}", "--json", expect=3
    ).json()
    assert [p["step"] for p in first["pending"]] == ["commit"]
    assert count() == 1  # staged (`don't ask`), not committed: the commit waits
    assert "a.txt" in _git(git_repo, "diff", "--cached", "--name-only")
    third = cli("approve", first["run"], "commit", "--yes", "--servers", servers, "--json", expect=0).json()
    assert third["state"] == "succeeded"
    assert count() == 2
    assert "checkpoint at" in _git(git_repo, "log", "-1", "--format=%s")
    show = cli("show", first["run"], "--json", expect=0).json()
    nodes = {n["node"]: n for n in show["nodes"]}
    assert max(nodes["now"]["started_at"], nodes["status"]["started_at"]) < min(
        nodes["now"]["ended_at"], nodes["status"]["ended_at"]
    )


def test_a_quorum_cancels_a_read_in_flight_that_followed_another_read_in_its_item(tmp_path):
    """A read that follows another read runs where that one ran (no task of its own):
    it still has a cancel scope of its own, so a quorum met elsewhere cancels it
    mid-call, the server is told, and the run goes on without waiting for it."""
    import trio

    from vodou_engine.runs import Runs
    from vodou_engine.servers import ServerConfig

    log = tmp_path / "rogue.log"
    env = {
        "ROGUE_LOG": str(log),
        "ROGUE_TOOLS": "get_status,get_status_now,get_statuses,post_message",
        "ROGUE_MODES": "get_status_now=hang,get_statuses=held",
        "ROGUE_RELEASE": str(tmp_path / "release"),
        # It reads every line sent before its input closed, SIGTERM or not: the check below
        # is then on what was sent, not on how fast the server reads before it is stopped.
        "ROGUE_READS_TO_THE_END": "1",
    }
    servers = {
        "ops": ServerConfig(
            command=sys.executable, args=["-I", "-S", str(Path(__file__).with_name("rogue_server.py"))], env=env
        )
    }
    recipe = (
        'recipe "a chain dropped mid-call"\n'
        "together:\n"
        "  need: 1 of 2\n"
        "  then:\n"
        "    first: ops.get_status {}\n"
        "    stuck: ops.get_status_now {}\n"
        "  quick: ops.get_statuses {}\n"
    )
    runs = Runs(store=tmp_path / "runs.db", servers=servers, workers=False)
    seen: dict = {}

    async def main():
        driven = trio.Event()
        async with trio.open_nursery() as nursery:

            async def drive():
                seen["report"] = await runs.start("chain.recipe", text=recipe, actor="ana")
                driven.set()

            nursery.start_soon(drive)
            with trio.fail_after(60):
                while len(rogue_calls(log, "get_status_now")) == 0:  # the second read of the item is out
                    await trio.sleep(0.01)
                (tmp_path / "release").write_text("")  # now `quick` answers: the quorum is met
                await driven.wait()

    trio.run(main)
    report = seen["report"]
    assert report.state == "succeeded", report
    nodes = {n.node: n for n in runs.show(report.run).nodes}
    assert nodes["first"].state == "succeeded" and nodes["quick"].state == "succeeded"
    assert nodes["stuck"].state == "cancelled" and "quorum" in (nodes["stuck"].error or "")
    (stuck_call,) = rogue_calls(log, "get_status_now")
    cancelled = [
        json.loads(line) for line in log.read_text().splitlines() if json.loads(line).get("event") == "cancelled"
    ]
    assert [c["request_id"] for c in cancelled] == [stuck_call["id"]]  # the server was told the call is dropped
    runs.close()
