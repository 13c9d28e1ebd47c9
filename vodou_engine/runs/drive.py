"""Taking a stored run and driving it on. Everything that would refuse the drive is
checked first, before any decision is recorded (the stored plan, the policy the run was
started under, the servers it is bound to, its recipe file); then the run is taken (owner
and lease, compare-and-set) and the runtime's driver walks it on the servers its
unfinished steps need.
"""

from __future__ import annotations

import functools
import os
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from typing import Any

import msgspec

from ..binding import decode_bindings, servers_for_run
from ..errors import PolicyMismatchError
from ..graph.verify import check
from ..owners import LEASE_S, is_gone
from ..plan import Plan
from ..policy import Policy, load_policy
from ..reports import RunReport
from ..runtime.faults import crashpoint
from ..runtime.plans import check_stored_plan, recipe_unchanged
from ..servers import ServerSet, servers_to_finish
from ..states import TERMINAL_RUN_STATES, RunState
from ..store.records import ApprovalRecord, EffectRecord, EventRecord, NodeRecord, RunRecord
from ..tools.results import stored_contents
from .common import busy, in_thread
from .inputs import items_at_once, thread_limit
from .views import ViewsMixin

Restore = tuple[dict[str, NodeRecord], dict[str, EffectRecord], list[ApprovalRecord], dict[str, list[Any]]]
"""What a drive picks up from the store: the nodes, the effects by step, the questions, the content blocks."""


class DriveMixin(ViewsMixin):
    """What :meth:`resume` and :meth:`approve` drive a stored run with."""

    def _ready_to_drive(self, store: Any, run: Any) -> tuple[Plan, ServerSet, Policy]:
        """Everything that would refuse a drive here, checked before anything is recorded:
        the stored plan, the servers (bound to the run), the policy, the recipe file."""
        plan = check_stored_plan(run.plan_json, run.plan_fingerprint)
        policy = self._policy_for_run(store, run)
        check(plan, policy)
        nodes = store.get_nodes(run.id)
        needed = servers_to_finish(plan, nodes)
        servers = servers_for_run(run.id, decode_bindings(run.servers_json), needed, self._explicit_servers())
        recipe_unchanged(run, plan, policy)
        return plan, servers, policy

    def bound_servers(self, run_id: str) -> tuple[list[str], ServerSet]:
        """The servers a stored run still needs, and their configurations checked against
        its bindings, each set to start in the directory the run recorded: what a
        long-lived process starts (or finds warm) for it. ServerMismatchError (exit 5)
        when what would start differs."""
        store = self.store(create=False)
        run = store.get_run(run_id)
        needed = servers_to_finish(check_stored_plan(run.plan_json, run.plan_fingerprint), store.get_nodes(run_id))
        return needed, servers_for_run(run.id, decode_bindings(run.servers_json), needed, self._explicit_servers())

    def _policy_for_run(self, store: Any, run: Any) -> Policy:
        """The policy the run was started under: the one in effect here if it is the same,
        else the run's own policy file if it still says the same; otherwise refused."""
        started = next((e for e in store.events(run.id, limit=1)), None)
        recorded = msgspec.json.decode(started.data_json) if started is not None and started.data_json else {}
        digest = recorded.get("policy")
        here = self.policy()
        if digest is None or here.digest == digest:
            return here
        path = recorded.get("policy_path")
        if self._policy_arg is None and path and os.path.isfile(path):
            theirs = load_policy(path)
            if theirs.digest == digest:
                return theirs
        raise PolicyMismatchError(
            f"run {run.id} was started under another tool policy ({path or 'none'}) than the one in effect here "
            f"({here.source or 'none'}); a decision taken under one set of rules is never spent under another, so nothing was done",
            hint="use the policy file the run was started with, or start a new run",
            run=run.id,
            policy=path,
            here=here.source,
        )

    async def _take_and_drive(
        self,
        run_id: str,
        servers: ServerSet,
        policy: Policy,
        *,
        model: str | None,
        on_change: Callable[[str, str], None] | None,
        prespawned: Any,
        busy_ok: bool,
        hub: Any = None,
    ) -> RunReport:
        from ..runtime.driver import drive  # here: imports trio

        threads = thread_limit(self.threads)
        store = self.store()
        owner = self.owner

        def take() -> tuple[RunRecord, Plan, Restore, list[EventRecord]] | RunRecord:
            run = store.get_run(run_id)
            if run.state in TERMINAL_RUN_STATES:
                return run
            dead = run.owner if run.owner and is_gone(run.owner) else None
            with store.transaction():
                if not store.take_run(run_id, owner, lease_s=LEASE_S, dead_owner=dead):
                    return store.get_run(run_id)
                store.append_event(
                    run_id,
                    "resumed",
                    data_json=msgspec.json.encode(
                        {"pid": os.getpid(), "took_over": run.owner if run.state == RunState.RUNNING else None}
                    ).decode(),
                )
            crashpoint("resume")
            store.mark_unknown(run_id)
            plan = check_stored_plan(run.plan_json, run.plan_fingerprint)
            started = store.events(run_id, limit=1)
            restore = (
                store.get_nodes(run_id),
                {e.step: e for e in store.effects(run_id)},
                store.approvals(run_id),
                stored_contents(store.events(run_id)),
            )
            return store.get_run(run_id), plan, restore, started

        taken = await in_thread(take)
        if not isinstance(taken, tuple):
            run = taken
            if run.state in TERMINAL_RUN_STATES or busy_ok:
                return await in_thread(
                    self._report, run_id, driven_by=run.owner if run.state == RunState.RUNNING else None
                )
            raise busy(run)
        run, plan, restore, started = taken
        if model is None and started:  # write steps after a park use the model the run was started with
            model = msgspec.json.decode(started[0].data_json or "{}").get("model")
        go = functools.partial(
            drive,
            store,
            run,
            plan,
            owner=owner,
            policy_digest=policy.digest,
            model=model,
            threads=threads,
            at_once=items_at_once(self.threads),
            restore=restore,
            on_change=on_change,
            clock=self.clock,
            end_relaxed=self.ends_relaxed,
            policy=policy,
        )
        if hub is not None:
            return await go(hub=hub)
        async with self._run_servers(servers, plan, restore[0], prespawned) as hub:
            if hub is not None:
                await hub.wait_ready()
            return await go(hub=hub)

    @asynccontextmanager
    async def _run_servers(
        self, servers: ServerSet, plan: Plan, nodes: Mapping[str, Any], prespawned: Any
    ) -> AsyncIterator[Any]:
        """The servers a stored run's unfinished steps need, spawned now; calls wait for them."""
        needed = servers_to_finish(plan, nodes)
        if not needed:
            yield None
            return
        from ..tools.hub import open_hub  # here: imports trio

        async with open_hub(servers.servers, needed, wait=False, prespawned=prespawned) as hub:
            yield hub
