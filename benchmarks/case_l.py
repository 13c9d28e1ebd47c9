"""l. LangGraph, a peer, in the same run: the post's fan-out and a chain of nodes.

Optional: needs ``langgraph`` (``pip install -e '.[bench]'``); without it the
case is skipped and says so.

* **fan-out**: the post's three blocking branches (412, 268 and 83 ms of
  ``time.sleep``), each branch a node off ``START``, all three joined by one
  node. LangGraph runs the three in one superstep on its thread pool. Wall
  is from the first branch's start to the join node's start, over the
  slowest branch's own work (each node notes its ``time.time()``); the
  engine's figure is case a's (the same recipe, ``together`` wall over the
  slowest ``vodou.sleep``), measured here again, alternated with LangGraph.
* **chain**: 200 nodes in a row, each adding one to the state, ``invoke``
  without a checkpointer (LangGraph's default: nothing persisted) and with
  ``InMemorySaver`` (a checkpoint per superstep, in memory; info); per node
  is the ``invoke`` wall over 200. The engine's: 200 ``vodou.noop`` steps
  through ``Runs.start``, every node state written to a SQLite store (case
  e's chain at 200), per step.

Both sides run in this process, one after the other, ``cfg.runs`` times.
"""

from __future__ import annotations

import operator
import time
from typing import Annotated, Any, TypedDict

import trio

from .case_a import RECIPE as FANOUT_RECIPE
from .case_e import recipe as chain_recipe
from .common import (
    Case,
    Config,
    Seen,
    TempDir,
    bench_runs,
    median,
    open_bench_store,
    prepared,
    timed_start,
    together_wall,
)
from .peers import INSTALL, missing, skipped

N = 200
LATENCIES_MS = (("a", 412), ("b", 268), ("c", 83))


class Spans(TypedDict):
    spans: Annotated[list, operator.add]


class Count(TypedDict):
    n: int


def fanout_graph() -> Any:
    from langgraph.graph import END, START, StateGraph

    def branch(name: str, ms: int):
        def node(state: Spans) -> dict:
            started = time.time()
            time.sleep(ms / 1000)
            return {"spans": [(name, started, time.time())]}

        return node

    def join(state: Spans) -> dict:
        now = time.time()
        return {"spans": [("join", now, now)]}

    g = StateGraph(Spans)
    for name, ms in LATENCIES_MS:
        g.add_node(name, branch(name, ms))
        g.add_edge(START, name)
    g.add_node("join", join)
    g.add_edge([name for name, _ in LATENCIES_MS], "join")
    g.add_edge("join", END)
    return g.compile()


def chain_graph(n: int, checkpointer: Any = None) -> Any:
    from langgraph.graph import END, START, StateGraph

    def step(state: Count) -> dict:
        return {"n": state["n"] + 1}

    g = StateGraph(Count)
    for i in range(n):
        g.add_node(f"s{i}", step)
    g.add_edge(START, "s0")
    for i in range(1, n):
        g.add_edge(f"s{i - 1}", f"s{i}")
    g.add_edge(f"s{n - 1}", END)
    return g.compile(checkpointer=checkpointer)


def langgraph_fanout(app: Any) -> dict[str, float]:
    t0 = time.time()
    out = app.invoke({"spans": []})
    t1 = time.time()
    spans = {name: (a, b) for name, a, b in out["spans"]}
    first = min(spans[name][0] for name, _ in LATENCIES_MS)
    slowest = max(spans[name][1] - spans[name][0] for name, _ in LATENCIES_MS)
    return {
        "wall": spans["join"][0] - first,
        "slowest": slowest,
        "invoke": t1 - t0,
        "sum": sum(spans[n][1] - spans[n][0] for n, _ in LATENCIES_MS),
    }


def langgraph_chain(app: Any, n: int, thread: str | None = None) -> float:
    config: dict[str, Any] = {"recursion_limit": n + 10}
    if thread is not None:
        config["configurable"] = {"thread_id": thread}
    t0 = time.perf_counter()
    out = app.invoke({"n": 0}, config)
    wall = time.perf_counter() - t0
    if out["n"] != n:
        raise RuntimeError(f"the chain counted to {out['n']}, not {n}")
    return wall / n


