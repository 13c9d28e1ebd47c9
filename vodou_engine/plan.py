"""The Plan: the typed, canonical, fingerprinted document a recipe compiles to.

``actions.json`` is what every engine surface executes, so it is the contract
between compile time and run time. It is versioned (``vodou.actions/1``),
encoded canonically (compact msgspec JSON, struct fields in declaration order,
dict keys sorted), and carries a sha256 fingerprint over that encoding with
the fingerprint field itself left empty. Fields added later must have
defaults so plans stored by older versions still decode.
"""

from __future__ import annotations

import hashlib
from typing import Any, Literal

import msgspec

from .errors import PlanError

FORMAT = "vodou.actions/1"
FORMAT_LOOPS = "vodou.actions/2"
"""A plan with a ``for each`` (a node of kind ``each``): an engine that knows only format 1
refuses it by its format string, with a message that says so, rather than as a bad node."""
FORMATS = frozenset({FORMAT, FORMAT_LOOPS})

Risk = Literal["read", "write", "critical"]
RISK_ORDER: dict[str, int] = {"read": 0, "write": 1, "critical": 2}


# Each subclass repeats ``frozen=True``: msgspec inherits it, but a type checker
# reads a subclass without it as a mutable one.
#
# ``gc=False``: the cyclic collector never tracks a plan's documents. They hold JSON data
# only (strings, numbers, lists, dicts, other documents), so they can never be part of a
# reference cycle; reference counting frees them as before. A plan of 100,000 steps was
# otherwise 100,000 more objects for every full collection during its run to walk, and
# 16 bytes more each.
class Base(msgspec.Struct, frozen=True, forbid_unknown_fields=True, omit_defaults=True, gc=False):
    """House policy for every document that crosses a boundary."""


class Where(Base, frozen=True):
    """Source position of a node, for error messages and the card."""

    line: int
    column: int


class ToolRef(Base, frozen=True):
    """A read-only tool call attached to a step (``preview:`` or ``check:``)."""

    server: str
    tool: str
    args: dict[str, Any] = {}
    refs: list[str] = []
    risk: Risk = "read"
    risk_source: str = ""
    where: Where | None = None

    @property
    def address(self) -> str:
        return f"{self.server}.{self.tool}"


class NodeBase(Base, tag_field="kind", frozen=True):
    """Nodes are a tagged union on ``kind``."""


class ToolNode(NodeBase, tag="tool", frozen=True):
    """A call to ``server.tool`` with argument templates.

    ``args`` is the JSON object as written; strings may hold ``{name.path}``
    references (see ``compiler.template``). ``refs`` lists the names they use.
    """

    id: str
    server: str
    tool: str
    risk: Risk
    risk_source: str
    needs: list[str] = []
    args: dict[str, Any] = {}
    refs: list[str] = []
    preview: ToolRef | None = None
    check: ToolRef | None = None
    expires_s: int | None = None
    without_asking: bool = False
    where: Where | None = None
    timeout_s: int | None = None
    """Seconds the call may take; past it a read fails, an effect becomes unknown."""
    retries: int = 0
    """Times a failed read is tried again (an effect never is)."""
    retries_where: Where | None = None

    @property
    def address(self) -> str:
        return f"{self.server}.{self.tool}"

    @property
    def effectful(self) -> bool:
        return self.risk != "read"


class WriteNode(NodeBase, tag="write", frozen=True):
    """Prose turned into text by a model (or the offline writer) from inputs."""

    id: str
    prompt: str
    inputs: list[str] = []
    needs: list[str] = []
    where: Where | None = None


class JoinNode(NodeBase, tag="join", frozen=True):
    """Where a ``together`` block meets: proceeds at ``need`` of ``of`` items.

    ``needs`` holds the exit node of each item, in order; ``members`` holds,
    per item, every node inside it, so the runtime can cancel a dropped item
    as a whole.
    """

    id: str
    needs: list[str]
    need: int
    of: int
    members: list[list[str]]
    block: str | None = None
    where: Where | None = None


class QuestionNode(NodeBase, tag="question", frozen=True):
    """An ``ask me`` question with no effect of its own: a yes/no gate."""

    id: str
    text: str
    needs: list[str] = []
    where: Where | None = None


class ApprovalNode(NodeBase, tag="approval", frozen=True):
    """The structural gate before an effectful step.

    ``step`` names the one tool node it guards; ``question`` is the recipe's
    own wording when an ``ask me`` item became this approval.
    """

    id: str
    step: str
    needs: list[str] = []
    question: str | None = None
    where: Where | None = None


