"""Pages that follow a run as it moves: server-sent events, for the inbox and a run's page.

A page carries a token of what it shows (:func:`run_token`, :func:`inbox_token`)
in ``data-live``, the address of its stream. The stream reads the same token
from the store a few times a second, on a worker thread over a read-only
connection, and sends a ``change`` event when it differs; the page's script
(``static/live.js``, the app's own, no inline script) then fetches the page
again and puts its new ``<main>`` in place. The store is read, not the serving
process's memory, so a run driven by a worker or the CLI is followed too.
Without scripts the pages are the same, and a form still does what it did.
"""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import quote

import trio
from sse_starlette.sse import EventSourceResponse
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response

from ..errors import UnknownRunError, VodouError
from .context import Web

POLL_S = 0.1
"""How often an open page's stream reads its token from the store."""


def _digest(parts: Any) -> str:
    return hashlib.blake2b(repr(parts).encode(), digest_size=8).hexdigest()


ENDED = frozenset({"succeeded", "failed", "declined", "cancelled"})
"""A run in one of these states changes no more (an effect settled later is in its own log):
its page's stream says ``end`` and the page stops listening."""


def run_token(store: Any, run_id: str) -> str:
    """What a run's page shows, in a word: its state, its last event, each node's and
    each effect's state, and its questions; a change to any is a change to the page. An
    ended run's token ends with ``.end``."""
    run = store.get_run(run_id)
    events = store.events(run_id)
    nodes = sorted((k, v.state) for k, v in store.get_nodes(run_id).items())
    effects = sorted((e.step, e.state) for e in store.effects(run_id))
    asked = sorted((a.id, a.state) for a in store.approvals(run_id))
    token = _digest((run.state, run.updated_at, events[-1].seq if events else 0, nodes, effects, asked))
    return token + (".end" if str(run.state) in ENDED else "")


NOT_YET = "not-yet"
"""The token of a run not stored yet: the page that says it is starting (Run once answered
before the run was stored) follows it like a run's page, and shows the run once it is."""


def run_or_not_yet(store: Any, run_id: str) -> str:
    """:func:`run_token`, or :data:`NOT_YET` while the store does not know the run."""
    try:
        return run_token(store, run_id)
    except UnknownRunError:
        return NOT_YET


def inbox_token(store: Any) -> str:
    """What the inbox lists, in a word: its pending questions and parked runs."""
    rows = [(r.approval_id, r.run_state, r.fingerprint) for r in store.inbox()]
    return _digest((rows, store.parked_unasked()))


def run_live(run_id: str, token: str) -> str:
    return f"/runs/{quote(run_id)}/live?v={token}"


def inbox_live(token: str) -> str:
    return f"/live?v={token}"


async def _changes(web: Web, request: Request, read: Any, since: str) -> AsyncIterator[dict[str, str]]:
    """A ``change`` event each time ``read(store)`` gives another token; ``end`` once the
    run has ended; ends when the inbox stops (so a stopping server is not held open by a
    page left open)."""
    last = since
    while web.svc.accepting:
        try:
            now = await web.read(lambda runs: read(runs.store(create=False, readonly=True)))
        except VodouError:
            return
        if now != last:
            last = now
            yield {"event": "change", "data": now}
        if now.endswith(".end"):
            yield {"event": "end", "data": now}  # the page stops listening (else EventSource reconnects)
            return
        await trio.sleep(POLL_S)


async def _stream(request: Request, read: Any) -> Response:
    web: Web = request.app.state.web
    me = await web.read(lambda runs: web.me(request, runs))
    if me is None:
        return PlainTextResponse("not signed in\n", status_code=401)
    since = request.query_params.get("v", "")
    return EventSourceResponse(_changes(web, request, read, since), ping=15, headers={"cache-control": "no-store"})


async def run_stream(request: Request) -> Response:
    """GET ``/runs/{run}/live?v=TOKEN``: the run's page's changes (the first, for a page
    opened before the run was stored, is the run appearing)."""
    run_id = request.path_params["run"]
    return await _stream(request, lambda store: run_or_not_yet(store, run_id))


async def inbox_stream(request: Request) -> Response:
    """GET ``/live?v=TOKEN``: the inbox's changes."""
    return await _stream(request, inbox_token)
