"""Shared fixtures: an isolated home for the CLI, and two ways to run it.

``cli(...)`` runs ``recipe ...`` in this process (``vodou_engine.cli.main`` with
the isolated environment, working directory, stdin and stdout a real run would
have): the command's own code, at the cost of the command, not of a new
interpreter importing the MCP SDK. ``cli.proc(...)`` and ``cli.popen(...)`` start
``python -m vodou_engine`` as a real process, for what only a process shows:
a signal, a kill -9 at a crash point, a closed pipe, another user, processes
racing each other, and the end-to-end tests that keep every command and every
exit code proven through the real entry point (tests/test_cli_process.py).

Both stores: a test marked ``@pytest.mark.both_stores`` (or a module with that
``pytestmark``) runs once per store named in ``$VODOU_TEST_STORE`` (default
``sqlite,postgres``), its id ending ``[sqlite]`` or ``[postgres]``. Its ``cli`` and
``store_location`` are then that store: a file in the test's directory, or a
fresh PostgreSQL schema at ``$VODOU_TEST_PG`` (tests/pg_helpers.py) dropped after
the test. Without PostgreSQL those tests fail saying so; ``VODOU_TEST_STORE=sqlite``
leaves them out. ``@pytest.mark.sqlite_only`` keeps one test of such a module on
SQLite (it reads the store's file); ``@pytest.mark.postgres`` marks a test that
needs PostgreSQL whatever the store (left out with ``VODOU_TEST_STORE=sqlite``).
Every other test runs on SQLite.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import time
import traceback
import zlib
from dataclasses import dataclass
from pathlib import Path

import demo_zygote
import pytest

# Bytecode: the suite starts hundreds of interpreters (CLI processes, workers, racing store
# processes) and assertion-rewrites every test module in each xdist worker. With
# PYTHONDONTWRITEBYTECODE set (as in this project's CI environment) none of that is ever
# cached: every process compiled the engine from source again, and each worker rewrote and
# compiled every test module again (half of a collection's CPU). The suite writes bytecode
# into the checkout's (git-ignored) __pycache__ directories, as the demo servers it starts
# already did: this process, and through the environment every process it starts.
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
sys.dont_write_bytecode = False

ROOT = Path(__file__).resolve().parent.parent
RECIPES = ROOT / "recipes"
ROGUE = str(Path(__file__).with_name("rogue_server.py"))
STORE_KINDS = ("sqlite", "postgres")
STORES = [s.strip() for s in os.environ.get("VODOU_TEST_STORE", ",".join(STORE_KINDS)).split(",") if s.strip()]


def pytest_configure(config) -> None:
    unknown = [s for s in STORES if s not in STORE_KINDS]
    if unknown or not STORES:
        raise pytest.UsageError(
            f"VODOU_TEST_STORE names {', '.join(unknown) or 'no store'}; it takes a comma-separated list of: {', '.join(STORE_KINDS)}"
        )
    config.addinivalue_line(
        "markers",
        "both_stores: run once per store in $VODOU_TEST_STORE (default sqlite,postgres); cli and store_location use it",
    )
    config.addinivalue_line(
        "markers", "sqlite_only: in a both_stores module, a test about the SQLite file itself (SQLite only)"
    )
    config.addinivalue_line(
        "markers",
        "real_server_processes: start demo servers as their own interpreters, not forks of the test zygote"
        " (a test that reads a server's /proc environment or process tree)",
    )
    config.addinivalue_line(
        "markers",
        "postgres: needs PostgreSQL at $VODOU_TEST_PG; left out (deselected) when VODOU_TEST_STORE leaves postgres out",
    )


LONGEST_FIRST = (
    "test_conformance.py",
    "test_workers.py",
    "test_run_e2e.py",
    "test_lint.py",
    "test_safety_property.py",
)
"""Modules holding the suite's longest tests (tens of seconds each: the conformance suite, the
bulk worker runs, twenty racing processes, mypy), run first: with ``-n 2`` a long test
collected last (test_workers.py sorts last) ran alone at the end while the other worker
idled. The order of the rest is unchanged."""


def pytest_collection_modifyitems(config, items) -> None:
    items.sort(key=lambda item: item.path.name not in LONGEST_FIRST)  # stable: the same order on every worker
    if "postgres" in STORES:
        return
    left_out = [item for item in items if item.get_closest_marker("postgres")]
    if left_out:
        config.hook.pytest_deselected(items=left_out)
        items[:] = [item for item in items if not item.get_closest_marker("postgres")]


@pytest.fixture(scope="session", autouse=True)
def demo_zygote_for_this_process():
    """Demo servers forked from one zygote per test process (tests/demo_zygote.py says why)."""
    from vodou_engine.tools import process, stdio

    zygote, sock = demo_zygote.start()
    before = {k: os.environ.get(k) for k in (demo_zygote.ENV, "PYTHONPATH")}
    os.environ[demo_zygote.ENV] = sock
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (demo_zygote.SITE, before["PYTHONPATH"]) if p)
    demo_zygote.patch(process)
    stdio.start = process.start
    yield
    for key, value in before.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value
    assert zygote.stdin is not None
    zygote.stdin.close()
    zygote.wait(timeout=30)
    shutil.rmtree(os.path.dirname(sock), ignore_errors=True)


@pytest.fixture(autouse=True)
def _real_server_processes(request, monkeypatch):
    if request.node.get_closest_marker("real_server_processes"):
        monkeypatch.delenv(demo_zygote.ENV, raising=False)


def pytest_generate_tests(metafunc) -> None:
    """``store_kind`` (and so ``store_location`` and ``cli``) per store, for tests marked both_stores."""
    if "store_kind" not in metafunc.fixturenames:
        return
    if metafunc.definition.get_closest_marker("both_stores") and not metafunc.definition.get_closest_marker(
        "sqlite_only"
    ):
        metafunc.parametrize("store_kind", STORES, indirect=True)


@pytest.fixture
def store_kind(request) -> str:
    """``"sqlite"`` or ``"postgres"``: the store this test runs on (SQLite unless it is marked both_stores)."""
    return getattr(request, "param", "sqlite")


@pytest.fixture
def store_location(store_kind, tmp_path):
    """The test's own, new store: ``tmp_path/runs.db``, or the URL of a fresh PostgreSQL schema."""
    if store_kind == "sqlite":
        yield str(tmp_path / "runs.db")
        return
    from pg_helpers import fresh_schema

    with fresh_schema("vs") as url:
        yield url


