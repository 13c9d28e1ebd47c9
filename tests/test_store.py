"""The run store: schema, compare-and-set rules, races between processes, and
refusing files that are not stores without touching them.

Tests taking the ``backend`` (or ``store``) fixture hold for every store and run
on each (``[sqlite]``, ``[postgres]``: the ``both_stores`` mark, tests/conftest.py),
each on its own new store: a file, or a fresh PostgreSQL schema at
``$VODOU_TEST_PG``. ``VODOU_TEST_STORE`` (comma separated, default
``sqlite,postgres``) selects which. Tests about the SQLite file itself (WAL and
pragmas, files that are not stores, damaged pages, its own ``sqlite3`` errors)
build or read files by hand and stay SQLite-only.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import threading
import tracemalloc
import zlib
from pathlib import Path
from typing import Any

import pytest
from conftest import store_digest, store_sql

from vodou_engine.errors import (
    EXIT_REFUSED,
    EXIT_STORE,
    AlreadyDecidedError,
    ExpiredError,
    NotAllowedError,
    PlanError,
    RefusedError,
    StaleError,
    StoreError,
    UnknownRunError,
)
from vodou_engine.limits import MAX_PLAN_BYTES
from vodou_engine.store import (
    ApprovalRecord,
    NodeRecord,
    RunStore,
    SqliteRunStore,
    default_store_path,
    latest_version,
    open_store,
)
from vodou_engine.store import runs as store_runs
from vodou_engine.store import schema as store_schema
from vodou_engine.store.schema import Migration, split_statements

pytestmark = pytest.mark.both_stores
T0 = 1_700_000_000.0


class Backend:
    """One test's store: where it is, and a new connection to it."""

    def __init__(self, kind: str, location: str):
        self.kind = kind
        self.location = location

    def open(self) -> RunStore:
        return open_store(self.location)

    def sql(self, statement: str, params: tuple = ()) -> list[tuple]:
        """Straight to the database, around the store (``?`` placeholders)."""
        return store_sql(self.location, statement, params)

    def digest(self) -> str:
        """Equal means unchanged (the file's bytes; every row of the schema)."""
        return store_digest(self.location)


@pytest.fixture
def backend(store_kind, store_location, tmp_path):
    if store_kind == "sqlite":  # in a directory the store makes itself
        return Backend(store_kind, str(tmp_path / "store" / "runs.db"))
    return Backend(store_kind, store_location)


@pytest.fixture
def store(backend):
    s = backend.open()
    yield s
    s.close()


def make_run(store: RunStore, run_id: str = "r1", *, now: float = T0, state: str = "running") -> Any:
    return store.create_run(
        run_id,
        recipe_name="send-report",
        recipe_path="recipes/send-report.vodou",
        source_sha256="ab" * 32,
        plan_json=b'{"nodes":[]}',
        plan_fingerprint="plan-fp",
        inputs_json='{"to":"team"}',
        started_by="alice",
        state=state,
        now=now,
    )


def question(
    approval_id: str = "ap1",
    *,
    run_id: str = "r1",
    step: str = "send",
    asked_at: float = T0 + 1,
    approvers: list[str] | None = None,
    expires_at: float | None = None,
    fingerprint: str = "fp",
) -> ApprovalRecord:
    return ApprovalRecord(
        id=approval_id,
        run_id=run_id,
        node_id=f"approve_{step}",
        step=step,
        payload_json=b'{"to":"team","body":"hi"}',
        fingerprint=fingerprint,
        asked_at=asked_at,
        card_text="Send the report to team?",
        approvers_json=json.dumps(approvers if approvers is not None else ["alice", "bob"]),
        expires_at=expires_at,
    )


def approved(store: RunStore, step: str = "send", approval_id: str = "ap1") -> None:
    store.ask(question(approval_id, step=step))
    store.decide(approval_id, "approved", by="alice", now=T0 + 2)


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# --------------------------------------------------------------------------
# schema and migrations


def test_new_store_has_the_latest_schema_and_reopening_changes_nothing(backend):
    s = backend.open()
    assert s.schema_version() == latest_version()
    make_run(s)
    s.close()
    before = backend.digest()
    s = backend.open()
    assert s.schema_version() == latest_version()
    assert s.get_run("r1").recipe_name == "send-report"
    s.close()
    assert backend.digest() == before


def test_each_migration_is_recorded_and_makes_its_tables(backend):
    backend.open().close()
    rows = backend.sql("SELECT version, name FROM schema_version ORDER BY version")
    assert [tuple(r) for r in rows] == [(m.version, m.name) for m in store_schema.migrations()]
    s = backend.open()
    tables = s._table_names()
    s.close()
    assert store_schema.CORE_TABLES.union(*store_schema.TABLES_SINCE.values()) <= tables


def test_sqlite_store_uses_wal_and_records_each_migration(tmp_path):
    path = tmp_path / "runs.db"
    SqliteRunStore(path).close()
    conn = sqlite3.connect(path)
    try:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        rows = conn.execute("SELECT version, name FROM schema_version ORDER BY version").fetchall()
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    finally:
        conn.close()
    assert rows == [(m.version, m.name) for m in store_schema.migrations()]
    assert {"runs", "nodes", "approvals", "effects", "events", "schema_version"} <= tables


