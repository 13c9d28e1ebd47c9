"""``recipe serve``, ``worker``, ``mcp`` and ``author``: the long-running services, and the drafting model.

Each keeps its flags (``add_arguments``, which ``cli.py`` reads for the parser)
and its body (``run``) beside the code it serves: ``web/serve.py``,
``workers/command.py``, ``agents/mcp_server.py``, ``agents/author.py``. These are
the CLI's handles on them.
"""

from __future__ import annotations

from typing import Any

from ..agents import author, mcp_server
from ..web import serve
from ..workers import command as worker


def cmd_serve(args: Any) -> int:
    return serve.run(args)


def cmd_worker(args: Any) -> int:
    return worker.run(args)


def cmd_mcp(args: Any) -> int:
    return mcp_server.run(args)


def cmd_author(args: Any) -> int:
    return author.run(args)
