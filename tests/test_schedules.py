"""Saved recipes and schedules: versions kept, each due time decided once by the store.

The scheduler runs on a fake clock: ``Runs(clock=...)`` and ``due(now=...)``.
Two ``Runs`` on one store file stand for two serving processes.
"""

from __future__ import annotations

import json
from datetime import datetime
from zoneinfo import ZoneInfo

import msgspec
import pytest
import trio

from vodou_engine.errors import RecipeError, RefusedError, UsageError
from vodou_engine.runs import Runs
from vodou_engine.scheduler import decide, next_after

RECIPE = 'recipe "hello"\ninputs:\n  who = "world"\nsay: vodou.echo {"value": "hello {who}"}\n'
LISBON = ZoneInfo("Europe/Lisbon")


def ts(*args, tz=LISBON) -> float:
    return datetime(*args, tzinfo=tz).timestamp()


@pytest.fixture
def runs(tmp_path):
    clock = {"now": ts(2026, 3, 2, 7, 0)}  # a Monday
    r = Runs(store=tmp_path / "runs.db", servers={}, clock=lambda: clock["now"])
    r.fake = clock
    yield r
    r.close()


def test_saving_again_keeps_every_version_and_a_run_records_which_it_ran(runs):
    v1 = runs.save("hello.recipe", text=RECIPE, by="ana")
    v2 = runs.save("hello.recipe", text=RECIPE.replace("hello {who}", "hi {who}"), by="ana")
    assert (v1.name, v1.version, v2.version) == ("hello", 1, 2)
    assert runs.saved("hello", 1).source == RECIPE and runs.saved("hello").version == 2
    report = trio.run(lambda: runs.start_saved(runs.saved("hello", 1), actor="ana"))
    assert report.state == "succeeded"
    run = runs.store().get_run(report.run)
    assert (run.saved_recipe, run.saved_version) == ("hello", 1)
    assert [n.output for n in runs.show(report.run).nodes] == ["hello world"]


def test_a_schedule_fires_each_due_time_once_across_two_schedulers(runs, tmp_path):
    runs.save("hello.recipe", text=RECIPE, by="ana")
    s = runs.add_schedule(
        "weekday-hello", recipe="hello", cron="0 8 * * 1-5", tz="Europe/Lisbon", inputs={"who": "team"}, by="ana"
    )
    assert s.state == "active" and s.next_due == ts(2026, 3, 2, 8, 0)
    other = Runs(store=tmp_path / "runs.db", servers={}, clock=runs.clock)
    assert runs.due(now=ts(2026, 3, 2, 7, 59)) == []
    at = ts(2026, 3, 2, 8, 0, 1)
    first, second = runs.due(now=at), other.due(now=at)
    assert len(first) + len(second) == 1  # decided by the store, not by timing
    (f,) = first or second
    report = trio.run(lambda: runs.start_firing(f))
    assert report.state == "succeeded" and report.run == f.run_id
    assert runs.store().get_run(f.run_id).schedule == "weekday-hello"
    assert runs.due(now=at) == other.due(now=at) == []
    assert runs.store().get_schedule("weekday-hello").next_due == ts(2026, 3, 3, 8, 0)
    # the weekend is skipped by the expression itself: Friday's run, then Monday's
    assert next_after("0 8 * * 1-5", "Europe/Lisbon", ts(2026, 3, 6, 8, 0)) == ts(2026, 3, 9, 8, 0)
    other.close()


