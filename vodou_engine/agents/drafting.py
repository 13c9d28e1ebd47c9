"""A recipe from one sentence, drafted by a model: ``recipe author`` and the ``draft_recipe`` tool.

The model (through the ``llm`` library: the models a person configured) reads the
live tool catalogue (addresses, descriptions, input schemas, risk) and a compact
description of the language (``language.py``), and replies with a recipe. The
draft is compiled by the one compiler and resolved against the catalogue
(``checks.py``); on an error the exact error (``file:line:col``, the source line,
the caret, the hint) goes back to the model, for at most ``MAX_CORRECTIONS`` rounds.

A sentence that asks for a schedule gets one as the recipe's first line,
``# schedule: CRON TZ`` (a comment to the compiler), parsed and checked here: it
is a proposal, shown beside the recipe, and created paused if saved.

Nothing here runs or saves anything. What the model wrote is treated as an
agent's proposal: it may not opt out of asking. Text in the model's reply that
claims an approval is only text. ``llm`` is imported when a model is chosen: it
is optional, and its absence is a usage error that says how to install it.
"""

from __future__ import annotations

import os
import re
from typing import Any

from ..errors import ModelError, RecipeError, UsageError
from ..scheduler import check
from .checks import card_data, check_text
from .error_data import error_data
from .language import LANGUAGE, RULES

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
    try:
        import llm  # optional, and heavy: only when a draft is asked for
    except ImportError:
        raise UsageError(
            "drafting a recipe needs the llm library, which is not installed",
            hint="pip install 'vodou_engine[llm]'; then " + HOW_TO_CONFIGURE,
        ) from None
    named = wanted or os.environ.get("VODOU_MODEL") or None
    try:
        model = llm.get_model(named)
    except llm.UnknownModelError:
        if named:
            raise UsageError(
                f"unknown model {named!r}; nothing was drafted",
                hint="`llm models` lists the models installed; " + HOW_TO_CONFIGURE,
                model=named,
            ) from None
        raise UsageError(
            "no model is configured to draft recipes with; nothing was drafted", hint=HOW_TO_CONFIGURE
        ) from None
    try:
        model.get_key()
    except llm.NeedsKeyException as exc:
        if named:
            raise UsageError(
                f"model {named!r} has no key ({exc}); nothing was drafted", hint=HOW_TO_CONFIGURE, model=named
            ) from None
        raise UsageError(
            f"no model is configured to draft recipes with (llm's default, {model.model_id}, has no key); nothing was drafted",
            hint=HOW_TO_CONFIGURE,
            model=model.model_id,
        ) from None
    return model


def _ask(conversation: Any, text: str, system: str, model_id: str) -> str:
    try:
        answer: str = conversation.prompt(text, system=system).text()
        return answer
    except Exception as exc:  # noqa: BLE001 - a refused, failed or key-less request
        raise ModelError(
            f"model {model_id!r} could not draft: {type(exc).__name__}: {exc}",
            hint="check the model's key and settings (`llm keys`, `llm models`)",
            model=model_id,
        ) from None


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
        out: dict[str, Any] = {
            "ok": self.ok,
            "model": self.model_id,
            "recipe": self.recipe,
            "schedule": self.schedule,
            "replies": len(self.rounds),
        }
        if self.checked is not None and self.checked.plan is not None:
            out["card"] = self.checked.card()
            out["plan"] = card_data(self.checked.plan, self.checked.status)
        out["errors"] = self.errors
        if len(self.rounds) > 1:
            out["corrected"] = self.rounds[:-1]
        return out


def prompt_for(sentence: str, catalogue: Any) -> tuple[str, str]:
    """(system, first user prompt)."""
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
    sentence: str,
    *,
    model: Any = None,
    catalogue: Any,
    policy: Any,
    servers: Any = None,
    corrections: int = MAX_CORRECTIONS,
) -> Draft:
    """Draft, compile, and feed errors back at most ``corrections`` times. ``model``: an llm
    model, a model name, or None for the configured one. Raises UsageError (no model),
    ModelError (the model failed); a draft that never compiles is returned with its errors."""
    if not sentence or not sentence.strip():
        raise UsageError(
            "say what the recipe should do, in one sentence",
            hint='e.g. recipe author "every weekday at 8, brief me from my calendar and post it to #daily"',
        )
    m = model if model is not None and not isinstance(model, str) else choose_model(model)
    result = Draft(sentence, m.model_id)
    system, user = prompt_for(sentence, catalogue)
    conversation = m.conversation()
    reply = _ask(conversation, user, system, m.model_id)
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
            result.rounds[-1] = [
                error_data(UsageError("the reply held no recipe", hint="reply with the recipe text only"))
            ]
        if round_ == corrections:
            break
        reply = _ask(conversation, feedback_for(result.rounds[-1]), system, m.model_id)
    return result
