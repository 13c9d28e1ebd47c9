"""The trio runtime: walks a verified graph, parks at approvals, resumes.

Every ready node starts at once in one nursery. MCP calls go through the hub
(many in flight per session); blocking work goes to real threads, at most
thread_limit at a time (threads.py), and is abandoned, never waited for, when
a quorum drops its branch. Blocking built-ins have no task each: one
collecting task finishes them, so a thousand-wide fan-out costs the trio
thread (which competes for the GIL with every worker) as little as possible. Store writes go through one worker thread: node
states are batched (a crash may repeat reads, which the contract allows),
while every approval and effect transition is written, and committed, before
the engine moves past it.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import msgspec
import trio

from ..compiler import template
from ..errors import TamperedError, ToolError, VodouError
from ..plan import ApprovalNode, JoinNode, Plan, QuestionNode, ToolNode, WriteNode, canonical_bytes, compute_fingerprint, decode_plan, sha256_hex
from ..policy import BUILTIN_SERVER
from ..store import ApprovalRecord, NodeRecord
from ..store.records import TERMINAL_NODE_STATES
from . import builtin, writer
from .faults import crashpoint
from .freeze import IDEMPOTENCY_FIELDS, idempotency_key, payload_fingerprint
from .threads import DEFAULT_THREADS, Blocking

# Node states are written at most this often while a run moves: a burst of
# state changes becomes one transaction and one thread hop instead of many.
# (Approvals and effects are still written before the engine moves on.)
FLUSH_EVERY_S = 0.005
# Steps that cannot wait (non-blocking built-ins) run in one shared task, at
# most this many in a row before it lets the other tasks in.
INLINE_BUDGET = 256
TERMINAL = TERMINAL_NODE_STATES
DONE_BAD = TERMINAL - {"succeeded"}
_json = msgspec.json.Encoder(order="deterministic")


@dataclass
class Outcome:
    run_id: str
    state: str
    pending: list[ApprovalRecord] = field(default_factory=list)
    error: str | None = None
    server_start_s: dict[str, float] = field(default_factory=dict)
    """Per server this drive's hub started: spawn → tools listed, in seconds."""