def test_missed_due_times_run_once_within_the_window_and_are_skipped_beyond_it(runs):
    runs.save("hello.recipe", text=RECIPE, by="ana")
    runs.add_schedule("hourly", recipe="hello", cron="0 * * * *", tz="UTC", by="ana", catch_up_s=3600)
    # nothing served from 07:00 to 10:30 UTC: 08:00, 09:00 beyond the window; 10:00 within it
    s = runs.store().get_schedule("hourly")
    decisions, _next_due = decide(s, ts(2026, 3, 2, 10, 30, tz=ZoneInfo("UTC")))
    assert [d.outcome for d in decisions] == ["skipped", "skipped", "fired"]
    assert "beyond the catch-up window" in decisions[0].note
    fired = runs.due(now=ts(2026, 3, 2, 10, 30, tz=ZoneInfo("UTC")))
    assert len(fired) == 1 and fired[0].due_at == ts(2026, 3, 2, 10, 0, tz=ZoneInfo("UTC"))
    recorded = {f.due_at: f.outcome for f in runs.firings("hourly")}
    assert sorted(recorded.values()) == ["fired", "skipped", "skipped"]
    # several missed inside the window fold into the latest
    s = runs.store().get_schedule("hourly")
    decisions, _ = decide(msgspec.structs.replace(s, catch_up_s=4 * 3600), ts(2026, 3, 2, 13, 30, tz=ZoneInfo("UTC")))
    assert [d.outcome for d in decisions] == ["skipped", "skipped", "fired"] and "folded into" in decisions[0].note


def test_daylight_saving_days_do_what_cron_does():
    # Lisbon springs forward at 01:00 -> 02:00 on 2026-03-29: 01:30 does not exist that day
    assert next_after("30 1 * * *", "Europe/Lisbon", ts(2026, 3, 29, 0, 0)) == ts(2026, 3, 29, 2, 0)
    # and falls back at 02:00 -> 01:00 on 2026-10-25: 01:30 happens twice, runs once
    first = next_after("30 1 * * *", "Europe/Lisbon", ts(2026, 10, 25, 0, 0))
    assert next_after("30 1 * * *", "Europe/Lisbon", first) == ts(2026, 10, 26, 1, 30)


def test_a_firing_whose_scheduler_died_is_started_once_later(runs, tmp_path):
    runs.save("hello.recipe", text=RECIPE, by="ana")
    runs.add_schedule("hourly", recipe="hello", cron="0 * * * *", tz="UTC", by="ana")
    at = ts(2026, 3, 2, 8, 0, 5, tz=ZoneInfo("UTC"))
    (f,) = runs.due(now=at)  # decided, and then the process "died" before starting the run
    other = Runs(store=tmp_path / "runs.db", servers={}, clock=runs.clock)
    assert other.due(now=at + 10) == []  # too soon to call it orphaned: its decider may be starting it
    (again,) = other.due(now=at + 120)
    assert again.run_id == f.run_id
    report = trio.run(lambda: other.start_firing(again))
    assert report.run == f.run_id and report.state == "succeeded"
    assert trio.run(lambda: runs.start_firing(f)) is None  # the first process coming back starts nothing
    assert other.due(now=at + 240) == []
    other.close()


def test_bad_schedules_are_refused_before_anything_is_stored(runs):
    runs.save("hello.recipe", text=RECIPE, by="ana")
    with pytest.raises(UsageError, match="five fields"):
        runs.add_schedule("x", recipe="hello", cron="0 8 * *", by="ana")
    with pytest.raises(UsageError, match="time zone"):
        runs.add_schedule("x", recipe="hello", cron="0 8 * * *", tz="Mars/Olympus", by="ana")
    with pytest.raises(UsageError, match="no input"):
        runs.add_schedule("x", recipe="hello", cron="0 8 * * *", inputs={"whom": "x"}, by="ana")
    with pytest.raises(RefusedError, match="no saved recipe"):
        runs.add_schedule("x", recipe="nope", cron="0 8 * * *", by="ana")
    assert runs.schedules() == []


def test_an_agents_schedule_starts_paused_and_its_recipe_cannot_opt_out(runs):
    runs.save("hello.recipe", text=RECIPE, by="agent:claude", origin="agent")
    s = runs.add_schedule("proposed", recipe="hello", cron="0 8 * * *", by="agent:claude", origin="agent")
    assert s.state == "paused" and s.next_due is None
    assert runs.due(now=ts(2026, 3, 9, 9, 0)) == []
    resumed = runs.resume_schedule("proposed", by="ana")
    assert resumed.state == "active" and resumed.next_due is not None
    with pytest.raises(RecipeError, match="may not opt out"):
        runs.save(
            "x.recipe",
            text='post: slack.slack_post_message {"channel": "#x", "text": "y"}\n  without asking\n',
            by="agent:claude",
            origin="agent",
        )


