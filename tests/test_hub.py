"""The hub against real server processes: the published time and git servers,
plus a small MCPServer script for behaviour they cannot show (a call that
never returns, a server that dies mid-call, a JSON-RPC refusal)."""

import os
import subprocess
import sys
import textwrap

import pytest
import trio

from vodou_engine.errors import NoReplyError, NotSentError, ServerConfigError, ServerStartError, UnknownToolError
from vodou_engine.servers import ServerConfig
from vodou_engine.tools.hub import ToolInfo, ToolResult, open_hub

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="process checks read /proc")

# Generous: only a safety net so a broken hub fails the test instead of hanging it.
SAFETY = 60

TESTER = textwrap.dedent(
    '''
    import gc, os, sys
    gc.disable()  # until the SDK's objects, alive until exit, are frozen below (as the demo servers do)
    import anyio
    from mcp.server.mcpserver import MCPServer
    from mcp.shared.exceptions import MCPError

    from mcp.types import ListToolsResult, ToolAnnotations

    FIFO = sys.argv[1]


    class Paged(MCPServer):
        """Lists its tools two at a time, to exercise the client's cursor loop."""

        async def _handle_list_tools(self, ctx, params):
            tools = sorted(await self.list_tools(), key=lambda t: t.name)
            start = int(params.cursor) if params is not None and params.cursor else 0
            end = start + 2
            return ListToolsResult(tools=tools[start:end], next_cursor=str(end) if end < len(tools) else None)


    app = Paged("tester")

    def signal(word):
        # The test waits on this pipe instead of sleeping.
        with open(FIFO, "w") as f:
            f.write(word + "\\n")

    @app.tool()
    async def block() -> str:
        """Never returns unless cancelled."""
        signal("started")
        try:
            await anyio.sleep_forever()
        except anyio.get_cancelled_exc_class():
            signal("cancelled")
            raise
        return "unreachable"

    @app.tool(title="Echo back")
    async def echo(text: str) -> str:
        return text

    @app.tool(structured_output=False)
    async def big(size: int) -> str:
        return "".join(chr(ord("a") + i % 26) for i in range(size))

    @app.tool(structured_output=False)
    async def json_text() -> str:
        return '{"count": 2, "items": ["a", "b"]}'

    @app.tool(structured_output=False)
    async def blocks() -> list:
        return ['[1, 2]', 'plain words']

    @app.tool()
    async def refuse() -> str:
        raise MCPError(code=-32602, message="refused on purpose")

    @app.tool(annotations=ToolAnnotations(destructive_hint=True))
    async def die() -> str:
        print("tester: dying on request", file=sys.stderr, flush=True)
        os._exit(7)

    gc.freeze()
    gc.enable()
    app.run()
    '''
)


# -- helpers ------------------------------------------------------------------


def proc_table():
    """pid -> (state, ppid, session id) for every process we can see."""
    table = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2 :].split()
        table[int(entry)] = (fields[0], int(fields[1]), int(fields[3]))
    return table


def children():
    me = os.getpid()
    return {pid for pid, (_, ppid, _) in proc_table().items() if ppid == me}


def assert_all_gone(pids):
    """The servers, and everything they spawned into their own sessions, have ended and been reaped."""
    table = proc_table()
    left = {pid: row for pid, row in table.items() if pid in pids or row[2] in pids}
    assert not left, f"left-over processes (state, ppid, sid): {left}"


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    path = tmp_path_factory.mktemp("repo")
    git = ["git", "-C", str(path), "-c", "user.name=Test", "-c", "user.email=test@example.com"]
    subprocess.run(["git", "init", "-q", str(path)], check=True)
    (path / "hello.txt").write_text("hello\n")
    subprocess.run([*git, "add", "hello.txt"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "first commit"], check=True)
    (path / "hello.txt").write_text("hello again\n")
    return path


@pytest.fixture
def servers(repo, tmp_path):
    script = tmp_path / "tester.py"
    script.write_text(TESTER)
    fifo = tmp_path / "signals"
    os.mkfifo(fifo)
    return {
        "time": ServerConfig(command=sys.executable, args=["-m", "mcp_server_time", "--local-timezone", "UTC"]),
        "git": ServerConfig(command=sys.executable, args=["-m", "mcp_server_git", "--repository", str(repo)]),
        "tester": ServerConfig(command=sys.executable, args=[str(script), str(fifo)]),
        "false": ServerConfig(command="false"),
        "missing": ServerConfig(command=str(tmp_path / "no-such-binary"), args=["--serve"]),
        "crasher": ServerConfig(
            command=sys.executable,
            args=["-c", "import sys; print('config file unreadable: /etc/x', file=sys.stderr); sys.exit(3)"],
        ),
        "mute": ServerConfig(command=sys.executable, args=["-c", "import time; time.sleep(600)"]),
    }


