"""What each page shows, as plain data: built on a worker thread from the run API.

Nothing here decides anything; it reads what the run API reports
(``Runs.show``, ``pending``, ``list``, ``saved_recipes``, ``schedules``) and
the inbox's own store query, and shapes it for the templates (times as
words, JSON pretty-printed, bars for the charts).
"""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from typing import Any

import msgspec

from ..text_safety import json_text, shown
from . import decide
from .graph_svg import svg as graph_svg
from .step_views import asked_fields, content_item, progress_line

MAX_SHOWN = 64 * 1024
"""A step output longer than this (pretty-printed) is cut on the page."""


def visible(text: str) -> str:
    """Every string a page prints: characters that could hide or reorder what a person reads
    (controls, bidirectional and format characters, zero-width and tag characters,
    separators, spaces other than U+0020) shown as their markers, ``⟨U+200B⟩``, exactly as on
    the terminal (``text_safety.shown``)."""
    return shown(text)


# --- words for times ------------------------------------------------------------------------------


def span(seconds: float) -> str:
    s = abs(seconds)
    if s < 60:
        return f"{max(1, round(s))} s"
    if s < 3600:
        return f"{round(s / 60)} min"
    if s < 86400:
        h, m = divmod(round(s / 60), 60)
        return f"{h} h" + (f" {m} min" if m else "")
    d, h = divmod(round(s / 3600), 24)
    return f"{d} d" + (f" {h} h" if h else "")


def countdown(expires_at: float | None, now: float) -> str:
    if expires_at is None:
        return "does not expire"
    left = expires_at - now
    return f"expires in {span(left)}" if left > 0 else f"expired {span(left)} ago"


def ago(ts: float | None, now: float) -> str:
    if ts is None:
        return ""
    d = now - ts
    return "just now" if d < 1 else (f"{span(d)} ago" if d > 0 else f"in {span(d)}")


def clock(ts: float | None) -> str:
    if ts is None:
        return ""
    return time.strftime("%Y-%m-%d %H:%M:%S %Z", time.localtime(ts))


def iso(ts: float | None) -> str:
    if ts is None:
        return ""
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="seconds")


def duration(seconds: float | None) -> str:
    if seconds is None:
        return ""
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 60:
        return f"{seconds:.2f} s"
    return span(seconds)


def pretty(value: Any) -> str:
    """A value as JSON, rendered as every card renders it (``text_safety.json_text``); a
    step's output longer than :data:`MAX_SHOWN` is cut, saying so."""
    text = json_text(value)
    if len(text) > MAX_SHOWN:
        text = (
            text[:MAX_SHOWN] + f"\n… ({len(text) - MAX_SHOWN} more characters; `recipe show RUN --json` has all of it)"
        )
    return text


def _decode(raw: str | bytes | None) -> Any:
    return None if raw is None else msgspec.json.decode(raw)


# --- the inbox --------------------------------------------------------------------------------------


def inbox(runs: Any, me: str, now: float) -> dict[str, Any]:
    """Pending questions: those ``me`` may decide, the others, and those that no longer give
    their fingerprint (the store was edited: listed for everyone, with who may decide left
    out, since that is part of what was edited)."""
    mine: list[dict[str, Any]] = []
    others: list[dict[str, Any]] = []
    tampered: list[dict[str, Any]] = []
    dec = msgspec.json.Decoder(list[str])
    store = runs.store(create=False, readonly=True)
    rows = store.inbox()
    seen: dict[str, Any] = {}
    edited = _tampered(store, rows, seen)
    said = _summaries(rows, edited, seen)
    for row in rows:
        if row.approval_id in edited:
            tampered.append(
                {
                    "run": row.run_id,
                    "step": row.step,
                    "recipe": row.recipe_name,
                    "started_by": row.started_by,
                    "refusal": edited[row.approval_id],
                }
            )
            continue
        approvers = dec.decode(row.approvers_json) if row.approvers_json else []
        item = {
            "run": row.run_id,
            "step": row.step,
            "recipe": row.recipe_name,
            "started_by": row.started_by,
            "schedule": row.schedule,
            "asked": ago(row.asked_at, now),
            "countdown": countdown(row.expires_at, now),
            "expired": row.expires_at is not None and row.expires_at <= now,
            "approvers": approvers,
            "fingerprint": row.fingerprint,
            **said.get(row.approval_id, {"does": None, "first": None}),
        }
        (mine if not approvers or me in approvers else others).append(item)
    mine.reverse()  # newest first
    others.reverse()
    lapsed: list[dict[str, Any]] = []
    waiting: list[dict[str, Any]] = []
    for r, name, by, at in store.parked_unasked():
        why = parked_why(store, r, now)
        item = {"run": r, "recipe": name, "started_by": by, "since": ago(at, now), "why": why}
        (lapsed if why["kind"] == "expired" else waiting).append(item)
    return {"mine": mine, "others": others, "tampered": tampered, "lapsed": lapsed, "waiting": waiting}


