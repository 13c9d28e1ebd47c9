"""The run API: every surface (the CLI, a web page, a scheduler, an agent) makes runs
happen through these functions, and only these.

A run's whole life is here: prepare (compile, start the servers, resolve every
tool, raise risks from the servers' annotations, verify again), start,
approve, reject, resume, cancel, reconcile, list and show. No surface keeps its
own rule about what approving, rejecting or resuming means, so a program that
embeds the engine gets exactly the gating the CLI gets.

    import trio, vodou_engine
    runs = vodou_engine.Runs(store="runs.db")
    report = trio.run(runs.start, "recipes/morning-briefing.recipe")
    if report.state == "parked":
        step = report.pending[0]
        report = trio.run(lambda: runs.approve(report.run, step.step, actor="me", fingerprint=step.fingerprint))

Who the ``actor`` is, is the caller's word: the CLI proves it (the
operating-system user, or an approver's secret); a program that embeds the
engine is trusted with the store already. Errors are :class:`VodouError`
subclasses with a stable ``code`` and ``facts``; their wording never names a
``recipe`` command.
"""

from __future__ import annotations

import os
import secrets
import time
from contextlib import asynccontextmanager
from typing import Any, AsyncIterator, Callable, Mapping

import msgspec

from .binding import bind_all, decode_bindings, encode_bindings, servers_for_run, started_where
from .errors import (
    PolicyMismatchError,
    VodouError,
    AlreadyDecidedError,
    BusyError,
    ExpiredError,
    RefusedError,
    StaleError,
    TamperedError,
    UsageError,
)
from .osuser import os_user
from .owners import LEASE_S, describe, is_gone, this_process
from .plan import Plan, ToolNode, encode_plan
from .policy import Policy, load_policy
from .reports import (
    ApprovalView,
    EffectView,
    NodeView,
    PendingApproval,
    RunReport,
    RunSummary,
    RunView,
    node_kind,
    together_stats,
)
from .servers import ServerConfig, ServerSet, load_servers, servers_needed, servers_to_finish
from .states import ApprovalState, EffectState, NodeState, RunState, TERMINAL_RUN_STATES

__all__ = ["Runs", "os_user", "thread_limit"]

DEFAULT_THREADS = 256


def thread_limit(given: int | None = None) -> int:
    """Blocking steps (built-ins, model writes) in flight at once per run:
    ``given``, else ``VODOU_THREADS``, else 256. Read before anything is
    stored, so a bad value leaves no run behind."""
    if given is not None:
        value, source = given, "threads"
    else:
        raw = os.environ.get("VODOU_THREADS", "").strip()
        if not raw:
            return DEFAULT_THREADS
        try:
            value = int(raw)
        except ValueError:
            value = 0
        source = f"VODOU_THREADS={raw!r}"
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise UsageError(
            f"{source}: the thread limit must be a whole number of at least 1; nothing was run",
            hint=f"unset VODOU_THREADS for the default ({DEFAULT_THREADS})",
        )
    return value


def new_run_id() -> str:
    return time.strftime("r%Y%m%d-%H%M%S-", time.gmtime()) + secrets.token_hex(3)


def resolve_inputs(plan: Plan, given: Mapping[str, Any]) -> dict[str, Any]:
    from .limits import MAX_DEPTH, value_depth

    known = {i.name: i for i in plan.inputs}
    for name, value in given.items():
        if name not in known:
            import difflib

            near = difflib.get_close_matches(name, list(known), n=1)
            raise UsageError(
                f"the recipe has no input `{name}`",
                hint=(f"did you mean `{near[0]}`? " if near else "") + f"inputs: {', '.join(known) or 'none'}",
                input=name,
            )
        if value_depth(value) > MAX_DEPTH:
            raise UsageError(f"the input `{name}` nests arrays or objects more than {MAX_DEPTH} levels deep", hint="flatten it", input=name)
    values = {}
    for name, decl in known.items():
        if name in given:
            values[name] = given[name]
        elif decl.required:
            raise UsageError(f"the recipe needs the input `{name}`", hint=f"give it a value ({name}=VALUE)", input=name)
        else:
            values[name] = decl.default
    return values


async def _in_thread(fn: Callable, *args: Any, **kwargs: Any) -> Any:
    import trio

    return await trio.to_thread.run_sync(lambda: fn(*args, **kwargs))


def plain_error(exc: BaseException) -> BaseException | None:
    """The one error inside an exception group (trio's nurseries group what their tasks
    raise), leaving cancellations aside; None if there is not exactly one."""
    import trio

    leaves: list[BaseException] = []
    stack = [exc]
    while stack:
        e = stack.pop()
        if isinstance(e, BaseExceptionGroup):
            stack.extend(e.exceptions)
        elif not isinstance(e, trio.Cancelled):
            leaves.append(e)
    return leaves[0] if len(leaves) == 1 else None


def _plain(fn: Callable) -> Callable:
    """A run API call raises the error that happened, not a group wrapping it."""
    import functools

    @functools.wraps(fn)
    async def call(*args: Any, **kwargs: Any) -> Any:
        try:
            return await fn(*args, **kwargs)
        except BaseExceptionGroup as group:
            leaf = plain_error(group)
            if leaf is None:
                raise
            raise leaf from None

    return call


