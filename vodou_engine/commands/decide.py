"""``recipe approve``, ``reject``, ``resume``, ``cancel`` and ``reconcile``: a person decides a run.

An approval shows the parked step's card and asks (``--yes`` without a terminal),
then drives the run on here (or, on a PostgreSQL store, leaves that to the
workers); the servers the run still needs are started first, while the rest of
the command loads (``_prespawn``). ``reconcile`` settles an effect left unknown.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from ..binding import decode_bindings, servers_for_run
from ..errors import UsageError
from ..plan import decode_plan
from ..runs.handoff import listening
from ..servers import servers_to_finish
from ..store import default_store_path, open_store
from ..tools.process import Prespawned
from ..views.report import report
from ..views.term import say
from .common import _actor, _answer_inline, _ask, _fill_in, _left_resumable, _run_async, _runs, _store_flag


def cmd_decide(args: Any) -> int:
    # A rejection calls nothing, so it starts nothing; nor does an approval the workers act on.
    with _prespawn(args) as prespawned:
        return _decide(args, prespawned)


def _decide(args: Any, prespawned: Any) -> int:
    runs = _runs(args)
    actor, proof = _actor(args, runs, args.run, args.decision)
    card = runs.pending(args.run, args.step)
    if not args.json:
        say(card.card)
    fingerprint = args.fingerprint or card.fingerprint  # exactly the card that was read
    decision = args.decision
    if decision == "approve" and not args.yes:
        if not (sys.stdin.isatty() and sys.stdout.isatty()):
            raise UsageError(
                "approving without a terminal needs --yes",
                hint=f"recipe approve {args.run} {card.step} --yes --fingerprint {card.fingerprint}",
            )
        answer = _ask("approve exactly this?")
        if answer == "later":
            say("nothing was decided; the run stays parked.", style="yellow")
            return 3
        decision = "approve" if answer == "yes" else "reject"
    if decision == "approve":
        with _left_resumable(args, args.run):
            rep = _run_async(
                lambda: runs.approve(
                    args.run,
                    card.step,
                    actor=actor,
                    fingerprint=fingerprint,
                    model=args.model,
                    prespawned=prespawned,
                    proof=proof,
                    hand_off=not getattr(args, "here", False),
                    items=getattr(args, "items", None),
                )
            )
        if not args.json:
            if card.step in rep.asked_again:
                again = (
                    "its server's schema was read again"
                    if rep.asked_again[card.step].get("why") == "defaults"
                    else "its check was read again"
                )
                say(
                    f"your approval of {card.step} ({fingerprint}) is recorded as {actor}; before the step ran, {again}.",
                    style="yellow",
                )
            else:
                say(f"approved {card.step} ({fingerprint}) as {actor}.", style="green")
            if rep.driven_in:
                say(f"it ran on the warm servers of {rep.driven_in}.")
    else:
        rep = _run_async(
            lambda: runs.reject(
                args.run,
                card.step,
                actor=actor,
                reason=getattr(args, "reason", None),
                fingerprint=fingerprint,
                proof=proof,
            )
        )
        if not args.json:
            say(
                f"rejected {card.step} as {actor}; run {args.run} is {rep.state} and nothing more runs.", style="yellow"
            )
    code = report(rep, json_out=args.json, store_flag=_store_flag(args), actor=actor)
    return _answer_inline(args, runs, rep, code, actor, proof)


def cmd_answer(args: Any) -> int:
    with _prespawn(args) as prespawned:
        runs = _runs(args)
        actor, proof = _actor(args, runs, args.run, "answer")
        card = runs.pending(args.run, args.step)
        if not args.json:
            say(card.card)
        action, content = args.action or "accept", None
        if args.content is not None:
            try:
                content = json.loads(args.content)
            except json.JSONDecodeError as exc:
                raise UsageError(
                    f"--fields: not JSON ({exc.msg} at column {exc.colno}); nothing was changed",
                    hint='one JSON object, e.g. --fields \'{"name": "Ada"}\'',
                ) from None
            if not isinstance(content, dict):
                raise UsageError("--fields: the answer is one JSON object of fields; nothing was changed")
        elif args.action is None:
            if card.asks is None or not (sys.stdin.isatty() and sys.stdout.isatty()):
                raise UsageError(
                    "answering without a terminal needs --fields, --decline or --cancel",
                    hint=f"recipe answer {args.run} {card.step} --fields '{{...}}' --fingerprint {card.fingerprint}",
                )
            filled = _fill_in(card.asks)
            if filled is None:
                say("nothing was answered; the run stays parked.", style="yellow")
                return 3
            action, content = filled
        fingerprint = args.fingerprint or card.fingerprint
        with _left_resumable(args, args.run):
            rep = _run_async(
                lambda: runs.answer(
                    args.run, card.step, actor=actor, action=action, content=content, fingerprint=fingerprint,
                    model=args.model, prespawned=prespawned, proof=proof,
                )
            )  # fmt: skip
        if not args.json:
            say(f"answered {card.step} ({action}) as {actor}.", style="green")
        code = report(rep, json_out=args.json, store_flag=_store_flag(args))
        return _answer_inline(args, runs, rep, code, actor, proof)


def _prespawn(args: Any) -> Any:
    """Start the servers a parked run still needs before trio and the MCP SDK are
    imported: they boot on the other core while this process imports. Only the
    servers the run is bound to are started (a configuration that resolves them
    differently starts nothing: the command proper refuses it), and nothing is
    called until the approval is recorded and the run taken; whatever no hub
    takes over is stopped on the way out."""
    prespawned = Prespawned()  # empty when there is nothing to start
    if getattr(args, "decision", "approve") not in ("approve", "answer") or _runs(args).workers:
        return prespawned
    if not getattr(args, "here", False) and listening(args.store or default_store_path()):
        return prespawned  # a live `recipe serve` on this store drives it on its warm servers
    try:
        store = open_store(args.store, create=False)
        try:
            run = store.get_run(args.run)
            if run.state not in ("parked", "running", "interrupted"):
                return prespawned
            nodes = store.get_nodes(args.run)
        finally:
            store.close()
        needed = servers_to_finish(decode_plan(run.plan_json), nodes)
        configs = servers_for_run(run.id, decode_bindings(run.servers_json), needed, args.servers).servers
    except Exception:  # noqa: BLE001 - anything unexpected starts nothing; the command reports it
        return prespawned
    for name in needed:
        if name in configs:
            prespawned.start(name, configs[name])
    return prespawned


def cmd_resume(args: Any) -> int:
    with _prespawn(args) as prespawned:
        runs = _runs(args)
        with _left_resumable(args, args.run):
            rep = _run_async(lambda: runs.resume(args.run, model=args.model, prespawned=prespawned))
        code = report(rep, json_out=args.json, store_flag=_store_flag(args))
        return _answer_inline(args, runs, rep, code, *_actor(args, runs, args.run, "resume"))


def cmd_cancel(args: Any) -> int:
    runs = _runs(args)
    actor, _ = _actor(args, runs, args.run, "cancel")
    rep = _run_async(lambda: runs.cancel(args.run, actor=actor, reason=args.reason))
    report(rep, json_out=args.json, store_flag=_store_flag(args))
    return 0


def cmd_reconcile(args: Any) -> int:
    runs = _runs(args)
    actor, _ = _actor(args, runs, args.run, "reconcile")
    eff = runs.reconcile(args.run, args.step, executed=bool(args.executed), actor=actor, reason=args.reason)
    resume = f"`recipe resume {args.run}{_store_flag(args)}`"
    if eff.state == "executed":
        say(f"effect {args.step} of run {args.run} settled as executed by {actor}: {resume} goes on from it.")
    else:
        say(
            f"effect {args.step} of run {args.run} settled as not executed by {actor}: the step is recorded failed, and {resume} ends the run failed at {args.step} (start a new run to try again)."
        )
    return 0