class Signals:
    """Lines the tester server writes to its FIFO, read without blocking the trio loop."""

    def __init__(self, path):
        self._read = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        # Holding a write end open keeps reads waiting (not EOF) between server writes.
        self._keep = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
        self._stream = trio.lowlevel.FdStream(self._read)
        self._buffer = b""

    async def next(self):
        while b"\n" not in self._buffer:
            self._buffer += await self._stream.receive_some()
        line, self._buffer = self._buffer.split(b"\n", 1)
        return line.decode()

    async def aclose(self):
        await self._stream.aclose()
        os.close(self._keep)


# -- tests --------------------------------------------------------------------


def test_published_servers(servers, repo):
    seen = {}

    async def main():
        before = children()
        with trio.fail_after(SAFETY):
            async with open_hub(servers, ["time", "git", "time"]) as hub:
                seen["pids"] = children() - before
                assert len(seen["pids"]) == 2  # "time" named twice, started once
                assert set(hub.names) == {"time", "git"}
                assert set(hub.started_in) == {"time", "git"}
                assert all(s > 0 for s in hub.started_in.values())

                time_tools = hub.tools("time")
                assert {"get_current_time", "convert_time"} <= set(time_tools)
                info = time_tools["get_current_time"]
                assert isinstance(info, ToolInfo)
                assert info.read_only is True
                assert "timezone" in info.input_schema["properties"]
                git_tools = hub.tools("git")
                assert {"git_status", "git_log", "git_commit"} <= set(git_tools)
                assert git_tools["git_status"].read_only is True
                assert git_tools["git_commit"].read_only is False

                # Structured content wins.
                result = await hub.call("time", "get_current_time", {"timezone": "Europe/Warsaw"})
                assert isinstance(result, ToolResult)
                assert result.is_error is False
                assert result.value["timezone"] == "Europe/Warsaw"
                assert set(result.value) >= {"datetime", "day_of_week", "is_dst"}
                assert '"Europe/Warsaw"' in result.text
                assert result.duration_s > 0

                # Plain text stays text.
                status = await hub.call("git", "git_status", {"repo_path": str(repo)})
                assert status.is_error is False
                assert isinstance(status.value, str)
                assert "hello.txt" in status.value and status.value == status.text

                log = await hub.call("git", "git_log", {"repo_path": str(repo), "max_count": 5})
                assert "first commit" in log.text

                # A tool that fails is a result, not an exception.
                bad = await hub.call("time", "get_current_time", {"timezone": "Not/AZone"})
                assert bad.is_error is True
                assert "Not/AZone" in bad.text
                missing_arg = await hub.call("git", "git_status", {})
                assert missing_arg.is_error is True
                assert "repo_path" in missing_arg.text

                with pytest.raises(UnknownToolError) as unknown_tool:
                    await hub.call("git", "git_stauts", {"repo_path": str(repo)})
                assert "did you mean 'git_status'" in str(unknown_tool.value)

                with pytest.raises(ServerConfigError) as unknown:
                    hub.tools("tiem")
                assert "did you mean 'time'" in str(unknown.value)
                with pytest.raises(ServerConfigError, match="not started"):
                    await hub.call("tester", "echo", {"text": "x"})

    trio.run(main)
    assert_all_gone(seen["pids"])


def test_concurrent_calls_share_one_session(servers, repo):
    zones = ["UTC", "Europe/Warsaw", "Asia/Tokyo", "America/New_York", "Australia/Sydney", "Africa/Cairo"] * 4
    results = {}

    async def main():
        with trio.fail_after(SAFETY):
            async with open_hub(servers, ["time", "git"]) as hub:

                async def one(i, zone):
                    results[i] = (zone, await hub.call("time", "get_current_time", {"timezone": zone}))

                async def status(i):
                    results[f"git{i}"] = (None, await hub.call("git", "git_status", {"repo_path": str(repo)}))

                async with trio.open_nursery() as nursery:
                    for i, zone in enumerate(zones):
                        nursery.start_soon(one, i, zone)
                    for i in range(5):
                        nursery.start_soon(status, i)

    trio.run(main)
    assert len(results) == len(zones) + 5
    for _key, (zone, result) in results.items():
        assert result.is_error is False
        if zone is not None:
            assert result.value["timezone"] == zone
        else:
            assert "hello.txt" in result.text


