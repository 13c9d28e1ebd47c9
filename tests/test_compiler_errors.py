"""Bad recipes, each refused with the right place, a clear message and a hint.

Every row is (id, recipe, line, column, part of the message, part of the
hint). A recipe given as bytes goes through ``decode_utf8`` first, as a file
would. Rows marked "regression" were once crashes or unreadable messages.
"""

from __future__ import annotations

import pytest

from vodou_engine.compiler import compile_recipe, decode_utf8, load_source
from vodou_engine.errors import EXIT_USAGE, RecipeError
from vodou_engine.plan import ApprovalNode, QuestionNode, ToolNode, WriteNode

PATH = "bad.recipe"
T = 'now: time.get_current_time {"timezone": "Europe/Lisbon"}\n'
TWO = "together:\n  a: time.get_current_time {}\n  b: time.get_current_time {}\n"

CASES = [
    # --- lexical --------------------------------------------------------------
    ("tab-indent", "together:\n\ta: time.get_current_time {}\n", 2, 1, "a tab character", "spaces"),
    ("tab-mid-line", "a: time.get_current_time\t{}\n", 1, 25, "tab character in the middle of a line", "space"),
    ("invalid-utf8", b'a: time.get_current_time {"x": "caf\xe9"}\n', 1, 36, "invalid UTF-8 (byte 0xe9)", "UTF-8"),
    ("byte-order-mark", "\ufeffa: time.get_current_time {}\n", 1, 1, "byte-order mark", "without a byte-order mark"),
    ("control-character", "a: time.get_current_time {}\x00\n", 1, 28, "control character (U+0000)", "remove it"),
    (
        "lone-carriage-return",
        "a: time.get_current_time {}\rb: time.get_current_time {}\n",
        1,
        28,
        "carriage return",
        "line endings",
    ),
    (
        "no-break-space-indent",
        "together:\n\u00a0\u00a0a: time.get_current_time {}\n",
        2,
        1,
        "U+00A0 (NO-BREAK SPACE)",
        "plain space",
    ),
    # regression: a raw lone surrogate (only the Python API can pass one) crashed the plan encoder,
    # and when it shared a line with a tab the error itself could not be printed
    ("raw-lone-surrogate", "a: time.get_current_time {}\ud800\n", 1, 28, "a lone surrogate (U+D800)", "UTF-8"),
    ("raw-lone-surrogate-after-a-tab", "\t\ud800\n", 1, 2, "a lone surrogate (U+D800)", "UTF-8"),
    ("empty-file", "", 1, 1, "the recipe is empty", "add a step"),
    ("comment-only-file", "# just a comment\n\n# and another\n", 1, 1, "the recipe is empty", "add a step"),
    (
        "first-line-indented",
        "  a: time.get_current_time {}\n",
        1,
        1,
        "first line of a recipe cannot be indented",
        "column 1",
    ),
    (
        "bad-dedent",
        "together:\n    a: time.get_current_time {}\n  b: time.get_current_time {}\n",
        3,
        1,
        "indented 2 spaces, which matches no enclosing block",
        "0 spaces",
    ),
    (
        "indent-under-an-option",
        "a: slack.slack_post_message {}\n  expires: 5m\n    without asking\n",
        3,
        5,
        "indented more than the one before it",
        "line it up",
    ),
    (
        "blocks-too-deep",
        "".join("  " * i + "then:\n" for i in range(101)) + "  " * 101 + "a: time.get_current_time {}\n",
        101,
        201,
        "nested more than 100 levels",
        "at most 100",
    ),
    # --- names -------------------------------------------------------------
    ("uppercase-step-name", "Post: slack.slack_post_message {}\n", 1, 1, "`Post` is not a valid name", "write `post`"),
    ("non-ascii-step-name", "café: time.get_current_time {}\n", 1, 1, "`café` is not a valid name", "lower case"),
    ("missing-colon-after-name", "a time.get_current_time {}\n", 1, 3, "expected `:` here", "name: server.tool"),
    (
        "duplicate-step",
        T + "now: time.get_current_time {}\n",
        2,
        1,
        "the name `now` is used twice (first on line 1)",
        "unique",
    ),
    ("duplicate-input", "inputs:\n  x\n  x = 1\n" + T, 3, 3, "the name `x` is used twice (first on line 2)", "unique"),
    ("step-named-like-an-input", "inputs:\n  now\n" + T, 3, 1, "the name `now` is used twice", "rename"),
    (
        "reserved-then-as-step",
        "then: time.get_current_time {}\n",
        1,
        1,
        "`then` is a reserved word and cannot name a step",
        "starts a block",
    ),
    (
        "reserved-write-as-step",
        "write: time.get_current_time {}\n",
        1,
        1,
        "`write` is a reserved word",
        "choose another name",
    ),
    (
        "reserved-recipe-as-step",
        "recipe: time.get_current_time {}\n",
        1,
        1,
        "`recipe` is a reserved word",
        "choose another name",
    ),
    (
        "reserved-block-name",
        "together of:\n  a: time.get_current_time {}\n",
        1,
        10,
        "`of` is a reserved word and cannot name a block",
        "choose another name",
    ),
    # --- headers -------------------------------------------------------------
    (
        "title-twice",
        'recipe "A"\nrecipe "B"\n' + T,
        2,
        8,
        "`recipe title` is given twice (first on line 1)",
        "keep one",
    ),
    (
        "title-unquoted",
        "recipe Morning\n" + T,
        1,
        8,
        "expected a quoted title, not `Morning`",
        'recipe "Morning briefing"',
    ),
    ("title-bad-escape", 'recipe "\\q"\n' + T, 1, 8, "invalid JSON string", "escape"),
    ("approvers-twice", "approvers: ana\napprovers: bruno\n" + T, 2, 12, "`approvers` is given twice", "keep one"),
    ("approvers-empty", "approvers:\n" + T, 1, 11, "in the list of approvers", "ana, bruno"),
    (
        "approval-expires-twice",
        "approval expires: 5m\napproval expires: 6m\n" + T,
        2,
        19,
        "`approval expires` is given twice",
        "keep one",
    ),
    ("approval-expires-not-a-duration", "approval expires: soon\n" + T, 1, 19, "`soon` is not a duration", "15m"),
    ("inputs-empty", "inputs:\n" + T, 1, 1, "`inputs:` lists no inputs", "indent"),
    ("input-default-not-json", "inputs:\n  x = hello\n" + T, 2, 7, "expected a JSON value, not `hello`", '"hello"'),
    ("headers-but-no-steps", 'recipe "Only a title"\n', 1, 8, "the recipe has no steps", "add at least one step"),
    # --- blocks ----------------------------------------------------------------
    ("empty-together", "together:\n" + T, 1, 1, "this block is empty", "indent"),
    ("empty-then-at-end", T + "then:\n", 2, 1, "this block is empty", "indent"),
    ("then-with-only-a-need", TWO + "then:\n  need: 1 of 2\n", 5, 3, "holds only a `need:`", "steps that use the join"),
    ("need-mismatch", TWO + "  need: 1 of 3\n", 4, 3, "`need: 1 of 3` but this together has 2 items", "`need: 1 of 2`"),
    ("need-k-above-n", TWO + "  need: 3 of 2\n", 4, 3, "`need: 3 of 2` cannot be met", "between 1 and 2"),
    ("need-zero", TWO + "  need: 0 of 2\n", 4, 3, "`need: 0 of 2` would wait for nothing", "between 1 and 2"),
    ("need-at-top-level", T + "need: 1 of 1\n", 2, 1, "`need:` belongs inside a `together` block", "move it"),
    (
        "need-in-then-after-a-step",
        T + "then:\n  need: 1 of 1\n  b: time.get_current_time {}\n",
        3,
        3,
        "`need:` belongs inside a `together`",
        "move it",
    ),
    (
        "need-twice-inside",
        TWO + "  need: 1 of 2\n  need: 2 of 2\n",
        5,
        3,
        "this together has two `need:` lines",
        "one join rule",
    ),
    (
        "need-inside-and-after",
        TWO + "  need: 1 of 2\nthen:\n  need: 1 of 2\n  c: write x from {a, b}\n",
        6,
        3,
        "two `need:` lines",
        "one join rule",
    ),
    ("need-in-words", TWO + "  need: two of 2\n", 4, 9, "unexpected `two` in a join rule", "`need: K of N`"),
    ("need-without-of", TWO + "  need: 2\n", 4, 10, "in a join rule", "`need: K of N`"),
    (
        "block-missing-colon",
        "together sources\n  a: time.get_current_time {}\n",
        1,
        17,
        "expected `:` here",
        "`together sources:`",
    ),
    # --- ask me ------------------------------------------------------------------
    ("ask-me-empty-question", "ask me:\n- \n" + T, 2, 1, "an empty question", "after `- `"),
    ("ask-me-bare-dash", "ask me:\n-\n" + T, 2, 1, "an empty question", "after `- `"),
    ("ask-me-no-questions", "ask me:\n" + T, 1, 1, "`ask me:` has no questions", "- post to #daily?"),
    ("ask-me-at-the-end", T + "ask me:\n", 2, 1, "`ask me:` has no questions", "- post to #daily?"),
    ("ask-me-question-on-same-line", "ask me: post it?\n" + T, 1, 9, "a question goes on its own line", "`- post it?`"),
    (
        "ask-me-no-space-after-dash",
        "ask me:\n-post it?\n" + T,
        2,
        1,
        "with a space after the dash",
        "- post to #daily?",
    ),
    # --- steps and tool addresses ------------------------------------------------
    ("address-server-with-a-space", "a: My Server.post {}\n", 1, 4, "`My` is not a tool address", '`"My Server".tool`'),
    (
        "address-quoted-server-with-a-dot",
        'a: "my.server".get_status {}\n',
        1,
        4,
        "the server name 'my.server' has a `.`",
        "rename the server",
    ),
    (
        "address-invisible-character",
        'a: slack."get\u202estatus" {}\n',
        1,
        4,
        "holds an invisible character (U+202E)",
        "visible characters",
    ),
    ("address-slash", "a: slack/post {}\n", 1, 4, "`slack/post` is not a tool address", "server.tool"),
    ("address-no-tool", "a: slack. {}\n", 1, 4, "`slack.` is not a tool address", "server.tool"),
    ("address-missing", 'a: {"x": 1}\n', 1, 4, "the tool address is missing", "server.tool"),
    ("step-without-action", "a:\n" + T, 1, 3, "this step has no action", "server.tool"),
    (
        "text-after-the-json",
        "a: time.get_current_time {} extra\n",
        1,
        29,
        "unexpected `extra` after the end of the step",
        "# comment",
    ),
    (
        "args-not-an-object",
        "a: time.get_current_time [1, 2]\n",
        1,
        26,
        "tool arguments are one JSON object in braces",
        '{"query"',
    ),
    ("args-a-string", 'a: time.get_current_time "UTC"\n', 1, 26, "one JSON object in braces", '{"query"'),
    # --- JSON --------------------------------------------------------------------
    ("json-missing-comma", 'a: time.convert_time {"a": 1 "b": 2}\n', 1, 30, "a `,` is missing before", "commas"),
    (
        "json-missing-comma-across-lines",
        'a: time.convert_time {\n  "a": 1\n  "b": 2\n}\n',
        3,
        3,
        "a `,` is missing before",
        "commas",
    ),
    ("json-trailing-comma", 'a: time.convert_time {"a": 1,}\n', 1, 30, "a comma before `}`", "trailing comma"),
    ("json-single-quotes", "a: time.convert_time {'a': 1}\n", 1, 23, "strings use double quotes", "not 'text'"),
    (
        "json-unquoted-key",
        "a: time.convert_time {a: 1}\n",
        1,
        23,
        "a key must be a quoted string, not `a`",
        '"key": value',
    ),
    ("json-python-literal", 'a: time.convert_time {"a": True}\n', 1, 28, "unexpected `True`", "lower case"),
    ("json-missing-value", 'a: time.convert_time {"a": }\n', 1, 28, "a value is missing after `:`", '"key": value'),
    ("json-missing-colon", 'a: time.convert_time {"a" 1}\n', 1, 27, "expected `:` after the key", '"key": value'),
    (
        "json-mismatched-bracket",
        'a: time.convert_time {"a": [1, 2}\n',
        1,
        33,
        "does not close the `[` on line 1, column 28",
        "with `]`",
    ),
    ("json-unterminated-string", 'a: time.convert_time {"a": "b}\n', 1, 28, "this string is never closed", "same line"),
    ("json-bad-escape", 'a: time.convert_time {"a": "\\q"}\n', 1, 28, "invalid JSON string", "escape"),
    ("json-leading-zero", 'a: time.convert_time {"a": 01}\n', 1, 29, "cannot start with 0", "not 01"),
    (
        "json-never-closed",
        'a: time.convert_time {"a": 1,\n  "b": 2\nb: time.get_current_time {}\n',
        1,
        22,
        "this `{` is never closed",
        "before line 3",
    ),
    (
        "json-never-closed-at-eof",
        'a: time.convert_time {"a": [1,\n  2\n',
        1,
        28,
        "this `[` is never closed",
        "close it with `]`",
    ),
    ("json-duplicate-key", 'a: time.convert_time {"a": 1, "a": 2}\n', 1, 31, "duplicate key 'a'", "remove one"),
    # regression: 1e999 compiled to null, a lone surrogate escape and very deep nesting crashed
    ("json-number-too-large", 'a: time.convert_time {"a": 1e999}\n', 1, 28, "the number 1e999 is too large", "smaller"),
    # regression: more digits than Python converts to an int was a ValueError traceback
    (
        "json-integer-too-long",
        'a: time.convert_time {"a": ' + "7" * 5000 + "}\n",
        1,
        28,
        "(5000 characters) is too long",
        "smaller",
    ),
    (
        "json-integer-too-long-nested",
        'a: time.convert_time {"a": [' + "7" * 5000 + "]}\n",
        1,
        29,
        "(5000 characters) is too long",
        "smaller",
    ),
    (
        "json-integer-too-long-multiline",
        'a: time.convert_time {\n  "a": -' + "7" * 5000 + "\n}\n",
        2,
        8,
        "(5001 characters) is too long",
        "smaller",
    ),
    ("json-lone-surrogate", 'a: time.convert_time {"a": "\\ud800"}\n', 1, 28, "a lone surrogate \\ud800", "full pair"),
    (
        "json-too-deep",
        "a: time.convert_time {" + '"a": ' + "[" * 100 + "]" * 100 + "}\n",
        1,
        127,
        "JSON nested more than 100 levels",
        "at most 100",
    ),
    # --- references ----------------------------------------------------------------
    (
        "unknown-reference",
        'calendar: google-calendar.list-events {}\npost: slack.slack_post_message {"text": "{calender}"}\n',
        2,
        43,
        "unknown name `calender`",
        "did you mean `calendar`?",
    ),
    (
        "reference-to-a-later-step",
        'post: slack.slack_post_message {"text": "{cal}"}\ncal: google-calendar.list-events {}\n',
        1,
        43,
        "`cal` runs later (line 2)",
        "move `cal` before `post`",
    ),
    (
        "reference-to-a-parallel-sibling",
        'together:\n  cal: google-calendar.list-events {}\n  post: slack.slack_search_messages {"query": "{cal.events.0.id}"}\n',
        3,
        49,
        "runs at the same time as `post`",
        "`then:`",
    ),
    (
        "reference-to-itself",
        'a: slack.slack_search_messages {"query": "{a}"}\n',
        1,
        44,
        "step `a` refers to itself",
        "ran before it",
    ),
    (
        "reference-to-a-block",
        'together grp:\n  a: time.get_current_time {}\nb: slack.slack_search_messages {"query": "{grp}"}\n',
        3,
        44,
        "`grp` is a block, not a step",
        "steps inside it",
    ),
    (
        "reference-after-an-escape",
        'a: slack.slack_search_messages {"query": "\\u00e9 {zz}"}\n',
        1,
        51,
        "unknown name `zz`",
        "earlier step",
    ),
    (
        "reference-to-a-droppable-branch",
        TWO + '  need: 1 of 2\nc: slack.slack_post_message {"text": "{a}"}\n',
        5,
        40,
        "`a` may be dropped by `need: 1 of 2` on line 4 (a branch the quorum leaves out has no value), so a tool argument cannot rely on it",
        "`write` step (which is told what is missing), or make that together need all 2 items (`need: 2 of 2`, or no `need:`)",
    ),
    (
        "loop-over-a-droppable-branch",
        TWO + '  need: 1 of 2\nfor each x in {b.items}:\n  c: slack.slack_post_message {"text": "{x}"}\n',
        5,
        16,
        "`b` may be dropped by `need: 1 of 2` on line 4 (a branch the quorum leaves out has no value), so the list of a `for each` cannot rely on it",
        "make that together need all 2 items (`need: 2 of 2`, or no `need:`), or loop in the same branch of the together, after `b`",
    ),
    (
        "reference-droppable-after-then-need",
        TWO + 'then:\n  need: 1 of 2\n  c: slack.slack_post_message {"text": "x {b.datetime}"}\n',
        6,
        44,
        "`b` may be dropped by `need: 1 of 2` on line 5",
        "`write` step",
    ),
    (
        "reference-unclosed-brace",
        T + 'b: slack.slack_post_message {"text": "see {now"}\n',
        2,
        43,
        "a `{` that starts no reference",
        "{{",
    ),
    (
        "reference-not-a-name",
        T + 'b: slack.slack_post_message {"text": "see {Now}"}\n',
        2,
        43,
        "{Now} is not a reference",
        "lower-case",
    ),
    (
        "reference-lone-close-brace",
        'b: slack.slack_post_message {"text": "a } b"}\n',
        1,
        41,
        "a `}` that closes no reference",
        "}}",
    ),
    # --- write ---------------------------------------------------------------------
    ("write-without-prose", "a: write\n", 1, 4, "needs a description of what to write", "write a morning briefing"),
    (
        "write-only-a-from-list",
        T + "b: write from {now}\n",
        2,
        4,
        "needs a description of what to write",
        "write a morning briefing",
    ),
    ("write-from-unknown-name", T + "b: write a note from {nw}\n", 2, 23, "unknown name `nw`", "did you mean `now`?"),
    (
        "write-from-without-braces",
        T + "b: write a note from now\n",
        2,
        4,
        "lists its inputs as `from {a, b}`",
        "write a morning briefing",
    ),
    (
        "write-from-bad-name",
        T + "b: write a note from {now, Then}\n",
        2,
        28,
        "'Then' is not a step or input name",
        "lower case",
    ),
    ("write-input-twice", T + "b: write a note from {now, now}\n", 2, 28, "`now` is listed twice", "once"),
    (
        "write-with-an-option",
        "a: write a haiku\n  preview: slack.slack_preview_message {}\n",
        2,
        3,
        "`preview` applies to tool steps, not to `write`",
        "nothing to preview",
    ),
    # --- step options ----------------------------------------------------------------
    (
        "preview-effectful",
        "a: slack.slack_post_message {}\n  preview: slack.slack_post_message {}\n",
        2,
        12,
        "`preview:` must be a read-only tool",
        "read tool",
    ),
    (
        "check-effectful",
        "a: slack.slack_post_message {}\n  check: slack.slack_set_topic {}\n",
        2,
        10,
        "`check:` must be a read-only tool",
        "read tool",
    ),
    (
        "without-asking-critical",
        'a: slack.slack_delete_message {"channel": "#x", "ts": "1"}\n  without asking\n',
        1,
        1,
        "`without asking` is refused for `a`",
        "allow_without_asking",
    ),
    (
        "dont-ask-critical",
        'drop: google-calendar.delete-event {"eventId": "e1"}\n  don\'t ask\n',
        1,
        1,
        "is refused for `drop`",
        "policy file",
    ),
    (
        "option-twice",
        "a: slack.slack_post_message {}\n  expires: 10m\n  expires: 5m\n",
        3,
        12,
        "`expires` is given twice for `a` (first on line 2)",
        "keep one",
    ),
    (
        "without-asking-twice",
        "a: slack.slack_post_message {}\n  without asking\n  don't ask\n",
        3,
        3,
        "`without asking` is given twice",
        "keep one",
    ),
    (
        "duration-bad-unit",
        "a: slack.slack_post_message {}\n  expires: 10x\n",
        2,
        12,
        "`10x` is not a duration",
        "s, m, h or d",
    ),
    (
        "duration-zero",
        "a: slack.slack_post_message {}\n  expires: 0m\n",
        2,
        12,
        "a duration must be more than zero",
        "15m",
    ),
    ("duration-too-long", "a: slack.slack_post_message {}\n  expires: 366d\n", 2, 12, "longer than 365 days", "365d"),
    ("duration-missing", "a: slack.slack_post_message {}\n  expires:\n", 2, 11, "a duration is missing", "15m"),
    (
        "unknown-option",
        "a: slack.slack_post_message {}\n  attempts: 3\n",
        2,
        3,
        "`attempts` is not a step option",
        "preview:, check:",
    ),
    (
        "retries-on-an-effect",
        "a: slack.slack_post_message {}\n  retries: 3\n",
        2,
        3,
        "never tried again by itself",
        "happen twice",
    ),
    (
        "retries-out-of-range",
        "a: time.get_current_time {}\n  retries: 11\n",
        2,
        12,
        "retries must be from 1 to 10",
        "retries: 2",
    ),
    (
        "indented-next-step",
        "a: slack.slack_post_message {}\n  b: time.get_current_time {}\n",
        2,
        3,
        "`b` is not a step option",
        "own indentation",
    ),
    (
        "option-not-indented",
        "a: slack.slack_post_message {}\npreview: slack.slack_preview_message {}\n",
        2,
        1,
        "`preview:` is a step option, but no tool step is right above it",
        "indent it under",
    ),
    (
        "without-asking-not-indented",
        "a: slack.slack_post_message {}\nwithout asking\n",
        2,
        1,
        "`without asking` is a step option",
        "indent it under",
    ),
    (
        "expires-not-indented",
        "a: slack.slack_post_message {}\nexpires: 5m\n",
        2,
        1,
        "`expires` is a step option",
        "indent it under",
    ),
    ("question-outside-ask-me", "- post it?\n" + T, 1, 1, "a question outside `ask me:`", "`ask me:`"),
    ("bracket-closes-nothing", 'a: time.convert_time {"a": 2}}\n', 1, 30, "this `}` closes nothing", "remove it"),
    (
        "json-key-not-a-string",
        "a: time.convert_time {1: 2}\n",
        1,
        23,
        "a key must be a quoted string, not `1`",
        '"key": value',
    ),
    ("tool-address-non-ascii", "a: slack.pöst {}\n", 1, 4, "`slack.pöst` is not a tool address", "server.tool"),
    (
        "block-name-uppercase",
        "together Sources:\n  a: time.get_current_time {}\n",
        1,
        10,
        "`Sources` is not a valid name",
        "write `sources`",
    ),
    ("input-name-uppercase", "inputs:\n  Repo\n" + T, 2, 3, "`Repo` is not a valid name", "write `repo`"),
    (
        "not-an-option",
        "a: slack.slack_post_message {}\n  need: 1 of 1\n",
        2,
        3,
        "`need` is not a step option",
        "preview:, check:",
    ),
    (
        "preview-reference-later",
        'a: slack.slack_post_message {}\n  preview: slack.slack_preview_message {"text": "{b}"}\nb: time.get_current_time {}\n',
        2,
        51,
        "`b` runs later (line 3)",
        "move `b` before `a`",
    ),
    # --- lines the lexer reads whole (STEP_NL, JSON_LINE): the same errors as when read in parts
    (
        "nested-duplicate-key",
        'a: time.convert_time {"k": {"n": 1, "n": 2}}\n',
        1,
        37,
        "duplicate key 'n' in JSON object",
        "remove one",
    ),
    (
        "nested-then-junk",
        'a: time.convert_time {"k": {"n": 1}} zz\n',
        1,
        38,
        "unexpected `zz` after the end of the step",
        "# comment",
    ),
    (
        "nested-then-comma",
        'a: time.convert_time {"k": {"n": 1}},\n',
        1,
        37,
        "unexpected `,` after the end of the step",
        "# comment",
    ),
    ("nested-nan", 'a: time.convert_time {"k": {"n": NaN}}\n', 1, 34, "malformed JSON: unexpected `NaN`", "finite"),
    (
        "nested-unknown-reference",
        'a: time.convert_time {"k": {"n": "{nope}"}}\n',
        1,
        36,
        "unknown name `nope`",
        "earlier step",
    ),
    (
        "one-line-too-deep",
        'a: time.convert_time {"a": ' + "[" * 101 + "]" * 101 + "}\n",
        1,
        127,
        "JSON nested more than 100 levels deep",
        "at most 100",
    ),
    # the JSON's mistake is found before the indentation of the next line is read, as in parts
    (
        "duplicate-key-before-bad-dedent",
        'together:\n    a: time.convert_time {"k": 1, "k": 2}\n  b: time.get_current_time {}\n',
        2,
        35,
        "duplicate key 'k'",
        "remove one",
    ),
    (
        "flat-unknown-reference-then-comment",
        'a: time.convert_time {"k": "{nope}"} # {x}\n',
        1,
        30,
        "unknown name `nope`",
        "earlier step",
    ),
]


