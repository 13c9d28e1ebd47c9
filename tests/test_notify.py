"""Notifications of a parked run (vodou_engine/notify/, docs/notifications.md), with real parts.

A real HTTP server on 127.0.0.1 receives the webhooks, and the request is
verified with the snippet docs/notifications.md gives receivers; a real SMTP
server (aiosmtpd) receives the email. Nothing leaves the machine. Backoff
waits go through an injected ``sleep``, so retries cost no time.
"""

from __future__ import annotations

import email
import email.policy
import json
import logging
import os
import re
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import trio
from aiosmtpd.controller import Controller

from vodou_engine.errors import UsageError
from vodou_engine.notify import (
    NOTE,
    ServeConfig,
    ServeConfigError,
    load_config_file,
    load_serve_config,
    notify_parked,
    serve_config_path,
    sign,
)
from vodou_engine.reports import PendingApproval, RunReport

DOCS = Path(__file__).resolve().parent.parent / "docs" / "notifications.md"
VERIFY_MARKER = "<!-- tested: tests/test_notify.py verifies a real request with the next block -->"
SECRET = "whsec-test-3b7f1c"
PASSWORD = "smtp-pass-91d2e"
CARD = '⚠ post: slack·slack_post_message  (write: verb \'post\')\npayload (frozen; exactly this runs if approved):\n  {"text": "hello"}'


@pytest.fixture(autouse=True)
def _no_proxy(monkeypatch):
    """A proxy set in the environment must not carry 127.0.0.1 traffic elsewhere."""
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.delenv(name, raising=False)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def verify_snippet():
    """The receiver's ``verify`` exactly as docs/notifications.md gives it."""
    text = DOCS.read_text(encoding="utf-8")
    assert VERIFY_MARKER in text, f"docs/notifications.md lost its marker: {VERIFY_MARKER}"
    m = re.match(r"\s*```python\n(.*?)\n```", text.split(VERIFY_MARKER, 1)[1], re.S)
    assert m, "the marker must be followed by a ```python block"
    namespace: dict = {}
    exec(compile(m.group(1), str(DOCS), "exec"), namespace)  # noqa: S102 - the docs' own code, on purpose
    return namespace["verify"]


class Receiver:
    """A webhook receiver on 127.0.0.1: records each request, answers the statuses it is given (then 200)."""

    def __init__(self, statuses: list[int] | None = None):
        self.statuses = list(statuses or [])
        self.requests: list[dict] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # http.server's name
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                outer.requests.append(
                    {"path": self.path, "headers": dict(self.headers.items()), "body": body, "at": time.time()}
                )
                status = outer.statuses.pop(0) if outer.statuses else 200
                self.send_response(status)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_port}"

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()


class Mailbox:
    """aiosmtpd's handler: keeps every message; answers 451 to the first ``refuse`` DATA commands."""

    def __init__(self, refuse: int = 0):
        self.refuse = refuse
        self.messages: list[dict] = []

    async def handle_DATA(self, server, session, envelope):  # noqa: N802 - aiosmtpd's name
        if self.refuse:
            self.refuse -= 1
            return "451 4.3.0 try again later"
        self.messages.append(
            {
                "from": envelope.mail_from,
                "to": list(envelope.rcpt_tos),
                "message": email.message_from_bytes(envelope.content, policy=email.policy.default),
            }
        )
        return "250 OK"


@pytest.fixture
def smtp():
    def start(refuse: int = 0):
        box = Mailbox(refuse)
        ctl = Controller(box, hostname="127.0.0.1", port=free_port())
        ctl.start()
        started.append(ctl)
        return box, ctl.port

    started: list[Controller] = []
    yield start
    for ctl in started:
        ctl.stop()


def report(approvers=("ana",), run="r-test-1", expires_in: float | None = 3600) -> RunReport:
    return RunReport(
        run=run,
        state="parked",
        recipe="post",
        pending=[
            PendingApproval(
                step="post",
                approval="a-1",
                fingerprint="sha256:abc123",
                expires_at=None if expires_in is None else time.time() + expires_in,
                card=CARD,
                approvers=list(approvers),
            )
        ],
    )


