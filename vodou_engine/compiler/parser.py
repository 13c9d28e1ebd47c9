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
from copy import copy
from functools import lru_cache
from importlib import resources
from typing import Any, Iterator

from lark import Lark, Token, Transformer
from lark.exceptions import UnexpectedCharacters, UnexpectedEOF, UnexpectedInput, UnexpectedToken
from lark.indenter import Indenter
from lark.lexer import ContextualLexer, PatternStr, UnlessCallback

from ..bounds import MAX_DURATION, MAX_RETRIES, MAX_TIMEOUT  # the same bounds for a plan from anywhere (bounds.py)
from ..errors import RecipeError
from ..limits import MAX_DEPTH  # nesting of JSON brackets, and of indented blocks
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
            if token.type in _NEWLINES:
                yield from self._newline(token)
                continue
            yield token
            if token.type in ("LBRACE", "LSQB"):
                self.paren_level += 1
                self.opened.append(token)
                if self.paren_level > MAX_DEPTH:
                    raise _TooDeep(token, "JSON")
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
            if len(self.indent_level) > MAX_DEPTH:
                raise _TooDeep(token, "blocks")
            yield Token.new_borrow_pos("_INDENT", "", token)
            return
        while indent < self.indent_level[-1]:
            self.indent_level.pop()
            yield Token.new_borrow_pos("_DEDENT", "", token)
        if indent != self.indent_level[-1]:
            raise _BadDedent(token, indent, self.indent_level[-1])


# Terminals that stand for several tokens of the rules (grammar.lark): an
# error never names them, as the grammar without them would not.
_SHORTCUTS = frozenset({"STEP_NL", "JSON_LINE"})
_NEWLINES = frozenset({"_NL", "STEP_NL"})  # tokens that end a line: the indentation after them counts


