"""Who follows whom in a drive's graph, and which joins a node ends an item of: built once per
drive, as shared tuples (a together of 100,000 branches keeps one ``(join,)``, not 100,000
lists), which is most of what a wide together costs in memory beyond its nodes."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from ..plan import JoinNode


def followers(nodes: list[Any]) -> dict[str, Any]:
    """Node id -> the ids of the nodes that need it, as tuples: equal ones are one object, so
    a together of N branches keeps one ``(join,)`` instead of N lists (and makes none)."""
    succ: dict[str, Any] = dict.fromkeys([n.id for n in nodes], ())
    _gather(succ, ((need, n.id) for n in nodes for need in n.needs))
    return succ


def joins_of(nodes: list[Any]) -> dict[str, Any]:
    """Node id -> the joins whose items it ends (only nodes that end one), as shared tuples."""
    joins: dict[str, Any] = {}
    _gather(joins, ((need, n.id) for n in nodes if isinstance(n, JoinNode) for need in n.needs))
    return joins


def _gather(into: dict[str, Any], pairs: Iterator[tuple[str, str]]) -> None:
    """``into[key]`` += ``(value,)`` for each pair, in order: a key's first value is a one-item
    tuple shared by every key with that value; only a key with more gets a list, made a
    (shared) tuple at the end."""
    single: dict[str, tuple[str]] = {}
    more: dict[str, list[str]] = {}
    for key, value in pairs:
        have = into.get(key)
        if not have:
            one = single.get(value)
            if one is None:
                one = single[value] = (value,)
            into[key] = one
        elif key in more:
            more[key].append(value)
        else:
            more[key] = [*have, value]
    seen: dict[tuple[str, ...], tuple[str, ...]] = {}
    for key, values in more.items():
        t = tuple(values)
        into[key] = seen.setdefault(t, t)
