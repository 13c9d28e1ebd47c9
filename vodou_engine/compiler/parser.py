"""Recipe text -> syntax tree, with errors a person can act on: the stages wired together.

The grammar lives in ``grammar.lark`` (package data) and is parsed LALR with
the transformer embedded, so no parse tree is built: for a 10,000-step recipe
that halves the time. The stages, in the order the text meets them:

- checks.py: the whole text, before lexing (control characters, tabs...);
- lexer.py: tokens, and blocks from indentation;
- build.py: the syntax tree (ast.py), built as each rule is reduced;
- explain.py: any error of lark's or the indenter's, in the recipe's terms.

Lark's own exceptions never leave this module; each is turned into a
``RecipeError`` with line, column, caret and a hint.
"""

from __future__ import annotations

import re
import threading
from functools import lru_cache
from importlib import resources
from typing import cast

from lark import Lark
from lark.exceptions import UnexpectedInput

from ..errors import RecipeError
from . import ast
from .build import Builder
from .checks import precheck
from .explain import bad_dedent, syntax_error, too_deep, unclosed
from .lexer import BadDedent, BlockIndenter, RecipeLexer, TooDeep, Unclosed
from .source import Source

_lock = threading.Lock()


@lru_cache(maxsize=1)
def _lark() -> tuple[Lark, Builder]:
    """One parser per process; the grammar analysis is cached on disk by lark."""
    grammar = resources.files(__package__).joinpath("grammar.lark").read_text(encoding="utf-8")
    builder = Builder(Source("", None))
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
            # lark types parse() as returning a tree; with the transformer embedded it is what `start` built
            return cast(ast.Recipe, parser.parse(source.text + "\n"))
        except RecipeError:
            raise
        except Unclosed as exc:
            raise unclosed(source, exc.token) from None
        except TooDeep as exc:
            raise too_deep(source, exc) from None
        except BadDedent as exc:
            raise bad_dedent(source, exc) from None
        except UnexpectedInput as exc:
            raise syntax_error(source, exc, list(getattr(parser.options.postlex, "opened", ()))) from None
        except RecursionError:
            raise source.error("the recipe is nested too deeply", None, hint="flatten the JSON or the blocks") from None
