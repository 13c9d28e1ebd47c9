"""What a person sees of a run, and no rough edge left in the CLI.

Behaviour is proven in-process: through the run API (``Runs``), the views
that print its documents, and ``cli.main`` called with an argument list (it
returns the exit code the process would). A real ``python -m vodou_engine``
process is started only for what nothing else shows: prompts on a terminal
(a pty), a signal in the middle of a step, a crash, piped output.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import select
import shlex
import signal
import struct
import subprocess
import sys
import termios
import time
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import msgspec
import pytest
import trio
from conftest import RECIPES, ROOT, Cli, demo_calls

from vodou_engine import cli as recipe_cli
from vodou_engine.commands.common import _inputs
from vodou_engine.commands.inspect import _since
from vodou_engine.demo import db as demo
from vodou_engine.errors import UsageError
from vodou_engine.owners import HOST
from vodou_engine.reports import (
    ApprovalView,
    EffectView,
    NodeView,
    PendingApproval,
    RunReport,
    RunSummary,
    RunView,
    Together,
)
from vodou_engine.runs import Runs, os_user
from vodou_engine.runtime import faults
from vodou_engine.servers import ServerConfig, ServerSet, demo_servers, load_servers, servers_needed
from vodou_engine.views import report as views

MORNING = RECIPES / "morning-briefing.recipe"
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07")
NO_ANSWER = object()  # Ctrl-D at a prompt
PROMPT = "[y]es / [n]o, reject / Enter: decide later:"

LONG = "x" * 800
NOTES = f"""recipe "notes"
facts: vodou.echo {{"value": {{"long": "{LONG}"}}}}
ask me:
- go on?
note: write a note from {{facts}}
"""
"""A read, a question, a write: no server, so a run costs milliseconds."""


# --- helpers -------------------------------------------------------------------------------------
@pytest.fixture(autouse=True)
def isolated(tmp_path, monkeypatch):
    """No policy, server file or variable of the person running the tests."""
    for key in list(os.environ):
        if key.startswith("VODOU_"):
            monkeypatch.delenv(key)
    for var in ("XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_CACHE_HOME"):
        monkeypatch.setenv(var, str(tmp_path / var.lower()))


def no_traceback(*texts: str) -> None:
    for text in texts:
        assert "Traceback" not in text, text


def dead_owner(n: int) -> str:
    """A driver on this host whose process is gone (no pid is this high)."""
    return f"{HOST}:{2**22 + n}:{n}"


def local_runs(tmp: Path, servers: dict | None = None, **kw) -> Runs:
    return Runs(store=tmp / "runs.db", servers=ServerSet(dict(servers or {}), "test"), **kw)


def slack(tmp: Path) -> ServerConfig:
    return ServerConfig(
        command=sys.executable,
        args=["-m", "vodou_engine.demo.chat_server"],
        env={"VODOU_DEMO_DB": str(tmp / "demo.db")},
    )


async def crashed(call) -> None:
    """Run ``call`` with a crash point armed; the crash is what is expected."""
    try:
        await call()
    except faults.SimulatedCrash:
        return
    except BaseExceptionGroup as group:
        crash, rest = group.split(faults.SimulatedCrash)
        assert crash is not None and rest is None, group
        return
    finally:
        faults.simulate(None)
    raise AssertionError("the crash point was never reached")


@dataclass
class Out:
    code: int
    out: str
    err: str


@pytest.fixture
def recipe_cmd(isolated, tmp_path, monkeypatch, capsys):
    """``recipe ARGS…`` in this process, in an isolated home: Out(exit code, stdout, stderr)."""
    monkeypatch.setenv("VODOU_STORE", str(tmp_path / "runs.db"))
    monkeypatch.setenv("VODOU_DEMO_DB", str(tmp_path / "demo.db"))
    monkeypatch.chdir(tmp_path)

    def call(*argv) -> Out:
        capsys.readouterr()
        try:
            code = recipe_cli.main([str(a) for a in argv])
        except SystemExit as exc:  # argparse: --version, usage errors
            code = exc.code
        out, err = capsys.readouterr()
        no_traceback(out, err)
        return Out(code, out, err)

    return call


def shown(capsys, fn, *args, **kwargs) -> str:
    """What a view prints (stdout and stderr), as a pipe would receive it."""
    capsys.readouterr()
    fn(*args, **kwargs)
    out, err = capsys.readouterr()
    return out + err


def on_a_terminal(
    cli: Cli, *args, answers=(), cols: int = 200, env: dict | None = None, timeout: float = 90
) -> tuple[int, str]:
    """Run the command on a pseudo-terminal of ``cols`` columns, giving ``answers`` at its
    prompts in turn (NO_ANSWER is Ctrl-D); (exit code, what the terminal showed, ANSI removed)."""
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, cols, 0, 0))
    proc = subprocess.Popen(
        cli.argv(*args), cwd=cli.tmp, env={**cli.env, "COLUMNS": str(cols), "TERM": "xterm", **(env or {})},
        stdin=slave, stdout=slave, stderr=slave, start_new_session=True,
    )  # fmt: skip
    os.close(slave)
    raw, sent, pending = b"", 0, list(answers)
    deadline = time.monotonic() + timeout
    try:
        while True:
            assert time.monotonic() < deadline, f"no end after {timeout}s:\n{raw.decode(errors='replace')}"
            ready, _, _ = select.select([master], [], [], 0.1)
            if not ready:
                if proc.poll() is not None:
                    break
                continue
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO: the other side is closed
                break
            if not data:
                break
            raw += data
            asked = ANSI.sub("", raw.decode(errors="replace")).count("decide later:")
            if pending and asked > sent:
                answer = pending.pop(0)
                sent += 1
                os.write(master, b"\x04" if answer is NO_ANSWER else answer.encode() + b"\r")
        code = proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
        os.close(master)
    return code, ANSI.sub("", raw.decode(errors="replace")).replace("\r\n", "\n")


# --- 3. a person can see what a run produced ------------------------------------------------------
def test_show_prints_results_and_who_rejected_with_the_reason(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("VODOU_MODEL", raising=False)
    runs = local_runs(tmp_path)
    parked = trio.run(lambda: runs.start("notes.recipe", text=NOTES, actor="ana"))
    assert parked.state == "parked"
    done = trio.run(lambda: runs.reject(parked.run, actor="ana", reason="not today"))
    assert done.state == "declined"
    view = runs.show(parked.run)

    # show --json carries it: outputs per node, approvals with who decided and why
    doc = json.loads(msgspec.json.encode(view))
    nodes = {n["node"]: n for n in doc["nodes"]}
    assert nodes["facts"]["output"] == {"long": LONG} and nodes["facts"]["has_output"]
    (approval,) = doc["approvals"]
    assert (approval["state"], approval["decided_by"], approval["reason"]) == ("rejected", "ana", "not today")
    assert approval["decided_at"] is not None

    text = shown(capsys, views.show, view)
    assert "rejected by ana" in text and "not today" in text
    assert "facts: " in text and "(812 characters; --full shows all)" in text  # a read, summarised
    assert LONG not in text
    assert LONG in shown(capsys, views.show, view, full=True)  # --full: all of it
    assert "None" not in text


def test_a_run_that_ends_in_a_write_prints_the_text(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("VODOU_MODEL", raising=False)
    runs = local_runs(tmp_path)
    parked = trio.run(lambda: runs.start("notes.recipe", text=NOTES, actor="ana"))
    done = trio.run(lambda: runs.approve(parked.run, actor="ana"))
    assert done.state == "succeeded"
    assert done.text and done.text.startswith("A note (offline writer")

    text = shown(capsys, views.report, done)  # the end of `recipe run` / `approve`
    assert done.text.splitlines()[0] in text
    assert text.index("A note (offline writer") < text.index(f"run {done.run} succeeded.")
    whole = shown(capsys, views.show, runs.show(parked.run))
    assert "note (written):" in whole and "  A note (offline writer" in whole  # written text in full


def naps(n: int, ms: int) -> str:
    return (
        'recipe "naps"\ntogether naps:\n'
        + "".join(f'  b{i}: vodou.sleep {{"ms": {ms}}}\n' for i in range(n))
        + 'then:\n  done: vodou.echo {"value": 1}\n'
    )


def test_time_queued_for_a_thread_is_reported_apart_from_work(tmp_path, capsys):
    runs = local_runs(tmp_path, threads=1)  # one thread: the branches run one at a time
    rep = trio.run(lambda: runs.start("naps.recipe", text=naps(30, 2)))
    assert rep.state == "succeeded"
    (t,) = rep.together
    assert t.branches == 30
    assert t.sum_s >= 30 * 0.002  # each branch slept at least its 2 ms: that is work
    assert t.queued_s > 0  # and waited for the one thread: that is not
    assert runs.show(rep.run).together == rep.together  # `show` says the same as the run did
    (line,) = views.together_lines(rep.together)
    assert "work of 30 branches" in line and "queued" in line and "not work" in line


def test_summed_work_never_exceeds_the_wall_clock_on_one_thread(tmp_path):
    runs = local_runs(tmp_path, threads=1)
    rep = trio.run(lambda: runs.start("naps.recipe", text=naps(60, 1)))
    (t,) = rep.together
    # One at a time, the work cannot add up to more than the time it all took.
    assert t.sum_s <= t.wall_s + 0.001, (t.sum_s, t.wall_s)


def _overlap(runs: Runs, run_id: str, pattern: str) -> tuple[int, int]:
    """Of the stored steps whose id matches ``pattern``: how many began before the first of
    them ended, and how many there are."""
    spans = [(n.started_at, n.ended_at) for n in runs.show(run_id).nodes if re.fullmatch(pattern, n.node)]
    first_end = min(e for _, e in spans)
    return sum(1 for s, _ in spans if s < first_end), len(spans)


def test_300_blocking_branches_all_run_at_once_unless_the_run_bounds_them(tmp_path, monkeypatch):
    monkeypatch.delenv("VODOU_THREADS", raising=False)
    rep = trio.run(lambda: local_runs(tmp_path).start("naps.recipe", text=naps(300, 1500)))
    assert rep.state == "succeeded"
    # One wave: every branch was on its thread before any branch's sleep ended.
    assert _overlap(local_runs(tmp_path), rep.run, r"b\d+") == (300, 300)
    bounded = local_runs(tmp_path, threads=100)
    rep = trio.run(lambda: bounded.start("naps.recipe", text=naps(150, 300)))
    began, n = _overlap(bounded, rep.run, r"b\d+")
    assert n == 150 and began <= 100  # a limit the caller set still holds


def test_a_loop_without_at_most_runs_256_items_at_once_unless_the_run_says(tmp_path, monkeypatch):
    monkeypatch.delenv("VODOU_THREADS", raising=False)
    text = (
        'recipe "loop"\nfor each i in '
        + json.dumps(list(range(300)))
        + ':\n  max items: 300\n  n: vodou.sleep {"ms": 1000}\n'
    )
    rep = trio.run(lambda: local_runs(tmp_path).start("loop.recipe", text=text))
    assert rep.state == "succeeded"
    assert _overlap(local_runs(tmp_path), rep.run, r"n\[\d+\]") == (256, 300)
    monkeypatch.setenv("VODOU_THREADS", "300")  # a limit the run was given is the loop's too
    rep = trio.run(lambda: local_runs(tmp_path).start("loop.recipe", text=text))
    assert _overlap(local_runs(tmp_path), rep.run, r"n\[\d+\]") == (300, 300)


def test_a_cancelled_or_failed_branch_is_named_never_the_slowest(tmp_path):
    text = """recipe "shaky"