def config(tmp_path, text: str, **env: str) -> ServeConfig:
    path = tmp_path / "vodou-serve.toml"
    path.write_text(text, encoding="utf-8")
    return load_config_file(path, environ=env)


class Sleeps:
    """An injected ``sleep``: records each backoff wait instead of waiting."""

    def __init__(self):
        self.waits: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.waits.append(seconds)
        await trio.lowlevel.checkpoint()


# --- webhooks ---------------------------------------------------------------------------------
def test_webhook_is_signed_and_the_documented_snippet_verifies_it(tmp_path):
    verify = verify_snippet()
    with Receiver() as rx:
        cfg = config(
            tmp_path,
            f'[inbox]\nbase_url = "https://vodou.example.org/"\n\n[[webhooks]]\nurl = "{rx.url}/hook"\nsecret_env = "HOOK_SECRET"\n',
            HOOK_SECRET=SECRET,
        )
        rep = report()
        url = cfg.run_url(rep.run)
        assert url == "https://vodou.example.org/runs/r-test-1"
        (d,) = trio.run(notify_parked, cfg, rep, url)

    assert (d.kind, d.status, d.tries, d.http_status, d.ok) == ("webhook", "sent", 1, 200, True)
    (req,) = rx.requests
    assert req["path"] == "/hook"
    h, body = req["headers"], req["body"]
    assert h["Content-Type"] == "application/json" and h["X-Vodou-Event"] == "approval.parked"
    assert h["X-Vodou-Delivery"] == d.delivery_id
    assert re.fullmatch(r"v1=[0-9a-f]{64}", h["X-Vodou-Signature"])
    assert abs(int(h["X-Vodou-Timestamp"]) - time.time()) < 60

    # the receiver's check, as documented, on the request that really arrived
    assert verify(SECRET.encode(), h["X-Vodou-Timestamp"], h["X-Vodou-Signature"], body)
    assert not verify(b"another secret", h["X-Vodou-Timestamp"], h["X-Vodou-Signature"], body)
    assert not verify(
        SECRET.encode(), h["X-Vodou-Timestamp"], h["X-Vodou-Signature"], body.replace(b"r-test-1", b"r-test-2")
    )
    assert not verify(SECRET.encode(), str(int(h["X-Vodou-Timestamp"]) + 1), h["X-Vodou-Signature"], body)
    assert not verify(
        SECRET.encode(), h["X-Vodou-Timestamp"], h["X-Vodou-Signature"], body, now=time.time() + 600
    )  # replayed later
    assert not verify(SECRET.encode(), "yesterday", h["X-Vodou-Signature"], body)
    assert h["X-Vodou-Signature"] == sign(SECRET, h["X-Vodou-Timestamp"], body)

    doc = json.loads(body)
    p = rep.pending[0]
    assert {k: doc[k] for k in ("event", "run", "recipe", "step", "approval", "fingerprint", "expires_at", "approvers", "url", "card")} == {
        "event": "approval.parked", "run": "r-test-1", "recipe": "post", "step": "post", "approval": "a-1",
        "fingerprint": "sha256:abc123", "expires_at": p.expires_at, "approvers": ["ana"], "url": url, "card": CARD,
    }  # fmt: skip
    # it points at the page and says it cannot decide: no token, no approve link
    assert doc["note"] == NOTE and "cannot approve" in doc["text"] and url in doc["text"]
    assert "approve" not in url and "token" not in body.decode().lower()


