"""Bounds on what comes in from outside: which files are read, how much, how deep.

Every document the engine reads from a person or a server (a recipe, an
actions.json, a server or policy file, a ``--set`` value, a tool's result)
passes through here first (a server's messages are bounded by size where the
transports read them, ``MAX_MESSAGE_BYTES``), so a FIFO, ``/dev/zero`` or a value nested five
thousand deep is a clear error at the door instead of a hang, a read until
the machine runs out of memory, or a ``RecursionError`` deep inside the run.
"""

from __future__ import annotations

import os
import re
import stat
from array import array
from itertools import accumulate

MAX_FILE_BYTES = 16 * 1024 * 1024
"""The largest recipe, actions.json, server or policy file read (a 10,000-step recipe is about 1 MB)."""

MAX_PLAN_BYTES = 16 * MAX_FILE_BYTES
"""The largest plan a run stores (its canonical JSON, 256 MiB): sixteen times the largest
actions.json read, and sixteen times the plan of a run of 100,000 branches (about 16 MB).
A larger plan is refused before the run is stored, so every stored plan is within it; a
stored plan that expands past it was not written by the engine (a damaged or hostile row,
a zlib bomb) and is refused as corrupt, after at most this much is inflated."""

MAX_MESSAGE_BYTES = 16 * 1024 * 1024
"""The largest message read from an MCP server unless its ``maxMessageBytes`` says otherwise:
a line over stdio, a server-sent event or a JSON body over HTTP. A larger one is not read
(nor kept in memory) and ends the server's session (docs/servers.md)."""

MAX_DEPTH = 100
"""The deepest nesting of JSON arrays and objects accepted from outside.

Real tool results and arguments stay well under 20 levels; Python's own
recursion limit (1,000 frames) is what a deeper value would hit later, in
some place that cannot say which input was at fault."""


def size_words(size: int) -> str:
    """A number of bytes as a person reads it: ``16 MiB``, ``64 KiB``, ``1,000 bytes``."""
    for unit, name in ((1024 * 1024, "MiB"), (1024, "KiB")):
        if size >= unit and size % unit == 0:
            return f"{size // unit:,} {name}"
    return f"{size:,} bytes"


class TooDeep(ValueError):
    """A JSON document nests arrays or objects deeper than MAX_DEPTH."""

    def __init__(self, depth: int):
        super().__init__(f"it nests arrays or objects {depth} levels deep; at most {MAX_DEPTH} are accepted")
        self.depth = depth


class NotAFile(OSError):
    """The path names a FIFO, a device, a directory or a socket: reading it could block or never end."""


class TooLarge(OSError):
    """The file is larger than MAX_FILE_BYTES."""


def read_regular_file(path: str | os.PathLike[str], limit: int = MAX_FILE_BYTES) -> bytes:
    """The bytes of a regular file of at most ``limit`` bytes.

    Opened without blocking (a FIFO with no writer would block ``open`` itself)
    and checked on the open descriptor, so what is read is what was checked.
    Raises FileNotFoundError/PermissionError/... as ``open`` would, NotAFile
    for anything but a regular file, TooLarge past the limit.
    """
    fd = os.open(os.fspath(path), os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise IsADirectoryError(21, "Is a directory", os.fspath(path))
        if not stat.S_ISREG(st.st_mode):
            raise NotAFile(
                0, "not a regular file (a FIFO, device or socket cannot be read as a document)", os.fspath(path)
            )
        if st.st_size > limit:
            raise TooLarge(0, f"larger than {limit // (1024 * 1024)} MiB", os.fspath(path))
        chunks = []
        left = limit + 1
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        data = b"".join(chunks)
        if len(data) > limit:  # it grew while being read
            raise TooLarge(0, f"larger than {limit // (1024 * 1024)} MiB", os.fspath(path))
        return data
    finally:
        os.close(fd)


_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"', re.S)
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
_AS_STEPS = bytes.maketrans(b"[{]}", b"\x01\x01\xff\xff")


def json_depth(data: bytes | str) -> int:
    """How deep a JSON text nests arrays and objects, without parsing it
    (below MAX_DEPTH, an upper bound: enough to know it is within the limit).

    Linear and iterative (strings are skipped, brackets counted), so it is
    safe on input that would make a recursive parser give up; a text with
    fewer opening brackets than MAX_DEPTH is answered without any scan.
    """
    if isinstance(data, str):
        data = data.encode("utf-8", "surrogatepass")
    opens = data.count(b"[") + data.count(b"{")
    if opens <= MAX_DEPTH:
        return opens
    if b'"' in data:
        data = _STRING.sub(b"", data)
    steps = array("b", data.translate(None, _NOT_BRACKETS).translate(_AS_STEPS))
    return max(accumulate(steps), default=0)


def check_json_depth(data: bytes | str) -> None:
    """Raise TooDeep when ``data`` nests deeper than MAX_DEPTH."""
    depth = json_depth(data)
    if depth > MAX_DEPTH:
        raise TooDeep(depth)


def surely_within_depth(data: bytes | bytearray) -> bool:
    """No JSON value in ``data`` nests deeper than MAX_DEPTH, known without parsing or walking
    it: it holds no more opening brackets than that, inside strings or not (two C scans)."""
    return data.count(b"[") + data.count(b"{") <= MAX_DEPTH


def value_depth(value: object) -> int:
    """The nesting depth of a decoded value (lists and dicts), iteratively."""
    deepest = 0
    stack: list[tuple[object, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            depth += 1
            if depth > MAX_DEPTH:
                return depth
            stack.extend((v, depth) for v in item.values())
        elif isinstance(item, (list, tuple)):
            depth += 1
            if depth > MAX_DEPTH:
                return depth
            stack.extend((v, depth) for v in item)
        deepest = max(deepest, depth)
    return deepest


def check_value_depth(value: object) -> None:
    """Raise TooDeep for a value built elsewhere (a server's structured content) that nests too deep."""
    depth = value_depth(value)
    if depth > MAX_DEPTH:
        raise TooDeep(depth)
