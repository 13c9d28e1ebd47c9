"""Runs, their nodes and their event log: what one run of a recipe is made of.

A run is created, taken by one owner at a time under a lease, moved from state
to state by compare-and-set, and finally pruned with everything recorded about
it. Its nodes are upserted in batches by the runtime's journal, every batch
checked against the owner; its events are the append-only history the other
aggregates write into as well.
"""

from __future__ import annotations

import operator
import zlib
from collections.abc import Iterable, Sequence
from typing import Any

import msgspec

from ..errors import PlanError, StoreError
from ..limits import MAX_PLAN_BYTES, size_words
from .core import INSERT_AUDIT, RUN_EXISTS, StoreCore
from .dialect import _check_states, _cols, _in, _json, _now, _states, _text, _values
from .records import RUN_STATES, TERMINAL_RUN_STATES, EventRecord, NodeRecord, RunRecord

_RUN_COLS = _cols(RunRecord)
_NODE_COLS = _cols(NodeRecord)
_EVENT_COLS = _cols(EventRecord)

INSERT_RUN = f"INSERT INTO runs ({_RUN_COLS}) VALUES {_values(RunRecord)}"
# A run's plan is in `run_plans` (schema 8), compressed, and `runs.plan_json` is empty; a
# run stored before keeps its plan in `runs.plan_json` and has no `run_plans` row.
INSERT_PLAN = "INSERT INTO run_plans (run_id, plan_zlib) VALUES (?, ?)"
PLAN_LEVEL = 1
"""zlib's fastest level: a plan is a repetitive text (16x smaller at 100,000 branches); higher
levels gain a few percent for twice the time."""
_RUN_READ_COLS = _cols(RunRecord, "runs.") + ", p.plan_zlib"
_RUN_FROM = " FROM runs LEFT JOIN run_plans p ON p.run_id = runs.id"
SELECT_RUN = f"SELECT {_RUN_READ_COLS}{_RUN_FROM} WHERE runs.id = ?"
SELECT_RUN_HEAD = f"SELECT {_RUN_COLS} FROM runs WHERE id = ?".replace("plan_json", "'' AS plan_json", 1)
LIST_RUNS = f"SELECT {_RUN_READ_COLS}{_RUN_FROM}"
LIST_RUNS_HEAD = f"SELECT {_RUN_COLS} FROM runs".replace("plan_json", "'' AS plan_json", 1)
LIST_RUNS_ORDER = " ORDER BY created_at DESC, id DESC LIMIT ?"
# Runs that may be removed: ended (in one of the states asked for) before a time, and
# with no effect whose fate is open (unknown or executing) - that needs a person first.
PRUNABLE = (
    "SELECT id FROM runs r WHERE r.ended_at IS NOT NULL AND r.ended_at < ? AND r.state IN {states} "
    "AND NOT EXISTS (SELECT 1 FROM effects e WHERE e.run_id = r.id AND e.state IN ('unknown', 'executing'))"
)
PRUNE_TABLES = ("events", "effects", "approvals", "nodes", "run_plans", "runs")
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
# Ending a run says, in the same statement, whether a question is left to withdraw: most
# runs have none, and then no second statement is sent.
PENDING_LEFT = " RETURNING EXISTS (SELECT 1 FROM approvals a WHERE a.run_id = runs.id AND a.state = 'pending')"
WITHDRAW_RUN = (
    "UPDATE approvals SET state = 'withdrawn', decided_at = ?, reason = ? WHERE run_id = ? AND state = 'pending'"
)

_NODE_ROW = _in(len(NodeRecord.__struct_fields__) + 1)
_ON_NODE = (
    " ON CONFLICT (run_id, node_id) DO UPDATE SET state = excluded.state, "
    "output_json = excluded.output_json, error = excluded.error, started_at = excluded.started_at, "
    "ended_at = excluded.ended_at, attempts = excluded.attempts, ready_at = excluded.ready_at"
)
UPSERT_NODE = f"INSERT INTO nodes (run_id, {_NODE_COLS}) VALUES {_NODE_ROW}{_ON_NODE}"
UPSERT_NODES_AT_ONCE = 16
"""A batch of up to this many node states is one statement with a row each (one round trip
to the server, where psycopg's ``executemany`` pipelines a statement per row: about twice
the client's CPU for the driver's usual batch of a few states); a larger one (a wide
loop's) is pipelined, as one statement of thousands of rows would be parsed anew each time."""
_UPSERT_NODES = [
    "",
    UPSERT_NODE,
    *(
        f"INSERT INTO nodes (run_id, {_NODE_COLS}) VALUES {', '.join([_NODE_ROW] * n)}{_ON_NODE}"
        for n in range(2, UPSERT_NODES_AT_ONCE + 1)
    ),
]
SELECT_NODES = f"SELECT {_NODE_COLS} FROM nodes WHERE run_id = ? ORDER BY node_id"