def test_webhook_retries_5xx_with_backoff_then_delivers(tmp_path):
    sleeps = Sleeps()
    with Receiver([500, 502]) as rx:
        cfg = config(
            tmp_path,
            f'[inbox]\nbase_url = "http://127.0.0.1:8400"\n[[webhooks]]\nname = "relay"\nurl = "{rx.url}/"\nsecret = "${{S}}"\ntries = 3\nbackoff_s = 0.5\n',
            S=SECRET,
        )
        (d,) = trio.run(lambda: notify_parked(cfg, report(), "http://127.0.0.1:8400/runs/r-test-1", sleep=sleeps))

    assert (d.status, d.tries, d.http_status, d.target) == ("sent", 3, 200, "relay")
    assert sleeps.waits == [0.5, 1.0]  # exponential: backoff_s, then twice that
    assert len(rx.requests) == 3
    assert len({r["body"] for r in rx.requests}) == 1  # the same document each time...
    assert len({r["headers"]["X-Vodou-Delivery"] for r in rx.requests}) == 1  # ...under one delivery id to dedupe on
    verify = verify_snippet()
    assert all(
        verify(SECRET.encode(), r["headers"]["X-Vodou-Timestamp"], r["headers"]["X-Vodou-Signature"], r["body"])
        for r in rx.requests
    )


def test_a_webhook_that_stays_down_is_a_failed_delivery_not_an_error(tmp_path, caplog):
    caplog.set_level(logging.DEBUG, logger="vodou_engine.notify")
    token = "tok-in-the-url-77aa"
    dead = free_port()  # nothing listens there
    sleeps = Sleeps()
    with Receiver([503] * 10) as down, Receiver([404]) as wrong:
        cfg = config(
            tmp_path,
            f'[inbox]\nbase_url = "http://127.0.0.1:8400"\n'
            f'[[webhooks]]\nurl = "{down.url}/in/${{TOKEN}}"\nsecret_env = "S"\ntries = 3\nbackoff_s = 0.01\n'
            f'[[webhooks]]\nname = "gone"\nurl = "http://127.0.0.1:{dead}/in/${{TOKEN}}"\nsecret_env = "S"\ntries = 2\nbackoff_s = 0.01\n'
            f'[[webhooks]]\nname = "wrong"\nurl = "{wrong.url}/in/${{TOKEN}}"\nsecret_env = "S"\n',
            S=SECRET, TOKEN=token,
        )  # fmt: skip
        five, refused, client = trio.run(
            lambda: notify_parked(cfg, report(), "http://127.0.0.1:8400/runs/r-test-1", sleep=sleeps)
        )

    assert (five.status, five.tries, five.http_status) == ("failed", 3, 503) and "503" in five.error
    assert five.target == down.url  # named by scheme, host and port: never the path, where the token is
    assert (refused.status, refused.tries, refused.http_status, refused.target) == ("failed", 2, None, "gone")
    assert "ConnectError" in refused.error
    assert (client.status, client.tries, client.http_status) == ("failed", 1, 404) and "not retried" in client.error
    assert len(down.requests) == 3 and len(wrong.requests) == 1
    assert sorted(sleeps.waits) == [0.01, 0.01, 0.02]
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert "not delivered" in logged
    shown = logged + repr(cfg) + str([five, refused, client])
    assert SECRET not in shown and token not in shown


def test_each_pending_approval_goes_to_each_webhook(tmp_path):
    with Receiver() as a, Receiver() as b:
        cfg = config(
            tmp_path,
            f'[inbox]\nbase_url = "http://h"\n[[webhooks]]\nname = "a"\nurl = "{a.url}"\nsecret = "x"\n[[webhooks]]\nname = "b"\nurl = "{b.url}"\nsecret = "y"\n',
        )
        rep = report()
        two = RunReport(
            run=rep.run,
            state="parked",
            recipe="post",
            pending=[rep.pending[0], PendingApproval(step="mail", approval="a-2", fingerprint="sha256:def")],
        )
        out = trio.run(notify_parked, cfg, two, "http://h/runs/r-test-1")
    assert [(d.target, d.step, d.status) for d in out] == [
        ("a", "post", "sent"),
        ("b", "post", "sent"),
        ("a", "mail", "sent"),
        ("b", "mail", "sent"),
    ]
    assert sorted(json.loads(r["body"])["step"] for r in a.requests) == ["mail", "post"]
    assert len(b.requests) == 2


