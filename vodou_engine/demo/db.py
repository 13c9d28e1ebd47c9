"""The shared SQLite world behind the demo MCP servers.

All demo servers (calendar, mail, chat, lab) read and write one SQLite file,
named by ``VODOU_DEMO_DB``, so that a recipe run spanning several server
processes sees one consistent world, and so that tests and benchmarks can
inspect exactly what happened: every tool call lands in the ``calls`` table
with its arguments, idempotency key, server-side start/end time and pid.

This module deliberately does not import the MCP SDK. Tests, the demo CLI and
other engine code use it directly (seeding, reading the call log, changing the
world out of band) without paying the SDK's import cost.

Concurrency: several server processes, and worker threads inside each, share
the file. The database runs in WAL mode with a 5 s busy timeout, every
connection is short-lived and private to one call, and an effect's
idempotency check, its mutation and its ``ok`` record commit in one
``BEGIN IMMEDIATE`` transaction, so two racing calls with the same key cannot
both take effect.
"""

from __future__ import annotations

import json
import os
import sqlite3
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

from typing_extensions import TypedDict

DB_ENV = "VODOU_DEMO_DB"
LATENCY_ENV = "VODOU_DEMO_LATENCY"
ARRIVALS_ENV = "VODOU_DEMO_ARRIVALS"
"""A FIFO to write ``server.tool`` to as each call arrives, before its latency: lets a test
(through ``lab.get_arrival``) act while a call is known to be in flight, without timing."""
BUSY_TIMEOUT_MS = 5000
SCHEMA_VERSION = "1"
ME = "me@example.com"

T = TypeVar("T")


class DemoError(Exception):
    """A failure the caller caused and should read (unknown id, duplicate key).

    The MCP layer turns these into ``is_error`` tool results that carry this
    message; anything else is treated as a crash.
    """


class NotFound(DemoError):
    """The addressed record does not exist."""


class DuplicateEffect(DemoError):
    """An effect was retried with an idempotency key that already succeeded."""

    def __init__(self, key: str) -> None:
        super().__init__(f"duplicate idempotency key {key}: this effect already ran")
        self.key = key


# --- Record shapes ------------------------------------------------------------
# These TypedDicts are both the return types of the query helpers below and the
# tools' declared return types, so the SDK derives output schemas from them and
# clients receive ``structured_content``. ``typing_extensions.TypedDict`` is
# used because pydantic rejects ``typing.TypedDict`` on Python < 3.12.


class Event(TypedDict):
    id: str
    calendarId: str
    summary: str
    start: str
    end: str


# "from" is a keyword, hence the functional syntax.
MailSummary = TypedDict(
    "MailSummary",
    {
        "id": str,
        "threadId": str,
        "from": str,
        "to": str,
        "subject": str,
        "snippet": str,
        "labelIds": list[str],
        "date": str,
    },
)


class MailMessage(MailSummary):
    body: str


class Contact(TypedDict):
    email: str
    name: str | None
    version: int


class ChatMessage(TypedDict):
    channel: str
    ts: str
    user: str
    text: str


class Channel(TypedDict):
    channel: str
    topic: str
    version: int
    last_message: str | None


# --- Schema and seed data --------------------------------------------------------

_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    """CREATE TABLE IF NOT EXISTS calls (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        server TEXT NOT NULL,
        tool TEXT NOT NULL,
        arguments TEXT NOT NULL,
        idempotency_key TEXT,
        started REAL NOT NULL,
        ended REAL NOT NULL,
        pid INTEGER NOT NULL,
        outcome TEXT NOT NULL CHECK (outcome IN ('ok', 'error')),
        error TEXT
    )""",
    """CREATE INDEX IF NOT EXISTS calls_by_key
        ON calls (server, tool, idempotency_key) WHERE idempotency_key IS NOT NULL""",
    """CREATE TABLE IF NOT EXISTS events (
        id TEXT PRIMARY KEY,
        calendar_id TEXT NOT NULL,
        summary TEXT NOT NULL,
        start_time TEXT NOT NULL,
        end_time TEXT NOT NULL
    )""",
    """CREATE TABLE IF NOT EXISTS mail (
        id TEXT PRIMARY KEY,
        thread_id TEXT NOT NULL,
        sender TEXT NOT NULL,
        recipient TEXT NOT NULL,
        subject TEXT NOT NULL,
        body TEXT NOT NULL,
        labels TEXT NOT NULL,
        date TEXT NOT NULL
    )""",
    """CREATE TABLE IF NOT EXISTS contacts (
        email TEXT PRIMARY KEY,
        name TEXT NOT NULL,
        version INTEGER NOT NULL
    )""",
    """CREATE TABLE IF NOT EXISTS channels (
        name TEXT PRIMARY KEY,
        topic TEXT NOT NULL,
        version INTEGER NOT NULL
    )""",
    """CREATE TABLE IF NOT EXISTS chat (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        channel TEXT NOT NULL,
        ts TEXT NOT NULL,
        user TEXT NOT NULL,
        text TEXT NOT NULL,
        UNIQUE (channel, ts)
    )""",
)

