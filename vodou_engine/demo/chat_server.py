"""Demo Slack-like MCP server ("slack") over stdio.

Run: ``VODOU_DEMO_DB=/path/demo.sqlite3 python -m vodou_engine.demo.chat_server``
"""

from __future__ import annotations

from typing_extensions import TypedDict

from vodou_engine.demo import db
from vodou_engine.demo.app import Conn, DemoServer

server = DemoServer("slack", instructions="A demo workspace with #daily and #general; you are @me.")


class SearchResult(TypedDict):
    messages: list[db.ChatMessage]


class ChannelState(TypedDict):
    channel: str
    last_message: str | None


class Preview(TypedDict):
    before: ChannelState
    after: ChannelState


class Posted(TypedDict):
    ok: bool
    ts: str
    channel: str


@server.read("slack_search_messages")
def slack_search_messages(conn: Conn, query: str) -> SearchResult:
    """Search all channels for messages containing query (case-insensitive)."""
    return SearchResult(messages=db.search_chat(conn, query))


@server.read("slack_get_channel")
def slack_get_channel(conn: Conn, channel: str) -> db.Channel:
    """A channel's topic, version and last message."""
    return db.get_channel(conn, channel)


@server.read("slack_preview_message")
def slack_preview_message(conn: Conn, channel: str, text: str) -> Preview:
    """Show what slack_post_message would change: the channel's last message."""
    current = db.get_channel(conn, channel)
    return Preview(
        before=ChannelState(channel=current["channel"], last_message=current["last_message"]),
        after=ChannelState(channel=current["channel"], last_message=text),
    )


@server.effect("slack_post_message")
def slack_post_message(conn: Conn, channel: str, text: str, idempotency_key: str | None = None) -> Posted:
    """Post a message as @me."""
    message = db.post_chat(conn, channel, text)
    return Posted(ok=True, ts=message["ts"], channel=message["channel"])


@server.effect("slack_set_topic")
def slack_set_topic(conn: Conn, channel: str, topic: str, idempotency_key: str | None = None) -> db.Channel:
    """Set a channel's topic; bumps the channel's version."""
    return db.set_topic(conn, channel, topic)


@server.effect("slack_delete_message", destructive=True)
def slack_delete_message(conn: Conn, channel: str, ts: str, idempotency_key: str | None = None) -> Posted:
    """Delete a message by channel and ts."""
    message = db.delete_chat(conn, channel, ts)
    return Posted(ok=True, ts=message["ts"], channel=message["channel"])


if __name__ == "__main__":
    server.run()
