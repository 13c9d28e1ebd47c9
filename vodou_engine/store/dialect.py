"""What differs between database engines, and the SQL helpers every part of the store shares.

A :class:`Dialect` supplies the few things SQLite and PostgreSQL do differently
(placeholder style, how a write transaction starts, row locks, identity columns,
how driver errors read); ``sqlite.py`` and ``postgres.py`` subclass it.
:class:`Connection` and :class:`Cursor` are the part of a DB-API 2 driver the
store uses, which ``sqlite3`` and psycopg 3 both provide. The
underscored helpers build the shared statements' column lists and placeholders
and shape values for them; they belong to the store package alone.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, ClassVar, Protocol

import msgspec

from ..errors import VodouError

Row = tuple[Any, ...]
"""A row as both drivers return it; its columns are what the statement selected."""


class Cursor(Protocol):
    """The part of a DB-API 2 cursor the store uses."""

    @property
    def rowcount(self) -> int: ...

    def execute(self, sql: str, params: Sequence[Any] = (), /) -> object: ...

    def executemany(self, sql: str, params: Iterable[Sequence[Any]], /) -> object: ...

    def fetchone(self) -> Row | None: ...

    def fetchall(self) -> list[Row]: ...


class Connection(Protocol):
    """The part of a DB-API 2 connection the store uses (``execute`` without a cursor
    is an extension both drivers have)."""

    def cursor(self) -> Cursor: ...

    def execute(self, sql: str, /) -> object: ...

    def close(self) -> None: ...


class Dialect:
    """What differs between database engines; the rest lives in SqlRunStore."""

    name = "sql"
    placeholder = "?"
    begin_write = "BEGIN"
    begin_relaxed = "BEGIN"
    """Begins a write whose commit need not wait for the disk (``_write(relaxed=True)``); an
    engine whose every commit is already that (SQLite with ``synchronous=NORMAL``) begins
    it as any other."""
    # Appended to a SELECT that precedes an UPDATE of the same row, so a
    # row-locking engine serialises the read with the write.
    for_update = ""
    tokens: ClassVar[Mapping[str, str]] = {}
    tables_sql = ""
    Error: type[Exception] = Exception
    IntegrityError: type[Exception] = Exception

    def __init__(self) -> None:
        self._sql_cache: dict[str, str] = {}

    def q(self, sql: str) -> str:
        try:
            return self._sql_cache[sql]
        except KeyError:
            out = sql if self.placeholder == "?" else sql.replace("?", self.placeholder)
            self._sql_cache[sql] = out
            return out

    def ddl(self, sql: str) -> str:
        def fill(m: re.Match[str]) -> str:
            if m[1] not in self.tokens:
                raise RuntimeError(f"migration uses {{{{{m[1]}}}}}, which the {self.name} dialect does not define")
            return self.tokens[m[1]]

        return re.sub(r"\{\{(\w+)\}\}", fill, sql)

    def integrity_kind(self, exc: Exception) -> str:
        """'foreign_key', 'unique' or 'other'."""
        raise NotImplementedError

    def store_error(self, exc: Exception, location: str) -> VodouError | None:
        """The person-facing error for a driver error, or None for a bug."""
        raise NotImplementedError

    def insert_returning(self, cur: Cursor, sql: str, params: Sequence[Any], column: str) -> int:
        raise NotImplementedError

    def compact(self, conn: Connection) -> None:
        """Return freed space to the file system, outside any transaction."""

    def lock(self, cur: Cursor, key: str) -> None:
        """Inside a write: serialise with every other writer holding ``key`` until commit.
        SQLite's writes are serialised already (BEGIN IMMEDIATE): nothing to do there."""

    def migration_lock(self, cur: Cursor) -> None:
        """Inside the migrating transaction: one process migrates at a time."""


def _now(now: float | None) -> float:
    return time.time() if now is None else now


def _required_row(row: Row | None) -> Row:
    """The row a statement always returns: an aggregate's, ``RETURNING``'s, or one the
    same transaction has just written."""
    if row is None:
        raise RuntimeError("a statement that always returns a row returned none")
    return row


def _text(value: Any) -> Any:
    """JSON may arrive as bytes from msgspec; TEXT columns want str."""
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).decode("utf-8")
    return value


def _states(expected: str | Iterable[str], allowed: frozenset[str], what: str) -> tuple[str, ...]:
    states = (expected,) if isinstance(expected, str) else tuple(expected)
    if not states:
        raise ValueError(f"expected {what} must name at least one state")
    _check_states(states, allowed, what)
    return states


def _check_states(states: Iterable[str], allowed: frozenset[str], what: str) -> None:
    for s in states:
        if s not in allowed:
            raise ValueError(f"unknown {what} {s!r}; known: {', '.join(sorted(allowed))}")


def _in(n: int) -> str:
    return "(" + ", ".join("?" * n) + ")"


def iso(ts: float | None) -> str:
    if ts is None:
        return "an unknown time"
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def _json(data: dict[str, Any]) -> str:
    return msgspec.json.encode(data).decode("utf-8")


def _cols(record: type[msgspec.Struct], prefix: str = "") -> str:
    return ", ".join(prefix + f for f in record.__struct_fields__)


def _values(record: type[msgspec.Struct]) -> str:
    return _in(len(record.__struct_fields__))
