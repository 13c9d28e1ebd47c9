"""Bounded input from servers: a message larger than a server's ``maxMessageBytes`` (default
16 MiB) is not read, ends the call and the session, and the engine's memory stays far below
what the server sent; a server that floods its output still meets its call's timeout.

Against real servers: tests/rogue_server.py over stdio (standard library only; it writes its
large answers a piece at a time and never holds them whole) and tests/http_server.py over
streamable HTTP (its large answers are written in front of the SDK's app, as a gateway might).
Calls are counted in the servers' own logs, outcomes read back through the run API.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import trio
from conftest import rogue_calls, rogue_server
from http_server import HttpServer

from vodou_engine.errors import NoReplyError, NotSentError, ServerConfigError
from vodou_engine.runs import Runs
from vodou_engine.servers import ServerConfig, parse_servers
from vodou_engine.tools.hub import open_hub

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="the test servers run in POSIX process groups")

ROGUE = str(Path(__file__).with_name("rogue_server.py"))
READ = 'recipe "ops"\nstatus: ops.get_status {}\n'
POST = 'recipe "ops"\npost: ops.post_message {"channel": "#ops", "text": "hello"}\n'
OVER = 20_000_000
"""A message larger than the default limit of 16 MiB."""
SAFETY = 60.0
"""A callTimeout far beyond what any of these calls needs: only a safety net."""


def rogue_runs(tmp: Path, modes: str, **config) -> Runs:
    env = {"ROGUE_LOG": str(tmp / "rogue.log"), "ROGUE_MODES": modes}
    server = ServerConfig(
        command=sys.executable, args=["-I", "-S", ROGUE], env=env, **{"call_timeout": SAFETY, **config}
    )
    return Runs(store=tmp / "runs.db", servers={"ops": server})


def start(runs: Runs, text: str):
    return trio.run(lambda: runs.start("ops.recipe", text=text, actor="ana"))


# -- stdio -------------------------------------------------------------------------


@pytest.mark.parametrize("mode", [f"huge_result:{OVER}", f"huge_error:{OVER}", f"huge_note:{OVER}", "endless"])
def test_a_read_over_the_size_limit_fails_naming_the_server_the_size_and_the_setting(tmp_path, mode):
    """A reply, an error, a notification, or a line that never ends: each is given up at
    16 MiB, and the step fails saying which server, how much and what to raise."""
    runs = rogue_runs(tmp_path, f"get_status={mode}")
    try:
        report = start(runs, READ)
    finally:
        runs.close()
    assert report.state == "failed"
    error = report.errors["status"]
    assert "MCP server 'ops'" in error and "16 MiB" in error and '"maxMessageBytes"' in error
    assert "raise \"maxMessageBytes\" for server 'ops'" in error
    assert len(error) < 2000  # none of what was sent is in it
    assert len(rogue_calls(tmp_path / "rogue.log", "get_status")) == 1


def test_after_a_message_over_the_limit_the_session_is_closed(tmp_path):
    """Two reads of one run on one server: the second is not sent, and says why."""

    async def main():
        config = ServerConfig(
            command=sys.executable,
            args=["-I", "-S", ROGUE],
            env={"ROGUE_LOG": str(tmp_path / "rogue.log"), "ROGUE_MODES": f"get_status=huge_result:{OVER}"},
            call_timeout=SAFETY,
        )
        async with open_hub({"ops": config}, ["ops"]) as hub:
            with pytest.raises(NoReplyError) as first:
                await hub.call("ops", "get_status", {})
            with pytest.raises(NotSentError) as second:
                await hub.call("ops", "post_message", {"channel": "#ops", "text": "hi"})
        return first.value, second.value

    first, second = trio.run(main)
    assert "larger than 16 MiB" in str(first) and first.facts["limit"] == 16 * 1024 * 1024
    assert "was not sent" in str(second) and "larger than 16 MiB" in str(second) and "maxMessageBytes" in second.hint
    assert [c["tool"] for c in rogue_calls(tmp_path / "rogue.log")] == ["get_status"]  # the post never reached it


def test_the_limit_is_the_servers_own_setting(tmp_path):
    """``maxMessageBytes`` lowers the limit for one server, or raises it (a 20 MB reply is then
    read whole; its masking and parsing run on a worker thread)."""
    entries = {
        "small": rogue_server(
            tmp_path / "small.log", ROGUE_MODES="get_status=huge_result:100000,get_next_job=huge_result:50000"
        )
        | {"maxMessageBytes": 65536},
        "large": rogue_server(tmp_path / "large.log", ROGUE_MODES=f"get_status=huge_result:{OVER}")
        | {"maxMessageBytes": 32 * 1024 * 1024},
    }
    servers = parse_servers(json.dumps({"mcpServers": entries}), str(tmp_path / "mcp.json"))
    assert servers["small"].max_message_bytes == 65536

    async def main():
        async with open_hub(servers, ["small", "large"]) as hub:
            under = await hub.call("small", "get_next_job", {})
            big = await hub.call("large", "get_status", {})
            with pytest.raises(NoReplyError) as over:
                await hub.call("small", "get_status", {})
        return under, big, over.value

    under, big, over = trio.run(main)
    assert under.is_error is False and len(under.text) > 49_000
    assert big.is_error is False and len(big.text) > OVER - 100
    assert "MCP server 'small'" in str(over) and "larger than 64 KiB" in str(over) and "(now 65536 bytes)" in over.hint


@pytest.mark.parametrize(
    ("value", "words"),
    [(0, "greater than 0"), (-5, "greater than 0"), ("16MB", "Expected `int"), (1.5, "Expected `int")],
)
def test_a_bad_max_message_bytes_is_an_error_naming_the_file_the_server_and_the_key(tmp_path, value, words):
    entry = {"command": "x", "maxMessageBytes": value}
    with pytest.raises(ServerConfigError) as info:
        parse_servers(json.dumps({"mcpServers": {"srv": entry}}), str(tmp_path / "mcp.json"))
    message = str(info.value)
    assert (
        str(tmp_path / "mcp.json") in message
        and "server 'srv'" in message
        and "maxMessageBytes" in message
        and words in message
    )
    assert info.value.exit_code == 2


@pytest.mark.parametrize("mode", [f"huge_result:{OVER}", "endless"])
def test_an_effect_over_the_size_limit_is_unknown(tmp_path, mode):
    """The server may have acted before it sent too much: doubt, never failure."""
    modes = tmp_path / "modes"
    env = {"ROGUE_LOG": str(tmp_path / "rogue.log"), "ROGUE_MODES_FILE": str(modes)}
    server = ServerConfig(command=sys.executable, args=["-I", "-S", ROGUE], env=env, call_timeout=SAFETY)
    runs = Runs(store=tmp_path / "runs.db", servers={"ops": server})
    try:
        parked = start(runs, POST)
        modes.write_text(f"post_message={mode}")
        after = trio.run(lambda: runs.approve(parked.run, "post", actor="ana"))
        assert after.state == "parked" and list(after.unknown) == ["post"] and after.errors == {}
        assert "may or may not have happened" in after.unknown["post"] and "maxMessageBytes" in after.unknown["post"]
        (effect,) = runs.show(parked.run).effects
        assert effect.state == "unknown"
    finally:
        runs.close()
    assert len(rogue_calls(tmp_path / "rogue.log", "post_message")) == 1


@pytest.mark.parametrize("mode", ["flood:100", "flood:200000"])
def test_a_server_that_floods_its_output_still_meets_the_calls_timeout(tmp_path, mode):
    """Notifications for ever (small, or 200 KB each) and never an answer: reading them never
    holds up the timer. (No timing is asserted: the test ends only if the timeout fires.)"""
    runs = rogue_runs(tmp_path, f"get_status={mode}", call_timeout=1.0)
    try:
        report = start(runs, READ)
    finally:
        runs.close()
    assert (
        report.state == "failed"
        and "did not answer within 1 s" in report.errors["status"]
        and "callTimeout" in report.errors["status"]
    )


# -- memory ------------------------------------------------------------------------

PEAK = """
import sys
from vodou_engine.cli import main

