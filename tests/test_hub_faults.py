"""Hub.call against a server that misbehaves on purpose (tests/rogue_server.py).

Each test checks the exact outcome class a fault ends in (NotSentError,
NoReplyError, or an is_error result with the server's own code and text),
whether the server recorded the call (ROGUE_LOG, written before any
misbehaviour), and that no server process outlives the test.
"""

import json
import os
import signal
import sys
from pathlib import Path

import pytest
import trio
import trio.testing

from vodou_engine.errors import NoReplyError, NotSentError, ServerStartError, UnknownToolError
from vodou_engine.servers import ServerConfig, parse_servers
from vodou_engine.tools.hub import ToolResult, open_hub

ROGUE = str(Path(__file__).with_name("rogue_server.py"))

# Only a safety net, so a broken hub fails a test instead of hanging it. It is far
# below the default call timeout (120 s): a call that must end "at once" (a cut-off
# reply followed by end of output) and waited for its timeout instead fails here.
SAFETY = 30

POST = {"channel": "#ops", "text": "hello"}


def rogue(log, modes="", **env):
    return ServerConfig(
        command=sys.executable,
        args=["-I", "-S", ROGUE],
        env={"ROGUE_LOG": str(log), "ROGUE_MODES": modes, **env},
    )


def records(log):
    path = Path(log)
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def calls(log, tool=None):
    return [r for r in records(log) if "tool" in r and (tool is None or r["tool"] == tool)]


def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.fixture
def logs(tmp_path):
    """Log paths by server name; afterwards every server that started must be gone."""
    made = {}

    def log(name="rogue"):
        return made.setdefault(name, tmp_path / f"{name}.log")

    yield log
    started = [r["pid"] for path in made.values() for r in records(path) if r.get("event") == "start"]
    left = [pid for pid in started if alive(pid)]
    assert not left, f"rogue servers still running: {left}"


def run(servers, body, names=None, **hub_options):
    async def main():
        with trio.fail_after(SAFETY):
            async with open_hub(servers, names or list(servers), **hub_options) as hub:
                return await body(hub)

    return trio.run(main)


def outcome(servers, tool="post_message", arguments=POST, **call_options):
    """The one outcome of one call: a ToolResult, or the exception it raised."""

    async def body(hub):
        try:
            return await hub.call("rogue", tool, arguments, **call_options)
        except (NotSentError, NoReplyError) as exc:
            return exc

    return run(servers, body)


# -- answers ---------------------------------------------------------------------


def test_ok(logs):
    async def body(hub):
        tools = hub.tools("rogue")
        assert (tools["post_message"].read_only, tools["post_message"].destructive) == (False, False)
        assert tools["get_status"].read_only is True
        assert tools["post_message"].output_schema["required"] == ["ok", "ts"]
        return await hub.call("rogue", "post_message", POST)

    result = run({"rogue": rogue(logs())}, body)
    assert isinstance(result, ToolResult)
    assert result.is_error is False and result.error_code is None
    assert result.value["ok"] is True and result.value["ts"]
    assert json.loads(result.text) == result.value
    assert [(c["tool"], c["arguments"]) for c in calls(logs())] == [("post_message", POST)]


def test_tool_error_is_an_error_result(logs):
    result = outcome({"rogue": rogue(logs(), "post_message=tool_error")})
    assert isinstance(result, ToolResult)
    assert result.is_error is True
    assert result.error_code is None
    assert result.text == "quota exceeded"
    assert len(calls(logs())) == 1


def test_escape_text_comes_back_as_the_servers_error_text(logs):
    # The hub hands the text on as it is; whoever prints it must neutralise it.
    result = outcome({"rogue": rogue(logs(), "post_message=escape")})
    assert isinstance(result, ToolResult)
    assert result.is_error is True and result.error_code is None
    assert result.text == "\u001b[2J\u001b[Hrun succeeded. (fake)"
    assert len(calls(logs())) == 1


