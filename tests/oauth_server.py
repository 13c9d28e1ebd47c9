"""An OAuth-protected MCP server for tests: the official SDK's ``MCPServer`` with its own
authorization server (``mcp.server.auth``: discovery metadata, dynamic client registration,
the authorization code grant with PKCE, refresh tokens), over streamable HTTP, served by
uvicorn on 127.0.0.1.

Run it as ``[sys.executable, "tests/oauth_server.py"]`` (or with :class:`OAuthServer`, which
tests import: it imports nothing heavy). It binds a free port and prints it on the first line
of stdout; the endpoint is ``http://127.0.0.1:PORT/mcp``, which answers 401 without a bearer
token it issued. Its ``/authorize`` consents at once, as a person clicking "Allow" would: it
redirects the browser to the client's ``redirect_uri`` with a code (so a test plays the
browser by following the authorization URL with an HTTP client).

Tools
-----
``post_message``
    An effect (``readOnlyHint: false``): ``channel``, ``text``; answers ``posted``.
``echo``
    A read: answers its ``text``.
``whoami``
    A read: answers the bearer token the request carried (a server that echoes its
    credential, which the engine must mask).

Routes besides
--------------
``POST /test/forget``
    Forgets every token it issued (access and refresh): a sign-in the authorization server
    no longer honours.
``POST /test/expire-access``
    Forgets every access token it issued, keeps the refresh tokens: access tokens dropped
    before their time (a refresh gets new ones).

Environment
-----------
``OAUTH_LOG``
    A file to append one JSON line to per event, flushed and fsynced: ``{"tool", "arguments",
    "pid"}`` per call (count calls with the lines that have a ``"tool"`` key), and ``{"event":
    "register" | "authorize" | "token" | "refresh" | "forget"}``.
``OAUTH_TTL``
    Seconds an access token is valid for (default 3600).
"""

import gc
import json
import os
import secrets
import select
import socket
import subprocess
import sys
import time
from pathlib import Path

SCRIPT = str(Path(__file__).resolve())


class OAuthServer:
    """The test side: start this script as a process, learn its URL, read its log, stop it."""

    def __init__(self, tmp: Path, name: str = "oauth", **env: str):
        self.log = tmp / f"{name}.log"
        self.stderr = tmp / f"{name}.stderr"
        self.env = {"OAUTH_LOG": str(self.log), **env}
        self.process: subprocess.Popen | None = None
        self.port: int | None = None

    def start(self, timeout: float = 60) -> "OAuthServer":
        with open(self.stderr, "ab") as err:
            self.process = subprocess.Popen(
                [sys.executable, SCRIPT],
                stdout=subprocess.PIPE,
                stderr=err,
                stdin=subprocess.DEVNULL,
                env={**os.environ, **self.env},
                start_new_session=True,
            )
        ready, _, _ = select.select([self.process.stdout], [], [], timeout)
        line = self.process.stdout.readline() if ready else b""
        if not line.strip():
            self.stop()
            raise RuntimeError(f"the OAuth test server did not start: {self.stderr.read_text()[-2000:]}")
        self.port = int(line)
        return self

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        return f"{self.base}/mcp"

    def records(self) -> list[dict]:
        if not self.log.exists():
            return []
        return [json.loads(line) for line in self.log.read_text().splitlines() if line.strip()]

    def calls(self, tool: str | None = None) -> list[dict]:
        return [r for r in self.records() if "tool" in r and (tool is None or r["tool"] == tool)]

    def events(self, event: str) -> list[dict]:
        return [r for r in self.records() if r.get("event") == event]

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        if self.process is not None and self.process.stdout is not None:
            self.process.stdout.close()


def log(record: dict) -> None:
    path = os.environ.get("OAUTH_LOG")
    if not path:
        return
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps({**record, "pid": os.getpid()}) + "\n")
        f.flush()
        os.fsync(f.fileno())


