"""SQL and rules shared by every run store.

The statements here are written once, with ``?`` placeholders and SQL that
SQLite (>= 3.24) and PostgreSQL both accept; a :class:`Dialect` supplies the
few things that differ (placeholder style, how a write transaction starts,
row locks, identity columns, how driver errors read). A concrete store only
opens the connection and picks its dialect, so both stores obey the same
compare-and-set rules and run the same test suite.
"""

from __future__ import annotations

import difflib
import importlib.resources
import re
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from functools import cache
from typing import Any

import msgspec

from ..errors import (
    AlreadyDecidedError,
    ExpiredError,
    LostRunError,
    NotAllowedError,
    RefusedError,
    StaleError,
    StoreError,
    UnknownRunError,
    VodouError,
)
from ..states import ApprovalState, EffectState, RunState
from .records import (
    APPROVAL_STATES,
    DECISION_STATES,
    EFFECT_STATES,
    RESUMABLE_RUN_STATES,
    RUN_STATES,
    SETTLEABLE_EFFECT_STATES,
    TERMINAL_RUN_STATES,
    AgentRecord,
    ApprovalRecord,
    ApproverRecord,
    AuditRecord,
    EffectRecord,
    EventRecord,
    FiringRecord,
    InboxRow,
    NodeRecord,
    RecipeRecord,
    RunRecord,
    ScheduleRecord,
    WebLinkRecord,
    WebSessionRecord,
)

# Tables every store of schema version >= 1 has; used to tell a damaged store
# from a healthy one before touching it.
CORE_TABLES = frozenset({"schema_version", "runs", "nodes", "approvals", "effects", "events"})
# Tables added by later migrations: a store of that version must have them too.
TABLES_SINCE = {2: frozenset({"approvers", "audit"}), 3: frozenset({"recipes", "schedules", "firings"}), 4: frozenset({"web_links", "web_sessions", "web_keys"}), 5: frozenset({"agents"})}

RUNS_HINT = "list the runs in this store to find the one you mean"


# --------------------------------------------------------------------------
# migrations


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    sql: str


@cache
def migrations() -> tuple[Migration, ...]:
    """Numbered files are the only source of schema; gaps would skip a step."""
    root = importlib.resources.files("vodou_engine.store") / "migrations"
    found = []
    for entry in root.iterdir():
        m = re.fullmatch(r"(\d{4})_(\w+)\.sql", entry.name)
        if m:
            found.append(Migration(int(m[1]), entry.name, entry.read_text(encoding="utf-8")))
    found.sort(key=lambda m: m.version)
    if [m.version for m in found] != list(range(1, len(found) + 1)):
        raise RuntimeError(f"store migrations are not numbered 1..n: {[m.name for m in found]}")
    return tuple(found)


def latest_version() -> int:
    return migrations()[-1].version


def split_statements(script: str) -> list[str]:
    """Split a migration on ``;`` outside quotes and ``--`` comments.

    Statements run one by one so the whole migration stays inside the
    caller's transaction (sqlite3's ``executescript`` would commit first).
    """
    out: list[str] = []
    buf: list[str] = []
    i, n, quoted = 0, len(script), False
    while i < n:
        c = script[i]
        if quoted:
            buf.append(c)
            quoted = c != "'"
        elif c == "-" and script.startswith("--", i):
            end = script.find("\n", i)
            i = n if end < 0 else end
            continue
        elif c == ";":
            stmt = "".join(buf).strip()
            if stmt:
                out.append(stmt)
            buf = []
        else:
            buf.append(c)
            quoted = c == "'"
        i += 1
    stmt = "".join(buf).strip()
    if stmt:
        out.append(stmt)
    return out


# --------------------------------------------------------------------------
# dialect


class Dialect:
    """What differs between database engines; the rest lives in SqlRunStore."""

    name = "sql"
    placeholder = "?"
    begin_write = "BEGIN"
    # Appended to a SELECT that precedes an UPDATE of the same row, so a
    # row-locking engine serialises the read with the write.
    for_update = ""
    tokens: dict[str, str] = {}
    tables_sql = ""
    Error: type[Exception] = Exception
    IntegrityError: type[Exception] = Exception

    def __init__(self) -> None:
        self._sql_cache: dict[str, str] = {}

    def q(self, sql: str) -> str:
        try:
            return self._sql_cache[sql]
        except KeyError:
            out = sql if self.placeholder == "?" else sql.replace("?", self.placeholder)
            self._sql_cache[sql] = out
            return out

    def ddl(self, sql: str) -> str:
        def fill(m: re.Match[str]) -> str:
            if m[1] not in self.tokens:
                raise RuntimeError(f"migration uses {{{{{m[1]}}}}}, which the {self.name} dialect does not define")
            return self.tokens[m[1]]

        return re.sub(r"\{\{(\w+)\}\}", fill, sql)

    def integrity_kind(self, exc: Exception) -> str:
        """'foreign_key', 'unique' or 'other'."""
        raise NotImplementedError

    def store_error(self, exc: Exception, location: str) -> VodouError | None:
        """The person-facing error for a driver error, or None for a bug."""
        raise NotImplementedError

    def insert_returning(self, cur: Any, sql: str, params: tuple, column: str) -> int:
        raise NotImplementedError

    def compact(self, conn: Any) -> None:
        """Return freed space to the file system, outside any transaction."""

    def lock(self, cur: Any, key: str) -> None:
        """Inside a write: serialise with every other writer holding ``key`` until commit.
        SQLite's writes are serialised already (BEGIN IMMEDIATE): nothing to do there."""

    def migration_lock(self, cur: Any) -> None:
        """Inside the migrating transaction: one process migrates at a time."""


# --------------------------------------------------------------------------
# small helpers


def _now(now: float | None) -> float:
    return time.time() if now is None else now


def _text(value: Any) -> Any:
    """JSON may arrive as bytes from msgspec; TEXT columns want str."""
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).decode("utf-8")
    return value


def _states(expected: str | Iterable[str], allowed: frozenset[str], what: str) -> tuple[str, ...]:
    states = (expected,) if isinstance(expected, str) else tuple(expected)
    if not states:
        raise ValueError(f"expected {what} must name at least one state")
    _check_states(states, allowed, what)
    return states


def _check_states(states: Iterable[str], allowed: frozenset[str], what: str) -> None:
    for s in states:
        if s not in allowed:
            raise ValueError(f"unknown {what} {s!r}; known: {', '.join(sorted(allowed))}")


def _in(n: int) -> str:
    return "(" + ", ".join("?" * n) + ")"


