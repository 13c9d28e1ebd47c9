"""A server's question answered on the run page: the real app over Starlette's TestClient
(on trio), the service keeping tests/sdk_server.py warm, a real SQLite store. What the
server received is read from its own log."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from starlette.testclient import TestClient
from web_helpers import form, sign_in, wait_for

from vodou_engine.policy import Policy
from vodou_engine.servers import ServerConfig, ServerSet
from vodou_engine.service import Service
from vodou_engine.web.app import create_app
from vodou_engine.web.config import WebConfig
from vodou_engine.web.identity import add_approver

SDK_SERVER = str(Path(__file__).with_name("sdk_server.py"))
ASK = 'recipe "greet"\napprovers: ana\ngreeting: sdk.get-name {}\n'


def answers(log: Path) -> list[dict]:
    lines = log.read_text().splitlines() if log.exists() else []
    return [r for r in map(json.loads, lines) if r.get("tool") == "get-name"]


def test_a_servers_question_is_answered_on_the_run_page_and_reaches_the_server_once(tmp_path):
    log = tmp_path / "sdk.log"
    sdk = ServerConfig(command=sys.executable, args=[SDK_SERVER], env={"SDK_LOG": str(log)})
    svc = Service(store=str(tmp_path / "runs.db"), servers=ServerSet({"sdk": sdk}, "test"), policy=Policy())
    runs = svc.runs()
    runs.save("greet.recipe", text=ASK, by="ana")
    app = create_app(svc, WebConfig(allowed_hosts=["testserver"]))
    with TestClient(app, backend="trio", base_url="http://testserver") as client:
        _, link = add_approver(runs, "ana", by="test", base_url="http://testserver")
        ana = sign_in(client, link, "ana")
        fields = form(ana.get("/recipes/greet").text, "/recipes/greet/run")
        res = ana.post("/recipes/greet/run", fields, follow=False)
        run_id = res.headers["location"].split("/runs/")[1].split("?")[0]
        wait_for(lambda: runs.store().pending_approvals(run_id) if runs.list() else None, "the run to park")

        page = ana.get(f"/runs/{run_id}").text
        assert "Whom should I greet?" in page and "Answer greeting" in page
        assert not [f for f in form(page, f"/runs/{run_id}/answer") if f.startswith("approve")]
        answer = form(page, f"/runs/{run_id}/answer")
        answer.pop("field.excited")  # an unchecked box is not sent
        bad = ana.post(f"/runs/{run_id}/answer", {**answer, "action": "accept"})
        assert "does not fit" in bad.text and "required property" in bad.text  # no name: refused, nothing recorded
        res = ana.post(f"/runs/{run_id}/answer", {**answer, "action": "accept", "field.name": "Ada"})
        assert res.status_code == 200 and "Answered." in res.text
        wait_for(lambda: runs.show(run_id).state == "succeeded", "the answered run to finish")
    assert [a["content"] for a in answers(log) if a["answer"] == "accept"] == [{"name": "Ada", "excited": False}]
    runs.close()
