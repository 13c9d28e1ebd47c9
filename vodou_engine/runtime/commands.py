"""The run-side CLI commands: run, approve/reject, resume, runs, show, reconcile.

Each is a thin layer over ``runtime.api`` and the store; output is rich text
for people, or one JSON object with ``--json``.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any


from ..cli import console
from ..errors import EXIT_DECLINED, EXIT_FAILED, EXIT_OK, EXIT_PARKED, ExpiredError, RefusedError, StaleError, UsageError
from ..plan import JoinNode, Plan
from .api import decide, drive_run, find_approval, open_run_servers, os_user, start_run

EXIT_FOR = {"succeeded": EXIT_OK, "failed": EXIT_FAILED, "parked": EXIT_PARKED, "declined": EXIT_DECLINED, "cancelled": EXIT_FAILED}


def _store(args):
    from ..store import open_store

    return open_store(getattr(args, "store", None))


def _servers(args):
    from ..servers import load_servers

    return load_servers(getattr(args, "servers", None)).servers


def _inputs(pairs: list[str]) -> dict[str, Any]:
    out = {}
    for pair in pairs:
        name, sep, raw = pair.partition("=")
        if not sep or not name:
            raise UsageError(f"--set {pair!r} is not NAME=VALUE", hint='e.g. --set channel=#daily or --set limit=5 or --set tags=["a","b"]')
        try:
            out[name] = json.loads(raw)
        except ValueError:
            out[name] = raw
    return out


def _interactive(args) -> bool:
    return not getattr(args, "no_wait", False) and not getattr(args, "json", False) and sys.stdin.isatty() and sys.stdout.isatty()


def _store_flag(args) -> str:
    return f" --store {args.store}" if getattr(args, "store", None) else ""


class Progress:
    """Live rows while a run moves: one per node, updated in place on a terminal."""

    def __init__(self, plan: Plan, enabled: bool):
        self.plan = plan
        self.enabled = enabled
        self.states: dict[str, str] = {}
        self.live = None

    def __enter__(self):
        if self.enabled:
            from rich.live import Live

            self.live = Live(self._render(), console=console(True), refresh_per_second=12, transient=False)
            self.live.__enter__()
        return self

    def __exit__(self, *exc):
        if self.live is not None:
            self.live.update(self._render())
            self.live.__exit__(*exc)

    def change(self, nid: str, state: str) -> None:
        self.states[nid] = state
        if self.live is not None:
            self.live.update(self._render())

    def _render(self):
        from rich.table import Table

        icons = {"running": "[cyan]…[/]", "succeeded": "[green]✓[/]", "failed": "[red]✗[/]", "waiting": "[yellow]⚠ waiting[/]", "cancelled": "[dim]cancelled[/]", "skipped": "[dim]skipped[/]", "rejected": "[red]rejected[/]", "unknown": "[red]unknown[/]"}
        t = Table(box=None, show_header=False, padding=(0, 1))
        for n in self.plan.nodes:
            st = self.states.get(n.id)
            if st is not None:
                t.add_row(n.id, icons.get(st, st))
        return t


def together_stats(plan: Plan, times: dict[str, tuple[float | None, float | None]]) -> list[dict[str, Any]]:
    """Per together: wall-clock, summed branch time and the slowest branch."""
    out = []
    for j in plan.nodes:
        if not isinstance(j, JoinNode):
            continue
        spans = []
        for i, item in enumerate(j.members):
            starts = [times[m][0] for m in item if m in times and times[m][0] is not None]
            ends = [times[m][1] for m in item if m in times and times[m][1] is not None]
            if starts and ends:
                spans.append((j.needs[i], max(ends) - min(starts), min(starts), max(ends)))
        if not spans:
            continue
        wall = max(s[3] for s in spans) - min(s[2] for s in spans)
        slowest = max(spans, key=lambda s: s[1])
        out.append({"join": j.id, "wall_s": wall, "sum_s": sum(s[1] for s in spans), "slowest_s": slowest[1], "slowest": slowest[0], "branches": len(spans)})
    return out


def _stats_lines(stats) -> list[str]:
    return [
        f"{s['join']}: wall {s['wall_s'] * 1000:.0f} ms · sum of branches {s['sum_s'] * 1000:.0f} ms · slowest {s['slowest']} {s['slowest_s'] * 1000:.0f} ms"
        + (f" · wall/sum {s['wall_s'] / s['sum_s']:.2f}" if s["sum_s"] > 0 else "")
        for s in stats
    ]


def _report(args, outcome, plan: Plan | None) -> int:
    stats = []
    engine = getattr(outcome, "engine", None)
    if engine is not None and plan is not None:
        stats = together_stats(plan, {k: tuple(v) for k, v in engine.times.items()})
    if getattr(args, "json", False):
        doc = {
            "run": outcome.run_id,
            "state": outcome.state,
            "pending": [{"step": a.step, "approval": a.id, "fingerprint": a.fingerprint, "expires_at": a.expires_at} for a in outcome.pending],
            "together": stats,
        }
        if outcome.server_start_s:
            doc["servers"] = {name: {"start_s": s} for name, s in outcome.server_start_s.items()}
        if engine is not None:
            doc["errors"] = {k: v for k, v in engine.errors.items() if engine.state.get(k) in ("failed", "unknown")}
        sys.stdout.write(json.dumps(doc, indent=2, sort_keys=True) + "\n")
        return EXIT_FOR[outcome.state]
    con = console()
    for line in _stats_lines(stats):
        con.print(line, style="dim")
    if outcome.state == "parked":
        for a in outcome.pending:
            con.print()
            con.print(a.card_text, markup=False, soft_wrap=True)
            con.print(f"approve:  recipe approve {outcome.run_id} {a.step}{_store_flag(args)}", style="bold")
            con.print(f"reject:   recipe reject {outcome.run_id} {a.step}{_store_flag(args)}")
        if not outcome.pending and engine is not None:
            for k, v in engine.errors.items():
                if engine.state.get(k) == "unknown":
                    con.print(f"⚠ {k}: {v}\n  settle: recipe reconcile {outcome.run_id} {k} --executed|--not-executed{_store_flag(args)}", style="yellow")
        con.print(f"run {outcome.run_id} is parked, waiting for a person.", style="yellow")
    elif outcome.state == "succeeded":
        con.print(f"run {outcome.run_id} succeeded.", style="green")
    elif outcome.state == "declined":
        con.print(f"run {outcome.run_id} was declined; nothing after the refusal ran.", style="yellow")
    else:
        con.print(f"run {outcome.run_id} {outcome.state}.", style="red")
        if engine is not None:
            for k, v in engine.errors.items():
                if engine.state.get(k) == "failed":
                    con.print(f"  {k}: {v}", style="red", markup=False)
    return EXIT_FOR[outcome.state]


def _ask_inline(store, outcome, args) -> bool:
    """On a terminal: ask each waiting question here; True if anything was decided."""
    from rich.prompt import Confirm

    decided = False
    for a in outcome.pending:  # its card was just printed by _report
        yes = Confirm.ask(f"run {a.step}?", default=False)
        decide(store, a.id, "approve" if yes else "reject", actor=getattr(args, "actor", None) or os_user())
        decided = True
        if not yes:
            break
    return decided


def _plan_of(outcome, run) -> Plan:
    """The plan the drive already checked; a run that had already ended was not driven."""
    from .engine import check_stored_plan

    engine = getattr(outcome, "engine", None)
    return engine.plan if engine is not None else check_stored_plan(run.plan_json, run.plan_fingerprint)


def _answer_inline(args, store, outcome, plan: Plan, resume) -> int:
    """Report; then, on a terminal, ask each waiting question here and drive on."""
    import trio

    code = _report(args, outcome, plan)
    while outcome.state == "parked" and outcome.pending and _interactive(args):
        if not _ask_inline(store, outcome, args):
            break
        outcome = trio.run(resume)
        code = _report(args, outcome, plan)
    return code


def run_command(args) -> int:
    import trio

    from ..compiler import compile_recipe, load_source
    from ..policy import load_policy

    policy = load_policy(args.policy)
    plan, text = load_source(args.file, policy=policy)
    inputs = _inputs(args.set)
    servers = _servers(args)
    store = _store(args)

    async def main():
        from ..planning import check_hints, missing, resolve
        from .api import servers_needed

        needed = servers_needed(plan)
        for name in needed:
            if name not in servers:
                from ..servers import unknown_server_error

                raise unknown_server_error(name, servers)
        if not needed:
            return await start_run(plan, store=store, servers=servers, inputs=inputs, actor=args.actor, recipe_path=None if text is None else args.file, policy=policy, model=args.model, on_change=progress.change)
        from ..tools.hub import open_hub

        async with open_hub(servers, needed) as hub:
            tools = {n: hub.tools(n) for n in needed}
            status, hints = resolve(plan, servers, tools)
            bad = missing(status)
            if bad:
                raise UsageError(
                    "; ".join(f"{k}: {status[k].note}" for k in bad),
                    hint="fix the tool address in the recipe (`recipe plan FILE` shows the card); nothing was run",
                )
            final = plan
            if text is not None:
                final = compile_recipe(text, args.file, policy=policy, hints=hints)
            else:
                check_hints(plan, policy, hints)
            return await start_run(final, store=store, servers=servers, inputs=inputs, actor=args.actor, recipe_path=None if text is None else args.file, policy=policy, model=args.model, hub=hub, on_change=progress.change)

    progress = Progress(plan, enabled=sys.stderr.isatty() and not args.json)
    with progress:
        outcome = trio.run(main)
    return _answer_inline(args, store, outcome, plan, lambda: drive_run(outcome.run_id, store=store, servers=servers, policy=policy, model=args.model))


def decide_command(args, prespawned=None) -> int:
    import trio

    store = _store(args)
    actor = args.actor or os_user()
    run, approval = find_approval(store, args.run, args.step)
    if args.decision == "reject":
        return _reject(args, store, approval, actor)
    from ..policy import load_policy

    policy = load_policy(args.policy)
    servers = _servers(args)

    async def approve_and_drive():
        # The servers the rest of the run needs are spawned before anything else:
        # they boot while the card is shown, the person answers, the decision is
        # stored and the run is checked. A refusal on the way stops them unused.
        async with open_run_servers(store, run, servers, prespawned=prespawned) as hub:
            # Abandonable, so Ctrl-C at the prompt interrupts at once; a decision
            # already written stays written (the run stays parked, `resume` goes on).
            decided = await trio.to_thread.run_sync(_approve, args, store, approval, actor, abandon_on_cancel=True)
            if decided is None:
                return EXIT_PARKED
            try:
                return await drive_run(args.run, store=store, servers=servers, policy=policy, hub=hub)
            except RefusedError as exc:
                if "being driven" in str(exc):
                    console().print(f"run {args.run} is being driven by another process; it will execute this approval.")
                    return EXIT_OK
                raise

    outcome = trio.run(approve_and_drive)
    if isinstance(outcome, int):  # an exit code: nothing was driven here
        return outcome
    return _answer_inline(args, store, outcome, _plan_of(outcome, run), lambda: drive_run(args.run, store=store, servers=servers, policy=policy))


def _show_card_and_check(args, approval) -> bool:
    """Print the card; for an approval, get the person's yes. False: nothing is to be decided."""
    if not args.json:
        console().print(approval.card_text, markup=False, soft_wrap=True)
    if args.decision == "approve" and not args.yes:
        if not sys.stdin.isatty():
            raise UsageError("approving without a terminal needs --yes", hint=f"recipe approve {args.run} {approval.step} --yes")
        from rich.prompt import Confirm

        if not Confirm.ask("approve exactly this?", default=False):
            console().print("nothing was decided; the run is still parked.")
            return False
    wanted = getattr(args, "fingerprint", None)
    if wanted and wanted != approval.fingerprint:
        raise StaleError(
            f"the question for `{approval.step}` is now {approval.fingerprint}, not {wanted}: it was asked again since that card; nothing was changed",
            hint=f"read the current card (`recipe show {args.run} --audit`) and approve its fingerprint",
        )
    return True