def iso(ts: float | None) -> str:
    if ts is None:
        return "an unknown time"
    return datetime.fromtimestamp(ts, timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")


def _json(data: dict[str, Any]) -> str:
    return msgspec.json.encode(data).decode("utf-8")


def _cols(record: type[msgspec.Struct], prefix: str = "") -> str:
    return ", ".join(prefix + f for f in record.__struct_fields__)


_RUN_COLS = _cols(RunRecord)
_NODE_COLS = _cols(NodeRecord)
_APPROVAL_COLS = _cols(ApprovalRecord)
_EFFECT_COLS = _cols(EffectRecord)
_EVENT_COLS = _cols(EventRecord)
_APPROVER_COLS = _cols(ApproverRecord)
_AUDIT_COLS = _cols(AuditRecord)
_RECIPE_COLS = _cols(RecipeRecord)
_SCHEDULE_COLS = _cols(ScheduleRecord)
_FIRING_COLS = _cols(FiringRecord)


def _values(record: type[msgspec.Struct]) -> str:
    return _in(len(record.__struct_fields__))


# --------------------------------------------------------------------------
# statements

INSERT_RUN = f"INSERT INTO runs ({_RUN_COLS}) VALUES {_values(RunRecord)}"
SELECT_RUN = f"SELECT {_RUN_COLS} FROM runs WHERE id = ?"
RUN_EXISTS = "SELECT 1 FROM runs WHERE id = ?"
LIST_RUNS = f"SELECT {_RUN_COLS} FROM runs"
LIST_RUNS_ORDER = " ORDER BY created_at DESC, id DESC LIMIT ?"
# Runs that may be removed: ended (in one of the states asked for) before a time, and
# with no effect whose fate is open (unknown or executing) - that needs a person first.
PRUNABLE = (
    "SELECT id FROM runs r WHERE r.ended_at IS NOT NULL AND r.ended_at < ? AND r.state IN {states} "
    "AND NOT EXISTS (SELECT 1 FROM effects e WHERE e.run_id = r.id AND e.state IN ('unknown', 'executing'))"
)
PRUNE_TABLES = ("events", "effects", "approvals", "nodes", "runs")
RECENT_RUN_IDS = "SELECT id FROM runs ORDER BY created_at DESC LIMIT 2000"
RUN_IDS_WITH_PREFIX = "SELECT id FROM runs WHERE substr(id, 1, ?) = ? ORDER BY created_at DESC LIMIT 5"
SET_RUN_STATE = (
    "UPDATE runs SET state = ?, updated_at = ?, ended_at = ?, error = ?, "
    "owner = CASE WHEN ? = 'running' THEN owner ELSE NULL END, "
    "lease_expires_at = CASE WHEN ? = 'running' THEN lease_expires_at ELSE NULL END WHERE id = ?"
)
# Taking a run: resumable, or running under an owner that is gone (its lease ran
# out, or the caller saw its process dead and names it).
TAKE_RUN = (
    "UPDATE runs SET state = 'running', owner = ?, lease_expires_at = ?, updated_at = ? WHERE id = ? AND ("
    "state IN ('parked', 'interrupted') OR (state = 'running' AND ("
    "owner IS NULL OR lease_expires_at IS NULL OR lease_expires_at < ? OR owner = ?)))"
)
RENEW_LEASE = "UPDATE runs SET lease_expires_at = ? WHERE id = ? AND state = 'running' AND owner = ?"
RUN_OWNER = "SELECT state, owner FROM runs WHERE id = ?"
WITHDRAW_RUN = (
    "UPDATE approvals SET state = 'withdrawn', decided_at = ?, reason = ? WHERE run_id = ? AND state = 'pending'"
)
WITHDRAW_NODE = (
    "UPDATE approvals SET state = 'withdrawn', decided_at = ?, reason = ? "
    "WHERE run_id = ? AND node_id = ? AND state = 'pending'"
)

UPSERT_NODE = (
    f"INSERT INTO nodes (run_id, {_NODE_COLS}) VALUES {_in(len(NodeRecord.__struct_fields__) + 1)} "
    "ON CONFLICT (run_id, node_id) DO UPDATE SET state = excluded.state, "
    "output_json = excluded.output_json, error = excluded.error, started_at = excluded.started_at, "
    "ended_at = excluded.ended_at, attempts = excluded.attempts, ready_at = excluded.ready_at"
)
SELECT_NODES = f"SELECT {_NODE_COLS} FROM nodes WHERE run_id = ? ORDER BY node_id"

INSERT_APPROVAL = f"INSERT INTO approvals ({_APPROVAL_COLS}) VALUES {_values(ApprovalRecord)}"
SELECT_APPROVAL = f"SELECT {_APPROVAL_COLS} FROM approvals WHERE id = ?"
SELECT_APPROVALS = f"SELECT {_APPROVAL_COLS} FROM approvals WHERE run_id = ? ORDER BY asked_at, id"
PENDING_ALL = f"SELECT {_APPROVAL_COLS} FROM approvals WHERE state = 'pending' ORDER BY asked_at, id"
PENDING_RUN = f"SELECT {_APPROVAL_COLS} FROM approvals WHERE state = 'pending' AND run_id = ? ORDER BY asked_at, id"
PENDING_FOR_STEP = "SELECT id FROM approvals WHERE run_id = ? AND step = ? AND state = 'pending'"
SUPERSEDE = (
    "UPDATE approvals SET state = 'superseded', superseded_by = ?, decided_at = ? "
    "WHERE run_id = ? AND step = ? AND state = 'pending'"
)
# An approval already given but not yet used (a check found the world changed)
# keeps who decided and when; it only becomes unusable.
SUPERSEDE_APPROVED = (
    "UPDATE approvals SET state = 'superseded', superseded_by = ? "
    "WHERE run_id = ? AND step = ? AND state = 'approved' "
    "AND NOT EXISTS (SELECT 1 FROM effects e WHERE e.run_id = approvals.run_id AND e.step = approvals.step)"
)
DECIDE = "UPDATE approvals SET state = ?, decided_by = ?, decided_at = ?, reason = ? WHERE id = ? AND state IN "

INSERT_EFFECT = (
    "INSERT INTO effects (run_id, step, approval_id, fingerprint, idempotency_key, state, payload_json, "
    "started_at) VALUES (?, ?, ?, ?, ?, 'executing', ?, ?) ON CONFLICT DO NOTHING"
)
SELECT_EFFECT = f"SELECT {_EFFECT_COLS} FROM effects WHERE run_id = ? AND step = ?"
SELECT_EFFECTS = f"SELECT {_EFFECT_COLS} FROM effects WHERE run_id = ? ORDER BY started_at, step"
FINISH_EFFECT = (
    "UPDATE effects SET state = ?, result_json = ?, error = ?, ended_at = ? WHERE run_id = ? AND step = ? AND state IN "
)
SETTLE_EFFECT = (
    "UPDATE effects SET state = ?, settled_by = ?, result_json = COALESCE(?, result_json), error = ?, "
    "ended_at = COALESCE(ended_at, ?) WHERE run_id = ? AND step = ? AND state IN ('unknown', 'failed') "
    "AND settled_by IS NULL"
)
MARK_UNKNOWN = (
    "UPDATE effects SET state = 'unknown', error = COALESCE(error, ?) WHERE run_id = ? AND state = 'executing'"
)
INTERRUPTED = "the process running this effect ended before it reported back; it may or may not have happened"

INSERT_EVENT = "INSERT INTO events (run_id, ts, kind, node_id, actor, data_json) VALUES (?, ?, ?, ?, ?, ?)"
SELECT_EVENTS = f"SELECT {_EVENT_COLS} FROM events WHERE run_id = ? AND seq > ? ORDER BY seq"
SELECT_EVENTS_LIMIT = SELECT_EVENTS + " LIMIT ?"

INSERT_APPROVER = f"INSERT INTO approvers ({_APPROVER_COLS}) VALUES {_values(ApproverRecord)}"
UPDATE_APPROVER = "UPDATE approvers SET token_sha256 = ?, created_at = ?, created_by = ? WHERE name = ?"
SELECT_APPROVER = f"SELECT {_APPROVER_COLS} FROM approvers WHERE name = ?"
SELECT_APPROVERS = f"SELECT {_APPROVER_COLS} FROM approvers ORDER BY name"
DELETE_APPROVER = "DELETE FROM approvers WHERE name = ?"
INSERT_AUDIT = "INSERT INTO audit (ts, kind, actor, run_id, data_json) VALUES (?, ?, ?, ?, ?)"

LAST_RECIPE_VERSION = "SELECT MAX(version) FROM recipes WHERE name = ?"
INSERT_RECIPE = f"INSERT INTO recipes ({_RECIPE_COLS}) VALUES {_values(RecipeRecord)}"
SELECT_RECIPE = f"SELECT {_RECIPE_COLS} FROM recipes WHERE name = ? AND version = ?"
SELECT_RECIPE_LATEST = f"SELECT {_RECIPE_COLS} FROM recipes WHERE name = ? ORDER BY version DESC LIMIT 1"
SELECT_RECIPE_VERSIONS = f"SELECT {_RECIPE_COLS} FROM recipes WHERE name = ? ORDER BY version"
SELECT_RECIPES_LATEST = (
    f"SELECT {_cols(RecipeRecord, 'r.')} FROM recipes r WHERE r.version = "
    "(SELECT MAX(version) FROM recipes WHERE name = r.name) ORDER BY r.name"
)
INSERT_SCHEDULE = f"INSERT INTO schedules ({_SCHEDULE_COLS}) VALUES {_values(ScheduleRecord)}"
SELECT_SCHEDULE = f"SELECT {_SCHEDULE_COLS} FROM schedules WHERE name = ?"
SELECT_SCHEDULES = f"SELECT {_SCHEDULE_COLS} FROM schedules ORDER BY name"
SELECT_DUE = f"SELECT {_SCHEDULE_COLS} FROM schedules WHERE state = 'active' AND next_due IS NOT NULL AND next_due <= ? ORDER BY next_due, name"
SET_SCHEDULE_STATE = "UPDATE schedules SET state = ?, next_due = ?, updated_at = ? WHERE name = ? AND state IN "
DELETE_SCHEDULE = "DELETE FROM schedules WHERE name = ?"
INSERT_FIRING = (
    f"INSERT INTO firings ({_FIRING_COLS}) VALUES {_values(FiringRecord)} ON CONFLICT (schedule, due_at) DO NOTHING"
)
MOVE_NEXT_DUE = "UPDATE schedules SET next_due = ?, updated_at = ? WHERE name = ? AND next_due = ? AND state = 'active'"
SELECT_FIRINGS = f"SELECT {_FIRING_COLS} FROM firings WHERE schedule = ? ORDER BY due_at DESC LIMIT ?"
SELECT_ORPHAN_FIRINGS = (
    f"SELECT {_cols(FiringRecord, 'f.')} FROM firings f WHERE f.outcome = 'fired' AND f.decided_at < ? "
    "AND NOT EXISTS (SELECT 1 FROM runs r WHERE r.id = f.run_id) ORDER BY f.decided_at"
)
FIRING_FAILED = "UPDATE firings SET outcome = 'failed', note = ? WHERE schedule = ? AND due_at = ? AND outcome = 'fired'"
SELECT_AUDIT = f"SELECT {_AUDIT_COLS} FROM audit WHERE seq > ? ORDER BY seq"

CREATE_SCHEMA_VERSION = (
    "CREATE TABLE IF NOT EXISTS schema_version ("
    "version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at DOUBLE PRECISION NOT NULL)"
)
SELECT_VERSION = "SELECT MAX(version) FROM schema_version"
INSERT_VERSION = "INSERT INTO schema_version (version, name, applied_at) VALUES (?, ?, ?)"


# --------------------------------------------------------------------------
# the store


class SqlRunStore:
    """A run store over one DB-API connection in autocommit mode.

    Transactions are explicit (``BEGIN`` ... ``COMMIT``) so a write takes the
    engine's write lock up front instead of upgrading a read lock, which is
    where concurrent SQLite writers deadlock. Not thread-safe: one thread at a
    time, though not necessarily the one that opened it.
    """

    def __init__(self, conn: Any, dialect: Dialect, location: str):
        self._conn = conn
        self._d = dialect
        self._cur = conn.cursor()
        self._depth = 0
        self.location = location

    # -- plumbing ---------------------------------------------------------

    def _q(self, sql: str) -> str:
        return self._d.q(sql)

    def _translate(self, exc: Exception) -> Exception:
        return self._d.store_error(exc, self.location) or exc

    @contextmanager
    def _write(self) -> Iterator[Any]:
        """One write transaction; nested uses join the outer one."""
        cur = self._cur
        if self._depth:
            self._depth += 1
            try:
                yield cur
            finally:
                self._depth -= 1
            return
        try:
            cur.execute(self._d.begin_write)
        except self._d.Error as exc:
            raise self._translate(exc) from exc
        self._depth = 1
        try:
            yield cur
        except BaseException as exc:
            self._depth = 0
            self._rollback()
            if isinstance(exc, self._d.Error):
                new = self._translate(exc)
                if new is not exc:
                    raise new from exc
            raise
        self._depth = 0
        try:
            cur.execute("COMMIT")
        except self._d.Error as exc:
            self._rollback()
            raise self._translate(exc) from exc

    def _rollback(self) -> None:
        try:
            self._cur.execute("ROLLBACK")
        except self._d.Error:
            pass  # the engine already rolled back (e.g. after a busy or I/O error)

    @contextmanager
    def _read(self) -> Iterator[Any]:
        try:
            yield self._cur
        except self._d.Error as exc:
            new = self._translate(exc)
            if new is not exc:
                raise new from exc
            raise

    def _one(self, sql: str, params: tuple) -> Any:
        with self._read() as cur:
            cur.execute(self._q(sql), params)
            return cur.fetchone()

    def _all(self, sql: str, params: tuple) -> list[Any]:
        with self._read() as cur:
            cur.execute(self._q(sql), params)
            return cur.fetchall()

    def _table_names(self) -> set[str]:
        return {row[0] for row in self._all(self._d.tables_sql, ())}

    def _insert_event(
        self, cur: Any, run_id: str, kind: str, node_id: str | None, actor: str | None, data_json: Any, ts: float
    ) -> int:
        params = (run_id, ts, kind, node_id, actor, _text(data_json))
        return self._d.insert_returning(cur, self._q(INSERT_EVENT), params, "seq")

    def _unknown_run(self, run_id: str) -> UnknownRunError:
        message = f"no run {run_id!r} in the store at {self.location}"
        try:
            close = [r[0] for r in self._all(RUN_IDS_WITH_PREFIX, (len(run_id), run_id))]
            if not close:
                recent = [r[0] for r in self._all(RECENT_RUN_IDS, ())]
                close = difflib.get_close_matches(run_id, recent, n=3, cutoff=0.6)
        except (self._d.Error, VodouError):
            close = []  # a failed transaction may refuse further reads; the error still stands
        if close:
            message += f"; did you mean {', '.join(close[:3])}?"
        return UnknownRunError(message, hint=RUNS_HINT)

    def _require_run(self, run_id: str) -> None:
        if self._one(RUN_EXISTS, (run_id,)) is None:
            raise self._unknown_run(run_id)

    def _integrity(self, exc: Exception, run_id: str, duplicate: str) -> Exception:
        kind = self._d.integrity_kind(exc)
        if kind == "foreign_key":
            return self._unknown_run(run_id)
        if kind == "unique":
            return RefusedError(f"{duplicate} already exists in the store at {self.location}; nothing was changed")
        return exc

    # -- schema -----------------------------------------------------------

    def schema_version(self) -> int:
        if "schema_version" not in self._table_names():
            return 0
        return self._one(SELECT_VERSION, ())[0] or 0

    def _prepare_schema(self) -> None:
        """Bring the schema up to date; a no-op (and no write) when it is."""
        latest = latest_version()
        if self.schema_version() == latest:
            return
        with self._write() as cur:
            self._d.migration_lock(cur)
            cur.execute(CREATE_SCHEMA_VERSION)
            cur.execute(SELECT_VERSION)
            current = cur.fetchone()[0] or 0
            if current > latest:
                raise newer_store_error(self.location, current, latest)
            for m in migrations()[current:]:
                for stmt in split_statements(self._d.ddl(m.sql)):
                    cur.execute(stmt)
                cur.execute(self._q(INSERT_VERSION), (m.version, m.name, time.time()))

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """Group several writes so they commit, or vanish, together."""
        with self._write():
            yield

    @property
    def kind(self) -> str:
        """The database behind the store: ``"sqlite"`` or ``"postgresql"``."""
        return self._d.name

    def connection(self) -> Any:
        """The store's own DB-API connection, for a write that must commit or vanish with
        the store's in one :meth:`transaction` (a job queued with the decision that asked
        for it: ``workers/app.py``). Nothing else should use it."""
        return self._conn

    def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()

    def __enter__(self) -> SqlRunStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.location!r})"

    # -- runs -------------------------------------------------------------

    def create_run(
        self,
        run_id: str,
        *,
        recipe_name: str,
        recipe_path: str | None,
        source_sha256: str,
        plan_json: Any,
        plan_fingerprint: str,
        inputs_json: Any,
        started_by: str,
        state: str = "running",
        now: float | None = None,
        owner: str | None = None,
        lease_s: float | None = None,
        servers_json: Any = "{}",
        saved_recipe: str | None = None,
        saved_version: int | None = None,
        schedule: str | None = None,
    ) -> None:
        """A new run; one created ``running`` under ``owner`` holds a lease of ``lease_s``."""
        _check_states((state,), RUN_STATES, "run state")
        now = _now(now)
        ended = now if state in TERMINAL_RUN_STATES else None
        lease = now + lease_s if owner is not None and lease_s is not None else None
        row = (run_id, recipe_name, recipe_path, source_sha256, _text(plan_json), plan_fingerprint,
               _text(inputs_json), started_by, state, now, now, ended, None, owner, lease,
               _text(servers_json), saved_recipe, saved_version, schedule)  # fmt: skip
        try:
            with self._write() as cur:
                cur.execute(self._q(INSERT_RUN), row)
        except self._d.IntegrityError as exc:
            raise self._integrity(exc, run_id, f"run {run_id!r}") from exc

    def get_run(self, run_id: str) -> RunRecord:
        row = self._one(SELECT_RUN, (run_id,))
        if row is None:
            raise self._unknown_run(run_id)
        return RunRecord(*row)

    def list_runs(
        self,
        limit: int = 50,
        *,
        state: str | Iterable[str] | None = None,
        recipe: str | None = None,
        since: float | None = None,
        started_by: str | None = None,
    ) -> list[RunRecord]:
        """Newest first; ``recipe`` matches the recipe's name, ``since`` the creation time."""
        where: list[str] = []
        params: list[Any] = []
        if state is not None:
            states = _states(state, RUN_STATES, "run state")
            where.append("state IN " + _in(len(states)))
            params.extend(states)
        if recipe is not None:
            where.append("recipe_name = ?")
            params.append(recipe)
        if since is not None:
            where.append("created_at >= ?")
            params.append(since)
        if started_by is not None:
            where.append("started_by = ?")
            params.append(started_by)
        sql = LIST_RUNS + (" WHERE " + " AND ".join(where) if where else "") + LIST_RUNS_ORDER
        return [RunRecord(*r) for r in self._all(sql, (*params, limit))]

    def set_run_state(
        self,
        run_id: str,
        new: str,
        *,
        expected: str | Iterable[str] | None,
        error: str | None = None,
        now: float | None = None,
        owner: str | None = None,
    ) -> bool:
        """Compare-and-set; False means another writer moved the run first.

        ``owner``: only while the run is still held by that owner. Leaving
        ``running`` clears the owner; reaching a final state withdraws every
        question still pending, so nobody can decide for a run that is over.
        """
        _check_states((new,), RUN_STATES, "run state")
        now = _now(now)
        params: tuple = (new, now, now if new in TERMINAL_RUN_STATES else None, error, new, new, run_id)
        sql = SET_RUN_STATE
        if expected is not None:
            states = _states(expected, RUN_STATES, "run state")
            sql += " AND state IN " + _in(len(states))
            params += states
        if owner is not None:
            sql += " AND owner = ?"
            params += (owner,)
        with self._write() as cur:
            cur.execute(self._q(sql), params)
            won = cur.rowcount == 1
            if not won:
                self._require_run(run_id)
            elif new in TERMINAL_RUN_STATES:
                cur.execute(self._q(WITHDRAW_RUN), (now, f"the run ended {new}", run_id))
        return won

    # -- owners -----------------------------------------------------------

    def take_run(self, run_id: str, owner: str, *, lease_s: float, dead_owner: str | None = None, now: float | None = None) -> bool:
        """Make ``owner`` the one driver of a run: True if it won.

        A run can be taken when it is parked or interrupted, or running under
        an owner that is gone: no owner, a lease that ran out, or the
        ``dead_owner`` the caller found dead (a process on this host that no
        longer exists). Two callers racing for it: one wins.
        """
        now = _now(now)
        with self._write() as cur:
            cur.execute(self._q(TAKE_RUN), (owner, now + lease_s, now, run_id, now, dead_owner))
            won = cur.rowcount == 1
            if not won:
                self._require_run(run_id)
        return won

    def renew_lease(self, run_id: str, owner: str, *, lease_s: float, now: float | None = None) -> bool:
        """Extend the owner's claim; False: the run was taken, cancelled or ended meanwhile."""
        with self._write() as cur:
            cur.execute(self._q(RENEW_LEASE), (_now(now) + lease_s, run_id, owner))
            return cur.rowcount == 1

    def _check_owner(self, cur: Any, run_id: str, owner: str | None) -> None:
        """Inside a write: refuse unless ``owner`` still drives ``run_id`` (None: no check)."""
        if owner is None:
            return
        cur.execute(self._q(RUN_OWNER + self._d.for_update), (run_id,))
        row = cur.fetchone()
        if row is None:
            raise self._unknown_run(run_id)
        state, holder = row
        if state != RunState.RUNNING or holder != owner:
            raise LostRunError(
                f"run {run_id} is no longer driven by this process (it is {state}"
                + (f", held by {holder}" if holder and holder != owner else "")
                + "); nothing more was written",
                run=run_id,
                state=state,
            )

    def withdraw(self, run_id: str, node_id: str, *, reason: str, owner: str | None = None, now: float | None = None) -> int:
        """The pending question of one gate can no longer be decided (its branch was dropped)."""
        now = _now(now)
        with self._write() as cur:
            self._check_owner(cur, run_id, owner)
            cur.execute(self._q(WITHDRAW_NODE), (now, reason, run_id, node_id))
            n = cur.rowcount
            if n:
                self._insert_event(cur, run_id, "approval.withdrawn", node_id, None, _json({"reason": reason}), now)
            return n

    # -- nodes ------------------------------------------------------------

    def save_nodes(self, run_id: str, records: Iterable[NodeRecord], *, owner: str | None = None) -> None:
        """Upsert many node states in one transaction (the runtime batches)."""
        rows = [(run_id, r.node_id, r.state, _text(r.output_json), r.error, r.started_at, r.ended_at, r.attempts,
                 r.ready_at) for r in records]  # fmt: skip
        if not rows:
            return
        try:
            with self._write() as cur:
                self._check_owner(cur, run_id, owner)
                cur.executemany(self._q(UPSERT_NODE), rows)
        except self._d.IntegrityError as exc:
            raise self._integrity(exc, run_id, "node") from exc

    def get_nodes(self, run_id: str) -> dict[str, NodeRecord]:
        rows = self._all(SELECT_NODES, (run_id,))
        if not rows:
            self._require_run(run_id)
        return {r[0]: NodeRecord(*r) for r in rows}

    # -- approvals --------------------------------------------------------

    def ask(self, approval: ApprovalRecord, *, owner: str | None = None) -> None:
        """Open a question; any older question for the same step, open or approved but unused, is superseded."""
        a = approval
        if a.state != "pending" or a.decided_by or a.decided_at is not None or a.superseded_by:
            raise ValueError("ask() takes a fresh approval: state 'pending' and no decision")
        row = tuple(_text(v) for v in msgspec.structs.astuple(a))
        try:
            with self._write() as cur:
                self._check_owner(cur, a.run_id, owner)
                cur.execute(self._q(PENDING_FOR_STEP + self._d.for_update), (a.run_id, a.step))
                older = [r[0] for r in cur.fetchall()]
                if older:
                    cur.execute(self._q(SUPERSEDE), (a.id, a.asked_at, a.run_id, a.step))
                cur.execute(self._q(SUPERSEDE_APPROVED), (a.id, a.run_id, a.step))
                if cur.rowcount:
                    older.append("approved-but-unused")
                cur.execute(self._q(INSERT_APPROVAL), row)
                data = {"approval_id": a.id, "step": a.step, "fingerprint": a.fingerprint, "superseded": older}
                self._insert_event(cur, a.run_id, "approval.asked", a.node_id, None, _json(data), a.asked_at)
        except self._d.IntegrityError as exc:
            raise self._integrity(exc, a.run_id, f"approval {a.id!r}") from exc

    def get_approval(self, approval_id: str) -> ApprovalRecord:
        row = self._one(SELECT_APPROVAL, (approval_id,))
        if row is None:
            raise self._unknown_approval(approval_id)
        return ApprovalRecord(*row)

    def approvals(self, run_id: str) -> list[ApprovalRecord]:
        rows = self._all(SELECT_APPROVALS, (run_id,))
        if not rows:
            self._require_run(run_id)
        return [ApprovalRecord(*r) for r in rows]

    def pending_approvals(self, run_id: str | None = None) -> list[ApprovalRecord]:
        rows = self._all(PENDING_ALL, ()) if run_id is None else self._all(PENDING_RUN, (run_id,))
        return [ApprovalRecord(*r) for r in rows]

    def _unknown_approval(self, approval_id: str) -> RefusedError:
        return RefusedError(
            f"no approval {approval_id!r} in the store at {self.location}; nothing was changed",
            hint="a run's approvals are listed with the run",
        )

    def decide(
        self,
        approval_id: str,
        new_state: str,
        *,
        expected: str | Iterable[str] = "pending",
        by: str,
        reason: str | None = None,
        now: float | None = None,
    ) -> ApprovalRecord:
        """Compare-and-set one answer; every attempt, won or refused, is logged.

        Approving or rejecting is refused when ``by`` is not among the named
        approvers or the question has expired; marking it ``expired`` is the
        clock's move and skips both checks.
        """
        _check_states((new_state,), DECISION_STATES, "decision")
        states = _states(expected, APPROVAL_STATES, "approval state")
        now = _now(now)
        with self._write() as cur:
            cur.execute(self._q(SELECT_APPROVAL + self._d.for_update), (approval_id,))
            row = cur.fetchone()
            if row is None:
                raise self._unknown_approval(approval_id)
            current = ApprovalRecord(*row)
            refusal = self._refusal(current, new_state, states, by, now)
            decided = current
            if refusal is None:
                cur.execute(self._q(DECIDE + _in(len(states))), (new_state, by, now, reason, approval_id, *states))
                if cur.rowcount == 1:
                    decided = msgspec.structs.replace(
                        current, state=new_state, decided_by=by, decided_at=now, reason=reason
                    )
                else:  # only reachable if the engine let another writer in between
                    refusal = AlreadyDecidedError(f"approval {approval_id} was decided by someone else just now")
            data = {
                "approval_id": approval_id,
                "wanted": new_state,
                "state": decided.state,
                "won": refusal is None,
                "refused": None if refusal is None else type(refusal).__name__,
                "reason": reason,
            }
            kind = "approval.decided" if refusal is None else "approval.refused"
            self._insert_event(cur, current.run_id, kind, current.node_id, by, _json(data), now)
        if refusal is not None:
            raise refusal
        return decided

    def _refusal(
        self, a: ApprovalRecord, new_state: str, expected: tuple[str, ...], by: str, now: float
    ) -> RefusedError | None:
        if a.state not in expected:
            return AlreadyDecidedError(describe_decision(a) + "; nothing was changed")
        if new_state == "expired":
            return None
        try:
            approvers = msgspec.json.decode(a.approvers_json, type=list[str])
        except msgspec.ValidationError as exc:
            raise StoreError(f"approval {a.id} in {self.location} has unreadable approvers: {exc}") from exc
        if approvers and by not in approvers:
            return NotAllowedError(
                f"{by} may not decide approval {a.id}; it may be decided by: {', '.join(approvers)}",
                hint="ask one of them, or run the decision under their name",
            )
        if a.expires_at is not None and now >= a.expires_at:
            return ExpiredError(
                f"approval {a.id} expired at {iso(a.expires_at)}; nothing was changed",
                hint="resume the run so it asks again",
            )
        return None

    # -- effects ----------------------------------------------------------

    def begin_effect(
        self,
        run_id: str,
        step: str,
        *,
        approval_id: str,
        fingerprint: str,
        idempotency_key: str,
        payload_json: Any,
        now: float | None = None,
        owner: str | None = None,
    ) -> bool:
        """Claim the one execution of an approved step.

        True: the caller alone may perform the effect now. False: an effect
        for this step (or this idempotency key) was already claimed, whoever
        holds it. Raises, claiming nothing, unless ``approval_id`` is an
        approved question about this very step with this very fingerprint,
        so the store itself never lets an unapproved payload through.
        """
        now = _now(now)
        with self._write() as cur:
            self._check_owner(cur, run_id, owner)
            cur.execute(self._q(SELECT_APPROVAL), (approval_id,))
            row = cur.fetchone()
            if row is None:
                raise self._unknown_approval(approval_id)
            self._check_approved(ApprovalRecord(*row), run_id, step, fingerprint)
            params = (run_id, step, approval_id, fingerprint, idempotency_key, _text(payload_json), now)
            cur.execute(self._q(INSERT_EFFECT), params)
            return cur.rowcount == 1

    def begin_unasked_effect(
        self,
        run_id: str,
        step: str,
        *,
        fingerprint: str,
        idempotency_key: str,
        payload_json: Any,
        now: float | None = None,
        owner: str | None = None,
    ) -> bool:
        """Claim the one execution of a step the plan marks ``without asking``.

        The same once-only claim as ``begin_effect`` (so a crash mid-call is
        found ``executing`` and becomes ``unknown``), with no approval to check:
        the plan's verification already allowed the opt-out.
        """
        params = (run_id, step, None, fingerprint, idempotency_key, _text(payload_json), _now(now))
        with self._write() as cur:
            self._check_owner(cur, run_id, owner)
            cur.execute(self._q(INSERT_EFFECT), params)
            return cur.rowcount == 1

    def _check_approved(self, a: ApprovalRecord, run_id: str, step: str, fingerprint: str) -> None:
        if (a.run_id, a.step) != (run_id, step):
            raise RefusedError(
                f"approval {a.id} guards step {a.step!r} of run {a.run_id}, not step {step!r} of run {run_id}; "
                "nothing was executed"
            )
        if a.state != "approved":
            raise RefusedError(f"{describe_decision(a)}, not approved; nothing was executed")
        if a.fingerprint != fingerprint:
            raise StaleError(
                f"the payload for step {step!r} (fingerprint {fingerprint}) is not the one approved in "
                f"{a.id} (fingerprint {a.fingerprint}); nothing was executed",
                hint="resume the run so it asks again with the current payload",
            )

    def finish_effect(
        self,
        run_id: str,
        step: str,
        state: str,
        *,
        result_json: Any = None,
        error: str | None = None,
        expected: str | Iterable[str] = "executing",
        now: float | None = None,
    ) -> bool:
        """Compare-and-set the outcome; False means it was no longer ``expected``."""
        _check_states((state,), EFFECT_STATES - {"executing"}, "effect outcome")
        states = _states(expected, EFFECT_STATES, "effect state")
        params = (state, _text(result_json), error, _now(now), run_id, step, *states)
        with self._write() as cur:
            cur.execute(self._q(FINISH_EFFECT + _in(len(states))), params)
            won = cur.rowcount == 1
            if not won and self._one(SELECT_EFFECT, (run_id, step)) is None:
                raise RefusedError(f"no effect for step {step!r} of run {run_id} in {self.location}")
        return won

    def settle_effect(
        self,
        run_id: str,
        step: str,
        executed: bool,
        by: str,
        *,
        result_json: Any = None,
        reason: str | None = None,
        now: float | None = None,
    ) -> EffectRecord:
        """A person's word on an effect nobody knows the fate of (reconcile): one left
        ``unknown``, or one the server reported failed (it may have acted anyway).
        Each effect is settled once."""
        now = _now(now)
        state = "executed" if executed else "failed"
        error = None if executed else (reason or f"did not happen, according to {by}")
        with self._write() as cur:
            cur.execute(self._q(SETTLE_EFFECT), (state, by, _text(result_json), error, now, run_id, step))
            if cur.rowcount != 1:
                raise self._not_unknown(run_id, step)
            data = {"step": step, "state": state, "reason": reason}
            self._insert_event(cur, run_id, "effect.settled", step, by, _json(data), now)
            cur.execute(self._q(SELECT_EFFECT), (run_id, step))
            return EffectRecord(*cur.fetchone())

    def _not_unknown(self, run_id: str, step: str) -> RefusedError:
        row = self._one(SELECT_EFFECT, (run_id, step))
        if row is None:
            return RefusedError(f"no effect for step {step!r} of run {run_id} in {self.location}")
        e = EffectRecord(*row)
        by = f", settled by {e.settled_by}" if e.settled_by else ""
        return RefusedError(
            f"the effect of step {step!r} in run {run_id} is {e.state}{by}; only an effect left unknown, "
            "or one the server reported failed, can be settled, once; nothing was changed"
        )

    def mark_unknown(self, run_id: str, *, now: float | None = None, reason: str | None = None) -> int:
        """After a crash, effects caught mid-flight may or may not have happened."""
        with self._write() as cur:
            cur.execute(self._q(MARK_UNKNOWN), (reason or INTERRUPTED, run_id))
            return cur.rowcount

    def get_effect(self, run_id: str, step: str) -> EffectRecord | None:
        row = self._one(SELECT_EFFECT, (run_id, step))
        return None if row is None else EffectRecord(*row)

    def effects(self, run_id: str) -> list[EffectRecord]:
        return [EffectRecord(*r) for r in self._all(SELECT_EFFECTS, (run_id,))]

    # -- events -----------------------------------------------------------

    def append_event(
        self,
        run_id: str,
        kind: str,
        *,
        node_id: str | None = None,
        actor: str | None = None,
        data_json: Any = "{}",
        now: float | None = None,
    ) -> int:
        """Returns the event's sequence number, increasing across the store."""
        try:
            with self._write() as cur:
                return self._insert_event(cur, run_id, kind, node_id, actor, data_json, _now(now))
        except self._d.IntegrityError as exc:
            raise self._integrity(exc, run_id, "event") from exc

    def events(self, run_id: str, *, after: int = 0, limit: int | None = None) -> list[EventRecord]:
        if limit is None:
            rows = self._all(SELECT_EVENTS, (run_id, after))
        else:
            rows = self._all(SELECT_EVENTS_LIMIT, (run_id, after, limit))
        if not rows and after == 0:
            self._require_run(run_id)
        return [EventRecord(*r) for r in rows]

    # -- housekeeping -------------------------------------------------------

    def prune(self, *, ended_before: float, states: Iterable[str], by: str, now: float | None = None) -> int:
        """Remove finished runs (and everything recorded about them) that ended before
        ``ended_before`` in one of ``states`` (final states only). A run with an effect
        whose fate is open is never removed. Returns how many runs went."""
        wanted = _states(states, TERMINAL_RUN_STATES, "finished run state")
        with self._write() as cur:
            cur.execute(self._q(PRUNABLE.format(states=_in(len(wanted)))), (ended_before, *wanted))
            ids = [r[0] for r in cur.fetchall()]
            for start in range(0, len(ids), 500):  # bound the statement's parameters
                chunk = ids[start : start + 500]
                for table in PRUNE_TABLES:
                    key = "id" if table == "runs" else "run_id"
                    cur.execute(self._q(f"DELETE FROM {table} WHERE {key} IN {_in(len(chunk))}"), chunk)
            cur.execute(self._q(INSERT_AUDIT), (_now(now), "runs.pruned", by, None, _json({"runs": len(ids), "ended_before": ended_before, "states": list(wanted)})))
        return len(ids)

    def compact(self) -> None:
        """Give the space of removed rows back to the file system (a dialect may do nothing)."""
        self._d.compact(self._conn)

    # -- saved recipes ------------------------------------------------------

    def save_recipe(self, name: str, *, source: str, plan_json: Any, plan_fingerprint: str, by: str, origin: str = "person", now: float | None = None) -> RecipeRecord:
        """Store a new version of ``name`` (1 for the first); older versions stay."""
        now = _now(now)
        with self._write() as cur:
            self._d.lock(cur, f"recipe:{name}")  # two saves of one name number their versions in turn
            cur.execute(self._q(LAST_RECIPE_VERSION), (name,))
            version = (cur.fetchone()[0] or 0) + 1
            rec = RecipeRecord(name, version, source, _text(plan_json), plan_fingerprint, now, by, origin)
            cur.execute(self._q(INSERT_RECIPE), msgspec.structs.astuple(rec))
            cur.execute(self._q(INSERT_AUDIT), (now, "recipe.saved", by, None, _json({"name": name, "version": version, "origin": origin})))
        return rec

    def get_recipe(self, name: str, version: int | None = None) -> RecipeRecord:
        row = self._one(SELECT_RECIPE_LATEST, (name,)) if version is None else self._one(SELECT_RECIPE, (name, version))
        if row is None:
            which = f"{name!r}" + ("" if version is None else f" version {version}")
            raise RefusedError(f"no saved recipe {which} in the store at {self.location}", hint="list the saved recipes to find it", recipe=name, version=version)
        return RecipeRecord(*row)

    def recipe_versions(self, name: str) -> list[RecipeRecord]:
        return [RecipeRecord(*r) for r in self._all(SELECT_RECIPE_VERSIONS, (name,))]

    def recipes_latest(self) -> list[RecipeRecord]:
        return [RecipeRecord(*r) for r in self._all(SELECT_RECIPES_LATEST, ())]

    # -- schedules ----------------------------------------------------------

    def add_schedule(self, schedule: ScheduleRecord) -> None:
        try:
            with self._write() as cur:
                cur.execute(self._q(INSERT_SCHEDULE), msgspec.structs.astuple(schedule))
                data = {"name": schedule.name, "recipe": schedule.recipe, "cron": schedule.cron, "tz": schedule.tz, "state": schedule.state, "origin": schedule.origin}
                cur.execute(self._q(INSERT_AUDIT), (schedule.created_at, "schedule.added", schedule.created_by, None, _json(data)))
        except self._d.IntegrityError as exc:
            raise RefusedError(f"a schedule named {schedule.name!r} already exists; nothing was changed", hint="choose another name, or remove the old schedule first", schedule=schedule.name) from exc

    def get_schedule(self, name: str) -> ScheduleRecord:
        row = self._one(SELECT_SCHEDULE, (name,))
        if row is None:
            raise RefusedError(f"no schedule {name!r} in the store at {self.location}", hint="list the schedules to find it", schedule=name)
        return ScheduleRecord(*row)

    def schedules(self) -> list[ScheduleRecord]:
        return [ScheduleRecord(*r) for r in self._all(SELECT_SCHEDULES, ())]

    def due_schedules(self, now: float) -> list[ScheduleRecord]:
        return [ScheduleRecord(*r) for r in self._all(SELECT_DUE, (now,))]

    def set_schedule_state(self, name: str, state: str, *, expected: Iterable[str], next_due: float | None, by: str, now: float | None = None) -> bool:
        """Pause or resume (compare-and-set on the state); resuming sets the next due time afresh."""
        now = _now(now)
        states = tuple(expected)
        with self._write() as cur:
            cur.execute(self._q(SET_SCHEDULE_STATE + _in(len(states))), (state, next_due, now, name, *states))
            won = cur.rowcount == 1
            if won:
                cur.execute(self._q(INSERT_AUDIT), (now, f"schedule.{state}", by, None, _json({"name": name})))
        return won

    def remove_schedule(self, name: str, *, by: str, now: float | None = None) -> bool:
        now = _now(now)
        with self._write() as cur:
            cur.execute(self._q(DELETE_SCHEDULE), (name,))
            gone = cur.rowcount == 1
            if gone:
                cur.execute(self._q(INSERT_AUDIT), (now, "schedule.removed", by, None, _json({"name": name})))
        return gone

    def decide_firing(self, firing: FiringRecord, *, next_due: float | None) -> bool:
        """Record one due time's fate and move the schedule past it, in one transaction.

        True for exactly one caller per (schedule, due time), however many
        schedulers race for it: the firing's key decides, and moving
        ``next_due`` is a compare-and-set on the due time being decided.
        """
        try:
            with self._write() as cur:
                cur.execute(self._q(INSERT_FIRING), msgspec.structs.astuple(firing))
                if cur.rowcount != 1:
                    return False
                cur.execute(self._q(MOVE_NEXT_DUE), (next_due, firing.decided_at, firing.schedule, firing.due_at))
                if cur.rowcount != 1:
                    raise _Lost  # paused, removed or moved meanwhile: roll the firing back
        except _Lost:
            return False
        return True

    def firings(self, schedule: str, limit: int = 50) -> list[FiringRecord]:
        return [FiringRecord(*r) for r in self._all(SELECT_FIRINGS, (schedule, limit))]

    def orphan_firings(self, *, decided_before: float) -> list[FiringRecord]:
        """Firings whose run was never created (the scheduler died in between): to start now."""
        return [FiringRecord(*r) for r in self._all(SELECT_ORPHAN_FIRINGS, (decided_before,))]

    def firing_failed(self, schedule: str, due_at: float, error: str) -> None:
        """A fired due time whose run could not even be created (the recipe no longer compiles...)."""
        with self._write() as cur:
            cur.execute(self._q(FIRING_FAILED), (error, schedule, due_at))

    # -- identity and the store-wide audit log ------------------------------

    def set_approver(self, name: str, token_sha256: str, *, by: str, now: float | None = None) -> None:
        """Add a person who may act under ``name``, or give them a new secret (the old one stops working)."""
        now = _now(now)
        with self._write() as cur:
            cur.execute(self._q(UPDATE_APPROVER), (token_sha256, now, by, name))
            if cur.rowcount == 0:
                cur.execute(self._q(INSERT_APPROVER), (name, token_sha256, now, by))
            cur.execute(self._q(INSERT_AUDIT), (now, "approver.set", by, None, _json({"name": name})))

    def get_approver(self, name: str) -> ApproverRecord | None:
        row = self._one(SELECT_APPROVER, (name,))
        return None if row is None else ApproverRecord(*row)

    def approvers_list(self) -> list[ApproverRecord]:
        return [ApproverRecord(*r) for r in self._all(SELECT_APPROVERS, ())]

    def remove_approver(self, name: str, *, by: str, now: float | None = None) -> bool:
        now = _now(now)
        with self._write() as cur:
            cur.execute(self._q(DELETE_APPROVER), (name,))
            gone = cur.rowcount == 1
            if gone:
                cur.execute(self._q(INSERT_AUDIT), (now, "approver.removed", by, None, _json({"name": name})))
        return gone

    def audit(self, kind: str, *, actor: str | None, run_id: str | None = None, data: dict[str, Any] | None = None, now: float | None = None) -> None:
        """Record an attempt in the store-wide log (no run needed: the run may not exist)."""
        with self._write() as cur:
            cur.execute(self._q(INSERT_AUDIT), (_now(now), kind, actor, run_id, _json(data or {})))

    def audit_log(self, *, after: int = 0) -> list[AuditRecord]:
        return [AuditRecord(*r) for r in self._all(SELECT_AUDIT, (after,))]

    # -- the web inbox (`recipe serve`, vodou_engine/web/) ------------------
    # Everything below is used by web/ only: the key cookies are signed with,
    # one-time sign-in links, sessions, and the inbox's one query. Schema
    # version 4 (migrations/0004_web_sign_in_sessions.sql). A link or a session
    # is good only while its approver exists and was not given a new secret
    # after it was made (`recipe approver add` again revokes them all).

    _WEB_KEY = "SELECT secret FROM web_keys WHERE name = ?"
    _WEB_KEY_ADD = "INSERT INTO web_keys (name, secret, created_at) VALUES (?, ?, ?) ON CONFLICT (name) DO NOTHING"
    _WEB_LINK_COLS = _cols(WebLinkRecord)
    _WEB_SESSION_COLS = _cols(WebSessionRecord)
    _WEB_LINK_ADD = f"INSERT INTO web_links ({_WEB_LINK_COLS}) VALUES {_values(WebLinkRecord)}"
    _WEB_LINK = f"SELECT {_WEB_LINK_COLS} FROM web_links WHERE token_sha256 = ?"
    _WEB_LINK_USE = "UPDATE web_links SET used_at = ? WHERE token_sha256 = ? AND used_at IS NULL AND expires_at > ?"
    _WEB_SESSION_ADD = f"INSERT INTO web_sessions ({_WEB_SESSION_COLS}) VALUES {_values(WebSessionRecord)}"
    _WEB_SESSION = (
        f"SELECT {_cols(WebSessionRecord, 's.')} FROM web_sessions s JOIN approvers a ON a.name = s.name "
        "WHERE s.id_sha256 = ? AND s.ended_at IS NULL AND s.expires_at > ? AND a.created_at <= s.created_at"
    )
    _WEB_SESSION_END = "UPDATE web_sessions SET ended_at = ? WHERE id_sha256 = ? AND ended_at IS NULL"
    _WEB_INBOX = (
        "SELECT a.id, a.run_id, a.step, a.fingerprint, a.asked_at, a.expires_at, a.approvers_json, "
        "r.recipe_name, r.started_by, r.state, r.schedule FROM approvals a JOIN runs r ON r.id = a.run_id "
        "WHERE a.state = 'pending' ORDER BY a.asked_at, a.id"
    )
    _WEB_EXTRAS = "SELECT id, preview_json, check_json FROM approvals WHERE run_id = ?"
    _WEB_UNASKED = (
        "SELECT r.id, r.recipe_name, r.started_by, r.updated_at FROM runs r WHERE r.state = 'parked' "
        "AND NOT EXISTS (SELECT 1 FROM approvals a WHERE a.run_id = r.id AND a.state = 'pending') "
        "ORDER BY r.updated_at DESC LIMIT ?"
    )

    def web_key(self, name: str = "session", *, now: float | None = None) -> str:
        """The store's signing key called ``name`` (hex), made on first use."""
        row = self._one(self._WEB_KEY, (name,))
        if row is not None:
            return row[0]
        import secrets

        with self._write() as cur:
            cur.execute(self._q(self._WEB_KEY_ADD), (name, secrets.token_hex(32), _now(now)))
            cur.execute(self._q(self._WEB_KEY), (name,))
            return cur.fetchone()[0]

    def add_web_link(self, token_sha256: str, name: str, *, by: str, expires_at: float, now: float | None = None) -> WebLinkRecord:
        """Record a one-time sign-in link for the approver ``name`` (who must exist)."""
        now = _now(now)
        rec = WebLinkRecord(token_sha256, name, now, by, expires_at)
        with self._write() as cur:
            cur.execute(self._q(SELECT_APPROVER), (name,))
            if cur.fetchone() is None:
                raise RefusedError(f"there is no approver {name!r} in the store at {self.location}; no link was made", hint="add the approver first", approver=name)
            cur.execute(self._q(self._WEB_LINK_ADD), msgspec.structs.astuple(rec))
            cur.execute(self._q(INSERT_AUDIT), (now, "web.link_issued", by, None, _json({"name": name, "expires_at": expires_at})))
        return rec

    def get_web_link(self, token_sha256: str) -> WebLinkRecord | None:
        row = self._one(self._WEB_LINK, (token_sha256,))
        return None if row is None else WebLinkRecord(*row)

    def web_link_usable(self, link: WebLinkRecord, *, now: float | None = None) -> str | None:
        """None if ``link`` can sign in now, else why not (in words)."""
        now = _now(now)
        if link.used_at is not None:
            return f"this sign-in link was already used, at {iso(link.used_at)}"
        if link.expires_at <= now:
            return f"this sign-in link expired at {iso(link.expires_at)}"
        approver = self.get_approver(link.name)
        if approver is None or approver.created_at > link.created_at:
            return f"{link.name} was removed or given a new secret after this link was made"
        return None

    def use_web_link(self, token_sha256: str, session_sha256: str, *, session_expires_at: float, user_agent: str | None = None, now: float | None = None) -> tuple[WebSessionRecord | None, str | None]:
        """Spend a sign-in link on a new session, once: (session, None) for the one caller
        that wins, (None, why) for everyone else. Either way the audit log has it."""
        now = _now(now)
        with self._write() as cur:
            cur.execute(self._q(self._WEB_LINK), (token_sha256,))
            row = cur.fetchone()
            link = None if row is None else WebLinkRecord(*row)
            why = "no such sign-in link" if link is None else self.web_link_usable(link, now=now)
            if why is None:
                cur.execute(self._q(self._WEB_LINK_USE), (now, token_sha256, now))
                if cur.rowcount != 1:  # only reachable if the engine let another writer in between
                    why = "this sign-in link was used just now"
            if why is not None:
                data = {"why": why, "link": token_sha256[:12]}
                cur.execute(self._q(INSERT_AUDIT), (now, "web.sign_in_refused", link.name if link else None, None, _json(data)))
                return None, why
            session = WebSessionRecord(session_sha256, link.name, now, session_expires_at, None, token_sha256, (user_agent or "")[:200] or None)
            cur.execute(self._q(self._WEB_SESSION_ADD), msgspec.structs.astuple(session))
            cur.execute(self._q(INSERT_AUDIT), (now, "web.signed_in", link.name, None, _json({"link": token_sha256[:12], "expires_at": session_expires_at})))
        return session, None

    def get_web_session(self, session_sha256: str, *, now: float | None = None) -> WebSessionRecord | None:
        """The live session with this id hash: not ended, not expired, its approver still there."""
        row = self._one(self._WEB_SESSION, (session_sha256, _now(now)))
        return None if row is None else WebSessionRecord(*row)

    def end_web_session(self, session_sha256: str, *, by: str | None, now: float | None = None) -> bool:
        now = _now(now)
        with self._write() as cur:
            cur.execute(self._q(self._WEB_SESSION_END), (now, session_sha256))
            ended = cur.rowcount == 1
            if ended:
                cur.execute(self._q(INSERT_AUDIT), (now, "web.signed_out", by, None, "{}"))
        return ended

    def inbox(self) -> list[InboxRow]:
        """Every pending question, oldest first, with its run's name, starter and state."""
        return [InboxRow(*r) for r in self._all(self._WEB_INBOX, ())]

    def parked_unasked(self, limit: int = 200) -> list[tuple[str, str, str, float]]:
        """Parked runs with no open question (theirs expired): (run, recipe, started_by, updated_at)."""
        return [tuple(r) for r in self._all(self._WEB_UNASKED, (limit,))]

    def approval_extras(self, run_id: str) -> dict[str, tuple[str | None, str | None]]:
        """Per approval of a run: the stored preview and check results (JSON text or None)."""
        return {r[0]: (r[1], r[2]) for r in self._all(self._WEB_EXTRAS, (run_id,))}

    # -- agents over HTTP (`recipe agent add`, the /mcp route of `recipe serve`) --
    # Schema version 5 (migrations/0005_agent_tokens.sql). Only the sha256 of an
    # agent's bearer token is kept, in a table apart from the approvers': an
    # agent's token is never an approver's secret. Removing an agent stops its
    # token at once (every request looks it up).

    _AGENT_COLS = _cols(AgentRecord)
    _AGENT_ADD = f"INSERT INTO agents ({_AGENT_COLS}) VALUES {_values(AgentRecord)}"
    _AGENT_SET = "UPDATE agents SET token_sha256 = ?, sees = ?, approvers_json = ?, created_at = ?, created_by = ? WHERE name = ?"
    _AGENT = f"SELECT {_AGENT_COLS} FROM agents WHERE name = ?"
    _AGENT_BY_TOKEN = f"SELECT {_AGENT_COLS} FROM agents WHERE token_sha256 = ?"
    _AGENTS = f"SELECT {_AGENT_COLS} FROM agents ORDER BY name"
    _AGENT_REMOVE = "DELETE FROM agents WHERE name = ?"

    def set_agent(self, name: str, token_sha256: str, *, by: str, sees: str = "own", approvers: list[str] | None = None, now: float | None = None) -> AgentRecord:
        """Add the agent ``name``, or give it a new token (the old one stops working)."""
        now = _now(now)
        rec = AgentRecord(name, token_sha256, sees, msgspec.json.encode(list(approvers or [])).decode("utf-8"), now, by)
        with self._write() as cur:
            cur.execute(self._q(self._AGENT_SET), (token_sha256, sees, rec.approvers_json, now, by, name))
            if cur.rowcount == 0:
                cur.execute(self._q(self._AGENT_ADD), msgspec.structs.astuple(rec))
            cur.execute(self._q(INSERT_AUDIT), (now, "agent.set", by, None, _json({"name": name, "sees": sees, "approvers": approvers or []})))
        return rec

    def get_agent(self, name: str) -> AgentRecord | None:
        row = self._one(self._AGENT, (name,))
        return None if row is None else AgentRecord(*row)

    def agent_by_token(self, token_sha256: str) -> AgentRecord | None:
        """The agent whose token has this sha256, if it is still there."""
        row = self._one(self._AGENT_BY_TOKEN, (token_sha256,))
        return None if row is None else AgentRecord(*row)

    def agents_list(self) -> list[AgentRecord]:
        return [AgentRecord(*r) for r in self._all(self._AGENTS, ())]

    def remove_agent(self, name: str, *, by: str, now: float | None = None) -> bool:
        now = _now(now)
        with self._write() as cur:
            cur.execute(self._q(self._AGENT_REMOVE), (name,))
            gone = cur.rowcount == 1
            if gone:
                cur.execute(self._q(INSERT_AUDIT), (now, "agent.removed", by, None, _json({"name": name})))
        return gone


class _Lost(Exception):
    """A compare-and-set lost inside a transaction that must then leave no trace."""


def describe_decision(a: ApprovalRecord) -> str:
    """Current state, who, and when: what a person racing for it needs to hear."""
    if a.state == "pending":
        return f"approval {a.id} is still pending"
    if a.state == "superseded":
        return f"approval {a.id} was superseded by {a.superseded_by} at {iso(a.decided_at)}"
    who = f" by {a.decided_by}" if a.decided_by else ""
    why = f" ({a.reason})" if a.reason else ""
    return f"approval {a.id} was already {a.state}{who} at {iso(a.decided_at)}{why}"


def newer_store_error(location: str, found: int, known: int) -> StoreError:
    return StoreError(
        f"the store at {location} has schema version {found}, newer than this vodou_engine understands "
        f"(up to {known}); nothing was changed",
        hint="upgrade vodou_engine, or point --store or VODOU_STORE at another store",
    )
