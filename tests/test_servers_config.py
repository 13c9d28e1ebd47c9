import json
import os
import sys

import pytest

from vodou_engine.errors import ServerConfigError
from vodou_engine.servers import (
    EMBEDDED_SOURCE,
    ENV_VAR,
    ServerConfig,
    default_demo_db,
    demo_servers,
    load_servers,
    parse_servers,
    user_config_path,
)


def write(path, servers):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"mcpServers": servers}))
    return path


@pytest.fixture
def places(tmp_path):
    """A project dir, a home dir and one file in each place discovery looks."""
    home = tmp_path / "home"
    project = tmp_path / "project"
    project.mkdir()
    home.mkdir()
    files = {
        "explicit": write(tmp_path / "explicit.json", {"a": {"command": "from-explicit"}}),
        "env": write(tmp_path / "env.json", {"a": {"command": "from-env"}}),
        "project": write(project / "mcp.json", {"a": {"command": "from-project"}}),
        "user": write(home / ".config" / "vodou" / "mcp.json", {"a": {"command": "from-user"}}),
    }
    return tmp_path, home, project, files


def test_discovery_order(places):
    _tmp_path, home, project, files = places
    environ = {"HOME": str(home), ENV_VAR: str(files["env"])}

    got = load_servers(str(files["explicit"]), cwd=project, environ=environ)
    assert got.servers["a"].command == "from-explicit"
    assert got.source == str(files["explicit"])

    got = load_servers(None, cwd=project, environ=environ)
    assert got.servers["a"].command == "from-env"
    assert got.source == str(files["env"])

    environ.pop(ENV_VAR)
    got = load_servers(None, cwd=project, environ=environ)
    assert got.servers["a"].command == "from-project"
    assert got.source == os.path.join(str(project), "mcp.json")

    files["project"].unlink()
    got = load_servers(None, cwd=project, environ=environ)
    assert got.servers["a"].command == "from-user"
    assert got.source == str(files["user"])

    files["user"].unlink()
    got = load_servers(None, cwd=project, environ=environ)
    assert got.source == EMBEDDED_SOURCE
    assert set(got.servers) == {"google-calendar", "gmail", "slack", "board", "recall", "proc"}


def test_empty_env_var_counts_as_unset(places):
    _, home, project, _files = places
    got = load_servers(None, cwd=project, environ={"HOME": str(home), ENV_VAR: ""})
    assert got.servers["a"].command == "from-project"


def test_relative_paths_resolve_against_cwd(places):
    _tmp_path, home, project, _files = places
    got = load_servers("../explicit.json", cwd=project, environ={"HOME": str(home)})
    assert got.servers["a"].command == "from-explicit"
    got = load_servers(None, cwd=project, environ={"HOME": str(home), ENV_VAR: "../env.json"})
    assert got.servers["a"].command == "from-env"


def test_xdg_config_home_wins_over_home(tmp_path):
    home = tmp_path / "home"
    xdg = tmp_path / "xdg"
    write(home / ".config" / "vodou" / "mcp.json", {"a": {"command": "from-home"}})
    write(xdg / "vodou" / "mcp.json", {"a": {"command": "from-xdg"}})
    cwd = tmp_path / "empty"
    cwd.mkdir()
    environ = {"HOME": str(home), "XDG_CONFIG_HOME": str(xdg)}
    assert user_config_path(environ) == str(xdg / "vodou" / "mcp.json")
    assert load_servers(cwd=cwd, environ=environ).servers["a"].command == "from-xdg"
    # The XDG spec says a relative value is to be ignored.
    environ["XDG_CONFIG_HOME"] = "relative/dir"
    assert load_servers(cwd=cwd, environ=environ).servers["a"].command == "from-home"


def test_missing_explicit_file_is_an_error(tmp_path):
    with pytest.raises(ServerConfigError) as info:
        load_servers(str(tmp_path / "nope.json"), cwd=tmp_path, environ={"HOME": str(tmp_path)})
    message = str(info.value)
    assert str(tmp_path / "nope.json") in message
    assert "--servers" in message
    assert info.value.exit_code == 2


def test_missing_env_file_is_an_error(tmp_path):
    # A file that the variable names must exist even though ./mcp.json does.
    write(tmp_path / "mcp.json", {"a": {"command": "x"}})
    with pytest.raises(ServerConfigError) as info:
        load_servers(cwd=tmp_path, environ={"HOME": str(tmp_path), ENV_VAR: str(tmp_path / "gone.json")})
    message = str(info.value)
    assert str(tmp_path / "gone.json") in message
    assert f"${ENV_VAR}" in message


def test_malformed_json_names_line_and_column(tmp_path):
    path = tmp_path / "mcp.json"
    path.write_text('{\n  "mcpServers": {\n    "a": {"command": "x",}\n  }\n}\n')
    with pytest.raises(ServerConfigError) as info:
        load_servers(cwd=tmp_path, environ={"HOME": str(tmp_path)})
    message = str(info.value)
    # The closing brace after the trailing comma, line 3 column 26.
    assert message.startswith(f"{path}:3:26: invalid JSON")
    assert '"a": {"command": "x",}' in message