def test_save_and_schedule_on_the_command_line(cli, tmp_path):
    recipe = tmp_path / "hello.recipe"
    recipe.write_text(RECIPE)
    assert "version 1" in cli("save", recipe, expect=0).out
    assert "version 2" in cli("save", recipe, expect=0).out
    added = cli(
        "schedule", "add", "hello", "--cron", "0 8 * * 1-5", "--tz", "Europe/Lisbon", "--set", "who=team", expect=0
    )
    assert "next due" in added.out
    assert cli("schedule", "add", "hello", "--cron", "0 8 * *").code == 2  # four fields
    assert cli("schedule", "add", "nope", "--cron", "0 8 * * *").code == 5  # no such saved recipe
    (listed,) = cli("schedule", "list", "--json", expect=0).json()
    assert (
        listed["state"] == "active"
        and listed["tz"] == "Europe/Lisbon"
        and json.loads(listed["inputs_json"]) == {"who": "team"}
    )
    cli("schedule", "pause", "hello", expect=0)
    assert cli("schedule", "pause", "hello").code == 5  # already paused: says so
    cli("schedule", "resume", "hello", expect=0)
    cli("schedule", "remove", "hello", expect=0)
    assert cli("schedule", "list", "--json", expect=0).json() == []


# --- what a schedule an agent proposed may run ------------------------------------------------------

POST = 'recipe "poster"\napprovers: ana\npost: ops.post_message {"channel": "#daily", "text": "hello"}\n'
UNASKED = 'recipe "poster"\napprovers: ana\npost: ops.post_message {"channel": "#elsewhere", "text": "unasked"}\n  without asking\n'


@pytest.fixture
def poster(tmp_path):
    """Runs on a fake clock whose `ops` server is the rogue one (its own log counts posts)."""
    from conftest import rogue_server

    from vodou_engine.servers import ServerConfig

    clock = {"now": ts(2026, 3, 2, 7, 0)}
    servers = {"ops": ServerConfig(**rogue_server(tmp_path / "rogue.log"))}
    r = Runs(store=tmp_path / "runs.db", servers=servers, clock=lambda: clock["now"], workers=False)
    r.fake = clock
    r.log = tmp_path / "rogue.log"
    yield r
    r.close()


def fire(runs: Runs, at: float) -> list:
    """Every due time up to ``at``, started here as a scheduler would: (firing, report or error)."""
    out = []
    for f in runs.due(now=at):
        try:
            out.append((f, trio.run(runs.start_firing, f)))
        except Exception as exc:  # noqa: BLE001 - the firing's own record says it failed
            out.append((f, exc))
    return out


def test_an_agents_schedule_runs_the_version_it_was_proposed_with_whatever_is_saved_later(poster):
    from conftest import rogue_calls

    runs = poster
    v1 = runs.save("poster.recipe", text=POST, by="agent:claude", origin="agent")
    proposed = runs.add_schedule("daily", recipe="poster", cron="0 8 * * *", by="agent:claude", origin="agent")
    assert (proposed.state, proposed.recipe_version) == ("paused", v1.version)
    # a person saves versions of the recipe before and after enabling the schedule: one that
    # opts out of asking (and posts elsewhere), one that only changes the text
    assert runs.save("poster.recipe", text=UNASKED, by="bruno").version == 2
    enabled = runs.resume_schedule("daily", by="ana")
    assert (enabled.state, enabled.recipe_version) == ("active", 1)
    runs.save("poster.recipe", text=POST.replace("hello", "changed"), by="bruno")
    for day in (3, 4):
        ((_f, report),) = fire(runs, ts(2026, 3, day, 8, 0, 1))
        assert report.state == "parked", report  # version 1 asks before it posts
        assert runs.store().get_run(report.run).saved_version == 1
        (_pending,) = report.pending
        assert runs.show(report.run).approvals[0].payload == {"channel": "#daily", "text": "hello"}
    assert rogue_calls(runs.log, "post_message") == []  # nothing was posted, asked or not


