"""Effects: the one place a run changes the world, and what the record says afterwards.

Order matters here. Everything that can fail without calling the tool is
checked first: an approval on record for this exact payload (fingerprint
recomputed over the stored payload, the risk verdict and the server
binding), the ``check:`` read unchanged, the server up and the tool still
listed. Only then is the effect claimed in the store (once per step,
whoever races for it) and called, shielded from cancellation.

What the record says is decided by what came back:

* a well-formed success: ``executed``;
* the tool's own error result, or a request the server refused as malformed
  before acting on it: ``failed``, with the server's words (a person may
  still reconcile it);
* anything else once the request may have reached the server (the
  connection dropped, the server exited, the call timed out, the reply was
  cut off, invalid or failed the tool's output schema, an internal or
  server-defined JSON-RPC error): ``unknown``. Doubt is never ``failed``,
  because a failed effect invites a retry that could do it twice.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import msgspec
import trio

from ..errors import NoReplyError, NotSentError, TamperedError
from ..plan import ApprovalNode, ToolNode
from ..states import EffectState, NodeState
from ..store import ApprovalRecord
from .calls import Tools
from .context import Render, RunContext
from .faults import crashpoint
from .freeze import gives_its_fingerprint, idempotency_key, payload_fingerprint
from .gates import Gates
from .journal import Journal

if TYPE_CHECKING:
    from ..tools.hooks import CallHooks

_json = msgspec.json.Encoder(order="deterministic")

REFUSED_BEFORE_ACTING = frozenset({-32700, -32600, -32601, -32602})
"""JSON-RPC errors that mean the request was rejected as it arrived (parse error,
invalid request, no such method, invalid params): the tool never ran. Any other
error code (internal error, server-defined) may come after the tool acted."""

_SETTLE = "; check the target, then settle it (reconcile the step as executed or not executed)"


class Effects:
    def __init__(self, ctx: RunContext, journal: Journal, tools: Tools, gates: Gates, render: Render):
        self.ctx = ctx
        self.journal = journal
        self.tools = tools
        self.gates = gates
        self.render = render
        self.asked_again: dict[str, dict[str, Any]] = {}
        """Steps whose check read changed since their approval: {"was", "now"}, for the report."""
        self.hooks: Callable[[ToolNode], CallHooks] | None = None
        """What an effect's call hears (its progress; a question, declined): set by the scheduler."""

    async def run_item(self, node: ToolNode, template: ToolNode, gate_id: str, item: int) -> str | None:
        """One loop item's copy of an effect (``reply[2]``), approved in its batch: the payload
        that runs is the one frozen for this item in the batch question, which must be intact
        and approved; the claim names this item, and its idempotency key includes it. With a
        ``check:``, the item's check is read again first: changed, nothing runs and ``"stale"``
        is returned (the scheduler asks about this item again)."""
        ctx = self.ctx
        approval = await self.gates.latest_item(gate_id, item)
        if approval is None or approval.state != "approved":
            raise TamperedError(
                f"step `{node.id}` has no approved batch on record; nothing was executed", run=ctx.run_id, step=node.id
            )
        batch = msgspec.json.decode(approval.payload_json)
        outer = gate_id[len(template.needs[0]) :]  # in a loop inside another: asked under `send[0]`
        self._check_untampered(msgspec.structs.replace(template, id=template.id + outer), approval, batch)
        entry = next((e for e in batch.get("items", ()) if isinstance(e, dict) and e.get("item") == item), None)
        if entry is None:
            raise TamperedError(
                f"item {item} of `{template.id}` is not in the batch approved in {approval.id}; nothing was executed",
                run=ctx.run_id,
                step=node.id,
            )
        payload = entry["payload"]
        fp = self.gates.item_fingerprint(node, payload)
        if fp != entry["fingerprint"]:
            raise TamperedError(
                f"the payload stored for item {item} of `{template.id}` does not give its fingerprint; nothing was executed",
                run=ctx.run_id,
                step=node.id,
            )
        journal = self.journal
        if template.check is not None:
            before = entry.get("check")
            if not isinstance(before, dict) or "args" not in before or "result" not in before:
                raise TamperedError(
                    f"item {item} of `{template.id}` has no check read stored in {approval.id}; nothing was executed",
                    run=ctx.run_id,
                    step=node.id,
                )
            now_seen = await self.tools.read(template.check.server, template.check.tool, before["args"])
            if _canonical(now_seen) != _canonical(before["result"]):
                # The world changed for this item since its question: asked again, alone.
                data = {"approval": approval.id, "item": item, "was": before["result"], "now": now_seen}
                await journal.db(
                    journal.store.append_event,
                    ctx.run_id,
                    "stale",
                    node_id=node.id,
                    data_json=_json.encode(data).decode(),
                )
                return "stale"
        key = idempotency_key(ctx.run_id, node.id, fp)
        args = await self._prepare(node, payload, key)
        if args is None:
            return None
        won = await journal.claim(
            journal.store.begin_effect,
            ctx.run_id,
            node.id,
            approval_id=approval.id,
            fingerprint=fp,
            idempotency_key=key,
            payload_json=_json.encode(payload).decode(),
            owner=journal.owner,
        )
        if not won:
            await self._claimed_elsewhere(node)
            return None
        await self._execute(node, args)
        return None

    async def _ask_again(
        self, node: ToolNode, gate: ApprovalNode, change: dict[str, Any], event: dict[str, Any]
    ) -> None:
        """An approval gone stale before its effect ran: ``change`` is what the run's report says
        changed, ``event`` the run's ``stale`` event; the step waits on a new question."""
        journal = self.journal
        self.asked_again[node.id] = change
        data = _json.encode(event).decode()
        await journal.db(journal.store.append_event, self.ctx.run_id, "stale", node_id=node.id, data_json=data)
        journal.mark(node.id, NodeState.PENDING)
        journal.mark(gate.id, NodeState.RUNNING)
        await self.gates.ask(gate)
        journal.set(node.id, NodeState.PENDING)

    async def run(self, node: ToolNode) -> None:
        """An approved effect: verify, re-check, claim, call once."""
        ctx = self.ctx
        gate = ctx.approval_of(node)
        approval = await self.gates.latest(gate.id)
        if approval is None or approval.state != "approved":
            raise TamperedError(
                f"step `{node.id}` has no approval on record; nothing was executed", run=ctx.run_id, step=node.id
            )
        payload = msgspec.json.decode(approval.payload_json)
        self._check_untampered(node, approval, payload)
        journal = self.journal
        if node.check is not None and approval.check_json:
            before = msgspec.json.decode(approval.check_json)
            now_seen = await self.tools.read(node.check.server, node.check.tool, before["args"])
            if _canonical(now_seen) != _canonical(before["result"]):
                # The world changed since the question: the approval is stale; ask again.
                await self._ask_again(
                    node,
                    gate,
                    {"was": before["result"], "now": now_seen},
                    {"approval": approval.id, "was": before["result"], "now": now_seen},
                )
                return
        completed = await self.tools.completed(node.server, node.tool, payload)
        if completed != payload:
            # The tool's schema now gives a default to a field the card did not show (added or
            # given a default since the question): the server would fill it out of sight, so
            # the approval is stale; ask again, the card showing it (``Tools.check_payload``).
            filled = sorted(set(completed) - set(payload))
            await self._ask_again(
                node,
                gate,
                {"was": payload, "now": completed, "why": "defaults", "fields": filled},
                {"approval": approval.id, "defaults": {k: completed[k] for k in filled}},
            )
            return
        key = idempotency_key(ctx.run_id, node.id, approval.fingerprint)
        args = await self._prepare(node, payload, key)
        if args is None:
            return
        won = await journal.claim(
            journal.store.begin_effect,
            ctx.run_id,
            node.id,
            approval_id=approval.id,
            fingerprint=approval.fingerprint,
            idempotency_key=key,
            payload_json=approval.payload_json,
            owner=journal.owner,
        )
        if not won:
            await self._claimed_elsewhere(node)
            return
        await self._execute(node, args)

    async def run_unasked(self, node: ToolNode) -> None:
        """An effect the plan lets run without asking: still checked, claimed once, keyed, shielded."""
        ctx = self.ctx
        payload = self.render(node.args)
        fp = payload_fingerprint(
            run_id=ctx.run_id,
            node_id=node.id,
            address=node.address,
            payload=payload,
            policy=ctx.policy_doc(node),
            server=ctx.server_digest(node.server),
        )
        key = idempotency_key(ctx.run_id, node.id, fp)
        args = await self._prepare(node, payload, key)
        if args is None:
            return
        journal = self.journal
        won = await journal.claim(
            journal.store.begin_unasked_effect,
            ctx.run_id,
            node.id,
            fingerprint=fp,
            idempotency_key=key,
            payload_json=_json.encode(payload).decode(),
            owner=journal.owner,
        )
        if not won:
            await self._claimed_elsewhere(node)
            return
        await self._execute(node, args)

    async def _prepare(self, node: ToolNode, payload: Any, key: str) -> dict[str, Any] | None:
        """The call's arguments, or None (the step failed, nothing claimed or called)."""
        try:
            return await self.tools.prepare_effect(node.server, node.tool, payload, key)
        except NotSentError as exc:
            self.journal.set(node.id, NodeState.FAILED, error=f"nothing was executed: {exc}")
            return None

    async def _claimed_elsewhere(self, node: ToolNode) -> None:
        journal = self.journal
        eff = await journal.db(journal.store.get_effect, self.ctx.run_id, node.id)
        if eff is not None and eff.state == EffectState.EXECUTED:
            journal.set(
                node.id, NodeState.SUCCEEDED, output=msgspec.json.decode(eff.result_json) if eff.result_json else None
            )
        elif eff is not None and eff.state == EffectState.FAILED:
            journal.set(node.id, NodeState.FAILED, error=eff.error or "the effect failed")
        else:
            journal.set(
                node.id,
                NodeState.UNKNOWN,
                error="the effect was claimed by another process, which has not said how it ended" + _SETTLE,
            )

    async def _execute(self, node: ToolNode, args: Any) -> None:
        """Call an effect this process alone has claimed; record how it ended, whatever happens."""
        journal = self.journal
        store = journal.store
        run_id = self.ctx.run_id
        crashpoint("executing")
        with trio.CancelScope(shield=True):  # an effect already executing is never cancelled
            state, output, error, content = await self._call(node, args)
            if state == EffectState.EXECUTED:
                crashpoint("executed")
            if state == EffectState.EXECUTED:
                journal.set(node.id, NodeState.SUCCEEDED, output=output, content=content)
            elif state == EffectState.FAILED:
                journal.set(node.id, NodeState.FAILED, error=error)
            else:
                journal.set(node.id, NodeState.UNKNOWN, error=error)
            # A real answer settles the record even if a takeover, or a cancel, marked it unknown
            # meanwhile; the step's state goes with it, whoever holds the run now.
            result_json = _json.encode(output).decode() if state == EffectState.EXECUTED else None
            finish = functools.partial(
                store.finish_effect,
                run_id,
                node.id,
                state,
                result_json=result_json,
                error=error,
                expected=(EffectState.EXECUTING, EffectState.UNKNOWN),
            )
            if not await journal.effect_outcome(node.id, finish):
                await self._claimed_elsewhere(node)  # a person settled it meanwhile: their word stands

    async def _call(self, node: ToolNode, args: Any) -> tuple[EffectState, Any, str | None, list[Any] | None]:
        """How the call ended, its value, the error in words, and its content blocks (``ToolResult.content``)."""
        where = f"{node.server}.{node.tool}"
        try:
            hooks = self.hooks(node) if self.hooks is not None else None
            result = await self.tools.effect(node.server, node.tool, args, timeout=node.timeout_s, hooks=hooks)
        except NotSentError as exc:
            return EffectState.FAILED, None, f"the request was never sent, so nothing happened: {exc}", None
        except NoReplyError as exc:
            return EffectState.UNKNOWN, None, f"it may or may not have happened{_SETTLE}: {exc}", None
        except Exception as exc:  # noqa: BLE001 - whatever broke, the request may have gone out
            return (
                EffectState.UNKNOWN,
                None,
                f"it may or may not have happened{_SETTLE}: {where}: {type(exc).__name__}: {exc}",
                None,
            )
        if not result.is_error:
            return EffectState.EXECUTED, result.value, None, result.content
        if result.error_code is None:
            return EffectState.FAILED, None, f"{where} reported an error: {result.text}", None
        if result.error_code in REFUSED_BEFORE_ACTING:
            return (
                EffectState.FAILED,
                None,
                f"{where} refused the request (JSON-RPC error {result.error_code}): {result.text}",
                None,
            )
        return (
            EffectState.UNKNOWN,
            None,
            f"it may or may not have happened{_SETTLE}: {where} answered with JSON-RPC error {result.error_code}: {result.text}",
            None,
        )

    def _check_untampered(self, node: ToolNode, approval: ApprovalRecord, payload: Any) -> None:
        ctx = self.ctx
        if not approval.policy_json:  # a question stored before its risk verdict was
            approval = msgspec.structs.replace(approval, policy_json=_json.encode(ctx.policy_doc(node)))
        policy = msgspec.json.decode(approval.policy_json or b"{}")
        try:
            as_asked = gives_its_fingerprint(
                approval, node_id=node.id, address=node.address, payload=payload, server=ctx.servers.get(node.server)
            )
        except (msgspec.DecodeError, KeyError, TypeError):
            as_asked = False
        if approval.run_id != ctx.run_id or not as_asked:
            raise TamperedError(
                f"the stored payload of `{node.id}` (or what was checked or shown with it, or the server it is bound to) "
                f"no longer matches the fingerprint that was approved ({approval.fingerprint}); nothing was executed",
                hint="the store was edited after the question; the audit log has what was approved",
                run=ctx.run_id,
                step=node.id,
            )
        if policy != ctx.policy_doc(node):
            raise TamperedError(
                f"the risk judgement of `{node.id}` changed since the question (policy or plan edited); nothing was executed",
                hint="start a new run so the question is asked under the current policy",
                run=ctx.run_id,
                step=node.id,
            )


def _canonical(value: Any) -> bytes:
    return _json.encode(value)