def _record(args, store, approval, actor):
    try:
        return decide(store, approval.id, args.decision, actor=actor, reason=getattr(args, "reason", None))
    except ExpiredError:
        # Recorded as expired, so the audit log shows the question lapsed unanswered.
        store.decide(approval.id, "expired", by="clock", reason=f"{args.decision} by {actor} came too late")
        raise


def _approve(args, store, approval, actor):
    """Runs on a worker thread: it prompts and writes to the store. None: the person said no."""
    if not _show_card_and_check(args, approval):
        return None
    decided = _record(args, store, approval, actor)
    if not args.json:
        console().print(f"approved {decided.step} ({decided.fingerprint[:19]}…) as {actor}.", style="green")
    return decided


def _reject(args, store, approval, actor) -> int:
    _show_card_and_check(args, approval)
    decided = _record(args, store, approval, actor)
    if store.set_run_state(args.run, "declined", expected=("parked",)):
        store.append_event(args.run, "declined", actor=actor)
    if args.json:
        sys.stdout.write(json.dumps({"run": args.run, "state": "declined", "step": decided.step}) + "\n")
    else:
        console().print(f"rejected {decided.step}; run {args.run} is declined and nothing more runs.", style="yellow")
    return EXIT_DECLINED


def _owner_alive(store, run_id: str) -> bool:
    for ev in reversed(store.events(run_id)):
        if ev.kind in ("started", "resumed"):
            pid = json.loads(ev.data_json or "{}").get("pid")
            if not pid:
                return False
            try:
                os.kill(pid, 0)
            except OSError:
                return False
            return pid != os.getpid()
    return False


