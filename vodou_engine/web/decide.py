"""What a decision page shows about one question, in the order a person decides by.

A person deciding on a phone needs, in the first screen: the question, what will
happen in words ("post message to #daily on slack"), the message as it will
read, and the buttons. This module shapes a frozen payload for that: the step's
effect in words, its text fields as text (their line breaks kept, never JSON
escapes), the other fields as a small table, and a ``preview:`` before/after as
a diff. The card itself (``cards.approval_card_text``, the same text on every
surface) stays on the page behind a toggle, with the raw JSON; every value here
is made visible by the templates exactly as the card makes it.
"""

from __future__ import annotations

import difflib
import json
import re
from typing import Any

from ..plan import ApprovalNode, LoopNode, Plan, QuestionNode, ToolNode
from ..runtime.loops import split_copy
from ..text_safety import findings, json_text, quote, visible

TEXT_KEYS = ("text", "message", "body", "content", "markdown", "description", "summary", "notes")
"""Argument names whose string value is a message a person reads (shown first, as text)."""

TARGET_KEYS = (
    ("channel", "to"),
    ("to", "to"),
    ("email", "for"),
    ("eventId", "event"),
    ("start", "at"),
    ("calendarId", "in calendar"),
    ("repo_path", "in"),
    ("path", "at"),
    ("id", ""),
)
"""Argument names that say where an effect lands, and the word put before their value."""

FIRST_LINE = 120
"""The inbox shows this many characters of a message's first line."""


def as_text(text: str) -> str:
    """A payload's string shown as text: its line breaks kept, every other hidden character,
    look-alike letter and ``⟨`` marked on each line (``text_safety.visible``), so it reads as
    the card reads it."""
    return "\n".join(visible(line) for line in text.split("\n"))


def effect_words(step: ToolNode, payload: Any) -> str:
    """What the step does, in words: the tool's name as a verb phrase (the server's name
    taken off its front), where it lands, and on which server: ``post message to #daily on
    slack``. Read from the frozen payload, so it names what would run."""
    tool = step.tool
    for prefix in (step.server + "_", step.server + "-", step.server + "."):
        if tool.lower().startswith(prefix.lower()):
            tool = tool[len(prefix) :]
    words = re.sub(r"([a-z])([A-Z])", r"\1 \2", tool)
    words = re.sub(r"[_\-.]+", " ", words).strip().lower() or step.tool
    places = []
    if isinstance(payload, dict):
        # every field that says where it lands, not only the first: a `channel` the tool ignores
        # must not be the one target named while `to` holds where it goes
        for key, word in TARGET_KEYS:
            value = payload.get(key)
            if isinstance(value, (str, int)) and not isinstance(value, bool) and str(value).strip():
                places.append(f"{word} {field_text(value)}" if word else field_text(value))
    where = (" " + ", ".join(places)) if places else ""
    return f"{visible(words)}{where} on {visible(step.server)}"


def text_keys(payload: Any) -> list[str]:
    """The payload's strings a person reads as text: those named like a message, and any
    holding a line break or longer than a line; the message-named first."""
    if not isinstance(payload, dict):
        return []
    named = [k for k in TEXT_KEYS if isinstance(payload.get(k), str)]
    other = [
        k for k, v in payload.items() if k not in named and isinstance(v, str) and ("\n" in v or len(v) > FIRST_LINE)
    ]
    return [*named, *other]


def text_fields(payload: Any) -> list[tuple[str, str]]:
    """:func:`text_keys` with their values, both made visible (:func:`as_text`)."""
    return [(key_text(k), as_text(payload[k])) for k in text_keys(payload)]


def field_text(value: Any) -> str:
    """A payload value in the table: a string as itself, unless as itself it would read as
    another value (``false``, ``3``, ``null``, ``[1]``, an empty or blank text, one with
    spaces at either end): then in quotes, as JSON writes it, so ``"false"`` never reads
    like ``false`` (a server may take the text for true); anything else as JSON."""
    if not isinstance(value, str):
        return json_text(value)
    if value.strip() != value or not value:
        return quote(value)
    try:
        json.loads(value)
    except ValueError:
        return visible(value)
    return quote(value)


def key_text(key: str) -> str:
    """A field's name as the page shows it: as itself, or in quotes when it is empty or has
    spaces at either end, so ``"to "`` never reads like ``to`` beside it (a page does not
    show a trailing space)."""
    return quote(key) if not key or key.strip() != key else visible(key)