def test_column_counts_characters_not_bytes(tmp_path):
    path = tmp_path / "s.json"
    path.write_text('{"mcpServers": {"é": 1 2}}', encoding="utf-8")
    with pytest.raises(ServerConfigError) as info:
        load_servers(str(path), cwd=tmp_path, environ={})
    assert str(info.value).startswith(f"{path}:1:24:")


def test_trailing_garbage_points_at_it(tmp_path):
    path = tmp_path / "s.json"
    path.write_text('{"mcpServers": {}}\nx\n')
    with pytest.raises(ServerConfigError) as info:
        load_servers(str(path), cwd=tmp_path, environ={})
    assert str(info.value).startswith(f"{path}:2:1: invalid JSON: trailing characters")


def test_truncated_and_empty_files(tmp_path):
    path = tmp_path / "s.json"
    path.write_text('{"mcpServers": {"a": {"command": "x"')
    with pytest.raises(ServerConfigError, match=r"s\.json:1:\d+: invalid JSON"):
        load_servers(str(path), cwd=tmp_path, environ={})
    path.write_text("  \n")
    with pytest.raises(ServerConfigError, match="empty"):
        load_servers(str(path), cwd=tmp_path, environ={})


def test_shape_errors_name_file_and_server(tmp_path):
    path = tmp_path / "s.json"
    path.write_text(json.dumps({"mcp": {}}))  # VS Code's {"servers": {...}} is read: tests/test_existing_configs.py
    with pytest.raises(ServerConfigError, match="mcpServers") as info:
        load_servers(str(path), cwd=tmp_path, environ={})
    assert str(path) in str(info.value)

    # (An entry with a "url" is an HTTP server now: tests/test_remote_servers.py.)
    path.write_text(json.dumps({"mcpServers": {"web": {"args": ["--serve"]}}}))
    with pytest.raises(ServerConfigError) as info:
        load_servers(str(path), cwd=tmp_path, environ={})
    assert "server 'web'" in str(info.value) and "command" in str(info.value) and "url" in str(info.value)

    path.write_text(json.dumps({"mcpServers": {"x": {"command": "c", "args": ["ok", 3]}}}))
    with pytest.raises(ServerConfigError, match=r"server 'x'.*args\[1\]"):
        load_servers(str(path), cwd=tmp_path, environ={})

    path.write_text(json.dumps({"mcpServers": {"x": {"command": ""}}}))
    with pytest.raises(ServerConfigError, match="empty"):
        load_servers(str(path), cwd=tmp_path, environ={})


def test_extra_keys_are_ignored(tmp_path):
    doc = {
        "globalShortcut": "Ctrl+Space",
        "mcpServers": {
            "time": {
                "type": "stdio",
                "disabled": False,
                "autoApprove": ["get_current_time"],
                "command": "uvx",
                "args": ["mcp-server-time"],
                "env": {"TZ": "UTC"},
            }
        },
    }
    servers = parse_servers(json.dumps(doc).encode(), str(tmp_path / "claude_desktop_config.json"))
    assert servers == {"time": ServerConfig(command="uvx", args=["mcp-server-time"], env={"TZ": "UTC"})}


def test_bom_is_tolerated(tmp_path):
    data = b"\xef\xbb\xbf" + json.dumps({"mcpServers": {"a": {"command": "x"}}}).encode()
    assert parse_servers(data, "f.json")["a"].command == "x"


def test_relative_cwd_is_relative_to_the_file(tmp_path):
    path = write(tmp_path / "conf" / "mcp.json", {"a": {"command": "x", "cwd": "../work"}, "b": {"command": "y"}})
    servers = load_servers(str(path), cwd="/", environ={}).servers
    assert servers["a"].cwd == str(tmp_path / "work")
    assert servers["b"].cwd is None


def test_unknown_server_suggests_closest(tmp_path):
    got = load_servers(cwd=tmp_path, environ={"HOME": str(tmp_path)})
    with pytest.raises(ServerConfigError) as info:
        got.get("gmial")
    assert "did you mean 'gmail'" in str(info.value)
    assert "google-calendar" in str(info.value)


def test_embedded_defaults(tmp_path):
    environ = {"HOME": str(tmp_path)}
    db = str(tmp_path / ".local" / "share" / "vodou" / "demo.db")
    assert default_demo_db(environ) == db
    assert default_demo_db({**environ, "XDG_DATA_HOME": str(tmp_path / "data")}) == str(
        tmp_path / "data" / "vodou" / "demo.db"
    )
    assert default_demo_db({**environ, "VODOU_DEMO_DB": "/x/y.db"}) == "/x/y.db"

    servers = load_servers(cwd=tmp_path, environ=environ).servers
    assert servers == demo_servers(db)
    assert servers["gmail"].args == ["-m", "vodou_engine.demo.mail_server"]
    assert servers["google-calendar"].args == ["-m", "vodou_engine.demo.calendar_server"]
    assert servers["slack"].args == ["-m", "vodou_engine.demo.chat_server"]
    for config in servers.values():
        assert config.command == sys.executable
        assert config.env["VODOU_DEMO_DB"] == db
    for name in ("board", "recall", "proc"):
        assert servers[name].args == ["-m", "vodou_engine.demo.lab_server"]
        assert servers[name].env["VODOU_DEMO_NAME"] == name