SELECT_EVENTS = f"SELECT {_EVENT_COLS} FROM events WHERE run_id = ? AND seq > ? ORDER BY seq"
SELECT_EVENTS_LIMIT = SELECT_EVENTS + " LIMIT ?"


class RunsMixin(StoreCore):
    """Runs and their owners, nodes and events, and pruning finished runs."""

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
        plan: bool = True,
    ) -> RunRecord:
        """A new run; one created ``running`` under ``owner`` holds a lease of ``lease_s``.
        Returns it as ``get_run`` would read it back (no second statement); ``plan=False``
        as ``get_run(plan=False)`` does, ``plan_json`` empty: a caller that holds the plan
        does not have its bytes decoded into a text it drops (16 MB at 100,000 branches)."""
        _check_states((state,), RUN_STATES, "run state")
        now = _now(now)
        ended = now if state in TERMINAL_RUN_STATES else None
        lease = now + lease_s if owner is not None and lease_s is not None else None
        row = (run_id, recipe_name, recipe_path, source_sha256, "", plan_fingerprint,
               _text(inputs_json), started_by, state, now, now, ended, None, owner, lease,
               _text(servers_json), saved_recipe, saved_version, schedule)  # fmt: skip
        # bytes are compressed as they are; the text of the plan is made only for the record returned, if asked
        raw = plan_json if isinstance(plan_json, (bytes, bytearray)) else str(plan_json).encode()
        if len(raw) > MAX_PLAN_BYTES:  # what is stored can always be read back (_inflate)
            raise PlanError(
                f"the plan of run {run_id!r} is {len(raw):,} bytes, more than a run can store "
                f"({size_words(MAX_PLAN_BYTES)}); nothing was stored",
                hint="split the recipe into smaller ones, or loop over a list (`for each`) instead of writing each step",
            )
        packed = zlib.compress(raw, PLAN_LEVEL)
        del raw
        try:
            with self._write() as cur:
                cur.execute(self._q(INSERT_RUN), row)
                cur.execute(self._q(INSERT_PLAN), (run_id, packed))
        except self._d.IntegrityError as exc:
            raise self._integrity(exc, run_id, f"run {run_id!r}") from exc
        record = RunRecord(*row)
        return msgspec.structs.replace(record, plan_json=_text(plan_json)) if plan else record

    def has_run(self, run_id: str) -> bool:
        """Whether the store holds ``run_id``: one indexed read, where ``get_run`` on a missing
        run also searches the recent ids for a "did you mean" (milliseconds on a busy store),
        which only a person's typo needs."""
        return self._one(RUN_EXISTS, (run_id,)) is not None

    def get_run(self, run_id: str, *, plan: bool = True) -> RunRecord:
        """``plan=False``: the record with ``plan_json`` left empty, for a caller that holds the
        plan already (a run of 100,000 branches has a plan of about 16 MB, kept compressed)."""
        row = self._one(SELECT_RUN if plan else SELECT_RUN_HEAD, (run_id,))
        if row is None:
            raise self._unknown_run(run_id)
        return _run(row, self.location) if plan else RunRecord(*row)

    def list_runs(
        self,
        limit: int = 50,
        *,
        state: str | Iterable[str] | None = None,
        recipe: str | None = None,
        since: float | None = None,
        started_by: str | None = None,
        plan: bool = True,
    ) -> list[RunRecord]:
        """Newest first; ``recipe`` matches the recipe's name, ``since`` the creation time.
        ``plan=False``: each with ``plan_json`` left empty, as ``get_run(plan=False)``: a list
        of runs shows none of their plans, and each would be read and inflated (16 MB at
        100,000 branches), and one damaged would stop the whole list."""
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
        sql = (
            (LIST_RUNS if plan else LIST_RUNS_HEAD)
            + (" WHERE " + " AND ".join(where) if where else "")
            + LIST_RUNS_ORDER
        )
        rows = self._all(sql, (*params, limit))
        return [_run(r, self.location) for r in rows] if plan else [RunRecord(*r) for r in rows]

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
        params: tuple[Any, ...] = (new, now, now if new in TERMINAL_RUN_STATES else None, error, new, new, run_id)
        sql = SET_RUN_STATE
        if expected is not None:
            states = _states(expected, RUN_STATES, "run state")
            sql += " AND state IN " + _in(len(states))
            params += states
        if owner is not None:
            sql += " AND owner = ?"
            params += (owner,)
        ending = new in TERMINAL_RUN_STATES
        with self._write() as cur:
            cur.execute(self._q(sql + PENDING_LEFT if ending else sql), params)
            left = cur.fetchall() if ending else None
            won = bool(left) if ending else cur.rowcount == 1
            if not won:
                self._require_run(run_id)
            elif left and left[0][0]:
                cur.execute(self._q(WITHDRAW_RUN), (now, f"the run ended {new}", run_id))
        return won

    # -- owners -----------------------------------------------------------

    def take_run(
        self, run_id: str, owner: str, *, lease_s: float, dead_owner: str | None = None, now: float | None = None
    ) -> bool:
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

    # -- nodes ------------------------------------------------------------

    def save_nodes(self, run_id: str, records: Iterable[NodeRecord], *, owner: str | None = None) -> None:
        """Upsert many node states in one transaction (the runtime batches). On its own, it
        commits relaxed: a step's state lost with the database server is redone (a read)
        or found again in the effect's own record, claimed by an ordinary commit."""
        rows = [(run_id, r.node_id, r.state, _text(r.output_json), r.error, r.started_at, r.ended_at, r.attempts,
                 r.ready_at) for r in records]  # fmt: skip
        if not rows:
            return
        # In key order (stable: a node listed twice keeps its last state): each upsert then
        # lands beside the one before in the (run_id, node_id) index instead of anywhere in
        # it, which is what a wide run's batches cost once the index outgrows the page cache.
        rows.sort(key=_node_key)
        if 1 < len(rows) <= UPSERT_NODES_AT_ONCE:
            # One statement may not upsert a row twice: a node listed twice keeps its last
            # state, as it does when each row is a statement of its own, applied in order.
            rows = list({row[1]: row for row in rows}.values())
        try:
            with self._write(relaxed=True) as cur:
                self._check_owner(cur, run_id, owner)
                if len(rows) <= UPSERT_NODES_AT_ONCE:
                    cur.execute(self._q(_UPSERT_NODES[len(rows)]), [v for row in rows for v in row])
                else:
                    cur.executemany(self._q(UPSERT_NODE), rows)
        except self._d.IntegrityError as exc:
            raise self._integrity(exc, run_id, "node") from exc

    def get_nodes(self, run_id: str) -> dict[str, NodeRecord]:
        rows = self._all(SELECT_NODES, (run_id,))
        if not rows:
            self._require_run(run_id)
        return {r[0]: NodeRecord(*r) for r in rows}

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
            cur.execute(
                self._q(INSERT_AUDIT),
                (
                    _now(now),
                    "runs.pruned",
                    by,
                    None,
                    _json({"runs": len(ids), "ended_before": ended_before, "states": list(wanted)}),
                ),
            )
        return len(ids)


