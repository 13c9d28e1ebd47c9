"""Demo Gmail-like MCP server ("gmail") over stdio.

Run: ``VODOU_DEMO_DB=/path/demo.sqlite3 python -m vodou_engine.demo.mail_server``
"""

from __future__ import annotations

from typing_extensions import TypedDict

from vodou_engine.demo import db
from vodou_engine.demo.app import Conn, DemoServer

server = DemoServer("gmail", instructions="A demo mailbox for me@example.com with a small contact book.")


class MessageList(TypedDict):
    messages: list[db.MailSummary]
    resultSizeEstimate: int


class Draft(TypedDict):
    to: str
    subject: str
    body: str


class Preview(TypedDict):
    before: db.Contact
    after: Draft


@server.read("messages_list")
def messages_list(conn: Conn, labelIds: list[str] = [], maxResults: int = 10) -> MessageList:  # noqa: B006
    """List messages newest first; only those carrying every label in labelIds."""
    messages = db.list_mail(conn, labelIds, maxResults)
    return MessageList(messages=messages, resultSizeEstimate=len(messages))


@server.read("messages_get")
def messages_get(conn: Conn, id: str) -> db.MailMessage:
    """Fetch one message, body included."""
    return db.get_mail(conn, id)


@server.read("get_contact")
def get_contact(conn: Conn, email: str) -> db.Contact:
    """Look up a contact by email address."""
    return db.get_contact(conn, email)


@server.effect("update_contact")
def update_contact(conn: Conn, email: str, name: str, idempotency_key: str | None = None) -> db.Contact:
    """Create or rename a contact; bumps its version."""
    return db.update_contact(conn, email, name)


@server.read("preview_message")
def preview_message(conn: Conn, to: str, subject: str, body: str) -> Preview:
    """Show what send_message would do: the recipient as known now, and the message."""
    before = db.find_contact(conn, to) or db.Contact(email=to, name=None, version=0)
    return Preview(before=before, after=Draft(to=to, subject=subject, body=body))


@server.effect("send_message")
def send_message(conn: Conn, to: str, subject: str, body: str, idempotency_key: str | None = None) -> db.MailMessage:
    """Send a message from me@example.com; it is stored with the SENT label."""
    return db.send_mail(conn, to, subject, body)


if __name__ == "__main__":
    server.run()
