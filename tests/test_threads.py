"""Blocking calls on worker threads: the limit, errors, abandonment, exit."""

from __future__ import annotations

import subprocess
import sys
import threading

import pytest
import trio
import trio.testing

from vodou_engine.runtime import threads
from vodou_engine.runtime.threads import Blocking

# Only a safety net, so a broken pool fails the test instead of hanging it.
SAFETY = 30


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


class Gate:
    """Worker threads block on it; the trio side learns, without sleeping, when N of them are in."""

    def __init__(self):
        self.open = threading.Event()
        self._lock = threading.Lock()
        self._inside = 0
        self._enough = {}

    def hold(self, *_):
        with self._lock:
            self._inside += 1
            for n, ev in self._enough.items():
                if self._inside >= n:
                    ev.set()
        self.open.wait()

    async def wait_for(self, n):
        with self._lock:
            ev = self._enough.setdefault(n, threading.Event())
            if self._inside >= n:
                ev.set()
        await trio.to_thread.run_sync(ev.wait)


def test_the_limit_bounds_calls_in_flight_even_when_abandoned():
    gate = Gate()
    lock = threading.Lock()
    now = peak = 0
    quick_began_before_release = []

    def quick():
        nonlocal now, peak
        with lock:
            now += 1
            peak = max(peak, now)
        quick_began_before_release.append(not gate.open.is_set())
        with lock:
            now -= 1

    async def main():
        pool = Blocking(4)
        with trio.fail_after(SAFETY):
            with trio.CancelScope() as abandon:
                async with trio.open_nursery() as nursery:
                    for _ in range(4):
                        nursery.start_soon(pool.run, gate.hold)
                    await gate.wait_for(4)  # all four slots taken
                    abandon.cancel()  # their callers return; the threads keep their slots
            async with trio.open_nursery() as nursery:
                for _ in range(12):
                    nursery.start_soon(pool.run, quick)
                await trio.testing.wait_all_tasks_blocked()
                assert quick_began_before_release == []  # no slot was free
                gate.open.set()

    trio.run(main)
    assert peak <= 4
    assert quick_began_before_release == [False] * 12


def test_a_cancelled_call_returns_at_once_and_its_result_is_dropped():
    gate = Gate()

    async def main():
        pool = Blocking(2)
        with trio.fail_after(SAFETY):
            async with trio.open_nursery() as nursery:
                scope = trio.CancelScope()

                async def call():
                    with scope:
                        await pool.run(gate.hold)
                    return "unreachable"

                nursery.start_soon(call)
                await gate.wait_for(1)
                scope.cancel()
            # The caller is back while its thread is still held: nothing waited for it.
            assert not gate.open.is_set()
            assert await pool.run(lambda: "next") == "next"
            gate.open.set()

    trio.run(main)


