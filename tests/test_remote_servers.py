"""Remote MCP servers: the hub over the spec's streamable HTTP
transport, against a real server (tests/http_server.py: the SDK's MCPServer over
streamable HTTP, on 127.0.0.1, a process of its own).

Every outcome of a call is checked against the server's own log (written before
it misbehaves): a request that was refused before it left is ``NotSentError`` and
never reaches the log; one that reached it and got no usable reply is
``NoReplyError``; a JSON-RPC error or a tool error the server sent is an
``is_error`` result.
"""

from __future__ import annotations

import json
import socket
import sys
import time
from functools import partial
from pathlib import Path

import msgspec
import pytest
import trio
import trio.testing
from http_server import HttpServer

from vodou_engine.errors import NoReplyError, NotSentError, ServerConfigError, ServerMismatchError, ServerStartError
from vodou_engine.servers import ServerConfig, parse_servers
from vodou_engine.tools.hub import ToolResult, open_hub

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="the test server runs in a POSIX process group")

SAFETY = 30
"""Only a safety net, far below the default call timeout (120 s): a call that must end at once and
waited for its timeout instead fails here."""

POST = {"channel": "#ops", "text": "hello"}


@pytest.fixture(scope="module")
def _shared_web():
    holder: dict[str, HttpServer] = {}
    yield holder
    if "web" in holder:
        holder["web"].stop()


@pytest.fixture
def web(_shared_web, tmp_path_factory):
    """The HTTP test server, one per test process for this module (a start imports the SDK and
    uvicorn: about a second): started again when a test stopped or killed it, and before each
    test its modes are cleared and its log emptied, so each test reads only its own calls.
    Tests that block a call (its cancellation is logged when it lands) or end the server on
    purpose take ``own_web``: a server of their own, as every test had before."""
    server = _shared_web.get("web")
    if server is None or not server.alive():
        if server is not None:
            server.stop()
        server = _shared_web["web"] = HttpServer(tmp_path_factory.mktemp("web")).start()
    else:
        server.set("")
        server.log.write_text("")
    return server


@pytest.fixture
def own_web(tmp_path):
    server = HttpServer(tmp_path).start()
    yield server
    server.stop()


def run(servers, body, names=None, **options):
    async def main():
        with trio.fail_after(SAFETY):
            async with open_hub(servers, names or list(servers), **options) as hub:
                return await body(hub)

    return trio.run(main)


def outcome(servers, tool, arguments, **call_options):
    async def body(hub):
        try:
            return await hub.call("web", tool, arguments, **call_options)
        except (NotSentError, NoReplyError) as exc:
            return exc

    return run(servers, body)


# -- configuration ----------------------------------------------------------------


def test_a_url_entry_is_an_http_server(tmp_path):
    doc = {
        "mcpServers": {
            "a": {"url": "https://example.com/mcp", "headers": {"Authorization": "Bearer ${TOKEN}"}, "callTimeout": 5},
            "b": {"type": "http", "url": "https://example.com/b"},
            "c": {"type": "streamable-http", "url": "https://example.com/c"},
            "d": {"type": "stdio", "command": "uvx", "args": ["x"], "url": "https://ignored.example.com"},
            "e": {"type": "HTTP", "url": "https://example.com/e", "command": "ignored"},
        }
    }
    servers = parse_servers(json.dumps(doc), str(tmp_path / "mcp.json"))
    assert servers["a"] == ServerConfig(
        url="https://example.com/mcp", headers={"Authorization": "Bearer ${TOKEN}"}, call_timeout=5
    )
    assert [servers[n].transport for n in "abcde"] == ["http", "http", "http", "stdio", "http"]
    assert servers["a"].command_line() == "https://example.com/mcp"  # what a card or an error shows
    assert servers["d"] == ServerConfig(command="uvx", args=["x"])
    assert servers["e"] == ServerConfig(url="https://example.com/e")
    # written back under the same keys as it was read
    assert msgspec.json.decode(msgspec.json.encode(servers["a"])) == doc["mcpServers"]["a"]


