"""One command run on its own (``python -m vodou_engine.web.serve``, ``…workers.command``,
``…agents.mcp_server``, ``…agents.author``), without the rest of the CLI: the same flags,
and a library error printed as its message with its exit code, never a traceback."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any

from .errors import VodouError


def command_main(
    argv: list[str] | None,
    *,
    prog: str,
    description: str,
    add_arguments: Callable[[argparse.ArgumentParser], None],
    run: Callable[[Any], int],
    before: Callable[[], None] | None = None,
) -> int:
    parser = argparse.ArgumentParser(prog=prog, description=description)
    add_arguments(parser)
    args = parser.parse_args(argv)
    if before is not None:
        before()
    try:
        return run(args)
    except VodouError as exc:
        print(str(exc), file=sys.stderr)
        return exc.exit_code
