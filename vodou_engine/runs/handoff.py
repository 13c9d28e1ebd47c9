"""Warm drives: a decision made anywhere runs on the servers a live ``recipe serve`` keeps up.

An approval from the CLI (or any caller of the run API) used to start the run's
servers in its own process: about a second on the demo servers, several on a busy
machine, before the effect could start. When a ``recipe serve`` holds the same
SQLite store, its servers are already up. It listens on a Unix socket whose name is
derived from the store's real path; the approving process records the decision in
the store as before (its own identity, proof and fingerprint: nothing about the
decision goes over the socket), then asks the warm process to drive the run and waits
for the report. The request can only ask for a drive of a run already in the store,
which ``recipe resume`` lets anyone with the store do; the warm process reads the
decision from the store, never from the request.

Before recording the decision, the approving process may send a ``check`` request: the
warm process looks, on the servers it will drive on, whether a server the run still
calls declares a step riskier than its plan now, and says so (``DriveReply.mismatch``),
so that such an approval is refused before it is recorded; nothing is driven.

Where nothing listens, the socket is stale, or the warm process closes the connection
or cannot drive the run here (its servers resolve differently, it is stopping), the
approving process drives the run itself, exactly as before; the store's lease makes
sure only one of them takes it. On PostgreSQL the workers already take a decision's
drive from the queue, so this is for SQLite stores only.

The socket lives in a directory only this user can enter (``$XDG_RUNTIME_DIR/vodou``,
else ``/tmp/vodou-UID``); a directory another user owns or may write is not used. A
socket's path has a length limit (``sun_path``: 108 bytes on Linux, 104 on macOS and the
BSDs, with its terminating NUL); where ``$XDG_RUNTIME_DIR`` is so long that the socket's
path would not fit, the directory under ``$TMPDIR`` (or ``/tmp``) is used instead, by the
listener and its callers alike (the choice depends only on the lengths), so a warm serve
is still found. A listener that has no usable directory says so once, in its log.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import socket
import stat
import sys
import tempfile
from typing import Any

import msgspec

from ..reports import RunReport

logger = logging.getLogger(__name__)

SUN_PATH = 104 if sys.platform == "darwin" or "bsd" in sys.platform else 108
"""The size of a Unix socket address's path (``sockaddr_un.sun_path``); a path must fit with
its terminating NUL, so at most one byte less."""
SOCKET_NAME_CHARS = len("drive-") + 24 + len(".sock")
"""A socket's name in its directory: ``drive-`` and 24 hex digits of the store's path digest."""

REQUEST_MAX = 4096
"""A request is one short JSON line; anything longer is refused unread."""
REPLY_MAX = 64 * 1024 * 1024
"""A report is bounded like any document this process reads."""


class DriveRequest(msgspec.Struct, frozen=True, forbid_unknown_fields=True, omit_defaults=True):
    """Sent by the process that recorded a decision: drive this run on your warm servers."""

    run: str
    check: bool = False
    """Before a decision is recorded: drive nothing; say whether a server the run still calls
    declares a step riskier than its plan now (``DriveReply.mismatch``), on the warm servers
    the drive would use. Read-only, like everything else a request may ask."""


class DriveReply(msgspec.Struct, frozen=True, omit_defaults=True):
    """The warm process's answer: the report once the run parks or ends, or why it did not drive."""

    report: RunReport | None = None
    by: str = ""
    """The process that drove it (``recipe serve`` and its pid), for the person's message."""
    refused: str | None = None
    """Why it did not drive the run (the caller drives it itself)."""
    mismatch: str | None = None
    """To a ``check``: the refusal (``policy.mismatch``) the drive would end with; None when
    none (or when it could not look: the caller goes on as before)."""
    mismatch_hint: str | None = None


async def check_warm(store_location: str, run_id: str) -> DriveReply | None:
    """Ask the warm process holding this store whether ``run_id`` could go on now (a ``check``
    request); its reply, or None when nothing answered (the caller goes on as before)."""
    return await _ask(store_location, DriveRequest(run=run_id, check=True))


def _socket_base() -> str | None:
    """The directory this user's sockets go in: ``$XDG_RUNTIME_DIR/vodou`` when a socket's
    path there fits in ``sun_path``, else ``vodou-UID`` in the temporary directory, else in
    ``/tmp``. Lengths alone decide, so a listener and its callers pick the same one."""
    runtime = os.environ.get("XDG_RUNTIME_DIR", "")
    own = f"vodou-{os.getuid()}"
    candidates = [os.path.join(runtime, "vodou")] if os.path.isabs(runtime) else []
    candidates += [os.path.join(tempfile.gettempdir(), own), os.path.join("/tmp", own)]
    for base in candidates:
        if len(os.fsencode(base)) + 1 + SOCKET_NAME_CHARS < SUN_PATH:
            return base
    return None


