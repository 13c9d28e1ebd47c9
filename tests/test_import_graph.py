"""The import graph keeps the layering docs/architecture.md describes.

Every module under vodou_engine/ is parsed (``ast``; nothing is imported)
and each ``import``/``from ... import`` of the package becomes an edge,
whether it sits at module level or inside a function.

(a) No import cycle among the imports that run, wherever they sit: the
    module body (including ``if``/``try``/``with`` blocks and class
    bodies) or a function body. Only ``if TYPE_CHECKING:`` blocks are left
    out: they never run. An import inside a function would keep a cycle
    from failing at load time, but the two modules would still each need
    the other, and neither could be read, tested or moved alone; a name
    both need goes to a module below both instead (compiler/words.py holds
    the reserved words the parser's error explanations and lowering share).

(b) Nothing below the CLI imports it. The CLI is ``vodou_engine/cli.py`` (the
    entry point: arguments and dispatch), ``vodou_engine/commands/`` (what each
    command does) and ``vodou_engine/views/`` (what they print). Outside those,
    no import at any level (functions and ``TYPE_CHECKING`` blocks included),
    and no module name given as a string (``importlib.import_module``), names
    ``vodou_engine.cli``, ``vodou_engine.commands`` or ``vodou_engine.views``.
    ``vodou_engine/__main__.py`` is the one exception: it is what ``python -m
    vodou_engine`` runs, the CLI's own entry point (as the ``recipe`` script
    is), not a module below it. Within the CLI the layers go one way: commands
    use views/ and their shared modules (``commands/exits.py``,
    ``commands/common.py``), never ``cli.py``; views/ use neither.

(c) ``cli.py`` names no command module but ``commands/exits.py`` (what it needs
    before it knows the command): it imports the one chosen by its name, at run
    time, so ``recipe --help`` and every command load only their own.

(d) No import goes up a layer. Every top-level module and package of
    vodou_engine/ belongs to one layer of :data:`LAYERS` (a new one must be
    given its place there); a module may import its own layer and the ones
    below it, never one above, at any level (functions and ``TYPE_CHECKING``
    blocks included). The run API sits below everything that drives runs or
    shows them: the workers, the service, the agents' server, the web inbox
    and the CLI import it, and it imports none of them (what it needs of the
    workers' queue is ``jobs.py``, below it; the warm servers the service and
    the workers share are ``tools/pool.py``). docs/architecture.md lists the
    same layers ("Rules of the import graph"), and a test holds the two equal.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

PACKAGE = "vodou_engine"
ROOT = Path(__file__).resolve().parent.parent / PACKAGE
CLI_ENTRY_POINTS = {f"{PACKAGE}.__main__"}
CLI = re.compile(rf"{PACKAGE}\.(cli|commands|views)(\..*)?")  # the CLI's modules; nothing below may name them
# Within the CLI, each layer may not name the ones above it.
LAYER_MAY_NOT_NAME = {
    f"{PACKAGE}.commands": re.compile(rf"{PACKAGE}\.cli(\..*)?"),
    f"{PACKAGE}.views": re.compile(rf"{PACKAGE}\.(cli|commands)(\..*)?"),
}

LAYERS: list[tuple[str, set[str]]] = [
    # (what the layer is, its top-level modules and packages), highest first; docs/architecture.md
    ("the command line", {"__main__", "cli", "commands", "views"}),
    ("the web inbox", {"web"}),
    ("long-running surfaces", {"service", "agents", "notify"}),
    ("the workers", {"workers"}),
    ("the run API", {"runs"}),
    ("running a plan", {"runtime", "cards", "planning", "toolcache", "scheduler"}),
    ("reaching servers", {"tools", "binding", "servers", "launch", "masking", "gcpause"}),
    ("compiling", {"compiler", "graph", "policy", "bounds"}),
    ("the store and its queue", {"store", "jobs"}),
    # `""` is the package's own __init__.py: __version__, and the public names as strings, loaded on first use
    (
        "what every layer shares",
        {
            "plan",
            "reports",
            "states",
            "errors",
            "limits",
            "text_safety",
            "osuser",
            "owners",
            "standalone",
            "logs",
            "demo",
            "",
        },
    ),
]
LAYER_OF = {unit: depth for depth, (_, units) in enumerate(LAYERS) for unit in units}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {module_name(p): p for p in sorted(ROOT.rglob("*.py"))}


def targets(module: str, is_package: bool, node: ast.Import | ast.ImportFrom) -> list[str]:
    """The modules of this package an import statement loads (most specific known name)."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names if a.name == PACKAGE or a.name.startswith(PACKAGE + ".")]
    if node.level:
        base = module.split(".") if is_package else module.split(".")[:-1]
        base = base[: len(base) - (node.level - 1)]
        full = ".".join(base) + (f".{node.module}" if node.module else "")
    else:
        full = node.module or ""
    if full != PACKAGE and not full.startswith(PACKAGE + "."):
        return []
    out = []
    for alias in node.names:
        sub = f"{full}.{alias.name}"
        out.append(
            sub if sub in MODULES else full
        )  # `from . import ast` imports a module; `from .x import y` a name of x
    return out


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def import_time_imports(tree: ast.Module, functions: bool = False) -> list[ast.Import | ast.ImportFrom]:
    """Import statements that run when the module itself is imported (and, with ``functions``, when its functions run)."""
    found: list[ast.Import | ast.ImportFrom] = []

    def walk(statements: list[ast.stmt]) -> None:
        for s in statements:
            if isinstance(s, (ast.Import, ast.ImportFrom)):
                found.append(s)
            elif isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef)):
                if functions:
                    walk(s.body)
            elif isinstance(s, ast.If) and _is_type_checking(s.test):
                walk(s.orelse)
            else:
                for field in ("body", "orelse", "finalbody"):
                    walk([x for x in getattr(s, field, []) if isinstance(x, ast.stmt)])
                for handler in getattr(s, "handlers", []):
                    walk(handler.body)
                for case in getattr(s, "cases", []):
                    walk(case.body)

    walk(tree.body)
    return found


