"""The demo MCP servers, run as real processes over stdio and driven under trio.

Server startup is dominated by importing the MCP SDK (about a second), so the
tests start servers concurrently where they can and check several things per
session instead of paying that cost per assertion.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.client.stdio import get_default_environment

from vodou_engine.demo import db

EXPECTED_TOOLS = {
    "calendar_server": {
        "list-events": "read",
        "get-event": "read",
        "create-event": "write",
        "delete-event": "destructive",
    },
    "mail_server": {
        "messages_list": "read",
        "messages_get": "read",
        "get_contact": "read",
        "update_contact": "write",
        "preview_message": "read",
        "send_message": "write",
    },
    "chat_server": {
        "slack_search_messages": "read",
        "slack_get_channel": "read",
        "slack_preview_message": "read",
        "slack_post_message": "write",
        "slack_set_topic": "write",
        "slack_delete_message": "destructive",
    },
    "lab_server": {"query": "read", "get_arrival": "read"},
}

SERVER_NAMES = {"calendar_server": "google-calendar", "mail_server": "gmail", "chat_server": "slack"}


def run_trio(fn: Callable[[], Awaitable[Any]], timeout: float = 60) -> Any:
    """Run an async test body under trio, bounded so a hung server fails the test."""

    async def bounded() -> Any:
        with trio.fail_after(timeout):
            return await fn()

    return trio.run(bounded)


@asynccontextmanager
async def demo_session(module: str, db_path: Path, log: Path, **env: str) -> AsyncIterator[ClientSession]:
    """Start ``python -m vodou_engine.demo.<module>`` and yield an initialised session."""
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", f"vodou_engine.demo.{module}"],
        env={**get_default_environment(), db.DB_ENV: str(db_path), **env},
    )
    with log.open("a") as errlog:
        async with stdio_client(params, errlog=errlog) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            yield session


def check_tool_listing(module: str, tools: list[Any]) -> None:
    """Exact tool names; read tools read-only; effects not, destructive only for deletes."""
    expected = EXPECTED_TOOLS[module]
    by_name = {tool.name: tool for tool in tools}
    assert set(by_name) == set(expected), module
    for name, kind in expected.items():
        hints = by_name[name].annotations
        assert hints is not None, name
        assert hints.read_only_hint is (kind == "read"), name
        if kind != "read":
            assert hints.destructive_hint is (kind == "destructive"), name
            assert "idempotency_key" in by_name[name].input_schema["properties"], name
        assert by_name[name].output_schema is not None, name


def error_text(result: Any) -> str:
    return " ".join(getattr(block, "text", "") for block in result.content)


@pytest.fixture
def demo_db(tmp_path: Path) -> Path:
    return tmp_path / "demo.sqlite3"


def test_db_helpers_work_without_mcp(demo_db: Path) -> None:
    db.ensure_seeded(demo_db)
    db.ensure_seeded(demo_db)  # idempotent: no second seed
    assert len(db.channel_messages(demo_db, "#daily")) == 3
    assert len(db.channel_messages(demo_db, "general")) == 3

    changed = db.set_channel_topic(demo_db, "#daily", "Incident follow-ups")
    assert changed["topic"] == "Incident follow-ups"
    assert changed["version"] == 2
    assert db.calls(demo_db) == []

    assert db.parse_latency("list-events=412, messages_list=268,*=50") == {
        "list-events": 0.412,
        "messages_list": 0.268,
        "*": 0.05,
    }
    assert db.latency_for(db.parse_latency("*=50,work=10"), "work") == 0.01
    assert db.latency_for(db.parse_latency("*=50"), "other") == 0.05
    with pytest.raises(ValueError):
        db.parse_latency("list-events")

    db.reset(demo_db)
    assert db.channel_messages(demo_db, "#daily")[-1]["user"] == "lee"


def test_tool_names_annotations_and_structured_reads(demo_db: Path, tmp_path: Path) -> None:
    listed: dict[str, Any] = {}
    reads: dict[str, Any] = {}
    first_read = {
        "calendar_server": ("list-events", {}),
        "mail_server": ("messages_list", {"labelIds": ["UNREAD"]}),
        "chat_server": ("slack_search_messages", {"query": "@me"}),
    }

    async def probe(module: str) -> None:
        async with demo_session(module, demo_db, tmp_path / f"{module}.log") as session:
            listed[module] = (await session.list_tools()).tools
            tool, args = first_read[module]
            reads[module] = await session.call_tool(tool, args)

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            for module in first_read:  # lab_server is covered by the concurrency test
                nursery.start_soon(probe, module)

    run_trio(main)

    for module in first_read:
        check_tool_listing(module, listed[module])

    for module, result in reads.items():
        assert not result.is_error, (module, error_text(result))
        assert result.structured_content is not None, module

    events = reads["calendar_server"].structured_content["events"]
    assert len(events) == 4
    assert {"id", "summary", "start", "end"} <= set(events[0])
    unread = reads["mail_server"].structured_content["messages"]
    assert unread and all("UNREAD" in m["labelIds"] for m in unread)
    mentions = reads["chat_server"].structured_content["messages"]
    assert len(mentions) == 2 and {m["channel"] for m in mentions} == {"#daily"}

    recorded = {(c["server"], c["tool"]) for c in db.calls(demo_db)}
    assert recorded == {(SERVER_NAMES[m], tool) for m, (tool, _) in first_read.items()}


def test_post_is_recorded_and_a_repeated_key_is_refused(demo_db: Path, tmp_path: Path) -> None:
    db.ensure_seeded(demo_db)
    before = len(db.channel_messages(demo_db, "#daily"))
    out: dict[str, Any] = {}

    async def main() -> None:
        async with demo_session("chat_server", demo_db, tmp_path / "chat.log") as session:
            out["preview"] = await session.call_tool("slack_preview_message", {"channel": "#daily", "text": "Shipped"})
            args = {"channel": "#daily", "text": "Shipped", "idempotency_key": "run1:post"}
            out["first"] = await session.call_tool("slack_post_message", args)
            out["again"] = await session.call_tool("slack_post_message", args)
            out["missing"] = await session.call_tool("slack_get_channel", {"channel": "#nowhere"})
            db.set_channel_topic(demo_db, "#daily", "Changed behind our back")
            out["channel"] = await session.call_tool("slack_get_channel", {"channel": "#daily"})

    run_trio(main)

    preview = out["preview"].structured_content
    assert preview["after"] == {"channel": "#daily", "last_message": "Shipped"}
    assert preview["before"]["last_message"] != "Shipped"

    first = out["first"]
    assert not first.is_error
    assert first.structured_content["ok"] is True
    assert first.structured_content["channel"] == "#daily"
    messages = db.channel_messages(demo_db, "#daily")
    assert len(messages) == before + 1
    assert messages[-1]["text"] == "Shipped" and messages[-1]["ts"] == first.structured_content["ts"]

    again = out["again"]
    assert again.is_error
    assert "duplicate idempotency key run1:post: this effect already ran" in error_text(again)
    assert len(db.channel_messages(demo_db, "#daily")) == before + 1

    posts = db.calls(demo_db, tool="slack_post_message")
    assert [(c["outcome"], c["idempotency_key"]) for c in posts] == [("ok", "run1:post"), ("error", "run1:post")]
    assert posts[0]["arguments"] == {"channel": "#daily", "text": "Shipped"}
    assert posts[0]["server"] == "slack" and posts[0]["ended"] >= posts[0]["started"]

    assert out["missing"].is_error and "#nowhere" in error_text(out["missing"])
    assert db.calls(demo_db, tool="slack_get_channel")[0]["outcome"] == "error"

    channel = out["channel"].structured_content
    assert channel["topic"] == "Changed behind our back" and channel["version"] == 2
    assert channel["last_message"] == "Shipped"


def test_latency_env_is_real_server_side_time(demo_db: Path, tmp_path: Path) -> None:
    out: dict[str, Any] = {}

    async def main() -> None:
        async with demo_session(
            "lab_server", demo_db, tmp_path / "lab.log", VODOU_DEMO_LATENCY="query=200", VODOU_DEMO_NAME="slow-lab"
        ) as session:
            out["work"] = await session.call_tool("query", {"ms": 100, "label": "timed"})

    run_trio(main)

    result = out["work"].structured_content
    assert result["ended"] - result["started"] >= 0.1  # the work itself
    (call,) = db.calls(demo_db, tool="query", server="slow-lab")
    assert call["arguments"] == {"ms": 100, "label": "timed"}
    assert call["ended"] - call["started"] >= 0.3  # latency + work, both server-side
    assert call["started"] <= result["started"] - 0.2


def test_three_lab_servers_run_concurrently(demo_db: Path, tmp_path: Path) -> None:
    db.ensure_seeded(demo_db)
    names = ["lab-a", "lab-b", "lab-c"]
    results: dict[str, Any] = {}
    listed: dict[str, Any] = {}

    async def main() -> None:
        ready = {name: trio.Event() for name in names}
        go = trio.Event()

        async def branch(name: str) -> None:
            async with demo_session("lab_server", demo_db, tmp_path / f"{name}.log", VODOU_DEMO_NAME=name) as session:
                listed[name] = (await session.list_tools()).tools
                ready[name].set()
                await go.wait()  # start the work only once every server is up
                results[name] = await session.call_tool("query", {"ms": 600, "label": name})

        async with trio.open_nursery() as nursery:
            for name in names:
                nursery.start_soon(branch, name)
            for event in ready.values():
                await event.wait()
            go.set()

    run_trio(main)

    for name in names:
        check_tool_listing("lab_server", listed[name])
    assert {r.structured_content["server"] for r in results.values()} == set(names)
    assert all(r.structured_content["ms"] == 600 for r in results.values())
    spans = [(c["started"], c["ended"]) for c in db.calls(demo_db, tool="query")]
    assert len(spans) == 3
    assert max(start for start, _ in spans) < min(end for _, end in spans)
    assert len({c["pid"] for c in db.calls(demo_db, tool="query")}) == 3