def test_cancelled_call_returns_and_hub_stays_usable(servers, tmp_path):
    seen = {}

    async def main():
        signals = Signals(tmp_path / "signals")
        before = children()
        try:
            with trio.fail_after(SAFETY):
                async with open_hub(servers, ["tester", "time"]) as hub:
                    seen["pids"] = children() - before

                    # Cancelled before the request goes out.
                    with trio.move_on_after(0) as scope:
                        await hub.call("time", "get_current_time", {"timezone": "UTC"})
                    assert scope.cancelled_caught

                    # Cancelled while the server is working on it.
                    async with trio.open_nursery() as nursery:
                        scope = trio.CancelScope()

                        async def call_block():
                            with scope:
                                await hub.call("tester", "block", {})
                            seen["returned"] = True

                        nursery.start_soon(call_block)
                        assert await signals.next() == "started"
                        scope.cancel()
                    assert seen["returned"] and scope.cancelled_caught
                    # The server was told (notifications/cancelled) and stopped the handler.
                    assert await signals.next() == "cancelled"

                    # A per-call timeout gives up with NoReplyError and cancels on the server too.
                    with pytest.raises(NoReplyError, match=r"tester\.block did not answer within 0\.5 s"):
                        await hub.call("tester", "block", {}, timeout=0.5)
                    assert await signals.next() == "started"
                    assert await signals.next() == "cancelled"

                    # Both sessions still work, also with several calls at once.
                    again = await hub.call("tester", "echo", {"text": "still here"})
                    assert again.is_error is False
                    assert again.text == "still here"
                    assert again.value == {"result": "still here"}  # MCPServer wraps scalars
                    async with trio.open_nursery() as nursery:
                        for _ in range(3):
                            nursery.start_soon(hub.call, "time", "get_current_time", {"timezone": "UTC"})
                    ok = await hub.call("time", "get_current_time", {"timezone": "UTC"})
                    assert ok.value["timezone"] == "UTC"
        finally:
            await signals.aclose()

    trio.run(main)
    assert_all_gone(seen["pids"])


def test_text_values_protocol_refusal_and_dead_server(servers):
    seen = {}

    async def main():
        before = children()
        with trio.fail_after(SAFETY):
            async with open_hub(servers, ["tester"]) as hub:
                seen["pids"] = children() - before
                # Six tools served two per page: all of them arrive.
                tools = hub.tools("tester")
                assert sorted(tools) == ["big", "block", "blocks", "die", "echo", "json_text", "refuse"]
                # Unset hints stay None; the caller applies the spec defaults.
                echo = tools["echo"]
                assert (echo.read_only, echo.destructive, echo.idempotent) == (None, None, None)
                assert echo.title == "Echo back"
                assert "text" in echo.input_schema["properties"]
                die = tools["die"]
                assert (die.read_only, die.destructive, die.idempotent) == (None, True, None)

                # No structured content: JSON text is decoded, several blocks make a list.
                decoded = await hub.call("tester", "json_text", {})
                assert decoded.value == {"count": 2, "items": ["a", "b"]}
                several = await hub.call("tester", "blocks", {})
                assert several.value == [[1, 2], "plain words"]
                assert several.text == "[1, 2]\nplain words"

                refused = await hub.call("tester", "refuse", {})
                assert refused.is_error is True
                assert refused.error_code == -32602
                assert "refused on purpose" in refused.text

                # It may have run: no reply is doubt, not failure.
                with pytest.raises(NoReplyError) as died:
                    await hub.call("tester", "die", {})
                message = str(died.value)
                assert "'tester'" in message and "die" in message
                assert "exited with status 7" in message
                assert "tester: dying on request" in message  # stderr tail

                # Known dead: the next request never leaves this process.
                with pytest.raises(NotSentError, match="'tester'") as after:
                    await hub.call("tester", "echo", {"text": "anyone?"})
                assert type(after.value) is NotSentError

    trio.run(main)
    assert_all_gone(seen["pids"])


@pytest.mark.parametrize(
    ("bad", "expected"),
    [
        ("false", "exited, or closed its output, before answering initialize"),
        ("missing", "command not found"),
    ],
)
def test_start_failure_closes_the_other_servers(servers, bad, expected):
    seen = {}

    async def main():
        before = children()
        with trio.fail_after(SAFETY):
            with pytest.raises(ServerStartError) as info:
                async with open_hub(servers, ["time", bad]):
                    pytest.fail("the hub must not open with a failed server")
        seen["error"] = info.value
        seen["left"] = children() - before

    trio.run(main)
    message = str(seen["error"])
    assert f"MCP server {bad!r} failed to start" in message
    assert expected in message
    assert f"command: {servers[bad].command_line()}" in message
    assert "'time'" not in message
    assert not seen["left"], "the server that did start was not shut down"


