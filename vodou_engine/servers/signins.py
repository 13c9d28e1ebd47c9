"""The sign-in file: the OAuth grants people made for servers reached by URL (``"auth": "oauth"``).

A grant is what a person gave once in a browser (``recipe servers login``, or the
inbox of ``recipe serve``): the client the engine registered with the server's
authorization server, and the tokens it issued. Runs use it, and refresh it, without
asking again.

*Why a file of its own, not the run store:* a grant is a credential of the person
(the operating-system user) the engine runs as, like ``gh``'s or ``gcloud``'s, not a
record of a run. A run store may be shared (a team's PostgreSQL store, the inbox of a
service): it must not hold one person's credentials for all to read, and every command
that reaches a server (``plan``, ``run``, ``approve``, an agent's catalogue) can find
the file without a store. The run store keeps only what the binding keeps: digests.

Where: ``$VODOU_SIGN_INS`` (a path), else ``$XDG_DATA_HOME/vodou/sign-ins.db``, else
``~/.local/share/vodou/sign-ins.db``. A SQLite file, so two processes that refresh the
same grant (a service and a terminal) each read and write it whole, in a transaction.
It is created readable by its owner only (0600, in a directory made 0700); the tokens
in it are the values themselves (they must be sent), and they appear nowhere else:
not in the run store, not in any output, message or log.

A grant is keyed by its server's URL (the resolved one, kept as a digest): two server
files that name the same URL share the sign-in. Each sign-in gets a new random
``grant_id`` that its refreshes keep: the identity of the grant a run's binding covers
(``binding.py``), which a refreshed token does not change and a new sign-in does.

Standard library and msgspec only: ``binding.py`` reads it before trio or the SDK load.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import sqlite3
import time
from collections.abc import Iterator, Mapping

import msgspec

from vodou_engine.errors import ServerConfigError, SignInRequiredError

__all__ = [
    "SIGN_INS_ENV",
    "Grant",
    "SignIns",
    "resource_key",
    "sign_in_command",
    "sign_in_error",
    "sign_ins_path",
]

SIGN_INS_ENV = "VODOU_SIGN_INS"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS grants (
    resource TEXT PRIMARY KEY,
    url TEXT NOT NULL,
    server TEXT NOT NULL,
    issuer TEXT NOT NULL,
    client_id TEXT NOT NULL,
    grant_id TEXT NOT NULL,
    client_json TEXT NOT NULL,
    tokens_json TEXT NOT NULL,
    expires_at REAL,
    scope TEXT,
    signed_in_at REAL NOT NULL,
    refreshed_at REAL
)
"""


class Grant(msgspec.Struct, kw_only=True):
    """One sign-in. ``client_json`` and ``tokens_json`` hold secrets (a client secret, the
    access and refresh tokens): only ``tools/oauth.py`` reads them, to reach the server."""

    resource: str
    """:func:`resource_key` of the server's resolved URL."""
    url: str
    """The URL as written in the server file (``${VAR}`` unexpanded), for people."""
    server: str
    """The server's name when it was signed in, for people."""
    issuer: str
    """The authorization server that issued it."""
    client_id: str
    grant_id: str
    """Random, new at each sign-in, kept by refreshes: what a run's binding covers."""
    client_json: str
    tokens_json: str
    expires_at: float | None = None
    """When the access token expires (epoch seconds; None: the server did not say)."""
    scope: str | None = None
    signed_in_at: float
    refreshed_at: float | None = None


_FIELDS = tuple(Grant.__struct_fields__)


def sign_in_command(name: str) -> str:
    """The command a person runs to sign in for server ``name``."""
    return f"recipe servers login {name}"


_REASONS = {
    "none": "needs a sign-in (OAuth), and none is stored here; nothing was sent to it",
    "expired": "its sign-in expired and cannot be refreshed; nothing was sent to it",
    "refused": "no longer accepts its sign-in (the authorization server refused its tokens); no tool was called",
}


def sign_in_error(name: str, url: str | None, reason: str) -> SignInRequiredError:
    """The error for server ``name`` (reached at ``url``, as written) when it cannot be reached
    without a person signing in: ``reason`` is ``none``, ``expired`` or ``refused``."""
    again = "sign in once" if reason == "none" else "sign in again"
    return SignInRequiredError(
        f"MCP server {name!r} ({url}) {_REASONS[reason]}",
        hint=f"{again}: `{sign_in_command(name)}` (or from the inbox of `recipe serve`), then run again",
        server=name,
        reason=reason,
    )


