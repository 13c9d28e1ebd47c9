"""The ``recipe`` command: its arguments, and which module under ``commands/`` does each.

``main()`` parses the arguments, imports the one module that does the command asked
for (``COMMANDS``), runs it, and turns what it raised into a message and an exit
code (``commands/exits.py``, docs/exit-codes.md). Nothing else is loaded:
``recipe --help`` reads this file, ``commands/exits.py`` and the modules whose
flags the parser adds
(``web/serve.py``, ``workers/command.py``, ``agents/``); a command loads its own
module, and trio, the MCP SDK or rich only if it needs them. What approving,
rejecting or resuming means is decided by the run API (``runs.py``), the same for
every surface; the commands hold the arguments' meaning, who the person is,
prompts, signals and output (``views/``).
"""

from __future__ import annotations

import argparse
import os
import sys
from importlib import import_module

from . import __version__
from .agents import author, mcp_server
from .commands.exits import TOKEN_ENV, Stopped, _ended, _error, _stop_on_signals
from .errors import VodouError
from .gcpause import own_process
from .views.term import guard_stdout
from .web import serve as web_serve
from .workers import command as worker_command

PROMPTS = """On a terminal, run, approve and resume show each card and ask. The answers are
the same at every prompt: y approves, n rejects (the run ends declined, exit 4),
Enter or Ctrl-D decides later (the run stays parked, exit 3)."""