@pytest.mark.parametrize(
    ("entry", "words"),
    [
        ({"type": "sse", "url": "https://x.example.com/sse"}, ["'web'", "sse", "not supported", '"type": "http"']),
        (
            {"type": "websocket", "url": "wss://x.example.com"},
            ["'web'", "unknown \"type\" 'websocket'", "streamable-http"],
        ),
        ({"type": 3, "url": "https://x.example.com"}, ["'web'", "type"]),
        ({"type": "http", "command": "x"}, ["'web'", 'needs "url"']),
        ({"type": "stdio", "url": "https://x.example.com"}, ["'web'", "command"]),
        ({"url": "https://x.example.com", "command": "x"}, ["'web'", "both", '"type": "stdio"', '"type": "http"']),
        ({"url": "https://x.example.com", "env": {"K": "v"}}, ["'web'", '"env"', "headers"]),
        ({"command": "x", "headers": {"K": "v"}}, ["'web'", '"headers"', "HTTP"]),
        ({"url": "https://x.example.com", "headers": {"K": 1}}, ["'web'", "headers"]),
    ],
)
def test_transport_errors_name_the_server(tmp_path, entry, words):
    with pytest.raises(ServerConfigError) as info:
        parse_servers(json.dumps({"mcpServers": {"web": entry}}), str(tmp_path / "mcp.json"))
    message = str(info.value)
    assert str(tmp_path / "mcp.json") in message
    for word in words:
        assert word in message
    assert info.value.exit_code == 2


def test_a_url_must_be_http_when_the_server_starts():
    async def main():
        async with open_hub({"web": ServerConfig(url="ftp://example.com/mcp")}, ["web"]):
            pass

    with pytest.raises(ServerConfigError, match=r"server 'web': \"url\" must be an http:// or https:// URL"):
        trio.run(main)


# -- answers -------------------------------------------------------------------


def test_tools_annotations_answers_and_errors(web):
    async def body(hub):
        tools = hub.tools("web")
        assert {"post_message", "get_status", "echo", "block", "refuse", "fail"} <= set(tools)
        post = tools["post_message"]
        assert (post.read_only, post.destructive) == (False, False)
        assert "idempotency_key" in post.input_schema["properties"]
        assert tools["get_status"].read_only is True
        assert tools["echo"].title == "Echo back"
        assert hub.started_in["web"] > 0
        echoed = await hub.call("web", "echo", {"text": "over http"})
        refused = await hub.call("web", "refuse", {})
        failed = await hub.call("web", "fail", {})
        after = await hub.call("web", "get_status", {})
        return echoed, refused, failed, after

    echoed, refused, failed, after = run({"web": ServerConfig(url=web.url)}, body)
    assert isinstance(echoed, ToolResult) and echoed.is_error is False
    assert echoed.text == "over http" and echoed.value == {"result": "over http"}
    # the server's own JSON-RPC error: a refusal with its code, not doubt
    assert refused.is_error is True and refused.error_code == -32602 and refused.text == "refused on purpose"
    # the tool ran and said it failed
    assert failed.is_error is True and failed.error_code is None and "quota exceeded" in failed.text
    assert after.is_error is False and after.value["ok"] is True
    assert [c["tool"] for c in web.calls()] == ["echo", "refuse", "fail", "get_status"]


def test_parallel_calls_share_one_session(web):
    async def body(hub):
        results = {}

        async def one(i):
            results[i] = await hub.call("web", "echo", {"text": f"call {i}"})

        async with trio.open_nursery() as nursery:
            for i in range(25):
                nursery.start_soon(one, i)
        return results

    results = run({"web": ServerConfig(url=web.url)}, body)
    assert {i: r.text for i, r in results.items()} == {i: f"call {i}" for i in range(25)}
    assert len(web.calls("echo")) == 25


# -- not sent --------------------------------------------------------------------


def test_a_server_that_is_not_there_fails_to_start(tmp_path):
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}/mcp"
    with pytest.raises(ServerStartError) as info:
        run({"web": ServerConfig(url=url)}, lambda hub: None)
    message = str(info.value)
    assert "MCP server 'web' failed to start: cannot reach" in message and f"url: {url}" in message
    assert "ConnectError" in message
    assert isinstance(info.value, NotSentError)


def test_a_server_gone_before_the_call_is_not_sent(own_web):
    web = own_web

    async def body(hub):
        web.stop()  # connection refused from now on
        with pytest.raises(NotSentError) as info:
            await hub.call("web", "post_message", POST)
        return info.value

    error = run({"web": ServerConfig(url=web.url)}, body)
    assert type(error) is NotSentError
    assert "web.post_message was not sent: cannot connect to" in str(error) and web.url in str(error)
    assert web.calls("post_message") == []


