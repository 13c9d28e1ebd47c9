"""What a plan may hold: the recipe language's bounds, for a plan from anywhere.

The compiler refuses ``expires: 400d``, ``retries: 11`` or a step named
``then`` where they are written. A plan also arrives without meeting the
compiler: an actions.json (``recipe run``, ``plan``, ``compile``), a
:class:`~vodou_engine.plan.Plan` handed to the run API, the plan stored with a
run. :func:`check_plan` holds every one of them to the same bounds, naming the
field and the allowed range, and ``graph.verify`` calls it first, so the
compiler's own output, every loaded document and every stored plan pass the
same function. The compiler's parser reads its limits from here.

*Why:* a value the language cannot write is a value no other part of the
engine was built for. ``"expires_s": 10**30`` once got past every check and
overflowed the clock while the approval card was written, leaving the run
``interrupted`` (and every resume crashed the same way); a negative expiry made
a question that had expired before anyone saw it. A bad value is refused
before anything is stored, so it can never get into a run.
"""

from __future__ import annotations

import math
import re
from typing import Any

from .errors import PlanError
from .plan import (
    RISK_ORDER,
    ApprovalNode,
    Input,
    JoinNode,
    LoopNode,
    Options,
    Plan,
    QuestionNode,
    ToolNode,
    ToolRef,
    Where,
    WriteNode,
)

MAX_DURATION = 365 * 86400
"""The longest approval lifetime, in seconds (``approval expires:``, a step's ``expires:``): 365 days."""

MAX_TIMEOUT = 86400
"""The longest ``timeout:`` of a step, in seconds: a day."""

MAX_RETRIES = 10
"""The most ``retries:`` of a read step (0 in a plan: none were asked for)."""

MAX_LOOP_ITEMS = 10_000
"""The most items a ``for each`` may be given (``max items:``); 100 unless it says."""

DEFAULT_LOOP_ITEMS = 100

RESERVED = frozenset(
    {
        "recipe",
        "inputs",
        "approval",
        "approvers",
        "together",
        "then",
        "ask",
        "need",
        "expires",
        "timeout",
        "retries",
        "of",
        "true",
        "false",
        "null",
        "write",
        "model",
    }
    | {"preview", "check"}  # step options: an option left unindented must not become a step
)
"""Words of the language, which cannot name a step, a block or an input."""

# The grammar's terminals (compiler/grammar.lark; tests/test_bounds.py keeps them equal).
NAME = r"[a-z_][a-z0-9_-]*"
# A server's key and a tool's name as a recipe may write them, bare or in double quotes
# (grammar.lark's _SERVER, _TOOL and _QUOTED_NAME, compiler/words.py): no quote, backslash
# or line break, and a server's holds no dot, so SERVER.TOOL reads one way only. Each must
# also be printable as a whole (the compiler refuses a hidden character in a quoted name).
SERVER = r'[^"\\\n.]+'
TOOL = r'[^"\\\n]+'
PERSON = r"[A-Za-z0-9_.@+-]+"
MODEL = r"[A-Za-z0-9_.@+-]+"

_NAME = re.compile(NAME)
_FREE_NAME = re.compile(rf"(?!(?:{'|'.join(sorted(RESERVED))})\Z){NAME}")  # a name that is no reserved word
_SERVER = re.compile(SERVER)
_TOOL = re.compile(TOOL)
_PERSON = re.compile(PERSON)
_MODEL = re.compile(MODEL)
_COUNTED = re.compile(r"[1-9][0-9]*")
_PLAIN = frozenset({str, int, bool, type(None)})
_NODE_KINDS = frozenset({ToolNode, WriteNode, JoinNode, QuestionNode, ApprovalNode, LoopNode})

_HINT = "compile the recipe again to get an actions.json within the language's bounds"


def check_plan(plan: Plan, *, path: str | None = None) -> None:
    """Raise :class:`PlanError` (exit 2) naming the first value of ``plan`` that the
    recipe language could not have written; nothing is changed.

    Types are checked as strictly as the decoder checks them (a ``true`` is not a
    number), so a Plan built in Python is held to what an actions.json is."""
    _Check(path).plan(plan)


def duration_words(seconds: int) -> str:
    """``365 days``, ``1 day``, ``15 minutes``: a bound as a person reads it."""
    for unit, size in (("day", 86400), ("hour", 3600), ("minute", 60)):
        if seconds >= size and seconds % size == 0:
            n = seconds // size
            return f"{n} {unit}{'s' if n != 1 else ''}"
    return f"{seconds} second{'s' if seconds != 1 else ''}"


