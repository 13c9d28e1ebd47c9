"""The run API (``runs.py``) as the commands open it and drive it from this process.

``_runs`` opens it with the command's flags. A run driven here runs on trio
(``_run_async``: the first signal cancels it and leaves it resumable, a second one
stops every server at once), says how to go on when a signal stopped it
(``_left_resumable``), and on a terminal has its approvals answered here
(``_answer_inline``).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from typing import Any, Callable

from ..runs import Runs
from ..views.report import interrupted, report
from ..views.term import say
from .common import Stopped, _ask, _store_flag


# --- commands -------------------------------------------------------------------------------
def _runs(args: Any) -> Any:
    workers = False if getattr(args, "here", False) else None  # --here: driven here, whatever the store
    return Runs(store=getattr(args, "store", None), servers=getattr(args, "servers", None), policy=getattr(args, "policy", None), workers=workers)


def _interactive(args: Any) -> bool:
    return not getattr(args, "no_wait", False) and not getattr(args, "json", False) and sys.stdin.isatty() and sys.stdout.isatty()


def _run_async(fn: Callable[[], Any]) -> Any:
    """Run the API call ``fn`` on trio. The first SIGINT, SIGTERM or SIGHUP cancels it
    (the run is left interrupted, its servers stopped); a second one stops at once."""
    import trio  # here, not at the top: `recipe runs`, `show` and `plan --offline` never load it

    got: list[int] = []
    result: list[Any] = []

    async def main() -> None:
        with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM, signal.SIGHUP) as signals:
            async with trio.open_nursery() as nursery:

                async def watch() -> None:
                    async for signum in signals:
                        got.append(signum)
                        if len(got) == 1:
                            nursery.cancel_scope.cancel()
                        else:
                            _stop_now(signum)

                nursery.start_soon(watch)
                try:
                    result.append(await fn())
                finally:
                    nursery.cancel_scope.cancel()

    trio.run(main)
    if got:
        raise Stopped(got[0])
    return result[0]


def _stop_now(signum: int) -> None:
    """A second signal: stop every server process group this process started, and exit."""
    from ..tools.process import stop_all_now  # loaded by the run's driver by now; never by `recipe runs`

    stop_all_now()
    os._exit(128 + signum)


@contextlib.contextmanager
def _left_resumable(args: Any, run_id: str) -> Any:
    """A signal while the run is driven: say how to go on with it (it was left interrupted)."""
    try:
        yield
    except (Stopped, KeyboardInterrupt):
        try:
            state = _runs(args).show(run_id).state
        except Exception:  # noqa: BLE001 - no such run (stopped before it was stored), no store
            state = None
        if state == "interrupted":
            interrupted(run_id, _store_flag(args), err=True)
        raise


def _answer_inline(args: Any, runs: Any, rep: Any, code: int, actor: str, proof: str) -> int:
    """On a terminal: ask each waiting question here and drive on. 'n' rejects, as at
    `recipe approve`'s prompt; Enter or Ctrl-D leaves the run parked (exit 3)."""
    while rep.state == "parked" and rep.pending and not rep.queued and _interactive(args):
        card = rep.pending[0]  # its card was just printed
        answer = _ask(f"run {card.step}?")
        if answer == "later":
            say(f"nothing was decided; run {rep.run} stays parked.", style="yellow")
            return code
        if answer == "yes":
            rep = _run_async(lambda: runs.approve(rep.run, card.step, actor=actor, fingerprint=card.fingerprint, proof=proof))
        else:
            rep = _run_async(lambda: runs.reject(rep.run, card.step, actor=actor, fingerprint=card.fingerprint, proof=proof))
        code = report(rep, json_out=False, store_flag=_store_flag(args))
    return code
