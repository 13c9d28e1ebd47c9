"""j. A quorum's slow branch never holds the process.

The real ``recipe run FILE --json`` (``python -m vodou_engine``) as a
subprocess, on three demo lab servers over stdio::

    together q:
      fast:  board.query  {"ms": 50}
      fast2: recall.query {"ms": 60}
      slow:  proc.query   {"ms": 6000}
      need: 2 of 3

The quorum is decided at its second success, and the slow call is cancelled
while ``proc`` is still sleeping in it. The figure is the process's exit (the
moment this process's wait for it returns) minus the moment the quorum's K-th
success ended on its server (``ended`` in the demo database's ``calls``
table, written by the server as the call returns), in one run; the median
over the samples. Both clocks are ``time.time()`` on this machine. Each
sample is a fresh process with its own store; the demo database is shared
and every call is labelled with its sample.

Where the time goes is measured the same way on extra samples run through
``benchmarks/quorum_probe.py``, which is the same command with timestamps at
each stage (drive returned, hub close began, each server's stop, hub closed,
report printed, main returned, atexit); the process exit is still timed here.
A floor for the last stretch is measured the same way: a process that
imports what ``recipe run`` has loaded by its end (trio, the MCP SDK,
jsonschema, the run API, the hub), writes one line and exits, normally and
with ``os._exit`` (what interpreter shutdown itself costs here).

One probe sample keeps the stdin grace for the in-doubt server
(``VODOU_BENCH_KEEP_GRACE=1``: ``stop`` is called with ``in_doubt=False``, as
before the hub stopped such a server at once): the figure as it was, for
comparison in the same run.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

from .common import Case, Config, TempDir, clean_env, engine_argv

K = 2
KTH = "2nd"
LIMIT_S = 0.100
PROBE = Path(__file__).resolve().parent / "quorum_probe.py"


FLOOR = """
import gc, os, sys, time
gc.disable()
import trio, mcp.client.session, mcp_types, jsonschema, vodou_engine.runs, vodou_engine.tools.hub, vodou_engine.views.report  # noqa
gc.freeze()
gc.enable()
sys.stdout.write(repr(time.time()))
sys.stdout.flush()
if sys.argv[1] == "os._exit":
    os._exit(0)
"""


def _floor(tmp: Path, cfg: Config, how: str) -> float:
    """Seconds from a loaded process's last output to its exit, as seen from here."""
    chunks: list[bytes] = []
    proc = subprocess.Popen(
        [sys.executable, "-c", FLOOR, how],
        cwd=tmp,
        env=clean_env(tmp, cfg),
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        stdin=subprocess.DEVNULL,
    )
    reader = threading.Thread(target=lambda: chunks.append(proc.stdout.read()), daemon=True)
    reader.start()
    proc.wait(timeout=60)
    t_exit = time.time()
    reader.join(10)
    return t_exit - float(chunks[0])


def recipe(tag: str) -> str:
    return f"""recipe "quorum with a slow server"
together q:
  fast:  board.query {{"ms": 50, "label": "{tag}-fast"}}
  fast2: recall.query {{"ms": 60, "label": "{tag}-fast2"}}
  slow:  proc.query {{"ms": 6000, "label": "{tag}-slow"}}
  need: {K} of 3
"""