def is_postgres(location: str | os.PathLike) -> bool:
    return str(location).startswith(("postgresql://", "postgres://"))


def store_sql(location: str | os.PathLike, statement: str, params: tuple = ()) -> list[tuple]:
    """One statement on the store's database behind the engine's back (``?`` placeholders on
    either store): tampering with what is stored, or a count the run API does not give."""
    if is_postgres(location):
        import psycopg

        with psycopg.connect(str(location), autocommit=True) as conn:
            cur = conn.execute(statement.replace("?", "%s"), params)
            return cur.fetchall() if cur.description else []
    conn = sqlite3.connect(location)
    try:
        rows = conn.execute(statement, params).fetchall()
        conn.commit()
        return rows
    finally:
        conn.close()


def stored_plan(location: str | os.PathLike, run_id: str) -> str:
    """A run's plan as the store holds it: compressed in ``run_plans`` (schema 8), or in the
    run's own row for a run stored before."""
    rows = store_sql(location, "SELECT plan_zlib FROM run_plans WHERE run_id = ?", (run_id,))
    if rows:
        return zlib.decompress(rows[0][0]).decode()
    return store_sql(location, "SELECT plan_json FROM runs WHERE id = ?", (run_id,))[0][0]


def edit_stored_plan(location: str | os.PathLike, run_id: str, text: str, fingerprint: str | None = None) -> None:
    """Replace a run's stored plan (and, given one, its fingerprint) behind the engine's back."""
    store_sql(location, "UPDATE run_plans SET plan_zlib = ? WHERE run_id = ?", (zlib.compress(text.encode()), run_id))
    if fingerprint is not None:
        store_sql(location, "UPDATE runs SET plan_fingerprint = ? WHERE id = ?", (fingerprint, run_id))


def store_digest(location: str | os.PathLike) -> str:
    """What the store holds, as one sha256, so equal means unchanged: on SQLite the file's
    bytes once the WAL is folded in; on PostgreSQL every row of every table of its schema."""
    if not is_postgres(location):
        conn = sqlite3.connect(location)
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        conn.close()
        return hashlib.sha256(Path(location).read_bytes()).hexdigest()
    digest = hashlib.sha256()
    tables = store_sql(
        location, "SELECT tablename FROM pg_tables WHERE schemaname = current_schema() ORDER BY tablename"
    )
    for (table,) in tables:
        ((rows,),) = store_sql(location, f'SELECT string_agg(t::text, chr(10) ORDER BY t::text) FROM "{table}" t')
        digest.update(f"{table}\n{rows}\n".encode())
    return digest.hexdigest()


@dataclass
class Result:
    code: int
    out: str
    err: str

    def json(self):
        return json.loads(self.out)


