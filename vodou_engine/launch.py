"""What starting a server reaches on disk, seen from the directory it starts in.

A command line such as ``python3 chat.py`` or ``python3 -m chat`` means
different programs in different directories: the program looks ``chat.py``
up relative to its working directory, ``-m`` puts that directory first on
``sys.path``, and ``./server`` or a relative ``PATH`` entry are found from
it too. So a server's binding (``binding.py``) records the directory it
starts in and, from there, the files its command line reaches:

- the command, found as ``exec`` finds it (``PATH`` entries that are
  relative, or empty, count from the start directory);
- every argument (or the value of a ``--name=value`` argument) that names an
  existing file or directory;
- for ``-m NAME``, the module's files in the start directory (a ``.py``, a
  package's ``__init__.py`` and ``__main__.py``, a compiled or extension
  module), present or not: one that appears later shadows the installed one.

The code that runs is often named through something in between, and is
found the same way: a file named relative to a directory named before it
(``uv --directory srv run chat.py``, ``env -C srv python3 chat.py``); the
words of an argument that is itself a command line (``sh -c "cd srv &&
python3 chat.py"``); the modules Python code given with ``-c`` imports
(``python3 -c "import chat"``: ``-c`` puts the directory first on
``sys.path`` too); the module's files in each ``PYTHONPATH`` entry the server
gets, and a ``sitecustomize`` or ``usercustomize`` there (Python imports them
before any server code); and a code file an environment value names
(``LD_PRELOAD``). Found that way, only code is bound (``code_only``): a data
file that a server creates as it starts must not refuse its run.

Each is resolved to its real path (links followed), so a link swapped to
another file is another file. *Code* is also bound by content: the
command, the ``-m`` module, and an argument file that is executable or has a
source suffix (``.py``, ``.js``, ...). A file of at most
:data:`MAX_DIGEST_BYTES` is identified by the sha256 of its bytes; a larger
one (an interpreter, a bundled server) by its size and modification time.
Any other file (a database, a log, a settings file) is bound by its path
only: a server writes to its own data as it works, and binding that content
would refuse every run whose server wrote to it.

Standard library only, and cheap: the content of a file is read once per
process while it is unchanged (the cache is keyed on device, inode, size,
modification and change times, and the change time cannot be set back).
"""

from __future__ import annotations

import hashlib
import os
import re
import shlex
import stat
from collections.abc import Mapping
from typing import NamedTuple

__all__ = ["MAX_DIGEST_BYTES", "Reached", "content_id", "reached", "which"]

MAX_DIGEST_BYTES = 1024 * 1024
"""A code file up to this size is identified by its bytes' sha256; a larger one by size and mtime."""

CODE_SUFFIXES = frozenset({
    ".py", ".pyw", ".pyc", ".pyz", ".pyi", ".js", ".mjs", ".cjs", ".ts", ".mts", ".cts", ".jsx", ".tsx", ".rb", ".pl", ".pm",
    ".php", ".lua", ".sh", ".bash", ".zsh", ".fish", ".ksh", ".ps1", ".bat", ".cmd", ".jar", ".war", ".wasm", ".r", ".jl",
    ".ex", ".exs", ".tcl", ".groovy", ".scala", ".kts", ".clj", ".dart", ".swift", ".go", ".so", ".dylib", ".dll", ".exe",
})  # fmt: skip
"""Suffixes of files that are programs, whatever their mode."""

_MODULE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*\Z")


class Reached(NamedTuple):
    """One file or directory a server's command line reaches."""

    label: str
    """Where it is named: ``command``, ``args[2]``, ``-m chat: chat.py``."""
    path: str
    """Its real path (links followed)."""
    code: bool
    """Bound by content too (see the module docstring)."""
    relative: bool
    """Found from the start directory (a relative path, a relative ``PATH`` entry, a ``-m`` module)."""
    arg: int | None
    """The argument that names it (for ``-m``, the one holding NAME); None for the command."""
    var: str | None = None
    """The environment variable that names it (``PYTHONPATH``, ``LD_PRELOAD``), or None."""


def which(command: str, path: str | None, start: str) -> tuple[str | None, bool]:
    """(where ``exec`` finds ``command`` when started in ``start`` with ``PATH`` = ``path``,
    absolute and with links not followed, or None; whether it was found from ``start``).

    Links are not followed here: two virtualenvs' ``python`` links resolve to one
    interpreter, but run different code (the venv is found from the link's place)."""
    if not command:
        return None, False
    if os.sep in command or (os.altsep and os.altsep in command):
        candidate = os.path.join(start, command)
        return (os.path.abspath(candidate), not os.path.isabs(command)) if _runnable(candidate) else (None, False)
    entries = (os.defpath if path is None else path).split(os.pathsep)
    for entry in entries:
        candidate = os.path.join(start, entry, command)  # "" and relative entries count from start
        if _runnable(candidate):
            return os.path.abspath(candidate), not os.path.isabs(entry)
    return None, False


