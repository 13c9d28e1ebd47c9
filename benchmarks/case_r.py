"""r. A loop of N no-work items against N `together` branches of the same step, same run.

``for each i in [0, 1, ... N-1]: s: vodou.noop {}`` (every item at once: ``at most N
at a time``, ``max items: N``) and a ``together`` of N ``vodou.noop`` branches are
started alternately from the same store, so both see the same machine and load.
Store writes are included: ``Runs.start`` returns only after every node state (each
item's copy, each branch) is committed. The loop also makes its copies at run time
and keeps the list of their outputs, which the together does not: the figure is
what a loop's item costs beyond a branch, the check that it is not much more.
"""

from __future__ import annotations

import trio

from .common import Case, Config, TempDir, bench_runs, open_bench_store, prepared, timed_start

RATIO_LIMIT = 1.0
"""A loop's item costs no more than a together's branch (the median of the pairs, same run)."""
CARD_ITEMS = 100
CARD_LIMIT_S = 0.050
"""A batch card of 100 items is rendered in at most 50 ms."""
BATCH = (
    "for each m in {list.messages}:\n"
    '  reply: gmail.send_message {"to": "{m.from}", "subject": "Re: {m.subject}", "body": "Thanks!"}\n'
)


def loop_recipe(n: int) -> str:
    items = ", ".join(str(i) for i in range(n))
    return f'recipe "loop {n}"\nfor each i in [{items}]:\n  at most {n} at a time\n  max items: {n}\n  s: vodou.noop {{}}\n'


def together_recipe(n: int) -> str:
    return f'recipe "together {n}"\ntogether:\n' + "".join(f"  s{i}: vodou.noop {{}}\n" for i in range(n))


def run(cfg: Config) -> Case:
    from vodou_engine.compiler import compile_recipe

    n = 200 if cfg.quick else 1000
    case = Case("r", f"a loop of {n} no-work items against {n} together branches (durable state)")
    loop_plan, fan_plan = compile_recipe(loop_recipe(n)), compile_recipe(together_recipe(n))
    rows = []
    with TempDir("r") as tmp:
        store = open_bench_store(tmp / "runs.db")
        runs = bench_runs(store)
        loop_ready, fan_ready = prepared(loop_plan), prepared(fan_plan)
        trio.run(timed_start, runs, loop_ready)
        trio.run(timed_start, runs, fan_ready)
        for _ in range(cfg.runs):
            wl, rl = trio.run(timed_start, runs, loop_ready)
            wt, rt = trio.run(timed_start, runs, fan_ready)
            assert rl.state == "succeeded" and rt.state == "succeeded", (rl, rt)
            saved = store.get_nodes(rl.run)
            assert sum(1 for k in saved if k.startswith("s[")) == n, "not every item was stored"
            rows.append((wl, wt))
            cfg.log(
                f"r: loop {wl * 1e3:.1f} ms ({wl / n * 1e6:.0f} µs/item), together {wt * 1e3:.1f} ms ({wt / n * 1e6:.0f} µs/branch)"
            )
        store.close()
    card_times = _batch_card(cfg, compile_recipe)
    case.figure("batch_card_render_s", card_times, "s", f"one batch card of {CARD_ITEMS} items, rendered")
    case.check(
        f"r: a batch card of {CARD_ITEMS} items",
        sorted(card_times)[len(card_times) // 2],
        CARD_LIMIT_S,
        unit="s",
        what="cards.approval_card_text of the frozen payload",
    )
    case.figure("n_items", n, "count", "items in the loop, branches in the together")
    loop = case.figure("loop_per_item_s", [r[0] / n for r in rows], "s", "loop: Runs.start wall / items")
    case.figure("together_per_branch_s", [r[1] / n for r in rows], "s", "together: Runs.start wall / branches")
    ratio = case.figure("loop_over_together", [r[0] / r[1] for r in rows], "x", "loop wall / together wall")
    case.check(
        "r: a loop's item against a together's branch",
        ratio,
        RATIO_LIMIT,
        unit="x",
        what="loop wall / together wall, same run",
    )
    case.bar(f"loop of {n}", wall_s=loop * n, sum_s=None, slowest_s=None)
    return case.done()


def _batch_card(cfg: Config, compile_recipe) -> list[float]:
    """The card of a loop's effect with CARD_ITEMS items, each with its payload and fingerprint,
    rendered as every surface renders it (from the frozen payload)."""
    import time

    from vodou_engine.cards import approval_card_text
    from vodou_engine.plan import ToolNode

    plan = compile_recipe('list: gmail.messages_list {"maxResults": 100}\n' + BATCH)
    step = plan.index()["reply"]
    assert isinstance(step, ToolNode)
    items = [
        {
            "item": i,
            "payload": {"to": f"person{i}@example.com", "subject": f"Re: message {i}", "body": "Thanks!"},
            "fingerprint": "sha256:" + f"{i:064x}",
        }
        for i in range(CARD_ITEMS)
    ]
    times = []
    for _ in range(max(cfg.runs, 5)):
        t0 = time.perf_counter()
        card = approval_card_text(
            run_id="r-bench", step=step, question=None, payload={"items": items},
            fingerprint="sha256:" + "0" * 64, approvers=["bench"],
        )  # fmt: skip
        times.append(time.perf_counter() - t0)
        assert "person99@example.com" in card
    cfg.log(f"r: batch card of {CARD_ITEMS} items {sorted(times)[len(times) // 2] * 1e3:.1f} ms")
    return times
