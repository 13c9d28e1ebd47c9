"""``recipe plan`` and ``run``: a recipe shown, and started.

``plan`` prints its card, or its graph as JSON or Mermaid, after listing the
servers' tools (``--offline``: without starting them); ``run`` starts it here and
parks at each approval, or queues it for the workers (``--queue``).
"""

from __future__ import annotations

import os
import sys
from typing import Any

import msgspec

from ..cards import mermaid, plan_card
from ..compiler import load_source
from ..graph.summary import summary
from ..runs import Inspection, new_run_id
from ..text_safety import source_warnings
from ..views.report import Progress, queued_run, report
from ..views.term import console, json_safe, say
from .common import _actor, _answer_inline, _inputs, _left_resumable, _run_async, _runs, _store_flag
from .compile import _warn_hidden


def cmd_plan(args: Any) -> int:
    runs = _runs(args)
    if args.offline:
        plan, text = load_source(args.file, policy=runs.policy(), memo=True)
        seen = Inspection(
            plan=plan,
            path=args.file,
            note="offline: servers not started, tool names not checked",
            warnings=source_warnings(text or "", args.file),
        )
    else:
        refresh = getattr(args, "refresh", False)
        kept = None if refresh else runs.inspect_kept(args.file)  # every server's tools kept: no event loop
        seen = kept or _run_async(lambda: runs.inspect(args.file, cached=not refresh))
    plan = seen.plan
    if args.json:
        doc: dict[str, Any] = {"plan": plan, "graph": summary(plan)}
        if seen.status:
            doc["tools"] = {k: {"exists": v.exists, "note": v.note} for k, v in seen.status.items()}
        if seen.servers:
            doc["servers"] = {"source": seen.servers_source, "commands": seen.servers}
        if seen.listed:
            doc["tools_listed"] = {n: {"at": at, "cached": n in seen.cached} for n, at in seen.listed.items()}
        if seen.warnings:
            doc["warnings"] = seen.warnings
        sys.stdout.buffer.write(
            json_safe(msgspec.json.format(msgspec.json.encode(doc, order="deterministic"), indent=2).decode()).encode()
            + b"\n"
        )
    elif args.format == "mermaid":
        sys.stdout.write(mermaid(plan))
    else:
        console().print(
            plan_card(
                plan,
                source=args.file,
                status=seen.status,
                servers_note=seen.note,
                writer=_writer_label(plan),
                servers=seen.servers,
            )
        )
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


def cmd_run(args: Any) -> int:
    runs = _runs(args)
    if args.queue:
        return _queue_run(args, runs)
    inputs = _inputs(args.set)
    plan, text, _ = runs.load(args.file)
    _warn_hidden(text, args.file)
    actor, _ = _actor(args, runs, None, "run")
    run_id = new_run_id()
    progress = Progress([n.id for n in plan.nodes], enabled=sys.stderr.isatty() and not args.json)
    with _left_resumable(args, run_id), progress:
        rep = _run_async(
            lambda: runs.start(
                args.file, inputs=inputs, actor=actor, model=args.model, on_change=progress, run_id=run_id
            )
        )
    code = report(rep, json_out=args.json, store_flag=_store_flag(args), actor=actor)
    return _answer_inline(args, runs, rep, code, actor, "os-user")


def _queue_run(args: Any, runs: Any) -> int:
    """`recipe run --queue FILE`: compiled here, started by a worker."""
    runs.require_queue()  # a SQLite store: exit 7 before anything is compiled or proven
    inputs = _inputs(args.set)
    actor, _ = _actor(args, runs, None, "run")
    run_id = runs.queue(args.file, inputs=inputs, actor=actor, model=args.model)
    queued_run(run_id, json_out=args.json, store_flag=_store_flag(args))
    return 0
