"""The approval inbox without a browser: the real app over Starlette's TestClient (on trio),
a real SQLite store, the real demo MCP servers kept warm by the service, and one real
`recipe serve` process for the signal test.

Effects are counted where they land: the demo chat server's call log.
"""

from __future__ import annotations

import os
import re
import sqlite3
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from conftest import demo_calls
from starlette.testclient import TestClient
from web_helpers import POST, Person, Serving, form, path_of, problem, sign_in, wait_for

from vodou_engine.policy import Policy
from vodou_engine.servers import ServerSet, demo_servers
from vodou_engine.service import Service
from vodou_engine.web.app import create_app
from vodou_engine.web.config import WebConfig
from vodou_engine.web.identity import add_approver, sha256, sign_in_link

CHECKED = (
    'recipe "checked"\napprovers: ana\ninputs:\n  text = "x"\n'
    'post: slack.slack_post_message {"channel": "#general", "text": "{text}"}\n'
    '  check: slack.slack_get_channel {"channel": "#general"}\n'
    "  expires: 1s\n"
)
QUICK = 'recipe "quick"\napprovers: ana\ninputs:\n  text = "x"\npost: slack.slack_post_message {"channel": "#daily", "text": "{text}"}\n  expires: 1s\n'


class Inbox:
    def __init__(self, tmp: Path, svc: Service, client: TestClient):
        self.tmp = tmp
        self.svc = svc
        self.runs = svc.runs()
        self.client = client
        self.people: dict[str, Person] = {}
        self.clock: Clock | None = None

    def person(self, name: str) -> Person:
        if name not in self.people:
            _, link = add_approver(self.runs, name, by="test", base_url="http://testserver")
            self.people[name] = sign_in(self.client, link, name)
        return self.people[name]

    def nobody(self) -> Person:
        return Person(self.client, "nobody", None)

    def park(self, who: Person, recipe: str = "post", text: str | None = None) -> tuple[str, str]:
        """Start ``recipe`` from its page as ``who``; (run id, the text it would post) once it waits."""
        text = text or f"web test {uuid.uuid4().hex[:8]}"
        page = who.get(f"/recipes/{recipe}")
        fields = form(page.text, f"/recipes/{recipe}/run")
        fields["input:text"] = text
        res = who.post(f"/recipes/{recipe}/run", fields, follow=False)
        assert res.status_code == 303, res.text
        run_id = res.headers["location"].split("/runs/")[1].split("?")[0]
        wait_for(
            lambda: self.runs.store().pending_approvals(run_id) if self._exists(run_id) else None,
            f"run {run_id} to park",
        )
        return run_id, text

    def _exists(self, run_id: str) -> bool:
        try:
            self.runs.store().get_run(run_id)
            return True
        except Exception:  # noqa: BLE001 - not stored yet
            return False

    def posts(self, text: str) -> list[dict]:
        return [
            c
            for c in demo_calls(self.tmp / "demo.db", tool="slack_post_message")
            if c["arguments"].get("text") == text and c["outcome"] == "ok"
        ]

    def audit(self, kind: str = "web.refused") -> list:
        return [a for a in self.runs.store().audit_log() if a.kind == kind]


class Clock:
    """The service's clock: real time, moved on by a test that needs a question to lapse
    (never back, so every other test of the module sees time go forward as usual)."""

    def __init__(self) -> None:
        self.ahead = 0.0

    def __call__(self) -> float:
        return time.time() + self.ahead

    def advance(self, seconds: float) -> None:
        self.ahead += seconds


