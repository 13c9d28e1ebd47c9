"""``recipe author "SENTENCE"``: a recipe from one sentence, drafted by a model.

The model (through the ``llm`` library: the models a person configured) reads the
live tool catalogue (addresses, descriptions, input schemas, risk) and a compact
description of the language (``language.py``), and replies with a recipe. The
draft is compiled by the one compiler and resolved against the catalogue; on an
error the exact error (``file:line:col``, the source line, the caret, the hint)
goes back to the model, for at most ``MAX_CORRECTIONS`` rounds.

A sentence that asks for a schedule gets one as the recipe's first line,
``# schedule: CRON TZ`` (a comment to the compiler), parsed and checked here: it
is a proposal, shown beside the recipe, and created paused if saved.

Nothing runs, and nothing is saved unless asked (``-o FILE``, ``--save``). What
the model wrote is treated as an agent's proposal (``origin="agent"``): it may not
opt out of asking, and its schedule starts paused. Text in the model's reply that
claims an approval is only text.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from typing import Any

MAX_CORRECTIONS = 3
"""Rounds of error feedback after the first draft: at most four replies in all."""

SCHEDULE_LINE = re.compile(r"^[ ]*#[ ]*schedule[ ]*:(.*)$", re.I)
FENCE = re.compile(r"```[A-Za-z0-9_-]*[ ]*\n(.*?)(?:\n```|\Z)", re.S)

HOW_TO_CONFIGURE = (
    "configure a model with the llm library (https://llm.datasette.io): e.g. `llm keys set openai` for OpenAI's models, "
    "or `llm install llm-ollama` for a local one; then `llm models default MODEL`, or pass --model MODEL, or set VODOU_MODEL"
)


# --- the model ------------------------------------------------------------------------------


def choose_model(wanted: str | None = None) -> Any:
    """The ``llm`` model to draft with: ``wanted``, else ``$VODOU_MODEL``, else llm's default
    model, if it is installed and has its key. Anything else is a usage error (exit 2)
    that says how to configure one."""
    from ..errors import UsageError

    try:
        import llm
    except ImportError:
        raise UsageError("drafting a recipe needs the llm library, which is not installed", hint="pip install 'vodou_engine[llm]'; then " + HOW_TO_CONFIGURE) from None
    named = wanted or os.environ.get("VODOU_MODEL") or None
    try:
        model = llm.get_model(named)
    except llm.UnknownModelError:
        if named:
            raise UsageError(f"unknown model {named!r}; nothing was drafted", hint="`llm models` lists the models installed; " + HOW_TO_CONFIGURE, model=named) from None
        raise UsageError("no model is configured to draft recipes with; nothing was drafted", hint=HOW_TO_CONFIGURE) from None
    try:
        model.get_key()
    except llm.NeedsKeyException as exc:
        if named:
            raise UsageError(f"model {named!r} has no key ({exc}); nothing was drafted", hint=HOW_TO_CONFIGURE, model=named) from None
        raise UsageError(
            f"no model is configured to draft recipes with (llm's default, {model.model_id}, has no key); nothing was drafted", hint=HOW_TO_CONFIGURE, model=model.model_id
        ) from None
    return model


def _ask(conversation: Any, text: str, system: str, model_id: str) -> str:
    from ..errors import ModelError

    try:
        return conversation.prompt(text, system=system).text()
    except Exception as exc:  # a refused, failed or key-less request
        raise ModelError(f"model {model_id!r} could not draft: {type(exc).__name__}: {exc}", hint="check the model's key and settings (`llm keys`, `llm models`)", model=model_id) from None


# --- reading a reply ------------------------------------------------------------------------


def extract_recipe(reply: str) -> str:
    """The recipe in a model's reply: the first fenced block if there is one, else the reply."""
    m = FENCE.search(reply)
    text = m.group(1) if m else reply
    text = text.strip("\n")
    return text + "\n" if text else ""