def build(issuer: str):
    from mcp.server.auth.middleware.auth_context import get_access_token
    from mcp.server.auth.provider import (
        AccessToken,
        AuthorizationCode,
        AuthorizationParams,
        RefreshToken,
        construct_redirect_uri,
    )
    from mcp.server.auth.settings import AuthSettings, ClientRegistrationOptions
    from mcp.server.mcpserver import MCPServer
    from mcp.shared.auth import OAuthClientInformationFull, OAuthToken
    from mcp.types import ToolAnnotations
    from starlette.responses import JSONResponse

    ttl = int(os.environ.get("OAUTH_TTL", "3600"))

    class Provider:
        """Everything in memory; consent is given at once."""

        def __init__(self):
            self.clients: dict[str, OAuthClientInformationFull] = {}
            self.codes: dict[str, AuthorizationCode] = {}
            self.access: dict[str, AccessToken] = {}
            self.refresh: dict[str, RefreshToken] = {}

        async def get_client(self, client_id):
            return self.clients.get(client_id)

        async def register_client(self, client_info):
            self.clients[client_info.client_id] = client_info
            log({"event": "register"})

        async def authorize(self, client, params: AuthorizationParams) -> str:
            code = secrets.token_urlsafe(24)
            self.codes[code] = AuthorizationCode(
                code=code,
                scopes=params.scopes or [],
                expires_at=time.time() + 300,
                client_id=client.client_id,
                code_challenge=params.code_challenge,
                redirect_uri=params.redirect_uri,
                redirect_uri_provided_explicitly=params.redirect_uri_provided_explicitly,
                resource=params.resource,
            )
            log({"event": "authorize", "scopes": params.scopes})
            return construct_redirect_uri(str(params.redirect_uri), code=code, state=params.state)

        async def load_authorization_code(self, client, authorization_code):
            return self.codes.get(authorization_code)

        def _issue(self, client_id, scopes, resource):
            access = "at-" + secrets.token_hex(20)
            refresh = "rt-" + secrets.token_hex(20)
            self.access[access] = AccessToken(
                token=access, client_id=client_id, scopes=scopes, expires_at=int(time.time()) + ttl, resource=resource
            )
            self.refresh[refresh] = RefreshToken(token=refresh, client_id=client_id, scopes=scopes, resource=resource)
            return OAuthToken(
                access_token=access, expires_in=ttl, refresh_token=refresh, scope=" ".join(scopes) or None
            )

        async def exchange_authorization_code(self, client, authorization_code):
            self.codes.pop(authorization_code.code, None)
            log({"event": "token"})
            return self._issue(client.client_id, authorization_code.scopes, authorization_code.resource)

        async def load_refresh_token(self, client, refresh_token):
            return self.refresh.get(refresh_token)

        async def exchange_refresh_token(self, client, refresh_token, scopes):
            self.refresh.pop(refresh_token.token, None)  # rotated: the old one is spent
            log({"event": "refresh"})
            return self._issue(client.client_id, scopes or refresh_token.scopes, refresh_token.resource)

        async def load_access_token(self, token):
            found = self.access.get(token)
            if found is None or (found.expires_at is not None and found.expires_at < time.time()):
                return None
            return found

        async def revoke_token(self, token):
            self.access.pop(token.token, None)
            self.refresh.pop(token.token, None)

    provider = Provider()
    server = MCPServer(
        "oauth-test-server",
        version="1.0.0",
        auth_server_provider=provider,
        auth=AuthSettings(
            issuer_url=issuer,
            resource_server_url=f"{issuer}/mcp",
            validate_token_resource=False,
            client_registration_options=ClientRegistrationOptions(enabled=True, valid_scopes=["notes", "post"]),
            required_scopes=[],
        ),
    )

    def post_message(channel: str, text: str) -> str:
        """Post a message."""
        log({"tool": "post_message", "arguments": {"channel": channel, "text": text}})
        return "posted"

    def echo(text: str) -> str:
        """Answer the text."""
        log({"tool": "echo", "arguments": {"text": text}})
        return text

    def whoami() -> str:
        """The bearer token this request carried."""
        log({"tool": "whoami", "arguments": {}})
        token = get_access_token()
        return f"you are {token.token if token else None}"

    read = ToolAnnotations(read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=False)
    server.add_tool(echo, name="echo", annotations=read)
    server.add_tool(whoami, name="whoami", annotations=read)
    server.add_tool(
        post_message,
        name="post_message",
        annotations=ToolAnnotations(
            read_only_hint=False, destructive_hint=False, idempotent_hint=False, open_world_hint=True
        ),
    )

    @server.custom_route("/test/forget", methods=["POST"])
    async def forget(request):
        provider.access.clear()
        provider.refresh.clear()
        log({"event": "forget"})
        return JSONResponse({"ok": True})

    @server.custom_route("/test/expire-access", methods=["POST"])
    async def expire_access(request):
        provider.access.clear()
        log({"event": "expire-access"})
        return JSONResponse({"ok": True})

    return server


def main() -> None:
    # The SDK's import (and uvicorn's) builds a large graph of objects that live until exit, which
    # the collector's passes would only find alive: it stays paused while they are made, then they
    # are frozen out of its view (as vodou_engine/demo/app.py does; a start measured 0.48 CPU-s before, 0.44 after).
    gc.disable()
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    port = sock.getsockname()[1]

    import anyio
    import uvicorn

    server = build(f"http://127.0.0.1:{port}")
    config = uvicorn.Config(server.streamable_http_app(), log_level="critical", lifespan="on")
    gc.freeze()
    gc.enable()
    print(port, flush=True)
    anyio.run(lambda: uvicorn.Server(config).serve(sockets=[sock]))


if __name__ == "__main__":
    main()
