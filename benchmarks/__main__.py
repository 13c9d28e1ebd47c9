"""``python -m benchmarks``: run the cases, print the table and chart, write results.

Options: ``--quick`` (fewer runs, smaller N), ``--runs N`` (default 5; medians
over N runs), ``--only a,e`` (case letters), ``--out DIR`` (default
benchmarks/results; RESULTS.md goes next to it for the default directory,
inside it otherwise).

A group name runs a few cases by name instead of ``--only``:
``python -m benchmarks chain`` (k: the chain of MCP calls against the SDK's),
``python -m benchmarks peers`` (k, l, o: the SDK, LangGraph and DBOS in the
same run; LangGraph and DBOS come with ``pip install -e '.[bench]'``, and a
peer that is not installed is skipped with a line that says so),
``python -m benchmarks workers`` (w).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import tempfile
import time
import traceback
from datetime import UTC, datetime
from pathlib import Path

from .common import DEFAULT_OUT, Config

CASES = {
    "a": "post's case: 412/268/83 ms blocking branches",
    "b": "the same on three MCP stdio servers",
    "c": "baselines: blocking nursery, trio threads, ThreadPoolExecutor",
    "d": "scale: 10 / 100 / 1,000 parallel branches",
    "e": "chain of 1,000 no-work steps",
    "f": "quorum 2 of 3: join delay, process exit",
    "g": "park, approve, resume",
    "h": "compile speed: 100 / 1,000 / 10,000 steps",
    "i": "CLI cold start",
    "j": "a quorum's slow branch never holds the process (exit after the K-th success)",
    "q": "recipe plan on the bundled recipes: every server started (--refresh) against the tool cache (nothing changed), and --offline",
    "r": "a loop of 1,000 no-work items against 1,000 together branches, same run",
    "s": "recipe serve: approve on the page → effect, the inbox with 1,000 parked runs, 100 runs at once, a schedule's lag",
    "n": "recipe serve's editor: one keystroke's compile + card for a 50-step recipe, server side",
    "u": "recipe serve's live pages: an effect done → the open run page shows it, in Chromium (skipped without playwright or chromium)",
    "m": "recipe mcp: initialize against the SDK's floor, check_recipe round trip",
    "p": "an alternative not taken (benchmarks/proposed) vs shipped, same run; only with --only p",
    "w": "workers on PostgreSQL: runs/s on 1, 2, 4 workers against the queue's no-op floor and a floor making the same MCP calls, approve → effect through the queue, store ops against SQLite; only with --only w (also on its own: python -m benchmarks.workers_bench, which writes results/workers.json)",
    "k": "a chain of 200 MCP calls through the engine against the official SDK's ClientSession chain, same server, server-side timestamps",
    "l": "peer: LangGraph's fan-out (wall / slowest) and a chain of 200 nodes, against the engine (skipped without langgraph: pip install -e '.[bench]')",
    "o": "peer: DBOS on PostgreSQL: a durable step, send → next step, a queue's workflows per second, against the engine (skipped without dbos or PostgreSQL)",
}
GROUPS = {"chain": ["k"], "peers": ["k", "l", "o"], "workers": ["w"]}
"""``python -m benchmarks GROUP``: a few cases by name."""
MODULES = {"s": "serve_bench", "m": "agents_bench", "w": "workers_bench", "n": "editor_bench", "u": "live_bench"}
OPT_IN = {"p", "w"}
"""Cases a plain run leaves out: an A/B of a change not taken, and one that needs PostgreSQL."""
"""Cases whose module is not ``case_<letter>.py`` (each also runs on its own: ``python -m benchmarks.serve_bench``)."""


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks",
        description="Benchmarks for vodou_engine.",
        epilog="cases: " + "; ".join(f"{k} = {v}" for k, v in CASES.items()),
    )
    p.add_argument(
        "group",
        nargs="?",
        choices=sorted(GROUPS),
        help="run only these cases: " + "; ".join(f"{k} = {', '.join(v)}" for k, v in GROUPS.items()),
    )
    p.add_argument("--quick", action="store_true", help="3 runs (unless --runs) and smaller N; for the smoke test")
    p.add_argument(
        "--runs", type=int, default=None, help="runs per figure; figures are medians (default 5, 3 with --quick)"
    )
    p.add_argument(
        "--only", default=None, metavar="CASES", help="comma-separated case letters, e.g. a,e (default: all)"
    )
    p.add_argument(
        "--out",
        type=Path,
        default=DEFAULT_OUT,
        metavar="DIR",
        help="where results.json and chart.svg go (default benchmarks/results)",
    )
    p.add_argument("--json-only", action="store_true", help=argparse.SUPPRESS)  # used by case p for its sub-runs
    args = p.parse_args(argv)
    if args.group and args.only is not None:
        p.error("give a group or --only, not both")
    if args.group:
        letters = list(GROUPS[args.group])
    else:
        letters = (
            [c for c in CASES if c not in OPT_IN]
            if args.only is None
            else [x.strip().lower() for x in args.only.split(",") if x.strip()]
        )
    unknown = [x for x in letters if x not in CASES]
    if unknown:
        p.error(f"unknown case(s) {', '.join(unknown)}; known: {', '.join(CASES)}")
    args.letters = letters
    if args.runs is None:
        args.runs = 3 if args.quick else 5
    if args.runs < 1:
        p.error("--runs must be at least 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from rich.console import Console
    from rich.markup import escape

    from . import report

    console = Console(stderr=args.json_only, highlight=False)
    if not console.is_terminal and "COLUMNS" not in os.environ:
        console.width = max(console.width, 130)
    out: Path = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    md_path = out.parent / "RESULTS.md" if out == DEFAULT_OUT.resolve() else out / "RESULTS.md"
    load_before = report.load_average()
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="vodou-bench-pyc-") as pycache:
        cfg = Config(
            runs=args.runs,
            quick=args.quick,
            out=out,
            pycache=Path(pycache),
            log=lambda msg: console.print(f"[dim]{msg}[/]", markup=True, highlight=False),
        )
        cases: dict[str, dict] = {}
        for letter in args.letters:
            console.print(f"[bold]{letter}[/] {CASES[letter]} …")
            t0 = time.perf_counter()
            try:
                module = importlib.import_module(f"benchmarks.{MODULES.get(letter, 'case_' + letter)}")
                cases[letter] = module.run(cfg).to_json()
                if cases[letter].get("skipped"):
                    console.print(
                        f"[yellow]case {letter} skipped:[/] {escape(cases[letter]['skipped'])}",
                        markup=True,
                        highlight=False,
                    )
            except Exception:  # noqa: BLE001 - one broken case must not lose the others' figures
                tb = traceback.format_exc()
                console.print(f"[red]case {letter} failed[/]\n{tb}", markup=True, highlight=False)
                cases[letter] = {
                    "case": letter,
                    "title": CASES[letter],
                    "figures": {},
                    "checks": [],
                    "bars": [],
                    "notes": [],
                    "profiles": {},
                    "error": tb,
                    "duration_s": time.perf_counter() - t0,
                }
    results = {
        "generated": datetime.now(UTC).astimezone().isoformat(timespec="seconds"),
        "command": "python -m benchmarks"
        + (" " + " ".join(argv if argv is not None else sys.argv[1:]) if (argv or sys.argv[1:]) else ""),
        "machine": report.machine_info(),
        "options": {"runs": args.runs, "quick": args.quick, "only": args.letters},
        "load_before": load_before,
        "load_after": report.load_average(),
        "duration_s": time.perf_counter() - started,
        "cases": cases,
        "paths": {"json": str(out / "results.json"), "svg": str(out / "chart.svg"), "md": str(md_path)},
    }
    results["checks"] = report.all_checks(results)
    report.write_json(results, out / "results.json")
    report.write_svg(results, out / "chart.svg")
    if not args.json_only:
        report.write_markdown(results, md_path, out / "chart.svg")
        report.print_terminal(results, console)
    return 1 if any(c.get("error") for c in cases.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
