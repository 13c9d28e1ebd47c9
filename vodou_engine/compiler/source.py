"""The text being compiled, and positions in it.

Every stage (pre-checks, lexer, tree building, error explanations, lowering)
reports its errors through ``Source.error``, so a message always carries the
file, line, column, the line itself and a caret the same way.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..errors import RecipeError
from . import ast

if TYPE_CHECKING:
    from lark import Token


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

    def error(
        self, message: str, pos: ast.Pos | None, hint: str | None = None, cls: type[RecipeError] = RecipeError
    ) -> RecipeError:
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


def token_pos(tok: Token, width: int | None = None) -> ast.Pos:
    """Where a lark token was written; its own length is the caret's width unless ``width`` says otherwise."""
    line, column = tok.line, tok.column
    assert line is not None and column is not None, "every token the lexer makes has its place"
    return ast.Pos(line, column, width if width is not None else max(1, len(tok)))


def token_end(tok: Token) -> ast.Pos:
    """Where a token ends (after a newline: where the next line starts), or where it starts if lark did not say."""
    line, column = tok.end_line or tok.line, tok.end_column or tok.column
    assert line is not None and column is not None, "every token the lexer makes has its place"
    return ast.Pos(line, column)
