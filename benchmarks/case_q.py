"""q. ``recipe plan`` on the bundled recipes: servers started to list tools, against the tool cache.

Each bundled recipe is planned online as a whole process, three ways, in one
clean home (a bytecode cache as an installed copy has one, like case i):

- ``plan --refresh``: every server the recipe names is started and listed,
  as every ``plan`` did before the tool cache (the "before" figure);
- ``plan``: nothing about the servers changed since the last listing, so
  their kept lists are used and nothing is started (the "after" figure;
  target ≤ 0.3 s);
- ``plan --offline``: no server and no tool list at all, the floor.

The recipes on the published servers (``mcp-server-time``, ``mcp-server-git``)
use recipes/published-servers.json; the others the embedded demo servers.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

from .common import ROOT, Case, Config, TempDir, clean_env, engine_argv

RECIPES = sorted((ROOT / "recipes").glob("*.recipe"))
PUBLISHED = ROOT / "recipes" / "published-servers.json"
TARGET_S = 0.3


def _servers(recipe: Path) -> list[str]:
    text = recipe.read_text()
    return ["--servers", str(PUBLISHED)] if "published-servers.json" in text else []


def _time(argv: list[str], env: dict, cwd: Path) -> float:
    t0 = time.perf_counter()
    proc = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=180)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} exited {proc.returncode}: {proc.stderr[-2000:]}")
    return wall


def run(cfg: Config) -> Case:
    case = Case("q", "`recipe plan` on the bundled recipes: every server started, against the tool cache")
    runs = cfg.runs
    recipes = RECIPES[:3] if cfg.quick else RECIPES
    with TempDir("q") as tmp:
        env = clean_env(tmp, cfg, VODOU_DEMO_DB=str(tmp / "demo.db"))
        worst = 0.0
        for recipe in recipes:
            name = recipe.stem
            base = ["plan", str(recipe), *_servers(recipe)]
            try:
                _time(engine_argv(*base, "--refresh", cfg=cfg), env, tmp)  # bytecode, compile memo, tool cache
            except RuntimeError as exc:  # e.g. the published servers' .venv is not in this checkout
                case.note(f"{name}: not measured, its servers do not start here: {str(exc).splitlines()[1:2]}")
                cfg.log(f"q: {name}: skipped (its servers do not start here)")
                continue
            live, kept, offline = [], [], []
            for _ in range(runs):
                live.append(_time(engine_argv(*base, "--refresh", cfg=cfg), env, tmp))
                kept.append(_time(engine_argv(*base, cfg=cfg), env, tmp))
                offline.append(_time(engine_argv(*base, "--offline", cfg=cfg), env, tmp))
            cfg.log(
                f"q: {name}: --refresh {sorted(live)[len(live) // 2] * 1e3:.0f} ms, "
                f"kept {sorted(kept)[len(kept) // 2] * 1e3:.0f} ms, --offline {sorted(offline)[len(offline) // 2] * 1e3:.0f} ms"
            )
            lv = case.figure(
                f"{name}_refresh_s", live, "s", f"`plan {name}` --refresh: every server started and listed"
            )
            kv = case.figure(f"{name}_kept_s", kept, "s", f"`plan {name}`: the servers unchanged, their kept lists")
            case.figure(f"{name}_offline_s", offline, "s", f"`plan {name}` --offline: the floor")
            case.check(f"q: plan {name}, nothing changed", kv, TARGET_S, unit="s", what="whole process, median")
            case.bar(f"{name} --refresh", wall_s=lv, sum_s=None, slowest_s=None)
            case.bar(f"{name} kept", wall_s=kv, sum_s=None, slowest_s=None)
            worst = max(worst, kv)
        case.figure("kept_worst_s", worst, "s", "`plan` with kept lists: the slowest bundled recipe (median)")
    return case.done()
