"""serve. `recipe serve` as a whole process: the inbox, the approval path, many runs at once.

One ``python -m vodou_engine.web.serve`` process (Hypercorn's trio worker, the
Starlette app, the service with its warm demo servers) on a free port of
127.0.0.1, over a store of its own; this process signs in with a one-time
link and uses the pages as a browser would (forms with their token, the
session cookie), over one kept-alive HTTP/1.1 connection per client.

* approve → effect: a run of a saved recipe parks at its post (the chat
  server already warm from the run that parked it); the time from just before
  the approval's POST is sent (``time.time()`` here) to the moment the demo
  chat server began the call (its own ``started``, in its call log: the same
  clock, another process). Inside: the form token and session checked, the
  card compared, the decision recorded by the run API, the run taken and
  driven on the warm server, the effect claimed in the store, the call sent.
  Target ≤ 25 ms (median).
* the inbox with 1,000 parked runs (each at a question for the signed-in
  person, started through the run API in this process before measuring):
  the server's own time for ``GET /`` (its Server-Timing header: from the
  request reaching the app to the response starting; the session looked up,
  every pending question read with its run, the page rendered). Target ≤ 100 ms.
* 100 runs started at once: 100 POSTs of "Run" sent together from 100
  threads (each its own connection) for a recipe whose together waits 300 ms
  and 200 ms on the demo lab server; all must finish. Wall-clock from the
  first POST to the last run's end, against the slowest run's own
  created → ended.
* a schedule fires: a saved recipe scheduled every minute (added before the
  process starts); the lag from its due time to its run's creation, from the
  store's own records. Target ≤ 1 s (the scheduler ticks every second).
"""

from __future__ import annotations

import http.client
import json
import re
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from urllib.parse import urlencode, urlsplit

from .common import Case, Config, TempDir, clean_env, poll

POST = 'recipe "post"\napprovers: bench\ninputs:\n  text = "x"\npost: slack.slack_post_message {"channel": "#daily", "text": "{text}"}\n'
ASK = 'recipe "ask"\nask me:\n- go on?\nsay: vodou.echo {"value": "on"}\n'
TOGETHER = (
    'recipe "together"\ntogether waits:\n  slow: board.query {"ms": 300}\n  quick: board.query {"ms": 200}\n'
    'then:\n  done: vodou.echo {"value": "{slow}"}\n'
)
CLI_POST = (
    'recipe "clipost"\ninputs:\n  text = "x"\npost: slack.slack_post_message {"channel": "#daily", "text": "{text}"}\n'
)
TICK = 'recipe "tick"\nsay: vodou.echo {"value": "tick"}\n'


class Browser:
    """A session over one HTTP/1.1 connection: cookies by hand, redirects not followed."""

    def __init__(self, url: str, cookie: str | None = None):
        parts = urlsplit(url)
        self.conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=120)
        self.cookie = cookie

    def request(self, method: str, path: str, form: dict | None = None) -> tuple[int, dict, str]:
        headers = {"cookie": f"vodou_session={self.cookie}"} if self.cookie else {}
        body = None
        if form is not None:
            body = urlencode(form)
            headers["content-type"] = "application/x-www-form-urlencoded"
        self.conn.request(method, path, body=body, headers=headers)
        res = self.conn.getresponse()
        text = res.read().decode("utf-8", "replace")
        return res.status, {k.lower(): v for k, v in res.getheaders()}, text

    def close(self) -> None:
        self.conn.close()


def _field(html: str, name: str) -> str:
    m = re.search(rf'name="{re.escape(name)}" value="([^"]*)"', html)
    if not m:
        raise RuntimeError(f"no field {name!r} on the page:\n{html[:2000]}")
    return m.group(1)


def sign_in(url: str, link: str) -> str:
    """Follow a one-time sign-in link; the session cookie's value."""
    b = Browser(url)
    _status, headers, page = b.request("GET", link.split(url, 1)[1])
    pre = re.search(r"vodou_signin=([^;]+)", headers.get("set-cookie", "")).group(1)
    b.conn.request(
        "POST",
        "/signin",
        body=urlencode({"csrf": _field(page, "csrf"), "token": _field(page, "token"), "next": "/"}),
        headers={"content-type": "application/x-www-form-urlencoded", "cookie": f"vodou_signin={pre}"},
    )
    res = b.conn.getresponse()
    res.read()
    cookie = re.search(r"vodou_session=([^;]+)", res.getheader("set-cookie") or "")
    b.close()
    if res.status != 303 or cookie is None:
        raise RuntimeError(f"sign-in failed: {res.status}")
    return cookie.group(1)


