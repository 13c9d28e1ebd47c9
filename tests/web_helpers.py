"""Helpers for the inbox tests: reading forms out of pages, signing in, a `recipe serve` process."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import urlsplit

POST = 'recipe "post"\napprovers: ana\npost: slack.slack_post_message {"channel": "#daily", "text": "{text}"}\ninputs:\n  text = "from the inbox"\n'
"""A recipe whose one effect posts ``text`` to #daily; only ana may approve it."""


class _Forms(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.forms: list[dict] = []
        self._current: dict | None = None

    def handle_starttag(self, tag: str, attrs: list) -> None:
        a = dict(attrs)
        if tag == "form":
            self._current = {"action": a.get("action", ""), "method": (a.get("method") or "get").lower(), "fields": {}}
            self.forms.append(self._current)
        elif tag in ("input", "textarea", "select") and self._current is not None and a.get("name"):
            self._current["fields"][a["name"]] = a.get("value") or ""

    def handle_endtag(self, tag: str) -> None:
        if tag == "form":
            self._current = None


def forms(html: str, action: str | None = None) -> list[dict]:
    """The forms of a page (action, method, fields with their values); those posting to ``action``."""
    p = _Forms()
    p.feed(html)
    return [f for f in p.forms if action is None or f["action"] == action]


def form(html: str, action: str) -> dict[str, str]:
    found = forms(html, action)
    assert found, f"no form posting to {action} on the page:\n{html[:3000]}"
    return dict(found[0]["fields"])


def problem(html: str) -> str:
    m = re.search(r'class="problem"[^>]*>(.*?)</p>', html, re.S)
    return re.sub(r"\s+", " ", m.group(1)).strip() if m else ""


def path_of(url: str) -> str:
    parts = urlsplit(url)
    return parts.path + (f"?{parts.query}" if parts.query else "")


class Person:
    """One signed-in browser over a Starlette TestClient shared by several people: each
    request carries this person's session cookie and nothing else."""

    def __init__(self, client, name: str, cookie: str | None):
        self.client = client
        self.name = name
        self.cookie = cookie

    def _headers(self, extra: dict | None) -> dict:
        self.client.cookies.clear()
        h = dict(extra or {})
        if self.cookie:
            h["cookie"] = f"vodou_session={self.cookie}"
        return h

    def get(self, path: str, headers: dict | None = None, follow: bool = True):
        res = self.client.get(path, headers=self._headers(headers), follow_redirects=False)
        return self._follow(res) if follow else res

    def post(self, path: str, data: dict, headers: dict | None = None, follow: bool = True):
        res = self.client.post(path, data=data, headers=self._headers(headers), follow_redirects=False)
        return self._follow(res) if follow else res

    def _follow(self, res):
        """Redirects followed with this person's cookie (a client drops a cookie header it was given)."""
        for _ in range(5):
            if res.status_code not in (301, 302, 303, 307, 308):
                return res
            res = self.client.get(res.headers["location"], headers=self._headers(None), follow_redirects=False)
        return res

    def csrf(self) -> str:
        return form(self.get("/schedules").text, "/signout")["csrf"]


def sign_in(client, link: str, name: str) -> Person:
    """Follow a one-time sign-in link as a browser would: open it, press the button."""
    client.cookies.clear()
    page = client.get(path_of(link))
    assert page.status_code == 200, page.text
    fields = form(page.text, "/signin")
    res = client.post("/signin", data=fields, follow_redirects=False)
    assert res.status_code == 303, res.text
    cookie = res.cookies.get("vodou_session")
    assert cookie
    client.cookies.clear()
    return Person(client, name, cookie)


# --- a real `recipe serve` process ------------------------------------------------------------------


class Serving:
    """``python -m vodou_engine.web.serve`` on a free port, in an isolated home."""

    def __init__(self, tmp: Path, *extra: str, env: dict | None = None):
        self.tmp = tmp
        self.store = tmp / "runs.db"
        self.demo_db = tmp / "demo.db"
        self.env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith("VODOU_") and k not in ("XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_CACHE_HOME")
        }
        self.env.update(
            VODOU_STORE=str(self.store),
            VODOU_DEMO_DB=str(self.demo_db),
            XDG_CONFIG_HOME=str(tmp / "config"),
            XDG_DATA_HOME=str(tmp / "data"),
            XDG_CACHE_HOME=str(tmp / "cache"),
            **(env or {}),
        )
        self.argv = [sys.executable, "-m", "vodou_engine.web.serve", "--port", "0", "--store", str(self.store), *extra]
        self.log = tmp / "serve.log"
        self.proc: subprocess.Popen | None = None
        self.url = ""

    def start(self, timeout: float = 60) -> Serving:
        with open(self.log, "w") as log:  # the child holds its own copy of the file
            self.proc = subprocess.Popen(
                self.argv, cwd=self.tmp, env=self.env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            m = re.search(r"serving on (http://\S+)", self.log.read_text())
            if m:
                self.url = m.group(1)
                return self
            if self.proc.poll() is not None:
                raise AssertionError(f"serve exited {self.proc.returncode}:\n{self.log.read_text()}")
            time.sleep(0.05)
        raise AssertionError(f"serve did not start in {timeout} s:\n{self.log.read_text()}")

    def children(self) -> set[int]:
        """Every process below the serving one (its MCP servers, their children)."""
        return descendants(self.proc.pid)

    def stop(self, timeout: float = 60) -> tuple[int, set[int]]:
        """SIGTERM; (exit code, processes it started that are still alive)."""
        kids = self.children()
        self.proc.send_signal(signal.SIGTERM)
        code = self.proc.wait(timeout)
        deadline = time.monotonic() + 5
        alive = set(kids)
        while alive and time.monotonic() < deadline:
            alive = {p for p in alive if _alive(p)}
            time.sleep(0.05)
        return code, alive

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            for pid in self.children():
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
            self.proc.kill()
            self.proc.wait(10)


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def descendants(root: int) -> set[int]:
    """Every process below ``root`` (the MCP servers it started, their children), from /proc."""
    found: set[int] = set()
    todo = [root]
    while todo:
        pid = todo.pop()
        for task in Path(f"/proc/{pid}/task").glob("*"):
            try:
                kids = [int(k) for k in (task / "children").read_text().split()]
            except OSError:
                continue
            for k in kids:
                if k not in found:
                    found.add(k)
                    todo.append(k)
    return found


def wait_for(predicate, what: str, timeout: float = 30, every: float = 0.05):
    """Poll ``predicate`` until it returns something true; its value. A deadline, never a sleep as synchronisation."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = predicate()
        if last:
            return last
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what} (last: {last!r})")