_TABLES = ("meta", "calls", "events", "mail", "contacts", "channels", "chat")


def _seed(conn: sqlite3.Connection) -> None:
    """Insert the demo world. Times are relative to now so "today" stays today."""
    now = datetime.now().astimezone()
    today = now.replace(second=0, microsecond=0)

    def at(hour: int, minute: int) -> str:
        return today.replace(hour=hour, minute=minute).isoformat()

    events = [
        ("evt-standup", "Daily standup", at(9, 30), at(9, 45)),
        ("evt-design", "Design review: approval gates", at(11, 0), at(12, 0)),
        ("evt-lunch", "Lunch with Ana", at(12, 30), at(13, 30)),
        ("evt-1on1", "1:1 with Sam", at(16, 0), at(16, 30)),
    ]
    conn.executemany(
        "INSERT INTO events (id, calendar_id, summary, start_time, end_time) VALUES (?, 'primary', ?, ?, ?)",
        events,
    )

    def ago(hours: float) -> str:
        return (now - timedelta(hours=hours)).replace(microsecond=0).isoformat()

    mail = [
        (
            "msg-001",
            "thr-001",
            "ana@example.com",
            "Agenda for the design review",
            "Hi! I put the agenda for today's design review in the doc. Can you add the approval-gate notes?",
            ["INBOX", "UNREAD", "IMPORTANT"],
            ago(1),
        ),
        (
            "msg-002",
            "thr-002",
            "sam@example.com",
            "Re: 1:1 topics",
            "Let's talk about the benchmark numbers and the on-call rotation.",
            ["INBOX", "UNREAD"],
            ago(3),
        ),
        (
            "msg-003",
            "thr-003",
            "billing@example.com",
            "Your invoice is ready",
            "Your monthly invoice is attached. No action is needed.",
            ["INBOX", "CATEGORY_UPDATES"],
            ago(20),
        ),
        (
            "msg-004",
            "thr-004",
            "lee@example.com",
            "Deploy notes",
            "The deploy went out last night; notes are in #daily.",
            ["INBOX"],
            ago(26),
        ),
        (
            "msg-005",
            "thr-005",
            "ana@example.com",
            "Lunch?",
            "Still on for lunch today at 12:30?",
            ["INBOX", "UNREAD"],
            ago(30),
        ),
    ]
    conn.executemany(
        "INSERT INTO mail (id, thread_id, sender, recipient, subject, body, labels, date)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        [(i, t, s, ME, subj, body, json.dumps(labels), d) for i, t, s, subj, body, labels, d in mail],
    )

    conn.executemany(
        "INSERT INTO contacts (email, name, version) VALUES (?, ?, 1)",
        [
            ("ana@example.com", "Ana Souza"),
            ("sam@example.com", "Sam Okafor"),
            ("lee@example.com", "Lee Park"),
        ],
    )

    conn.executemany(
        "INSERT INTO channels (name, topic, version) VALUES (?, ?, 1)",
        [
            ("#daily", "Daily status updates"),
            ("#general", "Company-wide announcements"),
        ],
    )

    base = time.time() - 3600
    chat = [
        ("#daily", "ana", "Yesterday: finished the recipe parser. Today: approval gates."),
        ("#general", "lee", "Reminder: deploy freeze starts Friday."),
        ("#daily", "sam", "@me can you post your status before standup?"),
        ("#general", "ana", "Welcome to the team, Lee!"),
        ("#daily", "lee", "Deploy went out; notes in the wiki. @me please double-check the rollback steps."),
        ("#general", "sam", "Lunch and learn on Thursday: MCP servers in practice."),
    ]
    conn.executemany(
        "INSERT INTO chat (channel, ts, user, text) VALUES (?, ?, ?, ?)",
        [(ch, f"{base + i * 300:.6f}", user, text) for i, (ch, user, text) in enumerate(chat)],
    )
    conn.execute("INSERT OR REPLACE INTO meta (key, value) VALUES ('seeded', ?)", (SCHEMA_VERSION,))


