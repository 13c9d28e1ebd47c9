"""A run's node states as one drive knows them, and their way into the store.

The scheduler, the gates and the effects all change node states through
:meth:`Journal.set`; nothing else writes them. Node states are batched:
written ahead of the next store call, in its thread hop, and otherwise at
most every FLUSH_EVERY_S while the run moves, so a chain of reads costs a
transaction and a thread hop a quarter of a second instead of one every
few steps. A crash may then repeat the reads of that last moment, which the
contract allows (reads are at least once). Nothing a promise rests on waits
for the batch: questions and an effect's claim go through :meth:`Journal.claim`,
which writes the pending node states in the claim's own transaction (one
owner check, one commit), withdrawals through :meth:`Journal.db`, which writes
them first, in the same hop; both commit before the engine moves past them; an effect's outcome
is written with its step's state (:meth:`Journal.effect_outcome`); a park,
an end and an interruption write the last states in the transaction that
records them (``driver.py``).

Every write carries the drive's owner: the store refuses it (LostRunError)
once another process has taken the run, or the run was cancelled.
"""

from __future__ import annotations

import math
import time
from array import array
from collections.abc import Callable, Container, Iterator, Mapping
from typing import Any

import msgspec
import trio

from ..states import EffectState, NodeState, RunState
from ..store import NodeRecord, RunStore
from ..tools.results import CONTENT_EVENT

FLUSH_EVERY_S = 0.25
"""The longest a changed node state waits for a write of its own: how live ``recipe show``
and the run page (which reloads every 2 s) are while a run moves, and at most how much
of a run's reads a crash repeats."""

PROGRESS_EVENTS_PER_NODE = 100
"""At most this many ``progress`` events per node per drive (one per flush at most, so at most
four a second): a server reporting progress many times a second on a call of an hour would
otherwise fill the run's log; past it the live view still moves, the log stops."""
PROGRESS_MESSAGE_CHARS = 200
"""A server's progress message is kept to this many characters."""

_json = msgspec.json.Encoder(order="deterministic")
_SUCCEEDED = NodeState.SUCCEEDED
_RUNNING = NodeState.RUNNING
_ENDS = frozenset(
    {
        NodeState.SUCCEEDED,
        NodeState.FAILED,
        NodeState.CANCELLED,
        NodeState.SKIPPED,
        NodeState.REJECTED,
        NodeState.WAITING,
        NodeState.UNKNOWN,
    }
)
_NEVER_BEGAN = frozenset({NodeState.CANCELLED, NodeState.SKIPPED})
"""Ends a node can reach without its work ever starting: no start time is made up for them."""
_OPEN = frozenset({NodeState.PENDING, NodeState.RUNNING, NodeState.WAITING})
"""States a node must not be left in once its run has ended."""
_NONE = math.nan
"""A time not (yet) known, as the arrays of :class:`Times` hold it."""


def _unwatched(nid: str, prev: str, state: str) -> None:
    pass


def _opt(t: float) -> float | None:
    return None if t != t else t  # NaN: not known


class Times(Mapping[str, tuple[float | None, float | None, float | None]]):
    """Per node: when it became ready, when its work started, when it ended (epoch seconds,
    None until known): queueing is ready -> started, work started -> ended.

    Three arrays of doubles and one slot per node, not a list of three floats per node:
    a together of 100,000 branches holds its times in about 60 bytes a branch instead of
    200, and makes no object for the collector to scan per branch."""

    __slots__ = ("ended", "ready", "slot", "started")

    def __init__(self, node_ids: list[str]):
        self.slot: dict[str, int] = {nid: i for i, nid in enumerate(node_ids)}
        n = len(self.slot)
        self.ready = array("d", [_NONE]) * n
        self.started = array("d", [_NONE]) * n
        self.ended = array("d", [_NONE]) * n

    def add(self, nid: str) -> None:
        """A node not listed at the start (a loop item's copy); known ones keep their place, reset."""
        i = self.slot.get(nid)
        if i is None:
            self.slot[nid] = len(self.ready)
            self.ready.append(_NONE)
            self.started.append(_NONE)
            self.ended.append(_NONE)
        else:
            self.ready[i] = self.started[i] = self.ended[i] = _NONE

    def extend(self, node_ids: list[str]) -> None:
        """:meth:`add` for many nodes, one growth of each array when none is known yet."""
        slot = self.slot
        if any(nid in slot for nid in node_ids):
            for nid in node_ids:
                self.add(nid)
            return
        start = len(self.ready)
        slot.update(zip(node_ids, range(start, start + len(node_ids)), strict=True))
        more = array("d", [_NONE]) * len(node_ids)
        self.ready.extend(more)
        self.started.extend(more)
        self.ended.extend(more)

    def __getitem__(self, nid: str) -> tuple[float | None, float | None, float | None]:
        i = self.slot[nid]
        return _opt(self.ready[i]), _opt(self.started[i]), _opt(self.ended[i])

    def __contains__(self, nid: object) -> bool:
        return nid in self.slot

    def __iter__(self) -> Iterator[str]:
        return iter(self.slot)

    def __len__(self) -> int:
        return len(self.slot)

    def put(self, nid: str, ready: float | None, started: float | None, ended: float | None) -> None:
        i = self.slot[nid]
        self.ready[i] = _NONE if ready is None else ready
        self.started[i] = _NONE if started is None else started
        self.ended[i] = _NONE if ended is None else ended


