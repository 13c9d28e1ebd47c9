"""A ``${VAR}`` value a server echoes is masked in everything it sends, before anything stores or
shows it (vodou_engine/masking.py, applied where the transports receive each message).

End to end: tests/rogue_server.py (stdio) echoes the value it was given in its environment, and
tests/http_server.py echoes the ``Authorization`` header it received, in many spellings (as it is,
JSON-escaped, ``\\u``-escaped, percent-encoded, base64, split across two text blocks), in a
result, a tool error, a JSON-RPC error, a notification and its stderr. The value holds ``"``,
``\\`` and a non-ASCII letter. Every output (CLI text and ``--json``, ``show --audit``, the run
API's reports, the web page) and the store itself (the SQLite file and its write-ahead log, or
every row of the PostgreSQL schema) is searched for each spelling.
"""

from __future__ import annotations

import base64
import json
import secrets as random
import sys
import urllib.parse
from pathlib import Path

import pytest
import trio
from conftest import rogue_calls, store_sql
from http_server import HttpServer

from vodou_engine.masking import Mask
from vodou_engine.servers import ServerConfig, parse_servers

ROGUE = str(Path(__file__).with_name("rogue_server.py"))
SECRET_VAR = "VODOU_TEST_ECHOED"

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="the test servers run in POSIX process groups")


def spellings(value: str) -> dict[str, tuple[str, str]]:
    """Each spelling of ``value`` the servers echo (and a few more), by name: (the text a server
    sends, the part of it that must not be shown)."""
    wrapped = base64.b64encode(("user:" + value).encode()).decode()
    forms = {
        "as it is": value,
        "JSON-escaped": json.dumps(value)[1:-1],
        "JSON-escaped, ASCII only": json.dumps(value, ensure_ascii=True)[1:-1],
        "JSON-escaped twice": json.dumps(json.dumps(value))[3:-3],
        "every character \\u-escaped": "".join(f"\\u{ord(c):04x}" for c in value),
        "percent-encoded": urllib.parse.quote(value, safe=""),
    }
    # base64 of "user:" and the value: the characters that encode the value's bytes alone
    return {name: (form, form) for name, form in forms.items()} | {"base64 (after 'user:')": (wrapped, wrapped[8:-4])}


def leaks(text: str, value: str) -> list[str]:
    return [name for name, (_, shown) in spellings(value).items() if shown in text]


@pytest.fixture
def secret(monkeypatch) -> str:
    value = 's3cr3t"quote\\back-' + random.token_hex(8) + "-é"
    monkeypatch.setenv(SECRET_VAR, value)
    return value


# -- the rule, one function at a time -----------------------------------------------------


def test_every_spelling_of_a_value_is_masked_and_nothing_else():
    value = 'pa"ss\\wörd-s3cr3t-value'
    mask = Mask({"TOKEN": value, "PORT": "8080", "SHORT": "abcdefg"})
    for name, (sent, secret) in spellings(value).items():
        masked = mask.text(f"<{sent}>")
        assert "${TOKEN}" in masked and secret not in masked, name
    mixed = value[:6] + "".join(f"\\u{ord(c):04X}" for c in value[6:12]) + urllib.parse.quote(value[12:]).lower()
    assert mask.text(f"key={mixed};") == "key=${TOKEN};"  # several encodings in one occurrence
    html = value.replace('"', "&quot;")
    assert mask.text(html) == "${TOKEN}"
    assert mask.text(repr(value.encode())) == "b'${TOKEN}'"  # Python's repr of the UTF-8 bytes
    # shorter than 8 characters: not a secret worth garbling every result for
    assert mask.text("port 8080, abcdefg") == "port 8080, abcdefg"
    assert mask.text("nothing to see") == "nothing to see"


def test_overlapping_values_are_masked_whole_under_the_longest_name():
    mask = Mask({"OUTER": "token-abcdefgh-123", "INNER": "abcdefgh", "OVERLAP": "zzzz-token"})
    assert mask.text("token-abcdefgh-123") == "${OUTER}"
    assert mask.text("abcdefgh alone") == "${INNER} alone"
    assert mask.text("zzzz-token-abcdefgh-123") == "${OUTER}"  # no piece of either is left
    assert "token" not in mask.text("zzzz-token-abcdefgh-123")


