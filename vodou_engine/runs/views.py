"""Reading runs: one run's whole record (``show``), the report a call hands back, the list
of runs; and looking at a plan before running it (``inspect``, ``check_policy``).
A run whose driver is gone reads as ``interrupted`` everywhere (``common.effective_state``).
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Mapping
from typing import Any

import msgspec

from ..binding import decode_bindings
from ..cards import card_and_refusal, card_or_refusal
from ..compiler import load_source
from ..owners import describe
from ..plan import FORMAT_LOOPS, Plan
from ..policy import Policy
from ..reports import ApprovalView, EffectView, NodeView, RunReport, RunSummary, RunView, node_kind, together_stats
from ..runtime.loops import copies_by_template
from ..runtime.plans import check_stored_plan
from ..servers import ServerSet
from ..states import EffectState, NodeState, RunState
from ..text_safety import source_warnings
from ..tools.results import stored_contents
from .common import effective_state
from .core import RunsCore


class Inspection(msgspec.Struct, kw_only=True):
    """A plan checked against the servers it would run on (``Runs.inspect``)."""

    plan: Plan
    path: str | None = None
    status: dict[str, Any] = {}  # cards.ToolStatus, loaded only once servers are asked
    """Per step (and ``step#preview``/``step#check``): does its tool exist, else the closest name."""
    note: str = ""
    servers: dict[str, str] = {}
    """Per server the plan uses: the command it resolves to."""
    servers_source: str = ""
    warnings: list[str] = []
    listed: dict[str, float] = {}
    """Per server listed: when its tools were listed (epoch seconds)."""
    cached: list[str] = []
    """The servers whose tools came from the cache (not started)."""


class PolicyProblem(msgspec.Struct, kw_only=True):
    key: str
    server: str
    message: str


class ViewsMixin(RunsCore):
    """``show``, ``list``, a run's report; ``inspect`` and ``check_policy``."""

    def show(self, run_id: str) -> RunView:
        """A run's nodes (states, outputs, timings), approvals and effects with their audit."""
        store = self.store(create=False, readonly=True)
        return _view(store, store.get_run(run_id), self.clock())

    def _report(self, run_id: str, *, driven_by: str | None = None, queued: bool = False) -> RunReport:
        store = self.store(create=False)
        run = store.get_run(run_id)
        view = _view(store, run, self.clock())
        from ..runtime.driver import pending_view  # here: imports trio

        plan, bindings = check_stored_plan(run.plan_json, run.plan_fingerprint), decode_bindings(run.servers_json)
        return RunReport(
            run=run.id,
            recipe=run.recipe_name,
            state=view.state,
            pending=[pending_view(a, plan, bindings) for a in store.pending_approvals(run_id)],
            errors={n.node: n.error or "" for n in view.nodes if n.state == NodeState.FAILED},
            unknown={e.step: e.error or "" for e in view.effects if e.state == EffectState.UNKNOWN},
            together=view.together,
            driven_by=describe(driven_by) if driven_by else None,
            queued=queued,
        )

    # --- looking before running ----------------------------------------------------------
    async def inspect(
        self,
        source: str | os.PathLike[str] | Plan,
        *,
        text: str | None = None,
        online: bool = True,
        cached: bool = False,
    ) -> Inspection:
        """The plan as it would run here: every tool resolved on its live server (listed,
        never called), risks raised by annotations, and where each server comes from.
        ``online=False`` starts nothing. ``cached`` (what ``recipe plan`` does): a server
        whose binding is unchanged since its tools were last listed is not started, its
        kept list is used, and ``listed`` says when it was listed (docs/cli.md, "The tool
        cache"); the plans compiled for the card come from the compile memo. Every live
        listing is kept for the next time."""
        # here: planning.py and the tool cache, ~1 ms that `recipe runs` and `show` do without
        from ..planning import list_tools_cached, servers_of, stale

        plan, recipe_text, path = self._load_for_card(source, text, memo=cached)
        if not online:
            hidden = source_warnings(recipe_text or "", path)  # characters written into the recipe that nobody sees
            return Inspection(
                plan=plan, path=path, note="offline: servers not started, tool names not checked", warnings=hidden
            )
        servers = self.servers()
        tools, listed = await list_tools_cached(
            servers.servers, servers_of(plan), source=servers.source, cached=cached, clock=self.clock
        )
        again = stale(plan, tools, listed)
        if again:  # a step names a tool the kept list lacks: it may have been added since
            fresh, when = await list_tools_cached(
                servers.servers, again, source=servers.source, cached=False, clock=self.clock
            )
            tools, listed = {**tools, **fresh}, {**listed, **when}
        return self._inspection(plan, recipe_text, path, servers, tools, listed, memo=cached)

    def inspect_kept(self, source: str | os.PathLike[str] | Plan, *, text: str | None = None) -> Inspection | None:
        """``inspect(cached=True)`` when every server's tools are kept for its current
        binding: nothing started, no event loop; None when a server must be started."""
        # here: planning.py and the tool cache, ~1 ms that `recipe runs` and `show` do without
        from ..planning import kept_tools, servers_of, stale

        plan, recipe_text, path = self._load_for_card(source, text, memo=True)
        servers = self.servers()
        kept = kept_tools(servers.servers, servers_of(plan), source=servers.source)
        if kept is None or stale(plan, *kept):
            return None
        tools, listed = kept
        return self._inspection(plan, recipe_text, path, servers, tools, listed, memo=True)

    def _load_for_card(
        self, source: str | os.PathLike[str] | Plan, text: str | None, *, memo: bool
    ) -> tuple[Plan, str | None, str | None]:
        if memo and text is None and not isinstance(source, Plan):
            path = os.fspath(source)
            plan, recipe_text = load_source(path, policy=self.policy(), memo=True)
            return plan, recipe_text, path
        return self.load(source, text=text)

    def _inspection(
        self,
        plan: Plan,
        recipe_text: str | None,
        path: str | None,
        servers: ServerSet,
        tools: Mapping[str, Mapping[str, Any]],
        listed: Mapping[str, Any],
        *,
        memo: bool,
    ) -> Inspection:
        # here: planning.py and the tool cache, ~1 ms that `recipe runs` and `show` do without
        from ..planning import (
            check_arguments,
            check_hints,
            compile_with_hints,
            listed_note,
            missing,
            resolve,
            servers_of,
            task_only_of,
        )

        hidden = source_warnings(recipe_text or "", path)  # characters written into the recipe that nobody sees
        status, hints = resolve(plan, servers.servers, tools, servers.disabled, task_only_of(tools))
        if recipe_text is not None and hints:
            plan = compile_with_hints(recipe_text, path, self.policy(), hints, memo=memo)
        elif recipe_text is None:
            check_hints(plan, self.policy(), hints)
        if not missing(status):  # a missing tool is shown on the card first; its arguments wait
            check_arguments(plan, tools, recipe_text, path)
        used = {n: servers.servers[n].command_line() for n in servers_of(plan) if n in servers.servers}
        warnings = hidden + [
            p.message
            for p in policy_problems(self.policy(), servers, tools)
            if p.server in tools or p.server not in servers.servers
        ]
        note = f"servers from {servers.source}; {listed_note(listed, self.clock())}, none called"
        return Inspection(
            plan=plan, path=path, status=status, note=note, servers=used, servers_source=servers.source,
            warnings=warnings, listed={n: v.at for n, v in listed.items()},
            cached=sorted(n for n, v in listed.items() if v.cached),
        )  # fmt: skip

    async def check_policy(self) -> list[PolicyProblem]:
        """Entries of the policy file that name no configured server, or a tool that server
        does not list (a typo there is a rule that silently never applies)."""
        # here: planning.py and the tool cache, ~1 ms that `recipe runs` and `show` do without
        from ..planning import list_tools

        policy = self.policy()
        servers = self.servers()
        named = sorted({key.split(".", 1)[0] for key in policy.data.tools} | set(policy.data.servers))
        tools = await list_tools(servers.servers, [n for n in named if n in servers.servers])
        return policy_problems(policy, servers, tools)

    def list(
        self,
        *,
        state: str | None = None,
        recipe: str | None = None,
        since: float | None = None,
        limit: int = 50,
        started_by: str | None = None,
    ) -> list[RunSummary]:
        """Runs, newest first. A run whose driving process is gone shows as ``interrupted``.
        ``started_by``: only runs that person (or agent) started."""
        store = self.store(create=False, readonly=True)
        wanted = None if state is None else {state}
        stored_states = None
        if wanted is not None:
            stored_states = {RunState.RUNNING, RunState.INTERRUPTED} if RunState.INTERRUPTED in wanted else wanted
        rows = store.list_runs(
            limit if wanted is None else max(limit * 4, 200),
            state=stored_states,
            recipe=recipe,
            since=since,
            started_by=started_by,
            plan=False,  # a summary shows no plan
        )
        out = []
        for r in rows:
            effective = effective_state(r, self.clock())
            if wanted is not None and effective not in wanted:
                continue
            out.append(
                RunSummary(
                    run=r.id,
                    recipe=r.recipe_name,
                    state=effective,
                    started_by=r.started_by,
                    created_at=r.created_at,
                    ended_at=r.ended_at,
                    driven_by=describe(r.owner) if effective == RunState.RUNNING else None,
                )
            )
            if len(out) >= limit:
                break
        return out


def policy_problems(policy: Policy, servers: ServerSet, tools: Mapping[str, Mapping[str, Any]]) -> list[PolicyProblem]:
    where = policy.source or "the policy"
    out = []
    for key in sorted(policy.data.tools):
        server, _, tool = key.partition(".")
        if server == "vodou":
            continue
        if server not in servers.servers:
            near = difflib.get_close_matches(server, list(servers.servers), n=1)
            out.append(
                PolicyProblem(
                    key=key,
                    server=server,
                    message=f'{where}: [tools."{key}"] names server {server!r}, which is not configured in {servers.source}'
                    + (f"; did you mean {near[0]!r}?" if near else ""),
                )
            )
        elif server in tools and tool not in tools[server]:
            near = difflib.get_close_matches(tool, list(tools[server]), n=1, cutoff=0.5)
            out.append(
                PolicyProblem(
                    key=key,
                    server=server,
                    message=f'{where}: [tools."{key}"] names a tool {server} does not have, so it applies to nothing'
                    + (f"; did you mean {server}.{near[0]}?" if near else ""),
                )
            )
    for server in sorted(policy.data.servers):
        if server not in servers.servers:
            out.append(
                PolicyProblem(
                    key=server,
                    server=server,
                    message=f"{where}: [servers.{server}] names a server that is not configured in {servers.source}",
                )
            )
    return out


def effect_view(eff: Any, approvals: Mapping[str, Any], plan: Plan | None, bindings: Mapping[str, Any]) -> EffectView:
    appr = approvals.get(eff.approval_id) if eff.approval_id else None
    return EffectView(
        step=eff.step,
        state=eff.state,
        fingerprint=eff.fingerprint,
        idempotency_key=eff.idempotency_key,
        payload=msgspec.json.decode(eff.payload_json) if eff.payload_json else None,
        result=msgspec.json.decode(eff.result_json) if eff.result_json else None,
        error=eff.error,
        started_at=eff.started_at,
        ended_at=eff.ended_at,
        approval=eff.approval_id,
        decided_by=appr.decided_by if appr else None,
        decided_at=appr.decided_at if appr else None,
        card=card_or_refusal(appr, plan, bindings) if appr and plan else None,
        settled_by=eff.settled_by,
    )


def _approval_view(a: Any, plan: Plan, bindings: Mapping[str, Any], dec: Any) -> ApprovalView:
    """A question as every surface shows it: its card rendered now; a tampered one flagged,
    with no card and no payload (its stored bytes are not the question any more)."""
    card, refusal = card_and_refusal(a, plan, bindings)
    return ApprovalView(
        id=a.id, step=a.step, state=a.state, fingerprint=a.fingerprint, asked_at=a.asked_at, expires_at=a.expires_at,
        decided_by=a.decided_by, decided_at=a.decided_at, reason=a.reason, card=card,
        approvers=dec.decode(a.approvers_json) if a.approvers_json else [],
        payload=None if refusal is not None else dec.decode(a.payload_json), tampered=refusal is not None, refusal=refusal,
    )  # fmt: skip


_EFFECT_STEP = {
    EffectState.EXECUTED: NodeState.SUCCEEDED,
    EffectState.FAILED: NodeState.FAILED,
    EffectState.EXECUTING: EffectState.EXECUTING,
}


def _view(store: Any, run: Any, now: float) -> RunView:
    plan = check_stored_plan(run.plan_json, run.plan_fingerprint)
    nodes = store.get_nodes(run.id)
    effects = store.effects(run.id)
    approvals = store.approvals(run.id)
    by_id = {a.id: a for a in approvals}
    dec = msgspec.json.Decoder()
    node_views = []
    states: dict[str, str] = {}
    times = {}
    # An effect's own record is the truth about its step (its driver may have lost the run
    # before it could write the step, or a person settled it since). An effect in doubt is
    # `unknown` (a person reconciles it); one still in its call is `executing`, its own word:
    # `unknown` never stands for "not finished yet".
    by_effect = {e.step: _EFFECT_STEP.get(e.state, NodeState.UNKNOWN) for e in effects}
    bindings = decode_bindings(run.servers_json)
    events = store.events(run.id)
    contents = stored_contents(events)
    heard = {e.node_id: e.data_json for e in events if e.kind == "progress" and e.node_id}
    copies = copies_by_template(plan, list(nodes)) if plan.format == FORMAT_LOOPS else {}
    for n in plan.nodes:
        # a loop's body step, then each item's copy of it (runtime/loops.py)
        for nid in (n.id, *copies.get(n.id, ())):
            rec = nodes.get(nid)
            st = by_effect.get(nid) or (rec.state if rec else NodeState.PENDING)
            states[nid] = st
            if rec is not None:
                times[nid] = (rec.ready_at, rec.started_at, rec.ended_at)
            has_output = rec is not None and rec.output_json is not None
            node_views.append(NodeView(
                node=nid, kind=node_kind(n), state=st,
                ready_at=rec.ready_at if rec else None, started_at=rec.started_at if rec else None, ended_at=rec.ended_at if rec else None,
                error=rec.error if rec else None, output=dec.decode(rec.output_json) if has_output else None, has_output=has_output,
                content=contents.get(nid) if st == NodeState.SUCCEEDED else None,
                progress=dec.decode(heard[nid]) if nid in heard else None,
            ))  # fmt: skip
    return RunView(
        run=run.id,
        recipe=run.recipe_name,
        state=effective_state(run, now),
        started_by=run.started_by,
        created_at=run.created_at,
        ended_at=run.ended_at,
        error=run.error,
        plan_fingerprint=run.plan_fingerprint,
        recipe_path=run.recipe_path,
        inputs=dec.decode(run.inputs_json) if run.inputs_json else {},
        nodes=node_views,
        approvals=[_approval_view(a, plan, bindings, dec) for a in approvals],
        effects=[effect_view(e, by_id, plan, bindings) for e in effects],
        together=together_stats(plan, times, states),
        servers={
            name: {"command": b.command_line(), "source": b.source, "executable": b.executable, "workdir": b.workdir}
            for name, b in bindings.items()
        },
        driven_by=describe(run.owner) if run.state == RunState.RUNNING else None,
    )
