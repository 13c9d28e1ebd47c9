"""A run's node states as one drive knows them, and their way into the store.

The scheduler, the gates and the effects all change node states through
:meth:`Journal.set`; nothing else writes them. Node states are batched
(written at most every FLUSH_EVERY_S, or ahead of the next store call) so a
burst of steps costs one transaction and one thread hop; a crash may then
repeat reads, which the contract allows. Approvals and effects are written,
and committed, before the engine moves past them: they go through
:meth:`Journal.db`, which writes the pending node states first, in the
same thread hop.

Every write carries the drive's owner: the store refuses it (LostRunError)
once another process has taken the run, or the run was cancelled.
"""

from __future__ import annotations

import time
from typing import Any, Callable

import msgspec
import trio

from ..states import EffectState, NodeState
from ..store import NodeRecord

FLUSH_EVERY_S = 0.005

_json = msgspec.json.Encoder(order="deterministic")
_SUCCEEDED = NodeState.SUCCEEDED
_RUNNING = NodeState.RUNNING
_ENDS = frozenset({NodeState.SUCCEEDED, NodeState.FAILED, NodeState.CANCELLED, NodeState.SKIPPED, NodeState.REJECTED, NodeState.WAITING, NodeState.UNKNOWN})
_NEVER_BEGAN = frozenset({NodeState.CANCELLED, NodeState.SKIPPED})
"""Ends a node can reach without its work ever starting: no start time is made up for them."""


class Journal:
    """Node states, outputs, errors and times of one run, for one drive."""

    def __init__(
        self,
        node_ids: list[str],
        *,
        run_id: str,
        store: Any,
        owner: str | None,
        clock: Callable[[], float] = time.time,
        on_change: Callable[[str, str], None] | None = None,
    ):
        self.run_id = run_id
        self.store = store
        self.owner = owner
        self.clock = clock
        self.on_change = on_change
        self.states: dict[str, str] = dict.fromkeys(node_ids, NodeState.PENDING)
        """Read freely; change only through :meth:`set` (or :meth:`mark` for in-memory steps)."""
        self.outputs: dict[str, Any] = {}
        self.errors: dict[str, str] = {}
        self.times: dict[str, list[float | None]] = {nid: [None, None, None] for nid in node_ids}
        """Per node: [ready, started, ended]: queueing is ready -> started, work started -> ended."""
        self.watched: dict[str, Any] = {}
        """Node -> a callback(node, old, new) for the scheduler's join tallies."""
        self._dirty: dict[str, None] = {}
        self._flush_wanted = trio.Event()
        self._limiter = trio.CapacityLimiter(1)

    # --- changing states -------------------------------------------------------------
    def set(self, nid: str, state: str, *, output: Any = None, error: str | None = None, started: float | None = None, ended: float | None = None) -> None:
        """Record a node's new state (journaled); ``started`` and ``ended`` override when its
        work began and ended (a thread call is timed on its worker, not when trio collects it)."""
        states = self.states
        prev = states[nid]
        states[nid] = state
        if prev != state:
            hook = self.watched.get(nid)
            if hook is not None:
                hook(nid, prev, state)
        now = self.clock()
        t = self.times[nid]
        if state == _RUNNING:
            t[1] = now if started is None else started
        elif state in _ENDS:
            if started is not None:
                t[1] = started
            elif t[1] is None and state not in _NEVER_BEGAN:
                t[1] = now
            t[2] = now if ended is None else ended
        if state == _SUCCEEDED:
            self.outputs[nid] = output
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
        if prev != state:
            hook = self.watched.get(nid)
            if hook is not None:
                hook(nid, prev, state)

    def ready(self, nid: str) -> None:
        """The node could start now (it may still wait for a thread)."""
        self.times[nid][0] = self.clock()

    # --- the store -------------------------------------------------------------------
    async def db(self, fn: Callable | None, *args: Any, **kwargs: Any) -> Any:
        """Call ``fn`` on the store's one worker thread, after writing the pending node states."""
        batch = self._take_dirty()
        if fn is None and not batch:
            return None  # nothing to write: no thread hop
        try:
            return await trio.to_thread.run_sync(self._db_sync, batch, fn, args, kwargs, limiter=self._limiter)
        except trio.Cancelled:
            # Cancelled before the thread took it: the states are still owed to the store.
            self._dirty.update(dict.fromkeys(r.node_id for r in batch))
            raise

    def _db_sync(self, batch: list[NodeRecord], fn: Callable | None, args: tuple, kwargs: dict) -> Any:
        if batch:
            self.store.save_nodes(self.run_id, batch, owner=self.owner)
        return fn(*args, **kwargs) if fn is not None else None

    def _take_dirty(self) -> list[NodeRecord]:
        if not self._dirty:
            return []
        ids = list(self._dirty)
        self._dirty.clear()
        out = []
        for nid in ids:
            st = self.states[nid]
            ready, started, ended = self.times[nid]
            output = _json.encode(self.outputs[nid]) if st == _SUCCEEDED and nid in self.outputs else None
            out.append(NodeRecord(node_id=nid, state=st, output_json=output, error=self.errors.get(nid), started_at=started, ended_at=ended, ready_at=ready))
        return out

    def take_unsaved(self) -> list[NodeRecord]:
        """Node states not yet written; the caller must now write them (in its own transaction)."""
        return self._take_dirty()

    async def flusher(self) -> None:
        """Writes node states in batches while the run moves; cancel it when the drive ends."""
        while True:
            await self._flush_wanted.wait()
            await trio.sleep(FLUSH_EVERY_S)
            self._flush_wanted = trio.Event()
            if self._dirty:
                await self.db(None)

    # --- loading a run back from the store ---------------------------------------------
    def restore(self, nodes: dict[str, NodeRecord], effects: dict[str, Any]) -> None:
        """States as stored; an effect's own record is the truth about its step."""
        dec = msgspec.json.Decoder()
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
            self.times[nid] = [rec.ready_at, rec.started_at, rec.ended_at]
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
