"""How the ``recipe`` command shows runs: live progress, the end of a run, a run's record, the list.

Everything printed here comes from the run API's documents (``reports.py``);
every string that may hold a server's words goes through ``printable``.
"""

from __future__ import annotations

import json
import sys
from datetime import datetime
from typing import Any, ClassVar

import msgspec

from ..errors import EXIT_DECLINED, EXIT_FAILED, EXIT_OK, EXIT_PARKED
from ..osuser import os_user
from ..reports import EffectView, RunReport, RunSummary, RunView, Together
from ..text_safety import json_text, visible
from ..tools.results import describe_block
from .term import cell, console, json_safe, out, say

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
    out(json_safe(msgspec.json.format(msgspec.json.encode(doc, order="deterministic"), indent=2).decode()) + "\n")


class Progress:
    """Live rows while a run moves: one per node, updated in place on a terminal."""

    ICONS: ClassVar[dict[str, str]] = {
        "running": "[cyan]…[/]",
        "succeeded": "[green]✓[/]",
        "failed": "[red]✗[/]",
        "waiting": "[yellow]⚠ waiting[/]",
        "cancelled": "[dim]cancelled[/]",
        "skipped": "[dim]skipped[/]",
        "rejected": "[red]rejected[/]",
        "unknown": "[red]unknown[/]",
    }

    def __init__(self, node_ids: list[str], enabled: bool):
        self.order = node_ids
        self.enabled = enabled
        self.states: dict[str, str] = {}
        self.heard: dict[str, dict[str, Any]] = {}
        self.live: Any = None

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

    __call__ = change
    """Passed as a run's ``on_change``: it hears every node state, and (``progress``) a server's progress."""

    def progress(self, nid: str, doc: dict[str, Any]) -> None:
        """A server's progress on ``nid``'s call, shown on its row while it runs."""
        self.heard[nid] = doc
        if self.live is not None:
            self.live.update(self._render())

    def _render(self) -> Any:
        from rich.table import Table

        t = Table(box=None, show_header=False, padding=(0, 1))
        for nid in self.order:
            st = self.states.get(nid)
            if st is not None:
                icon = self.ICONS.get(st) or cell(st)
                if st == "running" and nid in self.heard:
                    t.add_row(cell(nid), icon, cell(progress_text(self.heard[nid])))
                else:
                    t.add_row(cell(nid), icon)
        return t


def _asks(payload: Any) -> bool:
    """A server's question (answered), not an approval: its ``reason`` is the answer."""
    return isinstance(payload, dict) and "elicitation" in payload


def progress_text(doc: dict[str, Any]) -> str:
    """A server's progress as a person reads it: ``3/10 step 3`` (or ``3`` with no total)."""
    value, total = doc.get("progress"), doc.get("total")
    amount = f"{value:g}/{total:g}" if isinstance(total, (int, float)) else f"{value:g}"
    return amount + (f" {doc['message']}" if doc.get("message") else "")


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.0f} ms" if seconds < 10 else f"{seconds:.1f} s"


def together_lines(stats: list[Together]) -> list[str]:
    """One line per together: its wall-clock against its branches' own work. Time spent
    queued for a thread is not work and is shown apart; a failed or cancelled branch is
    named as such, never as the slowest."""
    lines = []
    for s in stats:
        line = f"{s.join}: wall {_ms(s.wall_s)} · work of {s.branches} branch{'es' if s.branches != 1 else ''} {_ms(s.sum_s)}"
        if s.sum_s > 0:
            line += f" · wall/work {s.wall_s / s.sum_s:.2f}"
        if s.slowest:
            line += f" · slowest {s.slowest} {_ms(s.slowest_s)}"
        if s.queued_s >= 0.001:
            line += f" · queued {_ms(s.queued_s)} in all (waiting for a thread or a turn: not work)"
        if s.cancelled:
            line += f" · cancelled: {', '.join(s.cancelled)}"
        if s.failed:
            line += f" · failed: {', '.join(s.failed)}"
        if s.unfinished:
            line += f" · not finished: {', '.join(s.unfinished)}"
        lines.append(line)
    return lines