class _Lexer(ContextualLexer):
    """lark's contextual lexer, with the work around each match done in one loop.

    The terminals, the choice of terminals per parser state and the tokens
    are lark's own: this reuses the scanner lark builds for each state. Only
    the bookkeeping per token (line and column, keyword lookup, ignored
    spaces) is inlined; lark spends several calls per token on it, which was
    a third of the compile time of a big recipe. Anything unusual (no match,
    a state lark would handle with callbacks) goes back to lark's own code,
    so every lexing error is raised exactly as lark raises it.

    One addition: a terminal in ``_VETO`` is taken only if its check passes;
    otherwise the text is lexed as if that terminal did not exist.
    """

    __future_interface__ = 2

    def __init__(self, conf):
        # lark gives a custom lexer only its configuration; the per-state
        # lexers need the parse table, which comes with the first parse.
        self._conf = conf
        self._tables: dict[int, tuple] | None = None

    def _setup(self, parse_table) -> None:
        states = {idx: list(t.keys()) for idx, t in parse_table.states.items()}
        always = self._conf.postlex.always_accept if self._conf.postlex else ()
        ContextualLexer.__init__(self, self._conf, states, always_accept=always)
        # The root lexer only names what was found where nothing fits, for
        # the error: it reads lines in parts, as the rules do.
        root = copy(self._conf)
        root.terminals = [t for t in self._conf.terminals if t.name not in _SHORTCUTS]
        root.skip_validation = True
        self.root_lexer = self.BasicLexer(root, None)
        self._tables = {}

    def _table(self, state: int) -> tuple:
        lexer = self.lexers[state]
        mres = lexer.scanner._mres  # builds lexer.callback too
        keywords = {}
        simple = len(mres) == 1
        for type_, callback in lexer.callback.items():
            terms = callback.scanner.terminals if isinstance(callback, UnlessCallback) else ()
            if terms and all(isinstance(t.pattern, PatternStr) and not t.pattern.flags for t in terms):
                keywords[type_] = {t.pattern.value: t.name for t in terms}
            else:
                simple = False
        instead = None
        if any(t.name in _VETO for t in lexer.terminals):
            # Where a vetoed match is not taken, the state lexes as if that
            # terminal did not exist. lark's loop knows nothing of vetoes.
            conf = copy(self._conf)
            conf.terminals = [t for t in lexer.terminals if t.name not in _VETO]
            conf.skip_validation = True
            other = self.BasicLexer(conf, None)
            fallbacks = {_VETO[t.name][1] for t in lexer.terminals if t.name in _VETO}
            same = simple and len(other.scanner._mres) == 1 and other.callback.keys() == lexer.callback.keys()
            if not same or not fallbacks <= {t.name for t in conf.terminals}:
                raise RuntimeError(f"grammar.lark: state {state} cannot veto {sorted(_VETO)} here")
            instead = other.scanner._mres[0].match
        table = (mres[0].match if simple else None, keywords, lexer.newline_types, lexer.ignore_types, instead)
        self._tables[state] = table
        return table

    def lex(self, lexer_state, parser_state):
        if self._tables is None:
            self._setup(parser_state.parse_conf.parse_table)
        tables = self._tables
        stack = parser_state.state_stack
        text = lexer_state.text.text
        end = lexer_state.text.end
        ctr = lexer_state.line_ctr
        pos, line, line_start = ctr.char_pos, ctr.line, ctr.line_start_pos
        token = lexer_state.last_token
        new_str = str.__new__
        while pos < end:
            state = stack[-1]
            match, keywords, newline_types, ignore_types, instead = tables.get(state) or self._table(state)
            m = match(text, pos, end) if match is not None else None
            if m is None:
                break  # lark's own loop below lexes it, or raises its error
            type_ = m.lastgroup
            if type_ in _VETO and not _VETO[type_][0](m.group()):
                m = instead(text, pos, end)  # never None: the fallback terminal matches here
                type_ = m.lastgroup
            value = m.group()
            after = m.end()
            if type_ in newline_types:
                n = value.count("\n")
                if n:
                    end_line = line + n
                    end_start = pos + value.rindex("\n") + 1
                else:
                    end_line, end_start = line, line_start
            else:
                end_line, end_start = line, line_start
            if type_ not in ignore_types:
                kw = keywords.get(type_)
                # Token's own __new__ only forwards to this, via two more calls.
                token = new_str(Token, value)
                token.type = kw.get(value, type_) if kw else type_
                token.value = value
                token.start_pos = pos
                token.line = line
                token.column = pos - line_start + 1
                token.end_line = end_line
                token.end_column = after - end_start + 1
                token.end_pos = after
                pos, line, line_start = after, end_line, end_start
                yield token
            else:
                pos, line, line_start = after, end_line, end_start
        ctr.char_pos, ctr.line, ctr.line_start_pos, ctr.column = pos, line, line_start, pos - line_start + 1
        lexer_state.last_token = token
        if pos < end:
            yield from ContextualLexer.lex(self, lexer_state, parser_state)


class _Unclosed(Exception):
    def __init__(self, token: Token):
        self.token = token


class _TooDeep(Exception):
    def __init__(self, token: Token, what: str):
        self.token = token
        self.what = what


class _BadDedent(Exception):
    def __init__(self, token: Token, indent: int, expected: int):
        self.token = token
        self.indent = indent
        self.expected = expected


def _pos(tok: Token, width: int | None = None) -> ast.Pos:
    return ast.Pos(tok.line, tok.column, width if width is not None else max(1, len(tok)))


_FLAT_PART = re.compile(r'"(?:[^"\\\n]|\\.)*"|[^\s{}\[\]:,"]+|[{}\[\]:,]')
_LITERALS = {"true": True, "false": False, "null": None}
_WRITE_FROM = re.compile(r"^(?:(?P<prompt>.*?)\s+)?from\s*\{(?P<inputs>[^{}]*)\}\s*$", re.S)
_NAME = re.compile(r"[a-z_][a-z0-9_-]*\Z")
_SURROGATE = re.compile("[\ud800-\udfff]")


class _NotPlain(Exception):
    pass


def _pairs(pairs: list) -> dict:
    out = dict(pairs)
    if len(out) != len(pairs):
        raise _NotPlain  # a duplicate key: the positioned scan reports it
    return out