def test_a_message_is_masked_in_every_string_key_and_number_and_across_text_blocks():
    value = "k3y-0123456789abcdef"
    mask = Mask({"TOKEN": value, "PIN": "987654321"})
    message = {
        "jsonrpc": "2.0",
        "id": 7,
        "result": {
            "content": [
                {"type": "text", "text": f"first half {value[:9]}"},
                {"type": "text", "text": f"{value[9:]} second half"},
            ],
            "structuredContent": {
                "token": value,
                value: "a key",
                "pin": 987654321,
                "deep": [[{"x": json.dumps({"t": value})}]],
            },
        },
    }
    masked = json.loads(mask.message(json.dumps(message).encode()))
    assert masked["id"] == 7
    assert [b["text"] for b in masked["result"]["content"]] == ["first half ${TOKEN}", "${TOKEN} second half"]
    structured = masked["result"]["structuredContent"]
    assert structured["token"] == "${TOKEN}" and structured["${TOKEN}"] == "a key" and structured["pin"] == "${PIN}"
    assert value not in json.dumps(masked) and "987654321" not in json.dumps(masked)
    untouched = json.dumps(
        {"jsonrpc": "2.0", "id": 1, "result": {"content": [{"type": "text", "text": "ok"}]}}
    ).encode()
    assert mask.message(untouched) is untouched  # nothing to mask: the same bytes, not decoded


def test_masking_never_takes_long_on_a_long_run_of_backslashes():
    """Every spelling pattern takes a run of backslashes whole, where it starts: a server that
    sends a million of them costs one pass, not one per backslash. (A safety net of a size,
    not a timing: the test would hang for hours if it were quadratic.)"""
    mask = Mask({"TOKEN": 'a"b\\c-0123456789'})
    run = "\\" * 2_000_000
    assert mask.text(run) == run
    assert mask.message(json.dumps({"jsonrpc": "2.0", "id": 1, "result": {"t": run + "u"}}).encode())


# -- end to end -----------------------------------------------------------------------------


def rogue_entry(tmp: Path, **extra) -> dict:
    return {
        "command": sys.executable,
        "args": ["-I", "-S", ROGUE],
        "env": {
            "ROGUE_LOG": str(tmp / "rogue.log"),
            "ROGUE_MODES_FILE": str(tmp / "modes"),
            "ROGUE_TOOLS": "get_status,get_status2,post_message",
            "API_TOKEN": f"${{{SECRET_VAR}}}",
            "ROGUE_ECHO": "API_TOKEN",
        },
        **extra,
    }


ECHO = """recipe "echo"
seen: ops.get_status {}
post: ops.post_message {"channel": "#ops", "text": "{seen.token}"}
"""
THEN_DIE = 'recipe "die"\nfirst: ops.get_status {}\nsecond: ops.get_status2 {}\n'
READ = 'recipe "read"\nseen: ops.get_status {}\n'


def store_text(cli) -> bytes:
    """Everything the store holds, as bytes: the SQLite file and its write-ahead log, or
    every row of every table of the PostgreSQL schema."""
    if cli.kind == "sqlite":
        return b"".join(p.read_bytes() for p in sorted(cli.tmp.glob("runs.db*")))
    tables = store_sql(cli.location, "SELECT tablename FROM pg_tables WHERE schemaname = current_schema()")
    return "\n".join(str(store_sql(cli.location, f'SELECT t::text FROM "{t}" t')) for (t,) in tables).encode()


