"""The ``recipe`` command: a thin layer over the public API.

Heavy imports (mcp, trio, networkx, rich) happen inside the commands that
need them, so ``recipe --help`` and ``recipe plan --offline`` start fast.
Exit codes are in docs/exit-codes.md and ``vodou_engine.errors``.
"""

from __future__ import annotations

import argparse
import os
import sys
from functools import lru_cache

EPILOG = """exit codes: 0 succeeded, 1 failed, 2 invalid input or usage, 3 parked waiting
for a person, 4 declined or rejected, 5 refused (unknown run, already decided,
not an approver, expired, stale), 6 store unreadable or corrupt."""


@lru_cache(maxsize=None)
def console(stderr: bool = False):
    from rich.console import Console

    return Console(stderr=stderr, highlight=False)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="recipe",
        description="Compile, plan, run and approve tool recipes. Nothing that changes the world runs without a person's yes.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    def common(sp, *, servers=True, store=False):
        sp.add_argument("--policy", metavar="FILE", help="tool policy file (default: $VODOU_POLICY, ./vodou-policy.toml, ~/.config/vodou/policy.toml)")
        if servers:
            sp.add_argument("--servers", metavar="FILE", help="MCP servers JSON (default: $VODOU_SERVERS, ./mcp.json, ~/.config/vodou/mcp.json, then the demo servers)")
        if store:
            sp.add_argument("--store", metavar="PATH", help="run store (default: $VODOU_STORE or ~/.local/share/vodou/runs.db)")

    c = sub.add_parser("compile", help="compile a recipe to actions.json")
    c.add_argument("file", help="a .recipe file or an actions.json")
    c.add_argument("-o", "--output", metavar="OUT", help="write here instead of stdout")
    common(c, servers=False)
    c.set_defaults(func=cmd_compile)

    pl = sub.add_parser("plan", help="print the plan card (starts servers to list tools; never calls one)")
    pl.add_argument("file", help="a .recipe file or an actions.json")
    pl.add_argument("--offline", action="store_true", help="do not start servers")
    pl.add_argument("--json", action="store_true", help="print the plan and a graph summary as JSON")
    pl.add_argument("--format", choices=["card", "mermaid"], default="card")
    common(pl)
    pl.set_defaults(func=cmd_plan)

    r = sub.add_parser("run", help="run a recipe; parks at each approval")
    r.add_argument("file", help="a .recipe file or an actions.json")
    r.add_argument("--set", action="append", default=[], metavar="NAME=VALUE", help="an input value (JSON, or plain text)")
    r.add_argument("--no-wait", action="store_true", help="park at approvals even on a terminal")
    r.add_argument("--json", action="store_true", help="print one JSON object at the end")
    r.add_argument("--model", help="model for write steps (llm); default: the offline writer")
    r.add_argument("--as", dest="actor", metavar="NAME", help="who starts the run (default: the OS user)")
    common(r, store=True)
    r.set_defaults(func=cmd_run)

    for name, helptext in (("approve", "approve a parked step and resume the run"), ("reject", "reject a parked step; the run ends declined")):
        a = sub.add_parser(name, help=helptext)
        a.add_argument("run", help="run id")
        a.add_argument("step", nargs="?", help="step name (needed when several approvals wait)")
        if name == "approve":
            a.add_argument("--yes", action="store_true", help="do not ask for confirmation")
            a.add_argument("--fingerprint", metavar="FP", help="approve only if the question still has this fingerprint (the one on the card you read)")
        else:
            a.add_argument("--reason", help="why (kept in the audit log)")
        a.add_argument("--as", dest="actor", metavar="NAME", help="who decides (default: the OS user)")
        a.add_argument("--json", action="store_true")
        a.add_argument("--no-wait", action="store_true", help="park at the next approval even on a terminal")
        common(a, store=True)
        a.set_defaults(func=cmd_decide, decision=name)

    rs = sub.add_parser("resume", help="continue a parked run (asks again for expired or stale approvals)")
    rs.add_argument("run")
    rs.add_argument("--json", action="store_true")
    rs.add_argument("--no-wait", action="store_true")
    common(rs, store=True)
    rs.set_defaults(func=cmd_resume)

    ls = sub.add_parser("runs", help="list runs")
    ls.add_argument("--json", action="store_true")
    ls.add_argument("--store", metavar="PATH")
    ls.set_defaults(func=cmd_runs)

    sh = sub.add_parser("show", help="show a run: nodes, timings, effects")
    sh.add_argument("run")
    sh.add_argument("--json", action="store_true")
    sh.add_argument("--audit", action="store_true", help="the audit record of each effect")
    sh.add_argument("--store", metavar="PATH")
    sh.set_defaults(func=cmd_show)

    rc = sub.add_parser("reconcile", help="settle an effect left `unknown` by a crash")
    rc.add_argument("run")
    rc.add_argument("step")
    g = rc.add_mutually_exclusive_group(required=True)
    g.add_argument("--executed", action="store_true", help="the effect did happen")
    g.add_argument("--not-executed", action="store_true", help="the effect did not happen (the run may ask again)")
    rc.add_argument("--as", dest="actor", metavar="NAME")
    rc.add_argument("--store", metavar="PATH")
    rc.set_defaults(func=cmd_reconcile)

    return p


