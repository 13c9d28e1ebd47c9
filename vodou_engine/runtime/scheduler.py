"""The scheduler: walks a verified graph, starting every ready node at once.

It decides *what* runs and when; it performs nothing itself. Reads go to
:class:`calls.Tools`, questions and approvals to :class:`gates.Gates`,
effects to :class:`effects.Effects`, and every state change to the
:class:`journal.Journal`.

Every ready node starts at once in one nursery. MCP calls go through the
hub (many in flight per session); blocking work goes to real threads
(threads.py) and is abandoned, never waited for, when a quorum drops its
branch. Blocking built-ins have no task each: one collecting task finishes
them, so a thousand-wide fan-out costs the trio thread (which competes for
the GIL with every worker) as little as possible. A chain of MCP reads has
no task per step either: the read a finishing read makes ready runs next in
the same task, which is what a chain of calls costs a plain client. A quorum
join decides at its K-th success (or as soon as K is impossible) and drops
the rest: tasks are cancelled (a node inside a quorum's items runs in a cancel
scope of its own), thread calls abandoned, and a dropped branch's pending
question withdrawn. An effect already executing is shielded and finishes.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, TypeGuard

import msgspec
import trio

from ..cards import question_outputs
from ..compiler import template
from ..errors import LostRunError, ToolError, VodouError
from ..plan import ApprovalNode, JoinNode, LoopNode, QuestionNode, ToolNode, WriteNode
from ..policy import BUILTIN_SERVER
from ..states import ApprovalState, NodeState, RunState
from ..tools.results import blocks_of
from . import builtin, writer
from .calls import Tools
from .context import RunContext
from .effects import Effects
from .elicit import Elicitations
from .faults import crashpoint
from .gates import Gates
from .journal import Journal
from .loops import (
    TOP,
    Batch,
    LoopRun,
    Scope,
    copy_node,
    item_of,
    lookup,
    outer_of,
    templates_within,
    the_list,
)
from .threads import Blocking, Job

if TYPE_CHECKING:
    from ..tools.hub import Hub

# Steps that cannot wait (non-blocking built-ins) run in one shared task, at
# most this many in a row before it lets the other tasks in.
INLINE_BUDGET = 256
RETRY_PAUSE_S = 0.5
"""The first pause before a read step is tried again; it doubles each time, up to RETRY_PAUSE_MAX_S."""
RETRY_PAUSE_MAX_S = 30.0

PENDING, RUNNING, WAITING, SUCCEEDED = NodeState.PENDING, NodeState.RUNNING, NodeState.WAITING, NodeState.SUCCEEDED
FAILED, CANCELLED, SKIPPED, REJECTED, UNKNOWN = (
    NodeState.FAILED,
    NodeState.CANCELLED,
    NodeState.SKIPPED,
    NodeState.REJECTED,
    NodeState.UNKNOWN,
)
DONE_BAD = frozenset({FAILED, CANCELLED, SKIPPED, REJECTED})
TERMINAL = DONE_BAD | {SUCCEEDED, UNKNOWN}
STEP_ERRORS = (ToolError, template.MissingValue, VodouError)


class Scheduler:
    """Drives one run's graph until nothing more can run now. One per drive."""

    work: trio.Nursery
    """Where every node's task runs; opened by :meth:`drive`."""

    def __init__(
        self,
        ctx: RunContext,
        journal: Journal,
        *,
        hub: Hub | None = None,
        threads: Blocking,
        model: str | None = None,
        inputs: dict[str, Any] | None = None,
    ):
        self.ctx = ctx
        self.journal = journal
        self.states = journal.states
        self.index = ctx.index
        self.model = model
        self.inputs: dict[str, Any] = inputs or {}
        self.threads = threads
        self.tools = Tools(hub, threads)
        self.gates = Gates(ctx, journal, self.tools, self.render)
        self.effects = Effects(ctx, journal, self.tools, self.gates, self.render)
        self.elicit = Elicitations(ctx, journal, self.gates)
        self.effects.hooks = lambda node: self.elicit.hooks(node, effect=True)
        nodes = ctx.plan.nodes
        self.succ: dict[str, Any] = _followers(nodes)
        """Node -> the nodes that need it. A plan node's are a tuple, one shared by every node
        with the same followers (a together's branches all have just its join); a loop item's
        copy gets a list of its own (``_add_copy``)."""
        # Per join, how many of its items have succeeded / ended badly: kept up to
        # date through the journal's hook, so a join of N items costs O(1) per item.
        self.joins_of: dict[str, Any] = _joins_of(nodes)
        """Node -> the joins it is an item's exit of, shared as ``succ``'s are; a list for a copy."""
        count = self._count  # one bound method for every watched node, not one each
        journal.watched.update(dict.fromkeys(self.joins_of, count))
        self.tally: dict[str, list[int]] = {}
        self.absorbed: set[str] = set()
        """Nodes of items a quorum dropped: they never run (again)."""
        self.droppable: set[str] = {m for n in nodes if isinstance(n, JoinNode) for item in n.members for m in item}
        """Nodes inside a quorum's items: the only ones a drop cancels while they run, so the
        only ones that need a cancel scope of their own."""
        self.templates: set[str] = {m for n in nodes if isinstance(n, LoopNode) for m in n.body}
        """A loop's body nodes: each item runs copies of them (loops.py), never the nodes themselves;
        when the loop ends, each holds the list of its copies' outputs."""
        self.within = templates_within(ctx.plan) if self.templates else {}
        self.scope: dict[str, Scope] = {}
        """A copy's item: its suffix and the loop variables it sees."""
        self.loop_runs: dict[str, LoopRun] = {}
        self.exit_of: dict[str, tuple[LoopRun, int]] = {}
        self.loop_of_item: dict[str, LoopRun] = {}
        """An item's suffix (``[2]``) -> the loop (copy) it is an item of."""
        self.batches: dict[str, Batch] = {}
        """A loop's effect asked as one question: the template gate id -> the items waiting at it."""
        """The copy of a loop's exit node, for each item still running: which loop, which item."""
        self.ready: deque[ToolNode] = deque()
        self.draining = False
        self.scopes: dict[str, trio.CancelScope] = {}
        self.jobs: dict[str, Job] = {}  # blocking built-ins on threads, by node id
        self.collecting = False
        self.handing = False
        """True while a node's own task starts the nodes it made ready (:meth:`_after_in_task`)."""
        self.handed: ToolNode | None = None
        """The hub read that task runs next, in itself, instead of a task of its own."""

    # --- tallies ---------------------------------------------------------------------
    def _count(self, nid: str, prev: str, state: str) -> None:
        for st, step in ((prev, -1), (state, 1)):
            slot = 0 if st == SUCCEEDED else 1 if st in DONE_BAD else None
            if slot is not None:
                for j in self.joins_of[nid]:
                    self.tally[j][slot] += step

    def _recount(self) -> None:
        """Tallies from scratch: states may have been set directly (restore, wake-up)."""
        self.tally = {}
        states = self.states
        for n in self.ctx.plan.nodes:
            if isinstance(n, JoinNode):
                item_states = [states[x] for x in n.needs]
                self.tally[n.id] = [item_states.count(SUCCEEDED), sum(1 for st in item_states if st in DONE_BAD)]

    def restored(self) -> None:
        """After the journal was loaded from the store: joins decided before keep their verdict."""
        for n in self.ctx.plan.nodes:
            if isinstance(n, JoinNode) and self.states[n.id] == SUCCEEDED:
                for i, item in enumerate(n.members):
                    if self.states.get(n.needs[i]) != SUCCEEDED:
                        self.absorbed.update(item)

    def wake(self, node_ids: list[str]) -> None:
        """Decisions arrived for these waiting gates: they will be looked at again."""
        self.gates.forget()
        self.elicit.forget()
        for nid in node_ids:
            self.journal.mark(nid, PENDING)

    # --- the walk --------------------------------------------------------------------
    async def drive(self) -> RunState:
        """Run every node that can run; return the verdict (a RunState).

        The last node states are left unsaved on purpose: the caller writes them
        (``journal.write_unsaved``) in the same transaction that parks or ends the
        run, one thread hop instead of two.
        """
        self._recount()
        async with trio.open_nursery() as outer:
            outer.start_soon(self.journal.flusher)
            async with trio.open_nursery() as work:
                self.work = work
                for n in self.ctx.plan.nodes:
                    if self.states[n.id] == PENDING:
                        self._try_start(n.id)
            outer.cancel_scope.cancel()
        return self.verdict()

    def verdict(self) -> RunState:
        states = self.states
        values = states.values()
        if REJECTED in values:
            return RunState.DECLINED
        if WAITING in values or UNKNOWN in values:
            return RunState.PARKED
        absorbed = self.absorbed
        for nid, s in states.items():
            if s != SUCCEEDED and nid not in absorbed:
                return RunState.FAILED
        return RunState.SUCCEEDED

    def _try_start(self, nid: str) -> None:
        states = self.states
        if states[nid] != PENDING or nid in self.templates:
            return
        node = self.index[nid]
        if isinstance(node, JoinNode):
            self._eval_join(node)
            return
        met = True
        for need in node.needs:  # one pass: any need ended badly skips it; all succeeded starts it
            st = states[need]
            if st in DONE_BAD:
                self.journal.set(nid, SKIPPED, error="an earlier step did not succeed")
                self._after(nid)
                return
            if st != SUCCEEDED:
                met = False
        if not met:
            return
        if isinstance(node, LoopNode):
            self._open_loop(node)
            return
        self.journal.mark(nid, RUNNING)
        self.journal.ready(nid)
        if isinstance(node, ToolNode) and (blocks := _builtin_read(node)) is not None:
            if blocks:
                self._submit(node)
            else:
                # started like any other ready node, but by one shared task
                self.ready.append(node)
                if not self.draining:
                    self.draining = True
                    self.work.start_soon(self._drain)
        elif self.handing and self.handed is None and _hub_read(node):
            self.handed = node  # the task that made it ready runs it next (_run)
        else:
            self.work.start_soon(self._run, node)

    async def _drain(self) -> None:
        """Run queued inline steps in order, in this one task: their successors queue up
        behind them (a loop, no task and no thread per step), and every INLINE_BUDGET
        steps it lets the other tasks in."""
        try:
            while True:
                for _ in range(INLINE_BUDGET):
                    if not self.ready:
                        return
                    self._run_inline(self.ready.popleft())
                await trio.lowlevel.checkpoint()
        finally:
            self.draining = False

    def _run_inline(self, node: ToolNode) -> None:
        nid = node.id
        if nid in self.absorbed:  # dropped by a quorum while queued
            self.journal.set(nid, CANCELLED, error="dropped by a quorum")
        else:
            journal = self.journal
            journal.set(nid, RUNNING)
            try:  # as _finish_read, without a closure per step
                out = builtin.TOOLS[node.tool][0](self._render_for(nid, node.args))
                crashpoint("reads")
                journal.set(nid, SUCCEEDED, output=out)
            except STEP_ERRORS as exc:
                journal.set(nid, FAILED, error=str(exc))
        self._after(nid)

    def _finish_read(
        self, nid: str, result: Callable[[], Any], started: float | None = None, ended: float | None = None
    ) -> None:
        """Record a read step's result, or the error ``result()`` raises for it."""
        try:
            out = result()
            crashpoint("reads")
            self.journal.set(nid, SUCCEEDED, output=out, started=started, ended=ended)
        except STEP_ERRORS as exc:
            self.journal.set(nid, FAILED, error=str(exc), started=started, ended=ended)

    def _submit(self, node: ToolNode) -> None:
        """A blocking built-in read goes to a worker thread with no task of its own:
        one collecting task finishes every such step (_collect), and a quorum drop
        abandons the call (_drop_items) instead of cancelling a scope."""
        nid = node.id
        try:
            args = self._render_for(nid, node.args)
        except STEP_ERRORS as exc:
            self.journal.set(nid, FAILED, error=str(exc))
            self._after(nid)
            return
        self.jobs[nid] = self.threads.submit(builtin.TOOLS[node.tool][0], (args,), nid)
        if not self.collecting:
            self.collecting = True
            self.work.start_soon(self._collect)

    async def _collect(self) -> None:
        try:
            while self.jobs:
                for job in await self.threads.collect():
                    nid = job.tag
                    if self.jobs.pop(nid, None) is None:
                        continue  # dropped by a quorum decided earlier in this batch
                    self._finish_read(nid, job.result.unwrap, started=job.started, ended=job.ended)
                    self._after(nid)
        except BaseException:
            # The run is going down (cancelled, or a step raised): nothing waits for
            # the calls still out, so none that has not begun may begin.
            for job in self.jobs.values():
                self.threads.abandon(job)
            self.jobs.clear()
            raise
        finally:
            self.collecting = False

    def _after(self, nid: str) -> None:
        for s in self.succ[nid]:
            self._try_start(s)
        if nid in self.exit_of and self.states[nid] in TERMINAL:  # an item asked about again is not done
            self._item_done(nid)

    # --- loops ---------------------------------------------------------------------------
    def _open_loop(self, node: LoopNode) -> None:
        """The list is known: check it against the loop's bounds (nothing runs if it fails
        them), make every item's copies of the body, and start the first items."""
        nid = node.id
        scope = self.scope.get(nid, TOP)
        self.journal.set(nid, RUNNING)
        try:
            over = node.over if isinstance(node.over, str) else {"": node.over}
            value = self._render_in(scope, over)
            items = the_list(node, value if isinstance(node.over, str) else value[""])
            need = len(items) if node.need is None and node.need_percent is None else 0
            if node.need is not None:
                need = node.need
                if items and need > len(items):
                    raise ToolError(
                        f"`for each {node.var} in {node.over_text}` needs {need} items to succeed, "
                        f"but the list has {len(items)}; no item ran"
                    )
            elif node.need_percent is not None:
                need = max(1, -(-node.need_percent * len(items) // 100)) if items else 0
        except STEP_ERRORS as exc:
            self._end_loop_templates(node, scope, None)
            self.journal.set(nid, FAILED, error=str(exc))
            self._after(nid)
            return
        lr = LoopRun(node, scope, need=need if items else 0, limit=node.at_most or self.threads.limit)
        self.loop_runs[nid] = lr
        body = set(node.body)
        index = self.index  # the templates, under their own ids
        quorum = lr.need < len(items)
        for i, item in enumerate(items):
            suffix = f"{scope.suffix}[{i}]"
            item_scope = Scope(suffix, {**scope.binds, node.var: item})
            ids = []
            for t in node.body:
                copy = copy_node(index[t], suffix, body)
                self._add_copy(copy, item_scope, quorum)
                ids.append(copy.id)
            lr.items.append(item_scope)
            lr.members.append(ids)
            self.loop_of_item[suffix] = lr
            exit_id = node.exit + suffix
            lr.exits.append(exit_id)
            self.exit_of[exit_id] = (lr, i)
        if not items:
            self._close_loop(lr)
            return
        self._more(lr)

    def _add_copy(self, copy: Any, scope: Scope, droppable: bool) -> None:
        cid = copy.id
        self.index[cid] = copy
        self.succ[cid] = []
        for need in copy.needs:
            self.succ[need].append(cid)
        self.journal.add(cid)
        self.journal.restore_one(cid)  # as a drive before left it, if one did
        if isinstance(copy, LoopNode) and self.states[cid] == SUCCEEDED:
            # a nested loop that ended in a drive before: its steps' per-item lists (`ok[0]`) too,
            # for the enclosing loop's lists when it ends in this drive
            for t in self.within.get(cid[: len(cid) - len(scope.suffix)], ()):
                if t + scope.suffix not in self.states:
                    self.journal.add(t + scope.suffix)
                    self.journal.restore_one(t + scope.suffix)
        self.scope[cid] = scope
        if droppable:
            self.droppable.add(cid)
        if isinstance(copy, JoinNode):
            for need in copy.needs:
                self.joins_of.setdefault(need, []).append(cid)
                self.journal.watched[need] = self._count
            self.tally[cid] = [0, 0]
            self.droppable.update(m for item in copy.members for m in item)

    def _more(self, lr: LoopRun) -> None:
        """Start items, in order, while fewer than the loop's limit are running. An item that
        ends at once starts the next from the same loop here, not by recursion."""
        if lr.filling:
            return
        lr.filling = True
        try:
            while not lr.done and lr.active < lr.limit and lr.started < len(lr.items):
                i = lr.started
                lr.started += 1
                lr.active += 1
                members = lr.members[i]
                # restored from a drive before (journal.restore_one): what follows them may start
                for cid in [c for c in members if self.states[c] in TERMINAL]:
                    if self.states[cid] == SUCCEEDED and isinstance(self.index[cid], ApprovalNode):
                        lr.committed = True  # its batch was approved in a drive before
                    self._after(cid)
                for cid in members:
                    if self.states[cid] == PENDING and not self.index[cid].needs:
                        self._try_start(cid)
        finally:
            lr.filling = False

    def _item_done(self, exit_id: str) -> None:
        lr, i = self.exit_of.pop(exit_id)
        if lr.done:
            return
        lr.active -= 1
        if i in lr.declined:
            # declined at its batch's card: it never runs, and the loop goes on without it
            self.absorbed.update(lr.members[i])
            lr.need = min(lr.need, len(lr.items) - len(lr.declined))
        elif self.states[exit_id] == SUCCEEDED:
            lr.ok += 1
        else:
            lr.bad += 1
            if self.states[exit_id] == UNKNOWN:
                lr.committed = True  # an effect in doubt: the others go on, and a person settles it
        for key, batch in self.batches.items():
            if batch.loop is lr:
                self._batch_ready(key, batch)
        n = len(lr.items) - len(lr.declined)
        if lr.ok >= lr.need or (lr.bad > n - lr.need and not lr.committed) or lr.ok + lr.bad == n:
            self._close_loop(lr)
        else:
            self._more(lr)

    def _close_loop(self, lr: LoopRun) -> None:
        """The loop is decided: items not yet succeeded are dropped (an executing effect is
        shielded), each body step's name gets the list of its per-item outputs, then what
        follows the loop may start."""
        lr.done = True
        node = lr.node
        nid = node.id
        states = self.states
        n = len(lr.items)
        success = lr.ok >= lr.need
        doubt = [i for i in range(n) if states[lr.exits[i]] == UNKNOWN]
        if not success and doubt and lr.ok + len(doubt) >= lr.need:
            # Whether the loop succeeded hangs on effects in doubt: it waits, undecided, for a
            # person to settle them (`recipe reconcile RUN reply[N]`); what follows it waits too,
            # and the next drive, finding them settled, decides the loop.
            for exit_id in lr.exits:
                self.exit_of.pop(exit_id, None)
            steps = ", ".join(lr.exits[i] for i in doubt)
            self.journal.set(
                nid,
                UNKNOWN,
                error=f"item{'s' if len(doubt) > 1 else ''} {', '.join(map(str, doubt))}: the effect may or may not "
                f"have happened ({steps}); "
                "settle it with `recipe reconcile RUN STEP --executed|--not-executed`, then resume",
            )
            return
        unfinished = [lr.members[i] for i in range(n) if states[lr.exits[i]] != SUCCEEDED]
        why = f"dropped by the quorum of {nid}" if success else f"{nid} did not succeed"
        for item in unfinished:
            self.absorbed.update(item)
        nested = self.within.get(nid[: len(nid) - len(lr.scope.suffix)] if lr.scope.suffix else nid, ())
        for i in range(n):
            if states[lr.exits[i]] != SUCCEEDED:  # a nested loop's list for an item that has none
                self.absorbed.update(t + lr.items[i].suffix for t in nested)
        dropped = self._drop_members(unfinished, why)
        for exit_id in lr.exits:
            self.exit_of.pop(exit_id, None)
        self._end_loop_templates(node, lr.scope, lr.items if success else None)
        if success:
            self.journal.set(
                nid,
                SUCCEEDED,
                output={
                    "items": n,
                    "succeeded": [i for i in range(n) if states[lr.exits[i]] == SUCCEEDED],
                    "not_succeeded": {
                        str(i): str(states[lr.exits[i]]) for i in range(n) if states[lr.exits[i]] != SUCCEEDED
                    },
                },
            )
        else:
            self.journal.set(nid, FAILED, error=f"needs {lr.need} of {n} items, but {lr.bad} did not succeed")
        self._after(nid)
        for m in dropped:
            self._after(m)

    def _end_loop_templates(self, node: LoopNode, scope: Scope, items: list[Scope] | None) -> None:
        """Each step inside the loop (nested loops' too) as seen from the loop's own place:
        the list of its per-item values (None for an item without one); skipped if the loop failed."""
        template_id = node.id[: len(node.id) - len(scope.suffix)] if scope.suffix else node.id
        outputs = self.journal.outputs
        states = self.states
        for t in self.within.get(template_id, ()):
            agg = t + scope.suffix
            if agg not in states:
                self.journal.add(agg)
            if items is None:
                self.journal.set(agg, SKIPPED, error=f"its loop ({template_id}) did not succeed")
            else:
                values = [
                    outputs.get(t + it.suffix) if states.get(t + it.suffix) == SUCCEEDED else None for it in items
                ]
                self.journal.set(agg, SUCCEEDED, output=values)

    # --- one question for a loop's effect ------------------------------------------------
    def _batch_of(self, copy_id: str) -> tuple[ToolNode, str, int]:
        """A loop item's copy of an effect: its template step, the gate its batch is asked
        under (the template gate; in a loop inside another, its outer item's copy of it:
        ``approve:send[0]``), and the item's index."""
        scope = self.scope[copy_id]
        template = self.index[copy_id[: len(copy_id) - len(scope.suffix)]]
        assert isinstance(template, ToolNode), "only a tool step is an effect"
        return template, template.needs[0] + outer_of(scope.suffix), item_of(scope.suffix)

    async def _batch_gate(self, gate: ApprovalNode | QuestionNode, again: bool = False) -> None:
        """An item reaches its copy of the gate: with the batch decided, it passes if its payload
        is among those approved (declined with the batch if rejected); undecided, it waits, and
        when every item of the loop has reached the gate or ended, one question is asked for all.
        A question of its own (``ask me`` in a loop) is asked the same way, each item's entry
        holding what it asks about for that item.
        ``again``: the item's ``check:`` read changed after its approval; it is asked about again."""
        gid = gate.id
        scope = self.scope[gid]
        template_id = gid[: len(gid) - len(scope.suffix)]
        key = template_id + outer_of(scope.suffix)  # one question per loop (copy): its items share it
        item = item_of(scope.suffix)
        step: ToolNode | None = None
        if isinstance(gate, ApprovalNode):
            found = self.index[gate.step]
            assert isinstance(found, ToolNode), "an approval guards a tool step"
            step = found
            payload = self._render_for(step.id, step.args)
            fp = self.gates.item_fingerprint(step, payload)
        else:
            payload = self._question_payload(gate, template_id, scope)
            fp = self.gates.question_item_fingerprint(gate, payload)
        latest = None if again else await self.gates.latest_item(key, item)
        journal = self.journal
        if latest is not None and latest.state == ApprovalState.APPROVED:
            # decided: every approved item runs, whatever happens to the others
            self.loop_of_item[scope.suffix].committed = True
            entries = msgspec.json.decode(latest.payload_json).get("items", [])
            chosen = msgspec.json.decode(latest.items_json) if latest.items_json is not None else None
            if chosen is not None and item not in chosen:
                self.loop_of_item[scope.suffix].declined.add(item)
                journal.set(
                    gid,
                    SKIPPED,
                    error=f"declined: {latest.decided_by} approved items {', '.join(map(str, chosen))} of {latest.id}, not this one",
                )
            elif any(e.get("item") == item and e.get("fingerprint") == fp for e in entries):
                journal.set(gid, SUCCEEDED, output={"approval": latest.id, "item": item, "fingerprint": fp})
            else:
                journal.set(
                    gid,
                    FAILED,
                    error=f"item {item}'s payload ({fp}) is not among those approved in {latest.id}; it did not run",
                )
            return
        if latest is not None and latest.state == ApprovalState.REJECTED:
            why = f"rejected by {latest.decided_by}" + (f": {latest.reason}" if latest.reason else "")
            journal.set(gid, REJECTED, error=why)
            return
        if latest is not None and latest.state == ApprovalState.PENDING:
            if latest.expires_at is None or latest.expires_at > self.ctx.clock():
                journal.set(gid, WAITING)
                return
            self.gates.forget()
            await journal.db(journal.store.decide, latest.id, ApprovalState.EXPIRED, by="clock")
        entry: dict[str, Any] = {"item": item, "payload": payload, "fingerprint": fp}
        if step is None:
            pass  # a question of its own: nothing to check or read
        else:
            # an item whose payload the server would refuse is never on the card: its gate fails, the others go on
            await self.tools.check_payload(step.id, step.server, step.tool, payload)
        if step is not None and step.preview is not None:  # read per item, shown in the item's row
            preview_args = self._render_for(step.id, step.preview.args)
            entry["preview"] = await self.tools.read(step.preview.server, step.preview.tool, preview_args)
        if step is not None and step.check is not None:  # read per item, read again right before the effect
            check_args = self._render_for(step.id, step.check.args)
            entry["check"] = {
                "args": check_args,
                "result": await self.tools.read(step.check.server, step.check.tool, check_args),
            }
        lr = self.loop_of_item[scope.suffix]
        batch = self.batches.get(key)
        if batch is None or batch.asked:  # a batch asked already: this item is asked about on a new card
            batch = self.batches[key] = Batch(lr, template_id, outer_of(scope.suffix))
        batch.waiting[item] = entry
        journal.set(gid, WAITING)
        lr.active -= 1  # waiting for a person: its place goes to the next item
        self._more(lr)
        self._batch_ready(key, batch)

    async def _ask_item_again(self, node: ToolNode, gate_id: str) -> None:
        """An item's ``check:`` read changed after its batch was approved: that item alone goes
        back to its gate and is asked about again, on a card of its own once the loop's other
        items have ended; the others' approval stands."""
        suffix = self.scope[node.id].suffix
        gate = self.index[gate_id + suffix]
        assert isinstance(gate, ApprovalNode), "an item's effect follows its copy of the gate"
        self.journal.mark(node.id, PENDING)
        self.journal.mark(gate.id, RUNNING)
        await self._batch_gate(gate, again=True)
        self.journal.set(node.id, PENDING)

    def _batch_ready(self, key: str, batch: Batch) -> None:
        """Ask the batch once every item of its loop has reached the gate or ended."""
        lr = batch.loop
        if batch.asked or not batch.waiting:
            return
        states = self.states
        for i in range(len(lr.items)):
            if i not in batch.waiting and states[lr.exits[i]] not in TERMINAL:
                return
        batch.asked = True
        gate = self.index[batch.gate]
        items = [batch.waiting[i] for i in sorted(batch.waiting)]
        if isinstance(gate, QuestionNode):
            self.work.start_soon(self.gates.ask_batch, gate, None, items, batch.outer)
            return
        assert isinstance(gate, ApprovalNode), "a batch is asked under its template gate"
        step = self.index[gate.step]
        assert isinstance(step, ToolNode), "an approval guards a tool step"
        self.work.start_soon(self.gates.ask_batch, gate, step, items, batch.outer)

    def _question_payload(self, copy: QuestionNode, template_id: str, scope: Scope) -> dict[str, Any]:
        """What a question in a loop asks about for one item: the question, the item (each
        enclosing loop's variable) and the outputs it follows or names, the item's own."""
        template = self.index[template_id]
        assert isinstance(template, QuestionNode), "a question's copy has a question as template"
        outputs = self.journal.outputs
        seen: dict[str, Any] = {}
        for name in question_outputs(self.ctx.plan, template, _Everything()):
            found, value = lookup(name, scope, outputs)
            if found:
                seen[name] = value
            elif name in outputs:
                seen[name] = outputs[name]
        return {"question": template.text, "outputs": {**scope.binds, **seen}}

    def _render_in(self, scope: Scope, args: Any) -> Any:
        outputs = self.journal.outputs

        def resolve(name: str) -> Any:
            found, value = lookup(name, scope, outputs)
            return value if found else self._resolve(name)

        return template.render(args, resolve)

    def _render_for(self, nid: str, args: dict[str, Any]) -> Any:
        """A node's arguments, rendered where it stands: a loop's copy sees its item."""
        if not args:
            return {}  # what rendering no arguments gives, without the walk
        scope = self.scope.get(nid)
        return self.render(args) if scope is None else self._render_in(scope, args)

    def _after_in_task(self, nid: str) -> ToolNode | None:
        """:meth:`_after`, from ``nid``'s own task: the first hub read it makes ready is handed
        back, for this task to run next (the rest start as before)."""
        self.handing = True
        try:
            self._after(nid)
        finally:
            self.handing = False
            handed, self.handed = self.handed, None
        return handed

    # --- quorum joins ----------------------------------------------------------------
    def _eval_join(self, j: JoinNode) -> None:
        ok, bad = self.tally[j.id]
        states = self.states
        if ok >= j.need:
            results = {
                n: (
                    SUCCEEDED
                    if states[n] == SUCCEEDED
                    else CANCELLED
                    if states[n] in (PENDING, RUNNING, WAITING)
                    else states[n]
                )
                for n in j.needs
            }
            dropped = self._drop_items(j)
            crashpoint("quorum")
            self.journal.set(
                j.id,
                SUCCEEDED,
                output={
                    "succeeded": [n for n, s in results.items() if s == SUCCEEDED],
                    "dropped": {n: str(s) for n, s in results.items() if s != SUCCEEDED},
                },
            )
            self._after(j.id)
        elif bad > j.of - j.need:
            dropped = self._drop_items(j)
            self.journal.set(j.id, FAILED, error=f"needs {j.need} of {j.of}, but {bad} item(s) did not succeed")
            self._after(j.id)
        else:
            return
        # As a cancelled task would, once the join is decided.
        for m in dropped:
            self._after(m)

    def _drop_items(self, j: JoinNode) -> list[str]:
        """Cancel every item that has not succeeded; an executing effect is shielded.
        Returns the abandoned thread calls and cancelled gates, whose successors are
        still to be told; a dropped gate's pending question is withdrawn."""
        states = self.states
        items = [item for i, item in enumerate(j.members) if states[j.needs[i]] != SUCCEEDED]
        for item in items:
            self.absorbed.update(item)
        return self._drop_members(items, f"dropped by the quorum of {j.id}")

    def _drop_members(self, items: list[list[str]], why: str) -> list[str]:
        dropped: list[str] = []
        withdrawn: list[str] = []
        states = self.states
        journal = self.journal
        for item in items:
            for m in item:
                st = states[m]
                lr = self.loop_runs.get(m)
                if lr is not None and st == RUNNING and not lr.done:
                    # a loop inside a dropped item: its items go with it
                    lr.done = True
                    inner = [lr.members[i] for i in range(len(lr.items)) if states[lr.exits[i]] != SUCCEEDED]
                    for sub in inner:
                        self.absorbed.update(sub)
                    dropped.extend(self._drop_members(inner, why))
                    journal.set(m, CANCELLED, error=why)
                    dropped.append(m)
                    continue
                if st == RUNNING:
                    job = self.jobs.pop(m, None)
                    if job is not None:
                        self.threads.abandon(job)
                        journal.set(m, CANCELLED, error=why, started=job.started)  # its work counts until the drop
                        dropped.append(m)
                        continue
                    scope = self.scopes.get(m)
                    if scope is not None:
                        scope.cancel()
                elif st == WAITING:
                    journal.set(m, CANCELLED, error=why)
                    withdrawn.append(m)
                    dropped.append(m)
                elif st == PENDING:
                    journal.set(m, CANCELLED, error=why)
        if dropped and not self.jobs:
            self.threads.interrupt()  # the collecting task has nothing left to wait for
        if withdrawn:
            self.work.start_soon(self.gates.withdraw, withdrawn, f"its branch was {why}")
        return dropped

    # --- a node in a task of its own (a chain of hub reads shares one) ----------------------
    async def _run(self, node: ToolNode | WriteNode | ApprovalNode | QuestionNode) -> None:
        """A node's task. A chain of hub reads goes on in it, one read after another: a step
        costs no task of its own (spawn, first pass of the run loop, exit), and each read
        still waits for its reply, so the other tasks get their turn as before."""
        next_node: ToolNode | WriteNode | ApprovalNode | QuestionNode | None = node
        while next_node is not None:
            next_node = await self._run_one(next_node)

    async def _run_one(self, node: ToolNode | WriteNode | ApprovalNode | QuestionNode) -> ToolNode | None:
        """Run one node, in a cancel scope of its own when a quorum may drop it; the read
        this task is to run next, if ending it made one ready."""
        nid = node.id
        if nid in self.absorbed:
            # Dropped by a quorum decided before this task took its first step,
            # when it had no cancel scope for the drop to cancel: it must not begin.
            self.journal.set(nid, CANCELLED, error="dropped by a quorum")
            return self._after_in_task(nid)
        self.journal.set(nid, RUNNING)
        if nid not in self.droppable:
            await self._step(node)
            return self._after_in_task(nid)
        with trio.CancelScope() as scope:
            self.scopes[nid] = scope
            await self._step(node)
        self.scopes.pop(nid, None)
        if scope.cancelled_caught and self.states[nid] == RUNNING:
            self.journal.set(nid, CANCELLED, error="dropped by a quorum")
            if isinstance(node, (ApprovalNode, QuestionNode)):
                # Dropped while asking: its question may already be stored; it must not stay open.
                self.work.start_soon(self.gates.withdraw, [nid], "its branch was dropped by a quorum")
        return self._after_in_task(nid)

    async def _step(self, node: ToolNode | WriteNode | ApprovalNode | QuestionNode) -> None:
        """A node's work, by kind; a step's own failure fails the step, nothing more."""
        journal = self.journal
        try:
            if isinstance(node, (ApprovalNode, QuestionNode)) and node.id in self.scope:
                await self._batch_gate(node)
            elif isinstance(node, ToolNode):
                if node.effectful and not node.without_asking and node.id in self.scope:
                    template, gate_id, item = self._batch_of(node.id)
                    if await self.effects.run_item(node, template, gate_id, item) == "stale":
                        await self._ask_item_again(node, gate_id)
                elif node.effectful and not node.without_asking:
                    await self.effects.run(node)
                elif node.effectful:
                    await self.effects.run_unasked(node)
                else:
                    await self._hub_or_builtin_read(node)
            elif isinstance(node, WriteNode):
                await self._write(node)
            elif isinstance(node, (ApprovalNode, QuestionNode)):
                await self.gates.run(node)
            else:  # pragma: no cover - joins never run as tasks
                raise AssertionError(node)
        except LostRunError:
            raise  # not this step's failure: the whole drive must stop
        except STEP_ERRORS as exc:
            journal.set(node.id, FAILED, error=str(exc))

    async def _hub_or_builtin_read(self, node: ToolNode) -> None:
        """A read step; one whose server asked a question nobody has answered yet parks with it
        (``runtime/elicit.py``), whatever the call then answered."""
        elicit = self.elicit
        if node.server != BUILTIN_SERVER and await elicit.still_waiting(node):
            return
        try:
            out, content = await self._read(node)
        except STEP_ERRORS:
            question = elicit.asked.pop(node.id, None)
            if question is None:
                raise
            await elicit.park(node, question)
            return
        question = elicit.asked.pop(node.id, None)
        if question is not None:
            await elicit.park(node, question)
            return
        crashpoint("reads")
        self.journal.set(node.id, SUCCEEDED, output=out, content=content)

    async def _read(self, node: ToolNode) -> tuple[Any, list[Any] | None]:
        """A read step: its own timeout, and its retries with a pause that doubles (an
        effect never comes here: it is never tried again by itself)."""
        args = self._render_for(node.id, node.args)
        pause = RETRY_PAUSE_S
        for attempt in range(node.retries + 1):
            try:
                return await self.tools.read_whole(
                    node.server, node.tool, args, timeout=node.timeout_s, hooks=self.elicit.hooks(node)
                )
            except ToolError as exc:
                if attempt == node.retries or node.id in self.elicit.asked:
                    if node.retries:
                        exc.message = f"{exc.message} (tried {node.retries + 1} times)"
                    raise
                await trio.sleep(pause)
                pause = min(pause * 2, RETRY_PAUSE_MAX_S)
        raise AssertionError("unreachable")  # pragma: no cover

    def _resolve(self, name: str) -> Any:
        outputs = self.journal.outputs
        if name in outputs:
            return outputs[name]
        if name in self.inputs:
            return self.inputs[name]
        raise template.MissingValue(f"{{{name}}} has no value")

    def _content(self, name: str) -> list[Any] | None:
        """A tool step's content blocks, for ``{step.content}``: as kept, or the one text
        block its value gives back (``blocks_of``); None for anything else (an input, a
        `write`, a built-in)."""
        kept = self.journal.contents.get(name)
        if kept is not None:
            return kept
        node = self.ctx.index.get(name)
        if isinstance(node, ToolNode) and node.server != BUILTIN_SERVER and name in self.journal.outputs:
            return blocks_of(self.journal.outputs[name])
        return None

    def render(self, args: dict[str, Any]) -> Any:
        return template.render(args, self._resolve, self._content)

    async def _write(self, node: WriteNode) -> None:
        present = {}
        states = self.states
        scope = self.scope.get(node.id)
        for n in node.inputs:
            if scope is not None:
                found, value = lookup(n, scope, self.journal.outputs)
                if found:
                    present[n] = value
                    continue
            if states.get(n) == SUCCEEDED:
                present[n] = self.journal.outputs[n]
            elif n not in states and n in self.inputs:
                present[n] = self.inputs[n]
        missing = [n for n in node.inputs if n not in present]
        if self.model:
            text = await self.threads.run(writer.with_model, self.model, node.prompt, present, missing)
        else:
            text = writer.offline(node.prompt, present, missing)
        self.journal.set(node.id, SUCCEEDED, output=text)


class _Everything(dict[str, Any]):
    """Every name present (its value None): ``question_outputs`` then says which names a
    question asks about, whatever each one's value is for the item."""

    def __contains__(self, key: object) -> bool:
        return True

    def __getitem__(self, key: str) -> Any:
        return None


def _hub_read(node: ToolNode | WriteNode | ApprovalNode | QuestionNode) -> TypeGuard[ToolNode]:
    """A read over the hub: it always waits for its reply (or fails its step, and whatever
    follows it is skipped), so a task that runs a chain of them still lets the others in."""
    return isinstance(node, ToolNode) and node.server != BUILTIN_SERVER and not node.effectful


def _builtin_read(node: ToolNode) -> bool | None:
    """For a read-only built-in, whether it blocks: sleep goes to a worker thread
    (and no task of its own), noop and echo run inline (nothing to wait for).
    None for every other node: it gets a task."""
    if node.server == BUILTIN_SERVER and not node.effectful and not (node.timeout_s or node.retries):
        return builtin.TOOLS[node.tool][1]
    return None


def _followers(nodes: list[Any]) -> dict[str, Any]:
    """Node id -> the ids of the nodes that need it, as tuples: equal ones are one object, so
    a together of N branches keeps one ``(join,)`` instead of N lists (and makes none)."""
    succ: dict[str, Any] = dict.fromkeys([n.id for n in nodes], ())
    _gather(succ, ((need, n.id) for n in nodes for need in n.needs))
    return succ


def _joins_of(nodes: list[Any]) -> dict[str, Any]:
    """Node id -> the joins whose items it ends (only nodes that end one), as shared tuples."""
    joins: dict[str, Any] = {}
    _gather(joins, ((need, n.id) for n in nodes if isinstance(n, JoinNode) for need in n.needs))
    return joins


def _gather(into: dict[str, Any], pairs: Iterator[tuple[str, str]]) -> None:
    """``into[key]`` += ``(value,)`` for each pair, in order: a key's first value is a one-item
    tuple shared by every key with that value; only a key with more gets a list, made a
    (shared) tuple at the end."""
    single: dict[str, tuple[str]] = {}
    more: dict[str, list[str]] = {}
    for key, value in pairs:
        have = into.get(key)
        if not have:
            one = single.get(value)
            if one is None:
                one = single[value] = (value,)
            into[key] = one
        elif key in more:
            more[key].append(value)
        else:
            more[key] = [*have, value]
    seen: dict[tuple[str, ...], tuple[str, ...]] = {}
    for key, values in more.items():
        t = tuple(values)
        into[key] = seen.setdefault(t, t)