def test_a_question_edited_in_the_store_is_notified_to_nobody(tmp_path, smtp, caplog):
    """A tampered question has no card and nobody can decide it: no webhook, no email for it;
    the other question of the run still goes out, and the log says why."""
    box, port = smtp()
    with Receiver() as hook:
        cfg = email_config(tmp_path, port, more=f'[[webhooks]]\nname = "a"\nurl = "{hook.url}"\nsecret = "x"\n')
        rep = report(approvers=("ana",))
        edited = PendingApproval(
            step="mail", approval="a-2", fingerprint="sha256:def", approvers=["bob"], tampered=True,
            refusal="✗ refused: the stored payload of `mail` … no longer matches the fingerprint it was asked with",
        )  # fmt: skip
        out = trio.run(
            notify_parked,
            cfg,
            RunReport(run=rep.run, state="parked", recipe="post", pending=[rep.pending[0], edited]),
            cfg.run_url(rep.run),
        )
    assert [(d.kind, d.step, d.status) for d in out] == [("webhook", "post", "sent"), ("email", "post", "sent")]
    assert [json.loads(r["body"])["step"] for r in hook.requests] == ["post"]
    assert [m["to"] for m in box.messages] == [["ana@example.org"]]
    assert "nobody notified" in caplog.text and "mail" in caplog.text


def test_nothing_configured_sends_nothing(tmp_path):
    assert trio.run(notify_parked, None, report(), "http://h/runs/x") == []
    assert trio.run(notify_parked, ServeConfig(), report(), "http://h/runs/x") == []
    cfg = config(tmp_path, '[inbox]\nbase_url = "http://h"\n')
    assert not cfg.notifies
    assert trio.run(notify_parked, cfg, RunReport(run="r", state="parked"), "http://h/runs/r") == []


# --- email ------------------------------------------------------------------------------------
def email_config(tmp_path, port: int, **extra: str) -> ServeConfig:
    return config(
        tmp_path,
        '[inbox]\nbase_url = "https://vodou.example.org"\n'
        f'[email]\nhost = "127.0.0.1"\nport = {port}\nsecurity = "none"\nfrom = "Vodou <vodou@example.org>"\n'
        f"tries = 3\nbackoff_s = 0.25\n{extra.pop('more', '')}"
        '[email.approvers]\nana = "ana@example.org"\nbob = "Bob Lopes <bob@example.org>"\n',
        **extra,
    )


def test_email_reaches_each_approver_with_the_link(tmp_path, smtp):
    box, port = smtp()
    cfg = email_config(tmp_path, port)
    rep = report(approvers=("ana", "bob", "carol"))
    url = cfg.run_url(rep.run)
    out = trio.run(notify_parked, cfg, rep, url)

    assert [(d.kind, d.target, d.status) for d in out] == [
        ("email", "ana <ana@example.org>", "sent"),
        ("email", "bob <bob@example.org>", "sent"),
        ("email", "carol", "skipped"),  # no address: said so, not an error
    ]
    assert "no address" in out[2].error
    assert sorted(m["to"] for m in box.messages) == [["ana@example.org"], ["bob@example.org"]]
    for m in box.messages:
        msg = m["message"]
        assert m["from"] == "vodou@example.org"
        assert msg["Subject"] == "Approval needed: post · post"
        assert msg["Auto-Submitted"] == "auto-generated" and msg["X-Vodou-Run"] == "r-test-1"
        text = msg.get_content().replace("\r\n", "\n")
        assert url in text and "https://vodou.example.org/runs/r-test-1" in text
        assert CARD in text and "sha256:abc123" in text
        assert "cannot approve anything" in text and "Who may decide: ana, bob, carol" in text
    assert {m["message"]["To"] for m in box.messages} == {"ana <ana@example.org>", "bob <bob@example.org>"}


def test_email_retries_a_transient_refusal(tmp_path, smtp):
    box, port = smtp(refuse=1)  # 451 to the first message
    sleeps = Sleeps()
    (d,) = trio.run(
        lambda: notify_parked(
            email_config(tmp_path, port), report(), "https://vodou.example.org/runs/r-test-1", sleep=sleeps
        )
    )
    assert (d.status, d.tries) == ("sent", 2)
    assert sleeps.waits == [0.25]
    assert [m["to"] for m in box.messages] == [["ana@example.org"]]