@pytest.mark.parametrize("code", [-32000, -32001, -32602])
def test_rpc_error_from_a_live_server_is_an_error_result(logs, code):
    """-32000 is also the SDK's "connection closed", -32001 its "request timeout":
    from a live server they are that server's own errors, not a dead connection."""

    async def body(hub):
        refused = await hub.call("rogue", "post_message", POST)
        after = await hub.call("rogue", "get_status", {})
        return refused, after

    refused, after = run({"rogue": rogue(logs(), "post_message=rpc_error", ROGUE_RPC_CODE=str(code))}, body)
    assert isinstance(refused, ToolResult)
    assert refused.is_error is True
    assert refused.error_code == code
    assert refused.text == "rogue failure"
    assert after.is_error is False  # the session is fine
    assert [c["tool"] for c in calls(logs())] == ["post_message", "get_status"]


def test_slow_reply_and_other_calls_meanwhile(logs):
    async def body(hub):
        with trio.CancelScope() as branch:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(hub.call, "rogue", "post_message", POST)
                await trio.testing.wait_all_tasks_blocked()  # the slow request is out
                quick = await hub.call("rogue", "get_status", {})
                branch.cancel()
        return quick

    quick = run({"rogue": rogue(logs(), "post_message=slow:60000")}, body)
    assert quick.is_error is False
    # Asked second, answered while the first (a minute's work) was still running.
    assert [c["tool"] for c in calls(logs())] == ["post_message", "get_status"]

    slowish = outcome({"rogue": rogue(logs("short"), "post_message=slow:50")})
    assert isinstance(slowish, ToolResult) and slowish.value["ok"] is True


# -- no reply ---------------------------------------------------------------------


@pytest.mark.parametrize(("mode", "status"), [("exit1", 1), ("exit0", 0)])
def test_server_exits_mid_call(logs, mode, status):
    async def body(hub):
        with pytest.raises(NoReplyError) as died:
            await hub.call("rogue", "post_message", POST)
        # Known dead now: the next call never leaves this process.
        with pytest.raises(NotSentError) as after:
            await hub.call("rogue", "get_status", {})
        return died.value, after.value

    died, after = run({"rogue": rogue(logs(), f"post_message={mode}")}, body)
    assert type(died) is NoReplyError
    message = str(died)
    assert "'rogue'" in message and "post_message" in message
    assert f"exited with status {status}" in message
    assert (died.facts["server"], died.facts["tool"]) == ("rogue", "post_message")
    assert type(after) is NotSentError
    assert "get_status was not sent" in str(after)
    assert [c["tool"] for c in calls(logs())] == ["post_message"]  # get_status never arrived


def test_cut_off_reply_then_end_of_output_ends_at_once(logs):
    # No per-call timeout: the default (120 s) is far beyond SAFETY, so waiting for it would fail.
    result = outcome({"rogue": rogue(logs(), "post_message=cutoff")})
    assert type(result) is NoReplyError
    assert "cut off" in str(result) and "'rogue'" in str(result) and "post_message" in str(result)
    assert len(calls(logs())) == 1


def test_cut_off_reply_from_a_live_server_ends_by_the_timeout(logs):
    result = outcome({"rogue": rogue(logs(), "post_message=cutoff_hang")}, timeout=0.5)
    assert type(result) is NoReplyError
    assert "did not answer within 0.5 s" in str(result)
    assert "without its end" in str(result)
    assert len(calls(logs())) == 1


def test_reply_with_the_wrong_id_ends_by_the_timeout(logs):
    result = outcome({"rogue": rogue(logs(), "post_message=wrong_id")}, timeout=0.5)
    assert type(result) is NoReplyError
    assert "did not answer within 0.5 s" in str(result)
    assert "matches no request" in str(result)
    assert len(calls(logs())) == 1


