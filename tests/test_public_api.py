"""The public API: every advertised name resolves, and importing it stays light."""

from __future__ import annotations

import subprocess
import sys

import vodou_engine
from vodou_engine.runs import Runs
from vodou_engine.store import open_store


def test_every_export_resolves():
    for name in vodou_engine.__all__:
        assert getattr(vodou_engine, name) is not None, name


def test_import_does_not_load_heavy_modules():
    code = "import sys, vodou_engine; print(','.join(m for m in ('mcp', 'trio', 'networkx', 'lark', 'rich') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == ""


def test_compile_then_verify_through_the_api():
    plan = vodou_engine.compile_recipe('post: slack.slack_post_message {"channel": "#x", "text": "hi"}\n', "api.recipe")
    graph = vodou_engine.verify(plan)
    assert graph.has_edge("approve:post", "post")
    again = vodou_engine.load_plan(vodou_engine.encode_plan(plan))
    assert again == plan


def test_one_runs_object_reads_then_writes(tmp_path):
    """A Runs whose first call only read the store still writes on a later call: the store
    is opened again for writing rather than failing with "read-only"."""
    path = tmp_path / "runs.db"
    open_store(path).close()
    runs = Runs(store=path)
    assert runs.approvers() == []  # opens the store to read only
    runs.add_approver("ana", by="test")
    assert open_store(path, readonly=True).approvers_list()[0].name == "ana"  # on disk, read by another store
    assert runs.approvers() == ["ana"]
