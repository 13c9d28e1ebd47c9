"""The words of the language: what a name looks like, and which words no name may be.

The parser's error explanations and lowering both need them (one to say
why a line does not parse, the other to refuse a step or block named so);
kept here, below both, so neither has to import the other.
"""

from __future__ import annotations

import re

RESERVED = frozenset(
    {
        "recipe",
        "inputs",
        "approval",
        "approvers",
        "together",
        "then",
        "ask",
        "need",
        "expires",
        "timeout",
        "retries",
        "of",
        "true",
        "false",
        "null",
        "write",
        "model",
    }
    | {"preview", "check"}  # step options: an option left unindented must not become a step
)

NAME = re.compile(r"[a-z_][a-z0-9_-]*\Z")
"""A step, block or input name, as a whole string."""
