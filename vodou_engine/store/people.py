"""Who may act, and the log of what they did: approvers, agents, sign-in, the audit log.

Approvers are the people who may decide, each known by the sha256 of a secret;
agents are the bearer tokens of ``/mcp``, kept apart from them. The web inbox
signs people in with one-time links that become sessions, valid only while
their approver exists unchanged. The audit log is the store-wide record of
attempts, whether or not a run exists.
"""

from __future__ import annotations

import secrets
from typing import Any

import msgspec

from ..errors import RefusedError
from .core import INSERT_AUDIT, StoreCore
from .dialect import _cols, _json, _now, _required_row, _values, iso
from .records import AgentRecord, ApproverRecord, AuditRecord, WebLinkRecord, WebSessionRecord

_APPROVER_COLS = _cols(ApproverRecord)
_AUDIT_COLS = _cols(AuditRecord)

INSERT_APPROVER = f"INSERT INTO approvers ({_APPROVER_COLS}) VALUES {_values(ApproverRecord)}"
UPDATE_APPROVER = "UPDATE approvers SET token_sha256 = ?, created_at = ?, created_by = ? WHERE name = ?"
INSERT_APPROVER_IF_MISSING = INSERT_APPROVER + " ON CONFLICT (name) DO NOTHING"
UPSERT_APPROVER = INSERT_APPROVER + (
    " ON CONFLICT (name) DO UPDATE SET token_sha256 = excluded.token_sha256,"
    " created_at = excluded.created_at, created_by = excluded.created_by"
)
SELECT_APPROVER = f"SELECT {_APPROVER_COLS} FROM approvers WHERE name = ?"
SELECT_APPROVERS = f"SELECT {_APPROVER_COLS} FROM approvers ORDER BY name"
DELETE_APPROVER = "DELETE FROM approvers WHERE name = ?"
SELECT_AUDIT = f"SELECT {_AUDIT_COLS} FROM audit WHERE seq > ? ORDER BY seq"


