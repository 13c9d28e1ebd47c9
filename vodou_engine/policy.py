"""Tool risk: ``read``, ``write`` or ``critical``, and where each verdict came from.

Order of authority (docs/policy.md):

1. the person's policy file (per-tool ``risk``; it may lower as well as raise);
2. for a server the policy marks ``trusted``, the server's MCP annotations;
3. the verb in the tool's name (``list`` is read, ``post`` write, ``delete``
   critical; the strongest verb in the name wins);
4. a name with no known verb is ``write``: unknown means gated.

An untrusted server's annotations can only raise the verdict of 3-4, never
lower it: a server saying "read-only" about ``post_message`` is ignored, one
saying "destructive" about ``get_thing`` is believed. An unset hint is no
evidence either way (the verb rule already fails closed).
"""

from __future__ import annotations

import hashlib
import os
import re
from functools import lru_cache
from pathlib import Path
from typing import Any

import msgspec

from .errors import PolicyError
from .plan import RISK_ORDER, Risk

READ_VERBS = frozenset(
    "list get search read find fetch query show describe view preview check count lookup status diff log "
    "whoami convert current inspect peek browse summarize explain validate resolve".split()
)
WRITE_VERBS = frozenset(
    "send post create update write reply invite archive schedule cancel add set edit modify move rename commit "
    "push merge insert upload publish append patch put save submit assign apply checkout init tag label "
    "mark star pin share forward copy import export run execute start stop restart deploy book reserve".split()
)
CRITICAL_VERBS = frozenset(
    "delete remove pay transfer refund charge drop reset destroy purge wipe revoke terminate kill truncate "
    "erase withdraw purchase buy overwrite force".split()
)

BUILTIN_SERVER = "vodou"
BUILTIN_TOOLS = frozenset({"sleep", "noop", "echo"})
"""In-process tools (runtime/builtin.py); all read-only by construction."""

_WORD = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])|[0-9]+")


def verbs_in(tool: str) -> list[str]:
    return [w.lower() for w in _WORD.findall(tool)]


@lru_cache(maxsize=4096)
def verb_risk(tool: str) -> tuple[Risk, str]:
    """Risk from the words of a tool's name; the strongest verb wins.

    Cached: a recipe calls the same few tools over and over, and the verdict
    depends on the name alone (a policy file or hints are applied on top).
    """
    best: tuple[Risk, str] | None = None
    for word in verbs_in(tool):
        if word in CRITICAL_VERBS:
            return "critical", f"verb '{word}'"
        if word in WRITE_VERBS and (best is None or best[0] == "read"):
            best = ("write", f"verb '{word}'")
        elif word in READ_VERBS and best is None:
            best = ("read", f"verb '{word}'")
    return best or ("write", "no known verb: write (fail closed)")


class ToolPolicy(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True):
    risk: Risk | None = None
    allow_without_asking: bool = False


class ServerPolicy(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True):
    trusted: bool = False


class PolicyFile(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True):
    servers: dict[str, ServerPolicy] = {}
    tools: dict[str, ToolPolicy] = {}


class Hints(msgspec.Struct, frozen=True):
    """MCP tool annotations as the server gave them (None: not set)."""

    read_only: bool | None = None
    destructive: bool | None = None


class Policy:
    """A loaded policy file (or none), able to judge any tool."""

    def __init__(self, data: PolicyFile | None = None, source: str | None = None, digest: str = ""):
        self.data = data or PolicyFile()
        self.source = source
        self.digest = digest

    def trusted(self, server: str) -> bool:
        s = self.data.servers.get(server)
        return bool(s and s.trusted)

    def tool(self, server: str, tool: str) -> ToolPolicy | None:
        return self.data.tools.get(f"{server}.{tool}")

    def allows_without_asking(self, server: str, tool: str) -> bool:
        t = self.tool(server, tool)
        return bool(t and t.allow_without_asking)

    def assess(self, server: str, tool: str, hints: Hints | None = None) -> tuple[Risk, str]:
        if server == BUILTIN_SERVER and tool in BUILTIN_TOOLS:
            return "read", "built-in, read-only"
        t = self.tool(server, tool)
        if t is not None and t.risk is not None:
            return t.risk, f"policy file ({self.source})" if self.source else "policy file"
        if hints is not None and self.trusted(server):
            if hints.destructive and hints.read_only is not True:
                return "critical", "destructiveHint (trusted server)"
            if hints.read_only is True:
                return "read", "readOnlyHint (trusted server)"
            if hints.read_only is False and (hints.destructive is False or verb_risk(tool)[0] != "critical"):
                return "write", "readOnlyHint=false (trusted server)"
        risk, source = verb_risk(tool)
        if hints is not None:
            if hints.destructive is True and hints.read_only is not True and risk != "critical":
                return "critical", "destructiveHint raised it"
            if hints.read_only is False and risk == "read":
                return "write", "readOnlyHint=false raised it"
        return risk, source

    def floor(self, server: str, tool: str) -> Risk:
        """The lowest risk a plan may claim for this tool under this policy."""
        if server == BUILTIN_SERVER and tool in BUILTIN_TOOLS:
            return "read"
        t = self.tool(server, tool)
        if t is not None and t.risk is not None:
            return t.risk
        if self.trusted(server):
            return "read"
        return verb_risk(tool)[0]


def at_least(a: Risk, b: Risk) -> bool:
    return RISK_ORDER[a] >= RISK_ORDER[b]


def policy_path(explicit: str | None = None, *, cwd: str | None = None, environ: dict[str, str] | None = None) -> str | None:
    """Where the policy comes from: --policy, VODOU_POLICY, ./vodou-policy.toml, user config."""
    env = os.environ if environ is None else environ
    if explicit:
        return explicit
    if env.get("VODOU_POLICY"):
        return env["VODOU_POLICY"]
    local = Path(cwd or os.getcwd()) / "vodou-policy.toml"
    if local.is_file():
        return str(local)
    xdg = env.get("XDG_CONFIG_HOME", "")
    base = xdg if os.path.isabs(xdg) else os.path.join(env.get("HOME") or os.path.expanduser("~"), ".config")
    user = Path(base) / "vodou" / "policy.toml"
    if user.is_file():
        return str(user)
    return None


def load_policy(explicit: str | None = None, *, cwd: str | None = None, environ: dict[str, str] | None = None) -> Policy:
    path = policy_path(explicit, cwd=cwd, environ=environ)
    if path is None:
        return Policy()
    try:
        raw = Path(path).read_bytes()
    except OSError as exc:
        raise PolicyError(
            f"cannot read the policy file {path}: {exc.strerror}",
            hint="check the path given with --policy or VODOU_POLICY",
        ) from None
    try:
        data = msgspec.toml.decode(raw, type=PolicyFile)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise PolicyError(
            f"{path}: not a valid policy file: {exc}",
            hint='see docs/policy.md; e.g. [tools."slack.slack_post_message"] risk = "write"',
        ) from None
    return Policy(data, path, hashlib.sha256(raw).hexdigest())


def hints_from(annotations: Any) -> Hints | None:
    """Turn whatever the hub reports (an object with read_only/destructive) into Hints."""
    if annotations is None:
        return None
    ro = getattr(annotations, "read_only", None)
    de = getattr(annotations, "destructive", None)
    if ro is None and de is None:
        return None
    return Hints(ro, de)
