"""Start, drive, decide: the public runtime API the CLI is a thin layer over.

A run is driven by exactly one process at a time: driving starts with a
compare-and-set of the run's state to ``running`` and ends with one to
``parked`` or a final state. The park is checked in the same transaction as
the approvals, so an approval given by another process while this one was
driving is never lost: either this driver sees it and goes on, or the run is
already parked and the approving process takes it over.
"""

from __future__ import annotations

import getpass
import os
import secrets
import time
from contextlib import asynccontextmanager
from typing import Any

import msgspec

from ..errors import RefusedError, UsageError
from ..plan import Plan, encode_plan
from ..policy import Policy
from ..servers import servers_needed, servers_to_finish
from .engine import TERMINAL, Engine, Outcome, check_stored_plan
from .threads import DEFAULT_THREADS
from .faults import crashpoint


def thread_limit(given: int | None = None) -> int:
    """Blocking steps (built-ins, model writes) in flight at once per run:
    ``given``, else ``VODOU_THREADS``, else DEFAULT_THREADS. Read before
    anything is stored, so a bad value leaves no run behind."""
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


def os_user() -> str:
    try:
        return getpass.getuser()
    except Exception:  # pragma: no cover - no passwd entry in some containers
        return os.environ.get("USER", "unknown")


def new_run_id() -> str:
    return time.strftime("r%Y%m%d-%H%M%S-", time.gmtime()) + secrets.token_hex(3)


def resolve_inputs(plan: Plan, given: dict[str, Any]) -> dict[str, Any]:
    known = {i.name: i for i in plan.inputs}
    for name in given:
        if name not in known:
            import difflib

            near = difflib.get_close_matches(name, list(known), n=1)
            raise UsageError(
                f"the recipe has no input `{name}`",
                hint=(f"did you mean `{near[0]}`? " if near else "") + f"inputs: {', '.join(known) or 'none'}",
            )
    values = {}
    for name, decl in known.items():
        if name in given:
            values[name] = given[name]
        elif decl.required:
            raise UsageError(f"the recipe needs the input `{name}`", hint=f"run it with --set {name}=VALUE")
        else:
            values[name] = decl.default
    return values


async def _in_thread(fn, *args, **kwargs):
    import trio

    return await trio.to_thread.run_sync(lambda: fn(*args, **kwargs))


async def start_run(
    plan: Plan,
    *,
    store: Any,
    servers: dict | None,
    inputs: dict[str, Any] | None = None,
    actor: str | None = None,
    recipe_path: str | None = None,
    policy: Policy | None = None,
    model: str | None = None,
    hub: Any = None,
    on_change=None,
    run_id: str | None = None,
    threads: int | None = None,
) -> Outcome:
    """Store a new run of a verified plan and drive it until it ends or parks."""
    threads = thread_limit(threads)
    values = resolve_inputs(plan, inputs or {})
    run_id = run_id or new_run_id()
    actor = actor or os_user()
    model = model or plan.options.model or os.environ.get("VODOU_MODEL")
    plan_json = encode_plan(plan).decode()
    started = msgspec.json.encode({"pid": os.getpid(), "model": model}).decode()

    def create():
        # one thread hop and one transaction: the run and its first event
        with store.transaction():
            store.create_run(
                run_id,
                recipe_name=plan.recipe.name,
                recipe_path=os.path.abspath(recipe_path) if recipe_path else None,
                source_sha256=plan.recipe.source_sha256,
                plan_json=plan_json,
                plan_fingerprint=plan.fingerprint,
                inputs_json=msgspec.json.encode(values).decode(),
                started_by=actor,
                state="running",
            )
            store.append_event(run_id, "started", actor=actor, data_json=started)
        return store.get_run(run_id)

    run = await _in_thread(create)
    return await _drive(run_id, plan, store=store, servers=servers, policy=policy, model=model, hub=hub, on_change=on_change, run=run, threads=threads)