together sources:
  a: vodou.sleep {"ms": 50}
  b: vodou.sleep {"ms": 60}
  c: vodou.sleep {"ms": 3000}
  then bad:
    e0: vodou.echo {"value": {}}
    e: vodou.sleep {"ms": "{e0.nope}"}
  need: 2 of 4
then:
  done: vodou.echo {"value": 1}
"""
    runs = local_runs(tmp_path)
    rep = trio.run(lambda: runs.start("shaky.recipe", text=text))
    assert rep.state == "succeeded"
    (t,) = rep.together
    assert t.cancelled == ["c"]  # dropped by the quorum while it slept on its thread
    assert t.failed == ["e"]  # its argument could not be made, before a and b ended
    assert t.slowest in ("a", "b")
    (line,) = views.together_lines(runs.show(rep.run).together)
    assert "cancelled: c" in line and "failed: e" in line and "slowest c" not in line and "slowest e" not in line


def test_runs_filters_and_a_dead_driver_shows_interrupted(tmp_path, capsys):
    runs = local_runs(tmp_path)
    echo = 'recipe "alpha"\nx: vodou.echo {"value": 1}\n'
    beta = 'recipe "beta"\nask me:\n- go on?\nx: vodou.echo {"value": 1}\n'
    trio.run(lambda: runs.start("a.recipe", text=echo, run_id="r-alpha"))
    trio.run(lambda: runs.start("b.recipe", text=beta, run_id="r-parked"))
    faults.simulate("parking")  # the driving process dies as it parks (kill -9)
    trio.run(crashed, lambda: local_runs(tmp_path, owner=dead_owner(1)).start("b.recipe", text=beta, run_id="r-dead"))

    def ids(**kw):
        return [r.run for r in runs.list(**kw)]

    assert ids() == ["r-dead", "r-parked", "r-alpha"]
    assert ids(state="interrupted") == ["r-dead"]  # stored `running`, its process gone
    assert ids(state="running") == []
    assert ids(state="parked") == ["r-parked"]
    assert ids(recipe="alpha") == ["r-alpha"]
    assert ids(since=time.time() + 60) == []
    assert ids(since=_since("1h")) == ids()
    assert ids(limit=1) == ["r-dead"]
    assert runs.show("r-dead").state == "interrupted"

    text = shown(capsys, views.runs_table, runs.list(), store_flag=" --store x.db")
    assert "recipe resume r-dead --store x.db" in text
    assert "no runs match." in shown(capsys, views.runs_table, [], filtered=True)


def test_since_takes_an_age_or_an_iso_time():
    now = time.time()
    assert abs(_since("2h") - (now - 7200)) < 5
    assert abs(_since("7d") - (now - 7 * 86400)) < 5
    assert _since("2026-11-30T08:00:00+00:00") == 1796025600.0
    with pytest.raises(UsageError):
        _since("yesterday")


# --- the audit, piped ----------------------------------------------------------------------------
def test_show_audit_piped_is_whole_local_iso_and_says_without_asking(cli):
    text = "A long post that must stay on one line when piped, " + "y" * 600
    recipe = (
        'recipe "audit me"\n'
        'topic: slack.slack_set_topic {"channel": "#daily", "topic": "quiet"}\n  without asking\n'
        f'post: slack.slack_post_message {{"channel": "#daily", "text": "{text}"}}\n'
    )
    runs = local_runs(cli.tmp, {"slack": slack(cli.tmp)})

    async def scenario():
        async with runs.prepare("audit.recipe", text=recipe) as prepared:
            parked = await runs.start(prepared, actor="ana")
            assert parked.state == "parked"
            return await runs.approve(parked.run, "post", actor="ana", hub=prepared.hub)

    done = trio.run(scenario)
    assert done.state == "succeeded"
    view = runs.show(done.run)
    runs.close()

    res = cli("show", done.run, "--audit", env={"TZ": "IST-5:30"}, expect=0)  # stdout is a pipe
    no_traceback(res.out, res.err)
    out = res.out
    topic = out[out.index("effect topic:") :]
    assert topic.splitlines()[1].startswith("ran without asking")
    assert re.search(r"decided by ana at \d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+05:30: approved", out), (
        out
    )  # ISO 8601, local time
    assert re.search(r"started: \d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+05:30", out)
    assert "None" not in out
    for e in view.effects:
        assert f"fingerprint: {e.fingerprint}\n" in out and len(e.fingerprint) == len("sha256:") + 64  # never cut
    payload = next(e.payload for e in view.effects if e.step == "post")
    assert (
        "payload: " + json.dumps(payload, sort_keys=True, ensure_ascii=False) + "\n" in out
    )  # one line, not wrapped at 80
    assert max(len(line) for line in out.splitlines()) > 600


# --- no traceback, ever ----------------------------------------------------------------------------
QUESTION = 'recipe "q"\nask me:\n- go on?\nx: vodou.echo {"value": 1}\n'


def test_ctrl_d_is_no_answer_and_n_rejects_at_both_prompts(cli):
    path = cli.tmp / "q.recipe"
    path.write_text(QUESTION)
    runs = Runs(store=cli.store)

    code, screen = on_a_terminal(cli, "run", path, answers=[NO_ANSWER])
    assert code == 3, screen
    assert PROMPT in screen  # the answers are shown as they are to be typed
    (parked,) = runs.list()
    assert f"run {parked.run} stays parked" in screen and parked.state == "parked"

    code, screen = on_a_terminal(cli, "approve", parked.run, answers=[NO_ANSWER])
    assert code == 3, screen
    assert "approve exactly this? " + PROMPT in screen and "the run stays parked" in screen
    assert runs.show(parked.run).state == "parked"

    code, screen = on_a_terminal(cli, "approve", parked.run, answers=["n"])
    assert code == 4, screen  # n at `approve`: rejected, as at `run`
    view = runs.show(parked.run)
    assert view.state == "declined" and view.approvals[0].state == "rejected"

    code, screen = on_a_terminal(cli, "run", path, answers=["n"])
    assert code == 4, screen
    latest = runs.list()[0]
    assert latest.run != parked.run and latest.state == "declined"
    assert runs.show(latest.run).approvals[0].state == "rejected"
    no_traceback(screen)


def server_processes(demo_db: Path) -> list[int]:
    """Demo lab servers of this test: their environment names its demo db and a lab name."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                env = f.read().split(b"\0")
        except OSError:
            continue
        if f"VODOU_DEMO_DB={demo_db}".encode() in env and any(v.startswith(b"VODOU_DEMO_NAME=") for v in env):
            found.append(int(entry))
    return found


