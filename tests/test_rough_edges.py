"""Rough edges of the services and the CLI's messages, each proven from outside.

A busy port for ``recipe serve``; the workers extra missing for ``recipe worker``
and ``run --queue`` (an import blocked in the child process by a
``sitecustomize`` shim); the events a service logs (text and JSON); the
``approve:`` line a parked run prints; the hints and docs that named the wrong
command; the demo's briefing that quoted itself.
"""

from __future__ import annotations

import json
import logging
import os
import shlex
import socket
import sys
from pathlib import Path

import pytest
import trio
from conftest import demo_calls
from web_helpers import Serving, form, path_of, wait_for

from vodou_engine import logs
from vodou_engine.policy import Policy
from vodou_engine.runs import Runs

ROOT = Path(__file__).resolve().parent.parent

BLOCKER = """
import os, sys
_blocked = tuple(filter(None, os.environ.get("BLOCK_IMPORTS", "").split(",")))
class _Block:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in _blocked:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None
sys.meta_path.insert(0, _Block())
"""


def no_traceback(text: str) -> None:
    assert "Traceback" not in text and "ExceptionGroup" not in text, text


# --- serve on a busy port -----------------------------------------------------------------------------


def test_serve_on_a_busy_port_says_so_in_one_line_and_exits_2(cli):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        res = cli.proc("serve", "--port", str(port), expect=2, timeout=60)
    no_traceback(res.err)
    lines = res.err.strip().splitlines()
    assert len(lines) == 2, res.err  # the error and its hint
    assert f"cannot listen on 127.0.0.1:{port}" in lines[0] and "already listens" in lines[0]
    assert "nothing was started" in lines[0]
    assert "--port" in lines[1]


# --- the workers extra --------------------------------------------------------------------------------


@pytest.fixture
def blocked(cli):
    shim = cli.tmp / "shim"
    shim.mkdir()
    (shim / "sitecustomize.py").write_text(BLOCKER)

    def env(module: str) -> dict[str, str]:
        path = os.pathsep.join([str(shim), *filter(None, [cli.env.get("PYTHONPATH")])])
        return {"PYTHONPATH": path, "BLOCK_IMPORTS": module}

    return env


@pytest.mark.parametrize("missing", ["procrastinate", "psycopg"])
def test_worker_without_the_workers_extra_exits_7_with_the_install_hint(cli, blocked, missing):
    res = cli.proc("worker", "--store", "postgresql://127.0.0.1/none", env=blocked(missing), expect=7)
    no_traceback(res.err)
    assert "not installed" in res.err and "vodou_engine[workers]" in res.err


@pytest.mark.parametrize("missing", ["procrastinate", "psycopg"])
def test_run_queue_without_the_workers_extra_exits_7_with_the_install_hint(cli, blocked, missing):
    (cli.tmp / "hi.recipe").write_text('recipe "hi"\nsay: vodou.echo {"value": "hi"}\n')
    res = cli.proc(
        "run", "--queue", "hi.recipe", "--store", "postgresql://127.0.0.1/none", env=blocked(missing), expect=7
    )
    no_traceback(res.err)
    assert "nothing was queued" in res.err and "vodou_engine[workers]" in res.err


# --- the events a service logs ------------------------------------------------------------------------


class Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def events(self) -> list[tuple[str, str | None]]:
        return [(r.vodou["event"], r.vodou.get("step")) for r in self.records]


@pytest.fixture
def heard():
    handler = Lines()
    logs.EVENTS.addHandler(handler)
    level = logs.EVENTS.level
    logs.EVENTS.setLevel(logging.INFO)
    try:
        yield handler
    finally:
        logs.EVENTS.removeHandler(handler)
        logs.EVENTS.setLevel(level)


