"""How a run calls tools: built-ins in-process or on threads, everything else over the hub.

Reads and effects are called differently on purpose. A read either gives a
value or fails its step. An effect's outcome decides what the record says
happened, so :meth:`Tools.prepare_effect` does every check that can fail
without calling the tool (the server is up, the tool is listed, the
idempotency key has a place to go) *before* the effect is claimed in the
store, and :meth:`Tools.effect` hands back the hub's answer untouched for
:mod:`effects` to judge.
"""

from __future__ import annotations

import copy
from collections.abc import Coroutine, Mapping
from typing import TYPE_CHECKING, Any

import trio

from ..errors import ArgumentsRejectedError, NoReplyError, NotSentError, ToolError
from ..policy import BUILTIN_SERVER
from ..tools.schema_check import problems, where
from . import builtin
from .freeze import key_field
from .threads import Blocking

if TYPE_CHECKING:
    from ..tools.hooks import CallHooks
    from ..tools.hub import Hub
    from ..tools.results import ToolResult


class Tools:
    def __init__(self, hub: Hub | None, threads: Blocking):
        self.hub = hub
        self.threads = threads

    async def read(
        self,
        server: str,
        tool: str,
        args: dict[str, Any],
        *,
        timeout: float | None = None,
        hooks: CallHooks | None = None,
    ) -> Any:
        """A read's value; ToolError (the step fails) for an error or no usable reply.
        ``timeout``: the step's own limit (else the server's ``callTimeout``); ``hooks``:
        what the step hears while the call is out (``runtime/elicit.py``)."""
        value, _ = await self.read_whole(server, tool, args, timeout=timeout, hooks=hooks)
        return value

    async def read_whole(
        self,
        server: str,
        tool: str,
        args: dict[str, Any],
        *,
        timeout: float | None = None,
        hooks: CallHooks | None = None,
    ) -> tuple[Any, list[Any] | None]:
        """A read's value and the content blocks the value does not give back (``ToolResult.content``)."""
        if server == BUILTIN_SERVER:
            fn, blocking = builtin.TOOLS[tool]
            if not blocking:
                return fn(args), None
            if timeout is None:
                return await self.threads.run(fn, args), None
            with trio.move_on_after(timeout):
                return await self.threads.run(fn, args), None
            raise NoReplyError(
                f"{server}.{tool} did not finish within the step's timeout of {timeout:g} s",
                server=server,
                tool=tool,
                timeout=timeout,
            )
        return self.read_value(server, tool, await self.hub_call(server, tool, args, timeout=timeout, hooks=hooks))

    def hub_call(
        self,
        server: str,
        tool: str,
        args: dict[str, Any],
        *,
        timeout: float | None = None,
        hooks: CallHooks | None = None,
    ) -> Coroutine[Any, Any, ToolResult]:
        """``Hub.call`` for a read, not yet awaited: the caller awaits the hub's own coroutine, so
        no frame of this class is passed through each time the call waits (a chain's step)."""
        if self.hub is None:
            raise NotSentError(f"no server session for {server}", server=server)
        return self.hub.call(server, tool, args, timeout=timeout, hooks=hooks)

    @staticmethod
    def read_value(server: str, tool: str, result: ToolResult) -> tuple[Any, list[Any] | None]:
        """A read's value and content blocks, from the hub's answer; ToolError (the step fails)
        when it is an error."""
        if result.is_error:
            code = f" (JSON-RPC error {result.error_code})" if result.error_code is not None else ""
            raise ToolError(
                f"{server}.{tool} failed{code}: {result.text}", server=server, tool=tool, code=result.error_code
            )
        return result.value, result.content

    async def check_payload(self, step: str, server: str, tool: str, payload: Any, *, complete: bool = False) -> Any:
        """Raise ArgumentsRejectedError (nothing asked, nothing called) when the payload a
        question is about to freeze breaks the tool's input schema: a card must never show
        what the server would refuse. The idempotency key counts as given where the schema
        has a place for it (:meth:`prepare_effect` puts it there after the approval).

        The payload to freeze: with ``complete``, every field the payload leaves out that
        the schema gives a ``default`` is filled with it (:func:`with_schema_defaults`), so
        the card shows, and the server receives, the value the server would otherwise choose
        out of sight (docs/safety.md, "A tool's schema defaults are sent")."""
        if server == BUILTIN_SERVER or self.hub is None:
            return payload
        await self.hub.wait_ready()
        schema = self.hub.tool(server, tool).input_schema  # UnknownToolError (not sent) if it is gone
        field = key_field(schema)
        if complete:
            payload = with_schema_defaults(schema, payload, skip=field)
        args = payload
        if isinstance(payload, dict) and field is not None:
            args = {field: "the run's idempotency key", **payload}
        faults = problems(schema, args)
        if faults:
            said = "; ".join(f"{where(f.path)}: {f.message}" for f in faults)
            raise ArgumentsRejectedError(
                f"step `{step}`: the payload breaks {server}.{tool}'s input schema, so nobody was asked "
                f"and nothing was called: {said}",
                hint="the values a reference filled are the ones at fault; change what the step reads, or the recipe",
                server=server,
                tool=tool,
                step=step,
                problems=[{"path": list(f.path), "message": f.message, "keyword": f.keyword} for f in faults],
            )
        return payload

    async def completed(self, server: str, tool: str, payload: Any) -> Any:
        """``payload`` with the tool's schema defaults filled where it leaves a field out
        (:func:`with_schema_defaults`), checking nothing: a loop item's payload, made again
        on every drive, is fingerprinted as its batch card froze it (``check_payload`` with
        ``complete``). A default changed since the question makes another fingerprint: the
        item is not among those approved, and does not run."""
        if server == BUILTIN_SERVER or self.hub is None:
            return payload
        try:
            await self.hub.wait_ready()
            schema = self.hub.tool(server, tool).input_schema
        except NotSentError:
            return payload  # the server or the tool is gone: the call fails as never sent, saying why
        return with_schema_defaults(schema, payload, skip=key_field(schema))

    async def prepare_effect(self, server: str, tool: str, payload: Any, key: str) -> dict[str, Any]:
        """The arguments an effect will be called with, once every local check has passed.

        Waits for the server to be up, then looks the tool up; raises
        NotSentError (nothing claimed, nothing called) when either fails.
        The idempotency key goes in when the tool's input schema has a place
        for it and the payload left it empty (docs/safety.md): a payload that
        sets the field itself showed that value on its card, so that value is
        what is sent, never replaced by the run's key behind the card.
        """
        args = dict(payload) if isinstance(payload, dict) else payload
        if server == BUILTIN_SERVER:
            return args
        if self.hub is None:
            raise NotSentError(f"no server session for {server}; nothing was called", server=server)
        await self.hub.wait_ready()
        info = self.hub.tool(server, tool)  # UnknownToolError (a NotSentError) if renamed since the question
        field = key_field(info.input_schema)
        if isinstance(args, dict) and field is not None and field not in args:
            args[field] = key
        return args

    async def effect(
        self,
        server: str,
        tool: str,
        args: dict[str, Any],
        *,
        timeout: float | None = None,
        hooks: CallHooks | None = None,
    ) -> Any:
        """The hub's answer to an effect: a ToolResult, or NotSentError / NoReplyError."""
        if self.hub is None:
            raise NotSentError(f"no server session for {server}; nothing was called", server=server)
        return await self.hub.call(server, tool, args, timeout=timeout, hooks=hooks)


def with_schema_defaults(schema: Any, payload: Any, *, skip: str | None = None) -> Any:
    """``payload`` with each top-level field it leaves out that ``schema`` gives a ``default``
    filled with that default: what the server would otherwise fill in out of sight (a
    ``"broadcast": {"default": true}`` the card never showed). ``skip``: the idempotency
    field, which the run's key fills (:func:`key_field`). A default the schema itself
    refuses (``{"type": "string", "default": null}``, as a Python ``x: str = None`` is
    described) is left out: sent, the server would refuse it; left out, it means "nothing
    given". Fields of nested objects are not filled (docs/safety.md says so)."""
    properties = schema.get("properties") if isinstance(schema, Mapping) else None
    if not isinstance(payload, dict) or not isinstance(properties, Mapping):
        return payload
    out = dict(payload)
    for name, prop in properties.items():
        if name in out or name == skip or not isinstance(prop, Mapping) or "default" not in prop:
            continue
        candidate = {**out, name: copy.deepcopy(prop["default"])}
        if skip is not None:
            if not problems(schema, {skip: "the run's idempotency key", **candidate}):
                out = candidate
        elif not problems(schema, candidate):
            out = candidate
    return out