def test_a_mail_server_that_is_down_is_a_failed_delivery(tmp_path, caplog):
    caplog.set_level(logging.DEBUG, logger="vodou_engine.notify")
    sleeps = Sleeps()
    cfg = email_config(tmp_path, free_port(), more='username = "vodou"\npassword_env = "PW"\n', PW=PASSWORD)
    (d,) = trio.run(lambda: notify_parked(cfg, report(), "https://vodou.example.org/runs/r-test-1", sleep=sleeps))
    assert (d.status, d.tries) == ("failed", 3) and "ConnectionRefusedError" in d.error
    assert sleeps.waits == [0.25, 0.5]
    shown = "\n".join(r.getMessage() for r in caplog.records) + repr(cfg) + repr(d)
    assert "not sent" in shown and PASSWORD not in shown


def test_a_card_with_no_approvers_named_goes_to_everyone_listed(tmp_path, smtp):
    box, port = smtp()
    out = trio.run(
        notify_parked, email_config(tmp_path, port), report(approvers=()), "https://vodou.example.org/runs/r-test-1"
    )
    assert [d.status for d in out] == ["sent", "sent"]
    assert sorted(m["to"][0] for m in box.messages) == ["ana@example.org", "bob@example.org"]


def test_webhooks_and_email_together_from_a_parked_run_of_the_service(tmp_path, smtp):
    """The real path: a run of the service parks, ``on_parked`` notifies, the card is the stored one."""
    from vodou_engine.servers import ServerSet, demo_servers
    from vodou_engine.service import Service

    # a question parks the run without starting any server: the path, not the servers, is under test

    box, port = smtp()
    with Receiver() as rx:
        cfg = config(
            tmp_path,
            f'[inbox]\nbase_url = "http://127.0.0.1:8400"\n[[webhooks]]\nurl = "{rx.url}"\nsecret_env = "S"\n'
            f'[email]\nhost = "127.0.0.1"\nport = {port}\nsecurity = "none"\nfrom = "vodou@example.org"\n[email.approvers]\nana = "ana@example.org"\n',
            S=SECRET,
        )
        got: list = []
        done = trio.Event()

        async def on_parked(rep: RunReport) -> None:
            got.extend(await notify_parked(cfg, rep, cfg.run_url(rep.run)))
            done.set()

        svc = Service(
            store=str(tmp_path / "runs.db"),
            servers=ServerSet(demo_servers(tmp_path / "demo.db"), "demo"),
            on_parked=on_parked,
            schedule=False,
        )
        runs = svc.runs()
        runs.save(
            "ask.recipe", text='recipe "ask"\nask me:\n- go on with it?\nsay: vodou.echo {"value": "done"}\n', by="ana"
        )

        async def main():
            async with trio.open_nursery() as nursery:
                await nursery.start(svc.serve)
                run_id = svc.start_saved("ask", inputs=None, actor="ana")
                with trio.fail_after(60):
                    await done.wait()
                svc.stop()
            return run_id

        try:
            run_id = trio.run(main)
            card = runs.pending(run_id)
        finally:
            runs.close()

    assert [(d.kind, d.status) for d in got] == [("webhook", "sent"), ("email", "sent")]
    (req,) = rx.requests
    doc = json.loads(req["body"])
    assert (doc["run"], doc["recipe"], doc["step"], doc["fingerprint"], doc["approvers"]) == (
        run_id,
        "ask",
        card.step,
        card.fingerprint,
        ["ana"],
    )
    assert (
        doc["url"] == f"http://127.0.0.1:8400/runs/{run_id}"
        and "go on with it?" in doc["card"]
        and doc["card"] == card.card
    )
    assert verify_snippet()(
        SECRET.encode(), req["headers"]["X-Vodou-Timestamp"], req["headers"]["X-Vodou-Signature"], req["body"]
    )
    (m,) = box.messages
    assert m["to"] == ["ana@example.org"] and m["message"]["Subject"] == f"Approval needed: ask · {card.step}"
    assert doc["url"] in m["message"].get_content() and "go on with it?" in m["message"].get_content()


