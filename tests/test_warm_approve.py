"""A decision made in another process runs on the warm servers of a live `recipe serve`.

A real `recipe serve` holds a SQLite store; a run started from the CLI parks; `recipe approve`
from the CLI records the decision and the serving process drives the effect on its own
servers. The post is counted in the demo world's own log, with the pid of the server process
that made it: a child of `recipe serve`, not of the approving process. Without a serving
process (or with a socket a dead one left behind, or with `--here`) the approval drives the
run itself, as before, and the post still happens exactly once.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import sys
import tempfile
from pathlib import Path

import pytest
import trio
from conftest import Cli, demo_calls
from web_helpers import Serving

from vodou_engine.runs.handoff import bind_listener, drive_warm, listening, socket_path

# Which process posted (a server `recipe serve` started, or one the approving process did) is
# read from the server's pid: the servers here are their own interpreters, not zygote forks.
pytestmark = pytest.mark.real_server_processes


def project(tmp: Path) -> Path:
    d = tmp / "proj"
    d.mkdir()
    servers = {
        "slack": {
            "command": sys.executable,
            "args": ["-m", "vodou_engine.demo.chat_server"],
            "env": {"VODOU_DEMO_DB": str(tmp / "world.db")},
        }
    }
    (d / "mcp.json").write_text(json.dumps({"mcpServers": servers}))
    (d / "post.recipe").write_text('post: slack.slack_post_message {"channel": "#daily", "text": "hello"}\n')
    return d


def posts(tmp: Path) -> list[dict]:
    return [c for c in demo_calls(tmp / "world.db", tool="slack_post_message") if c["outcome"] == "ok"]


def park(cli: Cli, proj: Path) -> str:
    return json.loads(cli("run", "post.recipe", "--json", cwd=proj, expect=3).out)["run"]


def test_a_cli_approval_runs_on_the_warm_servers_of_recipe_serve(tmp_path):
    cli = Cli(tmp_path)
    proj = project(tmp_path)
    serving = Serving(tmp_path, "--servers", str(proj / "mcp.json")).start()
    try:
        first, second = park(cli, proj), park(cli, proj)
        assert posts(tmp_path) == []
        done = cli("approve", first, "--yes", "--json", cwd=proj, expect=0)
        report = json.loads(done.out)
        assert report["state"] == "succeeded"
        assert report["driven_in"] == f"recipe serve (process {serving.proc.pid})"
        (post,) = posts(tmp_path)
        assert post["pid"] in serving.children(), "the post must come from a server `recipe serve` started"
        # the second approval finds the same server process warm: no new start
        human = cli("approve", second, "--yes", cwd=proj, expect=0)
        assert f"warm servers of recipe serve (process {serving.proc.pid})" in human.out
        assert [p["pid"] for p in posts(tmp_path)] == [post["pid"], post["pid"]]
        # a decision made elsewhere is recorded as that person's, once
        assert [a["state"] for a in json.loads(cli("show", second, "--json", expect=0).out)["approvals"]] == [
            "approved"
        ]
    finally:
        serving.kill()


def test_with_here_or_no_serve_the_approval_drives_the_run_itself(tmp_path):
    cli = Cli(tmp_path)
    proj = project(tmp_path)
    serving = Serving(tmp_path, "--servers", str(proj / "mcp.json")).start()
    try:
        run = park(cli, proj)
        report = json.loads(cli("approve", run, "--yes", "--json", "--here", cwd=proj, expect=0).out)
        assert report.get("driven_in") is None and report["state"] == "succeeded"
        (post,) = posts(tmp_path)
        assert post["pid"] not in serving.children()
    finally:
        serving.kill()
    # serve was killed: its socket file is left behind, nothing listens on it
    path = socket_path(str(tmp_path / "runs.db"))
    assert path is not None and os.path.exists(path)
    run = park(cli, proj)
    report = json.loads(cli("approve", run, "--yes", "--json", cwd=proj, expect=0).out)
    assert report["state"] == "succeeded" and report.get("driven_in") is None
    assert len(posts(tmp_path)) == 2


def test_a_request_that_is_not_one_drives_nothing(tmp_path):
    """The socket only takes `{"run": ID}`; anything else is closed unanswered and changes nothing."""
    cli = Cli(tmp_path)
    proj = project(tmp_path)
    serving = Serving(tmp_path, "--servers", str(proj / "mcp.json")).start()
    try:
        run = park(cli, proj)
        path = socket_path(str(tmp_path / "runs.db"))
        assert path is not None
        assert oct(os.stat(os.path.dirname(path)).st_mode & 0o777) == "0o700"
        for junk in (b'{"run": "' + run.encode() + b'", "approve": true}\n', b"x" * 10000 + b"\n", b"\n"):
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
                s.connect(path)
                s.sendall(junk)
                s.shutdown(socket.SHUT_WR)
                assert s.recv(100) == b""
        # a well-formed request for a parked, undecided run drives it to the same question
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.connect(path)
            s.sendall(json.dumps({"run": run}).encode() + b"\n")
            reply = json.loads(s.makefile().readline())
        assert reply["report"]["state"] == "parked"
        assert posts(tmp_path) == []
        assert json.loads(cli("show", run, "--json", expect=0).out)["state"] == "parked"
    finally:
        serving.proc.send_signal(signal.SIGTERM)
        serving.kill()


def test_a_serve_whose_servers_differ_hands_the_run_back(tmp_path):
    """`recipe serve` on the embedded demo servers may not drive a run bound to proj/mcp.json's
    slack: it refuses, and the approving process drives the run on the run's own servers."""
    cli = Cli(tmp_path)
    proj = project(tmp_path)
    serving = Serving(tmp_path).start()
    try:
        run = park(cli, proj)
        report = json.loads(cli("approve", run, "--yes", "--json", cwd=proj, expect=0).out)
        assert report["state"] == "succeeded" and report.get("driven_in") is None
        (post,) = posts(tmp_path)
        assert post["pid"] not in serving.children()
        assert "handed back to the approving process" in serving.log.read_text()
    finally:
        serving.kill()


