"""Approvals and questions: where a run stops for a person.

At an approval node the step's arguments are rendered once, its preview
and check are read, and the payload is frozen and fingerprinted (payload,
address, node, run, risk verdict, server binding, what the check saw, and
the rest of what the card shows: who may decide, the preview, the check's
arguments, the server file's name) and stored; the node then waits. A
question with no effect of its own freezes the outputs it asks about with it
(the steps it follows, and those it names), so its card shows what the
person is asked to judge. Every surface renders the card again from the
stored payload (``cards.stored_card``); the card text stored here is a
record of what was shown when it was asked. A later drive finds the
decision in the store. A gate whose branch a quorum dropped has its
question withdrawn, so nobody can decide it afterwards.
"""

from __future__ import annotations

from typing import Any

import msgspec

from ..plan import ApprovalNode, QuestionNode, ToolNode
from ..states import ApprovalState, NodeState
from ..store import ApprovalRecord
from .calls import Tools
from .context import Render, RunContext
from .faults import crashpoint
from .freeze import card_doc, expiry_s, payload_fingerprint
from .journal import Journal

_json = msgspec.json.Encoder(order="deterministic")


class Gates:
    def __init__(self, ctx: RunContext, journal: Journal, tools: Tools, render: Render):
        self.ctx = ctx
        self.journal = journal
        self.tools = tools
        self.render = render
        self.seen: list[ApprovalRecord] | None = None
        """The run's approvals as read when the drive began; forgotten as soon as this
        process writes one or wakes for new decisions, so it is never stale. It only
        saves thread hops: the store re-checks an approval when its effect is claimed."""
        self.listed: dict[str, frozenset[int]] = {}
        """Per batch question: the items it lists (``latest_item``)."""

    def forget(self) -> None:
        self.seen = None

    async def latest(self, gate_id: str) -> ApprovalRecord | None:
        seen = self.seen
        if seen is None:
            seen = await self.journal.db(self.journal.store.approvals, self.ctx.run_id)
        rows = [a for a in seen if a.node_id == gate_id]
        return max(rows, key=lambda a: a.asked_at) if rows else None

    async def latest_item(self, gate_id: str, item: int) -> ApprovalRecord | None:
        """The latest question of a loop's batch gate that lists ``item``: the one that decides
        it. A question asked again for some items (their ``check:`` read changed) leaves the
        earlier approval standing for the others."""
        seen = self.seen
        if seen is None:
            seen = await self.journal.db(self.journal.store.approvals, self.ctx.run_id)
        rows = [a for a in seen if a.node_id == gate_id and item in self._listed(a)]
        return max(rows, key=lambda a: a.asked_at) if rows else None

    def _listed(self, a: ApprovalRecord) -> frozenset[int]:
        """The items a batch question lists (its payload never changes: decoded once per question)."""
        found = self.listed.get(a.id)
        if found is None:
            doc = msgspec.json.decode(a.payload_json)
            entries = doc.get("items") if isinstance(doc, dict) else None
            found = frozenset(
                e["item"] for e in entries or () if isinstance(e, dict) and isinstance(e.get("item"), int)
            )
            self.listed[a.id] = found
        return found

    async def run(self, node: ApprovalNode | QuestionNode) -> None:
        """Pass, refuse or wait at a gate, asking the question if it has no live one."""
        nid = node.id
        latest = await self.latest(nid)
        if latest is not None and latest.state == ApprovalState.APPROVED:
            self.journal.set(nid, NodeState.SUCCEEDED, output={"approval": latest.id, "by": latest.decided_by})
            return
        if latest is not None and latest.state == ApprovalState.REJECTED:
            why = f"rejected by {latest.decided_by}" + (f": {latest.reason}" if latest.reason else "")
            self.journal.set(nid, NodeState.REJECTED, error=why)
            return
        if latest is not None and latest.state == ApprovalState.PENDING:
            if latest.expires_at is None or latest.expires_at > self.ctx.clock():
                self.journal.set(nid, NodeState.WAITING)
                return
            self.forget()
            await self.journal.db(self.journal.store.decide, latest.id, ApprovalState.EXPIRED, by="clock")
        # none yet, or expired, superseded or withdrawn: ask (again)
        await self.ask(node)

    async def ask(self, node: ApprovalNode | QuestionNode) -> ApprovalRecord:
        """Resolve, freeze, fingerprint and store the question; the node then waits."""
        ctx = self.ctx
        step: ToolNode | None = ctx.tool(node.step) if isinstance(node, ApprovalNode) else None
        question = node.question if isinstance(node, ApprovalNode) else node.text
        preview = check = None
        options = ctx.plan.options
        if step is not None:
            payload = self.render(step.args)
            # before anything is read or asked; the schema's defaults for what it leaves out are filled, shown and sent
            payload = await self.tools.check_payload(step.id, step.server, step.tool, payload, complete=True)
            address = step.address
            if step.preview is not None:
                preview = await self.tools.read(step.preview.server, step.preview.tool, self.render(step.preview.args))
            if step.check is not None:
                args = self.render(step.check.args)
                check = {"args": args, "result": await self.tools.read(step.check.server, step.check.tool, args)}
            server = ctx.servers.get(step.server)
        else:
            from ..cards import question_outputs

            assert isinstance(node, QuestionNode)  # no step: a question of its own
            payload = {"question": question}
            about = question_outputs(ctx.plan, node, self.journal.outputs)
            if about:  # what the person is asked to judge is frozen with the question, and shown
                payload["outputs"] = about
            address = "question"
            server = None
        policy = ctx.policy_doc(step)
        now = ctx.clock()
        expires_at = now + expiry_s(options, step)  # checked against the plan whenever it is shown or decided
        fp = payload_fingerprint(
            run_id=ctx.run_id,
            node_id=step.id if step else node.id,
            address=address,
            payload=payload,
            policy=policy,
            observed=None if check is None else check["result"],
            server=ctx.server_digest(step.server) if step else "",
            card=card_doc(
                approvers=ctx.approvers, preview=preview, check_args=None if check is None else check["args"],
                has_check=check is not None, source=server.source if server is not None else "",
            ),
        )  # fmt: skip
        from ..cards import approval_card_text

        card = approval_card_text(
            run_id=ctx.run_id,
            step=step,
            question=question,
            payload=payload,
            fingerprint=fp,
            preview=preview,
            expires_at=expires_at,
            approvers=ctx.approvers,
            server=server,
        )
        rec = ApprovalRecord(
            id=f"{ctx.run_id}/{node.id}/{int(now * 1000):x}",
            run_id=ctx.run_id,
            node_id=node.id,
            step=step.id if step else node.id,
            payload_json=_json.encode(payload).decode(),
            fingerprint=fp,
            asked_at=now,
            card_text=card,
            preview_json=None if preview is None else _json.encode(preview).decode(),
            check_json=None if check is None else _json.encode(check).decode(),
            policy_json=_json.encode(policy).decode(),
            expires_at=expires_at,
            approvers_json=_json.encode(ctx.approvers).decode(),
        )
        self.forget()
        journal = self.journal
        await journal.claim(journal.store.ask, rec, owner=journal.owner)
        crashpoint("parking")
        journal.set(node.id, NodeState.WAITING)
        return rec

    def item_fingerprint(self, step: ToolNode, payload: Any) -> str:
        """One loop item's payload for effect ``step`` (the item's copy, ``reply[2]``): what the
        batch card lists it with, and what its claim is checked against."""
        ctx = self.ctx
        return payload_fingerprint(
            run_id=ctx.run_id, node_id=step.id, address=step.address, payload=payload,
            policy=ctx.policy_doc(step), server=ctx.server_digest(step.server),
        )  # fmt: skip

    def question_item_fingerprint(self, question: QuestionNode, payload: Any) -> str:
        """One loop item's part of a question of its own in a loop (the item's copy, ``ask:1[2]``):
        the question and what it asks about for that item."""
        ctx = self.ctx
        return payload_fingerprint(
            run_id=ctx.run_id, node_id=question.id, address="question", payload=payload,
            policy=ctx.policy_doc(None), server="",
        )  # fmt: skip

    async def ask_batch(
        self, gate: ApprovalNode | QuestionNode, step: ToolNode | None, items: list[dict[str, Any]], outer: str = ""
    ) -> ApprovalRecord:
        """One question for every item of a loop that reached effect ``step`` (the template
        node), or a question of its own ``gate`` (``step`` None; each item's entry holds the
        question and what it asks about for that item): the payload lists each item's frozen payload with its own fingerprint, and the
        question's fingerprint covers the set, each item's ``preview:`` and ``check:`` read
        (kept in its entry) included. Stored under the template gate and step, so it is
        decided, shown and checked like any question (``recipe approve RUN STEP``); asked
        again for some items, the earlier approval stands for the others (``latest_item``).
        ``outer``: in a loop inside another, the outer item's suffix; the question is stored
        under that item's copies of the gate and step (``approve:send[0]``, ``send[0]``)."""
        ctx = self.ctx
        payload = {"items": items}
        policy = ctx.policy_doc(step)
        now = ctx.clock()
        expires_at = now + expiry_s(ctx.plan.options, step)
        server = ctx.servers.get(step.server) if step is not None else None
        fp = payload_fingerprint(
            run_id=ctx.run_id, node_id=(step.id if step is not None else gate.id) + outer,
            address=step.address if step is not None else "question", payload=payload, policy=policy,
            server=ctx.server_digest(step.server) if step is not None else "",
            card=card_doc(approvers=ctx.approvers, source=server.source if server is not None else ""),
        )  # fmt: skip
        from ..cards import approval_card_text

        question = gate.question if isinstance(gate, ApprovalNode) else gate.text
        card = approval_card_text(
            run_id=ctx.run_id, step=step, question=question, payload=payload, fingerprint=fp, preview=None,
            expires_at=expires_at, approvers=ctx.approvers, server=server,
            asked_as=(step.id if step is not None else gate.id) + outer,
        )  # fmt: skip
        rec = ApprovalRecord(
            id=f"{ctx.run_id}/{gate.id}{outer}/{int(now * 1000):x}",
            run_id=ctx.run_id,
            node_id=gate.id + outer,
            step=(step.id if step is not None else gate.id) + outer,
            payload_json=_json.encode(payload).decode(),
            fingerprint=fp,
            asked_at=now,
            card_text=card,
            policy_json=_json.encode(policy).decode(),
            expires_at=expires_at,
            approvers_json=_json.encode(ctx.approvers).decode(),
        )
        self.forget()
        journal = self.journal
        await journal.claim(journal.store.ask, rec, owner=journal.owner)
        crashpoint("parking")
        return rec

    async def withdraw(self, node_ids: list[str], reason: str) -> None:
        """Questions of gates a quorum dropped can no longer be decided; written before the run moves on."""
        journal = self.journal
        store = journal.store

        def withdraw_all() -> None:
            with store.transaction():
                for nid in node_ids:
                    store.withdraw(self.ctx.run_id, nid, reason=reason, owner=journal.owner)

        self.forget()
        await journal.db(withdraw_all)