def _value(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)


def changed_lines(change: dict) -> list[str]:
    """What a ``check:`` read says now against what it said when the question was asked:
    the fields that differ when both are objects, else both values whole."""
    was, now = change.get("was"), change.get("now")
    if isinstance(was, dict) and isinstance(now, dict):
        keys = [k for k in sorted(set(was) | set(now), key=str) if was.get(k, _MISSING) != now.get(k, _MISSING)]
        if keys:
            return [
                f"  {k}: {_value(was[k]) if k in was else '(absent)'} -> {_value(now[k]) if k in now else '(absent)'}"
                for k in keys
            ]
    return [f"  was: {_value(was)}", f"  now: {_value(now)}"]


_MISSING = object()


def report(rep: RunReport, *, json_out: bool = False, store_flag: str = "", actor: str | None = None) -> int:
    """The end of `run`, `approve` or `resume`; returns the exit code. ``actor``: who this
    command acted as (``--as``), so the commands it prints act as them too."""
    if json_out:
        _json(rep)
        return EXIT_OK if rep.queued else EXIT_FOR.get(rep.state, EXIT_FAILED)
    if rep.queued:
        say(
            f"run {rep.run} is queued for the workers (`recipe worker`), which drive it on; follow it with: recipe show {rep.run}{store_flag}",
            style="green",
        )
        return EXIT_OK
    for line in together_lines(rep.together):
        say(line, style="dim")
    for step, change in rep.asked_again.items():
        if change.get("why") == "defaults":
            fields = ", ".join(visible(str(f)) for f in change.get("fields", []))
            say(
                f"⚠ `{step}` did not run: its server's schema now gives a default to a field its card did not show ({fields}), so nothing was done and it asks again, the card showing it.",
                style="yellow",
            )
            continue
        say(
            f"⚠ `{step}` did not run: its check reads differently from when the question was asked, so nothing was done and it asks again.\n"
            + "\n".join(changed_lines(change)),
            style="yellow",
        )
    if rep.driven_by:
        say(
            f"run {rep.run} is being driven by {rep.driven_by}; it picks up this decision when it next stops.",
            style="yellow",
        )
        return EXIT_OK
    if rep.state == "parked":
        for a in rep.pending:
            say("")
            if a.tampered:  # no card, nothing to decide: the refusal in its place
                say(a.refusal or "", style="bold red")
                say(f"cancel:   recipe cancel {rep.run}{store_flag}")
                continue
            say(a.card)
            if a.asks is not None:  # a server's question: answered, not approved
                for as_flag in _as_flags(a.approvers, actor):
                    say(
                        f"answer:   recipe answer {rep.run} {a.step} --fields '{{...}}' --fingerprint {a.fingerprint}{as_flag}{store_flag}",
                        style="bold",
                    )
                    say(f"decline:  recipe answer {rep.run} {a.step} --decline{as_flag}{store_flag}")
                continue
            for as_flag in _as_flags(a.approvers, actor):
                say(
                    f"approve:  recipe approve {rep.run} {a.step} --fingerprint {a.fingerprint}{as_flag}{_yes()}{store_flag}",
                    style="bold",
                )
                say(f"reject:   recipe reject {rep.run} {a.step}{as_flag}{store_flag}")
            if a.approvers and os_user() not in a.approvers:
                say("          (--as NAME needs NAME's approver secret in $VODOU_APPROVER_TOKEN)", style="dim")
        for step, why in rep.unknown.items():
            say(
                f"⚠ {step}: {why}\n  settle: recipe reconcile {rep.run} {step} --executed{store_flag}   (it happened)\n"
                f"          recipe reconcile {rep.run} {step} --not-executed{store_flag}   (it did not)",
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
        interrupted(rep.run, store_flag)
    else:
        say(f"run {rep.run} {rep.state}.", style="red")
        for step, why in rep.errors.items():
            say(f"  {step}: {why}", style="red")
    return EXIT_FOR.get(rep.state, EXIT_FAILED)


def _as_flags(approvers: list[str], actor: str | None) -> list[str]:
    """How the printed commands say who decides: nothing when this user may (no approvers
    named, or one of them), ``--as`` the approver this command acted as, else one line per
    approver (the first few): the printed line must work as printed."""
    me = os_user()
    if not approvers or me in approvers:
        return [""]
    if actor in approvers:
        return [f" --as {actor}"]
    return [f" --as {name}" for name in approvers[:3]]


def _yes() -> str:
    """``--yes`` where ``approve`` would need it to run as printed: without a terminal."""
    return "" if sys.stdin.isatty() and sys.stdout.isatty() else " --yes"


def queued_run(run: str, *, json_out: bool = False, store_flag: str = "") -> None:
    """`recipe run --queue`: the run id (alone on stdout), and how to follow it."""
    if json_out:
        _json({"run": run, "queued": True})
        return
    out(run + "\n")
    say(
        f"queued: a worker (`recipe worker`) starts run {run} and drives it until it parks or ends; follow it with: recipe show {run}{store_flag}",
        err=True,
    )


def interrupted(run: str, store_flag: str = "", *, err: bool = False) -> None:
    say(
        f"run {run} was interrupted; nothing is lost. Continue it with: recipe resume {run}{store_flag}",
        style="yellow",
        err=err,
    )


def runs_table(runs: list[RunSummary], *, json_out: bool = False, store_flag: str = "", filtered: bool = False) -> None:
    if json_out:
        _json(runs)
        return
    if not runs:
        say("no runs match." if filtered else "no runs yet.")
        return
    con = console()
    rows = [
        (r.run, r.state + (f" ({r.driven_by})" if r.driven_by else ""), r.recipe, r.started_by, when(r.created_at))
        for r in runs
    ]
    longest = max(len(r.run) for r in runs)
    wide = (
        longest
        + max(len(row[1]) for row in rows)
        + max(len(row[2]) for row in rows)
        + max(len(row[3]) for row in rows)
        + 25
        + 16
    )
    if con.width >= wide:
        from rich.table import Table

        t = Table()
        t.add_column("run", min_width=longest, no_wrap=True)  # a run id is never cut: it is what people copy
        t.add_column("state", no_wrap=True)
        for name in ("recipe", "started by", "started"):
            t.add_column(name, overflow="fold")
        for row in rows:
            t.add_row(*(cell(v) for v in row))
        con.print(t, soft_wrap=True)
    else:
        # A narrow terminal: one run per two lines, the id whole on the first.
        for run, state, recipe, by, started in rows:
            say(f"{run}  {state}")
            say(f"  {recipe} · started by {by} at {started}", style="dim")
    for r in runs:
        if r.state == "interrupted":
            say(f"{r.run} was interrupted; continue it with: recipe resume {r.run}{store_flag}", style="yellow")


def _result(value: Any, full: bool, limit: int = 300) -> str:
    """A step's result as text: whole with ``full``, else cut to ``limit`` characters (saying so)."""
    text = value if isinstance(value, str) else _value(value)
    if full or len(text) <= limit:
        return text
    return text[:limit] + f"… ({len(text)} characters; --full shows all)"


def _block(head: str, text: str) -> None:
    """``head: text`` on one line, or ``head:`` and the text indented under it when it has several."""
    if "\n" in text:
        say(f"{head}:")
        say("\n".join("  " + line for line in text.splitlines()))
    else:
        say(f"{head}: {text}")


def show(
    view: RunView, *, json_out: bool = False, audit: bool = False, full: bool = False, store_flag: str = ""
) -> None:
    if json_out:
        _json(view)
        return
    from rich.table import Table

    con = console()
    say(
        f"{view.recipe} run {view.run}: {view.state} (started by {view.started_by} at {when(view.created_at)})",
        style="bold",
    )
    if view.error:
        say(f"  {view.error}", style="red")
    t = Table("node", "kind", "state", "work", "queued", "note")
    for n in view.nodes:
        gate = n.kind in ("approval", "question", "join")  # a person's time, or none: not work
        dur = _ms(n.ended_at - n.started_at) if n.started_at and n.ended_at and not gate else ""
        queued = (
            _ms(n.started_at - n.ready_at)
            if n.ready_at and n.started_at and n.started_at - n.ready_at >= 0.001 and not gate
            else ""
        )
        note = n.error or ""
        if n.progress is not None and not note:
            note = "progress " + progress_text(n.progress)
        t.add_row(cell(n.node), cell(n.kind), cell(n.state), dur, queued, cell(note))
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
                _block(n.node, _result(n.output, full))
            if n.content:
                say(f"  content ({len(n.content)} block{'' if len(n.content) == 1 else 's'}; --json has them whole):")
                for block in n.content:
                    say(f"    {describe_block(block)}")
    if view.approvals:
        say("\napprovals:", style="bold")
    for a in view.approvals:
        line = f"{a.step}: {'answered' if a.state == 'approved' and _asks(a.payload) else a.state}"
        if a.state in ("approved", "rejected"):
            line += f" by {a.decided_by or 'someone unrecorded'}"
        if a.state == "pending":
            line += f" since {when(a.asked_at)}" + (f", expires {when(a.expires_at)}" if a.expires_at else "")
        elif a.decided_at is not None:
            line += f" at {when(a.decided_at)}"
        if a.reason:
            line += f", {'answer' if _asks(a.payload) else 'reason'}: {a.reason}"
        say(line + f"  {a.fingerprint}")
        if a.state == "pending" and (
            a.card or a.refusal
        ):  # rendered from the frozen payload just now, never the stored text
            say("\n".join("  " + row for row in (a.card or a.refusal or "").splitlines()))
    for e in view.effects:
        if e.state == "unknown":
            say(
                f"⚠ effect {e.step} is unknown: {e.error or 'nobody knows if it happened'}\n"
                f"  recipe reconcile {view.run} {e.step} --executed{store_flag}   (it happened)\n"
                f"  recipe reconcile {view.run} {e.step} --not-executed{store_flag}   (it did not)",
                style="yellow",
            )
    if view.state == "interrupted":
        interrupted(view.run, store_flag)
    if audit:
        _audit(view)


def _audit(view: RunView) -> None:
    if not view.effects:
        say("\nno effect was executed in this run.", style="dim")
    for e in view.effects:
        say(f"\neffect {e.step}: {e.state}", style="bold")
        say(decision_line(e))
        if e.card:
            say("card (rendered again from the approved payload, checked against its fingerprint):")
            say("\n".join("  " + line for line in e.card.splitlines()))
        say(f"fingerprint: {e.fingerprint}")
        say(f"idempotency key: {e.idempotency_key}")
        say(f"started: {when(e.started_at)}  ended: {when(e.ended_at)}")
        say("payload: " + json_text(e.payload, indent=None))
        say("result: " + _value(e.result))
        if e.error:
            say(f"error: {e.error}")
        if e.settled_by:
            happened = "it happened" if e.state == "executed" else "it did not happen"
            say(f"settled by {e.settled_by}: {happened}")


def decision_line(e: EffectView) -> str:
    """Who let this effect run: a person (who, when), or the recipe's `without asking`."""
    if e.approval is None:
        return "ran without asking: the recipe says `without asking` for this step, and the policy allowed it"
    if e.decided_by is None:
        return f"approval {e.approval}: no decision on record"
    return f"decided by {e.decided_by} at {when(e.decided_at)}: approved"
