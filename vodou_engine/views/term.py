"""The terminal: one console per stream, text made safe to print, a stdout that may close.

Text that came from a server (a tool's error, a result, a card built from
one) may hold terminal escapes: ``\x1b[2J\x1b[H`` clears the screen and
could be followed by a fake "run succeeded". Every string printed here goes
through :func:`printable`, which shows every character that could hide or
drive the screen as its marker (``⟨U+001B⟩``, ``text_safety``) instead of
obeying it; rich's emoji codes and markup are never read in it either.

When stdout is a pipe that closes early (``recipe approve ... | head -1``)
the run must go on: the first write that finds the pipe gone sends stdout
to /dev/null for the rest of the process, and the command's exit code is
the run's.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from ..text_safety import hidden_in, shown


def json_safe(text: str) -> str:
    """JSON text with every character that could hide or drive a terminal (``text_safety``:
    controls, bidirectional and other format characters, zero-width and tag characters,
    separators, spaces other than U+0020) written as a ``\\uXXXX`` escape (a surrogate pair
    beyond the BMP). Such characters only occur inside strings (C0 controls JSON escapes
    itself), so the document decodes to the same value."""
    if text.isascii():
        return text.replace("\x7f", "\\u007f")
    table = hidden_in(text, keep="\n\t")
    return text.translate({ord(ch): _json_escape(ch) for ch in table}) if table else text


def _json_escape(ch: str) -> str:
    o = ord(ch)
    if o < 0x10000:
        return f"\\u{o:04x}"
    o -= 0x10000
    return f"\\u{0xD800 + (o >> 10):04x}\\u{0xDC00 + (o & 0x3FF):04x}"


def printable(text: Any) -> str:
    """``text`` with every character that could hide or drive the terminal shown as its
    marker (``⟨U+001B⟩``), not obeyed: the one rendering every surface uses (``text_safety.shown``)."""
    return shown(text)


class _Survivor:
    """A text stream that turns into a sink when its reader goes away."""

    def __init__(self, stream: Any):
        self._stream = stream
        self._gone = False

    def _lost(self) -> None:
        self._gone = True
        try:
            fd = os.open(os.devnull, os.O_WRONLY)
            os.dup2(fd, self._stream.fileno())
            os.close(fd)
        except (OSError, ValueError):
            pass

    def write(self, text: str) -> int:
        if self._gone:
            return len(text)
        try:
            return self._stream.write(text)
        except (BrokenPipeError, ConnectionResetError):
            self._lost()
            return len(text)
        except OSError as exc:
            if exc.errno == 32:  # EPIPE
                self._lost()
                return len(text)
            raise

    def flush(self) -> None:
        if self._gone:
            return
        try:
            self._stream.flush()
        except (BrokenPipeError, ConnectionResetError):
            self._lost()
        except OSError as exc:
            if exc.errno != 32:
                raise
            self._lost()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def guard_stdout() -> None:
    """Make stdout survive its reader closing (once per process)."""
    if not isinstance(sys.stdout, _Survivor):
        sys.stdout = _Survivor(sys.stdout)


def out(text: str) -> None:
    """Plain text (JSON documents, actions.json) to stdout."""
    sys.stdout.write(text)


_consoles: dict[tuple[bool, int], Any] = {}


def console(stderr: bool = False) -> Any:
    """The rich console for a stream (one per stream, not one per call). Piped output is
    not hard-wrapped, so cards and payloads stay copyable; on a terminal rich measures
    the width itself."""
    stream = sys.stderr if stderr else sys.stdout
    key = (stderr, id(stream))
    con = _consoles.get(key)
    if con is None or con.file is not stream:  # an id can be reused once its stream is gone
        from rich.console import Console

        tty = stream.isatty()
        con = _consoles[key] = Console(file=stream, highlight=False, soft_wrap=not tty, width=None if tty else 10_000)
    return con


def say(text: Any, *, style: str | None = None, err: bool = False) -> None:
    """One line (or block) of text that may hold server-supplied words."""
    console(err).print(printable(text), style=style, markup=False, highlight=False, emoji=False, soft_wrap=True)


def cell(text: Any) -> Any:
    """A table cell that may hold server-supplied words: control characters escaped, and
    taken as text, never as rich markup (a ``[/x]`` in a tool's error is shown, not obeyed)."""
    from rich.text import Text

    return Text(printable(text))


def ask(question: str) -> str:
    """Read one answer at a prompt; the question is text, not markup (``[y]es`` stays as it is)."""
    from rich.text import Text

    return console().input(Text(printable(question)))
