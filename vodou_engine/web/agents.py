"""The agent MCP server at ``/mcp`` of ``recipe serve``: MCP's streamable HTTP transport,
behind bearer tokens.

The same server as ``recipe mcp`` (``agents/server.py``: the same tools, the same
rules: no tool approves, rejects, cancels or reconciles; ``without asking`` is refused;
an agent reads its own runs unless it was allowed more), reached over HTTP instead of
stdio, with these differences:

* **Who the agent is.** Every request carries ``Authorization: Bearer TOKEN``, a token
  ``recipe agent add NAME`` printed once (``agents/identity.py``; the store keeps its
  sha256 in the ``agents`` table). The token is looked up on every request: none, an
  unknown one, or the token of an agent removed since is answered ``401`` with a
  ``WWW-Authenticate: Bearer`` header, before the MCP SDK sees the request, and the
  attempt is written to the audit log. The runs it starts are started by ``agent:NAME``;
  a name a client gives itself in ``initialize`` counts for nothing here. Whose runs it
  may read and who decides its recipes' runs are that agent's own (``--see``,
  ``--approver`` of ``recipe agent add``).
* **Where the work happens.** The tools use the serving process's store, server
  configuration and policy; ``list_tools`` and ``check_recipe`` list the tools of the
  service's warm servers (``service.ServerPool``), and ``start_run`` starts the run in the
  service (``Service.start_text``) on those warm servers, as a run started in the inbox
  is: it parks in the inbox, its approvers are notified, and a stop of ``serve`` leaves
  it parked, finished or interrupted. On a PostgreSQL store it is queued for the workers.
* **Sessions: none (stateless, JSON responses).** Each POST is a whole exchange: the
  SDK builds a fresh transport for it and answers with one JSON body. Nothing about an
  agent lives in this process between requests (a restart or a second ``serve`` on the
  same store loses nothing), no stream stays open (a SIGTERM is not held up by an idle
  agent), and identity is proven again by every request. No tool here needs what
  sessions bring (server-to-client requests, resumable streams).
* **The web inbox's rules.** ``/mcp`` is exempt from the inbox's sessions and form
  tokens only because it requires the bearer token instead; the guard in front of every
  request (``guard.Guard``: host names, cross-site POSTs refused, security headers) stays.
  An agent's token is not an approver's secret, a sign-in link or a session: the inbox's
  pages and its approve and reject forms never accept it.

The MCP SDK is imported on the first request that carries a valid token (about a
second), not when ``serve`` starts; its session manager then runs in the app's lifespan,
in the serving trio process (the SDK runs on anyio, which runs on trio).
"""

from __future__ import annotations

import copy
import functools
import json
import logging
import os
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any
from urllib.parse import quote

import trio
from starlette.datastructures import Headers
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from ..agents.approvers import with_approvers
from ..agents.config import APPROVERS_ENV, AgentConfig
from ..agents.handlers import AgentServer
from ..agents.identity import approvers_of, bearer, identity, sha256
from ..errors import RefusedError
from ..runs import resolve_inputs

logger = logging.getLogger("vodou_engine.web.agents")

MCP_PATH = "/mcp"
MAX_BODY_BYTES = 1024 * 1024
"""The largest MCP request body (a recipe's text is a few kB)."""
SCOPE_KEY = "vodou.agent"
"""Where the proven agent's record rides in the request's ASGI scope, for the tools."""
REALM = "vodou"


