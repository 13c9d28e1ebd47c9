"""What a new run is given, checked before anything is stored or any server started: its
inputs, its thread limit and its id; and the rule that what an agent proposes never
opts out of asking.
"""

from __future__ import annotations

import difflib
import os
import secrets
import time
from collections.abc import Mapping
from typing import Any

from ..errors import MissingInputError, RecipeError, UsageError
from ..limits import MAX_DEPTH, value_depth
from ..plan import Plan, ToolNode

DEFAULT_THREADS = 1024
"""Blocking steps on threads at once per run when neither ``threads`` nor ``VODOU_THREADS``
sets it: a together of up to this many blocking branches runs them all at once, as a person
who wrote them side by side expects. Threads start only for calls waiting (ten blocking
branches start ten) and idle ones are reused by later runs, so the cap bounds memory (about
25 KB a thread) without costing the small runs anything (docs/recipe-language.md)."""
DEFAULT_AT_ONCE = 256
"""Items of a ``for each`` running at once when neither the loop (``at most N at a time``)
nor the run (``threads``, ``VODOU_THREADS``) says: its items may be calls to one server."""


def thread_limit(given: int | None = None) -> int:
    """Blocking steps (built-ins, model writes) in flight at once per run:
    ``given``, else ``VODOU_THREADS``, else DEFAULT_THREADS. Read before anything is
    stored, so a bad value leaves no run behind."""
    if given is not None:
        value, source = given, "threads"
    else:
        raw = os.environ.get("VODOU_THREADS", "").strip()
        if not raw:
            return DEFAULT_THREADS
        try:
            value = int(raw)
        except ValueError:
            value = 0
        source = f"VODOU_THREADS={raw!r}"
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise UsageError(
            f"{source}: the thread limit must be a whole number of at least 1; nothing was run",
            hint=f"unset VODOU_THREADS for the default ({DEFAULT_THREADS})",
        )
    return value


def items_at_once(given: int | None = None) -> int:
    """A loop's items at once when it sets no ``at most``: the run's thread limit when one
    was set (``given`` or ``VODOU_THREADS``), else DEFAULT_AT_ONCE."""
    if given is None and not os.environ.get("VODOU_THREADS", "").strip():
        return DEFAULT_AT_ONCE
    return thread_limit(given)


def new_run_id() -> str:
    return time.strftime("r%Y%m%d-%H%M%S-", time.gmtime()) + secrets.token_hex(3)


def resolve_inputs(plan: Plan, given: Mapping[str, Any]) -> dict[str, Any]:
    known = {i.name: i for i in plan.inputs}
    for name, value in given.items():
        if name not in known:
            near = difflib.get_close_matches(name, list(known), n=1)
            raise UsageError(
                f"the recipe has no input `{name}`",
                hint=(f"did you mean `{near[0]}`? " if near else "") + f"inputs: {', '.join(known) or 'none'}",
                input=name,
            )
        if value_depth(value) > MAX_DEPTH:
            raise UsageError(
                f"the input `{name}` nests arrays or objects more than {MAX_DEPTH} levels deep",
                hint="flatten it",
                input=name,
            )
    values = {}
    for name, decl in known.items():
        if name in given:
            values[name] = given[name]
        elif decl.required:
            raise MissingInputError(
                f"the recipe needs the input `{name}`", hint=f"give the input `{name}` a value", input=name
            )
        else:
            values[name] = decl.default
    return values


def refuse_agent_opt_out(plan: Plan, what: str = "recipe") -> None:
    """An agent proposes; it never decides, so it cannot remove a gate either: not in a
    recipe it sends, nor through a schedule it proposed (``what="schedule"``: whichever
    version the schedule would run)."""
    opted = [n for n in plan.nodes if isinstance(n, ToolNode) and n.without_asking]
    if opted:
        where = opted[0].where
        how = f"`without asking` / `don't ask` under `{opted[0].id}`"
        if what == "recipe":
            message = f"a recipe from an agent may not opt out of asking ({how}); nothing was saved or run"
        else:
            message = f"a schedule an agent proposed never runs a recipe that opts out of asking, and this version of {plan.recipe.name!r} does ({how}); nothing was scheduled or run"
        raise RecipeError(
            message,
            line=where.line if where else None,
            column=where.column if where else None,
            hint="only a person's recipe file, or the policy file, can let an effect run without asking",
        )
