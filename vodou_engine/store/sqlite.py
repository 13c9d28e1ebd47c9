"""The run store in one SQLite file.

Opening is careful because the path comes from a person (``$VODOU_STORE``,
a flag) and may name the wrong file. Anything that already exists is first
inspected through a read-only connection, and only a file that is absent,
empty, or a healthy vodou store is ever opened for writing; anything else is
refused with the file left byte-for-byte as it was.

Pragmas, per connection:

* ``journal_mode=WAL`` (persistent): readers never block the writer, so
  twenty ``approve`` processes can inspect the store while one decides.
* ``synchronous=NORMAL``: in WAL mode a commit is appended to the WAL and
  only the checkpoint is fsynced. A committed transaction survives the
  process crashing at any point (the OS holds the written pages); only
  power loss or a kernel crash can lose the last few commits, and even then
  the file is not corrupted. Crash-and-resume is what the runtime relies on;
  FULL would add an fsync to every node update for the power-loss case.
* ``busy_timeout=5000``: a writer waits up to 5 s for the write lock.
* ``foreign_keys=ON``: rows cannot point at a run that does not exist.
"""

from __future__ import annotations

import os
import sqlite3
import stat
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar, Literal, TypeVar, cast

from ..errors import StoreError, StoreMissingError, VodouError
from .base import CORE_TABLES, TABLES_SINCE, Dialect, SqlRunStore, latest_version, newer_store_error
from .dialect import Connection, Cursor

BUSY_TIMEOUT_MS = 5000
SQLITE_MAGIC = b"SQLite format 3\x00"

_SQLITE_ERROR_NAMES = {
    3: "permission denied",  # SQLITE_PERM
    8: "the file is read-only",  # SQLITE_READONLY
    10: "disk I/O error",  # SQLITE_IOERR
    13: "the disk is full",  # SQLITE_FULL
    14: "the file cannot be opened",  # SQLITE_CANTOPEN
}
_CORRUPT, _NOTADB, _BUSY, _LOCKED, _READONLY, _CANTOPEN = 11, 26, 5, 6, 8, 14

MOVE_ASIDE = (
    "move the file aside or point --store or VODOU_STORE at another path; a new store is created where none exists"
)


class SqliteDialect(Dialect):
    name = "sqlite"
    placeholder = "?"
    # IMMEDIATE takes the write lock at BEGIN: two deferred transactions that
    # both read and then write would deadlock on the upgrade instead.
    begin_write = "BEGIN IMMEDIATE"
    begin_relaxed = "BEGIN IMMEDIATE"
    for_update = ""
    tokens: ClassVar[Mapping[str, str]] = {"serial_pk": "INTEGER PRIMARY KEY AUTOINCREMENT", "blob": "BLOB"}
    tables_sql = "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite!_%' ESCAPE '!'"
    Error = sqlite3.Error
    IntegrityError = sqlite3.IntegrityError

    def integrity_kind(self, exc: Exception) -> str:
        code = getattr(exc, "sqlite_errorcode", None)
        if code == 787:  # SQLITE_CONSTRAINT_FOREIGNKEY
            return "foreign_key"
        if code in (1555, 2067):  # SQLITE_CONSTRAINT_PRIMARYKEY, _UNIQUE
            return "unique"
        return "other"

    def store_error(self, exc: Exception, location: str) -> VodouError | None:
        code = getattr(exc, "sqlite_errorcode", None)
        if code is None:
            return None
        primary = code & 0xFF
        if primary in (_CORRUPT, _NOTADB):
            return damaged(location, str(exc))
        if primary in (_BUSY, _LOCKED):
            return StoreError(
                f"the store at {location} stayed locked by another process for more than {BUSY_TIMEOUT_MS // 1000} s",
                hint="retry; if it keeps happening, look for a stuck recipe process",
            )
        if primary in _SQLITE_ERROR_NAMES:
            return StoreError(f"cannot use the store at {location}: {_SQLITE_ERROR_NAMES[primary]} ({exc})")
        return None

    def insert_returning(self, cur: Cursor, sql: str, params: Sequence[Any], column: str) -> int:
        sqlite_cur = cast(sqlite3.Cursor, cur)  # this dialect only ever gets its own store's cursor
        sqlite_cur.execute(sql, params)
        rowid = sqlite_cur.lastrowid
        if rowid is None:  # sqlite3 sets it after every INSERT into a table with a rowid
            raise RuntimeError(f"SQLite gave no row id for: {sql}")
        return rowid

    def compact(self, conn: Connection) -> None:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        conn.execute("VACUUM")
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")