def test_import_does_not_pull_in_the_sdk():
    import subprocess

    code = "import sys, vodou_engine.servers, vodou_engine.tools.hub; print('mcp' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_a_resume_starts_no_server_for_a_step_a_quorum_dropped():
    from pathlib import Path
    from types import SimpleNamespace

    from vodou_engine.compiler import compile_recipe
    from vodou_engine.servers import servers_to_finish

    plan = compile_recipe((Path(__file__).parent.parent / "recipes" / "morning-briefing.recipe").read_text())
    at_park = {
        "calendar": "cancelled",
        "mail": "succeeded",
        "slack": "succeeded",
        "join:sources": "succeeded",
        "briefing": "succeeded",
        "approve:post": "waiting",
    }
    nodes = {nid: SimpleNamespace(state=st) for nid, st in at_park.items()}
    assert servers_to_finish(plan, nodes) == ["slack"]  # the post; not google-calendar
    nodes["calendar"] = SimpleNamespace(state="running")  # a crash mid-read: it runs again
    assert servers_to_finish(plan, nodes) == ["google-calendar", "slack"]


def test_timeouts_are_optional_seconds(tmp_path):
    import msgspec

    path = str(tmp_path / "mcp.json")
    doc = {"mcpServers": {"slow": {"command": "x", "startTimeout": 60, "callTimeout": 0.5}, "plain": {"command": "y"}}}
    servers = parse_servers(json.dumps(doc), path)
    assert (servers["slow"].start_timeout, servers["slow"].call_timeout) == (60.0, 0.5)
    assert (servers["plain"].start_timeout, servers["plain"].call_timeout) == (None, None)
    # Written back under the same keys; a server without them gains none.
    assert msgspec.json.decode(msgspec.json.encode(servers["slow"])) == doc["mcpServers"]["slow"]
    assert msgspec.json.decode(msgspec.json.encode(servers["plain"])) == {"command": "y"}
    assert msgspec.json.decode(msgspec.json.encode(servers["slow"]), type=ServerConfig) == servers["slow"]


@pytest.mark.parametrize("key", ["startTimeout", "callTimeout"])
@pytest.mark.parametrize("raw", ["0", "-1", '"30"', "true", "[5]", "1e400"])
def test_bad_timeouts_name_file_server_and_key(tmp_path, key, raw):
    path = tmp_path / "mcp.json"
    path.write_text(f'{{"mcpServers": {{"web": {{"command": "x", "{key}": {raw}}}}}}}')
    with pytest.raises(ServerConfigError) as info:
        load_servers(str(path), cwd=tmp_path, environ={})
    message = str(info.value)
    assert str(path) in message
    assert "server 'web'" in message
    assert key in message
    assert "seconds" in message  # the hint says what the key wants
    assert info.value.exit_code == 2


def test_http_entries_ignore_other_clients_keys_and_keep_the_engines(tmp_path):
    """A remote entry as Cursor or VS Code write it: their own keys are ignored; ours are read."""
    doc = {
        "inputs": [{"id": "token", "type": "promptString"}],
        "mcpServers": {
            "remote": {
                "type": "http",
                "url": "https://mcp.example.com/mcp",
                "headers": {"Authorization": "Bearer ${GITHUB_TOKEN}"},
                "disabled": False,
                "autoApprove": [],
                "oauth": {"clientId": "x"},
                "startTimeout": 45,
            },
            "local": {"command": "uvx", "args": ["mcp-server-git"], "inherit": ["GITHUB_TOKEN", "GIT_AUTHOR_NAME"]},
        },
    }
    servers = parse_servers(json.dumps(doc), str(tmp_path / "mcp.json"))
    assert servers["remote"] == ServerConfig(
        url="https://mcp.example.com/mcp", headers={"Authorization": "Bearer ${GITHUB_TOKEN}"}, start_timeout=45
    )
    assert servers["remote"].transport == "http" and servers["local"].transport == "stdio"
    assert servers["local"].inherit == ["GITHUB_TOKEN", "GIT_AUTHOR_NAME"]
    import msgspec

    assert msgspec.json.decode(msgspec.json.encode(servers["local"])) == doc["mcpServers"]["local"]


def test_a_bad_timeout_on_an_http_server_names_it_too(tmp_path):
    path = tmp_path / "mcp.json"
    path.write_text(json.dumps({"mcpServers": {"web": {"url": "https://x.example.com/mcp", "callTimeout": 0}}}))
    with pytest.raises(ServerConfigError) as info:
        load_servers(str(path), cwd=tmp_path, environ={})
    assert "server 'web'" in str(info.value) and "callTimeout" in str(info.value)