def test_a_firing_of_an_agents_schedule_never_runs_a_version_that_opts_out_of_asking(poster):
    """A schedule an agent proposed before schedules named their version follows the latest:
    each firing checks what it would run, and refuses a version that opts out of asking."""
    from conftest import rogue_calls, store_sql

    runs = poster
    runs.save("poster.recipe", text=POST, by="agent:claude", origin="agent")
    runs.add_schedule("daily", recipe="poster", cron="0 8 * * *", by="agent:claude", origin="agent")
    runs.resume_schedule("daily", by="ana")
    store_sql(runs.store().location, "UPDATE schedules SET recipe_version = NULL")  # as stored by schema 5
    runs.save("poster.recipe", text=UNASKED, by="bruno")
    ((f, error),) = fire(runs, ts(2026, 3, 3, 8, 0, 1))
    assert isinstance(error, RecipeError) and "never runs a recipe that opts out of asking" in error.message
    (recorded,) = [x for x in runs.firings("daily") if x.due_at == f.due_at]
    assert recorded.outcome == "failed" and "opts out of asking" in recorded.note
    assert runs.list() == [] and rogue_calls(runs.log, "post_message") == []
    # a person's own schedule runs what that person saved, the latest version
    runs.add_schedule("mine", recipe="poster", cron="0 9 * * *", by="bruno")
    assert runs.store().get_schedule("mine").recipe_version is None
    ((_, report),) = fire(runs, ts(2026, 3, 3, 9, 0, 1))
    assert report.state == "succeeded" and len(rogue_calls(runs.log, "post_message")) == 1


def test_an_agent_cannot_pin_a_version_that_opts_out_of_asking(poster):
    runs = poster
    runs.save("poster.recipe", text=POST, by="agent:claude", origin="agent")
    runs.save("poster.recipe", text=UNASKED, by="bruno")
    with pytest.raises(RecipeError, match="opts out of asking"):
        runs.add_schedule("daily", recipe="poster", cron="0 8 * * *", by="agent:claude", origin="agent")  # the latest
    with pytest.raises(RecipeError, match="opts out of asking"):
        runs.add_schedule("daily", recipe="poster", cron="0 8 * * *", by="agent:claude", origin="agent", version=2)
    assert (
        runs.add_schedule(
            "daily", recipe="poster", cron="0 8 * * *", by="agent:claude", origin="agent", version=1
        ).recipe_version
        == 1
    )


def test_an_agents_schedule_stored_before_versions_were_named_is_pinned_when_the_store_is_upgraded(
    tmp_path, monkeypatch
):
    import sqlite3

    from vodou_engine.store import open_store
    from vodou_engine.store import schema as store_schema

    real = store_schema.migrations()
    monkeypatch.setattr(store_schema, "migrations", lambda: real[:5])  # a store of schema 5
    open_store(str(tmp_path / "runs.db")).close()
    conn = sqlite3.connect(tmp_path / "runs.db")
    for version in (1, 2):
        conn.execute(
            "INSERT INTO recipes VALUES ('poster', ?, 'x', '{}', 'fp', 0, 'agent:claude', 'agent')", (version,)
        )
    for name, origin in (("theirs", "agent"), ("mine", "person")):
        conn.execute(
            "INSERT INTO schedules VALUES (?, 'poster', '0 8 * * *', 'UTC', '{}', 'active', 3600, 0, 0, 'x', ?, 0)",
            (name, origin),
        )
    conn.commit()
    conn.close()
    monkeypatch.undo()
    store = open_store(str(tmp_path / "runs.db"))
    assert store.schema_version() == len(real)
    assert {s.name: s.recipe_version for s in store.schedules()} == {"theirs": 2, "mine": None}
    store.close()