class Cli:
    """``recipe ...`` in an isolated home: in this process (``cli(...)``) or as a real one (``cli.proc``, ``cli.popen``)."""

    def __init__(self, tmp: Path, store: str | None = None):
        self.tmp = tmp
        self.location = store or str(tmp / "runs.db")
        self.kind = "postgres" if is_postgres(self.location) else "sqlite"
        self.demo_db = tmp / "demo.db"
        self.env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith("VODOU_") and k not in ("XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_CACHE_HOME")
        }
        self.env.update(
            VODOU_STORE=self.location,
            VODOU_DEMO_DB=str(self.demo_db),
            XDG_CONFIG_HOME=str(tmp / "config"),
            XDG_DATA_HOME=str(tmp / "data"),
            XDG_CACHE_HOME=str(tmp / "cache"),
            COLUMNS="200",
        )

    @property
    def store(self) -> Path:
        """The SQLite store's file; a test that reads the file itself is SQLite-only."""
        if self.kind != "sqlite":
            raise AssertionError(
                f"this test reads the SQLite store's file, but its store is {self.location}: mark it sqlite_only, or use cli.open_store() / cli.sql()"
            )
        return Path(self.location)

    def open_store(self):
        """The test's store, opened as the engine opens it (close it after use)."""
        from vodou_engine.store import open_store

        return open_store(self.location)

    def sql(self, statement: str, params: tuple = ()) -> list[tuple]:
        return store_sql(self.location, statement, params)

    def _args(self, args: tuple) -> list[str]:
        """On PostgreSQL `recipe approve` queues the run for the workers unless told `--here`;
        these tests are about the store, so it drives the run here on both stores (the queued
        path is tests/test_workers.py's)."""
        argv = [str(a) for a in args]
        if self.kind == "postgres" and argv[:1] == ["approve"] and "--here" not in argv:
            argv.append("--here")
        return argv

    def argv(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "vodou_engine", *self._args(args)]

    @staticmethod
    def _check(res: Result, expect: int | None) -> Result:
        if expect is not None:
            assert res.code == expect, f"exit {res.code}, expected {expect}\nstdout:\n{res.out}\nstderr:\n{res.err}"
        return res

    def __call__(
        self,
        *args: str,
        expect: int | None = None,
        timeout: float = 120,
        env: dict | None = None,
        cwd: Path | None = None,
    ) -> Result:
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
        with open(os.devnull, encoding="utf-8") as stdin:
            os.environ.clear()
            os.environ.update(env)
            os.chdir(cwd or self.tmp)
            time.tzset()  # a TZ given for this command applies to it, as in its own process
            sys.stdin, sys.stdout, sys.stderr = stdin, out, err
            faulthandler.dump_traceback_later(timeout, exit=True, file=sys.__stderr__)
            try:
                try:
                    code = recipe_cli.main(self._args(args))
                except SystemExit as exc:  # argparse: --help, --version, usage errors
                    code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
                    if isinstance(exc.code, str):
                        print(exc.code, file=sys.stderr)
                except Exception:  # noqa: BLE001 - what the interpreter would print before exiting 1
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
                os.chdir(saved_cwd)
                os.environ.clear()
                os.environ.update(saved_env)
                time.tzset()
        res = Result(code, out.buffer.getvalue().decode("utf-8"), err.buffer.getvalue().decode("utf-8"))
        return self._check(res, expect)

    def proc(
        self,
        *args: str,
        expect: int | None = None,
        timeout: float = 120,
        env: dict | None = None,
        cwd: Path | None = None,
    ) -> Result:
        """``python -m vodou_engine ARGS`` as a real process (stdin /dev/null, stdout and stderr pipes)."""
        proc = subprocess.run(
            self.argv(*args),
            cwd=cwd or self.tmp,
            env={**self.env, **(env or {})},
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
        )
        return self._check(Result(proc.returncode, proc.stdout, proc.stderr), expect)

    def popen(self, *args: str, env: dict | None = None) -> subprocess.Popen:
        return subprocess.Popen(
            self.argv(*args),
            cwd=self.tmp,
            env={**self.env, **(env or {})},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            stdin=subprocess.DEVNULL,
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
def cli(tmp_path, store_location) -> Cli:
    """``recipe`` in an isolated home on this test's store (see both_stores above)."""
    return Cli(tmp_path, store_location)


def demo_calls(db: Path, tool: str | None = None, server: str | None = None) -> list[dict]:
    from vodou_engine.demo import db as demo

    if not Path(db).exists():
        return []
    return demo.calls(db, tool=tool, server=server)


def rogue_server(log: Path, **env: str) -> dict:
    """A server-file entry for tests/rogue_server.py (standard library only: it starts in tens of
    ms) logging every call to ``log``; ``env`` adds ROGUE_* settings."""
    return {"command": sys.executable, "args": ["-I", "-S", ROGUE], "env": {"ROGUE_LOG": str(log), **env}}


def demo_server(module: str, demo_db: Path, **env: str) -> dict:
    """A server-file entry for a bundled demo server (``chat_server``, ``lab_server``, ...) on the
    demo world ``demo_db``; ``env`` adds VODOU_DEMO_* settings (arrivals, latency, a lab's name)."""
    return {
        "command": sys.executable,
        "args": ["-m", f"vodou_engine.demo.{module}"],
        "env": {"VODOU_DEMO_DB": str(demo_db), **env},
    }


def rogue_calls(log: Path, tool: str | None = None) -> list[dict]:
    """The calls the rogue server logged (server side), optionally of one tool."""
    if not Path(log).exists():
        return []
    records = [json.loads(line) for line in Path(log).read_text().splitlines() if line.strip()]
    return [r for r in records if "tool" in r and (tool is None or r["tool"] == tool)]
