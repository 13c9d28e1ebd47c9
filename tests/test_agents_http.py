"""`recipe serve`'s /mcp: the agent MCP server over streamable HTTP, behind bearer tokens.

One real `python -m vodou_engine.web.serve --port 0` process per test worker
(tests/web_helpers.py's ``Serving``), configured with one server: the
standard-library rogue server (tests/rogue_server.py), which logs every call it
receives. The agent is the MCP SDK's own streamable HTTP client
(``mcp.client.streamable_http``) sending ``Authorization: Bearer TOKEN``, a token
`recipe agent add` printed; the person is `recipe approve` (the CLI, in this
process). Effects are counted where they land: the rogue server's own log.
"""

from __future__ import annotations

import hashlib
import json
import re
import uuid
from contextlib import AsyncExitStack
from dataclasses import dataclass
from pathlib import Path

import anyio
import httpx2
import pytest
from conftest import Cli, rogue_calls, rogue_server
from web_helpers import Serving

TOOLS = {
    "list_tools",
    "check_recipe",
    "save_recipe",
    "start_run",
    "run_status",
    "list_runs",
    "propose_schedule",
    "draft_recipe",
}
MCP_HEADERS = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
LOOK = 'recipe "look"\nlook: rogue.get_status {}\n'
"""A read: a start_run of it that got through would call get_status at once."""


def posting(text: str, extra: str = "") -> str:
    """A read, then a post of ``text`` (an effect: the run parks before it)."""
    return f'recipe "post it"\nstatus: rogue.get_status {{}}\npost: rogue.post_message {{"channel": "#daily", "text": "{text}"}}\n{extra}'


@dataclass
class Served:
    tmp: Path
    cli: Cli
    serving: Serving
    log: Path
    tokens: dict[str, str]

    @property
    def url(self) -> str:
        return self.serving.url + "/mcp"

    def posts(self, text: str) -> list[dict]:
        return [c for c in rogue_calls(self.log, "post_message") if c["arguments"].get("text") == text]

    def looks(self) -> int:
        return len(rogue_calls(self.log, "get_status"))

    def runs(self) -> list:
        from vodou_engine.runs import Runs

        runs = Runs(store=self.tmp / "runs.db")
        try:
            return runs.list()
        finally:
            runs.close()

    def audit(self, kind: str) -> list:
        from vodou_engine.store import open_store

        store = open_store(str(self.tmp / "runs.db"), create=False, readonly=True)
        try:
            return [a for a in store.audit_log() if a.kind == kind]
        finally:
            store.close()

    def raw(
        self, method: str, token: str | None = None, body: dict | None = None, headers: dict | None = None
    ) -> httpx2.Response:
        """One HTTP request to /mcp, as any client could send it."""
        h = {**MCP_HEADERS, **(headers or {})}
        if token is not None:
            h["authorization"] = f"Bearer {token}"
        return httpx2.request(
            method, self.url, headers=h, content=json.dumps(body) if body is not None else None, timeout=60
        )


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("agents-http")
    cli = Cli(tmp)
    log = tmp / "rogue.log"
    servers = cli.servers_file({"rogue": rogue_server(log)})  # ./mcp.json: `recipe approve` here finds the same server
    tokens = {
        name: cli("agent", "add", name, *flags, expect=0).out.strip()
        for name, flags in (("bot", ()), ("other", ()), ("watcher", ("--see", "all")))
    }
    serving = Serving(tmp, "--servers", str(servers)).start()
    try:
        yield Served(tmp, cli, serving, log, tokens)
    finally:
        code, alive = serving.stop()
    assert code == 0 and not alive, serving.log.read_text()


def docs_snippet() -> dict:
    """The client configuration docs/agents.md shows for /mcp (the stdio ones: test_agents.py)."""
    text = (Path(__file__).resolve().parent.parent / "docs" / "agents.md").read_text(encoding="utf-8")
    blocks = [json.loads(b) for b in re.findall(r"```json\n(.*?)\n```", text, re.S)]
    (entry,) = [e for b in blocks for e in b.get("mcpServers", {}).values() if "url" in e]
    return entry