@pytest.mark.real_server_processes
def test_ctrl_c_during_a_step_exits_130_leaves_it_resumable_and_no_server(cli):
    path = cli.tmp / "slow.recipe"
    path.write_text('recipe "slow"\na: board.query {"ms": 30000, "label": "slow"}\nb: vodou.echo {"value": 1}\n')
    proc = cli.popen("run", path)
    runs = Runs(store=cli.store)
    deadline = time.monotonic() + 60
    run_id = None
    while run_id is None:
        assert time.monotonic() < deadline and proc.poll() is None, proc.communicate()
        time.sleep(0.1)
        try:
            listed = runs.list()
        except Exception:  # noqa: BLE001 - the store is not made yet
            continue
        if listed and {n.node: n.state for n in runs.show(listed[0].run).nodes}["a"] == "running":
            run_id = listed[0].run
    assert server_processes(cli.demo_db)  # the lab server is up, working on the call
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, (out, err)
    no_traceback(out, err)
    assert f"recipe resume {run_id}" in err
    assert runs.show(run_id).state == "interrupted"
    assert [r.state for r in runs.list(state="interrupted")] == ["interrupted"]
    left = server_processes(cli.demo_db)
    for _ in range(10):  # an exited child may take a moment to be reaped
        if not left:
            break
        time.sleep(0.1)
        left = server_processes(cli.demo_db)
    assert left == [], "a server outlived the command"