async def drive_run(
    run_id: str,
    *,
    store: Any,
    servers: dict | None,
    policy: Policy | None = None,
    model: str | None = None,
    on_change=None,
    take_over: bool = False,
    hub: Any = None,
    threads: int | None = None,
) -> Outcome:
    """Resume a parked run from the store (any process).

    One thread hop reads the run, verifies its stored plan and claims it; only
    then are the servers the rest of the run needs started (unless ``hub`` is
    given: the CLI starts them before it even imports trio), so a refused
    resume starts nothing. Nothing is called before the claim.
    """
    from contextlib import AsyncExitStack

    from ..graph.verify import check
    from ..store.records import TERMINAL_RUN_STATES

    threads = thread_limit(threads)
    policy = policy or Policy()
    expected = ("parked", "running") if take_over else ("parked",)
    resumed = msgspec.json.encode({"pid": os.getpid()}).decode()
    want_model = model is None

    def look_and_claim():
        run = store.get_run(run_id)
        if run.state in TERMINAL_RUN_STATES:
            return run, None, None
        plan = check_stored_plan(run.plan_json, run.plan_fingerprint)
        check(plan, policy)
        # Take the run, settle effects caught mid-flight, then read what the run
        # holds (its approvals too, for the first gate checks).
        with store.transaction():
            if not store.set_run_state(run_id, "running", expected=expected):
                return run, plan, None
            store.append_event(run_id, "resumed", data_json=resumed)
        crashpoint("resume")
        store.mark_unknown(run_id)
        started = [e for e in store.events(run_id) if e.kind == "started"] if want_model else []
        return run, plan, (store.get_nodes(run_id), {e.step: e for e in store.effects(run_id)}, store.approvals(run_id), started)

    run, plan, loaded = await _in_thread(look_and_claim)
    if plan is None:
        return Outcome(run_id, run.state, [], run.error)
    if loaded is None:
        raise RefusedError(
            f"run {run_id} is being driven by another process right now; nothing else was done",
            hint="it will pick up any decision already made; `recipe show RUN` shows its progress",
        )
    nodes, effects, approvals, started = loaded
    if started:  # write steps after a park use the model the run was started with
        model = msgspec.json.decode(started[0].data_json or "{}").get("model")
    async with AsyncExitStack() as stack:
        if hub is None:
            hub = await stack.enter_async_context(open_run_servers(store, run, servers, plan=plan, nodes=nodes))
        if hub is not None:
            await hub.wait_ready()
        return await _drive(run_id, plan, store=store, servers=servers, policy=policy, model=model, hub=hub, on_change=on_change, restore=(nodes, effects, approvals), run=run, threads=threads)


@asynccontextmanager
async def open_run_servers(store, run, servers: dict | None, *, plan: Plan | None = None, nodes: dict | None = None, prespawned=None):
    """Spawn the servers a parked run's unfinished steps need, without waiting for them.

    Yields the hub (None when no server is needed); ``drive_run(hub=...)``
    waits for it to be ready only when it must call a tool, so whatever the
    caller does meanwhile overlaps the servers' start. Processes in
    ``prespawned`` (``tools.process.Prespawned``) are taken over.
    """
    if plan is None:
        plan = check_stored_plan(run.plan_json, run.plan_fingerprint)
    if nodes is None:
        nodes = await _in_thread(store.get_nodes, run.id)
    needed = servers_to_finish(plan, nodes)
    if not needed:
        yield None
        return
    from ..tools.hub import open_hub

    _require_configured(needed, servers)
    async with open_hub(servers, needed, wait=False, prespawned=prespawned) as hub:
        yield hub


def _require_configured(needed: list[str], servers: dict | None) -> None:
    from ..servers import unknown_server_error

    for name in needed:
        if servers is None or name not in servers:
            raise unknown_server_error(name, servers or {})