def parse_schedule(text: str) -> tuple[dict[str, str] | None, Any]:
    """(``{"cron", "tz", "line"}`` or None, the error) from a ``# schedule: CRON TZ`` line among
    the comments that open the recipe."""
    from ..errors import RecipeError, UsageError

    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if not stripped:
            continue
        if not stripped.startswith("#"):
            break
        m = SCHEDULE_LINE.match(line)
        if not m:
            continue
        fields = m.group(1).split("#", 1)[0].split()
        column = line.index(":") + 2
        if len(fields) not in (5, 6):
            return None, RecipeError(
                f"a schedule line needs five cron fields and a time zone, not {len(fields)} field(s)",
                line=number, column=column, source_line=line, width=max(1, len(line) - column + 1),
                hint="write `# schedule: MIN HOUR DAY-OF-MONTH MONTH DAY-OF-WEEK TZ`, e.g. `# schedule: 0 8 * * 1-5 Europe/Lisbon`",
            )  # fmt: skip
        cron, tz = " ".join(fields[:5]), fields[5] if len(fields) == 6 else "UTC"
        from ..scheduler import check

        try:
            check(cron, tz)
        except UsageError as exc:
            return None, RecipeError(
                f"the schedule line is not usable: {exc.message}", line=number, column=column, source_line=line, width=max(1, len(line) - column + 1),
                hint="write `# schedule: MIN HOUR DAY-OF-MONTH MONTH DAY-OF-WEEK TZ` with an IANA zone, e.g. `# schedule: 0 8 * * 1-5 Europe/Lisbon`",
            )  # fmt: skip
        return {"cron": cron, "tz": tz, "line": line.strip()}, None
    return None, None


# --- drafting -------------------------------------------------------------------------------


class Draft:
    """A drafting session's outcome: the last ``recipe`` and its ``checked`` result, the
    proposed ``schedule``, and each reply's errors (``rounds``)."""

    def __init__(self, sentence: str, model_id: str):
        self.sentence = sentence
        self.model_id = model_id
        self.recipe = ""
        self.checked: Any = None
        self.schedule: dict[str, str] | None = None
        self.rounds: list[list[dict[str, Any]]] = []

    @property
    def ok(self) -> bool:
        return self.checked is not None and self.checked.ok

    @property
    def errors(self) -> list[dict[str, Any]]:
        return self.rounds[-1] if self.rounds else []

    def as_data(self) -> dict[str, Any]:
        out: dict[str, Any] = {"ok": self.ok, "model": self.model_id, "recipe": self.recipe, "schedule": self.schedule, "replies": len(self.rounds)}
        if self.checked is not None and self.checked.plan is not None:
            out["card"] = self.checked.card()
            from .checks import card_data

            out["plan"] = card_data(self.checked.plan, self.checked.status)
        out["errors"] = self.errors
        if len(self.rounds) > 1:
            out["corrected"] = self.rounds[:-1]
        return out


def prompt_for(sentence: str, catalogue: Any) -> tuple[str, str]:
    """(system, first user prompt)."""
    from .language import LANGUAGE, RULES

    system = RULES + "\n\n" + LANGUAGE
    user = (
        "TOOL CATALOGUE (the live servers' tools; the risk says whether a step calling the tool asks a person first)\n"
        + catalogue.prompt_text()
        + "\n\nTHE PERSON'S REQUEST\n"
        + sentence.strip()
        + "\n"
    )
    return system, user


def feedback_for(errors: list[dict[str, Any]]) -> str:
    """The compiler's errors, exactly as it renders them (place, source line, caret, hint)."""
    body = "\n\n".join(e.get("text") or e.get("message", "") for e in errors)
    return f"The recipe does not compile:\n\n{body}\n\nReply with the whole corrected recipe only."


def draft(
    sentence: str, *, model: Any = None, catalogue: Any, policy: Any, servers: Any = None, corrections: int = MAX_CORRECTIONS
) -> Draft:
    """Draft, compile, and feed errors back at most ``corrections`` times. ``model``: an llm
    model, a model name, or None for the configured one. Raises UsageError (no model),
    ModelError (the model failed); a draft that never compiles is returned with its errors."""
    from ..errors import UsageError

    if not sentence or not sentence.strip():
        raise UsageError("say what the recipe should do, in one sentence", hint='e.g. recipe author "every weekday at 8, brief me from my calendar and post it to #daily"')
    m = model if model is not None and not isinstance(model, str) else choose_model(model)
    result = Draft(sentence, m.model_id)
    system, user = prompt_for(sentence, catalogue)
    conversation = m.conversation()
    reply = _ask(conversation, user, system, m.model_id)
    from .checks import check_text
    from .error_data import error_data

    for round_ in range(corrections + 1):
        text = extract_recipe(reply)
        result.recipe = text
        checked = check_text(text, policy=policy, catalogue=catalogue, servers=servers, agent=True)
        schedule, problem = parse_schedule(text)
        if problem is not None:
            checked.add(problem)
        result.checked, result.schedule = checked, schedule
        result.rounds.append(list(checked.errors))
        if not checked.errors and text.strip():
            break
        if not text.strip():
            result.rounds[-1] = [error_data(UsageError("the reply held no recipe", hint="reply with the recipe text only"))]
        if round_ == corrections:
            break
        reply = _ask(conversation, feedback_for(result.rounds[-1]), system, m.model_id)
    return result


