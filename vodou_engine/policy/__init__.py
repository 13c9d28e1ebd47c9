"""Tool risk: ``read``, ``write`` or ``critical``, and where each verdict came from.

Order of authority (docs/policy.md):

1. the person's policy file (per-tool ``risk``; it may lower as well as raise):
   ``file.py``, which also finds and loads the file and holds ``Policy``, the one
   object the compiler, the verifier and the runtime ask;
2. for a server the policy marks ``trusted``, the server's MCP annotations:
   ``annotations.py``, where an untrusted server's annotations only ever raise;
3. the words of the tool's name, read only on positive evidence, and
4. a word in no vocabulary makes the name ``write``: ``names.py`` reads a name
   into words and judges them, over the vocabularies in ``words.py``.

Each module imports only those listed after it. This module re-exports the
names the rest of the engine, its tests and benchmarks use.
"""

from __future__ import annotations

from .annotations import Hints, hints_from
from .file import (
    BUILTIN_SERVER,
    BUILTIN_TOOLS,
    Policy,
    PolicyFile,
    ServerPolicy,
    ToolPolicy,
    at_least,
    load_policy,
    policy_path,
)
from .names import verb_risk, words_of
from .words import (
    AMBIGUOUS_WORDS,
    CODE_WORDS,
    CONNECTORS,
    CRITICAL_VERBS,
    DB_WORDS,
    PARTICLES,
    PLURALS,
    READ_NOUNS,
    READ_VERBS,
    SAFE_WORDS,
    VOCABULARY,
    WRITE_VERBS,
)

__all__ = [
    "AMBIGUOUS_WORDS",
    "BUILTIN_SERVER",
    "BUILTIN_TOOLS",
    "CODE_WORDS",
    "CONNECTORS",
    "CRITICAL_VERBS",
    "DB_WORDS",
    "PARTICLES",
    "PLURALS",
    "READ_NOUNS",
    "READ_VERBS",
    "SAFE_WORDS",
    "VOCABULARY",
    "WRITE_VERBS",
    "Hints",
    "Policy",
    "PolicyFile",
    "ServerPolicy",
    "ToolPolicy",
    "at_least",
    "hints_from",
    "load_policy",
    "policy_path",
    "verb_risk",
    "words_of",
]
