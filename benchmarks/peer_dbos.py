"""DBOS's side of case o, in a process of its own (DBOS is one global instance per process).

``python -m benchmarks.peer_dbos URL --steps 20 --samples 5 --queued 100`` prints one JSON
object on stdout. ``URL`` is a PostgreSQL database DBOS may use as its system
database (case o creates one for it and drops it afterwards).

* ``step_s``: a workflow of ``--steps`` no-op ``@DBOS.step`` calls, wall / steps (each
  step's outcome is checkpointed in PostgreSQL before the next begins);
* ``send_to_step_s``: a workflow that runs a step, parks on ``DBOS.recv``, then runs
  a step that notes ``time.time()`` when it begins: from just before
  ``DBOS.send`` to that moment;
* ``queue_per_s``: ``--queued`` workflows of 3 no-op steps + 1 (four steps) enqueued
  on a queue with DBOS's defaults (no concurrency limit, the queue polled every
  second), this process the only executor: workflows / (first step begun → last
  step ended).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import threading
import time


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.peer_dbos")
    p.add_argument("url")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--samples", type=int, default=5)
    p.add_argument("--queued", type=int, default=100)
    args = p.parse_args(argv)

    from dbos import DBOS

    logging.getLogger("dbos").setLevel(logging.WARNING)
    marks: dict[str, float] = {}
    parked: dict[str, threading.Event] = {}

    DBOS(config={"name": "vodou-bench", "system_database_url": args.url, "log_level": "WARNING"})

    @DBOS.step()
    def noop() -> None:
        return None

    @DBOS.step()
    def mark(key: str) -> float:
        now = time.time()
        marks[key] = now
        return now

    @DBOS.workflow()
    def chain(n: int) -> None:
        for _ in range(n):
            noop()

    @DBOS.workflow()
    def waits(key: str) -> None:
        noop()
        parked[key].set()  # the next line parks (recv waits on LISTEN/NOTIFY)
        DBOS.recv("go", timeout_seconds=60)
        mark(key)

    @DBOS.workflow()
    def four() -> tuple[float, float]:
        began = time.time()
        noop()
        noop()
        noop()
        noop()
        return began, time.time()

    DBOS.launch()
    queue = DBOS.register_queue("vodou-bench")
    out: dict[str, list[float] | float] = {"step_s": [], "send_to_step_s": []}
    try:
        chain(args.steps)  # warm: connections, statements
        for _ in range(args.samples):
            t0 = time.perf_counter()
            chain(args.steps)
            out["step_s"].append((time.perf_counter() - t0) / args.steps)  # type: ignore[union-attr]
        for i in range(args.samples + 1):
            key = f"w{i}-{time.time_ns()}"
            parked[key] = threading.Event()
            handle = DBOS.start_workflow(waits, key)
            if not parked[key].wait(60):
                raise RuntimeError("the workflow did not reach recv")
            time.sleep(0.2)  # recv is waiting by now (its first read of the notifications is done)
            sent = time.time()
            DBOS.send(handle.get_workflow_id(), "go", topic="go")
            handle.get_result()
            if i:
                out["send_to_step_s"].append(marks[key] - sent)  # type: ignore[union-attr]
        handles = [queue.enqueue(four) for _ in range(args.queued)]
        spans = [h.get_result() for h in handles]
        out["queue_per_s"] = args.queued / (max(e for _, e in spans) - min(b for b, _ in spans))
        out["queued"] = args.queued
    finally:
        DBOS.destroy()
    print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
