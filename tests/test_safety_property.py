"""Property: whatever a person does, the server sees only approved, fresh, unexpired effects, once.

Hypothesis generates small recipes (one to three posts, some guarded by a
``check:``) and a sequence of actions: approve, reject, let an approval
expire, change the world under a check, and crash at a named point. The
runs go through the public API against the real demo chat server (stdio)
and a real SQLite store; the oracle is the server's own call log.
"""

from __future__ import annotations

import sqlite3
import sys
import time

import pytest
import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from vodou_engine.compiler import compile_recipe
from vodou_engine.demo import db as demo
from vodou_engine.errors import VodouError
from vodou_engine.owners import HOST
from vodou_engine.runs import Prepared, Runs
from vodou_engine.runtime import faults
from vodou_engine.servers import ServerConfig, ServerSet
from vodou_engine.store import open_store

CRASH_POINTS = ["reads", "parking", "executing", "executed", "resume"]

effects_st = st.lists(st.booleans(), min_size=1, max_size=3)  # one bool per effect: guarded by a check
action_st = st.one_of(
    st.tuples(st.just("approve"), st.integers(0, 2)),
    st.tuples(st.just("reject"), st.integers(0, 2)),
    st.tuples(st.just("expire"), st.integers(0, 2)),
    st.tuples(st.just("edit"), st.just(0)),
    st.tuples(st.just("crash"), st.sampled_from(CRASH_POINTS)),
)


def recipe_for(guards: list[bool], together: bool) -> str:
    lines = ['ping: vodou.echo {"value": "start"}']
    if together and len(guards) > 1:
        lines.append("together:")
    pad = "  " if together and len(guards) > 1 else ""
    for i, guarded in enumerate(guards):
        lines.append(f'{pad}e{i}: slack.slack_post_message {{"channel": "#daily", "text": "effect {i}"}}')
        if guarded:
            lines.append(f'{pad}  check: slack.slack_get_channel {{"channel": "#daily"}}')
    return "\n".join(lines) + "\n"


@settings(max_examples=10, deadline=None, suppress_health_check=list(HealthCheck))
@given(guards=effects_st, together=st.booleans(), actions=st.lists(action_st, min_size=1, max_size=8))
def test_servers_see_only_approved_fresh_unexpired_effects_once(tmp_path_factory, guards, together, actions):
    tmp = tmp_path_factory.mktemp("prop")
    demo_db, store_path = tmp / "demo.db", tmp / "runs.db"
    servers = {
        "slack": ServerConfig(
            command=sys.executable, args=["-m", "vodou_engine.demo.chat_server"], env={"VODOU_DEMO_DB": str(demo_db)}
        )
    }
    plan = compile_recipe(recipe_for(guards, together), "prop.recipe")
    store = open_store(str(store_path))
    edits = 0
    hub = None
    seen_at_edit: dict[str, int] = {}  # approval id -> edits before it was asked
    approved: dict[str, str] = {}  # step -> fingerprint the person approved while fresh and current
    rejected: set[str] = set()
    crashed_mid_effect: set[str] = set()

    incarnation = 0

    def driver() -> Runs:
        """A new 'process' after each drive: the one before it is gone (its pid names no process)."""
        nonlocal incarnation
        incarnation += 1
        return Runs(
            store=store, servers=ServerSet(servers, "test"), owner=f"{HOST}:{2**22 + incarnation}:{incarnation}"
        )

    async def drive_run():
        return await driver().resume("r1", hub=hub)

    async def scenario():
        nonlocal edits, hub
        from vodou_engine.tools.hub import open_hub

        async with open_hub(servers, ["slack"]) as hub:

            async def guarded(coro_fn):
                try:
                    return await coro_fn()
                except faults.SimulatedCrash:
                    return None
                except BaseExceptionGroup as group:
                    crash, rest = group.split(faults.SimulatedCrash)
                    if crash is None or rest is not None:
                        raise
                    return None

            prepared = Prepared(plan=plan, text=None, path=None, servers=ServerSet(servers, "test"), hub=hub)
            await guarded(lambda: driver().start(prepared, actor="ana", run_id="r1"))
            for kind, arg in actions:
                run = store.get_run("r1")
                if run.state in ("succeeded", "failed", "declined"):
                    break
                pending = sorted(store.pending_approvals("r1"), key=lambda a: a.step)
                for a in pending:
                    seen_at_edit.setdefault(a.id, edits)
                if kind == "edit":
                    demo.set_channel_topic(demo_db, "#daily", f"topic {edits}")
                    edits += 1
                    continue
                if kind == "crash":
                    faults.simulate(arg)
                    try:
                        await guarded(lambda: drive_run())
                    finally:
                        faults.simulate(None)
                    if arg in ("executing", "executed"):
                        crashed_mid_effect.update(e.step for e in store.effects("r1") if e.state == "executing")
                    continue
                if not pending:
                    await guarded(lambda: drive_run())
                    continue
                a = pending[arg % len(pending)]
                if kind == "expire":
                    conn = sqlite3.connect(store_path)
                    conn.execute("UPDATE approvals SET expires_at = ? WHERE id = ?", (time.time() - 1, a.id))
                    conn.commit()
                    conn.close()
                    with pytest.raises(VodouError):
                        store.decide(a.id, "approved", by="ana")
                    continue
                decision = "approved" if kind == "approve" else "rejected"
                try:
                    store.decide(a.id, decision, by="ana")
                except VodouError:
                    # expired while pending: refused; the next drive asks again
                    await guarded(lambda: drive_run())
                    continue
                step_guarded = guards[int(a.step[1:])]
                if decision == "rejected":
                    rejected.add(a.step)
                elif not (step_guarded and edits > seen_at_edit[a.id]):
                    approved[a.step] = a.fingerprint
                try:
                    await guarded(lambda: drive_run())
                except VodouError:
                    pass  # e.g. a declined run refuses to be driven; the oracle below still holds

    trio.run(scenario)
    calls = (
        [c for c in demo.calls(demo_db, tool="slack_post_message") if c["outcome"] == "ok"] if demo_db.exists() else []
    )
    posted = [c["arguments"]["text"].split()[-1] for c in calls]
    # never more than once per effect
    assert len(posted) == len(set(posted)), posted
    effects = {e.step: e for e in store.effects("r1")}
    for i in posted:
        step = f"e{i}"
        assert step not in rejected
        # the server saw exactly a payload a person approved while it was fresh and current
        assert step in approved, (step, approved, actions)
        assert effects[step].fingerprint == approved[step]
    # and the engine's record agrees with the server, except where a crash left it unknown
    for step, e in effects.items():
        if e.state == "executed":
            assert step[1:] in posted
    store.close()
