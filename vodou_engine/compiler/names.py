"""Names and references: every name a recipe declares, and whether a step may name one where it
stands (the reference rule in ``lower.py``'s docstring), with the error and hint when not.

``Lowerer`` (``lower.py``) builds on :class:`Names`: it walks the recipe's structure and asks
here whether each reference it meets is sure to have a value when its step runs.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import Any

from ..errors import RecipeError
from . import ast, template
from .source import Source
from .words import RESERVED


@dataclass(slots=True)
class _Frame:
    uid: int
    index: int


@dataclass(slots=True)
class _Name:
    kind: str  # input | step | block | loopvar
    pos: ast.Pos
    path: tuple[_Frame, ...] = ()
    order: int = 0  # source order among steps, to tell "later" from "parallel"
    loop: int = 0  # a loop variable's: the uid of the loop that binds it


class Names:
    """The names a recipe declares and where each stands; the checks of every reference."""

    def __init__(self, source: Source):
        self.source = source
        self.names: dict[str, _Name] = {}
        self.block_kind: dict[int, str] = {0: "then"}
        self.quorum: dict[int, ast.Need | None] = {}  # together uid -> its `need:` when it may drop items
        self.loop_var: dict[int, str] = {}  # loop uid -> its variable
        self.loop_line: dict[int, int] = {}  # loop uid -> the line of its `for each`

    def error(self, message: str, pos: ast.Pos | None, hint: str | None = None) -> RecipeError:
        return self.source.error(message, pos, hint)

    # --- names ---------------------------------------------------------------
    def _declare_all(self, recipe: ast.Recipe) -> None:
        for decl in recipe.inputs:
            self._declare(decl.name, "input", decl.pos)
        self._declare_items(recipe.items)

    def _declare_items(self, items: list[Any]) -> None:
        # A method, not a nested function: a recursive closure is a reference
        # cycle, and it would keep the whole lowering alive until the cyclic
        # collector runs, which a compile switches off.
        for item in items:
            if isinstance(item, ast.Step):
                self._declare(item.name, "step", item.pos)
            elif isinstance(item, ast.Block):
                if item.name:
                    self._declare(item.name, "block", item.name_pos or item.pos)  # a named block has both
                self._declare_items(item.items)
            elif isinstance(item, ast.Loop):
                self._declare(item.var, "loop variable", item.var_pos)
                self.names[item.var].kind = "loopvar"
                self._declare_items(item.items)

    def _declare(self, name: str, kind: str, pos: ast.Pos) -> None:
        if name in ("preview", "check", "expires", "timeout", "retries"):
            raise self.error(
                f"`{name}:` is a step option, but no tool step is right above it",
                pos,
                hint=f"indent it under the tool step it belongs to; to name a {kind} `{name}`, choose another name",
            )
        if name in RESERVED:
            raise self.error(f"`{name}` is a reserved word and cannot name a {kind}", pos, hint="choose another name")
        prior = self.names.get(name)
        if prior is not None:
            raise self.error(
                f"the name `{name}` is used twice (first on line {prior.pos.line})",
                pos,
                hint="names of steps, blocks and inputs are unique within a recipe; rename one of them",
            )
        self.names[name] = _Name(kind, pos)

    def _nearest(self, name: str) -> str | None:
        close = difflib.get_close_matches(name, list(self.names), n=1, cutoff=0.5)
        return close[0] if close else None

    def _check_ref(self, name: str, pos: ast.Pos, here: tuple[_Frame, ...], me: str, *, droppable_ok: bool) -> None:
        problem = self._ref_problem(name, here, me, droppable_ok)
        if problem is not None:
            raise self.error(problem[0], pos, hint=problem[1])

    def _ref_problem(self, name: str, here: tuple[_Frame, ...], me: str, droppable_ok: bool) -> tuple[str, str] | None:
        """Why ``me`` may not use ``name`` here (message, hint), or None; the caller knows where."""
        info = self.names.get(name)
        if info is None:
            near = self._nearest(name)
            loops = [self.loop_var[f.uid] for f in here if f.uid in self.loop_var]
            if near is None and loops:
                return (
                    f"unknown name `{name}`",
                    f"the loop variable here is `{loops[-1]}`"
                    + (f" (and {', '.join(f'`{v}`' for v in loops[:-1])} outside it)" if len(loops) > 1 else "")
                    + "; refer to it, an input or an earlier step",
                )
            return (
                f"unknown name `{name}`",
                f"did you mean `{near}`?" if near else "refer to an input or an earlier step by its name",
            )
        if info.kind == "input":
            return None
        if info.kind == "loopvar":
            if any(f.uid == info.loop for f in here):
                return None
            return (
                f"`{name}` is the loop variable of the `for each` on line {info.pos.line}; it has a value only inside that block",
                "use it in a step indented under the `for each`; after the block, a body step's name is the list of its per-item outputs",
            )
        if info.kind == "block":
            return (f"`{name}` is a block, not a step", "refer to one of the steps inside it by name")
        if name == me:
            return (f"step `{me}` refers to itself", "a step can only use what ran before it")
        if not info.path:  # declared, not yet lowered: it comes later in the recipe
            return (
                f"`{name}` runs later (line {info.pos.line}), so its value does not exist yet here",
                f"move `{name}` before `{me}`, or refer to a step that runs earlier",
            )
        theirs = info.path
        depth = 0
        while (
            depth < min(len(theirs), len(here))
            and theirs[depth].uid == here[depth].uid
            and theirs[depth].index == here[depth].index
        ):
            depth += 1
        a, b = theirs[depth], here[depth]
        if self.block_kind[a.uid] == "together":
            return (
                f"`{name}` runs at the same time as `{me}` (same `together`), so its value may not exist yet",
                f"move `{me}` into a `then:` after the together, or nest the two in a `then:` inside it",
            )
        if a.index > b.index:
            return (
                f"`{name}` runs after `{me}`, so its value does not exist yet",
                f"move `{name}` before `{me}`",
            )
        if droppable_ok:
            return None
        # From the outside in: a quorum around a loop may drop the loop (its list with it); a
        # loop around a quorum gives a list either way (an item's dropped value is null in it).
        for frame in theirs[depth + 1 :]:
            if self.block_kind[frame.uid] == "each":
                return None  # after the block: the list of its per-item outputs, one per item
            need = self.quorum.get(frame.uid)
            if need is not None:
                return self._droppable(name, me, need)
        return None

    @staticmethod
    def _droppable(name: str, me: str, need: ast.Need) -> tuple[str, str]:
        """Why ``me`` may not rely on ``name``, which the quorum ``need`` may drop: said for what
        uses it (a loop's list, or a tool's arguments), with the `need:` that drops it."""
        dropped = f"`{name}` may be dropped by `need: {need.k} of {need.n}` on line {need.pos.line} (a branch the quorum leaves out has no value)"
        everything = f"make that together need all {need.n} items (`need: {need.n} of {need.n}`, or no `need:`)"
        if me.startswith("each:"):  # a loop's id: its list (`for each x in {name}`, or a list naming it)
            return (
                f"{dropped}, so the list of a `for each` cannot rely on it",
                f"{everything}, or loop in the same branch of the together, after `{name}` (nest the two in a `then:` there)",
            )
        return (
            f"{dropped}, so a tool argument cannot rely on it",
            f"pass it through a `write` step (which is told what is missing), or {everything}",
        )

    def _check_template_refs(
        self, value: dict[str, Any], here: tuple[_Frame, ...], me: str, *, fallback: ast.Pos
    ) -> list[str]:
        names: list[str] = []
        self._walk_json(value, here, me, fallback, names)
        return sorted(set(names))

    def _walk_json(
        self,
        value: dict[str, Any] | list[Any],
        here: tuple[_Frame, ...],
        me: str,
        fallback: ast.Pos,
        names: list[str],
    ) -> None:
        # Strings are checked here, containers walked: a call per scalar
        # would be most of the walk, as most values are plain text.
        for v in value.values() if isinstance(value, dict) else value:
            if isinstance(v, str):
                if "{" in v or "}" in v:  # else no reference, no brace to complain about
                    self._walk_string(v, here, me, fallback, names)
            elif isinstance(v, (dict, list)):
                self._walk_json(v, here, me, fallback, names)

    def _walk_string(self, value: str, here: tuple[_Frame, ...], me: str, fallback: ast.Pos, names: list[str]) -> None:
        try:
            refs = template.ref_names(value)
        except template.TemplateSyntaxError as exc:
            raise self.error(f"in a JSON string: {exc}", _at(value, fallback, exc.offset, 1), hint=exc.hint) from None
        for name in refs:
            problem = self._ref_problem(name, here, me, False)
            if problem is not None:
                # the first reference to it is the first that fails
                start = next(p.start for p in template.parse(value) if isinstance(p, template.Ref) and p.name == name)
                raise self.error(problem[0], _at(value, fallback, start + 1, len(name)), hint=problem[1])
            names.append(name)
        if "." in value and self.loop_var and any(f.uid in self.loop_var for f in here):
            for ref in template.parse(value):
                if isinstance(ref, template.Ref) and ref.path[:1] == ("count",):
                    self._not_by_list(ref, here, value, fallback)

    def _not_by_list(self, ref: template.Ref, here: tuple[_Frame, ...], value: str, fallback: ast.Pos) -> None:
        """Inside a loop, a body step of that loop is this item's value: its list (``.count``)
        exists only after the block."""
        info = self.names.get(ref.name)
        if info is None or info.kind != "step":
            return
        inner = [f for f in info.path if f.uid in self.loop_var]
        for frame in inner[-1:]:  # its innermost loop: the one whose items give it a value each
            if any(f.uid == frame.uid for f in here):
                raise self.error(
                    f"`{ref.name}` is a step of this `for each` (line {self.loop_line[frame.uid]}): inside it, "
                    f"`{{{ref.name}}}` is this item's value, and its list (`.count`) exists only after the block",
                    _at(value, fallback, ref.start + 1, ref.end - ref.start - 2),
                    hint=f"use `{{{ref.name}.count}}` in a step after the block (not indented under the `for each`)",
                )

    # --- lowering ------------------------------------------------------------


def _at(value: str, fallback: ast.Pos, offset: int, width: int) -> ast.Pos:
    """Where character ``offset`` of a JSON string value was written, as near as is known."""
    pos = getattr(value, "pos", None) or fallback
    raw = getattr(value, "raw", None)
    column = _raw_column(raw, offset) if raw is not None else None
    if column is not None:
        return ast.Pos(pos.line, pos.column + column, width)
    return pos


def _raw_column(raw: str, offset: int) -> int | None:
    """Where the decoded string's character ``offset`` is written in the raw JSON token (quotes included)."""
    i, n = 1, 0
    while i < len(raw) - 1:
        if n == offset:
            return i
        if raw[i] != "\\":
            i += 1
        elif raw[i + 1] != "u":
            i += 2
        elif (
            0xD800 <= int(raw[i + 2 : i + 6], 16) < 0xDC00
            and 0xDC00 <= int(raw[i + 8 : i + 12] or "0", 16) < 0xE000
            and raw[i + 6 : i + 8] == "\\u"
        ):
            i += 12  # a surrogate pair decodes to one character
        else:
            i += 6
        n += 1
    return None