def test_store_connection_pragmas(tmp_path):
    s = SqliteRunStore(tmp_path / "runs.db")
    conn = s._conn
    assert conn.execute("PRAGMA foreign_keys").fetchone()[0] == 1
    assert conn.execute("PRAGMA busy_timeout").fetchone()[0] == 5000
    assert conn.execute("PRAGMA synchronous").fetchone()[0] == 1  # NORMAL
    s.close()


def with_extra_migration(monkeypatch, sql: str) -> None:
    real = store_schema.migrations()
    extra = Migration(len(real) + 1, f"{len(real) + 1:04d}_test.sql", sql)
    monkeypatch.setattr(store_schema, "migrations", lambda: (*real, extra))


def test_additive_migration_keeps_old_runs_readable(backend, monkeypatch):
    s = backend.open()
    make_run(s)
    s.close()
    with_extra_migration(monkeypatch, "ALTER TABLE runs ADD COLUMN note TEXT NOT NULL DEFAULT '';")
    s = backend.open()
    assert s.schema_version() == latest_version() == len(store_schema.migrations())
    assert s.get_run("r1").plan_fingerprint == "plan-fp"
    s.close()


def test_failed_migration_leaves_the_store_as_it_was(backend, monkeypatch):
    s = backend.open()
    make_run(s)
    s.close()
    version = latest_version()
    before = backend.digest()
    with_extra_migration(monkeypatch, "CREATE TABLE half_done (x TEXT);\nTHIS IS NOT SQL;")
    if backend.kind == "sqlite":
        syntax_error: type[Exception] = sqlite3.OperationalError
    else:
        import psycopg

        syntax_error = psycopg.errors.SyntaxError
    with pytest.raises(syntax_error):
        backend.open()
    monkeypatch.undo()
    assert backend.digest() == before
    s = backend.open()
    assert s.schema_version() == version
    assert "half_done" not in s._table_names()
    s.close()


def test_store_newer_than_the_code_is_refused_untouched(backend, monkeypatch):
    with_extra_migration(monkeypatch, "CREATE TABLE from_the_future (x TEXT);")
    backend.open().close()
    monkeypatch.undo()
    before = backend.digest()
    with pytest.raises(StoreError, match="newer than this vodou_engine") as info:
        backend.open()
    assert backend.location in str(info.value)
    assert backend.digest() == before


def test_split_statements_respects_quotes_and_comments():
    script = """
    -- a comment; with a semicolon and a quote's apostrophe
    CREATE TABLE t (x TEXT DEFAULT 'a;b', y TEXT DEFAULT 'it''s');
    INSERT INTO t VALUES ('--not a comment', ';');  -- trailing
    SELECT 1
    """
    assert split_statements(script) == [
        "CREATE TABLE t (x TEXT DEFAULT 'a;b', y TEXT DEFAULT 'it''s')",
        "INSERT INTO t VALUES ('--not a comment', ';')",
        "SELECT 1",
    ]


# --------------------------------------------------------------------------
# runs


def test_create_and_get_run(store):
    created = make_run(store)
    run = store.get_run("r1")
    assert created == run  # what was written, without reading it back
    leased = store.create_run(
        "r2", recipe_name="x", recipe_path=None, source_sha256="ab" * 32, plan_json="{}", plan_fingerprint="fp",
        inputs_json="{}", started_by="bo", now=T0, owner="h:1:2", lease_s=30.0, servers_json='{"s": {}}',
        saved_recipe="x", saved_version=3, schedule="daily",
    )  # fmt: skip
    assert leased == store.get_run("r2")
    # A caller that holds the plan gets the record without it, as get_run(plan=False) reads it.
    held = store.create_run(
        "r3", recipe_name="x", recipe_path=None, source_sha256="ab" * 32, plan_json=b'{"nodes":[3]}',
        plan_fingerprint="fp", inputs_json="{}", started_by="bo", now=T0, plan=False,
    )  # fmt: skip
    assert held == store.get_run("r3", plan=False) and held.plan_json == ""
    assert store.get_run("r3").plan_json == '{"nodes":[3]}'
    assert store.approvals("r1") == []  # a run with none, told from no run in one statement
    with pytest.raises(UnknownRunError):
        store.approvals("r9")
    assert run.state == "running"
    assert run.plan_json == '{"nodes":[]}'  # bytes in, str out
    assert (run.created_at, run.updated_at, run.ended_at) == (T0, T0, None)
    assert run.recipe_path == "recipes/send-report.vodou"
    with pytest.raises(RefusedError, match="already exists"):
        make_run(store)


