"""Deciding: the question a person means by RUN [STEP] (``pending``), approving it and
driving the run on (here, or by queueing its drive for the workers in the transaction
that records the decision), rejecting it, and a person's word on an effect left in
doubt (``reconcile``). Whatever would refuse is checked before a decision is recorded:
the fingerprint of the card that was read, its payload unchanged, and everything the
drive after it needs (``DriveMixin._ready_to_drive``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

import msgspec

from ..binding import decode_bindings, started_where
from ..bounds import check_plan
from ..cards import check_untampered
from ..errors import AlreadyDecidedError, ExpiredError, PolicyMismatchError, RefusedError, StaleError, UsageError
from ..jobs import defer_drive_in, store_queue
from ..owners import LEASE_S
from ..plan import Plan
from ..policy import Policy
from ..reports import EffectView, PendingApproval, RunReport
from ..runtime.plans import check_stored_plan
from ..servers import ServerSet, servers_to_finish
from ..states import ApprovalState, NodeState, RunState
from ..store import NodeRecord
from ..store.base import describe_decision
from .answers import answer_doc, check_answer_fits
from .common import effective_state, in_thread, plain, takeable
from .drive import DriveMixin
from .handoff import check_warm, drive_warm
from .lifecycle import close_nodes
from .views import effect_view


class DecisionsMixin(DriveMixin):
    """``pending``, ``approve``, ``reject``, ``reconcile``."""

    def pending(self, run_id: str, step: str | None = None) -> PendingApproval:
        """The question a person means by RUN [STEP]: what they should read before deciding."""
        from ..runtime.driver import pending_view  # here: imports trio

        store = self.store(create=False)
        run, approval = _find_approval(store, run_id, step)
        plan, bindings = check_stored_plan(run.plan_json, run.plan_fingerprint), decode_bindings(run.servers_json)
        check_plan(plan)  # a plan no drive would take (refused as a drive refuses it), before its expiry is read
        check_untampered(approval, plan, bindings)  # a card whose bytes are not those that would run is never shown
        return pending_view(approval, plan, bindings)

    @plain
    async def approve(
        self,
        run_id: str,
        step: str | None = None,
        *,
        actor: str,
        fingerprint: str | None = None,
        model: str | None = None,
        on_change: Callable[[str, str], None] | None = None,
        prespawned: Any = None,
        proof: str = "api",
        hub: Any = None,
        drive: bool = True,
        hand_off: bool = True,
        _answer: dict[str, Any] | None = None,
        items: list[int] | None = None,
    ) -> RunReport:
        """Approve the pending question of ``step`` and drive the run on: here, or, when
        this store's runs go on in the workers (:attr:`workers`), by queueing its resume
        in the transaction that records the decision (the report says ``queued``).
        ``drive=False`` only records the decision (a caller that drives runs itself).
        On a SQLite store that a live ``recipe serve`` holds, the run is driven there, on
        its warm servers, and this call waits for its report (``driven_in`` says so);
        ``hand_off=False`` drives it here all the same (``runs/handoff.py``).
        ``items``: for a loop's batch question, approve only these items (by index); the
        others are declined and never run.

        ``fingerprint``: approve only if the question is still the one with this
        fingerprint (the card the person read). Everything that would stop the
        run from going on (its servers resolve differently, the policy or the
        recipe changed) is refused before the decision is recorded. A server's question
        (``PendingApproval.asks``) is answered with :meth:`answer` instead, which passes
        ``_answer`` (recorded as the decision's reason, as JSON).
        """
        store = self.store(create=False)
        queue = drive and self.workers
        reason = None if _answer is None else msgspec.json.encode(_answer).decode()

        def check() -> tuple[Any, Any, Plan, ServerSet, Policy]:
            run, approval = _find_approval(store, run_id, step)
            if fingerprint and fingerprint != approval.fingerprint:
                raise _stale_fingerprint(store, run_id, approval, fingerprint)
            check_answer_fits(run_id, approval, _answer)
            plan, servers, policy = self._ready_to_drive(store, run)
            _check_card(run, approval)
            return run, approval, plan, servers, policy

        def checked_nodes() -> tuple[Plan, ServerSet, Policy, dict[str, NodeRecord]]:
            _, _, plan, servers, policy = check()
            return plan, servers, policy, store.get_nodes(run_id)

        def check_and_decide() -> tuple[Any, Plan, ServerSet, Policy]:
            run, approval, plan, servers, policy = check()
            if hub is not None and drive and not queue:  # warm servers handed in: started where the run's start?
                started_where(run_id, servers, hub)
            if not queue:
                _decide(store, approval, ApprovalState.APPROVED, actor, reason, proof, items)
                return run, plan, servers, policy
            conn = store_queue(store)
            refusal = None
            with store.transaction():  # the decision and the job that acts on it commit together
                try:
                    _decide(store, approval, ApprovalState.APPROVED, actor, reason, proof, items)
                except RefusedError as exc:
                    refusal = exc  # the refused attempt stays in the run's log
                else:
                    defer_drive_in(conn, run_id)
            if refusal is not None:
                raise refusal
            return run, plan, servers, policy

        if drive and not queue and hub is None and getattr(prespawned, "any_waiting", False):
            # The servers were started early for this approval (`recipe approve`): their listing
            # is read before the decision is recorded, on the same processes the drive then uses
            # (one start), so a step its server now declares riskier spends no approval.
            plan, servers, policy, nodes = await in_thread(checked_nodes)
            async with self._run_servers(servers, plan, nodes, prespawned) as early:
                if early is not None:
                    from ..runtime.driver import declared_no_higher  # here: imports trio

                    await declared_no_higher(plan, nodes, early, policy, run_id, deciding=True)
                _run, _plan, servers, policy = await in_thread(check_and_decide)
                return await self._take_and_drive(
                    run_id, servers, policy, model=model, on_change=on_change, prespawned=prespawned, busy_ok=True,
                    hub=early,
                )  # fmt: skip
        if drive and not queue and hub is None and hand_off:
            # a live `recipe serve` on this store will drive it: it looks, on the warm servers
            # it will drive on, before the decision is recorded (nothing is started here)
            checked = await check_warm(self._location(), run_id)
            if checked is not None and checked.mismatch:
                raise PolicyMismatchError(checked.mismatch, hint=checked.mismatch_hint, run=run_id)
        _run, _plan, servers, policy = await in_thread(check_and_decide)
        if queue:
            return await in_thread(self._report, run_id, queued=True)
        if not drive:  # the caller drives it (a long-lived process, on its own task)
            return await in_thread(self._report, run_id)
        if hub is None and hand_off:  # a live `recipe serve` on this store drives it on its warm servers
            warm = await drive_warm(self._location(), run_id)
            if warm is not None and warm.report is not None:
                report: RunReport = msgspec.structs.replace(warm.report, driven_in=warm.by)
                return report
        return await self._take_and_drive(
            run_id, servers, policy, model=model, on_change=on_change, prespawned=prespawned, busy_ok=True, hub=hub
        )

    def ready_to_decide(self, run_id: str) -> tuple[list[str], ServerSet, Plan, Policy, dict[str, NodeRecord]]:
        """What a decision on ``run_id`` is checked against, read once: the servers the run still
        calls and their configurations (as :meth:`bound_servers`), its plan, policy and node
        states. Raises what :meth:`approve` would refuse the run with (``_ready_to_drive``). For a
        long-lived process that checks before deciding (``recipe serve``): one thread hop and one
        decode of the plan, where the servers and the check each read the run."""
        store = self.store(create=False)
        plan, servers, policy = self._ready_to_drive(store, store.get_run(run_id))
        nodes = store.get_nodes(run_id)
        return servers_to_finish(plan, nodes), servers, plan, policy, nodes

    @plain
    async def declared_before_deciding(
        self, run_id: str, hub: Any, plan: Plan, policy: Policy, nodes: Mapping[str, NodeRecord]
    ) -> None:
        """Refuse (PolicyMismatchError, nothing recorded) when a server the run still calls,
        reached through ``hub`` (warm servers a long-lived process drives the run on next),
        now declares a step riskier than the run's plan (``runtime/driver.declared_no_higher``):
        for a caller that records the decision and drives later (``recipe serve``'s page).
        ``plan``, ``policy``, ``nodes``: the run as :meth:`ready_to_decide` read it."""
        from ..runtime.driver import declared_no_higher  # here: imports trio

        await declared_no_higher(plan, nodes, hub, policy, run_id, deciding=True)

    @plain
    async def answer(
        self,
        run_id: str,
        step: str | None = None,
        *,
        actor: str,
        action: str = "accept",
        content: Mapping[str, Any] | None = None,
        fingerprint: str | None = None,
        model: str | None = None,
        on_change: Callable[[str, str], None] | None = None,
        prespawned: Any = None,
        proof: str = "api",
        hub: Any = None,
        drive: bool = True,
    ) -> RunReport:
        """Answer a server's question (MCP elicitation) that parked ``step``, and drive on.

        ``action``: ``accept`` with ``content`` (checked against the schema the server asked
        with; refused with the schema's own words), ``decline`` or ``cancel`` (no content).
        The answer is recorded with the decision (the audit log carries it) and given to the
        server when the step's call is made again and it asks the same question; once.
        Everything :meth:`approve` checks is checked first.
        """
        return await self.approve(
            run_id, step, actor=actor, fingerprint=fingerprint, model=model, on_change=on_change,
            prespawned=prespawned, proof=proof, hub=hub, drive=drive, _answer=answer_doc(action, content),
        )  # fmt: skip

    @plain
    async def reject(
        self,
        run_id: str,
        step: str | None = None,
        *,
        actor: str,
        reason: str | None = None,
        fingerprint: str | None = None,
        proof: str = "api",
    ) -> RunReport:
        """Reject the pending question of ``step``: the run ends ``declined`` and nothing after it runs."""
        store = self.store(create=False)

        def reject_now() -> RunReport:
            run, approval = _find_approval(store, run_id, step)
            if fingerprint and fingerprint != approval.fingerprint:
                raise _stale_fingerprint(store, run_id, approval, fingerprint)
            _check_card(run, approval)
            _decide(store, approval, ApprovalState.REJECTED, actor, reason, proof)
            run = store.get_run(run_id)
            driven_by = None
            with store.transaction():
                if takeable(run) and store.take_run(run_id, self.owner, lease_s=LEASE_S, dead_owner=run.owner):
                    why = f"rejected by {actor}" + (f": {reason}" if reason else "")
                    store.save_nodes(
                        run_id,
                        [
                            NodeRecord(
                                node_id=approval.node_id, state=NodeState.REJECTED, error=why, ended_at=self.clock()
                            )
                        ],
                    )
                    store.set_run_state(run_id, RunState.DECLINED, expected=(RunState.RUNNING,), owner=self.owner)
                    store.append_event(run_id, RunState.DECLINED, actor=actor)
                    close_nodes(store, run, f"the run was {why}", self.clock())
                elif run.state == RunState.RUNNING:
                    driven_by = run.owner  # its driver sees the rejection when it next stops
            return self._report(run_id, driven_by=driven_by)

        return await in_thread(reject_now)

    def reconcile(self, run_id: str, step: str, *, executed: bool, actor: str, reason: str | None = None) -> EffectView:
        """A person's word on an effect left ``unknown`` (or one the server reported failed).

        ``executed=True``: it happened; a resumed run goes on from it.
        ``executed=False``: it did not; the step is recorded failed, and the
        run fails there (a new run asks again)."""
        store = self.store(create=False)
        store.get_run(run_id)
        eff = store.settle_effect(run_id, step, executed, actor, reason=reason)
        return effect_view(eff, {}, None, {})


def _find_approval(store: Any, run_id: str, step: str | None) -> tuple[Any, Any]:
    """The pending approval a person means by RUN [STEP]."""
    run = store.get_run(run_id)
    pending = store.pending_approvals(run_id)
    if step is not None:
        mine = [a for a in pending if a.step == step or a.node_id == step]
        if mine:
            return run, max(mine, key=lambda a: a.asked_at)
        every = [a for a in store.approvals(run_id) if a.step == step or a.node_id == step]
        if every:
            last = max(every, key=lambda a: a.asked_at)
            raise AlreadyDecidedError(
                f"{describe_decision(last)}; nothing was changed", run=run_id, step=step, state=last.state
            )
        steps = sorted({a.step for a in store.approvals(run_id)})
        raise RefusedError(
            f"run {run_id} has no approval for step `{step}`; nothing was changed",
            hint=f"steps with approvals: {', '.join(steps) or 'none'}",
            run=run_id,
            step=step,
        )
    if not pending:
        raise RefusedError(
            f"run {run_id} has no approval waiting (it is {effective_state(run, time.time())}); nothing was changed",
            run=run_id,
            state=run.state,
        )
    if len(pending) > 1:
        raise UsageError(
            f"run {run_id} has {len(pending)} approvals waiting: {', '.join(a.step for a in pending)}; name the step",
            run=run_id,
            steps=[a.step for a in pending],
        )
    return run, pending[0]


def _stale_fingerprint(store: Any, run_id: str, approval: Any, wanted: str) -> StaleError:
    known = any(a.fingerprint == wanted for a in store.approvals(run_id))
    if known:
        message = f"the question for `{approval.step}` was asked again since the card with {wanted}; it is now {approval.fingerprint}; nothing was changed"
    else:
        message = f"no question of run {run_id} ever had the fingerprint {wanted}; the current one for `{approval.step}` is {approval.fingerprint}; nothing was changed"
    return StaleError(
        message,
        hint="read the current card and approve its fingerprint",
        run=run_id,
        step=approval.step,
        fingerprint=approval.fingerprint,
        given=wanted,
        known=known,
    )


def _check_card(run: Any, approval: Any) -> None:
    """A decision binds to the card a person read: refused when the stored payload no longer
    gives the fingerprint it was asked with (``TamperedError``), as showing it is."""
    check_untampered(
        approval, check_stored_plan(run.plan_json, run.plan_fingerprint), decode_bindings(run.servers_json)
    )


def _decide(
    store: Any, approval: Any, state: str, actor: str, reason: str | None, proof: str, items: list[int] | None = None
) -> Any:
    try:
        return store.decide(approval.id, state, by=actor, reason=reason, items=items)
    except ExpiredError:
        # Recorded as expired, so the audit log shows the question lapsed unanswered.
        verb = "approve" if state == ApprovalState.APPROVED else "reject"
        store.decide(approval.id, ApprovalState.EXPIRED, by="clock", reason=f"{verb} by {actor} came too late")
        raise