EPILOG = (
    PROMPTS
    + """

exit codes: 0 succeeded, 1 failed, 2 invalid input or usage, 3 parked waiting
for a person, 4 declined or rejected, 5 refused (unknown run, already decided,
not an approver, expired, stale, servers or recipe changed, run busy),
6 store unreadable or missing, 7 no queue for the workers (a SQLite store),
129/130/143 stopped by SIGHUP/Ctrl-C/SIGTERM (the run is left resumable)."""
)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="recipe",
        description="Compile, plan, run and approve tool recipes. Nothing that changes the world runs without a person's yes.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--version", action="version", version=f"recipe (vodou_engine) {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    def policy(sp: argparse.ArgumentParser) -> None:
        sp.add_argument(
            "--policy",
            metavar="FILE",
            help="tool policy file (default: $VODOU_POLICY, ./vodou-policy.toml, ~/.config/vodou/policy.toml)",
        )

    def servers(sp: argparse.ArgumentParser) -> None:
        sp.add_argument(
            "--servers",
            metavar="FILE",
            help="MCP servers JSON (default: $VODOU_SERVERS, ./mcp.json, ~/.config/vodou/mcp.json, then the demo servers)",
        )

    def store(sp: argparse.ArgumentParser) -> None:
        sp.add_argument(
            "--store", metavar="PATH", help="run store (default: $VODOU_STORE or ~/.local/share/vodou/runs.db)"
        )

    def actor(sp: argparse.ArgumentParser, what: str) -> None:
        sp.add_argument(
            "--as",
            dest="actor",
            metavar="NAME",
            help=f"{what} under this approver name instead of your user name; needs the approver's secret in ${TOKEN_ENV}",
        )

    def as_json(sp: argparse.ArgumentParser) -> None:
        sp.add_argument("--json", action="store_true", help="print one JSON object instead of text")

    def no_wait(sp: argparse.ArgumentParser) -> None:
        sp.add_argument("--no-wait", action="store_true", help="park at approvals even on a terminal (do not ask here)")

    c = sub.add_parser("compile", help="compile a recipe to actions.json")
    c.add_argument("file", help="a .recipe file or an actions.json")
    c.add_argument("-o", "--output", metavar="OUT", help="write here instead of stdout")
    policy(c)

    pl = sub.add_parser(
        "plan",
        help="print the plan card (lists the servers' tools, starting a server whose kept list is missing or out of date; never calls one)",
    )
    pl.add_argument("file", help="a .recipe file or an actions.json")
    pl.add_argument("--offline", action="store_true", help="do not start servers")
    pl.add_argument(
        "--refresh", action="store_true", help="start every server and list its tools again, whatever was kept"
    )
    fmt = pl.add_mutually_exclusive_group()
    fmt.add_argument("--json", action="store_true", help="print the plan and a graph summary as JSON")
    fmt.add_argument(
        "--format",
        choices=["card", "mermaid"],
        default="card",
        help="the card (default), or the graph as a Mermaid flowchart",
    )
    policy(pl)
    servers(pl)

    r = sub.add_parser(
        "run",
        help="run a recipe; parks at each approval",
        description="Run a recipe; it parks at each approval.\n\n" + PROMPTS,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    r.add_argument("file", help="a .recipe file or an actions.json")
    r.add_argument(
        "--set", action="append", default=[], metavar="NAME=VALUE", help="an input value (JSON, or plain text)"
    )
    no_wait(r)
    as_json(r)
    r.add_argument(
        "--model", help="model for write steps (llm); default: the recipe's, then $VODOU_MODEL, else the offline writer"
    )
    r.add_argument(
        "--queue",
        action="store_true",
        help="queue the run for the workers (`recipe worker`) instead of driving it here; prints its id (a PostgreSQL store only)",
    )
    actor(r, "start the run")
    policy(r)
    servers(r)
    store(r)

    a = sub.add_parser(
        "approve",
        help="approve a parked step and drive the run on",
        description="Show a parked step's card, approve it, and drive the run on.\n\n" + PROMPTS,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    a.add_argument("run", help="run id")
    a.add_argument("step", nargs="?", help="step name (needed when several approvals wait)")
    a.add_argument(
        "--yes",
        action="store_true",
        help="approve without asking (needed without a terminal); without it, on a terminal: y approves, n rejects, Enter or Ctrl-D decides later",
    )
    a.add_argument(
        "--fingerprint",
        metavar="FP",
        help="approve only if the question still has this fingerprint (the one on the card you read)",
    )
    a.add_argument(
        "--items",
        metavar="N,N",
        type=_item_list,
        help="for an effect inside a `for each` (one card for all its items): approve only these items, by index "
        "as the card lists them (e.g. 0,2); the others are declined and never run",
    )
    a.add_argument("--model", help="model for write steps after this one (default: the one the run started with)")
    a.add_argument(
        "--here",
        action="store_true",
        help="drive the run on in this process, starting its servers here (by default the workers do it on a PostgreSQL store, and a running `recipe serve` on its warm servers on a SQLite one)",
    )
    actor(a, "decide")
    as_json(a)
    no_wait(a)
    policy(a)
    servers(a)
    store(a)
    a.set_defaults(decision="approve")

    rj = sub.add_parser("reject", help="reject a parked step; the run ends declined")
    rj.add_argument("run", help="run id")
    rj.add_argument("step", nargs="?", help="step name (needed when several approvals wait)")
    rj.add_argument("--reason", help="why (kept in the audit log and shown by `recipe show`)")
    rj.add_argument("--fingerprint", metavar="FP", help="reject only if the question still has this fingerprint")
    actor(rj, "decide")
    as_json(rj)
    store(rj)
    rj.set_defaults(decision="reject")

    an = sub.add_parser(
        "answer",
        help="answer a server's question that parked a step, and drive the run on",
        description=(
            "Show the question a server asked in the middle of a step's call, answer it, and drive the "
            "run on: the step's call is made again and the server given the answer when it asks again. "
            "On a terminal without --fields/--decline/--cancel, each field is asked for; Enter at the first "
            "decides later."
        ),
    )
    an.add_argument("run", help="run id")
    an.add_argument("step", nargs="?", help="step name (needed when several questions wait)")
    how = an.add_mutually_exclusive_group()
    how.add_argument("--fields", dest="content", metavar="OBJECT", help="the answer's fields, as one JSON object")
    how.add_argument("--decline", dest="action", action="store_const", const="decline", help="decline to answer")
    how.add_argument("--cancel", dest="action", action="store_const", const="cancel", help="dismiss the question")
    an.add_argument(
        "--fingerprint", metavar="FP", help="answer only if the question still has this fingerprint (the card you read)"
    )
    an.add_argument("--model", help="model for write steps after this one (default: the one the run started with)")
    actor(an, "answer")
    as_json(an)
    no_wait(an)
    policy(an)
    servers(an)
    store(an)
    an.set_defaults(decision="answer")

    rs = sub.add_parser(
        "resume",
        help="continue a parked or interrupted run (asks again for expired or stale approvals)",
        description="Continue a parked or interrupted run; expired or stale approvals are asked again.\n\n" + PROMPTS,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    rs.add_argument("run", help="run id")
    rs.add_argument("--model", help="model for write steps (default: the one the run started with)")
    as_json(rs)
    no_wait(rs)
    policy(rs)
    servers(rs)
    store(rs)

    cn = sub.add_parser("cancel", help="end a run cancelled; its pending approvals can no longer be given")
    cn.add_argument("run", help="run id")
    cn.add_argument("--reason", help="why (kept in the audit log)")
    actor(cn, "cancel")
    as_json(cn)
    store(cn)

    ls = sub.add_parser("runs", help="list runs, newest first")
    ls.add_argument(
        "--state",
        choices=["running", "parked", "interrupted", "succeeded", "failed", "declined", "cancelled"],
        help="only runs in this state",
    )
    ls.add_argument("--recipe", metavar="NAME", help="only runs of this recipe (its name)")
    ls.add_argument(
        "--since", metavar="WHEN", help="only runs started since: an ISO date/time, or an age such as 2h or 7d"
    )
    ls.add_argument("--limit", type=int, default=50, metavar="N", help="at most N runs (default 50)")
    as_json(ls)
    store(ls)

    sh = sub.add_parser("show", help="show a run: steps, results, timings, approvals, effects")
    sh.add_argument("run", help="run id")
    as_json(sh)
    sh.add_argument(
        "--audit",
        action="store_true",
        help="the audit record of each effect: card shown, payload, fingerprint, who decided and when, the result",
    )
    sh.add_argument("--full", action="store_true", help="every result in full (read results are summarised otherwise)")
    store(sh)

    rc = sub.add_parser(
        "reconcile", help="settle an effect left unknown (or reported failed) by saying whether it happened"
    )
    rc.add_argument("run", help="run id")
    rc.add_argument("step", help="the effect's step")
    g = rc.add_mutually_exclusive_group(required=True)
    g.add_argument("--executed", action="store_true", help="it did happen: `recipe resume` then goes on from it")
    g.add_argument(
        "--not-executed",
        action="store_true",
        help="it did not happen: the step is recorded failed, and `recipe resume` ends the run failed at that step (start a new run to try again)",
    )
    rc.add_argument("--reason", help="how you know (kept in the audit log)")
    actor(rc, "settle it")
    store(rc)

    ap = sub.add_parser("approver", help="people who may act under a name other than their user name")
    apsub = ap.add_subparsers(dest="approver_command", metavar="ACTION")
    apsub.required = True
    add = apsub.add_parser("add", help="add NAME (or give NAME a new secret); prints the secret once")
    add.add_argument("name", help="the approver's name, as recipes list it under `approvers:`")
    store(add)
    lst = apsub.add_parser("list", help="list approver names")
    store(lst)
    ln = apsub.add_parser("link", help="a new one-time sign-in link to the inbox for NAME (for another device)")
    ln.add_argument("name", help="the approver's name")
    store(ln)
    rm = apsub.add_parser("remove", help="remove NAME; their secret stops working")
    rm.add_argument("name", help="the approver's name")
    store(rm)

    ag = sub.add_parser(
        "agent",
        help="agents that may use the MCP server of `recipe serve` (/mcp) with a bearer token; they propose, never decide",
    )
    agsub = ag.add_subparsers(dest="agent_command", metavar="ACTION")
    agsub.required = True
    aga = agsub.add_parser("add", help="add agent NAME (or give it a new token); prints its bearer token once")
    aga.add_argument("name", help="the agent's name: its runs are started by agent:NAME")
    aga.add_argument(
        "--see",
        choices=["own", "all"],
        default="own",
        help="whose runs it may read: `own` (the runs it started; default) or `all`",
    )
    aga.add_argument(
        "--approver",
        action="append",
        metavar="NAME",
        help="who decides the runs of its recipes that name no approvers (repeatable; default: $VODOU_AGENT_APPROVERS of `recipe serve`, else the user running it)",
    )
    store(aga)
    agl = agsub.add_parser("list", help="list agents (never their tokens)")
    store(agl)
    agr = agsub.add_parser("remove", help="remove agent NAME; its token stops working at once")
    agr.add_argument("name", help="the agent's name")
    store(agr)

    sg = sub.add_parser(
        "servers", help='sign in to servers reached by URL that ask for OAuth ("auth": "oauth"), once, in a browser'
    )
    sgsub = sg.add_subparsers(dest="servers_command", metavar="ACTION")
    sgsub.required = True
    sgi = sgsub.add_parser(
        "login", help="sign in to server NAME: prints the address to open in a browser, and keeps the grant"
    )
    sgi.add_argument("name", help="the server's name in the server file")
    sgi.add_argument(
        "--no-browser", dest="browser", action="store_false", help="only print the address (do not open a browser)"
    )
    sgi.add_argument(
        "--timeout",
        type=float,
        default=300.0,
        metavar="SECONDS",
        help="how long to wait for the browser to come back (default 300)",
    )
    servers(sgi)
    sgo = sgsub.add_parser(
        "logout", help="forget the sign-in of server NAME (runs that need it stop before they start)"
    )
    sgo.add_argument("name", help="the server's name in the server file")
    servers(sgo)
    sgs = sgsub.add_parser(
        "status", help="list the servers that sign in, and whether each is signed in (never a token)"
    )
    servers(sgs)

    po = sub.add_parser("policy", help="check the tool policy file against the configured servers")
    posub = po.add_subparsers(dest="policy_command", metavar="ACTION")
    posub.required = True
    pc = posub.add_parser(
        "check", help="fail when an entry names a server or tool that does not exist (it would apply to nothing)"
    )
    policy(pc)
    servers(pc)

    sv = sub.add_parser("save", help="save a recipe in the store, as a new version (older versions are kept)")
    sv.add_argument("file", help="a .recipe file")
    sv.add_argument(
        "--name", metavar="NAME", help="the name to save it under (default: the recipe's title, else its file name)"
    )
    policy(sv)
    store(sv)

    sc = sub.add_parser("schedule", help="run saved recipes on cron schedules (`recipe serve` fires them)")
    scsub = sc.add_subparsers(dest="schedule_command", metavar="ACTION")
    scsub.required = True
    sa = scsub.add_parser("add", help="run the saved recipe NAME on a cron schedule")
    sa.add_argument("name", help="the saved recipe's name; also the schedule's, unless --as-name")
    sa.add_argument(
        "--cron",
        required=True,
        metavar="EXPR",
        help='five-field cron expression, e.g. "0 8 * * 1-5" for 8:00 on weekdays',
    )
    sa.add_argument(
        "--tz",
        default="UTC",
        metavar="ZONE",
        help="IANA time zone the expression is read in (default UTC), e.g. Europe/Lisbon",
    )
    sa.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="an input value for every run (JSON, or plain text)",
    )
    sa.add_argument(
        "--catch-up",
        metavar="DURATION",
        help="a due time missed by less than this still runs (once) when serving resumes (default 1h; 0 never)",
    )
    sa.add_argument(
        "--as-name", dest="schedule_name", metavar="SCHEDULE", help="the schedule's own name (default: the recipe's)"
    )
    store(sa)
    for action, helptext in (
        ("list", "list schedules, when each is next due, and what its last due times did"),
        ("pause", "pause a schedule"),
        ("resume", "resume a paused schedule (counted from now: what was missed while paused is not run)"),
        ("remove", "remove a schedule (its record of past due times is kept)"),
    ):
        sp = scsub.add_parser(action, help=helptext)
        if action != "list":
            sp.add_argument("name", help="the schedule's name")
        else:
            as_json(sp)
        store(sp)

    pr = sub.add_parser(
        "prune",
        help="remove finished runs older than an age (never parked ones, nor effects left unknown); the store shrinks",
    )
    pr.add_argument(
        "--older-than", required=True, metavar="AGE", help="e.g. 30d, 12h, 90m: runs that ended longer ago than this"
    )
    pr.add_argument(
        "--state",
        action="append",
        choices=["succeeded", "failed", "declined", "cancelled"],
        help="only runs that ended in this state (repeatable; default: every final state)",
    )
    as_json(pr)
    store(pr)

    se = sub.add_parser(
        "serve", help="serve the approval inbox, run saved recipes on their schedules, keep servers warm"
    )
    web_serve.add_arguments(se)

    wk = sub.add_parser(
        "worker",
        help="drive runs from the queue in a PostgreSQL store; start as many as you like, on as many machines",
        description="Drive runs from the queue in a PostgreSQL store, keeping MCP servers warm between jobs. Start as many as you like, on as many machines, "
        "each with the same server file and policy. SIGTERM stops taking jobs; running steps get --grace seconds, then their runs are left interrupted and queued again.",
    )
    worker_command.add_arguments(wk)

    mc = sub.add_parser(
        "mcp", help="serve the engine to an AI agent over MCP (stdio): it may propose and start recipes, never decide"
    )
    mcp_server.add_arguments(mc)
    au = sub.add_parser(
        "author", help="draft a recipe from one sentence with a language model (nothing runs or is saved unless asked)"
    )
    author.add_arguments(au)
    return p


# Which module under commands/ does each command, and its function there. `main` imports
# that module only, so a command loads what it needs and nothing another command needs.
COMMANDS: dict[str, tuple[str, str]] = {
    "compile": ("compile", "cmd_compile"),
    "plan": ("run", "cmd_plan"),
    "run": ("run", "cmd_run"),
    "approve": ("decide", "cmd_decide"),
    "reject": ("decide", "cmd_decide"),
    "answer": ("decide", "cmd_answer"),
    "resume": ("decide", "cmd_resume"),
    "cancel": ("decide", "cmd_cancel"),
    "reconcile": ("decide", "cmd_reconcile"),
    "runs": ("inspect", "cmd_runs"),
    "show": ("inspect", "cmd_show"),
    "prune": ("inspect", "cmd_prune"),
    "approver": ("people", "cmd_approver"),
    "agent": ("people", "cmd_agent"),
    "policy": ("people", "cmd_policy_check"),
    "servers": ("signin", "cmd_servers"),
    "save": ("saved", "cmd_save"),
    "schedule": ("saved", "cmd_schedule"),
    "serve": ("services", "cmd_serve"),
    "worker": ("services", "cmd_worker"),
    "mcp": ("services", "cmd_mcp"),
    "author": ("services", "cmd_author"),
}


# --- the process ----------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    whole_process = argv is None
    if whole_process:  # the `recipe` script, `python -m vodou_engine`
        own_process()
        _stop_on_signals()
    guard_stdout()
    args = _parser().parse_args(argv)
    try:
        module, function = COMMANDS[args.command]
        # Inside the try: a signal or Ctrl-C while the command's module loads ends as one would while it runs.
        code = getattr(import_module(f"{__package__}.commands.{module}"), function)(args)
    except VodouError as exc:
        _error(exc)
        code = exc.exit_code
    except BaseExceptionGroup as group:
        from .runs import plain_error  # here, not at the top: `recipe --help` would load runs.py

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


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())


def _item_list(text: str) -> list[int]:
    """``--items 0,2``: item indexes, as a loop's card lists them."""
    try:
        items = [int(part) for part in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a list of item numbers such as 0,2") from None
    if any(i < 0 for i in items):
        raise argparse.ArgumentTypeError("item numbers count from 0")
    return items