def test_a_call_given_up_while_connecting_is_never_sent(web, monkeypatch):
    """The caller's time runs out while the connection is still being made: the request is
    withheld for good (NotSentError is a promise), even though the connection then succeeds."""
    import httpx2

    from vodou_engine.tools import http

    connected = trio.Event()

    class SlowToConnect(httpx2.AsyncHTTPTransport):
        async def handle_async_request(self, request):
            if b'"tools/call"' in request.content:
                await trio.sleep(1.0)  # a slow network, before any byte is written
                result = await super().handle_async_request(request)
                connected.set()
                return result
            return await super().handle_async_request(request)

    monkeypatch.setattr(http, "connection_transport", SlowToConnect)

    async def body(hub):
        with pytest.raises(NotSentError) as info:
            await hub.call("web", "post_message", POST, timeout=0.3)
        await trio.sleep(1.5)  # long past the slow connect
        return info.value, connected.is_set()

    error, connected_anyway = run({"web": ServerConfig(url=web.url)}, body)
    assert "could not be sent within 0.3 s" in str(error)
    assert connected_anyway is False  # withheld at the last moment before writing
    assert web.calls("post_message") == []


def test_the_proxy_settings_of_the_environment_apply(web, monkeypatch):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead_proxy = f"http://127.0.0.1:{s.getsockname()[1]}"
    for var in ("http_proxy", "https_proxy", "all_proxy", "no_proxy", "NO_PROXY"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HTTP_PROXY", dead_proxy)
    with pytest.raises(ServerStartError, match="ConnectError"):
        run({"web": ServerConfig(url=web.url)}, lambda hub: None)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")

    async def body(hub):
        return await hub.call("web", "echo", {"text": "direct"})

    assert run({"web": ServerConfig(url=web.url)}, body).text == "direct"


# -- no reply --------------------------------------------------------------------


def test_a_server_that_dies_mid_call_is_no_reply_then_not_sent(own_web):
    web = own_web
    web.set("post_message=die")

    async def body(hub):
        with pytest.raises(NoReplyError) as died:
            await hub.call("web", "post_message", POST)
        # Once the process is gone, nothing listens: the next request is refused before it is
        # written. (While it is still exiting, its kernel may accept a connection it never
        # reads: a request written there is, honestly, doubt.)
        await trio.to_thread.run_sync(web.process.wait)
        with pytest.raises(NotSentError) as after:
            await hub.call("web", "get_status", {})
        return died.value, after.value

    died, after = run({"web": ServerConfig(url=web.url)}, body)
    assert type(died) is NoReplyError
    assert "no usable reply from MCP server 'web' to post_message" in str(died)
    assert "connection broke before the reply was complete" in str(died)
    assert (died.facts["server"], died.facts["tool"]) == ("web", "post_message")
    assert type(after) is NotSentError and "cannot connect" in str(after)
    assert len(web.calls("post_message")) == 1 and web.calls("get_status") == []
    assert not web.alive()


def test_a_reply_dropped_mid_response_is_no_reply_and_the_session_goes_on(web):
    web.set("post_message=drop")

    async def body(hub):
        with pytest.raises(NoReplyError) as dropped:
            await hub.call("web", "post_message", POST)
        return dropped.value, await hub.call("web", "get_status", {})

    dropped, after = run({"web": ServerConfig(url=web.url)}, body)
    assert type(dropped) is NoReplyError and "post_message" in str(dropped)
    assert after.is_error is False
    assert len(web.calls("post_message")) == 1  # it ran: that is why this is doubt


@pytest.mark.parametrize(
    ("mode", "words"),
    [
        ("http500", "the server answered HTTP 500"),
        ("http202", "202 Accepted"),
        ("html", "content of type text/html"),
    ],
)
def test_an_http_answer_that_is_not_json_rpc_is_no_reply(web, mode, words):
    """The SDK makes up a JSON-RPC error for these; the request reached the server (a
    gateway may have passed it on), so it is doubt, never the server's refusal."""
    web.set(f"post_message={mode}")
    error = outcome({"web": ServerConfig(url=web.url)}, "post_message", POST)
    assert type(error) is NoReplyError and words in str(error)
    assert len(web.calls("post_message")) == 1


def test_a_json_rpc_error_in_an_http_error_body_is_the_servers_refusal(web):
    web.set("post_message=rpc400")
    result = outcome({"web": ServerConfig(url=web.url)}, "post_message", POST)
    assert isinstance(result, ToolResult)
    assert (result.is_error, result.error_code, result.text) == (True, -32602, "refused by the gateway")


@pytest.mark.parametrize("flavour", ["json", "stateless-json", "stateless-sse"])
def test_other_server_flavours_end_the_same_ways(tmp_path, flavour):
    """One JSON body per request instead of an event stream, and servers that keep no session:
    the same outcomes, judged from the same facts."""
    env = {
        "HTTP_JSON_RESPONSE": "1" if "json" in flavour else "0",
        "HTTP_STATELESS": "1" if "stateless" in flavour else "0",
    }
    server = HttpServer(tmp_path, flavour, **env).start()
    try:
        server.set("post_message=drop")

        async def body(hub):
            echoed = await hub.call("web", "echo", {"text": "hi"})
            refused = await hub.call("web", "refuse", {})
            failed = await hub.call("web", "fail", {})
            with pytest.raises(NoReplyError) as dropped:
                await hub.call("web", "post_message", POST)
            server.set("get_status=die")
            with pytest.raises(NoReplyError) as died:
                await hub.call("web", "get_status", {})
            await trio.to_thread.run_sync(server.process.wait)  # gone for good (see the test above)
            with pytest.raises(NotSentError) as gone:
                await hub.call("web", "echo", {"text": "anyone?"})
            return echoed, refused, failed, dropped.value, died.value, gone.value

        echoed, refused, failed, dropped, died, gone = run({"web": ServerConfig(url=server.url)}, body)
    finally:
        server.stop()
    assert echoed.text == "hi"
    assert (refused.is_error, refused.error_code) == (True, -32602)
    assert (failed.is_error, failed.error_code) == (True, None)
    assert "post_message" in str(dropped) and "get_status" in str(died)
    assert "cannot connect" in str(gone)
    assert [c["tool"] for c in server.calls()] == ["echo", "refuse", "fail", "post_message", "get_status"]


def test_call_timeout_from_the_server_file_cancels_on_the_server(own_web, tmp_path):
    web = own_web
    servers = parse_servers(
        json.dumps({"mcpServers": {"web": {"url": web.url, "callTimeout": 0.5}}}), str(tmp_path / "mcp.json")
    )

    async def body(hub):
        with pytest.raises(NoReplyError) as timed_out:
            await hub.call("web", "block", {})
        return timed_out.value, await hub.call("web", "echo", {"text": "still here"})

    error, after = run(servers, body)
    assert "web.block did not answer within 0.5 s" in str(error)
    assert error.hint.startswith("raise \"callTimeout\" for server 'web' in the server file")
    assert after.text == "still here"
    assert web.wait_for("cancelled")  # notifications/cancelled reached the server


def test_start_timeout_from_the_server_file(tmp_path):
    # Accepts connections (the kernel does, from the backlog) and never answers a byte.
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(16)
        url = f"http://127.0.0.1:{listener.getsockname()[1]}/mcp"
        servers = parse_servers(
            json.dumps({"mcpServers": {"mute": {"url": url, "startTimeout": 0.5}}}), str(tmp_path / "mcp.json")
        )
        started = time.monotonic()
        with pytest.raises(ServerStartError) as info:
            run(servers, lambda hub: None)
        took = time.monotonic() - started
    assert "MCP server 'mute' failed to start: it did not finish initializing within 0.5 s" in str(info.value)
    assert "\"startTimeout\" for server 'mute'" in info.value.hint
    assert took < 10  # closing the session does not wait for the mute server either


def test_a_quorum_drop_of_an_in_flight_call_returns_promptly(own_web):
    """A branch a quorum no longer needs is cancelled mid-call: the caller is back at once,
    the server is told, and the session serves the next call."""
    web = own_web
    seen = {}

    async def body(hub):
        with trio.CancelScope() as branch:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(hub.call, "web", "block", {})
                while not web.events("started"):
                    await trio.sleep(0.01)
                seen["cancelled_at"] = time.monotonic()
                branch.cancel()  # the quorum is met elsewhere
        seen["returned_in"] = time.monotonic() - seen["cancelled_at"]
        return await hub.call("web", "echo", {"text": "next"})

    after = run({"web": ServerConfig(url=web.url)}, body)
    assert seen["returned_in"] < 1.0
    assert after.text == "next"
    assert web.wait_for("cancelled")


def test_closing_the_hub_does_not_wait_for_a_call_nobody_waits_for(own_web):
    web = own_web

    async def body(hub):
        with trio.move_on_after(0.3):
            await hub.call("web", "block", {})
        return time.monotonic()

    left = run({"web": ServerConfig(url=web.url)}, body)
    assert time.monotonic() - left < 3


# -- the run API -----------------------------------------------------------------

RECIPE = 'recipe "remote"\npost: web.post_message {"channel": "#ops", "text": "hello"}\n'


def runs_for(tmp_path: Path, url: str, **config):
    from vodou_engine.runs import Runs

    return Runs(store=tmp_path / "runs.db", servers={"web": ServerConfig(url=url, **config)})


def test_an_approved_effect_over_http_runs_once(web, tmp_path):
    runs = runs_for(tmp_path, web.url)
    try:
        parked = trio.run(lambda: runs.start("remote.recipe", text=RECIPE, actor="ana"))
        assert parked.state == "parked" and [p.step for p in parked.pending] == ["post"]
        assert web.url in parked.pending[0].card  # which "web" this is
        assert web.calls("post_message") == []  # the gate held
        done = trio.run(lambda: runs.approve(parked.run, "post", actor="ana"))
        assert done.state == "succeeded"
        (effect,) = runs.show(parked.run).effects
        assert effect.state == "executed"
    finally:
        runs.close()
    (call,) = web.calls("post_message")
    assert call["arguments"]["channel"] == "#ops"
    assert call["arguments"]["idempotency_key"] == effect.idempotency_key  # added from the input schema


@pytest.mark.parametrize("mode", ["drop", "die"])
def test_a_connection_dropped_mid_effect_leaves_it_unknown_and_it_is_never_retried(web, tmp_path, mode):
    runs = runs_for(tmp_path, web.url)
    try:
        parked = trio.run(lambda: runs.start("remote.recipe", text=RECIPE, actor="ana"))
        web.set(f"post_message={mode}")
        after = trio.run(lambda: runs.approve(parked.run, "post", actor="ana"))
        assert list(after.unknown) == ["post"] and after.errors == {}
        assert "may or may not have happened" in after.unknown["post"]
        (effect,) = runs.show(parked.run).effects
        assert effect.state == "unknown"
        if mode == "drop":  # the server is still up: driving the run again sends nothing
            web.set()
            again = trio.run(lambda: runs.resume(parked.run))
            assert list(again.unknown) == ["post"]
    finally:
        runs.close()
    assert len(web.calls("post_message")) == 1


# -- bindings (section 2) ----------------------------------------------------------


def test_a_run_parked_against_one_url_is_refused_against_another(web, tmp_path):
    first = runs_for(tmp_path, web.url, headers={"X-Tenant": "sandbox"})
    try:
        parked = trio.run(lambda: first.start("remote.recipe", text=RECIPE, actor="ana"))
    finally:
        first.close()

    import sqlite3

    with sqlite3.connect(tmp_path / "runs.db") as conn:
        (stored,) = conn.execute("SELECT servers_json FROM runs").fetchone()
    binding = json.loads(stored)["web"]
    assert binding["transport"] == "http" and binding["url"] == web.url
    assert set(binding["headers"]) == {"X-Tenant"} and "sandbox" not in stored  # a digest, never the value

    same_server_other_url = web.url.replace("127.0.0.1", "localhost")
    for config, words in (
        (
            {"url": same_server_other_url, "headers": {"X-Tenant": "sandbox"}},
            ["url: the run has", same_server_other_url],
        ),
        ({"url": web.url, "headers": {"X-Tenant": "production"}}, ["header X-Tenant: a different value here"]),
        ({"url": web.url}, ["header X-Tenant: set for the run, not set here"]),
    ):
        other = runs_for(tmp_path, **config)
        try:
            with pytest.raises(ServerMismatchError) as info:
                trio.run(partial(other.approve, parked.run, "post", actor="ana"))
        finally:
            other.close()
        assert "'web'" in str(info.value) and "nothing was run" in str(info.value)
        for word in words:
            assert word in str(info.value)
        assert "production" not in str(info.value)
    assert web.calls("post_message") == []

    same = runs_for(tmp_path, web.url, headers={"X-Tenant": "sandbox"})
    try:
        assert trio.run(lambda: same.approve(parked.run, "post", actor="ana")).state == "succeeded"
    finally:
        same.close()
    assert len(web.calls("post_message")) == 1


def test_a_stdio_binding_stored_before_http_existed_keeps_its_digest():
    """New binding fields are left out of the encoding at their defaults: an approval's
    fingerprint over a binding stored before them still matches."""
    from vodou_engine.binding import ServerBinding, decode_bindings, digest, encode_bindings

    # As the binding.py before HTTP servers encoded it, and the digest it gave (computed with that version).
    old = '{"slack":{"command":"python","args":["-m","x"],"executable":"/usr/bin/python","env":{"A":"sha256:00"},"source":"f"}}'
    decoded = decode_bindings(old)
    assert decoded["slack"].transport == "stdio"
    assert encode_bindings(decoded) == old
    assert digest(decoded["slack"]) == "sha256:fde30b9de20cf0896456a347544883008501ceeee3e03cd2b66226acd286a2bf"
    assert digest(
        ServerBinding(command="python", args=["-m", "x"], env={"A": "sha256:00"}, executable="/usr/bin/python")
    ) == digest(decoded["slack"])
