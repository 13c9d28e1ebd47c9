"""A stored run's plan: unchanged in the store, and still what its recipe file says.

The run executes the plan stored with it (fingerprinted), never the recipe
text. The recipe file is compared anyway, because a person who edits the
recipe of a parked run expects the edit to matter: what is compared is what
the file compiles to, so an edit of comments or spacing (which moves line
numbers and nothing else) leaves the run approvable, while a real change is
refused and the run stays parked, for the person to restore the file or
reject the run.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec

from ..errors import RecipeError, TamperedError
from ..plan import RISK_ORDER, Plan, ToolNode, compute_fingerprint, decode_plan, sha256_hex
from ..policy import Hints, Policy
from ..store import RunRecord


def check_stored_plan(plan_json: str, fingerprint: str) -> Plan:
    """Decode a run's stored plan and refuse it if it was edited in the store."""
    plan = decode_plan(plan_json)
    actual = compute_fingerprint(plan)
    if actual != fingerprint or plan.fingerprint != fingerprint:
        raise TamperedError(
            f"the plan stored for this run changed after it started (fingerprint {actual}, expected {fingerprint}); nothing was executed",
            hint="the store was edited; start a new run from the recipe",
            fingerprint=actual,
            expected=fingerprint,
        )
    return plan


def check_saved_text(saved: Any, compiled: Plan) -> None:
    """Refuse (exit 5) a saved recipe version whose text was edited in the store: ``compiled``
    (what its stored text compiles to now) must come from the text its stored plan, checked
    against its fingerprint, was compiled from. A saved recipe runs from its text, so an edit
    of the text alone would otherwise run unseen (a version that asked, now without asking)."""
    stored = check_stored_plan(saved.plan_json, saved.plan_fingerprint)
    if compiled.recipe.source_sha256 != stored.recipe.source_sha256:
        raise TamperedError(
            f"saved recipe {saved.name!r} version {saved.version}: its text changed in the store after it was saved; nothing was run",
            hint="the store was edited; save the recipe again (a new version) to run it",
            recipe=saved.name,
            version=saved.version,
        )


class RecipeChangedError(TamperedError):
    """The recipe file of a stored run now compiles to a different plan."""

    code = "recipe.changed"


def recipe_unchanged(run: RunRecord, plan: Plan, policy: Policy) -> None:
    """Refuse (exit 5, nothing recorded) when the run's recipe file now means something else."""
    path = run.recipe_path
    if not path:
        return
    try:
        data = Path(path).read_bytes()
    except OSError:
        return  # a file that is gone cannot be compared; the stored plan is what runs
    if sha256_hex(data) == plan.recipe.source_sha256:
        return
    # Here, not at the top: `recipe show` reads stored plans through this module and compiles nothing.
    from ..compiler import compile_recipe, decode_utf8

    why = None
    try:
        now = compile_recipe(decode_utf8(data, path), path, policy=policy, hints=_hints_of(plan, policy))
    except RecipeError as exc:
        why = f"it no longer compiles ({exc.message})"
    else:
        why = _difference(_meaning(plan), _meaning(now))
    if why is None:
        return
    raise RecipeChangedError(
        f"the recipe file {path} changed since run {run.id} started: {why}; nothing was run and the run stays as it was",
        hint="restore the file (the run executes the plan it was started with), or reject the run and start a new one",
        run=run.id,
        path=path,
        change=why,
    )


def _hints_of(plan: Plan, policy: Policy) -> dict[str, Hints]:
    """Annotations that reproduce the risks the stored plan was given by its live servers."""
    hints = {}
    for n in plan.nodes:
        if isinstance(n, ToolNode) and RISK_ORDER[n.risk] > RISK_ORDER[policy.assess(n.server, n.tool)[0]]:
            hints[n.address] = Hints(read_only=False, destructive=n.risk == "critical")
    return hints


_NOISE = frozenset({"where", "risk_source", "fingerprint", "source_sha256", "path"})


def _meaning(plan: Plan) -> Any:
    """The plan without what a cosmetic edit changes (positions, the file's hash)."""

    def strip(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: strip(v) for k, v in value.items() if k not in _NOISE}
        if isinstance(value, list):
            return [strip(v) for v in value]
        return value

    return strip(msgspec.to_builtins(plan))


def _difference(before: Any, after: Any) -> str | None:
    if before == after:
        return None
    b_nodes = {n["id"]: n for n in before.get("nodes", [])}
    a_nodes = {n["id"]: n for n in after.get("nodes", [])}
    for nid in b_nodes:
        if nid not in a_nodes:
            return f"step `{nid}` is gone"
    for nid in a_nodes:
        if nid not in b_nodes:
            return f"step `{nid}` is new"
    for nid, node in b_nodes.items():
        if node != a_nodes[nid]:
            changed = sorted(k for k in set(node) | set(a_nodes[nid]) if node.get(k) != a_nodes[nid].get(k))
            return f"step `{nid}` changed ({', '.join(changed)})"
    changed = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
    return f"the recipe's {', '.join(changed)} changed"
