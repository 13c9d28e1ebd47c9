"""Why a recipe does not parse, said the way a person can act on.

lark reports where it stopped and which terminals it would have taken; the
functions here read the line around that place (an open bracket, a step
option out of place, a reserved word, a name that is not one) and turn it
into one message with a caret and a hint. The indenter's own errors
(``Unclosed``, ``TooDeep``, ``BadDedent``) are worded here too.
"""

from __future__ import annotations

import re
import unicodedata
from typing import Any

from lark import Token
from lark.exceptions import UnexpectedCharacters, UnexpectedEOF, UnexpectedInput, UnexpectedToken

from ..errors import RecipeError
from ..limits import MAX_DEPTH
from . import ast
from .lexer import SHORTCUTS, BadDedent, TooDeep
from .source import Source, token_end, token_pos
from .words import NAME, RESERVED


def unclosed(source: Source, tok: Token, before: int | None = None) -> RecipeError:
    """A bracket left open: the caret on it; ``before`` is the line it swallowed, if known."""
    close = "}" if tok == "{" else "]"
    where = f" before line {before}" if before else ""
    return source.error(
        f"this `{tok}` is never closed",
        token_pos(tok),
        hint=f"close it with `{close}`{where}; JSON may span lines only while a bracket is open",
    )


def too_deep(source: Source, exc: TooDeep) -> RecipeError:
    """JSON nested too deep points at the bracket; blocks, at the line that opens one too many."""
    tok = exc.token
    pos = token_pos(tok) if exc.what == "JSON" else token_end(tok)
    return source.error(
        f"{exc.what} nested more than {MAX_DEPTH} levels deep", pos, hint=f"flatten it: at most {MAX_DEPTH} levels"
    )


def bad_dedent(source: Source, exc: BadDedent) -> RecipeError:
    """A line that goes back to no indentation a block around it has."""
    line = token_pos(exc.token).line + exc.token.count("\n")
    return source.error(
        f"this line is indented {exc.indent} spaces, which matches no enclosing block",
        ast.Pos(line, 1, max(1, exc.indent)),
        hint=f"indent it like the block it belongs to ({exc.expected} spaces, or one of the outer levels)",
    )


ADDRESS_HINT = (
    "a tool is addressed as `server.tool` with both names as they are spelled (letters, digits, - and _; "
    'the tool\'s may hold dots), e.g. `slack.slack_post_message`; quote any other name: `"My Server".tool`'
)

# Human labels for what the parser expected, in the order they are listed.
_LABELS = {
    "NAME": "a step name",
    "TOOL_ADDRESS": "a tool address like `server.tool`",
    "WRITE_TEXT": "`write ...`",
    "COLON": "`:`",
    "LBRACE": "`{`",
    "RBRACE": "`}`",
    "LSQB": "`[`",
    "RSQB": "`]`",
    "COMMA": "`,`",
    "STRING": "a JSON string",
    "SIGNED_NUMBER": "a number",
    "INT": "a number",
    "DURATION": "a duration like 15m",
    "QUESTION": "a question `- ...`",
    "_NL": "the end of the line",
    "_INDENT": "an indented block",
    "_DEDENT": "the end of the block",
    "PERSON": "a name",
    "EQUAL": "`=`",
    "ASK_ME": "`ask me:`",
    "NEED": "`need: K of N`",
    "PREVIEW": "`preview:`",
    "CHECK": "`check:`",
    "WITHOUT_ASKING": "`without asking`",
}

_OPTIONS = {"PREVIEW", "CHECK", "EXPIRES", "TIMEOUT", "RETRIES", "WITHOUT_ASKING"}
_JSON_START = {"STRING", "SIGNED_NUMBER", "LBRACE", "JSON_FLAT", "LSQB", "TRUE", "FALSE", "NULL"}
_STEP_LINE = re.compile(r"[ ]*([a-z_][a-z0-9_-]*)[ ]*:")
_ACTION = re.compile(r"[A-Za-z0-9_-]+\.|write\b")
_TAIL = re.compile(r"[^ ]*$")  # the text since the last space