class Runs:
    """The run API over one store, one server configuration and one policy.

    ``store``: a RunStore, or its path/URL (default: ``$VODOU_STORE``, then the
    user data directory). ``servers``: a ServerSet, a mapping of names to
    ServerConfig, a server file's path, or None (the usual discovery).
    ``policy``: a Policy, a policy file's path, or None (the usual discovery).
    A Runs object runs one operation at a time (its store connection is not
    shared between concurrent calls).
    """

    def __init__(
        self,
        *,
        store: Any = None,
        servers: ServerSet | Mapping[str, ServerConfig] | str | os.PathLike[str] | None = None,
        policy: Policy | str | os.PathLike[str] | None = None,
        threads: int | None = None,
        clock: Callable[[], float] = time.time,
        owner: str | None = None,
        workers: bool | None = None,
    ):
        """``owner`` names this driver in the store (default: this process, ``host:pid:start``).
        ``workers``: whether runs go on in the workers after a decision (:attr:`workers`)."""
        self._workers_arg = workers
        self._store_arg = store
        self._store = None if store is None or isinstance(store, (str, os.PathLike)) else store
        self._servers_arg = servers
        self._policy_arg = policy
        self._policy: Policy | None = policy if isinstance(policy, Policy) else None
        self.threads = threads
        self.clock = clock
        self.owner = owner or this_process()

    # --- configuration -------------------------------------------------------------------
    def store(self, *, create: bool = True, readonly: bool = False) -> Any:
        """The store; ``create=False`` refuses a path where no store exists yet."""
        if self._store is None:
            from .store import open_store

            location = self._store_arg
            self._store = open_store(None if location is None else os.fspath(location), create=create, readonly=readonly)
        return self._store

    @property
    def workers(self) -> bool:
        """Whether runs of this store go on in the workers (``recipe worker``, docs/scale-out.md)
        rather than in this process: an approval records the decision and queues the
        run's resume, in one transaction. Given to the constructor, else decided by the
        store: yes on PostgreSQL, no on SQLite (there is no queue there)."""
        if self._workers_arg is not None:
            return bool(self._workers_arg)
        return self._on_postgres()

    def _on_postgres(self) -> bool:
        if self._store is not None:
            return getattr(self._store, "kind", None) == "postgresql"
        from .store import POSTGRES_SCHEMES

        return self._location().startswith(POSTGRES_SCHEMES)

    def _location(self) -> str:
        if self._store is not None:
            return str(getattr(self._store, "location", "the store"))
        from .store import default_store_path

        return default_store_path() if self._store_arg is None else os.fspath(self._store_arg)

    def close(self) -> None:
        if self._store is not None and self._store_arg is not self._store:
            self._store.close()
            self._store = None

    def policy(self) -> Policy:
        if self._policy is None:
            self._policy = load_policy(None if self._policy_arg is None else os.fspath(self._policy_arg))
        return self._policy

    def servers(self) -> ServerSet:
        """The servers a new run starts with."""
        arg = self._servers_arg
        if isinstance(arg, ServerSet):
            return arg
        if isinstance(arg, Mapping):
            return ServerSet(dict(arg), "given by the caller")
        return load_servers(arg)

    def _explicit_servers(self) -> Any:
        arg = self._servers_arg
        if isinstance(arg, Mapping):
            return ServerSet(dict(arg), "given by the caller")
        return arg

    # --- compile and prepare -------------------------------------------------------------
    def load(self, source: str | os.PathLike[str] | Plan, *, text: str | None = None) -> tuple[Plan, str | None, str | None]:
        """(plan, recipe text or None, path or None) from a path, recipe text, or a Plan.
        Compiled offline: no server is started, no annotation is known yet."""
        from .compiler import compile_recipe, load_source

        if isinstance(source, Plan):
            from .bounds import check_plan
            from .compiler import load_plan

            check_plan(source)  # before encoding, which would write an infinite number as null
            return load_plan(encode_plan(source), policy=self.policy()), None, None
        if text is not None:
            path = os.fspath(source) if source else None
            return compile_recipe(text, path, policy=self.policy()), text, path
        path = os.fspath(source)
        plan, recipe_text = load_source(path, policy=self.policy())
        return plan, recipe_text, path

    @asynccontextmanager
    async def prepare(self, source: str | os.PathLike[str] | Plan, *, text: str | None = None, hub: Any = None) -> AsyncIterator[Prepared]:
        """Compile, start the servers the plan names, resolve every tool, raise risks from
        the servers' annotations and verify again. Yields a :class:`Prepared` whose
        servers stay up until the block ends (start a run from it with :meth:`start`).
        ``hub``: servers already running (kept warm by a long-lived process) to use
        instead of starting them."""
        from .planning import check_hints, missing, resolve

        plan, recipe_text, path = self.load(source, text=text)
        servers = self.servers()
        needed = servers_needed(plan)
        for name in needed:
            if name not in servers.servers:
                raise servers.unknown(name)  # a server the file disables is never started
        if not needed:
            yield Prepared(plan=plan, text=recipe_text, path=path, servers=servers, hub=None)
            return
        from contextlib import AsyncExitStack

        from .tools.hub import open_hub

        async with AsyncExitStack() as stack:
            if hub is None:
                hub = await stack.enter_async_context(open_hub(servers.servers, needed))
            else:
                await hub.wait_ready()
            tools = {n: hub.tools(n) for n in needed}
            status, hints = resolve(plan, servers.servers, tools)
            bad = missing(status)
            if bad:
                raise UsageError(
                    "; ".join(f"{k}: {status[k].note}" for k in bad) + "; nothing was run",
                    hint="fix the tool address in the recipe",
                    steps=bad,
                )
            final = plan
            if recipe_text is not None:
                from .compiler import compile_recipe

                final = compile_recipe(recipe_text, path, policy=self.policy(), hints=hints)
            else:
                check_hints(plan, self.policy(), hints)
            yield Prepared(plan=final, text=recipe_text, path=path, servers=servers, hub=hub, status=status)

    # --- start ---------------------------------------------------------------------------
    @_plain
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
                _refuse_agent_opt_out(source.plan)
            return await self._start(source, inputs, actor, model, on_change, run_id)
        plan, _, _ = self.load(source, text=text)
        if origin == "agent":
            _refuse_agent_opt_out(plan)
        resolve_inputs(plan, inputs or {})  # a bad input starts no server
        thread_limit(self.threads)
        async with self.prepare(source, text=text, hub=hub) as prepared:
            return await self._start(prepared, inputs, actor, model, on_change, run_id)

    async def _start(self, prepared: Prepared, inputs, actor, model, on_change, run_id, saved: Any = None, schedule: str | None = None) -> RunReport:
        from .runtime.driver import drive

        plan = prepared.plan
        threads = thread_limit(self.threads)
        values = resolve_inputs(plan, inputs or {})
        run_id = run_id or new_run_id()
        actor = actor or os_user()
        model = model or plan.options.model or os.environ.get("VODOU_MODEL")
        policy = self.policy()
        store = self.store()
        started = {"pid": os.getpid(), "model": model, "policy": policy.digest, "policy_path": policy.source, "servers": prepared.servers.source}

        def create() -> Any:
            bindings = bind_all(prepared.servers, servers_needed(plan), salt=run_id)  # reads files: off the trio thread
            with store.transaction():
                store.create_run(
                    run_id,
                    recipe_name=plan.recipe.name,
                    recipe_path=os.path.abspath(prepared.path) if prepared.path and prepared.text is not None else None,
                    source_sha256=plan.recipe.source_sha256,
                    plan_json=encode_plan(plan).decode(),
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
                )
                store.append_event(run_id, "started", actor=actor, data_json=msgspec.json.encode(started).decode())
            return store.get_run(run_id)

        run = await _in_thread(create)
        return await drive(store, run, plan, owner=self.owner, hub=prepared.hub, policy_digest=policy.digest, model=model, threads=threads, on_change=on_change, clock=self.clock)

    # --- deciding ------------------------------------------------------------------------
    def pending(self, run_id: str, step: str | None = None) -> PendingApproval:
        """The question a person means by RUN [STEP]: what they should read before deciding."""
        from .runtime.driver import pending_view

        from .binding import decode_bindings
        from .bounds import check_plan
        from .cards import check_untampered
        from .runtime.plans import check_stored_plan

        store = self.store(create=False)
        run, approval = _find_approval(store, run_id, step)
        plan, bindings = check_stored_plan(run.plan_json, run.plan_fingerprint), decode_bindings(run.servers_json)
        check_plan(plan)  # a plan no drive would take (refused as a drive refuses it), before its expiry is read
        check_untampered(approval, plan, bindings)  # a card whose bytes are not those that would run is never shown
        return pending_view(approval, plan, bindings)

    @_plain
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
    ) -> RunReport:
        """Approve the pending question of ``step`` and drive the run on: here, or, when
        this store's runs go on in the workers (:attr:`workers`), by queueing its resume
        in the transaction that records the decision (the report says ``queued``).
        ``drive=False`` only records the decision (a caller that drives runs itself).

        ``fingerprint``: approve only if the question is still the one with this
        fingerprint (the card the person read). Everything that would stop the
        run from going on (its servers resolve differently, the policy or the
        recipe changed) is refused before the decision is recorded.
        """
        store = self.store(create=False)
        queue = drive and self.workers

        def check_and_decide() -> tuple[Any, Plan, ServerSet, Policy]:
            run, approval = _find_approval(store, run_id, step)
            if fingerprint and fingerprint != approval.fingerprint:
                raise _stale_fingerprint(store, run_id, approval, fingerprint)
            plan, servers, policy = self._ready_to_drive(store, run)
            _check_card(run, approval)
            if hub is not None and drive and not queue:  # warm servers handed in: started where the run's start?
                started_where(run_id, servers, hub)
            if not queue:
                _decide(store, approval, ApprovalState.APPROVED, actor, None, proof)
                return run, plan, servers, policy
            from .workers.app import defer_drive_in, store_queue

            conn = store_queue(store)
            refusal = None
            with store.transaction():  # the decision and the job that acts on it commit together
                try:
                    _decide(store, approval, ApprovalState.APPROVED, actor, None, proof)
                except RefusedError as exc:
                    refusal = exc  # the refused attempt stays in the run's log
                else:
                    defer_drive_in(conn, run_id)
            if refusal is not None:
                raise refusal
            return run, plan, servers, policy

        run, plan, servers, policy = await _in_thread(check_and_decide)
        if queue:
            return await _in_thread(self._report, run_id, queued=True)
        if not drive:  # the caller drives it (a long-lived process, on its own task)
            return await _in_thread(self._report, run_id)
        return await self._take_and_drive(run_id, servers, policy, model=model, on_change=on_change, prespawned=prespawned, busy_ok=True, hub=hub)

    @_plain
    async def reject(self, run_id: str, step: str | None = None, *, actor: str, reason: str | None = None, fingerprint: str | None = None, proof: str = "api") -> RunReport:
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
                if _takeable(run) and store.take_run(run_id, self.owner, lease_s=LEASE_S, dead_owner=run.owner):
                    why = f"rejected by {actor}" + (f": {reason}" if reason else "")
                    from .store import NodeRecord

                    store.save_nodes(run_id, [NodeRecord(node_id=approval.node_id, state=NodeState.REJECTED, error=why, ended_at=self.clock())])
                    store.set_run_state(run_id, RunState.DECLINED, expected=(RunState.RUNNING,), owner=self.owner)
                    store.append_event(run_id, RunState.DECLINED, actor=actor)
                    _close_nodes(store, run, f"the run was {why}", self.clock())
                elif run.state == RunState.RUNNING:
                    driven_by = run.owner  # its driver sees the rejection when it next stops
            return self._report(run_id, driven_by=driven_by)

        return await _in_thread(reject_now)

    # --- resume, cancel, reconcile ------------------------------------------------------
    @_plain
    async def resume(self, run_id: str, *, model: str | None = None, on_change: Callable[[str, str], None] | None = None, prespawned: Any = None, hub: Any = None) -> RunReport:
        """Drive a parked or interrupted run again (or one whose process is gone).
        Expired or stale questions are asked again; effects caught mid-call become ``unknown``.
        ``hub``: servers already running (a long-lived process keeps them warm); they
        must be the run's own (the caller checked them with the run's bindings)."""
        store = self.store(create=False)

        def check() -> tuple[Any, Plan, ServerSet, Policy] | None:
            run = store.get_run(run_id)
            if run.state in TERMINAL_RUN_STATES:
                return None
            if not _takeable(run):
                raise _busy(run)
            plan, servers, policy = self._ready_to_drive(store, run)
            if hub is not None:  # warm servers handed in: started where the run's start?
                started_where(run_id, servers, hub)
            return run, plan, servers, policy

        checked = await _in_thread(check)
        if checked is None:
            return await _in_thread(self._report, run_id)
        _, _, servers, policy = checked
        return await self._take_and_drive(run_id, servers, policy, model=model, on_change=on_change, prespawned=prespawned, busy_ok=False, hub=hub)

    @_plain
    async def cancel(self, run_id: str, *, actor: str, reason: str | None = None) -> RunReport:
        """End a run ``cancelled``: its pending questions can no longer be answered. A driver
        still running stops at its next write; an effect it is executing finishes and is recorded."""
        store = self.store(create=False)

        def cancel_now() -> RunReport:
            run = store.get_run(run_id)
            if run.state in TERMINAL_RUN_STATES:
                raise RefusedError(f"run {run_id} already ended {run.state}; nothing was changed", run=run_id, state=run.state)
            why = f"cancelled by {actor}" + (f": {reason}" if reason else "")
            with store.transaction():
                if not store.set_run_state(run_id, RunState.CANCELLED, expected=(RunState.RUNNING, RunState.PARKED, RunState.INTERRUPTED), error=why):
                    raise RefusedError(f"run {run_id} ended while it was being cancelled; nothing was changed", run=run_id)
                store.append_event(run_id, RunState.CANCELLED, actor=actor, data_json=msgspec.json.encode({"reason": reason}).decode())
                _close_nodes(store, run, f"the run was {why}", self.clock())
            return self._report(run_id)

        return await _in_thread(cancel_now)

    def reconcile(self, run_id: str, step: str, *, executed: bool, actor: str, reason: str | None = None) -> EffectView:
        """A person's word on an effect left ``unknown`` (or one the server reported failed).

        ``executed=True``: it happened; a resumed run goes on from it.
        ``executed=False``: it did not; the step is recorded failed, and the
        run fails there (a new run asks again)."""
        store = self.store(create=False)
        store.get_run(run_id)
        eff = store.settle_effect(run_id, step, executed, actor, reason=reason)
        return _effect_view(eff, {}, None, {})

    def prune(self, *, older_than_s: float, states: list[str] | None = None, by: str) -> PruneReport:
        """Remove finished runs that ended more than ``older_than_s`` seconds ago (in
        ``states``: default every final state), never a parked, running or interrupted
        one, nor one with an effect left unknown; then give the space back."""
        from .states import TERMINAL_RUN_STATES

        if not older_than_s >= 0:
            raise UsageError("the age must be 0 seconds or more", older_than_s=older_than_s)
        wanted = list(states) if states else sorted(TERMINAL_RUN_STATES)
        refused = [s for s in wanted if s not in TERMINAL_RUN_STATES]
        if refused:
            raise UsageError(f"only finished runs can be pruned, not {', '.join(refused)} ones", hint=f"states: {', '.join(sorted(TERMINAL_RUN_STATES))}", states=refused)
        store = self.store(create=False)
        size = _store_size(store)
        removed = store.prune(ended_before=self.clock() - older_than_s, states=wanted, by=by)
        store.compact()
        return PruneReport(runs=removed, bytes_before=size, bytes_after=_store_size(store))

    # --- reading -------------------------------------------------------------------------
    def list(self, *, state: str | None = None, recipe: str | None = None, since: float | None = None, limit: int = 50, started_by: str | None = None) -> list[RunSummary]:
        """Runs, newest first. A run whose driving process is gone shows as ``interrupted``.
        ``started_by``: only runs that person (or agent) started."""
        store = self.store(create=False, readonly=True)
        wanted = None if state is None else {state}
        stored_states = None
        if wanted is not None:
            stored_states = {RunState.RUNNING, RunState.INTERRUPTED} if RunState.INTERRUPTED in wanted else wanted
        rows = store.list_runs(limit if wanted is None else max(limit * 4, 200), state=stored_states, recipe=recipe, since=since, started_by=started_by)
        out = []
        for r in rows:
            effective = _effective_state(r, self.clock())
            if wanted is not None and effective not in wanted:
                continue
            out.append(RunSummary(run=r.id, recipe=r.recipe_name, state=effective, started_by=r.started_by, created_at=r.created_at, ended_at=r.ended_at, driven_by=describe(r.owner) if effective == RunState.RUNNING else None))
            if len(out) >= limit:
                break
        return out

    def show(self, run_id: str) -> RunView:
        """A run's nodes (states, outputs, timings), approvals and effects with their audit."""
        store = self.store(create=False, readonly=True)
        return _view(store, store.get_run(run_id), self.clock())

    def _report(self, run_id: str, *, driven_by: str | None = None, queued: bool = False) -> RunReport:
        store = self.store(create=False)
        run = store.get_run(run_id)
        view = _view(store, run, self.clock())
        from .binding import decode_bindings
        from .runtime.driver import pending_view
        from .runtime.plans import check_stored_plan

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

    # --- the workers' queue (a PostgreSQL store; docs/scale-out.md) -------------------------
    def queue(
        self,
        source: str | os.PathLike[str],
        *,
        text: str | None = None,
        inputs: Mapping[str, Any] | None = None,
        actor: str | None = None,
        model: str | None = None,
        run_id: str | None = None,
        origin: str = "person",
    ) -> str:
        """Queue a new run for the workers instead of driving it here; the run id it will have.

        The recipe is compiled here (a recipe that does not compile, an unknown or missing
        input, an agent's opt-out of asking are refused now, and nothing is queued); a
        worker compiles it again with its servers' annotations and starts it; from then on
        the run is in the store. Refused (``queue.unavailable``) on a SQLite store."""
        self.require_queue()
        plan, recipe_text, path = self.load(source, text=text)
        if recipe_text is None:
            raise UsageError("only a recipe can be queued, not an actions.json: a worker compiles the recipe again with its own servers' annotations", hint="queue the .recipe file")
        if origin == "agent":
            _refuse_agent_opt_out(plan)
        resolve_inputs(plan, inputs or {})
        thread_limit(self.threads)
        start = {"text": recipe_text, "path": os.path.abspath(path) if path else None, "inputs": dict(inputs or {}), "actor": actor or os_user(), "model": model, "origin": origin}
        return self._queue_drive(run_id or new_run_id(), {"start": start})

    def queue_saved(self, saved: Any, *, inputs: Mapping[str, Any] | None = None, actor: str | None = None, run_id: str | None = None) -> str:
        """:meth:`queue` for a saved recipe (a RecipeRecord, or a name for its latest version)."""
        self.require_queue()
        if isinstance(saved, str):
            saved = self.store(create=False).get_recipe(saved)
        plan, _, _ = self.load(f"{saved.name}.recipe", text=saved.source)
        resolve_inputs(plan, inputs or {})
        spec = {"name": saved.name, "version": saved.version, "inputs": dict(inputs or {}), "actor": actor or os_user()}
        return self._queue_drive(run_id or new_run_id(), {"saved": spec})

    def queue_resume(self, run_id: str) -> RunReport:
        """Queue a drive of a parked or interrupted run for the workers (what :meth:`resume`
        does here). A run that has ended is left as it is (its report has ``queued`` False)."""
        self.require_queue()
        store = self.store(create=False)
        run = store.get_run(run_id)
        if run.state in TERMINAL_RUN_STATES:
            return self._report(run_id)
        self._queue_drive(run_id, None)
        return self._report(run_id, queued=True)

    def require_queue(self) -> None:
        """Raise :class:`QueueError` (``queue.unavailable``) unless this store can hold the
        workers' queue (PostgreSQL); nothing is opened or created to find out."""
        if not self._on_postgres():
            from .workers.app import no_queue

            raise no_queue(self._location())

    def _queue_drive(self, run_id: str, spec: Mapping[str, Any] | None) -> str:
        from .workers.app import defer_drive_in, store_queue

        self.require_queue()
        store = self.store()
        conn = store_queue(store)
        with store.transaction():
            defer_drive_in(conn, run_id, spec)
        return run_id

    # --- saved recipes and schedules -------------------------------------------------------
    def save(self, source: str | os.PathLike[str], *, text: str | None = None, name: str | None = None, by: str, origin: str = "person") -> Any:
        """Store the recipe's text and the plan it compiles to as a new version of ``name``
        (default: the recipe's name). Saving again keeps every older version."""
        plan, recipe_text, _ = self.load(source, text=text)
        if recipe_text is None:
            raise UsageError("only a recipe can be saved, not an actions.json: a saved recipe is compiled again each time it runs", hint="save the .recipe file")
        name = name or plan.recipe.name
        _check_name(name, "recipe")
        if origin == "agent":
            _refuse_agent_opt_out(plan)
        return self.store().save_recipe(name, source=recipe_text, plan_json=encode_plan(plan), plan_fingerprint=plan.fingerprint, by=by, origin=origin)

    def saved(self, name: str, version: int | None = None) -> Any:
        return self.store(create=False, readonly=True).get_recipe(name, version)

    def saved_recipes(self) -> list[Any]:
        return self.store(create=False, readonly=True).recipes_latest()

    def add_schedule(
        self,
        name: str,
        *,
        recipe: str,
        cron: str,
        tz: str = "UTC",
        inputs: Mapping[str, Any] | None = None,
        catch_up_s: float | None = None,
        by: str,
        origin: str = "person",
        version: int | None = None,
    ) -> Any:
        """Run the saved recipe ``recipe`` on a cron schedule: its latest version at each
        firing, or ``version`` only. A schedule an agent proposes starts paused (only a
        person enables it: ``resume_schedule``) and runs one version, the one it was
        proposed with (``version``, else the latest now), never a later one: a version
        saved after the proposal was never seen by the person who enables it. That version
        may not opt out of asking."""
        from .scheduler import DEFAULT_CATCH_UP_S, check, next_after
        from .store import ScheduleRecord

        _check_name(name, "schedule")
        check(cron, tz)
        catch_up = DEFAULT_CATCH_UP_S if catch_up_s is None else float(catch_up_s)
        if not catch_up >= 0:
            raise UsageError("the catch-up window must be 0 seconds or more", catch_up_s=catch_up_s)
        store = self.store()
        saved = store.get_recipe(recipe, version)
        from .runtime.plans import check_stored_plan

        plan = check_stored_plan(saved.plan_json, saved.plan_fingerprint)
        resolve_inputs(plan, inputs or {})  # a run it could never start is refused now
        if origin == "agent":
            _refuse_agent_opt_out(plan, what="schedule")
        now = self.clock()
        active = origin != "agent"
        record = ScheduleRecord(
            name=name, recipe=recipe, cron=cron, tz=tz, inputs_json=msgspec.json.encode(dict(inputs or {})).decode(),
            state="active" if active else "paused", catch_up_s=catch_up, next_due=next_after(cron, tz, now) if active else None,
            created_at=now, created_by=by, origin=origin, updated_at=now,
            recipe_version=saved.version if origin == "agent" or version is not None else None,
        )  # fmt: skip
        store.add_schedule(record)
        return record

    def pause_schedule(self, name: str, *, by: str) -> Any:
        store = self.store(create=False)
        if not store.set_schedule_state(name, "paused", expected=("active",), next_due=None, by=by, now=self.clock()):
            s = store.get_schedule(name)
            raise RefusedError(f"schedule {name!r} is already {s.state}; nothing was changed", schedule=name, state=s.state)
        return store.get_schedule(name)

    def resume_schedule(self, name: str, *, by: str) -> Any:
        """Enable a paused schedule; its next due time is counted from now (what was missed
        while paused is not run)."""
        from .scheduler import next_after

        store = self.store(create=False)
        s = store.get_schedule(name)
        now = self.clock()
        if not store.set_schedule_state(name, "active", expected=("paused",), next_due=next_after(s.cron, s.tz, now), by=by, now=now):
            raise RefusedError(f"schedule {name!r} is already {store.get_schedule(name).state}; nothing was changed", schedule=name)
        return store.get_schedule(name)

    def remove_schedule(self, name: str, *, by: str) -> None:
        store = self.store(create=False)
        if not store.remove_schedule(name, by=by, now=self.clock()):
            raise RefusedError(f"there is no schedule {name!r}; nothing was changed", schedule=name)

    def schedules(self) -> list[Any]:
        return self.store(create=False, readonly=True).schedules()

    def firings(self, name: str, limit: int = 50) -> list[Any]:
        return self.store(create=False, readonly=True).firings(name, limit)

    def due(self, *, now: float | None = None, by: str = "scheduler") -> list[Any]:
        """Decide every due time reached by ``now`` (each exactly once, whoever else is
        deciding) and return the firings whose runs this caller must start, including
        firings left without a run by a scheduler that died (docs/serve.md)."""
        from .scheduler import decide, firing

        store = self.store()
        now = self.clock() if now is None else now
        to_start = list(store.orphan_firings(decided_before=now - ORPHAN_AFTER_S))
        for s in store.due_schedules(now):
            try:
                decisions, next_due = decide(s, now)
            except VodouError as exc:
                # a row that can no longer be read (a zone gone from tzdata, an edited row) stops
                # itself only: its due time is recorded failed, saying why, and it is due no more
                from .store import FiringRecord

                store.decide_firing(FiringRecord(s.name, s.next_due, "failed", now, by, None, exc.message), next_due=None)
                continue
            for i, d in enumerate(decisions):
                after = decisions[i + 1].due_at if i + 1 < len(decisions) else next_due
                f = firing(s, d, now=now, by=by, run_id=new_run_id() if d.outcome == "fired" else None)
                if not store.decide_firing(f, next_due=after):
                    break  # another scheduler is deciding this schedule
                if d.outcome == "fired":
                    to_start.append(f)
        return to_start

    @_plain
    async def start_firing(self, f: Any, *, on_change: Callable[[str, str], None] | None = None, hub: Any = None) -> RunReport | None:
        """Start the run a firing decided, under the id it reserved; None if another process
        started it first. A firing whose run cannot even be created is marked failed."""
        store = self.store()
        try:
            s, saved = await _in_thread(self.firing_recipe, f)
            try:
                inputs = msgspec.json.decode(s.inputs_json, type=dict[str, Any])
            except (msgspec.DecodeError, msgspec.ValidationError) as exc:  # the row was edited in the store
                raise UsageError(f"schedule {s.name!r}: its stored inputs are not a JSON object of inputs ({exc}); nothing was run", hint="remove the schedule and add it again") from None
            return await self.start_saved(saved, inputs=inputs, actor=s.created_by, run_id=f.run_id, schedule=s.name, on_change=on_change, hub=hub, origin=s.origin)
        except RefusedError as exc:
            if "already exists" in exc.message:
                return None  # the same firing was started by another process
            await _in_thread(store.firing_failed, f.schedule, f.due_at, exc.message)
            raise
        except VodouError as exc:
            await _in_thread(store.firing_failed, f.schedule, f.due_at, exc.message)
            raise

    def firing_recipe(self, f: Any) -> tuple[Any, Any]:
        """(schedule, saved recipe version) a firing runs: the version the schedule names,
        else the latest."""
        store = self.store()
        s = store.get_schedule(f.schedule)
        return s, store.get_recipe(s.recipe, s.recipe_version)

    @_plain
    async def start_saved(self, saved: Any, *, inputs: Mapping[str, Any] | None = None, actor: str | None = None, run_id: str | None = None, schedule: str | None = None, model: str | None = None, on_change: Callable[[str, str], None] | None = None, hub: Any = None, origin: str = "person") -> RunReport:
        """Start a run of a saved recipe version (a RecipeRecord, or a name for the latest),
        compiled again from its text under the policy and servers in effect. ``origin="agent"``
        (a schedule an agent proposed): the plan that would run, as compiled now, may not
        opt out of asking."""
        if isinstance(saved, str):
            saved = self.store().get_recipe(saved)
        path = f"{saved.name}.recipe"
        plan, _, _ = self.load(path, text=saved.source)
        from .runtime.plans import check_saved_text

        check_saved_text(saved, plan)  # the text is the one saved, not one edited in the store since
        if origin == "agent":
            _refuse_agent_opt_out(plan, what="schedule")
        resolve_inputs(plan, inputs or {})
        async with self.prepare(path, text=saved.source, hub=hub) as prepared:
            prepared.path = None  # the text lives in the store, not in a file to compare with
            if origin == "agent":
                _refuse_agent_opt_out(prepared.plan, what="schedule")
            return await self._start(prepared, inputs, actor, model, on_change, run_id, saved=saved, schedule=schedule)

    # --- looking before running ----------------------------------------------------------
    async def inspect(self, source: str | os.PathLike[str] | Plan, *, text: str | None = None, online: bool = True) -> Inspection:
        """The plan as it would run here: every tool resolved on its live server (listed,
        never called), risks raised by annotations, and where each server comes from.
        ``online=False`` starts nothing."""
        from .planning import check_hints, list_tools, resolve, servers_of

        from .text_safety import source_warnings

        plan, recipe_text, path = self.load(source, text=text)
        hidden = source_warnings(recipe_text or "", path)  # characters written into the recipe that nobody sees
        if not online:
            return Inspection(plan=plan, path=path, note="offline: servers not started, tool names not checked", warnings=hidden)
        servers = self.servers()
        tools = await list_tools(servers.servers, servers_of(plan))
        status, hints = resolve(plan, servers.servers, tools, servers.disabled)
        if recipe_text is not None and hints:
            from .compiler import compile_recipe

            plan = compile_recipe(recipe_text, path, policy=self.policy(), hints=hints)
        elif recipe_text is None:
            check_hints(plan, self.policy(), hints)
        used = {n: servers.servers[n].command_line() for n in servers_of(plan) if n in servers.servers}
        warnings = hidden + [p.message for p in _policy_problems(self.policy(), servers, tools) if p.server in tools or p.server not in servers.servers]
        return Inspection(
            plan=plan, path=path, status=status, note=f"servers from {servers.source}; tools listed, none called",
            servers=used, servers_source=servers.source, warnings=warnings,
        )  # fmt: skip

    async def check_policy(self) -> list[PolicyProblem]:
        """Entries of the policy file that name no configured server, or a tool that server
        does not list (a typo there is a rule that silently never applies)."""
        from .planning import list_tools

        policy = self.policy()
        servers = self.servers()
        named = sorted({key.split(".", 1)[0] for key in policy.data.tools} | set(policy.data.servers))
        tools = await list_tools(servers.servers, [n for n in named if n in servers.servers])
        return _policy_problems(policy, servers, tools)

    # --- who may act -----------------------------------------------------------------------
    def add_approver(self, name: str, *, by: str) -> str:
        """Give ``name`` a secret to act under that name; returns it (only its hash is kept).
        Giving a name a new secret revokes the old one. ``agent:...`` names are the agents'
        (runs an agent starts are started by ``agent:NAME``), never a person's."""
        import hashlib

        if name.startswith("agent:"):
            raise UsageError(f"{name!r}: names starting with `agent:` are the agents' (`recipe agent add`), and an agent never decides; nothing was changed", hint="give the person their own name", name=name)
        token = "vodou_" + secrets.token_urlsafe(24)
        self.store().set_approver(name, hashlib.sha256(token.encode()).hexdigest(), by=by)
        return token

    def remove_approver(self, name: str, *, by: str) -> bool:
        return self.store(create=False).remove_approver(name, by=by)

    def approvers(self) -> list[str]:
        return [a.name for a in self.store(create=False, readonly=True).approvers_list()]

    def proves(self, name: str, token: str | None) -> bool:
        """Whether ``token`` is the secret of the approver ``name``."""
        import hashlib
        import hmac

        if not token:
            return False
        rec = self.store(create=False).get_approver(name)
        return rec is not None and hmac.compare_digest(rec.token_sha256, hashlib.sha256(token.encode()).hexdigest())

    def refuse_identity(self, claimed: str, *, by: str, command: str, run_id: str | None = None, via: str = "--as", create: bool = False) -> None:
        """Record an attempt to act under a name without proof of it (``via``: how it was
        claimed, ``--as`` or an environment variable such as ``$LOGNAME``)."""
        try:
            store = self.store(create=create)
        except Exception:  # noqa: BLE001 - no store to write to: the refusal still stands
            return
        data = {"claimed": claimed, "command": command, "via": via}
        store.audit("identity.refused", actor=by, run_id=run_id, data=data)
        if run_id is not None:
            try:
                store.append_event(run_id, "identity.refused", actor=by, data_json=msgspec.json.encode(data).decode())
            except RefusedError:
                pass  # no such run: the store-wide log has it

    # --- internals -----------------------------------------------------------------------
    def _ready_to_drive(self, store: Any, run: Any) -> tuple[Plan, ServerSet, Policy]:
        """Everything that would refuse a drive here, checked before anything is recorded:
        the stored plan, the servers (bound to the run), the policy, the recipe file."""
        from .graph.verify import check
        from .runtime.plans import check_stored_plan, recipe_unchanged

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
        from .runtime.plans import check_stored_plan

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

    async def _take_and_drive(self, run_id: str, servers: ServerSet, policy: Policy, *, model, on_change, prespawned, busy_ok: bool, hub: Any = None) -> RunReport:
        from .runtime.driver import drive

        threads = thread_limit(self.threads)
        store = self.store()
        owner = self.owner

        def take() -> tuple[Any, Plan, tuple] | Any:
            from .runtime.plans import check_stored_plan

            run = store.get_run(run_id)
            if run.state in TERMINAL_RUN_STATES:
                return run
            dead = run.owner if run.owner and is_gone(run.owner) else None
            with store.transaction():
                if not store.take_run(run_id, owner, lease_s=LEASE_S, dead_owner=dead):
                    return store.get_run(run_id)
                store.append_event(run_id, "resumed", data_json=msgspec.json.encode({"pid": os.getpid(), "took_over": run.owner if run.state == RunState.RUNNING else None}).decode())
            from .runtime.faults import crashpoint

            crashpoint("resume")
            store.mark_unknown(run_id)
            plan = check_stored_plan(run.plan_json, run.plan_fingerprint)
            started = store.events(run_id, limit=1)
            restore = (store.get_nodes(run_id), {e.step: e for e in store.effects(run_id)}, store.approvals(run_id))
            return store.get_run(run_id), plan, restore, started

        taken = await _in_thread(take)
        if not isinstance(taken, tuple):
            run = taken
            if run.state in TERMINAL_RUN_STATES or busy_ok:
                return await _in_thread(self._report, run_id, driven_by=run.owner if run.state == RunState.RUNNING else None)
            raise _busy(run)
        run, plan, restore, started = taken
        if model is None and started:  # write steps after a park use the model the run was started with
            model = msgspec.json.decode(started[0].data_json or "{}").get("model")
        if hub is not None:
            return await drive(store, run, plan, owner=owner, hub=hub, policy_digest=policy.digest, model=model, threads=threads, restore=restore, on_change=on_change, clock=self.clock)
        async with self._run_servers(servers, plan, restore[0], prespawned) as hub:
            if hub is not None:
                await hub.wait_ready()
            return await drive(store, run, plan, owner=owner, hub=hub, policy_digest=policy.digest, model=model, threads=threads, restore=restore, on_change=on_change, clock=self.clock)

    @asynccontextmanager
    async def _run_servers(self, servers: ServerSet, plan: Plan, nodes: Mapping[str, Any], prespawned: Any) -> AsyncIterator[Any]:
        """The servers a stored run's unfinished steps need, spawned now; calls wait for them."""
        needed = servers_to_finish(plan, nodes)
        if not needed:
            yield None
            return
        from .tools.hub import open_hub

        async with open_hub(servers.servers, needed, wait=False, prespawned=prespawned) as hub:
            yield hub