def run(cfg: Config) -> Case:
    case = Case(
        "l", f"LangGraph, same run: the post's fan-out (wall / slowest) and a chain of {N} nodes, against the engine"
    )
    if missing("langgraph"):
        return skipped(case, f"langgraph is not installed: {INSTALL} (or pip install langgraph) to measure it")
    from langgraph.checkpoint.memory import InMemorySaver

    from vodou_engine.compiler import compile_recipe

    t0 = time.perf_counter()
    fan_app, chain_app, saved_app = fanout_graph(), chain_graph(N), chain_graph(N, InMemorySaver())
    build_s = time.perf_counter() - t0
    fan_plan, chain_plan = compile_recipe(FANOUT_RECIPE), compile_recipe(chain_recipe(N))
    rows: list[dict] = []
    with TempDir("l") as tmp:
        store = open_bench_store(tmp / "runs.db")
        runs = bench_runs(store)
        fan_ready, chain_ready = prepared(fan_plan), prepared(chain_plan)
        # warm-up, both sides: thread pools, statement caches, first-call imports
        langgraph_fanout(fan_app), langgraph_chain(chain_app, N), langgraph_chain(saved_app, N, "warm")
        trio.run(timed_start, runs, fan_ready), trio.run(timed_start, runs, chain_ready)
        for i in range(cfg.runs):
            lg = langgraph_fanout(fan_app)
            wall, out = trio.run(timed_start, runs, fan_ready)
            assert out.state == "succeeded", out.state
            seen = Seen(runs, out.run)
            tw = together_wall(fan_plan, seen, "join:fan")
            slowest = max(seen.outputs[k]["ended"] - seen.outputs[k]["started"] for k in "abc")
            lg_chain = langgraph_chain(chain_app, N)
            lg_saved = langgraph_chain(saved_app, N, f"run-{i}")
            chain_wall, chain_out = trio.run(timed_start, runs, chain_ready)
            assert chain_out.state == "succeeded", chain_out.state
            rows.append({
                "lg_fan": lg["wall"] / lg["slowest"], "lg_invoke": lg["invoke"] / lg["slowest"], "lg_wall": lg["wall"], "lg_sum": lg["sum"], "lg_slowest": lg["slowest"],
                "engine_fan": tw["wall_s"] / slowest, "engine_run": wall / slowest, "engine_wall": tw["wall_s"], "engine_sum": tw["work_sum_s"], "engine_slowest": slowest,
                "lg_chain": lg_chain, "lg_saved": lg_saved, "engine_chain": chain_wall / N,
            })  # fmt: skip
            cfg.log(
                f"l: fan-out wall/slowest LangGraph {rows[-1]['lg_fan']:.4f}, engine {rows[-1]['engine_fan']:.4f}; per node LangGraph {lg_chain * 1e6:.0f} µs, engine {chain_wall / N * 1e6:.0f} µs"
            )
        store.close()
    col = lambda k: [r[k] for r in rows]  # noqa: E731
    lg_fan = case.figure(
        "langgraph_fanout_wall_over_slowest",
        col("lg_fan"),
        "x",
        "LangGraph fan-out: first branch start → join node start, over the slowest branch's work",
    )
    case.figure(
        "langgraph_invoke_over_slowest",
        col("lg_invoke"),
        "x",
        "LangGraph fan-out: whole invoke over the slowest branch's work (info)",
    )
    eng_fan = case.figure(
        "engine_fanout_wall_over_slowest",
        col("engine_fan"),
        "x",
        "engine fan-out (case a's recipe): together wall over the slowest vodou.sleep",
    )
    case.figure(
        "engine_run_over_slowest",
        col("engine_run"),
        "x",
        "engine fan-out: whole Runs.start over the slowest branch's work (info)",
    )
    lg_chain = case.figure(
        "langgraph_chain_per_node_s",
        col("lg_chain"),
        "s",
        f"LangGraph chain of {N} nodes, no checkpointer: invoke wall / {N}",
    )
    lg_saved = case.figure(
        "langgraph_chain_inmemory_per_node_s",
        col("lg_saved"),
        "s",
        f"LangGraph chain of {N} nodes with InMemorySaver: invoke wall / {N} (info)",
    )
    eng_chain = case.figure(
        "engine_chain_per_step_s",
        col("engine_chain"),
        "s",
        f"engine chain of {N} vodou.noop steps, SQLite store: Runs.start wall / {N}",
    )
    case.figure(
        "langgraph_over_engine_chain",
        [r["lg_chain"] / r["engine_chain"] for r in rows],
        "x",
        "LangGraph per node ÷ engine per step (same run)",
    )
    case.figure("langgraph_build_s", build_s, "s", "LangGraph: building and compiling the three graphs (info)")
    case.versus(
        "fan-out 412/268/83 ms: wall / slowest branch",
        eng_fan,
        lg_fan,
        "x",
        peer="LangGraph",
        note="engine: together wall; LangGraph: first branch start → join node start",
    )
    case.versus(
        f"chain of {N} no-op steps: per step",
        eng_chain,
        lg_chain,
        "s",
        peer="LangGraph",
        note="engine: every node state written to SQLite; LangGraph: nothing persisted",
    )
    case.versus(
        f"chain of {N} no-op steps: per step, with its state kept",
        eng_chain,
        lg_saved,
        "s",
        peer="LangGraph",
        note="LangGraph: InMemorySaver (in memory, not durable)",
    )
    case.bar(
        "engine fan-out",
        wall_s=median(col("engine_wall")),
        sum_s=median(col("engine_sum")),
        slowest_s=median(col("engine_slowest")),
    )
    case.bar(
        "LangGraph fan-out",
        wall_s=median(col("lg_wall")),
        sum_s=median(col("lg_sum")),
        slowest_s=median(col("lg_slowest")),
    )
    return case.done()