def test_each_event_of_a_run_and_a_firing_is_one_log_line(tmp_path, heard, monkeypatch):
    monkeypatch.setenv("VODOU_DEMO_DB", str(tmp_path / "demo.db"))
    runs = Runs(store=tmp_path / "runs.db", policy=Policy(), clock=lambda: 1_800_000_000.0)
    try:
        text = 'recipe "post"\npost: slack.slack_post_message {"channel": "#daily", "text": "logged"}\n'
        (tmp_path / "post.recipe").write_text(text)
        parked = trio.run(lambda: runs.start(tmp_path / "post.recipe", actor="ana"))
        assert parked.state == "parked"
        done = trio.run(lambda: runs.approve(parked.run, "post", actor="ana"))
        assert done.state == "succeeded"
        run = parked.run
        assert heard.events() == [
            ("started", None),
            ("approval.asked", "approve:post"),
            ("parked", None),
            ("approval.decided", "approve:post"),
            ("resumed", None),
            ("effect.executed", "post"),
            ("succeeded", None),
        ]
        words = [r.getMessage() for r in heard.records]
        assert words[0] == f"run {run} started by ana"
        assert words[2] == f"run {run} parked: waiting for approve:post"
        assert words[3] == f"run {run} step approve:post: approved by ana"
        assert words[5] == f"run {run} step post: effect executed"
        assert words[6] == f"run {run} succeeded"
        assert "logged" not in " ".join(words)  # names and states, never a payload
        # a schedule's firing
        runs.save("hi.recipe", text='recipe "hi"\nsay: vodou.echo {"value": "hi"}\n', by="ana")
        runs.add_schedule("hourly", recipe="hi", cron="0 * * * *", by="ana")
        heard.records.clear()
        (firing,) = runs.due(now=1_800_000_000.0 + 3600)
        assert heard.events() == [("schedule.fired", None)]
        assert heard.records[0].getMessage() == f"schedule hourly fired: run {firing.run_id}"
    finally:
        runs.close()


def test_a_rolled_back_write_logs_nothing(tmp_path, heard):
    runs = Runs(store=tmp_path / "runs.db", servers={}, policy=Policy())
    try:
        done = trio.run(lambda: runs.start("x.recipe", text='recipe "x"\nsay: vodou.echo {"value": 1}\n', actor="ana"))
        store = runs.store()
        heard.records.clear()
        with pytest.raises(RuntimeError), store.transaction():
            store.append_event(done.run, "note")
            raise RuntimeError("rolled back")
        assert heard.records == []
        store.append_event(done.run, "note")
        assert heard.events() == [("note", None)]
    finally:
        runs.close()


def test_json_lines_carry_the_event_fields(capsys):
    record = logging.LogRecord("vodou_engine.events", logging.INFO, __file__, 1, "run r1 parked", None, None)
    record.vodou = {"event": "parked", "run": "r1", "step": None, "waiting": ["post"]}
    doc = json.loads(logs.JsonFormatter().format(record))
    assert doc["event"] == "parked" and doc["run"] == "r1" and doc["waiting"] == ["post"]
    assert doc["message"] == "run r1 parked" and doc["level"] == "INFO" and "step" not in doc


def test_a_bad_log_format_is_a_usage_error(cli):
    res = cli.proc("serve", "--port", "0", env={"VODOU_LOG_FORMAT": "xml"}, expect=2)
    no_traceback(res.err)
    assert "$VODOU_LOG_FORMAT 'xml' is not a log format" in res.err and "text or json" in res.err


def state(runs: Runs, run_id: str) -> str | None:
    try:
        return runs.show(run_id).state
    except Exception:  # noqa: BLE001 - not stored yet
        return None


