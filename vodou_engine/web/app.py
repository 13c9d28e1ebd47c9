"""The inbox as an ASGI app: ``create_app(service, config)``: the routes, the lifespan.

Routes (every page but sign-in needs a session; every POST needs the form token):

====== ============================== =====================================================
GET    ``/``                          the inbox: questions waiting for me, then for others
GET    ``/runs``                      run history (``?state=``)
GET    ``/runs/{run}``                a run: its cards, payloads, fingerprints, preview and
                                      check, who may decide, the forms; steps, timings, charts
POST   ``/runs/{run}/approve``        ``step``, ``approval``, ``fingerprint``: approve that card
POST   ``/runs/{run}/answer``         the same, ``action`` (accept, decline, cancel) and ``field.NAME``: answer a server's question
POST   ``/runs/{run}/reject``         ``step``, ``approval``, ``fingerprint``, ``reason``
POST   ``/runs/{run}/resume``         drive it again (an expired question is asked again)
GET    ``/recipes``, ``/recipes/{n}`` saved recipes with their plan cards
POST   ``/recipes/{name}/run``        start it (``input:NAME`` fields)
GET    ``/new``                       one sentence; POST drafts a recipe from it (``authoring.py``)
GET    ``/edit``                      the recipe editor (``?recipe=NAME``); POST ``op``: preview,
                                      edit, run (once), save, schedule (save + schedule)
GET    ``/schedules``                 schedules and their last due times
POST   ``/schedules``                 add one; ``/schedules/{n}/pause|resume|remove``
GET    ``/signin``                    ``?token=``: the sign-in page for a one-time link
POST   ``/signin``                    spend the link, get a session cookie
POST   ``/signout``                   end the session
GET    ``/servers``                   the servers that sign in (OAuth), and whether each is
POST   ``/servers/{name}/signin``     sign the service in: the browser goes to the
                                      authorization server (``servers.py``)
GET    ``/oauth/callback``            where it comes back: no session, the flow's ``state``
GET    ``/live``, ``/runs/{run}/live`` server-sent events: the inbox's, a run's changes (``live.py``)
GET    ``/static/app.css``, ``/static/live.js``, ``/static/editor.js``, ``/static/editor.css``, ``/healthz``
any    ``/mcp``                       the agent MCP server (streamable HTTP), for a bearer token
                                      from ``recipe agent add``: no session, no form token
                                      (``agents.py``)
====== ============================== =====================================================

A GET reads through a read-only store connection, so it cannot change
anything even by mistake. The service runs in the app's lifespan, in the
same trio process: an approval given here is recorded by the run API and
its effect runs on the service's warm servers.

The handlers live by what they are about: ``decisions.py`` (the inbox, runs,
approve, reject, resume), ``recipes.py`` (saved recipes, schedules),
``signin.py`` (signing in and out); ``handlers.py`` gives them their two
shapes (a page, an action), ``context.py`` what they share (:class:`Web`),
``guard.py`` the middleware in front of them all. The stylesheet and
``/healthz`` need no session and stay here.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import trio
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

from ..service import Service
from .agents import MCP_PATH, AgentsOverHTTP
from .authoring import asset, draft_action, edit_action, editor_page, new_page
from .config import WebConfig
from .context import Web
from .decisions import answer, approve, history, inbox, reject, resume, run_page
from .guard import Guard
from .handlers import action, page
from .identity import Signer
from .live import inbox_stream, run_stream
from .recipes import add_schedule, recipe, recipes, run_recipe, schedule_action, schedules
from .servers import CALLBACK_PATH, ServerSignIns, callback, servers_page
from .servers import sign_in as server_sign_in
from .signin import signin, signin_page, signout


async def stylesheet(request: Request) -> Response:
    return Response(request.app.state.web.css, media_type="text/css", headers={"cache-control": "max-age=3600"})


async def script(request: Request) -> Response:
    return Response(request.app.state.web.js, media_type="text/javascript", headers={"cache-control": "max-age=3600"})


async def healthz(request: Request) -> Response:
    svc = request.app.state.web.svc
    return PlainTextResponse("ok\n" if svc.accepting else "stopping\n", status_code=200 if svc.accepting else 503)


# --- the app ---------------------------------------------------------------------------------------------


def create_app(service: Service, config: WebConfig | None = None, *, manage_service: bool = True) -> Starlette:
    """The inbox over ``service``. ``manage_service``: run the service in the app's
    lifespan (``recipe serve`` and tests do); False when the caller runs it."""
    config = config or WebConfig()
    web = Web(service, config, manage_service=manage_service)
    agents = AgentsOverHTTP(web)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        def key() -> str:
            runs = service.runs()
            try:
                return runs.store().web_key()  # creates (or upgrades) the store on first start
            finally:
                runs.close()

        web.signer = Signer(await trio.to_thread.run_sync(key))
        try:
            async with trio.open_nursery() as background:  # sign-ins to servers under way (servers.py)
                web.sign_ins = ServerSignIns(background)
                try:
                    if not manage_service:
                        async with agents.running():
                            yield
                        return
                    async with trio.open_nursery() as nursery:
                        await nursery.start(service.serve)
                        try:
                            async with agents.running():
                                yield
                        finally:
                            service.stop()
                finally:
                    background.cancel_scope.cancel()
        finally:
            web.readers.close()
            web.writers.close()

    routes = [
        Route("/", page(inbox)),
        Route("/runs", page(history)),
        Route("/runs/{run}", page(run_page)),
        Route("/runs/{run}/approve", action(approve), methods=["POST"]),
        Route("/runs/{run}/reject", action(reject), methods=["POST"]),
        Route("/runs/{run}/answer", action(answer), methods=["POST"]),
        Route("/runs/{run}/resume", action(resume), methods=["POST"]),
        Route("/recipes", page(recipes)),
        Route("/recipes/{name}", page(recipe)),
        Route("/recipes/{name}/run", action(run_recipe), methods=["POST"]),
        Route("/new", new_page),
        Route("/new", action(draft_action), methods=["POST"]),
        Route("/edit", editor_page),
        Route("/edit", action(edit_action), methods=["POST"]),
        Route("/schedules", page(schedules)),
        Route("/schedules", action(add_schedule), methods=["POST"]),
        Route("/schedules/{name}/pause", action(schedule_action("pause")), methods=["POST"]),
        Route("/schedules/{name}/resume", action(schedule_action("resume")), methods=["POST"]),
        Route("/schedules/{name}/remove", action(schedule_action("remove")), methods=["POST"]),
        Route("/servers", page(servers_page)),
        Route("/servers/{name}/signin", action(server_sign_in), methods=["POST"]),
        Route(CALLBACK_PATH, callback),
        Route("/signin", signin_page),
        Route("/signin", signin, methods=["POST"]),
        Route("/signout", action(signout), methods=["POST"]),
        Route("/live", inbox_stream),
        Route("/runs/{run}/live", run_stream),
        Route("/static/app.css", stylesheet),
        Route("/static/editor.js", asset),
        Route("/static/editor.css", asset),
        Route("/static/live.js", script),
        Route("/healthz", healthz),
        Route(MCP_PATH, agents),
    ]
    app = Starlette(routes=routes, lifespan=lifespan)
    app.state.web = web
    app.add_middleware(Guard, web=web)
    return app
