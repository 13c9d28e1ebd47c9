"""``recipe author "SENTENCE"``: a recipe from one sentence, drafted by a model.

The drafting itself (the model, the prompt, the corrections from the compiler's
errors, the proposed schedule) is ``drafting.py``'s; this module is the command:
it lists the live tools, drafts, shows the card and the recipe, and writes or
saves it when asked. The CLI loads it for its flags with every command, so what
drafting needs (trio, the run API, the compiler, rich) is imported when the
command runs.

Nothing runs, and nothing is saved unless asked (``-o FILE``, ``--save``). What
the model wrote is treated as an agent's proposal (``origin="agent"``): it may not
opt out of asking, and its schedule starts paused. Text in the model's reply that
claims an approval is only text.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from ..errors import UsageError
from ..standalone import command_main


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``recipe author`` flags."""
    parser.add_argument(
        "sentence",
        help='what the recipe should do, e.g. "every weekday at 8, brief me from my calendar and post it to #daily after I say yes"',
    )
    parser.add_argument("--model", help="the llm model to draft with (default: $VODOU_MODEL, else llm's default model)")
    parser.add_argument(
        "-o", "--output", metavar="FILE", help="write the recipe to FILE (nothing is written otherwise)"
    )
    parser.add_argument(
        "--save",
        action="store_true",
        help="save the recipe in the store (and its schedule, created paused); nothing is saved otherwise",
    )
    parser.add_argument("--name", metavar="NAME", help="the name to save it under (default: its title); with --save")
    parser.add_argument(
        "--servers",
        metavar="FILE",
        help="MCP servers JSON (default: $VODOU_SERVERS, ./mcp.json, ~/.config/vodou/mcp.json, then the demo servers)",
    )
    parser.add_argument(
        "--policy",
        metavar="FILE",
        help="tool policy file (default: $VODOU_POLICY, ./vodou-policy.toml, ~/.config/vodou/policy.toml)",
    )
    parser.add_argument(
        "--store", metavar="PATH", help="run store for --save (default: $VODOU_STORE or ~/.local/share/vodou/runs.db)"
    )


def run(args: argparse.Namespace) -> int:
    """Draft, show the card (stderr) and the recipe (stdout); write or save only if asked.
    Exit 0 with a recipe that compiles, 2 when no model is configured or the last draft
    still does not compile."""
    # Here, not at the top: the CLI loads this module for its flags with every command.
    import trio

    from ..runs import Runs, os_user
    from .catalogue import fetch
    from .drafting import choose_model, draft

    if args.name and not args.save:
        raise UsageError("--name names what --save saves; add --save", hint="or drop --name")
    model = choose_model(args.model)  # before any server starts
    runs = Runs(store=args.store, servers=args.servers, policy=args.policy)
    servers, policy = runs.servers(), runs.policy()
    catalogue = trio.run(lambda: fetch(servers, policy))
    result = draft(args.sentence, model=model, catalogue=catalogue, policy=policy, servers=servers)
    err = _console(sys.stderr)
    for server, why in sorted(catalogue.unavailable.items()):
        err.print(f"warning: server {server} is unavailable: {why}", style="yellow")
    if not result.ok:
        sys.stderr.write(result.recipe)
        err.print(
            f"the draft above still does not compile after {len(result.rounds)} replies from {result.model_id}; nothing was written or saved",
            style="red",
        )
        exc = result.checked.exceptions[-1] if result.checked is not None and result.checked.exceptions else None
        if exc is not None:
            raise exc
        raise UsageError("the model replied with no recipe; nothing was written or saved", model=result.model_id)
    err.print(result.checked.card(), end="")
    corrections = len(result.rounds) - 1
    err.print(
        f"drafted by {result.model_id}"
        + (f" after {corrections} correction(s) from the compiler's errors" if corrections else ""),
        style="dim",
    )
    if result.schedule:
        err.print(f"proposed schedule: {result.schedule['cron']} ({result.schedule['tz']})", style="bold")
    sys.stdout.write(result.recipe)
    sys.stdout.flush()
    done = []
    if args.output:
        _write(args.output, result.recipe)
        done.append(f"wrote {args.output}")
    if args.save:
        me = os_user()
        saved = runs.save(f"{args.name or 'draft'}.recipe", text=result.recipe, name=args.name, by=me, origin="agent")
        done.append(f"saved {saved.name!r} version {saved.version}")
        if result.schedule:
            record = runs.add_schedule(
                saved.name,
                recipe=saved.name,
                cron=result.schedule["cron"],
                tz=result.schedule["tz"],
                by=me,
                origin="agent",
                version=saved.version,
            )
            done.append(
                f"schedule {record.name!r} ({record.cron}, {record.tz}) created {record.state}: a person enables it (`recipe schedule resume {record.name}`)"
            )
        runs.close()
    if done:
        err.print("; ".join(done) + "; nothing was run.", style="green")
    else:
        err.print("nothing was run, written or saved (-o FILE writes it, --save saves it).", style="dim")
    return 0


def _console(stream: Any) -> Any:
    from rich.console import Console  # as trio is in run(): not for the CLI's flags

    tty = stream.isatty()
    return Console(
        file=stream, highlight=False, markup=False, emoji=False, soft_wrap=not tty, width=None if tty else 10_000
    )


def _write(path: str, text: str) -> None:
    tmp = path + ".tmp"
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except OSError as exc:
        raise UsageError(
            f"cannot write {path}: {exc.strerror or exc}", hint="check that the directory exists and is writable"
        ) from None


def main(argv: list[str] | None = None) -> int:
    return command_main(
        argv,
        prog="recipe author",
        description="Draft a recipe from one sentence with a model; nothing runs.",
        add_arguments=add_arguments,
        run=run,
    )


if __name__ == "__main__":
    sys.exit(main())
