"""Recipe text -> syntax tree, with errors a person can act on.

The grammar lives in ``grammar.lark`` (package data) and is parsed LALR with
the transformer embedded, so no parse tree is built: for a 10,000-step recipe
that halves the time. Lark's own exceptions never leave this module; each is
turned into a ``RecipeError`` with line, column, caret and a hint.
"""

from __future__ import annotations

import json
import re
import threading
from functools import lru_cache
from importlib import resources
from typing import Any, Iterator

from lark import Lark, Token, Transformer
from lark.exceptions import UnexpectedCharacters, UnexpectedEOF, UnexpectedInput, UnexpectedToken
from lark.indenter import Indenter

from ..errors import RecipeError
from . import ast

DURATION_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


class Source:
    """The text being compiled and where it came from, for error messages."""

    def __init__(self, text: str, path: str | None):
        self.text = text
        self.path = path
        self._lines: list[str] | None = None

    def line(self, n: int) -> str:
        if self._lines is None:
            self._lines = self.text.split("\n")
        return self._lines[n - 1] if 0 < n <= len(self._lines) else ""

    def error(self, message: str, pos: ast.Pos | None, hint: str | None = None, cls=RecipeError) -> RecipeError:
        if pos is None:
            return cls(message, path=self.path, hint=hint)
        return cls(
            message,
            path=self.path,
            line=pos.line,
            column=pos.column,
            source_line=self.line(pos.line),
            hint=hint,
            width=pos.width,
        )


class _Indenter(Indenter):
    """Python-style blocks, with errors instead of asserts.

    Newlines inside ``{`` or ``[`` are ignored so JSON can span lines; the
    opening bracket is remembered so an unclosed one can be pointed at.
    """

    NL_type = "_NL"
    OPEN_PAREN_types = ["LBRACE", "LSQB"]
    CLOSE_PAREN_types = ["RBRACE", "RSQB"]
    INDENT_type = "_INDENT"
    DEDENT_type = "_DEDENT"
    tab_len = 8

    def process(self, stream: Iterator[Token]) -> Iterator[Token]:
        self.paren_level = 0
        self.indent_level = [0]
        self.opened: list[Token] = []
        return self._run(stream)

    def _run(self, stream: Iterator[Token]) -> Iterator[Token]:
        token = None
        for token in stream:
            if token.type == "_NL":
                yield from self._newline(token)
                continue
            yield token
            if token.type in ("LBRACE", "LSQB"):
                self.paren_level += 1
                self.opened.append(token)
            elif token.type in ("RBRACE", "RSQB") and self.paren_level:
                self.paren_level -= 1
                self.opened.pop()
        if self.opened:
            raise _Unclosed(self.opened[-1])
        while len(self.indent_level) > 1:
            self.indent_level.pop()
            yield Token.new_borrow_pos("_DEDENT", "", token) if token else Token("_DEDENT", "")

    def _newline(self, token: Token) -> Iterator[Token]:
        if self.paren_level > 0:
            return
        yield token
        if "\n" not in token:
            return  # a comment on the first line: no indentation to read
        indent = len(token.rsplit("\n", 1)[1])
        if indent > self.indent_level[-1]:
            self.indent_level.append(indent)
            yield Token.new_borrow_pos("_INDENT", "", token)
            return
        while indent < self.indent_level[-1]:
            self.indent_level.pop()
            yield Token.new_borrow_pos("_DEDENT", "", token)
        if indent != self.indent_level[-1]:
            raise _BadDedent(token, indent, self.indent_level[-1])


class _Unclosed(Exception):
    def __init__(self, token: Token):
        self.token = token


class _BadDedent(Exception):
    def __init__(self, token: Token, indent: int, expected: int):
        self.token = token
        self.indent = indent
        self.expected = expected


def _pos(tok: Token, width: int | None = None) -> ast.Pos:
    return ast.Pos(tok.line, tok.column, width if width is not None else max(1, len(tok)))


_WRITE_FROM = re.compile(r"^(?P<prompt>.*?)\s+from\s*\{(?P<inputs>[^{}]*)\}\s*$", re.S)
_NAME = re.compile(r"[a-z_][a-z0-9_-]*\Z")


