"""Demo Google-Calendar-like MCP server ("google-calendar") over stdio.

Run: ``VODOU_DEMO_DB=/path/demo.sqlite3 python -m vodou_engine.demo.calendar_server``
"""

from __future__ import annotations

from typing_extensions import TypedDict

from vodou_engine.demo import db
from vodou_engine.demo.app import Conn, DemoServer

server = DemoServer("google-calendar", instructions="A demo calendar seeded with today's events.")


class EventList(TypedDict):
    events: list[db.Event]


class Deleted(TypedDict):
    deleted: bool
    event: db.Event


@server.read("list-events")
def list_events(conn: Conn, calendarId: str = "primary", maxResults: int = 20) -> EventList:
    """List events on a calendar, earliest first."""
    return EventList(events=db.list_events(conn, calendarId, maxResults))


@server.read("get-event")
def get_event(conn: Conn, eventId: str) -> db.Event:
    """Fetch one event by id."""
    return db.get_event(conn, eventId)


@server.effect("create-event")
def create_event(conn: Conn, summary: str, start: str, end: str, idempotency_key: str | None = None) -> db.Event:
    """Create an event on the primary calendar (ISO 8601 start/end)."""
    return db.create_event(conn, summary, start, end)


@server.effect("delete-event", destructive=True)
def delete_event(conn: Conn, eventId: str, idempotency_key: str | None = None) -> Deleted:
    """Delete an event; returns the event as it was."""
    return Deleted(deleted=True, event=db.delete_event(conn, eventId))


if __name__ == "__main__":
    server.run()