# --- the configuration file -------------------------------------------------------------------
BAD = [
    (
        "[inbox]\nbase_url = 'http://h'\n[[webhooks]]\nurl = 'http://h'\nsecret = 'x'\nretries = 3\n",
        "[[webhooks]] entry 1: unknown key `retries`",
        "webhooks.retries",
    ),
    ("[inbox]\nbase_url = 'http://h'\n[webhook]\nurl = 'http://h'\n", "unknown key `webhook`", "webhook"),
    (
        "[inbox]\nbase_url = 'http://h'\n[[webhooks]]\nurl = 'http://h'\nsecret_env = 'NOT_SET_HERE'\n",
        "`secret_env` names $NOT_SET_HERE, which is not set",
        "webhooks.secret_env",
    ),
    (
        "[inbox]\nbase_url = 'http://h'\n[[webhooks]]\nurl = 'http://h'\nsecret = 'a-${NOT_SET_HERE}'\n",
        "refers to ${NOT_SET_HERE}",
        "webhooks.secret",
    ),
    ("[inbox]\nbase_url = 'http://h'\n[[webhooks]]\nurl = 'http://h'\n", "a `secret` is needed", "webhooks.secret"),
    (
        "[inbox]\nbase_url = 'http://h'\n[[webhooks]]\nurl = 'http://h'\nsecret = 'x'\nsecret_env = 'Y'\n",
        "not both",
        "webhooks.secret",
    ),
    (
        "[inbox]\nbase_url = 'http://h'\n[[webhooks]]\nurl = 'ftp://h'\nsecret = 'x'\n",
        "`url` must be an http:// or https:// URL",
        "webhooks.url",
    ),
    (
        "[inbox]\nbase_url = 'http://h'\n[[webhooks]]\nurl = 'http://h'\nsecret = 'x'\ntries = 0\n",
        "[[webhooks]] entry 1, key `tries`: expected `int` >= 1",
        "webhooks.tries",
    ),
    ("[[webhooks]]\nurl = 'http://h'\nsecret = 'x'\n", "[inbox] base_url is needed", "inbox.base_url"),
    (
        "[inbox]\nbase_url = 'http://h'\n[email]\nhost = 'h'\nfrom = 'v@example.org'\nport = 'x'\n[email.approvers]\nana = 'a@example.org'\n",
        "[email] key `port`: expected `int`",
        "email.port",
    ),
    (
        "[inbox]\nbase_url = 'http://h'\n[email]\nhost = 'h'\nfrom = 'v@example.org'\n",
        "[email]: missing key `approvers`",
        "email.approvers",
    ),
    (
        "[inbox]\nbase_url = 'http://h'\n[email]\nhost = 'h'\nfrom = 'v@example.org'\n[email.approvers]\nana = 'nobody'\n",
        "`ana` is not an email address",
        "email.approvers.ana",
    ),
    (
        "[inbox]\nbase_url = 'http://h'\n[email]\nhost = 'smtp.example.org'\nfrom = 'v@example.org'\nsecurity = 'none'\nusername = 'u'\npassword_env = 'PW'\n[email.approvers]\nana = 'a@example.org'\n",
        "sent unencrypted",
        "email.security",
    ),
    (
        "[inbox]\nbase_url = 'http://h'\n[email]\nhost = 'h'\nfrom = 'v@example.org'\nusername = 'u'\n[email.approvers]\nana = 'a@example.org'\n",
        "no `password_env`",
        "email.password_env",
    ),
    ("[inbox]\nbase_url = \n", "not valid TOML", None),
]


@pytest.mark.parametrize(("text", "says", "key"), BAD, ids=[b[2] or "toml" for b in BAD])
def test_bad_config_files_give_clear_errors(tmp_path, text, says, key):
    path = tmp_path / "serve.toml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ServeConfigError) as err:
        load_serve_config(path, environ={"PW": PASSWORD, "Y": "y"})
    e = err.value
    assert isinstance(e, UsageError) and e.exit_code == 2 and e.code == "usage"
    assert str(e).startswith(f"{path}: ") and says in str(e), str(e)
    assert "docs/notifications.md" in str(e)
    assert e.facts["path"] == str(path) and e.facts.get("key") == key
    assert PASSWORD not in str(e)