_MAX_PLAIN_DIGITS = 4000
"""Below Python's limit on converting digits to an int; longer goes the positioned way, which refuses it."""


def _finite(text: str) -> float:
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise _NotPlain  # too large: the positioned scan reports it
    return value


def _no_constant(text: str):
    raise _NotPlain  # NaN and Infinity are not JSON, whatever json.loads says


_PLAIN = json.JSONDecoder(object_pairs_hook=_pairs, parse_float=_finite, parse_constant=_no_constant, strict=False)


def _plain_json(raw: str) -> dict | None:
    """A one-line JSON object decoded by ``json`` alone, or None if it needs the rules.

    Most tool arguments are a one-line object of plain strings, and most of
    their strings will never be pointed at. Without a backslash there is
    nothing to check but duplicate keys, numbers too large and that it is
    one object and nothing more, so the object is decoded in C, and
    positions are computed only if lowering finds a mistake in it
    (``positioned_args``).
    """
    if "\\" in raw:
        return None
    try:
        value, end = _PLAIN.raw_decode(raw)
    except (_NotPlain, ValueError):
        return None
    return value if end == len(raw) else None


# A JSON_LINE token is taken only if it decodes so (see grammar.lark), and
# is not nested deep enough for the indenter to refuse (a crude count will
# do: what it turns away only takes the long way). Each vetoed terminal comes
# with one that matches wherever it does (its first token), so the lexer
# always has something to take instead.
_VETO = {
    "JSON_LINE": (lambda text: text.count("{") + text.count("[") <= MAX_DEPTH and _plain_json(text) is not None, "LBRACE"),
}

# The parts of a JSON text without backslashes: a string, a number or word,
# a bracket (colons and commas fall between them).
_JSON_PART = re.compile(r'"[^"]*"|[^ {}\[\]:,"]+|[{}\[\]]')


