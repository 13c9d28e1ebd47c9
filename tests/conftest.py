"""Shared fixtures: an isolated home for the CLI, and two ways to run it.

``cli(...)`` runs ``recipe ...`` in this process (``vodou_engine.cli.main`` with
the isolated environment, working directory, stdin and stdout a real run would
have): the command's own code, at the cost of the command, not of a new
interpreter importing the MCP SDK. ``cli.proc(...)`` and ``cli.popen(...)`` start
``python -m vodou_engine`` as a real process, for what only a process shows:
a signal, a kill -9 at a crash point, a closed pipe, another user, processes
racing each other, and the end-to-end tests that keep every command and every
exit code proven through the real entry point (tests/test_cli_process.py).
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
RECIPES = ROOT / "recipes"
ROGUE = str(Path(__file__).with_name("rogue_server.py"))


@dataclass
class Result:
    code: int
    out: str
    err: str

    def json(self):
        return json.loads(self.out)


class Cli:
    """``recipe ...`` in an isolated home: in this process (``cli(...)``) or as a real one (``cli.proc``, ``cli.popen``)."""

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

    @staticmethod
    def _check(res: Result, expect: int | None) -> Result:
        if expect is not None:
            assert res.code == expect, f"exit {res.code}, expected {expect}\nstdout:\n{res.out}\nstderr:\n{res.err}"
        return res

    def __call__(self, *args: str, expect: int | None = None, timeout: float = 120, env: dict | None = None, cwd: Path | None = None) -> Result:
        """``recipe ARGS`` run by ``vodou_engine.cli.main`` in this process, as the process would
        see it: this home's environment (only), ``cwd`` (default the home), stdin at /dev/null,
        stdout and stderr pipes (not terminals). The exit code is what the process would exit
        with; an exception the CLI lets out is a traceback on stderr and exit 1, as Python does.
        A command still going after ``timeout`` seconds ends this test process with every
        thread's traceback (a hang is a failure, never a stuck suite)."""
        import faulthandler

        from vodou_engine import cli as recipe_cli

        env = {**self.env, **(env or {})}
        assert "VODOU_CRASH_AT" not in env, "a crash point kills a process: use cli.proc(...)"
        saved_env, saved_cwd = dict(os.environ), os.getcwd()
        saved_streams = sys.stdin, sys.stdout, sys.stderr
        out = io.TextIOWrapper(io.BytesIO(), encoding="utf-8", write_through=True)
        err = io.TextIOWrapper(io.BytesIO(), encoding="utf-8", write_through=True)
        stdin = open(os.devnull, encoding="utf-8")
        os.environ.clear()
        os.environ.update(env)
        os.chdir(cwd or self.tmp)
        time.tzset()  # a TZ given for this command applies to it, as in its own process
        sys.stdin, sys.stdout, sys.stderr = stdin, out, err
        faulthandler.dump_traceback_later(timeout, exit=True, file=sys.__stderr__)
        try:
            try:
                code = recipe_cli.main([str(a) for a in args])
            except SystemExit as exc:  # argparse: --help, --version, usage errors
                code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
                if isinstance(exc.code, str):
                    print(exc.code, file=sys.stderr)
            except Exception:  # what the interpreter would print before exiting 1
                traceback.print_exc()
                code = 1
            for stream in (sys.stdout, sys.stderr):  # what main() left there (a guarded stdout)
                try:
                    stream.flush()
                except (OSError, ValueError):
                    pass
        finally:
            faulthandler.cancel_dump_traceback_later()
            sys.stdin, sys.stdout, sys.stderr = saved_streams
            stdin.close()
            os.chdir(saved_cwd)
            os.environ.clear()
            os.environ.update(saved_env)
            time.tzset()
        res = Result(code, out.buffer.getvalue().decode("utf-8"), err.buffer.getvalue().decode("utf-8"))
        return self._check(res, expect)

    def proc(self, *args: str, expect: int | None = None, timeout: float = 120, env: dict | None = None, cwd: Path | None = None) -> Result:
        """``python -m vodou_engine ARGS`` as a real process (stdin /dev/null, stdout and stderr pipes)."""
        proc = subprocess.run(
            self.argv(*args), cwd=cwd or self.tmp, env={**self.env, **(env or {})}, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL
        )
        return self._check(Result(proc.returncode, proc.stdout, proc.stderr), expect)

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


def rogue_server(log: Path, **env: str) -> dict:
    """A server-file entry for tests/rogue_server.py (standard library only: it starts in tens of
    ms) logging every call to ``log``; ``env`` adds ROGUE_* settings."""
    return {"command": sys.executable, "args": ["-I", "-S", ROGUE], "env": {"ROGUE_LOG": str(log), **env}}


def rogue_calls(log: Path, tool: str | None = None) -> list[dict]:
    """The calls the rogue server logged (server side), optionally of one tool."""
    if not Path(log).exists():
        return []
    records = [json.loads(line) for line in Path(log).read_text().splitlines() if line.strip()]
    return [r for r in records if "tool" in r and (tool is None or r["tool"] == tool)]
