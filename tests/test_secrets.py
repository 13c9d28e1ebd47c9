"""Secrets: ``${VAR}`` in a server's configuration is taken from the
caller's environment when the server starts, ``inherit`` hands on named variables,
and a value taken from the environment never appears in the store, a card, ``show``,
the audit log, an error message or ``--json`` output.

The leak test plants a known value in the environment, runs recipes against a
stdio server (tests/rogue_server.py) and an HTTP server (tests/http_server.py)
that use it in ``args``, ``env``, ``inherit``, ``url`` and ``headers``, through the
run API and the CLI, and searches every output and every file the engine wrote.
"""

from __future__ import annotations

import json
import os
import secrets as random
import sys
from pathlib import Path

import pytest
import trio
from http_server import HttpServer

from vodou_engine.binding import bind, differences, encode_bindings
from vodou_engine.errors import ServerConfigError, ServerMismatchError, ServerStartError
from vodou_engine.servers import ServerConfig, parse_servers, parse_template
from vodou_engine.tools.hub import open_hub

ROGUE = str(Path(__file__).with_name("rogue_server.py"))
SAFETY = 60

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="the test servers run in POSIX process groups")

SECRET_VAR = "VODOU_TEST_SECRET"
INHERITED_VAR = "VODOU_TEST_INHERITED"


@pytest.fixture
def planted(monkeypatch):
    """Two secret values in this process's environment; returns them."""
    values = {SECRET_VAR: "s3cr3t-" + random.token_hex(12), INHERITED_VAR: "inh3rit-" + random.token_hex(12)}
    for var, value in values.items():
        monkeypatch.setenv(var, value)
    monkeypatch.setenv("VODOU_TEST_NOT_NAMED", "not-for-servers")
    return values


@pytest.fixture
def guarded(tmp_path, planted):
    """An HTTP server that answers 401 unless the URL and the Authorization header carry the secret."""
    secret = planted[SECRET_VAR]
    server = HttpServer(tmp_path, "guarded", HTTP_EXPECT_AUTH=f"Bearer {secret}", HTTP_EXPECT_KEY=secret).start()
    yield server
    server.stop()


def server_entries(tmp_path: Path, http: HttpServer) -> dict:
    """The servers of the leak test, as a person writes them in mcp.json."""
    return {
        "ops": {
            "command": sys.executable,
            "args": ["-I", "-S", ROGUE, f"--token=${{{SECRET_VAR}}}"],
            "env": {"ROGUE_LOG": str(tmp_path / "rogue.log"), "API_TOKEN": f"${{{SECRET_VAR}}}"},
            "inherit": [INHERITED_VAR],
        },
        "web": {
            "url": f"http://127.0.0.1:{http.port}/mcp?key=${{{SECRET_VAR}}}",
            "headers": {"Authorization": f"Bearer ${{{SECRET_VAR}}}"},
        },
    }


# -- the syntax -------------------------------------------------------------------


def test_template_syntax():
    assert parse_template("plain") == ["plain"]
    assert parse_template("Bearer ${TOKEN}") == ["Bearer ", ("TOKEN", None)]
    assert parse_template("${HOST:-localhost}:${PORT:-}") == [("HOST", "localhost"), ":", ("PORT", "")]
    assert parse_template("${env:TOKEN}") == [("TOKEN", None)]  # VS Code's and Cursor's spelling
    assert parse_template("cost: $$5, $HOME, $") == ["cost: $5, $HOME, $"]  # only ${...} and $$ are special
    assert parse_template("$${NOT_A_VAR}") == ["${NOT_A_VAR}"]

    config = ServerConfig(
        command="srv",
        args=["--token=${TOKEN}", "--host=${HOST:-localhost}", "--port=${PORT:-8080}", "$${LITERAL}", "${EMPTY}"],
    )
    resolved = config.resolve("x", {"TOKEN": "t0ken-value", "PORT": "", "EMPTY": ""})
    assert resolved.config.args == ["--token=t0ken-value", "--host=localhost", "--port=8080", "${LITERAL}", ""]
    assert config.args[0] == "--token=${TOKEN}"  # the configuration itself keeps what was written
    assert resolved.used == {"TOKEN": "t0ken-value", "HOST": "localhost", "PORT": "8080", "EMPTY": ""}