class Agent:
    """The MCP SDK's streamable HTTP client with a bearer token (and a name it claims for itself),
    connected as docs/agents.md says: the inbox's address with /mcp, and the header."""

    def __init__(self, served: Served, token: str, claims: str = "root"):
        entry = docs_snippet()
        self.url = served.serving.url + entry["url"].removeprefix("http://127.0.0.1:8400")
        self.headers = {k: v.replace("vodou_agent_...", token) for k, v in entry["headers"].items()}
        assert self.url == served.url and self.headers == {"Authorization": f"Bearer {token}"}, entry
        self.claims = claims

    async def __aenter__(self) -> Agent:
        from mcp.client.session import ClientSession
        from mcp.client.streamable_http import streamable_http_client
        from mcp.types import Implementation

        self.stack = AsyncExitStack()
        await self.stack.__aenter__()
        http = await self.stack.enter_async_context(
            httpx2.AsyncClient(headers=self.headers, timeout=httpx2.Timeout(60))
        )
        read, write = await self.stack.enter_async_context(streamable_http_client(self.url, http_client=http))
        self.session = await self.stack.enter_async_context(
            ClientSession(read, write, client_info=Implementation(name=self.claims, version="1"))
        )
        await self.session.initialize()
        return self

    async def __aexit__(self, *exc) -> None:
        await self.stack.__aexit__(*exc)

    async def call(self, tool: str, **arguments) -> tuple[bool, dict]:
        res = await self.session.call_tool(tool, arguments)
        data = res.structured_content if res.structured_content is not None else {"text": res.content[0].text}
        return bool(res.is_error), data

    async def ok(self, tool: str, **arguments) -> dict:
        err, data = await self.call(tool, **arguments)
        assert not err, json.dumps(data, indent=2)
        return data

    async def refused(self, tool: str, **arguments) -> dict:
        err, data = await self.call(tool, **arguments)
        assert err, json.dumps(data, indent=2)
        return data.get("error", data)


def run(fn):
    """Run ``fn`` under anyio; a failure inside the client's task groups is raised as itself."""
    try:
        return anyio.run(fn)
    except BaseExceptionGroup as group:
        leaves, stack = [], [group]
        while stack:
            e = stack.pop()
            stack.extend(e.exceptions) if isinstance(e, BaseExceptionGroup) else leaves.append(e)
        if len(leaves) == 1:
            raise leaves[0] from None
        raise


def park(served: Served, text: str) -> dict:
    """The bot starts a run that posts ``text``; its report once it parked."""

    async def main():
        async with Agent(served, served.tokens["bot"]) as bot:
            return await bot.ok("start_run", recipe=posting(text))

    report = run(main)
    assert report["state"] == "parked", report
    return report


# --- the whole way: an agent over HTTP proposes, a person decides ------------------------------------
def test_an_agent_over_http_lists_checks_and_starts_and_only_a_person_approves(served):
    text = f"from an agent over http {uuid.uuid4().hex[:8]}"

    async def propose():
        async with Agent(served, served.tokens["bot"], claims="root") as bot:
            tools = {t.name: t for t in (await bot.session.list_tools()).tools}
            assert set(tools) == TOOLS
            assert (
                tools["check_recipe"].annotations.read_only_hint is True
                and tools["start_run"].annotations.read_only_hint is False
            )
            listed = await bot.ok("list_tools")
            risks = {t["address"]: t["risk"] for t in listed["tools"]}
            assert risks["rogue.get_status"] == "read" and risks["rogue.post_message"] == "write", risks

            checked = await bot.ok(
                "check_recipe", recipe='recipe "typo"\npost: rogue.post_mesage {"channel": "#daily", "text": "x"}\n'
            )
            (error,) = checked["errors"]
            assert not checked["ok"] and error["code"] == "tool.unknown" and (error["line"], error["column"]) == (2, 7)
            assert error["caret"].strip() and "rogue.post_message" in error["message"] and error["hint"]

            report = await bot.ok("start_run", recipe=posting(text))
            assert (
                report["state"] == "parked" and report["started_by"] == "agent:bot"
            )  # not "root", the name it claimed
            (pending,) = report["pending"]
            assert pending["step"] == "post" and report["approvers_added"] == pending["approvers"]
            assert pending["decide"]["approve"].startswith(f"recipe approve {report['run']} post")
            assert pending["decide"]["web"] == f"{served.serving.url}/runs/{report['run']}"
            status = await bot.ok("run_status", run=report["run"])
            assert status["state"] == "parked" and [p["step"] for p in status["pending"]] == ["post"]
            assert status["outputs"]["status"] is not None  # the read ran
            return report["run"]

    run_id = run(propose)
    assert served.posts(text) == []  # nothing on the server until a person says yes

    served.cli("approve", run_id, "--yes", expect=0)  # a person, from a shell
    assert len(served.posts(text)) == 1

    async def follow():
        async with Agent(served, served.tokens["bot"]) as bot:
            status = await bot.ok("run_status", run=run_id)
            assert status["state"] == "succeeded" and status["pending"] == []
            assert [(e["step"], e["state"]) for e in status["effects"]] == [("post", "executed")]

    run(follow)
    assert len(served.posts(text)) == 1