def _sample(tmp: Path, cfg: Config, tag: str, *, probe: str | None = None) -> dict:
    from vodou_engine.demo import db

    demo_db = tmp / "demo.db"
    store_path = tmp / f"{tag}.db"
    recipe_path = tmp / f"{tag}.recipe"
    recipe_path.write_text(recipe(tag))
    marks_path = tmp / f"{tag}.marks.json"
    env = clean_env(
        tmp, cfg, VODOU_STORE=str(store_path), VODOU_DEMO_DB=str(demo_db), VODOU_BENCH_MARKS=str(marks_path)
    )
    if probe is None:
        argv = engine_argv("run", str(recipe_path), "--json", cfg=cfg)
    else:
        argv = [sys.executable, str(PROBE), "run", str(recipe_path), "--json"]
        if probe == "grace":  # the stages probe, with the stdin grace kept for the in-doubt server too
            env["VODOU_BENCH_KEEP_GRACE"] = "1"
    first_out: list[float] = []
    chunks: list[bytes] = []

    def read(stream) -> None:
        while chunk := stream.read1(65536):
            if not first_out:
                first_out.append(time.time())
            chunks.append(chunk)

    with open(tmp / f"{tag}.stderr", "wb") as err:
        t_start = time.time()
        proc = subprocess.Popen(argv, cwd=tmp, env=env, stdout=subprocess.PIPE, stderr=err, stdin=subprocess.DEVNULL)
        reader = threading.Thread(target=read, args=(proc.stdout,), daemon=True)
        reader.start()
        code = proc.wait(timeout=120)
        t_exit = time.time()
        reader.join(10)
    if code != 0:
        raise RuntimeError(f"recipe run exited {code}: {(tmp / f'{tag}.stderr').read_text()[-2000:]}")
    doc = json.loads(b"".join(chunks))
    assert doc["state"] == "succeeded", doc
    calls = [c for c in db.calls(demo_db) if str(c["arguments"].get("label", "")).startswith(f"{tag}-")]
    ok = sorted(c["ended"] for c in calls if c["outcome"] == "ok")
    assert len(ok) >= K, calls
    kth = ok[K - 1]
    conn = sqlite3.connect(store_path)
    try:
        (run_ended,) = conn.execute("SELECT ended_at FROM runs").fetchone()
        nodes = {r[0]: (r[1], r[2]) for r in conn.execute("SELECT node_id, state, ended_at FROM nodes")}
    finally:
        conn.close()
    engine_kth = sorted(nodes[k][1] for k in ("fast", "fast2") if nodes[k][0] == "succeeded")[K - 1]
    row = {
        "exit_after_kth": t_exit - kth,
        "engine_saw_kth": engine_kth - kth,
        "join_after_kth": nodes["join:q"][1] - kth,
        "run_end_after_kth": run_ended - kth,
        "report_after_kth": first_out[0] - kth if first_out else float("nan"),
        "exit_after_report": t_exit - first_out[0] if first_out else float("nan"),
        "process_wall": t_exit - t_start,
        "slow_state": nodes["slow"][0],
        "slow_completed": sum(1 for c in calls if c["arguments"].get("label") == f"{tag}-slow"),
        "servers_start": {k: v["start_s"] for k, v in doc.get("servers", {}).items()},
        "kth": kth,
        "exit": t_exit,
    }
    if probe is not None:
        marks = json.loads(marks_path.read_text())
        row["stages"] = [(name, at - kth) for name, at in marks if name != "interpreter up"] + [
            ("process exit", t_exit - kth)
        ]
    return row