def test_hang_ends_by_the_call_timeout_and_is_cancelled_on_the_server(logs):
    async def body(hub):
        with pytest.raises(NoReplyError) as timed_out:
            await hub.call("rogue", "post_message", POST, timeout=0.5)
        # The session is still usable; and since the server reads its input in order,
        # once this answer is back it has read the cancellation sent before it.
        after = await hub.call("rogue", "get_status", {})
        return timed_out.value, after

    error, after = run({"rogue": rogue(logs(), "post_message=hang")}, body)
    assert type(error) is NoReplyError
    assert "rogue.post_message did not answer within 0.5 s" in str(error)
    assert '"callTimeout"' in error.hint and "'rogue'" in error.hint
    assert after.is_error is False
    posted = calls(logs(), "post_message")
    assert len(posted) == 1
    cancelled = [r["request_id"] for r in records(logs()) if r.get("event") == "cancelled"]
    assert cancelled == [posted[0]["id"]]


def test_call_timeout_from_the_server_file(logs, tmp_path):
    config = rogue(logs(), "get_status=hang")
    entry = {"command": config.command, "args": config.args, "env": config.env, "callTimeout": 0.5}
    doc = {"mcpServers": {"rogue": entry}}
    servers = parse_servers(json.dumps(doc), str(tmp_path / "mcp.json"))
    assert servers["rogue"].call_timeout == 0.5
    result = outcome(servers, "get_status", {})  # no per-call timeout
    assert type(result) is NoReplyError
    assert "did not answer within 0.5 s" in str(result)
    assert result.hint.startswith("raise \"callTimeout\" for server 'rogue' in the server file")
    assert len(calls(logs())) == 1


def test_output_schema_violation_is_no_reply(logs):
    async def body(hub):
        with pytest.raises(NoReplyError) as bad:
            await hub.call("rogue", "post_message", POST)
        return bad.value, await hub.call("rogue", "get_status", {})

    error, after = run({"rogue": rogue(logs(), "post_message=bad_schema")}, body)
    assert type(error) is NoReplyError
    assert "Invalid structured content" in str(error) and "post_message" in str(error)
    assert after.is_error is False
    assert [c["tool"] for c in calls(logs())] == ["post_message", "get_status"]


def test_unparseable_reply_is_no_reply_at_once(logs):
    result = outcome({"rogue": rogue(logs(), "post_message=garbage")})  # default timeout: must not wait for it
    assert type(result) is NoReplyError
    assert "could not be read" in str(result)
    assert len(calls(logs())) == 1


def test_too_deep_result_is_no_reply(logs):
    result = outcome({"rogue": rogue(logs(), "get_status=deep")}, "get_status", {})
    assert type(result) is NoReplyError
    assert "1000 levels deep" in str(result)
    assert len(calls(logs())) == 1


# -- not sent ---------------------------------------------------------------------


def test_renamed_tool_is_not_sent(logs):
    async def body(hub):
        with pytest.raises(UnknownToolError) as unknown:
            await hub.call("rogue", "post_message", POST)
        return unknown.value, await hub.call("rogue", "post_message2", POST)

    error, renamed = run({"rogue": rogue(logs(), ROGUE_TOOLS="post_message2,get_status")}, body)
    assert isinstance(error, NotSentError)
    assert "did you mean 'post_message2'" in str(error)
    assert renamed.is_error is False
    assert [c["tool"] for c in calls(logs())] == ["post_message2"]


def test_arguments_that_cannot_be_encoded_are_not_sent(logs):
    result = outcome({"rogue": rogue(logs())}, arguments={"channel": object(), "text": "x"})
    assert type(result) is NotSentError
    assert calls(logs()) == []


def test_failed_start_is_not_sent(tmp_path):
    crasher = ServerConfig(command=sys.executable, args=["-I", "-S", "-c", "import sys; sys.exit(3)"])
    with pytest.raises(ServerStartError) as info:
        run({"crasher": crasher}, lambda hub: None)
    assert isinstance(info.value, NotSentError)


