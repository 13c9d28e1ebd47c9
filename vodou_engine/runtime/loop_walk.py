"""A ``for each`` loop's walk, the part of the scheduler (``scheduler.py``) that runs loops.

When a loop's list is known it is checked against the loop's bounds, every item gets its own
copies of the body's nodes (``reply[0]``; ``loops.py`` makes them), items start up to
``at most N at a time``, and when they have all ended each body step holds the list of its
items' outputs. An effect (or ``ask me``) in a loop is asked once for every item that reached
it (``_batch_gate``): each item's frozen payload with its own fingerprint, one question over the
set; an item passes its copy of the gate only if its exact payload was approved.

:class:`LoopWalk` is mixed into :class:`~vodou_engine.runtime.scheduler.Scheduler`, which
holds the state it reads (declared below) and the walk it calls back into.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import msgspec
import trio

from ..cards import question_outputs
from ..compiler import template
from ..errors import ToolError
from ..plan import ApprovalNode, JoinNode, LoopNode, QuestionNode, ToolNode
from ..states import ApprovalState
from .calls import Tools
from .context import RunContext
from .gates import Gates
from .journal import Journal
from .loops import TOP, Batch, LoopRun, Scope, batch_key, copier, item_of, lookup, outer_of, the_list
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
    from .threads import Blocking


class LoopWalk:
    """The scheduler's loops: bounds, copies per item, their outputs as lists, batch questions."""

    ctx: RunContext
    journal: Journal
    states: dict[str, str]
    index: dict[str, Any]
    tools: Tools
    gates: Gates
    threads: Blocking
    at_once: int
    work: trio.Nursery
    succ: dict[str, Any]
    joins_of: dict[str, Any]
    tally: dict[str, list[int]]
    absorbed: set[str]
    droppable: set[str]
    within: dict[str, Any]
    scope: dict[str, Scope]
    loop_runs: dict[str, LoopRun]
    exit_of: dict[str, tuple[LoopRun, int]]
    loop_of_item: dict[str, LoopRun]
    batches: dict[str, Batch]
    handing: bool
    handed: ToolNode | None

    if TYPE_CHECKING:  # the scheduler's walk, which the loops call back into

        def _count(self, nid: str, prev: str, state: str) -> None: ...
        def _try_start(self, nid: str) -> None: ...
        def _after(self, nid: str) -> None: ...
        def _drop_members(self, items: list[list[str]], why: str) -> list[str]: ...
        def _resolve(self, name: str) -> Any: ...
        def _content(self, name: str) -> list[Any] | None: ...
        def render(self, args: dict[str, Any]) -> Any: ...

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
        lr = LoopRun(node, scope, need=need if items else 0, limit=node.at_most or self.at_once)
        self.loop_runs[nid] = lr
        # every template inside the loop, nested loops' too: a join in the body lists a nested
        # loop's steps among its items' members, and an item's copy of the join lists the item's
        # copies of them, so each must be renamed per item
        body = set(self.within.get(nid[: len(nid) - len(scope.suffix)] if scope.suffix else nid, node.body))
        index = self.index  # the templates, under their own ids
        templates = [index[t] for t in node.body]
        makers = [copier(t, body) for t in templates]
        lr.entries = [j for j, t in enumerate(templates) if not t.needs]
        lr.resumed = self.journal.resumed
        # an item's copies can be dropped while they run: by the loop's own quorum, or with the
        # loop, when a quorum around it (a together's, an outer loop's) drops it
        quorum = lr.need < len(items) or nid in self.droppable
        binds, var, outer = scope.binds, node.var, scope.suffix
        exit_of, loop_of_item, exit_base = self.exit_of, self.loop_of_item, node.exit
        # The common body (steps, gates, questions; no together or loop inside) and no drive
        # before: every item's copies at once, their successors (the same item's copies of the
        # template's) as shared tuples, and one journal entry for all of them. Otherwise each
        # copy is added on its own (``_add_copy``: a join's tally, states restored).
        at_once = not lr.resumed and not any(isinstance(t, (JoinNode, LoopNode)) for t in templates)
        after = [tuple(f.id for f in templates if t.id in f.needs) for t in templates] if at_once else []
        succ, scopes = self.succ, self.scope
        new: list[str] = []
        for i, item in enumerate(items):
            suffix = f"{outer}[{i}]"
            item_scope = Scope(suffix, {**binds, var: item} if binds else {var: item})
            ids = []
            if at_once:
                for make, follow in zip(makers, after, strict=True):
                    copy = make(suffix)
                    cid = copy.id
                    index[cid] = copy
                    succ[cid] = tuple([f + suffix for f in follow]) if follow else ()
                    scopes[cid] = item_scope
                    ids.append(cid)
                new.extend(ids)
            else:
                for make in makers:
                    copy = make(suffix)
                    self._add_copy(copy, item_scope, quorum)
                    ids.append(copy.id)
            lr.items.append(item_scope)
            lr.members.append(ids)
            loop_of_item[suffix] = lr
            exit_id = exit_base + suffix
            lr.exits.append(exit_id)
            exit_of[exit_id] = (lr, i)
        if new:
            self.journal.add_many(new)
            if quorum:
                self.droppable.update(new)
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
            # Its items' exits come before it in the body, so in a drive after a park they are
            # restored already: they count now, as the journal's hook counts what ends later.
            states = self.states
            ok = bad = 0
            for need in copy.needs:
                self.joins_of.setdefault(need, []).append(cid)  # which the journal's watch hears
                st = states[need]
                if st == SUCCEEDED:
                    ok += 1
                elif st in DONE_BAD:
                    bad += 1
            self.tally[cid] = [ok, bad]
            self.droppable.update(m for item in copy.members for m in item)
            if states[cid] == SUCCEEDED:
                # decided in a drive before: the items it dropped stay dropped (``restored``)
                for i, item in enumerate(copy.members):
                    if states[copy.needs[i]] != SUCCEEDED:
                        self.absorbed.update(item)

    def _more(self, lr: LoopRun) -> None:
        """Start items, in order, while fewer than the loop's limit are running. An item that
        ends at once starts the next from the same loop here, not by recursion."""
        if lr.filling:
            return
        lr.filling = True
        try:
            states, index = self.states, self.index
            while not lr.done and lr.active < lr.limit and lr.started < len(lr.items):
                i = lr.started
                lr.started += 1
                lr.active += 1
                members = lr.members[i]
                if lr.resumed:
                    # restored from a drive before (journal.restore_one): what follows them may start
                    for cid in [c for c in members if states[c] in TERMINAL]:
                        if states[cid] == SUCCEEDED and isinstance(index[cid], ApprovalNode):
                            lr.committed = True  # its batch was approved in a drive before
                        self._after(cid)
                for j in lr.entries:  # the copies that need nothing in their item
                    cid = members[j]
                    if states[cid] == PENDING:
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
        n = len(lr.items) - len(lr.declined)
        if lr.ok >= lr.need or (lr.bad > n - lr.need and not lr.committed) or lr.ok + lr.bad == n:
            # decided, before any batch is asked: a quorum that can no longer be met (as a
            # together's) fails the loop, and its items waiting at a gate are never asked about
            self._close_loop(lr)
            return
        if self.batches:
            for key, batch in self.batches.items():
                if batch.loop is lr:
                    self._batch_ready(key, batch)
        if lr.started < len(lr.items):
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
        exits = lr.exits
        not_ok = [i for i, e in enumerate(exits) if states[e] != SUCCEEDED]
        doubt = [i for i in not_ok if states[exits[i]] == UNKNOWN]
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
        unfinished = [lr.members[i] for i in not_ok]
        why = f"dropped by the quorum of {nid}" if success else f"{nid} did not succeed"
        for item in unfinished:
            self.absorbed.update(item)
        nested = self.within.get(nid[: len(nid) - len(lr.scope.suffix)] if lr.scope.suffix else nid, ())
        if nested:
            for i in not_ok:  # a nested loop's list for an item that has none
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
                    "succeeded": [i for i, e in enumerate(exits) if states[e] == SUCCEEDED] if not_ok else [*range(n)],
                    "not_succeeded": {str(i): str(states[exits[i]]) for i in not_ok},
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
        key = batch_key(gid, scope.suffix)  # one question per loop (copy): its items share it
        item = item_of(scope.suffix)
        step: ToolNode | None = None
        if isinstance(gate, ApprovalNode):
            found = self.index[gate.step]
            assert isinstance(found, ToolNode), "an approval guards a tool step"
            step = found
            # the schema's defaults for what it leaves out are filled, shown on the batch card and sent
            payload = await self.tools.completed(step.server, step.tool, self._render_for(step.id, step.args))
            fp = self.gates.item_fingerprint(step, payload)
        else:
            payload = self._question_payload(gate, template_id, scope)
            fp = self.gates.question_item_fingerprint(gate, payload)
        latest = None if again else await self.gates.latest_item(key, item)
        journal = self.journal
        lr = self.loop_of_item[scope.suffix]
        if lr.done:
            self._gate_dropped(gid, lr, key, latest is not None and latest.state == ApprovalState.PENDING)
            return
        if latest is not None and latest.state == ApprovalState.APPROVED:
            # decided: every approved item runs, whatever happens to the others
            lr.committed = True
            entries = msgspec.json.decode(latest.payload_json).get("items", [])
            chosen = msgspec.json.decode(latest.items_json) if latest.items_json is not None else None
            if chosen is not None and item not in chosen:
                lr.declined.add(item)
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
        if lr.done:
            self._gate_dropped(gid, lr, key, False)
            return
        batch = self.batches.get(key)
        if batch is None or batch.asked:  # a batch asked already: this item is asked about on a new card
            batch = self.batches[key] = Batch(lr, template_id, outer_of(scope.suffix))
        batch.waiting[item] = entry
        journal.set(gid, WAITING)
        lr.active -= 1  # waiting for a person: its place goes to the next item
        self._more(lr)
        self._batch_ready(key, batch)

    def _gate_dropped(self, gid: str, lr: LoopRun, key: str, pending: bool) -> None:
        """An item's gate whose loop was decided (failed, or dropped by an outer quorum) while the
        gate looked its question up or read its item: the item asks nothing, and a question
        still open for its batch is withdrawn."""
        why = f"its loop ({lr.node.id}) ended before this item was decided"
        self.journal.set(gid, CANCELLED, error=why)
        if pending:
            self.work.start_soon(self.gates.withdraw, [key], why)

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
        if batch.asked or not batch.waiting or lr.done:
            return  # a loop already decided asks nothing
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
        if scope is None:  # what ``render`` does, one call less (every read step comes here)
            return template.render(args, self._resolve, self._content)
        return self._render_in(scope, args)


class _Everything(dict[str, Any]):
    """Every name present (its value None): ``question_outputs`` then says which names a
    question asks about, whatever each one's value is for the item."""

    def __contains__(self, key: object) -> bool:
        return True

    def __getitem__(self, key: str) -> Any:
        return None