def test_an_abandoned_call_does_not_hold_up_the_process_exit():
    # The worker blocks for ever; the process must still exit once the run is over.
    code = (
        "import threading, trio, trio.testing\n"
        "from vodou_engine.runtime.threads import Blocking\n"
        "async def main():\n"
        "    with trio.CancelScope() as scope:\n"
        "        async with trio.open_nursery() as n:\n"
        "            n.start_soon(Blocking(1).run, threading.Event().wait)\n"
        "            await trio.testing.wait_all_tasks_blocked()\n"
        "            scope.cancel()\n"
        "trio.run(main)\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=SAFETY)


def test_a_call_cancelled_while_waiting_for_a_slot_never_runs():
    gate = Gate()
    ran = []

    async def main():
        pool = Blocking(1)
        with trio.fail_after(SAFETY):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(pool.run, gate.hold)
                await gate.wait_for(1)  # it holds the one slot
                nursery.start_soon(pool.run, ran.append, "queued")
                await trio.testing.wait_all_tasks_blocked()  # queued behind it
                nursery.cancel_scope.cancel()  # both callers: one abandons its thread, one its place
            gate.open.set()
            await pool.run(ran.append, "after")

    trio.run(main)
    assert ran == ["after"]


def test_a_branch_dropped_before_its_task_began_never_runs(tmp_path):
    """A quorum met by an inline step can be decided before a sibling's task takes its
    first step; that sibling has no cancel scope yet and must still not begin.
    trio may run ready tasks in either order, so several runs cover both."""
    from vodou_engine.compiler import compile_recipe
    from vodou_engine.runs import Runs

    plan = compile_recipe(
        'recipe "drop"\n'
        "together either:\n"
        "  need: 1 of 2\n"
        '  quick: vodou.echo {"value": "here"}\n'
        '  slow: vodou.sleep {"ms": 3000, "label": "must not run"}\n'
    )
    runs = Runs(store=tmp_path / "runs.db", servers={})
    for _ in range(6):
        report = trio.run(lambda: runs.start(plan, actor="t"))
        assert report.state == "succeeded"
        nodes = {n.node: n for n in runs.show(report.run).nodes}
        assert nodes["slow"].state == "cancelled"
    runs.close()


def test_submitted_calls_come_back_through_collect_with_their_tags():
    def work(i):
        if i == 3:
            raise ValueError("bad 3")
        return i * 10

    async def main():
        pool = Blocking(4)
        for i in range(20):
            pool.submit(work, (i,), f"t{i}")
        got = {}
        with trio.fail_after(SAFETY):
            while len(got) < 20:
                for job in await pool.collect():
                    try:
                        got[job.tag] = job.result.unwrap()
                    except ValueError as exc:
                        got[job.tag] = str(exc)
        return got

    assert trio.run(main) == {f"t{i}": ("bad 3" if i == 3 else i * 10) for i in range(20)}


def test_an_abandoned_submission_never_runs_if_no_worker_took_it_and_is_never_collected():
    gate = Gate()
    ran = []

    async def main():
        pool = Blocking(1)
        with trio.fail_after(SAFETY):
            held = pool.submit(gate.hold, (), "held")
            await gate.wait_for(1)  # the one worker is busy
            queued = pool.submit(ran.append, ("queued",), "queued")
            pool.abandon(queued)  # not taken yet: it must never run
            pool.abandon(held)  # taken: it runs on, but nobody collects it
            after = pool.submit(ran.append, ("after",), "after")
            gate.open.set()
            batch = await pool.collect()
            assert [job.tag for job in batch] == ["after"]
            assert after.result.unwrap() is None

    trio.run(main)
    assert ran == ["after"]


def test_interrupt_wakes_a_collector_whose_calls_were_all_abandoned():
    gate = Gate()

    async def main():
        pool = Blocking(1)
        with trio.fail_after(SAFETY):
            job = pool.submit(gate.hold, (), "held")
            await gate.wait_for(1)
            async with trio.open_nursery() as nursery:
                got = []

                async def collector():
                    got.append(await pool.collect())

                nursery.start_soon(collector)
                await trio.testing.wait_all_tasks_blocked()
                pool.abandon(job)
                pool.interrupt()
            assert got == [[]]  # back with nothing, while the call still holds its thread
            assert not gate.open.is_set()
            gate.open.set()

    trio.run(main)


def test_a_call_queued_as_the_last_worker_leaves_is_still_taken():
    """One slot, calls back to back: each is queued just as the worker that ran the
    previous one finds the queue empty and leaves. None may be left with no worker."""

    async def main():
        pool = Blocking(1)
        with trio.fail_after(SAFETY):
            for i in range(3000):
                assert await pool.run(int, i) == i

    trio.run(main)


def _threads_refused_after(monkeypatch, allowed: int) -> list[int]:
    """The system starts ``allowed`` threads, then refuses, as under a process limit."""
    started: list[int] = []

    def start(fn, deliver):
        if len(started) >= allowed:
            raise RuntimeError("can't start new thread")
        started.append(1)
        trio.lowlevel.start_thread_soon(fn, deliver)

    monkeypatch.setattr(threads, "start_thread_soon", start)
    return started


def test_when_the_system_refuses_more_threads_the_ones_running_take_every_call(monkeypatch):
    started = _threads_refused_after(monkeypatch, 2)

    async def main():
        pool = Blocking(50)
        results: dict[int, int] = {}

        async def one(i):
            results[i] = await pool.run(int, i)

        with trio.fail_after(SAFETY):
            async with trio.open_nursery() as n:
                for i in range(50):
                    n.start_soon(one, i)
        assert results == {i: i for i in range(50)}

    trio.run(main)
    assert len(started) == 2


def test_when_no_thread_can_start_every_waiting_call_fails_saying_why(monkeypatch):
    _threads_refused_after(monkeypatch, 0)

    async def main():
        pool = Blocking(8)
        errors: list[str] = []

        async def one(i):
            with pytest.raises(RuntimeError) as failed:
                await pool.run(int, i)
            errors.append(str(failed.value))

        with trio.fail_after(SAFETY):
            async with trio.open_nursery() as n:
                for i in range(5):
                    n.start_soon(one, i)
        assert len(errors) == 5
        assert all("no thread could be started" in e and "VODOU_THREADS" in e for e in errors)
        assert pool.workers == 0 and not pool.queued

    trio.run(main)
