"""g. Park, approve, resume: the engine's cost beyond the tool call.

A read step, then an approval, then a real write (``slack.slack_post_message``
on the demo chat server). Inside one warm process with the server already up,
through the run API (``Runs``):

* park: from the approval node becoming ready (its ready time, as
  ``Runs.show`` gives it) to the run being parked (the park transaction
  committed; measured by wrapping ``runtime.driver._park_or_wake``, the one
  function that saves the last node states and parks in one transaction,
  which changes nothing);
* resume: ``Runs.resume(run, hub=hub)`` after the approval was recorded in the
  store (as ``runtime.api.decide`` recorded it before the run API), minus the
  tool call's own time (measured around ``hub.call``, and
  ToolResult.duration_s), with the warm hub passed in: what remains is the
  engine's work (the run read and its plan, policy, servers and recipe checked
  again, the run taken, the drive, the end committed);
* as information, ``Runs.approve(run, step, hub=hub)`` whole, the call a
  surface makes (the decision checked and recorded, then the same resume),
  minus the call.

And as a process: ``recipe approve RUN post --yes --json`` timed whole, minus
the tool call (the effect's span in the store) and minus the server's start
(measured in this process with the same config, alternating with the
process runs, so it is the server's own boot with no client import beside
it). One more approve runs under ``-X importtime``. The runs are started by
the operating-system user, the one the CLI acts as without ``--as``.

``recipe approve`` spawns the server before it imports the MCP SDK, so the
SDK's import (about as long as the server's boot: both import the same
package) runs on the other core while the server starts; the import shows in
the remainder only where it outlasts the server's start.
"""

from __future__ import annotations

import subprocess
import time

import trio

from .common import (
    Case,
    Config,
    Seen,
    TempDir,
    bench_runs,
    clean_env,
    engine_argv,
    importtime_summary,
    importtime_text,
    open_bench_store,
    prepared,
    timed_start,
)

RECIPE = """recipe "park and resume"
note: vodou.echo {"value": "benchmark note"}
ask me:
- post the benchmark note to #daily?
post: slack.slack_post_message {"channel": "#daily", "text": "{note}"}
"""
GATE = "approve:post"