class Prepared(msgspec.Struct, kw_only=True):
    """A plan resolved against live servers (their tools listed, none called), ready to start."""

    plan: Plan
    text: str | None
    path: str | None
    servers: ServerSet
    hub: Any = None
    status: dict = {}


class PruneReport(msgspec.Struct, kw_only=True):
    runs: int
    bytes_before: int | None = None
    bytes_after: int | None = None


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


class Inspection(msgspec.Struct, kw_only=True):
    """A plan checked against the servers it would run on (``Runs.inspect``)."""

    plan: Plan
    path: str | None = None
    status: dict = {}
    """Per step (and ``step#preview``/``step#check``): does its tool exist, else the closest name."""
    note: str = ""
    servers: dict[str, str] = {}
    """Per server the plan uses: the command it resolves to."""
    servers_source: str = ""
    warnings: list[str] = []


class PolicyProblem(msgspec.Struct, kw_only=True):
    key: str
    server: str
    message: str


def _policy_problems(policy: Policy, servers: ServerSet, tools: Mapping[str, Mapping[str, Any]]) -> list[PolicyProblem]:
    import difflib

    where = policy.source or "the policy"
    out = []
    for key in sorted(policy.data.tools):
        server, _, tool = key.partition(".")
        if server == "vodou":
            continue
        if server not in servers.servers:
            near = difflib.get_close_matches(server, list(servers.servers), n=1)
            out.append(PolicyProblem(key=key, server=server, message=f"{where}: [tools.\"{key}\"] names server {server!r}, which is not configured in {servers.source}" + (f"; did you mean {near[0]!r}?" if near else "")))
        elif server in tools and tool not in tools[server]:
            near = difflib.get_close_matches(tool, list(tools[server]), n=1, cutoff=0.5)
            out.append(PolicyProblem(key=key, server=server, message=f"{where}: [tools.\"{key}\"] names a tool {server} does not have, so it applies to nothing" + (f"; did you mean {server}.{near[0]}?" if near else "")))
    for server in sorted(policy.data.servers):
        if server not in servers.servers:
            out.append(PolicyProblem(key=server, server=server, message=f"{where}: [servers.{server}] names a server that is not configured in {servers.source}"))
    return out


