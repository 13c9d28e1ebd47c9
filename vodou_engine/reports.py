"""What the run API hands to every surface: reports and views of runs, as msgspec Structs.

A surface (the CLI, a web page, an agent) formats these; none of them reads
the engine's or the store's internals. Encode any of them with
``msgspec.json.encode`` for a JSON document.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec

from .plan import ApprovalNode, JoinNode, LoopNode, Plan, QuestionNode, ToolNode, WriteNode


class Doc(msgspec.Struct, frozen=True, kw_only=True):
    """House policy for report documents: keyword construction, stable field order.

    A subclass says ``frozen=True`` again: msgspec inherits it, type checkers do not."""


class PendingApproval(Doc, frozen=True):
    step: str
    approval: str
    fingerprint: str
    expires_at: float | None = None
    card: str = ""
    """Rendered from the frozen payload when this document was made (``cards.stored_card``),
    every hidden character marked; empty for a tampered question."""
    approvers: list[str] = []
    tampered: bool = False
    """What is stored of this question no longer gives its fingerprint (the store was edited):
    it has no card and nobody can decide it (``refusal`` says so, to be shown in its place)."""
    refusal: str | None = None
    items: list[int] | None = None
    """For a loop's batch question: the items it lists (approve some with ``items=``,
    ``recipe approve RUN STEP --items 0,2``); None for any other question."""
    asks: dict[str, Any] | None = None
    """A server's question in the middle of the step's call (``{"server", "tool", "message",
    "schema"}``): answered with ``Runs.answer``, not approved; None for an approval or a
    recipe's own question."""


class Together(Doc, frozen=True):
    """A together's honest figures: each branch's own work (its calls, started ->
    ended) against the wall-clock of the whole together. Time a branch spent
    queued for a thread, or waiting for a person, is not work; it is reported
    apart."""

    join: str
    wall_s: float
    """From the first branch's work starting to the last one's ending."""
    sum_s: float
    """The branches' own work, added up (a cancelled or failed branch's too: it ran meanwhile)."""
    branches: int
    """Branches that did work (those with nothing recorded are named below, not counted)."""
    slowest: str | None = None
    """The slowest branch that succeeded; never a failed or cancelled one."""
    slowest_s: float = 0.0
    queued_s: float = 0.0
    """Time the branches' steps waited to start once ready (for a thread slot, or their turn),
    added up over the steps: not work."""
    failed: list[str] = []
    cancelled: list[str] = []
    unfinished: list[str] = []
    """Branches still running or waiting for a person when the figures were taken."""


class ServerStart(Doc, frozen=True):
    start_s: float
    """Seconds from spawn to tools listed."""


class RunReport(Doc, frozen=True):
    """Where a run stands after a call of the run API (start, approve, resume...)."""

    run: str
    state: str
    recipe: str = ""
    pending: list[PendingApproval] = []
    errors: dict[str, str] = {}
    """Steps that failed, and why."""
    unknown: dict[str, str] = {}
    """Effects that may or may not have happened: a person reconciles each."""
    together: list[Together] = []
    servers: dict[str, ServerStart] = {}
    """Per server this call started: how long it took to be ready (a slow server is not a slow run)."""
    text: str | None = None
    """The text of a run that ends in a ``write`` step."""
    asked_again: dict[str, dict] = {}
    """Steps asked again after their approval: whose ``check:`` read changed (what it was,
    what it is now), or (``"why": "defaults"``) whose tool's schema now gives a default to a
    field the card did not show (``was``/``now``: the payload without and with it; ``fields``)."""
    driven_by: str | None = None
    """Set when another live process drives the run: it will pick up what was decided."""
    queued: bool = False
    """The run goes on in a worker, not here: a drive of it waits in the queue (docs/scale-out.md)."""
    driven_in: str | None = None
    """The live process whose warm servers drove this call's part of the run (``recipe serve``
    holding the same store), when it was not the caller's own."""


class NodeView(Doc, frozen=True):
    node: str
    kind: str
    state: str
    """A node state; for an effect, ``executing`` while its call is under way and ``unknown``
    only when it is in doubt (a person reconciles it)."""
    ready_at: float | None = None
    started_at: float | None = None
    ended_at: float | None = None
    error: str | None = None
    output: Any = None
    has_output: bool = False
    content: list[Any] | None = None
    """A tool step's content blocks as its server sent them (images, audio, resource links,
    embedded resources, text, with their annotations), whole; None when its output, a plain
    text, is all the server sent."""
    progress: dict[str, Any] | None = None
    """The latest progress its server reported on its call (``{"progress", "total"?, "message"?}``)."""


class ApprovalView(Doc, frozen=True):
    id: str
    step: str
    state: str
    fingerprint: str
    asked_at: float
    expires_at: float | None = None
    decided_by: str | None = None
    decided_at: float | None = None
    reason: str | None = None
    card: str = ""
    """As :attr:`PendingApproval.card`: rendered now from the stored payload, never the stored text;
    empty for a tampered question."""
    approvers: list[str] = []
    payload: Any = None
    """The frozen payload; None for a tampered question, whose stored bytes are no longer the
    question (they stay in the store, for whoever looks into the edit)."""
    tampered: bool = False
    """As :attr:`PendingApproval.tampered`."""
    refusal: str | None = None