class Journal:
    """Node states, outputs, errors and times of one run, for one drive."""

    def __init__(
        self,
        node_ids: list[str],
        *,
        run_id: str,
        store: RunStore,
        owner: str | None,
        clock: Callable[[], float] = time.time,
        on_change: Callable[[str, str], None] | None = None,
    ):
        """``on_change(node, state)`` is told of every state; when it also has a ``progress(node,
        doc)`` method (the terminal's live view does), that is told of a server's progress on a
        node's call as it comes."""
        self.run_id = run_id
        self.store = store
        self.owner = owner
        self.clock = clock
        self.on_change = on_change
        self.states: dict[str, str] = dict.fromkeys(node_ids, NodeState.PENDING)
        """Read freely; change only through :meth:`set` (or :meth:`mark` for in-memory steps)."""
        self.outputs: dict[str, Any] = {}
        self.contents: dict[str, list[Any]] = {}
        """Per tool step: every content block its server answered with, when its value alone
        does not give them back (``ToolResult.content``); what ``{step.content}`` reads."""
        self._unsaved_content: dict[str, None] = {}
        self.errors: dict[str, str] = {}
        self.times = Times(node_ids)
        """Per node: (ready, started, ended): queueing is ready -> started, work started -> ended."""
        self.watched: Container[str] = ()
        """The nodes whose changes ``watch(node, old, new)`` hears: the scheduler's join tallies
        (one callback and the scheduler's own map of them, not a map of 100,000 callbacks)."""
        self.watch: Callable[[str, str, str], None] = _unwatched
        self._dirty: dict[str, None] = {}
        self.on_progress: Callable[[str, dict[str, Any]], None] | None = getattr(on_change, "progress", None)
        self._progress: dict[str, dict[str, Any]] = {}
        """Per node, the latest progress not yet written as a ``progress`` event."""
        self._progress_written: dict[str, int] = {}
        self._flush_wanted = trio.Event()
        self.limiter = trio.CapacityLimiter(1)
        """The one thread at a time this drive uses the store from (the store is not thread-safe):
        every store call of the drive, the lease keeper's too, goes through it."""
        self._stored: tuple[dict[str, NodeRecord], dict[str, Any], dict[str, list[Any]]] | None = None

    # --- changing states -------------------------------------------------------------
    def set(
        self,
        nid: str,
        state: str,
        *,
        output: Any = None,
        error: str | None = None,
        started: float | None = None,
        ended: float | None = None,
        content: list[Any] | None = None,
    ) -> None:
        """Record a node's new state (journaled); ``started`` and ``ended`` override when its
        work began and ended (a thread call is timed on its worker, not when trio collects it).
        ``content``: a succeeded tool step's content blocks, kept when its value does not
        already give them back; written with the step's state, as a ``content`` event."""
        states = self.states
        prev = states[nid]
        states[nid] = state
        if prev != state and nid in self.watched:
            self.watch(nid, prev, state)
        now = self.clock()
        times = self.times
        i = times.slot[nid]
        if state == _RUNNING:
            times.started[i] = now if started is None else started
        elif state in _ENDS:
            if started is not None:
                times.started[i] = started
            elif times.started[i] != times.started[i] and state not in _NEVER_BEGAN:  # NaN: not begun
                times.started[i] = now
            times.ended[i] = now if ended is None else ended
        if state == _SUCCEEDED:
            self.outputs[nid] = output
            if content is not None:
                self.contents[nid] = content
                self._unsaved_content[nid] = None
        if error is not None:
            self.errors[nid] = error
        self._dirty[nid] = None
        self._flush_wanted.set()
        if self.on_change is not None:
            self.on_change(nid, state)

    def mark(self, nid: str, state: str) -> None:
        """An in-memory step not worth a write (a node about to start, a gate about to ask again)."""
        prev = self.states[nid]
        self.states[nid] = state
        if prev != state and nid in self.watched:
            self.watch(nid, prev, state)

    def progress(self, nid: str, progress: float, total: float | None, message: str | None) -> None:
        """A server's progress on ``nid``'s call: the live view hears it now; the latest of it is
        written as a ``progress`` event with the next batch of node states (at most every
        FLUSH_EVERY_S, at most PROGRESS_EVENTS_PER_NODE per node)."""
        doc: dict[str, Any] = {"progress": progress}
        if total is not None:
            doc["total"] = total
        if message:
            doc["message"] = message[:PROGRESS_MESSAGE_CHARS]
        if self._progress_written.get(nid, 0) < PROGRESS_EVENTS_PER_NODE:
            self._progress[nid] = doc
            self._flush_wanted.set()
        if self.on_progress is not None:
            self.on_progress(nid, doc)

    def add(self, nid: str) -> None:
        """A node the plan does not list by this id: a loop item's copy of a body node
        (``reply[0]``), or a body step's list for one item of an enclosing loop."""
        self.states[nid] = NodeState.PENDING
        self.times.add(nid)

    def add_many(self, node_ids: list[str]) -> None:
        """:meth:`add` for many nodes at once (every copy a loop makes when its list is known)."""
        self.states.update(dict.fromkeys(node_ids, NodeState.PENDING))
        self.times.extend(node_ids)

    @property
    def resumed(self) -> bool:
        """Whether a drive before left node states to restore (:meth:`restore`)."""
        return self._stored is not None

    def restore_one(self, nid: str) -> None:
        """A node added during this drive (:meth:`add`), as a drive before left it: a loop item's
        reads, writes and effect are not done again when its run resumes."""
        if self._stored is not None:
            nodes, effects, contents = self._stored
            self.restore(
                {nid: nodes[nid]} if nid in nodes else {},
                {nid: effects[nid]} if nid in effects else {},
                {nid: contents[nid]} if nid in contents else {},
            )

    def ready(self, nid: str) -> None:
        """The node could start now (it may still wait for a thread)."""
        times = self.times
        times.ready[times.slot[nid]] = self.clock()

    # --- the store -------------------------------------------------------------------
    async def db(self, fn: Callable[..., Any] | None, *args: Any, **kwargs: Any) -> Any:
        """Call ``fn`` on the store's one worker thread, after writing the pending node states."""
        batch = self._take_dirty()
        heard, self._progress = self._progress, {}
        if fn is None and not batch and not heard:
            return None  # nothing to write: no thread hop
        for nid in heard:
            self._progress_written[nid] = self._progress_written.get(nid, 0) + 1
        try:
            return await trio.to_thread.run_sync(self._db_sync, batch, heard, fn, args, kwargs, limiter=self.limiter)
        except trio.Cancelled:
            # Cancelled before the thread took it: the states are still owed to the store.
            self._dirty.update(dict.fromkeys(r.node_id for r in batch))
            raise

    def _db_sync(
        self,
        batch: list[NodeRecord],
        heard: dict[str, dict[str, Any]],
        fn: Callable[..., Any] | None,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> Any:
        if batch:
            saved = [r.node_id for r in batch if r.node_id in self._unsaved_content]
            if saved:
                with self.store.transaction():  # a step's blocks and its state: both or neither
                    self.store.save_nodes(self.run_id, batch, owner=self.owner)
                    self._save_contents(saved)
            else:
                self.store.save_nodes(self.run_id, batch, owner=self.owner)
        for nid, doc in heard.items():
            self.store.append_event(self.run_id, "progress", node_id=nid, data_json=_json.encode(doc).decode())
        return fn(*args, **kwargs) if fn is not None else None

    async def claim(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """:meth:`db` for a write that checks, in its own transaction, that this drive still owns
        the run (an effect's claim, a question): the pending node states are written in that
        same transaction, so they commit with it (as durably), or vanish with it and stay owed.
        One transaction and one owner check where :meth:`db` makes two."""
        batch = self._take_dirty()
        heard, self._progress = self._progress, {}
        for nid in heard:
            self._progress_written[nid] = self._progress_written.get(nid, 0) + 1
        try:
            return await trio.to_thread.run_sync(self._claim_sync, batch, heard, fn, args, kwargs, limiter=self.limiter)
        except BaseException:
            # Rolled back with the write, or never sent: the states are still owed to the store.
            self._dirty.update(dict.fromkeys(r.node_id for r in batch))
            raise

    def _claim_sync(
        self,
        batch: list[NodeRecord],
        heard: dict[str, dict[str, Any]],
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> Any:
        store = self.store
        with store.transaction():
            if batch:
                store.save_nodes(self.run_id, batch)  # the owner: checked by ``fn``, in this transaction
                self._save_contents([r.node_id for r in batch if r.node_id in self._unsaved_content])
            for nid, doc in heard.items():
                store.append_event(self.run_id, "progress", node_id=nid, data_json=_json.encode(doc).decode())
            return fn(*args, **kwargs)

    def _save_contents(self, node_ids: list[str]) -> None:
        """One ``content`` event per step (the latest one counts, should a crash repeat a read)."""
        for nid in node_ids:
            self._unsaved_content.pop(nid, None)
            data = _json.encode({"content": self.contents[nid]}).decode()
            self.store.append_event(self.run_id, CONTENT_EVENT, node_id=nid, data_json=data)

    def _take_dirty(self) -> list[NodeRecord]:
        if not self._dirty:
            return []
        ids = list(self._dirty)
        self._dirty.clear()
        return [self._record(nid) for nid in ids]

    def _record(self, nid: str) -> NodeRecord:
        st = self.states[nid]
        ready, started, ended = self.times[nid]
        output = _json.encode(self.outputs[nid]) if st == _SUCCEEDED and nid in self.outputs else None
        return NodeRecord(
            node_id=nid,
            state=st,
            output_json=output,
            error=self.errors.get(nid),
            started_at=started,
            ended_at=ended,
            ready_at=ready,
        )

    async def effect_outcome(self, nid: str, finish: Callable[[], bool]) -> bool:
        """Write how an effect ended (``finish``: the store's compare-and-set on the effect's
        record) and its step's state, as :meth:`set` left it, in one transaction; False when
        the record was no longer this drive's to finish (a person settled it meanwhile).

        Unlike every other write this one is not refused when the run is no longer this
        drive's (it was cancelled, or taken over, while the call was out): the effect's
        own record is the truth about its step, and a step whose effect has ended must
        never be left ``running``. The run's log says when the outcome came after the run
        ended or changed hands."""
        self._dirty.pop(nid, None)
        record = self._record(nid)
        return await trio.to_thread.run_sync(self._outcome_sync, record, finish, limiter=self.limiter)

    def _outcome_sync(self, record: NodeRecord, finish: Callable[[], bool]) -> bool:
        store = self.store
        with store.transaction():
            if not finish():
                return False
            store.save_nodes(self.run_id, [record])
            if record.node_id in self._unsaved_content:
                self._save_contents([record.node_id])
            run = store.get_run(self.run_id, plan=False)  # its state and owner: the plan is not needed
            if run.state != RunState.RUNNING or run.owner != self.owner:
                data = {"step": record.node_id, "state": record.state, "run": run.state}
                store.append_event(
                    self.run_id, "effect.after_drive", node_id=record.node_id, data_json=_json.encode(data).decode()
                )
        return True

    def close_open(self, why: str) -> None:
        """The run ends: every node that has not ended is ``cancelled`` (stopped with its run)."""
        for nid, st in self.states.items():
            if st in _OPEN:
                self.set(nid, NodeState.CANCELLED, error=why)

    def write_unsaved(self) -> None:
        """Write the node states (and content blocks) not yet written, and the latest progress
        not yet written as events, in the caller's transaction (called on the store's thread)."""
        heard, self._progress = self._progress, {}
        for nid, doc in heard.items():
            self.store.append_event(self.run_id, "progress", node_id=nid, data_json=_json.encode(doc).decode())
        batch = self._take_dirty()
        self.store.save_nodes(self.run_id, batch, owner=self.owner)
        self._save_contents([r.node_id for r in batch if r.node_id in self._unsaved_content])

    async def flusher(self) -> None:
        """Writes node states in batches while the run moves; cancel it when the drive ends."""
        while True:
            await self._flush_wanted.wait()
            await trio.sleep(FLUSH_EVERY_S)
            self._flush_wanted = trio.Event()
            if self._dirty or self._progress:
                await self.db(None)

    # --- loading a run back from the store ---------------------------------------------
    def restore(
        self, nodes: dict[str, NodeRecord], effects: dict[str, Any], contents: dict[str, list[Any]] | None = None
    ) -> None:
        """States as stored; an effect's own record is the truth about its step.
        ``contents``: the steps' content blocks as stored (``stored_contents``). The records
        are kept: a loop item's copy (``reply[2]``), which the plan does not list by id, is
        restored by :meth:`restore_one` when the loop makes it again."""
        if self._stored is None:
            self._stored = (nodes, effects, contents or {})
        dec = msgspec.json.Decoder()
        self.contents.update(contents or {})
        states = self.states
        for nid, rec in nodes.items():
            if nid not in states:
                continue
            if rec.state == NodeState.SUCCEEDED:
                states[nid] = NodeState.SUCCEEDED
                self.outputs[nid] = dec.decode(rec.output_json) if rec.output_json else None
            elif rec.state in (NodeState.FAILED, NodeState.CANCELLED, NodeState.SKIPPED, NodeState.REJECTED):
                states[nid] = NodeState(rec.state)
                if rec.error:
                    self.errors[nid] = rec.error
            self.times.put(nid, rec.ready_at, rec.started_at, rec.ended_at)
        for step, eff in effects.items():
            if step not in states:
                continue
            if eff.state == EffectState.EXECUTED:
                states[step] = NodeState.SUCCEEDED
                self.outputs[step] = dec.decode(eff.result_json) if eff.result_json else None
            elif eff.state == EffectState.FAILED:
                states[step] = NodeState.FAILED
                self.errors[step] = eff.error or "the effect failed"
            elif eff.state in (EffectState.UNKNOWN, EffectState.EXECUTING):
                states[step] = NodeState.UNKNOWN
                self.errors[step] = eff.error or "the effect may or may not have happened (its process ended mid-call)"
            stored = nodes.get(step)
            if stored is None or stored.state != states[step]:
                self._dirty[step] = None  # the effect's record (a person may have settled it) is newer: write it


def ending_records(
    node_ids: list[str], nodes: dict[str, NodeRecord], effects: dict[str, Any], *, why: str, now: float
) -> list[NodeRecord]:
    """The node records that close a run ended by a person (cancelled, declined) while its
    driver was away or still going: a step with an effect says what its effect's record says
    (``executed``: succeeded with its result; ``failed``; otherwise ``unknown``, for a person
    to settle), every other node not yet ended is ``cancelled`` with ``why``. Only the
    records that change are returned. ``node_ids``: the plan's, in order (a node never
    written has no record yet, and must end too)."""
    out = []
    for nid in dict.fromkeys([*node_ids, *nodes]):
        rec = nodes.get(nid) or NodeRecord(node_id=nid, state=NodeState.PENDING)
        eff = effects.get(nid)
        if eff is not None:
            if eff.state == EffectState.EXECUTED:
                new = msgspec.structs.replace(
                    rec,
                    state=NodeState.SUCCEEDED,
                    output_json=eff.result_json,
                    error=None,
                    ended_at=eff.ended_at or now,
                )
            elif eff.state == EffectState.FAILED:
                new = msgspec.structs.replace(
                    rec,
                    state=NodeState.FAILED,
                    output_json=None,
                    error=eff.error or "the effect failed",
                    ended_at=eff.ended_at or now,
                )
            else:
                new = msgspec.structs.replace(rec, state=NodeState.UNKNOWN, output_json=None, error=eff.error)
        elif rec.state in _OPEN:
            new = msgspec.structs.replace(rec, state=NodeState.CANCELLED, error=why, ended_at=now)
        else:
            continue
        if new != rec or nid not in nodes:
            out.append(new)
    return out