def parked_why(store: Any, run_id: str, now: float) -> dict[str, Any]:
    """Why a parked run has no open question, from what its record says (never a guess):
    ``approved`` (decided, and waiting for a process to drive it on: on a PostgreSQL store
    a worker, with what each worker that could not drive it said), ``unknown`` (an effect
    to settle), ``expired`` (nobody decided in time), else ``other``."""
    latest: dict[str, Any] = {}
    for a in store.approvals(run_id):
        if a.node_id not in latest or a.asked_at > latest[a.node_id].asked_at:
            latest[a.node_id] = a
    doubt = sorted(e.step for e in store.effects(run_id) if e.state in ("unknown", "executing"))
    approved = [a for a in latest.values() if a.state == "approved"]
    if doubt:
        return {
            "kind": "unknown",
            "text": f"The outcome of {', '.join(doubt)} is unknown: check the target, then settle it (recipe reconcile) before the run goes on.",
            "detail": [],
        }
    if approved:
        since = max(a.decided_at or 0 for a in approved)
        who = ", ".join(sorted({a.decided_by for a in approved if a.decided_by}))
        workers = getattr(store, "kind", None) == "postgresql"
        events = store.events(run_id)
        decided = max((i for i, e in enumerate(events) if e.kind == "approval.decided"), default=-1)
        tried = [
            e for e in events[decided + 1 :] if e.kind == "handed_back"
        ]  # since the last decision, in the log's order
        detail = []
        for e in tried:
            data = _decode(e.data_json) or {}
            detail.append(f"{e.actor or 'a worker'} could not drive it ({ago(e.ts, now)}): {data.get('reason', '')}")
        text = f"Approved by {who or 'a person'} {ago(since, now)}; " + (
            "waiting for a worker that can drive it on." if workers else "waiting to be driven on: resume it."
        )
        if tried:
            text = f"Approved by {who or 'a person'} {ago(since, now)}; waiting for a worker whose servers and policy are the ones this run was started with (the decision stands)."
        return {"kind": "approved", "text": text, "detail": detail}
    if any(a.state == "expired" for a in latest.values()):
        return {"kind": "expired", "text": "The question expired before anyone decided it.", "detail": []}
    return {"kind": "other", "text": "No question is open.", "detail": []}


def _tampered(store: Any, rows: list[Any], seen: dict[str, Any] | None = None) -> dict[str, str]:
    """Of the inbox's questions, those whose stored row no longer gives its fingerprint (or
    whose run's plan was edited): approval id -> the refusal. What the inbox lists beside a
    question (who may decide, its expiry) is read from the same row, so it is checked first.
    One read of the pending questions, one of each run, and each distinct plan decoded once:
    the runs of one recipe share it. ``seen`` gets what was read (``pending``: the questions
    by id; ``plans``: each run's plan, or the refusal of an edited one) for :func:`_summaries`."""
    from ..binding import decode_bindings
    from ..cards import REFUSED, check_untampered
    from ..errors import VodouError
    from ..runtime.plans import check_stored_plan

    pending = {a.id: a for a in store.pending_approvals()}
    by_run: dict[str, list[Any]] = {}
    run_plans: dict[str, Any] = {}
    for row in rows:
        if row.approval_id in pending:  # else decided since the inbox was read
            by_run.setdefault(row.run_id, []).append(pending[row.approval_id])
    plans: dict[tuple[str, str], Any] = {}
    out: dict[str, str] = {}
    for run_id, questions in by_run.items():
        run = store.get_run(run_id)
        key = (run.plan_json, run.plan_fingerprint)
        if key not in plans:
            try:
                plans[key] = check_stored_plan(run.plan_json, run.plan_fingerprint)
            except VodouError as exc:  # an edited plan: none of its questions can be decided
                plans[key] = exc
        plan = run_plans[run_id] = plans[key]
        for a in questions:
            try:
                if isinstance(plan, VodouError):
                    raise plan
                check_untampered(a, plan, decode_bindings(run.servers_json))
            except VodouError as exc:
                out[a.id] = REFUSED + exc.message
    if seen is not None:
        seen.update(pending=pending, plans=run_plans)
    return out


