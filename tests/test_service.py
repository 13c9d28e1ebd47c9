"""The long-running service behind `recipe serve`: warm servers, runs in the background, a clean stop.

In-process on trio, against the real demo servers; effects are counted in the
demo world's own call log.
"""

from __future__ import annotations

import os
import signal
from datetime import UTC

import pytest
import trio
from conftest import demo_calls

from vodou_engine.errors import ToolError, UnknownRunError
from vodou_engine.servers import ServerSet, demo_servers
from vodou_engine.service import Service

POST = 'recipe "post"\npost: slack.slack_post_message {"channel": "#daily", "text": "from serve"}\n'
SLOW = 'recipe "slow"\nwait: board.query {"ms": 600000}\nafter: vodou.echo {"value": "done"}\n'
SAFETY = 60  # a broken service fails the test instead of hanging it


def service(tmp_path, **kwargs) -> Service:
    servers = ServerSet(demo_servers(tmp_path / "demo.db"), "demo")
    return Service(store=str(tmp_path / "runs.db"), servers=servers, **kwargs)


async def until(predicate, what: str) -> None:
    with trio.fail_after(SAFETY):
        while not await predicate():
            await trio.sleep(0.02)


def posts(tmp_path) -> list[dict]:
    return [c for c in demo_calls(tmp_path / "demo.db", tool="slack_post_message") if c["outcome"] == "ok"]


def test_runs_park_and_go_on_in_the_background_on_warm_servers(tmp_path):
    svc = service(tmp_path)
    runs = svc.runs()
    runs.save("post.recipe", text=POST, by="ana")

    async def main():
        async with trio.open_nursery() as nursery:
            await nursery.start(svc.serve)
            for _ in range(2):
                run_id = svc.start_saved("post", inputs=None, actor="ana")

                def state(run_id: str = run_id) -> str | None:  # this pass's run
                    try:
                        return runs.show(run_id).state
                    except UnknownRunError:  # not stored yet
                        return None

                async def parked():
                    # parked, not only asked: the question is stored a moment before the run parks,
                    # and an approval in that moment is picked up by the driver itself (state running)
                    return await trio.to_thread.run_sync(state) == "parked"

                await until(parked, "the run to park")
                card = runs.pending(run_id)
                report = await svc.approve(run_id, "post", actor="ana", fingerprint=card.fingerprint, proof="test")
                assert report.state == "parked"  # recorded; the effect goes on in the background

                async def done(run_id: str = run_id) -> bool:
                    return runs.show(run_id).state == "succeeded"

                await until(done, "the approved run to finish")
            svc.stop()

    trio.run(main)
    assert len(posts(tmp_path)) == 2
    assert (
        len({c["pid"] for c in demo_calls(tmp_path / "demo.db", server="slack")}) == 1
    )  # one warm process served both runs
    assert svc.pool.restarts == {}
    runs.close()


def test_a_server_that_died_is_started_again_when_next_needed(tmp_path):
    svc = service(tmp_path)
    runs = svc.runs()
    runs.save(
        "post.recipe",
        text=POST.replace("post:", 'read: slack.slack_get_channel {"channel": "#daily"}\npost:'),
        by="ana",
    )

    async def main():
        async with trio.open_nursery() as nursery:
            await nursery.start(svc.serve)
            hub = await svc.pool.hub(["slack"])
            srv = hub._hubs["slack"]._servers["slack"]
            first = await hub.call("slack", "slack_get_channel", {"channel": "#daily"})
            assert not first.is_error
            pid = demo_calls(tmp_path / "demo.db", tool="slack_get_channel")[-1]["pid"]
            os.kill(pid, signal.SIGKILL)
            with pytest.raises(ToolError):  # the reply never comes: the server died under the call
                with trio.fail_after(SAFETY):
                    await hub.call("slack", "slack_get_channel", {"channel": "#daily"})
            hub = await svc.pool.hub(["slack"])  # noticed dead: started again
            again = await hub.call("slack", "slack_get_channel", {"channel": "#daily"})
            assert not again.is_error and svc.pool.restarts == {"slack": 1}
            assert srv is not hub._hubs["slack"]._servers["slack"]
            svc.stop()

    trio.run(main)
    runs.close()


def test_stopping_leaves_a_run_mid_step_interrupted_and_resumable(tmp_path):
    svc = service(tmp_path, grace_s=0.2)
    runs = svc.runs()
    runs.save("slow.recipe", text=SLOW, by="ana")

    async def main():
        async with trio.open_nursery() as nursery:
            await nursery.start(svc.serve)
            run_id = svc.start_saved("slow", inputs=None, actor="ana")

            async def started():
                try:
                    nodes = {n.node: n.state for n in runs.show(run_id).nodes}
                except Exception:  # noqa: BLE001 - the run is not stored yet
                    return False
                return nodes.get("wait") == "running"

            await until(started, "the slow read to be running")
            svc.stop()
        return run_id

    run_id = trio.run(main)
    assert runs.show(run_id).state == "interrupted"
    assert svc.active == {}
    runs.close()


def test_two_serving_processes_fire_each_due_time_once(tmp_path):
    from datetime import datetime

    clock = {"now": datetime(2026, 3, 2, 8, 0, 30, tzinfo=UTC).timestamp()}
    now = lambda: clock["now"]  # noqa: E731
    first, second = service(tmp_path, clock=now, tick_s=0.01), service(tmp_path, clock=now, tick_s=0.01)
    runs = first.runs()
    runs.save("echo.recipe", text='recipe "echo"\nsay: vodou.echo {"value": "tick"}\n', by="ana")
    runs.add_schedule("every-minute", recipe="echo", cron="* * * * *", tz="UTC", by="ana")

    async def main():
        async with trio.open_nursery() as nursery:
            await nursery.start(first.serve)
            await nursery.start(second.serve)
            for minute in (1, 2, 3):
                clock["now"] = datetime(2026, 3, 2, 8, minute, 5, tzinfo=UTC).timestamp()

                async def fired(minute: int = minute) -> bool:
                    done = [r for r in runs.list(limit=100) if r.state == "succeeded"]
                    return len(done) >= minute

                await until(fired, f"the run due at 08:0{minute}")
            for _ in range(20):  # a few more ticks of both schedulers: nothing fires twice
                await trio.sleep(0.01)
            first.stop()
            second.stop()

    trio.run(main)
    listed = runs.list(limit=100)
    assert len(listed) == 3 and {r.state for r in listed} == {"succeeded"}
    assert sorted(f.outcome for f in runs.firings("every-minute")) == ["fired"] * 3
    runs.close()