def start_serve(tmp: Path, cfg: Config) -> tuple[subprocess.Popen, str, Path]:
    log = tmp / "serve.log"
    env = clean_env(tmp, cfg, VODOU_DEMO_DB=str(tmp / "demo.db"))
    with open(log, "w") as out:  # the child holds its own copy
        proc = subprocess.Popen(
            [sys.executable, "-m", "vodou_engine.web.serve", "--port", "0", "--store", str(tmp / "runs.db")],
            cwd=tmp,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        m = re.search(r"serving on (http://\S+)", log.read_text())
        if m:
            return proc, m.group(1), log
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    proc.kill()
    raise RuntimeError(f"serve did not start:\n{log.read_text()}")


def wait(predicate, what: str, timeout: float = 120.0, every: float = 0.005):
    return poll(predicate, what, timeout=timeout, every=every)


def run(cfg: Config) -> Case:
    import trio

    from vodou_engine.demo import db as demo
    from vodou_engine.policy import Policy
    from vodou_engine.runs import Runs
    from vodou_engine.web.identity import add_approver

    case = Case(
        "s",
        "`recipe serve`: approve on the page → effect, the inbox with 1,000 parked runs, 100 runs at once, a schedule's lag",
    )
    samples = max(cfg.runs * 2, 10) if not cfg.quick else 5
    parked_n = 1000 if not cfg.quick else 200
    at_once = 100 if not cfg.quick else 20
    with TempDir("serve") as tmp:
        runs = Runs(store=tmp / "runs.db", servers={}, policy=Policy())
        for text in (POST, ASK, TOGETHER, TICK):
            runs.save("x.recipe", text=text, by="bench")
        (tmp / "clipost.recipe").write_text(CLI_POST)
        # every minute: the next minute's due time falls somewhere in the parts below
        runs.add_schedule("tick", recipe="tick", cron="* * * * *", by="bench")
        _, link = add_approver(runs, "bench", by="bench", base_url="http://placeholder")
        proc, url, log = start_serve(tmp, cfg)
        try:
            cookie = sign_in(url, link.replace("http://placeholder", url))
            me = Browser(url, cookie)
            csrf = _field(me.request("GET", "/schedules")[2], "csrf")
            store = runs.store()

            # --- approve on the page -> the effect starts on the server ------------------------
            latency, post_rtt, server_ms = [], [], []
            for i in range(samples + 1):
                text = f"serve bench {uuid.uuid4().hex[:10]}"
                status, headers, _ = me.request("POST", "/recipes/post/run", {"csrf": csrf, "input:text": text})
                run_id = headers["location"].split("/runs/")[1].split("?")[0]
                card = wait(
                    lambda run_id=run_id: (
                        next(iter(store.pending_approvals(run_id)), None) if _exists(store, run_id) else None
                    ),
                    "the run to park",
                )
                time.sleep(0.05)  # the drive has parked and let go of the run
                form = {"csrf": csrf, "step": card.step, "approval": card.id, "fingerprint": card.fingerprint}
                sent = time.time()
                status, headers, _ = me.request("POST", f"/runs/{run_id}/approve", form)
                back = time.time()
                if status != 303:
                    raise RuntimeError(f"approve answered {status}")
                call = wait(
                    lambda text=text: [
                        c
                        for c in demo.calls(tmp / "demo.db", tool="slack_post_message")
                        if c["arguments"].get("text") == text
                    ],
                    "the effect",
                )[0]
                if i == 0:
                    continue  # the first after start: nothing else is warm yet
                latency.append(call["started"] - sent)
                post_rtt.append(back - sent)
                server_ms.append(float(headers["server-timing"].split("dur=")[1]) / 1000)
                cfg.log(
                    f"serve: approve → effect {latency[-1] * 1e3:.1f} ms (POST answered in {post_rtt[-1] * 1e3:.1f} ms)"
                )
            m = case.figure(
                "approve_to_effect_s",
                latency,
                "s",
                "approve on the page → the chat server begins the post (warm servers; POST send time → server's call start)",
            )
            case.figure("approve_post_rtt_s", post_rtt, "s", "the approval's POST answered (303), client side")
            case.figure("approve_post_server_s", server_ms, "s", "the approval's POST, server side (Server-Timing)")
            case.check("serve: approve on the page → effect starts", m, 0.025, unit="s", what="median, warm servers")

            # --- `recipe approve` from another process -> the effect, on serve's warm servers ---------
            whole, decided = [], []
            env = clean_env(tmp, cfg, VODOU_DEMO_DB=str(tmp / "demo.db"))  # serve's own: the run is bound to it
            for _ in range(samples):
                text = f"cli bench {uuid.uuid4().hex[:10]}"
                parked = subprocess.run(
                    [sys.executable, "-m", "vodou_engine", "run", "clipost.recipe", "--set", f"text={text}",
                     "--json", "--store", str(tmp / "runs.db")],
                    cwd=tmp, env=env, capture_output=True, text=True, timeout=120,
                )  # fmt: skip
                if parked.returncode != 3:
                    raise RuntimeError(f"recipe run exited {parked.returncode}:\n{parked.stderr[-3000:]}")
                run_id = json.loads(parked.stdout)["run"]
                card = store.pending_approvals(run_id)[0]
                sent = time.time()
                done = subprocess.run(
                    [sys.executable, "-m", "vodou_engine", "approve", run_id, "post", "--yes", "--store", str(tmp / "runs.db")],
                    cwd=tmp, env=env, capture_output=True, text=True, timeout=120,
                )  # fmt: skip
                if done.returncode != 0 or "warm servers of recipe serve" not in done.stdout:
                    raise RuntimeError(
                        f"recipe approve exited {done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
                    )
                call = wait(
                    lambda text=text: [
                        c
                        for c in demo.calls(tmp / "demo.db", tool="slack_post_message")
                        if c["arguments"].get("text") == text
                    ],
                    "the effect",
                )[0]
                decided_at = next(a.decided_at for a in store.approvals(run_id) if a.id == card.id)
                whole.append(call["started"] - sent)
                decided.append(call["started"] - decided_at)
                cfg.log(
                    f"serve: recipe approve → effect {whole[-1] * 1e3:.1f} ms (decision recorded → effect {decided[-1] * 1e3:.1f} ms)"
                )
            case.figure(
                "cli_approve_process_to_effect_s",
                whole,
                "s",
                "`recipe approve --yes` as a new process → the chat server begins the post on serve's warm servers",
            )
            m = case.figure(
                "cli_approve_to_effect_s",
                decided,
                "s",
                "`recipe approve`: its decision recorded → the chat server begins the post, driven by `recipe serve`",
            )
            case.check(
                "serve: `recipe approve` (another process) → effect starts",
                m,
                0.050,
                unit="s",
                what="decision recorded → call start, median",
            )

            # --- the inbox with 1,000 parked runs --------------------------------------------------
            ask_plan = runs.load("ask.recipe", text=ASK)[0]
            from vodou_engine.runs import Prepared
            from vodou_engine.servers import ServerSet

            ready = Prepared(plan=ask_plan, text=None, path=None, servers=ServerSet({}, "bench"))
            t0 = time.perf_counter()

            async def park_many() -> None:
                for _ in range(parked_n):
                    await runs.start(ready, actor="bench")

            trio.run(park_many)
            cfg.log(f"serve: {parked_n} parked runs made in {time.perf_counter() - t0:.1f} s")
            waiting = len(store.pending_approvals())
            inbox_server, inbox_client = [], []
            for i in range(samples * 2 + 1):
                c0 = time.perf_counter()
                status, headers, page = me.request("GET", "/")
                c1 = time.perf_counter()
                items = page.count('class="item"')
                if status != 200 or items < parked_n:
                    raise RuntimeError(f"inbox answered {status} with {items} items")
                if i == 0:
                    continue
                inbox_server.append(float(headers["server-timing"].split("dur=")[1]) / 1000)
                inbox_client.append(c1 - c0)
            m = case.figure(
                "inbox_server_s",
                inbox_server,
                "s",
                f"GET / with {waiting} questions waiting, server side (Server-Timing)",
            )
            case.figure(
                "inbox_client_s",
                inbox_client,
                "s",
                f"GET / with {waiting} questions waiting, client side ({len(page) // 1024} KiB page)",
            )
            case.check(
                f"serve: the inbox with {parked_n:,} parked runs", m, 0.100, unit="s", what="server side, median"
            )

            # --- 100 runs started at once -------------------------------------------------------------
            before = {r.run for r in runs.list(limit=10_000, recipe="together")}
            started: list[str] = []
            errors: list[str] = []
            go = threading.Barrier(at_once + 1)

            def one() -> None:
                b = Browser(url, cookie)
                try:
                    go.wait()
                    status, headers, _ = b.request("POST", "/recipes/together/run", {"csrf": csrf})
                    if status == 303:
                        started.append(headers["location"].split("/runs/")[1].split("?")[0])
                    else:
                        errors.append(str(status))
                finally:
                    b.close()

            threads = [threading.Thread(target=one) for _ in range(at_once)]
            for t in threads:
                t.start()
            go.wait()
            first = time.time()
            for t in threads:
                t.join()

            def all_ended():
                rows = [r for r in runs.list(limit=10_000, recipe="together") if r.run not in before]
                return rows if len(rows) == at_once and all(r.ended_at is not None for r in rows) else None

            rows = wait(all_ended, f"{at_once} runs to end", timeout=300, every=0.05)
            last = max(r.ended_at for r in rows)
            states = {str(r.state) for r in rows}
            slowest = max(r.ended_at - r.created_at for r in rows)
            wall = last - first
            case.figure("at_once_wall_s", wall, "s", f"{at_once} runs started at once: first POST → last run ended")
            case.figure("at_once_slowest_s", slowest, "s", "the slowest of them, its own created → ended")
            case.figure("at_once_ratio", wall / slowest, "x", "wall-clock / slowest run")
            case.bar(
                f"{at_once} runs at once",
                wall_s=wall,
                sum_s=sum(r.ended_at - r.created_at for r in rows),
                slowest_s=slowest,
            )
            case.check(
                f"serve: {at_once} runs at once all succeed",
                0 if (states == {"succeeded"} and not errors and len(started) == at_once) else 1,
                0,
                unit="x",
                what=f"states {sorted(states)}, refused POSTs {len(errors)}",
            )

            # --- a schedule fires after its due time ----------------------------------------------
            def fired():
                done = [
                    f for f in runs.firings("tick") if f.outcome == "fired" and f.run_id and _exists(store, f.run_id)
                ]
                return done or None

            firing = wait(fired, "the schedule to fire", timeout=90, every=0.05)[-1]
            created = store.get_run(firing.run_id).created_at
            lag = created - firing.due_at
            case.figure("schedule_fire_lag_s", lag, "s", "a schedule's due time → its run created (tick every second)")
            case.figure(
                "schedule_decide_lag_s",
                firing.decided_at - firing.due_at,
                "s",
                "a schedule's due time → the firing decided in the store",
            )
            case.check("serve: a schedule fires after its due time", lag, 1.0, unit="s", what="due time → run created")
            me.close()
        finally:
            proc.terminate()
            try:
                code = proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
                code = proc.wait()
            runs.close()
        if code != 0:
            case.note(f"serve exited {code} on SIGTERM:\n{log.read_text()[-2000:]}")
        case.check("serve: exits 0 on SIGTERM", float(code != 0), 0, unit="x", what="exit code")
    return case.done()


def _exists(store, run_id: str) -> bool:
    try:
        store.get_run(run_id)
        return True
    except Exception:  # noqa: BLE001 - not stored yet
        return False


if __name__ == "__main__":  # pragma: no cover - `python -m benchmarks.serve_bench [--quick]`
    import json

    c = run(Config(quick="--quick" in sys.argv, log=lambda m: print(m, file=sys.stderr)))
    print(json.dumps(c.to_json(), indent=2, default=str))