def test_runs_on_a_narrow_terminal_never_cuts_the_id_and_names_the_resume_command(cli):
    path = cli.tmp / "q.recipe"
    path.write_text(QUESTION)
    crashed_run = cli.proc("run", path, "--json", env={"VODOU_CRASH_AT": "parking"})
    assert crashed_run.code == -signal.SIGKILL  # killed mid-run, as by kill -9
    (listed,) = Runs(store=cli.store).list()
    assert listed.state == "interrupted"
    code, screen = on_a_terminal(cli, "runs", cols=60)
    assert code == 0, screen
    assert f"{listed.run}  interrupted" in screen  # whole, on one line
    assert f"recipe resume {listed.run}" in screen
    no_traceback(screen)


def test_a_model_that_cannot_run_fails_the_run_with_its_message(recipe_cmd, tmp_path):
    path = tmp_path / "note.recipe"
    path.write_text('recipe "note"\na: vodou.echo {"value": "hello"}\nnote: write a note from {a}\n')
    res = recipe_cmd("run", path, "--model", "no-such-model")
    assert res.code == 1
    assert "unknown model 'no-such-model'" in res.out + res.err
    (run,) = Runs(store=tmp_path / "runs.db").list()
    view = Runs(store=tmp_path / "runs.db").show(run.run)
    assert view.state == "failed"  # ended, not left running
    assert "unknown model 'no-such-model'" in (view.error or "")
    assert recipe_cli._parser().parse_args(["resume", run.run, "--model", "echo"]).model == "echo"


