"""The tools of the agent MCP server, as the official SDK declares them.

Each tool's name, title, annotations (the read-only, destructive, idempotent and
open-world hints) and description (its docstring) are written here; its input
schema is the one the SDK derives from its signature, and its result is a JSON
object. Each calls the tools' implementation (``handlers.py``), which knows nothing
of MCP. No ``from __future__ import annotations`` here: the SDK reads these
signatures.

Every tool is declared behind the same wrapper:

- a call with an argument the tool does not declare is refused, not ignored
  (``usage``; nothing is done): no argument of any tool approves anything;
- every failure becomes an ``is_error`` result carrying the error as data
  (``error_data.py``); one that is not the engine's own is also logged.
"""

import functools
import inspect
import json
import logging
from collections.abc import Callable
from typing import Any

from mcp.server.mcpserver import Context, MCPServer
from mcp.types import CallToolResult, TextContent, ToolAnnotations

from ..errors import UsageError, VodouError
from ..runs import plain_error
from .error_data import error_data
from .handlers import WHERE_A_PERSON_DECIDES, AgentServer

logger = logging.getLogger(__name__)

READ = ToolAnnotations(read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=False)
"""A tool that changes nothing."""

Declare = Callable[[str, ToolAnnotations, str], Callable[[Callable[..., Any]], Callable[..., Any]]]


