"""Output: the terminal table and bar chart, chart.svg, results.json and RESULTS.md."""

from __future__ import annotations

import json
import math
import os
import platform
import sys
from html import escape
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from .common import fmt_s, fmt_value

PACKAGES = (
    "trio",
    "msgspec",
    "mcp",
    "lark",
    "networkx",
    "rich",
    "vodou_engine",
    "psycopg",
    "procrastinate",
    "langgraph",
    "dbos",
)
SERIES = (
    ("wall_s", "wall-clock", "#3b82c4", "cyan"),
    ("sum_s", "summed branches", "#e07b24", "dark_orange"),
    ("slowest_s", "slowest branch", "#3a9b4a", "green"),
)


# --- the machine ------------------------------------------------------------------


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def machine_info() -> dict[str, Any]:
    versions = {}
    for name in PACKAGES:
        try:
            versions[name] = version(name)
        except PackageNotFoundError:
            versions[name] = None
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        usable = os.cpu_count()
    import vodou_engine

    return {
        "vodou_engine_file": vodou_engine.__file__,
        "nproc": usable,
        "cpu_count": os.cpu_count(),
        "cpu_model": cpu_model(),
        "python": sys.version.split()[0],
        "implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "packages": versions,
        "tree": source_tree(),
    }


def source_tree() -> dict[str, Any]:
    """The commit measured, and engine files changed since it (others edit the tree as it runs)."""
    import subprocess

    from .common import ROOT

    def git(*args: str) -> str:
        try:
            return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=10).stdout.rstrip()
        except (OSError, subprocess.SubprocessError):
            return ""

    modified = [line[3:] for line in git("status", "--porcelain", "--", "vodou_engine").splitlines() if line.strip()]
    return {"commit": git("rev-parse", "--short", "HEAD").strip() or None, "modified": modified}


def load_average() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:  # pragma: no cover
        return None


# --- collected rows -----------------------------------------------------------------