async def _drive(run_id, plan, *, store, servers, policy, model, hub=None, on_change=None, restore=None, run=None, threads=None) -> Outcome:
    """``restore``: (nodes, effects, approvals) of a resumed run, already read from the store."""
    from contextlib import AsyncExitStack

    policy = policy or Policy()
    if run is None:
        run = await _in_thread(store.get_run, run_id)
    engine = Engine(
        plan=plan,
        run_id=run_id,
        store=store,
        policy_digest=policy.digest,
        model=model or plan.options.model or os.environ.get("VODOU_MODEL"),
        approvers=list(plan.options.approvers) or [run.started_by],
        recipe_path=run.recipe_path,
        on_change=on_change,
        thread_limit=threads if threads is not None else thread_limit(),
    )
    engine.inputs = msgspec.json.decode(run.inputs_json)
    if restore:
        engine.restore(*restore)
    async with AsyncExitStack() as stack:
        needed = servers_needed(plan, lambda nid: engine.state[nid] in TERMINAL)
        if hub is None and needed:
            from ..tools.hub import open_hub

            _require_configured(needed, servers)
            hub = await stack.enter_async_context(open_hub(servers, needed))
        engine.hub = hub
        while True:
            verdict = await engine.drive()
            if verdict != "parked":
                break
            woken = await _in_thread(_park_or_wake, store, run_id, engine, engine.take_unsaved())
            if not woken:
                break
            engine.approvals_seen = None  # decisions arrived: read them afresh
            for nid in woken:
                engine.state[nid] = "pending"
    err = next((f"{k}: {v}" for k, v in engine.errors.items() if engine.state[k] == "failed"), None) if verdict == "failed" else None

    unsaved = engine.take_unsaved()

    def finish():
        with store.transaction():
            store.save_nodes(run_id, unsaved)
            if verdict != "parked":
                store.set_run_state(run_id, verdict, expected=("running",), error=err)
                store.append_event(run_id, verdict)
        return store.pending_approvals(run_id)

    pending = await _in_thread(finish)
    outcome = Outcome(run_id, verdict, pending, None, dict(getattr(hub, "started_in", None) or {}))
    outcome.engine = engine
    return outcome


def _park_or_wake(store, run_id: str, engine: Engine, unsaved: list) -> list[str]:
    """In one transaction: save the last node states and park, unless a waiting gate was decided meanwhile."""
    waiting = [nid for nid, s in engine.state.items() if s == "waiting"]
    with store.transaction():
        store.save_nodes(run_id, unsaved)
        latest: dict[str, Any] = {}
        for a in store.approvals(run_id):
            if a.node_id in waiting and (a.node_id not in latest or a.asked_at > latest[a.node_id].asked_at):
                latest[a.node_id] = a
        woken = [nid for nid, a in latest.items() if a.state in ("approved", "rejected")]
        if woken:
            return woken
        store.set_run_state(run_id, "parked", expected=("running",))
        store.append_event(run_id, "parked", data_json=msgspec.json.encode({"waiting": waiting}).decode())
    return []


def find_approval(store, run_id: str, step: str | None):
    """The pending approval a person means by RUN [STEP]."""
    run = store.get_run(run_id)
    pending = store.pending_approvals(run_id)
    if step is not None:
        mine = [a for a in pending if a.step == step or a.node_id == step]
        if mine:
            return run, max(mine, key=lambda a: a.asked_at)
        every = [a for a in store.approvals(run_id) if a.step == step or a.node_id == step]
        if every:
            from ..store.base import describe_decision

            from ..errors import AlreadyDecidedError

            last = max(every, key=lambda a: a.asked_at)
            raise AlreadyDecidedError(
                f"{describe_decision(last)}; nothing was changed",
                hint="`recipe show RUN` lists the run's approvals" + ("; `recipe resume RUN` asks again" if last.state == "expired" else ""),
            )
        steps = sorted({a.step for a in store.approvals(run_id)})
        raise RefusedError(
            f"run {run_id} has no approval for step `{step}`; nothing was changed",
            hint=f"steps with approvals: {', '.join(steps) or 'none'}",
        )
    if not pending:
        raise RefusedError(
            f"run {run_id} has no approval waiting (it is {run.state}); nothing was changed",
            hint="`recipe show RUN` shows its state",
        )
    if len(pending) > 1:
        raise UsageError(
            f"run {run_id} has {len(pending)} approvals waiting: {', '.join(a.step for a in pending)}",
            hint=f"name one: `recipe approve {run_id} STEP`",
        )
    return run, pending[0]


def decide(store, approval_id: str, decision: str, *, actor: str, reason: str | None = None):
    state = {"approve": "approved", "reject": "rejected"}[decision]
    return store.decide(approval_id, state, by=actor, reason=reason)