# --- Connections ------------------------------------------------------------------


def db_path_from_env() -> Path:
    """The database path the servers use: ``$VODOU_DEMO_DB``, else one in the temp dir."""
    value = os.environ.get(DB_ENV)
    if value:
        return Path(value)
    return Path(tempfile.gettempdir()) / "vodou-demo.sqlite3"


def connect(path: str | os.PathLike[str]) -> sqlite3.Connection:
    """Open a short-lived connection with the settings every user of the file needs.

    Autocommit mode (``isolation_level=None``) so transactions are explicit and
    a write lock is only ever held inside :func:`transaction`.
    """
    conn = sqlite3.connect(os.fspath(path), timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None)
    conn.row_factory = sqlite3.Row
    conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
    conn.execute("PRAGMA synchronous = NORMAL")
    return conn


@contextmanager
def transaction(conn: sqlite3.Connection, mode: str = "IMMEDIATE") -> Iterator[sqlite3.Connection]:
    """Run a block in one transaction; IMMEDIATE takes the write lock up front.

    Taking the lock at BEGIN (rather than on first write) is what makes
    check-then-write sequences such as the idempotency check race-free.
    """
    conn.execute(f"BEGIN {mode}")
    try:
        yield conn
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


@contextmanager
def _opened(path: str | os.PathLike[str]) -> Iterator[sqlite3.Connection]:
    conn = connect(path)
    try:
        yield conn
    finally:
        conn.close()


def _enable_wal(conn: sqlite3.Connection) -> None:
    # Switching journal mode needs a moment of exclusive access; when several
    # servers start against a fresh file at once one of them may be told the
    # database is locked even with a busy timeout, so retry briefly.
    deadline = time.monotonic() + BUSY_TIMEOUT_MS / 1000
    while True:
        try:
            conn.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.02)


def ensure_seeded(path: str | os.PathLike[str]) -> Path:
    """Create the schema and seed the demo world unless the file already holds it.

    Safe to call from several processes at once: the check and the seeding
    happen under one write lock, so exactly one caller seeds.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with _opened(path) as conn:
        _enable_wal(conn)
        with transaction(conn):
            for statement in _SCHEMA:
                conn.execute(statement)
            if conn.execute("SELECT 1 FROM meta WHERE key = 'seeded'").fetchone() is None:
                _seed(conn)
    return path


def reset(path: str | os.PathLike[str]) -> Path:
    """Drop every demo table (call log included) and seed a fresh world."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with _opened(path) as conn:
        _enable_wal(conn)
        with transaction(conn):
            for table in _TABLES:
                conn.execute(f"DROP TABLE IF EXISTS {table}")
            for statement in _SCHEMA:
                conn.execute(statement)
            _seed(conn)
    return path


# --- Call recording -------------------------------------------------------------------


def parse_latency(spec: str | None) -> dict[str, float]:
    """Parse ``"list-events=412,messages_list=268,*=50"`` into seconds per tool name.

    Malformed entries raise ``ValueError`` so a typo in a benchmark setup fails
    loudly instead of silently measuring the wrong thing.
    """
    out: dict[str, float] = {}
    for part in (spec or "").split(","):
        part = part.strip()
        if not part:
            continue
        name, sep, value = part.partition("=")
        name = name.strip()
        try:
            ms = float(value)
        except ValueError:
            ms = -1.0
        if not sep or not name or ms < 0:
            raise ValueError(f"bad {LATENCY_ENV} entry {part!r}; expected TOOL=MILLISECONDS")
        out[name] = ms / 1000
    return out