def _runnable(path: str) -> bool:
    return os.path.isfile(path) and os.access(path, os.X_OK)


def reached(executable: str | None, args: list[str], start: str, env: Mapping[str, str] | None = None) -> list[Reached]:
    """Everything the command line reaches from ``start``, in a stable order. ``env``: the
    environment the server gets (its ``PYTHONPATH``, ``HOME``, and values naming code)."""
    env = env or {}
    out: list[Reached] = []
    if executable is not None:
        out.append(Reached("command", os.path.realpath(executable), True, False, None))
    for i, arg in enumerate(args):
        for text in _path_texts(arg):
            full = os.path.join(start, text)
            if os.path.exists(full):
                real = os.path.realpath(full)
                out.append(Reached(f"args[{i}]", real, _is_code(real), not os.path.isabs(text), i))
                break
    for i, name in _modules(args):
        out.extend(_module_files(name, start, i))
    out.extend(_through_launchers(args, start, env))
    return out


def _through_launchers(args: list[str], start: str, env: Mapping[str, str]) -> list[Reached]:
    """The code named through something in between (module docstring). Only code is
    bound this way; a path taken from an environment value is labelled by its variable."""
    out: list[Reached] = []
    seen = {os.path.realpath(start)}
    # the directories named so far (and as written): later names are looked for there too
    dirs: list[tuple[str, str]] = [(start, "")]
    home = env.get("HOME")
    for i, arg in enumerate(args):
        words = _words(arg)
        line = len(words) > 1  # the argument is a command line
        for word in words[:_MAX_WORDS]:
            if line and home and (word == "~" or word.startswith("~/")):
                word = home + word[1:]  # a shell expands ~ to the server's HOME
            for text in _path_texts(word):
                for base, shown in list(dirs):
                    full = os.path.join(base, text)
                    if not os.path.exists(full):
                        continue
                    real = os.path.realpath(full)
                    written = os.path.join(shown, text)
                    if os.path.isdir(real):
                        if real not in seen and len(dirs) < _MAX_WORDS:
                            seen.add(real)
                            dirs.append((full, written))
                    elif (line or shown) and _is_code(real):  # a plain argument from start is bound already
                        label = f"args[{i}] {written!r}" if line else f"args[{i}] in {shown!r}"
                        out.append(Reached(label, real, True, not os.path.isabs(written), i))
        if line or (i and args[i - 1] == "-c"):
            for name in _imported(arg):
                out.extend(_module_files(name, start, i))
        if line:
            for _, name in _modules(words):
                out.extend(_module_files(name, start, i))
    modules = [name for _, name in _modules(args)] + [name for arg in args for name in _imported(arg)]
    for entry in (env.get("PYTHONPATH") or "").split(os.pathsep):
        folder = os.path.join(start, entry)
        if entry and os.path.realpath(folder) != os.path.realpath(start):
            for name in [*modules, "sitecustomize", "usercustomize"]:
                found = _module_files(name, start, None, folder, label=f"PYTHONPATH {name}")
                out.extend(r._replace(var="PYTHONPATH") for r in found)
    for var in sorted(env):
        if var in ("PATH", "HOME", "PYTHONPATH") or len(env[var]) > 4096:
            continue
        for word in _words(env[var])[:_MAX_WORDS]:
            for text in _path_texts(word):
                full = os.path.join(start, text)
                if os.path.isfile(full) and _is_code(os.path.realpath(full)):
                    out.append(
                        Reached(f"env {var}: {text}", os.path.realpath(full), True, not os.path.isabs(text), None, var)
                    )
    return out


_MAX_WORDS = 256
"""Words of one argument (and directories named) looked at: a command line is short."""


_IMPORT = re.compile(r"(?:^|[\s;])(?:import\s+([\w.]+(?:\s*,\s*[\w.]+)*)|from\s+([\w.]+)\s+import\b)")


def _imported(code: str) -> list[str]:
    """The modules Python code imports by name (``import chat``, ``from chat import main``)."""
    names = []
    for match in _IMPORT.finditer(code):
        for name in (match.group(1) or match.group(2)).split(","):
            name = name.strip()
            if _MODULE_NAME.match(name):
                names.append(name)
    return names


