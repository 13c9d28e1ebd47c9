"""Shared helpers: configuration, timing, stores, result records."""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUT = Path(__file__).resolve().parent / "results"


@dataclass
class Config:
    runs: int = 5
    quick: bool = False
    out: Path = DEFAULT_OUT
    # A bytecode cache outside the source tree, so subprocesses import the
    # package the way an installed copy would (see clean_env).
    pycache: Path | None = None
    log: Callable[[str], None] = lambda msg: None


def median(values: Iterable[float]) -> float:
    vals = [v for v in values if v is not None]
    return statistics.median(vals) if vals else float("nan")


def spread(values: Iterable[float]) -> dict[str, float]:
    vals = sorted(v for v in values if v is not None)
    if not vals:
        return {"min": float("nan"), "max": float("nan")}
    return {"min": vals[0], "max": vals[-1]}


class Case:
    """What one case reports: named figures, checks against targets, bars for the chart."""

    def __init__(self, letter: str, title: str):
        self.letter = letter
        self.title = title
        self.figures: dict[str, dict[str, Any]] = {}
        self.checks: list[dict[str, Any]] = []
        self.bars: list[dict[str, Any]] = []
        self.notes: list[str] = []
        self.profiles: dict[str, str] = {}
        self.extra_json: dict[str, Any] = {}
        self.side_by_side: list[dict[str, Any]] = []
        self.skipped: str | None = None
        """Why the case measured nothing (a peer not installed, no PostgreSQL), and how to run it."""
        self.started = time.perf_counter()
        self.duration_s: float | None = None

    def figure(self, key: str, samples: list[float] | float, unit: str, label: str) -> float:
        """Record a figure; a list of samples is reported as its median with min/max."""
        if isinstance(samples, (int, float)):
            samples = [float(samples)]
        samples = [float(s) for s in samples]
        value = median(samples)
        self.figures[key] = {"value": value, "unit": unit, "label": label, "samples": samples, **spread(samples)}
        return value

    def check(
        self,
        name: str,
        measured: float,
        limit: float,
        *,
        unit: str,
        what: str,
        ratio: bool = False,
        at_least: bool = False,
    ) -> bool:
        """A target: ``measured ≤ limit``, or ``measured ≥ limit`` with ``at_least``."""
        met = bool(measured >= limit) if at_least else bool(measured <= limit)
        self.checks.append(
            {
                "name": name,
                "measured": measured,
                "limit": limit,
                "unit": unit,
                "what": what,
                "ratio": ratio,
                "met": met,
                "at_least": at_least,
            }
        )
        return met

    def versus(self, what: str, ours: float, theirs: float, unit: str, *, peer: str, note: str = "") -> None:
        """One row of the side-by-side table: the same thing measured on the engine and on a peer, in this run."""
        self.side_by_side.append(
            {"what": what, "engine": ours, "peer_value": theirs, "unit": unit, "peer": peer, "note": note}
        )

    def bar(self, label: str, *, wall_s: float, sum_s: float | None, slowest_s: float | None) -> None:
        self.bars.append({"label": label, "wall_s": wall_s, "sum_s": sum_s, "slowest_s": slowest_s})

    def note(self, text: str) -> None:
        self.notes.append(text)

    def done(self) -> Case:
        self.duration_s = time.perf_counter() - self.started
        return self

    def to_json(self) -> dict[str, Any]:
        return {
            "case": self.letter,
            "title": self.title,
            "figures": self.figures,
            "checks": self.checks,
            "bars": self.bars,
            "notes": self.notes,
            "profiles": self.profiles,
            "duration_s": self.duration_s,
            **({"side_by_side": self.side_by_side} if self.side_by_side else {}),
            **({"skipped": self.skipped} if self.skipped else {}),
            **self.extra_json,
        }


class TempDir:
    """A private directory for one case's stores and databases, removed afterwards."""

    def __init__(self, prefix: str):
        self._tmp = tempfile.TemporaryDirectory(prefix=f"vodou-bench-{prefix}-")
        self.path = Path(self._tmp.name)

    def __enter__(self) -> Path:
        return self.path

    def __exit__(self, *exc: object) -> None:
        self._tmp.cleanup()


