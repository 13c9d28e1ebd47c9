"""What the person who runs the agent MCP server configured, and who the calling agent is.

``recipe mcp`` builds an :class:`AgentConfig` from its flags and the environment
(``VODOU_AGENT_NAME``, ``VODOU_AGENT_SEES``, ``VODOU_AGENT_APPROVERS``);
``recipe serve`` builds one for its ``/mcp`` route and gives each agent its own
``see`` and approvers from the store (``web/agents.py``).

The CLI loads this module with ``recipe mcp``'s flags, for every command: it
imports nothing the CLI has not loaded already but ``osuser.py`` (``pwd``).
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
from typing import Any

from ..errors import UsageError
from ..osuser import os_user

NAME_ENV = "VODOU_AGENT_NAME"
SEES_ENV = "VODOU_AGENT_SEES"
APPROVERS_ENV = "VODOU_AGENT_APPROVERS"
CATALOGUE_TTL_S = 300.0
"""How long a listed tool catalogue is reused by list_tools, check_recipe and draft_recipe
(start_run always resolves against the live servers afresh)."""

START_WAIT_S = 20.0
"""How long start_run waits for a run to park or end before it returns it as ``running``
(an MCP client gives up on a call that takes too long; the run goes on)."""


class AgentConfig:
    """What the person who runs ``recipe mcp`` configured."""

    def __init__(
        self,
        *,
        store: str | None = None,
        servers: str | None = None,
        policy: str | None = None,
        name: str | None = None,
        see: str = "own",
        approvers: list[str] | None = None,
        model: str | None = None,
        catalogue_ttl: float = CATALOGUE_TTL_S,
        start_wait_s: float = START_WAIT_S,
    ):
        self.store = store
        self.servers = servers
        self.policy = policy
        self.name = name
        self.see = see
        self.approvers = approvers
        self.model = model
        self.catalogue_ttl = catalogue_ttl
        self.start_wait_s = start_wait_s

    @classmethod
    def from_args(cls, args: argparse.Namespace, environ: Any = None) -> AgentConfig:
        env = os.environ if environ is None else environ
        see = getattr(args, "see", None) or env.get(SEES_ENV, "").strip() or "own"
        if see not in ("own", "all"):
            raise UsageError(
                f"{SEES_ENV}={see!r}: whose runs an agent may read is `own` or `all`",
                hint=f"unset {SEES_ENV} for the default (own)",
            )
        approvers = list(getattr(args, "approver", None) or []) or [
            a.strip() for a in env.get(APPROVERS_ENV, "").split(",") if a.strip()
        ]
        name = getattr(args, "name", None) or env.get(NAME_ENV, "").strip() or None
        return cls(
            store=getattr(args, "store", None),
            servers=getattr(args, "servers", None),
            policy=getattr(args, "policy", None),
            name=name,
            see=see,
            approvers=approvers or None,
            model=getattr(args, "model", None),
        )

    def people(self) -> list[str]:
        """Who decides the runs of an agent's recipe that names no approvers."""
        if self.approvers:
            return list(self.approvers)
        return [os_user()]

    def store_flag(self) -> str:
        """``--store PATH`` for the commands a person types, when the store is not the default."""
        location = self.store or os.environ.get("VODOU_STORE")
        return (
            f" --store {shlex.quote(os.path.abspath(location) if '://' not in location else location)}"
            if location
            else ""
        )


def agent_identity(config: AgentConfig, client_name: str | None) -> str:
    """``agent:NAME``: the configured name, else the client's own name from ``initialize``."""
    raw = config.name or client_name or "unnamed"
    clean = re.sub(r"[^A-Za-z0-9_.@+-]+", "-", raw).strip("-")[:64] or "unnamed"
    return f"agent:{clean}"
