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
from typing import Any

from lark import Lark, Token, Transformer
from lark.exceptions import UnexpectedCharacters, UnexpectedEOF, UnexpectedInput, UnexpectedToken

from ..errors import RecipeError
from ..limits import MAX_DEPTH  # nesting of JSON brackets, and of indented blocks
from . import ast
from .checks import precheck
from .lexer import SHORTCUTS, BadDedent, BlockIndenter, RecipeLexer, TooDeep, Unclosed
from .literals import FLAT_PART, LITERALS, MAX_PLAIN_DIGITS, PLAIN, SURROGATE, NotPlain, plain_json
from .source import Source, token_pos
from .words import NAME, RESERVED

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


class _Build(Transformer):
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
        server, tool = str(addr).split(".", 1)
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


_lock = threading.Lock()


@lru_cache(maxsize=1)
def _lark() -> tuple[Lark, _Build]:
    """One parser per process; the grammar analysis is cached on disk by lark."""
    grammar = resources.files(__package__).joinpath("grammar.lark").read_text(encoding="utf-8")
    builder = _Build(Source("", None))
    parser = Lark(
        grammar,
        parser="lalr",
        lexer=RecipeLexer,
        postlex=BlockIndenter(),
        maybe_placeholders=True,
        propagate_positions=False,
        transformer=builder,
        cache=True,
    )
    builder.json_flat = re.compile(parser.get_terminal("JSON_FLAT").pattern.to_regexp())
    return parser, builder


def parse(source: Source) -> ast.Recipe:
    """Parse recipe text into a syntax tree, or raise RecipeError."""
    precheck(source)
    parser, builder = _lark()
    # The lock also covers error handling: the indenter's state (which
    # brackets are open) is read to explain the error.
    with _lock:  # the embedded transformer holds the current source
        builder.source = source
        try:
            return parser.parse(source.text + "\n")
        except RecipeError:
            raise
        except Unclosed as exc:
            raise _unclosed(source, exc.token) from None
        except TooDeep as exc:
            tok = exc.token
            if exc.what == "JSON":
                pos = token_pos(tok)
            else:
                pos = ast.Pos(tok.end_line or tok.line, tok.end_column or tok.column)
            raise source.error(
                f"{exc.what} nested more than {MAX_DEPTH} levels deep", pos, hint=f"flatten it: at most {MAX_DEPTH} levels"
            ) from None
        except BadDedent as exc:
            line = exc.token.line + exc.token.count("\n")
            raise source.error(
                f"this line is indented {exc.indent} spaces, which matches no enclosing block",
                ast.Pos(line, 1, max(1, exc.indent)),
                hint=f"indent it like the block it belongs to ({exc.expected} spaces, or one of the outer levels)",
            ) from None
        except UnexpectedInput as exc:
            raise _syntax_error(source, exc, list(getattr(parser.options.postlex, "opened", ()))) from None
        except RecursionError:
            raise source.error("the recipe is nested too deeply", None, hint="flatten the JSON or the blocks") from None


def _unclosed(source: Source, tok: Token, before: int | None = None) -> RecipeError:
    close = "}" if tok == "{" else "]"
    where = f" before line {before}" if before else ""
    return source.error(
        f"this `{tok}` is never closed",
        token_pos(tok),
        hint=f"close it with `{close}`{where}; JSON may span lines only while a bracket is open",
    )


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
    "ASK_ME": "`ask me:`",
    "NEED": "`need: K of N`",
    "PREVIEW": "`preview:`",
    "CHECK": "`check:`",
    "WITHOUT_ASKING": "`without asking`",
}

_OPTIONS = {"PREVIEW", "CHECK", "EXPIRES", "TIMEOUT", "RETRIES", "WITHOUT_ASKING"}
_JSON_START = {"STRING", "SIGNED_NUMBER", "LBRACE", "JSON_FLAT", "LSQB", "TRUE", "FALSE", "NULL"}
_STEP_LINE = re.compile(r"[ ]*([a-z_][a-z0-9_-]*)[ ]*:")
_ACTION = re.compile(r"[A-Za-z0-9_-]+\.|write\b")