class _Build(Transformer):
    """Builds the syntax tree while LALR parses (embedded transformer)."""

    def __init__(self, source: Source):
        super().__init__()
        self.source = source

    # --- JSON -------------------------------------------------------------
    def json_string(self, children):
        (tok,) = children
        try:
            value = json.loads(tok)
        except ValueError as exc:
            raise self.source.error(
                f"invalid JSON string: {exc.msg}", _pos(tok), hint="escape a quote as \\\" and a backslash as \\\\"
            ) from None
        s = ast.JStr(value)
        s.pos = _pos(tok)
        s.raw = str(tok)
        return s

    def json_number(self, children):
        (tok,) = children
        return json.loads(tok)

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
        return ("title", json.loads(tok), _pos(tok))

    def input_decl(self, children):
        name, default = children
        return ast.InputDecl(str(name), default, default is None and len(children) == 2 and children[1] is None, _pos(name))

    def inputs(self, children):
        return ("inputs", children, children[0].pos if children else None)

    def recipe_expires(self, children):
        (tok,) = children
        return ("expires", self._duration(tok), _pos(tok))

    def approvers(self, children):
        return ("approvers", [str(c) for c in children], _pos(children[0]))

    def _duration(self, tok: Token) -> int:
        n = int(tok[:-1])
        if n <= 0:
            raise self.source.error("a duration must be more than zero", _pos(tok), hint="write e.g. 15m, 90s, 2h or 1d")
        return n * DURATION_UNITS[tok[-1]]

    # --- blocks -------------------------------------------------------------
    def together(self, children):
        name, *items = children
        return self._block("together", name, items)

    def then(self, children):
        name, *items = children
        return self._block("then", name, items)

    def _block(self, kind, name, items):
        first = items[0]
        pos = getattr(first, "pos", None)
        return ast.Block(kind, str(name) if name else None, items, pos, _pos(name) if name else None)

    def question(self, children):
        (tok,) = children
        text = tok[1:].strip()
        return (text, ast.Pos(tok.line, tok.column, len(tok)))

    def ask(self, children):
        head, *questions = children
        return ast.Ask(questions, _pos(head))

    def need(self, children):
        head, k, n = children
        return ast.Need(int(k), int(n), ast.Pos(head.line, head.column, n.end_column - head.column if n.end_column else 1))

    # --- steps ----------------------------------------------------------------
    def tool_call(self, children):
        addr, args = children
        server, tool = str(addr).split(".", 1)
        if args is None:
            args = {}
            args_pos = None
        else:
            args_pos = None
        return ast.ToolCall(server, tool, args, _pos(addr), args_pos)

    def step(self, children):
        name, action, *options = children
        if isinstance(action, Token):  # WRITE_TEXT
            action = self._write(action)
        options = [o for o in options if o is not None]
        return ast.Step(str(name), action, options, _pos(name))

    def _write(self, tok: Token) -> ast.Write:
        text = str(tok)[len("write") :].rstrip()
        body = text.strip()
        m = _WRITE_FROM.match(body)
        if not m:
            if "from" in body.split() or "{" in body:
                raise self.source.error(
                    "a write step lists its inputs as `from {a, b}`",
                    _pos(tok),
                    hint="write e.g. `briefing: write a morning briefing from {calendar, mail}`",
                )
            prompt, inputs = body, []
        else:
            prompt = m.group("prompt").strip()
            start = tok.column + str(tok).index("{", len("write ") + len(prompt)) + 1
            inputs = []
            offset = 0
            raw = m.group("inputs")
            for part in raw.split(","):
                name = part.strip()
                col = start + offset + (len(part) - len(part.lstrip()))
                offset += len(part) + 1
                if not _NAME.match(name):
                    raise self.source.error(
                        f"{name!r} is not a step or input name" if name else "empty name in the `from {...}` list",
                        ast.Pos(tok.line, col, max(1, len(name))),
                        hint="names are lower case: letters, digits, _ and -, separated by commas",
                    )
                inputs.append((name, ast.Pos(tok.line, col, len(name))))
        if not prompt:
            raise self.source.error(
                "a write step needs a description of what to write",
                _pos(tok),
                hint="write e.g. `briefing: write a morning briefing from {calendar, mail}`",
            )
        return ast.Write(prompt, inputs, _pos(tok, 5))

    def preview(self, children):
        head, call = children
        return ast.Option("preview", call, _pos(head))

    def check(self, children):
        head, call = children
        return ast.Option("check", call, _pos(head))

    def expires(self, children):
        (tok,) = children
        return ast.Option("expires", self._duration(tok), _pos(tok))

    def without_asking(self, children):
        (tok,) = children
        return ast.Option("without_asking", True, _pos(tok))

    def start(self, children):
        recipe = ast.Recipe()
        for child in children:
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


