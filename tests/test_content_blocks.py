"""Nothing a server returns is lost: every content block of a tool's answer is kept.

A result with text beside an image, audio, a resource link or an embedded resource used
to keep the text alone. Now every block (annotations and ``_meta`` included) is kept in
the step's stored result, shown by ``recipe show`` (one line a block), carried whole by
``show --json``, rendered on the run page, and read by a recipe as ``{step.content}``,
while the step's value stays what the language defines. Proven on the conversion itself
and, end to end, on the published reference server ``@modelcontextprotocol/server-everything``.
"""

from __future__ import annotations

import html
import json

import pytest
from mcp.types import (
    Annotations,
    AudioContent,
    CallToolResult,
    EmbeddedResource,
    ImageContent,
    ResourceLink,
    TextContent,
    TextResourceContents,
)
from starlette.testclient import TestClient
from test_existing_configs import EVERYTHING, everything_cached, write
from web_helpers import sign_in

from vodou_engine.compiler import template
from vodou_engine.policy import Policy
from vodou_engine.servers import ServerSet
from vodou_engine.service import Service
from vodou_engine.tools.results import blocks_of, describe_block, to_result
from vodou_engine.web.app import create_app
from vodou_engine.web.config import WebConfig
from vodou_engine.web.identity import add_approver
from vodou_engine.web.step_views import content_item

PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="


def _mixed() -> CallToolResult:
    return CallToolResult(
        content=[
            TextContent(type="text", text='{"ok": true}', annotations=Annotations(audience=["user"], priority=0.9)),
            ImageContent(type="image", data=PNG, mime_type="image/png", annotations=Annotations(priority=0.5)),
            AudioContent(type="audio", data="UklGRg==", mime_type="audio/wav"),
            ResourceLink(type="resource_link", uri="https://example.org/a.txt", name="a.txt", mime_type="text/plain"),
            EmbeddedResource(
                type="resource",
                resource=TextResourceContents(uri="demo://r/1", mime_type="text/plain", text="inside"),
            ),
        ]
    )


def test_every_block_is_kept_with_its_annotations_and_the_value_is_unchanged():
    r = to_result(_mixed(), 0.1)
    assert r.value == {"ok": True}  # the language's value: the text, decoded as JSON
    assert [b["type"] for b in r.content] == ["text", "image", "audio", "resource_link", "resource"]
    assert r.content[0]["annotations"] == {"audience": ["user"], "priority": 0.9}
    assert r.content[1] == {"type": "image", "data": PNG, "mimeType": "image/png", "annotations": {"priority": 0.5}}
    assert r.content[3]["uri"] == "https://example.org/a.txt" and r.content[3]["name"] == "a.txt"
    assert r.content[4]["resource"] == {"uri": "demo://r/1", "mimeType": "text/plain", "text": "inside"}


def test_a_plain_text_answer_is_kept_once_and_structured_content_keeps_its_blocks():
    plain = to_result(CallToolResult(content=[TextContent(type="text", text="hello")]), 0.0)
    assert plain.value == "hello" and plain.content is None  # the value gives it back whole
    structured = to_result(
        CallToolResult(content=[TextContent(type="text", text="5")], structured_content={"sum": 5}), 0.0
    )
    assert structured.value == {"sum": 5} and structured.content == [{"type": "text", "text": "5"}]
    # the text a server sends beside its structured content, or JSON text: the value gives it back
    same = [TextContent(type="text", text='{"sum": 5}')]
    assert to_result(CallToolResult(content=same, structured_content={"sum": 5}), 0.0).content is None
    assert to_result(CallToolResult(content=same), 0.0).content is None
    assert blocks_of({"sum": 5}) == [{"type": "text", "text": '{"sum":5}'}] and blocks_of(None) == []
    # but not when JSON reads it otherwise: `true` is not `1`
    other = [TextContent(type="text", text='{"sum": true}')]
    assert to_result(CallToolResult(content=other, structured_content={"sum": 1}), 0.0).content is not None
    quoted = to_result(CallToolResult(content=[TextContent(type="text", text='"hi"')]), 0.0)
    assert quoted.value == "hi" and quoted.content == [{"type": "text", "text": '"hi"'}]


def test_a_block_is_kept_as_the_sdk_dumps_it_whether_or_not_it_is_bare_text():
    """A bare text block is written out without pydantic's dump (results._block_doc): the same
    document, and a text block with annotations or ``_meta`` still keeps them."""
    blocks = [
        TextContent(type="text", text="plain"),
        TextContent(type="text", text="meta", _meta={"k": 1}),
        *_mixed().content,
    ]
    r = to_result(CallToolResult(content=blocks), 0.0)
    assert r.content == [b.model_dump(mode="json", by_alias=True, exclude_none=True) for b in blocks]
    assert r.content[1] == {"type": "text", "text": "meta", "_meta": {"k": 1}}


