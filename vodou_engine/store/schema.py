"""The store's schema: the numbered migration files, and bringing a store up to them.

The SQL of each version lives in ``migrations/NNNN_name.sql`` (docs/store-schema.md);
this module finds the files, splits them into statements, and applies the missing
ones in one transaction when a store opens. ``CORE_TABLES`` and ``TABLES_SINCE``
let a dialect tell a damaged store from a healthy one before touching it.
"""

from __future__ import annotations

import importlib.resources
import re
import time
from dataclasses import dataclass
from functools import cache

from ..errors import StoreError
from .core import StoreCore
from .dialect import _required_row

# Tables every store of schema version >= 1 has; used to tell a damaged store
# from a healthy one before touching it.
CORE_TABLES = frozenset({"schema_version", "runs", "nodes", "approvals", "effects", "events"})
# Tables added by later migrations: a store of that version must have them too.
TABLES_SINCE = {
    2: frozenset({"approvers", "audit"}),
    3: frozenset({"recipes", "schedules", "firings"}),
    4: frozenset({"web_links", "web_sessions", "web_keys"}),
    5: frozenset({"agents"}),
    8: frozenset({"run_plans"}),
}


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    sql: str


@cache
def migrations() -> tuple[Migration, ...]:
    """Numbered files are the only source of schema; gaps would skip a step."""
    root = importlib.resources.files("vodou_engine.store") / "migrations"
    found = []
    for entry in root.iterdir():
        m = re.fullmatch(r"(\d{4})_(\w+)\.sql", entry.name)
        if m:
            found.append(Migration(int(m[1]), entry.name, entry.read_text(encoding="utf-8")))
    found.sort(key=lambda m: m.version)
    if [m.version for m in found] != list(range(1, len(found) + 1)):
        raise RuntimeError(f"store migrations are not numbered 1..n: {[m.name for m in found]}")
    return tuple(found)


def latest_version() -> int:
    return migrations()[-1].version


def split_statements(script: str) -> list[str]:
    """Split a migration on ``;`` outside quotes and ``--`` comments.

    Statements run one by one so the whole migration stays inside the
    caller's transaction (sqlite3's ``executescript`` would commit first).
    """
    out: list[str] = []
    buf: list[str] = []
    i, n, quoted = 0, len(script), False
    while i < n:
        c = script[i]
        if quoted:
            buf.append(c)
            quoted = c != "'"
        elif c == "-" and script.startswith("--", i):
            end = script.find("\n", i)
            i = n if end < 0 else end
            continue
        elif c == ";":
            stmt = "".join(buf).strip()
            if stmt:
                out.append(stmt)
            buf = []
        else:
            buf.append(c)
            quoted = c == "'"
        i += 1
    stmt = "".join(buf).strip()
    if stmt:
        out.append(stmt)
    return out


CREATE_SCHEMA_VERSION = (
    "CREATE TABLE IF NOT EXISTS schema_version ("
    "version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at DOUBLE PRECISION NOT NULL)"
)
SELECT_VERSION = "SELECT MAX(version) FROM schema_version"
INSERT_VERSION = "INSERT INTO schema_version (version, name, applied_at) VALUES (?, ?, ?)"


class SchemaMixin(StoreCore):
    """The schema version of an open store, and the migrations it is missing."""

    def schema_version(self) -> int:
        if "schema_version" not in self._table_names():
            return 0
        version: int = _required_row(self._one(SELECT_VERSION, ()))[0] or 0
        return version

    def _prepare_schema(self) -> None:
        """Bring the schema up to date; a no-op (and no write) when it is."""
        latest = latest_version()
        if self.schema_version() == latest:
            return
        with self._write() as cur:
            self._d.migration_lock(cur)
            cur.execute(CREATE_SCHEMA_VERSION)
            cur.execute(SELECT_VERSION)
            current: int = _required_row(cur.fetchone())[0] or 0
            if current > latest:
                raise newer_store_error(self.location, current, latest)
            for m in migrations()[current:]:
                for stmt in split_statements(self._d.ddl(m.sql)):
                    cur.execute(stmt)
                cur.execute(self._q(INSERT_VERSION), (m.version, m.name, time.time()))


def newer_store_error(location: str, found: int, known: int) -> StoreError:
    return StoreError(
        f"the store at {location} has schema version {found}, newer than this vodou_engine understands "
        f"(up to {known}); nothing was changed",
        hint="upgrade vodou_engine, or point --store or VODOU_STORE at another store",
    )