def graphs() -> tuple[dict[str, set[str]], dict[str, set[str]], dict[str, set[str]], dict[str, ast.Module]]:
    """(imports at import time, imports that run at all, imports at any level, parsed trees), per module."""
    now: dict[str, set[str]] = {}
    run: dict[str, set[str]] = {}
    anywhere: dict[str, set[str]] = {}
    trees: dict[str, ast.Module] = {}
    for name, path in MODULES.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        trees[name] = tree
        is_package = path.name == "__init__.py"
        anywhere[name] = {
            t
            for n in ast.walk(tree)
            if isinstance(n, (ast.Import, ast.ImportFrom))
            for t in targets(name, is_package, n)
            if t != name
        }
        now[name] = {t for n in import_time_imports(tree) for t in targets(name, is_package, n) if t != name}
        run[name] = {
            t for n in import_time_imports(tree, functions=True) for t in targets(name, is_package, n) if t != name
        }
    return now, run, anywhere, trees


NOW, RUN, ANYWHERE, TREES = graphs()


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle (as a path that returns to its start) per strongly connected group of modules."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []
    counter = 0

    def strong(v: str) -> None:
        nonlocal counter
        index[v] = low[v] = counter
        counter += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in MODULES:
                continue
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                groups.append(group)

    for v in sorted(MODULES):
        if v not in index:
            strong(v)
    return [_path_within(graph, set(g)) for g in groups]


def _path_within(graph: dict[str, set[str]], group: set[str]) -> list[str]:
    start = min(group)
    seen = {start: [start]}
    frontier = [start]
    while frontier:
        v = frontier.pop(0)
        for w in sorted(graph[v] & group):
            if w == start:
                return seen[v] + [start]
            if w not in seen:
                seen[w] = seen[v] + [w]
                frontier.append(w)
    raise AssertionError(f"no cycle through {start}")  # pragma: no cover


