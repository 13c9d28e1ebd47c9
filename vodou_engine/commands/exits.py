"""How a command ends: what ``cli.py`` needs before it knows the command.

SIGTERM and SIGHUP unwind like Ctrl-C until trio runs (``Stopped``); an error from
the one tree in errors.py is said in the CLI's words (hints that name ``recipe``
commands) and becomes its exit code; a signal becomes 128 + its number
(docs/exit-codes.md). ``cli.py`` imports this module at start-up, so
``recipe --help`` loads it: it imports nothing heavy.
"""

from __future__ import annotations

import signal
from collections.abc import Callable
from typing import Any

from ..errors import VodouError
from ..views.term import say

TOKEN_ENV = "VODOU_APPROVER_TOKEN"


class Stopped(BaseException):
    """A signal asked this process to stop; the run it drove was left resumable."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


def _ended(exc: BaseException) -> int:
    if isinstance(exc, VodouError):
        _error(exc)
        return exc.exit_code
    signum = exc.signum if isinstance(exc, Stopped) else signal.SIGINT
    say(
        "interrupted" if signum == signal.SIGINT else f"stopped by {signal.Signals(signum).name}", style="red", err=True
    )
    return 128 + signum


def _stop_on_signals() -> None:
    """Before trio runs (and between runs): SIGTERM and SIGHUP unwind like Ctrl-C, so
    servers started early are stopped on the way out. Inside trio the run API's
    drive handles them (``_run_async``)."""

    def stop(signum: int, _frame: Any) -> None:
        raise Stopped(signum)

    for sig in (signal.SIGTERM, signal.SIGHUP):
        try:
            signal.signal(sig, stop)
        except (ValueError, OSError):  # pragma: no cover - not the main thread
            pass


# --- errors: the library's facts, in the CLI's words ---------------------------------------
def _error(exc: Any) -> None:
    hint = _CLI_HINTS.get(exc.code)
    text = str(exc)
    if hint is not None:
        # The CLI's own words for what to do (they may name `recipe` commands); the rest,
        # file:line:col and caret included, is the library's message as it is.
        mine = f"hint: {hint(exc.facts)}"
        text = text.replace(f"hint: {exc.hint}", mine) if exc.hint else f"{text}\n  {mine}"
    say(text, style="red", err=True)


_CLI_HINTS: dict[str, Callable[[dict[str, Any]], str]] = {  # an error's facts, as it raised them
    "run.unknown": lambda f: "`recipe runs` lists the runs in this store",
    "input.missing": lambda f: f"give it a value: --set {f.get('input')}=VALUE",
    "plan.edited": lambda f: (
        f"if the edit is intended, `recipe compile {f.get('path') or 'actions.json'} -o {f.get('path') or 'actions.json'}` verifies and fingerprints it again"
    ),
    "run.busy": lambda f: f"`recipe show {f.get('run')}` follows it; it picks up every decision already made",
    "approval.expired": lambda f: "`recipe resume RUN` asks again",
    "approval.stale": lambda f: (
        f"read the current card (`recipe show {f.get('run')} --audit`) and approve its fingerprint"
    ),
    "approval.decided": lambda f: (
        f"`recipe show {f.get('run')}` lists the run's approvals"
        + ("; `recipe resume RUN` asks again" if f.get("state") == "expired" else "")
    ),
    "servers.mismatch": lambda f: (
        "run it with --servers naming the server file the run was started with"
        + (f" ({', '.join(f['bound'])})" if f.get("bound") else "")
        + ", or start a new run against these servers"
        if f.get("configured", True)
        else "the server file says the same, but what it starts differs here: put back the files, directory and environment the run started with (named above), or start a new run"
    ),
    "recipe.changed": lambda f: (
        f"restore {f.get('path')} (the run executes the plan it started with), or `recipe reject {f.get('run')}` and start a new run"
    ),
    "identity.refused": lambda f: (
        f"act as yourself (drop --as), or put {f.get('claimed')}'s secret in ${TOKEN_ENV} (`recipe approver add NAME` makes one)"
    ),
}