class LoopNode(NodeBase, tag="each", frozen=True):
    """A ``for each`` block: its body runs once per item of a list.

    The body's nodes are ordinary nodes of the plan, listed in ``body`` (the
    direct members: a nested loop's own body is that loop's); they are
    templates, never run as they are. At run time each item gets its own copy
    of every body node, with the item's index after the id (``reply[0]``,
    ``reply[1]``; nested: ``x[0][2]``), and ``{VAR}`` bound to the item. The
    entry nodes of the body need nothing; everything outside the block that
    follows it needs this node, which ends when the items have (quorum:
    ``need``). After it, a body step's id names the list of its per-item
    outputs, in item order.

    ``over`` is where the list comes from: a ``{name.path}`` reference (a
    string) or a JSON list written in place. ``over_text`` is how the card
    shows it.
    """

    id: str
    var: str
    over: Any
    over_text: str
    body: list[str]
    exit: str
    """The body's last node: an item has succeeded when its copy of it has."""
    needs: list[str] = []
    at_most: int | None = None
    """Items at the same time; None: the run's thread limit."""
    need: int | None = None
    """Items that must succeed (quorum); None: all of them (or ``need_percent``)."""
    need_percent: int | None = None
    max_items: int = 100
    where: Where | None = None


Node = ToolNode | WriteNode | JoinNode | QuestionNode | ApprovalNode | LoopNode


class Input(Base, frozen=True):
    """A recipe input; ``required`` inputs have no default."""

    name: str
    default: Any = None
    required: bool = False


class RecipeInfo(Base, frozen=True):
    name: str
    source_sha256: str
    path: str | None = None


class Options(Base, frozen=True):
    """Recipe-wide settings. ``approval_expires_s`` defaults to 15 minutes."""

    approval_expires_s: int = 900
    approvers: list[str] = []
    model: str | None = None


class Plan(Base, frozen=True):
    format: str
    recipe: RecipeInfo
    inputs: list[Input] = []
    options: Options = Options()
    nodes: list[Node] = []
    fingerprint: str = ""

    def node(self, node_id: str) -> Node:
        return self.index()[node_id]

    def index(self) -> dict[str, Node]:
        return {n.id: n for n in self.nodes}


_encoder = msgspec.json.Encoder(order="deterministic")
_decoder = msgspec.json.Decoder(Plan)


class _Head(msgspec.Struct):
    """Just the format string, read before anything else is trusted."""

    format: str = ""


_head_decoder = msgspec.json.Decoder(_Head)


def canonical_bytes(obj: Any) -> bytes:
    """Compact, deterministic JSON: the bytes fingerprints are taken over."""
    return _encoder.encode(obj)


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def compute_fingerprint(plan: Plan) -> str:
    return "sha256:" + sha256_hex(canonical_bytes(msgspec.structs.replace(plan, fingerprint="")))


def with_fingerprint(plan: Plan) -> Plan:
    return msgspec.structs.replace(plan, fingerprint=compute_fingerprint(plan))


def encode_plan(plan: Plan) -> bytes:
    """The actions.json bytes: canonical content, indented for people to read."""
    return msgspec.json.format(canonical_bytes(plan), indent=2) + b"\n"


def decode_plan(data: bytes | str, *, path: str | None = None) -> Plan:
    """Decode actions.json into a Plan, turning schema errors into PlanError.

    Parsed once: a stored run's plan is decoded on every approve, resume and show (16 MB
    at 100,000 branches), and reading its format first was a second parse of the whole
    text. Only a document that fails is read again, for its format alone, so a format
    this engine does not read is refused as unsupported rather than as invalid."""
    try:
        plan = _decoder.decode(data)
    except msgspec.ValidationError as exc:
        _refuse_format(data, path)
        raise PlanError(
            f"not a valid actions.json: {exc}",
            path=path,
            hint="compile the recipe again to get a new actions.json",
        ) from None
    except msgspec.DecodeError as exc:
        _refuse_format(data, path)
        raise PlanError(
            f"not valid JSON: {exc}", path=path, hint="check the file is an actions.json written by the compiler"
        ) from None
    if plan.format not in FORMATS:
        raise _unsupported(plan.format, path)
    return plan


def _refuse_format(data: bytes | str, path: str | None) -> None:
    """Raise the unsupported-format error when a document that is no plan names a format
    this engine does not read (a future one, with fields this one has never seen)."""
    try:
        head = _head_decoder.decode(data)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return
    if head.format not in FORMATS:
        raise _unsupported(head.format, path)


def _unsupported(found: str, path: str | None) -> PlanError:
    return PlanError(
        f"unsupported format {found!r}; this engine reads {FORMAT!r} and {FORMAT_LOOPS!r}",
        path=path,
        hint="recompile the recipe with this version of the engine",
    )


def format_for(nodes: list[Node]) -> str:
    """The oldest format that can hold these nodes: format 1 unless a loop is among them."""
    return FORMAT_LOOPS if any(isinstance(n, LoopNode) for n in nodes) else FORMAT


def json_schema() -> dict[str, Any]:
    """The JSON Schema of actions.json, generated from the types above."""
    return msgspec.json.schema(Plan)
