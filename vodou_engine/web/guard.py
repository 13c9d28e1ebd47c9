"""The guard in front of every request of the inbox (an ASGI middleware).

Security headers on every response (a strict Content-Security-Policy, no
framing, no sniffing, ``no-store`` unless a response says otherwise); only the
host names the inbox answers to (no DNS rebinding); only GET and POST (and
DELETE on the agents' ``/mcp``); a POST only from this site; bounded bodies;
Server-Timing. A handler that fails answers 500 without its traceback.
"""

from __future__ import annotations

import logging
import time
from urllib.parse import urlsplit

from starlette.responses import PlainTextResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .agents import MAX_BODY_BYTES as MCP_MAX_BYTES
from .agents import MCP_PATH
from .context import MAX_FORM_BYTES, Web

logger = logging.getLogger("vodou_engine.web")

CSP = (
    "default-src 'none'; script-src 'self'; connect-src 'self'; style-src 'self'; img-src 'self' data:; "
    "form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
"""Scripts only from the inbox itself (``static/live.js``, ``static/editor.js``: no inline script, no eval); its
stream of changes and the page it fetches again from the same origin (``connect-src``)."""
SECURITY_HEADERS = [
    (b"content-security-policy", CSP.encode()),
    (b"x-frame-options", b"DENY"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"same-origin"),
    (b"cross-origin-opener-policy", b"same-origin"),
    (b"cross-origin-resource-policy", b"same-origin"),
    (b"permissions-policy", b"camera=(), microphone=(), geolocation=(), payment=()"),
]


class Guard:
    """Security headers on every response; a Host the inbox answers to (no DNS
    rebinding); unsafe methods only from this site; bounded bodies; Server-Timing."""

    def __init__(self, app: ASGIApp, web: Web):
        self.app = app
        self.web = web
        self.public = urlsplit(web.cfg.url).netloc.lower() if web.cfg.url else ""
        """The host and port people reach the inbox at (a proxy may send another Host)."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        started = time.perf_counter()
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        host = headers.get("host", "")
        hostname = urlsplit(f"//{host}").hostname or ""
        method = scope.get("method", "GET")
        mcp = scope.get("path") == MCP_PATH  # the agents' MCP endpoint: a bearer token, no forms
        problem = None
        if hostname.lower() not in self.web.hosts:
            problem = (
                421,
                f"this inbox does not answer to {host!r}; it answers to the address it listens on, localhost and [inbox] base_url's host",
            )
        elif method not in ("GET", "HEAD", "POST") and not (mcp and method == "DELETE"):
            problem = (405, "only GET and POST")
        elif method == "POST":
            origin = headers.get("origin")
            site = headers.get("sec-fetch-site")
            if site is not None and site not in ("same-origin", "none"):
                problem = (403, "a form from another site; nothing was changed")
            elif (
                origin is not None
                and origin != "null"
                and urlsplit(origin).netloc.lower() not in (host.lower(), self.public)
            ):
                problem = (403, "a form from another origin; nothing was changed")
            elif int(headers.get("content-length") or 0) > (MCP_MAX_BYTES if mcp else MAX_FORM_BYTES):
                problem = (413, "form too large")
        began = False

        async def send_with_headers(message: Message) -> None:
            nonlocal began
            if message["type"] == "http.response.start":
                began = True
                extra = list(SECURITY_HEADERS)
                names = {k.lower() for k, _ in message.get("headers", [])}
                if b"cache-control" not in names:
                    extra.append((b"cache-control", b"no-store"))
                extra.append((b"server-timing", f"app;dur={(time.perf_counter() - started) * 1000:.2f}".encode()))
                message = {**message, "headers": [*message.get("headers", []), *extra]}
            await send(message)

        if problem is not None:
            status, text = problem
            response = PlainTextResponse(text + "\n", status_code=status)
            return await response(scope, receive, send_with_headers)
        try:
            await self.app(scope, receive, send_with_headers)
        except Exception:
            logger.exception("%s %s failed", method, scope.get("path"))
            if began:
                raise
            response = PlainTextResponse(
                "something failed on the server; nothing more is known here (see the serve log)\n", status_code=500
            )
            await response(scope, receive, send_with_headers)
