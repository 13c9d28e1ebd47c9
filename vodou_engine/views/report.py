"""How the ``recipe`` command shows runs: live progress, the end of a run, a run's record, the list.

Everything printed here comes from the run API's documents (``reports.py``);
every string that may hold a server's words goes through ``printable``.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

import msgspec

from ..errors import EXIT_DECLINED, EXIT_FAILED, EXIT_OK, EXIT_PARKED
from ..reports import RunReport, RunSummary, RunView, Together
from .term import console, out, printable, say

EXIT_FOR = {
    "succeeded": EXIT_OK,
    "failed": EXIT_FAILED,
    "parked": EXIT_PARKED,
    "declined": EXIT_DECLINED,
    "cancelled": EXIT_FAILED,
    "interrupted": EXIT_FAILED,
    "running": EXIT_OK,
}
"""A run's state as the command's exit code (docs/exit-codes.md)."""


def when(ts: float | None) -> str:
    """ISO 8601 in local time, to the second."""
    if ts is None:
        return "—"
    return datetime.fromtimestamp(ts).astimezone().isoformat(timespec="seconds")


def _json(doc: Any) -> None:
    out(msgspec.json.format(msgspec.json.encode(doc, order="deterministic"), indent=2).decode() + "\n")


class Progress:
    """Live rows while a run moves: one per node, updated in place on a terminal."""

    ICONS = {"running": "[cyan]…[/]", "succeeded": "[green]✓[/]", "failed": "[red]✗[/]", "waiting": "[yellow]⚠ waiting[/]", "cancelled": "[dim]cancelled[/]", "skipped": "[dim]skipped[/]", "rejected": "[red]rejected[/]", "unknown": "[red]unknown[/]"}

    def __init__(self, node_ids: list[str], enabled: bool):
        self.order = node_ids
        self.enabled = enabled
        self.states: dict[str, str] = {}
        self.live = None

    def __enter__(self) -> Progress:
        if self.enabled:
            from rich.live import Live

            self.live = Live(self._render(), console=console(True), refresh_per_second=12, transient=False)
            self.live.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.live is not None:
            self.live.update(self._render())
            self.live.__exit__(*exc)

    def change(self, nid: str, state: str) -> None:
        self.states[nid] = state
        if self.live is not None:
            self.live.update(self._render())

    def _render(self) -> Any:
        from rich.table import Table

        t = Table(box=None, show_header=False, padding=(0, 1))
        for nid in self.order:
            st = self.states.get(nid)
            if st is not None:
                t.add_row(printable(nid), self.ICONS.get(st, st))
        return t


def together_lines(stats: list[Together]) -> list[str]:
    lines = []
    for s in stats:
        line = f"{s.join}: wall {s.wall_s * 1000:.0f} ms · work of {s.branches} branches {s.sum_s * 1000:.0f} ms"
        if s.sum_s > 0:
            line += f" · wall/work {s.wall_s / s.sum_s:.2f}"
        if s.slowest:
            line += f" · slowest {s.slowest} {s.slowest_s * 1000:.0f} ms"
        if s.queued_s >= 0.001:
            line += f" · queued for threads {s.queued_s * 1000:.0f} ms"
        if s.cancelled:
            line += f" · cancelled: {', '.join(s.cancelled)}"
        if s.failed:
            line += f" · failed: {', '.join(s.failed)}"
        lines.append(line)
    return lines


def report(rep: RunReport, *, json_out: bool = False, store_flag: str = "") -> int:
    """The end of `run`, `approve` or `resume`; returns the exit code."""
    if json_out:
        _json(rep)
        return EXIT_FOR.get(rep.state, EXIT_FAILED)
    for line in together_lines(rep.together):
        say(line, style="dim")
    for step, change in getattr(rep, "asked_again", {}).items():
        say(f"⚠ the check of `{step}` reads differently now, so it was asked again:\n  was: {json.dumps(change.get('was'), sort_keys=True, default=str)}\n  now: {json.dumps(change.get('now'), sort_keys=True, default=str)}", style="yellow")
    if rep.driven_by:
        say(f"run {rep.run} is being driven by {rep.driven_by}; it picks up this decision when it next stops.", style="yellow")
        return EXIT_OK
    if rep.state == "parked":
        for a in rep.pending:
            say("")
            say(a.card)
            say(f"approve:  recipe approve {rep.run} {a.step} --fingerprint {a.fingerprint}{store_flag}", style="bold")
            say(f"reject:   recipe reject {rep.run} {a.step}{store_flag}")
        for step, why in rep.unknown.items():
            say(
                f"⚠ {step}: {why}\n  settle: recipe reconcile {rep.run} {step} --executed   (it happened)\n"
                f"          recipe reconcile {rep.run} {step} --not-executed   (it did not){store_flag}",
                style="yellow",
            )
        say(f"run {rep.run} is parked, waiting for a person.", style="yellow")
    elif rep.state == "succeeded":
        if rep.text:
            say("")
            say(rep.text)
            say("")
        say(f"run {rep.run} succeeded.", style="green")
    elif rep.state == "declined":
        say(f"run {rep.run} was declined; nothing after the refusal ran.", style="yellow")
    elif rep.state == "interrupted":
        say(f"run {rep.run} was interrupted; nothing is lost. Continue it with: recipe resume {rep.run}{store_flag}", style="yellow")
    else:
        say(f"run {rep.run} {rep.state}.", style="red")
        for step, why in rep.errors.items():
            say(f"  {step}: {why}", style="red")
    return EXIT_FOR.get(rep.state, EXIT_FAILED)


def runs_table(runs: list[RunSummary], *, json_out: bool = False, store_flag: str = "") -> None:
    if json_out:
        _json(runs)
        return
    from rich.table import Table

    t = Table()
    longest = max((len(r.run) for r in runs), default=3)
    t.add_column("run", min_width=longest, no_wrap=True)  # a run id is never cut: it is what people copy
    for name in ("recipe", "state", "started by", "started"):
        t.add_column(name, overflow="fold")
    for r in runs:
        state = r.state + (f" ({r.driven_by})" if r.driven_by else "")
        t.add_row(r.run, printable(r.recipe), state, printable(r.started_by), when(r.created_at))
    con = console()
    con.print(t, soft_wrap=True)
    for r in runs:
        if r.state == "interrupted":
            say(f"{r.run} was interrupted; continue it with: recipe resume {r.run}{store_flag}", style="yellow")


def _summary(value: Any, limit: int = 300) -> str:
    if isinstance(value, str):
        text = value
    else:
        text = json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)
    return text if len(text) <= limit else text[:limit] + f"… ({len(text)} characters; --full shows all)"


def show(view: RunView, *, json_out: bool = False, audit: bool = False, full: bool = False, store_flag: str = "") -> None:
    if json_out:
        _json(view)
        return
    from rich.table import Table

    con = console()
    say(f"{view.recipe} run {view.run}: {view.state} (started by {view.started_by} at {when(view.created_at)})", style="bold")
    if view.error:
        say(f"  {view.error}", style="red")
    t = Table("node", "kind", "state", "work", "queued", "note")
    for n in view.nodes:
        dur = f"{(n.ended_at - n.started_at) * 1000:.0f} ms" if n.started_at and n.ended_at else ""
        queued = f"{(n.started_at - n.ready_at) * 1000:.0f} ms" if n.ready_at and n.started_at and n.started_at - n.ready_at >= 0.001 else ""
        t.add_row(n.node, n.kind, n.state, dur, queued, printable(n.error or ""))
    con.print(t, soft_wrap=True)
    for line in together_lines(view.together):
        say(line)
    # what the run produced: written text in full, read results summarised
    produced = [n for n in view.nodes if n.has_output and n.kind in ("tool", "write")]
    if produced:
        say("\nresults:", style="bold")
        for n in produced:
            if n.kind == "write" and isinstance(n.output, str):
                say(f"{n.node} (written):")
                say("\n".join("  " + line for line in n.output.splitlines()))
            else:
                say(f"{n.node}: " + (json.dumps(n.output, sort_keys=True, ensure_ascii=False, default=str) if full else _summary(n.output)))
    for a in view.approvals:
        line = f"approval {a.step}: {a.state}"
        if a.decided_by and a.state in ("approved", "rejected"):
            line += f" by {a.decided_by} at {when(a.decided_at)}"
        elif a.state in ("expired", "withdrawn", "superseded"):
            line += f" at {when(a.decided_at)}"
        if a.reason:
            line += f" ({a.reason})"
        say(line + f"  {a.fingerprint}")
    for e in view.effects:
        if e.state == "unknown":
            say(
                f"⚠ effect {e.step} is unknown: {e.error or 'nobody knows if it happened'}\n"
                f"  recipe reconcile {view.run} {e.step} --executed   (it happened)\n"
                f"  recipe reconcile {view.run} {e.step} --not-executed   (it did not){store_flag}",
                style="yellow",
            )
    if view.state == "interrupted":
        say(f"run {view.run} was interrupted; continue it with: recipe resume {view.run}{store_flag}", style="yellow")
    if audit:
        for e in view.effects:
            say(f"\neffect {e.step}: {e.state}", style="bold")
            if e.approval is None:
                say("ran without asking: the recipe says `without asking` for this step, and the policy allowed it")
            else:
                say(e.card or "")
                say(f"decided by {e.decided_by or 'nobody'} at {when(e.decided_at)}")
            say(f"fingerprint: {e.fingerprint}")
            say(f"idempotency key: {e.idempotency_key}")
            say(f"started: {when(e.started_at)}  ended: {when(e.ended_at)}")
            say("payload: " + json.dumps(e.payload, sort_keys=True, ensure_ascii=False))
            say("result: " + json.dumps(e.result, sort_keys=True, ensure_ascii=False, default=str))
            if e.error:
                say(f"error: {e.error}")
            if e.settled_by:
                say(f"settled by {e.settled_by}")
