"""The words of the language: what a name looks like, and which words no name may be.

The parser's error explanations and lowering both need them (one to say
why a line does not parse, the other to refuse a step or block named so);
kept here, below both, so neither has to import the other.
"""

from __future__ import annotations

import re

from ..bounds import RESERVED  # one list for the language and for a plan from anywhere

NAME = re.compile(r"[a-z_][a-z0-9_-]*\Z")
"""A step, block or input name, as a whole string."""

BARE_SERVER = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]*\Z")
BARE_TOOL = re.compile(r"[A-Za-z0-9_](?:[A-Za-z0-9_.-]*[A-Za-z0-9_-])?\Z")
"""A server's key and a tool's name that a recipe may write as they are, unquoted
(grammar.lark's ``_SERVER`` and ``_TOOL``); any other name is written in double quotes."""


def split_address(text: str) -> tuple[str, str]:
    """A TOOL_ADDRESS token as (server, tool), quotes taken off: ``"Everything".get-env``
    is ``("Everything", "get-env")``. A bare server holds no dot, so the first dot
    outside quotes ends it; everything after it is the tool's name, dots included."""
    if text.startswith('"'):
        end = text.index('"', 1)
        server, tool = text[1:end], text[end + 2 :]
    else:
        server, _, tool = text.partition(".")
    if tool.startswith('"'):
        tool = tool[1:-1]
    return server, tool


def written_address(server: str, tool: str) -> str:
    """How a recipe writes the address of ``tool`` on ``server``: each name as it is
    when it may stand bare, else in double quotes. ``split_address`` reads it back."""
    return f"{written_server(server)}.{_written(tool, BARE_TOOL)}"


def written_server(server: str) -> str:
    """How a recipe writes a server's key: as it is, or in double quotes."""
    return _written(server, BARE_SERVER)


def _written(name: str, bare: re.Pattern[str]) -> str:
    return name if bare.match(name) else f'"{name}"'


__all__ = ["BARE_SERVER", "BARE_TOOL", "NAME", "RESERVED", "split_address", "written_address", "written_server"]