code = main(sys.argv[1:])
peak = next(line for line in open("/proc/self/status") if line.startswith("VmHWM:"))
print("peak-kib", peak.split()[1], file=sys.stderr)
sys.exit(code)
"""
"""``recipe ARGS`` in a process of its own that reports its peak resident memory on the way out
(``cli.main`` called with arguments returns instead of ending the process)."""


def peak_kib(cli, *args: str) -> tuple[object, int]:
    argv = [sys.executable, "-c", PEAK, *args]
    env = {
        **cli.env,
        "PYTHONPATH": os.pathsep.join(
            filter(None, [str(Path(__file__).resolve().parent.parent), os.environ.get("PYTHONPATH", "")])
        ),
    }
    proc = subprocess.run(
        argv, cwd=cli.tmp, env=env, capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL
    )
    line = next(line for line in proc.stderr.splitlines() if line.startswith("peak-kib "))
    return proc, int(line.split()[1])


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="reads the peak from /proc")
@pytest.mark.parametrize("sent", ["stdio", "http", "http-lines"])
def test_memory_stays_far_below_what_the_server_sends(cli, tmp_path, sent, request):
    """The server sends 300 MB as one message (a line; an event), or an event of 15 MB in 1.7
    million short data lines (under the limit, but an object per line if kept line by line:
    300 MB before); the engine's own peak resident memory stays under 150 MB (the
    interpreter, the SDK and about one limit's worth)."""
    if sent == "stdio":
        cli.servers_file(
            {
                "ops": rogue_server(tmp_path / "rogue.log", ROGUE_MODES="get_status=huge_result:300000000")
                | {"callTimeout": SAFETY}
            }
        )
    else:
        web = request.getfixturevalue("web")
        web.set("get_status=huge_sse:300000000" if sent == "http" else "get_status=sse_lines")
        cli.servers_file({"ops": {"url": web.url, "callTimeout": SAFETY}})
    (cli.tmp / "r.recipe").write_text('recipe "r"\nstatus: ops.get_status {}\n')
    proc, peak = peak_kib(cli, "run", "r.recipe")
    assert proc.returncode == 1, proc.stderr
    said = proc.stdout + proc.stderr
    if sent == "http-lines":  # read whole (under the limit), and refused: not JSON-RPC (the SDK logs it)
        assert "no usable reply" in said and "its reply could not be read" in said
    else:
        assert "larger than 16 MiB" in said and "Traceback" not in proc.stderr
    assert peak < 150 * 1024, f"peak resident memory {peak // 1024} MB"


