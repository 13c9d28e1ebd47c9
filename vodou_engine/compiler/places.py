"""Where each value of a tool call's JSON arguments was written, found again in the text.

The compiled plan keeps a step's position, not one for each of its arguments (most are
never pointed at). When a later check finds fault with one value (``recipe plan`` holding
the arguments against the tool's input schema), this reads the call again from the step's
position and says where each value and each key was, so the error can point at it like
any other recipe error. JSON here is the recipe's: it may span lines while a bracket is
open, with ``#`` comments between values.
"""

from __future__ import annotations

import bisect
import json
import re

from .ast import Pos

__all__ = ["Places", "argument_places"]

Path = tuple[str | int, ...]
_STRING = re.compile(r'"(?:[^"\\\n]|\\.)*"')
_SCALAR = re.compile(r"[^\s,\]\}#]+")


class Places:
    """Per path into the arguments: where its value starts (``values``) and, for a member
    of an object, where its key was written (``keys``)."""

    def __init__(self) -> None:
        self.values: dict[Path, Pos] = {}
        self.keys: dict[Path, Pos] = {}


class _Scan:
    def __init__(self, text: str):
        self.text = text
        self.starts = [0] + [m.end() for m in re.finditer("\n", text)]
        self.places = Places()

    def pos(self, i: int, width: int = 1) -> Pos:
        row = bisect.bisect_right(self.starts, i) - 1
        return Pos(row + 1, i - self.starts[row] + 1, max(1, width))

    def gap(self, i: int) -> int:
        """Past spaces, line ends and ``#`` comments."""
        text = self.text
        while i < len(text):
            c = text[i]
            if c in " \t\r\n":
                i += 1
            elif c == "#":
                end = text.find("\n", i)
                i = len(text) if end < 0 else end
            else:
                break
        return i

    def string(self, i: int) -> int:
        m = _STRING.match(self.text, i)
        if m is None:
            raise ValueError("no string here")
        return m.end()

    def value(self, i: int, path: Path) -> int:
        text, places = self.text, self.places
        i = self.gap(i)
        c = text[i]
        if c == "{":
            places.values[path] = self.pos(i)
            i = self.gap(i + 1)
            while text[i] != "}":
                end = self.string(i)
                key = json.loads(text[i:end])
                places.keys[(*path, key)] = self.pos(i, end - i)
                i = self.gap(end)
                if text[i] != ":":
                    raise ValueError("no colon")
                i = self.gap(self.value(i + 1, (*path, key)))
                if text[i] == ",":
                    i = self.gap(i + 1)
            return i + 1
        if c == "[":
            places.values[path] = self.pos(i)
            i = self.gap(i + 1)
            n = 0
            while text[i] != "]":
                i = self.gap(self.value(i, (*path, n)))
                n += 1
                if text[i] == ",":
                    i = self.gap(i + 1)
            return i + 1
        if c == '"':
            end = self.string(i)
            places.values[path] = self.pos(i, end - i)
            return end
        m = _SCALAR.match(text, i)
        if m is None:
            raise ValueError("no value here")
        places.values[path] = self.pos(i, m.end() - i)
        return m.end()


def argument_places(text: str, line: int, column: int) -> Places:
    """Where the arguments of the call written at ``line``:``column`` (a step's name, or a
    ``preview:``/``check:`` call) are: the first ``{`` after it on its line opens them.
    What cannot be found is left out (the caller points at the step instead)."""
    scan = _Scan(text)
    if not 0 < line <= len(scan.starts):
        return scan.places
    i = scan.starts[line - 1] + column - 1
    while i < len(text) and text[i] != "\n":
        c = text[i]
        if c == '"':
            try:
                i = scan.string(i)
            except ValueError:
                return scan.places
            continue
        if c == "#":
            return scan.places
        if c == "{":
            try:
                scan.value(i, ())
            except (ValueError, IndexError):
                pass  # what was found so far stands
            return scan.places
        i += 1
    return scan.places
