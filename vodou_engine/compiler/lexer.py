"""Recipe text -> tokens: lark's contextual lexer, made faster, and Python-style blocks.

The terminals are grammar.lark's; what is added here is the bookkeeping
lark would do per token in several calls (done in one loop), the veto on
one-line JSON that would not decode, and an indenter that raises errors
(``Unclosed``, ``TooDeep``, ``BadDedent``) the parser turns into messages
instead of asserting.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator
from copy import copy
from typing import TYPE_CHECKING, ClassVar, Protocol

from lark import Token
from lark.indenter import Indenter
from lark.lexer import AbstractBasicLexer, BasicLexer, ContextualLexer, PatternStr, UnlessCallback

from ..limits import MAX_DEPTH  # nesting of JSON brackets, and of indented blocks
from .literals import plain_json

if TYPE_CHECKING:
    from lark.common import LexerConf
    from lark.lexer import LexerState
    from lark.parsers.lalr_analysis import ParseTableBase
    from lark.parsers.lalr_parser_state import ParserState


class BlockIndenter(Indenter):
    """Python-style blocks, with errors instead of asserts.

    Newlines inside ``{`` or ``[`` are ignored so JSON can span lines; the
    opening bracket is remembered so an unclosed one can be pointed at.
    """

    NL_type = "_NL"
    OPEN_PAREN_types: ClassVar[list[str]] = ["LBRACE", "LSQB"]
    CLOSE_PAREN_types: ClassVar[list[str]] = ["RBRACE", "RSQB"]
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
                    raise TooDeep(token, "JSON")
            elif token.type in ("RBRACE", "RSQB") and self.paren_level:
                self.paren_level -= 1
                self.opened.pop()
        if self.opened:
            raise Unclosed(self.opened[-1])
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
                raise TooDeep(token, "blocks")
            yield Token.new_borrow_pos("_INDENT", "", token)
            return
        while indent < self.indent_level[-1]:
            self.indent_level.pop()
            yield Token.new_borrow_pos("_DEDENT", "", token)
        if indent != self.indent_level[-1]:
            raise BadDedent(token, indent, self.indent_level[-1])


# Terminals that stand for several tokens of the rules (grammar.lark): an
# error never names them, as the grammar without them would not.
SHORTCUTS = frozenset({"STEP_NL", "JSON_LINE"})
_NEWLINES = frozenset({"_NL", "STEP_NL"})  # tokens that end a line: the indentation after them counts


class _Match(Protocol):
    """What the lexer reads off a match of a scanner's pattern.

    Every alternative in the pattern lark builds for a scanner is a named
    group, one per terminal, so a match always names its terminal.
    """

    lastgroup: str

    def group(self) -> str: ...

    def end(self) -> int: ...


_Scan = Callable[[str, int, int], _Match | None]
"""A scanner's compiled pattern's ``match``: the text, where to start, where the text ends."""
_Table = tuple[
    _Scan | None, dict[str, dict[str, str]], frozenset[str], frozenset[str], Callable[[str, int, int], _Match] | None
]
"""Per parser state: the one pattern (None: lark's own loop), keywords per terminal, the
newline and ignored terminals, and the pattern without the vetoed terminals (which
always matches where a vetoed one did)."""


def _basic(lexer: AbstractBasicLexer) -> BasicLexer:
    """The lexers a ContextualLexer builds are its ``BasicLexer`` class (lark's own): their scanner is what is reused."""
    if not isinstance(lexer, BasicLexer):
        raise RuntimeError(f"grammar.lark: a {type(lexer).__name__} where lark's BasicLexer was expected")
    return lexer


class RecipeLexer(ContextualLexer):
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

    def __init__(self, conf: LexerConf):
        # lark gives a custom lexer only its configuration; the per-state
        # lexers need the parse table, which comes with the first parse.
        self._conf = conf
        self._tables: dict[int, _Table] | None = None

    def _setup(self, parse_table: ParseTableBase[int]) -> dict[int, _Table]:
        states: dict[int, Collection[str]] = {idx: list(t.keys()) for idx, t in parse_table.states.items()}
        always = tuple(self._conf.postlex.always_accept) if self._conf.postlex else ()
        ContextualLexer.__init__(self, self._conf, states, always_accept=always)
        # The root lexer only names what was found where nothing fits, for
        # the error: it reads lines in parts, as the rules do.
        root = copy(self._conf)
        root.terminals = [t for t in self._conf.terminals if t.name not in SHORTCUTS]
        root.skip_validation = True
        self.root_lexer = self.BasicLexer(root, None)
        tables: dict[int, _Table] = {}
        self._tables = tables
        return tables

    def _table(self, tables: dict[int, _Table], state: int) -> _Table:
        lexer = _basic(self.lexers[state])
        mres = lexer.scanner._mres  # builds lexer.callback too
        keywords: dict[str, dict[str, str]] = {}
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
            other = _basic(self.BasicLexer(conf, None))
            fallbacks = {_VETO[t.name][1] for t in lexer.terminals if t.name in _VETO}
            same = simple and len(other.scanner._mres) == 1 and other.callback.keys() == lexer.callback.keys()
            if not same or not fallbacks <= {t.name for t in conf.terminals}:
                raise RuntimeError(f"grammar.lark: state {state} cannot veto {sorted(_VETO)} here")
            instead = other.scanner._mres[0].match
        table: _Table = (mres[0].match if simple else None, keywords, lexer.newline_types, lexer.ignore_types, instead)
        tables[state] = table
        return table

    def lex(self, lexer_state: LexerState, parser_state: ParserState[int]) -> Iterator[Token]:
        tables = self._tables
        if tables is None:
            tables = self._setup(parser_state.parse_conf.parse_table)
        stack = parser_state.state_stack
        text = lexer_state.text.text
        end = lexer_state.text.end
        ctr = lexer_state.line_ctr
        pos, line, line_start = ctr.char_pos, ctr.line, ctr.line_start_pos
        token = lexer_state.last_token
        new_str = str.__new__
        while pos < end:
            state = stack[-1]
            match, keywords, newline_types, ignore_types, instead = tables.get(state) or self._table(tables, state)
            m = match(text, pos, end) if match is not None else None
            if m is None:
                break  # lark's own loop below lexes it, or raises its error
            type_ = m.lastgroup
            if type_ in _VETO and not _VETO[type_][0](m.group()):
                assert instead is not None, "a state with a vetoed terminal has a pattern without it"
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


class Unclosed(Exception):
    """A bracket still open at the end of the text."""

    def __init__(self, token: Token) -> None:
        self.token = token


class TooDeep(Exception):
    """Brackets or blocks nested deeper than MAX_DEPTH; ``what`` says which."""

    def __init__(self, token: Token, what: str) -> None:
        self.token = token
        self.what = what


class BadDedent(Exception):
    """A line indented to no level of the blocks around it."""

    def __init__(self, token: Token, indent: int, expected: int) -> None:
        self.token = token
        self.indent = indent
        self.expected = expected


# A JSON_LINE token is taken only if it decodes so (see grammar.lark), and
# is not nested deep enough for the indenter to refuse (a crude count will
# do: what it turns away only takes the long way). Each vetoed terminal comes
# with one that matches wherever it does (its first token), so the lexer
# always has something to take instead.
_VETO: dict[str, tuple[Callable[[str], bool], str]] = {
    "JSON_LINE": (
        lambda text: text.count("{") + text.count("[") <= MAX_DEPTH and plain_json(text) is not None,
        "LBRACE",
    ),
}
