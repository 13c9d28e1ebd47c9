"""The recipe's syntax tree: what the parser saw, with positions, before meaning.

Plain slotted classes: the parser builds tens of thousands of them for a big
recipe and they never cross a process boundary (the Plan does).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(slots=True)
class Pos:
    line: int
    column: int
    width: int = 1


class JStr(str):
    """A JSON string from the source that remembers where it was written.

    ``raw`` is the token as written (quotes included), so a column inside the
    string can be mapped back to the source when it holds no escapes.
    """

    __slots__ = ("pos", "raw")

    pos: Pos
    raw: str


@dataclass(slots=True)
class ToolCall:
    """``flat`` is where one-line JSON was written, (text, line, column), when ``args`` holds plain values without positions."""

    server: str
    tool: str
    args: dict[str, Any]
    pos: Pos
    flat: tuple[str, int, int] | None = None


@dataclass(slots=True)
class Write:
    prompt: str
    inputs: list[tuple[str, Pos]]
    pos: Pos


@dataclass(slots=True)
class Option:
    kind: str  # preview | check | expires | without_asking
    value: Any
    pos: Pos


@dataclass(slots=True)
class Step:
    name: str
    action: ToolCall | Write
    options: list[Option]
    pos: Pos


@dataclass(slots=True)
class Need:
    k: int
    n: int | None  # None: `of all` (a loop's)
    pos: Pos
    percent: int | None = None  # `need: 50%` (a loop's)


@dataclass(slots=True)
class LoopOption:
    kind: str  # at_most | max_items
    value: int
    pos: Pos


@dataclass(slots=True)
class Loop:
    """``for each VAR in SOURCE:``; ``ref`` is the reference's text (``unread.messages``)
    when the source is one, else ``literal`` is the JSON value written in place."""

    var: str
    var_pos: Pos
    ref: str | None
    literal: Any
    source_pos: Pos
    items: list[Any]
    pos: Pos


@dataclass(slots=True)
class Ask:
    questions: list[tuple[str, Pos]]
    pos: Pos


@dataclass(slots=True)
class Block:
    kind: str  # together | then
    name: str | None
    items: list[Any]
    pos: Pos
    name_pos: Pos | None = None


@dataclass(slots=True)
class InputDecl:
    name: str
    default: Any
    required: bool
    pos: Pos


@dataclass(slots=True)
class Recipe:
    title: tuple[str, Pos] | None = None
    inputs: list[InputDecl] = field(default_factory=list)
    expires: tuple[int, Pos] | None = None
    approvers: tuple[list[str], Pos] | None = None
    model: tuple[str, Pos] | None = None
    items: list[Any] = field(default_factory=list)
    headers: list[tuple[str, Pos]] = field(default_factory=list)
