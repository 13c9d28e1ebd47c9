"""OAuth 2.1 for servers reached by URL (``"auth": "oauth"``), end to end through the CLI,
against an OAuth-protected MCP server started here (tests/oauth_server.py: the SDK's
authorization server and ``MCPServer``). The test plays the browser: it follows the
authorization URL ``recipe servers login`` prints, with an HTTP client, back to the
loopback listener. Calls are counted in the server's own log.

The first test signs in with ``recipe servers login --no-browser`` as a process of its own,
reading the URL from its stderr while it waits. The others sign in with the command run in
this process, the browser it would open being the test's HTTP client (what they prove is what
a kept sign-in does, not how the command is started).
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import httpx2
import pytest
import trio
from oauth_server import OAuthServer

from vodou_engine.errors import EXIT_SIGN_IN, ServerConfigError
from vodou_engine.servers import parse_servers
from vodou_engine.servers.signins import SignIns
from vodou_engine.tools import oauth

READ = 'recipe "who"\nwho: docs.whoami {}\n'
POST = 'recipe "post"\npost: docs.post_message {"channel": "#ops", "text": "hello"}\n'


@pytest.fixture(scope="module")
def _shared_server():
    holder: dict[str, OAuthServer] = {}
    yield holder
    if "oauth" in holder:
        holder["oauth"].stop()


@pytest.fixture
def server(_shared_server, tmp_path_factory):
    """The OAuth test server, one per test process for this module (a start imports the SDK and
    uvicorn: about a second): started again if it is gone, and its log emptied before each test,
    so each test reads only its own registrations, grants and calls. Every test signs in from a
    home of its own, so its client and tokens are its own; forgetting or expiring tokens only
    drops those of tests already over."""
    srv = _shared_server.get("oauth")
    if srv is None or not srv.alive():
        if srv is not None:
            srv.stop()
        srv = _shared_server["oauth"] = OAuthServer(tmp_path_factory.mktemp("oauth")).start()
    else:
        srv.log.write_text("")
    return srv


@pytest.fixture
def home(cli, server):
    cli.servers_file({"docs": {"url": server.url, "auth": "oauth"}})
    (cli.tmp / "read.recipe").write_text(READ)
    (cli.tmp / "post.recipe").write_text(POST)
    return cli


def sign_ins(cli) -> Path:
    return cli.tmp / "data" / "vodou" / "sign-ins.db"


def grant(cli):
    (only,) = SignIns(str(sign_ins(cli))).all()
    return only


def tokens(cli) -> list[str]:
    stored = json.loads(grant(cli).tokens_json)
    return [stored["access_token"], stored["refresh_token"]]


def login(cli) -> tuple[str, str]:
    """``recipe servers login docs`` in this process; the browser it opens is an HTTP client
    that follows the authorization URL back to the command's loopback listener."""
    landed = []

    async def browser(url: str) -> None:
        landed.append(await trio.to_thread.run_sync(lambda: httpx2.get(url, follow_redirects=True, timeout=30)))

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(oauth, "open_browser", browser)
        res = cli("servers", "login", "docs", "--servers", "mcp.json", expect=0, timeout=60)
    (page,) = landed
    assert page.status_code == 200 and "close this tab" in page.text
    return res.out, res.err


def login_process(cli) -> tuple[str, str]:
    """``recipe servers login docs --no-browser`` as a process, the browser played by following
    the URL it prints on its stderr while it waits."""
    proc = cli.popen("servers", "login", "docs", "--no-browser", "--servers", "mcp.json")
    seen = []
    try:
        for line in proc.stderr:
            seen.append(line)
            if line.strip().startswith("http://127.0.0.1") and "/authorize?" in line:
                landed = httpx2.get(line.strip(), follow_redirects=True, timeout=30)
                assert landed.status_code == 200 and "close this tab" in landed.text
                break
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    err = "".join(seen) + err
    assert proc.returncode == 0, err
    return out, err