def _stage_table(rows: list[dict]) -> str:
    """Each stage's median time after the K-th success ended on its server, in order, and the step from the one before."""
    at: dict[str, list[float]] = {}
    for r in rows:
        for name, secs in r["stages"]:
            at.setdefault(name, []).append(secs)
    med = sorted(((sorted(v)[len(v) // 2], name, len(v)) for name, v in at.items()))
    width = max(len(name) for _, name, _ in med)
    lines = [f"{'stage':<{width}}  {'after K-th success':>18}  {'step':>9}", "-" * (width + 31)]
    prev = 0.0
    for secs, name, _ in med:
        lines.append(f"{name:<{width}}  {secs * 1e3:>15.1f} ms  {(secs - prev) * 1e3:>+6.1f} ms")
        prev = secs
    lines.append(f"({len(rows)} run(s); times relative to the end of the K-th success on its server, which is 0)")
    return "\n".join(lines)


def run(cfg: Config) -> Case:
    case = Case(
        "j",
        "a quorum's slow branch never holds the process: 50 / 60 / 6,000 ms on three MCP stdio servers, need 2 of 3",
    )
    rows: list[dict] = []
    stages: list[dict] = []
    grace: list[dict] = []
    floors: dict[str, list[float]] = {"normal": [], "os._exit": []}
    n_probe = max(1, min(cfg.runs, 3))
    with TempDir("j") as tmp:
        _sample(tmp, cfg, "warm")  # the bytecode cache, and the demo database seeded
        for i in range(cfg.runs):
            rows.append(_sample(tmp, cfg, f"s{i}"))
            cfg.log(
                f"j: exit {rows[-1]['exit_after_kth'] * 1e3:.1f} ms after the {KTH} success ended on its server (run end +{rows[-1]['run_end_after_kth'] * 1e3:.1f} ms)"
            )
        for i in range(n_probe):
            stages.append(_sample(tmp, cfg, f"p{i}", probe="stages"))
            cfg.log(f"j (stages): exit {stages[-1]['exit_after_kth'] * 1e3:.1f} ms after the {KTH} success")
        for _ in range(cfg.runs):
            for how in floors:
                floors[how].append(_floor(tmp, cfg, how))
        grace.append(_sample(tmp, cfg, "g0", probe="grace"))
        cfg.log(f"j (stdin grace kept): exit {grace[-1]['exit_after_kth'] * 1e3:.1f} ms after the {KTH} success")
    col = lambda rs, k: [r[k] for r in rs]  # noqa: E731
    exit_ = case.figure(
        "exit_after_kth_success_s",
        col(rows, "exit_after_kth"),
        "s",
        f"process exit − end of the quorum's {KTH} success on its server",
    )
    case.figure(
        "engine_saw_kth_s",
        col(rows, "engine_saw_kth"),
        "s",
        f"{KTH} success: server's end → its node's end in the store (the MCP reply)",
    )
    case.figure("join_after_kth_s", col(rows, "join_after_kth"), "s", f"{KTH} success on the server → join decided")
    case.figure(
        "run_end_after_kth_s", col(rows, "run_end_after_kth"), "s", f"{KTH} success on the server → runs.ended_at"
    )
    case.figure(
        "report_after_kth_s",
        col(rows, "report_after_kth"),
        "s",
        f"{KTH} success on the server → the report's first byte on stdout",
    )
    case.figure("exit_after_report_s", col(rows, "exit_after_report"), "s", "the report's first byte → process exit")
    case.figure(
        "floor_exit_s", floors["normal"], "s", "floor: a process with the same modules loaded, last output → exit"
    )
    case.figure(
        "floor_os_exit_s", floors["os._exit"], "s", "floor: the same ending in os._exit (no interpreter shutdown)"
    )
    case.figure("process_wall_s", col(rows, "process_wall"), "s", "whole `recipe run` process (server start included)")
    case.figure(
        "slow_cancelled_runs",
        sum(1 for r in rows + stages if r["slow_state"] == "cancelled"),
        "count",
        "runs where the slow branch ended cancelled",
    )
    case.figure(
        "slow_completed_on_server",
        sum(r["slow_completed"] for r in rows + stages),
        "count",
        "slow calls that ran to their end on the server (0: stopped mid-call)",
    )
    case.figure(
        "probe_exit_after_kth_s",
        col(stages, "exit_after_kth"),
        "s",
        "the same under the stage probe (its overhead included)",
    )
    case.figure(
        "grace_exit_after_kth_s",
        col(grace, "exit_after_kth"),
        "s",
        "for comparison: the in-doubt server given the stdin grace (as before)",
    )
    for name, secs in _server_starts(rows).items():
        case.figure(f"server_start_{name}_s", secs, "s", f"server start: {name} (from the run report)")
    case.profiles["where the time goes after the K-th success (stage probe, medians)"] = _stage_table(stages)
    case.profiles["the same with the stdin grace kept for the in-doubt server (one run)"] = _stage_table(grace)
    case.check(
        "j: exit after quorum's K-th success",
        exit_,
        LIMIT_S,
        unit="s",
        what="process exit − K-th success's end on the server, slow branch 6 s on a stdio server",
    )
    case.bar("quorum exit after K-th success", wall_s=exit_, sum_s=None, slowest_s=None)
    case.extra_json = {
        "samples": [{k: v for k, v in r.items() if k != "stages"} for r in rows],
        "stages": [r["stages"] for r in stages],
        "grace": [r["stages"] for r in grace],
    }
    return case.done()


def _server_starts(rows: list[dict]) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {}
    for r in rows:
        for name, secs in sorted(r["servers_start"].items()):
            out.setdefault(name, []).append(secs)
    return out
