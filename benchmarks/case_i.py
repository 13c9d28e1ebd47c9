"""i. CLI cold start: ``recipe --help`` and ``recipe plan --offline`` as whole processes.

Measured with the console script (``.venv/bin/recipe``, else ``python -m
vodou_engine``), in a clean environment. The main figures use a bytecode
cache in a temporary directory (``PYTHONPYCACHEPREFIX``, warmed by one
unmeasured run), the way an installed copy runs. The package is installed
editable here and the environment sets PYTHONDONTWRITEBYTECODE, so without
that cache every process compiles vodou_engine from source; that is measured
too, as information. ``recipe plan`` keeps a memo of verified compiles (in
``$XDG_CACHE_HOME``, a temporary directory here): ``plan --offline`` is
measured as a memo hit (after one unmeasured run) and with the memo off
(``VODOU_NO_CACHE=1``), which compiles and verifies every time.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from .common import ROOT, Case, Config, TempDir, clean_env, importtime_summary, importtime_text

RECIPE = ROOT / "recipes" / "morning-briefing.recipe"


def command(cfg: Config) -> list[str]:
    script = Path(sys.executable).with_name("recipe")
    if script.exists():
        return [str(script)]
    return [sys.executable, "-m", "vodou_engine"]


def _time(argv: list[str], env: dict, cwd: Path) -> tuple[float, subprocess.CompletedProcess]:
    t0 = time.perf_counter()
    proc = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=120)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} exited {proc.returncode}: {proc.stderr[-2000:]}")
    return wall, proc


def run(cfg: Config) -> Case:
    case = Case("i", "CLI cold start: `recipe --help`, `recipe plan --offline` (whole processes)")
    base = command(cfg)
    runs = max(cfg.runs, 5) if not cfg.quick else cfg.runs
    commands = {
        "help": (["--help"], 0.3, "`recipe --help`", {}),
        # `plan` keeps a memo of verified compiles: the first run compiles, later ones reuse it
        "plan_offline": (
            ["plan", "--offline", str(RECIPE)],
            0.5,
            "`recipe plan --offline recipes/morning-briefing.recipe` (memo hit)",
            {},
        ),
        "plan_offline_compiling": (
            ["plan", "--offline", str(RECIPE)],
            0.5,
            "`recipe plan --offline recipes/morning-briefing.recipe` (memo off: compiles)",
            {"VODOU_NO_CACHE": "1"},
        ),
    }
    with TempDir("i") as tmp:
        cached = clean_env(tmp, cfg)
        if "PYTHONPYCACHEPREFIX" not in cached:
            cached.pop("PYTHONDONTWRITEBYTECODE", None)
            cached["PYTHONPYCACHEPREFIX"] = str(tmp / "pycache")
        uncached = {k: v for k, v in cached.items() if k != "PYTHONPYCACHEPREFIX"}
        uncached["PYTHONDONTWRITEBYTECODE"] = os.environ.get("PYTHONDONTWRITEBYTECODE", "")
        if not uncached["PYTHONDONTWRITEBYTECODE"]:
            uncached.pop("PYTHONDONTWRITEBYTECODE")
        for key, (args, limit, label, extra) in commands.items():
            env_warm, env_cold = {**cached, **extra}, {**uncached, **extra}
            _time(base + args, env_warm, tmp)  # writes the bytecode cache (and the plan memo)
            warm, cold = [], []
            for _ in range(runs):
                warm.append(_time(base + args, env_warm, tmp)[0])
                cold.append(_time(base + args, env_cold, tmp)[0])
                cfg.log(f"i: {key} {warm[-1] * 1e3:.0f} ms (no bytecode cache: {cold[-1] * 1e3:.0f} ms)")
            w = case.figure(f"{key}_s", warm, "s", f"{label} (bytecode cached)")
            case.figure(
                f"{key}_no_pyc_s",
                cold,
                "s",
                f"{label} without a bytecode cache for vodou_engine (as this environment runs it)",
            )
            case.check(f"i: {label}", w, limit, unit="s", what="whole process, median, bytecode cached")
            case.bar(key.replace("_", " "), wall_s=w, sum_s=None, slowest_s=None)
            if w > limit or key == "plan_offline_compiling":
                env = dict(env_warm)
                proc = subprocess.run(
                    [sys.executable, "-X", "importtime", "-m", "vodou_engine", *args],
                    env=env,
                    cwd=tmp,
                    capture_output=True,
                    text=True,
                    stdin=subprocess.DEVNULL,
                    timeout=120,
                )
                summary = importtime_summary(proc.stderr)
                case.figure(
                    f"{key}_imports_s", summary["total_s"], "s", f"{label}: time in imports (-X importtime, one run)"
                )
                case.profiles[f"{label} -X importtime"] = importtime_text(summary)
        base_python = [sys.executable, "-c", "pass"]
        _time(base_python, cached, tmp)
        py = [_time(base_python, cached, tmp)[0] for _ in range(runs)]
        case.figure("python_startup_s", py, "s", "bare `python -c pass` (same environment): the floor")
    return case.done()
