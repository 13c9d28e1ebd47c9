"""Blocking calls on worker threads: the limit, errors, abandonment, exit."""

from __future__ import annotations

import subprocess
import sys
import threading
import time

import trio
import trio.testing

from vodou_engine.runtime.threads import Blocking


def test_results_and_errors_come_back_to_their_callers():
    def work(i):
        if i % 7 == 3:
            raise ValueError(f"bad {i}")
        return i * i

    async def main():
        pool = Blocking(8)
        got = {}

        async def one(i):
            try:
                got[i] = await pool.run(work, i)
            except ValueError as exc:
                got[i] = str(exc)

        async with trio.open_nursery() as nursery:
            for i in range(100):
                nursery.start_soon(one, i)
        return got

    got = trio.run(main)
    assert got == {i: (f"bad {i}" if i % 7 == 3 else i * i) for i in range(100)}


def test_the_limit_bounds_calls_in_flight_even_when_abandoned():
    lock = threading.Lock()
    now = peak = 0

    def work(s):
        nonlocal now, peak
        with lock:
            now += 1
            peak = max(peak, now)
        time.sleep(s)
        with lock:
            now -= 1

    async def main():
        pool = Blocking(4)
        with trio.move_on_after(0.05):
            async with trio.open_nursery() as nursery:
                for _ in range(4):
                    nursery.start_soon(pool.run, work, 0.2)  # abandoned, still asleep
        t0 = time.perf_counter()
        async with trio.open_nursery() as nursery:
            for _ in range(12):
                nursery.start_soon(pool.run, work, 0.01)
        return time.perf_counter() - t0

    wall = trio.run(main)
    assert peak <= 4
    assert wall >= 0.12  # the twelve waited for the abandoned four to free their slots


def test_a_cancelled_call_returns_at_once_and_its_result_is_dropped():
    finished = threading.Event()

    def slow():
        time.sleep(1.0)
        finished.set()
        return "late"

    async def main():
        pool = Blocking(2)
        t0 = time.perf_counter()
        with trio.move_on_after(0.02):
            await pool.run(slow)
        took = time.perf_counter() - t0
        assert await pool.run(lambda: "next") == "next"
        return took

    assert trio.run(main) < 0.5
    assert not finished.is_set()  # returned without waiting for the thread


def test_an_abandoned_call_does_not_hold_up_the_process_exit():
    code = (
        "import time, trio\n"
        "from vodou_engine.runtime.threads import Blocking\n"
        "async def main():\n"
        "    with trio.move_on_after(0.05):\n"
        "        await Blocking(1).run(time.sleep, 30)\n"
        "trio.run(main)\n"
    )
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], check=True, timeout=20)
    assert time.perf_counter() - t0 < 5


def test_a_call_cancelled_while_waiting_for_a_slot_never_runs():
    ran = []

    async def main():
        pool = Blocking(1)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(pool.run, time.sleep, 0.1)
            await trio.testing.wait_all_tasks_blocked()  # the sleep holds the one slot
            with trio.move_on_after(0.03):
                await pool.run(ran.append, "queued")
        await pool.run(ran.append, "after")

    trio.run(main)
    assert ran == ["after"]
