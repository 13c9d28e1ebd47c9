"""`recipe mcp` and `/mcp` of `recipe serve` as MCP servers: they say what they offer, and only that.

``initialize`` advertises the tools alone (no prompts, no resources: there are
none) and names the package's version; a request for prompts or resources is a
JSON-RPC error with the spec's code (-32601 method not found, -32602 for
malformed params), and the server logs no traceback for it.

Over stdio the client is the MCP SDK's own ``ClientSession`` on a real
``python -m vodou_engine.agents.mcp_server`` process (and, for params no typed
client sends, the same process spoken to line by line); over HTTP, requests as
any client sends them to a real `recipe serve` (tests/web_helpers.py's
``Serving``) with an agent's bearer token. Each server's stderr is read after.
"""

from __future__ import annotations

import json
import select
import subprocess
import sys
from contextlib import AsyncExitStack

import anyio
import httpx2
import pytest
from conftest import Cli
from web_helpers import Serving

import vodou_engine

METHOD_NOT_FOUND, INVALID_PARAMS = -32601, -32602
MCP_HEADERS = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
CLIENT_INFO = {"name": "protocol-test", "version": "1"}


def server_argv(cli: Cli) -> list[str]:
    return [sys.executable, "-m", "vodou_engine.agents.mcp_server", "--store", cli.location]


def no_traceback(text: str) -> None:
    assert "Traceback" not in text and "ValueError" not in text and "Unknown prompt" not in text, text


def test_recipe_mcp_offers_only_its_tools_and_names_its_version(cli):
    from mcp.client.session import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client
    from mcp.shared.exceptions import MCPError
    from mcp.types import Implementation

    stderr = cli.tmp / "mcp.stderr"

    async def main(err):
        async with AsyncExitStack() as stack:
            argv = server_argv(cli)
            params = StdioServerParameters(command=argv[0], args=argv[1:], env=cli.env, cwd=str(cli.tmp))
            read, write = await stack.enter_async_context(stdio_client(params, errlog=err))
            session = await stack.enter_async_context(
                ClientSession(read, write, client_info=Implementation(**CLIENT_INFO))
            )
            init = await session.initialize()
            assert init.server_info.name == "vodou" and init.server_info.version == vodou_engine.__version__
            caps = init.capabilities
            assert caps.tools is not None and caps.prompts is None and caps.resources is None, caps
            assert "start_run" in {t.name for t in (await session.list_tools()).tools}
            refused = {}
            for name, request in (
                ("prompts/get", lambda: session.get_prompt("briefing")),
                ("prompts/list", session.list_prompts),
                ("resources/read", lambda: session.read_resource("file:///etc/passwd")),
                ("resources/list", session.list_resources),
                ("resources/templates/list", session.list_resource_templates),
            ):
                with pytest.raises(MCPError) as info:
                    await request()
                refused[name] = info.value.error.code
            assert refused == dict.fromkeys(refused, METHOD_NOT_FOUND)
            assert (await session.call_tool("list_runs", {})).is_error is False  # it goes on serving

    with open(stderr, "w") as err:
        anyio.run(main, err)
    no_traceback(stderr.read_text())


def test_recipe_mcp_answers_bad_requests_with_the_specs_codes(cli):
    """Line by line, for requests a typed client would not send (malformed params)."""
    proc = subprocess.Popen(
        server_argv(cli),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=cli.env,
        cwd=cli.tmp,
    )
    asked = 0

    def ask(method: str, params: dict | None = None) -> dict:
        """One request, and its reply (read before the next is sent)."""
        nonlocal asked
        asked += 1
        proc.stdin.write(
            json.dumps(
                {"jsonrpc": "2.0", "id": asked, "method": method, **({"params": params} if params is not None else {})}
            )
            + "\n"
        )
        proc.stdin.flush()
        while True:
            ready, _, _ = select.select([proc.stdout], [], [], 60)
            assert ready, f"no reply to {method}"
            reply = json.loads(proc.stdout.readline())
            if reply.get("id") == asked:
                return reply

    try:
        init = ask("initialize", {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": CLIENT_INFO})
        assert init["result"]["serverInfo"]["version"] == vodou_engine.__version__
        assert set(init["result"]["capabilities"]) == {"tools"}, init
        proc.stdin.write(json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}) + "\n")
        codes = {
            "a prompt": ask("prompts/get", {"name": "briefing"})["error"]["code"],
            "a prompt, malformed": ask("prompts/get", {"arguments": 7})["error"]["code"],
            "a resource, malformed": ask("resources/read", {})["error"]["code"],
            "a subscription": ask("resources/subscribe", {"uri": "file:///x"})["error"]["code"],
            "no such method": ask("vodou/approve", {"run": "any"})["error"]["code"],
        }
        assert codes == {
            "a prompt": METHOD_NOT_FOUND, "a prompt, malformed": INVALID_PARAMS, "a resource, malformed": INVALID_PARAMS,
            "a subscription": METHOD_NOT_FOUND, "no such method": METHOD_NOT_FOUND,
        }  # fmt: skip
        assert "tools" in ask("tools/list")["result"]  # it goes on serving
    finally:
        proc.stdin.close()
        stderr = proc.stderr.read()
        assert proc.wait(60) == 0, stderr
        proc.stdout.close()
        proc.stderr.close()
    no_traceback(stderr)


# --- /mcp of `recipe serve` -----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def serving(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("agents-protocol")
    token = Cli(tmp)("agent", "add", "bot", expect=0).out.strip()
    serving = Serving(tmp).start()
    try:
        yield serving, token
    finally:
        code, alive = serving.stop()
    assert code == 0 and not alive, serving.log.read_text()


def test_mcp_over_http_offers_only_its_tools_and_answers_with_the_specs_codes(serving):
    served, token = serving
    headers = {**MCP_HEADERS, "authorization": f"Bearer {token}"}

    def post(body: dict) -> dict:
        res = httpx2.post(served.url + "/mcp", headers=headers, content=json.dumps(body), timeout=60)
        assert res.status_code == 200, res.text
        return res.json()

    init = post(
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": CLIENT_INFO},
        }
    )
    assert init["result"]["serverInfo"] == {"name": "vodou", "version": vodou_engine.__version__}
    assert set(init["result"]["capabilities"]) == {"tools"}, init
    errors = {
        name: post({"jsonrpc": "2.0", "id": 2, "method": method, "params": params})["error"]["code"]
        for name, method, params in (
            ("a prompt", "prompts/get", {"name": "briefing"}),
            ("the prompts", "prompts/list", {}),
            ("a resource", "resources/read", {"uri": "file:///etc/passwd"}),
            ("a prompt, malformed", "prompts/get", {}),
        )
    }
    assert errors == {
        "a prompt": METHOD_NOT_FOUND,
        "the prompts": METHOD_NOT_FOUND,
        "a resource": METHOD_NOT_FOUND,
        "a prompt, malformed": INVALID_PARAMS,
    }
    no_traceback(served.log.read_text())