_lock = threading.Lock()


@lru_cache(maxsize=1)
def _lark() -> tuple[Lark, _Build]:
    """One parser per process; the grammar analysis is cached on disk by lark."""
    grammar = resources.files(__package__).joinpath("grammar.lark").read_text(encoding="utf-8")
    builder = _Build(Source("", None))
    parser = Lark(
        grammar,
        parser="lalr",
        lexer="contextual",
        postlex=_Indenter(),
        maybe_placeholders=True,
        propagate_positions=False,
        transformer=builder,
        cache=True,
    )
    return parser, builder


def parse(source: Source) -> ast.Recipe:
    """Parse recipe text into a syntax tree, or raise RecipeError."""
    _precheck(source)
    parser, builder = _lark()
    try:
        with _lock:  # the embedded transformer holds the current source
            builder.source = source
            return parser.parse(source.text + "\n")
    except RecipeError:
        raise
    except _Unclosed as exc:
        tok = exc.token
        raise source.error(
            f"this `{tok}` is never closed",
            _pos(tok),
            hint=f"close it with `{'}' if tok == '{' else ']'}`; JSON may span lines only while a bracket is open",
        ) from None
    except _BadDedent as exc:
        line = exc.token.line + exc.token.count("\n")
        raise source.error(
            f"this line is indented {exc.indent} spaces, which matches no enclosing block",
            ast.Pos(line, 1, max(1, exc.indent)),
            hint=f"indent it like the block it belongs to ({exc.expected} spaces, or one of the outer levels)",
        ) from None
    except UnexpectedInput as exc:
        raise _syntax_error(source, exc) from None


def _precheck(source: Source) -> None:
    """Errors that read better before the lexer sees the text."""
    text = source.text
    tab = text.find("\t")
    if tab >= 0:
        line = text.count("\n", 0, tab) + 1
        col = tab - (text.rfind("\n", 0, tab) + 1) + 1
        raise source.error(
            "a tab character; recipes are indented with spaces",
            ast.Pos(line, col),
            hint="replace each tab with spaces (two per level is the house style)",
        )
    if not text.strip() or all(not l.strip() or l.lstrip().startswith("#") for l in text.split("\n")):
        raise RecipeError(
            "the recipe is empty: it has no steps",
            path=source.path,
            hint="add a step, e.g. `now: time.get_current_time {\"timezone\": \"UTC\"}`",
        )
    for n, line in enumerate(text.split("\n"), 1):
        stripped = line.lstrip(" ")
        if stripped and not stripped.startswith("#"):
            if len(stripped) != len(line):
                raise source.error(
                    "the first line of a recipe cannot be indented",
                    ast.Pos(n, 1, len(line) - len(stripped)),
                    hint="start top-level steps and blocks at column 1",
                )
            break


# Human labels for what the parser expected, in the order they are listed.
_LABELS = {
    "NAME": "a step name",
    "TOOL_ADDRESS": "a tool address like `server.tool`",
    "WRITE_TEXT": "`write ...`",
    "COLON": "`:`",
    "LBRACE": "`{`",
    "RBRACE": "`}`",
    "LSQB": "`[`",
    "RSQB": "`]`",
    "COMMA": "`,`",
    "STRING": "a JSON string",
    "SIGNED_NUMBER": "a number",
    "INT": "a number",
    "DURATION": "a duration like 15m",
    "QUESTION": "a question `- ...`",
    "_NL": "the end of the line",
    "_INDENT": "an indented block",
    "_DEDENT": "the end of the block",
    "PERSON": "a name",
    "EQUAL": "`=`",
}


