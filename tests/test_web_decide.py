"""The decision page's words and drawings, without a browser: the effect in words, the
payload shown once (text as text, the rest as a table), a preview as a diff, and the run's
graph drawn as the nodes and edges of ``recipe plan --format mermaid``."""

from __future__ import annotations

import re
from types import SimpleNamespace

import pytest
from conftest import RECIPES

from vodou_engine.cards import mermaid
from vodou_engine.compiler import compile_recipe
from vodou_engine.web import decide
from vodou_engine.web.graph_svg import labels, svg

EXAMPLES = sorted(RECIPES.glob("*.recipe"))

POST = 'recipe "p"\npost: slack.slack_post_message {"channel": "#daily", "text": "{text}"}\ninputs:\n  text = "x"\n'


def test_an_effect_in_words_names_the_verb_the_target_and_the_server():
    plan = compile_recipe(POST, "p.recipe")
    step = plan.index()["post"]
    assert decide.effect_words(step, {"channel": "#daily", "text": "hi"}) == "post message to #daily on slack"
    rename = compile_recipe('rename: gmail.update_contact {"email": "a@x", "name": "A"}\n', "r.recipe")
    assert (
        decide.effect_words(rename.index()["rename"], {"email": "a@x", "name": "A"})
        == "update contact for a@x on gmail"
    )
    drop = compile_recipe('drop: google-calendar.delete-event {"eventId": "e1"}\n', "d.recipe")
    assert decide.effect_words(drop.index()["drop"], {"eventId": "e1"}) == "delete event event e1 on google-calendar"


def test_the_payload_is_shown_once_text_as_text_the_rest_as_a_table():
    view = decide.payload_view({"channel": "#daily", "text": "line one\nline two", "n": 3})
    assert view["texts"] == [("text", "line one\nline two")]
    assert view["fields"] == [("channel", "#daily"), ("n", "3")]
    assert '"line one\\nline two"' in view["raw"]
    shown = decide.decision(
        compile_recipe(POST, "p.recipe"), "post", {"channel": "#daily", "text": "line one\nline two"}, None
    )
    assert shown["message"] == ("text", "line one\nline two") and shown["payload"]["texts"] == []
    assert shown["question"] is None and shown["does"] == "post message to #daily on slack"


def test_a_preview_before_and_after_is_a_diff_and_any_other_preview_is_not():
    diff = decide.preview_diff(
        {"before": {"channel": "#d", "last_message": "old"}, "after": {"channel": "#d", "last_message": "new\nmore"}}
    )
    assert ("same", "channel: #d") in diff and ("del", "last_message: old") in diff
    assert ("add", "last_message: new") in diff and ("add", "  │ more") in diff
    assert decide.preview_diff({"rows": 3}) is None


def test_a_question_without_an_effect_shows_what_it_asks_about():
    plan = compile_recipe("draft: write a note\nask me:\n- is the draft right?\n", "q.recipe")
    question = next(n for n in plan.nodes if type(n).__name__ == "QuestionNode")
    shown = decide.decision(plan, question.id, {"outputs": {"draft": "Dear all,\nthanks"}}, None)
    assert shown["does"] is None and shown["question"] == "is the draft right?"
    assert shown["about"] == [{"name": "draft", "text": "Dear all,\nthanks", "json": None}]
    said = decide.summary(plan, question.id, {"outputs": {"draft": "\nDear all,\nthanks"}})
    assert said == {"does": "answer: is the draft right?", "first": "Dear all,"}


