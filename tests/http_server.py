"""An MCP server over the spec's streamable HTTP transport, for tests: the official SDK's
``MCPServer`` and its streamable HTTP app, served by uvicorn on 127.0.0.1.

Run it as ``[sys.executable, "tests/http_server.py"]`` (or with :class:`HttpServer`,
which tests import: it imports nothing heavy). It binds a free port and
prints it on the first line of stdout; the endpoint is
``http://127.0.0.1:PORT/mcp``. It runs until it is killed (or a tool kills it).

Tools
-----
``post_message``
    An effect (``readOnlyHint: false, destructiveHint: false``): ``channel``,
    ``text`` and an optional ``idempotency_key``; answers ``{"ok": true, "ts": ...}``.
``get_status``
    A read (``readOnlyHint: true``); answers ``{"ok": true, "ts": ...}``.
``echo``
    A read: answers its ``text``.
``block``
    Never returns unless cancelled; logs ``started`` and ``cancelled``.
``refuse``
    A JSON-RPC error from the server itself: code -32602, ``refused on purpose``.
``fail``
    A tool error (``isError: true``): ``quota exceeded``.
``get_name``
    A read that reports progress 1 of 2, asks the user (form elicitation) "Who is it?" for
    ``name``, reports 2 of 2, and answers the name (or ``declined`` / ``cancelled``); logs
    ``{"tool": "get_name", "answer": action, "content": ...}``.

Environment
-----------
``HTTP_LOG``
    A file to append one JSON line to per event, flushed and fsynced before the
    server does anything else: ``{"tool", "arguments", "pid"}`` per call (count
    calls with the lines that have a ``"tool"`` key), ``{"event": "start", "pid"}``,
    ``{"event": "started" | "cancelled", "tool": "block"}`` (no ``"tool"`` key
    counts: those lines say ``"blocking"``), ``{"event": "unauthorized"}``.
``HTTP_MODES`` / ``HTTP_MODES_FILE``
    How each tool misbehaves after its call is logged, e.g. ``post_message=die``
    (the file, when it exists, wins, so the behaviour can change between two
    starts while the configuration stays the same):

    * ``ok``: answer.
    * ``die``: the process exits at once (status 7), without a reply: the
      connection drops mid-call.
    * ``drop``: the tool runs and the reply is thrown away on its way out,
      breaking the connection mid-response (the server keeps serving).
    * ``hang``: never answer.

    Answered in front of the MCP app, as a gateway might (the call is logged
    with ``"gateway": true``; the tool itself does not run):

    * ``http500``: HTTP 500 with a plain-text body.
    * ``http202``: HTTP 202 Accepted with no body.
    * ``html``: HTTP 200 with an HTML page.
    * ``rpc400``: HTTP 400 with a JSON-RPC error for the request (code -32602,
      ``refused by the gateway``).
    * ``huge_sse[:N]``: an event stream whose one event, a reply, is N bytes
      (default 300,000,000), written in 1 MiB pieces.
    * ``huge_json[:N]``: a JSON reply of N bytes, chunked (no Content-Length).
    * ``huge_declared``: a JSON reply that declares a Content-Length of 300,000,000
      bytes and sends a few.
    * ``sse_flood``: an event stream of small notifications for ever, and no reply.
    * ``sse_lines[:N]``: an event stream whose one event is N bytes (default 15,000,000,
      under the engine's default limit) of ``data: xy`` lines, which no JSON-RPC reply is.
    * ``gzip_json``: a JSON reply compressed with gzip (``Content-Encoding: gzip``), though the
      client asked for none: 60 KB that inflate to 60 MB.
    * ``echo_auth``: a reply (an event stream) whose text blocks hold the value of the
      ``Authorization`` header after ``Bearer `` (and the ``key`` query parameter's) as
      it is, JSON-escaped, ``\\u``-escaped, percent-encoded, base64-encoded and split
      across two blocks; and an error event before it with the same.
``HTTP_JSON_RESPONSE``, ``HTTP_STATELESS``
    When ``1``: answer each request with one JSON body instead of an event stream;
    keep no session (the SDK's ``json_response`` and ``stateless_http``).
``HTTP_EXPECT_AUTH``
    When set, every request must carry ``Authorization`` equal to it; else 401.
``HTTP_EXPECT_KEY``
    When set, every request's URL must have the query parameter ``key`` equal to it; else 401.
"""

import base64
import gc
import json
import os
import select
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
from pathlib import Path

SCRIPT = str(Path(__file__).resolve())


