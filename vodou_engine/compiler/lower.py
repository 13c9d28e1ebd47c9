"""Syntax tree -> plan nodes, with every semantic check of the language.

Lowering gives each step its ``needs`` (what must finish first), turns each
``together`` into a join node, and checks names and references. It knows
nothing of tools: risk and approval gates are the graph builder's business.

Reference rule: a tool argument may name an input, or a step that is sure to
have finished when the tool runs. "Sure" fails in two ways: the step runs at
the same time or later, or a quorum join (``need: K of N`` with K < N) may
drop it. A ``write`` may name a droppable step: it is told what is missing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..bounds import DEFAULT_LOOP_ITEMS
from ..errors import RecipeError
from ..plan import Input, JoinNode, LoopNode, Options, QuestionNode, ToolNode, ToolRef, Where, WriteNode
from . import ast, template
from .literals import positioned_args
from .names import Names, _Frame
from .source import Source

NO_NAMES: list[str] = []
"""The one empty list every step with no needs or no references shares, as NO_ARGS is the one
empty dict of every call without arguments: a plan is never changed once built (its
fingerprint covers it), and a together of 100,000 steps would otherwise hold 300,000 empty
containers, about 170 bytes a step."""
NO_ARGS: dict[str, Any] = {}


@dataclass(slots=True)
class Lowered:
    nodes: list[Any]
    inputs: list[Input]
    options: Options
    title: str | None


class Lowerer(Names):
    def __init__(self, source: Source):
        super().__init__(source)
        self.nodes: list[Any] = []
        self._uid = 0
        self._questions = 0
        self._joins = 0
        self._loops = 0
        self._order = 0

    def lower(self, recipe: ast.Recipe) -> Lowered:
        self._declare_all(recipe)
        if not any(not isinstance(i, ast.Need) for i in recipe.items):
            first = recipe.headers[0][1] if recipe.headers else (recipe.items[0].pos if recipe.items else None)
            raise self.error("the recipe has no steps", first or ast.Pos(1, 1), hint="add at least one step")
        self._sequence(recipe.items, 0, [], ())
        inputs = [Input(d.name, _plain(d.default), d.required) for d in recipe.inputs]
        options = Options(
            approval_expires_s=recipe.expires[0] if recipe.expires else 900,
            approvers=list(recipe.approvers[0]) if recipe.approvers else [],
            model=recipe.model[0] if recipe.model else None,
        )
        return Lowered(self.nodes, inputs, options, recipe.title[0] if recipe.title else None)

    def _new_uid(self, kind: str) -> int:
        self._uid += 1
        self.block_kind[self._uid] = kind
        return self._uid

    def _sequence(self, items: list[Any], uid: int, needs: list[str], path: tuple[_Frame, ...]) -> list[str]:
        index = 0
        for i, item in enumerate(items):
            if type(item) is ast.Step:  # most items, straight to the point
                needs = [self._step(item, needs, (*path, _Frame(uid, index)))]
                index += 1
                continue
            if isinstance(item, ast.Need):
                raise self.error(
                    "`need:` belongs inside a `together` block, or first in the `then:` right after one",
                    item.pos,
                    hint="move it into the together it is the join rule of",
                )
            if isinstance(item, ast.LoopOption):
                raise self._loop_option_outside(item)
            if isinstance(item, ast.Loop):
                needs = self._loop(item, needs, (*path, _Frame(uid, index)))
                index += 1
                continue
            follow = items[i + 1] if i + 1 < len(items) else None
            if isinstance(item, ast.Block) and item.kind == "together":
                after = follow.items[0] if isinstance(follow, ast.Block) and follow.kind == "then" else None
                needs = self._together(
                    item, needs, (*path, _Frame(uid, index)), after if isinstance(after, ast.Need) else None
                )
            elif isinstance(item, ast.Block):
                body = item.items
                consumed = (
                    isinstance(body[0], ast.Need)
                    and i > 0
                    and isinstance(items[i - 1], ast.Block)
                    and items[i - 1].kind == "together"
                )
                if consumed:
                    body = body[1:]
                    if not body:
                        raise self.error(
                            "this `then:` holds only a `need:`; it needs at least one step",
                            items[i].items[0].pos,
                            hint="put the steps that use the join's results under it",
                        )
                uid2 = self._new_uid("then")
                needs = self._sequence(body, uid2, needs, (*path, _Frame(uid, index)))
            else:
                needs = self._leaf(item, needs, (*path, _Frame(uid, index)))
            index += 1
        if index == 0:
            raise self.error("this block has no steps", None, hint="indent at least one step under it")
        return needs

    def _together(
        self, block: ast.Block, needs: list[str], path: tuple[_Frame, ...], need_after: ast.Need | None
    ) -> list[str]:
        uid = self._new_uid("together")
        items = [i for i in block.items if not isinstance(i, ast.Need)]
        inner = [i for i in block.items if isinstance(i, ast.Need)]
        second = inner[1] if len(inner) > 1 else need_after if inner else None
        if second is not None:
            raise self.error("this together has two `need:` lines", second.pos, hint="keep one join rule per together")
        need = inner[0] if inner else need_after
        n = len(items)
        if not items:
            raise self.error(
                "this together has no steps", need.pos if need else block.pos, hint="indent its steps under it"
            )
        if need is not None and need.n is None:
            raise self.error(
                "`need: K of all` and `need: N%` are the quorum of a `for each`; a together counts its items",
                need.pos,
                hint=f"write `need: K of {n}` for this together",
            )
        for item in items:
            if isinstance(item, ast.LoopOption):
                raise self._loop_option_outside(item)
        if need is not None:
            if need.n != n:
                raise self.error(
                    f"`need: {need.k} of {need.n}` but this together has {n} item{'s' if n != 1 else ''}",
                    need.pos,
                    hint=f"write `need: {min(need.k, n)} of {n}`, or add or remove items so there are {need.n}",
                )
            if not 1 <= need.k <= need.n:
                raise self.error(
                    f"`need: {need.k} of {need.n}` cannot be met"
                    if need.k > need.n
                    else f"`need: 0 of {need.n}` would wait for nothing",
                    need.pos,
                    hint=f"K must be between 1 and {n}",
                )
        k = need.k if need else n
        self.quorum[uid] = need if k < n else None
        exits: list[str] = []
        members: list[list[str]] = []
        for index, item in enumerate(items):
            start = len(self.nodes)
            frame = (*path, _Frame(uid, index))
            if isinstance(item, ast.Block) and item.kind == "together":
                out = self._together(item, needs, frame, None)
            elif isinstance(item, ast.Loop):
                out = self._loop(item, needs, frame)
            elif isinstance(item, ast.Block):
                out = self._sequence(item.items, self._new_uid("then"), needs, frame)
            else:
                out = self._leaf(item, needs, frame)
            exits.append(out[0])
            members.append([node.id for node in self.nodes[start:]])
        if block.name:
            join_id = f"join:{block.name}"
            self.names[block.name].path = path
        else:
            self._joins += 1
            join_id = f"join:{self._joins}"
        pos = need.pos if need else (block.name_pos or block.pos)
        self.nodes.append(
            JoinNode(
                id=join_id,
                needs=exits,
                need=k,
                of=n,
                members=members,
                block=block.name,
                where=Where(pos.line, pos.column) if pos else None,
            )
        )
        return [join_id]

    def _loop_option_outside(self, item: ast.LoopOption) -> RecipeError:
        what = "at most N at a time" if item.kind == "at_most" else "max items: N"
        return self.error(
            f"`{what}` belongs to a `for each` block",
            item.pos,
            hint="indent it under the `for each` whose items it limits",
        )

    def _loop(self, loop: ast.Loop, needs: list[str], path: tuple[_Frame, ...]) -> list[str]:
        """A ``for each``: its body lowered as a sequence of its own (nothing before it, the
        loop node after the nodes that supply its list), the loop node put before the body."""
        uid = self._new_uid("each")
        self.loop_var[uid] = loop.var
        self.loop_line[uid] = loop.pos.line
        self.names[loop.var].loop = uid
        self._loops += 1
        loop_id = f"each:{self._loops}"
        at_most = max_items = None
        need: ast.Need | None = None
        body: list[Any] = []
        for item in loop.items:
            if isinstance(item, ast.LoopOption):
                if (item.kind == "at_most" and at_most) or (item.kind == "max_items" and max_items):
                    raise self.error(
                        f"this `for each` has two `{'at most' if item.kind == 'at_most' else 'max items'}` lines",
                        item.pos,
                        hint="keep one of them",
                    )
                if item.kind == "at_most":
                    at_most = item
                else:
                    max_items = item
            elif isinstance(item, ast.Need):
                if need is not None:
                    raise self.error("this `for each` has two `need:` lines", item.pos, hint="keep one quorum per loop")
                if item.n is not None:
                    raise self.error(
                        f"`need: {item.k} of {item.n}`: a loop's number of items is known only at run time",
                        item.pos,
                        hint=f"write `need: {item.k} of all`, or a share such as `need: 50%`",
                    )
                if item.percent is None and item.k < 1:
                    raise self.error("`need: 0 of all` would wait for nothing", item.pos, hint="K is 1 or more")
                need = item
            else:
                body.append(item)
        if not body:
            raise self.error(
                "this `for each` has no steps", loop.pos, hint="indent the steps to run for each item under it"
            )
        # where the list comes from: checked as a reference from the loop's own place
        if loop.ref is not None:
            name = loop.ref.split(".", 1)[0]
            problem = self._ref_problem(name, path, loop_id, False)
            if problem is not None:
                raise self.error(
                    problem[0], ast.Pos(loop.source_pos.line, loop.source_pos.column + 1, len(name)), problem[1]
                )
            over: Any = "{" + loop.ref + "}"
            over_text = loop.ref
        else:
            if not isinstance(loop.literal, list):
                kind = {dict: "a JSON object", str: "a string", bool: "true or false", type(None): "null"}.get(
                    type(loop.literal), "a number"
                )
                if isinstance(loop.literal, str):
                    kind = "a string"
                raise self.error(
                    f"`for each` goes through a list, and this is {kind}",
                    loop.source_pos,
                    hint='write a JSON list such as ["a", "b"], or a reference to one such as {unread.messages}',
                )
            self._check_template_refs({"": loop.literal}, path, loop_id, fallback=loop.source_pos)
            over = _plain(loop.literal)
            text = template.compact(over)
            over_text = text if len(text) <= 40 else text[:37] + "…"
        start = len(self.nodes)
        exits = self._sequence(body, uid, [], path)
        inner = self.nodes[start:]
        nested = {m for n in inner if isinstance(n, LoopNode) for m in n.body}
        members = [n.id for n in inner if n.id not in nested]
        where = Where(loop.pos.line, loop.pos.column)
        node = LoopNode(
            id=loop_id,
            var=loop.var,
            over=over,
            over_text=over_text,
            body=members,
            exit=exits[0],
            needs=list(needs),
            at_most=at_most.value if at_most else None,
            need=need.k if need is not None and need.percent is None else None,
            need_percent=need.percent if need is not None else None,
            max_items=max_items.value if max_items else DEFAULT_LOOP_ITEMS,
            where=where,
        )
        self.nodes.insert(start, node)
        return [loop_id]

    def _leaf(self, item: ast.Ask | ast.Step, needs: list[str], path: tuple[_Frame, ...]) -> list[str]:
        if isinstance(item, ast.Ask):
            if not item.questions:
                raise self.error("`ask me:` has no questions", item.pos, hint="add lines like `- post to #daily?`")
            for text, pos in item.questions:
                if not text:
                    raise self.error("an empty question", pos, hint="write the question after `- `")
                self._questions += 1
                qid = f"ask:{self._questions}"
                self.nodes.append(QuestionNode(id=qid, text=text, needs=list(needs), where=Where(pos.line, pos.column)))
                needs = [qid]
            return needs
        assert isinstance(item, ast.Step)
        return [self._step(item, needs, path)]

    def _step(self, step: ast.Step, needs: list[str], path: tuple[_Frame, ...]) -> str:
        self._order += 1
        info = self.names[step.name]
        where = Where(step.pos.line, step.pos.column)
        action = step.action
        node: WriteNode | ToolNode
        if isinstance(action, ast.Write):
            for opt in step.options:
                raise self.error(
                    f"`{opt.kind.replace('_', ' ')}` applies to tool steps, not to `write`",
                    opt.pos,
                    hint="a write step has no effect outside the engine, so it has nothing to preview, check or approve",
                )
            inputs = []
            for name, pos in action.inputs:
                self._check_ref(name, pos, path, step.name, droppable_ok=True)
                if name in inputs:
                    raise self.error(f"`{name}` is listed twice", pos, hint="list each input once")
                inputs.append(name)
            node = WriteNode(id=step.name, prompt=action.prompt, inputs=inputs, needs=list(needs), where=where)
        else:
            args, refs = self._call_args(action, path, step.name)
            preview = check = expires = timeout = None
            retries = 0
            without = False
            seen: dict[str, ast.Pos] = {}
            for opt in step.options:
                if opt.kind in seen:
                    raise self.error(
                        f"`{opt.kind.replace('_', ' ')}` is given twice for `{step.name}` (first on line {seen[opt.kind].line})",
                        opt.pos,
                        hint="keep one of them",
                    )
                seen[opt.kind] = opt.pos
                if opt.kind in ("preview", "check"):
                    call: ast.ToolCall = opt.value
                    a, r = self._call_args(call, path, step.name)
                    ref = ToolRef(
                        server=call.server, tool=call.tool, args=a, refs=r, where=Where(call.pos.line, call.pos.column)
                    )
                    if opt.kind == "preview":
                        preview = ref
                    else:
                        check = ref
                elif opt.kind == "expires":
                    expires = opt.value
                elif opt.kind == "timeout":
                    timeout = opt.value
                elif opt.kind == "retries":
                    retries = opt.value
                else:
                    without = True
            node = ToolNode(
                id=step.name,
                server=action.server,
                tool=action.tool,
                risk="write",
                risk_source="not assessed",
                needs=list(needs) if needs else NO_NAMES,
                args=args or NO_ARGS,
                refs=refs or NO_NAMES,
                preview=preview,
                check=check,
                expires_s=expires,
                without_asking=without,
                timeout_s=timeout,
                retries=retries,
                retries_where=Where(seen["retries"].line, seen["retries"].column) if "retries" in seen else None,
                where=where,
            )
        info.path = path
        self.nodes.append(node)
        return step.name

    def _call_args(self, call: ast.ToolCall, path: tuple[_Frame, ...], me: str) -> tuple[dict[str, Any], list[str]]:
        if not isinstance(call.args, dict):
            raise self.error("tool arguments must be a JSON object `{...}`", call.pos, hint='write e.g. {"query": "x"}')
        if call.flat is None:
            refs = self._check_template_refs(call.args, path, me, fallback=call.pos)
            return _plain(call.args), refs
        # Plain values without positions: check them as they are, and only
        # if that fails, check them again with positions, for the error.
        try:
            refs = self._check_template_refs(call.args, path, me, fallback=call.pos)
        except RecipeError:
            self._check_template_refs(positioned_args(call), path, me, fallback=call.pos)
            raise
        return call.args, refs


def _plain(value: Any) -> Any:
    """Drop source positions: plain JSON values for the plan."""
    if isinstance(value, str):
        return str.__str__(value) if type(value) is not str else value
    if isinstance(value, dict):
        return {str.__str__(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value
