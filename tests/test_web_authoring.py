"""The New page and the recipe editor without a browser (scripts off): the real app over
Starlette's TestClient, a real store, the demo MCP servers kept warm by the service, and a
scripted model registered with `llm` in this process (no network).

Effects are counted in the demo chat server's own call log.
"""

from __future__ import annotations

import re
import subprocess
import sys
import uuid
from html import unescape

import pytest
from conftest import demo_calls
from starlette.testclient import TestClient
from web_helpers import form, sign_in, wait_for

from vodou_engine.policy import Policy
from vodou_engine.servers import ServerSet, demo_servers
from vodou_engine.service import Service
from vodou_engine.web.app import create_app
from vodou_engine.web.config import WebConfig
from vodou_engine.web.identity import add_approver

llm = pytest.importorskip("llm")

DRAFT = """\
# schedule: 0 8 * * 1-5 Europe/Lisbon
recipe "daily note"
inputs:
  text = "TEXT"
post: slack.slack_post_message {"channel": "#daily", "text": "{text}"}
"""
MISTAKE = DRAFT.replace('"channel": "#daily",', '"channel": "#daily",,')


class Scripted(llm.Model):
    model_id = "scripted-web"
    can_stream = False

    def __init__(self) -> None:
        self.replies: list[str] = []
        self.prompts: list[str] = []

    def execute(self, prompt, stream, response, conversation=None):
        self.prompts.append(prompt.prompt)
        yield self.replies.pop(0) if self.replies else "(the script ran out)"


class Plugin:
    def __init__(self, model: Scripted) -> None:
        self.model = model

    @llm.hookimpl
    def register_models(self, register):
        register(self.model)


