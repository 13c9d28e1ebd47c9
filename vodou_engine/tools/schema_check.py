"""A tool call's arguments against the tool's own ``inputSchema``, before anyone is asked.

A payload the server will refuse must never reach a card: a person would approve
something that cannot happen, and learn it only after the approval. ``recipe plan``
checks the literal parts of every tool step's arguments (``templated`` names the
values a reference fills at run time, which only the run can check), and the gate
checks the frozen payload before it stores the question. The words are the
schema's own (jsonschema's messages), so they say what the server would say.

A schema that is itself no valid JSON Schema is not held against the arguments:
the server is the judge of what it meant, and it still refuses at call time.
"""

from __future__ import annotations

import functools
from collections.abc import Collection, Mapping
from typing import Any, NamedTuple

import jsonschema
import msgspec
from jsonschema.validators import validator_for
from referencing.exceptions import Unresolvable

__all__ = ["Problem", "problems", "where"]

Path = tuple[str | int, ...]
_json = msgspec.json.Encoder(order="deterministic")

_ABOUT_THE_SHAPE = frozenset(
    {
        "required",
        "additionalProperties",
        "type",
        "minProperties",
        "maxProperties",
        "propertyNames",
        "dependentRequired",
        "minItems",
        "maxItems",
    }
)
"""Keywords whose verdict on an object or array does not depend on its members' values:
still checked on an object one of whose members is a reference not yet filled."""


class Problem(NamedTuple):
    """One way the arguments break the schema: where (``path`` into the arguments), the
    schema's words, and the keyword that said so (``required``, ``type``, ``enum``...)."""

    path: Path
    message: str
    keyword: str


@functools.lru_cache(maxsize=256)
def _validator(schema_json: bytes) -> Any:
    """A validator for a schema (by its canonical JSON), checked once: a thousand parked
    branches calling one tool pay for its schema once. None for no valid JSON Schema."""
    schema = msgspec.json.decode(schema_json)
    if not isinstance(schema, dict):
        return None
    cls = validator_for(schema, default=jsonschema.Draft202012Validator)
    try:
        cls.check_schema(schema)
    except jsonschema.SchemaError:
        return None
    return cls(schema)


def where(path: Path) -> str:
    """A path into the arguments as a person reads it: ``priority``, ``to.0``, or the arguments."""
    return ".".join(map(str, path)) if path else "the arguments"


def problems(schema: Mapping[str, Any] | None, args: Any, *, templated: Collection[Path] = ()) -> list[Problem]:
    """Every way ``args`` breaks ``schema``, in the order of the arguments.

    ``templated``: paths of values a reference fills at run time; nothing is said about
    them (nor about what lies inside them), but the object around them is still checked
    for its required fields, unknown fields and its own type."""
    if not schema:
        return []
    validator = _validator(_json.encode(schema))
    if validator is None:
        return []
    try:
        errors = list(validator.iter_errors(args))
    except (jsonschema.exceptions.UnknownType, Unresolvable):
        return []  # a type or a $ref the validator cannot apply: the server judges
    out = []
    for e in errors:
        path: Path = tuple(e.absolute_path)
        if any(path[: len(t)] == t for t in templated):
            continue  # at or inside a value a reference fills
        if any(t[: len(path)] == path for t in templated) and e.validator not in _ABOUT_THE_SHAPE:
            continue  # a verdict on the whole that may change once the reference is filled
        out.append(Problem(path, e.message, str(e.validator)))
    return sorted(out, key=lambda p: tuple(map(str, p.path)))