ORPHAN_AFTER_S = 60.0
"""A fired due time with no run after this long was left by a scheduler that died."""


def _check_name(name: str, what: str) -> None:
    import re

    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._ -]{0,99}", name or ""):
        raise UsageError(f"{name!r} is not a usable {what} name", hint="letters, digits, spaces, '.', '_' and '-', starting with a letter or digit, at most 100", name=name)


def _refuse_agent_opt_out(plan: Plan, what: str = "recipe") -> None:
    """An agent proposes; it never decides, so it cannot remove a gate either: not in a
    recipe it sends, nor through a schedule it proposed (``what="schedule"``: whichever
    version the schedule would run)."""
    from .errors import RecipeError

    opted = [n for n in plan.nodes if isinstance(n, ToolNode) and n.without_asking]
    if opted:
        where = opted[0].where
        how = f"`without asking` / `don't ask` under `{opted[0].id}`"
        if what == "recipe":
            message = f"a recipe from an agent may not opt out of asking ({how}); nothing was saved or run"
        else:
            message = f"a schedule an agent proposed never runs a recipe that opts out of asking, and this version of {plan.recipe.name!r} does ({how}); nothing was scheduled or run"
        raise RecipeError(
            message,
            line=where.line if where else None,
            column=where.column if where else None,
            hint="only a person's recipe file, or the policy file, can let an effect run without asking",
        )