def test_a_runs_plan_is_stored_once_apart_from_its_row_and_runs_stored_before_keep_theirs(backend, store):
    make_run(store)
    make_run(store, "r2", now=T0 + 1)
    # The run's own row, which every state, owner and lease write rewrites, holds no plan.
    assert backend.sql("SELECT id, plan_json FROM runs ORDER BY id") == [("r1", ""), ("r2", "")]
    packed = backend.sql("SELECT run_id, plan_zlib FROM run_plans ORDER BY run_id")
    assert [(r, zlib.decompress(p)) for r, p in packed] == [("r1", b'{"nodes":[]}'), ("r2", b'{"nodes":[]}')]
    assert store.set_run_state("r1", "succeeded", expected="running", now=T0 + 2)
    assert store.get_run("r1").plan_json == '{"nodes":[]}'
    assert store.get_run("r1", plan=False).plan_json == ""
    # A run stored before version 8 has its plan in its row and none apart: still read.
    backend.sql("UPDATE runs SET plan_json = ? WHERE id = ?", ('{"nodes":[1]}', "r2"))
    backend.sql("DELETE FROM run_plans WHERE run_id = ?", ("r2",))
    assert store.get_run("r2").plan_json == '{"nodes":[1]}'
    assert {r.id: r.plan_json for r in store.list_runs()} == {"r1": '{"nodes":[]}', "r2": '{"nodes":[1]}'}
    # Pruning a run removes its plan with it.
    assert store.prune(ended_before=T0 + 3, states=["succeeded"], by="alice") == 1
    assert backend.sql("SELECT run_id FROM run_plans") == []


def test_unknown_run_suggests_close_ids(store):
    make_run(store, "20250101-send-report-7f3a")
    make_run(store, "20250102-cleanup-11aa", now=T0 + 1)
    with pytest.raises(UnknownRunError) as info:
        store.get_run("20250101-send-report-7f3b")
    message = str(info.value)
    assert "20250101-send-report-7f3a" in message
    assert "list the runs" in message
    assert info.value.exit_code == EXIT_REFUSED
    with pytest.raises(UnknownRunError, match="20250102-cleanup-11aa"):
        store.get_nodes("20250102")  # a prefix is a likely typo too
    with pytest.raises(UnknownRunError):
        store.save_nodes("nope", [NodeRecord("a", "pending")])
    with pytest.raises(UnknownRunError):
        store.append_event("nope", "x")


def test_list_runs_newest_first(store):
    for i in range(5):
        make_run(store, f"r{i}", now=T0 + i, state="parked" if i % 2 else "running")
    assert [r.id for r in store.list_runs()] == ["r4", "r3", "r2", "r1", "r0"]
    assert [r.id for r in store.list_runs(limit=2)] == ["r4", "r3"]
    assert [r.id for r in store.list_runs(state="parked")] == ["r3", "r1"]


def test_set_run_state_is_compare_and_set(store):
    make_run(store)
    assert store.set_run_state("r1", "parked", expected="running", now=T0 + 1)
    assert not store.set_run_state("r1", "succeeded", expected="running", now=T0 + 2)
    assert store.get_run("r1").state == "parked"
    assert store.set_run_state("r1", "running", expected=["parked", "failed"], now=T0 + 3)
    assert store.set_run_state("r1", "failed", expected=None, error="boom", now=T0 + 4)
    run = store.get_run("r1")
    assert (run.state, run.error, run.updated_at, run.ended_at) == ("failed", "boom", T0 + 4, T0 + 4)
    with pytest.raises(UnknownRunError):
        store.set_run_state("r2", "parked", expected="running")
    with pytest.raises(ValueError):
        store.set_run_state("r1", "exploded", expected=None)


# --------------------------------------------------------------------------
# nodes and transactions


def test_ending_a_run_withdraws_its_pending_questions_only_when_it_wins(store):
    make_run(store)
    store.ask(question())
    make_run(store, "r2")
    assert not store.set_run_state("r1", "failed", expected="parked")  # lost: nothing withdrawn
    assert store.get_approval("ap1").state == "pending"
    assert store.set_run_state("r1", "cancelled", expected="running")
    assert store.get_approval("ap1").state == "withdrawn"
    assert store.set_run_state("r2", "succeeded", expected="running")  # none to withdraw
    assert store.get_run("r2").state == "succeeded"


def test_save_nodes_upserts(store):
    make_run(store)
    assert store.get_nodes("r1") == {}
    store.save_nodes("r1", [NodeRecord("a", "pending"), NodeRecord("b", "pending")])
    store.save_nodes("r1", [NodeRecord("a", "succeeded", b'{"ok":true}', None, T0, T0 + 1, 1)])
    store.save_nodes("r1", [])
    nodes = store.get_nodes("r1")
    assert set(nodes) == {"a", "b"}
    assert nodes["a"] == NodeRecord("a", "succeeded", '{"ok":true}', None, T0, T0 + 1, 1)
    assert nodes["b"].state == "pending"


@pytest.mark.parametrize("size", [2, 3, 16, 17, 40])
def test_a_batch_of_node_states_keeps_the_last_state_of_a_node_listed_twice(store, size):
    """A small batch is one statement (store/runs.py), a large one a statement a row: both
    leave each node in the last state the batch gives it, and write every other node."""
    make_run(store)
    store.save_nodes("r1", [NodeRecord("n00", "pending")])
    batch = [NodeRecord(f"n{i:02d}", "running", None, None, T0 + i) for i in range(size - 1)]
    batch.append(NodeRecord("n00", "succeeded", b'{"ok":true}', None, T0, T0 + 1, 1))
    store.save_nodes("r1", batch)
    nodes = store.get_nodes("r1")
    assert set(nodes) == {f"n{i:02d}" for i in range(size - 1)}
    assert nodes["n00"] == NodeRecord("n00", "succeeded", '{"ok":true}', None, T0, T0 + 1, 1)
    assert all(nodes[f"n{i:02d}"] == NodeRecord(f"n{i:02d}", "running", None, None, T0 + i) for i in range(1, size - 1))


