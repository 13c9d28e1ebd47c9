"""An HTTP front for the MCP conformance suite, which speaks to servers only over streamable HTTP.

Two fronts, each an in-process standard-library HTTP server on a free port:

- ``StdioFront``: every ``initialize`` POSTed starts a new ``recipe mcp`` process (one
  stdio session per process, as a desktop client starts it) and hands back an
  ``Mcp-Session-Id``; every later message of that session is one line on the process's
  stdin, and what the process writes on stdout is streamed back as server-sent events
  until the response to the request arrives (the logging and progress notifications and
  requests to the client in between included, in order). A message from the client that
  is no request (a notification, a response to the server) is written and answered 202.
  Nothing is interpreted: the bytes the suite sends are the bytes the server reads.
- ``TokenFront``: the requests are passed to ``/mcp`` of a real ``recipe serve`` as they
  came (method, path, Host, Origin, body), with one header added, the agent's
  ``Authorization: Bearer TOKEN``, which the suite has no way to send; the response is
  passed back as it comes.
"""

from __future__ import annotations

import http.client
import json
import queue
import subprocess
import threading
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import IO
from urllib.parse import urlsplit

HOP = {"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade", "proxy-authorization"}


class _Session:
    """One ``recipe mcp`` process: stdin written under a lock, stdout read by a thread into
    one queue per request id awaited, and the rest (notifications, server requests) into
    the stream of the request being answered."""

    def __init__(self, argv: list[str], env: dict, cwd: Path, stderr: IO[bytes]):
        self.proc = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr, env=env, cwd=cwd
        )
        self._lock = threading.Lock()
        self._waiting: dict[object, queue.Queue] = {}
        self._current: list[queue.Queue] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            line = line.strip()
            if not line:
                continue
            msg = json.loads(line)
            with self._lock:
                if "method" not in msg and msg.get("id") in self._waiting:
                    target = self._waiting.pop(msg["id"])
                elif self._current:
                    target = self._current[-1]
                else:
                    continue  # nobody listens (no GET stream here): dropped, as the transport allows
            target.put(line)
        with self._lock:
            for q in [*self._waiting.values(), *self._current]:
                q.put(None)

    def send(self, body: bytes, request_id: object = None) -> queue.Queue | None:
        """Write one message; for a request, the queue its stream is read from."""
        q: queue.Queue | None = None
        with self._lock:
            if request_id is not None:
                q = queue.Queue()
                self._waiting[request_id] = q
                self._current.append(q)
            assert self.proc.stdin is not None
            self.proc.stdin.write(body.strip() + b"\n")
            self.proc.stdin.flush()
        return q

    def done(self, q: queue.Queue) -> None:
        with self._lock:
            self._current.remove(q)

    def close(self) -> None:
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()  # a stdio server ends when its input does
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


class _Front:
    def __init__(self, handler: type[BaseHTTPRequestHandler]):
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.httpd.front = self  # type: ignore[attr-defined]
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/mcp"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class _StdioHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args) -> None:
        pass

    def _plain(self, status: int, text: str = "") -> None:
        body = text.encode()
        self.send_response(status)
        self.send_header("content-type", "text/plain")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        self._plain(405, "no server-to-client stream over this front")

    def do_DELETE(self) -> None:
        ended = self.server.front.end(self.headers.get("mcp-session-id", ""))  # type: ignore[attr-defined]
        self._plain(200 if ended else 404)

    def do_POST(self) -> None:
        front: StdioFront = self.server.front  # type: ignore[attr-defined]
        body = self.rfile.read(int(self.headers.get("content-length") or 0))
        try:
            msg = json.loads(body)
        except ValueError:
            return self._plain(400, "not JSON")
        sid = self.headers.get("mcp-session-id")
        extra = {}
        if isinstance(msg, dict) and msg.get("method") == "initialize" and sid is None:
            sid = uuid.uuid4().hex
            front.sessions[sid] = front.start()
            extra["mcp-session-id"] = sid
        session = front.sessions.get(sid or "")
        if session is None:
            return self._plain(404 if sid else 400, "unknown session" if sid else "no Mcp-Session-Id")
        is_request = isinstance(msg, dict) and "method" in msg and "id" in msg
        q = session.send(body, msg["id"] if is_request else None)
        if q is None:
            return self._plain(202)
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("cache-control", "no-cache")
        self.send_header("transfer-encoding", "chunked")
        for k, v in extra.items():
            self.send_header(k, v)
        self.end_headers()
        try:
            while True:
                line = q.get(timeout=120)
                if line is None:
                    break
                event = b"event: message\ndata: " + line + b"\n\n"
                self.wfile.write(b"%x\r\n%s\r\n" % (len(event), event))
                self.wfile.flush()
                if json.loads(line).get("id") == msg["id"] and "method" not in json.loads(line):
                    break
        finally:
            session.done(q)
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()


class StdioFront(_Front):
    """``recipe mcp`` (``argv``) behind streamable HTTP.

    ``shared``: every session of the run is spoken over one process's stdio, each opening
    with its own ``initialize`` (answered again by the same process), one after another;
    else each session gets a process of its own, as a desktop client starts one, at the
    cost of a process start (about a second) per scenario."""

    def __init__(self, argv: list[str], env: dict, cwd: Path, shared: bool = True):
        self.argv, self.env, self.cwd = argv, env, cwd
        self.stderr = cwd / "recipe-mcp.stderr"
        self._errlog = self.stderr.open("ab")
        self.sessions: dict[str, _Session] = {}
        self.started = 0
        self._shared = self._new() if shared else None
        super().__init__(_StdioHandler)

    def _new(self) -> _Session:
        self.started += 1
        return _Session(self.argv, self.env, self.cwd, self._errlog)

    def start(self) -> _Session:
        return self._shared or self._new()

    def end(self, sid: str) -> bool:
        session = self.sessions.pop(sid, None)
        if session is not None and session is not self._shared:
            session.close()
        return session is not None

    def close(self) -> None:
        super().close()
        for s in {*self.sessions.values(), *([self._shared] if self._shared else [])}:
            s.close()
        self.sessions.clear()
        self._errlog.close()


class _TokenHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args) -> None:
        pass

    def _pass(self) -> None:
        front: TokenFront = self.server.front  # type: ignore[attr-defined]
        body = self.rfile.read(int(self.headers.get("content-length") or 0))
        headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP}
        headers["Authorization"] = f"Bearer {front.token}"
        upstream = http.client.HTTPConnection(front.target.hostname, front.target.port, timeout=120)
        try:
            upstream.request(self.command, self.path, body=body or None, headers=headers)
            res = upstream.getresponse()
            self.send_response(res.status, res.reason)
            for k, v in res.getheaders():
                if k.lower() not in HOP and k.lower() != "content-length":
                    self.send_header(k, v)
            self.send_header("transfer-encoding", "chunked")
            self.end_headers()
            while chunk := res.read1(65536):
                self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        finally:
            upstream.close()

    def do_GET(self) -> None:
        self._pass()

    def do_POST(self) -> None:
        self._pass()

    def do_DELETE(self) -> None:
        self._pass()


class TokenFront(_Front):
    """``url`` (``/mcp`` of ``recipe serve``) with the agent's bearer ``token`` added."""

    def __init__(self, url: str, token: str):
        self.target = urlsplit(url)
        self.token = token
        super().__init__(_TokenHandler)
