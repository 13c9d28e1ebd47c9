"""The first run: the person who starts `recipe serve` signs in as themselves and decides the
runs they started from the CLI. A real `recipe run` parks, a real `recipe serve` prints the
link, a browser's requests (httpx) spend it and approve; the post is counted in the demo chat
server's own log."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
import uuid

import httpx2
import pytest
from conftest import demo_calls
from web_helpers import Person, Serving, form, sign_in, wait_for

from vodou_engine.osuser import os_user


def cli(serving: Serving, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "vodou_engine", *args],
        cwd=serving.tmp,
        env=serving.env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_serve_prints_a_sign_in_link_for_whoever_started_it_who_then_approves_their_cli_run(tmp_path):
    note = f"first run {uuid.uuid4().hex[:8]}"
    (tmp_path / "note.recipe").write_text(
        f'recipe "note"\npost: slack.slack_post_message {{"channel": "#daily", "text": "{note}"}}\n'
    )
    serving = Serving(tmp_path)
    parked = cli(serving, "run", "note.recipe", "--json")
    assert parked.returncode == 3, parked.stderr  # parked: nobody at a terminal to ask
    run_id = json.loads(parked.stdout)["run"]
    me = os_user()
    serving.start()
    try:
        link = wait_for(
            lambda: re.search(rf"sign in as {re.escape(me)} \(you, .*?\):\n  (http://\S+)", serving.log.read_text()),
            "the sign-in link on serve's stderr",
        ).group(1)
        assert link.startswith(serving.url + "/signin?token=")
        with httpx2.Client(base_url=serving.url, timeout=60) as client:
            person: Person = sign_in(client, link, me)
            inbox = person.get("/").text
            assert f'href="/runs/{run_id}#q-post"' in inbox  # waiting for me, not for someone else
            page = person.get(f"/runs/{run_id}").text
            res = person.post(f"/runs/{run_id}/approve", form(page, f"/runs/{run_id}/approve"), follow=False)
            assert res.status_code == 303 and "done=approved" in res.headers["location"]
            wait_for(
                lambda: [c for c in demo_calls(serving.demo_db, tool="slack_post_message") if c["outcome"] == "ok"],
                "the post in the chat server's log",
            )
            again = client.get(link.removeprefix(serving.url))
            assert "Sign in as" not in again.text  # spent: it worked once
    finally:
        try:
            code, _ = serving.stop()
        finally:
            serving.kill()
    posts = [c for c in demo_calls(serving.demo_db, tool="slack_post_message") if c["arguments"].get("text") == note]
    assert len(posts) == 1 and code == 0
    shown = cli(serving, "show", run_id, "--json")
    assert json.loads(shown.stdout)["state"] == "succeeded"
    assert json.loads(shown.stdout)["started_by"] == me


def test_no_link_when_serve_listens_beyond_this_machine_or_is_told_not_to(tmp_path):
    from vodou_engine.web.signin import local_only

    assert local_only("127.0.0.1") and local_only("localhost") and local_only("::1") and local_only("[::1]")
    assert not local_only("0.0.0.0") and not local_only("192.168.1.10") and not local_only("example.org")
    serving = Serving(tmp_path, "--no-signin-link")
    serving.start()
    try:
        assert "serving on" in serving.log.read_text()
    finally:
        try:
            serving.stop()
        finally:
            serving.kill()
    assert "sign in as" not in serving.log.read_text()


@pytest.mark.both_stores
def test_two_serves_starting_at_once_both_make_the_same_person_an_approver(store_location):
    """Two `recipe serve` starting on one store both add the user who started them (the first
    run's link): one adds, the other finds it added; neither fails (it crashed one of two serves
    on PostgreSQL with a unique violation), and the name is an approver once."""
    from vodou_engine.runs import Runs

    Runs(store=store_location).store().close()  # the store exists before the race
    go = threading.Barrier(8)
    results: list[object] = []

    def one() -> None:
        runs = Runs(store=store_location)
        try:
            go.wait()
            results.append(runs.ensure_approver("ana", by="ana"))
        except Exception as exc:  # noqa: BLE001 - the failure is the finding
            results.append(exc)
        finally:
            runs.close()

    threads = [threading.Thread(target=one) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(map(repr, results)) == sorted(["True"] + ["False"] * 7), results
    runs = Runs(store=store_location)
    assert runs.ensure_approver("ana", by="ana") is False
    assert runs.approvers() == ["ana"]
    runs.close()