def _shown(value: Any) -> str:
    """A value for a message: an enormous number is described, not printed whole."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 130:
        return f"a number of {len(str(abs(value))) if value.bit_length() < 10000 else 'thousands of'} digits"
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _finite(value: Any) -> bool:
    """Whether every number in a JSON-like value is finite (no infinity, no NaN)."""
    stack = [value]
    while stack:
        item = stack.pop()
        kind = type(item)
        if kind is dict:
            stack.extend(item.values())
        elif kind is list or kind is tuple:
            stack.extend(item)
        elif kind is float and not math.isfinite(item):
            return False
    return True


class _Check:
    """One pass over the plan. What passes costs a few comparisons per node (a plan of
    10,000 steps is checked in milliseconds); the message is built only for what fails."""

    def __init__(self, path: str | None):
        self.path = path
        self.names: set[str] = set()
        self.addresses: set[tuple[str, str]] = set()

    def fail(self, field: str, value: Any, allowed: str, node: Any = None) -> PlanError:
        kind = "step" if isinstance(node, (ToolNode, WriteNode)) else "node"
        where = f" ({kind} `{node.id}`)" if type(getattr(node, "id", None)) is str else ""
        return PlanError(f"`{field}`{where} is {_shown(value)}; {allowed}", path=self.path, hint=_HINT)

    # --- values -----------------------------------------------------------------------------
    def whole(self, field: str, value: Any, low: int, high: int | None, allowed: str, node: Any = None) -> None:
        if type(value) is not int or value < low or (high is not None and value > high):
            raise self.fail(field, value, allowed, node)

    def seconds(self, field: str, value: Any, high: int, what: str, node: Any = None) -> None:
        """``value`` is None (not given) or 1 to ``high`` seconds."""
        if value is not None and (type(value) is not int or not 0 < value <= high):
            raise self.fail(
                field, value, f"{what} is a whole number of seconds from 1 to {high} ({duration_words(high)})", node
            )

    def text(self, field: str, value: Any, pattern: re.Pattern[str], what: str, node: Any = None) -> None:
        if type(value) is not str or not pattern.fullmatch(value):
            raise self.fail(field, value, f"{what} matches {pattern.pattern}", node)

    def name(self, field: str, value: Any, node: Any = None) -> None:
        self.text(field, value, _NAME, "a name", node)
        if value in RESERVED:
            raise self.fail(field, value, "a reserved word of the language cannot be a name", node)

    def new_name(self, field: str, value: Any, node: Any = None) -> None:
        if type(value) is not str or not _FREE_NAME.fullmatch(value):
            self.name(field, value, node)
        if value in self.names:
            raise self.fail(field, value, "steps, blocks and inputs each have a name of their own", node)
        self.names.add(value)

    def flag(self, field: str, value: Any, node: Any = None) -> None:
        if type(value) is not bool:
            raise self.fail(field, value, "it is true or false", node)

    def finite(self, field: str, value: Any, node: Any = None) -> None:
        """JSON has no infinity or NaN, and the language refuses a number that overflows to one
        (a Plan built in Python could hold one; encoding it would write null)."""
        if not _finite(value):
            raise self.fail(field, value, "every number is finite (JSON has no infinity or NaN)", node)

    def where(self, field: str, value: Any, node: Any = None) -> None:
        if value is None:
            return
        if type(value) is not Where:
            raise self.fail(field, value, "a position is {line, column}", node)
        self.whole(f"{field}.line", value.line, 1, None, "a line number is 1 or more", node)
        self.whole(f"{field}.column", value.column, 1, None, "a column number is 1 or more", node)

    def ids(self, field: str, value: Any, node: Any, what: str = "a list of node ids") -> None:
        if type(value) is not list or any(type(n) is not str for n in value):
            raise self.fail(field, value, what, node)

    # --- the plan -----------------------------------------------------------------------------
    def plan(self, plan: Plan) -> None:
        options = plan.options
        if type(options) is not Options:
            raise self.fail("options", options, "the recipe's options are an object")
        self.seconds(
            "options.approval_expires_s",
            options.approval_expires_s,
            MAX_DURATION,
            "an approval lifetime (`approval expires:`)",
        )
        if options.approval_expires_s is None:
            raise self.fail("options.approval_expires_s", None, "an approval lifetime is a number of seconds")
        self.ids("options.approvers", options.approvers, None, "a list of approvers' names")
        for i, person in enumerate(options.approvers):
            self.text(f"options.approvers[{i}]", person, _PERSON, "an approver's name")
        if options.model is not None:
            self.text("options.model", options.model, _MODEL, "a model's name")
        if type(plan.inputs) is not list or type(plan.nodes) is not list:
            raise self.fail("nodes", plan.nodes, "inputs and nodes are lists")
        for i, decl in enumerate(plan.inputs):
            if type(decl) is not Input:
                raise self.fail(f"inputs[{i}]", decl, "an input is {name, default, required}")
            self.new_name(f"inputs[{i}].name", decl.name)
            self.flag(f"inputs[{i}].required", decl.required)
            self.finite(f"inputs[{i}].default", decl.default)
        addresses = self.addresses
        for i, node in enumerate(plan.nodes):
            kind = type(node)
            if kind not in _NODE_KINDS:
                raise self.fail(f"nodes[{i}]", node, "a node is a tool, write, join, question, approval or loop")
            needs, where = node.needs, node.where
            if type(needs) is not list or any(type(n) is not str for n in needs):
                self.ids(f"nodes[{i}].needs", needs, node)
            if where is not None and not (
                type(where) is Where
                and type(where.line) is int
                and type(where.column) is int
                and where.line > 0
                and where.column > 0
            ):
                self.where(f"nodes[{i}].where", where, node)
            if isinstance(node, ToolNode):
                if not self.plain_step(node, addresses):
                    self.tool(i, node, addresses)
            elif isinstance(node, WriteNode):
                self.new_name(f"nodes[{i}].id", node.id, node)
                self.ids(f"nodes[{i}].inputs", node.inputs, node, "a list of names")
                for j, used in enumerate(node.inputs):
                    self.name(f"nodes[{i}].inputs[{j}]", used, node)
            elif isinstance(node, ApprovalNode):
                if type(node.step) is not str or node.id != f"approve:{node.step}":
                    raise self.fail(
                        f"nodes[{i}].id", node.id, f"the approval of step `{node.step}` is `approve:{node.step}`", node
                    )
                if node.question is not None and (type(node.question) is not str or not node.question.strip()):
                    raise self.fail(f"nodes[{i}].question", node.question, "a question has words", node)
            elif isinstance(node, QuestionNode):
                if type(node.id) is not str or not (node.id.startswith("ask:") and _COUNTED.fullmatch(node.id, 4)):
                    raise self.fail(f"nodes[{i}].id", node.id, "a question's id is `ask:N` (N counts from 1)", node)
                if type(node.text) is not str or not node.text.strip():
                    raise self.fail(f"nodes[{i}].text", node.text, "a question has words", node)
            elif isinstance(node, JoinNode):
                self.join(i, node)
            elif isinstance(node, LoopNode):
                self.loop(i, node)

    def loop(self, i: int, node: LoopNode) -> None:
        at = f"nodes[{i}]"
        if type(node.id) is not str or not (node.id.startswith("each:") and _COUNTED.fullmatch(node.id, 5)):
            raise self.fail(f"{at}.id", node.id, "a loop's id is `each:N` (N counts from 1)", node)
        self.new_name(f"{at}.var", node.var, node)
        self.ids(f"{at}.body", node.body, node)
        if not node.body or node.exit not in node.body:
            raise self.fail(f"{at}.exit", node.exit, "a loop's exit is one of its body's nodes", node)
        if type(node.over) is str:
            parts = node.over[1:-1] if node.over.startswith("{") and node.over.endswith("}") else ""
            if not parts or not _NAME.match(parts) or "{" in parts or "}" in parts:
                raise self.fail(
                    f"{at}.over", node.over, "a loop goes through a `{name.path}` reference or a list", node
                )
        elif type(node.over) is not list:
            raise self.fail(f"{at}.over", node.over, "a loop goes through a `{name.path}` reference or a list", node)
        self.finite(f"{at}.over", node.over, node)
        self.whole(
            f"{at}.max_items", node.max_items, 1, MAX_LOOP_ITEMS, f"`max items:` is from 1 to {MAX_LOOP_ITEMS}", node
        )
        if node.at_most is not None:
            self.whole(
                f"{at}.at_most", node.at_most, 1, MAX_LOOP_ITEMS, f"`at most` is from 1 to {MAX_LOOP_ITEMS}", node
            )
        if node.need is not None:
            self.whole(
                f"{at}.need", node.need, 1, MAX_LOOP_ITEMS, f"a loop's `need:` is from 1 to {MAX_LOOP_ITEMS}", node
            )
        if node.need_percent is not None:
            self.whole(f"{at}.need_percent", node.need_percent, 1, 100, "a loop's `need:` share is 1% to 100%", node)

    def plain_step(self, node: ToolNode, addresses: set[tuple[str, str]]) -> bool:
        """Whether ``node`` is a step plainly within bounds, its name now taken: the usual
        step (an address seen before, flat arguments, no preview or check), in a few
        comparisons. False means only "look closely" (:meth:`tool` finds what is wrong)."""
        name, server, tool, args, refs = node.id, node.server, node.tool, node.args, node.refs
        expires, timeout, retries = node.expires_s, node.timeout_s, node.retries
        if not (
            type(name) is str
            and type(server) is str
            and type(tool) is str
            and type(args) is dict
            and type(refs) is list
            and node.preview is None
            and node.check is None
            and node.retries_where is None
            and type(node.without_asking) is bool
            and (expires is None or (type(expires) is int and 0 < expires <= MAX_DURATION))
            and (timeout is None or (type(timeout) is int and 0 < timeout <= MAX_TIMEOUT))
            and type(retries) is int
            and 0 <= retries <= MAX_RETRIES
            and _FREE_NAME.fullmatch(name)
            and name not in self.names
            and (server, tool) in addresses
            and (_PLAIN.issuperset(map(type, args.values())) or _finite(args))
            and all(type(r) is str and _FREE_NAME.fullmatch(r) for r in refs)
        ):
            return False
        self.names.add(name)
        return True

    def tool(self, i: int, node: ToolNode, addresses: set[tuple[str, str]]) -> None:
        at = f"nodes[{i}]"
        self.new_name(f"{at}.id", node.id, node)
        self.call(at, node, node, addresses)
        for which in ("preview", "check"):
            ref = getattr(node, which)
            if ref is not None:
                if type(ref) is not ToolRef:
                    raise self.fail(f"{at}.{which}", ref, f"a {which} is a tool call", node)
                self.call(f"{at}.{which}", ref, node, addresses)
                if ref.where is not None:
                    self.where(f"{at}.{which}.where", ref.where, node)
        expires, timeout, retries = node.expires_s, node.timeout_s, node.retries
        if expires is not None:
            self.seconds(f"{at}.expires_s", expires, MAX_DURATION, "an approval lifetime (`expires:`)", node)
        if timeout is not None:
            self.seconds(f"{at}.timeout_s", timeout, MAX_TIMEOUT, "a step's `timeout:`", node)
        if retries != 0:
            self.whole(
                f"{at}.retries",
                retries,
                1,
                MAX_RETRIES,
                f"`retries:` is a whole number from 1 to {MAX_RETRIES} (0: none)",
                node,
            )
        if node.without_asking is not False:
            self.flag(f"{at}.without_asking", node.without_asking, node)
        if node.retries_where is not None:
            self.where(f"{at}.retries_where", node.retries_where, node)

    def call(self, at: str, ref: ToolNode | ToolRef, node: ToolNode, addresses: set[tuple[str, str]]) -> None:
        """A tool call's address, risk, arguments and the names its templates use."""
        if type(ref.risk) is not str or ref.risk not in RISK_ORDER:
            raise self.fail(f"{at}.risk", ref.risk, f"a risk is one of {', '.join(RISK_ORDER)}", node)
        address = (ref.server, ref.tool)
        if type(ref.server) is not str or type(ref.tool) is not str or address not in addresses:
            if type(ref.server) is str and "." in ref.server:  # `a.b.c` would name server a's tool b.c too
                raise self.fail(
                    f"{at}.server",
                    ref.server,
                    f"a server name has no `.`, so `{ref.server}.{ref.tool}` could be read two ways",
                    node,
                )
            self.text(f"{at}.server", ref.server, _SERVER, "a server's name", node)
            self.text(f"{at}.tool", ref.tool, _TOOL, "a tool's name", node)
            for field, value in ((f"{at}.server", ref.server), (f"{at}.tool", ref.tool)):
                if not value.isprintable():
                    raise self.fail(field, value, "a server's or tool's name holds no hidden character", node)
            addresses.add(address)
        args = ref.args
        if type(args) is not dict:
            raise self.fail(f"{at}.args", args, "a tool's arguments are a JSON object", node)
        if not _PLAIN.issuperset(map(type, args.values())):
            self.finite(f"{at}.args", args, node)
        refs = ref.refs
        if refs:
            self.ids(f"{at}.refs", refs, node, "a list of names")
            for j, used in enumerate(refs):
                if not _FREE_NAME.fullmatch(used):
                    self.name(f"{at}.refs[{j}]", used, node)

    def join(self, i: int, node: JoinNode) -> None:
        at = f"nodes[{i}]"
        if node.block is not None:
            self.new_name(f"{at}.block", node.block, node)
            if node.id != f"join:{node.block}":
                raise self.fail(f"{at}.id", node.id, f"the join of block `{node.block}` is `join:{node.block}`", node)
        elif type(node.id) is not str or not (node.id.startswith("join:") and _COUNTED.fullmatch(node.id, 5)):
            raise self.fail(f"{at}.id", node.id, "an unnamed block's join is `join:N` (N counts from 1)", node)
        self.whole(f"{at}.of", node.of, 1, None, "a join has 1 item or more", node)
        self.whole(f"{at}.need", node.need, 1, node.of, f"`need: K of N` has K from 1 to N ({node.of})", node)
        if type(node.members) is not list or any(
            type(m) is not list or any(type(x) is not str for x in m) for m in node.members
        ):
            raise self.fail(f"{at}.members", node.members, "a list of node ids per item", node)