# --- helpers over the store (called on a worker thread) ---------------------------------


CANCELLED_MID_CALL = (
    "the run was cancelled while this effect was executing; the process driving it records how it ended "
    "when the call returns; if it never does, check the target, then settle it (reconcile the step as executed or not executed)"
)


def _close_nodes(store: Any, run: Any, why: str, now: float) -> None:
    """Inside the transaction that ends ``run`` by a person's word (cancel, reject): no node
    is left pending, running or waiting. An effect still executing becomes ``unknown`` (its
    driver, if alive, records the real outcome over it when the call returns; if it died,
    a person settles it); a step with an effect says what the effect's record says."""
    from .plan import decode_plan
    from .runtime.journal import ending_records

    live = run.state == RunState.RUNNING and not _takeable(run)  # its driver may still be calling
    store.mark_unknown(run.id, reason=CANCELLED_MID_CALL if live else None)
    try:
        node_ids = [n.id for n in decode_plan(run.plan_json).nodes]
    except VodouError:
        node_ids = []  # a plan edited in the store: close the nodes it has records for
    effects = {e.step: e for e in store.effects(run.id)}
    store.save_nodes(run.id, ending_records(node_ids, store.get_nodes(run.id), effects, why=why, now=now))


def _takeable(run: Any) -> bool:
    return run.state in (RunState.PARKED, RunState.INTERRUPTED) or (run.state == RunState.RUNNING and (is_gone(run.owner) or (run.lease_expires_at or 0) < time.time()))


