"""A server's question in the middle of a call (MCP elicitation), as a person's question.

A run has nobody at its elbow, and a call cannot stay open while a run waits days for an
answer, so a question never waits inside the call. When a read's server asks:

1. if a person already answered this step's question (the same server, tool, words and
   requested schema: the question on the card they answered), that answer is given, once
   per drive, and the supplying is logged (``elicitation.supplied``); a server that asks
   other words with the same fields is asked about again, never given an answer to words
   nobody read;
2. else the server is told ``cancel``, the call's own answer is set aside (it is not the
   step's value), and the step parks with the question on a card: the server's words and
   the fields it wants (``cards.elicitation_card_text``), fingerprinted like any question.
   A person answers it (``Runs.answer``: checked against the schema, recorded with the
   decision and in the audit log) and the run goes on by calling the read again, the server
   asks again, and step 1 gives the answer. A read may be called more than once: the
   contract says reads are at least once (docs/safety.md).

An effect is never called twice, so a question asked in the middle of an effect's call
cannot be parked: the server is told ``cancel`` at once (nobody was asked, so nobody
declined), and the run's log says so (``elicitation.cancelled``). The card a person
approved did not hold the answer.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import msgspec

from ..cards import ELICITATION, elicitation_card_text, is_elicitation
from ..states import ApprovalState, NodeState
from ..store import ApprovalRecord
from ..tools.hooks import Answer, CallHooks, Question
from .context import RunContext
from .freeze import card_doc, expiry_s, payload_fingerprint
from .journal import Journal

if TYPE_CHECKING:
    from ..plan import ToolNode
    from .gates import Gates

_json = msgspec.json.Encoder(order="deterministic")


class Elicitations:
    """Questions servers ask in one drive, and the answers people gave to earlier ones."""

    def __init__(self, ctx: RunContext, journal: Journal, gates: Gates):
        self.ctx = ctx
        self.journal = journal
        self.gates = gates
        self.asked: dict[str, Question] = {}
        """Per read step, the question its server asked and was told ``cancel`` for: parked once the call ends."""
        self.supplied: set[str] = set()
        """Answers (approval ids) given to a server in this drive: each is given once."""
        self._seen: list[ApprovalRecord] | None = None
        self._indexed: list[ApprovalRecord] | None = None
        self._asked_of: frozenset[str] = frozenset()
        """The steps ``_indexed`` (the approvals last looked at) holds a question of any kind for."""

    def forget(self) -> None:
        """Decisions arrived (a wake-up), or a question was stored: read the run's questions again."""
        self._seen = None

    def hooks(self, node: ToolNode, *, effect: bool = False) -> CallHooks:
        """What a step's call hears: its progress goes to the journal, its questions here."""
        nid = node.id

        def on_progress(progress: float, total: float | None, message: str | None) -> None:
            self.journal.progress(nid, progress, total, message)

        async def on_question(question: Question) -> Answer:
            if effect:
                return await self._cancelled_for_effect(node, question)
            return await self._for_read(node, question)

        return CallHooks(on_progress=on_progress, on_question=on_question)

    def payload(self, node: ToolNode, question: Question) -> dict[str, Any]:
        return {
            ELICITATION: {
                "server": node.server,
                "tool": node.tool,
                "message": question.message,
                "schema": question.schema,
            }
        }

    async def _for_read(self, node: ToolNode, question: Question) -> Answer:
        wanted = self.payload(node, question)[ELICITATION]
        seen = await self.journal.db(self.journal.store.approvals, self.ctx.run_id)
        answered = [
            a
            for a in seen
            if a.node_id == node.id and a.state == ApprovalState.APPROVED and a.id not in self.supplied and a.reason
        ]
        for a in sorted(answered, key=lambda a: a.asked_at, reverse=True):
            asked = msgspec.json.decode(a.payload_json).get(ELICITATION) or {}
            if asked != wanted:  # its words too: an answer is given only to the question a person read
                continue
            answer = msgspec.json.decode(a.reason)
            self.supplied.add(a.id)
            data = {"approval": a.id, "action": answer.get("action")}
            await self.journal.db(
                self.journal.store.append_event,
                self.ctx.run_id,
                "elicitation.supplied",
                node_id=node.id,
                data_json=_json.encode(data).decode(),
            )
            return Answer(answer.get("action", "cancel"), answer.get("content"))
        self.asked[node.id] = question
        return Answer("cancel")

    async def _cancelled_for_effect(self, node: ToolNode, question: Question) -> Answer:
        data = {
            "server": node.server,
            "tool": node.tool,
            "message": question.message,
            "why": "asked during an effect's call, which is never made twice; a question cannot wait inside it",
        }
        await self.journal.db(
            self.journal.store.append_event,
            self.ctx.run_id,
            "elicitation.cancelled",
            node_id=node.id,
            data_json=_json.encode(data).decode(),
        )
        return Answer("cancel")

    def none_asked(self, nid: str) -> bool:
        """Known without a wait: the run's questions as read this drive hold none for this step,
        so :meth:`still_waiting` would find nothing. One set lookup per read, where looking
        through every question of the run would be one pass per read; False when they are
        still to be read (then :meth:`still_waiting` reads them)."""
        seen = self.gates.seen if self.gates.seen is not None else self._seen
        if seen is None:
            return False
        if seen is not self._indexed:  # read again since (a wake-up, a question stored)
            self._indexed = seen
            self._asked_of = frozenset(a.node_id for a in seen)
        return nid not in self._asked_of

    async def still_waiting(self, node: ToolNode) -> bool:
        """The step's question is on a card nobody has answered (and it has not expired): the
        step waits again, and the server is not called."""
        seen = self.gates.seen if self.gates.seen is not None else self._seen
        if seen is None:  # read once per drive (again after a wake-up), not once per read
            seen = self._seen = await self.journal.db(self.journal.store.approvals, self.ctx.run_id)
        mine = [a for a in seen if a.node_id == node.id and _asks(a)]
        if not mine:
            return False
        latest = max(mine, key=lambda a: a.asked_at)
        if latest.state != ApprovalState.PENDING:
            return False
        if latest.expires_at is not None and latest.expires_at <= self.ctx.clock():
            await self.journal.db(self.journal.store.decide, latest.id, ApprovalState.EXPIRED, by="clock")
            return False
        self.journal.set(node.id, NodeState.WAITING)
        return True

    async def park(self, node: ToolNode, question: Question) -> ApprovalRecord:
        """Store the question on a card, fingerprinted; the step waits for a person's answer."""
        ctx = self.ctx
        payload = self.payload(node, question)
        policy = ctx.policy_doc(node)
        server = ctx.servers.get(node.server)
        now = ctx.clock()
        expires_at = now + expiry_s(ctx.plan.options, node)
        fp = payload_fingerprint(
            run_id=ctx.run_id, node_id=node.id, address=node.address, payload=payload, policy=policy,
            server=ctx.server_digest(node.server),
            card=card_doc(approvers=ctx.approvers, source=server.source if server is not None else ""),
        )  # fmt: skip
        card = elicitation_card_text(
            run_id=ctx.run_id, step=node, payload=payload, fingerprint=fp, expires_at=expires_at
        )
        rec = ApprovalRecord(
            id=f"{ctx.run_id}/{node.id}/{int(now * 1000):x}",
            run_id=ctx.run_id,
            node_id=node.id,
            step=node.id,
            payload_json=_json.encode(payload).decode(),
            fingerprint=fp,
            asked_at=now,
            card_text=card,
            policy_json=_json.encode(policy).decode(),
            expires_at=expires_at,
            approvers_json=_json.encode(ctx.approvers).decode(),
        )
        self.gates.forget()
        self.forget()
        journal = self.journal
        await journal.claim(journal.store.ask, rec, owner=journal.owner)
        journal.set(node.id, NodeState.WAITING)
        return rec


def _asks(approval: ApprovalRecord) -> bool:
    """The stored question is a server's (a step's own node id holds no other question)."""
    try:
        return is_elicitation(msgspec.json.decode(approval.payload_json))
    except msgspec.DecodeError:
        return False  # a row that does not decode is refused where it is shown or decided