def test_transaction_groups_writes(store):
    make_run(store)
    with store.transaction():
        store.save_nodes("r1", [NodeRecord("ask", "waiting")])
        assert store.set_run_state("r1", "parked", expected="running")
    with pytest.raises(RuntimeError), store.transaction():
        store.save_nodes("r1", [NodeRecord("ask", "succeeded")])
        store.set_run_state("r1", "running", expected="parked")
        raise RuntimeError("crash before commit")
    assert store.get_nodes("r1")["ask"].state == "waiting"
    assert store.get_run("r1").state == "parked"


def test_store_can_move_between_threads(store):
    make_run(store)
    seen = []
    worker = threading.Thread(target=lambda: seen.append(store.get_run("r1").state))
    worker.start()
    worker.join()
    assert seen == ["running"]


# --------------------------------------------------------------------------
# approvals


def test_ask_supersedes_the_older_question_for_the_same_step(store):
    make_run(store)
    store.ask(question("ap1"))
    store.ask(question("other", step="archive"))
    store.ask(question("ap2", asked_at=T0 + 5))
    old, new = store.get_approval("ap1"), store.get_approval("ap2")
    assert (old.state, old.superseded_by, old.decided_at) == ("superseded", "ap2", T0 + 5)
    assert new.state == "pending"
    assert [a.id for a in store.pending_approvals("r1")] == ["other", "ap2"]
    assert [a.id for a in store.approvals("r1")] == ["ap1", "other", "ap2"]
    asked = [json.loads(e.data_json) for e in store.events("r1") if e.kind == "approval.asked"]
    assert [a["superseded"] for a in asked] == [[], [], ["ap1"]]
    with pytest.raises(AlreadyDecidedError, match="superseded by ap2"):
        store.decide("ap1", "approved", by="alice")


def test_pending_approvals_across_runs(store):
    make_run(store, "r1")
    make_run(store, "r2", now=T0 + 1)
    store.ask(question("a1", run_id="r1"))
    store.ask(question("a2", run_id="r2", asked_at=T0 + 2))
    assert [a.id for a in store.pending_approvals()] == ["a1", "a2"]
    store.decide("a1", "rejected", by="bob", reason="not today")
    assert [a.id for a in store.pending_approvals()] == ["a2"]


def test_ask_requires_a_known_run_and_a_fresh_id(store):
    make_run(store)
    with pytest.raises(UnknownRunError):
        store.ask(question(run_id="ghost"))
    store.ask(question("ap1"))
    with pytest.raises(RefusedError, match="already exists"):
        store.ask(question("ap1", step="other"))


def test_decide_is_compare_and_set_and_logs_every_attempt(store):
    make_run(store)
    store.ask(question("ap1"))
    won = store.decide("ap1", "approved", by="alice", reason="looks right", now=T0 + 10)
    assert (won.state, won.decided_by, won.decided_at, won.reason) == ("approved", "alice", T0 + 10, "looks right")
    assert store.get_approval("ap1") == won
    with pytest.raises(AlreadyDecidedError) as info:
        store.decide("ap1", "rejected", by="bob", now=T0 + 11)
    message = str(info.value)
    assert "approved" in message and "alice" in message and "2023-11-14T22:13:30Z" in message
    decisions = [e for e in store.events("r1") if e.kind.startswith("approval.") and e.kind != "approval.asked"]
    assert [(e.kind, e.actor) for e in decisions] == [("approval.decided", "alice"), ("approval.refused", "bob")]
    assert json.loads(decisions[1].data_json)["refused"] == "AlreadyDecidedError"


def test_decide_refuses_strangers_and_late_answers(store):
    make_run(store)
    store.ask(question("ap1", approvers=["alice"], expires_at=T0 + 100))
    with pytest.raises(NotAllowedError, match="mallory"):
        store.decide("ap1", "approved", by="mallory", now=T0 + 2)
    with pytest.raises(ExpiredError):
        store.decide("ap1", "approved", by="alice", now=T0 + 100)
    assert store.get_approval("ap1").state == "pending"
    expired = store.decide("ap1", "expired", by="clock", now=T0 + 101)
    assert expired.state == "expired"
    with pytest.raises(AlreadyDecidedError, match="expired"):
        store.decide("ap1", "approved", by="alice", now=T0 + 102)
    with pytest.raises(RefusedError, match="no approval"):
        store.decide("missing", "approved", by="alice")
    with pytest.raises(ValueError):
        store.decide("ap1", "superseded", by="alice")
    refused = [e for e in store.events("r1") if e.kind == "approval.refused"]
    assert len(refused) == 3


def test_empty_approver_list_leaves_the_choice_to_the_caller(store):
    make_run(store)
    store.ask(question("ap1", approvers=[]))
    assert store.decide("ap1", "approved", by="anyone").state == "approved"


# --------------------------------------------------------------------------
# effects