def test_usage_errors_version_and_a_typed_store_that_does_not_exist(recipe_cmd, tmp_path):
    both = recipe_cmd("plan", "--offline", "--json", "--format", "mermaid", MORNING)
    assert both.code == 2 and "not allowed with" in both.err
    version = recipe_cmd("--version")
    assert version.code == 0 and re.match(r"recipe \(vodou_engine\) \d+\.\d+", version.out)
    for argv in (["runs"], ["show", "r1"], ["runs", "--json"]):
        typo = recipe_cmd(*argv, "--store", "typo.db")
        assert typo.code == 6 and "typo.db" in typo.err, typo
    assert not (tmp_path / "typo.db").exists()  # nothing was created
    assert recipe_cmd("runs").out == "no runs yet.\n"  # the default store, not made yet: empty, not an error


def walk(parser, path=("recipe",)):
    yield path, parser
    for action in parser._actions:
        if action.__class__.__name__ == "_SubParsersAction":
            for name, sub in action.choices.items():
                yield from walk(sub, (*path, name))


def test_every_option_and_argument_has_help():
    missing = []
    for path, parser in walk(recipe_cli._parser()):
        for action in parser._actions:
            if action.__class__.__name__ == "_SubParsersAction":
                continue
            if not (action.help or "").strip():
                missing.append(f"{' '.join(path)} {'/'.join(action.option_strings) or action.dest}")
    assert not missing, "no help text: " + ", ".join(missing)
    prompts = recipe_cli._parser().format_help() + "".join(
        p.format_help() for path, p in walk(recipe_cli._parser()) if path[-1] in ("run", "approve", "resume")
    )
    assert prompts.count("y approves, n rejects") >= 4  # the prompt answers, in the help of each command that asks