def compile_any(src):
    text = decode_utf8(src, PATH) if isinstance(src, bytes) else src
    return compile_recipe(text, PATH)


def test_the_table_is_large_and_distinct():
    ids = [c[0] for c in CASES]
    assert len(ids) == len(set(ids)) >= 30
    assert len({c[1] for c in CASES}) == len(CASES)


@pytest.mark.parametrize("case_id, text, line, column, message, hint", CASES, ids=[c[0] for c in CASES])
def test_bad_recipe(case_id, text, line, column, message, hint):
    with pytest.raises(RecipeError) as info:
        compile_any(text)
    err = info.value
    assert err.exit_code == EXIT_USAGE
    assert (err.line, err.column) == (line, column), str(err)
    assert message in err.message, str(err)
    assert err.hint and hint in err.hint, str(err)
    rendered = str(err)
    lines = rendered.split("\n")
    assert lines[0] == f"{PATH}:{line}:{column}: error: {err.message}"
    caret = lines[2]
    assert caret.startswith("  " + " " * (column - 1) + "^"), rendered
    assert set(caret.strip()) == {"^"}, rendered
    assert lines[-1].startswith("  hint: ")
    rendered.encode("utf-8")  # printable


def test_invalid_utf8_in_a_file_is_positioned(tmp_path):
    path = tmp_path / "latin1.recipe"
    path.write_bytes(b'a: time.get_current_time {}\nb: slack.slack_post_message {"text": "ol\xe1"}\n')
    with pytest.raises(RecipeError) as info:
        load_source(str(path))
    assert (info.value.line, info.value.column) == (2, 41)
    assert "invalid UTF-8" in str(info.value) and "hint:" in str(info.value)