def open_bench_store(path: Path):
    from vodou_engine.store import open_store

    return open_store(path)


def bench_runs(store, servers: dict | None = None):
    """The run API (``vodou_engine.runs.Runs``) over a benchmark's store.

    The policy is the default one (no file is looked for), so what a benchmark
    measures never depends on a policy file lying around; the servers are the
    benchmark's own (none for built-ins only).
    """
    from vodou_engine.policy import Policy
    from vodou_engine.runs import Runs
    from vodou_engine.servers import ServerSet

    return Runs(store=store, servers=ServerSet(dict(servers or {}), "bench"), policy=Policy())


def prepared(plan, servers: dict | None = None, hub=None):
    """A plan ready to start on servers that are already up (``hub``), as ``Runs.prepare``
    would hand it over: no compile and no server start inside what is timed."""
    from vodou_engine.runs import Prepared
    from vodou_engine.servers import ServerSet

    return Prepared(plan=plan, text=None, path=None, servers=ServerSet(dict(servers or {}), "bench"), hub=hub)


async def timed_start(runs, ready, **kwargs) -> tuple[float, Any]:
    """``Runs.start`` of a Prepared plan, timed from the call to its return (perf_counter seconds).

    What is inside: the inputs and thread limit checked, the servers bound to the
    run, the run stored, and the whole drive until the run ends or parks (its
    last node states and end committed)."""
    kwargs.setdefault("actor", "bench")
    t0 = time.perf_counter()
    report = await runs.start(ready, **kwargs)
    return time.perf_counter() - t0, report


class Seen:
    """One run as the run API shows it afterwards (``Runs.show``): node times, states, outputs.

    ``times[node]`` is (ready, started, ended), as the journal records them:
    ready is when the node could start (a blocking built-in is handed to the
    thread queue then, a task is spawned then), started when its work began
    (a worker took the call, or the task began it), ended when the engine
    recorded its end. Queueing for a thread is ready → started.
    """

    def __init__(self, runs, run_id: str):
        view = runs.show(run_id)
        self.view = view
        self.times = {n.node: (n.ready_at, n.started_at, n.ended_at) for n in view.nodes}
        self.states = {n.node: str(n.state) for n in view.nodes}
        self.outputs = {n.node: n.output for n in view.nodes}
        self.together = {t.join: t for t in view.together}

    def began(self, node: str) -> float | None:
        """When the engine began a node: its ready time (its start time if it has none)."""
        ready, started, _ = self.times.get(node, (None, None, None))
        return ready if ready is not None else started


def together_wall(plan, seen: Seen, join_id: str) -> dict[str, float]:
    """One together's figures from the node times the run API shows.

    ``wall_s`` runs from the first branch becoming ready to the moment the join
    was decided (so it includes dispatch, thread hand-off and the join itself).
    Engine spans are per branch ready → ended (what the engine saw, thread hop
    and queueing included: the meaning these figures had before node times
    had a separate ready time). Work figures are the run report's own
    (``Together``: each branch's started → ended, queueing apart).
    """
    join = next(n for n in plan.nodes if n.id == join_id)
    spans = []
    for i, item in enumerate(join.members):
        starts = [seen.began(m) for m in item if seen.began(m) is not None]
        ends = [seen.times[m][2] for m in item if m in seen.times and seen.times[m][2] is not None]
        if starts and ends:
            spans.append((join.needs[i], max(ends) - min(starts), min(starts), max(ends)))
    decided = seen.times[join_id][2]
    slowest = max(spans, key=lambda s: s[1])
    stats = seen.together[join_id]
    return {
        "wall_s": decided - min(s[2] for s in spans),
        "sum_s": sum(s[1] for s in spans),
        "slowest_s": slowest[1],
        "slowest": slowest[0],
        "work_sum_s": stats.sum_s,
        "work_slowest_s": stats.slowest_s,
        "work_wall_s": stats.wall_s,
        "queued_s": stats.queued_s,
    }