class EffectView(Doc, frozen=True):
    step: str
    state: str
    fingerprint: str
    idempotency_key: str
    payload: Any = None
    result: Any = None
    error: str | None = None
    started_at: float | None = None
    ended_at: float | None = None
    approval: str | None = None
    """None: the plan let it run without asking."""
    decided_by: str | None = None
    decided_at: float | None = None
    card: str | None = None
    """The card of its approval, rendered again from the approved payload."""
    settled_by: str | None = None


class RunSummary(Doc, frozen=True):
    run: str
    recipe: str
    state: str
    started_by: str
    created_at: float
    ended_at: float | None = None
    driven_by: str | None = None


class RunView(Doc, frozen=True):
    """Everything a person may ask about one run."""

    run: str
    recipe: str
    state: str
    started_by: str
    created_at: float
    ended_at: float | None = None
    error: str | None = None
    plan_fingerprint: str = ""
    recipe_path: str | None = None
    inputs: dict[str, Any] = {}
    nodes: list[NodeView] = []
    approvals: list[ApprovalView] = []
    effects: list[EffectView] = []
    together: list[Together] = []
    servers: dict[str, Any] = {}
    driven_by: str | None = None


def node_kind(node: Any) -> str:
    kinds: dict[type, str] = {
        ToolNode: "tool",
        WriteNode: "write",
        JoinNode: "join",
        QuestionNode: "question",
        ApprovalNode: "approval",
        LoopNode: "each",
    }
    return kinds[type(node)]


def together_stats(
    plan: Plan,
    times: Mapping[str, tuple[float | None, float | None, float | None]],
    states: Mapping[str, str],
) -> list[Together]:
    """Per together: wall-clock, each branch's own work, the slowest successful branch.

    The sum counts every branch's work, a cancelled or failed one's too (it
    ran at the same time); only a branch that succeeded can be the slowest.
    ``times`` holds (ready, started, ended) per node. A branch's work is the
    measure of the union of its tool and write nodes' [started, ended]
    spans (so steps in sequence add up and steps side by side are not
    counted twice); gates are a person's time, not work, and ready -> started
    is time queued for a thread, reported apart. A branch that was cancelled
    or failed is named as such even when no work of it was recorded (a call
    abandoned on its thread, a step that failed before it began).
    """
    joins = [j for j in plan.nodes if isinstance(j, JoinNode)]
    if not joins:
        return []
    worked = {n.id for n in plan.nodes if isinstance(n, (ToolNode, WriteNode))}
    # A loop that is a together's branch: its work is its items' (``got[0]``, ``got[1][2]``),
    # copies of the body steps its item lists (a join inside a loop body keeps its own items).
    templates = {m for n in plan.nodes if isinstance(n, LoopNode) for m in n.body}
    copies: dict[str, list[str]] = {}
    if templates:
        for nid in times:
            cut = nid.find("[")
            if cut > 0 and nid[:cut] in templates:
                copies.setdefault(nid[:cut], []).append(nid)
    out = []
    for j in joins:
        spans = []
        first: float | None = None
        last: float | None = None
        queued = 0.0
        failed, cancelled, unfinished = [], [], []
        for branch, item in zip(j.needs, j.members, strict=True):
            st = states.get(branch, "")
            if st == "cancelled":
                cancelled.append(branch)
            elif st in _NOT_SUCCEEDED:
                failed.append(branch)
            elif st != "succeeded":
                unfinished.append(branch)  # pending, running, or waiting for a person
            work = []
            if copies and j.id not in templates:
                item = [c for m in item for c in (m, *copies.get(m, ()))]
            for m in item:
                if m not in times or (m not in worked and m.partition("[")[0] not in worked):
                    continue  # a copy (`got[0]`) works as its template step does
                ready, started, ended = times[m]
                if ready is not None and started is not None and started > ready:
                    queued += started - ready
                if started is not None and ended is not None:
                    work.append((started, ended))
            if not work:
                continue
            if len(work) == 1:
                b, e = work[0]
                length = e - b
            else:
                b = min(s for s, _ in work)
                e = max(e for _, e in work)
                length = _union(work)
            if first is None or b < first:
                first = b
            if last is None or e > last:
                last = e
            spans.append((branch, length, st == "succeeded"))
        if first is None or last is None:
            continue
        finished = [s for s in spans if s[2]]
        slowest = max(finished, key=lambda s: s[1]) if finished else (None, 0.0, False)
        out.append(Together(
            join=j.id, wall_s=last - first, sum_s=sum(s[1] for s in spans), branches=len(spans),
            slowest=slowest[0], slowest_s=slowest[1], queued_s=queued, failed=failed, cancelled=cancelled, unfinished=unfinished,
        ))  # fmt: skip
    return out


_NOT_SUCCEEDED = frozenset({"failed", "skipped", "rejected", "unknown"})


def _union(spans: list[tuple[float, float]]) -> float:
    total = 0.0
    end = None
    for s, e in sorted(spans):
        if end is None or s > end:
            total += e - s
            end = e
        elif e > end:
            total += e - end
            end = e
    return total