def _summaries(rows: list[Any], edited: dict[str, str], seen: dict[str, Any]) -> dict[str, dict[str, str | None]]:
    """For each question of the inbox that gives its fingerprint: what will be done (the
    effect in words) and the first line of its message (``decide.summary``), from the
    frozen payload and the run's plan, both read and checked by :func:`_tampered` just
    before (no second read of the store)."""
    pending, plans = seen.get("pending", {}), seen.get("plans", {})
    out: dict[str, dict[str, str | None]] = {}
    for row in rows:
        a = pending.get(row.approval_id)
        if a is None or row.approval_id in edited:
            continue
        plan = plans.get(row.run_id)
        if plan is None or isinstance(plan, Exception):
            continue
        out[row.approval_id] = decide.summary(plan, row.step, _decode(a.payload_json))
    return out


# --- a run ------------------------------------------------------------------------------------------


def run_page(runs: Any, run_id: str, me: str, now: float) -> dict[str, Any]:
    store = runs.store(create=False, readonly=True)
    extras = store.approval_extras(run_id)  # read before Runs.show checks each question against its fingerprint
    view = runs.show(run_id)
    record = store.get_run(run_id)
    try:
        plan = stored_plan(record)
    except Exception:  # noqa: BLE001 - the page still shows the run; the drive refuses a tampered plan
        plan = None
    pending: list[dict[str, Any]] = []
    history: list[dict[str, Any]] = []
    for a in view.approvals:
        preview_json, check_json = extras.get(a.id, (None, None))
        item = {
            "id": a.id,
            "step": a.step,
            "state": str(a.state),
            "fingerprint": a.fingerprint,
            "asked": clock(a.asked_at),
            "asked_ago": ago(a.asked_at, now),
            "expires": clock(a.expires_at),
            "countdown": countdown(a.expires_at, now),
            "expired": a.expires_at is not None and a.expires_at <= now,
            "approvers": a.approvers,
            "may_decide": not a.approvers or me in a.approvers,
            "decided_by": a.decided_by,
            "decided": clock(a.decided_at),
            "reason": a.reason,
            "card": a.card or a.refusal,  # rendered from the frozen payload just now (Runs.show), never the stored text
            "refused": a.tampered,  # what is stored no longer gives its fingerprint: no card, no form, nothing from its row
            "payload": None if a.tampered else json_text(a.payload),  # whole: it is what runs
            # checked with the card: the fingerprint covers the preview and the check's arguments and read
            "preview": None if a.tampered or preview_json is None else pretty(_decode(preview_json)),
            "check": None if a.tampered or check_json is None else _decode(check_json),
        }
        item["decide"] = (
            None
            if a.tampered
            else decide.decision(plan, a.step, a.payload, None if preview_json is None else _decode(preview_json))
        )
        item["asks"] = None if a.tampered else asked_fields(a.payload)
        if item["check"] is not None:
            item["check"] = {"args": pretty(item["check"].get("args")), "result": pretty(item["check"].get("result"))}
        (pending if a.state == "pending" else history).append(item)
    history.reverse()
    plan_card = None if plan is None else card_text(plan)
    states = {n.node: str(n.state) for n in view.nodes}
    t0 = min((n.ready_at or n.started_at for n in view.nodes if (n.ready_at or n.started_at) is not None), default=None)
    nodes = []
    for n in view.nodes:
        took = n.ended_at - n.started_at if n.started_at is not None and n.ended_at is not None else None
        nodes.append({
            "node": n.node, "kind": n.kind, "state": str(n.state), "error": n.error,
            "started": None if n.started_at is None or t0 is None else f"+{duration(n.started_at - t0)}",
            "took": duration(took), "took_s": took,
            "output": pretty(n.output) if n.has_output else None,
            "content": [content_item(b) for b in n.content or ()],
            "progress": progress_line(n.progress) if n.progress is not None else None,
        })  # fmt: skip
    effects = [
        {
            "step": e.step, "state": str(e.state), "decided_by": e.decided_by, "decided": clock(e.decided_at),
            "started": clock(e.started_at), "took": duration(e.ended_at - e.started_at) if e.ended_at and e.started_at else "",
            "result": None if e.result is None else pretty(e.result), "error": e.error, "settled_by": e.settled_by,
            "without_asking": e.approval is None, "key": e.idempotency_key,
        }
        for e in view.effects
    ]  # fmt: skip
    return {
        "view": view,
        "plan_card": plan_card,
        "graph": None if plan is None else graph_svg(plan, states),
        "state": str(view.state),
        "created": clock(view.created_at),
        "created_ago": ago(view.created_at, now),
        "ended": clock(view.ended_at),
        "took": duration(view.ended_at - view.created_at) if view.ended_at else "",
        "inputs": pretty(view.inputs) if view.inputs else None,
        "saved": f"{record.saved_recipe} v{record.saved_version}" if record.saved_recipe else None,
        "schedule": record.schedule,
        "pending": pending,
        "history": history,
        "nodes": nodes,
        "effects": effects,
        "timeline": timeline(view),
        "together": [together_chart(t) for t in view.together],
        "why": parked_why(store, run_id, now) if str(view.state) == "parked" and not pending else None,
        "resumable": str(view.state) == "interrupted"
        or (str(view.state) == "parked" and (not pending or any(p["expired"] for p in pending))),
        "finished": str(view.state) in ("succeeded", "failed", "declined", "cancelled"),
    }


