"""The approval inbox behind `recipe serve`: a Starlette app on Hypercorn's trio worker.

Presentation only. Every rule about a run (who may decide, what approving
means, a stale or expired card) is the run API's (``runs/``) and the
service's (``service.py``); this package proves who is at the browser,
shows what the run API reports, and hands decisions to the service, which
runs approved effects in this process on its warm servers.

* ``serve.py``: the ``recipe serve`` command (``add_arguments``, ``run``).
* ``app.py``: ``create_app(service, config)``: the routes, the service in the
  app's lifespan.
* ``decisions.py``, ``recipes.py``, ``signin.py``: the handlers: the inbox, runs
  and the decisions on them; saved recipes and schedules; signing in and out.
* ``handlers.py``: a page (GET) and an action (POST), the two shapes of a handler.
* ``context.py``: ``Web``, what every handler shares (service, signer, templates,
  store connections), and the signed-in ``Me``.
* ``guard.py``: the middleware in front of every request: security headers,
  host names, cross-site POSTs refused, bounded bodies.
* ``identity.py``: sign-in links, signed session cookies, form tokens
  (imported by the CLI for ``recipe approver add``: light, no web framework).
* ``pages.py``: what each page shows, as plain data for the templates;
  ``decide.py`` a decision as a person reads it (the effect in words, the
  payload once, a preview's diff), ``graph_svg.py`` the run's graph as SVG.
* ``live.py``: server-sent events that let the inbox and a run's page follow
  the run (``static/live.js`` swaps the page's ``<main>``).
* ``templates/``, ``static/``: Jinja2 pages, one stylesheet and one optional
  script of the app's own; every page works without it.

docs/serve.md is the guide.
"""

from __future__ import annotations

from typing import Any

__all__ = ["create_app"]


def __getattr__(name: str) -> Any:
    if name == "create_app":
        from .app import create_app

        return create_app
    raise AttributeError(name)