def _effective_state(run: Any, now: float) -> str:
    if run.state == RunState.RUNNING and (is_gone(run.owner) or (run.lease_expires_at is not None and run.lease_expires_at < now)):
        return RunState.INTERRUPTED
    return run.state


def _busy(run: Any) -> BusyError:
    return BusyError(
        f"run {run.id} is being driven by {describe(run.owner)} right now; nothing else was done",
        hint="it picks up every decision already made; look at the run to follow it",
        run=run.id,
        owner=run.owner,
    )


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
            from .store.base import describe_decision

            last = max(every, key=lambda a: a.asked_at)
            raise AlreadyDecidedError(f"{describe_decision(last)}; nothing was changed", run=run_id, step=step, state=last.state)
        steps = sorted({a.step for a in store.approvals(run_id)})
        raise RefusedError(
            f"run {run_id} has no approval for step `{step}`; nothing was changed",
            hint=f"steps with approvals: {', '.join(steps) or 'none'}",
            run=run_id,
            step=step,
        )
    if not pending:
        raise RefusedError(f"run {run_id} has no approval waiting (it is {_effective_state(run, time.time())}); nothing was changed", run=run_id, state=run.state)
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
    return StaleError(message, hint="read the current card and approve its fingerprint", run=run_id, step=approval.step, fingerprint=approval.fingerprint, given=wanted, known=known)


