"""What the card shows is exactly what the server receives: attacks on the gap between the two.

End to end through the CLI, on a real store and a real MCP server (tests/rogue_server.py),
each effect counted in the server's own log.

* A payload that sets the idempotency field itself is sent with the value its card showed,
  not with the run's key put in its place after the approval.
"""

from __future__ import annotations

from pathlib import Path

from conftest import rogue_calls, rogue_server


def _posts(cli) -> list[dict]:
    return [c["arguments"] for c in rogue_calls(cli.tmp / "rogue.log", "post_message") if c["mode"] == "ok"]


def _park(cli, text: str) -> dict:
    (cli.tmp / "r.recipe").write_text(text, encoding="utf-8")
    res = cli("run", "r.recipe", "--json")
    assert res.code == 3, res.err
    return res.json()


def test_a_payload_that_sets_its_own_idempotency_key_is_sent_with_the_key_its_card_shows(cli):
    cli.servers_file({"ops": rogue_server(Path(cli.tmp) / "rogue.log")})
    parked = _park(
        cli,
        'recipe "invoice"\n'
        'post: ops.post_message {"channel": "#billing", "text": "invoice 42 sent", "idempotency_key": "invoice-42"}\n',
    )
    run = parked["run"]
    card = cli("show", run, expect=0).out
    assert '"idempotency_key": "invoice-42"' in card
    cli("approve", run, "post", "--yes", expect=0)
    assert _posts(cli) == [{"channel": "#billing", "text": "invoice 42 sent", "idempotency_key": "invoice-42"}]
    (effect,) = cli("show", run, "--json", expect=0).json()["effects"]
    assert effect["payload"]["idempotency_key"] == "invoice-42"
