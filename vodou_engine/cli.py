"""The ``recipe`` command: parsing and dispatch over the run API (``runs.py``).

It holds no rule of a run's life: what approving, rejecting or resuming
means is decided by the run API, the same for every surface. What is here:
the arguments, who the person is (the operating-system user, or a proven
approver), prompts, signals, and output (``views/``). Heavy imports (mcp,
trio, networkx, rich) happen inside the commands that need them, so
``recipe --help`` and ``recipe plan --offline`` start fast. Exit codes are
in docs/exit-codes.md.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import sys
from typing import Any, Callable

PROMPTS = """On a terminal, run, approve and resume show each card and ask. The answers are
the same at every prompt: y approves, n rejects (the run ends declined, exit 4),
Enter or Ctrl-D decides later (the run stays parked, exit 3)."""

EPILOG = PROMPTS + """

exit codes: 0 succeeded, 1 failed, 2 invalid input or usage, 3 parked waiting
for a person, 4 declined or rejected, 5 refused (unknown run, already decided,
not an approver, expired, stale, servers or recipe changed, run busy),
6 store unreadable or missing, 7 no queue for the workers (a SQLite store),
129/130/143 stopped by SIGHUP/Ctrl-C/SIGTERM (the run is left resumable)."""

TOKEN_ENV = "VODOU_APPROVER_TOKEN"


class Stopped(BaseException):
    """A signal asked this process to stop; the run it drove was left resumable."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


