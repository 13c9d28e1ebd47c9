"""One drive of a run: from the moment this process owns it until it parks, ends or stops.

The caller (the run API) has already taken the run in the store (owner and
lease). Here the graph is walked; the lease is renewed while it moves; at a
park the last node states and the park are written in one transaction that
also looks for decisions made meanwhile, so an approval given by another
process while this one was driving is never lost. If the drive is cancelled
(a signal, Ctrl-C) the run is left ``interrupted``, resumable; if the store
says another process took the run, this one stops writing at once.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import msgspec
import trio

from ..binding import decode_bindings
from ..errors import LostRunError, PolicyMismatchError, ServerStartError
from ..owners import LEASE_S, RENEW_EVERY_S
from ..plan import RISK_ORDER, Plan, ToolNode, WriteNode
from ..policy import BUILTIN_SERVER, Policy, hints_from
from ..reports import PendingApproval, RunReport, ServerStart, together_stats
from ..states import TERMINAL_NODE_STATES, ApprovalState, NodeState, RunState
from ..store import ApprovalRecord, EffectRecord, NodeRecord, RunRecord, RunStore
from ..store.approvals import batch_indexes
from .context import RunContext
from .faults import SimulatedCrash
from .journal import Journal
from .loops import split_copy, templates_within
from .scheduler import Scheduler
from .threads import Blocking

if TYPE_CHECKING:
    from ..tools.hub import Hub


async def drive(
    store: RunStore,
    run: RunRecord,
    plan: Plan,
    *,
    owner: str,
    hub: Hub | None,
    policy_digest: str,
    model: str | None,
    threads: int,
    at_once: int | None = None,
    restore: tuple[dict[str, NodeRecord], dict[str, EffectRecord], list[ApprovalRecord], dict[str, list[Any]]]
    | None = None,
    on_change: Callable[[str, str], None] | None = None,
    clock: Callable[[], float] = time.time,
    end_relaxed: bool = False,
    policy: Policy | None = None,
) -> RunReport:
    """Drive ``run`` (already owned by ``owner``) until it parks or ends; its report.

    ``policy``: for a stored run driven again, the policy it was started under: before
    anything is called, every step still to run is assessed from what its server lists
    now (:func:`declared_no_higher`).

    ``threads``: blocking calls on threads at once; ``at_once``: a loop's items at once when
    it says no ``at most`` (default: ``threads``).

    ``end_relaxed``: the run's end commits without waiting for the disk, for a caller whose
    next write, on the same database, does (a worker's job finished: ``Runs.ends_relaxed``).

    ``restore``: (nodes, effects, approvals, content blocks) of a run driven before, read in
    the same thread hop that took it. Without it, ``run`` was created just now for this drive:
    it has no question yet (only the process driving a run asks one), so none is read.
    """
    ctx = RunContext(
        plan=plan,
        run_id=run.id,
        approvers=list(plan.options.approvers) or [run.started_by],
        policy_digest=policy_digest,
        servers=decode_bindings(run.servers_json),
        clock=clock,
    )
    journal = Journal(
        [n.id for n in plan.nodes], run_id=run.id, store=store, owner=owner, clock=clock, on_change=on_change
    )
    inputs = msgspec.json.decode(run.inputs_json)
    scheduler = Scheduler(
        ctx,
        journal,
        hub=hub,
        threads=Blocking(threads),
        model=model,
        inputs=inputs,
        at_once=at_once or threads,
    )
    if restore:
        nodes, effects, approvals, contents = restore
        journal.restore(nodes, effects, contents)
        scheduler.restored()
        scheduler.gates.seen = approvals
    else:
        scheduler.gates.seen = []
    verdict: RunState | None = None
    pending: list[ApprovalRecord] | None = None
    lost: list[str] = []
    ending = [False]
    """True while the drive writes its park, end or interruption: a renewal refused then (it
    waited for that write, the store's one thread) is not a loss; the write checks the owner."""
    error: BaseException | None = None
    async with trio.open_nursery() as lease_keeper:
        lease_keeper.start_soon(
            _keep_lease, store, run.id, owner, lost, lease_keeper.cancel_scope, journal.limiter, ending
        )
        try:
            if restore and policy is not None and hub is not None:
                await declared_no_higher(plan, restore[0], hub, policy, run.id)
            while True:
                verdict = await scheduler.drive()
                if verdict != RunState.PARKED:
                    break
                ending[0] = True
                woken = await trio.to_thread.run_sync(
                    _park_or_wake, store, run.id, owner, journal, limiter=journal.limiter
                )
                if not woken:
                    break
                ending[0] = False
                scheduler.wake(woken)
            ending[0] = True
            pending = await trio.to_thread.run_sync(
                _finish, store, run.id, owner, verdict, scheduler, journal, end_relaxed, limiter=journal.limiter
            )
        except BaseException as exc:  # noqa: BLE001 - raised again below, once the run is left as it should be
            if not lost and not contains(exc, (LostRunError, SimulatedCrash)):
                ending[0] = True
                with trio.CancelScope(shield=True):
                    await trio.to_thread.run_sync(_interrupted, store, run.id, owner, journal, limiter=journal.limiter)
            # Raised again below, outside the nursery, so the caller gets it as it was
            # raised instead of wrapped in an exception group.
            error = exc
        finally:
            lease_keeper.cancel_scope.cancel()
    if lost:
        raise LostRunError(lost[0], run=run.id)
    if error is not None:
        raise error
    if pending is None:  # pragma: no cover - _finish ran, or the drive raised above
        pending = await trio.to_thread.run_sync(store.pending_approvals, run.id)
    return report(run, plan, verdict, journal, pending, getattr(hub, "started_in", None), scheduler.effects.asked_again)


async def declared_no_higher(
    plan: Plan, nodes: Mapping[str, NodeRecord], hub: Hub, policy: Policy, run_id: str, *, deciding: bool = False
) -> None:
    """Refuse (PolicyMismatchError; the run is left interrupted, nothing called) a stored run
    with a step still to run (or its ``preview:``/``check:``) whose server now declares its
    tool riskier than the plan says: a read now annotated destructive would otherwise run
    with no approval before it, and an approved ``write`` card would be spent on what is now
    ``critical``. The plan's risks were assessed from the listing when the run started; a
    server (reached by URL, or whose listing comes from data its binding does not cover)
    may say otherwise by the time a person approves.

    ``deciding``: called by an approval before its decision is recorded (``Runs.approve``
    on servers started for it): the refusal says the approval was not recorded."""
    try:
        await hub.wait_ready()
    except ServerStartError:
        return  # the hub is closed: nothing can be called, and the calls say why, as before
    done = {nid for nid, n in nodes.items() if n.state in TERMINAL_NODE_STATES}
    for node in plan.nodes:
        if not isinstance(node, ToolNode) or node.id in done:
            continue
        for what, server, tool, risk in (
            ("", node.server, node.tool, node.risk),
            *((f"'s {kind}", ref.server, ref.tool, ref.risk) for kind, ref in (("preview", node.preview), ("check", node.check)) if ref is not None),
        ):  # fmt: skip
            if server == BUILTIN_SERVER:
                continue
            listed = hub.tools(server).get(tool)
            if listed is None:  # renamed since: its call fails as never sent
                continue
            now, why = policy.assess(server, tool, hints_from(listed))
            if RISK_ORDER[now] > RISK_ORDER[risk]:
                spent = "; the approval was not recorded" if deciding else ""
                raise PolicyMismatchError(
                    f"step `{node.id}`{what}: {server}.{tool} is {now} now ({why}), but the run was planned, and its "
                    f"cards shown, with it as {risk}; nothing more was called{spent}",
                    hint=f"cancel the run (recipe cancel {run_id}) and start a new one, which asks before it",
                    run=run_id,
                    step=node.id,
                    tool=f"{server}.{tool}",
                    risk=now,
                    planned=risk,
                )


async def _keep_lease(
    store: RunStore,
    run_id: str,
    owner: str,
    lost: list[str],
    drive_scope: trio.CancelScope,
    limiter: trio.CapacityLimiter,
    ending: list[bool],
) -> None:
    """Renew the lease while the drive goes on. Losing it (taken over, cancelled) stops
    the drive: every later write would be refused anyway. An effect already executing
    is shielded and still records how it ended. ``limiter``: the drive's one store thread
    (the journal's), so a renewal never runs beside a write on the same connection; one
    refused while the drive writes its end (``ending``) stops renewing, nothing more."""
    while True:
        await trio.sleep(RENEW_EVERY_S)
        held = await trio.to_thread.run_sync(lambda: store.renew_lease(run_id, owner, lease_s=LEASE_S), limiter=limiter)
        if not held:
            if ending[0]:
                return
            lost.append(
                f"run {run_id} was taken over, cancelled or ended by another process; this one stopped driving it"
            )
            drive_scope.cancel()
            return


def contains(exc: BaseException, kind: type[BaseException] | tuple[type[BaseException], ...]) -> bool:
    """Whether ``exc``, or any exception inside it (nurseries group them), is a ``kind``."""
    if isinstance(exc, BaseExceptionGroup):
        return any(contains(e, kind) for e in exc.exceptions)
    return isinstance(exc, kind)


def _park_or_wake(store: RunStore, run_id: str, owner: str, journal: Journal) -> list[str]:
    """In one transaction: save the last node states and park, unless a waiting gate was decided meanwhile."""
    waiting = [nid for nid, s in journal.states.items() if s == NodeState.WAITING]
    with store.transaction():
        journal.write_unsaved()
        latest: dict[str, Any] = {}
        for a in store.approvals(run_id):
            if a.node_id in waiting and (a.node_id not in latest or a.asked_at > latest[a.node_id].asked_at):
                latest[a.node_id] = a
        woken = [nid for nid, a in latest.items() if a.state in (ApprovalState.APPROVED, ApprovalState.REJECTED)]
        if woken:
            return woken
        if not store.set_run_state(run_id, RunState.PARKED, expected=(RunState.RUNNING,), owner=owner):
            raise LostRunError(f"run {run_id} was taken over or ended by another process", run=run_id)
        store.append_event(run_id, "parked", data_json=msgspec.json.encode({"waiting": waiting}).decode())
    return []


def _finish(
    store: RunStore,
    run_id: str,
    owner: str,
    verdict: RunState,
    scheduler: Scheduler,
    journal: Journal,
    relaxed: bool = False,
) -> list[ApprovalRecord]:
    """Write the run's end (a park is written by ``_park_or_wake``); the questions still
    pending for its report, read in the same thread hop."""
    if verdict != RunState.PARKED:
        _end(store, run_id, owner, verdict, journal, relaxed)
    seen = scheduler.gates.seen
    if seen is not None and not seen:
        return []  # the run has no question at all: none was found, and this drive asked none since
    return store.pending_approvals(run_id)


def _end(store: RunStore, run_id: str, owner: str, verdict: RunState, journal: Journal, relaxed: bool) -> None:
    err = None
    if verdict == RunState.FAILED:
        err = next((f"{k}: {v}" for k, v in journal.errors.items() if journal.states[k] == NodeState.FAILED), None)
    journal.close_open(f"the run ended {verdict}")  # e.g. a branch still asking when another was rejected
    with store.transaction(relaxed=relaxed):
        journal.write_unsaved()
        if store.set_run_state(run_id, verdict, expected=(RunState.RUNNING,), error=err, owner=owner):
            store.append_event(run_id, verdict)
        else:
            raise LostRunError(f"run {run_id} was taken over or ended by another process", run=run_id)


def _interrupted(store: RunStore, run_id: str, owner: str, journal: Journal) -> None:
    """The drive stopped before the run parked or ended: leave it resumable, if it is still ours."""
    try:
        with store.transaction():
            journal.write_unsaved()
            if store.set_run_state(run_id, RunState.INTERRUPTED, expected=(RunState.RUNNING,), owner=owner):
                store.append_event(run_id, "interrupted")
    except LostRunError:
        pass  # someone else holds it now; nothing of ours to leave behind


def report(
    run: RunRecord,
    plan: Plan,
    verdict: RunState | None,
    journal: Journal,
    pending: list[ApprovalRecord],
    started_in: dict[str, float] | None,
    asked_again: dict[str, dict[str, Any]] | None = None,
) -> RunReport:
    states = journal.states
    errors = {k: v for k, v in journal.errors.items() if states.get(k) == NodeState.FAILED}
    unknown = {k: v for k, v in journal.errors.items() if states.get(k) == NodeState.UNKNOWN}
    last = plan.nodes[-1] if plan.nodes else None
    text = None
    if isinstance(last, WriteNode) and states.get(last.id) == NodeState.SUCCEEDED:
        out = journal.outputs.get(last.id)
        text = out if isinstance(out, str) else None
    return RunReport(
        run=run.id,
        recipe=run.recipe_name,
        state=str(verdict) if verdict is not None else str(run.state),
        pending=[pending_view(a, plan, decode_bindings(run.servers_json)) for a in pending],
        errors=errors,
        unknown=unknown,
        together=together_stats(plan, journal.times, states),
        servers={name: ServerStart(start_s=t) for name, t in (started_in or {}).items()},
        text=text,
        asked_again=dict(asked_again or {}),
    )


def pending_view(a: Any, plan: Plan, bindings: dict[str, Any]) -> PendingApproval:
    """A waiting question, its card rendered now from its frozen payload (a tampered one has
    no card, and the refusal instead: ``cards.card_and_refusal``)."""
    from ..cards import ELICITATION, card_and_refusal, is_elicitation

    card, refusal = card_and_refusal(a, plan, bindings)
    asks = items = None
    if refusal is None:
        payload = msgspec.json.decode(a.payload_json)
        asks = payload[ELICITATION] if is_elicitation(payload) else None
        base = split_copy(plan.index(), a.step)[0]
        if any(base in inside for inside in templates_within(plan).values()):
            items = batch_indexes(a)
    return PendingApproval(
        step=a.step, approval=a.id, fingerprint=a.fingerprint, expires_at=a.expires_at, card=card,
        approvers=msgspec.json.decode(a.approvers_json) if a.approvers_json else [], tampered=refusal is not None, refusal=refusal,
        items=items, asks=asks,
    )  # fmt: skip
