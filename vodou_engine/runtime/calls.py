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

from typing import TYPE_CHECKING, Any

import trio

from ..errors import NoReplyError, NotSentError, ToolError
from ..policy import BUILTIN_SERVER
from . import builtin
from .freeze import IDEMPOTENCY_FIELDS
from .threads import Blocking

if TYPE_CHECKING:
    from ..tools.hooks import CallHooks
    from ..tools.hub import Hub


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
        if server == BUILTIN_SERVER:
            fn, blocking = builtin.TOOLS[tool]
            if not blocking:
                return fn(args)
            if timeout is None:
                return await self.threads.run(fn, args)
            with trio.move_on_after(timeout):
                return await self.threads.run(fn, args)
            raise NoReplyError(
                f"{server}.{tool} did not finish within the step's timeout of {timeout:g} s",
                server=server,
                tool=tool,
                timeout=timeout,
            )
        if self.hub is None:
            raise NotSentError(f"no server session for {server}", server=server)
        result = await self.hub.call(server, tool, args, timeout=timeout, hooks=hooks)
        if result.is_error:
            code = f" (JSON-RPC error {result.error_code})" if result.error_code is not None else ""
            raise ToolError(
                f"{server}.{tool} failed{code}: {result.text}", server=server, tool=tool, code=result.error_code
            )
        return result.value

    async def prepare_effect(self, server: str, tool: str, payload: Any, key: str) -> dict[str, Any]:
        """The arguments an effect will be called with, once every local check has passed.

        Waits for the server to be up, then looks the tool up; raises
        NotSentError (nothing claimed, nothing called) when either fails.
        The idempotency key goes in when the tool's input schema has a place
        for it (docs/safety.md).
        """
        args = dict(payload) if isinstance(payload, dict) else payload
        if server == BUILTIN_SERVER:
            return args
        if self.hub is None:
            raise NotSentError(f"no server session for {server}; nothing was called", server=server)
        await self.hub.wait_ready()
        info = self.hub.tool(server, tool)  # UnknownToolError (a NotSentError) if renamed since the question
        if isinstance(args, dict):
            properties = (info.input_schema or {}).get("properties") or {}
            for name in IDEMPOTENCY_FIELDS:
                if name in properties:
                    args[name] = key
                    break
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
