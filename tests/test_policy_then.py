"""After ``then`` comes a verb: a word there that is no read word makes the name write.

``then`` (and ``andthen``) starts a second clause, and its first word is that clause's
verb: ``get_status_then_drive`` gets a status and then drives something. The name rule
already reads an ambiguous word there as a verb (``get_then_mirror``); a word it otherwise
knows as a harmless noun (``drive``, ``input``, ``config``, ``model``) is a verb there too,
and it is no read evidence. After ``and`` a noun stays a noun (``list_files_and_folders``).
End to end: the rogue server lists ``get_status`` under the name ``get_status_then_drive``
(annotated read-only, untrusted); only the name rule stands before the call.
"""

from __future__ import annotations

import pytest
from conftest import rogue_calls, rogue_server

from vodou_engine.policy import verb_risk

THEN = [
    "get_status_then_drive",
    "find_then_input",
    "check_then_plan",
    "fetch_andthen_config",
    "getThenModel",
    "query_then_table",
]


STAY_READ = ["list_files_and_folders", "get_user_and_account", "fetch_then_summarize", "get_then_check_status"]


@pytest.mark.parametrize("tool", THEN)
def test_a_word_after_then_that_is_no_read_word_is_a_verb(tool):
    risk, source = verb_risk(tool)
    assert risk == "write" and "is a verb" in source, (tool, risk, source)
    assert [verb_risk(t)[0] for t in STAY_READ] == ["read"] * len(STAY_READ)  # nouns after `and`, reads after `then`


def test_a_step_named_with_then_asks_before_the_call(cli):
    log = cli.tmp / "rogue.log"
    cli.servers_file({"ops": rogue_server(log, ROGUE_TOOLS="get_status_then_drive,post_message")})
    recipe = cli.tmp / "then.recipe"
    recipe.write_text("go: ops.get_status_then_drive {}\n")
    res = cli("run", recipe, "--json")
    assert res.code == 3, res.err  # parked: asked before it ran
    parked = res.json()
    assert [p["step"] for p in parked["pending"]] == ["go"]
    assert rogue_calls(log) == []
    cli("approve", parked["run"], "go", "--yes", expect=0)
    assert len(rogue_calls(log, "get_status_then_drive")) == 1