def positioned_args(call: ast.ToolCall) -> dict:
    """The arguments of a call decoded by ``_plain_json``, again, each string with its position.

    json took the token without complaint, so this only has to say where
    each string was, as the JSON rules would have for its STRING token.
    """
    text, line, column = call.flat
    parts = iter(_JSON_PART.finditer(text))

    def value(m):
        part = m.group()
        if part == "{":
            out = {}
            for k in parts:
                if k.group() == "}":
                    return out
                out[k.group()[1:-1]] = value(next(parts))
        if part == "[":
            items = []
            for v in parts:
                if v.group() == "]":
                    return items
                items.append(value(v))
        if part[0] == '"':
            s = ast.JStr(part[1:-1])
            s.pos = ast.Pos(line, column + m.start(), len(part))
            s.raw = part
            return s
        return _LITERALS[part] if part in _LITERALS else json.loads(part)  # JSON_LINE: decoded cleanly already

    return value(next(parts))


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
            # raw control character or surrogate never gets past _precheck).
            s = ast.JStr(tok[1:-1])
            s.pos = _pos(tok)
            s.raw = str(tok)
            return s
        try:
            value = json.loads(tok)
        except ValueError as exc:
            raise self.source.error(
                f"invalid JSON string: {exc.msg}", _pos(tok), hint="escape a quote as \\\" and a backslash as \\\\"
            ) from None
        lone = _SURROGATE.search(value)
        if lone:
            raise self.source.error(
                f"a lone surrogate \\u{ord(lone.group()):04x} in a JSON string",
                _pos(tok),
                hint="write the character itself, or a full pair such as \\ud83d\\ude00",
            )
        s = ast.JStr(value)
        s.pos = _pos(tok)
        s.raw = str(tok)
        return s

    def json_number(self, children):
        (tok,) = children
        try:
            value = json.loads(tok)
        except ValueError:  # more digits than Python converts (sys.get_int_max_str_digits)
            raise self.source.error(
                f"the number {tok[:20]}… ({len(tok)} characters) is too long", _pos(tok), hint="write a smaller number, or quote it as text"
            ) from None
        if value in (float("inf"), float("-inf")):
            raise self.source.error(
                f"the number {tok} is too large", _pos(tok), hint="write a smaller number, or quote it as text"
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
        return ("title", str.__str__(self.json_string([tok])), _pos(tok))

    def input_decl(self, children):
        name, default = children
        return ast.InputDecl(str(name), default, default is None and len(children) == 2 and children[1] is None, _pos(name))

    def inputs(self, children):
        return ("inputs", children, children[0].pos if children else None)

    def recipe_expires(self, children):
        (tok,) = children
        return ("expires", self._duration(tok), _pos(tok))

    def recipe_model(self, children):
        (tok,) = children
        return ("model", str(tok), _pos(tok))

    def approvers(self, children):
        return ("approvers", [str(c) for c in children], _pos(children[0]))

    def _duration(self, tok: Token) -> int:
        n = int(tok[:-1])
        if n <= 0:
            raise self.source.error("a duration must be more than zero", _pos(tok), hint="write e.g. 15m, 90s, 2h or 1d")
        seconds = n * DURATION_UNITS[tok[-1]]
        if seconds > MAX_DURATION:
            raise self.source.error("a duration longer than 365 days", _pos(tok), hint="an approval lifetime is at most 365d")
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
        flat = None
        if args is None:
            args = {}
        elif isinstance(args, Token):  # JSON_FLAT or JSON_LINE (which the lexer made sure decodes)
            flat = _plain_json(str(args))
            if flat is None:
                args = self._flat_json(args)
            else:
                args, flat = flat, (str(args), args.line, args.column)
        return ast.ToolCall(server, tool, args, _pos(addr), flat)

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
        for m in _FLAT_PART.finditer(raw):
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
            elif part.isdigit() and len(part) <= _MAX_PLAIN_DIGITS:
                value = int(part)
            elif part in _LITERALS:
                value = _LITERALS[part]
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
            args, end = _PLAIN.raw_decode(tok, start)
        except (_NotPlain, ValueError):
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
            prompt = (m.group("prompt") or "").strip()
            start = tok.column + len("write") + (len(text) - len(text.lstrip())) + m.start("inputs")
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

    def timeout(self, children):
        (tok,) = children
        seconds = self._duration(tok)
        if seconds > MAX_TIMEOUT:
            raise self.source.error("a step's timeout is at most 1d", _pos(tok), hint="write e.g. timeout: 30s or timeout: 5m")
        return ast.Option("timeout", seconds, _pos(tok))

    def retries(self, children):
        (tok,) = children
        n = int(tok)
        if not 1 <= n <= MAX_RETRIES:
            raise self.source.error(f"retries must be from 1 to {MAX_RETRIES}", _pos(tok), hint="write e.g. retries: 2 (tried again twice, after a pause that doubles each time)")
        keyword = self.source.line(tok.line).find("retries")  # the option's own word, for the caret
        return ast.Option("retries", n, ast.Pos(tok.line, keyword + 1, len("retries")) if keyword >= 0 else _pos(tok))

    def without_asking(self, children):
        (tok,) = children
        return ast.Option("without_asking", True, _pos(tok))

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
        lexer=_Lexer,
        postlex=_Indenter(),
        maybe_placeholders=True,
        propagate_positions=False,
        transformer=builder,
        cache=True,
    )
    builder.json_flat = re.compile(parser.get_terminal("JSON_FLAT").pattern.to_regexp())
    return parser, builder


def parse(source: Source) -> ast.Recipe:
    """Parse recipe text into a syntax tree, or raise RecipeError."""
    _precheck(source)
    parser, builder = _lark()
    # The lock also covers error handling: the indenter's state (which
    # brackets are open) is read to explain the error.
    with _lock:  # the embedded transformer holds the current source
        builder.source = source
        try:
            return parser.parse(source.text + "\n")
        except RecipeError:
            raise
        except _Unclosed as exc:
            raise _unclosed(source, exc.token) from None
        except _TooDeep as exc:
            tok = exc.token
            if exc.what == "JSON":
                pos = _pos(tok)
            else:
                pos = ast.Pos(tok.end_line or tok.line, tok.end_column or tok.column)
            raise source.error(
                f"{exc.what} nested more than {MAX_DEPTH} levels deep", pos, hint=f"flatten it: at most {MAX_DEPTH} levels"
            ) from None
        except _BadDedent as exc:
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
        _pos(tok),
        hint=f"close it with `{close}`{where}; JSON may span lines only while a bracket is open",
    )