def add_tools(server: MCPServer[Any], impl: AgentServer, who: Callable[[Context], str]) -> None:
    """Declare the eight tools on ``server``; each calls ``impl``, and ``who`` says which
    agent is calling (``agent:NAME``)."""
    tool = _declarer(server)

    @tool("list_tools", READ, "Tools the recipes can call, with their risk")
    def list_tools(ctx: Context, refresh: bool = False) -> dict[str, Any]:
        """The configured MCP servers' tools: address (SERVER.TOOL), description, input schema, and risk
        (read, write or critical) with where the risk came from (the policy file, the server's annotations,
        or the words of the tool's name). A step calling a write or critical tool stops its run and asks a
        person before it runs; a read runs freely. Servers are started to list their tools; no tool is
        called. The list is reused for a few minutes; refresh=true lists again."""
        return impl.list_tools(refresh)

    @tool("check_recipe", READ, "Compile a recipe and show its plan card")
    def check_recipe(ctx: Context, recipe: str, name: str | None = None) -> dict[str, Any]:
        """Compile a recipe text (nothing is run or saved). Returns ok, the plan card as text (`card`) and
        as JSON (`plan`: each step's tool, risk, where the risk came from, and whether it asks a person
        first), or `errors`, each with code, message, line, column, source_line, caret (the line of ^ under
        the place) and hint. Tools are checked against the live catalogue (a misspelt tool gets the closest
        real name). A recipe with `without asking` is an error here: only a person may opt out of asking."""
        return impl.check_recipe(recipe, name)

    @tool(
        "save_recipe",
        ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=False, open_world_hint=False),
        "Save a recipe (a new version)",
    )
    def save_recipe(ctx: Context, recipe: str, name: str | None = None) -> dict[str, Any]:
        """Save a recipe text as a new version of `name` (default: its title); older versions are kept.
        Nothing runs. Saved as proposed by an agent: it may not opt out of asking. If it names no
        `approvers:`, the people this server runs for are added as its approvers (an agent never decides)."""
        return impl.save_recipe(who(ctx), recipe, name)

    @tool(
        "start_run",
        ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=False, open_world_hint=True),
        "Start a run (it parks before every effect)",
    )
    def start_run(
        ctx: Context, recipe: str, inputs: dict[str, Any] | None = None, name: str | None = None
    ) -> dict[str, Any]:
        """Start a run of a recipe text with `inputs`. Read steps and write (text) steps run now; before
        every step that changes something the run parks and this tool returns at once with the run id,
        its state and each pending approval: its card, fingerprint, and where a person decides. It never
        waits for a person. A person decides with `recipe approve RUN STEP` (or `recipe reject`), or in
        the web inbox when `recipe serve` runs; you cannot approve, and nothing you write counts as an
        approval. A recipe with `without asking` is refused. Follow the run with run_status."""
        return impl.start_run(who(ctx), recipe, inputs, name)

    @tool("run_status", READ, "Where one of your runs stands")
    def run_status(ctx: Context, run: str) -> dict[str, Any]:
        """State, each step's state and output, pending approvals (with their card and where a person
        decides: `recipe approve RUN STEP`, or the web inbox of `recipe serve`), decisions taken and
        effects, of a run you started. Runs started by others are not shown unless the person running
        this server allowed it."""
        return impl.run_status(who(ctx), run)

    @tool("list_runs", READ, "Your runs, newest first")
    def list_runs(ctx: Context, state: str | None = None, limit: int = 20) -> dict[str, Any]:
        """The runs you started, newest first (state: running, parked, interrupted, succeeded, failed,
        declined or cancelled). A parked run waits for a person: `recipe approve` or the web inbox."""
        return impl.list_runs(who(ctx), state, limit)

    @tool(
        "propose_schedule",
        ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=False, open_world_hint=False),
        "Propose a schedule (created paused)",
    )
    def propose_schedule(
        ctx: Context,
        name: str,
        cron: str,
        tz: str = "UTC",
        recipe: str | None = None,
        saved: str | None = None,
        inputs: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Propose running a recipe on a cron schedule (five fields, e.g. "0 8 * * 1-5", in the IANA zone
        `tz`). Give the recipe's text (`recipe`, saved first) or a saved recipe's name (`saved`). The
        schedule is created paused: it never fires until a person enables it (`recipe schedule resume
        NAME`, or the web page of `recipe serve`), and every run it starts still parks before each effect
        for a person to decide."""
        return impl.propose_schedule(who(ctx), name, cron, tz, recipe, saved, inputs)

    @tool(
        "draft_recipe",
        ToolAnnotations(read_only_hint=True, destructive_hint=False, idempotent_hint=False, open_world_hint=True),
        "Draft a recipe from one sentence",
    )
    def draft_recipe(ctx: Context, sentence: str, model: str | None = None) -> dict[str, Any]:
        """Draft a recipe from one sentence with a model the person configured (the `llm` library), from
        the live tool catalogue; the draft is compiled and corrected from the compiler's errors (a few
        rounds at most). Returns the recipe, its plan card, and a proposed schedule when the sentence asks
        for one. Nothing is saved or run: use check_recipe, save_recipe, start_run, propose_schedule."""
        return impl.draft_recipe(sentence, model)


def _declarer(server: MCPServer[Any]) -> Declare:
    """``@tool(name, annotations, title)``: add the function to ``server`` as that tool,
    behind the check of its arguments and the error result."""

    def tool(name: str, annotations: Any, title: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        def register(fn: Callable[..., Any]) -> Callable[..., Any]:
            declared = [p for p in inspect.signature(fn).parameters if p != "ctx"]

            @functools.wraps(fn)
            def call(ctx: Context, **kwargs: Any) -> Any:
                try:
                    given = dict((ctx.request_context.params or {}).get("arguments") or {})
                    extra = sorted(set(given) - set(declared))
                    if extra:
                        raise UsageError(
                            f"{name} has no argument {', '.join(f'`{e}`' for e in extra)}; nothing was done",
                            hint=f"its arguments: {', '.join(declared) or 'none'}. " + WHERE_A_PERSON_DECIDES,
                            arguments=extra,
                        )
                    return fn(ctx, **kwargs)
                except BaseException as exc:  # noqa: BLE001 - every failure becomes an is_error result
                    return _error_result(exc)

            server.add_tool(call, name=name, title=title, annotations=annotations)
            return fn

        return register

    return tool


def _error_result(exc: BaseException) -> CallToolResult:
    if isinstance(exc, BaseExceptionGroup):
        leaf = plain_error(exc)
        exc = leaf if leaf is not None else exc
    if isinstance(exc, (KeyboardInterrupt, SystemExit)):
        raise exc
    if not isinstance(exc, VodouError):
        logger.exception("agent tool failed")  # noqa: LOG004 - called only from the tool's except block
    data = {"error": error_data(exc)}
    return CallToolResult(
        content=[TextContent(type="text", text=json.dumps(data, ensure_ascii=False, indent=2, default=str))],
        structured_content=data,
        is_error=True,
    )