def test_a_signed_in_run_calls_the_protected_server_and_no_token_is_shown(home, server):
    out, err = login_process(home)
    assert "signed in to docs" in out
    assert [e["event"] for e in server.records()] == ["register", "authorize", "token"]
    assert server.calls() == []  # signing in lists the tools, calls none

    ran = home("run", "read.recipe", "--servers", "mcp.json", expect=0)
    assert [c["tool"] for c in server.calls()] == ["whoami"]
    shown = home("show", *_last_run(home), "--json", expect=0)
    assert "${OAUTH_ACCESS_TOKEN}" in shown.out  # the server echoed its token: masked where it arrived

    secret = tokens(home)
    store_bytes = b"".join(p.read_bytes() for p in home.tmp.glob("runs.db*"))
    for token in secret:
        for text in (out, err, ran.out, ran.err, shown.out):
            assert token not in text
        assert token.encode() not in store_bytes
    with sqlite3.connect(home.store) as conn:
        (stored,) = conn.execute("SELECT servers_json FROM runs").fetchone()
    bound = json.loads(stored)["docs"]["auth"]
    assert bound["issuer"].rstrip("/") == server.base and bound["grant"].startswith("sha256:")
    assert oct(sign_ins(home).stat().st_mode & 0o777) == "0o600"


def _last_run(cli) -> list[str]:
    with sqlite3.connect(cli.store) as conn:
        (run_id,) = conn.execute("SELECT id FROM runs ORDER BY created_at DESC LIMIT 1").fetchone()
    return [run_id]


def test_the_scopes_the_file_asks_for_are_asked_for(home, server):
    home.servers_file({"docs": {"url": server.url, "auth": "oauth", "scopes": ["notes"]}})
    login(home)
    assert [e["scopes"] for e in server.events("authorize")] == [["notes"]]
    assert grant(home).scope == "notes"
    home("run", "read.recipe", "--servers", "mcp.json", expect=0)


def test_an_expired_access_token_is_refreshed_and_the_parked_run_keeps_its_binding(home, server):
    login(home)
    home("run", "post.recipe", "--servers", "mcp.json", "--no-wait", expect=3)
    (run_id,) = _last_run(home)
    before = grant(home)
    old = tokens(home)
    with sqlite3.connect(sign_ins(home)) as conn:  # the access token's time is up
        conn.execute("UPDATE grants SET expires_at = 1")

    approved = home("approve", run_id, "post", "--yes", "--servers", "mcp.json", expect=0)
    assert len(server.events("refresh")) == 1
    assert len(server.calls("post_message")) == 1
    after = grant(home)
    assert after.grant_id == before.grant_id and after.expires_at > 1
    new = tokens(home)
    assert set(new).isdisjoint(old)  # rotated, and kept
    store_bytes = b"".join(p.read_bytes() for p in home.tmp.glob("runs.db*"))
    for token in old + new:
        assert token not in approved.out + approved.err and token.encode() not in store_bytes


def test_without_a_sign_in_a_run_stops_before_anything_with_the_command_to_sign_in(home, server):
    res = home("run", "post.recipe", "--servers", "mcp.json", expect=EXIT_SIGN_IN)
    assert "needs a sign-in" in res.err and "recipe servers login docs" in res.err
    assert "Traceback" not in res.err
    assert server.calls() == [] and server.events("register") == []  # nothing reached it
    home("servers", "status", "--servers", "mcp.json", expect=0)


def test_a_sign_in_the_server_no_longer_honours_stops_the_run_and_no_tool_is_called(home, server):
    login(home)
    httpx2.post(f"{server.base}/test/forget", timeout=30).raise_for_status()
    res = home("run", "read.recipe", "--servers", "mcp.json", expect=EXIT_SIGN_IN)
    assert "no longer accepts its sign-in" in res.err and "recipe servers login docs" in res.err
    assert server.calls() == []
    assert len(server.events("register")) == 1  # the sign-in's: a run never starts one


