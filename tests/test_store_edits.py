"""A saved recipe version is the text that was saved: an edit of its row in the store runs nothing.

A saved recipe is compiled again from its stored text each time it runs (a schedule's
firing, the inbox's Run button, an agent's schedule pinned to a version). Its row also
holds the plan that text compiled to when it was saved, fingerprinted, and that plan
names the text's sha256. A text edited in the store behind the engine's back (a version
that asked turned into one that posts elsewhere without asking) must be refused like an
edited stored plan, before anything starts. Real rogue server; posts counted in its log.
"""

from __future__ import annotations

from conftest import rogue_calls, store_sql
from test_schedules import POST, UNASKED, fire, poster, ts  # noqa: F401 - poster: the fixture

from vodou_engine.errors import TamperedError, UsageError


def test_a_saved_version_whose_text_was_edited_in_the_store_runs_nothing(poster):  # noqa: F811 - the fixture
    runs = poster
    runs.save("poster.recipe", text=POST, by="bruno")
    runs.add_schedule("daily", recipe="poster", cron="0 8 * * *", by="bruno")
    ((_, report),) = fire(runs, ts(2026, 3, 3, 8, 0, 1))
    assert report.state == "parked"  # as saved, it asks before it posts
    store_sql(runs.store().location, "UPDATE recipes SET source = ? WHERE name = 'poster' AND version = 1", (UNASKED,))

    ((f, error),) = fire(runs, ts(2026, 3, 4, 8, 0, 1))
    assert isinstance(error, TamperedError), error
    assert "saved recipe 'poster' version 1" in error.message and "nothing was run" in error.message
    (recorded,) = [x for x in runs.firings("daily") if x.due_at == f.due_at]
    assert recorded.outcome == "failed"
    assert rogue_calls(runs.log, "post_message") == []  # never posted, asked or not
    assert len(runs.list()) == 1  # only the first firing's run


# --- a schedule that can no longer be read stops only itself ---------------------------------------


def test_a_schedule_row_that_can_no_longer_be_read_stops_only_itself(poster):  # noqa: F811 - the fixture
    # every schedule is decided in one tick: one row whose zone or expression no longer works
    # (edited in the store, or a zone the system's tzdata dropped) must not stop the others
    runs = poster
    runs.save("poster.recipe", text=UNASKED, by="bruno")  # posts as soon as it fires
    runs.add_schedule("broken", recipe="poster", cron="0 8 * * *", by="bruno")
    runs.add_schedule("daily", recipe="poster", cron="0 8 * * *", by="bruno")
    store_sql(runs.store().location, "UPDATE schedules SET tz = 'Mars/Olympus_Mons' WHERE name = 'broken'")

    for day in (3, 4):
        fired = fire(runs, ts(2026, 3, day, 8, 0, 1))
        assert [f.schedule for f, _ in fired] == ["daily"], fired
    assert len(rogue_calls(runs.log, "post_message")) == 2  # daily posted on both days
    (failed,) = runs.firings("broken")  # said once where a person looks, not retried each tick
    assert failed.outcome == "failed" and "unknown time zone 'Mars/Olympus_Mons'" in failed.note
    assert runs.store().get_schedule("broken").next_due is None


def test_a_schedule_whose_inputs_were_edited_into_something_else_fails_its_firing_clearly(poster):  # noqa: F811 - the fixture
    runs = poster
    runs.save("poster.recipe", text=UNASKED, by="bruno")
    runs.add_schedule("daily", recipe="poster", cron="0 8 * * *", by="bruno")
    for day, inputs in ((3, "[1, 2]"), (4, "{not json")):
        store_sql(runs.store().location, "UPDATE schedules SET inputs_json = ?", (inputs,))
        ((f, error),) = fire(runs, ts(2026, 3, day, 8, 0, 1))
        assert isinstance(error, UsageError), error  # a clear error, exit 2, not a traceback
        assert "inputs" in error.message
        (recorded,) = [x for x in runs.firings("daily") if x.due_at == f.due_at]
        assert recorded.outcome == "failed" and "inputs" in recorded.note
    assert runs.list() == [] and rogue_calls(runs.log, "post_message") == []
    assert runs.store().orphan_firings(decided_before=ts(2026, 3, 9)) == []  # never started again later
