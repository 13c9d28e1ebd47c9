"""What every concern of the run API stands on: the store, the servers and the policy a
:class:`~vodou_engine.runs.Runs` object was given (each opened or loaded on first use),
whether its runs go on in the workers, and compiling a recipe offline (``load``).
"""

from __future__ import annotations

import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import Any

import msgspec

from ..bounds import check_plan
from ..compiler import compile_recipe, load_plan, load_source
from ..owners import this_process
from ..plan import Plan, encode_plan
from ..policy import Hints, Policy, load_policy
from ..servers import ServerConfig, ServerSet, load_servers
from ..store import POSTGRES_SCHEMES, default_store_path, open_store
from ..store.protocol import RunStore

_COMPILED: OrderedDict[tuple[int, str, str | None, bytes], tuple[Policy, Plan]] = OrderedDict()
_COMPILED_LOCK = threading.Lock()
_COMPILED_KEEP = 32


def compiled(text: str, path: str | None, policy: Policy, hints: Mapping[str, Hints | None] | None = None) -> Plan:
    """``compile_recipe(text, path, policy=policy, hints=hints)``, kept in this process's
    memory for the next run of the same recipe (a worker starts the same queued recipe
    again and again). A compile depends on nothing else (the compiler reads no file), so
    a plan kept here is exactly the one compiling again would give, verified by this very
    process; unlike the compile memo on disk (compiler/cache.py), nothing outside the
    process can put a plan here. Keyed by the Policy object itself (kept alive with the
    plan), not its digest: a Policy built in code has no digest of its content."""
    said = msgspec.json.encode(dict(hints), order="deterministic") if hints else b""
    key = (id(policy), text, path, said)
    with _COMPILED_LOCK:
        hit = _COMPILED.get(key)
        if hit is not None and hit[0] is policy:
            _COMPILED.move_to_end(key)
            return hit[1]
    plan = compile_recipe(text, path, policy=policy, hints=hints)
    with _COMPILED_LOCK:
        _COMPILED[key] = (policy, plan)
        _COMPILED.move_to_end(key)
        while len(_COMPILED) > _COMPILED_KEEP:
            _COMPILED.popitem(last=False)
    return plan


class RunsCore:
    """The configuration of a :class:`~vodou_engine.runs.Runs` object, and ``load``."""

    def __init__(
        self,
        *,
        store: Any = None,
        servers: ServerSet | Mapping[str, ServerConfig] | str | os.PathLike[str] | None = None,
        policy: Policy | str | os.PathLike[str] | None = None,
        threads: int | None = None,
        clock: Callable[[], float] = time.time,
        owner: str | None = None,
        workers: bool | None = None,
    ):
        """``owner`` names this driver in the store (default: this process, ``host:pid:start``).
        ``workers``: whether runs go on in the workers after a decision (:attr:`workers`)."""
        self._workers_arg = workers
        self._store_arg = store
        self._store = None if store is None or isinstance(store, (str, os.PathLike)) else store
        self._store_readonly = False
        """Whether ``_store`` was opened here to read only."""
        self._servers_arg = servers
        self._policy_arg = policy
        self._policy: Policy | None = policy if isinstance(policy, Policy) else None
        self.threads = threads
        self.clock = clock
        self.owner = owner or this_process()
        self.ends_relaxed = False
        """A run's end, when this object drives it, commits without waiting for the disk
        (PostgreSQL's ``synchronous_commit = off``): only for a worker, whose job's
        completion, committed right after on the same database, waits for it in the one
        log (``workers/engine.py``; docs/store-schema.md)."""

    # --- configuration -------------------------------------------------------------------
    def store(self, *, create: bool = True, readonly: bool = False) -> RunStore:
        """The store; ``create=False`` refuses a path where no store exists yet.

        Opened once, in the mode of the first use; a store first opened to read is
        opened again for writing when a later call writes (the read-only one is left to
        whoever still holds it), so the order of calls on one ``Runs`` never matters."""
        if self._store is None or (self._store_readonly and not readonly):
            location = self._store_arg
            self._store = open_store(
                None if location is None else os.fspath(location), create=create, readonly=readonly
            )
            self._store_readonly = readonly
        return self._store

    @property
    def workers(self) -> bool:
        """Whether runs of this store go on in the workers (``recipe worker``, docs/scale-out.md)
        rather than in this process: an approval records the decision and queues the
        run's resume, in one transaction. Given to the constructor, else decided by the
        store: yes on PostgreSQL, no on SQLite (there is no queue there)."""
        if self._workers_arg is not None:
            return bool(self._workers_arg)
        return self._on_postgres()

    def _on_postgres(self) -> bool:
        if self._store is not None:
            return getattr(self._store, "kind", None) == "postgresql"
        return self._location().startswith(POSTGRES_SCHEMES)

    def _location(self) -> str:
        if self._store is not None:
            return str(getattr(self._store, "location", "the store"))
        return default_store_path() if self._store_arg is None else os.fspath(self._store_arg)

    def close(self) -> None:
        if self._store is not None and self._store_arg is not self._store:
            self._store.close()
            self._store = None

    def policy(self) -> Policy:
        if self._policy is None:
            path = self._policy_arg
            assert not isinstance(path, Policy)  # a Policy given is self._policy already
            self._policy = load_policy(None if path is None else os.fspath(path))
        return self._policy

    def servers(self) -> ServerSet:
        """The servers a new run starts with."""
        arg = self._servers_arg
        if isinstance(arg, ServerSet):
            return arg
        if isinstance(arg, Mapping):
            return ServerSet(dict(arg), "given by the caller")
        return load_servers(arg)

    def _explicit_servers(self) -> Any:
        arg = self._servers_arg
        if isinstance(arg, Mapping):
            return ServerSet(dict(arg), "given by the caller")
        return arg

    # --- compile and prepare -------------------------------------------------------------
    def load(
        self, source: str | os.PathLike[str] | Plan, *, text: str | None = None
    ) -> tuple[Plan, str | None, str | None]:
        """(plan, recipe text or None, path or None) from a path, recipe text, or a Plan.
        Compiled offline: no server is started, no annotation is known yet."""
        if isinstance(source, Plan):
            check_plan(source)  # before encoding, which would write an infinite number as null
            return load_plan(encode_plan(source), policy=self.policy()), None, None
        if text is not None:
            path = os.fspath(source) if source else None
            return compiled(text, path, self.policy()), text, path
        path = os.fspath(source)
        plan, recipe_text = load_source(path, policy=self.policy())
        return plan, recipe_text, path
