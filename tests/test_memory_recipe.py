"""recipes/remember.recipe end to end on the published npm server @modelcontextprotocol/server-memory.

The server is the real package, started by ``npx -y`` as recipes/npm-servers.json says,
with its graph in this test's directory instead of /tmp. The graph file is the server's
own state: before approval it is byte for byte what it was (the read ran, nothing was
written); after ``recipe approve`` it holds exactly the one entity the card showed, next
to what was there. When npx cannot get the package (no npm, no registry, nothing in its
cache), the test fails saying so.
"""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess

import pytest
from conftest import RECIPES

RECIPE = RECIPES / "remember.recipe"
SERVERS = RECIPES / "npm-servers.json"
BOB = {"type": "entity", "name": "Bob", "entityType": "person", "observations": ["likes tea"]}


def try_line() -> list[str]:
    (line,) = [x for x in RECIPE.read_text(encoding="utf-8").splitlines() if x.startswith("# try: ")]
    return shlex.split(line[len("# try: ") :])


def memory_server(tmp_path) -> dict:
    """The server file of the `# try:` line, with the graph kept in ``tmp_path``; npx has the
    package in its cache once this returns."""
    doc = json.loads(SERVERS.read_text(encoding="utf-8"))
    entry = doc["mcpServers"]["memory"]
    if shutil.which(entry["command"]) is None:
        pytest.fail(f"`{entry['command']}` is not on the PATH: remember.recipe needs Node.js with npm")
    fetch = subprocess.run(  # with nothing on its stdin the server exits once started
        [entry["command"], *entry["args"]], stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=300
    )
    if fetch.returncode != 0:
        pytest.fail(f"`{' '.join([entry['command'], *entry['args']])}` could not start the server:\n{fetch.stderr}")
    entry["env"] = {**entry["env"], "MEMORY_FILE_PATH": str(tmp_path / "memory.jsonl")}
    return doc


def graph(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def test_remember_parks_before_the_graph_changes_and_adds_exactly_the_approved_fact(cli, tmp_path):
    argv = try_line()
    assert argv[:5] == ["recipe", "run", "recipes/remember.recipe", "--servers", "recipes/npm-servers.json"], argv
    sets = [argv[i + 1] for i, word in enumerate(argv) if word == "--set"]
    assert sets == ["person=Ana", "fact=prefers morning meetings"], argv
    servers = tmp_path / "npm-servers.json"
    servers.write_text(json.dumps(memory_server(tmp_path)))
    memory = tmp_path / "memory.jsonl"
    memory.write_text(json.dumps(BOB) + "\n")  # the server's own format: one JSON object a line
    before = memory.read_bytes()

    parked = cli("run", RECIPE, "--servers", servers, *(f for s in sets for f in ("--set", s)), "--json", expect=3)
    doc = json.loads(parked.out)
    (pending,) = doc["pending"]
    assert pending["step"] == "remember" and "memory·create_entities" in pending["card"]
    assert '"entities": []' in pending["card"]  # the preview: the graph holds nothing about Ana yet
    assert memory.read_bytes() == before  # parked: the server's graph is untouched

    cli("approve", doc["run"], "remember", "--yes", "--servers", servers, expect=0)
    ana = {"type": "entity", "name": "Ana", "entityType": "person", "observations": ["prefers morning meetings"]}
    assert sorted(graph(memory), key=lambda e: e["name"]) == [ana, BOB]
    nodes = {n["node"]: n for n in cli("show", doc["run"], "--json", expect=0).json()["nodes"]}
    assert nodes["remember"]["state"] == "succeeded"