def test_an_inbox_item_says_what_will_be_done_and_the_first_line_of_the_message():
    plan = compile_recipe(POST, "p.recipe")
    said = decide.summary(plan, "post", {"channel": "#daily", "text": "Good morning\nthree things"})
    assert said == {"does": "post message to #daily on slack", "first": "Good morning"}
    long = decide.summary(plan, "post", {"channel": "#daily", "text": "x" * 500})
    assert len(long["first"]) == decide.FIRST_LINE and long["first"].endswith("…")


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_the_graph_drawn_on_the_page_has_the_nodes_and_edges_of_the_mermaid_chart(path):
    plan = compile_recipe(path.read_text(), str(path))
    states = {n.id: "succeeded" for n in plan.nodes[:2]}
    drawing = str(svg(plan, states))
    chart = mermaid(plan)
    assert re.findall(r'data-node="([^"]+)"', drawing) == [n.id for n in plan.nodes]
    assert drawing.count('class="edge"') == chart.count("-->")
    for n in plan.nodes:
        first = labels(n)[0][0]
        assert first.replace('"', "#quot;") in chart  # the label mermaid gives it, first line
    assert drawing.count("s-succeeded") == len(states)
    assert drawing.count("node box s-") + drawing.count("node round s-") + drawing.count(
        "node diamond s-"
    ) + drawing.count("node gate s-") == len(plan.nodes)


def test_a_label_is_made_visible_and_escaped_in_the_drawing():
    plan = compile_recipe('ask me:\n- say <b>"hi"</b>\u200b?\nx: slack.slack_search_messages {}\n', "q.recipe")
    drawing = str(svg(plan, {}))
    assert "<b>" not in drawing and "&lt;b&gt;" in drawing and "\u200b" not in drawing and "U+200B" in drawing


def test_a_question_following_several_outputs_shows_the_first_above_the_buttons_and_the_rest_below():

    from vodou_engine.web.context import templates

    plan = compile_recipe("a: write a note\nb: write another\nask me:\n- both fine?\n", "q.recipe")
    q = next(n for n in plan.nodes if type(n).__name__ == "QuestionNode")
    d = decide.decision(plan, q.id, {"outputs": {"a": "one\ntwo", "b": {"x": 1}}}, None)
    item = {
        "id": "a1", "step": q.id, "state": "pending", "fingerprint": "sha256:" + "0" * 64, "asked": "", "asked_ago": "",
        "expires": "", "countdown": "", "expired": False, "approvers": [], "may_decide": True, "decided_by": None,
        "decided": "", "reason": None, "card": "the card", "refused": False, "payload": "{}", "preview": None,
        "check": None, "decide": d, "asks": None,
    }  # fmt: skip
    view = SimpleNamespace(
        recipe="q", started_by="ana", driven_by=None, error=None, ended_at=None, plan_fingerprint="p"
    )
    me = SimpleNamespace(name="ana", csrf="t")
    html = templates().get_template("run.html").render(
        me=me, request_path="/runs/r", done=None, run="r", view=view, plan_card=None, graph=None, state="parked",
        created="", created_ago="", ended="", took="", inputs=None, saved=None, schedule=None, pending=[item],
        history=[], nodes=[], effects=[], timeline=None, together=[], why=None, resumable=False, finished=False, live="",
    )  # fmt: skip
    approve = html.index('class="approve"')
    assert html.index("one\ntwo") < approve < html.index("Also what it asks about") < html.index("&#34;x&#34;: 1")
    assert "(and 1 more below the buttons)" in html


def test_a_pages_stream_says_change_then_end_once_the_run_has_ended_and_stops_with_the_inbox():
    import trio

    from vodou_engine.web import live

    class FakeWeb:
        def __init__(self, tokens):
            self.svc = SimpleNamespace(accepting=True)
            self.tokens = iter(tokens)

        async def read(self, fn):
            return next(self.tokens)

    async def collect(web, since):
        return [e async for e in live._changes(web, None, None, since)]

    ended = trio.run(collect, FakeWeb(["a", "a", "b.end"]), "a")
    assert ended == [{"event": "change", "data": "b.end"}, {"event": "end", "data": "b.end"}]
    stopping = FakeWeb(["a", "b"])

    async def stop_after_one():
        out = []
        async for e in live._changes(stopping, None, None, "a"):
            out.append(e)
            stopping.svc.accepting = False
        return out

    assert trio.run(stop_after_one) == [{"event": "change", "data": "b"}]