@pytest.mark.parametrize(
    ("entry", "words"),
    [
        ({"command": "x", "args": ["${TOKEN"]}, ["args[0]", "unterminated", "$$"]),
        ({"command": "x", "env": {"K": "${1TOKEN}"}}, ["env K", "${1TOKEN} is not a variable reference"]),
        ({"command": "x", "args": ["${TOKEN-default}"]}, ["${TOKEN-default}", "${NAME:-default}"]),
        ({"url": "https://x.example.com/${}"}, ['"url"', "${}"]),
        (
            {"url": "https://x.example.com", "headers": {"Authorization": "Bearer ${input:token}"}},
            ["header Authorization"],
        ),
        ({"command": "x", "cwd": "${HOME}/repo"}, ['"cwd" does not take ${VAR}']),
        ({"command": "x", "inherit": ["GITHUB-TOKEN"]}, ['"inherit"', "GITHUB-TOKEN"]),
    ],
)
def test_malformed_references_are_errors_when_the_file_is_read(tmp_path, entry, words):
    with pytest.raises(ServerConfigError) as info:
        parse_servers(json.dumps({"mcpServers": {"srv": entry}}), str(tmp_path / "mcp.json"))
    message = str(info.value)
    assert "server 'srv'" in message and str(tmp_path / "mcp.json") in message
    for word in words:
        assert word in message
    assert info.value.exit_code == 2


def test_a_missing_variable_names_the_server_and_the_variable_and_starts_nothing(monkeypatch):
    monkeypatch.delenv("VODOU_TEST_MISSING", raising=False)
    servers = {
        "time": ServerConfig(command=sys.executable, args=["-m", "mcp_server_time"]),
        "web": ServerConfig(url="https://example.com/mcp", headers={"Authorization": "Bearer ${VODOU_TEST_MISSING}"}),
    }
    started = []

    async def main():
        async with open_hub(servers, ["time", "web"]):
            started.append(True)

    with pytest.raises(ServerConfigError) as info:
        trio.run(main)
    assert not started
    message = str(info.value)
    assert (
        "server 'web'" in message and "header Authorization" in message and "VODOU_TEST_MISSING is not set" in message
    )
    assert "${VODOU_TEST_MISSING:-" in info.value.hint
    assert info.value.exit_code == 2
    assert (info.value.facts["server"], info.value.facts["variable"]) == ("web", "VODOU_TEST_MISSING")


# -- the values reach the servers ---------------------------------------------------


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="reads the server's environment from /proc")
def test_the_values_reach_the_servers_and_nothing_else_does(tmp_path, planted, guarded):
    """The HTTP server answers 401 to anything but the expanded URL and header; the stdio
    server's own command line and environment hold the expanded values and the inherited
    variable, and no other variable of ours."""
    servers = parse_servers(json.dumps({"mcpServers": server_entries(tmp_path, guarded)}), str(tmp_path / "mcp.json"))
    seen = {}

    async def main():
        with trio.fail_after(SAFETY):
            async with open_hub(servers, ["ops", "web"]) as hub:
                pid = hub._server("ops").process.pid
                seen["cmdline"] = (await trio.Path(f"/proc/{pid}/cmdline").read_bytes()).split(b"\0")
                environ = (await trio.Path(f"/proc/{pid}/environ").read_bytes()).split(b"\0")
                seen["environ"] = dict(e.decode().split("=", 1) for e in environ if b"=" in e)
                seen["web"] = await hub.call("web", "get_status", {})
                seen["card"] = hub.config("web").command_line()

    trio.run(main)
    secret = planted[SECRET_VAR]
    assert f"--token={secret}".encode() in seen["cmdline"]
    assert seen["environ"]["API_TOKEN"] == secret
    assert seen["environ"][INHERITED_VAR] == planted[INHERITED_VAR]
    assert "VODOU_TEST_NOT_NAMED" not in seen["environ"] and SECRET_VAR not in seen["environ"]
    assert seen["web"].is_error is False
    assert guarded.events("unauthorized") == []
    assert seen["card"] == f"http://127.0.0.1:{guarded.port}/mcp?key=${{{SECRET_VAR}}}"


def test_a_wrong_header_is_a_start_error_naming_the_setting_not_the_value(tmp_path, planted, guarded, monkeypatch):
    monkeypatch.setenv(SECRET_VAR, "another-value-entirely")
    servers = parse_servers(json.dumps({"mcpServers": server_entries(tmp_path, guarded)}), str(tmp_path / "mcp.json"))
    with pytest.raises(ServerStartError) as info:
        trio.run(lambda: _open(servers, ["web"]))
    message = str(info.value)
    assert "MCP server 'web' failed to start" in message and "401" in message
    assert '"headers"' in info.value.hint
    assert "another-value-entirely" not in message and "another-value-entirely" not in info.value.hint
    assert f"key=${{{SECRET_VAR}}}" in message


async def _open(servers, names):
    with trio.fail_after(SAFETY):
        async with open_hub(servers, names):
            pass


# -- masking and bindings -------------------------------------------------------------


