"""One long-running process: warm servers, many runs at once, the scheduler, a clean stop.

``recipe serve`` is this, with a web inbox in front (``web/``). Everything a
run means is still decided by the run API (``runs/``); the service only
decides *where* work happens: every drive is a task of its own in the
service's nursery (one run that fails or hangs never stops the others or
the page), each with its own store connection, on servers kept warm between
runs by a :class:`ServerPool` (``tools/pool.py``).

On a PostgreSQL store the service drives nothing itself: runs go on in the
workers (``recipe worker``, docs/scale-out.md). An approval is recorded and
the run's resume queued in one transaction (the run API's rule,
``Runs.workers``); a resume or a saved recipe's run is queued; the
schedules' tick is deferred to the queue as a Procrastinate periodic task
(``workers.app.TickThread``), so each due time fires once however many
services and workers run.

Stopping (SIGTERM, or :meth:`Service.stop`): the scheduler stops deciding,
new work is refused, running steps get ``grace_s`` seconds to finish, then
every drive still going is cancelled: its run is left ``interrupted`` (the
driver writes that), an effect already executing is shielded and records
how it ended. Nothing is lost or doubled; ``recipe resume`` or the next
``recipe serve`` goes on.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Awaitable, Callable, Mapping
from functools import partial
from typing import Any

import msgspec
import trio

from .errors import PolicyMismatchError, RefusedError, ToolError, VodouError
from .owners import describe, this_process
from .policy import Policy
from .reports import RunReport
from .runs import Runs, new_run_id
from .runs.handoff import DriveReply, bind_listener, read_request
from .servers import ServerSet, servers_needed
from .tools.pool import ServerPool
from .workers.app import TickThread

logger = logging.getLogger("vodou_engine.service")

GRACE_S = 30.0
"""How long running steps get to finish after a stop is asked for."""


"""Keys of warm servers live in one process's memory only; a fixed salt lets two requests compare."""


def _release(hub: Any) -> None:
    if hub is not None:
        hub.release()


