"""``recipe approver``, ``agent`` and ``policy check``: who may act, and on what terms.

Approvers act under a name other than their user name with a secret (``--as``);
agents use the MCP server of ``recipe serve`` with a bearer token and only
propose; the policy file is checked against the servers it names.
"""

from __future__ import annotations

from typing import Any

from ..agents import identity
from ..errors import RefusedError
from ..views.term import out, say
from ..web.identity import add_approver, sign_in_link
from .common import _me, _run_async, _runs
from .exits import TOKEN_ENV


def cmd_approver(args: Any) -> int:
    runs = _runs(args)
    me = _me(
        runs,
        f"approver {args.approver_command}",
        acts=args.approver_command != "list",
        create=args.approver_command == "add",
    )
    if args.approver_command == "add":
        token, link = add_approver(runs, args.name, by=me)
        say(
            f"{args.name} may now act with `--as {args.name}` when ${TOKEN_ENV} holds this secret (shown once; only its hash is kept):",
            err=True,
        )
        out(token + "\n")
        say(f"and sign in to the inbox (`recipe serve`) once, within a day, at:\n  {link}", err=True)
    elif args.approver_command == "link":
        say(f"a one-time sign-in link for {args.name}, good for a day (other devices stay signed in):", err=True)
        out(sign_in_link(runs, args.name, by=me) + "\n")
    elif args.approver_command == "remove":
        if not runs.remove_approver(args.name, by=me):
            raise RefusedError(f"there is no approver {args.name!r}; nothing was changed")
        say(f"{args.name} removed; their secret no longer works.")
    else:
        for name in runs.approvers():
            out(name + "\n")
    return 0


def cmd_agent(args: Any) -> int:
    runs = _runs(args)
    me = _me(runs, f"agent {args.agent_command}", acts=args.agent_command != "list", create=args.agent_command == "add")
    if args.agent_command == "add":
        token = identity.add_agent(runs, args.name, by=me, sees=args.see, approvers=args.approver)
        say(
            f"agent {args.name} may now use the MCP server of `recipe serve` at /mcp with this bearer token (shown once; only its hash is kept); its runs are started by agent:{args.name}:",
            err=True,
        )
        out(token + "\n")
        say(
            'send it as `Authorization: Bearer TOKEN` (docs/agents.md, "Over HTTP"); `recipe agent remove` stops it at once.',
            err=True,
        )
    elif args.agent_command == "remove":
        if not identity.remove_agent(runs, args.name, by=me):
            raise RefusedError(f"there is no agent {args.name!r}; nothing was changed")
        say(f"agent {args.name} removed; its token no longer works.")
    else:
        for rec in identity.agents(runs):
            people = identity.approvers_of(rec)
            out(f"{rec.name}\tsees {rec.sees}\tapprovers {', '.join(people) if people else '(the serving default)'}\n")
    return 0


def cmd_policy_check(args: Any) -> int:
    runs = _runs(args)
    problems = _run_async(runs.check_policy)
    policy = runs.policy()
    if not policy.source:
        say("no policy file in effect; nothing to check.")
        return 0
    for p in problems:
        say(p.message, style="red")
    if problems:
        return 2
    say(f"{policy.source}: every entry names a configured server and a tool it lists.", style="green")
    return 0