def test_masking_rule():
    config = ServerConfig(
        command="x", args=["${LONG}", "${SHORT}", "${DEFAULTED:-defaultvalue}"], inherit=["INHERITED"]
    )
    resolved = config.resolve("x", {"LONG": "abc/def+ghi", "SHORT": "abc", "INHERITED": "inherited-value"})
    text = "got abc/def+ghi, abc%2Fdef%2Bghi, abc, inherited-value and defaultvalue"
    # every value from the environment at least 4 characters long, also URL-quoted; not a default from the file
    assert resolved.mask(text) == "got ${LONG}, ${LONG}, abc, ${INHERITED} and defaultvalue"


def test_a_binding_keeps_what_was_written_and_digests_of_the_values():
    config = ServerConfig(
        command="srv",
        args=["--repo=${REPO}", "--token=${TOKEN}"],
        env={"API_TOKEN": "${TOKEN}", "MODE": "fixed"},
        inherit=["GITHUB_TOKEN"],
    )
    environ = {"REPO": "/srv/repo", "TOKEN": "tok-1111", "GITHUB_TOKEN": "gh-2222"}
    bound = bind(config, source="f", salt="run1", name="srv", environ=environ)
    assert bound.args == ["--repo=${REPO}", "--token=${TOKEN}"]
    assert set(bound.env) == {"API_TOKEN", "MODE", "GITHUB_TOKEN"} and set(bound.vars) == {"REPO", "TOKEN"}
    encoded = encode_bindings({"srv": bound})
    for value in environ.values():
        assert value not in encoded
    # The same values bind the same; a rotated token, another repository or inherited value does not.
    assert differences(bound, bind(config, source="g", salt="run1", name="srv", environ=dict(environ))) == []
    rotated = bind(config, source="f", salt="run1", name="srv", environ={**environ, "TOKEN": "tok-3333"})
    assert differences(bound, rotated) == ["env API_TOKEN: a different value here", "${TOKEN}: a different value here"]
    moved = bind(config, source="f", salt="run1", name="srv", environ={**environ, "REPO": "/srv/other"})
    assert differences(bound, moved) == ["${REPO}: a different value here"]
    gone = bind(
        config, source="f", salt="run1", name="srv", environ={k: v for k, v in environ.items() if k != "GITHUB_TOKEN"}
    )
    assert differences(bound, gone) == ["env GITHUB_TOKEN: set for the run, not set here"]

    # a command taken from the environment: the path it resolves to is kept as a digest too
    tool = ServerConfig(command="${PYTHON_BIN}")
    here = bind(tool, source="f", salt="run1", name="py", environ={"PYTHON_BIN": sys.executable})
    assert here.executable.startswith("sha256:") and sys.executable not in encode_bindings({"py": here})
    there = bind(tool, source="f", salt="run1", name="py", environ={"PYTHON_BIN": "/bin/sh"})
    assert differences(here, there) == [
        "executable: the command resolves to another file here",
        "${PYTHON_BIN}: a different value here",
    ]

    web = ServerConfig(url="https://${HOST:-mcp.example.com}/mcp", headers={"Authorization": "Bearer ${TOKEN}"})
    a = bind(web, source="f", salt="run1", name="web", environ={"TOKEN": "tok-1111"})
    assert (a.transport, a.url, set(a.headers), set(a.vars)) == (
        "http",
        "https://${HOST:-mcp.example.com}/mcp",
        {"Authorization"},
        {"HOST"},
    )
    assert a.command_line() == "https://${HOST:-mcp.example.com}/mcp"
    b = bind(web, source="f", salt="run1", name="web", environ={"TOKEN": "tok-1111", "HOST": "evil.example.com"})
    assert differences(a, b) == ["${HOST}: a different value here"]


def test_a_run_parked_with_one_token_is_refused_with_another(tmp_path, planted, guarded, monkeypatch):
    """The binding digests the expanded values: the token a run was approved with is the one it uses."""
    from vodou_engine.runs import Runs

    servers = parse_servers(json.dumps({"mcpServers": server_entries(tmp_path, guarded)}), str(tmp_path / "mcp.json"))
    recipe = 'recipe "secrets"\npost: web.post_message {"channel": "#ops", "text": "hello"}\n'
    runs = Runs(store=tmp_path / "runs.db", servers=servers)
    try:
        parked = trio.run(lambda: runs.start("secrets.recipe", text=recipe, actor="ana"))
        assert parked.state == "parked"
        monkeypatch.setenv(SECRET_VAR, "rotated-" + random.token_hex(8))
        with pytest.raises(ServerMismatchError) as info:
            trio.run(lambda: runs.approve(parked.run, "post", actor="ana"))
        message = str(info.value)
        assert (
            f"${{{SECRET_VAR}}}: a different value here" in message
            and "header Authorization: a different value here" in message
        )
        assert "rotated-" not in message
        monkeypatch.setenv(SECRET_VAR, planted[SECRET_VAR])
        assert trio.run(lambda: runs.approve(parked.run, "post", actor="ana")).state == "succeeded"
    finally:
        runs.close()
    assert len(guarded.calls("post_message")) == 1


