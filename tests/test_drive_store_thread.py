"""A drive uses its store from one thread at a time: the store is one connection, not
thread-safe, and the lease keeper's renewal must wait for a write in flight instead of
running beside it (on the same cursor it fails with "Recursive use of cursors", or joins
the other thread's transaction)."""

from __future__ import annotations

import threading

import msgspec
import pytest
import trio

from vodou_engine.compiler import compile_recipe
from vodou_engine.runs import Runs
from vodou_engine.runtime import driver
from vodou_engine.store.runs import RunsMixin


def test_a_lease_renewal_never_runs_beside_a_node_write(tmp_path, monkeypatch):
    monkeypatch.setattr(driver, "RENEW_EVERY_S", 0.0)  # the keeper renews again and again
    renewing = threading.Event()
    lock = threading.Lock()
    inside: list[str] = []
    overlaps: list[tuple[str, ...]] = []
    waited: list[bool] = []
    save_nodes, renew_lease = RunsMixin.save_nodes, RunsMixin.renew_lease

    def enter(name: str) -> None:
        with lock:
            inside.append(name)
            if len(inside) > 1:
                overlaps.append(tuple(inside))

    def leave(name: str) -> None:
        with lock:
            inside.remove(name)

    def slow_save(self, *args, **kwargs):
        enter("save_nodes")
        try:
            if not waited:
                # The first write holds the store until a renewal begins, or for a second
                # when none can (as it should be: the renewal waits for the store's thread).
                waited.append(True)
                renewing.clear()
                renewing.wait(1.0)
            return save_nodes(self, *args, **kwargs)
        finally:
            leave("save_nodes")

    def watched_renew(self, *args, **kwargs):
        enter("renew_lease")
        renewing.set()
        try:
            return renew_lease(self, *args, **kwargs)
        finally:
            leave("renew_lease")

    monkeypatch.setattr(RunsMixin, "save_nodes", slow_save)
    monkeypatch.setattr(RunsMixin, "renew_lease", watched_renew)
    runs = Runs(store=tmp_path / "runs.db", servers={})
    plan = compile_recipe('recipe "two"\ntogether both:\n  a: vodou.noop {}\n  b: vodou.noop {}\n')
    report = trio.run(lambda: runs.start(plan, actor="tester"))
    assert report.state == "succeeded"
    assert waited, "no node write happened during the drive"
    assert overlaps == []


@pytest.mark.both_stores
def test_a_run_read_without_its_plan_is_the_same_run(store_location):
    """``get_run(plan=False)`` (what a drive that holds the plan reads back) leaves out only the
    plan's text; every other field is the stored one."""
    from vodou_engine.store import open_store

    store = open_store(store_location)
    try:
        store.create_run(
            "r1", recipe_name="x", recipe_path=None, source_sha256="s", plan_json='{"nodes": []}',
            plan_fingerprint="f", inputs_json="{}", started_by="me", owner="o", lease_s=30.0,
        )  # fmt: skip
        whole, head = store.get_run("r1"), store.get_run("r1", plan=False)
    finally:
        store.close()
    assert head.plan_json == "" and whole.plan_json == '{"nodes": []}'
    assert msgspec.structs.replace(head, plan_json=whole.plan_json) == whole