def _expected_of(exc: UnexpectedInput) -> set[str]:
    """What the parser would have accepted, from its own table.

    The contextual lexer reports only the terminals it can lex in that state,
    which leaves out _INDENT and _DEDENT; the parse table knows them.
    """
    state: Any = getattr(exc, "state", None)  # lark's parser state, where it has one
    try:
        expected = {t for t in state.parse_conf.parse_table.states[state.position] if t.isupper()}
    except (AttributeError, KeyError, TypeError):
        expected = set(getattr(exc, "expected", None) or getattr(exc, "allowed", None) or ())
    return expected - SHORTCUTS


def syntax_error(source: Source, exc: UnexpectedInput, opened: list[Token] | None = None) -> RecipeError:
    """lark's error, said in the recipe's terms; ``opened`` are the brackets still open where it stopped."""
    line = getattr(exc, "line", None) or 1
    column = getattr(exc, "column", None) or 1
    expected = _expected_of(exc)
    opened = opened or []
    if isinstance(exc, UnexpectedToken):
        tok = exc.token
        if tok.type == "$END":
            header = _previous_line(source, len(source.text.split("\n")) + 1)
            if "QUESTION" in expected:
                return source.error(
                    "`ask me:` has no questions", header, hint="add lines like `- post to #daily?` under it"
                )
            if "_INDENT" in expected:
                return source.error("this block is empty", header, hint="indent at least one item under it")
            return source.error("the recipe ends in the middle of a step", header, hint="finish the last line")
        if tok.type in ("_INDENT", "_DEDENT"):
            # these borrow the newline's position; the line they open starts at its end
            pos = token_end(tok)
            return _explain(
                source, expected, "indentation" if tok.type == "_INDENT" else "end of block", tok.type, pos, "", opened
            )
        if tok.type == "_NL":
            return _explain(source, expected, "end of line", "_NL", ast.Pos(line, column), "", opened)
        return _explain(
            source, expected, f"`{tok}`", tok.type, ast.Pos(line, column, max(1, len(str(tok)))), str(tok), opened
        )
    if isinstance(exc, UnexpectedCharacters):
        ch = source.line(line)[column - 1 : column] or "?"
        return _explain(source, expected, f"`{ch}`", "CHAR", ast.Pos(line, column), ch, opened)
    if isinstance(exc, UnexpectedEOF):
        return source.error("the recipe ends too early", None, hint="finish the last block or step")
    return source.error(
        "this line cannot be read", ast.Pos(line, column), hint="check it against docs/recipe-language.md"
    )


def _previous_line(source: Source, before: int) -> ast.Pos | None:
    """The last line before ``before`` with something other than a comment on it."""
    for n in range(before - 1, 0, -1):
        text = source.line(n)
        body = _strip_comment(text).rstrip()
        if body.strip():
            start = len(body) - len(body.lstrip(" "))
            return ast.Pos(n, start + 1, len(body) - start)
    return None


def _strip_comment(text: str) -> str:
    m = re.search(r"(?:^|[ ])#(?:[ ]|$)", text)
    return text[: m.start()] if m else text


def _word_at(text: str, column: int) -> str:
    m = re.compile(r"[^ {}\[\]\":,]+").match(text, column - 1)
    return m.group() if m else text[column - 1 : column]


