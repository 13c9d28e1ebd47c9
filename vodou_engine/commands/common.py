"""What every command shares, and what ``cli.py`` needs before it knows the command.

``cli.py`` imports this module at start-up (``recipe --help`` loads it), so it
imports nothing heavy: the words for errors and their exit codes (docs/exit-codes.md),
the signals that stop a command before trio runs, who is acting (the
operating-system user, or an approver proven by their secret), input values, ages,
the prompt's answers, and writing output.
"""

from __future__ import annotations

import json
import os
import re
import signal
import sys
from typing import Any, Callable

from ..errors import IdentityError, UsageError, VodouError
from ..limits import MAX_DEPTH, TooDeep, check_json_depth
from ..osuser import env_claim, os_user
from ..views.term import ask, console, say

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
    say("interrupted" if signum == signal.SIGINT else f"stopped by {signal.Signals(signum).name}", style="red", err=True)
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


_CLI_HINTS: dict[str, Callable[[dict], str]] = {
    "run.unknown": lambda f: "`recipe runs` lists the runs in this store",
    "plan.edited": lambda f: f"if the edit is intended, `recipe compile {f.get('path') or 'actions.json'} -o {f.get('path') or 'actions.json'}` verifies and fingerprints it again",
    "run.busy": lambda f: f"`recipe show {f.get('run')}` follows it; it picks up every decision already made",
    "approval.expired": lambda f: "`recipe resume RUN` asks again",
    "approval.stale": lambda f: f"read the current card (`recipe show {f.get('run')} --audit`) and approve its fingerprint",
    "approval.decided": lambda f: f"`recipe show {f.get('run')}` lists the run's approvals" + ("; `recipe resume RUN` asks again" if f.get("state") == "expired" else ""),
    "servers.mismatch": lambda f: "run it with --servers naming the server file the run was started with"
    + (f" ({', '.join(f['bound'])})" if f.get("bound") else "")
    + ", or start a new run against these servers"
    if f.get("configured", True)
    else "the server file says the same, but what it starts differs here: put back the files, directory and environment the run started with (named above), or start a new run",
    "recipe.changed": lambda f: f"restore {f.get('path')} (the run executes the plan it started with), or `recipe reject {f.get('run')}` and start a new run",
    "identity.refused": lambda f: f"act as yourself (drop --as), or put {f.get('claimed')}'s secret in ${TOKEN_ENV} (`recipe approver add NAME` makes one)",
}


# --- who is acting ------------------------------------------------------------------------
def _actor(args: Any, runs: Any, run_id: str | None, command: str) -> tuple[str, str]:
    """(name, proof): the operating-system user, or a name proven by its approver secret."""
    me = os_user()
    claimed = getattr(args, "actor", None)
    proven = bool(claimed) and claimed != me and runs.proves(claimed, os.environ.get(TOKEN_ENV))
    _me(runs, command, run_id, also=claimed if proven else None, create=command == "run")
    if not claimed or claimed == me:
        return me, "os-user"
    if proven:
        return claimed, "approver-secret"
    runs.refuse_identity(claimed, by=me, command=command, run_id=run_id)
    raise IdentityError(
        f"--as {claimed}: {me} may not act as {claimed} without {claimed}'s approver secret; nothing was done (the attempt is logged)",
        claimed=claimed,
        user=me,
    )


def _me(runs: Any, command: str, run_id: str | None = None, *, also: str | None = None, acts: bool = True, create: bool = False) -> str:
    """The operating-system user (the real uid's name, osuser.py). When the command ``acts``
    (records something under that name), an environment that names someone else ($LOGNAME,
    $USER) is ignored, logged as a refused claim and said on stderr. ``also``: a name proven
    otherwise (--as with its secret), which the environment may name; ``create``: the command
    makes the store anyway, so the claim is logged in a new one too."""
    me = os_user()
    claim = env_claim(me) if acts else None
    if claim is not None and claim[1] != also:
        variable, name = claim
        runs.refuse_identity(name, by=me, command=command, run_id=run_id, via=f"${variable}", create=create)
        say(f"warning: ${variable} names {name}, but this process runs as {me}: {command} acts as {me} (the claim is logged)", style="yellow", err=True)
    return me


def _store_flag(args: Any) -> str:
    return f" --store {args.store}" if getattr(args, "store", None) else ""


def _write(data: bytes, out: str | None) -> None:
    if out:
        tmp = out + ".tmp"
        try:
            with open(tmp, "wb") as f:
                f.write(data)
            os.replace(tmp, out)
        except OSError as exc:
            raise UsageError(f"cannot write {out}: {exc.strerror or exc}", hint="check that the directory exists and is writable") from None
    else:
        sys.stdout.buffer.write(data)


def _inputs(pairs: list[str]) -> dict[str, Any]:
    out = {}
    for pair in pairs:
        name, sep, raw = pair.partition("=")
        if not sep or not name:
            raise UsageError(f"--set {pair!r} is not NAME=VALUE", hint='e.g. --set channel=#daily or --set limit=5 or --set tags=["a","b"]')
        try:
            check_json_depth(raw)
        except TooDeep:
            raise UsageError(f"--set {name}: the value nests arrays or objects more than {MAX_DEPTH} levels deep", hint="flatten it") from None
        try:
            out[name] = json.loads(raw)
        except ValueError:
            out[name] = raw
    return out


def _seconds(text: str | None) -> float | None:
    if text is None:
        return None
    m = re.fullmatch(r"(\d+)\s*([smhd]?)", text.strip())
    if not m:
        raise UsageError(f"{text!r} is not a duration", hint="e.g. 0, 90s, 30m, 1h or 2d")
    return int(m[1]) * {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}[m[2]]


def _ask(question: str) -> str:
    """'yes', 'no' or 'later' (Enter, or Ctrl-D: no answer). The same answers at every prompt."""
    while True:
        try:
            answer = ask(f"{question} [y]es / [n]o, reject / Enter: decide later: ").strip().lower()
        except EOFError:
            console().print()
            return "later"
        if answer in ("y", "yes"):
            return "yes"
        if answer in ("n", "no"):
            return "no"
        if answer in ("", "later"):
            return "later"