class Service:
    """Runs driven in one process on warm servers, and the scheduler that starts them."""

    def __init__(
        self,
        *,
        store: Any,
        servers: ServerSet,
        policy: Policy | None = None,
        clock: Callable[[], float] = time.time,
        tick_s: float = 1.0,
        grace_s: float = GRACE_S,
        on_parked: Callable[[RunReport], Awaitable[None]] | None = None,
        schedule: bool = True,
        workers: bool | None = None,
    ):
        """``workers``: runs go on in the workers, not here (default: on a PostgreSQL store)."""
        self.store_location = store
        self.server_set = servers
        self.policy = policy or Policy()
        self.clock = clock
        self.tick_s = tick_s
        self.grace_s = grace_s
        self.on_parked = on_parked
        self.scheduling = schedule
        self.pool = ServerPool(servers)
        self.accepting = True
        self.active: dict[str, trio.CancelScope] = {}
        """Drives in progress, by run id: what a stop waits for, then cancels."""
        self._nursery: trio.Nursery | None = None
        self._stopped = trio.Event()
        self.workers = Runs(store=store, workers=workers).workers
        """Runs go on in the workers (a PostgreSQL store): this process queues, never drives."""

    def runs(self) -> Runs:
        """A Runs for one operation: its own store connection, the service's configuration."""
        return Runs(
            store=self.store_location,
            servers=self.server_set,
            policy=self.policy,
            clock=self.clock,
            workers=self.workers,
        )

    # --- the process ---------------------------------------------------------------------
    async def serve(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        """Run until :meth:`stop`; then drain (grace period) and return."""
        ticks = None
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            await nursery.start(self.pool.run)
            if self.scheduling and self.workers:
                ticks = TickThread(self.store_location)
                await trio.to_thread.run_sync(ticks.start)
            elif self.scheduling:
                nursery.start_soon(self._scheduler)
            if not self.workers:
                await nursery.start(self._take_warm_drives)
            task_status.started()
            await self._stopped.wait()
            if ticks is not None:
                await trio.to_thread.run_sync(ticks.stop)
            self.accepting = False
            with trio.move_on_after(self.grace_s):
                while self.active:  # noqa: ASYNC110 - a bounded wait at shutdown for runs to leave `active`
                    await trio.sleep(0.05)
            for scope in list(self.active.values()):
                scope.cancel()
            while self.active:  # noqa: ASYNC110 - the cancelled runs leave `active` within a few checkpoints
                await trio.sleep(0.01)
            self.pool.close()
            nursery.cancel_scope.cancel()

    def stop(self) -> None:
        self._stopped.set()

    async def _take_warm_drives(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        """Drive, on these warm servers, the runs a decision made elsewhere asks for
        (``runs/handoff.py``): the socket named after this SQLite store, while it runs."""
        location = os.fspath(self.store_location) if self.store_location is not None else None
        bound = await trio.to_thread.run_sync(bind_listener, location) if location else None
        if bound is None:  # a file-less store, another live process on it, or no safe directory
            task_status.started()
            return
        sock, path = bound
        listener = trio.SocketListener(trio.socket.from_stdlib_socket(sock))
        try:
            task_status.started()
            await trio.serve_listeners(self._warm_drive, [listener])
        finally:
            with contextlib.suppress(OSError):
                os.unlink(path)
            await listener.aclose()

    async def _warm_drive(self, stream: trio.SocketStream) -> None:
        """One request: drive this run here, answer with its report once it parks or ends."""
        async with stream:
            request = await read_request(stream)
            if request is None:
                return
            if request.check:
                await self._warm_check(stream, request.run)
                return
            done = trio.Event()
            box: dict[str, Any] = {}

            async def go(runs: Runs) -> RunReport | None:
                try:
                    report = box["report"] = await self._resume(runs, request.run)
                    return report
                except VodouError as exc:  # e.g. its servers resolve differently here: the caller drives it
                    logger.warning(
                        "run %s: not driven here, handed back to the approving process: %s", request.run, exc.message
                    )
                    box["refused"] = exc.message
                    return None
                finally:
                    done.set()

            try:
                self._spawn(request.run, go)
            except RefusedError as exc:
                box["refused"] = exc.message
                done.set()
            await done.wait()
            report = box.get("report")
            reply = DriveReply(
                report=report,
                by=f"recipe serve ({describe(this_process())})",
                refused=box.get("refused") or (None if report is not None else "the run is driven by another process"),
            )
            with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
                await stream.send_all(msgspec.json.encode(reply) + b"\n")

    async def _warm_check(self, stream: trio.SocketStream, run_id: str) -> None:
        """A ``check`` request: before a decision made elsewhere is recorded, whether the run
        could go on here (``_risks_before_deciding``, on the warm servers its drive will use)."""
        reply = DriveReply(by=f"recipe serve ({describe(this_process())})")
        runs = self.runs()
        try:
            await self._risks_before_deciding(runs, run_id)
        except PolicyMismatchError as exc:
            reply = msgspec.structs.replace(reply, mismatch=exc.message, mismatch_hint=exc.hint)
        except VodouError:
            pass  # anything else is the decision's and the drive's to say, as before
        finally:
            runs.close()
        with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
            await stream.send_all(msgspec.json.encode(reply) + b"\n")

    def _spawn(self, run_id: str | None, fn: Callable[[Runs], Awaitable[Any]]) -> None:
        if not self.accepting or self._nursery is None:
            raise RefusedError("the service is stopping; nothing new was started", hint="retry once it is back")
        self._nursery.start_soon(self._drive_task, run_id, fn)

    async def _drive_task(self, run_id: str | None, fn: Callable[[Runs], Awaitable[Any]]) -> None:
        runs = self.runs()
        key = run_id or f"task-{id(fn)}"
        with trio.CancelScope() as scope:
            self.active[key] = scope
            try:
                report = await fn(runs)
                on_parked, nursery = self.on_parked, self._nursery
                if (
                    report is not None
                    and getattr(report, "state", None) == "parked"
                    and not getattr(report, "queued", False)
                    and on_parked is not None
                    and nursery is not None  # always, once a run is driven: it was started there
                ):
                    # in a task of its own: a slow webhook neither holds the run nor a stop's grace
                    nursery.start_soon(self._notify, on_parked, report)
            except Exception:  # one run's failure never stops the others
                logger.exception("run %s ended with an error", run_id or "(new)")
            finally:
                self.active.pop(key, None)
                runs.close()

    async def _notify(self, on_parked: Callable[[RunReport], Awaitable[None]], report: RunReport) -> None:
        try:
            await on_parked(report)
        except Exception:  # a notification that fails never touches the run
            logger.exception("notifying about run %s failed", report.run)

    async def _hub_for(self, runs: Runs, run_id: str) -> Any:
        """Warm servers for a stored run: the ones it is bound to, started in its directory
        (ServerMismatchError, before any is started, when what would start differs)."""
        needed, servers = await trio.to_thread.run_sync(runs.bound_servers, run_id)
        return await self.pool.hub(needed, servers)

    # --- what surfaces ask of it ---------------------------------------------------------
    async def approve(
        self,
        run_id: str,
        step: str | None,
        *,
        actor: str,
        fingerprint: str | None,
        proof: str,
        items: list[int] | None = None,
    ) -> RunReport:
        """Record the decision now (refusals are the caller's to show), then drive the run
        on warm servers in the background; with workers, the decision and the run's queued
        resume commit together and a worker drives it. ``items``: of a loop's batch, only these."""
        runs = self.runs()
        hub = None
        try:
            if not self.workers:
                hub = await self._checked_hub(runs, run_id)
            report = await runs.approve(
                run_id, step, actor=actor, fingerprint=fingerprint, proof=proof, drive=self.workers, items=items
            )
        except BaseException:
            _release(hub)
            raise
        finally:
            runs.close()
        if not self.workers:
            self.resume(run_id, hub=hub)
        return report

    async def _risks_before_deciding(self, runs: Runs, run_id: str) -> None:
        """:meth:`_checked_hub` for a decision recorded elsewhere: the warm servers are let go."""
        _release(await self._checked_hub(runs, run_id))

    async def _checked_hub(self, runs: Runs, run_id: str) -> Any:
        """The warm servers the run's drive will use, held, once they showed that no server the
        run still calls now declares a step riskier than its plan (``Runs.declared_before_deciding``;
        else PolicyMismatchError, before the decision is recorded: an approval is never spent on
        a run that cannot go on). Held so that the drive after the decision goes on on exactly
        these, listed once (:meth:`resume` takes them over). The run is read once
        (``Runs.ready_to_decide``), raising what the decision would be refused with; None when
        the servers cannot be reached here: the decision and the drive say why, as before."""
        needed, servers, plan, policy, nodes = await trio.to_thread.run_sync(runs.ready_to_decide, run_id)
        try:
            hub = await self.pool.hub(needed, servers)
        except Exception:  # noqa: BLE001 - a server that cannot start or resolve here: the drive reports it
            return None
        try:
            await runs.declared_before_deciding(run_id, hub, plan, policy, nodes)
        except BaseException:
            _release(hub)
            raise
        return hub

    async def answer(
        self,
        run_id: str,
        step: str | None,
        *,
        actor: str,
        action: str,
        content: Mapping[str, Any] | None,
        fingerprint: str | None,
        proof: str,
    ) -> RunReport:
        """Answer a server's question as :meth:`approve` approves: recorded now, driven on in the background."""
        runs = self.runs()
        try:
            report = await runs.answer(
                run_id, step, actor=actor, action=action, content=content, fingerprint=fingerprint, proof=proof,
                drive=self.workers,
            )  # fmt: skip
        finally:
            runs.close()
        if not self.workers:
            self.resume(run_id)
        return report

    def resume(self, run_id: str, *, hub: Any = None) -> None:
        """Drive a parked or interrupted run again on warm servers, in the background (an
        expired question is asked again); with workers, queue its drive for them. ``hub``:
        warm servers already held for this run (:meth:`_checked_hub`), which the drive takes
        over and lets go of; else the drive gets its own."""
        if self.workers:
            _release(hub)
            self._spawn(run_id, lambda r: trio.to_thread.run_sync(r.queue_resume, run_id))
            return
        try:
            self._spawn(run_id, lambda r: self._resume(r, run_id, hub))
        except BaseException:
            _release(hub)
            raise

    async def reject(
        self, run_id: str, step: str | None, *, actor: str, reason: str | None, fingerprint: str | None, proof: str
    ) -> RunReport:
        runs = self.runs()
        try:
            return await runs.reject(run_id, step, actor=actor, reason=reason, fingerprint=fingerprint, proof=proof)
        finally:
            runs.close()

    def start_saved(self, name: str, *, inputs: Mapping[str, Any] | None, actor: str) -> str:
        """Start a saved recipe in the background; the run id it will have."""
        run_id = new_run_id()
        if self.workers:
            self._spawn(
                run_id,
                lambda r: trio.to_thread.run_sync(
                    lambda: r.queue_saved(name, inputs=inputs, actor=actor, run_id=run_id)
                ),
            )
            return run_id

        async def go(runs: Runs) -> RunReport:
            saved = await trio.to_thread.run_sync(runs.store().get_recipe, name)
            hub = await self._hub_for_recipe(runs, saved)
            try:
                return await runs.start_saved(saved, inputs=inputs, actor=actor, run_id=run_id, hub=hub)
            finally:
                _release(hub)

        self._spawn(run_id, go)
        return run_id

    async def start_text(
        self,
        source: str,
        text: str,
        *,
        inputs: Mapping[str, Any] | None,
        actor: str,
        origin: str = "person",
        run_id: str | None = None,
        wait_s: float = 0.0,
    ) -> tuple[str, RunReport | None]:
        """Start a run of a recipe's text (an agent's, over /mcp) in the background on warm
        servers, and wait up to ``wait_s`` for it to park or end, and in any case until it
        is stored (its id means nothing before): (run id, its report, or None while it still
        runs). The text is not a file, so the run records no recipe path to compare with
        later. A failure within the wait is raised here; after it, logged. With workers
        (:attr:`workers`) this process drives nothing: queue it instead (``Runs.queue``)."""
        if self.workers:
            raise RefusedError(
                "runs of this store go on in the workers; this process drives none; nothing was started",
                hint="queue it (Runs.queue)",
            )
        run_id = run_id or new_run_id()
        settled, stored = trio.Event(), trio.Event()
        box: dict[str, Any] = {"waiting": True}

        async def go(runs: Runs) -> RunReport | None:
            try:
                plan, _, _ = runs.load(source, text=text)
                needed = [n for n in servers_needed(plan) if n in self.server_set.servers]
                hub = await self.pool.hub(needed) if needed else None
                try:
                    async with runs.prepare(source, text=text, hub=hub) as prepared:
                        prepared.path = None
                        report = box["report"] = await runs.start(
                            prepared,
                            inputs=inputs or {},
                            actor=actor,
                            origin=origin,
                            run_id=run_id,
                            on_change=lambda node, state: stored.set(),
                        )
                finally:
                    _release(hub)
                return report
            except Exception as exc:
                if not box["waiting"]:
                    raise  # nobody to hand it to: the drive task logs it
                box["error"] = exc
                return None
            finally:
                settled.set()
                stored.set()

        self._spawn(run_id, go)
        with trio.move_on_after(wait_s):
            await settled.wait()
        with trio.move_on_after(60):
            await stored.wait()  # a run id is worth returning once the run is stored (its first step began)
        box["waiting"] = False
        if "error" in box:
            raise box["error"]
        return run_id, box.get("report")

    async def _resume(self, runs: Runs, run_id: str, hub: Any = None) -> RunReport | None:
        if hub is None:
            try:
                hub = await self._hub_for(runs, run_id)
            except ToolError:
                hub = None  # a server that cannot start: the drive reports it on the step
        try:
            return await runs.resume(run_id, hub=hub)
        except RefusedError as exc:
            if exc.code == "run.busy":
                return None  # another drive of this run picks the decision up
            raise
        finally:
            _release(hub)

    async def _hub_for_recipe(self, runs: Runs, saved: Any) -> Any:
        plan, _, _ = runs.load(f"{saved.name}.recipe", text=saved.source)
        needed = [n for n in servers_needed(plan) if n in self.server_set.servers]
        return await self.pool.hub(needed) if needed else None

    async def _fire(self, runs: Runs, f: Any) -> RunReport | None:
        _, saved = await trio.to_thread.run_sync(runs.firing_recipe, f)
        hub = await self._hub_for_recipe(runs, saved)
        try:
            return await runs.start_firing(f, hub=hub)
        finally:
            _release(hub)

    async def _scheduler(self) -> None:
        """Each tick: decide due times (once, by the store) and start what fired."""
        runs = self.runs()
        try:
            while self.accepting:
                try:
                    fired = await trio.to_thread.run_sync(partial(runs.due, by="serve"))
                except Exception:  # a bad tick must not stop the scheduler
                    logger.exception("scheduler tick failed")
                    fired = []
                for f in fired:
                    if not self.accepting:
                        break
                    self._spawn(f.run_id, partial(self._fire, f=f))
                # Wake just after the next multiple of the tick: due times are whole minutes,
                # so a run starts milliseconds after its time, not up to a tick later.
                await trio.sleep(self.tick_s - time.time() % self.tick_s + 0.002)
        finally:
            runs.close()