def resume_command(args, prespawned=None) -> int:
    import trio

    from ..policy import load_policy

    store = _store(args)
    run = store.get_run(args.run)
    take_over = run.state == "running" and not _owner_alive(store, args.run)
    policy = load_policy(args.policy)
    servers = _servers(args)

    async def resume():
        if run.state not in ("parked", "running"):
            return await drive_run(args.run, store=store, servers=servers, policy=policy, take_over=take_over)
        # As for approve: servers started before trio was imported are taken over here.
        async with open_run_servers(store, run, servers, prespawned=prespawned) as hub:
            return await drive_run(args.run, store=store, servers=servers, policy=policy, take_over=take_over, hub=hub)

    outcome = trio.run(resume)
    return _report(args, outcome, _plan_of(outcome, run))


def runs_command(args) -> int:
    store = _store(args)
    runs = store.list_runs()
    if args.json:
        sys.stdout.write(json.dumps([{"run": r.id, "recipe": r.recipe_name, "state": r.state, "started_by": r.started_by, "created_at": r.created_at, "ended_at": r.ended_at} for r in runs], indent=2) + "\n")
        return 0
    from rich.table import Table

    t = Table("run", "recipe", "state", "started by", "started")
    import time

    for r in runs:
        t.add_row(r.id, r.recipe_name, r.state, r.started_by, time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(r.created_at)))
    console().print(t)
    return 0