class Engine:
    """Drives one run until it ends or parks. One Engine per drive."""

    def __init__(
        self,
        *,
        plan: Plan,
        run_id: str,
        store: Any,
        hub: Any = None,
        policy_digest: str = "",
        model: str | None = None,
        approvers: list[str] | None = None,
        recipe_path: str | None = None,
        thread_limit: int = DEFAULT_THREADS,
        on_change: Callable[[str, str], None] | None = None,
        clock: Callable[[], float] = time.time,
    ):
        self.plan = plan
        self.index = plan.index()
        self.run_id = run_id
        self.store = store
        self.hub = hub
        self.policy_digest = policy_digest
        self.model = model
        self.approvers = approvers or []
        self.recipe_path = recipe_path
        self.clock = clock
        self.on_change = on_change
        self.threads = Blocking(thread_limit)
        self.db_limiter = trio.CapacityLimiter(1)
        self.state: dict[str, str] = {n.id: "pending" for n in plan.nodes}
        self.outputs: dict[str, Any] = {}
        self.errors: dict[str, str] = {}
        self.times: dict[str, list[float | None]] = {n.id: [None, None] for n in plan.nodes}
        self.succ: dict[str, list[str]] = {n.id: [] for n in plan.nodes}
        for n in plan.nodes:
            for need in n.needs:
                self.succ[need].append(n.id)
        # Per join, how many of its items have succeeded / ended badly: kept up to
        # date by _set so a join of N items costs O(1) per item, not O(N).
        self.joins_of: dict[str, list[str]] = {}
        for n in plan.nodes:
            if isinstance(n, JoinNode):
                for need in n.needs:
                    self.joins_of.setdefault(need, []).append(n.id)
        self.tally: dict[str, list[int]] = {}
        self.absorbed: set[str] = set()
        self.ready: deque = deque()
        self.draining = False
        self.scopes: dict[str, trio.CancelScope] = {}
        self.jobs: dict[str, Any] = {}  # blocking built-ins on threads, by node id
        self.collecting = False
        self.dirty: dict[str, None] = {}
        self.flush_wanted = trio.Event()
        self.inputs: dict[str, Any] = {}
        self.approvals_seen: list[ApprovalRecord] | None = None
        """The run's approvals as read in the hop that resumed it; dropped as soon as
        this process writes one or wakes for new decisions, so it is never stale.
        It only saves thread hops: the store re-checks the approval when an effect
        is claimed."""

    # --- store access: one worker thread, node states batched ahead of each call
    async def db(self, fn: Callable, *args, **kwargs) -> Any:
        batch = self._take_dirty()
        if fn is None and not batch:
            return None  # nothing to write: no thread hop
        try:
            return await trio.to_thread.run_sync(self._db_sync, batch, fn, args, kwargs, limiter=self.db_limiter)
        except trio.Cancelled:
            # Cancelled before the thread took it: the states are still owed to the store.
            self.dirty.update(dict.fromkeys(r.node_id for r in batch))
            raise

    def _db_sync(self, batch, fn, args, kwargs):
        if batch:
            self.store.save_nodes(self.run_id, batch)
        return fn(*args, **kwargs) if fn is not None else None

    def _take_dirty(self) -> list[NodeRecord]:
        if not self.dirty:
            return []
        ids = list(self.dirty)
        self.dirty.clear()
        out = []
        for nid in ids:
            st = self.state[nid]
            started, ended = self.times[nid]
            output = _json.encode(self.outputs[nid]) if st == "succeeded" and nid in self.outputs else None
            out.append(NodeRecord(node_id=nid, state=st, output_json=output, error=self.errors.get(nid), started_at=started, ended_at=ended))
        return out

    async def _flusher(self) -> None:
        while True:
            await self.flush_wanted.wait()
            await trio.sleep(FLUSH_EVERY_S)
            self.flush_wanted = trio.Event()
            if self.dirty:
                await self.db(None)

    def _set(self, nid: str, state: str, *, output: Any = None, error: str | None = None) -> None:
        prev = self.state[nid]
        self.state[nid] = state
        if nid in self.joins_of and prev != state:
            self._count(nid, prev, -1)
            self._count(nid, state, 1)
        now = self.clock()
        t = self.times[nid]
        if state == "running":
            t[0] = now
        elif state in TERMINAL or state in ("waiting", "unknown"):
            if t[0] is None:
                t[0] = now
            t[1] = now
        if state == "succeeded":
            self.outputs[nid] = output
        if error is not None:
            self.errors[nid] = error
        self.dirty[nid] = None
        self.flush_wanted.set()
        if self.on_change is not None:
            self.on_change(nid, state)

    def _count(self, nid: str, state: str, step: int) -> None:
        slot = 0 if state == "succeeded" else 1 if state in DONE_BAD else None
        if slot is not None:
            for j in self.joins_of[nid]:
                self.tally[j][slot] += step

    def _recount(self) -> None:
        """Tallies from scratch: states may have been set directly (restore, wake-up)."""
        self.tally = {}
        for n in self.plan.nodes:
            if isinstance(n, JoinNode):
                states = [self.state[x] for x in n.needs]
                self.tally[n.id] = [states.count("succeeded"), sum(1 for st in states if st in DONE_BAD)]

    # --- loading a run back from the store -----------------------------------------
    def restore(self, nodes: dict[str, NodeRecord], effects: dict[str, Any], approvals: list[ApprovalRecord] | None = None) -> None:
        self.approvals_seen = approvals
        dec = msgspec.json.Decoder()
        for nid, rec in nodes.items():
            if nid not in self.state:
                continue
            if rec.state == "succeeded":
                self.state[nid] = "succeeded"
                self.outputs[nid] = dec.decode(rec.output_json) if rec.output_json else None
            elif rec.state in DONE_BAD:
                self.state[nid] = rec.state
                if rec.error:
                    self.errors[nid] = rec.error
            self.times[nid] = [rec.started_at, rec.ended_at]
        for step, eff in effects.items():
            if step not in self.state:
                continue
            if eff.state == "executed":
                self.state[step] = "succeeded"
                self.outputs[step] = dec.decode(eff.result_json) if eff.result_json else None
            elif eff.state == "failed":
                self.state[step] = "failed"
                self.errors[step] = eff.error or "the effect failed"
            elif eff.state in ("unknown", "executing"):
                self.state[step] = "unknown"
                self.errors[step] = "the effect may or may not have happened (process ended mid-call); settle it with `recipe reconcile`"
        # joins decided before the crash keep their verdict; re-derive absorption
        for n in self.plan.nodes:
            if isinstance(n, JoinNode) and self.state[n.id] == "succeeded":
                for i, item in enumerate(n.members):
                    if self.state.get(n.needs[i]) != "succeeded":
                        self.absorbed.update(item)

    # --- the scheduler ---------------------------------------------------------------
    async def drive(self) -> str:
        """Run every node that can run; return the verdict.

        The last node states are left unsaved on purpose: the caller writes them
        (``take_unsaved``) in the same transaction that parks or ends the run,
        one thread hop instead of two.
        """
        self._recount()
        async with trio.open_nursery() as outer:
            outer.start_soon(self._flusher)
            async with trio.open_nursery() as work:
                self.work = work
                for n in self.plan.nodes:
                    if self.state[n.id] == "pending":
                        self._try_start(n.id)
            outer.cancel_scope.cancel()
        return self.verdict()

    def take_unsaved(self) -> list[NodeRecord]:
        """Node states not yet written; the caller must now write them."""
        return self._take_dirty()

    def verdict(self) -> str:
        states = self.state
        if any(s == "rejected" for s in states.values()):
            return "declined"
        if any(s in ("waiting", "unknown") for s in states.values()):
            return "parked"
        for nid, s in states.items():
            if s != "succeeded" and nid not in self.absorbed:
                return "failed"
        return "succeeded"

    def _try_start(self, nid: str) -> None:
        if self.state[nid] != "pending":
            return
        node = self.index[nid]
        if isinstance(node, JoinNode):
            self._eval_join(node)
            return
        needs = [self.state[n] for n in node.needs]
        if any(s in DONE_BAD for s in needs):
            self._set(nid, "skipped", error="an earlier step did not succeed")
            self._after(nid)
            return
        if all(s == "succeeded" for s in needs):
            self.state[nid] = "running"
            blocks = _builtin_read(node)
            if blocks is False:
                # started like any other ready node, but by one shared task
                self.ready.append(node)
                if not self.draining:
                    self.draining = True
                    self.work.start_soon(self._drain)
            elif blocks:
                self._submit(node)
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
            self._set(nid, "cancelled", error="dropped by a quorum")
        else:
            self._set(nid, "running")
            self._finish_read(nid, lambda: builtin.TOOLS[node.tool][0](self._render(node.args)))
        self._after(nid)

    def _finish_read(self, nid: str, result: Callable[[], Any]) -> None:
        """Record a read step's result, or the error ``result()`` raises for it."""
        try:
            out = result()
            crashpoint("reads")
            self._set(nid, "succeeded", output=out)
        except (ToolError, template.MissingValue, VodouError) as exc:
            self._set(nid, "failed", error=str(exc))

    def _submit(self, node: ToolNode) -> None:
        """A blocking built-in read goes to a worker thread with no task of its own:
        one collecting task finishes every such step (_collect), and a quorum drop
        abandons the call (_drop_items) instead of cancelling a scope."""
        nid = node.id
        self._set(nid, "running")
        try:
            args = self._render(node.args)
        except (template.MissingValue, VodouError) as exc:
            self._set(nid, "failed", error=str(exc))
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
                    self._finish_read(nid, job.result.unwrap)
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

    def _eval_join(self, j: JoinNode) -> None:
        ok, bad = self.tally[j.id]
        if ok >= j.need:
            results = {n: ("succeeded" if self.state[n] == "succeeded" else "cancelled" if self.state[n] in ("pending", "running", "waiting") else self.state[n]) for n in j.needs}
            dropped = self._drop_items(j)
            crashpoint("quorum")
            self._set(j.id, "succeeded", output={"succeeded": [n for n, s in results.items() if s == "succeeded"], "dropped": {n: s for n, s in results.items() if s != "succeeded"}})
            self._after(j.id)
        elif bad > j.of - j.need:
            dropped = self._drop_items(j)
            self._set(j.id, "failed", error=f"needs {j.need} of {j.of}, but {bad} item(s) did not succeed")
            self._after(j.id)
        else:
            return
        # As a cancelled task would, once the join is decided.
        for m in dropped:
            self._after(m)

    def _drop_items(self, j: JoinNode) -> list[str]:
        """Cancel every item that has not succeeded; an executing effect is shielded.
        Returns the abandoned thread calls, whose successors are still to be told."""
        dropped = []
        for i, item in enumerate(j.members):
            if self.state[j.needs[i]] == "succeeded":
                continue
            self.absorbed.update(item)
            for m in item:
                st = self.state[m]
                if st == "running":
                    job = self.jobs.pop(m, None)
                    if job is not None:
                        self.threads.abandon(job)
                        self._set(m, "cancelled", error=f"dropped by the quorum of {j.id}")
                        dropped.append(m)
                        continue
                    scope = self.scopes.get(m)
                    if scope is not None:
                        scope.cancel()
                elif st in ("pending", "waiting"):
                    self._set(m, "cancelled", error=f"dropped by the quorum of {j.id}")
        if dropped and not self.jobs:
            self.threads.interrupt()  # the collecting task has nothing left to wait for
        return dropped

    async def _run(self, node) -> None:
        nid = node.id
        if nid in self.absorbed:
            # Dropped by a quorum decided before this task took its first step,
            # when it had no cancel scope for the drop to cancel: it must not begin.
            self._set(nid, "cancelled", error="dropped by a quorum")
            self._after(nid)
            return
        self._set(nid, "running")
        with trio.CancelScope() as scope:
            self.scopes[nid] = scope
            try:
                if isinstance(node, ToolNode):
                    if node.effectful and not node.without_asking:
                        await self._effect(node)
                    elif node.effectful:
                        await self._unasked(node)
                    else:
                        out = await self._call(node.server, node.tool, self._render(node.args))
                        crashpoint("reads")
                        self._set(nid, "succeeded", output=out)
                elif isinstance(node, WriteNode):
                    await self._write(node)
                elif isinstance(node, (ApprovalNode, QuestionNode)):
                    await self._gate(node)
                else:  # pragma: no cover - joins never run as tasks
                    raise AssertionError(node)
            except (ToolError, template.MissingValue, VodouError) as exc:
                self._set(nid, "failed", error=str(exc))
        self.scopes.pop(nid, None)
        if scope.cancelled_caught and self.state[nid] == "running":
            self._set(nid, "cancelled", error="dropped by a quorum")
        self._after(nid)

    def _resolve(self, name: str) -> Any:
        if name in self.outputs:
            return self.outputs[name]
        if name in self.inputs:
            return self.inputs[name]
        raise template.MissingValue(f"{{{name}}} has no value")

    def _render(self, args: dict) -> Any:
        return template.render(args, self._resolve)

    async def _call(self, server: str, tool: str, args: dict) -> Any:
        if server == BUILTIN_SERVER:
            fn, blocking = builtin.TOOLS[tool]
            if blocking:
                return await self.threads.run(fn, args)
            return fn(args)
        if self.hub is None:
            raise ToolError(f"no server session for {server}")
        result = await self.hub.call(server, tool, args)
        if result.is_error:
            raise ToolError(f"{server}.{tool} failed: {result.text}")
        return result.value

    async def _write(self, node: WriteNode) -> None:
        present = {}
        for n in node.inputs:
            if self.state.get(n) == "succeeded":
                present[n] = self.outputs[n]
            elif n not in self.state and n in self.inputs:
                present[n] = self.inputs[n]
        missing = [n for n in node.inputs if n not in present]
        if self.model:
            text = await self.threads.run(writer.with_model, self.model, node.prompt, present, missing)
        else:
            text = writer.offline(node.prompt, present, missing)
        self._set(node.id, "succeeded", output=text)

    # --- approvals ---------------------------------------------------------------------
    def _policy_doc(self, step: ToolNode | None) -> dict:
        if step is None:
            return {"policy": self.policy_digest}
        return {"risk": step.risk, "source": step.risk_source, "policy": self.policy_digest}

    async def _latest(self, gate_id: str) -> ApprovalRecord | None:
        seen = self.approvals_seen
        if seen is None:
            seen = await self.db(self.store.approvals, self.run_id)
        rows = [a for a in seen if a.node_id == gate_id]
        return max(rows, key=lambda a: a.asked_at) if rows else None

    async def _gate(self, node) -> None:
        latest = await self._latest(node.id)
        if latest is not None and latest.state == "approved":
            self._set(node.id, "succeeded", output={"approval": latest.id, "by": latest.decided_by})
            return
        if latest is not None and latest.state == "rejected":
            self._set(node.id, "rejected", error=f"rejected by {latest.decided_by}" + (f": {latest.reason}" if latest.reason else ""))
            return
        if latest is not None and latest.state == "pending":
            if latest.expires_at is None or latest.expires_at > self.clock():
                self._set(node.id, "waiting")
                return
            self.approvals_seen = None
            await self.db(self.store.decide, latest.id, "expired", by="clock")
        await self.ask(node)

    async def ask(self, node) -> ApprovalRecord:
        """Resolve, freeze, fingerprint and store the question; the node then waits."""
        step = self.index[node.step] if isinstance(node, ApprovalNode) else None
        question = node.question if isinstance(node, ApprovalNode) else node.text
        preview = check = None
        if step is not None:
            payload = self._render(step.args)
            address = step.address
            if step.preview is not None:
                preview = await self._call(step.preview.server, step.preview.tool, self._render(step.preview.args))
            if step.check is not None:
                args = self._render(step.check.args)
                check = {"args": args, "result": await self._call(step.check.server, step.check.tool, args)}
            expires_s = step.expires_s or self.plan.options.approval_expires_s
        else:
            payload = {"question": question}
            address = "question"
            expires_s = self.plan.options.approval_expires_s
        policy = self._policy_doc(step)
        fp = payload_fingerprint(
            run_id=self.run_id, node_id=step.id if step else node.id, address=address, payload=payload, policy=policy,
            observed=None if check is None else check["result"],
        )
        now = self.clock()
        from ..cards import approval_card_text

        card = approval_card_text(run_id=self.run_id, step=step, question=question, payload=payload, fingerprint=fp, preview=preview, expires_at=now + expires_s, approvers=self.approvers)
        rec = ApprovalRecord(
            id=f"{self.run_id}/{node.id}/{int(now * 1000):x}",
            run_id=self.run_id,
            node_id=node.id,
            step=step.id if step else node.id,
            payload_json=_json.encode(payload).decode(),
            fingerprint=fp,
            asked_at=now,
            card_text=card,
            preview_json=None if preview is None else _json.encode(preview).decode(),
            check_json=None if check is None else _json.encode(check).decode(),
            policy_json=_json.encode(policy).decode(),
            expires_at=now + expires_s,
            approvers_json=_json.encode(self.approvers).decode(),
        )
        self.approvals_seen = None
        await self.db(self.store.ask, rec)
        crashpoint("parking")
        self._set(node.id, "waiting")
        return rec

    # --- effects -----------------------------------------------------------------------
    async def _effect(self, node: ToolNode) -> None:
        gate = self.index[node.needs[0]]
        approval = await self._latest(gate.id)
        if approval is None or approval.state != "approved":
            raise TamperedError(f"step `{node.id}` has no approval on record; nothing was executed")
        payload = msgspec.json.decode(approval.payload_json)
        recipe_now = await trio.to_thread.run_sync(_file_sha, self.recipe_path) if self.recipe_path else None
        self._check_untampered(node, approval, payload, recipe_now)
        if node.check is not None and approval.check_json:
            before = msgspec.json.decode(approval.check_json)
            now_seen = await self._call(node.check.server, node.check.tool, before["args"])
            if canonical_bytes(now_seen) != canonical_bytes(before["result"]):
                # The world changed since the question: the approval is stale.
                await self.db(self.store.append_event, self.run_id, "stale", node_id=node.id, data_json=_json.encode({"approval": approval.id, "was": before["result"], "now": now_seen}).decode())
                self.state[node.id] = "pending"
                self.state[gate.id] = "running"
                await self.ask(gate)
                self._set(node.id, "pending")
                return
        key = idempotency_key(self.run_id, node.id, approval.fingerprint)
        won = await self.db(self.store.begin_effect, self.run_id, node.id, approval_id=approval.id, fingerprint=approval.fingerprint, idempotency_key=key, payload_json=approval.payload_json)
        if not won:
            await self._claimed_elsewhere(node)
            return
        await self._execute(node, payload, key)

    async def _unasked(self, node: ToolNode) -> None:
        """An effect the plan lets run without asking: still claimed once, keyed, shielded."""
        payload = self._render(node.args)
        fp = payload_fingerprint(run_id=self.run_id, node_id=node.id, address=node.address, payload=payload, policy=self._policy_doc(node))
        key = idempotency_key(self.run_id, node.id, fp)
        won = await self.db(self.store.begin_unasked_effect, self.run_id, node.id, fingerprint=fp, idempotency_key=key, payload_json=_json.encode(payload).decode())
        if not won:
            await self._claimed_elsewhere(node)
            return
        await self._execute(node, payload, key)

    async def _claimed_elsewhere(self, node: ToolNode) -> None:
        eff = await self.db(self.store.get_effect, self.run_id, node.id)
        if eff is not None and eff.state == "executed":
            self._set(node.id, "succeeded", output=msgspec.json.decode(eff.result_json) if eff.result_json else None)
        else:
            self._set(node.id, "unknown" if eff is None or eff.state in ("executing", "unknown") else "failed", error="the effect was claimed by another process")

    async def _execute(self, node: ToolNode, payload: Any, key: str) -> None:
        """Call an effect that this process alone has claimed; record how it ended."""
        args = dict(payload) if isinstance(payload, dict) else payload
        if self.hub is not None and node.server != BUILTIN_SERVER and isinstance(args, dict):
            schema = self.hub.tool(node.server, node.tool).input_schema or {}
            for fname in IDEMPOTENCY_FIELDS:
                if fname in (schema.get("properties") or {}):
                    args[fname] = key
                    break
        crashpoint("executing")
        with trio.CancelScope(shield=True):  # an effect already executing is never cancelled
            try:
                out = await self._call(node.server, node.tool, args)
            except ToolError as exc:
                await self.db(self.store.finish_effect, self.run_id, node.id, "failed", error=str(exc))
                raise
            crashpoint("executed")
            await self.db(self.store.finish_effect, self.run_id, node.id, "executed", result_json=_json.encode(out).decode())
            self._set(node.id, "succeeded", output=out)

    def _check_untampered(self, node: ToolNode, approval: ApprovalRecord, payload: Any, recipe_now: str | None) -> None:
        policy = msgspec.json.decode(approval.policy_json) if approval.policy_json else self._policy_doc(node)
        observed = msgspec.json.decode(approval.check_json)["result"] if approval.check_json else None
        fp = payload_fingerprint(run_id=self.run_id, node_id=node.id, address=node.address, payload=payload, policy=policy, observed=observed)
        if fp != approval.fingerprint:
            raise TamperedError(
                f"the stored payload of `{node.id}` no longer matches the fingerprint that was approved ({approval.fingerprint}); nothing was executed",
                hint="the store was edited after the question; `recipe show RUN --audit` has what was approved",
            )
        if policy != self._policy_doc(node):
            raise TamperedError(
                f"the risk judgement of `{node.id}` changed since the question (policy or plan edited); nothing was executed",
                hint="start a new run so the question is asked under the current policy",
            )
        if recipe_now is not None and recipe_now != self.plan.recipe.source_sha256:
            raise TamperedError(
                f"the recipe file {self.recipe_path} changed after the question; `{node.id}` was not executed",
                hint="start a new run from the edited recipe, or restore the file",
            )


def _file_sha(path: str) -> str | None:
    """The recipe file's hash now; a file that is gone cannot be compared."""
    try:
        return sha256_hex(Path(path).read_bytes())
    except OSError:
        return None


def _builtin_read(node) -> bool | None:
    """For a read-only built-in, whether it blocks: sleep goes to a worker thread
    (and no task of its own), noop and echo run inline (nothing to wait for).
    None for every other node: it gets a task."""
    if isinstance(node, ToolNode) and node.server == BUILTIN_SERVER and not node.effectful:
        return builtin.TOOLS[node.tool][1]
    return None


def check_stored_plan(plan_json: str, fingerprint: str) -> Plan:
    """Decode a run's stored plan and refuse it if it was edited in the store."""
    plan = decode_plan(plan_json)
    actual = compute_fingerprint(plan)
    if actual != fingerprint or plan.fingerprint != fingerprint:
        raise TamperedError(
            f"the plan stored for this run changed after it started (fingerprint {actual}, expected {fingerprint}); nothing was executed",
            hint="the store was edited; start a new run from the recipe",
        )
    return plan