def damaged(location: str, detail: str) -> StoreError:
    return StoreError(
        f"the store at {location} is damaged ({detail}); nothing was changed",
        hint="restore it from a backup, or move it aside (`sqlite3 FILE .recover` may salvage its runs)",
    )


class SqliteRunStore(SqlRunStore):
    """A run store in one SQLite file, shared safely by many processes."""

    def __init__(
        self, path: str | os.PathLike[str], *, verify: bool = False, readonly: bool = False, create: bool = True
    ):
        """``verify`` reads every page first (about 2 ms per MB) instead of
        trusting the file until a damaged page is touched; a store about to be
        migrated is always verified. ``readonly`` opens it for reading only
        (the commands that only look: it works on a file this user cannot
        write, and it never creates or upgrades one). ``create=False``
        refuses a path where no store exists yet, instead of creating one."""
        p = Path(os.fspath(path)).expanduser()
        location = str(p)
        self._file: _Claim | None = _claim(p)  # before any connection to the file (its header is read here)
        try:
            self._open(p, location, verify=verify, readonly=readonly, create=create)
        except BaseException:
            _release(self._file)
            self._file = None
            raise

    def _open(self, p: Path, location: str, *, verify: bool, readonly: bool, create: bool) -> None:
        exists = inspect_file(p, verify=verify)
        if not exists and (readonly or not create):
            raise StoreMissingError(
                f"there is no run store at {location}; nothing was created",
                hint="check the path given with --store or VODOU_STORE; a store is created by the first run",
                path=location,
            )
        if not exists:
            try:
                p.parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise StoreError(f"cannot create the store at {location}: {exc.strerror}") from exc
        if readonly and exists and _outdated(p) and os.access(p, os.W_OK) and os.access(p.parent, os.W_OK):
            readonly = False  # an older store this user may write: upgrade it rather than refuse to read it
        dialect = SqliteDialect()
        try:
            conn = _connect_readonly(p) if readonly else _connect(p)
        except sqlite3.Error as exc:
            raise (dialect.store_error(exc, location) or StoreError(f"cannot open {location}: {exc}")) from exc
        self._file = _created(p, self._file)
        super().__init__(conn, dialect, location)
        try:
            if readonly:
                self._require_current_schema()
            else:
                self._prepare_schema()
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        try:
            super().close()
        finally:
            _release(self._file)
            self._file = None

    def _require_current_schema(self) -> None:
        found = self.schema_version()
        if found != latest_version():
            raise StoreError(
                f"the store at {self.location} has schema version {found}, and this vodou_engine reads version "
                f"{latest_version()}; a read-only open cannot upgrade it, so nothing was read",
                hint="it is upgraded the next time a command that writes (run, approve, resume) opens it",
            )


def _outdated(path: Path) -> bool:
    conn = _connect_readonly(path)
    try:
        return (conn.execute("SELECT MAX(version) FROM schema_version").fetchone()[0] or 0) < latest_version()
    except sqlite3.Error:
        return False  # the open proper reports what is wrong
    finally:
        conn.close()


def _connect_readonly(path: Path) -> sqlite3.Connection:
    """A connection that cannot write. A WAL store needs its shared-memory file;
    where this user cannot create it (a read-only directory), the file is read
    as immutable instead: a reader here cannot be racing a writer it shares
    permissions with."""
    uri = path.resolve().as_uri()
    conn = sqlite3.connect(
        uri + "?mode=ro", uri=True, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None, check_same_thread=False
    )
    try:
        conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
    except sqlite3.Error as exc:
        if (getattr(exc, "sqlite_errorcode", 0) or 0) & 0xFF not in (_READONLY, _CANTOPEN):
            return conn  # damage and the like: the caller's own reads report it in its words
        conn.close()
        conn = sqlite3.connect(uri + "?immutable=1", uri=True, isolation_level=None, check_same_thread=False)
    conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
    return conn