def test_serve_logs_each_event_as_one_json_line(tmp_path):
    serving = Serving(tmp_path, env={"VODOU_LOG_FORMAT": "json"})
    runs = Runs(store=serving.store, policy=Policy())
    from vodou_engine.web.identity import add_approver

    runs.save(
        "post.recipe",
        text='recipe "post"\npost: slack.slack_post_message {"channel": "#daily", "text": "json-logged"}\n',
        by="ana",
    )
    _, link = add_approver(runs, "ana", by="test")
    serving.start()
    try:
        import httpx2 as httpx

        with httpx.Client(base_url=serving.url) as http:
            page = http.get(path_of(link))
            assert http.post("/signin", data=form(page.text, "/signin"), follow_redirects=False).status_code == 303
            fields = form(http.get("/recipes/post").text, "/recipes/post/run")
            res = http.post("/recipes/post/run", data=fields, follow_redirects=False)
            run_id = res.headers["location"].split("/runs/")[1].split("?")[0]
            wait_for(lambda: state(runs, run_id) == "parked", "the run to park")
            fields = form(http.get(f"/runs/{run_id}").text, f"/runs/{run_id}/approve")
            assert http.post(f"/runs/{run_id}/approve", data=fields).status_code in (200, 303)
            wait_for(lambda: runs.show(run_id).state == "succeeded", "the run to finish")
        code, _ = serving.stop()
    finally:
        serving.kill()
        runs.close()
    assert code == 0
    docs = []
    for line in serving.log.read_text().splitlines():
        if line.startswith(("vodou inbox: ", "  http://")):
            continue  # serve's banner for the person who started it (its address, the first run's sign-in link)
        docs.append(json.loads(line))  # every other line is one JSON object
    mine = [(d["event"], d.get("step")) for d in docs if d.get("run") == run_id]
    assert mine == [
        ("started", None),
        ("approval.asked", "approve:post"),
        ("parked", None),
        ("approval.decided", "approve:post"),
        ("resumed", None),
        ("effect.executed", "post"),
        ("succeeded", None),
    ]
    assert len(demo_calls(serving.demo_db, "slack_post_message")) == 1
    assert not any("json-logged" in json.dumps(d) for d in docs)


# --- the approve: line a parked run prints --------------------------------------------------------------


def printed(res, verb: str) -> list[list[str]]:
    """Each `verb:` command line the run printed, as argv after `recipe`."""
    lines = [line.split(":", 1)[1].strip() for line in (res.out + res.err).splitlines() if line.startswith(f"{verb}:")]
    assert lines, res.out + res.err
    return [shlex.split(line)[1:] for line in lines]


def test_the_printed_approve_line_works_as_printed_without_a_terminal(cli):
    (cli.tmp / "post.recipe").write_text(
        'recipe "post"\npost: slack.slack_post_message {"channel": "#daily", "text": "as printed"}\n'
    )
    parked = cli("run", "post.recipe", expect=3)
    (line,) = printed(parked, "approve")
    assert "--yes" in line
    cli(*line, expect=0)
    assert [c["arguments"]["text"] for c in demo_calls(cli.demo_db, "slack_post_message")] == ["as printed"]


def test_the_printed_approve_line_names_the_approver_when_the_user_is_not_one(cli):
    ana = cli.approver("ana")
    (cli.tmp / "post.recipe").write_text(
        'recipe "post"\napprovers: ana\npost: slack.slack_post_message {"channel": "#daily", "text": "by ana"}\n'
    )
    parked = cli("run", "post.recipe", expect=3)
    (line,) = printed(parked, "approve")
    assert line[-2:] != ["--as", "ana"] and "--as" in line and line[line.index("--as") + 1] == "ana"
    assert "VODOU_APPROVER_TOKEN" in parked.out + parked.err
    (reject,) = printed(parked, "reject")
    assert "--as" in reject
    cli(*line, env=ana, expect=0)
    assert len(demo_calls(cli.demo_db, "slack_post_message")) == 1


# --- words that name the wrong command ---------------------------------------------------------------


def test_a_missing_input_hint_says_set(cli):
    (cli.tmp / "x.recipe").write_text('recipe "x"\ninputs:\n  email\nsay: vodou.echo {"value": "{email}"}\n')
    res = cli("run", "x.recipe", expect=2)
    assert "the recipe needs the input `email`" in res.err
    assert "--set email=VALUE" in res.err
    from vodou_engine.errors import MissingInputError

    runs = Runs(store=cli.tmp / "api.db", servers={})
    try:
        with pytest.raises(MissingInputError) as caught:
            trio.run(lambda: runs.start(cli.tmp / "x.recipe", actor="ana"))
        assert caught.value.code == "input.missing" and caught.value.facts["input"] == "email"
        assert "recipe" not in (caught.value.hint or "") and "--set" not in (caught.value.hint or "")
    finally:
        runs.close()


