"""``${VAR}`` in a server's configuration: how it is written and what it refers to.

The syntax alone: ``${NAME}``, ``${NAME:-default}``, ``${env:NAME}`` and
``$$``. Taking the values from the environment is
:meth:`~vodou_engine.servers.config.ServerConfig.resolve`; the server file's
check that every reference is well formed is ``servers/file.py``'s.
"""

from __future__ import annotations

import re

__all__ = ["TEMPLATE_HINT", "VAR_NAME", "parse_template", "template_vars"]

VAR_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
"""What a variable's name may be."""

TEMPLATE_HINT = "write ${NAME} or ${NAME:-default} for a variable, and $$ for a literal $"


def parse_template(text: str) -> list[str | tuple[str, str | None]]:
    """``text`` as literal pieces and ``(variable, default or None)`` references.

    ``${NAME}``, ``${NAME:-default}`` (the default when NAME is unset or empty,
    taken as written), ``${env:NAME}`` (the spelling of VS Code and Cursor) and
    ``$$`` for a literal ``$``; any other ``$`` is itself. Raises ValueError
    saying what is wrong for an unterminated or malformed ``${``.
    """
    parts: list[str | tuple[str, str | None]] = []
    literal: list[str] = []
    i = 0
    while True:
        j = text.find("$", i)
        if j < 0:
            literal.append(text[i:])
            break
        literal.append(text[i:j])
        after = text[j + 1 : j + 2]
        if after == "$":
            literal.append("$")
            i = j + 2
            continue
        if after != "{":
            literal.append("$")
            i = j + 1
            continue
        end = text.find("}", j + 2)
        if end < 0:
            raise ValueError(f"unterminated ${{ in {text!r}")
        body = text[j + 2 : end]
        var, sep, default = body.partition(":-")
        var = var.removeprefix("env:")
        if not VAR_NAME.match(var):
            raise ValueError(f"${{{body}}} is not a variable reference")
        if "".join(literal):
            parts.append("".join(literal))
        literal = []
        parts.append((var, default if sep else None))
        i = end + 1
    if "".join(literal):
        parts.append("".join(literal))
    return parts


def template_vars(text: str) -> list[str]:
    """The variables ``text`` refers to, in order (an invalid template refers to none)."""
    try:
        return [p[0] for p in parse_template(text) if not isinstance(p, str)]
    except ValueError:
        return []