def test_begin_effect_claims_one_execution(store):
    make_run(store)
    approved(store)
    args = {"approval_id": "ap1", "fingerprint": "fp", "payload_json": b'{"to":"team"}', "now": T0 + 3}
    assert store.begin_effect("r1", "send", idempotency_key="r1/send", **args)
    assert not store.begin_effect("r1", "send", idempotency_key="r1/send", **args)
    assert not store.begin_effect("r1", "send", idempotency_key="another-key", **args)
    effect = store.get_effect("r1", "send")
    assert (effect.state, effect.payload_json, effect.approval_id) == ("executing", '{"to":"team"}', "ap1")


def test_begin_effect_only_runs_what_was_approved(store):
    make_run(store)
    store.ask(question("ap1"))
    common = {"idempotency_key": "k", "payload_json": "{}"}
    with pytest.raises(RefusedError, match="still pending"):
        store.begin_effect("r1", "send", approval_id="ap1", fingerprint="fp", **common)
    store.decide("ap1", "approved", by="alice")
    with pytest.raises(StaleError):
        store.begin_effect("r1", "send", approval_id="ap1", fingerprint="changed", **common)
    with pytest.raises(RefusedError, match="guards step 'send'"):
        store.begin_effect("r1", "delete", approval_id="ap1", fingerprint="fp", **common)
    with pytest.raises(RefusedError, match="no approval"):
        store.begin_effect("r1", "send", approval_id="nope", fingerprint="fp", **common)
    store.ask(question("ap2", step="archive"))
    store.decide("ap2", "rejected", by="bob")
    with pytest.raises(RefusedError, match="rejected by bob"):
        store.begin_effect("r1", "archive", approval_id="ap2", fingerprint="fp", **common)
    assert store.effects("r1") == []


def test_idempotency_keys_are_unique_across_steps(store):
    make_run(store)
    approved(store, "send", "ap1")
    approved(store, "archive", "ap2")
    assert store.begin_effect("r1", "send", approval_id="ap1", fingerprint="fp", idempotency_key="k", payload_json="{}")
    assert not store.begin_effect(
        "r1", "archive", approval_id="ap2", fingerprint="fp", idempotency_key="k", payload_json="{}"
    )


def test_finish_effect_is_compare_and_set(store):
    make_run(store)
    approved(store)
    store.begin_effect("r1", "send", approval_id="ap1", fingerprint="fp", idempotency_key="k", payload_json="{}")
    assert store.finish_effect("r1", "send", "executed", result_json=b'{"id":7}', now=T0 + 5)
    assert not store.finish_effect("r1", "send", "failed", error="late")
    effect = store.get_effect("r1", "send")
    assert (effect.state, effect.result_json, effect.ended_at, effect.error) == ("executed", '{"id":7}', T0 + 5, None)
    with pytest.raises(RefusedError, match="no effect"):
        store.finish_effect("r1", "archive", "executed")


def test_mark_unknown_then_settle(store):
    make_run(store)
    approved(store, "send", "ap1")
    approved(store, "archive", "ap2")
    approved(store, "notify", "ap3")
    for step, approval in (("send", "ap1"), ("archive", "ap2"), ("notify", "ap3")):
        store.begin_effect("r1", step, approval_id=approval, fingerprint="fp", idempotency_key=step, payload_json="{}")
    store.finish_effect("r1", "notify", "executed")
    assert store.mark_unknown("r1") == 2
    assert store.mark_unknown("r1") == 0
    states = {e.step: e.state for e in store.effects("r1")}
    assert states == {"send": "unknown", "archive": "unknown", "notify": "executed"}
    assert not store.finish_effect("r1", "send", "executed")  # the crashed attempt cannot report in late

    sent = store.settle_effect("r1", "send", True, "alice", result_json='{"seen":"in outbox"}', now=T0 + 9)
    assert (sent.state, sent.settled_by, sent.error) == ("executed", "alice", None)
    assert sent.result_json == '{"seen":"in outbox"}'
    kept = store.settle_effect("r1", "archive", False, "bob", reason="not in the archive")
    assert (kept.state, kept.error) == ("failed", "not in the archive")
    with pytest.raises(RefusedError, match="executed, settled by alice"):
        store.settle_effect("r1", "send", False, "bob")
    settled = [(e.kind, e.actor, e.node_id) for e in store.events("r1") if e.kind == "effect.settled"]
    assert settled == [("effect.settled", "alice", "send"), ("effect.settled", "bob", "archive")]


# --------------------------------------------------------------------------
# events


def test_events_are_append_only_and_ordered(store):
    make_run(store, "r1")
    make_run(store, "r2")
    seqs = []
    for i in range(10):
        seqs.append(store.append_event("r1" if i % 2 == 0 else "r2", "node.state", node_id=f"n{i}", data_json=b"{}"))
    assert seqs == sorted(seqs) and len(set(seqs)) == 10
    r1 = store.events("r1")
    assert [e.node_id for e in r1] == ["n0", "n2", "n4", "n6", "n8"]
    assert [e.seq for e in r1] == sorted(e.seq for e in r1)
    assert [e.node_id for e in store.events("r1", after=r1[1].seq)] == ["n4", "n6", "n8"]
    assert [e.node_id for e in store.events("r1", limit=2)] == ["n0", "n2"]
    assert not any(hasattr(store, name) for name in ("update_event", "delete_event", "delete_events"))
    with pytest.raises(UnknownRunError):
        store.events("ghost")