def test_approve_with_a_fingerprint_that_never_existed_says_so(recipe_cmd, tmp_path):
    runs = Runs(store=tmp_path / "runs.db", servers=ServerSet({}, "none"))
    parked = trio.run(lambda: runs.start("q.recipe", text=QUESTION, actor=os_user()))
    never = "sha256:" + "0" * 64
    res = recipe_cmd("approve", parked.run, "--yes", "--fingerprint", never)
    assert res.code == 5
    assert f"no question of run {parked.run} ever had the fingerprint {never}" in res.err
    assert runs.show(parked.run).approvals[0].state == "pending"  # nothing was decided


# --- reconcile, and a check that changed ------------------------------------------------------------
def mcp_json(tmp: Path) -> Path:
    """The demo chat server, in ./mcp.json: the API and the command find the same servers."""
    path = tmp / "mcp.json"
    cfg = slack(tmp)
    path.write_text(json.dumps({"mcpServers": {"slack": {"command": cfg.command, "args": cfg.args, "env": cfg.env}}}))
    return path


SETTLE = 'post: slack.slack_post_message {"channel": "#daily", "text": "hi"}\nafter: vodou.echo {"value": "done"}\n'


def crash_mid_effect(tmp: Path, count: int) -> tuple[Runs, list[str]]:
    """``count`` runs whose driver died with the post claimed and not called: each
    resumed, its effect `unknown`, parked for a person to settle."""
    runs = Runs(store=tmp / "runs.db", servers=load_servers(mcp_json(tmp)))
    me = os_user()

    async def scenario() -> list[str]:
        ids = []
        async with runs.prepare("p.recipe", text=SETTLE) as prepared:
            for n in range(count):
                parked = await runs.start(prepared, actor=me)
                ids.append(parked.run)
                dying = Runs(store=tmp / "runs.db", servers=prepared.servers, owner=dead_owner(n + 1))
                faults.simulate("executing")  # the effect claimed, the process dies before the call
                await crashed(partial(dying.approve, parked.run, "post", actor=me, hub=prepared.hub))
                again = await runs.resume(parked.run, hub=prepared.hub)
                assert again.state == "parked" and list(again.unknown) == ["post"]
        return ids

    return runs, trio.run(scenario)


def test_reconcile_does_what_its_help_says(recipe_cmd, tmp_path):
    runs, (not_done, done) = crash_mid_effect(tmp_path, 2)
    reconcile = next(p for path, p in walk(recipe_cli._parser()) if path[-1] == "reconcile")
    helps = {a.option_strings[0]: a.help for a in reconcile._actions if a.option_strings}
    assert "`recipe resume` ends the run failed at that step" in helps["--not-executed"]
    assert "`recipe resume` then goes on from it" in helps["--executed"]

    res = recipe_cmd("reconcile", not_done, "post", "--not-executed", "--reason", "checked #daily")
    assert res.code == 0 and f"`recipe resume {not_done}` ends the run failed at post" in res.out
    assert recipe_cmd("resume", not_done, "--no-wait").code == 1
    view = runs.show(not_done)
    assert view.state == "failed" and (view.error or "").startswith("post: ")
    assert {n.node: n.state for n in view.nodes}["after"] != "succeeded"  # nothing after it ran

    res = recipe_cmd("reconcile", done, "post", "--executed")
    assert res.code == 0 and f"`recipe resume {done}` goes on from it" in res.out
    assert recipe_cmd("resume", done, "--no-wait").code == 0
    view = runs.show(done)
    assert view.state == "succeeded" and {n.node: n.state for n in view.nodes}["after"] == "succeeded"
    assert demo_calls(tmp_path / "demo.db", tool="slack_post_message") == []  # a person's word, never a retry


def test_a_settled_step_shows_as_settled_in_its_finished_run(tmp_path):
    runs, (not_done, done) = crash_mid_effect(tmp_path, 2)
    runs.reconcile(not_done, "post", executed=False, actor="ana")
    runs.reconcile(done, "post", executed=True, actor="ana")
    trio.run(lambda: runs.resume(not_done))
    trio.run(lambda: runs.resume(done))
    states = {run: ({n.node: n.state for n in runs.show(run).nodes}, runs.show(run).state) for run in (not_done, done)}
    assert states[not_done] == ({"approve:post": "succeeded", "post": "failed", "after": "skipped"}, "failed"), states
    assert states[done] == ({"approve:post": "succeeded", "post": "succeeded", "after": "succeeded"}, "succeeded"), (
        states
    )


