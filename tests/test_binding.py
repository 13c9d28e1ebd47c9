"""A run is bound to the servers it was approved against.

A run parked in projA/ (whose mcp.json maps `slack` to a sandbox) must never be
approved into another directory's `slack`. The CLI run from each directory (in this
process, with that working directory), real demo servers; posts are counted in each
demo world's own log.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
from conftest import demo_calls

RECIPE = 'post: slack.slack_post_message {"channel": "#daily", "text": "hello"}\n'


def project(root: Path, name: str, demo_db: Path) -> Path:
    d = root / name
    d.mkdir()
    servers = {
        "slack": {
            "command": sys.executable,
            "args": ["-m", "vodou_engine.demo.chat_server"],
            "env": {"VODOU_DEMO_DB": str(demo_db)},
        }
    }
    (d / "mcp.json").write_text(json.dumps({"mcpServers": servers}))
    return d


def posts(db: Path) -> list[dict]:
    return [c for c in demo_calls(db, tool="slack_post_message") if c["outcome"] == "ok"]


class Ran:
    """What a finished `recipe` process would show: returncode, stdout, stderr."""

    def __init__(self, res):
        self.returncode, self.stdout, self.stderr = res.code, res.out, res.err


def run_in(cli, cwd: Path, *args: str, expect: int | None = None) -> Ran:
    return Ran(cli(*args, cwd=cwd, expect=expect))


def test_a_run_is_approved_only_against_the_servers_it_was_started_with(cli, tmp_path):
    sandbox, production = tmp_path / "sandbox.db", tmp_path / "production.db"
    proj_a = project(tmp_path, "projA", sandbox)
    elsewhere = project(tmp_path, "elsewhere", production)
    (proj_a / "post.recipe").write_text(RECIPE)
    parked = json.loads(run_in(cli, proj_a, "run", "post.recipe", "--json", expect=3).stdout)
    run = parked["run"]
    # the card names which slack this is
    assert str(proj_a / "mcp.json") in parked["pending"][0]["card"]

    # elsewhere/ maps slack to production: refused, naming the server and the difference
    refused = run_in(cli, elsewhere, "approve", run, "--yes")
    assert refused.returncode == 5, refused.stderr
    assert "'slack'" in refused.stderr and "VODOU_DEMO_DB" in refused.stderr and "nothing was run" in refused.stderr
    assert str(proj_a / "mcp.json") in refused.stderr  # where the run's own servers are
    # so is a --servers file or $VODOU_SERVERS that says the same
    other = run_in(cli, tmp_path, "approve", run, "--yes", "--servers", str(elsewhere / "mcp.json"))
    assert other.returncode == 5 and "'slack'" in other.stderr
    assert posts(sandbox) == [] and posts(production) == []
    show = json.loads(run_in(cli, tmp_path, "show", run, "--json", expect=0).stdout)
    assert show["state"] == "parked" and [a["state"] for a in show["approvals"]] == ["pending"]  # nothing was recorded

    # from a directory with no server file of its own, the run's own file is used
    nowhere = tmp_path / "nowhere"
    nowhere.mkdir()
    run_in(cli, nowhere, "approve", run, "--yes", expect=0)
    assert len(posts(sandbox)) == 1 and posts(production) == []


def test_a_server_file_edited_after_the_question_is_refused(cli, tmp_path):
    sandbox = tmp_path / "sandbox.db"
    proj = project(tmp_path, "proj", sandbox)
    (proj / "post.recipe").write_text(RECIPE)
    run = json.loads(run_in(cli, proj, "run", "post.recipe", "--json", expect=3).stdout)["run"]
    servers = json.loads((proj / "mcp.json").read_text())
    servers["mcpServers"]["slack"]["args"] = ["-m", "vodou_engine.demo.chat_server", "--verbose"]
    (proj / "mcp.json").write_text(json.dumps(servers))
    refused = run_in(cli, proj, "approve", run, "--yes")
    assert refused.returncode == 5 and "args" in refused.stderr
    assert posts(sandbox) == []


def test_the_binding_is_in_the_fingerprint_and_holds_no_secret_value(cli, tmp_path):
    secret = "s3cr3t-value-that-must-not-be-stored"
    proj = tmp_path / "proj"
    proj.mkdir()
    servers = {
        "slack": {
            "command": sys.executable,
            "args": ["-m", "vodou_engine.demo.chat_server"],
            "env": {"VODOU_DEMO_DB": str(tmp_path / "d.db"), "API_TOKEN": secret},
        }
    }
    (proj / "mcp.json").write_text(json.dumps({"mcpServers": servers}))
    (proj / "post.recipe").write_text(RECIPE)
    parked = json.loads(run_in(cli, proj, "run", "post.recipe", "--json", expect=3).stdout)
    import sqlite3

    conn = sqlite3.connect(cli.store)
    (bindings,) = conn.execute("SELECT servers_json FROM runs").fetchone()
    conn.close()
    slack = json.loads(bindings)["slack"]
    assert set(slack["env"]) == {"VODOU_DEMO_DB", "API_TOKEN"} and secret not in bindings
    assert slack["executable"] == sys.executable
    for path in cli.tmp.glob("runs.db*"):
        assert secret.encode() not in path.read_bytes()
    assert secret not in json.dumps(parked)

    from vodou_engine.binding import ServerBinding, digest
    from vodou_engine.runtime.freeze import card_doc, payload_fingerprint

    (pending,) = parked["pending"]
    conn = sqlite3.connect(cli.store)
    payload, policy, approvers = (
        json.loads(v)
        for v in conn.execute("SELECT payload_json, policy_json, approvers_json FROM approvals").fetchone()
    )
    conn.close()
    card = card_doc(approvers=approvers, source=slack["source"])
    bound = ServerBinding(**{k: v for k, v in slack.items() if k != "source"})
    with_binding = payload_fingerprint(
        run_id=parked["run"],
        node_id="post",
        address="slack.slack_post_message",
        payload=payload,
        policy=policy,
        server=digest(bound),
        card=card,
    )
    without = payload_fingerprint(
        run_id=parked["run"],
        node_id="post",
        address="slack.slack_post_message",
        payload=payload,
        policy=policy,
        card=card,
    )
    assert pending["fingerprint"] == with_binding != without


# --- what actually runs: the directory a server starts in, and the files it reaches ----------------
#
# Each place holds a chat server of its own (chat.py: tests/rogue_server.py run from there, logging
# every call to calls.log next to the script, so each copy's log is its own) and an mcp.json naming
# it relatively. The same text means another server in another place: a run must reach the one it
# was started with, or be refused.

OPS = 'post: ops.post_message {"channel": "#daily", "text": "hello"}\n'
CHAT = """import os, runpy
os.environ["ROGUE_LOG"] = os.path.join(os.path.dirname(os.path.abspath(__file__)), "calls.log")
runpy.run_path({rogue!r}, run_name="__main__")
"""


def chat_script(path: Path, *, shebang: bool = False, extra: str = "") -> Path:
    from conftest import ROGUE

    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text((f"#!{sys.executable}\n" if shebang else "") + CHAT.format(rogue=ROGUE) + extra)
    if shebang:
        path.chmod(0o755)
    return path


def place(root: Path, name: str, entry: dict, script: str = "chat.py", **kwargs) -> Path:
    """``root/name`` with its own chat server at ``script`` and an mcp.json naming ``entry`` as ``ops``."""
    d = root / name
    chat_script(d / script, **kwargs)
    (d / "mcp.json").write_text(json.dumps({"mcpServers": {"ops": entry}}))
    (d / "post.recipe").write_text(OPS)
    return d


def server_log(d: Path) -> list[dict]:
    f = d / "calls.log"
    return [json.loads(line) for line in f.read_text().splitlines() if line.strip()] if f.exists() else []


def posted(d: Path) -> int:
    return sum(1 for r in server_log(d) if r.get("tool") == "post_message")


def started(d: Path) -> int:
    return sum(1 for r in server_log(d) if r.get("event") == "start")


def park(cli, d: Path) -> tuple[str, str]:
    parked = json.loads(run_in(cli, d, "run", "post.recipe", "--json", expect=3).stdout)
    return parked["run"], parked["pending"][0]["fingerprint"]


@pytest.mark.parametrize(
    "entry, script",
    [
        ({"command": sys.executable, "args": ["chat.py"]}, "chat.py"),
        ({"command": sys.executable, "args": ["-m", "chat"]}, "chat.py"),
        ({"command": "./server.py"}, "server.py"),
        ({"command": "chatsrv", "env": {"PATH": f"bin{os.pathsep}/usr/bin{os.pathsep}/bin"}}, "bin/chatsrv"),
    ],
    ids=["relative-script", "dash-m-module", "relative-command", "relative-path-entry"],
)
def test_a_run_parked_in_one_directory_and_approved_from_another_posts_through_its_own_server(
    cli, tmp_path, entry, script
):
    shebang = entry["command"] != sys.executable
    a = place(tmp_path, "a", entry, script, shebang=shebang)
    b = place(tmp_path, "b", entry, script, shebang=shebang)
    run, fp = park(cli, a)

    # b/ has a server file of its own saying the same text, and a chat server of its own
    run_in(cli, b, "approve", run, "post", "--yes", "--fingerprint", fp, expect=0)
    log_dir = (a / script).parent
    assert posted(log_dir) == 1
    assert server_log(b / Path(script).parent) == []  # b/'s server never even started
    card = json.loads(run_in(cli, a, "show", run, "--json", expect=0).stdout)["approvals"][0]["card"]
    assert f"in {os.path.realpath(a)}" in card  # the card says where the server runs


@pytest.mark.parametrize("args", [["chat.py"], ["-m", "chat"]], ids=["relative-script", "dash-m-module"])
def test_a_script_edited_since_the_run_started_is_refused(cli, tmp_path, args):
    a = place(tmp_path, "a", {"command": sys.executable, "args": args})
    run, fp = park(cli, a)
    chat_script(a / "chat.py", extra="# edited\n")  # the same place, another program

    refused = run_in(cli, a, "approve", run, "post", "--yes", "--fingerprint", fp)
    assert refused.returncode == 5, refused.stderr
    label = "args[0] 'chat.py'" if args == ["chat.py"] else "-m chat: chat.py"
    assert f"{label}: {os.path.realpath(a / 'chat.py')} changed since the run started" in refused.stderr
    assert "nothing was run" in refused.stderr and "Traceback" not in refused.stderr
    assert "hint: the server file says the same, but what it starts differs here" in refused.stderr
    assert posted(a) == 0 and started(a) == 1  # only the run's own start: the refusal started nothing
    show = json.loads(run_in(cli, a, "show", run, "--json", expect=0).stdout)
    assert show["state"] == "parked" and [x["state"] for x in show["approvals"]] == ["pending"]


def test_a_module_that_appears_in_the_directory_and_would_shadow_the_installed_one_is_refused(cli, tmp_path):
    # -m vodou_engine.demo.chat_server is found installed when the run starts; a vodou_engine/
    # package planted in the run's directory afterwards would be imported first (python -m puts
    # the working directory first on sys.path)
    a = tmp_path / "a"
    a.mkdir()
    (a / "mcp.json").write_text(
        json.dumps(
            {
                "mcpServers": {
                    "slack": {
                        "command": sys.executable,
                        "args": ["-m", "vodou_engine.demo.chat_server"],
                        "env": {"VODOU_DEMO_DB": str(tmp_path / "d.db")},
                    }
                }
            }
        )
    )
    (a / "post.recipe").write_text(RECIPE)
    run = json.loads(run_in(cli, a, "run", "post.recipe", "--json", expect=3).stdout)["run"]
    (a / "vodou_engine" / "demo").mkdir(parents=True)
    (a / "vodou_engine" / "__init__.py").write_text("")
    (a / "vodou_engine" / "demo" / "__init__.py").write_text("")
    (a / "vodou_engine" / "demo" / "chat_server.py").write_text("raise SystemExit('planted')\n")
    refused = run_in(cli, tmp_path, "approve", run, "--yes")
    assert refused.returncode == 5, refused.stderr
    assert "-m vodou_engine.demo.chat_server: vodou_engine/demo/chat_server.py: reaches" in refused.stderr
    assert posts(tmp_path / "d.db") == []


def test_a_link_swapped_to_another_copy_of_the_script_is_refused(cli, tmp_path):
    a = tmp_path / "a"
    chat_script(a / "v1" / "chat.py")
    chat_script(a / "v2" / "chat.py")  # the same bytes: only where it is differs
    (a / "chat.py").symlink_to(a / "v1" / "chat.py")
    place_files = {"command": sys.executable, "args": ["chat.py"]}
    (a / "mcp.json").write_text(json.dumps({"mcpServers": {"ops": place_files}}))
    (a / "post.recipe").write_text(OPS)
    run, fp = park(cli, a)
    (a / "chat.py").unlink()
    (a / "chat.py").symlink_to(a / "v2" / "chat.py")

    refused = run_in(cli, a, "approve", run, "post", "--yes", "--fingerprint", fp)
    assert refused.returncode == 5, refused.stderr
    v1, v2 = (os.path.realpath(a / v / "chat.py") for v in ("v1", "v2"))
    assert f"args[0] 'chat.py': the run had {v1}, here it is {v2}" in refused.stderr
    assert posted(a / "v1") == 0 and server_log(a / "v2") == []


def test_with_cwd_in_the_server_file_the_run_starts_its_server_where_it_did_and_another_projects_cwd_is_refused(
    cli, tmp_path
):
    entry = {"command": sys.executable, "args": ["chat.py"], "cwd": "srv"}
    a = tmp_path / "a"
    chat_script(a / "srv1" / "chat.py")
    chat_script(a / "srv2" / "chat.py")
    (a / "srv").symlink_to(a / "srv1")
    (a / "mcp.json").write_text(json.dumps({"mcpServers": {"ops": entry}}))
    (a / "post.recipe").write_text(OPS)
    b = place(tmp_path, "b", entry, "srv/chat.py")
    run, fp = park(cli, a)

    # another project's file says the same "cwd", relative to itself: another directory
    refused = run_in(cli, b, "approve", run, "post", "--yes", "--fingerprint", fp)
    assert refused.returncode == 5 and "cwd: the run has" in refused.stderr, refused.stderr
    # a/srv now leads elsewhere: the run's server still starts where it started, a/srv1
    (a / "srv").unlink()
    (a / "srv").symlink_to(a / "srv2")
    run_in(cli, a, "approve", run, "post", "--yes", "--fingerprint", fp, expect=0)
    assert posted(a / "srv1") == 1 and server_log(a / "srv2") == [] and server_log(b / "srv") == []


def test_a_server_started_with_another_path_or_home_is_refused(cli, tmp_path):
    a = place(tmp_path, "a", {"command": sys.executable, "args": ["chat.py"]})
    run, fp = park(cli, a)
    other_bin = tmp_path / "bin"
    other_bin.mkdir()
    for var, value in (("PATH", f"{other_bin}{os.pathsep}{os.environ['PATH']}"), ("HOME", str(tmp_path / "elsewhere"))):
        refused = run_in_env(cli, a, {var: value}, "approve", run, "post", "--yes", "--fingerprint", fp)
        assert refused.returncode == 5, refused.stderr
        assert f"inherited {var}: a different value here" in refused.stderr and value not in refused.stderr
    assert posted(a) == 0 and started(a) == 1
    run_in(cli, a, "approve", run, "post", "--yes", "--fingerprint", fp, expect=0)
    assert posted(a) == 1


def run_in_env(cli, cwd: Path, env: dict, *args: str) -> Ran:
    return Ran(cli(*args, cwd=cwd, env=env))


def as_stored_before_start_directories(cli, run: str) -> str:
    """Rewrite the run as a version that did not record start directories stored it: its
    bindings without ``workdir``, ``files`` and ``inherited``, and its question fingerprinted
    over that binding. The fingerprint to approve."""
    import msgspec

    from vodou_engine.binding import decode_bindings, digest, encode_bindings
    from vodou_engine.runtime.freeze import payload_fingerprint

    ((servers_json,),) = cli.sql("SELECT servers_json FROM runs WHERE id = ?", (run,))
    old = {
        n: msgspec.structs.replace(b, workdir=None, files={}, inherited={})
        for n, b in decode_bindings(servers_json).items()
    }
    cli.sql("UPDATE runs SET servers_json = ? WHERE id = ?", (encode_bindings(old), run))
    ((approval, step, payload, policy),) = cli.sql(
        "SELECT id, step, payload_json, policy_json FROM approvals WHERE run_id = ? AND state = 'pending'", (run,)
    )
    fp = payload_fingerprint(
        run_id=run,
        node_id=step,
        address="ops.post_message",
        payload=json.loads(payload),
        policy=json.loads(policy),
        server=digest(old["ops"]),
    )
    cli.sql("UPDATE approvals SET fingerprint = ? WHERE id = ?", (fp, approval))
    return fp


def test_a_run_stored_before_start_directories_is_approvable_only_if_its_servers_name_nothing_relative(cli, tmp_path):
    rel = place(tmp_path, "rel", {"command": sys.executable, "args": ["chat.py"]})
    run, _ = park(cli, rel)
    fp = as_stored_before_start_directories(cli, run)
    # where chat.py was, or any other directory with one: which chat.py the run meant is not recorded
    refused = run_in(cli, rel, "approve", run, "post", "--yes", "--fingerprint", fp)
    assert refused.returncode == 5, refused.stderr
    assert (
        "args[0] 'chat.py' is found from the directory the server starts in, which the run did not record"
        in refused.stderr
    )
    assert posted(rel) == 0 and started(rel) == 1

    # named by absolute paths only, it reaches the same files from anywhere: approvable, as before
    absolute = tmp_path / "abs"
    place(tmp_path, "abs", {"command": sys.executable, "args": [str(absolute / "chat.py")]})
    run, _ = park(cli, absolute)
    fp = as_stored_before_start_directories(cli, run)
    nowhere = tmp_path / "nowhere"
    nowhere.mkdir()
    run_in(cli, nowhere, "approve", run, "post", "--yes", "--fingerprint", fp, expect=0)
    assert posted(absolute) == 1


# --- recipe serve and workers: warm servers are the run's own ----------------------------------------

SAFETY = 60  # a broken service fails the test instead of hanging it


def approve_in_service(svc, run: str, fp: str, *, then=None) -> None:
    """``svc`` serving; the run's question approved through it (as the inbox does), and waited
    for until the run ends; then ``then(svc)`` (async) while it still serves."""
    import trio

    from vodou_engine.runs import os_user

    async def main():
        async with trio.open_nursery() as nursery:
            await nursery.start(svc.serve)
            try:
                await svc.approve(run, "post", actor=os_user(), fingerprint=fp, proof="test")
                runs = svc.runs()
                try:
                    with trio.fail_after(SAFETY):
                        while runs.show(run).state not in ("succeeded", "failed"):
                            await trio.sleep(0.02)
                    if then is not None:
                        await then(svc, runs)
                finally:
                    runs.close()
            finally:
                svc.stop()

    trio.run(main)


def test_serve_started_in_another_directory_drives_a_run_on_the_servers_of_its_own(cli, tmp_path, monkeypatch):
    from vodou_engine.servers import load_servers
    from vodou_engine.service import Service

    entry = {"command": sys.executable, "args": ["chat.py"]}
    a, b = place(tmp_path, "a", entry), place(tmp_path, "b", entry)
    run, fp = park(cli, a)
    monkeypatch.chdir(b)  # recipe serve started in b/, with b/'s server file
    svc = Service(store=cli.location, servers=load_servers(b / "mcp.json"), schedule=False)
    approve_in_service(svc, run, fp)
    assert posted(a) == 1 and server_log(b) == []


def test_serve_refuses_a_run_whose_script_changed_and_restarts_a_warm_server_whose_script_changed(
    cli, tmp_path, monkeypatch
):
    import trio

    from vodou_engine.errors import ServerMismatchError
    from vodou_engine.servers import load_servers
    from vodou_engine.service import Service

    a = place(tmp_path, "a", {"command": sys.executable, "args": ["chat.py"]})
    monkeypatch.chdir(a)
    svc = Service(store=cli.location, servers=load_servers(a / "mcp.json"), schedule=False)
    svc.runs().save("post.recipe", text=OPS, by="ana")
    v2 = a / "v2"
    v2.mkdir()

    async def main():
        from vodou_engine.runs import os_user

        async with trio.open_nursery() as nursery:
            await nursery.start(svc.serve)
            runs = svc.runs()

            async def parked(run_id):
                with trio.fail_after(SAFETY):
                    while True:
                        try:
                            view = runs.show(run_id)
                        except Exception:  # noqa: BLE001 - not stored yet
                            view = None
                        if view is not None and view.state == "parked" and view.approvals:
                            return view.approvals[0].fingerprint
                        await trio.sleep(0.02)

            first = svc.start_saved("post", inputs=None, actor=os_user())
            fp1 = await parked(first)  # its server is warm now
            # chat.py edited: it now logs to v2/calls.log
            (a / "chat.py").write_text(
                (a / "chat.py")
                .read_text()
                .replace('os.path.abspath(__file__)), "calls.log"', 'os.path.abspath(__file__)), "v2", "calls.log"')
            )
            with pytest.raises(ServerMismatchError, match="changed since the run started"):
                await svc.approve(first, "post", actor=os_user(), fingerprint=fp1, proof="test")
            second = svc.start_saved("post", inputs=None, actor=os_user())  # bound to the edited script
            fp2 = await parked(second)
            await svc.approve(second, "post", actor=os_user(), fingerprint=fp2, proof="test")
            with trio.fail_after(SAFETY):
                while runs.show(second).state != "succeeded":
                    await trio.sleep(0.02)
            assert runs.show(first).state == "parked"
            runs.close()
            svc.stop()

    trio.run(main)
    # the second run's post reached a server running the edited script, not the warm one
    assert posted(v2) == 1 and posted(a) == 0


@pytest.mark.postgres
def test_a_worker_started_in_another_directory_drives_a_run_on_the_servers_of_its_own(tmp_path):
    import trio
    from conftest import Cli
    from workers_helpers import Workers, fresh_schema, run_states, wait_for

    from vodou_engine.runs import Runs, os_user

    entry = {"command": sys.executable, "args": ["chat.py"]}
    a, b = place(tmp_path, "a", entry), place(tmp_path, "b", entry)
    with fresh_schema() as url, Workers(url, b / "mcp.json", b) as workers:  # the worker runs in b/
        cli = Cli(tmp_path, url)
        run, fp = park(cli, a)
        workers.start(1, concurrency=2, recipe=True)
        workers.wait_ready(1)

        async def approve():
            runs = Runs(store=url, servers=str(b / "mcp.json"))
            try:
                report = await runs.approve(run, "post", actor=os_user(), fingerprint=fp, proof="test")
                assert report.queued
            finally:
                runs.close()

        trio.run(approve)
        wait_for(lambda: run_states(url, [run])[run] == "succeeded", "the worker to drive the run", timeout=120)
        assert workers.stop() == [0], workers.logs()
    assert posted(a) == 1 and server_log(b) == []


def test_warm_servers_handed_to_the_run_api_from_another_directory_are_refused_before_the_decision(
    cli, tmp_path, monkeypatch
):
    import trio

    from vodou_engine.errors import ServerMismatchError
    from vodou_engine.runs import Runs, os_user
    from vodou_engine.servers import load_servers
    from vodou_engine.tools.hub import open_hub

    entry = {"command": sys.executable, "args": ["chat.py"]}
    a, b = place(tmp_path, "a", entry), place(tmp_path, "b", entry)
    run, fp = park(cli, a)
    monkeypatch.chdir(b)
    servers = load_servers(b / "mcp.json")

    async def main():
        runs = Runs(store=cli.location, servers=servers)
        try:
            async with open_hub(servers.servers, ["ops"]) as hub:  # b/'s server, warm in b/
                with pytest.raises(ServerMismatchError, match="the warm one was started in"):
                    await runs.approve(run, "post", actor=os_user(), fingerprint=fp, proof="test", hub=hub)
                with pytest.raises(ServerMismatchError, match="the warm one was started in"):
                    await runs.resume(run, hub=hub)
        finally:
            runs.close()

    trio.run(main)
    assert posted(a) == 0 and posted(b) == 0
    show = json.loads(run_in(cli, a, "show", run, "--json", expect=0).stdout)
    assert show["state"] == "parked" and [x["state"] for x in show["approvals"]] == ["pending"]
