"""h. Compile speed: compile + verify of generated recipes of 100, 1,000 and 10,000 steps.

The generated recipe mixes what real ones hold: sequential tool steps with
JSON arguments and references to earlier steps (most arguments a flat
one-line object; about one tool step in 20 has nested JSON and one in 20
spans several lines), a ``together`` with ``need: 2 of 3`` and a nested
sequence every 25 blocks, ``write`` steps, and effects that get approval
gates and previews (``slack.slack_post_message``). ``compile_recipe`` parses,
lowers, assesses risk, inserts approvals, verifies the graph and
fingerprints the plan; all of it is timed.
"""

from __future__ import annotations

import time
from functools import partial

from .common import Case, Config, profile_text


def generate(steps: int) -> str:
    """A recipe of about ``steps`` steps (tool steps, writes and questions; joins and gates not counted)."""
    out = ['recipe "generated"', "", "inputs:", '  channel = "#daily"', "  topic", ""]
    n = 0
    block = 0
    last = None
    while n < steps:
        b = block
        block += 1
        if b % 25 == 0:
            # a together with a quorum, one item a nested sequence
            out += [
                f"together g{b}:",
                f'  s{b}_mail: gmail.messages_list {{"labelIds": ["INBOX"], "maxResults": 3, "q": "{{topic}}"}}',
                f'  s{b}_chat: slack.slack_search_messages {{"query": "{{topic}} {b}"}}',
                f"  then s{b}_seq:",
                f'    s{b}_cal: google-calendar.list-events {{"calendarId": "primary", "maxResults": 5}}',
                f'    s{b}_one: vodou.echo {{"value": {{"first": "{{s{b}_cal.items.0.summary}}", "n": {b}}}}}',
                "  need: 2 of 3",
                "then:",
                f"  s{b}_note: write a short note for block {b} from {{s{b}_mail, s{b}_chat, s{b}_one}}",
            ]
            n += 5
            last = f"s{b}_note"
        elif b % 10 == 0:
            out += [
                f"s{b}_draft: write a status line about {{topic}} number {b} from {{{last}}}"
                if last
                else f"s{b}_draft: write a status line number {b}",
                "ask me:",
                f"- post update {b}?",
                f's{b}_post: slack.slack_post_message {{"channel": "{{channel}}", "text": "{{s{b}_draft}}"}}',
                f'  preview: slack.slack_preview_message {{"channel": "{{channel}}", "text": "{{s{b}_draft}}"}}',
                "  expires: 30m",
            ]
            n += 2
            last = f"s{b}_post"
        else:
            ref = f"{{{last}}}" if last else "start"
            if b % 10 == 3:  # nested JSON
                get = [
                    f's{b}_get: gmail.get_contact {{"email": "person{b}@example.com", "note": "after {ref}", "filter": {{"tags": ["a", "b"], "since": {{"days": {b % 7 + 1}}}}}}}'
                ]
            elif b % 10 == 7:  # JSON over several lines
                get = [
                    f"s{b}_get: gmail.get_contact {{",
                    f'    "email": "person{b}@example.com",',
                    f'    "note": "after {ref}"',
                    "  }",
                ]
            else:  # a flat one-line object: most arguments
                get = [
                    f's{b}_get: gmail.get_contact {{"email": "person{b}@example.com", "note": "after {ref}", "tags": ["a", "b", {b}], "limit": 5, "strict": false}}'
                ]
            out += [*get, f's{b}_use: vodou.echo {{"value": "{{s{b}_get.email}} / {{topic}}"}}']
            n += 2
            last = f"s{b}_use"
    return "\n".join(out) + "\n"


def sizes(cfg: Config) -> tuple[int, ...]:
    return (100, 1000) if cfg.quick else (100, 1000, 10_000)


def run(cfg: Config) -> Case:
    from vodou_engine.compiler import compile_recipe

    case = Case("h", "compile + verify of generated recipes (100 / 1,000 / 10,000 steps)")
    for size in sizes(cfg):
        text = generate(size)
        plan = compile_recipe(text)  # warm-up, and the node count
        samples = []
        for _ in range(cfg.runs):
            t0 = time.perf_counter()
            compile_recipe(text)
            samples.append(time.perf_counter() - t0)
            cfg.log(f"h: {size} steps {samples[-1] * 1e3:.0f} ms")
        wall = case.figure(
            f"compile_{size}_s",
            samples,
            "s",
            f"{size} steps ({len(plan.nodes)} nodes, {len(text) // 1024} KiB): compile + verify",
        )
        case.figure(f"compile_{size}_per_step_s", [s / size for s in samples], "s", f"{size} steps: per step")
        case.bar(f"compile {size}", wall_s=wall, sum_s=None, slowest_s=None)
        if size == 10_000:  # the target is for 10,000 steps; --quick stops at 1,000
            met = case.check(f"h: compile {size} steps", wall, 1.0, unit="s", what="compile + verify, median")
            if not met:
                case.profiles[f"compile {size} steps (cProfile, by own time)"] = profile_text(
                    partial(compile_recipe, text)
                )
    return case.done()
