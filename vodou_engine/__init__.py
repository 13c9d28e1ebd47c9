"""vodou_engine: recipes compiled to verified, approval-gated tool graphs.

The public API. Names load on first use, so ``import vodou_engine`` stays
cheap (the MCP SDK alone costs about a second to import).

    plan = vodou_engine.compile_recipe(text, path="x.recipe")
    graph = vodou_engine.verify(plan)
    runs = vodou_engine.Runs(store="runs.db")
    report = trio.run(runs.start, "recipes/morning-briefing.recipe")

``Runs`` (``runs/``) is the run API every surface calls; docs/python-api.md.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

__version__ = "0.1.0"

_EXPORTS = {
    # compile and load
    "compile_recipe": "vodou_engine.compiler",
    "load_plan": "vodou_engine.compiler",
    "load_source": "vodou_engine.compiler",
    "Plan": "vodou_engine.plan",
    "encode_plan": "vodou_engine.plan",
    "decode_plan": "vodou_engine.plan",
    "json_schema": "vodou_engine.plan",
    # graph and policy
    "verify": "vodou_engine.graph.verify",
    "build_graph": "vodou_engine.graph.verify",
    "Policy": "vodou_engine.policy",
    "load_policy": "vodou_engine.policy",
    # servers, store, runtime
    "load_servers": "vodou_engine.servers",
    "ServerConfig": "vodou_engine.servers",
    "open_store": "vodou_engine.store",
    # the run API
    "Runs": "vodou_engine.runs",
    "Prepared": "vodou_engine.runs",
    "Inspection": "vodou_engine.runs",
    "RunReport": "vodou_engine.reports",
    "RunView": "vodou_engine.reports",
    "RunSummary": "vodou_engine.reports",
    "PendingApproval": "vodou_engine.reports",
    "EffectView": "vodou_engine.reports",
    "RunState": "vodou_engine.states",
    "NodeState": "vodou_engine.states",
    "ApprovalState": "vodou_engine.states",
    "EffectState": "vodou_engine.states",
    # cards
    "plan_card": "vodou_engine.cards",
    "mermaid": "vodou_engine.cards",
    # errors
    "VodouError": "vodou_engine.errors",
    "RecipeError": "vodou_engine.errors",
    "PlanError": "vodou_engine.errors",
    "UnguardedEffectError": "vodou_engine.errors",
    "RefusedError": "vodou_engine.errors",
    "BusyError": "vodou_engine.errors",
    "ServerMismatchError": "vodou_engine.errors",
    "PolicyMismatchError": "vodou_engine.errors",
    "NotSentError": "vodou_engine.errors",
    "NoReplyError": "vodou_engine.errors",
    "StoreError": "vodou_engine.errors",
    "ToolError": "vodou_engine.errors",
    "QueueError": "vodou_engine.errors",
}

__all__ = [*sorted(_EXPORTS), "__version__"]  # noqa: PLE0604 - the keys of _EXPORTS are names


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'vodou_engine' has no attribute {name!r}")
    value = getattr(import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