def show_command(args) -> int:
    from .engine import check_stored_plan

    store = _store(args)
    run = store.get_run(args.run)
    plan = check_stored_plan(run.plan_json, run.plan_fingerprint)
    nodes = store.get_nodes(args.run)
    effects = store.effects(args.run)
    approvals = store.approvals(args.run)
    times = {k: (v.started_at, v.ended_at) for k, v in nodes.items()}
    stats = together_stats(plan, times)
    rows = []
    for n in plan.nodes:
        rec = nodes.get(n.id)
        st, s, e = (rec.state, rec.started_at, rec.ended_at) if rec else ("pending", None, None)
        eff = next((x for x in effects if x.step == n.id), None)
        if eff is not None and eff.state == "unknown":
            st = "unknown"
        rows.append({"node": n.id, "kind": type(n).__struct_config__.tag, "state": st, "started_at": s, "ended_at": e, "duration_s": (e - s) if s and e else None, "error": rec.error if rec else None})
    audit = []
    for eff in effects:
        appr = next((a for a in approvals if a.id == eff.approval_id), None)
        audit.append({
            "step": eff.step,
            "state": eff.state,
            "card_text": appr.card_text if appr else None,
            "payload": json.loads(eff.payload_json),
            "fingerprint": eff.fingerprint,
            "idempotency_key": eff.idempotency_key,
            "decided_by": appr.decided_by if appr else None,
            "decided_at": appr.decided_at if appr else None,
            "result": json.loads(eff.result_json) if eff.result_json else None,
            "error": eff.error,
            "settled_by": eff.settled_by,
        })
    if args.json:
        doc = {
            "run": run.id, "recipe": run.recipe_name, "state": run.state, "started_by": run.started_by,
            "plan_fingerprint": run.plan_fingerprint, "nodes": rows, "together": stats,
            "approvals": [{"id": a.id, "step": a.step, "state": a.state, "fingerprint": a.fingerprint, "decided_by": a.decided_by, "decided_at": a.decided_at, "expires_at": a.expires_at} for a in approvals],
            "effects": audit,
        }
        sys.stdout.write(json.dumps(doc, indent=2, sort_keys=True, default=str) + "\n")
        return 0
    from rich.table import Table

    con = console()
    con.print(f"[bold]{run.recipe_name}[/] run {run.id}: [bold]{run.state}[/] (started by {run.started_by})")
    t = Table("node", "kind", "state", "duration", "note")
    for r in rows:
        dur = f"{r['duration_s'] * 1000:.0f} ms" if r["duration_s"] is not None else ""
        t.add_row(r["node"], r["kind"], r["state"], dur, (r["error"] or "")[:80])
    con.print(t)
    for line in _stats_lines(stats):
        con.print(line)
    for a in approvals:
        con.print(f"approval {a.step}: {a.state}" + (f" by {a.decided_by}" if a.decided_by else "") + f" ({a.fingerprint[:19]}…)")
    for item in audit:
        if item["state"] == "unknown":
            con.print(
                f"⚠ effect {item['step']} is unknown: the process ended while it ran, so nobody knows if it happened. Check the target, then settle it:\n"
                f"  recipe reconcile {run.id} {item['step']} --executed   (it happened)\n"
                f"  recipe reconcile {run.id} {item['step']} --not-executed   (it did not)",
                style="yellow",
            )
    if args.audit:
        for item in audit:
            con.print(f"\n[bold]effect {item['step']}[/]: {item['state']}")
            con.print(item["card_text"] or "", markup=False)
            con.print(f"decided by {item['decided_by']} at {item['decided_at']}", markup=False)
            con.print("payload: " + json.dumps(item["payload"], sort_keys=True), markup=False)
            con.print("result: " + json.dumps(item["result"], sort_keys=True, default=str), markup=False)
    return 0


def reconcile_command(args) -> int:
    store = _store(args)
    store.get_run(args.run)
    eff = store.settle_effect(args.run, args.step, bool(args.executed), args.actor or os_user())
    console().print(f"effect {args.step} of run {args.run} settled as {eff.state}.")
    return 0
