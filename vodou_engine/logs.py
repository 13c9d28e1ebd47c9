"""What a long-running process says as runs move: one log line per event, as text or JSON.

``recipe serve`` and ``recipe worker`` drive runs nobody watches at a
terminal, so each event of a run is one line through :mod:`logging` on the
logger ``vodou_engine.events``: a run started, parked, a decision recorded, an
effect executed (or failed, or left unknown), a run ended, a schedule fired, a
notification sent. The store is where every such event is written
(``store/core.py`` collects what a transaction records and hands it here
once the transaction commits, so a rolled-back write is never logged), and
``notify/`` says what it sent: no call site logs on its own.

The lines carry names and states, never a payload, an input or a result:
those may hold what a person should see only on the card.

:func:`configure` sets up the process's logging for the services:
``--log-format json`` (or ``$VODOU_LOG_FORMAT=json``) writes one JSON object
a line, with the event's fields beside the message; ``text`` (the default)
writes the message after the time, logger and level. Every other command
leaves logging alone, so these lines appear only where a service asked.
"""

from __future__ import annotations

import datetime
import json
import logging
import os
import sys
from collections.abc import Mapping
from typing import Any

from .errors import UsageError

EVENTS = logging.getLogger("vodou_engine.events")
FORMAT_ENV = "VODOU_LOG_FORMAT"
FORMATS = ("text", "json")
TEXT_FORMAT = "%(asctime)s %(name)s %(levelname)s %(message)s"
_FIELDS = "vodou"
"""The attribute of a log record that holds an event's fields (``extra={"vodou": {...}}``)."""

_ENDS = {"succeeded", "failed", "declined", "cancelled", "interrupted"}


def log_format(flag: str | None = None) -> str:
    """The format asked for: ``flag`` (``--log-format``), else ``$VODOU_LOG_FORMAT``, else text."""
    chosen = (flag or os.environ.get(FORMAT_ENV) or "text").strip().lower()
    if chosen not in FORMATS:
        source = "--log-format" if flag else f"${FORMAT_ENV}"
        raise UsageError(f"{source} {chosen!r} is not a log format", hint="use text or json")
    return chosen


def configure(flag: str | None = None, *, quiet: tuple[str, ...] = ()) -> None:
    """Log INFO and above to stderr in the format asked for, unless this process's logging
    is already set up (a program embedding the service, a test): then nothing changes."""
    fmt = log_format(flag)
    root = logging.getLogger()
    if root.handlers:
        return
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else logging.Formatter(TEXT_FORMAT))
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    for name in quiet:
        logging.getLogger(name).setLevel(logging.WARNING)


class JsonFormatter(logging.Formatter):
    """One JSON object a line: ``ts`` (UTC, ISO 8601), ``level``, ``logger``, ``message``, an
    event's fields (``event``, ``run``, ``step``, ``actor``, ...) and, for an error, ``exc``."""

    def format(self, record: logging.LogRecord) -> str:
        doc: dict[str, Any] = {
            "ts": datetime.datetime.fromtimestamp(record.created, datetime.UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        fields = getattr(record, _FIELDS, None)
        if isinstance(fields, Mapping):
            doc.update((k, v) for k, v in fields.items() if v is not None and k not in doc)
        if record.exc_info:
            doc["exc"] = self.formatException(record.exc_info)
        return json.dumps(doc, ensure_ascii=False, default=str)


def enabled() -> bool:
    """Whether event lines go anywhere: the store collects nothing for the log otherwise."""
    return EVENTS.isEnabledFor(logging.INFO)


def event(kind: str, *, run: str | None = None, step: str | None = None, **fields: Any) -> None:
    """Log one event: its line in words, its fields for the JSON format."""
    if not EVENTS.isEnabledFor(logging.INFO):
        return
    doc = {"event": kind, "run": run, "step": step, **fields}
    EVENTS.info(_words(kind, run, step, fields), extra={_FIELDS: doc})


def run_event(kind: str, run: str, step: str | None, actor: str | None, data: Any) -> None:
    """An event as the store records it (``events`` table): the fields worth a line."""
    if not EVENTS.isEnabledFor(logging.INFO):
        return
    kind = str(kind)  # a RunState is written as its word
    facts = _data(data)
    fields: dict[str, Any] = {"actor": actor}
    if kind == "parked":
        fields["waiting"] = facts.get("waiting")
    elif kind in ("approval.decided", "approval.refused"):
        fields["state"] = facts.get("wanted") if kind == "approval.refused" else facts.get("state")
        fields["refused"] = facts.get("refused")
    elif kind == "effect.settled":
        fields["state"] = facts.get("state")
    elif kind == "schedule.fired":
        fields["schedule"] = facts.get("schedule")
    event(kind, run=run, step=step, **fields)


def _data(data: Any) -> dict[str, Any]:
    if isinstance(data, Mapping):
        return dict(data)
    if isinstance(data, bytes | str) and data:
        try:
            out = json.loads(data)
        except ValueError:
            return {}
        return out if isinstance(out, dict) else {}
    return {}


def _words(kind: str, run: str | None, step: str | None, f: Mapping[str, Any]) -> str:
    who = f" by {f['actor']}" if f.get("actor") else ""
    where = f"run {run}" + (f" step {step}" if step else "")
    if kind == "started":
        return f"run {run} started{who}"
    if kind == "parked":
        waiting = f.get("waiting")
        if isinstance(waiting, list) and waiting:
            return f"run {run} parked: waiting for {', '.join(map(str, waiting))}"
        return f"run {run} parked"
    if kind == "approval.asked":
        return f"{where}: asked for approval"
    if kind == "approval.decided":
        return f"{where}: {f.get('state')}{who}"
    if kind == "approval.refused":
        return f"{where}: decision{who} refused ({f.get('refused')})"
    if kind == "approval.withdrawn":
        return f"{where}: question withdrawn"
    if kind.startswith("effect.") and kind != "effect.settled":
        return f"{where}: effect {kind.removeprefix('effect.')}"
    if kind == "effect.settled":
        return f"{where}: effect settled as {f.get('state')}{who}"
    if kind in _ENDS:
        return f"run {run} {kind}"
    if kind == "schedule.fired":
        return f"schedule {f.get('schedule')} fired: run {run}"
    if kind == "notification.sent":
        return f"{where}: notified {f.get('to')} by {f.get('channel')}"
    return f"{where}: {kind}{who}" if step else f"run {run} {kind}{who}"