def resource_key(resolved_url: str) -> str:
    """The key of a server's grant: a digest of its URL as reached (which may carry a ``${VAR}`` value)."""
    return "sha256:" + hashlib.sha256(resolved_url.encode("utf-8", "surrogatepass")).hexdigest()


def sign_ins_path(environ: Mapping[str, str] | None = None) -> str:
    """Where the sign-in file is (see the module docstring)."""
    environ = os.environ if environ is None else environ
    chosen = environ.get(SIGN_INS_ENV)
    if chosen:
        return os.path.abspath(chosen)
    data_home = environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local", "share")
    return os.path.join(data_home, "vodou", "sign-ins.db")


class SignIns:
    """The sign-in file at ``path``. Every method opens it, does one thing in a transaction,
    and closes it: blocking, so call it off the trio thread."""

    def __init__(self, path: str | None = None):
        self.path = path or sign_ins_path()

    @contextlib.contextmanager
    def _connect(self, create: bool) -> Iterator[sqlite3.Connection | None]:
        if not os.path.exists(self.path):
            if not create:
                yield None
                return
            directory = os.path.dirname(self.path)
            os.makedirs(directory, mode=0o700, exist_ok=True)
            # Created by its owner, for its owner only, before SQLite writes a byte into it.
            os.close(os.open(self.path, os.O_WRONLY | os.O_CREAT, 0o600))
        try:
            conn = sqlite3.connect(self.path, timeout=30, isolation_level=None)
        except sqlite3.Error as exc:
            raise ServerConfigError(
                f"the sign-in file {self.path} cannot be opened: {exc}",
                hint=f"check its permissions, or point ${SIGN_INS_ENV} at another file",
            ) from None
        try:
            conn.execute("BEGIN IMMEDIATE")
            conn.execute(_SCHEMA)
            yield conn
            conn.execute("COMMIT")
        except sqlite3.DatabaseError as exc:
            with contextlib.suppress(sqlite3.Error):
                conn.execute("ROLLBACK")
            raise ServerConfigError(
                f"the sign-in file {self.path} is not readable: {exc}",
                hint=f"move it aside and sign in again, or point ${SIGN_INS_ENV} at another file",
            ) from None
        finally:
            conn.close()

    def get(self, resource: str) -> Grant | None:
        with self._connect(create=False) as conn:
            if conn is None:
                return None
            row = conn.execute(f"SELECT {', '.join(_FIELDS)} FROM grants WHERE resource = ?", (resource,)).fetchone()
        return Grant(**dict(zip(_FIELDS, row, strict=True))) if row else None

    def all(self) -> list[Grant]:
        with self._connect(create=False) as conn:
            if conn is None:
                return []
            rows = conn.execute(f"SELECT {', '.join(_FIELDS)} FROM grants ORDER BY server, url").fetchall()
        return [Grant(**dict(zip(_FIELDS, row, strict=True))) for row in rows]

    def put(self, grant: Grant) -> None:
        """Keep a new sign-in (it replaces the one for the same URL, if any)."""
        with self._connect(create=True) as conn:
            assert conn is not None
            conn.execute(
                f"INSERT OR REPLACE INTO grants ({', '.join(_FIELDS)}) VALUES ({', '.join('?' for _ in _FIELDS)})",
                tuple(getattr(grant, f) for f in _FIELDS),
            )

    def refreshed(self, resource: str, grant_id: str, tokens_json: str, expires_at: float | None) -> bool:
        """Keep the tokens a refresh of grant ``grant_id`` gave. False (nothing written) when the
        grant was removed or replaced by a new sign-in meanwhile: that one wins."""
        with self._connect(create=False) as conn:
            if conn is None:
                return False
            cur = conn.execute(
                "UPDATE grants SET tokens_json = ?, expires_at = ?, refreshed_at = ? WHERE resource = ? AND grant_id = ?",
                (tokens_json, expires_at, time.time(), resource, grant_id),
            )
            return cur.rowcount == 1

    def remove(self, resource: str) -> bool:
        with self._connect(create=False) as conn:
            if conn is None:
                return False
            return conn.execute("DELETE FROM grants WHERE resource = ?", (resource,)).rowcount == 1