def _words(text: str) -> list[str]:
    """The words of an argument that is a command line (it holds a space), as a shell
    splits them (``&&``, ``;``, parentheses apart); another argument is one word."""
    if not any(ch.isspace() for ch in text):
        return [text]
    lexer = shlex.shlex(text, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    try:
        return list(lexer)
    except ValueError:  # an unclosed quote: the shell would refuse it too
        return text.split()


def _path_texts(arg: str) -> list[str]:
    """The texts of an argument that may name a file: itself, and the value of ``--name=value``."""
    texts = [arg] if arg else []
    if arg.startswith("-") and "=" in arg:
        value = arg.partition("=")[2]
        if value:
            texts.append(value)
    return texts


def _modules(args: list[str]) -> list[tuple[int, str]]:
    """(the argument holding NAME, NAME) of each ``-m NAME`` and ``-mNAME`` (Python's option), wherever they appear."""
    names = []
    for i, arg in enumerate(args):
        if arg == "-m" and i + 1 < len(args):
            at, name = i + 1, args[i + 1]
        elif arg.startswith("-m") and len(arg) > 2:
            at, name = i, arg[2:]
        else:
            continue
        if _MODULE_NAME.match(name):
            names.append((at, name))
    return names


def _module_files(name: str, start: str, arg: int | None, where: str | None = None, label: str = "") -> list[Reached]:
    """The files of module ``name`` (and of its parent packages) found in ``where`` (default
    ``start``), where Python started in ``start`` looks first: ``sys.path[0]`` is the working
    directory under ``-m`` and ``-c``, and ``PYTHONPATH`` comes next."""
    parts = name.split(".")
    found: list[Reached] = []
    folder_of = where or start

    def add(rel: str) -> None:
        full = os.path.join(folder_of, rel)
        if os.path.isfile(full):
            shown = rel if where is None else os.path.relpath(full, start)
            found.append(Reached(f"{label or '-m ' + name}: {shown}", os.path.realpath(full), True, True, arg))

    for depth in range(1, len(parts)):
        add(os.path.join(*parts[:depth], "__init__.py"))
    base = os.path.join(*parts)
    for rel in (base + ".py", base + ".pyc", os.path.join(base, "__init__.py"), os.path.join(base, "__main__.py")):
        add(rel)
    folder, stem = os.path.split(os.path.join(folder_of, base))
    try:
        entries = sorted(os.listdir(folder))
    except OSError:
        entries = []
    for entry in entries:  # extension modules: chat.so, chat.cpython-311-x86_64-linux-gnu.so, chat.pyd
        if entry.startswith(stem + ".") and entry.endswith((".so", ".pyd")):
            add(os.path.join(os.path.dirname(base), entry))
    return found


def _is_code(path: str) -> bool:
    try:
        st = os.stat(path)
    except OSError:
        return False
    if not stat.S_ISREG(st.st_mode):
        return False
    return bool(st.st_mode & 0o111) or os.path.splitext(path)[1].lower() in CODE_SUFFIXES


_CACHE: dict[tuple, str] = {}
_CACHE_MAX = 4096


def content_id(path: str) -> str:
    """What identifies a code file's content: ``sha256:`` of its bytes (at most
    MAX_DIGEST_BYTES), ``stat:SIZE:MTIME_NS`` for a larger one or one that cannot be
    read, ``missing`` or ``not a file``. Never blocks on a FIFO (opened non-blocking,
    checked on the open descriptor)."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        return "missing"
    except OSError:
        try:
            st = os.stat(path)
        except OSError:
            return "missing"
        return _by_stat(st) if stat.S_ISREG(st.st_mode) else "not a file"
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return "not a file"
        if st.st_size > MAX_DIGEST_BYTES:
            return _by_stat(st)
        key = (path, st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
        known = _CACHE.get(key)
        if known is not None:
            return known
        data = b""
        while len(data) <= MAX_DIGEST_BYTES:
            chunk = os.read(fd, MAX_DIGEST_BYTES + 1 - len(data))
            if not chunk:
                break
            data += chunk
        if len(data) > MAX_DIGEST_BYTES:  # it grew while being read
            return _by_stat(os.fstat(fd))
        ident = "sha256:" + hashlib.sha256(data).hexdigest()
        if len(_CACHE) >= _CACHE_MAX:
            _CACHE.clear()
        _CACHE[key] = ident
        return ident
    finally:
        os.close(fd)


def _by_stat(st: os.stat_result) -> str:
    return f"stat:{st.st_size}:{st.st_mtime_ns}"