def test_a_used_sign_in_link_points_at_approver_link_which_keeps_the_secret(tmp_path):
    from starlette.testclient import TestClient

    from vodou_engine.servers import ServerSet
    from vodou_engine.service import Service
    from vodou_engine.web.app import create_app
    from vodou_engine.web.config import WebConfig
    from vodou_engine.web.identity import add_approver, sign_in_link

    svc = Service(store=str(tmp_path / "runs.db"), servers=ServerSet({}, "none"), policy=Policy())
    runs = svc.runs()
    _, link = add_approver(runs, "carol", by="test", base_url="http://testserver")
    app = create_app(svc, WebConfig(allowed_hosts=["testserver"]))
    with TestClient(app, backend="trio", base_url="http://testserver") as client:
        fields = form(client.get(path_of(link)).text, "/signin")
        assert client.post("/signin", data=fields, follow_redirects=False).status_code == 303
        client.cookies.clear()
        again = client.get(path_of(link)).text
        assert "already used" in again
        assert "recipe approver link carol" in again
        fresh = form(
            client.get(path_of(sign_in_link(runs, "carol", by="test", base_url="http://testserver"))).text, "/signin"
        )
        refused = client.post("/signin", data={**fresh, "token": fields["token"]})
        assert refused.status_code == 403 and "recipe approver link" in refused.text
        assert "approver add NAME</code> prints one" not in again
    runs.close()


def test_follow_up_mail_says_what_it_does_one_person_sends_it(cli):
    """It used to say two people must read it; one approver answers its question and approves the send."""
    recipe = ROOT / "recipes" / "follow-up-mail.recipe"
    header = " ".join(line.lstrip("# ") for line in recipe.read_text().splitlines() if line.startswith("#"))
    assert "two people" not in header and "one person may do both" in header
    ana = cli.approver("ana")
    rep = cli("run", str(recipe), "--set", "event=evt-design", "--set", "to=ana@example.com", "--json", expect=3).json()
    decided = 0
    while rep["state"] == "parked":
        step = rep["pending"][0]["step"]
        rep = cli("approve", rep["run"], step, "--yes", "--as", "ana", "--json", env=ana).json()
        decided += 1
    assert rep["state"] == "succeeded" and decided == 2
    assert len(demo_calls(cli.demo_db, "send_message")) == 1


# --- the demo stays the same from run to run -----------------------------------------------------------


def demo_from_here(cli, **slow: int) -> None:
    """./mcp.json: the demo servers as the bundled ones, but running this checkout's code
    (a server inherits only a minimal environment); ``slow``: a tool's latency in ms."""
    latency = ",".join(f"{tool}={ms}" for tool, ms in slow.items())
    env = {"VODOU_DEMO_DB": str(cli.demo_db), "PYTHONPATH": str(ROOT), "VODOU_DEMO_LATENCY": latency}
    cli.servers_file(
        {
            name: {"command": sys.executable, "args": ["-m", f"vodou_engine.demo.{module}"], "env": env}
            for name, module in (
                ("google-calendar", "calendar_server"),
                ("gmail", "mail_server"),
                ("slack", "chat_server"),
            )
        }
    )


def test_the_morning_briefing_does_not_quote_itself_run_after_run(cli):
    """Each briefing quotes the messages that mention @me and is posted as @me; the next
    run's `mentions:me` must not find it, or every briefing nests the one before."""
    demo_from_here(cli, messages_list=20000)  # calendar and slack always make the quorum
    recipe = ROOT / "recipes" / "morning-briefing.recipe"
    sizes = []
    for _ in range(2):  # before the fix the second was twice the first (343 -> 691 -> 1387 -> 2779 bytes)
        parked = cli("run", str(recipe), "--json", expect=3).json()
        cli("approve", parked["run"], "--yes", expect=0)
        posted = demo_calls(cli.demo_db, "slack_post_message")[-1]["arguments"]["text"]
        sizes.append(len(posted))
    assert len(demo_calls(cli.demo_db, "slack_post_message")) == 2
    assert "slack:" in posted and "@me" in posted and "missing: mail" in posted
    assert sizes[-1] == sizes[0], sizes  # the 2nd briefing is the size of the 1st