def _expected_of(exc: UnexpectedInput) -> set[str]:
    """What the parser would have accepted, from its own table.

    The contextual lexer reports only the terminals it can lex in that state,
    which leaves out _INDENT and _DEDENT; the parse table knows them.
    """
    state = getattr(exc, "state", None)
    try:
        expected = {t for t in state.parse_conf.parse_table.states[state.position] if t.isupper()}
    except (AttributeError, KeyError, TypeError):
        expected = set(getattr(exc, "expected", None) or getattr(exc, "allowed", None) or ())
    return expected - SHORTCUTS


def _syntax_error(source: Source, exc: UnexpectedInput, opened: list[Token] | None = None) -> RecipeError:
    line = getattr(exc, "line", None) or 1
    column = getattr(exc, "column", None) or 1
    expected = _expected_of(exc)
    opened = opened or []
    if isinstance(exc, UnexpectedToken):
        tok = exc.token
        if tok.type == "$END":
            header = _previous_line(source, len(source.text.split("\n")) + 1)
            if "QUESTION" in expected:
                return source.error("`ask me:` has no questions", header, hint="add lines like `- post to #daily?` under it")
            if "_INDENT" in expected:
                return source.error("this block is empty", header, hint="indent at least one item under it")
            return source.error("the recipe ends in the middle of a step", header, hint="finish the last line")
        if tok.type in ("_INDENT", "_DEDENT"):
            # these borrow the newline's position; the line they open starts at its end
            pos = ast.Pos(tok.end_line or tok.line, tok.end_column or tok.column)
            return _explain(source, expected, "indentation" if tok.type == "_INDENT" else "end of block", tok.type, pos, "", opened)
        if tok.type == "_NL":
            return _explain(source, expected, "end of line", "_NL", ast.Pos(line, column), "", opened)
        return _explain(source, expected, f"`{tok}`", tok.type, ast.Pos(line, column, max(1, len(str(tok)))), str(tok), opened)
    if isinstance(exc, UnexpectedCharacters):
        ch = source.line(line)[column - 1 : column] or "?"
        return _explain(source, expected, f"`{ch}`", "CHAR", ast.Pos(line, column), ch, opened)
    if isinstance(exc, UnexpectedEOF):
        return source.error("the recipe ends too early", None, hint="finish the last block or step")
    return source.error("this line cannot be read", ast.Pos(line, column), hint="check it against docs/recipe-language.md")


def _previous_line(source: Source, before: int) -> ast.Pos | None:
    """The last line before ``before`` with something other than a comment on it."""
    for n in range(before - 1, 0, -1):
        text = source.line(n)
        body = _strip_comment(text).rstrip()
        if body.strip():
            start = len(body) - len(body.lstrip(" "))
            return ast.Pos(n, start + 1, len(body) - start)
    return None


def _strip_comment(text: str) -> str:
    m = re.search(r"(?:^|[ ])#(?:[ ]|$)", text)
    return text[: m.start()] if m else text


def _word_at(text: str, column: int) -> str:
    m = re.compile(r"[^ {}\[\]\":,]+").match(text, column - 1)
    return m.group() if m else text[column - 1 : column]


