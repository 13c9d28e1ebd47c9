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

A server that answers ``401`` (the ``auth/*`` scenarios) gets what a person does: the
entry is given ``"auth": "oauth"``, and the person signs in once with the engine's own
sign-in (:func:`vodou_engine.tools.oauth.sign_in`, what ``recipe servers login`` does,
with its loopback listener), the browser played by following the authorization URL
(the suite's authorization servers approve at once), into a sign-in file of a temporary
directory (``$VODOU_SIGN_INS``). Then the run goes again, through the hub, with the
stored grant, as every run does: a run never starts a sign-in itself. When the server
then refuses a call for want of a scope (a 403 ``insufficient_scope``: the step-up of
``auth/scope-step-up``), the run says which scopes it asks for; the person puts them in
the entry's ``"scopes"`` and signs in again, and so does this client, once.
"""

from __future__ import annotations

import json
import os
import re
import sys
import tempfile

import httpx2
import trio

from vodou_engine.errors import NoReplyError, VodouError
from vodou_engine.runs.common import plain_error
from vodou_engine.servers.file import parse_servers
from vodou_engine.servers.signins import SIGN_INS_ENV
from vodou_engine.tools import oauth
from vodou_engine.tools.hub import open_hub

CALLS = {"tools_call": ("add_numbers", {"a": 5, "b": 3}), "sse-retry": ("test_reconnection", {})}
NAME = "conformance"
ASKS_FOR = re.compile(r"the server asks for ((?:\"[^\"]+\"(?:, )?)+): put them in the entry's \"scopes\"")
"""How a run says the sign-in lacks a scope (``tools/oauth.py``, ``refusal_words``)."""


def servers_file(url: str, signs_in: bool, scopes: list[str] | None = None):
    entry: dict = {"url": url, "callTimeout": 20}
    if signs_in:
        entry |= {"auth": "oauth", **({"scopes": scopes} if scopes else {})}
    return parse_servers(json.dumps({"mcpServers": {NAME: entry}}), "conformance")


async def run(url: str, name: str, signs_in: bool, scopes: list[str] | None = None) -> None:
    async with open_hub(servers_file(url, signs_in, scopes), [NAME], start_timeout=20) as hub:
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


async def login(url: str, scopes: list[str] | None = None) -> None:
    """``recipe servers login``, with the browser played: the authorization URL is followed,
    redirects and all, back to the loopback listener."""
    resolved = servers_file(url, True, scopes)[NAME].resolve(NAME)

    async def browser(address: str) -> None:
        print(f"sign-in: following {address}")
        async with httpx2.AsyncClient(follow_redirects=True, timeout=30) as client:
            landed = await client.get(address)
        if landed.status_code != 200:
            raise SystemExit(f"the authorization page answered {landed.status_code}: {landed.text[:500]}")

    async with oauth.loopback() as (redirect_uri, wait):
        grant = await oauth.sign_in(resolved, redirect_uri, browser, wait, timeout=60)
    print(f"sign-in: signed in with {grant.issuer} (scope {grant.scope})")


async def scenario(url: str, name: str) -> None:
    """The run; on a 401, a sign-in and the run again; when the run then says the sign-in
    lacks a scope (naming it), that scope in the entry, a sign-in and the run again, once."""
    try:
        await run(url, name, signs_in=False)
        return
    except VodouError as exc:
        if "401" not in str(exc):
            raise
        print(f"{name}: {exc}")
    await login(url)
    try:
        await run(url, name, signs_in=True)
        return
    except NoReplyError as exc:
        asked = ASKS_FOR.search(str(exc))
        if asked is None:
            raise
        print(f"{name}: {exc}")
    scopes = re.findall(r'"([^"]+)"', asked[1])
    await login(url, scopes)
    await run(url, name, signs_in=True, scopes=scopes)


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: conformance_client.py SERVER_URL (with $MCP_CONFORMANCE_SCENARIO)", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as scratch:
        os.environ[SIGN_INS_ENV] = os.path.join(scratch, "sign-ins.db")
        try:
            trio.run(scenario, argv[1], os.environ.get("MCP_CONFORMANCE_SCENARIO", ""))
        except (VodouError, BaseExceptionGroup) as exc:
            leaf = plain_error(exc) if isinstance(exc, BaseExceptionGroup) else exc
            if not isinstance(leaf, VodouError):  # as the CLI does: anything else is a bug, shown whole
                raise
            print(f"{type(leaf).__name__}: {leaf}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