# -- the leak test --------------------------------------------------------------------

RECIPE = """recipe "secrets"
status: ops.get_status {}
remote: web.get_status {}
post: web.post_message {"channel": "#ops", "text": "hello"}
"""


def files_with(root: Path, needle: bytes, skip: set[Path]) -> list[str]:
    hits = []
    for path in sorted(root.rglob("*")):
        if path.is_file() and path not in skip and needle in path.read_bytes():
            hits.append(str(path))
    return hits


def test_a_secret_never_appears_in_the_store_or_any_output(cli, planted, guarded, tmp_path):
    secret = planted[SECRET_VAR]
    inherited = planted[INHERITED_VAR]
    entries = server_entries(tmp_path, guarded)
    entries["leaky"] = {
        # A server that prints the secret on stderr and exits: its start error shows both.
        "command": sys.executable,
        "args": [
            "-I",
            "-S",
            "-c",
            "import sys; print('bad token', sys.argv[1], file=sys.stderr); sys.exit(3)",
            f"${{{SECRET_VAR}}}",
        ],
    }
    cli.servers_file(entries)
    (cli.tmp / "secrets.recipe").write_text(RECIPE)
    (cli.tmp / "leaky.recipe").write_text('recipe "leaky"\nstatus: leaky.get_status {}\n')
    env = {SECRET_VAR: secret, INHERITED_VAR: inherited}
    outputs = []

    def call(*args, expect, environ=env):
        res = cli(*args, expect=expect, env=environ)
        outputs.append((args, res.out + res.err))
        return res

    # through the CLI
    call("plan", "secrets.recipe", expect=0)
    parked = call("run", "secrets.recipe", "--json", expect=3).json()
    assert [p["step"] for p in parked["pending"]] == ["post"]
    assert f"key=${{{SECRET_VAR}}}" in parked["pending"][0]["card"]  # the card shows the URL as written
    done = call("approve", parked["run"], "post", "--yes", "--json", expect=0).json()
    assert done["state"] == "succeeded"
    shown = call("show", parked["run"], "--json", "--audit", expect=0).json()
    assert f"--token=${{{SECRET_VAR}}}" in shown["servers"]["ops"]["command"]  # as written
    call("show", parked["run"], "--audit", "--full", expect=0)
    call("runs", "--json", expect=0)
    failed = call("run", "leaky.recipe", expect=None)
    assert failed.code != 0 and "'leaky' failed to start" in failed.err
    assert f"bad token ${{{SECRET_VAR}}}" in failed.err  # its stderr, masked
    failed_json = call("run", "leaky.recipe", "--json", expect=None)
    assert failed_json.code == failed.code
    cli.env.pop(SECRET_VAR, None)
    unset = call("run", "secrets.recipe", "--json", expect=2, environ={INHERITED_VAR: inherited})
    assert f"{SECRET_VAR} is not set" in unset.err and "server '" in unset.err

    # through the run API (this process's environment has the values: the fixture put them there)
    from vodou_engine.runs import Runs

    servers = parse_servers(json.dumps({"mcpServers": entries}), str(cli.tmp / "mcp.json"))
    runs = Runs(store=cli.store, servers=servers)
    try:
        report = trio.run(lambda: runs.start("secrets.recipe", text=RECIPE, actor="ana"))
        after = trio.run(lambda: runs.approve(report.run, "post", actor="ana"))
        assert after.state == "succeeded"
        import msgspec

        outputs.append(("api", msgspec.json.encode([report, after, runs.show(report.run)]).decode()))
        # While the store is open its write-ahead log holds the latest pages: search it now
        # (the last connection to close folds it into the store file and deletes it).
        wal = cli.store.with_name(cli.store.name + "-wal")
        assert wal.exists() and wal.stat().st_size > 0
        for value in (secret, inherited):
            assert value.encode() not in wal.read_bytes()
        with pytest.raises(ServerStartError) as leaky:
            trio.run(
                lambda: runs.start("leaky.recipe", text='recipe "leaky"\nstatus: leaky.get_status {}\n', actor="ana")
            )
        outputs.append(("api error", str(leaky.value)))
        assert f"bad token ${{{SECRET_VAR}}}" in str(leaky.value)
    finally:
        runs.close()

    assert len(guarded.calls("post_message")) == 2 and guarded.events("unauthorized") == []
    for value in (secret, inherited):
        for args, text in outputs:
            assert value not in text, f"{value!r} in the output of {args}"
        server_files = {guarded.log, guarded.stderr, guarded.modes, tmp_path / "rogue.log"}
        assert files_with(cli.tmp, value.encode(), server_files) == []
        assert list(cli.tmp.glob("runs.db*"))  # the store (and its -wal) were searched
