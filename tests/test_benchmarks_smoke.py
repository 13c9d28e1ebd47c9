"""The benchmark runs end to end (quick, cases a and e) and writes its outputs, and every
case still names only engine modules and functions that exist.

No timing assertions: the figures depend on the machine and its load.
"""

from __future__ import annotations

import ast
import importlib
import json
import math
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _numeric(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def test_every_benchmark_names_engine_code_that_exists():
    """The cases import the engine inside ``run()``: a renamed or removed module or function
    would only show when the case runs. Check every ``from vodou_engine... import ...`` here."""
    missing = []
    for path in sorted((ROOT / "benchmarks").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if (
                isinstance(node, ast.ImportFrom)
                and node.module
                and node.level == 0
                and node.module.split(".")[0] == "vodou_engine"
            ):
                try:
                    module = importlib.import_module(node.module)
                except ImportError as exc:
                    missing.append(f"{path.name}:{node.lineno}: {node.module} ({exc})")
                    continue
                for alias in node.names:
                    if not hasattr(module, alias.name):
                        try:
                            importlib.import_module(f"{node.module}.{alias.name}")
                        except ImportError:
                            missing.append(f"{path.name}:{node.lineno}: {node.module}.{alias.name}")
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.split(".")[0] == "vodou_engine":
                        try:
                            importlib.import_module(alias.name)
                        except ImportError as exc:
                            missing.append(f"{path.name}:{node.lineno}: {alias.name} ({exc})")
    assert not missing, "benchmarks name engine code that no longer exists:\n" + "\n".join(missing)


def test_every_case_is_listed_and_has_a_run_function():
    sys.path.insert(0, str(ROOT))
    try:
        from benchmarks.__main__ import CASES, MODULES

        for path in sorted((ROOT / "benchmarks").glob("case_*.py")):
            letter = path.stem.removeprefix("case_")
            assert letter in CASES, f"{path.name} is not listed in benchmarks/__main__.py CASES"
        for letter in CASES:
            name = MODULES.get(letter, f"case_{letter}")
            module = importlib.import_module(f"benchmarks.{name}")
            assert callable(getattr(module, "run", None)), name
    finally:
        sys.path.remove(str(ROOT))


def test_quick_benchmark_writes_json_svg_and_report(tmp_path):
    out = tmp_path / "results"
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--quick", "--only", "a,e", "--out", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]

    doc = json.loads((out / "results.json").read_text())
    assert set(doc["cases"]) == {"a", "e"}
    assert doc["options"] == {"runs": 3, "quick": True, "only": ["a", "e"]}
    assert doc["machine"]["nproc"] >= 1 and doc["machine"]["python"]
    for letter in ("a", "e"):
        case = doc["cases"][letter]
        assert "error" not in case, case.get("error")
        assert case["figures"], letter
        for name, fig in case["figures"].items():
            assert _numeric(fig["value"]), (letter, name, fig)
            assert fig["samples"] and all(_numeric(s) for s in fig["samples"]), (letter, name)
        assert case["checks"], letter
        for check in case["checks"]:
            assert _numeric(check["measured"]) and _numeric(check["limit"]) and isinstance(check["met"], bool)
        for bar in case["bars"]:
            assert _numeric(bar["wall_s"])
    a = doc["cases"]["a"]["figures"]
    for key in ("together_wall_s", "sum_s", "slowest_work_s", "wall_over_slowest"):
        assert key in a, key
    e = doc["cases"]["e"]["figures"]
    assert e["n_steps"]["value"] == 200 and "per_step_s" in e

    svg = out / "chart.svg"
    assert svg.exists()
    root = ET.parse(svg).getroot()
    assert root.tag.endswith("svg") and len(root) > 3

    # a run with --out writes its report beside the results, never over benchmarks/RESULTS.md
    report = (out / "RESULTS.md").read_text()
    assert "## Targets" in report and "| a |" in report and "| e |" in report
