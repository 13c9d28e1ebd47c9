"""Warm servers and the card: a server kept running between runs is asked again what it declares.

`recipe serve` keeps each MCP server warm for every run it drives; it listed the server's
tools when the server started. A server that annotates a tool destructive after that (its
binding, and so the warm process, unchanged) must not have it run on the risk of the old
listing: an approval driven by `recipe serve` is refused before anything is called, and
before it is recorded (the effect counted in the server's own log, tests/rogue_server.py); the same on a worker's
warm servers (PostgreSQL), whose run is handed back.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import trio
from conftest import ROGUE, Cli, rogue_calls
from web_helpers import Serving

POST_THEN_STATUS = (
    'recipe "post then status"\n'
    'post: ops.post_message {"channel": "#daily", "text": "hi"}\n'
    'status: ops.get_status {"after": "{post.ts}"}\n'
)


def _project(tmp: Path) -> tuple[Path, Path]:
    proj, said = tmp / "proj", tmp / "annotations"
    proj.mkdir()
    entry = {
        "command": sys.executable,
        "args": ["-I", "-S", ROGUE],
        "env": {"ROGUE_LOG": str(tmp / "rogue.log"), "ROGUE_ANNOTATIONS_FILE": str(said)},
    }
    (proj / "mcp.json").write_text(json.dumps({"mcpServers": {"ops": entry}}))
    (proj / "r.recipe").write_text(POST_THEN_STATUS)
    return proj, said


def _listings(tmp: Path) -> list[int]:
    lines = [json.loads(x) for x in (tmp / "rogue.log").read_text().splitlines() if x.strip()]
    return [r["pid"] for r in lines if r.get("event") == "tools/list"]


def test_a_warm_server_that_now_declares_a_tool_destructive_is_not_driven_on_its_old_listing(tmp_path):
    cli = Cli(tmp_path)
    proj, said = _project(tmp_path)
    serving = Serving(tmp_path, "--servers", str(proj / "mcp.json")).start()
    try:
        first = json.loads(cli("run", "r.recipe", "--json", cwd=proj, expect=3).out)["run"]
        second = json.loads(cli("run", "r.recipe", "--json", cwd=proj, expect=3).out)["run"]
        # the first approval starts the server in `recipe serve`: it lists get_status as a read
        done = json.loads(cli("approve", first, "post", "--yes", "--json", cwd=proj, expect=0).out)
        assert done["state"] == "succeeded" and done["driven_in"]
        ran = rogue_calls(tmp_path / "rogue.log")
        assert [c["tool"] for c in ran] == ["post_message", "get_status"]
        warm = {c["pid"] for c in ran}
        assert warm <= serving.children()
        # the warm process now declares get_status destructive (no restart, no binding change)
        said.write_text("get_status=destructive")
        res = cli("approve", second, "post", "--yes", "--json", cwd=proj)
        assert res.code == 5, (res.code, res.out, res.err)
        assert "ops.get_status is critical now" in res.out + res.err
        # `recipe serve` looked on its warm server before the decision was recorded: none spent
        assert "the approval was not recorded" in res.out + res.err
        (approval,) = json.loads(cli("show", second, "--json", cwd=proj, expect=0).out)["approvals"]
        assert approval["state"] == "pending"
        assert [c["tool"] for c in rogue_calls(tmp_path / "rogue.log")] == ["post_message", "get_status"]
        assert set(_listings(tmp_path)) & warm and len([p for p in _listings(tmp_path) if p in warm]) >= 2
    finally:
        serving.kill()


def test_a_workers_warm_server_that_now_declares_a_tool_destructive_is_not_driven_on_its_old_listing(tmp_path):
    """The same on a worker (PostgreSQL): one engine, its pool keeps the server warm between
    two approved runs; the server annotates get_status destructive between them. The second
    run is handed back, nothing of it called; the first ran as approved."""
    from workers_helpers import fresh_schema

    from vodou_engine.policy import Policy
    from vodou_engine.runs import Runs
    from vodou_engine.servers import load_servers
    from vodou_engine.workers.engine import Engine

    said, log = tmp_path / "annotations", tmp_path / "rogue.log"
    servers = tmp_path / "mcp.json"
    entry = {"command": sys.executable, "args": ["-I", "-S", ROGUE], "env": {"ROGUE_LOG": str(log), "ROGUE_ANNOTATIONS_FILE": str(said)}}  # fmt: skip
    servers.write_text(json.dumps({"mcpServers": {"ops": entry}}))
    recipe = tmp_path / "r.recipe"
    recipe.write_text(POST_THEN_STATUS)
    with fresh_schema() as url:
        runs = Runs(store=url, servers=servers, workers=False)
        first, second = (trio.run(lambda: runs.start(recipe, actor="ana")).run for _ in range(2))
        for run_id in (first, second):
            trio.run(lambda run_id=run_id: runs.approve(run_id, "post", actor="ana", drive=False))
        engine = Engine(url, load_servers(str(servers)), Policy())

        async def both() -> tuple:
            async with trio.open_nursery() as nursery:
                close = await engine.setup(nursery)
                try:
                    done = await engine.drive(first)
                    said.write_text("get_status=destructive")  # the warm process declares it now
                    return done, await engine.drive(second)
                finally:
                    close()
                    nursery.cancel_scope.cancel()

        done, refused = trio.run(both)
        assert done.state == "succeeded"
        assert refused.cannot is not None and "ops.get_status is critical now" in refused.cannot
        ran = rogue_calls(log)
        assert [c["tool"] for c in ran] == ["post_message", "get_status"]
        (warm,) = {c["pid"] for c in ran}
        assert _listings(tmp_path).count(warm) == 2  # at its start, and again for the second run
        runs.close()