def run(cfg: Config) -> Case:
    from vodou_engine.compiler import compile_recipe
    from vodou_engine.planning import resolve
    from vodou_engine.runs import os_user
    from vodou_engine.runtime import driver
    from vodou_engine.servers import demo_servers
    from vodou_engine.states import ApprovalState
    from vodou_engine.tools import hub as hubmod

    case = Case("g", "park, approve, resume (slack.slack_post_message behind an approval)")
    rows: list[dict] = []
    procs: list[dict] = []
    me = os_user()
    with TempDir("g") as tmp:
        demo_db = tmp / "demo.db"
        store_path = tmp / "runs.db"
        servers = demo_servers(demo_db)
        store = open_bench_store(store_path)
        runs = bench_runs(store, servers)
        base = compile_recipe(RECIPE)
        parked_for_processes: list[str] = []

        async def park(ready) -> tuple[dict, object]:
            parked_at: list[float] = []
            real_park = driver._park_or_wake

            def park_probe(*args):
                woken = real_park(*args)
                if not woken:
                    parked_at.append(time.time())
                return woken

            driver._park_or_wake = park_probe
            try:
                _, out = await timed_start(runs, ready, actor=me)
            finally:
                driver._park_or_wake = real_park
            returned = time.time()
            assert out.state == "parked", out.state
            gate_ready = Seen(runs, out.run).times[GATE][0]
            return {"park": parked_at[-1] - gate_ready, "park_returned": returned - gate_ready}, out

        async def drive_on(hub, go) -> tuple[float, tuple[float, float]]:
            """``go()`` (a resume or an approve) timed whole, and the one tool call inside it."""
            calls: list[tuple[float, float]] = []
            real_call = hub.call

            async def timed_call(*args, **kwargs):
                t0 = time.perf_counter()
                res = await real_call(*args, **kwargs)
                calls.append((time.perf_counter() - t0, res.duration_s))
                return res

            hub.call = timed_call
            try:
                t0 = time.perf_counter()
                done = await go()
                wall = time.perf_counter() - t0
            finally:
                del hub.call
            assert done.state == "succeeded", (done.state, done.errors, done.unknown)
            assert len(calls) == 1, calls
            return wall, calls[0]

        async def cycle(ready, hub, measure: bool) -> dict | None:
            parked, out = await park(ready)
            (question,) = out.pending
            # the decision recorded in the store, as before the run API; then the drive alone
            store.decide(question.approval, ApprovalState.APPROVED, by=me)
            resume_wall, (call, duration) = await drive_on(hub, lambda: runs.resume(out.run, hub=hub))
            # the same again through Runs.approve, the call a surface makes
            _, out2 = await park(ready)
            approve_wall, (call2, _) = await drive_on(hub, lambda: runs.approve(out2.run, "post", actor=me, hub=hub))
            if not measure:
                return None
            return {
                **parked,
                "resume_wall": resume_wall,
                "call": call,
                "call_duration_s": duration,
                "resume": resume_wall - call,
                "resume_vs_duration": resume_wall - duration,
                "approve_api_wall": approve_wall,
                "approve_api": approve_wall - call2,
            }

        async def in_process() -> dict:
            async with hubmod.open_hub(servers, ["slack"]) as hub:
                _, hints = resolve(base, servers, {"slack": hub.tools("slack")})
                plan = compile_recipe(RECIPE, hints=hints)
                assert any(n.id == GATE for n in plan.nodes), [n.id for n in plan.nodes]
                ready = prepared(plan, servers, hub)
                await cycle(ready, hub, measure=False)
                for _ in range(cfg.runs):
                    rows.append(await cycle(ready, hub, measure=True))
                    cfg.log(
                        f"g: park {rows[-1]['park'] * 1e3:.2f} ms, resume {rows[-1]['resume'] * 1e3:.2f} ms beyond the call (Runs.approve {rows[-1]['approve_api'] * 1e3:.2f} ms)"
                    )
                for _ in range(cfg.runs + 2):  # for the approve processes (+ warm-up, + importtime)
                    _, out = await timed_start(runs, ready, actor=me)
                    assert out.state == "parked"
                    parked_for_processes.append(out.run)
            return {}

        trio.run(in_process)

        async def server_start() -> tuple[float, float]:
            async with hubmod.open_hub(servers, ["slack"]) as hub:
                started = hub.started_in["slack"]
                t0 = time.perf_counter()
            return started, time.perf_counter() - t0

        env = clean_env(tmp, cfg, VODOU_STORE=str(store_path), VODOU_DEMO_DB=str(demo_db))

        def approve(run_id: str, *extra: str) -> tuple[float, subprocess.CompletedProcess]:
            argv = engine_argv("approve", run_id, "post", "--yes", "--json", cfg=cfg)
            argv[1:1] = list(extra)
            t0 = time.perf_counter()
            proc = subprocess.run(
                argv, cwd=tmp, env=env, capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=180
            )
            wall = time.perf_counter() - t0
            if proc.returncode != 0:
                raise RuntimeError(f"approve exited {proc.returncode}: {proc.stderr[-2000:]}")
            return wall, proc

        approve(parked_for_processes[0])  # warm the bytecode cache
        for run_id in parked_for_processes[1:-1]:
            started, closed = trio.run(server_start)
            wall, _ = approve(run_id)
            eff = store.get_effect(run_id, "post")
            assert eff is not None and eff.state == "executed", eff
            call = eff.ended_at - eff.started_at
            procs.append(
                {
                    "wall": wall,
                    "server_start": started,
                    "hub_close": closed,
                    "call": call,
                    "rest": wall - started - call,
                }
            )
            cfg.log(
                f"g: approve process {wall:.2f} s = server start {started:.2f} s + call {call * 1e3:.0f} ms + {procs[-1]['rest']:.2f} s"
            )
        _, proc = approve(parked_for_processes[-1], "-X", "importtime")
        imports = importtime_summary(proc.stderr)
        store.close()

    col = lambda rs, k: [r[k] for r in rs]  # noqa: E731
    park = case.figure("park_s", col(rows, "park"), "s", "approval node ready → run parked (committed)")
    case.figure("park_returned_s", col(rows, "park_returned"), "s", "approval node ready → Runs.start returned")
    case.figure("resume_wall_s", col(rows, "resume_wall"), "s", "Runs.resume after the approval was recorded, whole")
    case.figure("call_s", col(rows, "call"), "s", "the tool call, measured around hub.call")
    resume = case.figure("resume_s", col(rows, "resume"), "s", "Runs.resume − the call (around hub.call)")
    case.figure("resume_vs_duration_s", col(rows, "resume_vs_duration"), "s", "Runs.resume − ToolResult.duration_s")
    case.figure(
        "approve_api_wall_s",
        col(rows, "approve_api_wall"),
        "s",
        "Runs.approve (decision recorded, then the resume), whole (info)",
    )
    case.figure("approve_api_s", col(rows, "approve_api"), "s", "Runs.approve − the call (info)")
    pw = case.figure(
        "approve_process_wall_s", col(procs, "wall"), "s", "`recipe approve RUN post --yes` process, whole"
    )
    ps = case.figure("server_start_s", col(procs, "server_start"), "s", "slack server start (in-process, same config)")
    case.figure(
        "hub_close_s", col(procs, "hub_close"), "s", "closing the hub (in-process; inside the process's wall too)"
    )
    pc = case.figure(
        "approve_call_s", col(procs, "call"), "s", "the call inside the process (effect span in the store)"
    )
    rest = case.figure("approve_rest_s", col(procs, "rest"), "s", "process − server start − call")
    case.figure("approve_imports_s", imports["total_s"], "s", "time in imports (-X importtime, one run)")
    case.profiles["approve -X importtime"] = importtime_text(imports)
    case.check("g: park", park, 5e-3, unit="s", what="approval node ready → run parked")
    case.check("g: resume", resume, 5e-3, unit="s", what="Runs.resume − tool call, warm process")
    case.check("g: approve process", rest, 0.35, unit="s", what="process − server start − call")
    case.bar("approve process, whole", wall_s=pw, sum_s=None, slowest_s=None)
    case.bar("… of which server start", wall_s=ps, sum_s=None, slowest_s=None)
    case.bar("… of which the tool call", wall_s=pc, sum_s=None, slowest_s=None)
    case.bar("… the rest (target)", wall_s=rest, sum_s=None, slowest_s=None)
    return case.done()
