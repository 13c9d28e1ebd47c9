"""The docs cannot rot: the run API's example runs, and what the pages name exists.

- docs/python-api.md's example is taken from the page and run as it is, in an
  empty directory with ``VODOU_STORE`` pointing there.
- Every error ``code`` in the package is in python-api.md's table, and every
  code the table lists is still raised somewhere.
- Every test a page names (``test_file.py::test_name``) exists, and every row
  of safety.md's table names at least one.
- Every command of ``recipe`` and every long flag it takes is in cli.md, in
  that command's row.
"""

from __future__ import annotations

import argparse
import ast
import functools
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
TESTS = ROOT / "tests"
PACKAGE = ROOT / "vodou_engine"
MARKER = "<!-- tested: tests/test_docs.py runs the next block -->"


def example_block(page: Path) -> str:
    text = page.read_text(encoding="utf-8")
    assert MARKER in text, f"{page.name} lost the marker before its tested example: {MARKER}"
    m = re.match(r"\s*```python\n(.*?)\n```", text.split(MARKER, 1)[1], re.S)
    assert m, f"{page.name}: the marker must be followed by a ```python block"
    return m.group(1) + "\n"


def test_the_python_api_example_runs(tmp_path):
    (tmp_path / "example.py").write_text(example_block(DOCS / "python-api.md"), encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith("VODOU_")}
    env.update(
        VODOU_STORE=str(tmp_path / "runs.db"),
        XDG_CONFIG_HOME=str(tmp_path / "config"),  # no policy or server file of the person running the tests
        XDG_DATA_HOME=str(tmp_path / "data"),
        XDG_CACHE_HOME=str(tmp_path / "cache"),
    )
    proc = subprocess.run(
        [sys.executable, "example.py"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 0, f"the example in docs/python-api.md failed:\n{proc.stdout}\n{proc.stderr}"

    from vodou_engine.runs import Runs

    runs = Runs(store=tmp_path / "runs.db")  # the run went where VODOU_STORE said
    try:
        (listed,) = runs.list()
        assert listed.state == "succeeded" and listed.started_by == "ana"
        assert [(a.state, a.decided_by) for a in runs.show(listed.run).approvals] == [("approved", "ana")]
    finally:
        runs.close()


# --- error codes -----------------------------------------------------------------------------
def codes_in_the_package() -> dict[str, str]:
    """code -> the class that declares it, from every ``code = "..."`` in a class body."""
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.ClassDef):
                continue
            for stmt in node.body:
                if (
                    isinstance(stmt, ast.Assign)
                    and [getattr(t, "id", None) for t in stmt.targets] == ["code"]
                    and isinstance(stmt.value, ast.Constant)
                    and isinstance(stmt.value.value, str)
                ):
                    found[stmt.value.value] = f"{path.relative_to(ROOT)}:{node.name}"
    return found


def codes_in_the_table() -> set[str]:
    text = (DOCS / "python-api.md").read_text(encoding="utf-8")
    section = text.split("## Errors", 1)[1].split("\n## ", 1)[0]
    return set(re.findall(r"^\| `([a-z_.]+)` \|", section, re.M))


def test_every_error_code_is_documented():
    package, table = codes_in_the_package(), codes_in_the_table()
    assert len(package) > 20, "the scan of the package found too few codes to be right"
    missing = sorted(set(package) - table)
    assert not missing, "docs/python-api.md (## Errors) lacks: " + ", ".join(f"{c} ({package[c]})" for c in missing)
    gone = sorted(table - set(package))
    assert not gone, "docs/python-api.md (## Errors) lists codes nothing declares: " + ", ".join(gone)


# --- tests the docs cite -------------------------------------------------------------------------
CITED = re.compile(r"\b(test_\w+\.py)::(test_\w+)")


@functools.cache  # a file is cited by many rows: parsed once
def functions_named_test(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return {
        n.name
        for n in ast.walk(tree)
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name.startswith("test_")
    }


def test_every_test_the_docs_name_exists():
    cited = {
        (page.name, f, t)
        for page in sorted(DOCS.glob("*.md"))
        for f, t in CITED.findall(page.read_text(encoding="utf-8"))
    }
    assert len(cited) > 30, "safety.md should name the tests that prove each promise"
    missing = []
    for page, file, name in sorted(cited):
        path = TESTS / file
        if not path.is_file() or name not in functions_named_test(path):
            missing.append(f"docs/{page}: {file}::{name}")
    assert not missing, "docs name tests that do not exist:\n" + "\n".join(missing)


def test_every_safety_promise_names_a_test():
    text = (DOCS / "safety.md").read_text(encoding="utf-8")
    table = text.split("| promise | how | test |", 1)[1].split("\n\n", 1)[0]
    rows = [line for line in table.strip().splitlines()[1:] if line.startswith("| ")]
    assert len(rows) > 15
    bare = [row.split("|")[1].strip() for row in rows if not CITED.search(row.rsplit("|", 2)[-2])]
    assert not bare, "safety.md promises with no test named in their last column: " + ", ".join(bare)


# --- the command line ----------------------------------------------------------------------------
def commands(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()):
    """(command words, its long flags) for every leaf command."""
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    for action in subs:
        for name, sub in action.choices.items():
            yield from commands(sub, (*path, name))
    if path and not subs:
        flags = sorted({s for a in parser._actions for s in a.option_strings if s.startswith("--") and s != "--help"})
        yield " ".join(path), flags


def cli_rows() -> dict[str, str]:
    """cli.md's command table: command words (before the first argument) -> the row."""
    rows = {}
    for line in (DOCS / "cli.md").read_text(encoding="utf-8").splitlines():
        m = re.match(r"\| `([^`]+)` \|", line)
        if m:
            words = []
            for word in m.group(1).split():
                if not re.fullmatch(r"[a-z][a-z-]*", word):
                    break
                words.append(word)
            rows.setdefault(" ".join(words), line)
    return rows


def test_every_command_and_flag_is_in_cli_md():
    from vodou_engine import cli

    parser = cli._parser()
    rows = cli_rows()
    found = list(commands(parser))
    assert len(found) > 10
    problems = []
    for command, flags in found:
        row = rows.get(command)
        if row is None:
            problems.append(f"`{command}` has no row")
            continue
        problems += [
            f"`{command}` row lacks {flag}"
            for flag in flags
            if not re.search(rf"`{re.escape(flag)}\b", row) and f"/{flag}" not in row
        ]
    assert "--version" in (DOCS / "cli.md").read_text(encoding="utf-8")
    assert not problems, "docs/cli.md is behind `recipe --help`:\n" + "\n".join(problems)


@pytest.mark.parametrize("page", sorted(p.name for p in DOCS.glob("*.md")))
def test_links_between_pages_resolve(page):
    text = (DOCS / page).read_text(encoding="utf-8")
    for target, anchor in re.findall(r"\]\(([\w.-]+\.md)(?:#([\w-]+))?\)", text):
        assert (DOCS / target).is_file(), f"docs/{page} links to {target}, which does not exist"
        if anchor:
            headings = re.findall(r"^#+ (.+)$", (DOCS / target).read_text(encoding="utf-8"), re.M)
            slugs = {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in headings}
            assert anchor in slugs, f"docs/{page} links to {target}#{anchor}, which has no such heading"