@pytest.mark.both_stores
def test_a_secret_a_server_echoes_is_masked_in_every_output_and_in_the_store(cli, secret, tmp_path):
    cli.servers_file({"ops": rogue_entry(tmp_path)})
    modes = tmp_path / "modes"
    for name, text in (("echo", ECHO), ("die", THEN_DIE), ("read", READ)):
        (cli.tmp / f"{name}.recipe").write_text(text)
    env = {SECRET_VAR: secret}
    outputs: list[tuple[str, str]] = []

    def call(*args, expect):
        res = cli(*args, expect=expect, env=env)
        outputs.append((" ".join(args), res.out + res.err))
        return res

    modes.write_text("get_status=echo_secret,post_message=echo_secret")
    parked = call("run", "echo.recipe", "--json", expect=3).json()
    run = parked["run"]
    assert f"${{{SECRET_VAR}}}" in parked["pending"][0]["card"]  # what the read returned, as the card shows it
    done = call("approve", run, "post", "--yes", "--json", expect=0).json()
    assert done["state"] == "succeeded"
    shown = call("show", run, "--json", "--audit", expect=0).json()
    assert f"${{{SECRET_VAR}}}" in json.dumps(shown)
    call("show", run, "--audit", "--full", expect=0)
    call("show", run, expect=0)
    call("runs", "--json", expect=0)

    modes.write_text("get_status=echo_secret_error")
    failed = call("run", "read.recipe", expect=1)
    assert f"invalid key ${{{SECRET_VAR}}}" in failed.out + failed.err
    modes.write_text("get_status=echo_secret_rpc")
    refused = call("run", "read.recipe", "--json", expect=1)
    assert f"invalid key ${{{SECRET_VAR}}}" in refused.out + refused.err
    # stderr as the engine shows it for a server that died mid-call: masked, JSON-escaped line too
    modes.write_text("get_status=echo_secret,get_status2=exit1")
    died = call("run", "die.recipe", expect=1)
    assert f"rogue: the key is ${{{SECRET_VAR}}}" in died.out + died.err and 'rogue: {"key": "${' in died.out + died.err

    # the run page of `recipe serve`, from the same store
    from starlette.testclient import TestClient
    from web_helpers import sign_in

    from vodou_engine.policy import Policy
    from vodou_engine.servers import ServerSet
    from vodou_engine.service import Service
    from vodou_engine.web.app import create_app
    from vodou_engine.web.config import WebConfig
    from vodou_engine.web.identity import add_approver

    servers = parse_servers((cli.tmp / "mcp.json").read_text(), str(cli.tmp / "mcp.json"))
    svc = Service(store=cli.location, servers=ServerSet(servers, str(cli.tmp / "mcp.json")), policy=Policy())
    runs = svc.runs()
    try:
        with TestClient(
            create_app(svc, WebConfig(allowed_hosts=["testserver"])), backend="trio", base_url="http://testserver"
        ) as client:
            ana = sign_in(client, add_approver(runs, "ana", by="test", base_url="http://testserver")[1], "ana")
            page = ana.get(f"/runs/{run}").text
            assert f"${{{SECRET_VAR}}}" in page, page  # what the step read, as the page shows it
            outputs.append(("the run page", page))
    finally:
        runs.close()

    assert len(rogue_calls(tmp_path / "rogue.log", "post_message")) == 1
    for where, text in outputs:
        assert leaks(text, secret) == [], f"{where} shows the secret"
    assert leaks(store_text(cli).decode("utf-8", "replace"), secret) == []


def test_a_secret_an_http_server_echoes_from_its_headers_is_masked(tmp_path, monkeypatch):
    """The server echoes the Authorization header and the URL's key it got (and sends them in a
    notification first): the result, the store and the reports hold ``${VAR}`` only. (A header
    holds ASCII only, so this value has no accent.)"""
    from vodou_engine.runs import Runs

    secret = 's3cr3t"quote\\back-' + random.token_hex(8)
    monkeypatch.setenv(SECRET_VAR, secret)

    web = HttpServer(tmp_path, "web").start()
    web.set("get_status=echo_auth")
    config = ServerConfig(
        url=web.url + f"?key=${{{SECRET_VAR}}}", headers={"Authorization": f"Bearer ${{{SECRET_VAR}}}"}
    )
    runs = Runs(store=tmp_path / "runs.db", servers={"web": config})
    try:
        report = trio.run(lambda: runs.start("r.recipe", text='recipe "r"\nseen: web.get_status {}\n', actor="ana"))
        assert report.state == "succeeded"
        import msgspec

        shown = msgspec.json.encode([report, runs.show(report.run)]).decode()
        store = b"".join(p.read_bytes() for p in sorted(tmp_path.glob("runs.db*"))).decode("utf-8", "replace")
    finally:
        runs.close()
        web.stop()
    assert f"${{{SECRET_VAR}}}" in shown and "split: ${" in shown
    assert leaks(shown, secret) == [] and leaks(store, secret) == []
    assert len(web.calls("get_status")) == 1