def _explain(
    source: Source, expected: set[str], got: str, got_type: str, pos: ast.Pos, text: str, opened: list[Token]
) -> RecipeError:
    line_text = source.line(pos.line)
    indent = len(line_text) - len(line_text.lstrip(" "))
    word = _word_at(line_text, pos.column) if got_type not in ("_NL", "_INDENT", "_DEDENT") else ""
    wpos = ast.Pos(pos.line, pos.column, max(1, len(word)))
    step_line = _STEP_LINE.match(line_text)

    # A bracket left open on an earlier line swallows the next step.
    if opened and token_pos(opened[-1]).line < pos.line and pos.column == indent + 1 and step_line:
        return unclosed(source, opened[-1], pos.line)
    if got_type == "_INDENT":
        return source.error(
            "this line is indented more than the one before it, which opens no block",
            pos,
            hint="indent only the items of a block (`together:`, `then:`, `ask me:`) and a step's options; "
            "otherwise line it up with the line above",
        )
    if got_type == "CHAR" and (not text.isprintable() or text.isspace()):
        label = unicodedata.name(text, "")
        return source.error(
            f"unexpected character U+{ord(text):04X}" + (f" ({label})" if label else ""),
            pos,
            hint="retype it as a plain space" if text.isspace() else "remove it",
        )
    if opened:
        return _explain_json(source, expected, got, got_type, pos, text, word, wpos, opened)
    if got_type in ("RBRACE", "RSQB"):
        return source.error(f"this `{text}` closes nothing", pos, hint="remove it, or check the brackets before it")
    if got_type == "QUESTION" and "QUESTION" not in expected:
        return source.error(
            "a question outside `ask me:`", wpos, hint="put `ask me:` on the line before, at the same indentation"
        )
    if expected & _OPTIONS and got_type not in _OPTIONS:
        name = "ask me:" if re.match(r"[ ]*ask[ ]+me\b", line_text) else word.rstrip(":")
        return source.error(
            f"`{name}` is not a step option" if name else f"unexpected {got} among the step's options",
            ast.Pos(pos.line, pos.column, max(1, len(name))),
            hint="a step's indented lines are its options: preview:, check:, expires:, timeout:, retries:, without asking (or don't ask); "
            "a next step goes at the step's own indentation",
        )
    option = re.match(r"([ ]*)(preview|check|expires|timeout|retries|without[ ]+asking|don't[ ]+ask)\b", line_text)
    if option and (
        pos.column == len(option.group(1)) + 1
        or "WRITE_TEXT" in expected
        or ("COLON" in expected and option.group(2)[0] in "wd")
    ):  # a step option where no tool step is above it
        return source.error(
            f"`{option.group(2)}` is a step option, but no tool step is right above it",
            ast.Pos(pos.line, len(option.group(1)) + 1, len(option.group(2))),
            hint="indent it under the tool step it belongs to, one level deeper than the step",
        )
    # `ask me:` and its questions
    if re.match(r"[ ]*ask[ ]+me[ ]*:[ ]*[^ #]", line_text) and pos.column > line_text.index(":") + 1:
        return source.error(
            "a question goes on its own line under `ask me:`",
            pos,
            hint=f"write `ask me:`, then `- {_strip_comment(line_text[line_text.index(':') + 1 :]).strip()}` on the next line",
        )
    if "QUESTION" in expected and expected <= {"QUESTION", "_INDENT", "_NL"}:
        if text.startswith("-") or line_text.lstrip().startswith("-"):
            return source.error(
                "a question is written `- question`, with a space after the dash",
                ast.Pos(pos.line, indent + 1),
                hint="e.g. `- post to #daily?`",
            )
        return source.error(
            "`ask me:` has no questions",
            _previous_line(source, pos.line) or pos,
            hint="add lines like `- post to #daily?` under it, at the same indentation as `ask me:` or deeper",
        )
    if expected == {"_INDENT"}:
        header = _previous_line(source, pos.line) or pos
        what = (
            "`inputs:` lists no inputs"
            if source.line(header.line).lstrip().startswith("inputs")
            else "this block is empty"
        )
        return source.error(what, header, hint="indent at least one item under it")
    # a reserved word used as a step name: `then: slack.post {...}`
    if step_line and step_line.start(1) < pos.column <= len(line_text):
        rest = line_text[step_line.end() :].lstrip(" ")
        if step_line.group(1) in RESERVED and _ACTION.match(rest):
            name = step_line.group(1)
            return source.error(
                f"`{name}` is a reserved word and cannot name a step",
                ast.Pos(pos.line, step_line.start(1) + 1, len(name)),
                hint="choose another name"
                + (f"; `{name}:` alone on a line starts a block" if name in ("together", "then") else ""),
            )
    # a name that is not a name: `Post:`, `café:`
    first = re.match(r"([ ]*)([^ :={\"#]+)[ ]*(?:[:=]|$|#)", line_text) or re.match(
        r"([ ]*(?:together|then)[ ]+)([^ :={\"#]+)[ ]*:", line_text
    )
    if (
        first
        and not NAME.match(first.group(2))
        and pos.column <= first.end(2) + 1
        and expected & {"NAME", "COLON", "EQUAL", "_NL"}
    ):
        name = first.group(2)
        lower = name.lower()
        return source.error(
            f"`{name}` is not a valid name",
            ast.Pos(pos.line, len(first.group(1)) + 1, len(name)),
            hint="names are lower case letters, digits, _ and -, starting with a letter or _"
            + (f": write `{lower}`" if NAME.match(lower) else ""),
        )
    if "PERSON" in expected or re.match(r"[ ]*approvers[ ]*:", line_text):
        return source.error(
            f"unexpected {got} in the list of approvers",
            pos if got_type == "_NL" else wpos,
            hint="write e.g. `approvers: ana, bruno` (names separated by commas)",
        )
    if re.match(r"[ ]*need[ ]*:", line_text):
        return source.error(
            f"unexpected {got} in a join rule",
            pos if got_type == "_NL" else wpos,
            hint="a join rule is written `need: K of N`, e.g. `need: 2 of 3`",
        )
    if "DURATION" in expected:
        if got_type == "_NL":
            return source.error("a duration is missing", pos, hint="write e.g. 15m, 90s, 2h or 1d")
        return source.error(
            f"`{word}` is not a duration",
            wpos,
            hint="write a whole number and a unit, s, m, h or d: e.g. 90s, 15m, 2h, 1d",
        )
    if "TOOL_ADDRESS" in expected:
        if word == "write":
            return source.error(
                "a write step needs a description of what to write",
                wpos,
                hint="write e.g. `briefing: write a morning briefing from {calendar, mail}`",
            )
        if got_type == "_NL":
            return source.error(
                "this step has no action",
                pos,
                hint="write `name: server.tool {...}` or `name: write ... from {...}`; blocks start with `together:` or `then:`",
            )
        if got_type in ("LBRACE", "JSON_FLAT"):
            return source.error(
                "the tool address is missing before the arguments", pos, hint="write `name: server.tool {...}`"
            )
        return source.error(
            f"`{word}` is not a tool address",
            wpos,
            hint=ADDRESS_HINT,
        )
    if "LBRACE" in expected and got_type in _JSON_START:
        return source.error("tool arguments are one JSON object in braces", pos, hint='write e.g. {"query": "x"}')
    if "STRING" in expected and (expected & _JSON_START) != {"STRING"}:
        return source.error(
            f"expected a JSON value, not {got}",
            wpos,
            hint='an input\'s default is written as in JSON: quote text ("hello"); numbers, true, false, null, lists and objects as they are',
        )
    if "STRING" in expected:
        return source.error(
            f"expected a quoted title, not {got}", wpos if word else pos, hint='write e.g. recipe "Morning briefing"'
        )
    if "COLON" in expected and got_type != "COLON":
        if re.match(r"[ ]*(together|then)\b", line_text):
            return source.error(
                f"expected `:` here, not {got}",
                pos,
                hint="a block starts with `together:` or `then:`, optionally named: `together sources:`",
            )
        return source.error(f"expected `:` here, not {got}", pos, hint="a step is written `name: server.tool {...}`")
    if "NAME" in expected and got_type == "CHAR":
        return source.error(
            f"unexpected {got}",
            pos,
            hint="a step name is lower case ([a-z_][a-z0-9_-]*), then `:`; blocks start with `together:`, `then:` or `ask me:`",
        )
    tail = _TAIL.search(line_text, 0, pos.column - 1)
    assert tail is not None, "it matches, if only the empty string"
    glued = tail.group() + word
    if step_line and "." in glued and pos.column > 1 and line_text[pos.column - 2] != " " and "_NL" in expected:
        return source.error(
            f"`{glued}` is not a tool address",
            ast.Pos(pos.line, pos.column - len(glued) + len(word), len(glued)),
            hint=ADDRESS_HINT,
        )
    if "_NL" in expected and got_type not in ("_NL", "_DEDENT"):
        after = "after the end of the step" if step_line else "at the end of the line"
        return source.error(
            f"unexpected {got} {after}",
            wpos,
            hint="tool arguments are one JSON object in braces; anything else on the line must be a `# comment`"
            if step_line
            else "anything else on the line must be a `# comment` (`#` and a space)",
        )
    return source.error(f"unexpected {got}", pos, hint="expected " + _expected_text(expected))


