"""What the concerns of the run API share: a blocking store call run on a worker thread,
the one error a call raises out of the group a nursery wraps it in, and whether a
stored run can be taken now (its driver parked, or gone, or its lease run out).
"""

from __future__ import annotations

import functools
import time
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, ParamSpec, TypeVar

from ..errors import BusyError
from ..owners import describe, is_gone
from ..states import RunState
from ..store.records import RunRecord

P = ParamSpec("P")
R = TypeVar("R")


async def in_thread(fn: Callable[P, R], *args: P.args, **kwargs: P.kwargs) -> R:
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


def plain(fn: Callable[P, Awaitable[R]]) -> Callable[P, Coroutine[Any, Any, R]]:
    """A run API call raises the error that happened, not a group wrapping it."""

    @functools.wraps(fn)
    async def call(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return await fn(*args, **kwargs)
        except BaseExceptionGroup as group:
            leaf = plain_error(group)
            if leaf is None:
                raise
            raise leaf from None

    return call


def takeable(run: RunRecord) -> bool:
    return run.state in (RunState.PARKED, RunState.INTERRUPTED) or (
        run.state == RunState.RUNNING and (is_gone(run.owner) or (run.lease_expires_at or 0) < time.time())
    )


def effective_state(run: RunRecord, now: float) -> str:
    if run.state == RunState.RUNNING and (
        is_gone(run.owner) or (run.lease_expires_at is not None and run.lease_expires_at < now)
    ):
        return RunState.INTERRUPTED
    return run.state


def busy(run: RunRecord) -> BusyError:
    return BusyError(
        f"run {run.id} is being driven by {describe(run.owner)} right now; nothing else was done",
        hint="it picks up every decision already made; look at the run to follow it",
        run=run.id,
        owner=run.owner,
    )
