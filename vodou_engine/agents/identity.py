"""Who an agent is over HTTP: bearer tokens for the MCP server ``recipe serve`` mounts at /mcp.

Light on purpose (the standard library, the error tree and the store): the
CLI imports it for ``recipe agent add | list | remove``.

* ``recipe agent add NAME`` makes a random token (256 bits, prefixed
  ``vodou_agent_``), prints it once and stores only its sha256, with whose
  runs the agent may read and who decides its recipes' runs. Adding the same
  name again gives it a new token; the old one stops working.
* Every request to /mcp carries ``Authorization: Bearer TOKEN``; the token's
  sha256 is looked up in the store on every request, so a removed agent (or a
  replaced token) is refused at its next request.
* The agent's runs are started by ``agent:NAME``. Its token is kept in the
  store's ``agents`` table, never in ``approvers``: it is not an approver's
  secret (``--as``), not a sign-in link and not a session, so it can never
  decide anything.
"""

from __future__ import annotations

import hashlib
import json
import re
import secrets
from typing import TYPE_CHECKING, Any

from ..errors import UsageError
from .approvers import PERSON

if TYPE_CHECKING:
    from ..store.protocol import RunStore
    from ..store.records import AgentRecord

TOKEN_PREFIX = "vodou_agent_"
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.@+-]{0,63}")
"""An agent's name: what follows ``agent:`` in the runs it starts."""
IDENTITY_PREFIX = "agent:"


def sha256(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def _store_of(runs_or_store: Any, **opening: bool) -> RunStore:
    """The store of a :class:`~vodou_engine.runs.Runs` (opened with ``opening``), or the store given."""
    opener = getattr(runs_or_store, "store", None)
    store: RunStore = opener(**opening) if callable(opener) else runs_or_store
    return store


def check_name(name: str) -> str:
    if not NAME.fullmatch(name or ""):
        raise UsageError(
            f"{name!r} is not a usable agent name; nothing was changed",
            hint="letters, digits and _ . @ + -, starting with a letter or digit, at most 64",
            name=name,
        )
    return name


def add_agent(runs_or_store: Any, name: str, *, by: str, sees: str = "own", approvers: list[str] | None = None) -> str:
    """What ``recipe agent add NAME`` does: the agent's bearer token (shown once; only its
    sha256 is kept). Adding a name again gives it a new token and revokes the old one."""
    check_name(name)
    if sees not in ("own", "all"):
        raise UsageError(
            f"whose runs an agent may read is `own` or `all`, not {sees!r}; nothing was changed", sees=sees
        )
    bad = [a for a in approvers or [] if not PERSON.fullmatch(a) or a.startswith(IDENTITY_PREFIX)]
    if bad:
        raise UsageError(
            f"{', '.join(map(repr, bad))} is not a usable approver name; nothing was changed",
            hint="a person's name: letters, digits and _ . @ + -",
        )
    token = TOKEN_PREFIX + secrets.token_urlsafe(32)
    _store_of(runs_or_store).set_agent(name, sha256(token), by=by, sees=sees, approvers=list(approvers or []))
    return token


def remove_agent(runs_or_store: Any, name: str, *, by: str) -> bool:
    return _store_of(runs_or_store, create=False).remove_agent(name, by=by)


def agents(runs_or_store: Any) -> list[AgentRecord]:
    """Every agent (``AgentRecord``: name, sees, approvers; the token's hash, never the token)."""
    return _store_of(runs_or_store, create=False, readonly=True).agents_list()


def bearer(header: str | None) -> str | None:
    """The token of an ``Authorization: Bearer TOKEN`` header, else None."""
    if not header:
        return None
    scheme, _, token = header.strip().partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token or len(token) > 512 or any(c.isspace() for c in token):
        return None
    return token


def identity(record: AgentRecord) -> str:
    """``agent:NAME``: who the runs an agent starts are started by."""
    return IDENTITY_PREFIX + record.name


def approvers_of(record: Any) -> list[str]:
    try:
        found = json.loads(record.approvers_json or "[]")
    except ValueError:
        return []
    return [a for a in found if isinstance(a, str)]
