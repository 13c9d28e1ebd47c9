"""Blocking calls on worker threads, their completions handed to trio in batches.

``trio.to_thread.run_sync`` wakes the trio thread once per finished call (a
socket write, a pass of the run loop and a limiter hand-off each): with
hundreds of calls ending together, that per-completion work and the GIL
traffic it causes cost several times the calls themselves. Here a finished
call only queues itself, and the first of a burst asks trio to drain the
queue: one wake-up reschedules every task whose call ended meanwhile.

Threads are started in batches too, once the tasks that are ready have all
had their turn: a worker woken early would only take the GIL from the trio
thread while it is still setting up, or finishing, the other branches.

The threads come from trio's own thread cache (``start_thread_soon``): shared
by every run in the process, kept warm between runs, and daemon threads, so an
abandoned call never holds up the interpreter's exit.
"""

from __future__ import annotations

import contextvars
from collections import deque
from typing import Any, Callable

import trio
from trio.lowlevel import Abort, current_task, current_trio_token, reschedule, start_thread_soon, wait_task_rescheduled


class Blocking:
    """At most ``limit`` calls on threads at once, for one trio run.

    A cancelled call is abandoned as ``abandon_on_cancel=True`` would: its
    caller returns at once, its thread (if it began) finishes in the background
    and keeps its slot until then, and its result is dropped.
    """

    def __init__(self, limit: int):
        self.limit = limit
        self.busy = 0  # calls on a thread, or ended but not drained yet
        self.queued: deque[_Job] = deque()  # waiting for a thread
        self.done: deque[_Job] = deque()  # appended to by workers
        self.start_asked = False
        self.drain_asked = False
        self.token: trio.lowlevel.TrioToken | None = None

    async def run(self, fn: Callable[..., Any], *args: Any) -> Any:
        if self.token is None:
            self.token = current_trio_token()
        job = _Job(self, fn, args, current_task())
        self.queued.append(job)
        self._ask_start()
        return await wait_task_rescheduled(job.abort)

    def _ask_start(self) -> None:
        # Threads start in a later pass of the run loop: after every task that
        # is ready now (more callers, or the callers of calls just drained)
        # has had its turn.
        if not self.start_asked and self.busy < self.limit:
            self.start_asked = True
            self.token.run_sync_soon(self._start)

    def _start(self) -> None:
        self.start_asked = False
        queued = self.queued
        while queued and self.busy < self.limit:
            job = queued.popleft()
            if job.task is not None:
                self.busy += 1
                start_thread_soon(job.call, job.deliver)

    def _drain(self) -> None:
        # Cleared before reading, so a worker that saw it set has already
        # queued its job where this loop will find it.
        self.drain_asked = False
        done = self.done
        while done:
            job = done.popleft()
            self.busy -= 1
            if job.task is not None:
                reschedule(job.task, job.result)
        if self.queued:
            self._ask_start()


class _Job:
    __slots__ = ("args", "context", "fn", "owner", "result", "task")

    def __init__(self, owner: Blocking, fn: Callable[..., Any], args: tuple, task: Any):
        self.owner = owner
        self.fn = fn
        self.args = args
        self.task = task
        self.context = contextvars.copy_context()
        self.result = None

    def abort(self, _: Any) -> Abort:
        self.task = None  # skipped if not begun, dropped when it ends
        return Abort.SUCCEEDED

    def call(self) -> Any:
        return self.context.run(self.fn, *self.args)

    def deliver(self, result: Any) -> None:
        """On the worker thread: queue the result; only the first of a burst wakes trio."""
        self.result = result
        owner = self.owner
        owner.done.append(self)
        if not owner.drain_asked:
            owner.drain_asked = True
            try:
                owner.token.run_sync_soon(owner._drain)
            except trio.RunFinishedError:
                pass  # an abandoned call outlived its run