def _check_card(run: Any, approval: Any) -> None:
    """A decision binds to the card a person read: refused when the stored payload no longer
    gives the fingerprint it was asked with (``TamperedError``), as showing it is."""
    from .binding import decode_bindings
    from .cards import check_untampered
    from .runtime.plans import check_stored_plan

    check_untampered(approval, check_stored_plan(run.plan_json, run.plan_fingerprint), decode_bindings(run.servers_json))


def _decide(store: Any, approval: Any, state: str, actor: str, reason: str | None, proof: str) -> Any:
    try:
        return store.decide(approval.id, state, by=actor, reason=reason)
    except ExpiredError:
        # Recorded as expired, so the audit log shows the question lapsed unanswered.
        verb = "approve" if state == ApprovalState.APPROVED else "reject"
        store.decide(approval.id, ApprovalState.EXPIRED, by="clock", reason=f"{verb} by {actor} came too late")
        raise


def _effect_view(eff: Any, approvals: Mapping[str, Any], plan: Plan | None, bindings: Mapping[str, Any]) -> EffectView:
    from .cards import card_or_refusal

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


_EFFECT_STEP = {EffectState.EXECUTED: NodeState.SUCCEEDED, EffectState.FAILED: NodeState.FAILED, EffectState.EXECUTING: EffectState.EXECUTING}