def _explain_json(
    source: Source,
    expected: set[str],
    got: str,
    got_type: str,
    pos: ast.Pos,
    text: str,
    word: str,
    wpos: ast.Pos,
    opened: list[Token],
) -> RecipeError:
    line_text = source.line(pos.line)
    before = line_text[: pos.column - 1].rstrip(" ")
    prev = before[-1:] if before else ""
    if text == "'":
        return source.error("malformed JSON: strings use double quotes", pos, hint="write \"text\", not 'text'")
    if text == '"':
        return source.error(
            "malformed JSON: this string is never closed",
            pos,
            hint='close it with `"` on the same line; a JSON string cannot span lines (write \\n for a line break)',
        )
    if got_type in ("RBRACE", "RSQB"):
        opener = opened[-1]
        if (text == "}") != (opener == "{"):
            return source.error(
                f"malformed JSON: this `{text}` does not close the `{opener}` on line {opener.line}, column {opener.column}",
                pos,
                hint=f"close the `{opener}` with `{'}' if opener == '{' else ']'}` first",
            )
        if prev == ",":
            return source.error(
                f"malformed JSON: a comma before `{text}`", pos, hint="JSON does not allow a trailing comma; remove it"
            )
        if prev == ":":
            return source.error("malformed JSON: a value is missing after `:`", pos, hint='write "key": value')
    if "COLON" in expected and "COMMA" not in expected:
        return source.error("malformed JSON: expected `:` after the key", pos, hint='write "key": value')
    if "STRING" in expected and not expected & (_JSON_START - {"STRING"}) and got_type != "STRING":
        return source.error(
            f"malformed JSON: a key must be a quoted string, not {got}", wpos, hint='write "key": value'
        )
    if got_type == "SIGNED_NUMBER" and prev.isdigit() and before.endswith("0"):
        return source.error(
            "malformed JSON: a number cannot start with 0", pos, hint="write 1, not 01 (or quote it as text)"
        )
    if "COMMA" in expected and got_type in _JSON_START:
        return source.error(
            f"malformed JSON: a `,` is missing before {got}",
            pos,
            hint="separate the items of an object or a list with commas",
        )
    if word and (word[:1].isalpha() or word[:1] == "_"):
        if word.lower() in ("true", "false", "null", "none"):
            hint = "JSON writes true, false and null, in lower case"
        elif word.lower() in ("nan", "infinity", "inf"):
            hint = "JSON numbers are finite; quote it as text"
        else:
            hint = 'JSON keys and text values are quoted: "key": "value"'
        return source.error(f"malformed JSON: unexpected `{word}`", wpos, hint=hint)
    return source.error(
        f"malformed JSON: unexpected {got}",
        pos,
        hint="expected " + _expected_text(expected) + "; check commas and quotes",
    )


def _expected_text(expected: set[str]) -> str:
    labels = []
    for name in sorted(expected - {"$END"}):
        label = _LABELS.get(name) or (f"`{name.lower()}`" if name.isupper() and not name.startswith("_") else None)
        if label and label not in labels:
            labels.append(label)
    return ", ".join(labels[:6]) or "something else"