def test_the_same_rules_as_over_stdio(served):
    text = f"sneaky {uuid.uuid4().hex[:8]}"

    async def main():
        async with Agent(served, served.tokens["bot"]) as bot:
            err = await bot.refused("start_run", recipe=posting(text) + "  without asking\n")
            assert err["code"] == "recipe.invalid" and "may not opt out of asking" in err["message"]
            err = await bot.refused("start_run", recipe=posting(text), approved=True)
            assert err["code"] == "usage" and "`approved`" in err["message"]
            err, _ = await bot.call("approve", run="any")
            assert err  # no such tool
            mine = (await bot.ok("start_run", recipe=posting(text)))["run"]
        async with Agent(served, served.tokens["other"]) as other:
            err = await other.refused("run_status", run=mine)
            assert err["code"] == "refused" and "agent:other" in err["message"]
            assert mine not in {r["run"] for r in (await other.ok("list_runs"))["runs"]}
        async with Agent(served, served.tokens["watcher"]) as watcher:  # added with --see all
            assert (await watcher.ok("run_status", run=mine))["started_by"] == "agent:bot"
        return mine

    mine = run(main)
    assert served.posts(text) == []
    assert [r.state for r in served.runs() if r.run == mine] == ["parked"]


# --- no token, no entry -----------------------------------------------------------------------------
def test_no_token_a_wrong_token_or_a_removed_agent_gets_401_and_nothing_is_done(served):
    call = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": "start_run", "arguments": {"recipe": LOOK}},
    }
    looks, runs, audited = served.looks(), len(served.runs()), len(served.audit("agent.refused"))

    refused = [
        served.raw("POST", None, call),
        served.raw("POST", "vodou_agent_" + "x" * 43, call),
        served.raw("POST", served.tokens["bot"][:-1], call),
        served.raw("POST", None, call, headers={"authorization": f"Basic {served.tokens['bot']}"}),
        served.raw("GET", None),
        served.raw("DELETE", None),
    ]
    for res in refused:
        assert res.status_code == 401, res.text
        assert res.headers["www-authenticate"].startswith('Bearer realm="vodou"')
        assert (
            res.headers["x-frame-options"] == "DENY" and "default-src 'none'" in res.headers["content-security-policy"]
        )
    assert (
        'error="invalid_token"' in refused[1].headers["www-authenticate"]
        and "error=" not in refused[0].headers["www-authenticate"]
    )
    assert served.looks() == looks and len(served.runs()) == runs  # nothing started, nothing called

    # an agent's token works until the agent is removed, then not once more
    token = served.cli("agent", "add", "gone", expect=0).out.strip()
    listed = served.raw("POST", token, {**call, "params": {"name": "list_runs", "arguments": {}}})
    assert listed.status_code == 200 and listed.json()["result"]["structuredContent"]["runs"] == []
    served.cli("agent", "remove", "gone", expect=0)
    res = served.raw("POST", token, call)
    assert res.status_code == 401 and 'error="invalid_token"' in res.headers["www-authenticate"]
    # so does a token replaced by `agent add` again
    old = served.cli("agent", "add", "gone", expect=0).out.strip()
    new = served.cli("agent", "add", "gone", expect=0).out.strip()
    assert served.raw("POST", old, call).status_code == 401
    served.cli("agent", "remove", "gone", expect=0)
    assert served.raw("POST", new, call).status_code == 401
    assert served.looks() == looks and len(served.runs()) == runs
    assert len(served.audit("agent.refused")) == audited + 9  # every refusal is in the audit log


