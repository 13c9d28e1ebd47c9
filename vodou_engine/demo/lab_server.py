"""Blocking-work MCP server for parallelism demos and benchmarks.

``query`` blocks its worker with ``time.sleep`` on purpose: the thing under
test is whether the engine overlaps branches that live on different server
processes, so the server must not hide latency by being clever itself. Start
several copies under different names to give a recipe several "servers":

    VODOU_DEMO_DB=/path/demo.sqlite3 VODOU_DEMO_NAME=lab-a python -m vodou_engine.demo.lab_server
"""

from __future__ import annotations

import os
import time

from typing_extensions import TypedDict

from vodou_engine.demo.app import Conn, DemoServer

NAME_ENV = "VODOU_DEMO_NAME"

server = DemoServer(os.environ.get(NAME_ENV) or "lab", instructions="Blocking work for concurrency experiments.")


class QueryResult(TypedDict):
    label: str
    ms: int
    started: float
    ended: float
    server: str


@server.read("query")
def query(conn: Conn, ms: int, label: str = "") -> QueryResult:
    """A read that takes ms milliseconds (blocking, on purpose); reports when (time.time()) and where it ran."""
    started = time.time()
    time.sleep(max(ms, 0) / 1000)
    return QueryResult(label=label, ms=ms, started=started, ended=time.time(), server=server.name)


class Arrival(TypedDict):
    arrived: str


@server.read("get_arrival")
def get_arrival(conn: Conn, fifo: str) -> Arrival:
    """Returns once another demo server reports a call arriving on ``fifo`` (its ``VODOU_DEMO_ARRIVALS``)."""
    with open(fifo) as f:
        return Arrival(arrived=f.readline().strip())


if __name__ == "__main__":
    server.run()
