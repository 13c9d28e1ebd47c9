"""``recipe servers login | logout | status``: the OAuth sign-ins of servers reached by URL.

A server with ``"auth": "oauth"`` is reached with a grant a person made once in a
browser (``tools/oauth.py``; kept in the sign-in file, ``servers/signins.py``).
``login`` prints the authorization URL (and opens it in a browser, unless
``--no-browser``), waits for the browser to come back to a one-shot listener on the
loopback interface, and keeps the grant; ``logout`` forgets it; ``status`` lists the
OAuth servers of the server file in effect and whether each is signed in. No token is
ever printed.
"""

from __future__ import annotations

import time
from typing import Any

from ..errors import RefusedError, ServerConfigError, UsageError
from ..servers import ResolvedServer, ServerSet, load_servers
from ..servers.signins import SignIns, resource_key, sign_in_command, sign_ins_path
from ..views.term import say
from .common import _run_async


def cmd_servers(args: Any) -> int:
    servers = load_servers(args.servers)
    if args.servers_command == "status":
        return _status(servers)
    name = args.name
    config = servers.servers.get(name)
    if config is None:
        raise servers.unknown(name)
    if not config.oauth:
        raise UsageError(
            f'MCP server {name!r} in {servers.source} does not sign in: it has no "auth": "oauth"',
            hint='add "auth": "oauth" to its entry (a server reached by "url") if it asks for OAuth',
        )
    resolved = config.resolve(name)
    assert resolved.config.url is not None
    if args.servers_command == "logout":
        if not SignIns().remove(resource_key(resolved.config.url)):
            raise RefusedError(f"no sign-in is stored for MCP server {name!r} ({config.url}); nothing was changed")
        say(f"signed out of {name} ({config.url}); runs that need it now stop before they start.")
        return 0
    return _login(args, resolved)


def _login(args: Any, resolved: ResolvedServer) -> int:
    from ..tools import oauth  # here: trio, httpx2 and the MCP SDK, which only this action needs

    name = resolved.name
    timeout = args.timeout

    async def show(url: str) -> None:
        say(f"To sign in to {name} ({resolved.template.url}), open this address in a browser:", err=True)
        say(f"  {url}", err=True)
        if args.browser:
            await oauth.open_browser(url)
        say(f"waiting for the browser (at most {timeout:g} s; Ctrl-C to give up)...", err=True)

    async def main() -> Any:
        async with oauth.loopback() as (redirect_uri, wait):
            return await oauth.sign_in(resolved, redirect_uri, show, wait, timeout=timeout)

    grant = _run_async(main)
    when = f", the access token good until {_when(grant.expires_at)}" if grant.expires_at is not None else ""
    say(
        f"signed in to {name} ({resolved.template.url}) with {grant.issuer}{when}; it is refreshed as runs need it.",
        style="green",
    )
    say(f"kept in {sign_ins_path()} (readable by you only)", err=True)
    return 0


def _status(servers: ServerSet) -> int:
    oauth = {name: c for name, c in servers.servers.items() if c.oauth}
    if not oauth:
        say(f'no server in {servers.source} signs in ("auth": "oauth").')
        return 0
    signins = SignIns()
    for name, config in oauth.items():
        try:
            url = config.resolve(name).config.url
        except ServerConfigError as exc:
            say(f"{name}  {config.url}  cannot be resolved here: {exc.message}", style="red")
            continue
        assert url is not None
        grant = signins.get(resource_key(url))
        if grant is None:
            say(f"{name}  {config.url}  not signed in: `{sign_in_command(name)}`", style="red")
            continue
        refreshed = f", refreshed {_when(grant.refreshed_at)}" if grant.refreshed_at else ""
        expiry = ""
        if grant.expires_at is not None:
            expiry = (
                f", access token expired {_when(grant.expires_at)} (refreshed on next use)"
                if grant.expires_at <= time.time()
                else f", access token good until {_when(grant.expires_at)}"
            )
        say(
            f"{name}  {config.url}  signed in with {grant.issuer} {_when(grant.signed_in_at)}{refreshed}{expiry}",
            style="green",
        )
    return 0


def _when(epoch: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(epoch)) if epoch is not None else "?"
