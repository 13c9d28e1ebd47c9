"""Mutated recipes never crash the compiler: it returns a Plan or raises RecipeError.

The mutations are the mistakes people make while typing (a character lost,
doubled or stray, a tab, a line moved or repeated, an indentation off) plus
random unicode and truncation. Whatever comes out must be either a verified
plan that survives a round trip, or a positioned RecipeError that renders.
"""

from __future__ import annotations

from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from vodou_engine.compiler import compile_recipe, load_plan
from vodou_engine.errors import PlanError, RecipeError
from vodou_engine.plan import Plan, encode_plan

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = sorted(p.read_text(encoding="utf-8") for p in (ROOT / "recipes").glob("*.recipe"))
# characters that matter to the grammar, and some that do not belong at all
SPECIAL = [*"{}[]\":,#.- \n\t'=\\", "\r", "\r\n", "{{", "}}", "\x00", "\ufeff", "\u00a0", "é", "☕", "\ud800"]


@st.composite
def mutated(draw) -> str:
    text = draw(st.sampled_from(EXAMPLES))
    for _ in range(draw(st.integers(1, 3))):
        text = draw(_mutation(text))
    return text


def _mutation(text: str):
    n = len(text)
    lines = text.split("\n")
    at = st.integers(0, max(0, n - 1))
    line_at = st.integers(0, len(lines) - 1)
    char = st.one_of(st.sampled_from(SPECIAL), st.characters(codec="utf-8"), st.characters(max_codepoint=127))

    def rejoin(new_lines):
        return "\n".join(new_lines)

    def swap(i, j):
        new = list(lines)
        new[i], new[j] = new[j], new[i]
        return rejoin(new)

    def reindent(i, delta):
        new = list(lines)
        line = new[i]
        new[i] = " " * delta + line if delta > 0 else line[min(-delta, len(line) - len(line.lstrip(" "))) :]
        return rejoin(new)

    return st.one_of(
        at.map(lambda i: text[:i] + text[i + 1 :]),  # delete a character
        st.tuples(at, char).map(lambda t: text[: t[0]] + t[1] + text[t[0] :]),  # insert one
        at.map(lambda i: text[:i] + text[i : i + 1] * 2 + text[i + 1 :]),  # double one
        at.map(lambda i: text[:i] + "\t" + text[i:]),  # a tab
        at.map(lambda i: text[:i]),  # truncate
        st.tuples(line_at, line_at).map(lambda t: swap(*t)),  # swap two lines
        line_at.map(lambda i: rejoin(lines[: i + 1] + lines[i:])),  # duplicate a line
        line_at.map(lambda i: rejoin(lines[:i] + lines[i + 1 :])),  # delete a line
        st.tuples(line_at, st.sampled_from([-4, -2, -1, 1, 2, 4])).map(lambda t: reindent(*t)),  # indentation
        st.tuples(at, st.text(max_size=8)).map(lambda t: text[: t[0]] + t[1] + text[t[0] :]),  # random unicode
    )


def _check(text: str) -> None:
    try:
        plan = compile_recipe(text, "fuzz.recipe")
    except PlanError as exc:  # the compiler's own output failed verification: a compiler bug
        raise AssertionError(f"compiled an unverifiable plan: {exc}") from exc
    except RecipeError as exc:
        rendered = str(exc)
        rendered.encode("utf-8")  # printable as it is
        assert rendered.startswith("fuzz.recipe")
        assert exc.hint, rendered
        if exc.line is not None:
            assert 1 <= exc.line <= text.count("\n") + 1, rendered
            assert exc.column is not None and exc.column >= 1, rendered
            assert "^" in rendered, rendered
        return
    assert isinstance(plan, Plan)
    assert load_plan(encode_plan(plan)) == plan


@settings(max_examples=240, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(mutated())
def test_mutated_examples_compile_or_fail_cleanly(text):
    _check(text)


FRAGMENTS = [
    *SPECIAL,
    "together",
    "then",
    "ask me:",
    "- ",
    "need: ",
    "2 of 3",
    "1 of 1",
    "write ",
    " from {",
    "a",
    "b",
    "Post",
    ": ",
    "  ",
    "    ",
    "slack.slack_post_message",
    "time.get_current_time",
    "{a}",
    "{a.b.0}",
    '"x"',
    "1",
    "recipe ",
    "inputs:",
    "approvers: ",
    "approval expires: ",
    "expires: ",
    "15m",
    "0s",
    "preview: ",
    "check: ",
    "without asking",
    "don't ask",
    "gmail.messages_list",
]


@settings(max_examples=60, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from(FRAGMENTS), max_size=40).map("".join))
def test_random_fragments_compile_or_fail_cleanly(text):
    _check(text)
