"""The asyncio/trio boundary: a trio loop in a thread of its own, hosting the engine for asyncio.

Procrastinate is asyncio; the engine (the run API, the hub, the driver) is
trio. A worker process therefore runs two event loops, each on its own
thread, and never blocks either:

* the **asyncio thread** (the process's main thread) runs Procrastinate:
  LISTEN/NOTIFY, fetching jobs, heartbeats, the periodic deferrer;
* the **engine thread** runs ``trio.run``: a :class:`~vodou_engine.tools.pool.ServerPool`
  keeping every MCP server warm across jobs, and one trio task per job.

Handing a job over costs two wake-ups and no blocking call on either side:
the asyncio side calls :meth:`EngineHost.call`, which puts a callback on the
trio loop with ``TrioToken.run_sync_soon`` (thread-safe, never blocks) and
awaits an asyncio future; the trio task that runs the job sets that future
with ``loop.call_soon_threadsafe`` (thread-safe, never blocks). Blocking
work inside a job (the store's SQL) goes to trio's worker threads, as it
does everywhere in the engine. ``benchmarks/workers_bench.py`` measures a
round trip.

Cancellation crosses the boundary too: an asyncio job task that is cancelled
(Procrastinate aborting it at shutdown) cancels its trio task's scope and
waits for that task to end, so a drive always finishes its own bookkeeping
(the run left ``interrupted``, an executing effect shielded and recorded)
before the job is reported ended.
"""

from __future__ import annotations

import asyncio
import ctypes
import logging
import sys
import threading
from collections.abc import Awaitable, Callable
from typing import Any

logger = logging.getLogger("vodou_engine.workers")


class HostStopped(RuntimeError):
    """The engine thread is not running (not started yet, or stopped)."""


class _Job:
    __slots__ = ("cancelled", "scope")

    def __init__(self) -> None:
        self.scope: Any = None
        self.cancelled = False