def test_a_changed_check_is_said_with_old_and_new_values_before_the_new_card(recipe_cmd, tmp_path):
    recipe = 'post: slack.slack_post_message {"channel": "#daily", "text": "hi"}\n  check: slack.slack_get_channel {"channel": "#daily"}\n'
    runs = Runs(store=tmp_path / "runs.db", servers=load_servers(mcp_json(tmp_path)))
    parked = trio.run(lambda: runs.start("p.recipe", text=recipe, actor=os_user()))
    first = parked.pending[0].fingerprint
    demo.set_channel_topic(tmp_path / "demo.db", "#daily", "moved")  # the world changes under the check

    res = recipe_cmd("approve", parked.run, "--yes")
    assert res.code == 3  # asked again, nothing posted
    (card,) = runs.show(parked.run).approvals[-1:]
    assert card.state == "pending" and card.fingerprint != first
    out = res.out
    said = out.index("⚠ `post` did not run")
    assert out.index(first) < said < out.index(card.fingerprint)  # the old card, why, then the new card
    assert '  topic: "Daily status updates" -> "moved"' in out[said:]
    assert "recorded" in out[:said] and f"approved post ({first})" not in out
    assert demo_calls(tmp_path / "demo.db", tool="slack_post_message") == []


# --- what servers say is shown, never obeyed --------------------------------------------------------
EVIL = "\x1b[2J\x1b[Hrun succeeded \x9b31m [/bold] [red]x\u202e"


def test_text_from_servers_is_printed_escaped_and_never_as_markup(capsys):
    node = NodeView(
        node="a", kind="tool", state="failed", error=EVIL, output=EVIL, has_output=True, started_at=1.0, ended_at=2.0
    )
    approval = ApprovalView(
        id="ap1",
        step="a",
        state="rejected",
        fingerprint="sha256:f",
        asked_at=1.0,
        decided_by=EVIL,
        decided_at=2.0,
        reason=EVIL,
        card=EVIL,
    )
    effect = EffectView(
        step="a",
        state="failed",
        fingerprint="sha256:f",
        idempotency_key="k",
        payload={"t": EVIL},
        result=EVIL,
        error=EVIL,
        approval="ap1",
        decided_by=EVIL,
        decided_at=2.0,
        card=EVIL,
        settled_by=EVIL,
    )
    view = RunView(
        run="r1",
        recipe=EVIL,
        state="failed",
        started_by=EVIL,
        created_at=1.0,
        error=EVIL,
        nodes=[node],
        approvals=[approval],
        effects=[effect],
    )
    rep = RunReport(
        run="r1", state="parked", pending=[PendingApproval(step="a", approval="ap1", fingerprint="sha256:f", card=EVIL)],
        errors={"a": EVIL}, unknown={"a": EVIL}, asked_again={"a": {"was": {"t": EVIL}, "now": {"t": "ok"}}},
        together=[Together(join="j", wall_s=1.0, sum_s=1.0, branches=1, slowest="a", slowest_s=1.0)],
    )  # fmt: skip
    failed = msgspec.structs.replace(rep, state="failed")
    listed = [RunSummary(run="r1", recipe=EVIL, state="parked", started_by=EVIL, created_at=1.0)]
    printed = [
        shown(capsys, views.show, view, audit=True, full=True),
        shown(capsys, views.show, view),
        shown(capsys, views.report, rep),
        shown(capsys, views.report, failed),
        shown(capsys, views.runs_table, listed),
        shown(capsys, views.show, view, json_out=True),
        shown(capsys, views.report, rep, json_out=True),
    ]
    for text in printed:
        for raw in ("\x1b", "\x9b", "\u202e"):
            assert raw not in text, (raw, text)
    assert "[/bold] [red]x" in printed[1]  # shown as it is, not taken as markup
    assert "⟨U+001B⟩[2J" in printed[0]  # marked as every surface marks it
    doc = json.loads(printed[5])
    assert doc["error"] == EVIL  # escaped for the terminal, the same value for a program


# --- bundled recipes --------------------------------------------------------------------------------
BUNDLED = sorted(RECIPES.glob("*.recipe"))
PUBLISHED = {"time": "mcp-server-time", "git": "mcp-server-git", "memory": "@modelcontextprotocol/server-memory"}
SERVER_FILES = {
    "time": "recipes/published-servers.json",
    "git": "recipes/published-servers.json",
    "memory": "recipes/npm-servers.json",
}
"""The sample server file that starts each published server (PyPI's, npm's)."""


def try_line(path: Path) -> list[str]:
    """The `# try:` command in the recipe's header, as words."""
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.startswith("#"):
            break
        if line.startswith("# try: "):
            return shlex.split(line[len("# try: ") :])
    raise AssertionError(f"{path.name}: its header has no `# try:` line")


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True)