# --- the command ----------------------------------------------------------------------------


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``recipe author`` flags."""
    parser.add_argument("sentence", help='what the recipe should do, e.g. "every weekday at 8, brief me from my calendar and post it to #daily after I say yes"')
    parser.add_argument("--model", help="the llm model to draft with (default: $VODOU_MODEL, else llm's default model)")
    parser.add_argument("-o", "--output", metavar="FILE", help="write the recipe to FILE (nothing is written otherwise)")
    parser.add_argument("--save", action="store_true", help="save the recipe in the store (and its schedule, created paused); nothing is saved otherwise")
    parser.add_argument("--name", metavar="NAME", help="the name to save it under (default: its title); with --save")
    parser.add_argument("--servers", metavar="FILE", help="MCP servers JSON (default: $VODOU_SERVERS, ./mcp.json, ~/.config/vodou/mcp.json, then the demo servers)")
    parser.add_argument("--policy", metavar="FILE", help="tool policy file (default: $VODOU_POLICY, ./vodou-policy.toml, ~/.config/vodou/policy.toml)")
    parser.add_argument("--store", metavar="PATH", help="run store for --save (default: $VODOU_STORE or ~/.local/share/vodou/runs.db)")


def run(args: argparse.Namespace) -> int:
    """Draft, show the card (stderr) and the recipe (stdout); write or save only if asked.
    Exit 0 with a recipe that compiles, 2 when no model is configured or the last draft
    still does not compile."""
    import trio

    from ..errors import UsageError
    from ..runs import Runs, os_user
    from .catalogue import fetch

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
        err.print(f"the draft above still does not compile after {len(result.rounds)} replies from {result.model_id}; nothing was written or saved", style="red")
        exc = result.checked.exceptions[-1] if result.checked is not None and result.checked.exceptions else None
        if exc is not None:
            raise exc
        raise UsageError("the model replied with no recipe; nothing was written or saved", model=result.model_id)
    err.print(result.checked.card(), end="")
    corrections = len(result.rounds) - 1
    err.print(f"drafted by {result.model_id}" + (f" after {corrections} correction(s) from the compiler's errors" if corrections else ""), style="dim")
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
            record = runs.add_schedule(saved.name, recipe=saved.name, cron=result.schedule["cron"], tz=result.schedule["tz"], by=me, origin="agent", version=saved.version)
            done.append(f"schedule {record.name!r} ({record.cron}, {record.tz}) created {record.state}: a person enables it (`recipe schedule resume {record.name}`)")
        runs.close()
    if done:
        err.print("; ".join(done) + "; nothing was run.", style="green")
    else:
        err.print("nothing was run, written or saved (-o FILE writes it, --save saves it).", style="dim")
    return 0


def _console(stream: Any) -> Any:
    from rich.console import Console

    tty = stream.isatty()
    return Console(file=stream, highlight=False, markup=False, emoji=False, soft_wrap=not tty, width=None if tty else 10_000)


def _write(path: str, text: str) -> None:
    from ..errors import UsageError

    tmp = path + ".tmp"
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except OSError as exc:
        raise UsageError(f"cannot write {path}: {exc.strerror or exc}", hint="check that the directory exists and is writable") from None


def main(argv: list[str] | None = None) -> int:
    from ..standalone import command_main

    return command_main(argv, prog="recipe author", description="Draft a recipe from one sentence with a model; nothing runs.", add_arguments=add_arguments, run=run)


if __name__ == "__main__":
    sys.exit(main())
