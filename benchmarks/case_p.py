"""p. The proposed engine changes, measured against the shipped engine in the same run.

The diffs in ``benchmarks/proposed/`` are applied (with ``git apply``) to a
temporary copy of ``vodou_engine``; the cases they touch then run twice as
subprocesses of this benchmark, once against the shipped package and once
with the copy first on ``PYTHONPATH`` (the subprocesses they start, such as
``python -m vodou_engine approve``, inherit it). Nothing in the source tree
is changed.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from .common import ROOT, Case, Config, TempDir, fmt_value

PROPOSED = Path(__file__).resolve().parent / "proposed"
CASES = ("d", "e", "f", "g", "h", "i")
# figures worth seeing next to the targets (case, key)
EXTRA = (
    ("d", "noop_1000_per_branch_s"),
    ("d", "sleep_1000_run_wall_s"),
    ("d", "thread_limit"),
    ("e", "marginal_per_step_s"),
    ("g", "park_s"),
    ("g", "approve_process_wall_s"),
    ("g", "approve_imports_s"),
    ("h", "compile_10000_s"),
    ("i", "plan_offline_compiling_imports_s"),
)


def _patch(root: Path, diff: Path, *extra: str) -> bool:
    """``git apply`` (it needs no repository): strict, and all hunks or none."""
    argv = ["git", "apply", "-p1", *extra, str(diff)]
    return subprocess.run(argv, cwd=root, capture_output=True, text=True).returncode == 0


def build_copy(dest: Path) -> tuple[Path, list[str], list[str], list[str]]:
    """A patched copy of vodou_engine under ``dest``: (root, applied, already in the tree, failed)."""
    diffs = sorted(PROPOSED.glob("*.diff"))
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    # Which diffs the tree already has: undo them newest first on a scratch copy
    # (a later diff may touch lines next to an earlier one).
    present: list[str] = []
    scratch = dest / "scratch"
    shutil.copytree(ROOT / "vodou_engine", scratch / "vodou_engine", ignore=ignore)
    for diff in reversed(diffs):
        if _patch(scratch, diff, "--reverse", "--check") and _patch(scratch, diff, "--reverse"):
            present.append(diff.stem)
    shutil.rmtree(scratch)
    present.reverse()
    shutil.copytree(ROOT / "vodou_engine", dest / "vodou_engine", ignore=ignore)
    applied, failed = [], []
    for diff in diffs:
        if diff.stem in present:
            continue
        # all or nothing: a diff that no longer fits the tree is left out whole
        if _patch(dest, diff, "--check") and _patch(dest, diff):
            applied.append(diff.stem)
        else:
            failed.append(diff.stem)
    return dest, applied, present, failed


def _run_cases(cfg: Config, out: Path, pythonpath: str, cases: tuple[str, ...], log_prefix: str) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = pythonpath
    argv = [
        sys.executable,
        "-m",
        "benchmarks",
        "--only",
        ",".join(cases),
        "--runs",
        str(cfg.runs),
        "--out",
        str(out),
        "--json-only",
    ]
    if cfg.quick:
        argv.append("--quick")
    # Not the repository as the working directory: `python -m` puts it ahead of
    # PYTHONPATH, and its vodou_engine would shadow the patched copy.
    proc = subprocess.Popen(argv, cwd=out.parent, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert proc.stdout is not None
    for line in proc.stdout:
        cfg.log(f"{log_prefix}{line.rstrip()}")
    if proc.wait() != 0:
        raise RuntimeError(f"benchmark subprocess ({log_prefix.strip()}) exited {proc.returncode}")
    return json.loads((out / "results.json").read_text())


def run(cfg: Config) -> Case:
    case = Case("p", "proposed engine changes (benchmarks/proposed/*.diff) vs the shipped engine, same run")
    cases = tuple(c for c in CASES if not cfg.quick or c in ("d", "e"))
    with TempDir("p") as tmp:
        root, applied, present, failed = build_copy(tmp / "patched")
        if not applied:
            case.note("Every proposed diff is already in the tree or no longer applies; nothing to compare.")
            case.extra_json = {"applied": applied, "present": present, "failed": failed, "comparison": []}
            return case.done()
        shipped = _run_cases(cfg, tmp / "shipped-out", str(ROOT), cases, "p/shipped: ")
        proposed = _run_cases(cfg, tmp / "proposed-out", f"{root}{os.pathsep}{ROOT}", cases, "p/diffs:   ")
        used = (shipped["machine"]["vodou_engine_file"], proposed["machine"]["vodou_engine_file"])
        if not used[1].startswith(str(root)) or used[0].startswith(str(root)):
            raise RuntimeError(
                f"the variants did not import the intended packages: shipped {used[0]}, with the diffs {used[1]}"
            )
    comparison = []
    for letter in cases:
        a = shipped["cases"].get(letter, {})
        b = proposed["cases"].get(letter, {})
        bchecks = {c["name"]: c for c in b.get("checks", [])}
        for c in a.get("checks", []):
            d = bchecks.get(c["name"])
            comparison.append(
                {
                    "name": c["name"],
                    "limit_text": "≤ " + fmt_value(c["limit"], c["unit"]),
                    "shipped": c["measured"],
                    "proposed": d["measured"] if d else None,
                    "shipped_text": fmt_value(c["measured"], c["unit"]),
                    "proposed_text": fmt_value(d["measured"], d["unit"]) if d else "error",
                    "ratio": (d["measured"] / c["measured"]) if d and c["measured"] else float("nan"),
                    "shipped_met": c["met"],
                    "proposed_met": d["met"] if d else None,
                }
            )
            case.figure(
                f"{c['name']} (with ÷ shipped)", comparison[-1]["ratio"], "x", f"{c['name']}: with the diffs ÷ shipped"
            )
    extra = []
    for letter, key in EXTRA:
        fa = shipped["cases"].get(letter, {}).get("figures", {}).get(key)
        fb = proposed["cases"].get(letter, {}).get("figures", {}).get(key)
        if fa and fb and fa["value"]:
            extra.append(
                {
                    "label": fa["label"],
                    "shipped_text": fmt_value(fa["value"], fa["unit"]),
                    "proposed_text": fmt_value(fb["value"], fb["unit"]),
                    "ratio": fb["value"] / fa["value"],
                }
            )
    case.extra_json = {
        "packages": {"shipped": used[0], "with_diffs": used[1]},
        "comparison": comparison,
        "extra": extra,
        "applied": applied,
        "present": present,
        "failed": failed,
        "cases": list(cases),
        "runs": cfg.runs,
        "shipped": shipped["cases"],
        "proposed": proposed["cases"],
    }
    if present:
        case.note(f"Already in the tree (so in both columns): {', '.join(present)}.")
    if failed:
        case.note(f"These diffs did not apply to the current tree: {', '.join(failed)}.")
    return case.done()