def _socket_dir(*, create: bool) -> str | None:
    """This user's private directory for sockets, or None when none is safe to use (or, when
    not ``create``, none exists yet: a caller only looking for a listener leaves no trace)."""
    base = _socket_base()
    if base is None:
        return None
    if create:
        try:
            os.mkdir(base, 0o700)
        except FileExistsError:
            pass
        except OSError:
            return None
    try:
        st = os.lstat(base)
    except OSError:
        return None
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o077:
        return None  # someone else's, or others may write to it: a socket there could be planted
    return base


def socket_path(store_location: str, *, create: bool = False) -> str | None:
    """Where a warm process holding this SQLite store listens (None: not a file store, or no
    safe directory). Named after the store's real path, so every spelling of it agrees.
    ``create``: make the private directory when it is missing (only a listener does)."""
    if "://" in store_location:
        return None
    real = os.path.realpath(store_location)
    base = _socket_dir(create=create)
    if base is None:
        return None
    return os.path.join(base, f"drive-{hashlib.sha256(real.encode()).hexdigest()[:24]}.sock")


def listening(store_location: str) -> bool:
    """Whether a warm process takes drives for this store now (a connect, no request)."""
    path = socket_path(store_location)
    if path is None or not os.path.exists(path):
        return False
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        try:
            s.connect(path)
        except OSError:
            return False
    return True


async def drive_warm(store_location: str, run_id: str) -> DriveReply | None:
    """Ask the warm process holding this store to drive ``run_id``; its reply once the run
    parks or ends, or None when nothing took it (the caller drives it itself)."""
    reply = await _ask(store_location, DriveRequest(run=run_id))
    return None if reply is None or reply.refused or reply.report is None else reply


async def _ask(store_location: str, request: DriveRequest) -> DriveReply | None:
    import trio

    path = socket_path(store_location)
    if path is None:
        return None
    try:
        stream = await trio.open_unix_socket(path)
    except OSError:  # none there, or a socket its process left behind
        return None
    async with stream:
        try:
            await stream.send_all(msgspec.json.encode(request) + b"\n")
            data = await _read_line(stream, REPLY_MAX)
        except (OSError, trio.BrokenResourceError, trio.ClosedResourceError):  # it went away
            return None
    if not data:
        return None  # the warm process went away before answering
    try:
        return msgspec.json.decode(data, type=DriveReply)
    except msgspec.ValidationError:
        return None


async def _read_line(stream: Any, limit: int) -> bytes:
    buf = bytearray()
    while b"\n" not in buf:
        chunk = await stream.receive_some(65536)
        if not chunk:
            return b""
        buf += chunk
        if len(buf) > limit:
            return b""
    return bytes(buf[: buf.index(b"\n")])


async def read_request(stream: Any) -> DriveRequest | None:
    """A caller's request, or None for anything that is not one (it gets no drive)."""
    data = await _read_line(stream, REQUEST_MAX)
    try:
        return msgspec.json.decode(data, type=DriveRequest) if data else None
    except msgspec.ValidationError:
        return None


def bind_listener(store_location: str) -> tuple[socket.socket, str] | None:
    """A listening socket for this store's warm drives, or None when another live process
    already listens for it (or there is no safe place). A socket file left by a process
    that died is replaced."""
    if "://" in store_location:
        return None  # a PostgreSQL store: the workers take a decision's drive from the queue
    path = socket_path(store_location, create=True)
    if path is None:
        tried = _socket_base() or "a private directory"
        logger.warning(
            "decisions made in other processes will not run on this process's warm servers: %s cannot be "
            "made, or is not this user's alone (a directory of mode 0700 owned by uid %d), so no socket is "
            "listened on; remove it, or set XDG_RUNTIME_DIR to a private directory of this user's",
            tried,
            os.getuid(),
        )
        return None
    if os.path.exists(path):
        if listening(store_location):
            return None
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.bind(path)
        os.chmod(path, 0o600)
        sock.listen(64)
    except OSError as exc:
        sock.close()
        logger.warning(
            "decisions made in other processes will not run on this process's warm servers: cannot listen on %s (%s)",
            path,
            exc.strerror or exc,
        )
        return None
    return sock, path