CHART_W = 320
"""Width of the charts' drawing area, in SVG units (the SVG scales to the screen)."""


def together_chart(t: Any) -> dict[str, Any]:
    """Bars for one together: its wall-clock against the summed work of its branches."""
    top = max(t.wall_s, t.sum_s, t.slowest_s, 1e-9)
    bars = [
        ("wall-clock", t.wall_s, "wall"),
        (f"sum of {t.branches} branches", t.sum_s, "sum"),
        (f"slowest ({t.slowest})" if t.slowest else "slowest", t.slowest_s, "slow"),
    ]
    return {
        "join": t.join,
        "title": f"together {t.join}: wall-clock {duration(t.wall_s)} for {duration(t.sum_s)} of work"
        + (f" ({t.sum_s / t.wall_s:.1f}× in parallel)" if t.wall_s > 0 else ""),
        "bars": [
            {
                "label": label,
                "value": duration(v),
                "w": max(1.0, round(v / top * CHART_W, 1)),
                "y": 4 + i * 26,
                "cls": cls,
            }
            for i, (label, v, cls) in enumerate(bars)
        ],
        "height": 4 + len(bars) * 26,
        "queued": duration(t.queued_s) if t.queued_s else None,
        "failed": t.failed,
        "cancelled": t.cancelled,
    }


def timeline(view: Any) -> dict[str, Any] | None:
    """Each step's own work on one time axis (tool and write steps that ran)."""
    spans = [
        (n.node, n.started_at, n.ended_at, str(n.state))
        for n in view.nodes
        if n.kind in ("tool", "write") and n.started_at is not None and n.ended_at is not None
    ]
    if not spans:
        return None
    t0 = min(s for _, s, _, _ in spans)
    t1 = max(e for _, _, e, _ in spans)
    total = max(t1 - t0, 1e-6)
    rows = []
    for i, (node, s, e, state) in enumerate(spans):
        x = round((s - t0) / total * CHART_W, 1)
        rows.append(
            {
                "node": node,
                "x": x,
                "w": max(1.0, round((e - s) / total * CHART_W, 1)),
                "y": 4 + i * 22,
                "took": duration(e - s),
                "state": state,
            }
        )
    return {"rows": rows, "height": 4 + len(rows) * 22, "total": duration(total)}


# --- lists --------------------------------------------------------------------------------------------


def history(runs: Any, now: float, state: str | None, limit: int = 100) -> list[dict[str, Any]]:
    out = []
    for r in runs.list(state=state, limit=limit):
        out.append({
            "run": r.run, "recipe": r.recipe, "state": str(r.state), "started_by": r.started_by,
            "created": clock(r.created_at), "created_ago": ago(r.created_at, now),
            "took": duration(r.ended_at - r.created_at) if r.ended_at else "", "driven_by": r.driven_by,
        })  # fmt: skip
    return out