def latency_for(latency: Mapping[str, float], tool: str) -> float:
    """Seconds of artificial latency for ``tool``; a named entry beats ``*``."""
    return latency.get(tool, latency.get("*", 0.0))


def _record(
    conn: sqlite3.Connection,
    *,
    server: str,
    tool: str,
    arguments: Mapping[str, Any],
    idempotency_key: str | None,
    started: float,
    outcome: str,
    error: str | None = None,
) -> None:
    conn.execute(
        "INSERT INTO calls (server, tool, arguments, idempotency_key, started, ended, pid, outcome, error)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (
            server,
            tool,
            json.dumps(dict(arguments), sort_keys=True, default=str),
            idempotency_key,
            started,
            time.time(),
            os.getpid(),
            outcome,
            error,
        ),
    )


def invoke(
    path: str | os.PathLike[str],
    *,
    server: str,
    tool: str,
    arguments: Mapping[str, Any],
    body: Callable[[sqlite3.Connection], T],
    effect: bool,
    idempotency_key: str | None = None,
    latency: float = 0.0,
) -> T:
    """Run one tool call against the database and record it in ``calls``.

    ``started`` is taken before the artificial latency, so the recorded
    interval is the full server-side time. A read runs ``body`` without
    holding the write lock (``work`` sleeps in there, and parallel lab servers
    must not serialise on the database), then records itself. An effect holds
    the write lock across the idempotency check, ``body`` and its ``ok``
    record, so a retried key can never take effect twice. Failures are
    recorded with outcome ``error`` and re-raised.
    """
    started = time.time()
    arrivals = os.environ.get(ARRIVALS_ENV)
    if arrivals:
        with open(arrivals, "w") as fifo:  # blocks until a reader is there: that is the point
            fifo.write(f"{server}.{tool}\n")
    if latency > 0:
        time.sleep(latency)
    record: dict[str, Any] = {
        "server": server,
        "tool": tool,
        "arguments": arguments,
        "idempotency_key": idempotency_key,
        "started": started,
    }
    with _opened(path) as conn:
        try:
            if effect:
                with transaction(conn):
                    if idempotency_key is not None and _already_ran(conn, server, tool, idempotency_key):
                        raise DuplicateEffect(idempotency_key)
                    result = body(conn)
                    _record(conn, **record, outcome="ok")
                return result
            with transaction(conn, "DEFERRED"):
                result = body(conn)
        except Exception as exc:
            with transaction(conn):
                _record(conn, **record, outcome="error", error=str(exc) or type(exc).__name__)
            raise
        with transaction(conn):
            _record(conn, **record, outcome="ok")
        return result


def _already_ran(conn: sqlite3.Connection, server: str, tool: str, key: str) -> bool:
    row = conn.execute(
        "SELECT 1 FROM calls WHERE server = ? AND tool = ? AND idempotency_key = ? AND outcome = 'ok' LIMIT 1",
        (server, tool, key),
    ).fetchone()
    return row is not None


def calls(path: str | os.PathLike[str], tool: str | None = None, server: str | None = None) -> list[dict[str, Any]]:
    """The call log in order, optionally filtered; ``arguments`` decoded from JSON."""
    query = "SELECT * FROM calls"
    clauses, params = [], []
    if tool is not None:
        clauses.append("tool = ?")
        params.append(tool)
    if server is not None:
        clauses.append("server = ?")
        params.append(server)
    if clauses:
        query += " WHERE " + " AND ".join(clauses)
    with _opened(path) as conn:
        rows = conn.execute(query + " ORDER BY id", params).fetchall()
    out = []
    for row in rows:
        item = dict(row)
        item["arguments"] = json.loads(item["arguments"])
        out.append(item)
    return out


# --- Calendar -------------------------------------------------------------------------


def _event(row: sqlite3.Row) -> Event:
    return Event(
        id=row["id"],
        calendarId=row["calendar_id"],
        summary=row["summary"],
        start=row["start_time"],
        end=row["end_time"],
    )


