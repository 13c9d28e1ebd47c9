"""Tokens -> syntax tree (compiler/ast.py), while LALR parses.

``Builder`` is lark's embedded transformer: each rule of grammar.lark is
turned into its ast node as soon as it is reduced, so no parse tree is ever
built. The checks that need a value rather than a shape (a duration's
range, a JSON string's escapes, a duplicate key, a write step's inputs, a
header given twice) are made here, where the value's position is known.
"""

from __future__ import annotations

import json
import re
import sys
from typing import Any

from lark import Token, Transformer

from ..bounds import (
    MAX_DURATION,
    MAX_LOOP_ITEMS,
    MAX_RETRIES,
    MAX_TIMEOUT,
)  # the same bounds for a plan from anywhere (bounds.py)
from . import ast
from .literals import FLAT_PART, LITERALS, MAX_PLAIN_DIGITS, PLAIN, SURROGATE, NotPlain, plain_json
from .source import Source, token_pos
from .words import NAME, split_address

DURATION_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}

_WRITE_FROM = re.compile(r"^(?:(?P<prompt>.*?)\s+)?from\s*\{(?P<inputs>[^{}]*)\}\s*$", re.S)
_STEP_HEAD = re.compile(r"([a-z_][a-z0-9_-]*)[ ]*:[ ]*([^ {]+)[ ]*")


def _token(
    type_: str, value: str, start_pos: int, line: int, column: int, end_line: int, end_column: int, end_pos: int
) -> Token:
    """``Token(...)``, without the two calls its ``__new__`` makes to get here."""
    token = str.__new__(Token, value)
    token.type = type_
    token.value = value
    token.start_pos = start_pos
    token.line = line
    token.column = column
    token.end_line = end_line
    token.end_column = end_column
    token.end_pos = end_pos
    return token


class _Seq(list[Any]):
    """A statement or item list being built by a left-recursive rule."""


_Header = tuple[str, Any, ast.Pos]
"""A header line (title, inputs, approval expires, model, approvers): its kind, value and place."""


