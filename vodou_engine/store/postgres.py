"""The run store on PostgreSQL (psycopg 3), for several machines sharing one store.

The statements are the shared ones (``base.py`` and its mixins); this dialect supplies what
PostgreSQL does differently: ``%s`` placeholders, row locks (``SELECT ... FOR
UPDATE``) where a read precedes the write it decides, an advisory lock where
there is no row to lock yet (the next version of a saved recipe, a migration),
identity columns, and how its errors read. Every state change is still one
compare-and-set whose row count says who won, so the database decides every
race (twenty approvals at once: one effect), as on SQLite.

The connection is in autocommit mode and transactions are explicit
(``BEGIN`` ... ``COMMIT``), at PostgreSQL's default isolation (read committed):
an ``UPDATE ... WHERE state IN (...)`` re-checks its condition on the row it
waited for, which is what a compare-and-set needs.

``location`` is a libpq URL (``postgresql://user@host:5432/db``); a schema
other than the default can be chosen with libpq's own
``options=-csearch_path%3Dname`` (the tests give each test a schema that way).
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar
from urllib.parse import urlsplit, urlunsplit

from ..errors import StoreError, StoreMissingError, VodouError
from .base import Dialect, SqlRunStore
from .dialect import Connection, Cursor, _required_row

MIGRATION_LOCK = 0x766F646F  # "vodo": one key for every store's migrations on a server


def _psycopg() -> Any:
    try:
        import psycopg
    except ImportError:
        raise StoreError(
            "a PostgreSQL store needs psycopg, which is not installed",
            hint="install vodou_engine[postgres] (psycopg 3), or use a file path for a SQLite store",
        ) from None
    return psycopg


class PostgresDialect(Dialect):
    name = "postgresql"
    placeholder = "%s"
    begin_write = "BEGIN"
    begin_relaxed = "BEGIN; SET LOCAL synchronous_commit = off"
    for_update = " FOR UPDATE"
    tokens: ClassVar[Mapping[str, str]] = {
        "serial_pk": "BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY",
        "blob": "BYTEA",
    }
    tables_sql = "SELECT tablename FROM pg_tables WHERE schemaname = current_schema()"

    def __init__(self) -> None:
        super().__init__()
        psycopg = _psycopg()
        self.Error = psycopg.Error
        self.IntegrityError = psycopg.IntegrityError
        self._errors = psycopg.errors

    def integrity_kind(self, exc: Exception) -> str:
        if isinstance(exc, self._errors.ForeignKeyViolation):
            return "foreign_key"
        if isinstance(exc, self._errors.UniqueViolation):
            return "unique"
        return "other"

    def store_error(self, exc: Exception, location: str) -> VodouError | None:
        e = self._errors
        if isinstance(exc, (e.OperationalError, e.InterfaceError)) and not isinstance(exc, e.QueryCanceled):
            return StoreError(
                f"the store at {_safe(location)} cannot be reached: {_first_line(exc)}",
                hint="check that PostgreSQL is running and the URL (VODOU_STORE or --store) is right",
            )
        if isinstance(exc, e.InsufficientPrivilege):
            return StoreError(
                f"cannot use the store at {_safe(location)}: {_first_line(exc)}",
                hint="the database user needs to read and write the store's tables",
            )
        if isinstance(exc, (e.LockNotAvailable, e.QueryCanceled)):
            return StoreError(
                f"the store at {_safe(location)} stayed locked by another process: {_first_line(exc)}",
                hint="retry; if it keeps happening, look for a stuck recipe process",
            )
        return None

    def insert_returning(self, cur: Cursor, sql: str, params: Sequence[Any], column: str) -> int:
        cur.execute(f"{sql} RETURNING {column}", params)
        value: int = _required_row(cur.fetchone())[0]
        return value

    def compact(self, conn: Connection) -> None:
        conn.execute("VACUUM")

    def lock(self, cur: Cursor, key: str) -> None:
        cur.execute("SELECT pg_advisory_xact_lock(%s)", (zlib.crc32(key.encode()),))

    def migration_lock(self, cur: Cursor) -> None:
        cur.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK,))


def _first_line(exc: Exception) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


def _safe(location: str) -> str:
    """The URL without a password, for messages."""
    try:
        parts = urlsplit(location)
    except ValueError:
        return "the PostgreSQL store"
    if parts.password is None:
        return location
    netloc = f"{parts.username}:***@{parts.hostname}" + (f":{parts.port}" if parts.port else "")
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


class PostgresRunStore(SqlRunStore):
    """A run store in a PostgreSQL database, shared by many processes and machines."""

    def __init__(self, url: str, *, readonly: bool = False, create: bool = True):
        psycopg = _psycopg()
        dialect = PostgresDialect()
        try:
            conn = psycopg.connect(url, autocommit=True, connect_timeout=10)
        except psycopg.OperationalError as exc:
            text = str(exc)
            if "does not exist" in text and "database" in text:
                raise StoreMissingError(
                    f"there is no database for the store at {_safe(url)}; nothing was created",
                    hint="create the database first (createdb NAME), or check VODOU_STORE / --store",
                    path=_safe(url),
                ) from None
            raise StoreError(
                f"the store at {_safe(url)} cannot be reached: {_first_line(exc)}",
                hint="check that PostgreSQL is running and the URL (VODOU_STORE or --store) is right",
            ) from None
        super().__init__(conn, dialect, _safe(url))
        try:
            found = self.schema_version()
            if found == 0 and conn.execute("SELECT current_schema()").fetchone()[0] is None:
                # the URL's search_path names no schema that exists: nowhere to create the tables
                raise StoreMissingError(
                    f"there is no schema for the store at {_safe(url)} (its search_path names none that exists); nothing was created",
                    hint="create the schema first (CREATE SCHEMA name), or check the URL's options=-csearch_path=... (VODOU_STORE or --store)",
                    path=_safe(url),
                )
            if found == 0 and (readonly or not create):
                raise StoreMissingError(
                    f"there is no run store in {_safe(url)}; nothing was created",
                    hint="a store is created by the first run",
                    path=_safe(url),
                )
            if readonly and found != 0:
                conn.execute("SET default_transaction_read_only = on")
            self._prepare_schema()
        except BaseException:
            self.close()
            raise
