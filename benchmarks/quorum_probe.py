"""``recipe`` with timestamps at each stage of a run's end, for case j's breakdown.

Run as ``python benchmarks/quorum_probe.py run FILE --json`` with
``VODOU_BENCH_MARKS`` naming a file: the command runs exactly as the
``recipe`` script runs it (``cli.main()`` owning the whole process), and the
moments below are written to that file, as JSON ``[[name, time.time()], ...]``,
by the last ``atexit`` handler:

* ``reply read <server>``: the transport read a reply line from that server
  (``tools.wire.Wire.reply_read``; the SDK has not seen it yet), and
  ``call <server> returned``: ``Hub.call`` returned it to the engine;
* ``jsonschema import began (<thread>)``: the first ``import jsonschema`` in
  the process (the MCP SDK imports it lazily, to validate the first tool
  result against the tool's output schema), and on which thread;
* ``drive returned``: ``runtime.driver.drive`` returned its report (the run's
  end is committed in the store by then);
* ``hub close began`` / ``hub closed``: the body of ``tools.hub.open_hub``
  ended (the run API leaves ``Runs.prepare``) / every server is reaped;
* ``stop <server> began (in doubt|polite)`` / ``stop <server> ended``: each
  server's ``tools.stdio.stop``, and whether it was stopped without the
  stdin grace (a cancelled call still in flight on it);
* ``Runs.start returned``, ``report began`` / ``report printed``
  (``views.report.report``), ``main returned`` and ``atexit``.

Nothing is changed but the wrapping; the process exit itself is timed by the
parent (``time.time()`` when its wait for the child returns), after
``atexit``: what lies between is the interpreter's own shutdown.

With ``VODOU_BENCH_KEEP_GRACE=1`` (for comparison only) a server with a call
in doubt is stopped as every other server is, stdin grace first: the hub's
behaviour before it stopped such a server at once.
"""

from __future__ import annotations

import atexit
import json
import os
import sys
import time

MARKS: list[list] = []


def mark(name: str) -> None:
    MARKS.append([name, time.time()])


def _dump() -> None:
    mark("atexit")
    path = os.environ.get("VODOU_BENCH_MARKS")
    if path:
        with open(path, "w") as f:
            json.dump(MARKS, f)


class _FirstImport:
    """Marks when a module is first imported (then steps aside for the real finders)."""

    def __init__(self, name: str):
        self.name = name

    def find_spec(self, fullname, path=None, target=None):
        if fullname == self.name:
            import threading

            thread = threading.current_thread()
            where = "main thread, where trio runs" if thread is threading.main_thread() else f"thread {thread.name}"
            mark(f"{fullname} import began ({where})")
            sys.meta_path.remove(self)
        return None


def install() -> None:
    from contextlib import asynccontextmanager

    if "jsonschema" not in sys.modules:
        sys.meta_path.insert(0, _FirstImport("jsonschema"))

    import vodou_engine.runs as runs_mod
    import vodou_engine.views.report as report_mod
    from vodou_engine.runtime import driver
    from vodou_engine.tools import hub as hub_mod
    from vodou_engine.tools import stdio, wire

    names: dict[int, str] = {}

    real_drive = driver.drive

    async def drive(*args, **kwargs):
        try:
            return await real_drive(*args, **kwargs)
        finally:
            mark("drive returned")

    driver.drive = drive

    real_open = hub_mod.open_hub

    @asynccontextmanager
    async def open_hub(*args, **kwargs):
        async with real_open(*args, **kwargs) as hub:
            for name, srv in hub._servers.items():
                if srv.process is not None:
                    names[srv.process.pid] = name
            try:
                yield hub
            finally:
                mark("hub close began")
        mark("hub closed")

    hub_mod.open_hub = open_hub

    real_call = hub_mod.Hub.call

    async def call(self, server, tool, *args, **kwargs):
        try:
            return await real_call(self, server, tool, *args, **kwargs)
        finally:
            mark(f"call {server} returned")

    hub_mod.Hub.call = call

    real_reply = wire.Wire.reply_read

    def reply_read(self, request_id, **how):
        if request_id is not None and self.calls.get(wire.request_key(request_id)) is not None:  # a tools/call reply
            pid = getattr(self.process, "pid", None)
            mark(f"reply read {names.get(pid, pid)}")
        return real_reply(self, request_id, **how)

    wire.Wire.reply_read = reply_read

    real_stop = stdio.stop
    keep_grace = os.environ.get("VODOU_BENCH_KEEP_GRACE") == "1"

    async def stop(process, *, in_doubt: bool = False):
        name = names.get(process.pid, str(process.pid))
        how = ("in doubt, grace kept" if keep_grace else "in doubt") if in_doubt else "polite"
        mark(f"stop {name} began ({how})")
        try:
            return await real_stop(process, in_doubt=in_doubt and not keep_grace)
        finally:
            mark(f"stop {name} ended")

    stdio.stop = stop

    real_start = runs_mod.Runs.start

    async def start(self, *args, **kwargs):
        try:
            return await real_start(self, *args, **kwargs)
        finally:
            mark("Runs.start returned")

    runs_mod.Runs.start = start

    real_report = report_mod.report

    def report(*args, **kwargs):
        mark("report began")
        try:
            return real_report(*args, **kwargs)
        finally:
            try:
                sys.stdout.flush()
            except OSError:
                pass
            mark("report printed")

    report_mod.report = report


def main() -> int:
    mark("interpreter up")
    atexit.register(_dump)  # registered first, so it runs last
    try:
        install()
    except Exception as exc:  # noqa: BLE001 - an engine seam moved: run unprobed, and say so
        mark(f"probe not installed: {type(exc).__name__}: {exc}")
    from vodou_engine import cli

    real_exit = os._exit

    def probe_exit(code: int) -> None:  # the CLI ends a whole process with os._exit: no atexit then
        mark("main returned")
        _dump()
        real_exit(code)

    os._exit = probe_exit
    sys.argv = ["recipe", *sys.argv[1:]]
    code = cli.main()
    mark("main returned")
    return code


if __name__ == "__main__":
    sys.exit(main())
