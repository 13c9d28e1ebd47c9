"""The engine's MCP client session: what it tells a server it can do, and what it does when asked.

Declared (``initialize``'s ``capabilities``):

* ``elicitation`` in form mode only: a server's question in the middle of a call is a
  person's question, routed to the call's step (``tools/hooks.py``, then the runtime
  parks the run with it; docs/servers.md, "A server that asks"). URL mode (a link to open
  in a browser, for credentials or payment) is not declared: a run has nobody at a
  browser, and nothing a person does there could be checked or recorded.
* nothing else. ``roots`` are not declared: no recipe declares roots, and a server told
  none would read it as "the client has none to offer" at best. ``sampling`` is not
  declared: a server's model request is a prompt the engine would send for it, with no
  card to show a person what it asks; ``write`` steps are where the engine uses a model.

Progress needs no capability: a token goes with each call whose caller listens
(``Hub.call``), and the SDK routes the server's notifications to it.

Imported once the SDK is loaded (by the transport, ``tools/session.py``), never before.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import mcp_types as types
from mcp.client.session import ClientRequestContext, ClientSession

from vodou_engine.tools.hooks import Question

if TYPE_CHECKING:
    from vodou_engine.tools.live import LiveServer

__all__ = ["EngineSession", "answer_questions"]

logger = logging.getLogger("vodou_engine.tools.hub")
"""The hub's log (``tools/session.py`` writes to it too)."""


class EngineSession(ClientSession):
    """The SDK's session, declaring elicitation in form mode only (the SDK's own
    declaration with an elicitation callback names URL mode too)."""

    def _build_capabilities(self, version: str) -> types.ClientCapabilities:
        caps = super()._build_capabilities(version)
        if caps.elicitation is not None:
            caps = caps.model_copy(
                update={"elicitation": types.ElicitationCapability(form=types.FormElicitationCapability())}
            )
        return caps


def answer_questions(srv: LiveServer) -> Any:
    """The session's ``elicitation_callback`` for ``srv``: a form question goes to the one
    call out on that server, whose caller answers it. Any other is answered ``cancel`` (nobody
    was asked, so nobody declined) and logged: URL mode, or no call or several out (over stdio
    the request does not say which call it belongs to)."""

    async def elicit(
        context: ClientRequestContext, params: types.ElicitRequestParams
    ) -> types.ElicitResult | types.ErrorData:
        out = list(srv.calls.values())
        hooks = out[0] if len(out) == 1 else None
        if not isinstance(params, types.ElicitRequestFormParams) or hooks is None or hooks.on_question is None:
            srv.questions_unanswered += 1
            why = (
                "in URL mode" if not isinstance(params, types.ElicitRequestFormParams) else f"with {len(out)} calls out"
            )
            logger.warning(
                "MCP server %r asked %r %s: answered cancel, nobody could be asked", srv.name, params.message, why
            )
            return types.ElicitResult(action="cancel")
        schema = dict(params.requested_schema)
        answer = await hooks.on_question(Question(message=params.message, schema=schema))
        return types.ElicitResult(action=answer.action, content=answer.content if answer.action == "accept" else None)

    return elicit