def test_a_missing_file_is_a_recipe_error(tmp_path):
    with pytest.raises(RecipeError, match="cannot read"):
        load_source(str(tmp_path / "nope.recipe"))


# --- valid edge cases ------------------------------------------------------------


def test_comments_everywhere():
    plan = compile_recipe(
        "# a header comment\n"
        'recipe "Commented"   # after the title\n'
        "\n"
        "inputs:   # after a header\n"
        "  # before an input\n"
        '  channel = "#daily"   # after an input\n'
        "together:   # after a block header\n"
        "  # between items\n"
        "  a: time.get_current_time {  # inside multi-line JSON\n"
        '    "timezone": "Europe/Lisbon"   # after a value\n'
        "    # on a line of its own, still inside\n"
        "  }  # after the closing brace\n"
        '  b: slack.slack_search_messages {"query": "#daily # not a comment"} # after a step\n'
        "# at column 1 inside a block\n"
        "then:\n"
        "  c: write a note from {a, b}   # after a write\n"
        "  ask me:   # after ask me\n"
        "  - post it?   # after a question\n"
        '  post: slack.slack_post_message {"channel": "{channel}", "text": "{c}"}\n'
        "    expires: 5m   # after an option\n"
        "# the end\n"
    )
    assert plan.recipe.name == "Commented"
    assert plan.node("a").args == {"timezone": "Europe/Lisbon"}
    assert plan.node("b").args == {"query": "#daily # not a comment"}
    assert plan.node("c").prompt == "a note"
    assert plan.node("approve:post").question == "post it?"
    assert plan.node("post").expires_s == 300
    assert plan.inputs[0].default == "#daily"