def list_events(conn: sqlite3.Connection, calendar_id: str = "primary", max_results: int = 20) -> list[Event]:
    rows = conn.execute(
        "SELECT * FROM events WHERE calendar_id = ? ORDER BY start_time, id LIMIT ?", (calendar_id, max(0, max_results))
    ).fetchall()
    return [_event(r) for r in rows]


def get_event(conn: sqlite3.Connection, event_id: str) -> Event:
    row = conn.execute("SELECT * FROM events WHERE id = ?", (event_id,)).fetchone()
    if row is None:
        raise NotFound(f"no event {event_id}")
    return _event(row)


def create_event(conn: sqlite3.Connection, summary: str, start: str, end: str, calendar_id: str = "primary") -> Event:
    event_id = f"evt-{uuid.uuid4().hex[:10]}"
    conn.execute(
        "INSERT INTO events (id, calendar_id, summary, start_time, end_time) VALUES (?, ?, ?, ?, ?)",
        (event_id, calendar_id, summary, start, end),
    )
    return get_event(conn, event_id)


def delete_event(conn: sqlite3.Connection, event_id: str) -> Event:
    event = get_event(conn, event_id)
    conn.execute("DELETE FROM events WHERE id = ?", (event_id,))
    return event


# --- Mail -------------------------------------------------------------------------------


def _mail(row: sqlite3.Row, *, with_body: bool) -> dict[str, Any]:
    body = row["body"]
    item: dict[str, Any] = {
        "id": row["id"],
        "threadId": row["thread_id"],
        "from": row["sender"],
        "to": row["recipient"],
        "subject": row["subject"],
        "snippet": body if len(body) <= 80 else body[:77] + "...",
        "labelIds": json.loads(row["labels"]),
        "date": row["date"],
    }
    if with_body:
        item["body"] = body
    return item


def list_mail(conn: sqlite3.Connection, label_ids: list[str] | None = None, max_results: int = 10) -> list[MailSummary]:
    """Newest first; a message matches when it carries every requested label."""
    wanted = set(label_ids or [])
    rows = conn.execute("SELECT * FROM mail ORDER BY date DESC, id").fetchall()
    out = [_mail(r, with_body=False) for r in rows]
    out = [m for m in out if wanted <= set(m["labelIds"])]
    return out[: max(0, max_results)]  # type: ignore[return-value]


def get_mail(conn: sqlite3.Connection, message_id: str) -> MailMessage:
    row = conn.execute("SELECT * FROM mail WHERE id = ?", (message_id,)).fetchone()
    if row is None:
        raise NotFound(f"no message {message_id}")
    return _mail(row, with_body=True)  # type: ignore[return-value]


def send_mail(conn: sqlite3.Connection, to: str, subject: str, body: str) -> MailMessage:
    message_id = f"msg-{uuid.uuid4().hex[:10]}"
    conn.execute(
        "INSERT INTO mail (id, thread_id, sender, recipient, subject, body, labels, date) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        (
            message_id,
            f"thr-{message_id[4:]}",
            ME,
            to,
            subject,
            body,
            json.dumps(["SENT"]),
            datetime.now().astimezone().replace(microsecond=0).isoformat(),
        ),
    )
    return get_mail(conn, message_id)


def find_contact(conn: sqlite3.Connection, email: str) -> Contact | None:
    row = conn.execute("SELECT * FROM contacts WHERE email = ?", (email,)).fetchone()
    return None if row is None else Contact(email=row["email"], name=row["name"], version=row["version"])


def get_contact(conn: sqlite3.Connection, email: str) -> Contact:
    contact = find_contact(conn, email)
    if contact is None:
        raise NotFound(f"no contact {email}")
    return contact


def update_contact(conn: sqlite3.Connection, email: str, name: str) -> Contact:
    """Create or rename a contact; every change bumps its version."""
    conn.execute(
        "INSERT INTO contacts (email, name, version) VALUES (?, ?, 1)"
        " ON CONFLICT (email) DO UPDATE SET name = excluded.name, version = version + 1",
        (email, name),
    )
    return get_contact(conn, email)


# --- Chat -------------------------------------------------------------------------------


def channel_name(channel: str) -> str:
    """Accept ``daily`` as well as ``#daily``; the stored form has the ``#``."""
    channel = channel.strip()
    return channel if channel.startswith("#") else f"#{channel}"


