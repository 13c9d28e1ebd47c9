"""What a worker's jobs do on the trio side: drive one run, or decide the due schedule times.

Everything a run means is decided by the run API (``runs/``) exactly as in
any other process: a job only says *which* run to drive. A drive job takes
the run with the same compare-and-set on owner and lease as ``recipe
resume`` (so a run driven elsewhere is never driven twice), and a run found
with an effect ``executing`` (its driver died mid-call) has that effect made
``unknown``, never called again.

One :class:`Engine` lives on a worker's engine thread (``host.py``) for the
worker's whole life: its MCP servers are started once by a
:class:`~vodou_engine.tools.pool.ServerPool` and kept warm across jobs, and its
store connections are kept too (a free list of :class:`~vodou_engine.runs.Runs`,
one per job in flight).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

import msgspec

from ..binding import observe_all
from ..errors import (
    PolicyMismatchError,
    RefusedError,
    ServerConfigError,
    ServerMismatchError,
    ToolError,
    UnknownRunError,
)
from ..owners import describe, this_process
from ..plan import ToolNode
from ..policy import Policy
from ..runs import Runs
from ..runtime.plans import RecipeChangedError, check_stored_plan
from ..servers import ServerSet, servers_needed
from ..states import TERMINAL_NODE_STATES, TERMINAL_RUN_STATES
from ..store import FiringRecord
from ..tools.pool import ServerPool

logger = logging.getLogger("vodou_engine.workers")

NOT_HERE = (ServerMismatchError, PolicyMismatchError, RecipeChangedError)
"""What the run API refuses, before anything is recorded, because of this worker's own
configuration (its server file, its policy, the recipe file on its disk): another worker
may well drive the run."""


class CannotDriveHere(Exception):
    """This worker cannot drive (or start) the run, and another one may: a server it does not
    have, resolves differently, cannot start, or that does not list a tool the run needs;
    another policy; the recipe file on this machine. Nothing was recorded about the run."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


class Outcome(msgspec.Struct, kw_only=True, omit_defaults=True):
    """What one drive job did (the job's result, kept by Procrastinate)."""

    run: str
    state: str | None = None
    busy_until: float | None = None
    """The run is driven by another live process (or one whose lease has not run out yet)."""
    owner: str | None = None
    note: str | None = None
    cannot: str | None = None
    """This worker cannot drive the run, and another one may (why): the job hands it back."""