def test_a_sign_in_refused_mid_run_fails_that_call_in_words_and_the_session_goes_on(home, server, monkeypatch):
    import trio

    from vodou_engine.errors import ToolError
    from vodou_engine.servers import ServerConfig
    from vodou_engine.tools.hub import open_hub

    login(home)
    monkeypatch.setenv("VODOU_SIGN_INS", str(sign_ins(home)))
    seen = []

    async def main():
        async with open_hub({"docs": ServerConfig(url=server.url, auth="oauth")}, ["docs"]) as hub:
            seen.append((await hub.call("docs", "whoami", {})).text)
            await trio.to_thread.run_sync(lambda: httpx2.post(f"{server.base}/test/forget", timeout=30))
            for _ in range(2):
                with pytest.raises(ToolError) as info:
                    await hub.call("docs", "whoami", {})
                seen.append(str(info.value))

    trio.run(main)
    assert seen[0] == "you are ${OAUTH_ACCESS_TOKEN}"
    assert all("no longer accepts the sign-in" in words for words in seen[1:]), seen
    assert len(server.calls("whoami")) == 1 and len(server.events("register")) == 1


def _whoami_twice(url: str, between) -> list[str]:
    """Two calls on one session to ``url``, with ``between()`` (blocking) done between them."""
    import trio

    from vodou_engine.servers import ServerConfig
    from vodou_engine.tools.hub import open_hub

    seen = []

    async def main():
        async with open_hub({"docs": ServerConfig(url=url, auth="oauth")}, ["docs"]) as hub:
            seen.append((await hub.call("docs", "whoami", {})).text)
            await trio.to_thread.run_sync(between)
            seen.append((await hub.call("docs", "whoami", {})).text)

    trio.run(main)
    return seen


def test_an_access_token_dropped_early_is_refreshed_on_the_401(home, server, monkeypatch):
    login(home)
    monkeypatch.setenv("VODOU_SIGN_INS", str(sign_ins(home)))
    before = grant(home)
    seen = _whoami_twice(server.url, lambda: httpx2.post(f"{server.base}/test/expire-access", timeout=30))
    assert seen == ["you are ${OAUTH_ACCESS_TOKEN}"] * 2
    assert len(server.calls("whoami")) == 2 and len(server.events("refresh")) == 1
    assert len(server.events("register")) == 1 and grant(home).grant_id == before.grant_id


def test_a_session_takes_the_tokens_another_process_refreshed(home, server, monkeypatch):
    """A rotated refresh token is good once: a session whose tokens another process refreshed
    meanwhile reads the newer ones from the sign-in file instead of spending a spent one."""
    login(home)
    monkeypatch.setenv("VODOU_SIGN_INS", str(sign_ins(home)))

    def elsewhere():
        httpx2.post(f"{server.base}/test/expire-access", timeout=30).raise_for_status()
        with sqlite3.connect(sign_ins(home)) as conn:
            conn.execute("UPDATE grants SET expires_at = 1")
        home.proc(
            "run", "read.recipe", "--servers", "mcp.json", expect=0
        )  # refreshes: the first refresh token is spent

    seen = _whoami_twice(server.url, elsewhere)
    assert seen == ["you are ${OAUTH_ACCESS_TOKEN}"] * 2
    assert len(server.events("refresh")) == 1  # the other process's only
    assert len(server.calls("whoami")) == 3


def test_a_parked_run_is_refused_after_a_new_sign_in(home, server):
    login(home)
    home("run", "post.recipe", "--servers", "mcp.json", "--no-wait", expect=3)
    (run_id,) = _last_run(home)
    login(home)  # another grant (it could be another account)
    res = home("approve", run_id, "post", "--yes", "--servers", "mcp.json", expect=5)
    assert "signed in again since the run started" in res.err
    assert server.calls() == []
    home("servers", "logout", "docs", "--servers", "mcp.json", expect=0)
    res = home("approve", run_id, "post", "--yes", "--servers", "mcp.json", expect=5)
    assert "no sign-in is stored here" in res.err
    assert server.calls() == []


