"""The collector around the SDK's import: paused and frozen only in a process the CLI owns."""

from __future__ import annotations

import subprocess
import sys

CHECK = (
    "import gc, sys\n"
    "from vodou_engine import gcpause\n"
    "if sys.argv[1] == 'own': gcpause.own_process()\n"
    "seen = []\n"
    "with gcpause.paused_for_import():\n"
    "    seen.append(gc.isenabled())\n"
    "    keep = [[i] for i in range(1000)]\n"
    "print(seen[0], gc.isenabled(), gc.get_freeze_count() >= 1000)\n"
)


def _run(mode: str) -> str:
    return subprocess.run(
        [sys.executable, "-c", CHECK, mode], capture_output=True, text=True, check=True, timeout=60
    ).stdout.split()


def test_the_cli_process_pauses_the_collector_for_the_import_then_freezes_what_it_built():
    assert _run("own") == ["False", "True", "True"]


def test_an_embedding_program_keeps_its_collector_as_it_was():
    assert _run("library") == ["True", "True", "False"]
