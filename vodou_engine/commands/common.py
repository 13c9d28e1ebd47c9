"""What the commands share: the run API opened with a command's flags, who is acting, a run driven here.

Who is acting is the operating-system user, or an approver proven by their secret
(``--as``). A run driven in this process runs on trio (``_run_async``: the first
signal cancels it and leaves it resumable, a second one stops every server at
once), says how to go on when a signal stopped it (``_left_resumable``), and on a
terminal has its approvals answered here (``_answer_inline``). Also: input values
(``--set``), durations, and the prompt's answers.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import re
import signal
import sys
from collections.abc import Callable
from functools import partial
from typing import Any, overload

from ..errors import IdentityError, UsageError
from ..limits import MAX_DEPTH, TooDeep, check_json_depth
from ..osuser import env_claim, os_user
from ..runs import Runs
from ..views.report import interrupted, report
from ..views.term import ask, console, say
from .exits import TOKEN_ENV, Stopped


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


def _me(
    runs: Any,
    command: str,
    run_id: str | None = None,
    *,
    also: str | None = None,
    acts: bool = True,
    create: bool = False,
) -> str:
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
        say(
            f"warning: ${variable} names {name}, but this process runs as {me}: {command} acts as {me} (the claim is logged)",
            style="yellow",
            err=True,
        )
    return me


# --- the run API, inputs, a run driven here -----------------------------------------------
def _runs(args: Any) -> Any:
    workers = False if getattr(args, "here", False) else None  # --here: driven here, whatever the store
    return Runs(
        store=getattr(args, "store", None),
        servers=getattr(args, "servers", None),
        policy=getattr(args, "policy", None),
        workers=workers,
    )


def _store_flag(args: Any) -> str:
    return f" --store {args.store}" if getattr(args, "store", None) else ""


def _interactive(args: Any) -> bool:
    return (
        not getattr(args, "no_wait", False)
        and not getattr(args, "json", False)
        and sys.stdin.isatty()
        and sys.stdout.isatty()
    )


def _inputs(pairs: list[str]) -> dict[str, Any]:
    out = {}
    for pair in pairs:
        name, sep, raw = pair.partition("=")
        if not sep or not name:
            raise UsageError(
                f"--set {pair!r} is not NAME=VALUE",
                hint='e.g. --set channel=#daily or --set limit=5 or --set tags=["a","b"]',
            )
        try:
            check_json_depth(raw)
        except TooDeep:
            raise UsageError(
                f"--set {name}: the value nests arrays or objects more than {MAX_DEPTH} levels deep", hint="flatten it"
            ) from None
        try:
            out[name] = json.loads(raw)
        except ValueError:
            out[name] = raw
    return out


@overload
def _seconds(text: str) -> float: ...
@overload
def _seconds(text: None) -> None: ...
def _seconds(text: str | None) -> float | None:
    if text is None:
        return None
    m = re.fullmatch(r"(\d+)\s*([smhd]?)", text.strip())
    if not m:
        raise UsageError(f"{text!r} is not a duration", hint="e.g. 0, 90s, 30m, 1h or 2d")
    return int(m[1]) * {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}[m[2]]


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


def _fill_in(asks: dict[str, Any]) -> tuple[str, dict[str, Any] | None] | None:
    """A server's question answered at the terminal: ('accept', fields), ('decline' | 'cancel', None),
    or None (Enter or Ctrl-D at the first prompt: decide later). Each field is asked for by its
    type; an empty line leaves an optional field out. The run API checks the whole against the
    schema the server asked with."""
    try:
        first = ask("answer it? [a]nswer / [d]ecline / [c]ancel / Enter: decide later: ").strip().lower()
        if first in ("d", "decline"):
            return "decline", None
        if first in ("c", "cancel"):
            return "cancel", None
        if first not in ("a", "answer"):
            return None
        schema = asks.get("schema") or {}
        required = set(schema.get("required") or [])
        content: dict[str, Any] = {}
        properties = schema.get("properties") or {}
        for name in sorted(properties, key=lambda n: n not in required):  # the required ones first
            prop = properties[name] if isinstance(properties[name], dict) else {}
            while True:
                text = ask(f"{name} ({prop.get('type', 'text')}{', required' if name in required else ''}): ").strip()
                if not text and name not in required:
                    break
                if not text:
                    say(f"{name} is required", style="red")
                    continue
                try:
                    content[name] = _typed(text, prop)
                    break
                except ValueError as exc:
                    say(str(exc), style="red")
        return "accept", content
    except EOFError:
        console().print()
        return None


def _typed(text: str, prop: dict[str, Any]) -> Any:
    kind = prop.get("type")
    if kind == "boolean":
        if text.lower() in ("y", "yes", "true"):
            return True
        if text.lower() in ("n", "no", "false"):
            return False
        raise ValueError("answer y or n")
    if kind in ("integer", "number"):
        try:
            return int(text) if kind == "integer" else float(text)
        except ValueError:
            raise ValueError(f"a{'n integer' if kind == 'integer' else ' number'}, please") from None
    if kind == "array":
        return [part.strip() for part in text.split(",") if part.strip()]
    return text


def _answer_inline(args: Any, runs: Any, rep: Any, code: int, actor: str, proof: str) -> int:
    """On a terminal: ask each waiting question here and drive on. 'n' rejects, as at
    `recipe approve`'s prompt; Enter or Ctrl-D leaves the run parked (exit 3). A server's
    question is answered field by field (:func:`_fill_in`)."""
    while rep.state == "parked" and rep.pending and not rep.queued and _interactive(args):
        card = rep.pending[0]  # its card was just printed
        if card.asks is not None:
            filled = _fill_in(card.asks)
            if filled is None:
                say(f"nothing was answered; run {rep.run} stays parked.", style="yellow")
                return code
            action, content = filled
            rep = _run_async(
                functools.partial(
                    runs.answer, rep.run, card.step, actor=actor, action=action, content=content,
                    fingerprint=card.fingerprint, proof=proof,
                )
            )  # fmt: skip
            code = report(rep, json_out=False, store_flag=_store_flag(args))
            continue
        answer = _ask(f"run {card.step}?")
        if answer == "later":
            say(f"nothing was decided; run {rep.run} stays parked.", style="yellow")
            return code
        if answer == "yes":
            rep = _run_async(
                partial(runs.approve, rep.run, card.step, actor=actor, fingerprint=card.fingerprint, proof=proof)
            )
        else:
            rep = _run_async(
                partial(runs.reject, rep.run, card.step, actor=actor, fingerprint=card.fingerprint, proof=proof)
            )
        code = report(rep, json_out=False, store_flag=_store_flag(args), actor=actor)
    return code
