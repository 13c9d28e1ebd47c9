"""The node states the walk compares against, as module names: the scheduler and its loop walk
read them on every node's way through, where a module global beats an attribute lookup."""

from __future__ import annotations

from ..compiler import template
from ..errors import ToolError, VodouError
from ..states import NodeState

PENDING, RUNNING, WAITING, SUCCEEDED = NodeState.PENDING, NodeState.RUNNING, NodeState.WAITING, NodeState.SUCCEEDED
FAILED, CANCELLED, SKIPPED, REJECTED, UNKNOWN = (
    NodeState.FAILED,
    NodeState.CANCELLED,
    NodeState.SKIPPED,
    NodeState.REJECTED,
    NodeState.UNKNOWN,
)
DONE_BAD = frozenset({FAILED, CANCELLED, SKIPPED, REJECTED})
TERMINAL = DONE_BAD | {SUCCEEDED, UNKNOWN}
STEP_ERRORS = (ToolError, template.MissingValue, VodouError)