_node_key = operator.itemgetter(1)
"""A node row's node_id."""
_PLAN_AT = RunRecord.__struct_fields__.index("plan_json")
_INFLATE_STEP = 1 << 20


def _run(row: Sequence[Any], location: str) -> RunRecord:
    """A run as read with its plan (``_RUN_READ_COLS``): the row's own columns, the plan
    from ``run_plans`` when it has one there (schema 8), else from the row (runs before)."""
    *cols, packed = row
    if packed is not None:
        cols[_PLAN_AT] = _inflate(packed, cols[0], location)
    return RunRecord(*cols)


def _inflate(packed: bytes, run_id: str, location: str) -> str:
    """A stored plan's text, inflated a MiB at a time, so a row holds at most MAX_PLAN_BYTES
    (and a MiB) of memory before it is known to be past the bound (one call with
    ``max_length`` would fill the whole bound first, then copy it into one bytes). The
    pieces are joined only once it is whole: as fast as one ``zlib.decompress`` and as
    much memory. A row that would expand further, or is not whole zlib data of UTF-8
    text, is refused as corrupt (StoreError, exit 6)."""
    inflater = zlib.decompressobj()
    pieces: list[bytes] = []
    size = 0
    data = packed
    why = None
    try:
        while not inflater.eof:
            piece = inflater.decompress(data, _INFLATE_STEP)
            data = inflater.unconsumed_tail
            if not piece and not data:
                break  # no input left and no output: the stream stops before its end
            pieces.append(piece)
            size += len(piece)
            if size > MAX_PLAN_BYTES:
                why = f"it expands past {size_words(MAX_PLAN_BYTES)}, more than any plan a run stores"
                break
        else:
            if not inflater.unused_data:
                return b"".join(pieces).decode("utf-8")
        why = why or "its compressed data is cut short or has bytes after its end"
    except zlib.error as exc:
        why = f"its compressed data is damaged ({exc})"
    except UnicodeDecodeError:
        why = "it is not UTF-8 text"
    del pieces
    raise StoreError(
        f"the plan stored for run {run_id!r} in {location} is corrupt: {why}; nothing was read or run",
        hint="the store was damaged or edited outside the engine: restore it from a backup, "
        "or start the recipe again as a new run",
        run=run_id,
    )