def test_start_failure_shows_stderr(servers):
    async def main():
        with trio.fail_after(SAFETY):
            with pytest.raises(ServerStartError) as info:
                async with open_hub(servers, ["crasher"]):
                    pass
        return str(info.value)

    message = trio.run(main)
    assert "'crasher' failed to start" in message
    assert "stderr (last lines):" in message
    assert "config file unreadable: /etc/x" in message


def test_start_timeout(servers):
    async def main():
        before = children()
        with trio.fail_after(SAFETY):
            with pytest.raises(ServerStartError) as info:
                async with open_hub(servers, ["mute"], start_timeout=0.5):
                    pass
        return str(info.value), children() - before

    message, left = trio.run(main)
    assert "'mute' failed to start" in message
    assert "did not finish initializing within 0.5 s" in message
    assert "\"startTimeout\" for server 'mute'" in message  # the hint names the real setting
    assert not left


def test_unknown_server_is_a_config_error_before_anything_starts(servers):
    async def main():
        before = children()
        with pytest.raises(ServerConfigError) as info:
            async with open_hub(servers, ["time", "gti"]):
                pass
        assert children() == before
        return info.value

    error = trio.run(main)
    message = str(error)
    assert "'gti'" in message
    assert "did you mean 'git'" in message
    assert "time" in message and "tester" in message  # the configured names
    assert error.exit_code == 2


def test_exception_in_body_is_not_wrapped(servers):
    async def main():
        with trio.fail_after(SAFETY):
            async with open_hub(servers, ["time"]):
                raise KeyError("mine")

    with pytest.raises(KeyError, match="mine"):
        trio.run(main)


def test_server_environment_matches_the_sdk():
    """The hub spawns servers itself; they must inherit what the SDK's own spawn would give them."""
    from mcp.client.stdio import get_default_environment

    from vodou_engine.tools.process import default_environment

    assert default_environment() == get_default_environment()


def test_hub_handed_over_before_servers_answer_then_closed_mid_start(servers):
    """``wait=False``: the processes exist when the hub is handed over; leaving before they
    answer abandons the starts and leaves no process behind."""
    seen = {}

    async def main():
        before = children()
        with trio.fail_after(SAFETY):
            async with open_hub(servers, ["mute", "time"], wait=False) as hub:
                seen["pids"] = children() - before
                # "mute" never answers initialize, so nothing can be ready yet.
                seen["ready"] = hub._server("mute").ready.is_set()
        seen["left"] = children() - before

    trio.run(main)
    assert len(seen["pids"]) == 2
    assert seen["ready"] is False
    assert not seen["left"]
    assert_all_gone(seen["pids"])


def test_wait_ready_reports_a_failed_start_and_stops_the_rest(servers):
    seen = {}

    async def main():
        before = children()
        with trio.fail_after(SAFETY):
            async with open_hub(servers, ["time", "crasher", "mute"], wait=False) as hub:
                with pytest.raises(ServerStartError) as info:
                    await hub.wait_ready()
                seen["error"] = str(info.value)
                with pytest.raises(ServerStartError, match="crasher"):
                    await hub.call("crasher", "anything", {})
        seen["left"] = children() - before

    trio.run(main)
    assert "'crasher' failed to start" in seen["error"]
    assert "config file unreadable: /etc/x" in seen["error"]
    assert "'mute'" not in seen["error"]  # abandoned, not failed
    assert not seen["left"]


def test_calls_on_a_hub_not_yet_ready_wait_for_the_server(servers):
    async def main():
        with trio.fail_after(SAFETY):
            async with open_hub(servers, ["time"], wait=False) as hub:
                result = await hub.call("time", "get_current_time", {"timezone": "UTC"})
                return result.value["timezone"], hub.started_in["time"] > 0

    assert trio.run(main) == ("UTC", True)


def test_a_result_larger_than_many_pipe_reads_arrives_whole(servers):
    """Framing: one JSON-RPC line spread over many reads of the server's stdout."""
    size = 3_000_000

    async def main():
        with trio.fail_after(SAFETY):
            async with open_hub(servers, ["tester"]) as hub:
                return (await hub.call("tester", "big", {"size": size})).text

    text = trio.run(main)
    assert len(text) == size
    assert text == "".join(chr(ord("a") + i % 26) for i in range(size))