def clean_env(tmp: Path, cfg: Config, **extra: str) -> dict[str, str]:
    """An environment for engine subprocesses: no VODOU_* or XDG_* leaking in from the caller."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("VODOU_") and k not in ("XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_CACHE_HOME")
    }
    env.update(
        XDG_CONFIG_HOME=str(tmp / "config"),
        XDG_DATA_HOME=str(tmp / "data"),
        XDG_CACHE_HOME=str(tmp / "cache"),
        COLUMNS="120",
    )
    if cfg.pycache is not None:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = str(cfg.pycache)
    env.update(extra)
    return env


def engine_argv(*args: str, cfg: Config) -> list[str]:
    """``python -m vodou_engine ...``: whichever vodou_engine this interpreter imports (PYTHONPATH first)."""
    return [sys.executable, "-m", "vodou_engine", *args]


def fmt_s(seconds: float) -> str:
    if seconds != seconds:  # nan
        return "n/a"
    if seconds >= 1:
        return f"{seconds:.2f} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.1f} ms"
    return f"{seconds * 1e6:.0f} µs"


def fmt_value(value: float, unit: str) -> str:
    if unit == "s":
        return fmt_s(value)
    if unit == "x":
        return f"{value:.3f}×"
    if unit == "count":
        return f"{value:.0f}"
    return f"{value:.4g} {unit}"


def importtime_summary(stderr: str, top: int = 12) -> dict[str, Any]:
    """Digest ``python -X importtime`` output: total, the slowest top-level imports, self time per package."""
    entries = []
    for line in stderr.splitlines():
        if not line.startswith("import time:") or "self [us]" in line:
            continue
        parts = line[len("import time:") :].split("|")
        if len(parts) != 3:
            continue
        self_us, cum_us, raw = int(parts[0]), int(parts[1]), parts[2]
        name = raw.strip()
        depth = (len(raw) - len(raw.lstrip()) - 1) // 2
        entries.append((name, depth, self_us, cum_us))
    tops = sorted((e for e in entries if e[1] == 0), key=lambda e: -e[3])
    by_pkg: dict[str, int] = {}
    for name, _, self_us, _ in entries:
        root = name.split(".")[0]
        by_pkg[root] = by_pkg.get(root, 0) + self_us
    return {
        "total_s": sum(e[3] for e in entries if e[1] == 0) / 1e6,
        "modules": len(entries),
        "top_level": [{"module": n, "cumulative_s": c / 1e6} for n, _, _, c in tops[:top]],
        "self_by_package": [
            {"package": p, "self_s": s / 1e6} for p, s in sorted(by_pkg.items(), key=lambda kv: -kv[1])[:top]
        ],
    }


def importtime_text(summary: dict[str, Any]) -> str:
    lines = [f"{summary['modules']} modules imported, {summary['total_s'] * 1e3:.0f} ms in imports"]
    lines.append("slowest top-level imports (cumulative):")
    lines += [f"  {e['cumulative_s'] * 1e3:7.1f} ms  {e['module']}" for e in summary["top_level"]]
    lines.append("own import time by package (self, summed):")
    lines += [f"  {e['self_s'] * 1e3:7.1f} ms  {e['package']}" for e in summary["self_by_package"]]
    return "\n".join(lines)


def profile_text(fn: Callable[[], Any], top: int = 14) -> str:
    """cProfile one call (this thread only), the functions with the most own time."""
    import cProfile

    prof = cProfile.Profile()
    prof.enable()
    try:
        fn()
    finally:
        prof.disable()
    return stats_text(prof, top)


def stats_text(prof, top: int = 14) -> str:
    """A finished ``cProfile.Profile``: the functions with the most own time, paths shortened."""
    import io
    import pstats

    buf = io.StringIO()
    pstats.Stats(prof, stream=buf).sort_stats("tottime").print_stats(top)
    lines = [ln for ln in buf.getvalue().splitlines() if ln.strip()]
    start = next((i for i, ln in enumerate(lines) if ln.lstrip().startswith("ncalls")), 0)
    head = next((ln.strip() for ln in lines if "function calls" in ln), "")
    return "\n".join([head, *lines[start:]]).replace(sys.prefix, "<venv>").replace(str(ROOT) + "/", "")


def poll(predicate: Callable[[], Any], what: str, *, timeout: float, every: float) -> Any:
    """``predicate()`` every ``every`` seconds until it is true (its value), or RuntimeError after ``timeout``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(every)
    raise RuntimeError(f"timed out waiting for {what}")