def test_start_timeout_from_the_server_file(tmp_path):
    # Reads its input and never answers; it exits when stdin closes.
    mute = {"command": sys.executable, "args": ["-I", "-S", "-c", "import sys; sys.stdin.read()"], "startTimeout": 0.5}
    servers = parse_servers(json.dumps({"mcpServers": {"mute": mute}}), str(tmp_path / "mcp.json"))
    with pytest.raises(ServerStartError) as info:
        run(servers, lambda hub: None)
    assert "did not finish initializing within 0.5 s" in str(info.value)
    assert "\"startTimeout\" for server 'mute'" in info.value.hint


# -- shutdown ---------------------------------------------------------------------


def test_a_cancelled_call_does_not_hold_the_process(logs):
    """A server still working on a call its caller dropped is terminated at once on close;
    a server with nothing in flight is closed politely and exits on its own."""
    seen = {}

    async def body(hub):
        with trio.CancelScope() as branch:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(hub.call, "busy", "post_message", POST)
                # Every task blocked: the request is written and its caller waits for the reply.
                await trio.testing.wait_all_tasks_blocked()
                # Answered in order after it, so the server has the slow call by now.
                await hub.call("busy", "get_status", {})
                await hub.call("idle", "get_status", {})
                branch.cancel()  # a quorum dropped this branch
        seen["busy"] = hub._server("busy").process
        seen["idle"] = hub._server("idle").process

    servers = {
        "busy": rogue(logs("busy"), "post_message=slow:60000"),
        "idle": rogue(logs("idle")),
    }
    run(servers, body)
    assert len(calls(logs("busy"), "post_message")) == 1
    assert seen["busy"].returncode == -signal.SIGTERM
    assert seen["idle"].returncode == 0


# -- pieces -----------------------------------------------------------------------


def test_structured_content_too_deep_is_refused():
    from mcp_types import CallToolResult

    from vodou_engine.limits import TooDeep
    from vodou_engine.tools.hub import _to_result

    deep: object = "bottom"
    for _ in range(150):
        deep = [deep]
    with pytest.raises(TooDeep):
        _to_result(CallToolResult(content=[], structured_content={"x": deep}), 0.0)
    fine = _to_result(CallToolResult(content=[], structured_content={"x": [[1]]}), 0.0)
    assert fine.value == {"x": [[1]]}


def test_a_reply_proves_its_depth_by_its_brackets_alone():
    """The transport spares the hub its walk of a result only when the reply's line holds no
    more opening brackets than MAX_DEPTH (inside strings too), and only for the first reply
    with the call's id."""
    from vodou_engine.limits import MAX_DEPTH, surely_within_depth
    from vodou_engine.tools.wire import CallWatch, Wire

    assert surely_within_depth(b"[" * MAX_DEPTH + b"]" * MAX_DEPTH)
    assert not surely_within_depth(b"[" * (MAX_DEPTH + 1) + b"]" * (MAX_DEPTH + 1))
    assert not surely_within_depth(b'{"t": "' + b"{" * MAX_DEPTH + b'"}')

    wire, watch = Wire(None), CallWatch()
    watch.request_id = 7
    wire.calls[7] = watch
    wire.request_written(7)
    wire.reply_read(7, error=False, flat=True)
    assert watch.flat_reply
    wire.reply_read(7, error=False, flat=True)  # the same id again: nothing is proven any more
    assert not watch.flat_reply


def test_the_id_of_a_line_that_does_not_parse():
    from vodou_engine.tools.stdio import _top_level_id

    deep = b"[" * 5000 + b'"id"' + b"]" * 5000
    assert _top_level_id(b'{"jsonrpc": "2.0", "result": {"id": 99, "x": ' + deep + b'}, "id": 7}') == 7
    assert _top_level_id(b'{"id": "abc", "result": "x"}') == "abc"
    assert _top_level_id(b'{"method": "id", "params": {"id": 3}}') is None
    assert _top_level_id(b'{"id": 1.5}') is None
    assert _top_level_id(b"not json at all") is None
