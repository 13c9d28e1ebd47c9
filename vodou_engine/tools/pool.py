"""Warm servers: each configured MCP server started once and kept for every drive that needs it.

A long-running process (``recipe serve``'s service, a worker) drives many runs on
servers it keeps warm instead of starting them for each run. :class:`ServerPool`
keeps them, one hub per server; :class:`PoolHub` is what one drive sees of them.
Both the service and the workers build on it; it knows nothing of either.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from typing import Any

import msgspec
import trio

from ..binding import Observed, digest, observe_all, seal
from ..errors import NotSentError
from ..servers import STDIO, ServerSet, unknown_server_error

logger = logging.getLogger(__name__)


class ServerPool:
    """The configured servers, each started once and kept for every run that needs it.

    A warm server is one process started from one configuration in one directory:
    the pool keys it on that configuration's binding (``binding.py``: the start
    directory, the files its command line reaches and their content, its
    environment), computed when it is started and again each time a run asks for
    it. A run bound to another directory gets a server started there; a script
    edited since its server started gets a new one (the old one is stopped once no
    drive holds it), so a run never drives a process that is not what it is bound to.

    A server already warm lists its tools again for each drive it is handed to
    (``_relist``): what it declares may have changed since it started, and a run is
    planned, and a stored run's risks re-checked, on what it declares now.

    A server that dies is started again the next time a run needs it (its
    stderr tail goes to the log). Each server lives in its own hub, owned by
    one task of the pool, so one server's failure never touches another's
    session. :meth:`hub` hands a drive a view over the servers it needs;
    :meth:`PoolHub.release` says the drive is done with them.
    """

    def __init__(self, servers: ServerSet):
        self.servers = servers
        self._hubs: dict[tuple[str, str], Any] = {}
        self._closers: dict[tuple[str, str], trio.Event] = {}
        self._starting: dict[tuple[str, str], trio.Event] = {}
        self._users: dict[tuple[str, str], int] = {}
        self._current: dict[str, str] = {}
        """Server name -> the key of the instance the latest request was for."""
        self._nursery: trio.Nursery | None = None
        self.restarts: dict[str, int] = {}

    async def run(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            task_status.started()
            await trio.sleep_forever()

    def close(self) -> None:
        for ev in self._closers.values():
            ev.set()
        if self._nursery is not None:
            self._nursery.cancel_scope.cancel()

    async def hub(
        self, names: list[str], servers: ServerSet | None = None, *, seen: Mapping[str, Observed] | None = None
    ) -> PoolHub:
        """A hub over ``names``, each warm (started now if it is not running), as ``servers``
        configures them (default: the pool's own; for a stored run, ``Runs.bound_servers``:
        each set to start in the run's directory). ``seen``: what ``binding.observe`` found of
        them just now, in the caller's own thread hop (else the pool looks, in one of its own).
        The hub's ``seen`` is what its servers were keyed on: the run's bindings are sealed
        from it (``binding.bind_all``), so a run's servers are looked at once."""
        servers = servers or self.servers
        for name in names:
            if name not in servers.servers:
                raise unknown_server_error(name, servers.servers, source=servers.source)
        configs = {n: servers.servers[n] for n in names}
        if seen is not None and all(n in seen and seen[n].config == c for n, c in configs.items()):
            found = {n: seen[n] for n in names}  # sealing is hashing only: no thread hop
        else:
            found = await trio.to_thread.run_sync(observe_all, ServerSet(configs, servers.source), names)
        keyed = _keys(configs, found)
        slots = {}
        for name in names:
            slot = (name, keyed[name][0])
            self._users[slot] = self._users.get(slot, 0) + 1  # held from now: never retired under a drive
            slots[name] = slot
        view = PoolHub({}, pool=self, slots=list(slots.values()))
        view.seen = dict(found)
        try:
            warm = []
            for name in names:
                if slots[name] in self._hubs and _alive(self._hubs[slots[name]], name):
                    warm.append(name)
                await self._ensure(slots[name], keyed[name][1])
                view._hubs[name] = self._hubs[slots[name]]
            await _relist_all(view._hubs, warm)
        except BaseException:
            view.release()
            raise
        return view

    def _release(self, slots: list[tuple[str, str]]) -> None:
        for slot in slots:
            left = self._users.get(slot, 0) - 1
            if left > 0:
                self._users[slot] = left
                continue
            self._users.pop(slot, None)
            if self._current.get(slot[0]) != slot[1]:
                self._retire(slot)

    def _retire(self, slot: tuple[str, str]) -> None:
        """Stop a warm server no drive holds that is no longer what its name starts."""
        closer = self._closers.pop(slot, None)
        self._hubs.pop(slot, None)
        if closer is not None:
            closer.set()

    async def _ensure(self, slot: tuple[str, str], config: Any) -> None:
        name = slot[0]
        self._current[name] = slot[1]
        for other in [s for s in self._hubs if s[0] == name and s != slot and not self._users.get(s)]:
            self._retire(other)  # started from files or a directory no run asks for any more
        hub = self._hubs.get(slot)
        if hub is not None and _alive(hub, name):
            return
        starting = self._starting.get(slot)
        if starting is not None:
            await starting.wait()
            if slot in self._hubs and _alive(self._hubs[slot], name):
                return
        if hub is not None:
            tail = _stderr_tail(hub, name)
            logger.warning(
                "MCP server %r stopped; starting it again%s", name, (":\n  " + "\n  ".join(tail)) if tail else ""
            )
            self.restarts[name] = self.restarts.get(name, 0) + 1
            self._closers.pop(slot).set()
            self._hubs.pop(slot, None)
        if self._nursery is None:
            raise RuntimeError("the pool's run() must be started before a server is")
        self._starting[slot] = done = trio.Event()
        try:
            await self._nursery.start(self._own, slot, config)
        finally:
            done.set()
            self._starting.pop(slot, None)

    async def _own(self, slot: tuple[str, str], config: Any, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        from .hub import open_hub

        name = slot[0]
        close = trio.Event()
        async with open_hub({name: config}, [name]) as hub:
            self._hubs[slot] = hub
            self._closers[slot] = close
            task_status.started()
            await close.wait()


_POOL_SALT = "warm servers"
"""Keys of warm servers live in one process's memory only; a fixed salt lets two requests compare."""


def _keys(configs: Mapping[str, Any], found: Mapping[str, Observed]) -> dict[str, tuple[str, Any]]:
    """For each server: (what identifies the process its configuration starts now, the
    configuration to start it with, set to start in that directory); "" for one not
    observed (a variable that is not set: starting it reports that)."""
    out = {}
    for name, config in configs.items():
        seen = found.get(name)
        if config.transport == STDIO:
            workdir = seen.workdir if seen is not None and seen.workdir else os.path.realpath(config.cwd or os.getcwd())
            config = msgspec.structs.replace(config, cwd=workdir)
        if seen is None:
            out[name] = ("", config)
            continue
        # keyed as the configuration set to start there: the same server asked for with its
        # directory written out (a stored run's) or not (a new run's) is one warm server
        as_started = msgspec.structs.replace(seen, config=config)
        out[name] = (digest(seal(as_started, source="", salt=_POOL_SALT)), config)
    return out


async def _relist_all(hubs: Mapping[str, Any], names: list[str]) -> None:
    """:func:`_relist` each of ``names`` at the same time (one round trip for the drive, not one
    per server); the first server that cannot list stops the drive with its NotSentError."""
    if len(names) == 1:
        await _relist(hubs[names[0]], names[0])
        return
    failed: list[NotSentError] = []

    async def one(name: str) -> None:
        try:
            await _relist(hubs[name], name)
        except NotSentError as exc:
            failed.append(exc)

    async with trio.open_nursery() as nursery:
        for name in names:
            nursery.start_soon(one, name)
    if failed:
        raise failed[0]


async def _relist(hub: Any, name: str) -> None:
    """A server kept warm since an earlier drive lists its tools again for this one: its tools
    or their annotations may have changed since (``notifications/tools/list_changed`` or not),
    and a plan, or a stored run's risk re-check (``runtime/driver.declared_no_higher``), read
    from the listing of its start would assess a tool now declared destructive as the read it
    was. One ``tools/list`` per server per drive; a server that cannot list is not used."""
    try:
        await hub.wait_ready()
        await hub.relist(name)
    except Exception as exc:  # whatever stops the listing (an RPC error, a closed pipe, a timeout) stops the drive
        raise NotSentError(
            f"MCP server {name!r} did not list its tools again ({type(exc).__name__}: {exc}); nothing was called",
            server=name,
        ) from exc


def _alive(hub: Any, name: str) -> bool:
    srv = hub._servers.get(name)  # the hub keeps no public liveness yet; see tools/hub.py
    if srv is None or srv.closed or srv.failure is not None or srv.start_error is not None:
        return False
    wire = srv.wire
    return wire is None or not wire.gone  # None: still starting


def _stderr_tail(hub: Any, name: str) -> list[str]:
    srv = hub._servers.get(name)
    return srv.stderr_tail() if srv is not None else []


class PoolHub:
    """The hub interface a drive uses, over warm servers of a pool."""

    def __init__(
        self, hubs: Mapping[str, Any], *, pool: ServerPool | None = None, slots: list[tuple[str, str]] | None = None
    ):
        self._hubs = dict(hubs)
        self.started_in: dict[str, float] = {}
        self.seen: dict[str, Observed] = {}
        """What its servers were keyed on (``ServerPool.hub``)."""
        self._pool = pool
        self._slots = list(slots or [])

    def release(self) -> None:
        """The drive is done with these servers: one started from what its name no longer
        starts (an edited script, another directory) may now be stopped. Idempotent."""
        slots, self._slots = self._slots, []
        if self._pool is not None and slots:
            self._pool._release(slots)

    def _of(self, server: str) -> Any:
        try:
            return self._hubs[server]
        except KeyError:
            raise NotSentError(
                f"MCP server {server!r} was not started for this run; nothing was called", server=server
            ) from None

    async def wait_ready(self) -> None:
        for hub in self._hubs.values():
            await hub.wait_ready()

    def tool(self, server: str, tool: str) -> Any:
        return self._of(server).tool(server, tool)

    def tools(self, server: str) -> Any:
        return self._of(server).tools(server)

    def task_required(self, server: str) -> frozenset[str]:
        return self._of(server).task_required(server)  # type: ignore[no-any-return]

    def config(self, server: str) -> Any:
        return self._of(server).config(server)

    async def call(self, server: str, tool: str, arguments: Any = None, **kwargs: Any) -> Any:
        return await self._of(server).call(server, tool, arguments, **kwargs)