def all_checks(results: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for letter, case in results["cases"].items():
        if letter == "p":
            continue
        for c in case.get("checks", []):
            out.append({"case": letter, **c})
    return out


def all_bars(results: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for letter, case in results["cases"].items():
        for b in case.get("bars", []):
            out.append({"case": letter, **b})
    return out


def bar_scale(bar: dict[str, Any], bars: list[dict[str, Any]]) -> float:
    """A group with several series is scaled to its own largest value; single bars of
    one case (a breakdown, a baseline) share a scale, so they compare with each other."""
    values = [bar.get(key) for key, *_ in SERIES if bar.get(key) is not None]
    if len(values) > 1:
        return max(values) or 1.0
    singles = [
        b["wall_s"] for b in bars if b["case"] == bar["case"] and all(b.get(k) is None for k in ("sum_s", "slowest_s"))
    ]
    return max(singles) or 1.0


def limit_text(c: dict[str, Any]) -> str:
    return ("≥ " if c.get("at_least") else "≤ ") + fmt_value(c["limit"], c["unit"])


def measured_text(c: dict[str, Any]) -> str:
    return fmt_value(c["measured"], c["unit"])


def over_limit(c: dict[str, Any]) -> str:
    if not c["limit"] or c["measured"] != c["measured"]:
        return "n/a"
    return f"{c['measured'] / c['limit']:.2f}"


def side_by_side(results: dict[str, Any]) -> list[dict[str, Any]]:
    """Every case's rows of the same thing measured on the engine and on a peer."""
    return [{"case": letter, **r} for letter, case in results["cases"].items() for r in case.get("side_by_side", [])]


def _ratio(r: dict[str, Any]) -> str:
    if not r["peer_value"] or r["engine"] != r["engine"] or r["peer_value"] != r["peer_value"]:
        return "n/a"
    return f"{r['engine'] / r['peer_value']:.3f}"


# --- terminal ----------------------------------------------------------------------

BLOCKS = " ▏▎▍▌▋▊▉█"


def _bar_text(fraction: float, width: int) -> str:
    cells = max(0.0, min(1.0, fraction)) * width
    full = int(cells)
    rest = round((cells - full) * 8)
    if rest == 8:
        full, rest = full + 1, 0
    text = "█" * full + (BLOCKS[rest] if rest and full < width else "")
    if not text and fraction > 0:
        text = "▏"
    return text


def print_terminal(results: dict[str, Any], console) -> None:
    from rich.markup import escape as escape_markup
    from rich.table import Table
    from rich.text import Text

    m = results["machine"]
    console.print(
        f"[bold]vodou_engine benchmarks[/] · {results['generated']} · {m['nproc']} cores ({m['cpu_model']}) · "
        f"Python {m['python']} · load {results.get('load_before')} → {results.get('load_after')} · {results['duration_s']:.0f} s"
    )

    per_case = Table(title="wall-clock, summed branch time and slowest branch (medians)", title_justify="left")
    for col in ("case", "what", "wall-clock", "summed branches", "slowest branch", "wall / slowest", "wall / sum"):
        per_case.add_column(col, justify="left" if col in ("case", "what") else "right")
    for b in all_bars(results):
        w, s, sl = b["wall_s"], b.get("sum_s"), b.get("slowest_s")
        per_case.add_row(
            b["case"],
            b["label"],
            fmt_s(w),
            fmt_s(s) if s is not None else "",
            fmt_s(sl) if sl is not None else "",
            f"{w / sl:.3f}" if sl else "",
            f"{w / s:.3f}" if s else "",
        )
    if per_case.row_count:
        console.print(per_case)

    targets = Table(title="targets", title_justify="left")
    for col in ("case", "target", "limit", "measured", "measured ÷ limit", "met"):
        targets.add_column(col, justify="left" if col in ("case", "target") else "right")
    for c in all_checks(results):
        targets.add_row(
            c["case"],
            c["name"].split(": ", 1)[-1],
            limit_text(c),
            measured_text(c),
            over_limit(c),
            Text("met", style="green") if c["met"] else Text("not met", style="bold red"),
        )
    for letter, case in results["cases"].items():
        if case.get("error"):
            targets.add_row(letter, case["title"], "", "", "", Text("error", style="bold red"))
        elif case.get("skipped"):
            targets.add_row(letter, case["title"], "", "", "", Text("skipped", style="yellow"))
    if targets.row_count:
        console.print(targets)
    rows = side_by_side(results)
    if rows:
        t = Table(title="peers, same run, same machine", title_justify="left")
        for col in ("case", "what", "engine", "peer", "peer's", "engine ÷ peer"):
            t.add_column(col, justify="left" if col in ("case", "what", "peer") else "right")
        for r in rows:
            t.add_row(
                r["case"],
                r["what"],
                fmt_value(r["engine"], r["unit"]),
                r["peer"],
                fmt_value(r["peer_value"], r["unit"]),
                _ratio(r),
            )
        console.print(t)
    for letter, case in results["cases"].items():
        if case.get("skipped"):
            console.print(
                f"[yellow]{letter} skipped:[/] {escape_markup(case['skipped'])}", markup=True, highlight=False
            )

    if all_bars(results):
        _print_bars(results, console)
    if results["cases"].get("p", {}).get("comparison"):
        _print_proposed(results, console)
    console.print(
        f"results: {results['paths']['json']}\nchart:   {results['paths']['svg']}\nreport:  {results['paths']['md']}"
    )


def _print_bars(results: dict[str, Any], console) -> None:
    from rich.text import Text

    console.print(
        "[bold]bar chart[/] (a group of three is scaled to its largest value; single bars share a scale within their case)"
    )
    legend = Text("  ")
    for _, name, _, style in SERIES:
        legend.append("██ ", style=style)
        legend.append(name + "   ")
    console.print(legend)
    width = max(20, min(60, console.width - 40))
    bars = all_bars(results)
    for b in bars:
        values = [(name, b.get(key), style) for key, name, _, style in SERIES if b.get(key) is not None]
        top = bar_scale(b, bars)
        console.print(Text(f"{b['case']}  {b['label']}", style="bold"))
        for name, v, style in values:
            line = Text(f"    {name:<16}")
            line.append(_bar_text(v / top, width).ljust(width), style=style)
            line.append(f" {fmt_s(v)}")
            console.print(line)


def _print_proposed(results: dict[str, Any], console) -> None:
    from rich.table import Table

    p = results["cases"]["p"]
    t = Table(title="proposed engine changes (benchmarks/proposed/*.diff), same run", title_justify="left")
    for col in ("target", "limit", "shipped", "with the diffs", "with ÷ shipped", "met (shipped → diffs)"):
        t.add_column(col, justify="left" if col == "target" else "right")
    for r in p["comparison"]:
        t.add_row(
            r["name"],
            r["limit_text"],
            r["shipped_text"],
            r["proposed_text"],
            f"{r['ratio']:.2f}" if r["ratio"] == r["ratio"] else "n/a",
            f"{_met(r['shipped_met'])} → {_met(r['proposed_met'])}",
        )
    console.print(t)


def _met(flag) -> str:
    return "met" if flag else ("n/a" if flag is None else "not met")


# --- SVG ---------------------------------------------------------------------------


def write_svg(results: dict[str, Any], path: Path) -> None:
    bars = all_bars(results)
    width, left, right = 980, 290, 120
    plot = width - left - right
    bar_h, gap, group_gap, top = 14, 3, 12, 74
    rows = sum(len([k for k, *_ in SERIES if b.get(k) is not None]) for b in bars)
    height = top + rows * (bar_h + gap) + len(bars) * group_gap + 30
    m = results["machine"]
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" font-family="DejaVu Sans, Helvetica, Arial, sans-serif" font-size="12">',
        f'<rect width="{width}" height="{height}" fill="#ffffff"/>',
        '<text x="16" y="24" font-size="16" font-weight="bold">vodou_engine benchmarks: wall-clock, summed branch time, slowest branch</text>',
        f'<text x="16" y="42" fill="#555">{escape(results["generated"])} · {m["nproc"]} cores, {escape(m["cpu_model"])} · Python {m["python"]} · medians of {results["options"]["runs"]} runs · groups of three scaled to their largest value, single bars to their case</text>',
    ]
    x = 16
    for _, name, colour, _ in SERIES:
        out.append(f'<rect x="{x}" y="52" width="12" height="12" fill="{colour}"/>')
        out.append(f'<text x="{x + 17}" y="62">{escape(name)}</text>')
        x += 30 + 7 * len(name)
    y = top
    for b in bars:
        values = [(key, name, colour, b.get(key)) for key, name, colour, _ in SERIES if b.get(key) is not None]
        peak = bar_scale(b, bars)
        label = f"{b['case']}  {b['label']}"
        out.append(
            f'<text x="{left - 10}" y="{y + bar_h - 3}" text-anchor="end" font-weight="bold">{escape(label)}</text>'
        )
        for _key, name, colour, v in values:
            w = max(1.0, plot * v / peak) if v > 0 else 0.0
            out.append(
                f'<rect x="{left}" y="{y}" width="{w:.1f}" height="{bar_h}" fill="{colour}"><title>{escape(label)} · {escape(name)}: {escape(fmt_s(v))}</title></rect>'
            )
            out.append(f'<text x="{left + w + 6:.1f}" y="{y + bar_h - 3}" fill="#333">{escape(fmt_s(v))}</text>')
            y += bar_h + gap
        y += group_gap
        out.append(
            f'<line x1="{left}" x2="{width - 16}" y1="{y - group_gap / 2:.1f}" y2="{y - group_gap / 2:.1f}" stroke="#eee"/>'
        )
    out.append("</svg>")
    path.write_text("\n".join(out) + "\n", encoding="utf-8")


# --- JSON --------------------------------------------------------------------------


def _clean(obj: Any) -> Any:
    """JSON has no NaN: write null instead."""
    if isinstance(obj, float) and (math.isnan(obj) or math.isinf(obj)):
        return None
    if isinstance(obj, dict):
        return {k: _clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_clean(v) for v in obj]
    if isinstance(obj, Path):
        return str(obj)
    return obj


def write_json(results: dict[str, Any], path: Path) -> None:
    path.write_text(json.dumps(_clean(results), indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


# --- RESULTS.md --------------------------------------------------------------------


def _md_escape(text: str) -> str:
    return text.replace("|", "\\|")


def write_markdown(results: dict[str, Any], path: Path, chart: Path) -> None:
    m = results["machine"]
    pk = m["packages"]
    lines = [
        "# Benchmark results",
        "",
        f"Generated by `{results['command']}` on {results['generated']}; the whole run took {results['duration_s']:.0f} s.",
        "Every figure is a median over the runs of one process run; every ratio compares figures measured in that same run.",
        f"Raw figures (every sample, min and max) are in `{os.path.relpath(results['paths']['json'], path.parent)}`; the chart is `{os.path.relpath(chart, path.parent)}`.",
        "",
        "## Machine",
        "",
        "| | |",
        "|---|---|",
        f"| cores (`nproc`) | {m['nproc']} |",
        f"| CPU | {_md_escape(m['cpu_model'])} |",
        f"| Python | {m['python']} ({m['implementation']}) |",
        f"| platform | {_md_escape(m['platform'])} |",
        "| packages | " + ", ".join(f"{k} {v}" for k, v in pk.items() if v) + " |",
        f"| load average (1, 5, 15 min) | {results.get('load_before')} before, {results.get('load_after')} after |",
        f"| runs per figure | {results['options']['runs']}{' (--quick)' if results['options']['quick'] else ''} |",
        f"| source measured | commit {m['tree']['commit']}"
        + (f", with uncommitted changes to {', '.join(m['tree']['modified'])}" if m["tree"]["modified"] else "")
        + " |",
        "",
    ]
    load = (results.get("load_before") or [0])[0]
    if load and m["nproc"] and load > m["nproc"]:
        lines += [
            f"> The machine was busy with other work (load average {load} on {m['nproc']} cores): latencies that hinge on a",
            "> thread or process being scheduled quickly (thread hand-offs, MCP round trips, process start) read high here.",
            "",
        ]
    lines += [
        "## Targets",
        "",
        "| case | target | limit | measured | measured ÷ limit | met |",
        "|---|---|---:|---:|---:|---|",
    ]
    for c in all_checks(results):
        lines.append(
            f"| {c['case']} | {_md_escape(c['name'].split(': ', 1)[-1])} ({_md_escape(c['what'])}) | {limit_text(c)} | {measured_text(c)} | {over_limit(c)} | {'met' if c['met'] else '**not met**'} |"
        )
    for letter, case in results["cases"].items():
        if case.get("error"):
            lines.append(
                f"| {letter} | {_md_escape(case['title'])} | | | | **error**: {_md_escape(case['error'].splitlines()[-1])} |"
            )
        elif case.get("skipped"):
            lines.append(f"| {letter} | {_md_escape(case['title'])} | | | | skipped: {_md_escape(case['skipped'])} |")
    rows = side_by_side(results)
    if rows:
        lines += [
            "",
            "## Peers, side by side",
            "",
            "Each row is the same thing measured on the engine and on a system a user would pick instead, in this run on this machine.",
            "",
            "| case | what | engine | peer | peer's | engine ÷ peer | how |",
            "|---|---|---:|---|---:|---:|---|",
        ]
        for r in rows:
            lines.append(
                f"| {r['case']} | {_md_escape(r['what'])} | {fmt_value(r['engine'], r['unit'])} | {r['peer']} | {fmt_value(r['peer_value'], r['unit'])} | {_ratio(r)} | {_md_escape(r.get('note', ''))} |"
            )
    lines += ["", f"![chart]({os.path.relpath(chart, path.parent)})", ""]

    p = results["cases"].get("p")
    if p and p.get("comparison"):
        lines += [
            "## Proposed engine changes, measured",
            "",
            "The diffs in `benchmarks/proposed/` were applied to a temporary copy of `vodou_engine`, and cases",
            f"{', '.join(p['cases'])} ran against the shipped package and against the copy, one after the other, in this run",
            f"({p['runs']} runs each). Applied to the copy: {', '.join(p['applied']) or 'none'}."
            + (f" Already in the tree, so in both columns: {', '.join(p['present'])}." if p.get("present") else "")
            + (f" Did not apply: {', '.join(p['failed'])}." if p.get("failed") else ""),
            "",
            "| target | limit | shipped | with the diffs | with ÷ shipped | met (shipped → with the diffs) |",
            "|---|---:|---:|---:|---:|---|",
        ]
        for r in p["comparison"]:
            ratio = f"{r['ratio']:.2f}" if r["ratio"] == r["ratio"] else "n/a"
            lines.append(
                f"| {_md_escape(r['name'])} | {r['limit_text']} | {r['shipped_text']} | {r['proposed_text']} | {ratio} | {_met(r['shipped_met'])} → {_met(r['proposed_met'])} |"
            )
        if p.get("extra"):
            lines += ["", "| other figure | shipped | with the diffs | with ÷ shipped |", "|---|---:|---:|---:|"]
            for r in p["extra"]:
                lines.append(
                    f"| {_md_escape(r['label'])} | {r['shipped_text']} | {r['proposed_text']} | {r['ratio']:.2f} |"
                )
        lines.append("")

    lines += ["## Figures by case", ""]
    for letter, case in results["cases"].items():
        if letter == "p":
            continue
        lines += [f"### {letter}. {_md_escape(case['title'])}", ""]
        if case.get("error"):
            lines += ["```", case["error"].rstrip(), "```", ""]
            continue
        if case.get("skipped"):
            lines += [f"Skipped: {case['skipped']}", ""]
            continue
        dur = case.get("duration_s")
        lines += [f"Took {dur:.1f} s." if dur is not None else "", ""]
        lines += ["| figure | median | min – max | n |", "|---|---:|---:|---:|"]
        for f in case["figures"].values():
            n = len(f["samples"])
            rng = f"{fmt_value(f['min'], f['unit'])} – {fmt_value(f['max'], f['unit'])}" if n > 1 else ""
            lines.append(f"| {_md_escape(f['label'])} | {fmt_value(f['value'], f['unit'])} | {rng} | {n} |")
        lines.append("")
        for note in case.get("notes", []):
            lines += [f"{note}", ""]
        for title, text in case.get("profiles", {}).items():
            lines += [f"Profile: {title}", "", "```", text.rstrip(), "```", ""]
    path.write_text("\n".join(lines).rstrip() + "\n", encoding="utf-8")