# Characters that have no business in a recipe (outside a tab, reported on its own).
_CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\ufeff\ud800-\udfff]|\r(?!\n)")
_ASCII_OK = bytes(b for b in range(128) if not re.match(_CONTROL.pattern, chr(b) + "\n"))


def _clean_ascii(text: str) -> bool:
    """True if ASCII text has nothing _CONTROL would find (a regex search costs 10x more)."""
    return text.isascii() and not text.encode("ascii").translate(None, _ASCII_OK) and ("\r" not in text or not _CONTROL.search(text))


def _lines(text: str) -> Iterator[str]:
    """``text.split("\n")``, one line at a time, for loops that stop at the first line of substance."""
    start = 0
    while (end := text.find("\n", start)) >= 0:
        yield text[start:end]
        start = end + 1
    yield text[start:]


def _precheck(source: Source) -> None:
    """Errors that read better before the lexer sees the text."""
    text = source.text
    bad = None if _clean_ascii(text) else _CONTROL.search(text)
    if bad:
        at = bad.start()
        line = text.count("\n", 0, at) + 1
        col = at - (text.rfind("\n", 0, at) + 1) + 1
        ch = bad.group()
        if ch == "\ufeff":
            message, hint = "a byte-order mark (U+FEFF)", "save the file as UTF-8 without a byte-order mark"
        elif "\ud800" <= ch <= "\udfff":
            message, hint = f"a lone surrogate (U+{ord(ch):04X}), which is not text", "the text was decoded wrongly; read the file as UTF-8"
        elif ch == "\r":
            message, hint = "a carriage return that does not end a line", "save the file with \\n (or \\r\\n) line endings"
        else:
            message, hint = f"a control character (U+{ord(ch):04X})", "remove it; a recipe is plain text"
        err = source.error(message, ast.Pos(line, col), hint=hint)
        err.source_line = _SURROGATE.sub("\ufffd", err.source_line or "")  # printable, whatever it held
        raise err
    tab = text.find("\t")
    if tab >= 0:
        line = text.count("\n", 0, tab) + 1
        start = text.rfind("\n", 0, tab) + 1
        col = tab - start + 1
        if text[start:tab].strip(" "):
            raise source.error(
                "a tab character in the middle of a line; recipes use spaces",
                ast.Pos(line, col),
                hint="replace the tab with a space (inside a JSON string, write \\t)",
            )
        raise source.error(
            "a tab character; recipes are indented with spaces",
            ast.Pos(line, col),
            hint="replace each tab with spaces (two per level is the house style)",
        )
    if not text.strip() or all(not l.strip() or l.lstrip().startswith("#") for l in _lines(text)):
        raise source.error(
            "the recipe is empty: it has no steps",
            ast.Pos(1, 1),
            hint="add a step, e.g. `now: time.get_current_time {\"timezone\": \"UTC\"}`",
        )
    for n, line in enumerate(_lines(text), 1):
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
    return expected - _SHORTCUTS


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
        from .lower import RESERVED

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
    if first and not _NAME.match(first.group(2)) and pos.column <= first.end(2) + 1 and expected & {"NAME", "COLON", "EQUAL", "_NL"}:
        name = first.group(2)
        lower = name.lower()
        return source.error(
            f"`{name}` is not a valid name",
            ast.Pos(pos.line, len(first.group(1)) + 1, len(name)),
            hint="names are lower case letters, digits, _ and -, starting with a letter or _"
            + (f": write `{lower}`" if _NAME.match(lower) else ""),
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