def how_to_try(path: Path, tmp: Path) -> tuple[str | None, dict]:
    """The header's `# try:` command, checked: (its --servers file or None, its inputs)."""
    argv = try_line(path)
    assert argv[:3] == ["recipe", "run", f"recipes/{path.name}"], argv
    args = recipe_cli._parser().parse_args(argv[1:])  # a command the CLI takes as it is
    inputs = _inputs(args.set)
    if inputs.get("repo") == "/tmp/scratch":  # the scratch repository the header says to make
        repo = tmp / "scratch"
        repo.mkdir(parents=True)
        _git(repo, "init", "-q")
        (repo / "hello.txt").write_text("hello\n")
        inputs["repo"] = str(repo)
    return args.servers, inputs


@pytest.mark.parametrize("path", BUNDLED, ids=[p.stem for p in BUNDLED])
def test_a_bundled_recipe_header_says_how_to_run_it_and_what_to_install(path, tmp_path):
    servers_file, _ = how_to_try(path, tmp_path)
    header = path.read_text(encoding="utf-8").split("\nrecipe ", 1)[0]
    plan, _, _ = Runs(store=tmp_path / "x.db").load(path)
    needed = [n for n in servers_needed(plan) if n in PUBLISHED]
    published = {PUBLISHED[n] for n in needed}
    if published:  # not bundled: the header names the packages, and the server file that starts them
        assert {servers_file} == {SERVER_FILES[n] for n in needed}
        for package in published:
            assert package in header, header
    else:
        assert servers_file is None and "bundled demo" in header, header


def test_the_sample_server_file_starts_the_published_servers_from_the_projects_python():
    servers = load_servers(ROOT / "recipes" / "published-servers.json")
    assert {"time", "git"} <= set(servers.servers)
    for _name, cfg in servers.servers.items():
        assert cfg.command == ".venv/bin/python" and cfg.args[0] == "-m", cfg  # no launcher (uvx...) to install
        assert cfg.cwd == str(ROOT), cfg  # relative to the file: the project root, wherever it is run from
    assert servers.servers["time"].args[1] == "mcp_server_time" and servers.servers["git"].args[1] == "mcp_server_git"


def test_every_bundled_recipe_runs_as_its_header_says(tmp_path, monkeypatch):
    """Each `# try:` line, through the run API, on the servers it names: warm servers,
    one set per server file, so nine runs cost three starts."""
    from vodou_engine.tools.hub import open_hub

    demo_db = str(tmp_path / "demo.db")
    groups: dict[str | None, list[tuple[Path, dict]]] = {}
    for path in BUNDLED:
        servers_file, inputs = how_to_try(path, tmp_path / path.stem)
        groups.setdefault(servers_file, []).append((path, inputs))
    monkeypatch.chdir(ROOT)  # the headers say: from the project root
    results = {}

    async def scenario() -> None:
        for servers_file, cases in groups.items():
            if servers_file is None:
                servers = ServerSet(demo_servers(demo_db), "embedded defaults")
            else:
                servers = load_servers(ROOT / servers_file)
                for name, cfg in servers.servers.items():
                    if cfg.args[1].startswith("vodou_engine.demo."):  # keep the demo world in this test
                        servers.servers[name] = msgspec.structs.replace(cfg, env={**cfg.env, "VODOU_DEMO_DB": demo_db})
                    if "MEMORY_FILE_PATH" in cfg.env:  # and the memory server's graph
                        memory = str(tmp_path / "memory.jsonl")
                        servers.servers[name] = msgspec.structs.replace(
                            cfg, env={**cfg.env, "MEMORY_FILE_PATH": memory}
                        )
            runs = Runs(store=tmp_path / "runs.db", servers=servers)
            names = sorted({n for path, _ in cases for n in servers_needed(runs.load(path)[0])})
            async with open_hub(servers.servers, names) as hub:
                for path, inputs in cases:
                    async with runs.prepare(str(path), hub=hub) as prepared:
                        results[path.stem] = await runs.start(prepared, inputs=inputs)

    trio.run(scenario)
    assert set(results) == {p.stem for p in BUNDLED}
    wrong = {k: r for k, r in results.items() if r.state not in ("parked", "succeeded") or r.errors or r.unknown}
    assert not wrong, wrong


def test_the_readme_says_why_the_main_job_parks_without_a_terminal():
    readme = " ".join((ROOT / "README.md").read_text(encoding="utf-8").split())
    assert "Without a terminal" in readme and "exits 3" in readme and "nobody to ask" in readme
    assert "recipes/published-servers.json" in readme