class ServedAgentServer(AgentServer):
    """The agent tools on the service of ``recipe serve``: its store, servers, policy and
    warm server pool; each agent's own settings from the store. Called on worker threads;
    what must run in the service goes back to the serving trio loop."""

    def __init__(self, service: Any, config: AgentConfig, *, inbox_url: Callable[[], str]):
        super().__init__(config)
        self.service = service
        self.inbox_url = inbox_url
        self.trio_token: Any = None

    def runs(self) -> Any:
        return self.service.runs()

    def settings(self, identity: str) -> AgentConfig:
        name = identity.removeprefix("agent:")
        runs = self.runs()
        try:
            record = runs.store(create=False).get_agent(name)
        finally:
            runs.close()
        if record is None:
            raise RefusedError(
                f"{identity} was removed; nothing was done", hint="a person adds it again with `recipe agent add`"
            )
        mine = copy.copy(self.config)
        mine.see = record.sees
        mine.approvers = approvers_of(record) or self.config.approvers
        return mine

    def _in_service(self, afn: Callable[..., Any], *args: Any) -> Any:
        return trio.from_thread.run(afn, *args, trio_token=self.trio_token)

    def catalogue(self, refresh: bool = False) -> Any:
        from ..agents.catalogue import fetch_warm  # with the first agent's call, not with every serve

        with self._catalogue_lock:
            cat = self._catalogue
            if refresh or cat is None or time.time() - cat.fetched_at > self.config.catalogue_ttl:
                svc = self.service
                cat = self._in_service(fetch_warm, svc.pool, svc.server_set, svc.policy)
                cat.server_set = svc.server_set
                self._catalogue = cat
            return cat

    def decide(self, run_id: str, step: str, items: list[int] | None = None) -> dict[str, str]:
        out = super().decide(run_id, step, items)
        out["web"] = f"{self.inbox_url()}/runs/{quote(run_id)}"
        return out

    def start_run(self, identity: str, recipe: str, inputs: dict[str, Any] | None, name: str | None) -> dict[str, Any]:
        """In the service, on its warm servers; the call returns once the run parks or ends,
        or after ``start_wait_s`` (it goes on; run_status follows it)."""
        wait_s = self.config.start_wait_s
        plan = self.compiled(recipe, name or "agent")
        people = self.settings(identity).people()
        text, added = with_approvers(recipe, plan, people)
        resolve_inputs(plan, inputs or {})  # a bad input starts nothing
        svc = self.service
        if getattr(svc, "workers", False):
            runs = self.runs()
            try:
                run_id = runs.queue("", text=text, inputs=inputs or {}, actor=identity, origin="agent")
            finally:
                runs.close()
            out: dict[str, Any] = {
                "run": run_id, "recipe": plan.recipe.name, "state": "queued", "pending": [], "started_by": identity,
                "next": "queued: a worker (`recipe worker`) starts it; it parks before every effect until a person decides. Call run_status to follow it.",
            }  # fmt: skip
        else:
            start = functools.partial(
                svc.start_text,
                f"{name or 'agent'}.recipe",
                text,
                inputs=inputs or {},
                actor=identity,
                origin="agent",
                wait_s=wait_s,
            )
            run_id, report = self._in_service(start)
            if report is None:
                out = {
                    "run": run_id, "recipe": plan.recipe.name, "state": "running", "pending": [], "started_by": identity,
                    "next": f"still running after {wait_s:g} s; call run_status to follow it. It parks before every effect until a person decides.",
                }  # fmt: skip
            else:
                out = self.report_data(report)
                out["started_by"] = identity
        if added:
            out["approvers_added"] = people
        return out


def _who(ctx: Any) -> str:
    """The agent the request's bearer token proved (``agent:NAME``), and nothing else."""
    request = ctx.request_context.request
    record = (getattr(request, "scope", None) or {}).get(SCOPE_KEY)
    if record is None:
        raise RefusedError(
            "this request carries no proven agent; nothing was done",
            hint="send the agent's bearer token (`recipe agent add NAME`)",
        )
    return identity(record)