def main(argv: list[str] | None = None) -> int:
    if argv is None:  # a whole process (the `recipe` script, `python -m vodou_engine`)
        from .gcpause import own_process

        own_process()
    args = _parser().parse_args(argv)
    from .errors import VodouError

    try:
        code = args.func(args)
    except VodouError as exc:
        console(True).print(str(exc), markup=False, style="red", soft_wrap=True)
        code = exc.exit_code
    except KeyboardInterrupt:
        console(True).print("interrupted", style="red")
        code = 130
    sys.stdout.flush()
    if argv is None:
        # A whole process (the `recipe` script, `python -m vodou_engine`): what is
        # alive now lives until exit, and the collector's passes over it while the
        # interpreter shuts down cost ~0.2 s (more with the MCP SDK loaded).
        import gc

        gc.freeze()
    return code or 0


def _policy(args):
    from .policy import load_policy

    return load_policy(getattr(args, "policy", None))


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


# --- compile / plan ---------------------------------------------------------------
def cmd_compile(args) -> int:
    from .compiler import load_source
    from .plan import encode_plan

    plan, _ = load_source(args.file, policy=_policy(args), refresh=True, memo=True)
    _write(encode_plan(plan), args.output)
    return 0


def cmd_plan(args) -> int:
    from .compiler import load_source

    policy = _policy(args)
    plan, text = load_source(args.file, policy=policy, memo=True)
    status = None
    note = "offline: servers not started, tool names not checked"
    if not args.offline:
        import trio

        from .planning import list_tools, resolve, servers_of
        from .servers import load_servers

        sset = load_servers(args.servers)
        tools = trio.run(list_tools, sset.servers, servers_of(plan))
        status, hints = resolve(plan, sset.servers, tools)
        if text is not None and hints:
            from .compiler import compile_recipe

            plan = compile_recipe(text, args.file, policy=policy, hints=hints)
        elif text is None:
            from .planning import check_hints

            check_hints(plan, policy, hints)
        note = f"servers from {sset.source}; tools listed, none called"
    if args.json:
        import msgspec

        from .graph.summary import summary

        doc = {"plan": plan, "graph": summary(plan)}
        if status is not None:
            doc["tools"] = {k: {"exists": v.exists, "note": v.note} for k, v in status.items()}
        sys.stdout.buffer.write(msgspec.json.format(msgspec.json.encode(doc, order="deterministic"), indent=2) + b"\n")
    elif args.format == "mermaid":
        from .cards import mermaid

        sys.stdout.write(mermaid(plan))
    else:
        from .cards import plan_card

        console().print(plan_card(plan, source=args.file, status=status, servers_note=note, writer=_writer_label(plan, None)))
    if status is not None:
        from .planning import missing

        bad = missing(status)
        if bad:
            console(True).print(f"{len(bad)} step(s) name a tool that does not exist: " + ", ".join(bad), style="red")
            return 2
    return 0


def _writer_label(plan, model: str | None) -> str:
    model = model or plan.options.model or os.environ.get("VODOU_MODEL")
    return f"model {model}" if model else "offline writer, no model configured"


# --- run / approve ----------------------------------------------------------------
def cmd_run(args) -> int:
    from .runtime.commands import run_command

    return run_command(args)


def cmd_decide(args) -> int:
    # A rejection calls nothing, so it starts nothing.
    with _prespawn(args, ("parked",) if args.decision == "approve" else ()) as prespawned:
        from .runtime.commands import decide_command

        return decide_command(args, prespawned)


def _prespawn(args, states: tuple[str, ...]):
    """Start the servers the run still needs, if it is in one of ``states``,
    before trio and the MCP SDK are imported.

    They then boot on the other core while this process imports; nothing is
    called until the approval is recorded and the run claimed, and whatever
    is not taken over is stopped on the way out. Anything unexpected here
    (unknown run, unreadable store, bad server file) starts nothing: the
    command proper reports it.
    """
    from .tools.process import Prespawned

    prespawned = Prespawned()  # empty when there is nothing to start; closing it stops what no hub took
    if not states:
        return prespawned
    from .plan import decode_plan
    from .servers import load_servers, servers_to_finish
    from .store import open_store

    try:
        store = open_store(args.store)
        try:
            run = store.get_run(args.run)
            if run.state not in states:
                return prespawned
            nodes = store.get_nodes(args.run)
        finally:
            store.close()
        needed = servers_to_finish(decode_plan(run.plan_json), nodes)
        configs = load_servers(args.servers).servers
    except Exception:
        return prespawned
    for name in needed:
        if name in configs:
            prespawned.start(name, configs[name])
    return prespawned


def cmd_resume(args) -> int:
    # A run whose process died is still "running"; resume takes it over.
    with _prespawn(args, ("parked", "running")) as prespawned:
        from .runtime.commands import resume_command

        return resume_command(args, prespawned)


def cmd_runs(args) -> int:
    from .runtime.commands import runs_command

    return runs_command(args)


def cmd_show(args) -> int:
    from .runtime.commands import show_command

    return show_command(args)


def cmd_reconcile(args) -> int:
    from .runtime.commands import reconcile_command

    return reconcile_command(args)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