def test_each_block_in_a_line_and_on_the_page():
    lines = [describe_block(b) for b in to_result(_mixed(), 0.0).content]
    assert lines == [
        "text, 12 characters [audience: user; priority: 0.9]",
        "image image/png, 70 bytes [priority: 0.5]",
        "audio audio/wav, 4 bytes",
        "link https://example.org/a.txt (a.txt), text/plain",
        "resource demo://r/1, text/plain, text of 6 characters",
    ]
    blocks = to_result(_mixed(), 0.0).content
    assert content_item(blocks[1])["image"] == f"data:image/png;base64,{PNG}"
    assert content_item(blocks[3])["href"] == "https://example.org/a.txt"
    svg = {"type": "image", "mimeType": "image/svg+xml", "data": "PHN2Zz4="}
    assert content_item(svg)["image"] is None  # only raster types inline
    assert content_item({"type": "resource_link", "uri": "javascript:alert(1)", "name": "x"})["href"] is None


def test_step_content_reads_the_blocks_unless_the_value_has_a_content_field():
    blocks = [{"type": "text", "text": "t"}, {"type": "image", "mimeType": "image/png", "data": PNG}]
    values = {"img": ["t"], "doc": {"content": "its own"}}
    out = template.render(
        {"a": "{img.content.1.mimeType}", "b": "{img.content}", "c": "{doc.content}", "d": "{img}"},
        values.__getitem__,
        {"img": blocks, "doc": blocks}.get,
    )
    assert out == {"a": "image/png", "b": blocks, "c": "its own", "d": ["t"]}
    with pytest.raises(template.MissingValue, match=r"\{img.content.5\}: '5' is not in the content of img"):
        template.render({"a": "{img.content.5}"}, values.__getitem__, {"img": blocks}.get)


# --- end to end, on the published reference server ------------------------------------------------------
RECIPE = """recipe "everything's content"
tiny: ev.get-tiny-image
links: ev.get-resource-links {"count": 2}
ref: ev.get-resource-reference {"resourceType": "Text", "resourceId": 1}
note: ev.get-annotated-message {"messageType": "error", "includeImage": true}
said: ev.echo {"message": "{tiny.content.1.mimeType} {links.content.1.uri}"}
again: ev.echo {"message": "{said.content.0.text}"}
"""


def test_every_block_of_server_everything_is_stored_shown_and_readable(cli, tmp_path, store_location):
    if not everything_cached():
        pytest.skip(f"npm's cache has no {EVERYTHING} (npx -y {EVERYTHING} puts it there)")
    write(
        tmp_path / "mcp.json",
        {"mcpServers": {"ev": {"command": "npx", "args": ["--offline", "-y", EVERYTHING], "startTimeout": 120}}},
    )
    (tmp_path / "e.recipe").write_text(RECIPE)
    ran = json.loads(cli("run", "e.recipe", "--json").out)
    for _ in range(10):  # tools whose names and annotations say no more than "may change something" ask
        pending = [a["step"] for a in cli("show", ran["run"], "--json").json()["approvals"] if a["state"] == "pending"]
        if not pending:
            break
        cli("approve", ran["run"], pending[0], "--yes")
    nodes = {n["node"]: n for n in cli("show", ran["run"], "--json", expect=0).json()["nodes"]}
    assert all(nodes[s]["state"] == "succeeded" for s in ("tiny", "links", "ref", "note", "said", "again")), nodes

    tiny = nodes["tiny"]["content"]
    assert [b["type"] for b in tiny] == ["text", "image", "text"]
    assert tiny[1]["mimeType"] == "image/png" and len(tiny[1]["data"]) > 1000  # the picture, whole
    assert nodes["tiny"]["output"] == [tiny[0]["text"], tiny[2]["text"]]  # the value is as it was

    links = nodes["links"]["content"]
    assert [b["type"] for b in links] == ["text", "resource_link", "resource_link"]
    assert links[1]["uri"].startswith("demo://") and links[1]["name"]

    ref = nodes["ref"]["content"]
    assert [b["type"] for b in ref] == ["text", "resource", "text"] and ref[1]["resource"]["text"]

    note = nodes["note"]["content"]
    assert note[0]["annotations"]["priority"] == 1 and "user" in note[0]["annotations"]["audience"]
    assert [b["type"] for b in note] == ["text", "image"]

    assert f"image/png {links[1]['uri']}" in json.dumps(nodes["said"]["output"])  # {step.content} read them
    assert nodes["said"]["content"] is None  # one plain text block: its value gives it back, kept once
    assert nodes["again"]["output"] == f"Echo: {nodes['said']['output']}"  # ... and {said.content.0.text} reads it

    shown = cli("show", ran["run"], expect=0).out
    assert "image image/png, " in shown and " KB" in shown
    assert f"link {links[1]['uri']} ({links[1]['name']}), text/plain" in shown
    assert "priority: 1" in shown

    # the run page: the picture itself (a data: URL, which the page's CSP allows) and each link's line
    svc = Service(store=store_location, servers=ServerSet({}, "none"), policy=Policy())
    with TestClient(create_app(svc, WebConfig(allowed_hosts=["testserver"])), backend="trio") as client:
        _, link = add_approver(svc.runs(), "ana", by="test", base_url="http://testserver")
        page = sign_in(client, link, "ana").get(f"/runs/{ran['run']}")
    assert "img-src 'self' data:" in page.headers["content-security-policy"]
    assert f'<img src="data:image/png;base64,{tiny[1]["data"]}"' in page.text
    assert html.escape(f"link {links[1]['uri']} ({links[1]['name']}), text/plain", quote=False) in page.text
