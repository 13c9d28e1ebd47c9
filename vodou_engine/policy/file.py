"""The tool policy file: where it is found, what it may say, and the Policy that judges every tool.

1. The person's policy file decides first: a tool's ``risk`` there may lower a
   verdict as well as raise it, and ``allow_without_asking`` lets a step skip its
   approval (docs/policy.md). Then, for a server the file marks ``trusted``, the
   server's annotations (annotations.py); then the name rule (names.py), which an
   untrusted server's annotations may only raise.

The file is TOML, decoded into the Structs below; an unknown field or a bad value
is refused, so a typo in a safety setting never silently means "no setting". Its
sha256 is the policy's digest: it is part of every approval's fingerprint, and a
run remembers it, so a yes given under one policy is never spent under another.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import msgspec

from ..errors import PolicyError
from ..limits import read_regular_file
from ..plan import RISK_ORDER, Risk
from .annotations import Hints, raised, trusted_verdict
from .names import verb_risk


class ToolPolicy(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True):
    risk: Risk | None = None
    allow_without_asking: bool = False


class ServerPolicy(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True):
    trusted: bool = False


class PolicyFile(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True):
    servers: dict[str, ServerPolicy] = {}
    tools: dict[str, ToolPolicy] = {}


BUILTIN_SERVER = "vodou"
BUILTIN_TOOLS = frozenset({"sleep", "noop", "echo"})
"""In-process tools (runtime/builtin.py); all read-only by construction."""


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
            verdict = trusted_verdict(hints, tool)
            if verdict is not None:
                return verdict
        risk, source = verb_risk(tool)
        return raised(risk, source, hints)

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


def policy_path(
    explicit: str | None = None, *, cwd: str | None = None, environ: dict[str, str] | None = None
) -> str | None:
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


_INVALID_HINT = 'see docs/policy.md; e.g. [tools."slack.slack_post_message"] risk = "write"'


def load_policy(
    explicit: str | None = None, *, cwd: str | None = None, environ: dict[str, str] | None = None
) -> Policy:
    path = policy_path(explicit, cwd=cwd, environ=environ)
    if path is None:
        return Policy()
    try:
        raw = read_regular_file(path)  # a FIFO or device is refused, not waited on; at most 16 MiB
    except OSError as exc:
        raise PolicyError(
            f"cannot read the policy file {path}: {exc.strerror or exc}",
            hint="check the path given with --policy or VODOU_POLICY",
        ) from None
    try:
        data = msgspec.toml.decode(raw, type=PolicyFile)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise PolicyError(f"{path}: not a valid policy file: {exc}", hint=_INVALID_HINT) from None
    except RecursionError:
        raise PolicyError(f"{path}: not a valid policy file: a value is nested too deep", hint=_INVALID_HINT) from None
    return Policy(data, path, hashlib.sha256(raw).hexdigest())