def test_hash_without_a_space_stays_text():
    plan = compile_recipe(
        T + "note: write a summary for #daily and issue #42 from {now}\n"
        "ask me:\n"
        "- post to #daily? # this part is a comment\n"
        'post: slack.slack_post_message {"channel": "#daily", "text": "{note}"}\n'
    )
    assert plan.node("note").prompt == "a summary for #daily and issue #42"
    assert plan.node("approve:post").question == "post to #daily?"


def test_alignment_spaces_after_the_name():
    plan = compile_recipe(
        "together:\n"
        '  a:          time.get_current_time {"timezone": "UTC"}\n'
        '  longer_one: time.get_current_time   {"timezone": "UTC"}\n'
        "then:\n"
        "  c:    write    a note    from   {a, longer_one}\n"
    )
    assert plan.node("c").inputs == ["a", "longer_one"]
    assert plan.node("c").prompt == "a note"


def test_literal_braces():
    plan = compile_recipe(T + 'b: slack.slack_post_message {"text": "{{not a ref}} at {now.datetime} {{{now}}}"}\n')
    post = plan.node("b")
    assert post.args["text"] == "{{not a ref}} at {now.datetime} {{{now}}}"
    assert post.refs == ["now"]


def test_ask_me_items_may_be_indented():
    plan = compile_recipe(
        T + 'ask me:\n  - is it morning?\n  - post it?\npost: slack.slack_post_message {"text": "{now}"}\n'
    )
    questions = [n for n in plan.nodes if isinstance(n, QuestionNode)]
    assert [q.text for q in questions] == ["is it morning?"]
    assert plan.node("approve:post").question == "post it?"
    assert plan.node("approve:post").needs == [questions[0].id]