def test_a_file_that_cannot_be_a_config_is_refused_at_once(tmp_path):
    fifo = tmp_path / "fifo.toml"
    os.mkfifo(fifo)
    for path, says in (
        (fifo, "not a regular file"),
        (tmp_path, "directory"),
        (tmp_path / "missing.toml", "No such file"),
    ):
        with pytest.raises(ServeConfigError, match=re.escape(says)) as err:
            load_serve_config(path, environ={})
        assert str(path) in str(err.value) and err.value.exit_code == 2
    with pytest.raises(ServeConfigError, match="VODOU_SERVE_CONFIG"):
        load_serve_config(environ={"VODOU_SERVE_CONFIG": str(tmp_path / "missing.toml")}, cwd=str(tmp_path))


def test_config_is_found_in_the_documented_places(tmp_path):
    home, xdg, work = tmp_path / "home", tmp_path / "xdg", tmp_path / "work"
    for d in (home, xdg / "vodou", work):
        d.mkdir(parents=True)
    env = {"HOME": str(home), "XDG_CONFIG_HOME": str(xdg)}
    assert serve_config_path(cwd=str(work), environ=env) is None
    assert load_serve_config(cwd=str(work), environ=env) == ServeConfig()
    user = xdg / "vodou" / "serve.toml"
    user.write_text("[inbox]\nbase_url = 'http://user'\n")
    assert load_serve_config(cwd=str(work), environ=env).base_url == "http://user"
    (home / ".config" / "vodou").mkdir(parents=True)
    (home / ".config" / "vodou" / "serve.toml").write_text("[inbox]\nbase_url = 'http://home'\n")
    assert load_serve_config(cwd=str(work), environ={"HOME": str(home)}).base_url == "http://home"
    (work / "vodou-serve.toml").write_text("[inbox]\nbase_url = 'http://local'\n")
    assert load_serve_config(cwd=str(work), environ=env).base_url == "http://local"
    named = tmp_path / "named.toml"
    named.write_text("[inbox]\nbase_url = 'http://env'\n")
    assert load_serve_config(cwd=str(work), environ={**env, "VODOU_SERVE_CONFIG": str(named)}).base_url == "http://env"
    flag = tmp_path / "flag.toml"
    flag.write_text("[inbox]\nbase_url = 'http://flag'\n")
    cfg = load_serve_config(flag, cwd=str(work), environ={**env, "VODOU_SERVE_CONFIG": str(named)})
    assert (cfg.base_url, cfg.source) == ("http://flag", str(flag))


def test_the_documented_example_file_loads_and_hides_its_secrets(tmp_path):
    text = DOCS.read_text(encoding="utf-8")
    example = re.search(r"## The file \(TOML\)\n\n```toml\n(.*?)\n```", text, re.S).group(1)
    env = {
        "VODOU_WEBHOOK_SECRET": SECRET,
        "RELAY_TOKEN": "relaytok",
        "RELAY_SECRET": "relaysecret",
        "VODOU_SMTP_PASSWORD": PASSWORD,
    }
    cfg = config(tmp_path, example, **env)
    assert cfg.base_url == "https://vodou.example.org" and cfg.notifies
    first, relay = cfg.webhooks
    assert (first.name, first.secret.reveal(), first.tries, first.backoff_s) == (
        "https://hooks.example.org",
        SECRET,
        4,
        1.0,
    )
    assert (relay.name, relay.url, relay.secret.reveal(), relay.tries, relay.backoff_s) == (
        "chat relay", "https://relay.example.org/in/relaytok", "relaysecret", 6, 2.0,
    )  # fmt: skip
    e = cfg.email
    assert (e.host, e.port, e.security, e.username, e.password.reveal()) == (
        "smtp.example.org",
        587,
        "starttls",
        "vodou@example.org",
        PASSWORD,
    )
    assert dict(e.approvers) == {"ana": "ana@example.org", "bob": "Bob Lopes <bob@example.org>"}
    shown = repr(cfg) + str(cfg)
    for secret in env.values():
        assert secret not in shown
    assert "<secret from $VODOU_WEBHOOK_SECRET>" in shown