def unit_of(module: str) -> str:
    """The top-level module or package of vodou_engine a module belongs to (``""``: the package's own __init__)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def layer_name(module: str) -> str:
    return LAYERS[LAYER_OF[unit_of(module)]][0]


def test_the_graph_is_read_as_the_code_says():
    """The parser above sees what it must, or the checks below would pass on nothing."""
    assert len(MODULES) > 40
    assert f"{PACKAGE}.reports" in NOW[f"{PACKAGE}.runs.views"]
    assert f"{PACKAGE}.runtime.scheduler" in NOW[f"{PACKAGE}.runtime.driver"]
    assert f"{PACKAGE}.store" in NOW[f"{PACKAGE}.runtime.journal"]  # `from ..store import NodeRecord`
    assert (
        f"{PACKAGE}.runtime.driver" in ANYWHERE[f"{PACKAGE}.runs.lifecycle"] - NOW[f"{PACKAGE}.runs.lifecycle"]
    )  # in a function
    assert f"{PACKAGE}.views.report" in NOW[f"{PACKAGE}.commands.run"]
    assert f"{PACKAGE}.commands.exits" in NOW[f"{PACKAGE}.cli"]
    assert f"{PACKAGE}.tools.process" not in NOW[f"{PACKAGE}.tools.hub"]  # only under TYPE_CHECKING there
    assert f"{PACKAGE}.runtime.driver" in RUN[f"{PACKAGE}.runs.lifecycle"]  # an import in a function runs
    assert (
        f"{PACKAGE}.tools.process" in ANYWHERE[f"{PACKAGE}.tools.hub"] - RUN[f"{PACKAGE}.tools.hub"]
    )  # TYPE_CHECKING never does
    assert (
        unit_of(f"{PACKAGE}.runs.queue") == "runs" and unit_of(PACKAGE) == "" and unit_of(f"{PACKAGE}.jobs") == "jobs"
    )
    assert f"{PACKAGE}.runs" in ANYWHERE[f"{PACKAGE}.workers.engine"]  # the workers stand on the run API
    assert LAYER_OF["workers"] < LAYER_OF["runs"] < LAYER_OF["runtime"] < LAYER_OF["store"]  # higher layers come first


def test_no_import_cycle_at_module_level():
    found = cycles(NOW)
    assert not found, "import cycles among module-level imports:\n" + "\n".join(" -> ".join(c) for c in found)


def test_no_import_cycle_even_through_functions():
    found = cycles(RUN)
    assert not found, "import cycles (counting imports inside functions):\n" + "\n".join(" -> ".join(c) for c in found)


def _names(module: str, pattern: re.Pattern[str]) -> list[str]:
    """Where ``module`` imports, or names as a string, a module ``pattern`` matches."""
    found = [f"{module} imports {target}" for target in sorted(ANYWHERE[module]) if pattern.fullmatch(target)]
    for node in ast.walk(TREES[module]):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and pattern.fullmatch(node.value):
            found.append(f"{module} names {node.value!r} (a dynamic import?)")
    return found


def _in(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def test_nothing_below_the_cli_imports_it():
    offenders = []
    for name in sorted(MODULES):
        if CLI.fullmatch(name) or name in CLI_ENTRY_POINTS:
            continue
        offenders += _names(name, CLI)
    assert not offenders, "below the CLI, only cli.py, commands/ and views/ may use the CLI:\n" + "\n".join(offenders)


def test_the_cli_layers_import_one_way():
    offenders = []
    for layer, pattern in LAYER_MAY_NOT_NAME.items():
        for name in sorted(m for m in MODULES if _in(m, layer)):
            offenders += _names(name, pattern)
    assert any(_in(m, f"{PACKAGE}.commands") for m in MODULES) and any(_in(m, f"{PACKAGE}.views") for m in MODULES)
    assert not offenders, "commands/ may not use cli.py, nor views/ cli.py or commands/:\n" + "\n".join(offenders)


def test_cli_names_no_command_module_but_exits():
    named = {t for t in ANYWHERE[f"{PACKAGE}.cli"] if _in(t, f"{PACKAGE}.commands")}
    assert named == {f"{PACKAGE}.commands.exits"}, (
        f"cli.py imports {sorted(named)}: a command's module is imported by name, when it runs"
    )


def test_every_module_has_a_layer():
    units = {unit_of(name) for name in MODULES}
    missing = sorted(u or "__init__" for u in units if u not in LAYER_OF)
    assert not missing, (
        "give each a place in LAYERS (tests/test_import_graph.py) and docs/architecture.md: " + ", ".join(missing)
    )
    twice = sorted(u for u in LAYER_OF if sum(u in units_ for _, units_ in LAYERS) > 1)
    assert not twice, "in more than one layer: " + ", ".join(twice)


def test_no_import_goes_up_a_layer():
    offenders = []
    for name in sorted(MODULES):
        here = LAYER_OF.get(unit_of(name))
        for target in sorted(ANYWHERE[name]):
            there = LAYER_OF.get(unit_of(target))
            if here is not None and there is not None and there < here:
                offenders.append(f"{name} ({layer_name(name)}) imports {target} ({layer_name(target)})")
    assert not offenders, (
        "imports from a lower layer to a higher one (docs/architecture.md, Rules of the import graph):\n"
        + "\n".join(offenders)
    )


def test_the_layers_are_the_ones_docs_architecture_describes():
    text = (ROOT.parent / "docs" / "architecture.md").read_text(encoding="utf-8")
    section = text.split("## Rules of the import graph", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^  \| ([A-Za-z' -]+) \| (.+) \|$", section, re.M)
    described = []
    for layer, cell in rows[1:]:  # below the header
        own_init = "the package's `__init__.py` (`__version__`"
        units = {re.sub(r"(\.py|/)$", "", name) for name in re.findall(r"`([^`]+)`", cell.replace(own_init, ""))}
        described.append((layer, units | ({""} if own_init in cell else set())))
    assert described == LAYERS
