"""The one compiler: recipe text -> verified, fingerprinted Plan.

Every surface (CLI, Python API, runtime) calls ``compile_recipe`` or
``load_plan``; none keeps its own idea of what a recipe means.
"""

from __future__ import annotations

import gc
import hashlib
import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import PlanEditedError, PlanError, RecipeError
from ..plan import Plan, RecipeInfo, Where, compute_fingerprint, decode_plan, format_for, with_fingerprint
from ..policy import Hints, Policy

if TYPE_CHECKING:
    from .source import Source

__all__ = ["compile_recipe", "load_plan", "load_source", "read_recipe_file"]


def read_recipe_file(path: str) -> str:
    """Read a recipe as UTF-8, with a positioned error for bad bytes."""
    return decode_utf8(_read(path), path)


def _read(path: str) -> bytes:
    """A recipe or actions.json file's bytes: a regular file of bounded size only
    (a FIFO would block, ``/dev/zero`` would never end)."""
    from ..limits import MAX_FILE_BYTES, NotAFile, TooLarge, read_regular_file

    try:
        return read_regular_file(path)
    except (NotAFile, TooLarge) as exc:
        raise RecipeError(
            f"cannot read {path}: {exc.strerror}",
            path=path,
            hint=f"give the path of a .recipe file or an actions.json (a regular file of at most {MAX_FILE_BYTES // (1024 * 1024)} MiB)",
        ) from None
    except OSError as exc:
        raise RecipeError(
            f"cannot read {path}: {exc.strerror}",
            path=path,
            hint="give the path of a .recipe file or an actions.json"
            if not os.path.exists(path)
            else "check its permissions",
        ) from None


def decode_utf8(data: bytes, path: str | None) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        start = data.rfind(b"\n", 0, exc.start) + 1
        col = len(data[start : exc.start].decode("utf-8", "replace")) + 1  # in characters, like every other column
        text = data.split(b"\n")[line - 1].decode("utf-8", "replace")
        raise RecipeError(
            f"invalid UTF-8 (byte 0x{data[exc.start]:02x})",
            path=path,
            line=line,
            column=col,
            source_line=text,
            hint="save the file as UTF-8",
        ) from None


def compile_recipe(
    text: str,
    path: str | None = None,
    *,
    policy: Policy | None = None,
    hints: Mapping[str, Hints | None] | None = None,
) -> Plan:
    """Compile recipe text into a verified Plan, or raise RecipeError."""
    from .source import Source

    policy = policy or Policy()
    source = Source(text, path)
    # A compile allocates hundreds of thousands of objects (tokens, syntax
    # tree, nodes, the graph) that live until it returns, and makes no
    # cycles that need collecting. The cyclic collector would only rescan
    # them again and again as the heap grows: at 10,000 steps that was a
    # third of the time, most of it in the graph and gate code after parsing.
    gc_was_on = gc.isenabled()
    gc.disable()
    try:
        return _compile(source, policy, hints)
    finally:
        if gc_was_on:
            gc.enable()


def _compile(source: Source, policy: Policy, hints: Mapping[str, Hints | None] | None) -> Plan:
    from ..graph.gate import assess_tools, insert_approvals
    from ..graph.verify import check
    from .lower import Lowerer
    from .parser import parse

    path = source.path
    lowered = Lowerer(source).lower(parse(source))

    def error_at(message: str, where: Where | None, hint: str) -> RecipeError:
        from .ast import Pos

        return source.error(message, Pos(where.line, where.column) if where else None, hint)

    nodes = insert_approvals(assess_tools(lowered.nodes, policy, hints, error_at))
    name = lowered.title or (Path(path).stem if path else "recipe")
    plan = Plan(
        format=format_for(nodes),
        recipe=RecipeInfo(name=name, source_sha256=hashlib.sha256(source.text.encode("utf-8")).hexdigest()),
        inputs=lowered.inputs,
        options=lowered.options,
        nodes=nodes,
    )
    check(plan, policy, path=path)
    return with_fingerprint(plan)


def load_plan(
    data: bytes | str, path: str | None = None, *, policy: Policy | None = None, refresh: bool = False
) -> Plan:
    """Decode and verify an actions.json; the fingerprint must match unless refreshing."""
    from ..graph.verify import check
    from ..limits import TooDeep, check_json_depth

    try:
        check_json_depth(data)
    except TooDeep as exc:
        raise PlanError(
            f"not a valid actions.json: {exc}", path=path, hint="compile the recipe again to get a new actions.json"
        ) from None
    plan = decode_plan(data, path=path)
    try:
        check(plan, policy or Policy(), path=path)
    except PlanError as exc:
        # Node positions are places in the recipe it came from, not in this JSON.
        if exc.line is not None:
            exc.message += f" (recipe line {exc.line}, column {exc.column})"
            exc.line = exc.column = None
        raise
    expected = compute_fingerprint(plan)
    if refresh:
        return with_fingerprint(plan)
    if plan.fingerprint != expected:
        raise PlanEditedError(
            f"the plan's fingerprint does not match its content (it says {plan.fingerprint or 'nothing'}); it was edited",
            path=path,
            hint="if the edit is intended, verify and fingerprint it again by compiling the file",
        )
    return plan


def looks_like_plan(path: str, data: bytes) -> bool:
    return path.endswith(".json") or data.lstrip()[:1] == b"{"


def load_source(
    path: str,
    *,
    policy: Policy | None = None,
    hints: Mapping[str, Hints | None] | None = None,
    refresh: bool = False,
    memo: bool = False,
) -> tuple[Plan, str | None]:
    """A recipe or an actions.json, from a file: (plan, recipe text or None).

    ``memo`` lets a recipe's verified plan come from the compile memo
    (compiler/cache.py); only the card and ``compile`` use it, never ``run``.
    """
    data = _read(path)
    if looks_like_plan(path, data):
        return load_plan(data, path, policy=policy, refresh=refresh), None
    text = decode_utf8(data, path)
    if memo and not hints:
        from . import cache

        p = policy or Policy()
        k = cache.key(text, path, f"{p.digest}:{p.source}")
        plan = cache.get(k)
        if plan is None:
            plan = compile_recipe(text, path, policy=policy)
            cache.put(k, plan)
        return plan, text
    plan = compile_recipe(text, path, policy=policy, hints=hints)
    return plan, text