class Builder(Transformer[Token, ast.Recipe]):
    """Builds the syntax tree while LALR parses (embedded transformer).

    Each method takes the children lark reduced for its rule of grammar.lark
    (tokens, or what the methods of the rules below it returned).
    """

    json_flat: re.Pattern[str]
    """The JSON_FLAT terminal's pattern, from the grammar, set when the parser is built (parser.py)."""

    def __init__(self, source: Source):
        super().__init__()
        self.source = source

    # --- JSON -------------------------------------------------------------
    def json_string(self, children: list[Token]) -> ast.JStr:
        (tok,) = children
        if "\\" not in tok:
            # Nothing to decode: the text between the quotes is the value (a
            # raw control character or surrogate never gets past precheck).
            s = ast.JStr(tok[1:-1])
            s.pos = token_pos(tok)
            s.raw = str(tok)
            return s
        try:
            value = json.loads(tok)
        except json.JSONDecodeError as exc:
            raise self.source.error(
                f"invalid JSON string: {exc.msg}", token_pos(tok), hint='escape a quote as \\" and a backslash as \\\\'
            ) from None
        lone = SURROGATE.search(value)
        if lone:
            raise self.source.error(
                f"a lone surrogate \\u{ord(lone.group()):04x} in a JSON string",
                token_pos(tok),
                hint="write the character itself, or a full pair such as \\ud83d\\ude00",
            )
        s = ast.JStr(value)
        s.pos = token_pos(tok)
        s.raw = str(tok)
        return s

    def json_number(self, children: list[Token]) -> int | float:
        (tok,) = children
        try:
            value: int | float = json.loads(tok)
        except ValueError:  # more digits than Python converts (sys.get_int_max_str_digits)
            raise self.source.error(
                f"the number {tok[:20]}… ({len(tok)} characters) is too long",
                token_pos(tok),
                hint="write a smaller number, or quote it as text",
            ) from None
        if value in (float("inf"), float("-inf")):
            raise self.source.error(
                f"the number {tok} is too large", token_pos(tok), hint="write a smaller number, or quote it as text"
            )
        return value

    def json_true(self, _: list[Token]) -> bool:
        return True

    def json_false(self, _: list[Token]) -> bool:
        return False

    def json_null(self, _: list[Token]) -> None:
        return None

    def json_array(self, children: list[Any]) -> list[Any]:
        return list(children)

    def json_pair(self, children: list[Any]) -> tuple[ast.JStr, Any]:
        key, value = children
        return self.json_string([key]), value

    def json_object(self, children: list[tuple[ast.JStr, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, value in children:
            if key in out:
                raise self.source.error(
                    f"duplicate key {str(key)!r} in JSON object",
                    key.pos,
                    hint="each key may appear once; remove one of them",
                )
            out[str(key)] = value
        return out

    # --- header -----------------------------------------------------------
    def title(self, children: list[Token]) -> _Header:
        (tok,) = children
        return ("title", str.__str__(self.json_string([tok])), token_pos(tok))

    def input_decl(self, children: list[Any]) -> ast.InputDecl:
        name, default = children
        return ast.InputDecl(
            str(name), default, default is None and len(children) == 2 and children[1] is None, token_pos(name)
        )

    def inputs(self, children: list[ast.InputDecl]) -> _Header:
        return ("inputs", children, children[0].pos)  # `input_decl+`: there is a first

    def recipe_expires(self, children: list[Token]) -> _Header:
        (tok,) = children
        return ("expires", self._duration(tok), token_pos(tok))

    def recipe_model(self, children: list[Token]) -> _Header:
        (tok,) = children
        return ("model", str(tok), token_pos(tok))

    def approvers(self, children: list[Token]) -> _Header:
        return ("approvers", [str(c) for c in children], token_pos(children[0]))

    def _duration(self, tok: Token) -> int:
        n = int(tok[:-1])
        if n <= 0:
            raise self.source.error(
                "a duration must be more than zero", token_pos(tok), hint="write e.g. 15m, 90s, 2h or 1d"
            )
        seconds = n * DURATION_UNITS[tok[-1]]
        if seconds > MAX_DURATION:
            raise self.source.error(
                "a duration longer than 365 days", token_pos(tok), hint="an approval lifetime is at most 365d"
            )
        return seconds

    # --- blocks -------------------------------------------------------------
    @staticmethod
    def _append(children: list[Any]) -> _Seq:
        if len(children) == 2 and type(children[0]) is _Seq:
            children[0].append(children[1])
            return children[0]
        return _Seq(children)

    stmts = items = _append  # called once per item: no method in between

    def together(self, children: list[Any]) -> ast.Block:
        name, items = children
        return self._block("together", name, list(items))

    def then(self, children: list[Any]) -> ast.Block:
        name, items = children
        return self._block("then", name, list(items))

    def _block(self, kind: str, name: Token | None, items: list[Any]) -> ast.Block:
        pos: ast.Pos = items[0].pos  # every kind of item (a step, a block, ask, need) has its place
        return ast.Block(kind, str(name) if name else None, items, pos, token_pos(name) if name else None)

    def question(self, children: list[Token]) -> tuple[str, ast.Pos]:
        (tok,) = children
        text = tok[1:].strip()
        return (text, token_pos(tok))  # a QUESTION is never empty: the caret is as wide as the token

    def ask(self, children: list[Any]) -> ast.Ask:
        head, *questions = children
        return ast.Ask(questions, token_pos(head))

    def need(self, children: list[Token]) -> ast.Need:
        head, k, n = children
        at = token_pos(head)
        return ast.Need(int(k), int(n), ast.Pos(at.line, at.column, n.end_column - at.column if n.end_column else 1))

    def need_all(self, children: list[Token]) -> ast.Need:
        head, k, every = children
        at = token_pos(head)
        return ast.Need(
            int(k), None, ast.Pos(at.line, at.column, every.end_column - at.column if every.end_column else 1)
        )

    def need_percent(self, children: list[Token]) -> ast.Need:
        head, pct = children
        at = token_pos(head)
        value = int(pct[:-1])
        if not 1 <= value <= 100:
            raise self.source.error(
                f"`need: {pct}` is not a share of the items",
                token_pos(pct),
                hint="write a percentage from 1% to 100%, or `need: K of all`",
            )
        return ast.Need(
            0, None, ast.Pos(at.line, at.column, pct.end_column - at.column if pct.end_column else 1), value
        )

    # --- loops ----------------------------------------------------------------
    def foreach(self, children: list[Any]) -> ast.Loop:
        head, var, source, items = children
        at = token_pos(head)
        if isinstance(source, Token) and source.type == "LOOP_REF":
            ref, literal, where = str(source)[1:-1], None, token_pos(source)
        else:
            ref, literal = None, source
            vat = token_pos(var)
            line = self.source.line(vat.line)
            m = re.compile(r"[ ]+in[ ]+").match(line, vat.column - 1 + len(var))
            where = ast.Pos(vat.line, (m.end() + 1) if m else vat.column)
        return ast.Loop(str(var), token_pos(var), ref, literal, where, list(items), at)

    def at_most(self, children: list[Token]) -> ast.LoopOption:
        head, n, _ = children
        return self._loop_option("at_most", head, n, "at most", "write e.g. `at most 4 at a time`")

    def max_items(self, children: list[Token]) -> ast.LoopOption:
        head, n = children
        return self._loop_option(
            "max_items", head, n, "max items", f"write e.g. `max items: 500` (at most {MAX_LOOP_ITEMS})"
        )

    def _loop_option(self, kind: str, head: Token, n: Token, what: str, hint: str) -> ast.LoopOption:
        value = int(n)
        top = MAX_LOOP_ITEMS
        if not 1 <= value <= top:
            raise self.source.error(f"`{what}` is a number from 1 to {top}", token_pos(n), hint=hint)
        return ast.LoopOption(kind, value, token_pos(head))

    # --- steps ----------------------------------------------------------------
    def tool_call(self, children: list[Any]) -> ast.ToolCall:
        addr, args = children
        server, tool = split_address(str(addr))
        if '"' in addr:
            self._check_quoted(addr, server, tool)
        flat = None
        if args is None:
            args = {}
        elif isinstance(args, Token):  # JSON_FLAT or JSON_LINE (which the lexer made sure decodes)
            plain = plain_json(str(args))
            if plain is None:
                args = self._flat_json(args)
            else:
                at = token_pos(args)
                args, flat = plain, (str(args), at.line, at.column)
        return ast.ToolCall(server, tool, args, token_pos(addr), flat)

    def _check_quoted(self, addr: Token, server: str, tool: str) -> None:
        """A quoted name must be one a person can read as written, and a server's must
        keep ``SERVER.TOOL`` (the policy file's key, the card) one way to read."""
        for name in (server, tool):
            odd = next((ch for ch in name if not ch.isprintable()), None)
            if odd is not None:
                raise self.source.error(
                    f"the name {name!r} in this tool address holds an invisible character (U+{ord(odd):04X})",
                    token_pos(addr),
                    hint="write the name with visible characters only; rename it in the server file if that is where it comes from",
                )
        if "." in server:
            raise self.source.error(
                f"the server name {server!r} has a `.`, so `{server}.{tool}` could be read two ways",
                token_pos(addr),
                hint='rename the server in the server file (its key under "mcpServers") without a dot, e.g. '
                + repr(server.replace(".", "-")),
            )

    def _flat_json(self, tok: Token) -> dict[str, Any]:
        """Build a one-line JSON object from its token, through the same handlers.

        The JSON_FLAT regex has already checked the shape (an object of
        scalars and arrays of scalars), so a plain scan of its parts is
        enough; strings and numbers go through ``json_string`` and
        ``json_number`` so errors and positions match the general rules.
        """
        raw = str(tok)
        at = token_pos(tok)
        out: dict[str, Any] = {}
        key: str | None = None
        array: list[Any] | None = None
        value: Any  # a JSON string (with its place) or scalar
        for m in FLAT_PART.finditer(raw):
            part = m.group()
            if part in "{}:,":
                continue
            if part == "[":
                array = []
                continue
            if part == "]":
                assert key is not None, "JSON_FLAT: an array is only ever a value"
                out[key] = array
                key, array = None, None
                continue
            if part[0] == '"' and "\\" not in part:
                value = ast.JStr(part[1:-1])  # no escapes: the text is the value
                value.pos = ast.Pos(at.line, at.column + m.start(), len(part))
                value.raw = part
            elif part[0] == '"':
                value = self.json_string([Token("STRING", part, line=at.line, column=at.column + m.start())])
            elif part.isdigit() and len(part) <= MAX_PLAIN_DIGITS:
                value = int(part)
            elif part in LITERALS:
                value = LITERALS[part]
            else:
                value = self.json_number([Token("SIGNED_NUMBER", part, line=at.line, column=at.column + m.start())])
            if array is not None:
                array.append(value)
            elif key is None:
                if value in out:
                    raise self.source.error(
                        f"duplicate key {str(value)!r} in JSON object",
                        value.pos,
                        hint="each key may appear once; remove one of them",
                    )
                key = value
            else:
                out[str(key)] = value
                key = None
        return out

    def STEP_NL(self, tok: Token) -> tuple[str, ast.Pos, ast.ToolCall]:  # noqa: N802 - lark calls a terminal's callback by the terminal's name
        """A STEP_NL token, read as the NAME, TOOL_ADDRESS and JSON_FLAT it starts with.

        Read as the parser takes it, before the indentation after it: that
        is when ``tool_call`` is reduced, on the _NL, when the line is read
        in parts, so errors come in the same order.
        """
        m = _STEP_HEAD.match(tok)
        line, column, start_pos = tok.line, tok.column, tok.start_pos
        assert m is not None, "STEP_NL starts with a name, `:` and a tool address"
        assert line is not None and column is not None and start_pos is not None, "the lexer places every token"
        name, addr = m.group(1, 2)
        # one string per server and per tool name, not one per step: a recipe of 100,000 steps
        # on one tool would otherwise hold 200,000 copies of two words in its plan
        server, tool = (sys.intern(part) for part in addr.split(".", 1))
        addr_pos = ast.Pos(line, column + m.start(2), len(addr))
        start = m.end()
        try:  # json finds where the object ends, as it decodes it
            args, end = PLAIN.raw_decode(tok, start)
        except (NotPlain, ValueError):
            flat = self.json_flat.match(tok, start)
            assert flat is not None, "STEP_NL holds a JSON_FLAT after the tool address"
            args, end = None, flat.end()
        raw = tok[start:end]
        if args is None or "\\" in raw:
            json_tok = _token(
                "JSON_FLAT", raw, start_pos + start, line, column + start, line, column + end, start_pos + end
            )
            call = ast.ToolCall(server, tool, self._flat_json(json_tok), addr_pos)
        else:
            call = ast.ToolCall(server, tool, args, addr_pos, (raw, line, column + start))
        return name, ast.Pos(line, column, len(name)), call

    def flat_step(self, children: list[Any]) -> ast.Step:
        (name, pos, call), *options = children
        return ast.Step(name, call, [o for o in options if o is not None] if options else options, pos)

    def step(self, children: list[Any]) -> ast.Step:
        name, action, *options = children
        if isinstance(action, Token):  # WRITE_TEXT
            action = self._write(action)
        options = [o for o in options if o is not None]
        return ast.Step(str(name), action, options, token_pos(name))

    def _write(self, tok: Token) -> ast.Write:
        text = str(tok)[len("write") :].rstrip()
        body = text.strip()
        at = token_pos(tok)
        inputs: list[tuple[str, ast.Pos]] = []
        m = _WRITE_FROM.match(body)
        if not m:
            if "from" in body.split() or "{" in body:
                raise self.source.error(
                    "a write step lists its inputs as `from {a, b}`",
                    token_pos(tok),
                    hint="write e.g. `briefing: write a morning briefing from {calendar, mail}`",
                )
            prompt = body
        else:
            prompt = (m.group("prompt") or "").strip()
            start = at.column + len("write") + (len(text) - len(text.lstrip())) + m.start("inputs")
            offset = 0
            raw = m.group("inputs")
            for part in raw.split(","):
                name = part.strip()
                col = start + offset + (len(part) - len(part.lstrip()))
                offset += len(part) + 1
                if not NAME.match(name):
                    raise self.source.error(
                        f"{name!r} is not a step or input name" if name else "empty name in the `from {...}` list",
                        ast.Pos(at.line, col, max(1, len(name))),
                        hint="names are lower case: letters, digits, _ and -, separated by commas",
                    )
                inputs.append((name, ast.Pos(at.line, col, len(name))))
        if not prompt:
            raise self.source.error(
                "a write step needs a description of what to write",
                token_pos(tok),
                hint="write e.g. `briefing: write a morning briefing from {calendar, mail}`",
            )
        return ast.Write(prompt, inputs, token_pos(tok, 5))

    def preview(self, children: list[Any]) -> ast.Option:
        head, call = children
        return ast.Option("preview", call, token_pos(head))

    def check(self, children: list[Any]) -> ast.Option:
        head, call = children
        return ast.Option("check", call, token_pos(head))

    def expires(self, children: list[Token]) -> ast.Option:
        (tok,) = children
        return ast.Option("expires", self._duration(tok), token_pos(tok))

    def timeout(self, children: list[Token]) -> ast.Option:
        (tok,) = children
        seconds = self._duration(tok)
        if seconds > MAX_TIMEOUT:
            raise self.source.error(
                "a step's timeout is at most 1d", token_pos(tok), hint="write e.g. timeout: 30s or timeout: 5m"
            )
        return ast.Option("timeout", seconds, token_pos(tok))

    def retries(self, children: list[Token]) -> ast.Option:
        (tok,) = children
        at = token_pos(tok)
        n = int(tok)
        if not 1 <= n <= MAX_RETRIES:
            raise self.source.error(
                f"retries must be from 1 to {MAX_RETRIES}",
                token_pos(tok),
                hint="write e.g. retries: 2 (tried again twice, after a pause that doubles each time)",
            )
        keyword = self.source.line(at.line).find("retries")  # the option's own word, for the caret
        return ast.Option("retries", n, ast.Pos(at.line, keyword + 1, len("retries")) if keyword >= 0 else at)

    def without_asking(self, children: list[Token]) -> ast.Option:
        (tok,) = children
        return ast.Option("without_asking", True, token_pos(tok))

    def start(self, children: list[Any]) -> ast.Recipe:
        recipe = ast.Recipe()
        for child in (children[-1] or ()) if children else ():
            if isinstance(child, tuple):
                kind, value, pos = child
                recipe.headers.append((kind, pos))
                if kind == "title":
                    self._once(recipe.title, "recipe title", pos)
                    recipe.title = (value, pos)
                elif kind == "inputs":
                    recipe.inputs.extend(value)
                elif kind == "expires":
                    self._once(recipe.expires, "approval expires", pos)
                    recipe.expires = (value, pos)
                elif kind == "model":
                    self._once(recipe.model, "model", pos)
                    recipe.model = (value, pos)
                elif kind == "approvers":
                    self._once(recipe.approvers, "approvers", pos)
                    recipe.approvers = (value, pos)
            else:
                recipe.items.append(child)
        return recipe

    def _once(self, existing: tuple[Any, ast.Pos] | None, what: str, pos: ast.Pos) -> None:
        if existing is not None:
            raise self.source.error(
                f"`{what}` is given twice (first on line {existing[1].line})", pos, hint="keep one of them"
            )