# --------------------------------------------------------------------------
# many processes at once

CHILD = textwrap.dedent(
    """
    import json, sys
    from vodou_engine.errors import VodouError
    from vodou_engine.store import open_store

    location, op, who = sys.argv[1:4]
    store = open_store(location) if op != "open" else None
    print("ready", flush=True)
    sys.stdin.readline()
    try:
        if op == "open":
            store = open_store(location)
            result = store.schema_version()
        elif op == "decide":
            result = store.decide("ap1", "approved", by=who).decided_by
        elif op == "begin":
            result = store.begin_effect(
                "r1", "send", approval_id="ap1", fingerprint="fp", idempotency_key="r1/send", payload_json="{}"
            )
    except VodouError as exc:
        result = type(exc).__name__ + ": " + str(exc)
    if store is not None:
        store.close()
    print(json.dumps(result), flush=True)
    """
)


def race(location: str, op: str, n: int = 20) -> list:
    """n real processes, released together once all are ready."""
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", CHILD, location, op, f"person{i}"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(n)
    ]
    try:
        for p in procs:
            line = p.stdout.readline()
            assert line.strip() == "ready", p.stderr.read()
        for p in procs:
            p.stdin.write("go\n")
            p.stdin.flush()
        results = []
        for p in procs:
            out, err = p.communicate(timeout=120)
            assert p.returncode == 0, err
            results.append(json.loads(out.strip().splitlines()[-1]))
        return results
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()


def test_twenty_processes_deciding_one_approval_exactly_one_wins(backend):
    s = backend.open()
    make_run(s)
    s.ask(question("ap1", approvers=[f"person{i}" for i in range(20)]))
    s.close()
    results = race(backend.location, "decide")
    winners = [r for r in results if not r.startswith("AlreadyDecidedError")]
    assert len(winners) == 1, results
    assert all("already approved by " + winners[0] in r for r in results if r not in winners)
    s = backend.open()
    assert s.get_approval("ap1").decided_by == winners[0]
    kinds = [e.kind for e in s.events("r1") if e.kind != "approval.asked"]
    assert sorted(kinds) == ["approval.decided"] + ["approval.refused"] * 19
    s.close()


def test_twenty_processes_beginning_one_effect_exactly_one_proceeds(backend):
    s = backend.open()
    make_run(s)
    approved(s)
    s.close()
    results = race(backend.location, "begin")
    assert sorted(results, key=str) == [False] * 19 + [True], results
    s = backend.open()
    assert [e.state for e in s.effects("r1")] == ["executing"]
    s.close()


def test_twenty_processes_creating_one_store_at_once(backend):
    results = race(backend.location, "open")
    assert results == [latest_version()] * 20, results
    assert backend.sql("SELECT COUNT(*) FROM schema_version")[0][0] == latest_version()


def test_committed_writes_survive_the_process_being_killed(backend):
    script = textwrap.dedent(
        """
        import os, signal, sys
        from vodou_engine.store import NodeRecord, open_store
        store = open_store(sys.argv[1])
        store.create_run("r1", recipe_name="n", recipe_path=None, source_sha256="s", plan_json="{}",
                         plan_fingerprint="f", inputs_json="{}", started_by="alice")
        store.save_nodes("r1", [NodeRecord(f"n{i}", "succeeded") for i in range(100)])
        store.set_run_state("r1", "parked", expected="running")
        os.kill(os.getpid(), signal.SIGKILL)
        """
    )
    proc = subprocess.run([sys.executable, "-c", script, backend.location], capture_output=True, text=True)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    s = backend.open()
    assert s.get_run("r1").state == "parked"
    assert len(s.get_nodes("r1")) == 100
    s.close()


# --------------------------------------------------------------------------
# files that are not (healthy) stores: refused, byte-for-byte untouched


def refused_untouched(path: Path, match: str, **kwargs) -> StoreError:
    before = sha256(path)
    with pytest.raises(StoreError, match=match) as info:
        SqliteRunStore(path, **kwargs)
    assert str(path) in str(info.value)
    assert info.value.hint  # says what to do
    assert info.value.exit_code == EXIT_STORE
    assert sha256(path) == before
    return info.value


def filled_store(path: Path, runs: int = 40) -> None:
    s = SqliteRunStore(path)
    for i in range(runs):
        make_run(s, f"r{i:03d}", now=T0 + i)
        s.save_nodes(f"r{i:03d}", [NodeRecord(f"n{j}", "succeeded", '{"x":"' + "y" * 200 + '"}') for j in range(20)])
        s.append_event(f"r{i:03d}", "node.state", data_json='{"z":"' + "w" * 300 + '"}')
    s.close()
    assert not Path(str(path) + "-wal").exists()


def read_everything(path: Path, **kwargs) -> None:
    s = SqliteRunStore(path, **kwargs)
    try:
        for run in s.list_runs(limit=10_000):
            s.get_nodes(run.id)
            s.events(run.id)
            s.approvals(run.id)
            s.effects(run.id)
    finally:
        s.close()


def test_random_bytes_are_refused(tmp_path):
    path = tmp_path / "runs.db"
    path.write_bytes(os.urandom(8192))
    refused_untouched(path, "not a SQLite database")


