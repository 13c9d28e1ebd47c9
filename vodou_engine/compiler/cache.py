"""A content-addressed memo of verified compiles, so the card comes up fast.

Compiling needs lark and the grammar's tables loaded before any work, and
``--json`` adds networkx for the graph summary: together about 0.2 s on a
small machine. The result only depends on the recipe bytes, its path, the
policy and the compiler itself, so a verified plan is kept under a key made
of exactly those; any change is a miss.

Only ``recipe plan`` and ``recipe compile`` read it. ``recipe run`` always
compiles and verifies from scratch, and every actions.json is verified
whenever it is loaded, so the memo can make the card fast but can never let
an unverified plan run. ``VODOU_NO_CACHE=1`` turns it off.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from ..plan import Plan, compute_fingerprint, decode_plan, encode_plan

_COMPILER_PARTS = ("compiler/*.py", "compiler/*.lark", "graph/*.py", "policy/*.py", "bounds.py", "plan.py")
"""Every file whose change may change what a recipe compiles to, as globs: a module added to
the compiler, the graph or the policy package is covered without being listed anywhere."""


def _dir() -> Path | None:
    if os.environ.get("VODOU_NO_CACHE"):
        return None
    base = os.environ.get("XDG_CACHE_HOME")
    root = Path(base) if base and os.path.isabs(base) else Path.home() / ".cache"
    return root / "vodou" / "plans"


def _compiler_stamp() -> bytes:
    pkg = Path(__file__).resolve().parent.parent
    parts = []
    for rel in sorted({str(p.relative_to(pkg)) for pattern in _COMPILER_PARTS for p in pkg.glob(pattern)}):
        try:
            st = (pkg / rel).stat()
        except OSError:
            st = None
        parts.append(f"{rel}:{st.st_size}:{st.st_mtime_ns}" if st else f"{rel}:-")
    return "\n".join(parts).encode()


def key(text: str, path: str | None, policy_digest: str) -> str:
    h = hashlib.sha256()
    for part in (_compiler_stamp(), (path or "").encode(), policy_digest.encode(), text.encode("utf-8")):
        h.update(len(part).to_bytes(8, "big"))
        h.update(part)
    return h.hexdigest()


def get(k: str) -> Plan | None:
    d = _dir()
    if d is None:
        return None
    try:
        data = (d / f"{k}.json").read_bytes()
        plan = decode_plan(data)
    except Exception:  # noqa: BLE001 - a missing or damaged memo is only a miss
        return None
    if compute_fingerprint(plan) != plan.fingerprint:
        return None
    return plan


def put(k: str, plan: Plan) -> None:
    d = _dir()
    if d is None:
        return
    try:
        d.mkdir(parents=True, exist_ok=True)
        tmp = d / f"{k}.{os.getpid()}.tmp"
        tmp.write_bytes(encode_plan(plan))
        os.replace(tmp, d / f"{k}.json")
    except OSError:
        pass  # a read-only home only costs speed
