"""A run from its start to its end: ``prepare`` (compile, start the servers the plan
names, resolve every tool, raise risks from the servers' annotations, verify again),
``start`` (store the run bound to its servers, drive it until it ends or parks),
``resume``, ``cancel``, and ``prune`` for runs long finished. How a run ended by a
person's word leaves its steps (``close_nodes``) is here too: a rejection ends a run
the same way.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

import msgspec

from ..binding import bind_all, encode_bindings, started_where
from ..errors import RefusedError, UsageError, VodouError
from ..osuser import os_user
from ..owners import LEASE_S
from ..plan import Plan, canonical_bytes, decode_plan
from ..policy import Policy
from ..reports import RunReport
from ..runtime.loops import refuse_asking_in_loops
from ..servers import ServerSet, servers_needed
from ..states import TERMINAL_RUN_STATES, RunState
from .common import busy, in_thread, plain, takeable
from .core import compiled
from .drive import DriveMixin
from .inputs import items_at_once, new_run_id, refuse_agent_opt_out, resolve_inputs, thread_limit


class Prepared(msgspec.Struct, kw_only=True):
    """A plan resolved against live servers (their tools listed, none called), ready to start."""

    plan: Plan
    text: str | None
    path: str | None
    servers: ServerSet
    hub: Any = None
    status: dict[str, Any] = {}  # cards.ToolStatus, loaded only once servers are asked


class PruneReport(msgspec.Struct, kw_only=True):
    runs: int
    bytes_before: int | None = None
    bytes_after: int | None = None


class LifecycleMixin(DriveMixin):
    """``prepare``, ``start``, ``resume``, ``cancel``, ``prune``."""

    @asynccontextmanager
    async def prepare(
        self, source: str | os.PathLike[str] | Plan, *, text: str | None = None, hub: Any = None
    ) -> AsyncIterator[Prepared]:
        """Compile, start the servers the plan names, resolve every tool, raise risks from
        the servers' annotations and verify again. Yields a :class:`Prepared` whose
        servers stay up until the block ends (start a run from it with :meth:`start`).
        ``hub``: servers already running (kept warm by a long-lived process) to use
        instead of starting them."""
        async with self._prepare(self.load(source, text=text), hub) as prepared:
            yield prepared

    @asynccontextmanager
    async def _prepare(self, loaded: tuple[Plan, str | None, str | None], hub: Any) -> AsyncIterator[Prepared]:
        """``prepare`` from a plan already compiled offline (``load``'s triple), so a start
        compiles the recipe once before the servers' annotations and once after."""
        # here: planning.py and the tool cache, ~1 ms that `recipe runs` and `show` do without
        from ..planning import check_arguments, check_hints, missing, resolve

        plan, recipe_text, path = loaded
        servers = self.servers()
        needed = servers_needed(plan)
        for name in needed:
            if name not in servers.servers:
                raise servers.unknown(name)  # a server the file disables is never started
        if not needed:
            yield Prepared(plan=plan, text=recipe_text, path=path, servers=servers, hub=None)
            return
        from ..tools.hub import open_hub  # here: imports trio

        async with AsyncExitStack() as stack:
            if hub is None:
                hub = await stack.enter_async_context(open_hub(servers.servers, needed))
            else:
                await hub.wait_ready()
            tools = {n: hub.tools(n) for n in needed}
            status, hints = resolve(plan, servers.servers, tools, task_only={n: hub.task_required(n) for n in needed})
            bad = missing(status)
            if bad:
                raise UsageError(
                    "; ".join(f"{k}: {status[k].note}" for k in bad) + "; nothing was run",
                    hint="fix the tool address in the recipe",
                    steps=bad,
                )
            final = plan
            if recipe_text is not None:
                final = compiled(recipe_text, path, self.policy(), hints)
            else:
                check_hints(plan, self.policy(), hints)
            check_arguments(final, tools, recipe_text, path)  # no card shows what the server would refuse
            yield Prepared(plan=final, text=recipe_text, path=path, servers=servers, hub=hub, status=status)

    @plain
    async def start(
        self,
        source: str | os.PathLike[str] | Plan | Prepared,
        *,
        text: str | None = None,
        inputs: Mapping[str, Any] | None = None,
        actor: str | None = None,
        model: str | None = None,
        on_change: Callable[[str, str], None] | None = None,
        run_id: str | None = None,
        origin: str = "person",
        hub: Any = None,
    ) -> RunReport:
        """Start a run and drive it until it ends or parks at a person.

        ``origin="agent"``: the recipe came from an agent, which may propose but never
        decide: a recipe that opts out of asking (``without asking``) is refused."""
        if isinstance(source, Prepared):
            if origin == "agent":
                refuse_agent_opt_out(source.plan)
            return await self._start(source, inputs, actor, model, on_change, run_id)
        loaded = self.load(source, text=text)
        plan = loaded[0]
        if origin == "agent":
            refuse_agent_opt_out(plan)
        resolve_inputs(plan, inputs or {})  # a bad input starts no server
        thread_limit(self.threads)
        async with self._prepare(loaded, hub) as prepared:
            return await self._start(prepared, inputs, actor, model, on_change, run_id)

    async def _start(
        self,
        prepared: Prepared,
        inputs: Mapping[str, Any] | None,
        actor: str | None,
        model: str | None,
        on_change: Callable[[str, str], None] | None,
        run_id: str | None,
        saved: Any = None,
        schedule: str | None = None,
    ) -> RunReport:
        from ..runtime.driver import drive  # here: imports trio

        plan = prepared.plan
        refuse_asking_in_loops(plan, prepared.path, prepared.text)
        threads = thread_limit(self.threads)
        values = resolve_inputs(plan, inputs or {})
        run_id = run_id or new_run_id()
        actor = actor or os_user()
        model = model or plan.options.model or os.environ.get("VODOU_MODEL")
        policy = self.policy()
        store = self.store()
        started = {
            "pid": os.getpid(),
            "model": model,
            "policy": policy.digest,
            "policy_path": policy.source,
            "servers": prepared.servers.source,
        }

        def create() -> Any:
            # reads files (off the trio thread), unless the warm servers were just looked at
            seen = getattr(prepared.hub, "seen", None)
            bindings = bind_all(prepared.servers, servers_needed(plan), salt=run_id, seen=seen)
            # Relaxed: lost with the database server, the run was never started; nothing
            # it does outside is claimed before an ordinary commit, which writes this too.
            with store.transaction(relaxed=True):
                created = store.create_run(
                    run_id,
                    recipe_name=plan.recipe.name,
                    recipe_path=os.path.abspath(prepared.path) if prepared.path and prepared.text is not None else None,
                    source_sha256=plan.recipe.source_sha256,
                    # compact, and bytes: the store compresses them as they are, into a row of
                    # their own (run_plans) that no later write to the run rewrites
                    plan_json=canonical_bytes(plan),
                    plan_fingerprint=plan.fingerprint,
                    inputs_json=msgspec.json.encode(values).decode(),
                    started_by=actor,
                    state=RunState.RUNNING,
                    owner=self.owner,
                    lease_s=LEASE_S,
                    servers_json=encode_bindings(bindings),
                    saved_recipe=saved.name if saved is not None else None,
                    saved_version=saved.version if saved is not None else None,
                    schedule=schedule,
                    plan=False,  # the record without the plan the drive holds already (16 MB at 100,000 branches)
                )
                store.append_event(run_id, "started", actor=actor, data_json=msgspec.json.encode(started).decode())
            return created

        run = await in_thread(create)
        return await drive(
            store,
            run,
            plan,
            owner=self.owner,
            hub=prepared.hub,
            policy_digest=policy.digest,
            model=model,
            threads=threads,
            at_once=items_at_once(self.threads),
            on_change=on_change,
            clock=self.clock,
            end_relaxed=self.ends_relaxed,
        )

    @plain
    async def resume(
        self,
        run_id: str,
        *,
        model: str | None = None,
        on_change: Callable[[str, str], None] | None = None,
        prespawned: Any = None,
        hub: Any = None,
    ) -> RunReport:
        """Drive a parked or interrupted run again (or one whose process is gone).
        Expired or stale questions are asked again; effects caught mid-call become ``unknown``.
        ``hub``: servers already running (a long-lived process keeps them warm); they
        must be the run's own (the caller checked them with the run's bindings)."""
        store = self.store(create=False)

        def check() -> tuple[Any, Plan, ServerSet, Policy] | None:
            run = store.get_run(run_id)
            if run.state in TERMINAL_RUN_STATES:
                return None
            if not takeable(run):
                raise busy(run)
            plan, servers, policy = self._ready_to_drive(store, run)
            if hub is not None:  # warm servers handed in: started where the run's start?
                started_where(run_id, servers, hub)
            return run, plan, servers, policy

        checked = await in_thread(check)
        if checked is None:
            return await in_thread(self._report, run_id)
        _, _, servers, policy = checked
        return await self._take_and_drive(
            run_id, servers, policy, model=model, on_change=on_change, prespawned=prespawned, busy_ok=False, hub=hub
        )

    @plain
    async def cancel(self, run_id: str, *, actor: str, reason: str | None = None) -> RunReport:
        """End a run ``cancelled``: its pending questions can no longer be answered. A driver
        still running stops at its next write; an effect it is executing finishes and is recorded."""
        store = self.store(create=False)

        def cancel_now() -> RunReport:
            run = store.get_run(run_id)
            if run.state in TERMINAL_RUN_STATES:
                raise RefusedError(
                    f"run {run_id} already ended {run.state}; nothing was changed", run=run_id, state=run.state
                )
            why = f"cancelled by {actor}" + (f": {reason}" if reason else "")
            with store.transaction():
                if not store.set_run_state(
                    run_id,
                    RunState.CANCELLED,
                    expected=(RunState.RUNNING, RunState.PARKED, RunState.INTERRUPTED),
                    error=why,
                ):
                    raise RefusedError(
                        f"run {run_id} ended while it was being cancelled; nothing was changed", run=run_id
                    )
                store.append_event(
                    run_id, RunState.CANCELLED, actor=actor, data_json=msgspec.json.encode({"reason": reason}).decode()
                )
                close_nodes(store, run, f"the run was {why}", self.clock())
            return self._report(run_id)

        return await in_thread(cancel_now)

    def prune(self, *, older_than_s: float, states: list[str] | None = None, by: str) -> PruneReport:
        """Remove finished runs that ended more than ``older_than_s`` seconds ago (in
        ``states``: default every final state), never a parked, running or interrupted
        one, nor one with an effect left unknown; then give the space back."""
        if not older_than_s >= 0:
            raise UsageError("the age must be 0 seconds or more", older_than_s=older_than_s)
        wanted = list(states) if states else sorted(TERMINAL_RUN_STATES)
        refused = [s for s in wanted if s not in TERMINAL_RUN_STATES]
        if refused:
            raise UsageError(
                f"only finished runs can be pruned, not {', '.join(refused)} ones",
                hint=f"states: {', '.join(sorted(TERMINAL_RUN_STATES))}",
                states=refused,
            )
        store = self.store(create=False)
        size = _store_size(store)
        removed = store.prune(ended_before=self.clock() - older_than_s, states=wanted, by=by)
        store.compact()
        return PruneReport(runs=removed, bytes_before=size, bytes_after=_store_size(store))


def _store_size(store: Any) -> int | None:
    """The store's size on disk (a file and its WAL), where it has one."""
    total = 0
    for suffix in ("", "-wal"):
        try:
            total += os.path.getsize(store.location + suffix)
        except OSError:
            if not suffix:
                return None
    return total


CANCELLED_MID_CALL = (
    "the run was cancelled while this effect was executing; the process driving it records how it ended "
    "when the call returns; if it never does, check the target, then settle it (reconcile the step as executed or not executed)"
)


def close_nodes(store: Any, run: Any, why: str, now: float) -> None:
    """Inside the transaction that ends ``run`` by a person's word (cancel, reject): no node
    is left pending, running or waiting. An effect still executing becomes ``unknown`` (its
    driver, if alive, records the real outcome over it when the call returns; if it died,
    a person settles it); a step with an effect says what the effect's record says."""
    from ..runtime.journal import ending_records  # here: imports trio

    live = run.state == RunState.RUNNING and not takeable(run)  # its driver may still be calling
    store.mark_unknown(run.id, reason=CANCELLED_MID_CALL if live else None)
    try:
        node_ids = [n.id for n in decode_plan(run.plan_json).nodes]
    except VodouError:
        node_ids = []  # a plan edited in the store: close the nodes it has records for
    effects = {e.step: e for e in store.effects(run.id)}
    store.save_nodes(run.id, ending_records(node_ids, store.get_nodes(run.id), effects, why=why, now=now))
