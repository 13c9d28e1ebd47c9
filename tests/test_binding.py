"""A run is bound to the servers it was approved against (issue "Close the holes", item 3).

A run parked in projA/ (whose mcp.json maps `slack` to a sandbox) must never be
approved into another directory's `slack`. The CLI run from each directory (in this
process, with that working directory), real demo servers; posts are counted in each
demo world's own log.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from conftest import demo_calls

RECIPE = 'post: slack.slack_post_message {"channel": "#daily", "text": "hello"}\n'


def project(root: Path, name: str, demo_db: Path) -> Path:
    d = root / name
    d.mkdir()
    servers = {"slack": {"command": sys.executable, "args": ["-m", "vodou_engine.demo.chat_server"], "env": {"VODOU_DEMO_DB": str(demo_db)}}}
    (d / "mcp.json").write_text(json.dumps({"mcpServers": servers}))
    return d


def posts(db: Path) -> list[dict]:
    return [c for c in demo_calls(db, tool="slack_post_message") if c["outcome"] == "ok"]


class Ran:
    """What a finished `recipe` process would show: returncode, stdout, stderr."""

    def __init__(self, res):
        self.returncode, self.stdout, self.stderr = res.code, res.out, res.err


def run_in(cli, cwd: Path, *args: str, expect: int | None = None) -> Ran:
    return Ran(cli(*args, cwd=cwd, expect=expect))


def test_a_run_is_approved_only_against_the_servers_it_was_started_with(cli, tmp_path):
    sandbox, production = tmp_path / "sandbox.db", tmp_path / "production.db"
    proj_a = project(tmp_path, "projA", sandbox)
    elsewhere = project(tmp_path, "elsewhere", production)
    (proj_a / "post.recipe").write_text(RECIPE)
    parked = json.loads(run_in(cli, proj_a, "run", "post.recipe", "--json", expect=3).stdout)
    run = parked["run"]
    # the card names which slack this is
    assert str(proj_a / "mcp.json") in parked["pending"][0]["card"]

    # elsewhere/ maps slack to production: refused, naming the server and the difference
    refused = run_in(cli, elsewhere, "approve", run, "--yes")
    assert refused.returncode == 5, refused.stderr
    assert "'slack'" in refused.stderr and "VODOU_DEMO_DB" in refused.stderr and "nothing was run" in refused.stderr
    assert str(proj_a / "mcp.json") in refused.stderr  # where the run's own servers are
    # so is a --servers file or $VODOU_SERVERS that says the same
    other = run_in(cli, tmp_path, "approve", run, "--yes", "--servers", str(elsewhere / "mcp.json"))
    assert other.returncode == 5 and "'slack'" in other.stderr
    assert posts(sandbox) == [] and posts(production) == []
    show = json.loads(run_in(cli, tmp_path, "show", run, "--json", expect=0).stdout)
    assert show["state"] == "parked" and [a["state"] for a in show["approvals"]] == ["pending"]  # nothing was recorded

    # from a directory with no server file of its own, the run's own file is used
    nowhere = tmp_path / "nowhere"
    nowhere.mkdir()
    run_in(cli, nowhere, "approve", run, "--yes", expect=0)
    assert len(posts(sandbox)) == 1 and posts(production) == []


def test_a_server_file_edited_after_the_question_is_refused(cli, tmp_path):
    sandbox = tmp_path / "sandbox.db"
    proj = project(tmp_path, "proj", sandbox)
    (proj / "post.recipe").write_text(RECIPE)
    run = json.loads(run_in(cli, proj, "run", "post.recipe", "--json", expect=3).stdout)["run"]
    servers = json.loads((proj / "mcp.json").read_text())
    servers["mcpServers"]["slack"]["args"] = ["-m", "vodou_engine.demo.chat_server", "--verbose"]
    (proj / "mcp.json").write_text(json.dumps(servers))
    refused = run_in(cli, proj, "approve", run, "--yes")
    assert refused.returncode == 5 and "args" in refused.stderr
    assert posts(sandbox) == []


def test_the_binding_is_in_the_fingerprint_and_holds_no_secret_value(cli, tmp_path):
    secret = "s3cr3t-value-that-must-not-be-stored"
    proj = tmp_path / "proj"
    proj.mkdir()
    servers = {"slack": {"command": sys.executable, "args": ["-m", "vodou_engine.demo.chat_server"], "env": {"VODOU_DEMO_DB": str(tmp_path / "d.db"), "API_TOKEN": secret}}}
    (proj / "mcp.json").write_text(json.dumps({"mcpServers": servers}))
    (proj / "post.recipe").write_text(RECIPE)
    parked = json.loads(run_in(cli, proj, "run", "post.recipe", "--json", expect=3).stdout)
    import sqlite3

    conn = sqlite3.connect(cli.store)
    (bindings,) = conn.execute("SELECT servers_json FROM runs").fetchone()
    conn.close()
    slack = json.loads(bindings)["slack"]
    assert set(slack["env"]) == {"VODOU_DEMO_DB", "API_TOKEN"} and secret not in bindings
    assert slack["executable"] == sys.executable
    for path in cli.tmp.glob("runs.db*"):
        assert secret.encode() not in path.read_bytes()
    assert secret not in json.dumps(parked)

    from vodou_engine.binding import ServerBinding, digest
    from vodou_engine.runtime.freeze import card_doc, payload_fingerprint

    (pending,) = parked["pending"]
    conn = sqlite3.connect(cli.store)
    payload, policy, approvers = (json.loads(v) for v in conn.execute("SELECT payload_json, policy_json, approvers_json FROM approvals").fetchone())
    conn.close()
    card = card_doc(approvers=approvers, source=slack["source"])
    bound = ServerBinding(**{k: v for k, v in slack.items() if k != "source"})
    with_binding = payload_fingerprint(run_id=parked["run"], node_id="post", address="slack.slack_post_message", payload=payload, policy=policy, server=digest(bound), card=card)
    without = payload_fingerprint(run_id=parked["run"], node_id="post", address="slack.slack_post_message", payload=payload, policy=policy, card=card)
    assert pending["fingerprint"] == with_binding != without