def _parser() -> argparse.ArgumentParser:
    from . import __version__

    p = argparse.ArgumentParser(
        prog="recipe",
        description="Compile, plan, run and approve tool recipes. Nothing that changes the world runs without a person's yes.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--version", action="version", version=f"recipe (vodou_engine) {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    def policy(sp):
        sp.add_argument("--policy", metavar="FILE", help="tool policy file (default: $VODOU_POLICY, ./vodou-policy.toml, ~/.config/vodou/policy.toml)")

    def servers(sp):
        sp.add_argument("--servers", metavar="FILE", help="MCP servers JSON (default: $VODOU_SERVERS, ./mcp.json, ~/.config/vodou/mcp.json, then the demo servers)")

    def store(sp):
        sp.add_argument("--store", metavar="PATH", help="run store (default: $VODOU_STORE or ~/.local/share/vodou/runs.db)")

    def actor(sp, what: str):
        sp.add_argument("--as", dest="actor", metavar="NAME", help=f"{what} under this approver name instead of your user name; needs the approver's secret in ${TOKEN_ENV}")

    def as_json(sp):
        sp.add_argument("--json", action="store_true", help="print one JSON object instead of text")

    def no_wait(sp):
        sp.add_argument("--no-wait", action="store_true", help="park at approvals even on a terminal (do not ask here)")

    c = sub.add_parser("compile", help="compile a recipe to actions.json")
    c.add_argument("file", help="a .recipe file or an actions.json")
    c.add_argument("-o", "--output", metavar="OUT", help="write here instead of stdout")
    policy(c)
    c.set_defaults(func=cmd_compile)

    pl = sub.add_parser("plan", help="print the plan card (starts servers to list tools; never calls one)")
    pl.add_argument("file", help="a .recipe file or an actions.json")
    pl.add_argument("--offline", action="store_true", help="do not start servers")
    fmt = pl.add_mutually_exclusive_group()
    fmt.add_argument("--json", action="store_true", help="print the plan and a graph summary as JSON")
    fmt.add_argument("--format", choices=["card", "mermaid"], default="card", help="the card (default), or the graph as a Mermaid flowchart")
    policy(pl)
    servers(pl)
    pl.set_defaults(func=cmd_plan)

    r = sub.add_parser("run", help="run a recipe; parks at each approval", description="Run a recipe; it parks at each approval.\n\n" + PROMPTS, formatter_class=argparse.RawDescriptionHelpFormatter)
    r.add_argument("file", help="a .recipe file or an actions.json")
    r.add_argument("--set", action="append", default=[], metavar="NAME=VALUE", help="an input value (JSON, or plain text)")
    no_wait(r)
    as_json(r)
    r.add_argument("--model", help="model for write steps (llm); default: the recipe's, then $VODOU_MODEL, else the offline writer")
    r.add_argument("--queue", action="store_true", help="queue the run for the workers (`recipe worker`) instead of driving it here; prints its id (a PostgreSQL store only)")
    actor(r, "start the run")
    policy(r)
    servers(r)
    store(r)
    r.set_defaults(func=cmd_run)

    a = sub.add_parser("approve", help="approve a parked step and drive the run on", description="Show a parked step's card, approve it, and drive the run on.\n\n" + PROMPTS, formatter_class=argparse.RawDescriptionHelpFormatter)
    a.add_argument("run", help="run id")
    a.add_argument("step", nargs="?", help="step name (needed when several approvals wait)")
    a.add_argument("--yes", action="store_true", help="approve without asking (needed without a terminal); without it, on a terminal: y approves, n rejects, Enter or Ctrl-D decides later")
    a.add_argument("--fingerprint", metavar="FP", help="approve only if the question still has this fingerprint (the one on the card you read)")
    a.add_argument("--model", help="model for write steps after this one (default: the one the run started with)")
    a.add_argument("--here", action="store_true", help="drive the run on in this process even on a PostgreSQL store (there, by default, the workers do)")
    actor(a, "decide")
    as_json(a)
    no_wait(a)
    policy(a)
    servers(a)
    store(a)
    a.set_defaults(func=cmd_decide, decision="approve")

    rj = sub.add_parser("reject", help="reject a parked step; the run ends declined")
    rj.add_argument("run", help="run id")
    rj.add_argument("step", nargs="?", help="step name (needed when several approvals wait)")
    rj.add_argument("--reason", help="why (kept in the audit log and shown by `recipe show`)")
    rj.add_argument("--fingerprint", metavar="FP", help="reject only if the question still has this fingerprint")
    actor(rj, "decide")
    as_json(rj)
    store(rj)
    rj.set_defaults(func=cmd_decide, decision="reject")

    rs = sub.add_parser("resume", help="continue a parked or interrupted run (asks again for expired or stale approvals)", description="Continue a parked or interrupted run; expired or stale approvals are asked again.\n\n" + PROMPTS, formatter_class=argparse.RawDescriptionHelpFormatter)
    rs.add_argument("run", help="run id")
    rs.add_argument("--model", help="model for write steps (default: the one the run started with)")
    as_json(rs)
    no_wait(rs)
    policy(rs)
    servers(rs)
    store(rs)
    rs.set_defaults(func=cmd_resume)

    cn = sub.add_parser("cancel", help="end a run cancelled; its pending approvals can no longer be given")
    cn.add_argument("run", help="run id")
    cn.add_argument("--reason", help="why (kept in the audit log)")
    actor(cn, "cancel")
    as_json(cn)
    store(cn)
    cn.set_defaults(func=cmd_cancel)

    ls = sub.add_parser("runs", help="list runs, newest first")
    ls.add_argument("--state", choices=["running", "parked", "interrupted", "succeeded", "failed", "declined", "cancelled"], help="only runs in this state")
    ls.add_argument("--recipe", metavar="NAME", help="only runs of this recipe (its name)")
    ls.add_argument("--since", metavar="WHEN", help="only runs started since: an ISO date/time, or an age such as 2h or 7d")
    ls.add_argument("--limit", type=int, default=50, metavar="N", help="at most N runs (default 50)")
    as_json(ls)
    store(ls)
    ls.set_defaults(func=cmd_runs)

    sh = sub.add_parser("show", help="show a run: steps, results, timings, approvals, effects")
    sh.add_argument("run", help="run id")
    as_json(sh)
    sh.add_argument("--audit", action="store_true", help="the audit record of each effect: card shown, payload, fingerprint, who decided and when, the result")
    sh.add_argument("--full", action="store_true", help="every result in full (read results are summarised otherwise)")
    store(sh)
    sh.set_defaults(func=cmd_show)

    rc = sub.add_parser("reconcile", help="settle an effect left unknown (or reported failed) by saying whether it happened")
    rc.add_argument("run", help="run id")
    rc.add_argument("step", help="the effect's step")
    g = rc.add_mutually_exclusive_group(required=True)
    g.add_argument("--executed", action="store_true", help="it did happen: `recipe resume` then goes on from it")
    g.add_argument("--not-executed", action="store_true", help="it did not happen: the step is recorded failed, and `recipe resume` ends the run failed at that step (start a new run to try again)")
    rc.add_argument("--reason", help="how you know (kept in the audit log)")
    actor(rc, "settle it")
    store(rc)
    rc.set_defaults(func=cmd_reconcile)

    ap = sub.add_parser("approver", help="people who may act under a name other than their user name")
    apsub = ap.add_subparsers(dest="approver_command", metavar="ACTION")
    apsub.required = True
    add = apsub.add_parser("add", help="add NAME (or give NAME a new secret); prints the secret once")
    add.add_argument("name", help="the approver's name, as recipes list it under `approvers:`")
    store(add)
    add.set_defaults(func=cmd_approver)
    lst = apsub.add_parser("list", help="list approver names")
    store(lst)
    lst.set_defaults(func=cmd_approver)
    ln = apsub.add_parser("link", help="a new one-time sign-in link to the inbox for NAME (for another device)")
    ln.add_argument("name", help="the approver's name")
    store(ln)
    ln.set_defaults(func=cmd_approver)
    rm = apsub.add_parser("remove", help="remove NAME; their secret stops working")
    rm.add_argument("name", help="the approver's name")
    store(rm)
    rm.set_defaults(func=cmd_approver)

    ag = sub.add_parser("agent", help="agents that may use the MCP server of `recipe serve` (/mcp) with a bearer token; they propose, never decide")
    agsub = ag.add_subparsers(dest="agent_command", metavar="ACTION")
    agsub.required = True
    aga = agsub.add_parser("add", help="add agent NAME (or give it a new token); prints its bearer token once")
    aga.add_argument("name", help="the agent's name: its runs are started by agent:NAME")
    aga.add_argument("--see", choices=["own", "all"], default="own", help="whose runs it may read: `own` (the runs it started; default) or `all`")
    aga.add_argument("--approver", action="append", metavar="NAME", help="who decides the runs of its recipes that name no approvers (repeatable; default: $VODOU_AGENT_APPROVERS of `recipe serve`, else the user running it)")
    store(aga)
    aga.set_defaults(func=cmd_agent)
    agl = agsub.add_parser("list", help="list agents (never their tokens)")
    store(agl)
    agl.set_defaults(func=cmd_agent)
    agr = agsub.add_parser("remove", help="remove agent NAME; its token stops working at once")
    agr.add_argument("name", help="the agent's name")
    store(agr)
    agr.set_defaults(func=cmd_agent)

    po = sub.add_parser("policy", help="check the tool policy file against the configured servers")
    posub = po.add_subparsers(dest="policy_command", metavar="ACTION")
    posub.required = True
    pc = posub.add_parser("check", help="fail when an entry names a server or tool that does not exist (it would apply to nothing)")
    policy(pc)
    servers(pc)
    pc.set_defaults(func=cmd_policy_check)

    sv = sub.add_parser("save", help="save a recipe in the store, as a new version (older versions are kept)")
    sv.add_argument("file", help="a .recipe file")
    sv.add_argument("--name", metavar="NAME", help="the name to save it under (default: the recipe's title, else its file name)")
    policy(sv)
    store(sv)
    sv.set_defaults(func=cmd_save)

    sc = sub.add_parser("schedule", help="run saved recipes on cron schedules (`recipe serve` fires them)")
    scsub = sc.add_subparsers(dest="schedule_command", metavar="ACTION")
    scsub.required = True
    sa = scsub.add_parser("add", help="run the saved recipe NAME on a cron schedule")
    sa.add_argument("name", help="the saved recipe's name; also the schedule's, unless --as-name")
    sa.add_argument("--cron", required=True, metavar="EXPR", help='five-field cron expression, e.g. "0 8 * * 1-5" for 8:00 on weekdays')
    sa.add_argument("--tz", default="UTC", metavar="ZONE", help="IANA time zone the expression is read in (default UTC), e.g. Europe/Lisbon")
    sa.add_argument("--set", action="append", default=[], metavar="NAME=VALUE", help="an input value for every run (JSON, or plain text)")
    sa.add_argument("--catch-up", metavar="DURATION", help="a due time missed by less than this still runs (once) when serving resumes (default 1h; 0 never)")
    sa.add_argument("--as-name", dest="schedule_name", metavar="SCHEDULE", help="the schedule's own name (default: the recipe's)")
    store(sa)
    sa.set_defaults(func=cmd_schedule)
    for action, helptext in (("list", "list schedules, when each is next due, and what its last due times did"), ("pause", "pause a schedule"), ("resume", "resume a paused schedule (counted from now: what was missed while paused is not run)"), ("remove", "remove a schedule (its record of past due times is kept)")):
        sp = scsub.add_parser(action, help=helptext)
        if action != "list":
            sp.add_argument("name", help="the schedule's name")
        else:
            as_json(sp)
        store(sp)
        sp.set_defaults(func=cmd_schedule)

    pr = sub.add_parser("prune", help="remove finished runs older than an age (never parked ones, nor effects left unknown); the store shrinks")
    pr.add_argument("--older-than", required=True, metavar="AGE", help="e.g. 30d, 12h, 90m: runs that ended longer ago than this")
    pr.add_argument("--state", action="append", choices=["succeeded", "failed", "declined", "cancelled"], help="only runs that ended in this state (repeatable; default: every final state)")
    as_json(pr)
    store(pr)
    pr.set_defaults(func=cmd_prune)

    from .agents import author, mcp_server
    from .web import serve as web_serve
    from .workers import command as worker_command

    se = sub.add_parser("serve", help="serve the approval inbox, run saved recipes on their schedules, keep servers warm")
    web_serve.add_arguments(se)
    se.set_defaults(func=web_serve.run)

    wk = sub.add_parser(
        "worker",
        help="drive runs from the queue in a PostgreSQL store; start as many as you like, on as many machines",
        description="Drive runs from the queue in a PostgreSQL store, keeping MCP servers warm between jobs. Start as many as you like, on as many machines, "
        "each with the same server file and policy. SIGTERM stops taking jobs; running steps get --grace seconds, then their runs are left interrupted and queued again.",
    )
    worker_command.add_arguments(wk)
    wk.set_defaults(func=worker_command.run)

    mc = sub.add_parser("mcp", help="serve the engine to an AI agent over MCP (stdio): it may propose and start recipes, never decide")
    mcp_server.add_arguments(mc)
    mc.set_defaults(func=mcp_server.run)
    au = sub.add_parser("author", help="draft a recipe from one sentence with a language model (nothing runs or is saved unless asked)")
    author.add_arguments(au)
    au.set_defaults(func=author.run)
    return p


# --- the process ----------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    whole_process = argv is None
    if whole_process:  # the `recipe` script, `python -m vodou_engine`
        from .gcpause import own_process

        own_process()
        _stop_on_signals()
    from .views.term import guard_stdout

    guard_stdout()
    args = _parser().parse_args(argv)
    from .errors import VodouError

    try:
        code = args.func(args)
    except VodouError as exc:
        _error(exc)
        code = exc.exit_code
    except BaseExceptionGroup as group:
        from .runs import plain_error

        leaf = plain_error(group)
        if not isinstance(leaf, (VodouError, Stopped, KeyboardInterrupt)):
            raise
        code = _ended(leaf)
    except (Stopped, KeyboardInterrupt) as exc:
        code = _ended(exc)
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    if whole_process:
        # Everything the command owed is done: output flushed, the store's transactions
        # committed, every server reaped. Tearing the interpreter down (modules, the MCP
        # SDK's object graph) would only add ~40 ms before the exit status is known.
        os._exit(code or 0)
    return code or 0


def _ended(exc: BaseException) -> int:
    from .errors import VodouError

    if isinstance(exc, VodouError):
        _error(exc)
        return exc.exit_code
    signum = exc.signum if isinstance(exc, Stopped) else signal.SIGINT
    from .views.term import say

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


def _run_async(fn: Callable[[], Any]) -> Any:
    """Run the API call ``fn`` on trio. The first SIGINT, SIGTERM or SIGHUP cancels it
    (the run is left interrupted, its servers stopped); a second one stops at once."""
    import trio

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
    from .tools.process import stop_all_now

    stop_all_now()
    os._exit(128 + signum)


# --- errors: the library's facts, in the CLI's words ---------------------------------------
def _error(exc: Any) -> None:
    from .views.term import say

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
    from .errors import IdentityError
    from .osuser import os_user

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
    from .osuser import env_claim, os_user

    me = os_user()
    claim = env_claim(me) if acts else None
    if claim is not None and claim[1] != also:
        variable, name = claim
        runs.refuse_identity(name, by=me, command=command, run_id=run_id, via=f"${variable}", create=create)
        from .views.term import say

        say(f"warning: ${variable} names {name}, but this process runs as {me}: {command} acts as {me} (the claim is logged)", style="yellow", err=True)
    return me


# --- commands -------------------------------------------------------------------------------
def _runs(args: Any) -> Any:
    from .runs import Runs

    workers = False if getattr(args, "here", False) else None  # --here: driven here, whatever the store
    return Runs(store=getattr(args, "store", None), servers=getattr(args, "servers", None), policy=getattr(args, "policy", None), workers=workers)


def _store_flag(args: Any) -> str:
    return f" --store {args.store}" if getattr(args, "store", None) else ""


def _interactive(args: Any) -> bool:
    return not getattr(args, "no_wait", False) and not getattr(args, "json", False) and sys.stdin.isatty() and sys.stdout.isatty()


def _write(data: bytes, out: str | None) -> None:
    if out:
        tmp = out + ".tmp"
        try:
            with open(tmp, "wb") as f:
                f.write(data)
            os.replace(tmp, out)
        except OSError as exc:
            from .errors import UsageError

            raise UsageError(f"cannot write {out}: {exc.strerror or exc}", hint="check that the directory exists and is writable") from None
    else:
        sys.stdout.buffer.write(data)


def cmd_compile(args: Any) -> int:
    from .compiler import load_source
    from .plan import encode_plan
    from .policy import load_policy

    plan, text = load_source(args.file, policy=load_policy(args.policy), refresh=True, memo=True)
    _warn_hidden(text, args.file)
    _write(encode_plan(plan), args.output)
    return 0


def _warn_hidden(text: str | None, path: str) -> None:
    """Warn about characters written into the recipe that nobody reading it sees (cards mark them)."""
    from .text_safety import source_warnings
    from .views.term import say

    for w in source_warnings(text or "", path):
        say(f"warning: {w}", style="yellow", err=True)


def cmd_plan(args: Any) -> int:
    from .compiler import load_source
    from .views.term import console, say

    runs = _runs(args)
    if args.offline:
        plan, text = load_source(args.file, policy=runs.policy(), memo=True)
        from .runs import Inspection
        from .text_safety import source_warnings

        seen = Inspection(plan=plan, path=args.file, note="offline: servers not started, tool names not checked", warnings=source_warnings(text or "", args.file))
    else:
        seen = _run_async(lambda: runs.inspect(args.file))
    plan = seen.plan
    if args.json:
        import msgspec

        from .graph.summary import summary

        doc: dict[str, Any] = {"plan": plan, "graph": summary(plan)}
        if seen.status:
            doc["tools"] = {k: {"exists": v.exists, "note": v.note} for k, v in seen.status.items()}
        if seen.servers:
            doc["servers"] = {"source": seen.servers_source, "commands": seen.servers}
        if seen.warnings:
            doc["warnings"] = seen.warnings
        from .views.term import json_safe

        sys.stdout.buffer.write(json_safe(msgspec.json.format(msgspec.json.encode(doc, order="deterministic"), indent=2).decode()).encode() + b"\n")
    elif args.format == "mermaid":
        from .cards import mermaid

        sys.stdout.write(mermaid(plan))
    else:
        from .cards import plan_card

        console().print(plan_card(plan, source=args.file, status=seen.status, servers_note=seen.note, writer=_writer_label(plan), servers=seen.servers))
    for w in seen.warnings:
        say(f"warning: {w}", style="yellow", err=True)
    bad = [k for k, v in seen.status.items() if not v.exists]
    if bad:
        say(f"{len(bad)} step(s) name a tool that does not exist: " + ", ".join(bad), style="red", err=True)
        return 2
    return 0


def _writer_label(plan: Any, model: str | None = None) -> str:
    model = model or plan.options.model or os.environ.get("VODOU_MODEL")
    return f"model {model}" if model else "offline writer, no model configured"


def _inputs(pairs: list[str]) -> dict[str, Any]:
    from .errors import UsageError
    from .limits import MAX_DEPTH, TooDeep, check_json_depth

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


def cmd_run(args: Any) -> int:
    from .views.report import Progress, report

    runs = _runs(args)
    if args.queue:
        return _queue_run(args, runs)
    inputs = _inputs(args.set)
    plan, text, _ = runs.load(args.file)
    _warn_hidden(text, args.file)
    actor, _ = _actor(args, runs, None, "run")
    from .runs import new_run_id

    run_id = new_run_id()
    progress = Progress([n.id for n in plan.nodes], enabled=sys.stderr.isatty() and not args.json)
    with _left_resumable(args, run_id), progress:
        rep = _run_async(lambda: runs.start(args.file, inputs=inputs, actor=actor, model=args.model, on_change=progress.change, run_id=run_id))
    code = report(rep, json_out=args.json, store_flag=_store_flag(args))
    return _answer_inline(args, runs, rep, code, actor, "os-user")


def _queue_run(args: Any, runs: Any) -> int:
    """`recipe run --queue FILE`: compiled here, started by a worker."""
    from .views.report import queued_run

    runs.require_queue()  # a SQLite store: exit 7 before anything is compiled or proven
    inputs = _inputs(args.set)
    actor, _ = _actor(args, runs, None, "run")
    run_id = runs.queue(args.file, inputs=inputs, actor=actor, model=args.model)
    queued_run(run_id, json_out=args.json, store_flag=_store_flag(args))
    return 0


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
            from .views.report import interrupted

            interrupted(run_id, _store_flag(args), err=True)
        raise


def _ask(question: str) -> str:
    """'yes', 'no' or 'later' (Enter, or Ctrl-D: no answer). The same answers at every prompt."""
    from .views.term import ask, console

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


def _answer_inline(args: Any, runs: Any, rep: Any, code: int, actor: str, proof: str) -> int:
    """On a terminal: ask each waiting question here and drive on. 'n' rejects, as at
    `recipe approve`'s prompt; Enter or Ctrl-D leaves the run parked (exit 3)."""
    from .views.report import report
    from .views.term import say

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


def cmd_decide(args: Any) -> int:
    # A rejection calls nothing, so it starts nothing; nor does an approval the workers act on.
    with _prespawn(args) as prespawned:
        return _decide(args, prespawned)


def _decide(args: Any, prespawned: Any) -> int:
    from .errors import UsageError
    from .views.report import report
    from .views.term import say

    runs = _runs(args)
    actor, proof = _actor(args, runs, args.run, args.decision)
    card = runs.pending(args.run, args.step)
    if not args.json:
        say(card.card)
    fingerprint = args.fingerprint or card.fingerprint  # exactly the card that was read
    decision = args.decision
    if decision == "approve" and not args.yes:
        if not (sys.stdin.isatty() and sys.stdout.isatty()):
            raise UsageError("approving without a terminal needs --yes", hint=f"recipe approve {args.run} {card.step} --yes --fingerprint {card.fingerprint}")
        answer = _ask("approve exactly this?")
        if answer == "later":
            say("nothing was decided; the run stays parked.", style="yellow")
            return 3
        decision = "approve" if answer == "yes" else "reject"
    if decision == "approve":
        with _left_resumable(args, args.run):
            rep = _run_async(lambda: runs.approve(args.run, card.step, actor=actor, fingerprint=fingerprint, model=args.model, prespawned=prespawned, proof=proof))
        if not args.json:
            if card.step in rep.asked_again:
                say(f"your approval of {card.step} ({fingerprint}) is recorded as {actor}; before the step ran, its check was read again.", style="yellow")
            else:
                say(f"approved {card.step} ({fingerprint}) as {actor}.", style="green")
    else:
        rep = _run_async(lambda: runs.reject(args.run, card.step, actor=actor, reason=getattr(args, "reason", None), fingerprint=fingerprint, proof=proof))
        if not args.json:
            say(f"rejected {card.step} as {actor}; run {args.run} is {rep.state} and nothing more runs.", style="yellow")
    code = report(rep, json_out=args.json, store_flag=_store_flag(args))
    return _answer_inline(args, runs, rep, code, actor, proof)


def _prespawn(args: Any) -> Any:
    """Start the servers a parked run still needs before trio and the MCP SDK are
    imported: they boot on the other core while this process imports. Only the
    servers the run is bound to are started (a configuration that resolves them
    differently starts nothing: the command proper refuses it), and nothing is
    called until the approval is recorded and the run taken; whatever no hub
    takes over is stopped on the way out."""
    from .tools.process import Prespawned

    prespawned = Prespawned()  # empty when there is nothing to start
    if getattr(args, "decision", "approve") != "approve" or _runs(args).workers:
        return prespawned
    from .binding import decode_bindings, servers_for_run
    from .plan import decode_plan
    from .servers import servers_to_finish
    from .store import open_store

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
        from .views.report import report

        runs = _runs(args)
        with _left_resumable(args, args.run):
            rep = _run_async(lambda: runs.resume(args.run, model=args.model, prespawned=prespawned))
        code = report(rep, json_out=args.json, store_flag=_store_flag(args))
        return _answer_inline(args, runs, rep, code, *_actor(args, runs, args.run, "resume"))


def cmd_cancel(args: Any) -> int:
    from .views.report import report

    runs = _runs(args)
    actor, _ = _actor(args, runs, args.run, "cancel")
    rep = _run_async(lambda: runs.cancel(args.run, actor=actor, reason=args.reason))
    report(rep, json_out=args.json, store_flag=_store_flag(args))
    return 0


def _since(text: str | None) -> float | None:
    if text is None:
        return None
    import re
    import time
    from datetime import datetime

    from .errors import UsageError

    if re.fullmatch(r"\d+\s*[smhd]", text.strip()):
        return time.time() - _seconds(text)
    try:
        dt = datetime.fromisoformat(text)
    except ValueError:
        raise UsageError(f"--since {text!r} is neither an ISO date/time nor an age", hint="e.g. --since 2026-11-30, --since 2026-11-30T08:00, --since 2h, --since 7d") from None
    return (dt if dt.tzinfo else dt.astimezone()).timestamp()


def cmd_runs(args: Any) -> int:
    from .errors import UsageError
    from .views.report import runs_table

    if args.limit < 1:
        raise UsageError("--limit must be at least 1")
    from .errors import StoreMissingError

    runs = _runs(args)
    since = _since(args.since)
    try:
        listed = runs.list(state=args.state, recipe=args.recipe, since=since, limit=args.limit)
    except StoreMissingError:
        if args.store:
            raise  # a path typed for this command must name a store
        listed = []  # no run has been stored yet where the defaults point
    filtered = any(v is not None for v in (args.state, args.recipe, args.since))
    runs_table(listed, json_out=args.json, store_flag=_store_flag(args), filtered=filtered)
    return 0


def cmd_show(args: Any) -> int:
    from .views.report import show

    show(_runs(args).show(args.run), json_out=args.json, audit=args.audit, full=args.full, store_flag=_store_flag(args))
    return 0


def cmd_reconcile(args: Any) -> int:
    from .views.term import say

    runs = _runs(args)
    actor, _ = _actor(args, runs, args.run, "reconcile")
    eff = runs.reconcile(args.run, args.step, executed=bool(args.executed), actor=actor, reason=args.reason)
    resume = f"`recipe resume {args.run}{_store_flag(args)}`"
    if eff.state == "executed":
        say(f"effect {args.step} of run {args.run} settled as executed by {actor}: {resume} goes on from it.")
    else:
        say(f"effect {args.step} of run {args.run} settled as not executed by {actor}: the step is recorded failed, and {resume} ends the run failed at {args.step} (start a new run to try again).")
    return 0


def cmd_approver(args: Any) -> int:
    from .views.term import out, say

    runs = _runs(args)
    me = _me(runs, f"approver {args.approver_command}", acts=args.approver_command != "list", create=args.approver_command == "add")
    if args.approver_command == "add":
        from .web.identity import add_approver

        token, link = add_approver(runs, args.name, by=me)
        say(f"{args.name} may now act with `--as {args.name}` when ${TOKEN_ENV} holds this secret (shown once; only its hash is kept):", err=True)
        out(token + "\n")
        say(f"and sign in to the inbox (`recipe serve`) once, within a day, at:\n  {link}", err=True)
    elif args.approver_command == "link":
        from .web.identity import sign_in_link

        say(f"a one-time sign-in link for {args.name}, good for a day (other devices stay signed in):", err=True)
        out(sign_in_link(runs, args.name, by=me) + "\n")
    elif args.approver_command == "remove":
        if not runs.remove_approver(args.name, by=me):
            from .errors import RefusedError

            raise RefusedError(f"there is no approver {args.name!r}; nothing was changed")
        say(f"{args.name} removed; their secret no longer works.")
    else:
        for name in runs.approvers():
            out(name + "\n")
    return 0


def cmd_agent(args: Any) -> int:
    from .agents import identity
    from .views.term import out, say

    runs = _runs(args)
    me = _me(runs, f"agent {args.agent_command}", acts=args.agent_command != "list", create=args.agent_command == "add")
    if args.agent_command == "add":
        token = identity.add_agent(runs, args.name, by=me, sees=args.see, approvers=args.approver)
        say(f"agent {args.name} may now use the MCP server of `recipe serve` at /mcp with this bearer token (shown once; only its hash is kept); its runs are started by agent:{args.name}:", err=True)
        out(token + "\n")
        say("send it as `Authorization: Bearer TOKEN` (docs/agents.md, \"Over HTTP\"); `recipe agent remove` stops it at once.", err=True)
    elif args.agent_command == "remove":
        if not identity.remove_agent(runs, args.name, by=me):
            from .errors import RefusedError

            raise RefusedError(f"there is no agent {args.name!r}; nothing was changed")
        say(f"agent {args.name} removed; its token no longer works.")
    else:
        for rec in identity.agents(runs):
            people = identity.approvers_of(rec)
            out(f"{rec.name}\tsees {rec.sees}\tapprovers {', '.join(people) if people else '(the serving default)'}\n")
    return 0


def cmd_prune(args: Any) -> int:
    from .views.term import out, say

    age = _seconds(args.older_than)
    runs = _runs(args)
    rep = runs.prune(older_than_s=age, states=args.state, by=_me(runs, "prune"))
    if args.json:
        import msgspec

        out(msgspec.json.encode(rep).decode() + "\n")
        return 0
    size = f"; the store went from {rep.bytes_before:,} to {rep.bytes_after:,} bytes" if rep.bytes_before is not None and rep.bytes_after is not None else ""
    say(f"removed {rep.runs} finished run{'s' if rep.runs != 1 else ''}{size}.")
    return 0


def cmd_save(args: Any) -> int:
    from .views.term import say

    runs = _runs(args)
    saved = runs.save(args.file, name=args.name, by=_me(runs, "save", create=True))
    say(f"saved {saved.name} version {saved.version} ({saved.plan_fingerprint}).")
    return 0


def _seconds(text: str | None) -> float | None:
    import re

    from .errors import UsageError

    if text is None:
        return None
    m = re.fullmatch(r"(\d+)\s*([smhd]?)", text.strip())
    if not m:
        raise UsageError(f"{text!r} is not a duration", hint="e.g. 0, 90s, 30m, 1h or 2d")
    return int(m[1]) * {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}[m[2]]


def cmd_schedule(args: Any) -> int:
    from .views.report import when
    from .views.term import out, say

    runs = _runs(args)
    me = _me(runs, f"schedule {args.schedule_command}", acts=args.schedule_command != "list", create=args.schedule_command == "add")
    action = args.schedule_command
    if action == "add":
        s = runs.add_schedule(args.schedule_name or args.name, recipe=args.name, cron=args.cron, tz=args.tz, inputs=_inputs(args.set), catch_up_s=_seconds(args.catch_up), by=me)
        say(f"schedule {s.name}: {s.recipe} at {s.cron!r} ({s.tz}); next due {when(s.next_due)}. `recipe serve` fires it.")
    elif action == "pause":
        say(f"schedule {runs.pause_schedule(args.name, by=me).name} is paused.")
    elif action == "resume":
        s = runs.resume_schedule(args.name, by=me)
        pinned = f"; it runs version {s.recipe_version} of {s.recipe} only" if s.recipe_version is not None else ""
        say(f"schedule {s.name} is active{pinned}; next due {when(s.next_due)}.")
    elif action == "remove":
        runs.remove_schedule(args.name, by=me)
        say(f"schedule {args.name} removed; its record of past due times is kept.")
    else:
        from .errors import StoreMissingError

        try:
            listed = runs.schedules()
        except StoreMissingError:
            listed = []
        if args.json:
            import msgspec

            out(msgspec.json.format(msgspec.json.encode([{**msgspec.structs.asdict(s), "last": [msgspec.structs.asdict(f) for f in runs.firings(s.name, 3)]} for s in listed]), indent=2).decode() + "\n")
            return 0
        if not listed:
            say("no schedules yet.")
        for s in listed:
            state = s.state + (" (proposed by an agent: a person resumes it)" if s.origin == "agent" and s.state == "paused" else "")
            version = f" version {s.recipe_version}" if s.recipe_version is not None else ""
            say(f"{s.name}: {s.recipe}{version} at {s.cron!r} ({s.tz}), {state}; next due {when(s.next_due)}")
            for f in runs.firings(s.name, 3):
                say(f"  {when(f.due_at)}: {f.outcome}" + (f" (run {f.run_id})" if f.run_id else "") + (f": {f.note}" if f.note else ""))
    return 0


def cmd_policy_check(args: Any) -> int:
    from .views.term import say

    runs = _runs(args)
    problems = _run_async(runs.check_policy)
    policy = runs.policy()
    if not policy.source:
        say("no policy file in effect; nothing to check.")
        return 0
    for p in problems:
        say(p.message, style="red")
    if problems:
        return 2
    say(f"{policy.source}: every entry names a configured server and a tool it lists.", style="green")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