def _syntax_error(source: Source, exc: UnexpectedInput) -> RecipeError:
    line = getattr(exc, "line", None) or 1
    column = getattr(exc, "column", None) or 1
    expected = set(getattr(exc, "expected", None) or getattr(exc, "allowed", None) or ())
    if isinstance(exc, UnexpectedToken):
        tok = exc.token
        if tok.type == "$END":
            return source.error("the recipe ends in the middle of a step", None, hint="finish the last line")
        got = repr(str(tok)) if tok.type not in ("_NL", "_INDENT", "_DEDENT") else _LABELS[tok.type]
        width = max(1, len(str(tok))) if tok.type not in ("_NL", "_INDENT", "_DEDENT") else 1
        if tok.type == "_NL" and "\n" in str(tok):
            # point at the end of the line, not the start of the next one
            width = 1
        return _explain(source, expected, got, tok.type, ast.Pos(line, column, width), str(tok))
    if isinstance(exc, UnexpectedCharacters):
        ch = source.line(line)[column - 1 : column] or "?"
        return _explain(source, expected, repr(ch), "CHAR", ast.Pos(line, column), ch)
    if isinstance(exc, UnexpectedEOF):
        return source.error("the recipe ends too early", None, hint="finish the last block or step")
    return source.error(str(exc), ast.Pos(line, column))


def _explain(source: Source, expected: set[str], got: str, got_type: str, pos: ast.Pos, text: str) -> RecipeError:
    in_json = expected & {"STRING", "RBRACE", "RSQB", "SIGNED_NUMBER"} and not expected & {"NAME", "TOOL_ADDRESS"}
    if got_type == "_INDENT":
        return source.error(
            "unexpected indentation", pos, hint="only the items of a block, or the options of a step, are indented"
        )
    if "_INDENT" in expected and got_type in ("_DEDENT", "_NL", "NAME", "TOGETHER", "THEN", "CHAR") and len(expected) <= 2:
        return source.error(
            "this block is empty", pos, hint="indent at least one step under the block's header line"
        )
    if in_json:
        if got_type in ("RBRACE", "RSQB") and text in "}]":
            return source.error(
                f"malformed JSON: unexpected {got}", pos, hint="JSON does not allow a trailing comma; remove the comma before it"
            )
        if got == "\"'\"" or text == "'":
            return source.error("malformed JSON: strings use double quotes", pos, hint='write "text", not \'text\'')
        if got_type == "NAME" or (got_type == "CHAR" and text.isalpha()):
            return source.error(
                f"malformed JSON: unexpected {got}", pos, hint='JSON keys and text values are quoted: "key": "value"'
            )
        return source.error(
            f"malformed JSON: unexpected {got}", pos, hint="expected " + _expected_text(expected) + "; check commas and quotes"
        )
    if expected == {"COLON"} or ("COLON" in expected and got_type not in ("COLON",) and len(expected) <= 2):
        return source.error(f"expected `:` here, not {got}", pos, hint="a step is written `name: server.tool {...}`")
    if "TOOL_ADDRESS" in expected:
        return source.error(
            f"expected a tool address or `write ...`, not {got}",
            pos,
            hint="a tool is addressed as `server.tool` (lower-case server; tool may use - and _), e.g. `slack.slack_post_message`",
        )
    if "NAME" in expected and got_type == "CHAR":
        return source.error(
            f"unexpected {got}",
            pos,
            hint="a step name is lower case ([a-z_][a-z0-9_-]*), then `:`; blocks start with `together:`, `then:` or `ask me:`",
        )
    if "_NL" in expected and got_type in ("CHAR", "NAME", "TOOL_ADDRESS", "STRING"):
        return source.error(
            f"unexpected {got} after the end of the step",
            pos,
            hint="tool arguments are one JSON object in braces; anything else on the line must be a `# comment`",
        )
    return source.error(f"unexpected {got}", pos, hint="expected " + _expected_text(expected))


def _expected_text(expected: set[str]) -> str:
    labels = []
    for name in sorted(expected):
        label = _LABELS.get(name) or (f"`{name.lower()}`" if name.isupper() and not name.startswith("_") else None)
        if label and label not in labels:
            labels.append(label)
    return ", ".join(labels[:6]) or "something else"