def test_a_question_before_a_step_that_asks_anyway_is_not_doubled():
    plan = compile_recipe(
        T + "ask me:\n"
        "- go on?\n"
        'post: slack.slack_post_message {"text": "{now}"}\n'
        'again: slack.slack_post_message {"text": "{now}"}\n'
    )
    approvals = [n for n in plan.nodes if isinstance(n, ApprovalNode)]
    assert {a.step: a.question for a in approvals} == {"post": "go on?", "again": None}


def test_a_step_named_needs_is_not_the_keyword():
    plan = compile_recipe(
        "needs: time.get_current_time {}\n"
        "need_more: time.get_current_time {}\n"
        "checks: time.get_current_time {}\n"
        'b: slack.slack_search_messages {"query": "{needs.datetime} {need_more} {checks}"}\n'
    )
    assert plan.node("b").refs == ["checks", "need_more", "needs"]


def test_unicode_in_strings_and_prose():
    plan = compile_recipe(
        'recipe "Café ☕ — olá"\n'
        "inputs:\n"
        '  who = "José 👋"\n'
        'a: slack.slack_search_messages {"query": "ação 日本語 \\u00e9 {who}"}\n'
        "b: write uma nota em português, com acentos: ç ã é from {a}\n"
    )
    assert plan.recipe.name == "Café ☕ — olá"
    assert plan.node("a").args["query"] == "ação 日本語 é {who}"
    assert plan.node("b").prompt.startswith("uma nota em português")


def test_crlf_line_endings():
    plan = compile_recipe(T.replace("\n", "\r\n") + "b: write a note from {now}\r\n")
    assert plan.node("b").prompt == "a note"


def test_write_may_name_a_droppable_branch_and_an_input():
    plan = compile_recipe('inputs:\n  topic = "x"\n' + TWO + "  need: 1 of 2\nc: write a note from {topic, a, b}\n")
    assert plan.node("c").inputs == ["topic", "a", "b"]


def test_a_reference_after_a_full_join_is_fine():
    plan = compile_recipe(TWO + 'c: slack.slack_post_message {"text": "{a.datetime} {b}"}\n')
    assert plan.node("c").refs == ["a", "b"]
    assert isinstance(plan.node("c"), ToolNode)


def test_headers_may_come_after_steps():
    plan = compile_recipe(T + 'recipe "Late title"\napprovers: ana\n')
    assert plan.recipe.name == "Late title" and plan.options.approvers == ["ana"]


def test_write_is_not_gated():
    plan = compile_recipe(T + "b: write a note from {now}\n")
    assert isinstance(plan.node("b"), WriteNode)
    assert not [n for n in plan.nodes if isinstance(n, ApprovalNode)]
