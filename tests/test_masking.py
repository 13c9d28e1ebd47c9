"""The masking rule (vodou_engine/masking.py): every spelling of a ``${VAR}`` value, and nothing else."""

from __future__ import annotations

import base64
import json
import urllib.parse

from vodou_engine.masking import Mask


def spellings(value: str) -> dict[str, tuple[str, str]]:
    """Each spelling of ``value`` the servers echo (and a few more), by name: (the text a server
    sends, the part of it that must not be shown)."""
    wrapped = base64.b64encode(("user:" + value).encode()).decode()
    forms = {
        "as it is": value,
        "JSON-escaped": json.dumps(value)[1:-1],
        "JSON-escaped, ASCII only": json.dumps(value, ensure_ascii=True)[1:-1],
        "JSON-escaped twice": json.dumps(json.dumps(value))[3:-3],
        "every character \\u-escaped": "".join(f"\\u{ord(c):04x}" for c in value),
        "percent-encoded": urllib.parse.quote(value, safe=""),
    }
    # base64 of "user:" and the value: the characters that encode the value's bytes alone
    return {name: (form, form) for name, form in forms.items()} | {"base64 (after 'user:')": (wrapped, wrapped[8:-4])}


def leaks(text: str, value: str) -> list[str]:
    return [name for name, (_, shown) in spellings(value).items() if shown in text]


# -- the rule, one function at a time -----------------------------------------------------


def test_every_spelling_of_a_value_is_masked_and_nothing_else():
    value = 'pa"ss\\wörd-s3cr3t-value'
    mask = Mask({"TOKEN": value, "PORT": "8080", "SHORT": "abcdefg"})
    for name, (sent, secret) in spellings(value).items():
        masked = mask.text(f"<{sent}>")
        assert "${TOKEN}" in masked and secret not in masked, name
    mixed = value[:6] + "".join(f"\\u{ord(c):04X}" for c in value[6:12]) + urllib.parse.quote(value[12:]).lower()
    assert mask.text(f"key={mixed};") == "key=${TOKEN};"  # several encodings in one occurrence
    html = value.replace('"', "&quot;")
    assert mask.text(html) == "${TOKEN}"
    assert mask.text(repr(value.encode())) == "b'${TOKEN}'"  # Python's repr of the UTF-8 bytes
    # shorter than 8 characters: not a secret worth garbling every result for
    assert mask.text("port 8080, abcdefg") == "port 8080, abcdefg"
    assert mask.text("nothing to see") == "nothing to see"


def test_overlapping_values_are_masked_whole_under_the_longest_name():
    mask = Mask({"OUTER": "token-abcdefgh-123", "INNER": "abcdefgh", "OVERLAP": "zzzz-token"})
    assert mask.text("token-abcdefgh-123") == "${OUTER}"
    assert mask.text("abcdefgh alone") == "${INNER} alone"
    assert mask.text("zzzz-token-abcdefgh-123") == "${OUTER}"  # no piece of either is left
    assert "token" not in mask.text("zzzz-token-abcdefgh-123")


def test_a_message_is_masked_in_every_string_key_and_number_and_across_text_blocks():
    value = "k3y-0123456789abcdef"
    mask = Mask({"TOKEN": value, "PIN": "987654321"})
    message = {
        "jsonrpc": "2.0",
        "id": 7,
        "result": {
            "content": [{"type": "text", "text": f"first half {value[:9]}"}, {"type": "text", "text": f"{value[9:]} second half"}],
            "structuredContent": {"token": value, value: "a key", "pin": 987654321, "deep": [[{"x": json.dumps({"t": value})}]]},
        },
    }
    masked = json.loads(mask.message(json.dumps(message).encode()))
    assert masked["id"] == 7
    assert [b["text"] for b in masked["result"]["content"]] == ["first half ${TOKEN}", "${TOKEN} second half"]
    structured = masked["result"]["structuredContent"]
    assert structured["token"] == "${TOKEN}" and structured["${TOKEN}"] == "a key" and structured["pin"] == "${PIN}"
    assert value not in json.dumps(masked) and "987654321" not in json.dumps(masked)
    untouched = json.dumps({"jsonrpc": "2.0", "id": 1, "result": {"content": [{"type": "text", "text": "ok"}]}}).encode()
    assert mask.message(untouched) is untouched  # nothing to mask: the same bytes, not decoded


def test_masking_never_takes_long_on_a_long_run_of_backslashes():
    """Every spelling pattern takes a run of backslashes whole, where it starts: a server that
    sends a million of them costs one pass, not one per backslash. (A safety net of a size,
    not a timing: the test would hang for hours if it were quadratic.)"""
    mask = Mask({"TOKEN": 'a"b\\c-0123456789'})
    run = "\\" * 2_000_000
    assert mask.text(run) == run
    assert mask.message(json.dumps({"jsonrpc": "2.0", "id": 1, "result": {"t": run + "u"}}).encode())
