"""A verdict's words are part of an approval's fingerprint, so they are the same in every process.

`risk_source` (the words that decided a tool's risk) goes into the fingerprint a
person approves. If it depended on the order of a Python set, which changes with
PYTHONHASHSEED from one process to the next, an approval given in one process
would be stale in the next. Each name below is judged in processes with
different hash seeds; every verdict must read the same.
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from pathlib import Path

from vodou_engine.policy import CRITICAL_VERBS

DATA = Path(__file__).parent / "data"

JUDGE = """
import json, sys
from vodou_engine.policy import verb_risk
print(json.dumps([verb_risk(n) for n in json.load(sys.stdin)]))
"""


def _names() -> list[str]:
    real = [
        line.split("\t")[0]
        for line in (DATA / "mcp_tool_names.tsv").read_text().splitlines()
        if line and not line.startswith("#")
    ]
    crit = sorted(CRITICAL_VERBS)
    # two critical words of one length glued together: which one a verdict names must not vary
    glued = [f"frob{a}{b}" for a, b in itertools.permutations([w for w in crit if len(w) >= 4], 2) if len(a) == len(b)][
        :400
    ]
    attacks = ["frobtransferwithdraw", "getrmdelete", "forgetrm", "onboardanddelete", "listpurgewipe"]
    return real + glued + attacks


def _judge(names: list[str], seed: str) -> list:
    env = {**os.environ, "PYTHONHASHSEED": seed}
    done = subprocess.run(
        [sys.executable, "-c", JUDGE], input=json.dumps(names), capture_output=True, text=True, env=env, check=True
    )
    return json.loads(done.stdout)


def test_a_verdict_reads_the_same_in_every_process():
    names = _names()
    first = _judge(names, "0")
    for seed in ("1", "2", "12345"):
        other = _judge(names, seed)
        differ = [(n, a, b) for n, a, b in zip(names, first, other, strict=True) if a != b]
        assert not differ, differ[:5]
