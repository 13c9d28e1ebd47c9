"""`recipe mcp` and loops: an agent starts a loop recipe through its MCP tools (the SDK's own
client, the real demo servers), sees the one batch card with each item, and cannot decide it,
nor choose its items; a person approves some items with `recipe approve --items`, and exactly
those replies are sent, counted in the demo mail server's own log."""

from __future__ import annotations

from conftest import RECIPES, demo_calls
from test_agents import Agent, run

REPLY = (RECIPES / "reply-unread.recipe").read_text()


def test_an_agent_starts_a_loop_recipe_and_only_a_person_decides_its_batch(cli):
    async def main():
        async with Agent(cli) as agent:
            started = await agent.ok("start_run", recipe=REPLY, name="reply-unread")
            assert started["state"] == "parked" and started["started_by"] == "agent:test-agent"
            run_id = started["run"]
            (pending,) = started["pending"]  # one card for every item
            assert pending["step"] == "reply"
            assert pending["decide"]["approve"].startswith(f"recipe approve {run_id} reply")
            assert pending["items"] == list(range(len(pending["items"])))
            some = pending["decide"]["approve_some"]  # the person may approve some items only
            assert some.startswith(f"recipe approve {run_id} reply --items 0,1")
            unread = (await agent.ok("run_status", run=run_id))["outputs"]["unread"]["messages"]
            assert len(unread) == len(pending["items"]) >= 2
            for m in unread:
                assert f"Re: {m['subject']}" in pending["card"]
            # the agent can neither approve nor choose items: no tool, no argument
            err = await agent.refused("start_run", recipe=REPLY, items=[0])
            assert err["code"] == "usage" and "`items`" in err["message"]
            assert (await agent.session.call_tool("approve", {"run": run_id, "items": [0]})).is_error
            assert demo_calls(cli.demo_db, tool="send_message") == []

            # the person, in a shell, approves the first item only
            cli.proc(*pending["decide"]["approve"].split()[1:], "--items", "0", "--yes", expect=None)
            (sent,) = demo_calls(cli.demo_db, tool="send_message")
            assert sent["arguments"]["to"] == unread[0]["from"]
            status = await agent.ok("run_status", run=run_id)
            assert [e["step"] for e in status["effects"]] == ["reply[0]"]
            assert status["effects"][0]["decided_by"] == pending["approvers"][0]

    run(main)