def card_text(plan: Any, source: str | None = None) -> str:
    """The plan card, as the CLI prints it, in plain text."""
    import io

    from rich.console import Console

    from ..cards import plan_card

    console = Console(file=io.StringIO(), width=100, color_system=None, record=True, highlight=False, emoji=False)
    console.print(plan_card(plan, source=source))
    return console.export_text().rstrip()


def stored_plan(rec: Any) -> Any:
    """The verified plan of a saved recipe or a run (refused if it was edited in the store)."""
    from ..runtime.plans import check_stored_plan

    return check_stored_plan(rec.plan_json, rec.plan_fingerprint)


def recipes(runs: Any, now: float) -> list[dict[str, Any]]:
    out = []
    for rec in runs.saved_recipes():
        try:
            plan = stored_plan(rec)
            card, error, inputs = card_text(plan), None, plan.inputs
        except Exception as exc:  # noqa: BLE001 - one bad row must not hide the others
            card, error, inputs = "", str(exc), []
        out.append(
            {
                "name": rec.name,
                "version": rec.version,
                "saved_by": rec.saved_by,
                "saved": clock(rec.saved_at),
                "saved_ago": ago(rec.saved_at, now),
                "origin": rec.origin,
                "card": card,
                "error": error,
                "inputs": inputs,
            }
        )
    return out


def recipe(runs: Any, name: str, now: float, version: int | None = None) -> dict[str, Any]:
    """A saved recipe: its latest version, or ``version`` (what a schedule pinned to it runs)."""
    rec = runs.saved(name, version)
    plan = stored_plan(rec)
    versions = runs.store(create=False, readonly=True).recipe_versions(name)
    return {
        "name": rec.name, "version": rec.version, "latest": versions[-1].version if versions else rec.version,
        "saved_by": rec.saved_by, "saved": clock(rec.saved_at), "origin": rec.origin,
        "card": card_text(plan), "source": rec.source, "inputs": [{"name": i.name, "required": i.required, "default": None if i.required else json.dumps(i.default, ensure_ascii=False)} for i in plan.inputs],
        "versions": [{"version": v.version, "saved_by": v.saved_by, "saved": clock(v.saved_at), "fingerprint": v.plan_fingerprint, "origin": v.origin} for v in reversed(versions)],
        "schedules": [s.name for s in runs.schedules() if s.recipe == name],
    }  # fmt: skip


def schedules(runs: Any, now: float) -> list[dict[str, Any]]:
    out = []
    for s in runs.schedules():
        firings = runs.firings(s.name, limit=5)
        due = None
        if s.next_due is not None:
            from zoneinfo import ZoneInfo

            try:
                local = datetime.fromtimestamp(s.next_due, ZoneInfo(s.tz)).strftime("%a %Y-%m-%d %H:%M %Z")
            except Exception:  # noqa: BLE001 - an unknown zone is shown in the server's own
                local = clock(s.next_due)
            due = f"{local} ({ago(s.next_due, now)})"
        out.append({
            "name": s.name, "recipe": s.recipe, "version": s.recipe_version, "cron": s.cron, "tz": s.tz, "state": s.state, "origin": s.origin,
            "created_by": s.created_by, "catch_up": span(s.catch_up_s) if s.catch_up_s else "none",
            "inputs": _decode(s.inputs_json) or {}, "due": due,
            "firings": [{"due": clock(f.due_at), "outcome": f.outcome, "run": f.run_id, "note": f.note} for f in firings],
        })  # fmt: skip
    return out


def parse_inputs(fields: dict[str, str]) -> dict[str, Any]:
    """``input:NAME`` fields: JSON when the text parses as JSON, else the text (as ``--set``)."""
    out: dict[str, Any] = {}
    for key, raw in fields.items():
        if not key.startswith("input:"):
            continue
        name = key.removeprefix("input:")
        if raw == "":
            continue  # left empty: the recipe's default
        try:
            out[name] = json.loads(raw)
        except ValueError:
            out[name] = raw
    return out


def parse_pairs(text: str) -> dict[str, Any]:
    """``name=value`` lines (the schedule form's inputs), values as in :func:`parse_inputs`."""
    from ..errors import UsageError

    out: dict[str, Any] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line:
            continue
        name, eq, raw = line.partition("=")
        if not eq or not name.strip():
            raise UsageError(f"{line!r} is not NAME=VALUE", hint="one per line, e.g. channel=#daily or limit=5")
        try:
            out[name.strip()] = json.loads(raw)
        except ValueError:
            out[name.strip()] = raw
    return out
