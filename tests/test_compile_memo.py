"""The compile memo speeds up the card; it can never make a plan skip its gate."""

from __future__ import annotations

import json

from conftest import RECIPES, demo_calls

MORNING = RECIPES / "morning-briefing.recipe"


def _memo_files(cli):
    return sorted((cli.tmp / "cache" / "vodou" / "plans").glob("*.json"))


def _drop_gate(path):
    import msgspec

    from vodou_engine.plan import decode_plan, encode_plan, with_fingerprint

    plan = decode_plan(path.read_bytes())
    nodes = [n for n in plan.nodes if n.id != "approve:post"]
    nodes = [msgspec.structs.replace(n, needs=["briefing"]) if n.id == "post" else n for n in nodes]
    path.write_bytes(encode_plan(with_fingerprint(msgspec.structs.replace(plan, nodes=nodes))))


def test_plan_fills_the_memo_and_a_changed_recipe_misses_it(cli, tmp_path):
    recipe = tmp_path / "m.recipe"
    recipe.write_text(MORNING.read_text())
    cli("plan", "--offline", recipe, expect=0)
    assert len(_memo_files(cli)) == 1
    recipe.write_text(MORNING.read_text().replace("#daily", "#general"))
    out = cli("plan", "--offline", "--json", recipe, expect=0).json()
    assert len(_memo_files(cli)) == 2
    post = next(n for n in out["plan"]["nodes"] if n["id"] == "post")
    assert post["args"]["channel"] == "#general"


def test_a_damaged_memo_is_a_miss(cli):
    cli("plan", "--offline", MORNING, expect=0)
    (memo,) = _memo_files(cli)
    doc = json.loads(memo.read_text())
    doc["nodes"] = [n for n in doc["nodes"] if n["id"] != "approve:post"]  # fingerprint no longer matches
    memo.write_text(json.dumps(doc))
    out = cli("plan", "--offline", "--json", MORNING, expect=0).json()
    assert out["graph"]["approvals"] == {"post": "approve:post"}


def test_run_never_reads_the_memo(cli):
    cli("plan", "--offline", MORNING, expect=0)
    (memo,) = _memo_files(cli)
    _drop_gate(memo)  # even a memo forged with a valid fingerprint
    res = cli("run", MORNING, "--json")
    assert res.code == 3, res.err
    assert demo_calls(cli.demo_db, tool="slack_post_message") == []