def test_looking_for_a_warm_process_leaves_no_trace(tmp_path, monkeypatch):
    """An approval with no serve running only looks for a listener: the private socket
    directory is made by the process that listens, not by every caller."""
    run_dir = Path(tempfile.mkdtemp(prefix="xdg-"))  # short: a socket's path has a length limit
    try:
        monkeypatch.setenv("XDG_RUNTIME_DIR", str(run_dir))
        store = str(tmp_path / "runs.db")
        assert socket_path(store) is None and not listening(store)
        assert trio.run(drive_warm, store, "r-1") is None
        assert not (run_dir / "vodou").exists()
        bound = bind_listener(store)
        assert bound is not None
        sock, path = bound
        with sock:
            assert path == socket_path(store) and listening(store)
            assert oct((run_dir / "vodou").stat().st_mode & 0o777) == "0o700"
    finally:
        shutil.rmtree(run_dir)


def test_a_runtime_dir_too_long_for_a_socket_still_reaches_the_warm_serve(tmp_path, monkeypatch):
    """A socket's path is at most 107 bytes (sun_path); under a longer $XDG_RUNTIME_DIR the
    socket goes in this user's private directory under /tmp instead, and the approving
    process, with the same environment, finds it there."""
    long_dir = tmp_path / ("run-" + "r" * 120)
    long_dir.mkdir(mode=0o700)
    cli = Cli(tmp_path)
    cli.env["XDG_RUNTIME_DIR"] = str(long_dir)
    proj = project(tmp_path)
    serving = Serving(tmp_path, "--servers", str(proj / "mcp.json"), env={"XDG_RUNTIME_DIR": str(long_dir)}).start()
    try:
        run = park(cli, proj)
        report = json.loads(cli("approve", run, "--yes", "--json", cwd=proj, expect=0).out)
        assert report["state"] == "succeeded"
        assert report["driven_in"] == f"recipe serve (process {serving.proc.pid})"
        (post,) = posts(tmp_path)
        assert post["pid"] in serving.children()
        monkeypatch.setenv("XDG_RUNTIME_DIR", str(long_dir))
        path = socket_path(str(tmp_path / "runs.db"))
        assert path is not None and len(os.fsencode(path)) < 108 and not path.startswith(str(long_dir))
        st = os.stat(os.path.dirname(path))
        assert (st.st_uid, oct(st.st_mode & 0o777)) == (os.getuid(), "0o700")
        assert "will not run on this process's warm servers" not in serving.log.read_text()
    finally:
        serving.kill()


def test_a_serve_with_no_private_directory_for_its_socket_says_so_once(tmp_path):
    """A socket directory that others may enter is not used: serve says so in its log, once,
    with what to do, and a decision made elsewhere is driven by the deciding process."""
    run_dir = Path(tempfile.mkdtemp(prefix="xdg-"))  # short: a socket's path has a length limit
    try:
        (run_dir / "vodou").mkdir(mode=0o755)
        os.chmod(run_dir / "vodou", 0o755)
        cli = Cli(tmp_path)
        cli.env["XDG_RUNTIME_DIR"] = str(run_dir)
        proj = project(tmp_path)
        serving = Serving(tmp_path, "--servers", str(proj / "mcp.json"), env={"XDG_RUNTIME_DIR": str(run_dir)})
        serving.start()
        try:
            run = park(cli, proj)
            report = json.loads(cli("approve", run, "--yes", "--json", cwd=proj, expect=0).out)
            assert report["state"] == "succeeded" and report.get("driven_in") is None
            log = serving.log.read_text()
            assert log.count("will not run on this process's warm servers") == 1
            assert f"{run_dir / 'vodou'} cannot be made, or is not this user's alone" in log
            assert "set XDG_RUNTIME_DIR to a private directory" in log
        finally:
            serving.kill()
    finally:
        shutil.rmtree(run_dir)
