"""Rows of the run store as immutable values.

Field order is the column order the store selects in, so a row becomes a
record with ``Record(*row)`` and no per-field work. New fields must be added
at the end with a default, matching the additive migrations policy
(docs/store-schema.md), so records written by older code still decode.

JSON columns are opaque text to the store: the caller encodes and decodes
them. A caller may hand in ``bytes`` (what ``msgspec.json.encode`` returns);
the store keeps and returns ``str``.
"""

from __future__ import annotations

from msgspec import Struct

# Re-exported (listed in __all__): the store names states through these.
from ..states import (
    APPROVAL_STATES,
    DECISION_STATES,
    EFFECT_STATES,
    RESUMABLE_RUN_STATES,
    RUN_STATES,
    SETTLEABLE_EFFECT_STATES,
    TERMINAL_NODE_STATES,
    TERMINAL_RUN_STATES,
)


class RunRecord(Struct, frozen=True):
    id: str
    recipe_name: str
    recipe_path: str | None
    source_sha256: str
    plan_json: str
    plan_fingerprint: str
    inputs_json: str
    started_by: str
    state: str
    created_at: float
    updated_at: float
    ended_at: float | None = None
    error: str | None = None
    owner: str | None = None
    """The process driving the run (``host:pid:start``), while it is ``running``."""
    lease_expires_at: float | None = None
    servers_json: str = "{}"
    """The server bindings the run was started with (``binding.py``)."""
    saved_recipe: str | None = None
    saved_version: int | None = None
    """The saved recipe (name and version) the run ran, when it came from one."""
    schedule: str | None = None
    """The schedule that started it."""


class NodeRecord(Struct, frozen=True, gc=False):
    """One node's state; the run id travels beside it, not inside it."""

    node_id: str
    state: str
    output_json: str | bytes | None = None
    error: str | None = None
    started_at: float | None = None
    ended_at: float | None = None
    attempts: int = 0
    ready_at: float | None = None
    """When the node could have started; ``started_at`` is when its own work began."""


class ApprovalRecord(Struct, frozen=True):
    """A question put to a person about one guarded step.

    ``payload_json`` is frozen at ask time and ``fingerprint`` names it: the
    effect may only run with that exact payload. An empty ``approvers_json``
    list leaves the choice of who may answer to the caller.
    """

    id: str
    run_id: str
    node_id: str
    step: str
    payload_json: str | bytes
    fingerprint: str
    asked_at: float
    state: str = "pending"
    card_text: str = ""
    preview_json: str | bytes | None = None
    check_json: str | bytes | None = None
    policy_json: str | bytes | None = None
    expires_at: float | None = None
    approvers_json: str | bytes = "[]"
    decided_by: str | None = None
    decided_at: float | None = None
    reason: str | None = None
    superseded_by: str | None = None
    items_json: str | bytes | None = None
    """For a loop's batch question (runtime/loops.py), the item indexes approved, as a JSON
    list; None: all of them (and every question that is not a batch)."""


class EffectRecord(Struct, frozen=True):
    run_id: str
    step: str
    approval_id: str | None
    fingerprint: str
    idempotency_key: str
    state: str
    payload_json: str
    started_at: float
    result_json: str | None = None
    error: str | None = None
    ended_at: float | None = None
    settled_by: str | None = None


class RecipeRecord(Struct, frozen=True):
    """One saved version of a recipe: the text a person wrote and the plan it compiled to."""

    name: str
    version: int
    source: str
    plan_json: str
    plan_fingerprint: str
    saved_at: float
    saved_by: str
    origin: str = "person"


class ScheduleRecord(Struct, frozen=True):
    """A saved recipe on a cron schedule; ``next_due`` is the next due time not yet decided."""

    name: str
    recipe: str
    cron: str
    tz: str
    inputs_json: str
    state: str
    catch_up_s: float
    next_due: float | None
    created_at: float
    created_by: str
    origin: str
    updated_at: float
    recipe_version: int | None = None
    """The saved version it runs, whatever is saved later (an agent's schedule: the version a
    person enables); None: the latest version at each firing (schema 6)."""


class FiringRecord(Struct, frozen=True):
    """One due time of a schedule, decided once: ``fired`` (with its run) or ``skipped``."""

    schedule: str
    due_at: float
    outcome: str
    decided_at: float
    decided_by: str | None = None
    run_id: str | None = None
    note: str | None = None


class ApproverRecord(Struct, frozen=True):
    name: str
    token_sha256: str
    created_at: float
    created_by: str


class AuditRecord(Struct, frozen=True):
    seq: int
    ts: float
    kind: str
    actor: str | None = None
    run_id: str | None = None
    data_json: str = "{}"


class EventRecord(Struct, frozen=True):
    seq: int
    run_id: str
    ts: float
    kind: str
    node_id: str | None = None
    actor: str | None = None
    data_json: str = "{}"


# --- agents over HTTP (``recipe agent add``, the /mcp route of ``recipe serve``) ------------


class AgentRecord(Struct, frozen=True):
    """An agent that may use the MCP server at /mcp; only the sha256 of its token is kept.
    Its runs are started by ``agent:NAME``."""

    name: str
    token_sha256: str
    sees: str = "own"
    """Whose runs it may read: ``own`` or ``all``."""
    approvers_json: str = "[]"
    """Who decides the runs of its recipes that name no approvers (empty: the serving process's default)."""
    created_at: float = 0.0
    created_by: str = ""


# --- the web inbox (``recipe serve``, web/) ------------------------------------------------


class WebLinkRecord(Struct, frozen=True):
    """A one-time sign-in link; only the sha256 of its token is kept."""

    token_sha256: str
    name: str
    created_at: float
    created_by: str
    expires_at: float
    used_at: float | None = None


class WebSessionRecord(Struct, frozen=True):
    """A signed-in browser; only the sha256 of the session id is kept."""

    id_sha256: str
    name: str
    created_at: float
    expires_at: float
    ended_at: float | None = None
    link_sha256: str | None = None
    user_agent: str | None = None


class InboxRow(Struct, frozen=True, gc=False):
    """A pending question with what the inbox lists beside it (no payload, no plan)."""

    approval_id: str
    run_id: str
    step: str
    fingerprint: str
    asked_at: float
    expires_at: float | None
    approvers_json: str
    recipe_name: str
    started_by: str
    run_state: str
    schedule: str | None = None


__all__ = [
    "APPROVAL_STATES",
    "DECISION_STATES",
    "EFFECT_STATES",
    "RESUMABLE_RUN_STATES",
    "RUN_STATES",
    "SETTLEABLE_EFFECT_STATES",
    "TERMINAL_NODE_STATES",
    "TERMINAL_RUN_STATES",
    "AgentRecord",
    "ApprovalRecord",
    "ApproverRecord",
    "AuditRecord",
    "EffectRecord",
    "EventRecord",
    "FiringRecord",
    "InboxRow",
    "NodeRecord",
    "RecipeRecord",
    "RunRecord",
    "ScheduleRecord",
    "WebLinkRecord",
    "WebSessionRecord",
]