def test_text_file_is_refused(tmp_path):
    path = tmp_path / "notes.txt"
    path.write_text("shopping list\n" * 20)
    refused_untouched(path, "not a SQLite database")


def test_foreign_sqlite_database_is_refused(tmp_path):
    path = tmp_path / "other.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE contacts (name TEXT, email TEXT)")
    conn.execute("INSERT INTO contacts VALUES ('a', 'a@example.org')")
    conn.commit()
    conn.close()
    error = refused_untouched(path, "not a vodou run store")
    assert "contacts" in str(error)


def test_sqlite_database_without_tables_becomes_a_store(tmp_path):
    path = tmp_path / "runs.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE scratch (x)")
    conn.execute("DROP TABLE scratch")
    conn.commit()
    conn.close()
    assert path.stat().st_size > 0
    s = SqliteRunStore(path)
    assert s.schema_version() == latest_version()
    s.close()


def test_empty_file_becomes_a_store(tmp_path):
    path = tmp_path / "runs.db"
    path.touch()
    s = SqliteRunStore(path)
    assert s.schema_version() == latest_version()
    s.close()


def test_directory_is_refused(tmp_path):
    with pytest.raises(StoreError, match="not a file"):
        SqliteRunStore(tmp_path)


def test_truncated_store_is_refused(tmp_path):
    path = tmp_path / "runs.db"
    filled_store(path)
    data = path.read_bytes()
    page = int.from_bytes(data[16:18], "big")
    path.write_bytes(data[: (len(data) // page // 2) * page])  # whole pages, half of them
    refused_untouched(path, "truncated")
    path.write_bytes(data[: len(data) // 2 + 100])  # cut mid-page
    refused_untouched(path, "damaged")


def test_store_with_damaged_header_is_refused(tmp_path):
    path = tmp_path / "runs.db"
    filled_store(path)
    data = bytearray(path.read_bytes())
    data[16:18] = (1000).to_bytes(2, "big")  # not a power of two
    path.write_bytes(bytes(data))
    refused_untouched(path, "damaged")


def test_store_with_damaged_schema_page_is_refused(tmp_path):
    path = tmp_path / "runs.db"
    filled_store(path)
    data = bytearray(path.read_bytes())
    data[100:4096] = os.urandom(4096 - 100)  # sqlite_master lives on page 1
    path.write_bytes(bytes(data))
    refused_untouched(path, "damaged")


def test_store_with_damaged_data_pages_is_refused(tmp_path):
    path = tmp_path / "runs.db"
    filled_store(path)
    data = bytearray(path.read_bytes())
    page = int.from_bytes(data[16:18], "big")
    pages = len(data) // page
    for n in range(pages // 2, pages):  # garble the second half of the file, whole pages
        data[n * page : (n + 1) * page] = os.urandom(page)
    path.write_bytes(bytes(data))
    before = sha256(path)
    refused_untouched(path, "damaged", verify=True)
    # Without verify the damage surfaces, as StoreError, on the first page read that reaches it.
    with pytest.raises(StoreError, match="damaged"):
        read_everything(path)
    assert sha256(path) == before


def test_healthy_store_passes_verification(tmp_path):
    path = tmp_path / "runs.db"
    filled_store(path)
    read_everything(path, verify=True)


# --------------------------------------------------------------------------
# choosing a store


def test_default_store_path(monkeypatch, tmp_path):
    monkeypatch.setenv("VODOU_STORE", "/srv/vodou/runs.db")
    assert default_store_path() == "/srv/vodou/runs.db"
    monkeypatch.setenv("VODOU_STORE", "postgresql://db.example/vodou")
    assert default_store_path() == "postgresql://db.example/vodou"
    monkeypatch.delenv("VODOU_STORE")
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    assert default_store_path() == str(tmp_path / "data" / "vodou" / "runs.db")
    monkeypatch.setenv("XDG_DATA_HOME", "relative/ignored")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_store_path() == str(tmp_path / "home" / ".local" / "share" / "vodou" / "runs.db")


def test_open_store_uses_the_default_and_creates_directories(monkeypatch, tmp_path):
    monkeypatch.setenv("VODOU_STORE", str(tmp_path / "a" / "b" / "runs.db"))
    s = open_store()
    assert isinstance(s, SqliteRunStore) and isinstance(s, RunStore)
    assert s.location == str(tmp_path / "a" / "b" / "runs.db")
    s.close()


@pytest.mark.postgres
def test_a_postgres_url_naming_no_database_is_a_store_error_that_creates_nothing():
    from urllib.parse import urlsplit

    from pg_helpers import PG

    url = urlsplit(PG)._replace(path="/vodou_no_such_db").geturl()  # the test server, another database
    with pytest.raises(StoreError, match=f"no database for the store at {url}"):
        open_store(url)


@pytest.mark.postgres
def test_a_postgres_url_naming_no_schema_is_a_store_error_that_creates_nothing():
    from pg_helpers import PG, pg_or_fail

    url = f"{PG}{'&' if '?' in PG else '?'}options=-csearch_path%3Dvodou_no_such_schema"
    for create in (True, False):
        with pytest.raises(
            StoreError, match=r"no schema for the store at .*vodou_no_such_schema.*nothing was created"
        ) as info:
            open_store(url, create=create)
        assert info.value.exit_code == EXIT_STORE and "CREATE SCHEMA" in info.value.hint
    with pg_or_fail() as conn:
        assert conn.execute("SELECT to_regnamespace('vodou_no_such_schema')").fetchone()[0] is None


def test_without_postgresql_the_postgresql_tests_fail_saying_so(monkeypatch):
    import pg_helpers

    monkeypatch.setattr(pg_helpers, "PG", "postgresql://postgres@127.0.0.1:1/test")
    with (
        pytest.raises(
            pytest.fail.Exception, match=r"not reachable at postgresql://postgres@127.0.0.1:1/test(.|\n)*VODOU_TEST_PG="
        ) as info,
        pg_helpers.fresh_schema(),
    ):
        raise AssertionError("no schema can be made without the server")
    assert "VODOU_TEST_STORE=sqlite" in str(info.value)  # and how to run without it


# a run's stored plan is inflated within a bound


def zlib_bomb(size: int) -> bytes:
    """Whole, valid zlib data that inflates to ``size`` zero bytes (a multiple of 1 MiB),
    made without holding them: one full-flushed block of a MiB of zeros repeated (each
    block starts afresh, so each is the same bytes), the final block, the checksum."""
    packer = zlib.compressobj(9)
    head = packer.compress(bytes(1 << 20)) + packer.flush(zlib.Z_FULL_FLUSH)
    block = packer.compress(bytes(1 << 20)) + packer.flush(zlib.Z_FULL_FLUSH)
    assert head[2:] == block
    adler = (size % 65521) << 16 | 1  # zeros leave adler32's low sum at 1
    return head[:2] + block * (size >> 20) + b"\x03\x00" + adler.to_bytes(4, "big")


def test_a_stored_plan_that_inflates_past_the_bound_is_refused_as_corrupt(backend, store, monkeypatch):
    monkeypatch.setattr(store_runs, "MAX_PLAN_BYTES", 1 << 20)  # the bound made small: the same code, less memory
    make_run(store)
    make_run(store, "r2", now=T0 + 1)
    bomb = zlib_bomb(8 << 20)
    assert len(zlib.decompress(bomb)) == 8 << 20  # real zlib data, 1,000 times smaller than what it inflates to
    backend.sql("UPDATE run_plans SET plan_zlib = ? WHERE run_id = ?", (bomb, "r1"))
    with pytest.raises(StoreError, match=r"the plan stored for run 'r1' in .* is corrupt: it expands past 1 MiB") as e:
        store.get_run("r1")
    assert e.value.exit_code == EXIT_STORE
    assert "restore it from a backup" in str(e.value)
    assert store.get_run("r1", plan=False).id == "r1"  # the run's own row still reads
    assert store.get_run("r2").plan_json == '{"nodes":[]}'  # and the other runs' plans
    with pytest.raises(StoreError, match="'r1'"):
        store.list_runs()
    assert [r.id for r in store.list_runs(plan=False)] == ["r2", "r1"]  # a list of runs reads no plan
    damaged = {
        "cut short": zlib.compress(b'{"nodes":[]}')[:-3],
        "has bytes after its end": zlib.compress(b'{"nodes":[]}') + b"x",
        "damaged": b"not zlib data",
        "not UTF-8": zlib.compress(b'{"nodes":"\xff"}'),
    }
    for why, packed in damaged.items():
        backend.sql("UPDATE run_plans SET plan_zlib = ? WHERE run_id = ?", (packed, "r1"))
        with pytest.raises(StoreError, match=why):
            store.get_run("r1")
    # A plan past the bound is never stored, so every plan the engine stored reads back.
    with pytest.raises(PlanError, match=r"is 1,048,577 bytes, more than a run can store \(1 MiB\); nothing was stored"):
        store.create_run(
            "r3", recipe_name="x", recipe_path=None, source_sha256="ab" * 32, plan_json=b" " * ((1 << 20) + 1),
            plan_fingerprint="fp", inputs_json="{}", started_by="bo", now=T0,
        )  # fmt: skip
    assert not store.has_run("r3")


def test_a_zlib_bomb_in_a_runs_plan_is_a_clear_error_at_the_bound_not_the_memory_it_asks_for(cli):
    """At the real bound: a row of 4 MB that would inflate to 4 GiB takes at most the bound's
    memory (256 MiB) before `recipe show` says the store is corrupt (exit 6), no traceback."""
    with cli.open_store() as store:
        make_run(store)
    cli.sql("UPDATE run_plans SET plan_zlib = ? WHERE run_id = ?", (zlib_bomb(4 << 30), "r1"))
    tracemalloc.start()
    try:
        res = cli("show", "r1", expect=EXIT_STORE)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert "the plan stored for run 'r1'" in res.err and "is corrupt: it expands past 256 MiB" in res.err
    assert "hint: the store was damaged or edited outside the engine" in res.err
    assert "Traceback" not in res.err
    assert peak < MAX_PLAN_BYTES + (64 << 20)
    # `recipe runs` shows no plan, reads none, and still lists the run
    assert [r["run"] for r in json.loads(cli("runs", "--json", expect=0).out)] == ["r1"]