def payload_view(payload: Any) -> dict[str, Any]:
    """The payload shown once: ``texts`` (name, text) as text blocks, ``fields`` (name, value)
    as a small table (a string as itself, anything else as compact JSON), ``raw`` the JSON as
    every card renders it."""
    keys = text_keys(payload)
    texts = text_fields(payload)
    fields: list[tuple[str, str]] = []
    if isinstance(payload, dict):
        for k, v in payload.items():
            if k in keys:
                continue
            fields.append((key_text(k), field_text(v)))
    elif payload is not None:
        fields.append(("value", json_text(payload)))
    return {"texts": texts, "fields": fields, "raw": json_text(payload)}


def first_line(text: str, limit: int = FIRST_LINE) -> str:
    """The first non-empty line of ``text``, cut at ``limit`` characters (saying so)."""
    line = next((ln.strip() for ln in text.split("\n") if ln.strip()), "")
    return visible(line) if len(line) <= limit else visible(line[: limit - 1]) + "…"


def _lines(value: Any, indent: str = "") -> list[str]:
    """A value as lines for a diff: a mapping as ``key: value``, text with its own line
    breaks (continued under ``│``), anything else as JSON."""
    out: list[str] = []
    if isinstance(value, dict):
        for k, v in value.items():
            k = key_text(k)
            if isinstance(v, dict):
                out.append(f"{indent}{k}:")
                out.extend(_lines(v, indent + "  "))
            elif isinstance(v, str) and "\n" not in v:
                out.append(f"{indent}{k}: {field_text(v)}")
            elif isinstance(v, str):
                first, *rest = as_text(v).split("\n")
                out.append(f"{indent}{k}: {first}")
                out.extend(f"{indent}  │ {line}" for line in rest)
            else:
                out.append(f"{indent}{k}: {field_text(v)}")
        return out
    if isinstance(value, str):
        return [indent + line for line in as_text(value).split("\n")]
    return [indent + line for line in json_text(value).split("\n")]


def preview_diff(preview: Any) -> list[tuple[str, str]] | None:
    """A ``preview:`` result with ``before`` and ``after`` as diff lines ``(kind, text)``,
    kind ``same``, ``del`` or ``add``; None for any other shape (shown as JSON instead)."""
    if not (isinstance(preview, dict) and "before" in preview and "after" in preview):
        return None
    before, after = _lines(preview["before"]), _lines(preview["after"])
    out: list[tuple[str, str]] = []
    for line in difflib.ndiff(before, after):
        tag, text = line[:2], line[2:]
        if tag == "  ":
            out.append(("same", text))
        elif tag == "- ":
            out.append(("del", text))
        elif tag == "+ ":
            out.append(("add", text))
    return out


def gate_of(plan: Plan | None, step: str) -> tuple[str | None, ToolNode | None]:
    """The question asked for ``step`` and the tool node it gates (None for a question
    with no effect of its own)."""
    if plan is None:
        return None, None
    index = plan.index()
    step = split_copy(index, step)[0]  # a loop inside another asks per outer item: `send[0]`
    for node in plan.nodes:
        if isinstance(node, ApprovalNode) and node.step == step:
            tool = index.get(node.step)
            return node.question, tool if isinstance(tool, ToolNode) else None
    found = index.get(step)
    if isinstance(found, QuestionNode):
        return found.text, None
    return None, found if isinstance(found, ToolNode) else None


def in_loop(plan: Plan | None, step: str) -> bool:
    """Whether ``step`` is an effect inside a loop's body: its question is a batch."""
    if plan is None:
        return False
    step = split_copy(plan.index(), step)[0]
    return any(isinstance(n, LoopNode) and step in n.body for n in plan.nodes)


def batch_items(plan: Plan | None, step: str, payload: Any) -> list[dict[str, Any]] | None:
    """A loop's batch question as one row per item, in item order: the item's number, its
    own fingerprint, its payload shown as any payload is (text fields as text, the rest as a
    small table), and its preview (per item, when the step has ``preview:``). None when the
    question is no batch (``{"items": [...]}`` asked for an effect inside a loop)."""
    if not (in_loop(plan, step) and isinstance(payload, dict) and isinstance(payload.get("items"), list)):
        return None
    tool_less = gate_of(plan, step)[1] is None
    rows = []
    for entry in payload["items"]:
        if not isinstance(entry, dict):
            continue
        part = entry.get("payload")
        if tool_less and isinstance(part, dict) and isinstance(part.get("outputs"), dict):
            part = part["outputs"]  # a question of its own: what it asks about for this item
        view = payload_view(part)
        preview = entry.get("preview")
        rows.append(
            {
                "item": entry.get("item"),
                "fingerprint": visible(str(entry.get("fingerprint", ""))),
                "texts": view["texts"],
                "fields": view["fields"],
                "diff": None if preview is None else preview_diff(preview),
                "preview_raw": None if preview is None else json_text(preview),
            }
        )
    return rows


BOX_LINES = 7
"""Lines a text's box shows before it scrolls, on a phone (``pre.text`` in app.css: 11em at
1.45; 15.5em, about ten, on a wider screen): a longer text is read only by scrolling it."""

