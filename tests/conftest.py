"""Shared fixtures: an isolated home for the CLI, and a way to run it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
RECIPES = ROOT / "recipes"


@dataclass
class Result:
    code: int
    out: str
    err: str

    def json(self):
        return json.loads(self.out)


class Cli:
    """Runs `python -m vodou_engine ...` as a real process, in an isolated home."""

    def __init__(self, tmp: Path):
        self.tmp = tmp
        self.store = tmp / "runs.db"
        self.demo_db = tmp / "demo.db"
        self.env = {
            k: v for k, v in os.environ.items() if not k.startswith("VODOU_") and k not in ("XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_CACHE_HOME")
        }
        self.env.update(
            VODOU_STORE=str(self.store),
            VODOU_DEMO_DB=str(self.demo_db),
            XDG_CONFIG_HOME=str(tmp / "config"),
            XDG_DATA_HOME=str(tmp / "data"),
            XDG_CACHE_HOME=str(tmp / "cache"),
            COLUMNS="200",
        )

    def argv(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "vodou_engine", *map(str, args)]

    def __call__(self, *args: str, expect: int | None = None, timeout: float = 120, env: dict | None = None) -> Result:
        proc = subprocess.run(
            self.argv(*args), cwd=self.tmp, env={**self.env, **(env or {})}, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL
        )
        res = Result(proc.returncode, proc.stdout, proc.stderr)
        if expect is not None:
            assert res.code == expect, f"exit {res.code}, expected {expect}\nstdout:\n{res.out}\nstderr:\n{res.err}"
        return res

    def popen(self, *args: str, env: dict | None = None) -> subprocess.Popen:
        return subprocess.Popen(
            self.argv(*args), cwd=self.tmp, env={**self.env, **(env or {})}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL
        )

    def approver(self, name: str) -> dict:
        """Make ``name`` an approver in this store; the environment that proves it (for ``--as``)."""
        res = self("approver", "add", name, expect=0)
        return {"VODOU_APPROVER_TOKEN": res.out.strip()}

    def servers_file(self, servers: dict) -> Path:
        path = self.tmp / "mcp.json"
        path.write_text(json.dumps({"mcpServers": servers}))
        return path


@pytest.fixture
def cli(tmp_path) -> Cli:
    return Cli(tmp_path)


def demo_calls(db: Path, tool: str | None = None, server: str | None = None) -> list[dict]:
    from vodou_engine.demo import db as demo

    if not Path(db).exists():
        return []
    return demo.calls(db, tool=tool, server=server)