class PeopleMixin(StoreCore):
    """Approvers, agents, sign-in links and sessions, and the audit log."""

    # -- identity and the store-wide audit log ------------------------------

    def set_approver(self, name: str, token_sha256: str, *, by: str, now: float | None = None) -> None:
        """Add a person who may act under ``name``, or give them a new secret (the old one stops working)."""
        now = _now(now)
        with self._write() as cur:  # one statement: two processes adding the same name both succeed
            cur.execute(self._q(UPSERT_APPROVER), (name, token_sha256, now, by))
            cur.execute(self._q(INSERT_AUDIT), (now, "approver.set", by, None, _json({"name": name})))

    def add_approver_if_missing(self, name: str, token_sha256: str, *, by: str, now: float | None = None) -> bool:
        """Add ``name`` unless it is an approver already (whose secret then stays as it is);
        True when this call added it. Atomic: of processes adding one name at once, one does."""
        now = _now(now)
        with self._write() as cur:
            cur.execute(self._q(INSERT_APPROVER_IF_MISSING), (name, token_sha256, now, by))
            added = cur.rowcount == 1
            if added:
                cur.execute(self._q(INSERT_AUDIT), (now, "approver.set", by, None, _json({"name": name})))
        return added

    def get_approver(self, name: str) -> ApproverRecord | None:
        row = self._one(SELECT_APPROVER, (name,))
        return None if row is None else ApproverRecord(*row)

    def approvers_list(self) -> list[ApproverRecord]:
        return [ApproverRecord(*r) for r in self._all(SELECT_APPROVERS, ())]

    def remove_approver(self, name: str, *, by: str, now: float | None = None) -> bool:
        now = _now(now)
        with self._write() as cur:
            cur.execute(self._q(DELETE_APPROVER), (name,))
            gone = cur.rowcount == 1
            if gone:
                cur.execute(self._q(INSERT_AUDIT), (now, "approver.removed", by, None, _json({"name": name})))
        return gone

    def audit(
        self,
        kind: str,
        *,
        actor: str | None,
        run_id: str | None = None,
        data: dict[str, Any] | None = None,
        now: float | None = None,
    ) -> None:
        """Record an attempt in the store-wide log (no run needed: the run may not exist)."""
        with self._write() as cur:
            cur.execute(self._q(INSERT_AUDIT), (_now(now), kind, actor, run_id, _json(data or {})))

    def audit_log(self, *, after: int = 0) -> list[AuditRecord]:
        return [AuditRecord(*r) for r in self._all(SELECT_AUDIT, (after,))]

    # -- sign-in to the web inbox (`recipe serve`, vodou_engine/web/) -------
    # Everything below is used by web/ only: the key cookies are signed with,
    # one-time sign-in links and sessions (the inbox's reads are in approvals.py). Schema
    # version 4 (migrations/0004_web_sign_in_sessions.sql). A link or a session
    # is good only while its approver exists and was not given a new secret
    # after it was made (`recipe approver add` again revokes them all).

    _WEB_KEY = "SELECT secret FROM web_keys WHERE name = ?"
    _WEB_KEY_ADD = "INSERT INTO web_keys (name, secret, created_at) VALUES (?, ?, ?) ON CONFLICT (name) DO NOTHING"
    _WEB_LINK_COLS = _cols(WebLinkRecord)
    _WEB_SESSION_COLS = _cols(WebSessionRecord)
    _WEB_LINK_ADD = f"INSERT INTO web_links ({_WEB_LINK_COLS}) VALUES {_values(WebLinkRecord)}"
    _WEB_LINK = f"SELECT {_WEB_LINK_COLS} FROM web_links WHERE token_sha256 = ?"
    _WEB_LINK_USE = "UPDATE web_links SET used_at = ? WHERE token_sha256 = ? AND used_at IS NULL AND expires_at > ?"
    _WEB_SESSION_ADD = f"INSERT INTO web_sessions ({_WEB_SESSION_COLS}) VALUES {_values(WebSessionRecord)}"
    _WEB_SESSION = (
        f"SELECT {_cols(WebSessionRecord, 's.')} FROM web_sessions s JOIN approvers a ON a.name = s.name "
        "WHERE s.id_sha256 = ? AND s.ended_at IS NULL AND s.expires_at > ? AND a.created_at <= s.created_at"
    )
    _WEB_SESSION_END = "UPDATE web_sessions SET ended_at = ? WHERE id_sha256 = ? AND ended_at IS NULL"

    def web_key(self, name: str = "session", *, now: float | None = None) -> str:
        """The store's signing key called ``name`` (hex), made on first use."""
        row = self._one(self._WEB_KEY, (name,))
        if row is not None:
            secret: str = row[0]
            return secret
        with self._write() as cur:
            cur.execute(self._q(self._WEB_KEY_ADD), (name, secrets.token_hex(32), _now(now)))
            cur.execute(self._q(self._WEB_KEY), (name,))
            secret = _required_row(cur.fetchone())[0]
            return secret

    def add_web_link(
        self, token_sha256: str, name: str, *, by: str, expires_at: float, now: float | None = None
    ) -> WebLinkRecord:
        """Record a one-time sign-in link for the approver ``name`` (who must exist)."""
        now = _now(now)
        rec = WebLinkRecord(token_sha256, name, now, by, expires_at)
        with self._write() as cur:
            cur.execute(self._q(SELECT_APPROVER), (name,))
            if cur.fetchone() is None:
                raise RefusedError(
                    f"there is no approver {name!r} in the store at {self.location}; no link was made",
                    hint="add the approver first",
                    approver=name,
                )
            cur.execute(self._q(self._WEB_LINK_ADD), msgspec.structs.astuple(rec))
            cur.execute(
                self._q(INSERT_AUDIT),
                (now, "web.link_issued", by, None, _json({"name": name, "expires_at": expires_at})),
            )
        return rec

    def get_web_link(self, token_sha256: str) -> WebLinkRecord | None:
        row = self._one(self._WEB_LINK, (token_sha256,))
        return None if row is None else WebLinkRecord(*row)

    def web_link_usable(self, link: WebLinkRecord, *, now: float | None = None) -> str | None:
        """None if ``link`` can sign in now, else why not (in words)."""
        now = _now(now)
        if link.used_at is not None:
            return f"this sign-in link was already used, at {iso(link.used_at)}"
        if link.expires_at <= now:
            return f"this sign-in link expired at {iso(link.expires_at)}"
        approver = self.get_approver(link.name)
        if approver is None or approver.created_at > link.created_at:
            return f"{link.name} was removed or given a new secret after this link was made"
        return None

    def use_web_link(
        self,
        token_sha256: str,
        session_sha256: str,
        *,
        session_expires_at: float,
        user_agent: str | None = None,
        now: float | None = None,
    ) -> tuple[WebSessionRecord | None, str | None]:
        """Spend a sign-in link on a new session, once: (session, None) for the one caller
        that wins, (None, why) for everyone else. Either way the audit log has it."""
        now = _now(now)
        with self._write() as cur:
            cur.execute(self._q(self._WEB_LINK), (token_sha256,))
            row = cur.fetchone()
            link = None if row is None else WebLinkRecord(*row)
            why = "no such sign-in link" if link is None else self.web_link_usable(link, now=now)
            if link is not None and why is None:
                cur.execute(self._q(self._WEB_LINK_USE), (now, token_sha256, now))
                if cur.rowcount != 1:  # only reachable if the engine let another writer in between
                    why = "this sign-in link was used just now"
            if link is None or why is not None:
                data = {"why": why, "link": token_sha256[:12]}
                cur.execute(
                    self._q(INSERT_AUDIT), (now, "web.sign_in_refused", link.name if link else None, None, _json(data))
                )
                return None, why
            session = WebSessionRecord(
                session_sha256, link.name, now, session_expires_at, None, token_sha256, (user_agent or "")[:200] or None
            )
            cur.execute(self._q(self._WEB_SESSION_ADD), msgspec.structs.astuple(session))
            cur.execute(
                self._q(INSERT_AUDIT),
                (
                    now,
                    "web.signed_in",
                    link.name,
                    None,
                    _json({"link": token_sha256[:12], "expires_at": session_expires_at}),
                ),
            )
        return session, None

    def get_web_session(self, session_sha256: str, *, now: float | None = None) -> WebSessionRecord | None:
        """The live session with this id hash: not ended, not expired, its approver still there."""
        row = self._one(self._WEB_SESSION, (session_sha256, _now(now)))
        return None if row is None else WebSessionRecord(*row)

    def end_web_session(self, session_sha256: str, *, by: str | None, now: float | None = None) -> bool:
        now = _now(now)
        with self._write() as cur:
            cur.execute(self._q(self._WEB_SESSION_END), (now, session_sha256))
            ended = cur.rowcount == 1
            if ended:
                cur.execute(self._q(INSERT_AUDIT), (now, "web.signed_out", by, None, "{}"))
        return ended

    # -- agents over HTTP (`recipe agent add`, the /mcp route of `recipe serve`) --
    # Schema version 5 (migrations/0005_agent_tokens.sql). Only the sha256 of an
    # agent's bearer token is kept, in a table apart from the approvers': an
    # agent's token is never an approver's secret. Removing an agent stops its
    # token at once (every request looks it up).

    _AGENT_COLS = _cols(AgentRecord)
    _AGENT_ADD = f"INSERT INTO agents ({_AGENT_COLS}) VALUES {_values(AgentRecord)}"
    _AGENT_SET = "UPDATE agents SET token_sha256 = ?, sees = ?, approvers_json = ?, created_at = ?, created_by = ? WHERE name = ?"
    _AGENT = f"SELECT {_AGENT_COLS} FROM agents WHERE name = ?"
    _AGENT_BY_TOKEN = f"SELECT {_AGENT_COLS} FROM agents WHERE token_sha256 = ?"
    _AGENTS = f"SELECT {_AGENT_COLS} FROM agents ORDER BY name"
    _AGENT_REMOVE = "DELETE FROM agents WHERE name = ?"

    def set_agent(
        self,
        name: str,
        token_sha256: str,
        *,
        by: str,
        sees: str = "own",
        approvers: list[str] | None = None,
        now: float | None = None,
    ) -> AgentRecord:
        """Add the agent ``name``, or give it a new token (the old one stops working)."""
        now = _now(now)
        rec = AgentRecord(name, token_sha256, sees, msgspec.json.encode(list(approvers or [])).decode("utf-8"), now, by)
        with self._write() as cur:
            cur.execute(self._q(self._AGENT_SET), (token_sha256, sees, rec.approvers_json, now, by, name))
            if cur.rowcount == 0:
                cur.execute(self._q(self._AGENT_ADD), msgspec.structs.astuple(rec))
            cur.execute(
                self._q(INSERT_AUDIT),
                (now, "agent.set", by, None, _json({"name": name, "sees": sees, "approvers": approvers or []})),
            )
        return rec

    def get_agent(self, name: str) -> AgentRecord | None:
        row = self._one(self._AGENT, (name,))
        return None if row is None else AgentRecord(*row)

    def agent_by_token(self, token_sha256: str) -> AgentRecord | None:
        """The agent whose token has this sha256, if it is still there."""
        row = self._one(self._AGENT_BY_TOKEN, (token_sha256,))
        return None if row is None else AgentRecord(*row)

    def agents_list(self) -> list[AgentRecord]:
        return [AgentRecord(*r) for r in self._all(self._AGENTS, ())]

    def remove_agent(self, name: str, *, by: str, now: float | None = None) -> bool:
        now = _now(now)
        with self._write() as cur:
            cur.execute(self._q(self._AGENT_REMOVE), (name,))
            gone = cur.rowcount == 1
            if gone:
                cur.execute(self._q(INSERT_AUDIT), (now, "agent.removed", by, None, _json({"name": name})))
        return gone
