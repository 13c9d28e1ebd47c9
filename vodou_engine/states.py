"""The states a run, a node, an approval and an effect can be in: one named type each.

They are ``StrEnum``s, so a state read back from the store as text compares
and hashes equal to its member: the store keeps plain words, every module
names states through these types, and no name is kept twice.
"""

from __future__ import annotations

from enum import StrEnum


class RunState(StrEnum):
    RUNNING = "running"
    """A process is driving it (see the run's owner and lease)."""
    PARKED = "parked"
    """Waiting for a person: an approval, a question, or an effect to reconcile."""
    INTERRUPTED = "interrupted"
    """Its driver stopped before it ended (a signal, Ctrl-C, or a process that died); resumable."""
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    DECLINED = "declined"
    """A person said no; nothing after the refusal ran."""
    CANCELLED = "cancelled"


class NodeState(StrEnum):
    PENDING = "pending"
    RUNNING = "running"
    WAITING = "waiting"
    """An approval or question waiting for a person."""
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    """Dropped by a quorum, or stopped with its run."""
    SKIPPED = "skipped"
    """An earlier step did not succeed."""
    REJECTED = "rejected"
    UNKNOWN = "unknown"
    """An effect that may or may not have happened; a person reconciles it."""


class ApprovalState(StrEnum):
    PENDING = "pending"
    APPROVED = "approved"
    REJECTED = "rejected"
    EXPIRED = "expired"
    SUPERSEDED = "superseded"
    """A newer question for the same step replaced it."""
    WITHDRAWN = "withdrawn"
    """Its step will never run (a quorum dropped its branch, or the run ended): nobody can decide it."""


class EffectState(StrEnum):
    EXECUTING = "executing"
    EXECUTED = "executed"
    FAILED = "failed"
    """The server answered that it failed (a tool error, or a refused request)."""
    UNKNOWN = "unknown"
    """The request may have reached the server and no usable answer came back."""


RUN_STATES = frozenset(RunState)
TERMINAL_RUN_STATES = frozenset({RunState.SUCCEEDED, RunState.FAILED, RunState.DECLINED, RunState.CANCELLED})
"""A run in one of these never runs again, so it gets an ``ended_at``."""
RESUMABLE_RUN_STATES = frozenset({RunState.PARKED, RunState.INTERRUPTED})
"""A run in one of these may be taken by any process (a running one only when its owner is gone)."""

NODE_STATES = frozenset(NodeState)
TERMINAL_NODE_STATES = frozenset(
    {NodeState.SUCCEEDED, NodeState.FAILED, NodeState.CANCELLED, NodeState.SKIPPED, NodeState.REJECTED}
)
"""A node in one of these never runs again in its run: a resume needs no server for it."""

APPROVAL_STATES = frozenset(ApprovalState)
DECISION_STATES = frozenset({ApprovalState.APPROVED, ApprovalState.REJECTED, ApprovalState.EXPIRED})
"""What ``decide`` may set; ``superseded`` and ``withdrawn`` come from the engine and the store."""

EFFECT_STATES = frozenset(EffectState)
SETTLEABLE_EFFECT_STATES = frozenset({EffectState.UNKNOWN, EffectState.FAILED})
"""What a person may reconcile: doubt, and a failure the server reported (it may have acted anyway)."""
