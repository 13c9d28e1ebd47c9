"""Start one demo MCP server as a fork of the test zygote (tests/demo_zygote.py).

Run as ``python -S demo_launch.py SOCKET MODULE [ARG ...]`` in place of
``python -m MODULE [ARG ...]``: standard library only and no site import, so
this process costs a few milliseconds where a demo server's own start costs
over half a second of CPU importing the MCP SDK. It hands its standard input,
output and error, working directory and environment to the zygote, which
forks a child that runs MODULE as ``__main__`` on exactly those pipes: the
engine talks to that child directly. This process stays as the child's
stand-in for whoever started it: a signal it gets is passed on, and it exits
the way the child exited.
"""

import json
import os
import signal
import socket
import struct
import sys


def main() -> None:
    sock_path, module, *args = sys.argv[1:]
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    conn.connect(sock_path)
    request = {"module": module, "args": args, "cwd": os.getcwd(), "env": dict(os.environ)}
    socket.send_fds(conn, [json.dumps(request).encode()], [0, 1, 2])
    reply = conn.recv(4)
    if len(reply) != 4:
        sys.exit(70)
    (pid,) = struct.unpack("i", reply)

    def forward(sig: int, _frame: object) -> None:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2):
        signal.signal(sig, forward)
    # The pipes are the child's now: holding them open here would keep the engine from
    # seeing the child's output end when it exits.
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    status = conn.recv(4)
    if len(status) != 4:
        os._exit(70)
    (wait_status,) = struct.unpack("i", status)
    if os.WIFSIGNALED(wait_status):
        sig = os.WTERMSIG(wait_status)
        signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)
    os._exit(os.waitstatus_to_exitcode(wait_status) & 0xFF)


main()