@pytest.fixture(scope="module")
def app(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("authoring")
    svc = Service(store=str(tmp / "runs.db"), servers=ServerSet(demo_servers(tmp / "demo.db"), "demo"), policy=Policy())
    client_app = create_app(svc, WebConfig(allowed_hosts=["testserver"]))
    scripted = Scripted()
    plugin = Plugin(scripted)
    llm.pm.register(plugin, name="scripted-web-test")
    try:
        with TestClient(client_app, backend="trio", base_url="http://testserver") as client:
            runs = svc.runs()
            _, link = add_approver(runs, "ana", by="test", base_url="http://testserver")
            ana = sign_in(client, link, "ana")
            yield tmp, svc, runs, ana, scripted
            runs.close()
    finally:
        llm.pm.unregister(name="scripted-web-test")


@pytest.fixture
def with_model(app, monkeypatch, tmp_path):
    monkeypatch.setenv("VODOU_MODEL", "scripted-web")
    monkeypatch.setenv("LLM_USER_PATH", str(tmp_path / "llm"))
    return app


@pytest.fixture
def without_model(app, monkeypatch, tmp_path):
    for var in ("VODOU_MODEL", "OPENAI_API_KEY", "LLM_DEFAULT_MODEL", "LLM_OPENAI_SHOW_RESPONSES"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("LLM_USER_PATH", str(tmp_path / "llm"))
    return app


def text_of(html: str) -> str:
    return unescape(re.sub(r"<[^>]+>", "", html))


def editor_fields(html: str) -> dict[str, str]:
    fields = form(html, "/edit")
    m = re.search(r'<textarea[^>]*name="text"[^>]*>(.*?)</textarea>', html, re.S)
    assert m, html[:2000]
    fields["text"] = unescape(m.group(1))
    return fields


def test_a_sentence_drafts_a_recipe_corrected_from_the_compilers_error_and_shows_its_card(with_model):
    tmp, _svc, runs, ana, model = with_model
    name = f"daily {uuid.uuid4().hex[:6]}"
    model.replies = [MISTAKE, DRAFT.replace("daily note", name)]
    assert "Drafts with scripted-web" in text_of(ana.get("/new").text)
    page = ana.post("/new", {"csrf": ana.csrf(), "sentence": "every weekday at 8 post a note to #daily"})
    assert page.status_code == 200, page.text
    shown = text_of(page.text)
    assert f"Drafted: {name}" in shown and "drafted by scripted-web after 1 correction" in shown
    assert "slack.slack_post_message" in shown and "origin: agent" in shown
    assert "<recipe>:5:53: error: malformed JSON" in model.prompts[1]  # the loop of `recipe author`
    fields = editor_fields(page.text)
    assert fields["cron"] == "0 8 * * 1-5" and fields["tz"] == "Europe/Lisbon"
    for button in ("Run once", "Edit recipe", "Save + schedule"):
        assert f">{button}</button>" in page.text

    # Save + schedule, unchanged: the model's proposal (origin agent), scheduled by ana (active)
    fields.update(op="schedule", cron="30 8 * * 1-5")
    res = ana.post("/edit", fields, follow=False)
    assert res.status_code == 303, text_of(res.text)
    saved = runs.saved(name)
    assert (saved.version, saved.origin, saved.saved_by) == (1, "agent", "ana")
    (schedule,) = [s for s in runs.schedules() if s.recipe == name]
    assert (schedule.cron, schedule.tz, schedule.state, schedule.origin) == (
        "30 8 * * 1-5",
        "Europe/Lisbon",
        "active",
        "person",
    )

    # Edit the saved recipe: a person's text now; saving makes version 2, and the page shows the diff
    page = ana.get(f"/edit?recipe={name}")
    fields = editor_fields(page.text)
    assert "origin: agent" in text_of(page.text)
    fields.update(op="save", text=fields["text"].replace('"TEXT"', '"edited by ana"'))
    res = ana.post("/edit", fields, follow=False)
    assert res.status_code == 303 and res.headers["location"].endswith("?saved=2"), text_of(res.text)
    assert (runs.saved(name).version, runs.saved(name).origin) == (2, "person")
    page = text_of(ana.get(res.headers["location"]).text)
    assert "Saved as version 2." in page and "Changes from v1 to v2" in page
    assert "v1: saved by ana, proposed by an agent · v2: saved by ana, written by a person" in page
    assert '-  text = "TEXT"' in page and '+  text = "edited by ana"' in page
    assert demo_calls(tmp / "demo.db", tool="slack_post_message") == []  # nothing ran


def test_without_a_model_it_says_so_and_opens_the_editor_on_a_starting_recipe(without_model):
    _tmp, _svc, runs, ana, _model = without_model
    before = len(runs.saved_recipes())
    assert "No model is configured to draft recipes with." in text_of(ana.get("/new").text)  # said before typing
    page = ana.post("/new", {"csrf": ana.csrf(), "sentence": "post a note to #daily"})
    assert page.status_code == 200
    shown = text_of(page.text)
    assert "No model is configured to draft recipes with, so nothing was drafted." in shown
    assert "llm keys set openai" in shown and "here is a starting recipe to edit" in shown
    assert 'recipe "post to daily"' in editor_fields(page.text)["text"]
    assert "Here is how this would run: post to daily" in shown and "origin: person" in shown  # its card
    assert len(runs.saved_recipes()) == before


def test_an_error_is_shown_as_the_cli_prints_it_and_the_card_follows_the_fix(app, tmp_path):
    _tmp, _svc, _runs, ana, _model = app
    bad = (
        'recipe "typo"\ninputs:\n  text = "x"\npost: slack.slack_post_message {"channel": "#daily", "text": "{txt}"}\n'
    )
    (tmp_path / "new.recipe").write_text(bad)
    cli = subprocess.run(
        [sys.executable, "-m", "vodou_engine", "compile", "new.recipe"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "PYTHONPATH": sys.path[0]},
    )
    assert cli.returncode == 2, cli.stderr
    printed = cli.stderr.strip()
    assert "new.recipe:4:" in printed and "^" in printed and "text" in printed  # the place, the caret, the hint
    fields = editor_fields(ana.get("/edit").text)
    fields.update(text=bad, op="preview")
    fragment = ana.post("/edit", fields, headers={"x-preview": "fragment"})
    assert fragment.status_code == 200 and "<html" not in fragment.text
    assert printed in unescape(fragment.text), fragment.text
    assert "The card appears once the recipe compiles" in fragment.text or 'class="card"' not in fragment.text
    # scripts off: the Compile / preview button shows the same on the whole page
    page = ana.post("/edit", fields)
    assert printed in unescape(page.text) and "<textarea" in page.text
    fields.update(text=bad.replace("{txt}", "{text}"))
    fixed = ana.post("/edit", fields, headers={"x-preview": "fragment"})
    assert 'class="problem' not in fixed.text and "Here is how this would run: typo" in fixed.text


def test_run_once_from_the_editor_asks_for_its_inputs_parks_and_the_approval_posts_once(app):
    tmp, _svc, runs, ana, _model = app
    note = f"run once {uuid.uuid4().hex[:8]}"
    text = 'recipe "say it"\ninputs:\n  text\npost: slack.slack_post_message {"channel": "#daily", "text": "{text}"}\n'
    fields = editor_fields(ana.get("/edit").text)
    fields.update(text=text, op="preview")
    page = ana.post("/edit", fields)
    assert 'name="input:text"' in page.text and "text (required)" in text_of(page.text)
    fields = editor_fields(page.text)
    fields.update(op="run")
    refused = ana.post("/edit", fields, follow=False)
    assert refused.status_code == 400 and "<textarea" in refused.text, text_of(refused.text)
    assert "the recipe needs the input `text`" in unescape(refused.text)  # nothing started
    fields["input:text"] = note
    res = ana.post("/edit", fields, follow=False)
    assert res.status_code == 303, text_of(res.text)
    run_id = res.headers["location"].split("/runs/")[1].split("?")[0]
    wait_for(lambda: runs.store().pending_approvals(run_id), f"run {run_id} to park")
    page = ana.get(f"/runs/{run_id}")
    approve = form(page.text, f"/runs/{run_id}/approve")
    res = ana.post(f"/runs/{run_id}/approve", approve, follow=False)
    assert res.status_code == 303
    wait_for(lambda: str(runs.show(run_id).state) == "succeeded", "the run to succeed")
    posted = [c for c in demo_calls(tmp / "demo.db", tool="slack_post_message") if c["arguments"].get("text") == note]
    assert len(posted) == 1 and runs.show(run_id).started_by == "ana"