class Engine:
    """The engine of one worker: warm servers and store connections, on the trio thread."""

    def __init__(
        self,
        store: str,
        servers: ServerSet,
        policy: Policy,
        *,
        clock: Callable[[], float] = time.time,
        keep: int = 16,
        owner: str | None = None,
    ):
        self.owner = owner or this_process()
        """This worker, as a run's log names it when it hands a run back."""
        self.store_url = store
        self.servers = servers
        self.policy = policy
        self.clock = clock
        self.pool = ServerPool(servers)
        self._free: list[Runs] = []
        self._keep = keep

    # --- the host's setup: what lives as long as the worker ------------------------------
    async def setup(self, nursery: Any) -> Callable[[], None]:
        import trio

        await nursery.start(self.pool.run)
        runs = self._runs()
        await trio.to_thread.run_sync(runs.store)  # the store is created or migrated now, not mid-job
        self._give_back(runs, True)
        from ..tools import hub  # noqa: F401 - the MCP SDK (about a second) is imported now, not by the first job

        return self.close

    def close(self) -> None:
        self.pool.close()
        while self._free:
            self._free.pop().close()

    # --- store connections, kept across jobs ------------------------------------------------
    def _runs(self) -> Runs:
        if self._free:
            return self._free.pop()
        runs = Runs(store=self.store_url, servers=self.servers, policy=self.policy, clock=self.clock)
        # A drive's job is finished, in a commit that waits for the disk, right after the run's
        # end: that end need not wait too (one flush of the log for both).
        runs.ends_relaxed = True
        return runs

    def _give_back(self, runs: Runs, healthy: bool) -> None:
        if healthy and len(self._free) < self._keep:
            self._free.append(runs)
        else:
            runs.close()

    async def _with_runs(self, fn: Callable[[Runs], Any]) -> Any:
        runs = self._runs()
        healthy = False
        try:
            result = await fn(runs)
            healthy = True
            return result
        except (RefusedError, ToolError):
            healthy = True  # the run API's own refusal: the connection is fine
            raise
        finally:
            self._give_back(runs, healthy)

    # --- jobs ------------------------------------------------------------------------------
    async def noop(self) -> None:
        """A job that does nothing on the trio side: what crossing the boundary costs."""

    async def drive(self, run_id: str, spec: Mapping[str, Any] | None = None) -> Outcome:
        """Start the run ``run_id`` (when ``spec`` says how and it does not exist yet) or
        drive it on from where it is, until it parks or ends. A run this worker cannot
        drive, and another may, is left as it is (a decision stays as it was made) with
        ``cannot`` saying why, and, when it exists, an event ``handed_back`` in its log."""
        return await self._with_runs(
            lambda runs: self._drive(runs, run_id, {k: v for k, v in (spec or {}).items() if k != "declined"})
        )

    async def _drive(self, runs: Runs, run_id: str, spec: dict[str, Any]) -> Outcome:
        import trio

        def look() -> tuple[Any, bool, Any]:  # a new connection is opened off the loop, in the same hop
            store = runs.store()
            if not spec:
                return store, False, None
            seen = None
            if "start" in spec:
                # Not asked whether the run exists: its creation is refused if it does (and the
                # job goes on with that run). Its servers are looked at now, in this hop.
                s = spec["start"]
                plan, _, _ = runs.load(s.get("path") or "queued.recipe", text=s["text"])
                seen = observe_all(self.servers, servers_needed(plan))
            elif store.has_run(run_id):
                return store, False, None
            return store, True, seen

        store, to_start, seen = await trio.to_thread.run_sync(look)
        if to_start:
            # Started here unless it exists already (a job run again after its first attempt
            # created the run goes on with that run). One job per run runs at a time (its
            # lock), so nothing else starts it meanwhile; the store would refuse a second.
            try:
                report = await self._start(runs, run_id, spec, seen)
            except CannotDriveHere as exc:
                logger.warning("run %s: this worker cannot start it, handing it back: %s", run_id, exc.reason)
                return Outcome(run=run_id, cannot=exc.reason)
            if report is not None:
                return Outcome(run=run_id, state=report.state)
        hub = None
        try:
            hub = await self._hub_for_run(runs, run_id)
            report = await runs.resume(run_id, hub=hub)
        except (CannotDriveHere, *NOT_HERE) as exc:
            reason = exc.reason if isinstance(exc, CannotDriveHere) else exc.message
            run = await trio.to_thread.run_sync(
                self._handed_back, store, run_id, reason, getattr(exc, "code", "worker.cannot")
            )
            return Outcome(run=run_id, state=str(run.state), cannot=reason)
        except RefusedError as exc:
            if exc.code != "run.busy":
                raise
            run = await trio.to_thread.run_sync(store.get_run, run_id)
            return Outcome(
                run=run_id,
                state=str(run.state),
                busy_until=run.lease_expires_at or (time.time() + 1.0),
                owner=run.owner,
            )
        finally:
            if hub is not None:
                hub.release()
        return Outcome(run=run_id, state=report.state)

    def _handed_back(self, store: Any, run_id: str, reason: str, code: str) -> Any:
        """Say in the run's log that this worker could not drive it, and why (nothing else changes)."""
        logger.warning("run %s: this worker cannot drive it, handing it back: %s", run_id, reason)
        data = msgspec.json.encode({"worker": self.owner, "reason": reason, "code": code}).decode()
        store.append_event(run_id, "handed_back", actor=f"worker {describe(self.owner)}", data_json=data)
        return store.get_run(run_id)

    async def _start(self, runs: Runs, run_id: str, spec: dict[str, Any], seen: Any = None) -> Any:
        """The report of the run started now, or None when it exists already. ``seen``: its
        servers as ``binding.observe_all`` found them just now (the warm ones are keyed on
        it, and the run's bindings sealed from it)."""
        import trio

        store = runs.store()
        hub = None
        try:
            if "start" in spec:
                s = spec["start"]
                plan, _, _ = runs.load(s.get("path") or "queued.recipe", text=s["text"])
                hub = await self._hub_here(plan, servers_needed(plan), seen=seen)
                return await runs.start(
                    s.get("path") or "queued.recipe", text=s["text"], inputs=s.get("inputs") or {}, actor=s.get("actor"),
                    model=s.get("model"), run_id=run_id, hub=hub, origin=s.get("origin", "person"),
                )  # fmt: skip
            if "saved" in spec:
                s = spec["saved"]
                saved = await trio.to_thread.run_sync(store.get_recipe, s["name"], s.get("version"))
                plan, _, _ = runs.load(f"{saved.name}.recipe", text=saved.source)
                hub = await self._hub_here(plan, servers_needed(plan))
                return await runs.start_saved(
                    saved, inputs=s.get("inputs") or {}, actor=s.get("actor"), run_id=run_id, hub=hub
                )
            if "firing" in spec:
                f = msgspec.convert(spec["firing"], FiringRecord)
                _, saved = await trio.to_thread.run_sync(runs.firing_recipe, f)
                plan, _, _ = runs.load(f"{saved.name}.recipe", text=saved.source)
                hub = await self._hub_here(plan, servers_needed(plan))
                return await runs.start_firing(f, hub=hub)
        except RefusedError as exc:
            if "already exists" in exc.message:
                return None  # started meanwhile by a process that is no worker (a person's retry)
            raise
        finally:
            if hub is not None:
                hub.release()
        raise UnknownRunError(
            f"there is no run {run_id} and the job does not say how to start it; nothing was done", run=run_id
        )

    async def _hub_here(
        self,
        plan: Any,
        names: list[str],
        done: Any = frozenset(),
        servers: ServerSet | None = None,
        *,
        seen: Any = None,
    ) -> Any:
        """This worker's warm servers for ``names``; :class:`CannotDriveHere` when one is not
        configured here, does not start here, or does not list a tool a step of ``plan`` not
        yet ``done`` calls (its preview and check included). Nothing is called."""
        servers = servers or self.servers
        missing = [n for n in names if n not in servers.servers]
        if missing:
            raise CannotDriveHere(
                f"this worker has no server {', '.join(map(repr, missing))} (its server file: {servers.source})"
            )
        if not names:
            return None
        hub = None
        try:
            hub = await self.pool.hub(names, servers, seen=seen)
            await hub.wait_ready()
        except (ToolError, ServerConfigError) as exc:
            if hub is not None:
                hub.release()
            raise CannotDriveHere(f"a server did not start on this worker: {exc.message}") from None
        unlisted = []
        for node in plan.nodes:
            if not isinstance(node, ToolNode) or node.id in done:
                continue
            for call in (node, node.preview, node.check):
                if call is not None and call.server in names and call.tool not in hub.tools(call.server):
                    unlisted.append(f"{call.server}.{call.tool}")
        if unlisted:
            hub.release()
            raise CannotDriveHere(f"the servers on this worker do not list {', '.join(sorted(set(unlisted)))}")
        return hub

    async def _hub_for_run(self, runs: Runs, run_id: str) -> Any:
        """Warm servers for a stored run (None once it has ended): the ones it is bound to,
        started in the directory it recorded (ServerMismatchError, before any is started,
        when what would start differs), each listing every tool the run still calls
        (:class:`CannotDriveHere` otherwise)."""
        import trio

        store = runs.store()

        def needed() -> tuple[Any, list[str], set[str], ServerSet] | None:
            run = store.get_run(run_id)
            if run.state in TERMINAL_RUN_STATES:
                return None
            plan = check_stored_plan(run.plan_json, run.plan_fingerprint)
            nodes = store.get_nodes(run_id)
            names, servers = runs.bound_servers(run_id)
            return plan, names, {nid for nid, n in nodes.items() if n.state in TERMINAL_NODE_STATES}, servers

        found = await trio.to_thread.run_sync(needed)
        return None if found is None else await self._hub_here(*found)

    async def firing_failed(self, firing: Mapping[str, Any], why: str) -> None:
        """Record that a schedule's due time could not be started (no worker can)."""
        import trio

        async def record(runs: Runs) -> None:
            store = await trio.to_thread.run_sync(runs.store)
            await trio.to_thread.run_sync(store.firing_failed, firing["schedule"], firing["due_at"], why)

        await self._with_runs(record)

    async def due(self, by: str) -> list[dict[str, Any]]:
        """Decide every due schedule time (each once, whoever else is deciding); the firings
        whose runs must be started, as plain data for the jobs that start them."""
        import trio

        async def decide(runs: Runs) -> list[Any]:
            return await trio.to_thread.run_sync(lambda: runs.due(by=by))

        fired = await self._with_runs(decide)
        return [msgspec.to_builtins(f) for f in fired]