def _approval_view(a: Any, plan: Plan, bindings: Mapping[str, Any], dec: Any) -> ApprovalView:
    """A question as every surface shows it: its card rendered now; a tampered one flagged,
    with no card and no payload (its stored bytes are not the question any more)."""
    from .cards import card_and_refusal

    card, refusal = card_and_refusal(a, plan, bindings)
    return ApprovalView(
        id=a.id, step=a.step, state=a.state, fingerprint=a.fingerprint, asked_at=a.asked_at, expires_at=a.expires_at,
        decided_by=a.decided_by, decided_at=a.decided_at, reason=a.reason, card=card,
        approvers=dec.decode(a.approvers_json) if a.approvers_json else [],
        payload=None if refusal is not None else dec.decode(a.payload_json), tampered=refusal is not None, refusal=refusal,
    )  # fmt: skip


def _view(store: Any, run: Any, now: float) -> RunView:
    from .runtime.plans import check_stored_plan

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
    for n in plan.nodes:
        rec = nodes.get(n.id)
        st = by_effect.get(n.id) or (rec.state if rec else NodeState.PENDING)
        states[n.id] = st
        if rec is not None:
            times[n.id] = (rec.ready_at, rec.started_at, rec.ended_at)
        has_output = rec is not None and rec.output_json is not None
        node_views.append(NodeView(
            node=n.id, kind=node_kind(n), state=st,
            ready_at=rec.ready_at if rec else None, started_at=rec.started_at if rec else None, ended_at=rec.ended_at if rec else None,
            error=rec.error if rec else None, output=dec.decode(rec.output_json) if has_output else None, has_output=has_output,
        ))  # fmt: skip
    return RunView(
        run=run.id,
        recipe=run.recipe_name,
        state=_effective_state(run, now),
        started_by=run.started_by,
        created_at=run.created_at,
        ended_at=run.ended_at,
        error=run.error,
        plan_fingerprint=run.plan_fingerprint,
        recipe_path=run.recipe_path,
        inputs=dec.decode(run.inputs_json) if run.inputs_json else {},
        nodes=node_views,
        approvals=[_approval_view(a, plan, bindings, dec) for a in approvals],
        effects=[_effect_view(e, by_id, plan, bindings) for e in effects],
        together=together_stats(plan, times, states),
        servers={name: {"command": b.command_line(), "source": b.source, "executable": b.executable, "workdir": b.workdir} for name, b in bindings.items()},
        driven_by=describe(run.owner) if run.state == RunState.RUNNING else None,
    )