def _explain(
    source: Source, expected: set[str], got: str, got_type: str, pos: ast.Pos, text: str, opened: list[Token]
) -> RecipeError:
    line_text = source.line(pos.line)
    indent = len(line_text) - len(line_text.lstrip(" "))
    word = _word_at(line_text, pos.column) if got_type not in ("_NL", "_INDENT", "_DEDENT") else ""
    wpos = ast.Pos(pos.line, pos.column, max(1, len(word)))
    step_line = _STEP_LINE.match(line_text)

    # A bracket left open on an earlier line swallows the next step.
    if opened and opened[-1].line < pos.line and pos.column == indent + 1 and step_line:
        return _unclosed(source, opened[-1], pos.line)
    if got_type == "_INDENT":
        return source.error(
            "this line is indented more than the one before it, which opens no block",
            pos,
            hint="indent only the items of a block (`together:`, `then:`, `ask me:`) and a step's options; "
            "otherwise line it up with the line above",
        )
    if got_type == "CHAR" and (not text.isprintable() or text.isspace()):
        import unicodedata

        label = unicodedata.name(text, "")
        return source.error(
            f"unexpected character U+{ord(text):04X}" + (f" ({label})" if label else ""),
            pos,
            hint="retype it as a plain space" if text.isspace() else "remove it",
        )
    if opened:
        return _explain_json(source, expected, got, got_type, pos, text, word, wpos, opened)
    if got_type in ("RBRACE", "RSQB"):
        return source.error(f"this `{text}` closes nothing", pos, hint="remove it, or check the brackets before it")
    if got_type == "QUESTION" and "QUESTION" not in expected:
        return source.error(
            "a question outside `ask me:`", wpos, hint="put `ask me:` on the line before, at the same indentation"
        )
    if expected & _OPTIONS and got_type not in _OPTIONS:
        name = "ask me:" if re.match(r"[ ]*ask[ ]+me\b", line_text) else word.rstrip(":")
        return source.error(
            f"`{name}` is not a step option" if name else f"unexpected {got} among the step's options",
            ast.Pos(pos.line, pos.column, max(1, len(name))),
            hint="a step's indented lines are its options: preview:, check:, expires:, timeout:, retries:, without asking (or don't ask); "
            "a next step goes at the step's own indentation",
        )
    option = re.match(r"([ ]*)(preview|check|expires|timeout|retries|without[ ]+asking|don't[ ]+ask)\b", line_text)
    misplaced = option and (
        pos.column == len(option.group(1)) + 1
        or "WRITE_TEXT" in expected
        or ("COLON" in expected and option.group(2)[0] in "wd")
    )
    if misplaced:
        return source.error(
            f"`{option.group(2)}` is a step option, but no tool step is right above it",
            ast.Pos(pos.line, len(option.group(1)) + 1, len(option.group(2))),
            hint="indent it under the tool step it belongs to, one level deeper than the step",
        )
    # `ask me:` and its questions
    if re.match(r"[ ]*ask[ ]+me[ ]*:[ ]*[^ #]", line_text) and pos.column > line_text.index(":") + 1:
        return source.error(
            "a question goes on its own line under `ask me:`",
            pos,
            hint=f"write `ask me:`, then `- {_strip_comment(line_text[line_text.index(':') + 1 :]).strip()}` on the next line",
        )
    if "QUESTION" in expected and expected <= {"QUESTION", "_INDENT", "_NL"}:
        if text.startswith("-") or line_text.lstrip().startswith("-"):
            return source.error(
                "a question is written `- question`, with a space after the dash",
                ast.Pos(pos.line, indent + 1),
                hint="e.g. `- post to #daily?`",
            )
        return source.error(
            "`ask me:` has no questions",
            _previous_line(source, pos.line) or pos,
            hint="add lines like `- post to #daily?` under it, at the same indentation as `ask me:` or deeper",
        )
    if expected == {"_INDENT"}:
        header = _previous_line(source, pos.line) or pos
        what = "`inputs:` lists no inputs" if source.line(header.line).lstrip().startswith("inputs") else "this block is empty"
        return source.error(what, header, hint="indent at least one item under it")
    # a reserved word used as a step name: `then: slack.post {...}`
    if step_line and step_line.start(1) < pos.column <= len(line_text):
        rest = line_text[step_line.end() :].lstrip(" ")
        if step_line.group(1) in RESERVED and _ACTION.match(rest):
            name = step_line.group(1)
            return source.error(
                f"`{name}` is a reserved word and cannot name a step",
                ast.Pos(pos.line, step_line.start(1) + 1, len(name)),
                hint="choose another name" + (f"; `{name}:` alone on a line starts a block" if name in ("together", "then") else ""),
            )
    # a name that is not a name: `Post:`, `café:`
    first = re.match(r"([ ]*)([^ :={\"#]+)[ ]*(?:[:=]|$|#)", line_text) or re.match(
        r"([ ]*(?:together|then)[ ]+)([^ :={\"#]+)[ ]*:", line_text
    )
    if first and not NAME.match(first.group(2)) and pos.column <= first.end(2) + 1 and expected & {"NAME", "COLON", "EQUAL", "_NL"}:
        name = first.group(2)
        lower = name.lower()
        return source.error(
            f"`{name}` is not a valid name",
            ast.Pos(pos.line, len(first.group(1)) + 1, len(name)),
            hint="names are lower case letters, digits, _ and -, starting with a letter or _"
            + (f": write `{lower}`" if NAME.match(lower) else ""),
        )
    if "PERSON" in expected or re.match(r"[ ]*approvers[ ]*:", line_text):
        return source.error(
            f"unexpected {got} in the list of approvers",
            pos if got_type == "_NL" else wpos,
            hint="write e.g. `approvers: ana, bruno` (names separated by commas)",
        )
    if re.match(r"[ ]*need[ ]*:", line_text):
        return source.error(
            f"unexpected {got} in a join rule",
            pos if got_type == "_NL" else wpos,
            hint="a join rule is written `need: K of N`, e.g. `need: 2 of 3`",
        )
    if "DURATION" in expected:
        if got_type == "_NL":
            return source.error("a duration is missing", pos, hint="write e.g. 15m, 90s, 2h or 1d")
        return source.error(
            f"`{word}` is not a duration", wpos, hint="write a whole number and a unit, s, m, h or d: e.g. 90s, 15m, 2h, 1d"
        )
    if "TOOL_ADDRESS" in expected:
        if word == "write":
            return source.error(
                "a write step needs a description of what to write",
                wpos,
                hint="write e.g. `briefing: write a morning briefing from {calendar, mail}`",
            )
        if got_type == "_NL":
            return source.error(
                "this step has no action",
                pos,
                hint="write `name: server.tool {...}` or `name: write ... from {...}`; blocks start with `together:` or `then:`",
            )
        if got_type in ("LBRACE", "JSON_FLAT"):
            return source.error("the tool address is missing before the arguments", pos, hint="write `name: server.tool {...}`")
        return source.error(
            f"`{word}` is not a tool address",
            wpos,
            hint="a tool is addressed as `server.tool` (lower-case server; tool may use - and _), e.g. `slack.slack_post_message`",
        )
    if "LBRACE" in expected and got_type in _JSON_START:
        return source.error(
            "tool arguments are one JSON object in braces", pos, hint='write e.g. {"query": "x"}'
        )
    if "STRING" in expected and (expected & _JSON_START) != {"STRING"}:
        return source.error(
            f"expected a JSON value, not {got}",
            wpos,
            hint='an input\'s default is written as in JSON: quote text ("hello"); numbers, true, false, null, lists and objects as they are',
        )
    if "STRING" in expected:
        return source.error(
            f"expected a quoted title, not {got}", wpos if word else pos, hint='write e.g. recipe "Morning briefing"'
        )
    if "COLON" in expected and got_type != "COLON":
        if re.match(r"[ ]*(together|then)\b", line_text):
            return source.error(
                f"expected `:` here, not {got}", pos, hint="a block starts with `together:` or `then:`, optionally named: `together sources:`"
            )
        return source.error(f"expected `:` here, not {got}", pos, hint="a step is written `name: server.tool {...}`")
    if "NAME" in expected and got_type == "CHAR":
        return source.error(
            f"unexpected {got}",
            pos,
            hint="a step name is lower case ([a-z_][a-z0-9_-]*), then `:`; blocks start with `together:`, `then:` or `ask me:`",
        )
    glued = re.compile(r"[^ ]*$").search(line_text, 0, pos.column - 1).group() + word
    if step_line and "." in glued and pos.column > 1 and line_text[pos.column - 2] != " " and "_NL" in expected:
        return source.error(
            f"`{glued}` is not a tool address",
            ast.Pos(pos.line, pos.column - len(glued) + len(word), len(glued)),
            hint="a tool is addressed as `server.tool` (lower-case server; tool may use - and _), e.g. `slack.slack_post_message`",
        )
    if "_NL" in expected and got_type not in ("_NL", "_DEDENT"):
        after = "after the end of the step" if step_line else "at the end of the line"
        return source.error(
            f"unexpected {got} {after}",
            wpos,
            hint="tool arguments are one JSON object in braces; anything else on the line must be a `# comment`"
            if step_line
            else "anything else on the line must be a `# comment` (`#` and a space)",
        )
    return source.error(f"unexpected {got}", pos, hint="expected " + _expected_text(expected))


