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
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeGuard

import trio

from ..compiler import template
from ..errors import LostRunError, ToolError
from ..plan import ApprovalNode, JoinNode, LoopNode, QuestionNode, ToolNode, WriteNode
from ..policy import BUILTIN_SERVER
from ..states import RunState
from ..tools.results import blocks_of
from . import builtin, writer
from .calls import Tools
from .context import RunContext
from .effects import Effects
from .elicit import Elicitations
from .faults import crashpoint
from .followers import followers, joins_of
from .gates import Gates
from .journal import Journal
from .loop_walk import LoopWalk
from .loops import (
    Batch,
    LoopRun,
    Scope,
    batch_key,
    lookup,
    templates_within,
)
from .threads import Blocking, Job
from .walk_states import (
    CANCELLED,
    DONE_BAD,
    FAILED,
    PENDING,
    REJECTED,
    RUNNING,
    SKIPPED,
    STEP_ERRORS,
    SUCCEEDED,
    TERMINAL,
    UNKNOWN,
    WAITING,
)

if TYPE_CHECKING:
    from ..tools.hub import Hub

# Steps that cannot wait (non-blocking built-ins) run in one shared task, at
# most this many in a row before it lets the other tasks in.
INLINE_BUDGET = 256
RETRY_PAUSE_S = 0.5
"""The first pause before a read step is tried again; it doubles each time, up to RETRY_PAUSE_MAX_S."""
RETRY_PAUSE_MAX_S = 30.0


class Scheduler(LoopWalk):
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
        at_once: int | None = None,
    ):
        self.ctx = ctx
        self.journal = journal
        self.states = journal.states
        self.index = ctx.index
        self.model = model
        self.inputs: dict[str, Any] = inputs or {}
        self.threads = threads
        self.at_once = at_once or threads.limit
        """A loop's items at once when it sets no ``at most``."""
        self.tools = Tools(hub, threads)
        self.gates = Gates(ctx, journal, self.tools, self.render)
        self.effects = Effects(ctx, journal, self.tools, self.gates, self.render)
        self.elicit = Elicitations(ctx, journal, self.gates)
        self.effects.hooks = lambda node: self.elicit.hooks(node, effect=True)
        nodes = ctx.plan.nodes
        self.succ: dict[str, Any] = followers(nodes)
        """Node -> the nodes that need it. A plan node's are a tuple, one shared by every node
        with the same followers (a together's branches all have just its join); a loop item's
        copy gets its item's copies of its template's followers (``_open_loop``)."""
        # Per join, how many of its items have succeeded / ended badly: kept up to
        # date through the journal's hook, so a join of N items costs O(1) per item.
        self.joins_of: dict[str, Any] = joins_of(nodes)
        """Node -> the joins it is an item's exit of, shared as ``succ``'s are; a list for a copy."""
        journal.watched = self.joins_of
        journal.watch = self._count
        self.tally: dict[str, list[int]] = {}
        self.absorbed: set[str] = set()
        """Nodes of items a quorum dropped: they never run (again)."""
        index = ctx.index
        self.droppable: set[str] = {
            m for n in nodes if isinstance(n, JoinNode) for item in n.members for m in item if not _untasked(index[m])
        }
        """Nodes inside a quorum's items that run in a task: the only ones a drop cancels while
        they run, so the only ones that need a cancel scope of their own. (A built-in read has
        no task: a drop abandons its thread call, or finds it not yet begun; leaving them out
        keeps a together of 100,000 such branches from holding a set of 100,000 names.)"""
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
                st = states.get(m)
                if st is None:
                    # a nested loop's list for an outer item (``deep[0]``), made only when that
                    # item's copy of the loop ends: there is nothing of it to drop yet
                    continue
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
                    withdrawn.append(self._asked_as(m))
                    dropped.append(m)
                elif st == PENDING:
                    journal.set(m, CANCELLED, error=why)
        if dropped and not self.jobs:
            self.threads.interrupt()  # the collecting task has nothing left to wait for
        if withdrawn:
            self.work.start_soon(self.gates.withdraw, list(dict.fromkeys(withdrawn)), f"its branch was {why}")
        return dropped

    def _asked_as(self, nid: str) -> str:
        """The node a waiting node's question is stored under: its own id (a server's question
        in the middle of a step's call too), or for a loop item's gate its batch's (the template
        gate, in a loop inside another with the outer item: ``approve:send[0]`` for
        ``approve:send[0][2]``). A loop's waiting items are dropped together (the loop, or the
        item of an outer one, was decided), so their batch goes with them."""
        scope = self.scope.get(nid)
        if scope is None or not isinstance(self.index[nid], (ApprovalNode, QuestionNode)):
            return nid
        return batch_key(nid, scope.suffix)

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
        if scope.cancel_called and self.states[nid] in (RUNNING, WAITING):
            # Dropped by a quorum while it ran, or just as it asked (its question stored, the
            # drop came before its next checkpoint): it must not stay open.
            asked = self.states[nid] == WAITING
            self.journal.set(nid, CANCELLED, error="dropped by a quorum")
            if asked or isinstance(node, (ApprovalNode, QuestionNode)):
                # Its question may already be stored: withdrawn.
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


def _hub_read(node: ToolNode | WriteNode | ApprovalNode | QuestionNode) -> TypeGuard[ToolNode]:
    """A read over the hub: it always waits for its reply (or fails its step, and whatever
    follows it is skipped), so a task that runs a chain of them still lets the others in."""
    return isinstance(node, ToolNode) and node.server != BUILTIN_SERVER and not node.effectful


def _untasked(node: Any) -> bool:
    """A node :meth:`Scheduler._try_start` never gives a task: a read-only built-in."""
    return isinstance(node, ToolNode) and _builtin_read(node) is not None


def _builtin_read(node: ToolNode) -> bool | None:
    """For a read-only built-in, whether it blocks: sleep goes to a worker thread
    (and no task of its own), noop and echo run inline (nothing to wait for).
    None for every other node: it gets a task."""
    if node.server == BUILTIN_SERVER and not node.effectful and not (node.timeout_s or node.retries):
        return builtin.TOOLS[node.tool][1]
    return None
