"""A server is bound by what actually runs, however its command line names it.

``python3 chat.py`` binds chat.py by content (test_binding.py). The same program is often
started through something in between: the MCP quick start's ``uv --directory DIR run
server.py`` (here ``env -C DIR``, which changes directory the same way), a shell's ``-c``
command line, Python's ``-c`` code, or a module found on the ``PYTHONPATH`` the server file
sets. Each names the code that runs as plainly as ``python3 chat.py`` does, so an edit of
that code after the run started must be refused too. Real processes: each place's chat
server logs its own calls next to itself.
"""

from __future__ import annotations

import os
import sys

import pytest
from test_binding import chat_script, park, place, posted, run_in, started

PY = sys.executable

ENTRIES = {
    # the MCP quick start's `uv --directory DIR run server.py`: a directory named first,
    # the script named relative to it
    "directory-option": ({"command": "env", "args": ["-C", "srv", PY, "chat.py"]}, "srv/chat.py"),
    "directory-option-joined": ({"command": "env", "args": ["--chdir=srv", PY, "chat.py"]}, "srv/chat.py"),
    "shell-c": ({"command": "sh", "args": ["-c", f"exec {PY} chat.py"]}, "chat.py"),
    "shell-c-cd": ({"command": "sh", "args": ["-c", f"cd srv && exec {PY} chat.py"]}, "srv/chat.py"),
    "python-c-import": ({"command": PY, "args": ["-c", "import chat"]}, "chat.py"),
    "pythonpath-module": ({"command": PY, "args": ["-m", "chat"], "env": {"PYTHONPATH": "src"}}, "src/chat.py"),
}


@pytest.mark.parametrize("entry, script", list(ENTRIES.values()), ids=list(ENTRIES))
def test_code_named_through_a_launcher_is_bound_by_content(cli, tmp_path, entry, script):
    a = place(tmp_path, "a", entry, script)
    log_dir = (a / script).parent
    first, first_fp = park(cli, a)
    second, fp = park(cli, a)
    assert started(log_dir) == 2  # the command line does start this very script
    # unchanged, it is the server the run was started with: approved from elsewhere, it posts
    run_in(cli, tmp_path, "approve", first, "post", "--yes", "--fingerprint", first_fp, expect=0)
    assert posted(log_dir) == 1
    chat_script(a / script, extra="# edited\n")  # the same place, another program

    refused = run_in(cli, a, "approve", second, "post", "--yes", "--fingerprint", fp)
    assert refused.returncode == 5, refused.stderr
    named = "a file named through the environment" if "env" in entry else os.path.realpath(a / script)
    assert f"{named} changed since the run started" in refused.stderr
    assert "hint: the server file says the same, but what it starts differs here" in refused.stderr
    assert "nothing was run" in refused.stderr and "Traceback" not in refused.stderr
    assert posted(log_dir) == 1 and started(log_dir) == 3


def test_a_sitecustomize_planted_on_the_servers_pythonpath_is_refused(cli, tmp_path):
    # Python imports sitecustomize from its path before any server code: one that appears on
    # the PYTHONPATH the server file sets runs inside the approved server
    entry = {"command": PY, "args": ["chat.py"], "env": {"PYTHONPATH": "lib"}}
    a = place(tmp_path, "a", entry)
    (a / "lib").mkdir()
    run, fp = park(cli, a)
    (a / "lib" / "sitecustomize.py").write_text("import os\nos.environ['PLANTED'] = '1'\n")

    refused = run_in(cli, a, "approve", run, "post", "--yes", "--fingerprint", fp)
    assert refused.returncode == 5, refused.stderr
    assert (
        "through PYTHONPATH: sha256:" in refused.stderr
        and "reaches a file named through the environment here, nothing when the run started" in refused.stderr
    )
    assert posted(a) == 0 and started(a) == 1


def test_what_an_old_run_is_told_about_a_file_named_through_the_environment_never_holds_the_value(tmp_path):
    from vodou_engine.binding import depends_on_directory
    from vodou_engine.servers import ServerConfig

    (tmp_path / "hook-s3cret.so").write_bytes(b"\x7fELF")
    config = ServerConfig(command=PY, args=["chat.py"], env={"LD_PRELOAD": "hook-s3cret.so"})
    found = depends_on_directory(config, name="ops", start=str(tmp_path))
    assert found == ["a file named through $LD_PRELOAD"]