def _connect(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(
        path,
        timeout=BUSY_TIMEOUT_MS / 1000,
        isolation_level=None,  # autocommit; SqlRunStore issues BEGIN/COMMIT itself
        check_same_thread=False,  # trio worker threads take turns with it
        cached_statements=256,
    )
    try:
        conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        conn.execute("PRAGMA foreign_keys = ON")
        _enable_wal(conn)
        conn.execute("PRAGMA synchronous = NORMAL")
    except BaseException:
        conn.close()
        raise
    return conn


def _enable_wal(conn: sqlite3.Connection) -> None:
    """Switching to WAL needs a moment alone with the file; new stores race for it."""
    deadline = time.monotonic() + BUSY_TIMEOUT_MS / 1000
    while True:
        try:
            mode = conn.execute("PRAGMA journal_mode").fetchone()[0]
            if mode == "wal" or conn.execute("PRAGMA journal_mode = WAL").fetchone()[0] == "wal":
                return
        except sqlite3.OperationalError as exc:
            if (getattr(exc, "sqlite_errorcode", 0) or 0) & 0xFF not in (_BUSY, _LOCKED):
                raise
        if time.monotonic() > deadline:
            raise sqlite3.OperationalError("could not switch the store to WAL mode: database is locked")
        time.sleep(0.01)


_CONNECTED: dict[tuple[int, int], int] = {}
"""Store objects of this process open (or opening) on each file, by (device, inode).

A store's header is read with a plain ``open()``, and closing any descriptor of a
file drops every POSIX lock this process holds on it, those of its SQLite
connections included: another process would then take itself for the last one,
checkpoint and remove the WAL from under them, and writes would be lost or the file
damaged. So the header is read only while no store of this process is open or
opening on the file, under the lock that counts them, before the new store makes
any connection; the checks through SQLite run every time."""
_CREATING: dict[str, int] = {}
"""Stores being opened on a path where no store file exists yet (by absolute path)."""
_CONNECTED_LOCK = threading.Lock()


_Claim = tuple[Literal["path"], str] | tuple[Literal["file"], tuple[int, int]]
"""A store's place in the counts below: a path where no store file exists yet, or a file."""
_Key = TypeVar("_Key")


def _claim(path: Path) -> _Claim:
    """Count a store about to open ``path``; read and check the file's header first when
    nothing else of this process is open on it. Returns what :func:`_release` takes."""
    name = os.path.abspath(path)
    with _CONNECTED_LOCK:
        try:
            st = path.stat()
        except OSError:
            st = None
        if st is None or not stat.S_ISREG(st.st_mode) or st.st_size == 0:
            _CREATING[name] = _CREATING.get(name, 0) + 1  # inspect_file judges what it is
            return ("path", name)
        key = (st.st_dev, st.st_ino)
        if not _CONNECTED.get(key) and not _CREATING.get(name):
            try:
                with open(path, "rb") as f:
                    header = f.read(100)
            except OSError as exc:
                raise StoreError(f"cannot read the store at {path}: {exc.strerror}") from exc
            _check_header(path, header, st.st_size)
        _CONNECTED[key] = _CONNECTED.get(key, 0) + 1
        return ("file", key)


def _created(path: Path, claim: _Claim | None) -> _Claim | None:
    """After the first connection: a claim on a path becomes a claim on the file made there."""
    if claim is None or claim[0] != "path":
        return claim
    try:
        st = path.stat()
    except OSError:
        return claim
    key = (st.st_dev, st.st_ino)
    with _CONNECTED_LOCK:
        _CONNECTED[key] = _CONNECTED.get(key, 0) + 1
        _drop(_CREATING, claim[1])
    return ("file", key)


def _release(claim: _Claim | None) -> None:
    if claim is None:
        return
    with _CONNECTED_LOCK:
        if claim[0] == "file":
            _drop(_CONNECTED, claim[1])
        else:
            _drop(_CREATING, claim[1])


def _drop(counts: dict[_Key, int], key: _Key) -> None:
    left = counts.get(key, 0) - 1
    if left > 0:
        counts[key] = left
    else:
        counts.pop(key, None)


def inspect_file(path: Path, *, verify: bool = False) -> bool:
    """Refuse anything but a healthy vodou store, touching nothing.

    Returns False when there is nothing to protect (no file, an empty file,
    or a SQLite database without tables), True for an existing store.

    The header, the schema and the root page of every table are always read;
    that catches truncation, a foreign or newer file and most damage for well
    under a millisecond. Damage deeper inside a table surfaces as StoreError
    when a page is reached. The full page-by-page check costs time in
    proportion to the file, so it runs only on request and before a migration
    writes to the file.
    """
    location = str(path)
    try:
        st = path.stat()
    except FileNotFoundError:
        return False
    except OSError as exc:
        raise StoreError(f"cannot read the store at {location}: {exc.strerror}") from exc
    if not stat.S_ISREG(st.st_mode):
        raise StoreError(f"{location} is not a file, so it cannot be a run store", hint=MOVE_ASIDE)
    if st.st_size == 0:
        return False
    # the header was read and checked by _claim, before any connection of this store
    try:
        conn = _connect_readonly(path)
    except sqlite3.Error as exc:
        raise StoreError(f"cannot open the store at {location} to inspect it: {exc}") from exc
    try:
        tables = {r[0] for r in conn.execute(SqliteDialect.tables_sql)}
        if not tables:
            return False
        if "schema_version" not in tables:
            shown = ", ".join(sorted(tables)[:5]) + (", ..." if len(tables) > 5 else "")
            raise StoreError(
                f"{location} is a SQLite database but not a vodou run store (its tables: {shown}); nothing was changed",
                hint=MOVE_ASIDE,
            )
        version = conn.execute("SELECT MAX(version) FROM schema_version").fetchone()[0] or 0
        if version > latest_version():
            raise newer_store_error(location, version, latest_version())
        missing = CORE_TABLES.union(*(t for v, t in TABLES_SINCE.items() if version >= v)) - tables
        if version >= 1 and missing:
            raise damaged(location, f"tables missing: {', '.join(sorted(missing))}")
        for table in sorted(CORE_TABLES):
            conn.execute(f"SELECT * FROM {table} LIMIT 1").fetchall()
        if verify or version < latest_version():
            problems = [r[0] for r in conn.execute("PRAGMA quick_check(5)")]
            if problems != ["ok"]:
                raise damaged(location, "; ".join(problems))
        return True
    except sqlite3.Error as exc:
        code = (getattr(exc, "sqlite_errorcode", 0) or 0) & 0xFF
        if code == _NOTADB:
            raise not_sqlite(location) from exc
        raise SqliteDialect().store_error(exc, location) or damaged(location, str(exc)) from exc
    finally:
        conn.close()


def not_sqlite(location: str) -> StoreError:
    return StoreError(
        f"{location} is not a SQLite database, so it cannot be a vodou run store; nothing was changed",
        hint=MOVE_ASIDE,
    )


def _check_header(path: Path, header: bytes, size: int) -> None:
    """Catch truncation, which SQLite itself only notices on the missing pages."""
    location = str(path)
    if len(header) < 100 or not header.startswith(SQLITE_MAGIC):
        raise not_sqlite(location)
    page_size = int.from_bytes(header[16:18], "big")
    page_size = 65536 if page_size == 1 else page_size
    if page_size < 512 or page_size & (page_size - 1):
        raise damaged(location, f"its header gives an impossible page size, {page_size}")
    wal = Path(location + "-wal")
    if wal.exists() and wal.stat().st_size > 0:
        return  # pages may still live in the WAL; let SQLite judge
    pages = int.from_bytes(header[28:32], "big")
    header_valid = pages > 0 and header[24:28] == header[92:96]
    if size % page_size or (header_valid and size < pages * page_size):
        raise damaged(location, f"the file is {size} bytes, its header says {pages} pages of {page_size}: truncated")