class AgentsOverHTTP:
    """The ASGI app at ``/mcp``: the bearer token first, then the SDK's streamable HTTP
    session manager (stateless, JSON responses), started on first use."""

    def __init__(self, web: Any):
        self.web = web
        svc = web.svc
        location = svc.store_location
        shown = None if location is None else os.fspath(location)
        if shown and "://" in shown:
            from ..store.postgres import _safe  # a PostgreSQL store's module, loaded only for one

            shown = _safe(shown)  # the commands the tools name never carry a password
        people = [a.strip() for a in os.environ.get(APPROVERS_ENV, "").split(",") if a.strip()]
        config = AgentConfig(store=shown, approvers=people or None)
        self.impl = ServedAgentServer(svc, config, inbox_url=lambda: web.cfg.base_url(web.port))
        self._manager: Any = None
        self._nursery: trio.Nursery | None = None
        self._lock: trio.Lock | None = None

    @asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """For the app's lifespan: the SDK's session manager, once started, lives in here."""
        self.impl.trio_token = trio.lowlevel.current_trio_token()
        self._lock = trio.Lock()
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            nursery.start_soon(self._warm_up)
            try:
                yield
            finally:
                self._nursery = None
                self._manager = None  # a session manager runs once; another lifespan builds another
                nursery.cancel_scope.cancel()

    async def _warm_up(self) -> None:
        """When the store has agents, build the server now, in the background, so the first
        agent's request does not wait for the SDK's import; with none, never import it."""
        try:
            if await self.web.read(lambda runs: bool(runs.store(create=False).agents_list())):
                await self._session_manager()
        except Exception:  # the first request tries again and reports it
            logger.exception("could not start the agent MCP server ahead of its first request")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        token = bearer(Headers(scope=scope).get("authorization"))
        record = None
        if token is not None:
            digest = sha256(token)
            record = await self.web.read(lambda runs: runs.store(create=False).agent_by_token(digest))
        if record is None:
            why = "no bearer token" if token is None else "unknown or revoked bearer token"
            await self._refused(scope, why)
            return await _unauthorized(token is not None, why)(scope, receive, send)
        if scope.get("method") != "POST":
            # Stateless: no stream for the server to write to later (GET), no session to end
            # (DELETE). The spec's answer is 405; a client then only POSTs.
            body = {
                "jsonrpc": "2.0",
                "id": None,
                "error": {
                    "code": -32600,
                    "message": "this server is stateless: POST each request (no GET stream, no session to end)",
                },
            }
            return await Response(
                json.dumps(body) + "\n", status_code=405, media_type="application/json", headers={"allow": "POST"}
            )(scope, receive, send)
        manager = await self._session_manager()
        if manager is None:
            return await Response("the agent server is stopping\n", status_code=503, media_type="text/plain")(
                scope, receive, send
            )
        await manager.handle_request({**scope, SCOPE_KEY: record}, receive, send)

    async def _refused(self, scope: Scope, why: str) -> None:
        data = {"why": why, "method": scope.get("method"), "path": scope.get("path")}
        try:
            await self.web.write(lambda runs: runs.store().audit("agent.refused", actor=None, data=data))
        except Exception:  # the refusal stands even if it cannot be logged
            logger.exception("could not write the audit row for a refused agent request")

    async def _session_manager(self) -> Any:
        if self._manager is not None:
            return self._manager
        if self._lock is None:
            return None  # not serving (the app's lifespan has not started)
        async with self._lock:
            if self._manager is None and self._nursery is not None:
                manager = await trio.to_thread.run_sync(self._build)
                nursery = self._nursery
                if nursery is None:
                    return None
                await nursery.start(self._run, manager)
                self._manager = manager
        return self._manager

    def _build(self) -> Any:
        """Import the SDK and build the server (on a worker thread, under the trio lock: about
        a second, once)."""
        from mcp.server.transport_security import TransportSecuritySettings

        from ..agents.server import build_server

        sdk_log = logging.getLogger("mcp")
        if sdk_log.level == logging.NOTSET:
            sdk_log.setLevel(logging.WARNING)  # not a line per request in the serve log
        server = build_server(self.impl.config, impl=self.impl, identify=_who)
        # Host names and cross-site POSTs are refused by the app's guard before this.
        security = TransportSecuritySettings(enable_dns_rebinding_protection=False)
        server.streamable_http_app(
            streamable_http_path=MCP_PATH,
            stateless_http=True,
            json_response=True,
            transport_security=security,
            max_request_body_size=MAX_BODY_BYTES,
        )
        return server.session_manager

    @staticmethod
    async def _run(manager: Any, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        async with manager.run():
            task_status.started()
            await trio.sleep_forever()


def _unauthorized(had_token: bool, why: str) -> Response:
    """401 with the challenge RFC 6750 describes (an error code only when a token was sent)."""
    challenge = f'Bearer realm="{REALM}"'
    body: dict[str, str] = {
        "error": "unauthorized",
        "error_description": f"{why}; nothing was done. An agent sends `Authorization: Bearer TOKEN`, a token `recipe agent add NAME` printed",
    }
    if had_token:
        challenge += f', error="invalid_token", error_description="{why}"'
        body["error"] = "invalid_token"
    return Response(
        json.dumps(body) + "\n", status_code=401, media_type="application/json", headers={"www-authenticate": challenge}
    )
