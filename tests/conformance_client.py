"""The engine's MCP client as the conformance suite's client under test.

The suite (``@modelcontextprotocol/conformance client --command ...``) starts a test
server for one scenario, runs ``python tests/conformance_client.py URL`` with the
scenario's name in ``$MCP_CONFORMANCE_SCENARIO``, and judges what the server saw. The
client is the one every run uses: a servers file as a person writes it (``{"url": ...}``)
read by ``parse_servers``, the hub (``open_hub``: initialize, the tool listing), and a
tool call through ``Hub.call`` with the transport of ``tools/http.py`` under it.

Per scenario: ``initialize`` lists the tools; ``tools_call`` calls ``add_numbers`` with
5 and 3; ``sse-retry`` calls ``test_reconnection`` (whose stream the server closes, to be
resumed with ``Last-Event-ID``); any other scenario lists the tools and calls the first
one with no arguments. Exit 0 when every step got an answer, 1 otherwise (the message
on stderr).
"""

from __future__ import annotations

import json
import os
import sys

import trio

from vodou_engine.errors import VodouError
from vodou_engine.servers.file import parse_servers
from vodou_engine.tools.hub import open_hub

CALLS = {"tools_call": ("add_numbers", {"a": 5, "b": 3}), "sse-retry": ("test_reconnection", {})}
NAME = "conformance"


async def scenario(url: str, name: str) -> None:
    servers = parse_servers(json.dumps({"mcpServers": {NAME: {"url": url, "callTimeout": 20}}}), "conformance")
    async with open_hub(servers, [NAME], start_timeout=20) as hub:
        tools = hub.tools(NAME)
        print(f"{name}: tools {sorted(tools)}")
        if name == "initialize":
            return
        tool, arguments = CALLS.get(name) or (next(iter(tools), None), {})
        if tool is None:
            return
        result = await hub.call(NAME, tool, arguments)
        print(f"{tool}: {result.text}")
        if result.is_error:
            raise SystemExit(f"{tool} failed: {result.text}")


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: conformance_client.py SERVER_URL (with $MCP_CONFORMANCE_SCENARIO)", file=sys.stderr)
        return 2
    try:
        trio.run(scenario, argv[1], os.environ.get("MCP_CONFORMANCE_SCENARIO", ""))
    except VodouError as exc:
        print(f"{type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
