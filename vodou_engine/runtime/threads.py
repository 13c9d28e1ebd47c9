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
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

import outcome
import trio
from trio.lowlevel import (
    Abort,
    Task,
    current_task,
    current_trio_token,
    reschedule,
    start_thread_soon,
    wait_task_rescheduled,
)


class Blocking:
    """At most ``limit`` calls on threads at once, for one trio run.

    Up to ``limit`` worker loops take calls from one queue: a worker that
    finishes a call takes the next itself, so a long queue never waits for the
    trio thread to hand out work (as ``ThreadPoolExecutor`` does it).

    A cancelled call is abandoned as ``abandon_on_cancel=True`` would: its
    caller returns at once; if a worker had taken it, it finishes in the
    background and holds that worker until then, and its result is dropped;
    if not, it never runs.
    """

    def __init__(self, limit: int):
        self.limit = limit
        self.workers = 0  # worker loops alive; changed under ``lock``
        self.lock = threading.Lock()  # a worker's take-or-exit against a caller's cancel
        self.queued: deque[Job] = deque()  # waiting for a worker
        self.done: deque[Job] = deque()  # appended to by workers
        self.start_asked = False
        self.drain_asked = False
        self.token: trio.lowlevel.TrioToken | None = None
        self.finished: list[Job] = []  # ended submitted calls, for collect()
        self.collector: Task | None = None  # the task parked in collect()

    async def run(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Call ``fn(*args)`` on a worker thread; cancelling the caller abandons it."""
        job = self._queue(fn, args, current_task(), None)
        return await wait_task_rescheduled(job.abort)

    def submit(self, fn: Callable[..., Any], args: tuple[Any, ...], tag: Any) -> Job:
        """Queue ``fn(*args)`` with no task waiting on it: ``collect`` hands it back,
        ``tag`` and ``result`` (an ``outcome``) set, once it ends. A caller with many
        calls in flight pays for one collecting task instead of a task per call."""
        return self._queue(fn, args, None, tag)

    def abandon(self, job: Job) -> None:
        """A submitted call is no longer wanted: never run if not yet taken, never collected."""
        with self.lock:
            job.tag = None

    async def collect(self) -> list[Job]:
        """Submitted calls that ended since the last collect; [] after ``interrupt``.
        One task at a time may wait here."""
        if not self.finished:
            self.collector = current_task()
            await wait_task_rescheduled(self._stop_collecting)
        batch, self.finished = self.finished, []
        return batch

    def interrupt(self) -> None:
        """Wake the task waiting in ``collect`` with what has ended so far, if anything."""
        if self.collector is not None:
            reschedule(self.collector)
            self.collector = None

    def _stop_collecting(self, _: Any) -> Abort:
        self.collector = None
        return Abort.SUCCEEDED

    def _queue(self, fn: Callable[..., Any], args: tuple[Any, ...], task: Task | None, tag: Any) -> Job:
        if self.token is None:
            self.token = current_trio_token()
        job = Job(self, fn, args, task, tag)
        # Append and count under the lock a worker holds to find the queue empty
        # and leave: either that worker sees this call, or the count read here
        # already lacks it. (Unlocked, a worker could find the queue empty, this
        # caller append and count it as alive, and the worker leave: a call
        # stranded with no worker to take it.)
        with self.lock:
            self.queued.append(job)
            short = self.workers < self.limit
        if short and not self.start_asked:
            # Workers start in a later pass of the run loop: after every task that
            # is ready now (more callers, or the callers of calls just drained)
            # has had its turn.
            self.start_asked = True
            self.token.run_sync_soon(self._start)
        return job

    def _start(self) -> None:
        self.start_asked = False
        with self.lock:
            n = min(self.limit - self.workers, len(self.queued))
            self.workers += n
        for started in range(n):
            try:
                start_thread_soon(self._work, _ignore)
            except RuntimeError as exc:  # the system would not start another thread (a process or memory limit)
                self._short_of_threads(n - started, exc)
                return

    def _short_of_threads(self, missing: int, exc: RuntimeError) -> None:
        """Fewer workers than counted could start: the ones running take the whole queue
        (each takes calls until it is empty), so the run goes on with them; with none
        running, every call waiting fails now, saying why, rather than never returning."""
        with self.lock:
            self.workers -= missing
            stranded: list[Job] = []
            if self.workers == 0:
                stranded = list(self.queued)
                self.queued.clear()
        why = RuntimeError(
            f"no thread could be started for this blocking step ({exc}): lower the run's thread limit"
            " (`threads`, $VODOU_THREADS) or raise the system's limit on threads"
        )
        for job in stranded:
            job.deliver(outcome.Error(why))

    def _work(self) -> None:
        """A worker thread: take calls until the queue is empty, then leave."""
        lock = self.lock
        queued = self.queued
        while True:
            with lock:
                while queued:
                    job = queued.popleft()
                    if job.task is not None or job.tag is not None:
                        break
                else:
                    self.workers -= 1
                    return
            job.started = time.time()
            result = outcome.capture(job.context.run, job.fn, *job.args)
            job.ended = time.time()  # now, not when trio collects it: the wait for trio is not work
            job.deliver(result)

    def _drain(self) -> None:
        # Cleared before reading, so a worker that saw it set has already
        # queued its job where this loop will find it.
        self.drain_asked = False
        done = self.done
        finished = self.finished
        while done:
            job = done.popleft()
            if job.task is not None:
                reschedule(job.task, job.result)
            elif job.tag is not None:
                finished.append(job)
        if finished and self.collector is not None:
            reschedule(self.collector)
            self.collector = None


def _ignore(_: Any) -> None:
    pass


class Job:
    __slots__ = ("args", "context", "ended", "fn", "owner", "result", "started", "tag", "task")

    result: outcome.Outcome[Any]
    """How the call ended; set by :meth:`deliver`, before trio ever sees the job again."""

    def __init__(self, owner: Blocking, fn: Callable[..., Any], args: tuple[Any, ...], task: Task | None, tag: Any):
        self.owner = owner
        self.fn = fn
        self.args = args
        self.task = task  # the caller waiting in run(); None once it has given up
        self.tag = tag  # a submitted call's tag; None once abandoned
        self.context = contextvars.copy_context()
        self.started: float | None = None
        """When a worker took it (epoch seconds): the time before that was spent queueing, not working."""
        self.ended: float | None = None
        """When the call returned on its worker (the hand-back to trio comes after)."""

    def abort(self, _: Any) -> Abort:
        # Under the workers' lock: a call no worker has taken yet never runs;
        # one already taken runs on, and its result is dropped when it ends.
        with self.owner.lock:
            self.task = None
        return Abort.SUCCEEDED

    def deliver(self, result: outcome.Outcome[Any]) -> None:
        """On the worker thread: queue the result; only the first of a burst wakes trio."""
        self.result = result
        owner = self.owner
        owner.done.append(self)
        if not owner.drain_asked:
            owner.drain_asked = True
            token = owner.token
            assert token is not None  # taken by the first call queued, before any worker runs
            try:
                token.run_sync_soon(owner._drain)
            except trio.RunFinishedError:
                pass  # an abandoned call outlived its run