@pytest.fixture(scope="module")
def inbox(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("inbox")
    clock = Clock()
    svc = Service(
        store=str(tmp / "runs.db"),
        servers=ServerSet(demo_servers(tmp / "demo.db"), "demo"),
        policy=Policy(),
        clock=clock,
    )
    runs = svc.runs()
    for text in (POST, CHECKED, QUICK):
        runs.save("x.recipe", text=text, by="ana")
    runs.close()
    app = create_app(svc, WebConfig(allowed_hosts=["testserver"]))
    with TestClient(app, backend="trio", base_url="http://testserver") as client:
        box = Inbox(tmp, svc, client)
        box.clock = clock
        yield box
        box.runs.close()


def card_form(page: str, run_id: str, verb: str = "approve") -> dict[str, str]:
    return form(page, f"/runs/{run_id}/{verb}")


# --- who may act -------------------------------------------------------------------------------------


def test_no_session_gets_the_sign_in_page(inbox):
    ana = inbox.person("ana")
    run_id, text = inbox.park(ana)
    before = len(inbox.audit())
    for path in ("/", f"/runs/{run_id}", "/runs", "/recipes", "/schedules"):
        res = inbox.nobody().get(path)
        assert res.status_code == 200 and res.url.path == "/signin", path
        assert "To sign in, open your one-time sign-in link" in res.text
        assert "Approve" not in res.text and text not in res.text
    fields = card_form(ana.get(f"/runs/{run_id}").text, run_id)
    res = inbox.nobody().post(f"/runs/{run_id}/approve", fields)
    assert res.status_code == 403 and "not signed in" in res.text
    assert len(inbox.audit()) == before + 1
    assert inbox.runs.pending(run_id).fingerprint == fields["fingerprint"] and inbox.posts(text) == []
    # a tampered session cookie is no session
    forged = Person(inbox.client, "ana", ana.cookie[:-2] + ("AA" if not ana.cookie.endswith("AA") else "BB"))
    assert forged.get("/").url.path == "/signin"


def test_a_form_without_the_right_token_is_refused_and_changes_nothing(inbox):
    ana, bruno = inbox.person("ana"), inbox.person("bruno")
    run_id, text = inbox.park(ana)
    fields = card_form(ana.get(f"/runs/{run_id}").text, run_id)
    before = len(inbox.audit())
    missing = {k: v for k, v in fields.items() if k != "csrf"}
    wrong = {**fields, "csrf": fields["csrf"][:-4] + "abcd"}
    someone_elses = {**fields, "csrf": bruno.csrf()}
    for data in (missing, wrong, someone_elses):
        res = ana.post(f"/runs/{run_id}/approve", data)
        assert res.status_code == 403 and "Form refused" in res.text
        res = ana.post(f"/runs/{run_id}/reject", {**data, "reason": "no"})
        assert res.status_code == 403
    assert len(inbox.audit()) == before + 6
    assert {a.actor for a in inbox.audit()[before:]} == {"ana"}
    assert [a.state for a in inbox.runs.store().approvals(run_id)] == ["pending"]
    assert inbox.runs.show(run_id).state == "parked" and inbox.posts(text) == []
    # the same form with its token goes through, once
    assert ana.post(f"/runs/{run_id}/approve", fields).status_code == 200
    wait_for(lambda: inbox.runs.show(run_id).state == "succeeded", "the approved run to finish")
    assert len(inbox.posts(text)) == 1


def test_a_signed_in_person_who_is_not_an_approver_is_refused_and_audited(inbox):
    ana, bruno = inbox.person("ana"), inbox.person("bruno")
    run_id, text = inbox.park(ana)
    page = bruno.get(f"/runs/{run_id}").text
    assert "You are not among them" in page and "Approve post" not in page  # no form offered to bruno
    fields = {**card_form(ana.get(f"/runs/{run_id}").text, run_id), "csrf": bruno.csrf()}
    before = len(inbox.audit())
    res = bruno.post(f"/runs/{run_id}/approve", fields)
    assert res.status_code == 403
    assert "bruno may not decide" in res.text and "ana" in res.text
    rows = inbox.audit()[before:]
    assert [(a.actor, a.run_id) for a in rows] == [("bruno", run_id)] and '"approval.not_allowed"' in rows[0].data_json
    assert [e.actor for e in inbox.runs.store().events(run_id) if e.kind == "approval.refused"] == ["bruno"]
    res = bruno.post(f"/runs/{run_id}/reject", {**fields, "reason": "mine now"})
    assert res.status_code == 403 and len(inbox.audit()) == before + 2
    assert inbox.runs.show(run_id).state == "parked" and inbox.posts(text) == []


def test_replaying_an_old_form_after_the_question_was_asked_again_is_refused(inbox):
    from vodou_engine.demo import db as demo

    ana = inbox.person("ana")
    run_id, text = inbox.park(ana, "checked")
    old = card_form(ana.get(f"/runs/{run_id}").text, run_id)
    inbox.clock.advance(1.5)  # the question lapses; asking again makes a new card with the same payload
    resume = form(ana.get(f"/runs/{run_id}").text, f"/runs/{run_id}/resume")
    assert ana.post(f"/runs/{run_id}/resume", resume).status_code == 200
    wait_for(
        lambda: [a for a in inbox.runs.store().pending_approvals(run_id) if a.id != old["approval"]],
        "the question to be asked again",
    )
    res = ana.post(f"/runs/{run_id}/approve", old)
    assert res.status_code == 409 and "was asked again since the card you read" in problem(res.text)
    # the world the check reads changes: the next card has another fingerprint, and a form
    # carrying only the old fingerprint is refused by the run API itself
    demo.set_channel_topic(inbox.tmp / "demo.db", "#general", f"changed {uuid.uuid4().hex[:6]}")
    inbox.clock.advance(1.5)
    second = card_form(ana.get(f"/runs/{run_id}").text, run_id)
    assert ana.post(f"/runs/{run_id}/resume", resume).status_code == 200
    wait_for(
        lambda: [a for a in inbox.runs.store().pending_approvals(run_id) if a.id != second["approval"]],
        "the question to be asked once more",
    )
    current = inbox.runs.pending(run_id)
    assert current.fingerprint != old["fingerprint"]
    res = ana.post(f"/runs/{run_id}/approve", {**old, "approval": ""})
    assert res.status_code == 409 and "was asked again since the card with" in problem(res.text)
    assert inbox.posts(text) == []
    assert any(a.kind == "web.refused" and '"approval.stale"' in a.data_json for a in inbox.audit())
    fresh = card_form(ana.get(f"/runs/{run_id}").text, run_id)
    assert fresh["fingerprint"] == current.fingerprint
    assert ana.post(f"/runs/{run_id}/approve", fresh).status_code == 200
    wait_for(lambda: inbox.runs.show(run_id).state == "succeeded", "the run to finish")
    assert len(inbox.posts(text)) == 1


def test_a_get_changes_nothing(inbox):
    ana = inbox.person("ana")
    run_id, _ = inbox.park(ana)
    unused = sign_in_link(inbox.runs, "ana", by="test", base_url="http://testserver")
    time.sleep(0.3)  # let the service's background writes settle

    def dump() -> list[str]:
        conn = sqlite3.connect(inbox.tmp / "runs.db")
        try:
            return list(conn.iterdump())
        finally:
            conn.close()

    before = dump()
    calls = len(demo_calls(inbox.tmp / "demo.db"))
    for who in (ana, inbox.nobody()):
        for path in ("/", "/runs", f"/runs/{run_id}", "/runs?state=parked", "/recipes", "/recipes/post", "/schedules", "/signin",
                     path_of(unused), "/signin?token=nonsense", f"/runs/{run_id}/approve", "/signout", "/runs/nope", "/static/app.css", "/healthz"):  # fmt: skip
            res = who.get(path)
            assert res.status_code < 500, (path, res.status_code)
    assert dump() == before
    assert len(demo_calls(inbox.tmp / "demo.db")) == calls
    assert inbox.runs.store().get_web_link(sha256(unused.split("token=")[1])).used_at is None


# --- sessions, links, headers ---------------------------------------------------------------------


def test_a_sign_in_link_works_once_and_sessions_end(inbox):
    runs = inbox.runs
    _, link = add_approver(runs, "carol", by="test", base_url="http://testserver")
    page = inbox.client.get(path_of(link)).text
    assert "Sign in as carol" in page
    carol = sign_in(inbox.client, link, "carol")
    assert "signed in as <strong>carol</strong>" in carol.get("/").text
    again = inbox.client.get(path_of(link)).text
    assert "already used" in again and "Sign in as" not in again
    # replaying the spent link's token in a good sign-in form (a fresh link's cookie and token)
    inbox.client.cookies.clear()
    fields = form(
        inbox.client.get(path_of(sign_in_link(runs, "carol", by="test", base_url="http://testserver"))).text, "/signin"
    )
    fields["token"] = link.split("token=")[1]
    res = inbox.client.post("/signin", data=fields)
    assert res.status_code == 403 and "already used" in problem(res.text)
    assert [a.actor for a in inbox.audit("web.sign_in_refused")][-1] == "carol"
    inbox.client.cookies.clear()
    # signing out ends the session
    res = carol.post("/signout", {"csrf": carol.csrf()}, follow=False)
    assert res.status_code == 303 and 'vodou_session=""' in res.headers["set-cookie"]
    assert carol.get("/").url.path == "/signin"
    # a new secret for the name revokes its sessions
    dave = sign_in(inbox.client, add_approver(runs, "dave", by="test", base_url="http://testserver")[1], "dave")
    assert dave.get("/").url.path == "/"
    add_approver(runs, "dave", by="test")
    assert dave.get("/").url.path == "/signin"
    # an expired link, and a link for nobody
    stale = sign_in_link(runs, "dave", by="test", ttl_s=0.05, base_url="http://testserver")
    time.sleep(0.1)
    assert "expired" in inbox.client.get(path_of(stale)).text
    with pytest.raises(Exception, match="no approver 'zed'"):
        sign_in_link(runs, "zed", by="test")


def test_every_response_carries_the_security_headers(inbox):
    ana = inbox.person("ana")
    for res in (
        ana.get("/"),
        inbox.nobody().get("/", follow=False),
        ana.get("/runs/nope"),
        inbox.client.get("/static/app.css"),
        ana.post("/runs/x/approve", {}),
    ):
        h = res.headers
        assert (
            "frame-ancestors 'none'" in h["content-security-policy"]
            and "default-src 'none'" in h["content-security-policy"]
        )
        assert h["x-frame-options"] == "DENY" and h["x-content-type-options"] == "nosniff"
        assert h["referrer-policy"] == "same-origin"
    assert ana.get("/runs/nope").status_code == 404
    # the cookie: signed, HttpOnly, SameSite=Strict
    inbox.client.cookies.clear()
    link = sign_in_link(inbox.runs, "ana", by="test", base_url="http://testserver")
    fields = form(inbox.client.get(path_of(link)).text, "/signin")
    res = inbox.client.post("/signin", data=fields, follow_redirects=False)
    cookie = res.headers["set-cookie"].lower()
    assert "httponly" in cookie and "samesite=strict" in cookie and "path=/" in cookie
    inbox.client.cookies.clear()
    # a Host it does not answer to (DNS rebinding), a form from another site
    assert inbox.client.get("/signin", headers={"host": "evil.example"}).status_code == 421
    run_id, text = inbox.park(ana)
    fields = card_form(ana.get(f"/runs/{run_id}").text, run_id)
    assert ana.post(f"/runs/{run_id}/approve", fields, headers={"sec-fetch-site": "cross-site"}).status_code == 403
    assert ana.post(f"/runs/{run_id}/approve", fields, headers={"origin": "http://evil.example"}).status_code == 403
    assert inbox.runs.show(run_id).state == "parked" and inbox.posts(text) == []


# --- deciding ---------------------------------------------------------------------------------------


def test_approve_and_reject_on_the_page_and_approve_from_a_shell(inbox, tmp_path):
    ana = inbox.person("ana")
    run_id, text = inbox.park(ana)
    page = ana.get(f"/runs/{run_id}").text
    card = inbox.runs.pending(run_id)
    assert card.fingerprint in page and "Who may decide: <strong>ana</strong>" in page and "expires in 15 min" in page
    assert f"&#34;text&#34;: &#34;{text}&#34;" in page  # the frozen payload, exactly
    res = ana.post(f"/runs/{run_id}/approve", card_form(page, run_id))
    assert res.status_code == 200 and "Approved." in res.text
    wait_for(lambda: inbox.runs.show(run_id).state == "succeeded", "the approved run to finish")
    assert len(inbox.posts(text)) == 1
    done = ana.get(f"/runs/{run_id}").text
    assert "approved by ana" in done and "executed" in done
    # reject: declined, nothing posted
    run_id, text = inbox.park(ana)
    fields = card_form(ana.get(f"/runs/{run_id}").text, run_id, "reject")
    res = ana.post(f"/runs/{run_id}/reject", {**fields, "reason": "not today"})
    assert res.status_code == 200 and "Rejected." in res.text
    assert inbox.runs.show(run_id).state == "declined" and inbox.posts(text) == []
    assert "not today" in res.text
    # approved with `recipe approve` from a shell: the page shows the result
    run_id, text = inbox.park(ana)
    secret, _ = add_approver(inbox.runs, "ana", by="test")
    ana = inbox.people["ana"] = sign_in(
        inbox.client, sign_in_link(inbox.runs, "ana", by="test", base_url="http://testserver"), "ana"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("VODOU_") and not k.startswith("XDG_")}
    env.update(
        VODOU_STORE=str(inbox.tmp / "runs.db"),
        VODOU_DEMO_DB=str(inbox.tmp / "demo.db"),
        VODOU_APPROVER_TOKEN=secret,
        XDG_CONFIG_HOME=str(tmp_path / "config"),
        XDG_DATA_HOME=str(tmp_path / "data"),
    )
    fingerprint = inbox.runs.pending(run_id).fingerprint
    shell = subprocess.run(
        [
            sys.executable,
            "-m",
            "vodou_engine",
            "approve",
            run_id,
            "post",
            "--yes",
            "--fingerprint",
            fingerprint,
            "--as",
            "ana",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )
    assert shell.returncode == 0, shell.stdout + shell.stderr
    assert len(inbox.posts(text)) == 1
    page = ana.get(f"/runs/{run_id}").text
    assert "succeeded" in page and "approved by ana" in page


def test_the_inbox_lists_what_waits_for_me_and_for_others(inbox):
    ana, bruno = inbox.person("ana"), inbox.person("bruno")
    run_id, _ = inbox.park(ana)
    mine = ana.get("/").text
    assert f"/runs/{run_id}#q-post" in mine and "expires in 15 min" in mine
    theirs = bruno.get("/").text
    assert "Waiting for others" in theirs and "only ana may decide" in theirs
    assert theirs.index("Waiting for others") < theirs.index(f"/runs/{run_id}#q-post")
    res = ana.get("/")
    assert float(res.headers["server-timing"].split("dur=")[1]) < 1000


def test_schedules_on_the_page_and_an_agents_proposal_waits_for_a_person(inbox):
    ana = inbox.person("ana")
    token = ana.csrf()
    res = ana.post(
        "/schedules",
        {
            "csrf": token,
            "name": "morning",
            "recipe": "post",
            "cron": "0 8 * * 1-5",
            "tz": "Europe/Lisbon",
            "inputs": "text=good morning",
        },
    )
    assert (
        res.status_code == 200
        and "Schedule added." in res.text
        and "morning" in res.text
        and "Europe/Lisbon" in res.text
    )
    assert inbox.runs.store().get_schedule("morning").state == "active"
    assert ana.post("/schedules/morning/pause", {"csrf": token}).status_code == 200
    assert (
        inbox.runs.store().get_schedule("morning").state == "paused"
        and inbox.runs.store().get_schedule("morning").next_due is None
    )
    assert ana.post("/schedules/morning/resume", {"csrf": token}).status_code == 200
    assert inbox.runs.store().get_schedule("morning").state == "active"
    bad = ana.post("/schedules", {"csrf": token, "name": "bad", "recipe": "post", "cron": "61 * * * *"})
    assert bad.status_code == 400 and "not valid" in problem(bad.text)
    assert ana.post("/schedules/morning/remove", {"csrf": token}).status_code == 200
    assert all(s.name != "morning" for s in inbox.runs.schedules())
    # an agent's schedule: paused, marked, and only a signed-in person resumes it
    inbox.runs.add_schedule("agent-idea", recipe="post", cron="*/5 * * * *", by="helper-agent", origin="agent")
    page = ana.get("/schedules").text
    assert "proposed by agent" in page and "stays paused until a signed-in person resumes it" in page
    version = inbox.runs.store().get_schedule("agent-idea").recipe_version
    assert f"version {version} only" in page and "resuming it approves that version" in page
    pinned = ana.get(f"/recipes/post?version={version}")  # the card of the version it runs
    assert pinned.status_code == 200 and f"v{version}" in pinned.text
    assert inbox.nobody().post("/schedules/agent-idea/resume", {"csrf": token}).status_code == 403
    assert inbox.runs.store().get_schedule("agent-idea").state == "paused"
    assert ana.post("/schedules/agent-idea/resume", {"csrf": token}).status_code == 200
    assert inbox.runs.store().get_schedule("agent-idea").state == "active"
    inbox.runs.remove_schedule("agent-idea", by="test")


def test_a_saved_recipe_shows_its_card_and_refuses_a_bad_input(inbox):
    ana = inbox.person("ana")
    page = ana.get("/recipes").text
    assert "Here is how this would run: post" in page and "slack·slack_post_message" in page
    res = ana.post("/recipes/post/run", {"csrf": ana.csrf(), "input:nope": "1"})
    assert res.status_code == 400 and "no input `nope`" in problem(res.text)


# --- the store under a serving process -----------------------------------------------------------

LOCK_PROBE = """
import fcntl, os, sys
fd = os.open(sys.argv[1], os.O_RDWR)
try:
    fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 510, 0x40000000 + 2)  # SQLite's shared-lock range
    print("free")
except OSError:
    print("held")
"""


def test_opening_the_store_again_keeps_the_locks_of_connections_already_open(tmp_path):
    """`serve` opens store connections while others are open. Reading a store file's header with
    a plain open() and closing it dropped every POSIX lock the process held on the file, so
    another process (a `recipe approve` from a shell) took itself for the only one, and its
    writes were lost or the file damaged. The header is now read only when nothing else of
    the process is open on the file."""
    from vodou_engine.store import open_store

    path = tmp_path / "runs.db"

    def probe() -> str:
        return subprocess.run(
            [sys.executable, "-c", LOCK_PROBE, str(path)], capture_output=True, text=True, timeout=60
        ).stdout.strip()

    first = open_store(path)
    first.list_runs()
    assert probe() == "held"
    for readonly in (True, False):
        again = open_store(path, create=False, readonly=readonly)
        again.list_runs()
        again.close()
        assert probe() == "held"
    first.close()
    assert probe() == "free"


# --- configuration, notifications, the process ----------------------------------------------------


def test_the_configuration_file_and_the_notification_hook(tmp_path, monkeypatch):
    import types

    import trio

    from vodou_engine import notify
    from vodou_engine.errors import UsageError
    from vodou_engine.reports import RunReport
    from vodou_engine.web import config as web_config
    from vodou_engine.web import serve

    monkeypatch.delenv("VODOU_SERVE_CONFIG", raising=False)
    monkeypatch.delenv("VODOU_SERVE_URL", raising=False)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    flags = {"host": None, "port": None, "store": None, "servers": None, "policy": None, "grace": None, "config": None}
    cfg = web_config.from_flags(types.SimpleNamespace(**flags))
    assert (cfg.host, cfg.port, cfg.base_url(), cfg.secure, cfg.grace_s) == (
        "127.0.0.1",
        8400,
        "http://127.0.0.1:8400",
        False,
        30.0,
    )
    assert serve.parked_hook(cfg, lambda: None) is None  # nothing configured: nothing sent
    path = tmp_path / "serve.toml"
    path.write_text(
        '[inbox]\nbase_url = "https://inbox.example.org/"\n[[webhooks]]\nurl = "http://127.0.0.1:9/hook"\nsecret = "s3cret"\n'
    )
    cfg = web_config.from_flags(types.SimpleNamespace(**{**flags, "config": str(path), "port": 0, "grace": 2}))
    assert (cfg.port, cfg.base_url(), cfg.secure, cfg.grace_s) == (0, "https://inbox.example.org", True, 2.0)
    assert "inbox.example.org" in cfg.hosts()
    path.write_text("[inbox]\nbase_url = 'http://h'\n[[webhooks]]\nurl = 'http://h'\nsecret = 'x'\nretries = 3\n")
    with pytest.raises(UsageError, match="unknown key `retries`"):
        web_config.from_flags(types.SimpleNamespace(**{**flags, "config": str(path)}))
    # the hook hands a parked run to notify_parked with the run page's address
    got = []

    async def notify_parked(config, report, run_url):
        got.append((config, report.run, run_url))

    monkeypatch.setattr(notify, "notify_parked", notify_parked)
    path.write_text(
        '[[webhooks]]\nurl = "http://127.0.0.1:9/hook"\nsecret = "s3cret"\n[inbox]\nbase_url = "http://127.0.0.1:8400"\n'
    )
    cfg = web_config.from_flags(types.SimpleNamespace(**{**flags, "config": str(path)}))
    hook = serve.parked_hook(cfg, lambda: types.SimpleNamespace(port=8400))
    trio.run(hook, RunReport(run="r1", state="parked"))
    assert got == [(cfg.notify, "r1", "http://127.0.0.1:8400/runs/r1")]


def test_serve_stops_on_sigterm_leaving_a_run_mid_step_interrupted(tmp_path):
    """A real `recipe serve` process: a run mid-step when SIGTERM comes is left interrupted
    (resumable), the process exits 0 and no server process outlives it."""
    from vodou_engine.runs import Runs

    serving = Serving(tmp_path, "--grace", "0.5")
    runs = Runs(store=serving.store, policy=Policy())
    runs.save(
        "slow.recipe",
        text='recipe "slow"\nwait: board.query {"ms": 600000}\nafter: vodou.echo {"value": "done"}\n',
        by="ana",
    )
    _, link = add_approver(runs, "ana", by="test")
    serving.start()
    try:
        import httpx2 as httpx  # what Starlette's TestClient uses here
    except ImportError:  # pragma: no cover
        import httpx
    try:
        with httpx.Client(base_url=serving.url) as http:
            page = http.get(path_of(link))
            res = http.post("/signin", data=form(page.text, "/signin"), follow_redirects=False)
            assert res.status_code == 303
            fields = form(http.get("/recipes/slow").text, "/recipes/slow/run")
            res = http.post("/recipes/slow/run", data=fields, follow_redirects=False)
            run_id = res.headers["location"].split("/runs/")[1].split("?")[0]

        def running() -> bool:
            try:
                return {n.node: n.state for n in runs.show(run_id).nodes}.get("wait") == "running"
            except Exception:  # noqa: BLE001 - not stored yet
                return False

        wait_for(running, "the slow read to be running")
        assert serving.children(), "the board server should be running under serve"
        code, alive = serving.stop()
    finally:
        serving.kill()
    assert code == 0, serving.log.read_text()
    assert alive == set(), f"processes left behind: {alive}"
    assert runs.show(run_id).state == "interrupted"
    assert "SIGTERM: stopping" in serving.log.read_text()
    runs.close()


def test_scripts_come_only_from_the_inbox_and_a_live_stream_needs_a_session(inbox):
    ana = inbox.person("ana")
    run_id, _ = inbox.park(ana)
    for path in ("/", f"/runs/{run_id}"):
        res = ana.get(path)
        csp = res.headers["content-security-policy"]
        assert "script-src 'self'" in csp and "connect-src 'self'" in csp and "unsafe" not in csp
        scripts = re.findall(r"<script[^>]*>", res.text)
        assert scripts == ['<script src="/static/live.js" defer>'] and "</script>" in res.text
        assert re.search(r"<script[^>]*>\s*[^<\s]", res.text) is None  # nothing inline
        live = re.search(r'<main id="main" data-live="([^"]+)">', res.text).group(1)
        assert live.startswith("/live?v=" if path == "/" else f"/runs/{run_id}/live?v=")
        refused = inbox.nobody().get(live.replace("&amp;", "&"), follow=False)
        assert refused.status_code == 401 and "text/event-stream" not in refused.headers.get("content-type", "")
    js = inbox.client.get("/static/live.js")
    assert js.status_code == 200 and js.headers["content-type"].startswith("text/javascript")
    assert "eval(" not in js.text and "innerHTML = fresh.innerHTML" in js.text