def test_an_agent_token_is_no_session_no_sign_in_link_and_no_approver_secret(served):
    text = f"not yours to approve {uuid.uuid4().hex[:8]}"
    report = park(served, text)
    run_id, (pending,) = report["run"], report["pending"]
    token = served.tokens["bot"]
    web = httpx2.Client(base_url=served.serving.url, follow_redirects=False, timeout=60)
    try:
        for headers in ({"cookie": f"vodou_session={token}"}, {"authorization": f"Bearer {token}"}):
            page = web.get("/", headers=headers)
            assert page.status_code == 303 and page.headers["location"].startswith("/signin"), headers
            page = web.get(f"/runs/{run_id}", headers=headers)
            assert page.status_code == 303 and page.headers["location"].startswith("/signin"), headers
        form = {"step": "post", "fingerprint": pending["fingerprint"], "csrf": token}
        for verb in ("approve", "reject"):
            res = web.post(
                f"/runs/{run_id}/{verb}",
                data=form,
                headers={"cookie": f"vodou_session={token}", "authorization": f"Bearer {token}"},
            )
            assert res.status_code == 403 and "Form refused" in res.text, verb
        signin = web.get("/signin", params={"token": token})
        assert signin.status_code == 200 and "not known to this inbox" in signin.text
    finally:
        web.close()
    # nor is it the secret that lets a shell act under a name
    for name in ("bot", "agent:bot"):
        res = served.cli("approve", run_id, "--yes", "--as", name, env={"VODOU_APPROVER_TOKEN": token}, expect=5)
        assert "may not act as" in res.err
    served.cli("approver", "add", "agent:bot", expect=2)  # and no person can take an agent's name

    assert served.posts(text) == []
    (view,) = [r for r in served.runs() if r.run == run_id]
    assert view.state == "parked"


# --- the store -----------------------------------------------------------------------------------------
@pytest.mark.both_stores
def test_agent_tokens_are_kept_hashed_and_a_removed_agent_is_gone_at_once(cli):
    from vodou_engine.store import open_store

    token = cli("agent", "add", "bot", "--see", "all", "--approver", "ana", "--approver", "bruno", expect=0).out.strip()
    assert token.startswith("vodou_agent_") and len(token) > 40
    digest = hashlib.sha256(token.encode()).hexdigest()
    store = open_store(cli.location)
    try:
        rec = store.agent_by_token(digest)
        assert (rec.name, rec.token_sha256, rec.sees, json.loads(rec.approvers_json)) == (
            "bot",
            digest,
            "all",
            ["ana", "bruno"],
        )
        assert token not in repr(store.agents_list()) and token not in repr(store.audit_log())
        listed = cli("agent", "list", expect=0).out
        assert listed.startswith("bot\tsees all\tapprovers ana, bruno") and token not in listed and digest not in listed

        again = cli("agent", "add", "bot", expect=0).out.strip()  # a new token; the old one stops
        assert (
            store.agent_by_token(digest) is None
            and store.agent_by_token(hashlib.sha256(again.encode()).hexdigest()).sees == "own"
        )
        cli("agent", "remove", "bot", expect=0)
        assert store.agent_by_token(hashlib.sha256(again.encode()).hexdigest()) is None and store.agents_list() == []
        cli("agent", "remove", "bot", expect=5)
        cli("agent", "add", "not a name", expect=2)
        cli("agent", "add", "x", "--approver", "agent:x", expect=2)
        assert store.agents_list() == []
        assert [a.kind for a in store.audit_log() if a.kind.startswith("agent.")] == [
            "agent.set",
            "agent.set",
            "agent.removed",
        ]
    finally:
        store.close()
