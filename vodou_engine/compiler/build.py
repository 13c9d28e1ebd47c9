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
from typing import Any

from lark import Token, Transformer

from . import ast
from .literals import FLAT_PART, LITERALS, MAX_PLAIN_DIGITS, PLAIN, SURROGATE, NotPlain, plain_json
from .source import Source, token_pos
from .words import NAME, split_address

DURATION_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
MAX_DURATION = 365 * 86400
MAX_TIMEOUT = 86400
MAX_RETRIES = 10

_WRITE_FROM = re.compile(r"^(?:(?P<prompt>.*?)\s+)?from\s*\{(?P<inputs>[^{}]*)\}\s*$", re.S)
_STEP_HEAD = re.compile(r"([a-z_][a-z0-9_-]*)[ ]*:[ ]*([^ {]+)[ ]*")


def _token(type_: str, value: str, start_pos: int, line: int, column: int, end_line: int, end_column: int, end_pos: int) -> Token:
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


class _Seq(list):
    """A statement or item list being built by a left-recursive rule."""


class Builder(Transformer):
    """Builds the syntax tree while LALR parses (embedded transformer)."""

    def __init__(self, source: Source):
        super().__init__()
        self.source = source

    # --- JSON -------------------------------------------------------------
    def json_string(self, children):
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
        except ValueError as exc:
            raise self.source.error(
                f"invalid JSON string: {exc.msg}", token_pos(tok), hint="escape a quote as \\\" and a backslash as \\\\"
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

    def json_number(self, children):
        (tok,) = children
        try:
            value = json.loads(tok)
        except ValueError:  # more digits than Python converts (sys.get_int_max_str_digits)
            raise self.source.error(
                f"the number {tok[:20]}… ({len(tok)} characters) is too long", token_pos(tok), hint="write a smaller number, or quote it as text"
            ) from None
        if value in (float("inf"), float("-inf")):
            raise self.source.error(
                f"the number {tok} is too large", token_pos(tok), hint="write a smaller number, or quote it as text"
            )
        return value

    def json_true(self, _):
        return True

    def json_false(self, _):
        return False

    def json_null(self, _):
        return None

    def json_array(self, children):
        return list(children)

    def json_pair(self, children):
        key, value = children
        return self.json_string([key]), value

    def json_object(self, children):
        out: dict[str, Any] = {}
        for key, value in children:
            if key in out:
                raise self.source.error(
                    f"duplicate key {str(key)!r} in JSON object", key.pos, hint="each key may appear once; remove one of them"
                )
            out[str(key)] = value
        return out

    # --- header -----------------------------------------------------------
    def title(self, children):
        (tok,) = children
        return ("title", str.__str__(self.json_string([tok])), token_pos(tok))

    def input_decl(self, children):
        name, default = children
        return ast.InputDecl(str(name), default, default is None and len(children) == 2 and children[1] is None, token_pos(name))

    def inputs(self, children):
        return ("inputs", children, children[0].pos if children else None)

    def recipe_expires(self, children):
        (tok,) = children
        return ("expires", self._duration(tok), token_pos(tok))

    def recipe_model(self, children):
        (tok,) = children
        return ("model", str(tok), token_pos(tok))

    def approvers(self, children):
        return ("approvers", [str(c) for c in children], token_pos(children[0]))

    def _duration(self, tok: Token) -> int:
        n = int(tok[:-1])
        if n <= 0:
            raise self.source.error("a duration must be more than zero", token_pos(tok), hint="write e.g. 15m, 90s, 2h or 1d")
        seconds = n * DURATION_UNITS[tok[-1]]
        if seconds > MAX_DURATION:
            raise self.source.error("a duration longer than 365 days", token_pos(tok), hint="an approval lifetime is at most 365d")
        return seconds

    # --- blocks -------------------------------------------------------------
    @staticmethod
    def _append(children):
        if len(children) == 2 and type(children[0]) is _Seq:
            children[0].append(children[1])
            return children[0]
        return _Seq(children)

    stmts = items = _append  # called once per item: no method in between

    def together(self, children):
        name, items = children
        return self._block("together", name, list(items))

    def then(self, children):
        name, items = children
        return self._block("then", name, list(items))

    def _block(self, kind, name, items):
        first = items[0]
        pos = getattr(first, "pos", None)
        return ast.Block(kind, str(name) if name else None, items, pos, token_pos(name) if name else None)

    def question(self, children):
        (tok,) = children
        text = tok[1:].strip()
        return (text, ast.Pos(tok.line, tok.column, len(tok)))

    def ask(self, children):
        head, *questions = children
        return ast.Ask(questions, token_pos(head))

    def need(self, children):
        head, k, n = children
        return ast.Need(int(k), int(n), ast.Pos(head.line, head.column, n.end_column - head.column if n.end_column else 1))

    # --- steps ----------------------------------------------------------------
    def tool_call(self, children):
        addr, args = children
        server, tool = split_address(str(addr))
        if '"' in addr:
            self._check_quoted(addr, server, tool)
        flat = None
        if args is None:
            args = {}
        elif isinstance(args, Token):  # JSON_FLAT or JSON_LINE (which the lexer made sure decodes)
            flat = plain_json(str(args))
            if flat is None:
                args = self._flat_json(args)
            else:
                args, flat = flat, (str(args), args.line, args.column)
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
                hint="rename the server in the server file (its key under \"mcpServers\") without a dot, e.g. " + repr(server.replace(".", "-")),
            )

    def _flat_json(self, tok: Token) -> dict:
        """Build a one-line JSON object from its token, through the same handlers.

        The JSON_FLAT regex has already checked the shape (an object of
        scalars and arrays of scalars), so a plain scan of its parts is
        enough; strings and numbers go through ``json_string`` and
        ``json_number`` so errors and positions match the general rules.
        """
        raw = str(tok)
        out: dict[str, Any] = {}
        key = None
        array: list | None = None
        for m in FLAT_PART.finditer(raw):
            part = m.group()
            if part in "{}:,":
                continue
            if part == "[":
                array = []
                continue
            if part == "]":
                out[key] = array
                key, array = None, None
                continue
            if part[0] == '"' and "\\" not in part:
                value = ast.JStr(part[1:-1])  # no escapes: the text is the value
                value.pos = ast.Pos(tok.line, tok.column + m.start(), len(part))
                value.raw = part
            elif part[0] == '"':
                value = self.json_string([Token("STRING", part, line=tok.line, column=tok.column + m.start())])
            elif part.isdigit() and len(part) <= MAX_PLAIN_DIGITS:
                value = int(part)
            elif part in LITERALS:
                value = LITERALS[part]
            else:
                value = self.json_number([Token("SIGNED_NUMBER", part, line=tok.line, column=tok.column + m.start())])
            if array is not None:
                array.append(value)
            elif key is None:
                if value in out:
                    raise self.source.error(
                        f"duplicate key {str(value)!r} in JSON object", value.pos, hint="each key may appear once; remove one of them"
                    )
                key = value
            else:
                out[str(key)] = value
                key = None
        return out

    def STEP_NL(self, tok):
        """A STEP_NL token, read as the NAME, TOOL_ADDRESS and JSON_FLAT it starts with.

        Read as the parser takes it, before the indentation after it: that
        is when ``tool_call`` is reduced, on the _NL, when the line is read
        in parts, so errors come in the same order.
        """
        m = _STEP_HEAD.match(tok)
        name, addr = m.group(1, 2)
        line, column = tok.line, tok.column
        server, tool = addr.split(".", 1)
        addr_pos = ast.Pos(line, column + m.start(2), len(addr))
        start = m.end()
        try:  # json finds where the object ends, as it decodes it
            args, end = PLAIN.raw_decode(tok, start)
        except (NotPlain, ValueError):
            args, end = None, self.json_flat.match(tok, start).end()
        raw = tok[start:end]
        if args is None or "\\" in raw:
            json_tok = _token("JSON_FLAT", raw, tok.start_pos + start, line, column + start, line, column + end, tok.start_pos + end)
            call = ast.ToolCall(server, tool, self._flat_json(json_tok), addr_pos)
        else:
            call = ast.ToolCall(server, tool, args, addr_pos, (raw, line, column + start))
        return name, ast.Pos(line, column, len(name)), call

    def flat_step(self, children):
        (name, pos, call), *options = children
        return ast.Step(name, call, [o for o in options if o is not None] if options else options, pos)

    def step(self, children):
        name, action, *options = children
        if isinstance(action, Token):  # WRITE_TEXT
            action = self._write(action)
        options = [o for o in options if o is not None]
        return ast.Step(str(name), action, options, token_pos(name))

    def _write(self, tok: Token) -> ast.Write:
        text = str(tok)[len("write") :].rstrip()
        body = text.strip()
        m = _WRITE_FROM.match(body)
        if not m:
            if "from" in body.split() or "{" in body:
                raise self.source.error(
                    "a write step lists its inputs as `from {a, b}`",
                    token_pos(tok),
                    hint="write e.g. `briefing: write a morning briefing from {calendar, mail}`",
                )
            prompt, inputs = body, []
        else:
            prompt = (m.group("prompt") or "").strip()
            start = tok.column + len("write") + (len(text) - len(text.lstrip())) + m.start("inputs")
            inputs = []
            offset = 0
            raw = m.group("inputs")
            for part in raw.split(","):
                name = part.strip()
                col = start + offset + (len(part) - len(part.lstrip()))
                offset += len(part) + 1
                if not NAME.match(name):
                    raise self.source.error(
                        f"{name!r} is not a step or input name" if name else "empty name in the `from {...}` list",
                        ast.Pos(tok.line, col, max(1, len(name))),
                        hint="names are lower case: letters, digits, _ and -, separated by commas",
                    )
                inputs.append((name, ast.Pos(tok.line, col, len(name))))
        if not prompt:
            raise self.source.error(
                "a write step needs a description of what to write",
                token_pos(tok),
                hint="write e.g. `briefing: write a morning briefing from {calendar, mail}`",
            )
        return ast.Write(prompt, inputs, token_pos(tok, 5))

    def preview(self, children):
        head, call = children
        return ast.Option("preview", call, token_pos(head))

    def check(self, children):
        head, call = children
        return ast.Option("check", call, token_pos(head))

    def expires(self, children):
        (tok,) = children
        return ast.Option("expires", self._duration(tok), token_pos(tok))

    def timeout(self, children):
        (tok,) = children
        seconds = self._duration(tok)
        if seconds > MAX_TIMEOUT:
            raise self.source.error("a step's timeout is at most 1d", token_pos(tok), hint="write e.g. timeout: 30s or timeout: 5m")
        return ast.Option("timeout", seconds, token_pos(tok))

    def retries(self, children):
        (tok,) = children
        n = int(tok)
        if not 1 <= n <= MAX_RETRIES:
            raise self.source.error(f"retries must be from 1 to {MAX_RETRIES}", token_pos(tok), hint="write e.g. retries: 2 (tried again twice, after a pause that doubles each time)")
        keyword = self.source.line(tok.line).find("retries")  # the option's own word, for the caret
        return ast.Option("retries", n, ast.Pos(tok.line, keyword + 1, len("retries")) if keyword >= 0 else token_pos(tok))

    def without_asking(self, children):
        (tok,) = children
        return ast.Option("without_asking", True, token_pos(tok))

    def start(self, children):
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

    def _once(self, existing, what: str, pos: ast.Pos) -> None:
        if existing is not None:
            raise self.source.error(
                f"`{what}` is given twice (first on line {existing[1].line})", pos, hint="keep one of them"
            )