# -- HTTP --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def _shared_web():
    holder: dict[str, HttpServer] = {}
    yield holder
    if "web" in holder:
        holder["web"].stop()


@pytest.fixture
def web(_shared_web, tmp_path_factory):
    """The HTTP test server, one per test process for this module (a start imports the SDK and
    uvicorn: about a second): started again if it is gone, and before each test its modes are
    cleared and its log emptied, so each test reads only its own calls. A large reply it goes on
    writing after the engine hung up is finite. The test whose server floods an event stream for
    ever takes ``own_web``: a server of its own."""
    server = _shared_web.get("web")
    if server is None or not server.alive():
        if server is not None:
            server.stop()
        server = _shared_web["web"] = HttpServer(tmp_path_factory.mktemp("web"), "web").start()
    else:
        server.set("")
        server.log.write_text("")
    return server


@pytest.fixture
def own_web(tmp_path):
    server = HttpServer(tmp_path, "web").start()
    yield server
    server.stop()


@pytest.mark.parametrize("mode", [f"huge_sse:{OVER}", f"huge_json:{OVER}", "huge_declared"])
def test_an_http_reply_over_the_size_limit_ends_the_call_and_the_session(web, mode):
    """An event, a chunked JSON body, or a body that declares its size: the same outcome as
    over stdio, and the session's later calls are not sent."""
    web.set(f"get_status={mode}")

    async def main():
        async with open_hub({"web": ServerConfig(url=web.url, call_timeout=SAFETY)}, ["web"]) as hub:
            with pytest.raises(NoReplyError) as first:
                await hub.call("web", "get_status", {})
            with pytest.raises(NotSentError) as second:
                await hub.call("web", "echo", {"text": "hi"})
        return first.value, second.value

    first, second = trio.run(main)
    assert "MCP server 'web'" in str(first) and "larger than 16 MiB" in str(first) and "maxMessageBytes" in first.hint
    assert "was not sent" in str(second) and "maxMessageBytes" in second.hint
    assert [c["tool"] for c in web.calls()] == ["get_status"]


def test_a_compressed_http_reply_is_not_read(web):
    """Asked for an uncompressed body, a server that sends gzip anyway (60 KB that inflate to
    60 MB) gets its reply refused unread: it could be neither bounded nor masked on its way."""
    web.set("get_status=gzip_json")

    async def main():
        async with open_hub({"web": ServerConfig(url=web.url, call_timeout=SAFETY)}, ["web"]) as hub:
            with pytest.raises(NoReplyError) as info:
                await hub.call("web", "get_status", {})
            after = await hub.call("web", "echo", {"text": "still here"})
        return info.value, after

    refused, after = trio.run(main)
    assert "MCP server 'web'" in str(refused) and "compressed (gzip)" in str(refused) and "not read" in str(refused)
    assert after.text == "still here"  # only that reply was refused


def test_an_http_effect_over_the_size_limit_is_unknown(web, tmp_path):
    runs = Runs(store=tmp_path / "runs.db", servers={"web": ServerConfig(url=web.url, call_timeout=SAFETY)})
    try:
        parked = trio.run(lambda: runs.start("r.recipe", text=POST.replace("ops.", "web."), actor="ana"))
        web.set(f"post_message=huge_sse:{OVER}")
        after = trio.run(lambda: runs.approve(parked.run, "post", actor="ana"))
        assert list(after.unknown) == ["post"] and "maxMessageBytes" in after.unknown["post"]
        (effect,) = runs.show(parked.run).effects
        assert effect.state == "unknown"
    finally:
        runs.close()
    assert len(web.calls("post_message")) == 1


def test_an_http_server_that_floods_an_event_stream_still_meets_the_calls_timeout(own_web):
    web = own_web
    web.set("get_status=sse_flood")

    async def main():
        async with open_hub({"web": ServerConfig(url=web.url, call_timeout=1.0)}, ["web"]) as hub:
            with pytest.raises(NoReplyError) as info:
                await hub.call("web", "get_status", {})
        return info.value

    assert "did not answer within 1 s" in str(trio.run(main))
