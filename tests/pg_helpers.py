"""The PostgreSQL server the tests use, and a fresh schema per test.

PostgreSQL is expected at ``$VODOU_TEST_PG`` (default
``postgresql://postgres@127.0.0.1:5432/test``). When it cannot be reached the
tests that need it fail saying so, with the URL and how to point elsewhere:
they are never skipped. ``VODOU_TEST_STORE=sqlite`` (tests/conftest.py) leaves
the PostgreSQL side of the store-parametrized tests out, for a machine without it.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import Iterator
from typing import Any

import pytest

PG = os.environ.get("VODOU_TEST_PG", "postgresql://postgres@127.0.0.1:5432/test")


def pg_or_fail() -> Any:
    """A connection (autocommit) to the test server, or a failed test saying why (never a skip)."""
    import psycopg

    try:
        return psycopg.connect(PG, autocommit=True, connect_timeout=5)
    except psycopg.OperationalError as exc:
        why = str(exc).strip().splitlines()[0]
    pytest.fail(  # outside the except: the message alone, not the driver's traceback again
        f"PostgreSQL is not reachable at {PG}: {why}\n"
        "these tests need it: start PostgreSQL (trust auth for user postgres, database test), "
        "or point VODOU_TEST_PG at one (VODOU_TEST_PG=postgresql://USER@HOST:PORT/DB); "
        "VODOU_TEST_STORE=sqlite runs the store-parametrized tests on SQLite only",
        pytrace=False,
    )


@contextlib.contextmanager
def fresh_schema(prefix: str = "vt") -> Iterator[str]:
    """A new, empty schema for one test; yields the store URL naming it
    (libpq's ``options=-csearch_path%3D<schema>``). Dropped afterwards, whatever happened."""
    name = f"{prefix}_{os.getpid()}_{secrets.token_hex(4)}"
    with pg_or_fail() as conn:
        conn.execute(f'CREATE SCHEMA "{name}"')
    sep = "&" if "?" in PG else "?"
    try:
        yield f"{PG}{sep}options=-csearch_path%3D{name}"
    finally:
        with pg_or_fail() as conn:
            conn.execute(f'DROP SCHEMA "{name}" CASCADE')