def _chat(row: sqlite3.Row) -> ChatMessage:
    return ChatMessage(channel=row["channel"], ts=row["ts"], user=row["user"], text=row["text"])


def _require_channel(conn: sqlite3.Connection, channel: str) -> sqlite3.Row:
    row = conn.execute("SELECT * FROM channels WHERE name = ?", (channel_name(channel),)).fetchone()
    if row is None:
        raise NotFound(f"no channel {channel_name(channel)}")
    return row


def search_chat(conn: sqlite3.Connection, query: str) -> list[ChatMessage]:
    """Case-insensitive substring match over every channel, oldest first.

    ``mentions:NAME`` is Slack's search operator for messages that mention
    ``@NAME``; it is translated so the seed recipe's query finds something.
    As in Slack, what NAME posted is not a mention of NAME: a briefing the
    demo posts as @me quotes the messages that mention @me, and counted as a
    mention itself, each run's search would quote the last briefing, nesting
    every earlier one in the next.
    """
    author = None
    if query.lower().startswith("mentions:"):
        author = query.split(":", 1)[1].strip().lstrip("@")
        query = "@" + author
    pattern = "%" + query.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
    rows = conn.execute(
        "SELECT * FROM chat WHERE text LIKE ? ESCAPE '\\' AND (? IS NULL OR lower(user) <> lower(?)) ORDER BY seq",
        (pattern, author, author),
    ).fetchall()
    return [_chat(r) for r in rows]


def get_channel(conn: sqlite3.Connection, channel: str) -> Channel:
    row = _require_channel(conn, channel)
    last = conn.execute("SELECT text FROM chat WHERE channel = ? ORDER BY seq DESC LIMIT 1", (row["name"],)).fetchone()
    return Channel(channel=row["name"], topic=row["topic"], version=row["version"], last_message=last and last["text"])


def post_chat(conn: sqlite3.Connection, channel: str, text: str, user: str = "me") -> ChatMessage:
    """Append a message. The channel's version tracks its metadata (topic), not traffic."""
    name = _require_channel(conn, channel)["name"]
    ts = time.time()
    while conn.execute("SELECT 1 FROM chat WHERE channel = ? AND ts = ?", (name, f"{ts:.6f}")).fetchone():
        ts += 0.000001
    conn.execute("INSERT INTO chat (channel, ts, user, text) VALUES (?, ?, ?, ?)", (name, f"{ts:.6f}", user, text))
    return ChatMessage(channel=name, ts=f"{ts:.6f}", user=user, text=text)


def set_topic(conn: sqlite3.Connection, channel: str, topic: str) -> Channel:
    name = _require_channel(conn, channel)["name"]
    conn.execute("UPDATE channels SET topic = ?, version = version + 1 WHERE name = ?", (topic, name))
    return get_channel(conn, name)


def delete_chat(conn: sqlite3.Connection, channel: str, ts: str) -> ChatMessage:
    name = _require_channel(conn, channel)["name"]
    row = conn.execute("SELECT * FROM chat WHERE channel = ? AND ts = ?", (name, ts)).fetchone()
    if row is None:
        raise NotFound(f"no message {ts} in {name}")
    conn.execute("DELETE FROM chat WHERE seq = ?", (row["seq"],))
    return _chat(row)


# --- Out-of-band helpers for tests, the CLI and benchmarks ---------------------------


def set_channel_topic(path: str | os.PathLike[str], channel: str, topic: str) -> Channel:
    """Change a channel's topic behind the servers' backs (bumps its version).

    Simulates the world moving between the moment a question was asked and
    the moment it was approved. Not recorded in ``calls``: no tool ran.
    """
    with _opened(path) as conn, transaction(conn):
        return set_topic(conn, channel, topic)


def channel_messages(path: str | os.PathLike[str], channel: str) -> list[dict[str, Any]]:
    """Every message in a channel, oldest first."""
    with _opened(path) as conn:
        rows = conn.execute("SELECT * FROM chat WHERE channel = ? ORDER BY seq", (channel_name(channel),)).fetchall()
    return [dict(_chat(r)) for r in rows]
