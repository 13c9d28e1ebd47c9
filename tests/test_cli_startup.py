"""A command loads its own module under vodou_engine/commands/ and nothing another command needs.

``cli.py`` dispatches through ``COMMANDS`` (command → module, function) and imports
the chosen module only when that command runs, so ``recipe --help``, ``runs`` and
``plan --offline`` start without trio or the MCP SDK, and ``--help`` and ``compile``
without the run API or the store. Each claim is read from a new
interpreter that runs the command (``cli.main``) and then lists ``sys.modules``.
"""

from __future__ import annotations

import subprocess
import sys
from importlib import import_module

import pytest
from conftest import RECIPES

from vodou_engine import cli as recipe_cli

HEAVY = ("trio", "mcp", "networkx", "starlette", "hypercorn", "psycopg", "procrastinate", "llm")


# `python -X importtime` would not do: it reports `import` statements, not importlib.import_module.
RUN_AND_LIST = """
import sys
from vodou_engine.cli import main
try:
    code = main(sys.argv[2:])
except SystemExit as exc:
    code = exc.code
with open(sys.argv[1], "w") as f:
    f.write("\\n".join(sorted(sys.modules)))
sys.exit(code)
"""


def loaded(cli, *args: str, expect: int = 0) -> set[str]:
    """The modules a new interpreter running ``recipe ARGS`` has imported when the command ends."""
    listing = cli.tmp / "modules.txt"
    proc = subprocess.run(
        [sys.executable, "-c", RUN_AND_LIST, str(listing), *args],
        cwd=cli.tmp,
        env=cli.env,
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=120,
    )
    assert proc.returncode == expect, f"exit {proc.returncode}, expected {expect}\n{proc.stdout}\n{proc.stderr[-3000:]}"
    return set(listing.read_text().split("\n"))


def commands_loaded(modules: set[str]) -> set[str]:
    return {m.removeprefix("vodou_engine.commands.") for m in modules if m.startswith("vodou_engine.commands.")}


def subcommands(parser) -> set[str]:
    (sub,) = (a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    return set(sub.choices)


def test_every_command_is_done_by_a_function_of_its_module():
    assert subcommands(recipe_cli._parser()) == set(recipe_cli.COMMANDS)
    for command, (module, function) in recipe_cli.COMMANDS.items():
        assert callable(getattr(import_module(f"vodou_engine.commands.{module}"), function, None)), (
            f"`recipe {command}`: commands/{module}.py has no {function}"
        )


@pytest.mark.parametrize(
    ("args", "expect", "own", "absent"),
    [
        (("--help",), 0, set(), {"vodou_engine.runs", "vodou_engine.store"}),
        (
            ("compile", str(RECIPES / "morning-briefing.recipe")),
            0,
            {"compile"},
            {"vodou_engine.runs", "vodou_engine.store"},
        ),
        (("runs",), 0, {"common", "inspect"}, set()),
        (("show", "no-such-run"), 6, {"common", "inspect"}, set()),  # no store yet: exit 6
        (("plan", "--offline", str(RECIPES / "morning-briefing.recipe")), 0, {"common", "compile", "run"}, set()),
    ],
    ids=["help", "compile", "runs", "show", "plan-offline"],
)
def test_a_command_loads_its_own_module_and_nothing_heavy(cli, args, expect, own, absent):
    modules = loaded(cli, *args, expect=expect)
    assert "vodou_engine.cli" in modules and "argparse" in modules  # the listing is read as written
    assert commands_loaded(modules) == {"exits"} | own
    heavy = [m for m in (*HEAVY, *sorted(absent)) if m in modules]
    assert not heavy, f"`recipe {' '.join(args)}` loaded {heavy}"
