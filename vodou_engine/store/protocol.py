"""The contract the runtime and the CLI hold a run store to.

It is synchronous on purpose: the trio runtime calls it through worker
threads, and every method is one short transaction, so no call holds the
store's write lock for longer than a few statements. A store object is not
thread-safe: it may move between threads but only one may use it at a time.
Several processes may open the same store at once; the compare-and-set
methods (``set_run_state``, ``take_run``, ``decide``, ``begin_effect``,
``finish_effect``, ``decide_firing``) are what make their races safe. A
write that passes ``owner`` is refused (LostRunError) unless that owner still
drives the run.
"""

from __future__ import annotations

from collections.abc import Iterable
from contextlib import AbstractContextManager
from typing import Any, Protocol, runtime_checkable

from .records import (
    AgentRecord,
    ApprovalRecord,
    ApproverRecord,
    AuditRecord,
    EffectRecord,
    EventRecord,
    FiringRecord,
    NodeRecord,
    RecipeRecord,
    RunRecord,
    ScheduleRecord,
    WebLinkRecord,
    WebSessionRecord,
)

Json = str | bytes


@runtime_checkable
class RunStore(Protocol):
    location: str

    # runs
    def create_run(
        self,
        run_id: str,
        *,
        recipe_name: str,
        recipe_path: str | None,
        source_sha256: str,
        plan_json: Json,
        plan_fingerprint: str,
        inputs_json: Json,
        started_by: str,
        state: str = "running",
        now: float | None = None,
        owner: str | None = None,
        lease_s: float | None = None,
        servers_json: Json = "{}",
        saved_recipe: str | None = None,
        saved_version: int | None = None,
        schedule: str | None = None,
        plan: bool = True,
    ) -> RunRecord: ...

    def has_run(self, run_id: str) -> bool: ...

    def get_run(self, run_id: str, *, plan: bool = True) -> RunRecord: ...

    def list_runs(
        self,
        limit: int = 50,
        *,
        state: str | Iterable[str] | None = None,
        recipe: str | None = None,
        since: float | None = None,
        started_by: str | None = None,
        plan: bool = True,
    ) -> list[RunRecord]: ...

    def set_run_state(
        self,
        run_id: str,
        new: str,
        *,
        expected: str | Iterable[str] | None,
        error: str | None = None,
        now: float | None = None,
        owner: str | None = None,
    ) -> bool: ...

    # owners
    def take_run(
        self, run_id: str, owner: str, *, lease_s: float, dead_owner: str | None = None, now: float | None = None
    ) -> bool: ...

    def renew_lease(self, run_id: str, owner: str, *, lease_s: float, now: float | None = None) -> bool: ...

    # nodes
    def save_nodes(self, run_id: str, records: Iterable[NodeRecord], *, owner: str | None = None) -> None: ...

    def get_nodes(self, run_id: str) -> dict[str, NodeRecord]: ...

    # approvals
    def ask(self, approval: ApprovalRecord, *, owner: str | None = None) -> None: ...

    def withdraw(
        self, run_id: str, node_id: str, *, reason: str, owner: str | None = None, now: float | None = None
    ) -> int: ...

    def get_approval(self, approval_id: str) -> ApprovalRecord: ...

    def approvals(self, run_id: str) -> list[ApprovalRecord]: ...

    def pending_approvals(self, run_id: str | None = None) -> list[ApprovalRecord]: ...

    def decide(
        self,
        approval_id: str,
        new_state: str,
        *,
        expected: str | Iterable[str] = "pending",
        by: str,
        reason: str | None = None,
        now: float | None = None,
        items: list[int] | None = None,
    ) -> ApprovalRecord: ...

    # effects
    def begin_effect(
        self,
        run_id: str,
        step: str,
        *,
        approval_id: str,
        fingerprint: str,
        idempotency_key: str,
        payload_json: Json,
        now: float | None = None,
        owner: str | None = None,
    ) -> bool: ...

    def begin_unasked_effect(
        self,
        run_id: str,
        step: str,
        *,
        fingerprint: str,
        idempotency_key: str,
        payload_json: Json,
        now: float | None = None,
        owner: str | None = None,
    ) -> bool: ...

    def finish_effect(
        self,
        run_id: str,
        step: str,
        state: str,
        *,
        result_json: Json | None = None,
        error: str | None = None,
        expected: str | Iterable[str] = "executing",
        now: float | None = None,
    ) -> bool: ...

    def settle_effect(
        self,
        run_id: str,
        step: str,
        executed: bool,
        by: str,
        *,
        result_json: Json | None = None,
        reason: str | None = None,
        now: float | None = None,
    ) -> EffectRecord: ...

    def mark_unknown(self, run_id: str, *, now: float | None = None, reason: str | None = None) -> int: ...

    def get_effect(self, run_id: str, step: str) -> EffectRecord | None: ...

    def effects(self, run_id: str) -> list[EffectRecord]: ...

    # events
    def append_event(
        self,
        run_id: str,
        kind: str,
        *,
        node_id: str | None = None,
        actor: str | None = None,
        data_json: Json = "{}",
        now: float | None = None,
    ) -> int: ...

    def events(self, run_id: str, *, after: int = 0, limit: int | None = None) -> list[EventRecord]: ...

    # saved recipes and schedules
    def save_recipe(
        self,
        name: str,
        *,
        source: str,
        plan_json: Json,
        plan_fingerprint: str,
        by: str,
        origin: str = "person",
        now: float | None = None,
    ) -> RecipeRecord: ...

    def get_recipe(self, name: str, version: int | None = None) -> RecipeRecord: ...

    def recipe_versions(self, name: str) -> list[RecipeRecord]: ...

    def recipes_latest(self) -> list[RecipeRecord]: ...

    def add_schedule(self, schedule: ScheduleRecord) -> None: ...

    def get_schedule(self, name: str) -> ScheduleRecord: ...

    def schedules(self) -> list[ScheduleRecord]: ...

    def due_schedules(self, now: float) -> list[ScheduleRecord]: ...

    def set_schedule_state(
        self,
        name: str,
        state: str,
        *,
        expected: Iterable[str],
        next_due: float | None,
        by: str,
        now: float | None = None,
    ) -> bool: ...

    def remove_schedule(self, name: str, *, by: str, now: float | None = None) -> bool: ...

    def decide_firing(self, firing: FiringRecord, *, next_due: float | None) -> bool: ...

    def firings(self, schedule: str, limit: int = 50) -> list[FiringRecord]: ...

    def orphan_firings(self, *, decided_before: float) -> list[FiringRecord]: ...

    def firing_failed(self, schedule: str, due_at: float, error: str) -> None: ...

    # identity and the store-wide audit log
    def set_approver(self, name: str, token_sha256: str, *, by: str, now: float | None = None) -> None: ...

    def add_approver_if_missing(self, name: str, token_sha256: str, *, by: str, now: float | None = None) -> bool: ...

    def get_approver(self, name: str) -> ApproverRecord | None: ...

    def approvers_list(self) -> list[ApproverRecord]: ...

    def remove_approver(self, name: str, *, by: str, now: float | None = None) -> bool: ...

    def audit(
        self,
        kind: str,
        *,
        actor: str | None,
        run_id: str | None = None,
        data: dict[str, Any] | None = None,
        now: float | None = None,
    ) -> None: ...

    def audit_log(self, *, after: int = 0) -> list[AuditRecord]: ...

    # agents that may use /mcp over HTTP (`recipe agent add`; only the sha256 of a token is kept)
    def set_agent(
        self,
        name: str,
        token_sha256: str,
        *,
        by: str,
        sees: str = "own",
        approvers: list[str] | None = None,
        now: float | None = None,
    ) -> AgentRecord: ...

    def get_agent(self, name: str) -> AgentRecord | None: ...

    def agent_by_token(self, token_sha256: str) -> AgentRecord | None: ...

    def agents_list(self) -> list[AgentRecord]: ...

    def remove_agent(self, name: str, *, by: str, now: float | None = None) -> bool: ...

    # the web inbox: its signing keys, one-time sign-in links and sessions (only hashes are kept)
    def web_key(self, name: str = "session", *, now: float | None = None) -> str: ...

    def add_web_link(
        self, token_sha256: str, name: str, *, by: str, expires_at: float, now: float | None = None
    ) -> WebLinkRecord: ...

    def get_web_link(self, token_sha256: str) -> WebLinkRecord | None: ...

    def web_link_usable(self, link: WebLinkRecord, *, now: float | None = None) -> str | None: ...

    def use_web_link(
        self,
        token_sha256: str,
        session_sha256: str,
        *,
        session_expires_at: float,
        user_agent: str | None = None,
        now: float | None = None,
    ) -> tuple[WebSessionRecord | None, str | None]: ...

    def get_web_session(self, session_sha256: str, *, now: float | None = None) -> WebSessionRecord | None: ...

    def end_web_session(self, session_sha256: str, *, by: str | None, now: float | None = None) -> bool: ...

    # housekeeping
    def transaction(self, *, relaxed: bool = False) -> AbstractContextManager[None]: ...

    def schema_version(self) -> int: ...

    def prune(self, *, ended_before: float, states: Iterable[str], by: str, now: float | None = None) -> int: ...

    def compact(self) -> None: ...

    def close(self) -> None: ...


__all__ = ["Json", "RunStore"]