def _explain_json(
    source: Source, expected, got, got_type, pos: ast.Pos, text: str, word: str, wpos: ast.Pos, opened: list[Token]
) -> RecipeError:
    line_text = source.line(pos.line)
    before = line_text[: pos.column - 1].rstrip(" ")
    prev = before[-1:] if before else ""
    if text == "'":
        return source.error("malformed JSON: strings use double quotes", pos, hint='write "text", not \'text\'')
    if text == '"':
        return source.error(
            "malformed JSON: this string is never closed",
            pos,
            hint='close it with `"` on the same line; a JSON string cannot span lines (write \\n for a line break)',
        )
    if got_type in ("RBRACE", "RSQB"):
        opener = opened[-1]
        if (text == "}") != (opener == "{"):
            return source.error(
                f"malformed JSON: this `{text}` does not close the `{opener}` on line {opener.line}, column {opener.column}",
                pos,
                hint=f"close the `{opener}` with `{'}' if opener == '{' else ']'}` first",
            )
        if prev == ",":
            return source.error(
                f"malformed JSON: a comma before `{text}`", pos, hint="JSON does not allow a trailing comma; remove it"
            )
        if prev == ":":
            return source.error("malformed JSON: a value is missing after `:`", pos, hint='write "key": value')
    if "COLON" in expected and "COMMA" not in expected:
        return source.error("malformed JSON: expected `:` after the key", pos, hint='write "key": value')
    if "STRING" in expected and not expected & (_JSON_START - {"STRING"}) and got_type != "STRING":
        return source.error(
            f"malformed JSON: a key must be a quoted string, not {got}", wpos, hint='write "key": value'
        )
    if got_type == "SIGNED_NUMBER" and prev.isdigit() and before.endswith("0"):
        return source.error("malformed JSON: a number cannot start with 0", pos, hint="write 1, not 01 (or quote it as text)")
    if "COMMA" in expected and got_type in _JSON_START:
        return source.error(
            f"malformed JSON: a `,` is missing before {got}", pos, hint="separate the items of an object or a list with commas"
        )
    if word and (word[:1].isalpha() or word[:1] == "_"):
        if word.lower() in ("true", "false", "null", "none"):
            hint = "JSON writes true, false and null, in lower case"
        elif word.lower() in ("nan", "infinity", "inf"):
            hint = "JSON numbers are finite; quote it as text"
        else:
            hint = 'JSON keys and text values are quoted: "key": "value"'
        return source.error(f"malformed JSON: unexpected `{word}`", wpos, hint=hint)
    return source.error(
        f"malformed JSON: unexpected {got}", pos, hint="expected " + _expected_text(expected) + "; check commas and quotes"
    )


def _expected_text(expected: set[str]) -> str:
    labels = []
    for name in sorted(expected - {"$END"}):
        label = _LABELS.get(name) or (f"`{name.lower()}`" if name.isupper() and not name.startswith("_") else None)
        if label and label not in labels:
            labels.append(label)
    return ", ".join(labels[:6]) or "something else"