class HttpServer:
    """The test side: start this script as a process, learn its URL, read its log, stop it.

    Imports nothing heavy, so a test module can import it cheaply."""

    def __init__(self, tmp: Path, name: str = "http", **env: str):
        self.log = tmp / f"{name}.log"
        self.modes = tmp / f"{name}.modes"
        self.stderr = tmp / f"{name}.stderr"
        self.env = {"HTTP_LOG": str(self.log), "HTTP_MODES_FILE": str(self.modes), **env}
        self.process: subprocess.Popen | None = None
        self.port: int | None = None

    def start(self, timeout: float = 60) -> "HttpServer":
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
            raise RuntimeError(f"the HTTP test server did not start: {self.stderr.read_text()[-2000:]}")
        self.port = int(line)
        return self

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    def set(self, modes: str = "") -> None:
        self.modes.write_text(modes)

    def records(self) -> list[dict]:
        if not self.log.exists():
            return []
        return [json.loads(line) for line in self.log.read_text().splitlines() if line.strip()]

    def calls(self, tool: str | None = None) -> list[dict]:
        return [r for r in self.records() if "tool" in r and (tool is None or r["tool"] == tool)]

    def events(self, event: str) -> list[dict]:
        return [r for r in self.records() if r.get("event") == event]

    def wait_for(self, event: str, count: int = 1, timeout: float = 10) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if len(self.events(event)) >= count:
                return True
            time.sleep(0.02)
        return False

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def stop(self) -> None:
        if self.process is None:
            return
        if self.process.poll() is None:
            try:
                os.killpg(self.process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.process.wait()
        if self.process.stdout is not None:
            self.process.stdout.close()


def build_app():
    """The server (heavy imports: only in the server process)."""
    import anyio
    from mcp.server.elicitation import AcceptedElicitation
    from mcp.server.mcpserver import Context, MCPServer
    from mcp.server.mcpserver.exceptions import ToolError
    from mcp.shared.exceptions import MCPError
    from mcp.types import ToolAnnotations
    from pydantic import BaseModel

    log_path = os.environ.get("HTTP_LOG")

    def log(**record):
        if not log_path:
            return
        record["pid"] = os.getpid()
        with open(log_path, "a") as f:
            f.write(json.dumps(record) + "\n")
            f.flush()
            os.fsync(f.fileno())

    def modes() -> dict[str, str]:
        text = os.environ.get("HTTP_MODES", "")
        path = os.environ.get("HTTP_MODES_FILE")
        if path and os.path.exists(path):
            with open(path) as f:
                text = f.read()
        out = {}
        for item in text.replace("\n", ",").split(","):
            if "=" in item:
                tool, mode = item.split("=", 1)
                out[tool.strip()] = mode.strip()
        return out

    dropping: set[str] = set()
    """Ids of requests whose reply the middleware throws away (a tool in ``drop`` mode)."""

    async def misbehave(tool: str, request_id) -> None:
        mode = modes().get(tool, "ok")
        if mode == "die":
            print(f"http-tester: dying in {tool}", file=sys.stderr, flush=True)
            os._exit(7)
        if mode == "hang":
            await anyio.sleep_forever()
        if mode == "drop":
            dropping.add(str(request_id))

    app = MCPServer("http-tester", log_level="ERROR")

    def reply() -> dict:
        return {"ok": True, "ts": f"{time.time():.6f}"}

    @app.tool(annotations=ToolAnnotations(read_only_hint=False, destructive_hint=False))
    async def post_message(channel: str, text: str, ctx: Context, idempotency_key: str | None = None) -> dict:
        """Post a message to a channel."""
        log(tool="post_message", arguments={"channel": channel, "text": text, "idempotency_key": idempotency_key})
        await misbehave("post_message", ctx.request_id)
        return reply()

    @app.tool(annotations=ToolAnnotations(read_only_hint=True))
    async def get_status(ctx: Context) -> dict:
        """The server's status."""
        log(tool="get_status", arguments={})
        await misbehave("get_status", ctx.request_id)
        return reply()

    @app.tool(title="Echo back", annotations=ToolAnnotations(read_only_hint=True))
    async def echo(text: str) -> str:
        log(tool="echo", arguments={"text": text})
        return text

    @app.tool()
    async def block() -> str:
        """Never returns unless cancelled."""
        log(event="started", blocking="block")
        try:
            await anyio.sleep_forever()
        except anyio.get_cancelled_exc_class():
            log(event="cancelled", blocking="block")
            raise
        return "unreachable"

    @app.tool()
    async def refuse() -> str:
        log(tool="refuse", arguments={})
        raise MCPError(code=-32602, message="refused on purpose")

    @app.tool()
    async def fail() -> str:
        log(tool="fail", arguments={})
        raise ToolError("quota exceeded")

    class Name(BaseModel):
        name: str

    @app.tool(annotations=ToolAnnotations(read_only_hint=True))
    async def get_name(ctx: Context) -> str:
        """Ask who it is."""
        await ctx.report_progress(1, 2, "asking")
        answer = await ctx.elicit("Who is it?", Name)
        content = answer.data.model_dump() if isinstance(answer, AcceptedElicitation) else None
        log(tool="get_name", answer=answer.action, content=content)
        await ctx.report_progress(2, 2, "answered")
        return content["name"] if content else {"decline": "declined", "cancel": "cancelled"}[answer.action]

    async def streamed(send, mode: str, request_id, headers: dict, query: dict) -> None:
        """The large and echoing answers, written piece by piece (never held whole; the compressed
        one is made whole in this process, which only the client must not do)."""
        kind, _, size_text = mode.partition(":")
        size = int(size_text or (15_000_000 if kind == "sse_lines" else 300_000_000))
        rid = json.dumps(request_id).encode()
        sse = kind in ("huge_sse", "sse_flood", "sse_lines", "echo_auth")
        content_type = b"text/event-stream" if sse else b"application/json"
        response_headers = [(b"content-type", content_type)]
        start = {"type": "http.response.start", "status": 200, "headers": response_headers}
        if kind == "huge_declared":
            response_headers.append((b"content-length", b"300000000"))
        if kind == "gzip_json":
            import gzip

            text = b"x" * 60_000_000
            reply = (
                b'{"jsonrpc": "2.0", "id": '
                + rid
                + b', "result": {"content": [{"type": "text", "text": "'
                + text
                + b'"}]}}'
            )
            packed = gzip.compress(reply, compresslevel=9)
            await send(
                {
                    "type": "http.response.start",
                    "status": 200,
                    "headers": [*response_headers, (b"content-encoding", b"gzip")],
                }
            )
            await send({"type": "http.response.body", "body": packed, "more_body": False})
            return
        await send(start)

        async def body(data: bytes, more: bool = True) -> None:
            await send({"type": "http.response.body", "body": data, "more_body": more})

        if kind == "sse_lines":
            lines = b"data: xy\n" * (1 << 17)
            for _ in range(max(1, size // len(lines))):
                await body(lines)
            await body(b"\n", more=False)
            return
        if kind == "sse_flood":
            note = json.dumps(
                {"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": "info", "data": "x" * 1000}}
            )
            while True:
                await body(f"event: message\ndata: {note}\n\n".encode() * 10)
        if kind == "echo_auth":
            value = headers.get("authorization", "").removeprefix("Bearer ")
            key = (query.get("key") or [""])[0]
            half = len(value) // 2
            blocks = [
                f"raw: {value} and {key}",
                "json: " + json.dumps({"token": value}),
                "escaped: " + "".join(f"\\u{ord(c):04x}" for c in value),
                "url: https://example.com/?key=" + urllib.parse.quote(value, safe=""),
                "base64: " + base64.b64encode(("user:" + value).encode()).decode(),
                "split: " + value[:half],
                value[half:] + " (end)",
            ]
            note = {
                "jsonrpc": "2.0",
                "method": "notifications/message",
                "params": {"level": "error", "data": f"bad key {value}"},
            }
            result = {"content": [{"type": "text", "text": b} for b in blocks], "isError": False}
            reply = {"jsonrpc": "2.0", "id": request_id, "result": result}
            await body(f"event: message\ndata: {json.dumps(note)}\n\n".encode())
            await body(f"event: message\ndata: {json.dumps(reply)}\n\n".encode(), more=False)
            return
        head = (
            (b"event: message\ndata: " if sse else b"")
            + b'{"jsonrpc": "2.0", "id": '
            + rid
            + b', "result": {"content": [{"type": "text", "text": "'
        )
        tail = b'"}]}}' + (b"\n\n" if sse else b"")
        if kind == "huge_declared":
            await body(head + b"x" * 1000, more=False)
            return
        await body(head)
        piece = b"x" * (1 << 20)
        left = size - len(head) - len(tail)
        while left > 0:
            chunk = piece if left >= len(piece) else piece[:left]
            await body(chunk)
            left -= len(chunk)
        await body(tail, more=False)

    class Guard:
        """ASGI middleware: the credentials check, the gateway modes, and the ``drop`` mode's broken replies."""

        def __init__(self, inner):
            self.inner = inner

        async def __call__(self, scope, receive, send):
            if scope["type"] != "http":
                return await self.inner(scope, receive, send)
            headers = {k.decode().lower(): v.decode() for k, v in scope.get("headers", [])}
            query = urllib.parse.parse_qs(scope.get("query_string", b"").decode())
            want_auth = os.environ.get("HTTP_EXPECT_AUTH")
            want_key = os.environ.get("HTTP_EXPECT_KEY")
            if (want_auth and headers.get("authorization") != want_auth) or (
                want_key and query.get("key") != [want_key]
            ):
                log(event="unauthorized")
                await send(
                    {"type": "http.response.start", "status": 401, "headers": [(b"content-type", b"text/plain")]}
                )
                await send({"type": "http.response.body", "body": b"unauthorized"})
                return

            body = b""
            if scope["method"] == "POST":
                while True:
                    message = await receive()
                    body += message.get("body", b"")
                    if not message.get("more_body"):
                        break
                try:
                    rpc = json.loads(body)
                except ValueError:
                    rpc = None
                if isinstance(rpc, dict) and rpc.get("method") == "tools/call":
                    tool = (rpc.get("params") or {}).get("name")
                    mode = modes().get(tool, "ok")
                    if mode.partition(":")[0] in (
                        "huge_sse",
                        "huge_json",
                        "huge_declared",
                        "sse_flood",
                        "sse_lines",
                        "echo_auth",
                        "gzip_json",
                    ):
                        log(tool=tool, arguments=(rpc.get("params") or {}).get("arguments"), gateway=True)
                        await streamed(send, mode, rpc.get("id"), headers, query)
                        return
                    if mode in ("http500", "http202", "html", "rpc400"):
                        log(tool=tool, arguments=(rpc.get("params") or {}).get("arguments"), gateway=True)
                        status, kind, content = {
                            "http500": (500, b"text/plain", b"internal error"),
                            "http202": (202, b"text/plain", b""),
                            "html": (200, b"text/html", b"<html><body>maintenance</body></html>"),
                            "rpc400": (
                                400,
                                b"application/json",
                                json.dumps(
                                    {
                                        "jsonrpc": "2.0",
                                        "id": rpc.get("id"),
                                        "error": {"code": -32602, "message": "refused by the gateway"},
                                    }
                                ).encode(),
                            ),
                        }[mode]
                        await send(
                            {"type": "http.response.start", "status": status, "headers": [(b"content-type", kind)]}
                        )
                        await send({"type": "http.response.body", "body": content})
                        return
            replayed = False

            async def replay():
                nonlocal replayed
                if scope["method"] == "POST" and not replayed:
                    replayed = True
                    return {"type": "http.request", "body": body, "more_body": False}
                return await receive()

            async def guarded_send(message):
                if message["type"] == "http.response.body" and dropping:
                    body = message.get("body", b"")
                    compact = body.replace(b" ", b"")
                    for request_id in list(dropping):
                        if any(f'"id":{form}'.encode() in compact for form in (request_id, json.dumps(request_id))):
                            dropping.discard(request_id)
                            raise ConnectionAbortedError("dropping the reply on purpose")
                await send(message)

            await self.inner(scope, replay, guarded_send)

    return app, Guard


def main() -> None:
    # The SDK's import (and uvicorn's) builds a large graph of objects that live until exit, which
    # the collector's passes would only find alive: it stays paused while they are made, then they
    # are frozen out of its view (as vodou_engine/demo/app.py does; a start measured 0.48 CPU-s before, 0.44 after).
    gc.disable()
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    if os.environ.get("HTTP_LOG"):
        with open(os.environ["HTTP_LOG"], "a") as f:
            f.write(json.dumps({"event": "start", "pid": os.getpid()}) + "\n")
    import anyio
    import uvicorn

    app, Guard = build_app()  # noqa: N806 - a class, named as one
    options = {
        "json_response": os.environ.get("HTTP_JSON_RESPONSE") == "1",
        "stateless_http": os.environ.get("HTTP_STATELESS") == "1",
    }
    config = uvicorn.Config(Guard(app.streamable_http_app(**options)), log_level="critical", lifespan="on")
    server = uvicorn.Server(config)
    gc.freeze()
    gc.enable()
    print(sock.getsockname()[1], flush=True)
    anyio.run(lambda: server.serve(sockets=[sock]))


if __name__ == "__main__":
    main()