@pytest.mark.parametrize(
    ("entry", "words"),
    [
        ({"command": "x", "auth": "oauth"}, 'is for a server reached by "url"'),
        ({"url": "https://a.example/mcp", "auth": "basic"}, 'unknown "auth"'),
        ({"url": "https://a.example/mcp", "scopes": ["read"]}, '"scopes" are for an OAuth server'),
        (
            {"url": "https://a.example/mcp", "auth": "oauth", "headers": {"Authorization": "Bearer x"}},
            "which credential is meant",
        ),
        ({"url": "https://a.example/mcp", "auth": "oauth", "scopes": ["a b"]}, "is not an OAuth scope"),
    ],
)
def test_the_server_file_says_oauth_plainly(entry, words):
    with pytest.raises(ServerConfigError) as info:
        parse_servers(json.dumps({"mcpServers": {"docs": entry}}), "mcp.json")
    assert words in str(info.value) and "mcp.json: server 'docs'" in str(info.value)


def test_oauth_and_scopes_are_read():
    (config,) = parse_servers(
        json.dumps({"mcpServers": {"docs": {"url": "https://a.example/mcp", "auth": "OAuth", "scopes": ["read"]}}}),
        "mcp.json",
    ).values()
    assert config.oauth and config.auth == "oauth" and config.scopes == ["read"]


# -- from the inbox of `recipe serve` ------------------------------------------------------


def test_the_service_signs_in_from_the_inbox_and_its_runs_use_the_grant(tmp_path, server, monkeypatch):
    import trio
    from starlette.testclient import TestClient
    from web_helpers import form, sign_in

    from vodou_engine.policy import Policy
    from vodou_engine.runs import Runs
    from vodou_engine.servers import ServerConfig, ServerSet
    from vodou_engine.service import Service
    from vodou_engine.web.app import create_app
    from vodou_engine.web.config import WebConfig
    from vodou_engine.web.identity import add_approver

    monkeypatch.setenv("VODOU_SIGN_INS", str(tmp_path / "sign-ins.db"))
    servers = ServerSet({"docs": ServerConfig(url=server.url, auth="oauth")}, "test")
    svc = Service(store=str(tmp_path / "runs.db"), servers=servers, policy=Policy())
    runs = svc.runs()
    _, link = add_approver(runs, "ana", by="test", base_url="http://testserver")
    runs.close()
    app = create_app(svc, WebConfig(allowed_hosts=["testserver"]))
    with TestClient(app, backend="trio", base_url="http://testserver") as client:
        ana = sign_in(client, link, "ana")
        page = ana.get("/servers").text
        assert "not signed in" in page
        started = ana.post("/servers/docs/signin", form(page, "/servers/docs/signin"), follow=False)
        assert started.status_code == 303 and started.headers["location"].startswith(server.base + "/authorize?")

        # The browser: to the authorization server, which sends it back to the inbox's callback.
        consent = httpx2.get(started.headers["location"], follow_redirects=False, timeout=30)
        back = consent.headers["location"]
        assert back.startswith("http://testserver/oauth/callback?")
        done = client.get(back.removeprefix("http://testserver"))  # no session cookie: it comes from another site
        assert done.status_code == 200 and "Signed in to docs" in done.text
        again = client.get(back.removeprefix("http://testserver"))  # a state is good once
        assert again.status_code == 400
        assert "signed in with" in ana.get("/servers").text
    for token in tokens_at(tmp_path / "sign-ins.db"):
        assert token not in done.text

    runs = Runs(store=tmp_path / "runs.db", servers=servers)
    try:
        report = trio.run(lambda: runs.start("read.recipe", text=READ, actor="ana"))
    finally:
        runs.close()
    assert report.state == "succeeded"
    assert [c["tool"] for c in server.calls()] == ["whoami"]


def tokens_at(path: Path) -> list[str]:
    (only,) = SignIns(str(path)).all()
    stored = json.loads(only.tokens_json)
    return [stored["access_token"], stored["refresh_token"]]