class EngineHost:
    """A trio loop on a thread of its own, with what every job shares (warm servers).

    ``setup(nursery)`` (optional, a trio coroutine function) runs on the trio
    loop before the host reports ready: it starts what lives as long as the
    host (a ServerPool's ``run`` task) and returns a closer that is called when
    the host stops.
    """

    def __init__(
        self, setup: Callable[[Any], Awaitable[Callable[[], None] | None]] | None = None, *, name: str = "vodou-engine"
    ):
        self._setup = setup
        self._name = name
        self._token: Any = None
        self._nursery: Any = None
        self._stop: Any = None  # a trio.Event, made on the trio thread
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self.jobs = 0
        """Jobs in flight on the trio loop."""

    # --- lifetime (called from the asyncio side, or any thread) ---------------------------
    async def start(self) -> None:
        """Start the engine thread and wait (without blocking the event loop) until it is ready."""
        if self._thread is not None:
            return
        self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
        self._thread.start()
        await asyncio.to_thread(self._ready.wait)
        if self._error is not None:
            raise self._error

    def start_sync(self) -> None:
        """:meth:`start` for a caller with no event loop (tests, benchmarks)."""
        if self._thread is not None:
            return
        self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
        self._thread.start()
        self._ready.wait()
        if self._error is not None:
            raise self._error

    def stop(self) -> None:
        """Ask the engine thread to stop: jobs still running are cancelled (each leaves its
        run interrupted), then the servers are stopped. Never blocks."""
        token = self._token
        if token is None:
            return
        try:
            token.run_sync_soon(self._stop_now)
        except Exception:  # noqa: BLE001 - trio already gone
            pass

    async def wait_stopped(self, timeout: float | None = None) -> None:
        if self._thread is not None:
            await asyncio.to_thread(self._thread.join, timeout)

    def join(self, timeout: float | None = None) -> None:
        if self._thread is not None:
            self._thread.join(timeout)

    # --- the trio side -----------------------------------------------------------------
    def _run(self) -> None:
        import trio

        _name_os_thread(self._name)
        try:
            trio.run(self._main)
        except BaseException as exc:  # reported to whoever waits for ready
            if not self._ready.is_set():
                self._error = exc
            else:
                logger.exception("the engine thread ended with an error")
        finally:
            self._token = None
            self._ready.set()

    async def _main(self) -> None:
        import trio

        self._stop = trio.Event()
        closer = None
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            if self._setup is not None:
                closer = await self._setup(nursery)
            self._token = trio.lowlevel.current_trio_token()
            self._ready.set()
            await self._stop.wait()
            nursery.cancel_scope.cancel()
            if closer is not None:
                closer()

    def _stop_now(self) -> None:
        if self._stop is not None:
            self._stop.set()

    async def _job(
        self,
        job: _Job,
        fn: Callable[..., Awaitable[Any]],
        args: tuple,
        loop: asyncio.AbstractEventLoop,
        fut: asyncio.Future,
    ) -> None:
        import trio

        outcome: tuple[str, Any] = ("cancelled", None)
        self.jobs += 1
        try:
            with trio.CancelScope() as scope:
                job.scope = scope
                if job.cancelled:
                    scope.cancel()
                try:
                    outcome = ("ok", await fn(*args))
                except Exception as exc:  # noqa: BLE001 - handed to the asyncio side as it is
                    outcome = ("error", exc)
        finally:
            self.jobs -= 1
            _settle_threadsafe(loop, fut, outcome)

    # --- the asyncio side --------------------------------------------------------------
    async def call(self, fn: Callable[..., Awaitable[Any]], *args: Any) -> Any:
        """Run the trio coroutine function ``fn(*args)`` on the engine thread; its result.

        Cancelling the awaiting asyncio task cancels the trio task and waits for it
        to unwind before raising ``CancelledError``."""
        token = self._token
        if token is None:
            raise HostStopped("the engine thread is not running")
        loop = asyncio.get_running_loop()
        fut: asyncio.Future = loop.create_future()
        job = _Job()

        def spawn() -> None:  # on the trio thread
            self._nursery.start_soon(self._job, job, fn, args, loop, fut)

        try:
            token.run_sync_soon(spawn)
        except RuntimeError as exc:  # trio has exited
            raise HostStopped("the engine thread is not running") from exc
        try:
            kind, value = await asyncio.shield(fut)
        except asyncio.CancelledError:

            def cancel() -> None:  # on the trio thread
                job.cancelled = True
                if job.scope is not None:
                    job.scope.cancel()

            try:
                token.run_sync_soon(cancel)
            except RuntimeError:
                pass
            # The drive leaves its run resumable before the job is reported ended.
            if not fut.done():
                await _wait_uncancellable(fut)
            raise
        if kind == "error":
            raise value
        if kind == "cancelled":
            raise asyncio.CancelledError("the engine thread stopped while the job ran")
        return value


def _name_os_thread(name: str) -> None:
    """Give the calling thread its name in the kernel too (Linux; best effort), so /proc, ``top -H``
    and the workers benchmark's ``profile-worker`` tell the engine thread's CPU from the asyncio
    thread's: Python names its threads for itself only, and both would show as ``python``."""
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL(None)  # the process's own symbols, libc's among them (no ldconfig run)
        libc.prctl(15, name.encode()[:15], 0, 0, 0)  # PR_SET_NAME: 15 bytes and a NUL at most
    except (OSError, AttributeError):
        pass


def _settle_threadsafe(loop: asyncio.AbstractEventLoop, fut: asyncio.Future, outcome: tuple[str, Any]) -> None:
    def settle() -> None:
        if not fut.done():
            fut.set_result(outcome)

    try:
        loop.call_soon_threadsafe(settle)
    except RuntimeError:  # the asyncio loop is closed: nobody waits any more
        pass


async def _wait_uncancellable(fut: asyncio.Future) -> None:
    """Await ``fut`` even if this task is cancelled again meanwhile."""
    while not fut.done():
        try:
            await asyncio.shield(fut)
        except asyncio.CancelledError:
            continue