EMPTY_RUN = 3
"""Empty lines in a row past which what follows looks like the end of the text."""


def out_of_sight(texts: list[tuple[str, str]], where: str = "") -> list[str]:
    """A warning, said above the buttons, for each text (name, text) longer than its box shows:
    a message padded with empty lines, or simply long, can carry its last words out of sight
    (``thanks!`` + forty empty lines + ``P.S. wire 5000 EUR``) and a person decides from what
    the box shows. The box is kept; the warning says how much there is and that it scrolls."""
    out = []
    for name, text in texts:
        lines = text.split("\n")
        while lines and not lines[-1].strip():
            lines.pop()
        if len(lines) <= BOX_LINES:
            continue
        run = longest = 0
        for line in lines:
            run = run + 1 if not line.strip() else 0
            longest = max(longest, run)
        gap = (
            f"; it holds {longest} empty lines in a row, so what follows them is out of sight until you scroll"
            if longest > EMPTY_RUN
            else ""
        )
        out.append(
            f"⚠ {where}`{name}` is {len(lines)} lines long and its box shows the first {BOX_LINES} or so: "
            f"scroll it to its last line before deciding{gap}; its last line reads: {_cut(lines[-1].strip())}"
        )
    return out


def _cut(line: str) -> str:
    return line if len(line) <= FIRST_LINE else line[: FIRST_LINE - 1] + "…"


def decision(plan: Plan | None, step: str, payload: Any, preview: Any) -> dict[str, Any]:
    """What the decision page shows first for one question: the question, the effect in
    words, the message as it will read, the card's warnings (hidden or look-alike
    characters, right-to-left text beside numbers: said before the buttons, as on the
    card), the payload once, the preview as a diff; for a question with no effect, the
    outputs it asks about."""
    question, tool = gate_of(plan, step)
    batch = batch_items(plan, step, payload)
    if batch is not None:  # one row per item, each with its own payload: nothing shown for the whole
        return {"question": question, "does": None if tool is None else effect_words(tool, None), "message": None,
                "payload": None, "about": None, "batch": batch,
                "warnings": findings(payload).lines("the payload")
                + [w for row in batch for w in out_of_sight(row["texts"], f"item {row['item']}: ")],
                "diff": None, "preview_raw": None, "preview_from": None}  # fmt: skip
    if tool is None:
        outputs = payload.get("outputs") if isinstance(payload, dict) else None
        about = []
        for name, value in (outputs or {}).items():
            about.append(
                {
                    "name": name,
                    "text": value if isinstance(value, str) else None,
                    "json": None if isinstance(value, str) else json_text(value),
                }
            )
        return {"question": question or (payload.get("question") if isinstance(payload, dict) else None),
                "does": None, "message": None, "payload": None, "about": about, "batch": None,
                "warnings": findings(outputs or {}).lines("what it asks about")
                + out_of_sight([(visible(a["name"]), as_text(a["text"])) for a in about if a["text"] is not None]),
                "diff": None, "preview_raw": None if preview is None else json_text(preview), "preview_from": None}  # fmt: skip
    view = payload_view(payload)
    message = view["texts"][0] if view["texts"] else None
    return {
        "question": question,
        "does": effect_words(tool, payload),
        "message": message,
        "payload": {**view, "texts": view["texts"][1:]},
        "about": None,
        "batch": None,
        "warnings": findings(payload).lines("the payload")
        + ([] if preview is None else findings(preview).lines("the preview"))
        + out_of_sight(view["texts"]),
        "diff": preview_diff(preview),
        "preview_raw": None if preview is None else json_text(preview),
        "preview_from": None if tool.preview is None else preview_from(tool),
    }


def preview_from(step: ToolNode) -> str | None:
    """Which tool a step's preview is, with the arguments the recipe gives it: what the page
    says above the preview, since any read tool (another server's) may be the preview."""
    ref = step.preview
    if ref is None:
        return None
    return f"{visible(ref.server)}·{visible(ref.tool)} {json_text(ref.args, indent=None)}"


def summary(plan: Plan | None, step: str, payload: Any) -> dict[str, str | None]:
    """For an inbox item: what will be done (the effect in words, or the question) and the
    first line of its message (or of the first text it asks about)."""
    question, tool = gate_of(plan, step)
    if tool is not None:
        keys = text_keys(payload)
        return {"does": effect_words(tool, payload), "first": first_line(payload[keys[0]]) if keys else None}
    outputs = payload.get("outputs") if isinstance(payload, dict) else None
    text = next((v for v in (outputs or {}).values() if isinstance(v, str) and v.strip()), None)
    return {"does": f"answer: {visible(question)}" if question else None, "first": first_line(text) if text else None}
