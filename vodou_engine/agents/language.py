"""The recipe language in one screen, for a model's prompt (docs/recipe-language.md is
the whole of it). Kept short on purpose: every word here is paid for on every draft.
``tests/test_author.py`` compiles the example below, so it cannot drift from the compiler."""

from __future__ import annotations

EXAMPLE = """\
# schedule: 0 8 * * 1-5 Europe/Lisbon
recipe "Morning briefing"
inputs:
  channel = "#daily"
together sources:
  calendar: google-calendar.list-events {"calendarId": "primary"}
  mail:     gmail.messages_list {"labelIds": ["UNREAD"]}
then:
  need: 1 of 2
  briefing: write a short morning briefing from {calendar, mail}
  ask me:
  - post the briefing?
  post: slack.slack_post_message {"channel": "{channel}", "text": "{briefing}"}
    preview: slack.slack_preview_message {"channel": "{channel}", "text": "{briefing}"}
"""

LANGUAGE = f"""\
THE RECIPE LANGUAGE
A recipe is plain text. Indent with spaces only (never tabs).

Headers (top level, each optional):
  recipe "Title"
  inputs:                      values given when the run starts
    channel = "#daily"         an input with a JSON default
    since                      a required input
  approvers: ana, bruno        who may approve (default: whoever starts the run)
  approval expires: 15m        durations: 90s, 15m, 2h, 1d

Steps (NAME is lower case: [a-z_][a-z0-9_-]*, unique, not a keyword):
  NAME: SERVER.TOOL {{"arg": "value"}}       call a tool; arguments are one JSON object
  NAME: write PROSE from {{a, b}}             a model writes text from earlier results (no effect outside)
Options, indented under a tool step:
  preview: SERVER.TOOL {{...}}   a read-only tool shown to the person before they decide
  check: SERVER.TOOL {{...}}     a read-only tool read again right before the effect
  expires: 10m                 how long the person has to decide

Order: top-level steps run one after another.
  together NAME:               the items under it run at the same time (NAME optional)
  then:                        what follows the together above, in order
    need: 2 of 3               first line of that then: continue once 2 of the 3 items succeeded
Questions:
  ask me:
  - post it to #daily?         the run stops until a person says yes; right before an effect
                               it becomes that effect's approval question

References: inside a JSON string value, "{{name}}" or "{{name.field.0}}" is an input or the
result of an earlier step (never a step running in the same together). "{{{{" and "}}}}" are
literal braces. A write's PROSE is not JSON: its braces are not references.
Comments: # to the end of the line (in PROSE and questions only " # " with spaces around).
JSON: double quotes, no trailing commas, no comments inside strings; an object may span
lines while its bracket is open; a string may not.

Safety (the engine's rules, not yours to change): every tool that changes something stops
the run and asks a person first; the engine adds that gate by itself. Never write
`without asking` or `don't ask`: a drafted recipe that does is refused. Nothing written in
a recipe (a title, a comment, a question, a value) approves anything.

Example:
{EXAMPLE}"""

RULES = """\
Write one recipe for the person's request.
- Use only the tools listed in the catalogue, with their addresses exactly as written
  (SERVER.TOOL), and only arguments their input schemas name.
- Reply with the recipe only: no explanation, no Markdown fence.
- If the request asks for it to happen on a schedule (every day, weekdays at 8, each
  Monday...), make the first line `# schedule: MIN HOUR DAY-OF-MONTH MONTH DAY-OF-WEEK TZ`
  (a cron expression and an IANA time zone, e.g. `# schedule: 0 8 * * 1-5 Europe/Lisbon`;
  UTC when the request names no zone). A person enables the schedule; you only propose it.
- Otherwise write no schedule line.
- When the compiler reports an error, reply with the whole corrected recipe."""
