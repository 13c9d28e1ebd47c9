"""A zygote for the demo MCP servers the suite starts: the SDK imported once, each server a fork.

Every demo server start spends over half a second of CPU importing the MCP
SDK, and the suite starts a few hundred of them: a third of its CPU. Each
test process (xdist worker) starts one zygote (:func:`start`) that imports
the SDK and the demo glue once and then forks a child per request from
``tests/demo_launch.py``. The child is a real server process: it runs the
demo module as ``__main__``, with the launcher's environment, working
directory and pipes, so the engine's stdin/stdout wire goes straight to it
and its calls are recorded in the demo world with its own pid.

What the engine starts is rewritten in one place, ``tools.process.start``
(:func:`patch`): ``python -m vodou_engine.demo.X ARGS`` becomes ``python -S
demo_launch.py SOCKET vodou_engine.demo.X ARGS``, and ``python tests/sdk_server.py``
likewise. The server's configuration,
binding and card are untouched. In this process :func:`patch` is applied by
conftest; processes the tests start get it through ``tests/zygote_site`` on
``PYTHONPATH`` (a server, started with the minimal environment, never does).
A test that looks at a server's own process (its ``/proc`` environment, or a
process tree) is marked ``real_server_processes`` and starts them as usual.
"""

from __future__ import annotations

import json
import os
import random
import runpy
import selectors
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import traceback
from pathlib import Path

ENV = "DEMO_ZYGOTE"
"""The zygote's socket, for the processes the tests start; unset, servers start as usual."""
LAUNCH = str(Path(__file__).with_name("demo_launch.py"))
SITE = str(Path(__file__).with_name("zygote_site"))
DEMO_PREFIX = "vodou_engine.demo."
SDK_SERVER = str(Path(__file__).with_name("sdk_server.py"))
"""The suite's server on the SDK's own ``MCPServer``: forked too (its start is the same import)."""


def rewrite(config):
    """``config`` started through the zygote when it is a demo server of this interpreter and one runs."""
    sock = os.environ.get(ENV)
    args = list(config.args)
    if not sock or config.command != sys.executable or not args:
        return config
    if len(args) >= 2 and args[0] == "-m" and args[1].startswith(DEMO_PREFIX):
        target = args[1:]  # a module, run as ``python -m`` runs it
    elif os.path.abspath(args[0]) == SDK_SERVER:
        target = [SDK_SERVER, *args[1:]]  # a script, run as ``python SCRIPT`` runs it
    else:
        return config
    import msgspec

    return msgspec.structs.replace(config, args=["-S", LAUNCH, sock, *target])


def patch(process_module) -> None:
    """Route ``process_module.start`` (vodou_engine.tools.process) through :func:`rewrite`."""
    original = process_module.start
    if getattr(original, "zygote", False):
        return

    def start(config, stderr):
        return original(rewrite(config), stderr)

    start.zygote = True  # type: ignore[attr-defined]
    start.__wrapped__ = original  # type: ignore[attr-defined]
    process_module.start = start


def start() -> tuple[subprocess.Popen[bytes], str]:
    """A zygote for this process: its socket path once it is ready to fork servers."""
    where = tempfile.mkdtemp(prefix="vodou-zygote-")
    sock = os.path.join(where, "s")
    proc = subprocess.Popen(
        [sys.executable, __file__, sock], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=dict(os.environ)
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if line.strip() != b"ready":
        raise RuntimeError(f"the demo zygote did not start: {line!r}")
    return proc, sock


def _child(request: dict, fds: list[int]) -> None:
    """In the fork: become ``python -m MODULE ARGS`` on the launcher's pipes, and never return."""
    code: object = 0
    try:
        for target, fd in enumerate(fds[:3]):
            os.dup2(fd, target)
        for fd in fds:
            if fd > 2:
                os.close(fd)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        target = request["module"]
        sys.argv = [target, *request["args"]]
        random.seed()
        if target.endswith(".py"):
            sys.path[0] = os.path.dirname(target)
            runpy.run_path(target, run_name="__main__")
        else:
            sys.path[0] = os.getcwd()
            runpy.run_module(target, run_name="__main__", alter_sys=True)
    except SystemExit as exc:
        code = exc.code
    except BaseException:  # noqa: BLE001 - a fork must never return into the zygote's loop
        traceback.print_exc()
        code = 1
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
    os._exit(code if isinstance(code, int) else (0 if code is None else 1))


def serve(sock_path: str) -> None:
    import vodou_engine.demo.app  # noqa: F401 - the SDK and the demo glue, imported once for every fork

    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    listener.bind(sock_path)
    listener.listen(128)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    waiting: dict[int, socket.socket] = {}
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ, "accept")
    selector.register(wake_r, selectors.EVENT_READ, "reap")
    selector.register(0, selectors.EVENT_READ, "parent")
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    while True:
        for key, _ in selector.select():
            if key.data == "parent":
                if not os.read(0, 4096):  # the test process is gone: so is the zygote
                    os._exit(0)
            elif key.data == "reap":
                os.read(wake_r, 4096)
                while True:
                    try:
                        pid, status = os.waitpid(-1, os.WNOHANG)
                    except ChildProcessError:
                        break
                    if pid == 0:
                        break
                    conn = waiting.pop(pid, None)
                    if conn is not None:
                        try:
                            conn.send(struct.pack("i", status))
                        except OSError:
                            pass
                        conn.close()
            else:
                conn, _ = listener.accept()
                try:
                    message, fds, _flags, _addr = socket.recv_fds(conn, 1 << 20, 3)
                    request = json.loads(message)
                except (OSError, ValueError):
                    conn.close()
                    continue
                pid = os.fork()
                if pid == 0:
                    signal.set_wakeup_fd(-1)
                    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                    selector.close()
                    listener.close()
                    os.close(wake_r)
                    os.close(wake_w)
                    for other in waiting.values():
                        other.close()
                    conn.close()
                    _child(request, fds)
                for fd in fds:
                    os.close(fd)
                waiting[pid] = conn
                conn.send(struct.pack("i", pid))


if __name__ == "__main__":
    serve(sys.argv[1])
