"""The name rule: a tool is ``read`` only on positive evidence (docs/policy.md, "Reading a tool's name").

Three kinds of proof: a table of real tool names from published MCP servers
(tests/data/mcp_tool_names.tsv), a property over names built from the
vocabularies in every casing and joining, and the attack names that used to
pass as reads, one of them (``forget_memory``) end to end against the rogue
server. tests/test_policy_words.py holds the rule to 30,000 English words.
"""

from __future__ import annotations

import csv
import random
import re
import time
from collections import Counter
from pathlib import Path

import pytest
from conftest import rogue_calls, rogue_server
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_policy_words import JOINING

from vodou_engine.compiler import compile_recipe
from vodou_engine.errors import RecipeError
from vodou_engine.policy import (
    AMBIGUOUS_WORDS,
    CODE_WORDS,
    CONNECTORS,
    CRITICAL_VERBS,
    DB_WORDS,
    PARTICLES,
    PLURALS,
    READ_NOUNS,
    READ_VERBS,
    SAFE_WORDS,
    VOCABULARY,
    WRITE_VERBS,
    Hints,
    Policy,
    verb_risk,
    words_of,
)

TABLE = Path(__file__).parent / "data" / "mcp_tool_names.tsv"
RISKS = ("read", "write", "critical")

READS_KEPT_FLOOR = 0.85
"""Of the table's real read tools, at least this share must still be read, so the rule is not
"everything is write". Measured when the table was made: 214 of 240 (89.2 %)."""


def _table() -> list[dict[str, str]]:
    with TABLE.open(newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE))


ROWS = _table()


def _ids(rows):
    return [f"{r['server']}:{r['tool']}" for r in rows]


# -- the table of real tool names ----------------------------------------------------------------


def test_the_table_is_large_real_and_well_formed():
    assert len(ROWS) >= 300
    assert set(ROWS[0]) == {"server", "tool", "expected", "source"}
    for row in ROWS:
        assert row["expected"] in RISKS, row
        assert row["server"] and row["tool"] and row["source"], row
    pairs = Counter((r["server"], r["tool"]) for r in ROWS)
    assert [p for p, n in pairs.items() if n > 1] == []
    counts = Counter(r["expected"] for r in ROWS)
    assert counts["read"] >= 150 and counts["write"] >= 100 and counts["critical"] >= 15, counts
    servers = {r["server"] for r in ROWS}
    for needed in (
        "@modelcontextprotocol/server-filesystem",
        "mcp-server-git",
        "github/github-mcp-server",
        "@modelcontextprotocol/server-gitlab",
        "korotovsky/slack-mcp-server",
        "@gongrzhe/server-gmail-autoauth-mcp",
        "@cocal/google-calendar-mcp",
        "@notionhq/notion-mcp-server (2.x)",
        "linear-mcp-server",
        "mcp-atlassian",
        "@modelcontextprotocol/server-postgres",
        "mcp-server-sqlite",
        "@stripe/agent-toolkit",
        "mcp-shell-server",
        "@playwright/mcp",
        "@modelcontextprotocol/server-puppeteer",
        "@modelcontextprotocol/server-memory",
        "mcp-server-fetch",
        "mcp-server-time",
        "@sentry/mcp-server",
    ):
        assert needed in servers, needed


EFFECTS = [r for r in ROWS if r["expected"] != "read"]
CRITICALS = [r for r in ROWS if r["expected"] == "critical"]
READS = [r for r in ROWS if r["expected"] == "read"]


@pytest.mark.parametrize("row", EFFECTS, ids=_ids(EFFECTS))
def test_no_real_tool_that_changes_anything_is_read(row):
    risk, source = verb_risk(row["tool"])
    assert risk != "read", f"{row['server']}.{row['tool']} ({row['expected']}) would run unasked: {source}"


@pytest.mark.parametrize("row", CRITICALS, ids=_ids(CRITICALS))
def test_every_real_critical_tool_is_critical(row):
    assert verb_risk(row["tool"])[0] == "critical", (row, verb_risk(row["tool"]))


def test_most_real_read_tools_stay_read():
    kept = [r for r in READS if verb_risk(r["tool"])[0] == "read"]
    share = len(kept) / len(READS)
    lost = sorted({r["tool"] for r in READS} - {r["tool"] for r in kept})
    print(f"real reads still read: {len(kept)}/{len(READS)} = {share:.1%}")
    assert share >= READS_KEPT_FLOOR, (
        f"{len(kept)}/{len(READS)} = {share:.1%} of real reads are read; now write: {lost}"
    )


def test_a_real_read_tool_that_is_not_read_says_why():
    # each lost read names the word that cost it (or says no word was a read verb), so a
    # policy line can be written knowingly
    for row in READS:
        risk, source = verb_risk(row["tool"])
        if risk != "read":
            assert source == "no known verb: write (fail closed)" or "'" in source, (row, source)


def test_every_vocabulary_word_is_one_lowercase_word():
    # a word with a digit or a capital could never come out of the splitting, and would leave
    # holes in the property below
    for word in VOCABULARY:
        assert word.isascii() and word.isalpha() and word.islower(), word


# -- the property ---------------------------------------------------------------------------------

# every word that may stand in a read's name somewhere, and the plural nouns
NEUTRAL = sorted(SAFE_WORDS | READ_VERBS | READ_NOUNS | CONNECTORS | AMBIGUOUS_WORDS | {"log"} | set(PLURALS))
EFFECT_WORDS = sorted(WRITE_VERBS | CODE_WORDS | PARTICLES)
CRITICAL_WORDS = sorted(CRITICAL_VERBS)


def _cap(word: str) -> str:
    return word[:1].upper() + word[1:]


JOINS = {
    "snake": lambda ws, d: "_".join(ws),
    "kebab": lambda ws, d: "-".join(ws),
    "dotted": lambda ws, d: ".".join(ws),
    "spaced": lambda ws, d: " ".join(ws),
    "camel": lambda ws, d: ws[0] + "".join(map(_cap, ws[1:])),
    "pascal": lambda ws, d: "".join(map(_cap, ws)),
    "upper_snake": lambda ws, d: "_".join(ws).upper(),
    "merged": lambda ws, d: "".join(ws),
    "merged_upper": lambda ws, d: "".join(ws).upper(),
    "digits": lambda ws, d: d.join(ws),
    "camel_digits": lambda ws, d: ws[0] + "".join(d + _cap(w) for w in ws[1:]),
}


DIGITS = ["1", "2", "42", "2024", "0"]


@st.composite
def names_with(draw, inserted: list[str]):
    words = draw(st.lists(st.sampled_from(NEUTRAL), min_size=0, max_size=5))
    word = draw(st.sampled_from(inserted))
    words.insert(draw(st.integers(0, len(words))), word)
    how = draw(st.sampled_from(sorted(JOINS)))
    digits = draw(st.sampled_from(DIGITS))
    return word, how, JOINS[how](words, digits)


def every_joining(inserted: list[str]):
    """Every word of ``inserted``, in every joining, at every place among 0 to 3 neutral words
    (a fresh draw from NEUTRAL for each word, joining and length, with a fixed seed): for the
    effect and critical words, 234 words x 11 joinings x 10 places = 25,740 names, in a third
    of a second. The sweep is what makes "anywhere, in any casing or joining" exhaustive; the
    Hypothesis properties beside it add longer runs of neutral words, drawn afresh each time."""
    rng = random.Random(20261130)
    for word in inserted:
        for how, join in JOINS.items():
            for n in range(4):
                neighbours = rng.sample(NEUTRAL, n)
                digits = rng.choice(DIGITS)
                for place in range(n + 1):
                    words = list(neighbours)
                    words.insert(place, word)
                    yield word, how, join(words, digits)


def test_an_effect_or_critical_word_anywhere_is_never_read():
    checked = 0
    for word, how, name in every_joining(EFFECT_WORDS + CRITICAL_WORDS):
        risk, source = verb_risk(name)
        assert risk != "read", f"{name!r} ({how}, holds {word!r}) is read: {source}"
        checked += 1
    assert checked == len(EFFECT_WORDS + CRITICAL_WORDS) * len(JOINS) * 10


def test_a_critical_word_anywhere_is_critical():
    checked = 0
    for word, how, name in every_joining(CRITICAL_WORDS):
        risk, source = verb_risk(name)
        assert risk == "critical", f"{name!r} ({how}, holds {word!r}) is {risk}: {source}"
        checked += 1
    assert checked == len(CRITICAL_WORDS) * len(JOINS) * 10


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(names_with(EFFECT_WORDS + CRITICAL_WORDS))
def test_an_effect_or_critical_word_among_up_to_five_random_words_is_never_read(case):
    word, how, name = case
    risk, source = verb_risk(name)
    assert risk != "read", f"{name!r} ({how}, holds {word!r}) is read: {source}"


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(names_with(CRITICAL_WORDS))
def test_a_critical_word_among_up_to_five_random_words_is_critical(case):
    word, how, name = case
    risk, source = verb_risk(name)
    assert risk == "critical", f"{name!r} ({how}, holds {word!r}) is {risk}: {source}"


@settings(max_examples=500, deadline=None)
@given(
    names_with(EFFECT_WORDS + CRITICAL_WORDS),
    st.sampled_from([None, Hints(read_only=True), Hints(read_only=True, destructive=False)]),
)
def test_an_untrusted_server_cannot_make_such_a_name_read(case, hints):
    _, _, name = case
    assert Policy().assess("stranger", name, hints)[0] != "read"


@pytest.mark.parametrize("word", EFFECT_WORDS + CRITICAL_WORDS)
def test_every_effect_and_critical_word_alone_and_after_a_read_verb(word):
    # exhaustive over the vocabularies, in the shape attacks take: "<read verb>_<effect>"
    for name in (word, f"get_{word}", f"list_and_{word}", f"get{word}", f"Get{_cap(word)}", f"GET_{word.upper()}"):
        risk = verb_risk(name)[0]
        assert risk != "read", name
        if word in CRITICAL_VERBS:
            assert risk == "critical", name


# -- the attacks --------------------------------------------------------------------------------

ATTACKS = [
    # a read verb used to win when the other word was not in the effect list
    ("get_and_exec", "write", "word 'exec' (runs code)"),
    ("search_replace", "write", "verb 'replace'"),
    ("check_out", "write", "'check out' is a phrasal verb: write"),
    ("sql_query", "write", "word 'sql' (runs code)"),
    ("fetch_and_email", "write", "'email' after 'and' is a verb"),
    ("diff_and_revert", "critical", "verb 'revert'"),
    ("getDELETEitem", "critical", "'delete' inside 'getDELETEitem'"),
    # critical words inside merged words used to be "no known verb: write"
    ("deleteall", "critical", "'delete' inside 'deleteall'"),
    ("transferfunds", "critical", "'transfer' inside 'transferfunds'"),
    ("getdeleteitem", "critical", "'delete' inside 'getdeleteitem'"),
    ("forcepush", "critical", "'force' inside 'forcepush'"),
    ("DELETEALL", "critical", "'delete' inside 'DELETEALL'"),
    # the same words in other shapes
    ("getAndExec", "write", "word 'exec' (runs code)"),
    ("GET_AND_EXEC", "write", "word 'exec' (runs code)"),
    ("get.and.exec", "write", "word 'exec' (runs code)"),
    ("get2exec", "write", "word 'exec' (runs code)"),
    ("run_query", "write", "word 'run' (runs code)"),
    ("execute_sql", "write", "word 'execute' (runs code)"),
    ("execute_query", "write", "word 'execute' (runs code)"),
    ("raw_query", "write", "unknown word 'raw': write (fail closed)"),
    ("pg_query", "write", "'query' on 'pg' runs any query: write"),
    ("query_database", "write", "'query' on 'database' runs any query: write"),
    ("get_and_emails", "write", "'emails' after 'and' is a verb"),
    ("get_and_deletes", "critical", "'deletes' after 'and' is a verb"),
    ("email_list", "write", "'email' is not the object of a read verb: write"),
    ("show_alert", "write", "'alert' is not the object of a read verb: write"),
    ("log_event", "write", "verb 'log'"),
    ("fetch_to_file", "write", "'to' names a destination: write"),
    ("get_frob", "write", "unknown word 'frob': write (fail closed)"),
    # a letter outside ASCII splits a word where nobody sees it: "s\u0435nd" with a Cyrillic "e" (U+0435)
    ("get_items_s\u0435nd", "write", "character '\u0435' outside ASCII: write (fail closed)"),
    ("list_fil\u00e9s", "write", "character '\u00e9' outside ASCII: write (fail closed)"),
    ("get\u200bitems", "write", "character '\\u200b' outside ASCII: write (fail closed)"),  # repr of an invisible one
    ("get_items_d\u0435lete", "critical", "verb 'delete', read as 'get_items_delete'"),
    ("r\u0435move_file", "critical", "verb 'remove', read as 'remove_file'"),
    ("d\u00e9l\u00e9te", "critical", "verb 'delete', read as 'delete'"),
    ("tr\u0430nsfer\u200bfunds", "critical", "'transfer' inside 'transferfunds', read as 'transferfunds'"),
    # a read word rebuilt from the inside of a longer word used to be read evidence:
    # "forget" read as "for get"
    ("forget_memory", "write", "'get' inside 'forget' is not read evidence: write (fail closed)"),
    ("forgetUser", "write", "'get' inside 'forget' is not read evidence: write (fail closed)"),
    ("memory_forget", "write", "'get' inside 'forget' is not read evidence: write (fail closed)"),
    ("forget_all", "write", "'get' inside 'forget' is not read evidence: write (fail closed)"),
    ("forgetall", "write", "'get' inside 'forgetall' is not read evidence: write (fail closed)"),
    ("ForgetMemory", "write", "'get' inside 'Forget' is not read evidence: write (fail closed)"),
    ("FORGET_MEMORY", "write", "'get' inside 'FORGET' is not read evidence: write (fail closed)"),
    ("forget-memory", "write", "'get' inside 'forget' is not read evidence: write (fail closed)"),
    ("forget.memory", "write", "'get' inside 'forget' is not read evidence: write (fail closed)"),
    ("forget2", "write", "'get' inside 'forget' is not read evidence: write (fail closed)"),
    ("get_forget", "write", "'get' inside 'forget' is not read evidence: write (fail closed)"),
    ("list_memories_forget", "write", "'get' inside 'forget' is not read evidence: write (fail closed)"),
    ("await_job", "write", "'wait' inside 'await' is not read evidence: write (fail closed)"),
    ("sausage_item", "write", "'usage' inside 'sausage' is not read evidence: write (fail closed)"),
    ("analog_item", "write", "'log' inside 'analog' is not read evidence: write (fail closed)"),
    ("slogan_item", "write", "'log' inside 'slogan' is not read evidence: write (fail closed)"),
    ("subquery", "write", "'query' inside 'subquery' is not read evidence: write (fail closed)"),
    ("bulkget_items", "write", "'get' inside 'bulkget' is not read evidence: write (fail closed)"),
    # ... or read verb first, but what follows is no object: a connector, another verb, "show"
    ("inspector_item", "write", "'inspect' inside 'inspector' is not read evidence: write (fail closed)"),
    ("checklist_item", "write", "'check' inside 'checklist' is not read evidence: write (fail closed)"),
    ("getlist", "write", "'get' inside 'getlist' is not read evidence: write (fail closed)"),
    ("showtime_item", "write", "'show' inside 'showtime' is not read evidence: write (fail closed)"),
    ("getorshow", "write", "'get' inside 'getorshow' is not read evidence: write (fail closed)"),
    # ... or glued to digits, which stand for sounds: "4get" is "forget"
    ("4get_memory", "write", "'get' inside '4get' is not read evidence: write (fail closed)"),
    ("4Get_memory", "write", "'get' inside '4Get' is not read evidence: write (fail closed)"),
    ("for2get", "write", "'get' inside '2get' is not read evidence: write (fail closed)"),
    ("memory_4getall", "write", "'get' inside '4getall' is not read evidence: write (fail closed)"),
    # an unknown word is not made harmless by reading it as words of one letter
    ("get_ask", "write", "unknown word 'ask': write (fail closed)"),
    ("fetch_and_ask", "write", "unknown word 'ask': write (fail closed)"),
    ("list_and_stab", "write", "unknown word 'stab': write (fail closed)"),
    ("forgets_list", "write", "'get' inside 'forgets' is not read evidence: write (fail closed)"),
    # effect and critical pieces of such a word still count
    ("forgetrm", "critical", "'rm' inside 'forgetrm'"),
    ("showdown", "write", "'down' inside 'showdown'"),
    ("forgetanddelete", "critical", "'delete' inside 'forgetanddelete'"),
    # an unknown word used to be harmless when it read as harmless pieces; through a preposition,
    # connector or "im" it may be one verb ("onboard" is not "on board"), anywhere in the word
    ("get_onboard", "write", "'on' inside 'onboard' may make it a verb: write (fail closed)"),
    ("get_and_onboard", "write", "'on' inside 'onboard' may make it a verb: write (fail closed)"),
    ("get_item_onboard", "write", "'on' inside 'onboard' may make it a verb: write (fail closed)"),
    ("getOnboard", "write", "'on' inside 'Onboard' may make it a verb: write (fail closed)"),
    ("GET_ONBOARD", "write", "'on' inside 'ONBOARD' may make it a verb: write (fail closed)"),
    ("get-onboard.user", "write", "'on' inside 'onboard' may make it a verb: write (fail closed)"),
    ("get2onboard", "write", "'on' inside 'onboard' may make it a verb: write (fail closed)"),
    ("getonboard", "write", "'on' inside 'getonboard' may make it a verb: write (fail closed)"),
    ("get_itemonboard", "write", "'on' inside 'itemonboard' may make it a verb: write (fail closed)"),
    ("get_ontop", "write", "'on' inside 'ontop' may make it a verb: write (fail closed)"),
    ("get_byproduct", "write", "'by' inside 'byproduct' may make it a verb: write (fail closed)"),
    ("getbyid", "write", "'by' inside 'getbyid' may make it a verb: write (fail closed)"),
    ("list_attest", "write", "'at' inside 'attest' may make it a verb: write (fail closed)"),
    ("fetch_imprint", "write", "'im' inside 'imprint' may make it a verb: write (fail closed)"),
    ("get_itemandowner", "write", "'and' inside 'itemandowner' may make it a verb: write (fail closed)"),
    ("get_userwithaccess", "write", "'with' inside 'userwithaccess' may make it a verb: write (fail closed)"),
    ("get_onboardall", "write", "'on' inside 'onboardall' may make it a verb: write (fail closed)"),
    ("get_onboardanddelete", "critical", "'delete' inside 'onboardanddelete'"),
]


@pytest.mark.parametrize("tool, risk, source", ATTACKS, ids=[a[0] for a in ATTACKS])
def test_the_attack_names(tool, risk, source):
    assert verb_risk(tool) == (risk, source)


@pytest.mark.parametrize("tool", ["deleteall", "transferfunds", "getDELETEitem", "forcepush"])
def test_without_asking_is_refused_for_a_merged_critical_word(tool):
    with pytest.raises(RecipeError) as info:
        compile_recipe(f"x: srv.{tool} {{}}\n  without asking\n", policy=Policy())
    assert "without asking" in str(info.value) and "critical" in str(info.value)


REBUILT = [
    "forget_memory",
    "forgetUser",
    "memory_forget",
    "forget_all",
    "forgetall",
    "await_job",
    "inspector_item",
    "checklist_item",
    "4get_memory",
]
"""Names read only because a read word was rebuilt from the inside of a longer word."""
JOINED = [
    "get_onboard",
    "getOnboard",
    "getonboard",
    "get_item_onboard",
    "get_byproduct",
    "list_attest",
    "fetch_imprint",
]
"""Names read only because a word run together through a preposition read as harmless pieces."""


@pytest.mark.parametrize(
    "tool",
    [
        "get_and_exec",
        "search_replace",
        "check_out",
        "sql_query",
        "fetch_and_email",
        "diff_and_revert",
        "getDELETEitem",
        *REBUILT,
        *JOINED,
    ],
)
@pytest.mark.parametrize("kind", ["preview", "check"])
def test_an_attack_name_cannot_be_a_preview_or_check(tool, kind):
    text = f'x: srv.send_message {{"to": "a"}}\n  {kind}: srv.{tool} {{}}\n'
    with pytest.raises(RecipeError) as info:
        compile_recipe(text, policy=Policy())
    assert f"`{kind}:` must be a read-only tool" in str(info.value)


@pytest.mark.parametrize("tool", REBUILT)
def test_an_attack_name_gets_no_retries(tool):
    # reads may be tried again by themselves (graph/gate.py); a rebuilt read word is no read
    with pytest.raises(RecipeError) as info:
        compile_recipe(f'x: srv.{tool} {{"key": "user:42"}}\n  retries: 2\n', policy=Policy())
    assert "`retries:` is refused" in str(info.value) and "not read evidence" in str(info.value)


@pytest.mark.parametrize("tool", JOINED)
def test_a_word_run_together_through_a_preposition_gets_no_retries(tool):
    with pytest.raises(RecipeError) as info:
        compile_recipe(f'x: srv.{tool} {{"user": "ana"}}\n  retries: 2\n', policy=Policy())
    assert "`retries:` is refused" in str(info.value) and "may make it a verb" in str(info.value)


@pytest.mark.parametrize("tool", REBUILT + JOINED)
def test_an_attack_name_asks_before_it_runs(tool):
    plan = compile_recipe(f'x: srv.{tool} {{"key": "user:42"}}\n', policy=Policy())
    assert plan.node("x").effectful and plan.node("approve:x").step == "x"


# -- a read word rebuilt from pieces, over the whole vocabulary ------------------------------------

READ_WORDS = sorted(READ_VERBS | READ_NOUNS | {"log"})
BASE_WORDS = sorted(
    SAFE_WORDS
    | READ_VERBS
    | READ_NOUNS
    | {"log"}
    | CONNECTORS
    | AMBIGUOUS_WORDS
    | PARTICLES
    | set(EFFECT_WORDS)
    | CRITICAL_VERBS
)
"""Every word of the vocabularies; the plurals made from them are left out, to keep the sweep
below near a second."""
_SOURCE = re.compile(r"verb '([a-z]+)'(?: starting '([A-Za-z]+)')?")


def test_a_read_word_after_any_word_in_a_merged_word_is_no_evidence():
    # every vocabulary word glued before every read word: 1,086 x 36 names, in about a
    # second. One is read only by a read verb that starts the merged word (getstatus: get +
    # its object), never by the read word after it (forget: for + get; sausage: s a usage)
    checked = 0
    for before in BASE_WORDS:
        for word in READ_WORDS:
            merged = before + word
            risk, source = verb_risk(f"{merged}_item")
            checked += 1
            if risk != "read" or merged in VOCABULARY:
                continue
            m = _SOURCE.fullmatch(source)
            assert m and m[2] == merged and m[1] in READ_VERBS and merged.startswith(m[1]), (merged, source)
            assert len(m[1]) <= len(before), (merged, source)  # not the read word that was glued on
    assert checked == len(BASE_WORDS) * len(READ_WORDS)


@pytest.mark.parametrize("digits", DIGITS)
def test_a_read_word_glued_to_digits_is_no_evidence(digits):
    for word in READ_WORDS:
        for name in (
            f"{digits}{word}_item",
            f"item_{digits}{word}",
            f"{digits}{_cap(word)}Item",
            f"v{digits}{word.upper()}",
        ):
            risk, source = verb_risk(name)
            assert risk == "write" and "is not read evidence" in source, (name, source)


def _run_together(name: str) -> list[str]:
    """The pieces of the words of ``name`` that the rule read as words run together."""
    return [w.text for w in words_of(name) if w.inside]


def test_a_word_run_together_through_a_preposition_is_not_harmless():
    # every preposition, particle and connector glued before every vocabulary word, at the
    # start of a word (get_onboard) and inside one (get_itemonboard): 33 x 1,086 x 2 names. One
    # may be read only as a whole vocabulary word (get_without, get_inbox) or as pieces none
    # of which is such a word (get_attributes is not "at tributes")
    checked = 0
    for joint in sorted(JOINING):
        for word in BASE_WORDS:
            for name in (f"get_{joint}{word}", f"get_item{joint}{word}"):
                risk, source = verb_risk(name)
                checked += 1
                if risk == "read":
                    pieces = _run_together(name)
                    assert not JOINING & set(pieces), (name, source, pieces)
    assert checked == len(JOINING) * len(BASE_WORDS) * 2


def test_harmless_words_of_that_shape_are_whole_words():
    # real tools name these (get_uptime, list_online_users, read_process_output): each is a
    # whole word of the vocabulary, so it is harmless as itself and never as its pieces
    for tool, word in (
        ("get_uptime", "uptime"),
        ("list_online_users", "online"),
        ("get_inbox", "inbox"),
        ("fetch_outbox", "outbox"),
        ("get_input", "input"),
        ("read_process_output", "output"),
        ("get_overview", "overview"),
        ("list_upstream_branches", "upstream"),
    ):
        assert word in VOCABULARY and word not in _run_together(tool), word
        assert verb_risk(tool)[0] == "read", (tool, verb_risk(tool))
    # a preposition that is a word of its own stays harmless: the author wrote the boundary
    for tool in ("get_by_id", "getById", "GET_BY_ID", "get_user_by_id", "list_files_from_repo", "get.on.board"):
        assert verb_risk(tool) == ("read", "verb 'get'" if "get" in tool.lower() else "verb 'list'"), tool


HIDING = [
    # English words in which a read word hides, in every shape: merged lowercase, camelCase,
    # ALLCAPS, prefixes and suffixes
    "targetlist",
    "budget_item",
    "widgetget",
    "gadget",
    "nugget_list",
    "listen",
    "listener_get",
    "showdown",
    "viewport",
    "viewpoint",
    "forgetall",
    "forgetItems",
    "FORGETALL",
    "Forget",
    "checkout_item",
    "checkin",
    "getaway",
    "lookout",
    "countdown",
    "recount",
    "unlist",
    "prefetch",
    "recheck",
    "overlook",
    "outlookget",
    "getter",
    "fetcher",
    "lister",
    "finder",
    "searchable",
    "findings",
    "gitlog",
    "treeview",
    "infoget",
    "statusget",
    "historylist",
    "forgets_list",
]


def test_words_where_a_read_word_hides_are_not_read():
    read = {tool: verb_risk(tool) for tool in HIDING if verb_risk(tool)[0] == "read"}
    assert read == {}


MERGED_READS = {
    "listfiles": "verb 'list' starting 'listfiles'",
    "getemail": "verb 'get' starting 'getemail'",
    "getuserid": "verb 'get' starting 'getuserid'",
    "getstatus": "verb 'get' starting 'getstatus'",
    "LISTFILES": "verb 'list' starting 'LISTFILES'",
    "get_userid": "verb 'get'",  # a merged word of objects after a read verb of its own
    "forGet_memory": "verb 'get'",  # a camelCase capital starts a word of its own
}


def test_a_merged_read_says_which_word_starts_it():
    assert {tool: verb_risk(tool) for tool in MERGED_READS} == {
        tool: ("read", source) for tool, source in MERGED_READS.items()
    }


# -- forget_memory, end to end against a real MCP server ------------------------------------------
# tests/rogue_server.py lists forget_memory, an effect whose annotations claim read-only (an
# untrusted server's claim, ignored): only the name rule stands between it and a call.

FORGET = 'forget: ops.forget_memory {"key": "user:42"}\n'


def _ops(cli, **env: str) -> Path:
    """./mcp.json: `ops` is the rogue server, logging every call to ./rogue.log (returned)."""
    cli.servers_file({"ops": rogue_server(cli.tmp / "rogue.log", **env)})
    return cli.tmp / "rogue.log"


@pytest.fixture
def ops(cli) -> Path:
    return _ops(cli)


def _recipe(cli, text: str) -> Path:
    path = cli.tmp / "forget.recipe"
    path.write_text(text)
    return path


def _started(log: Path) -> bool:
    return any('"start"' in line for line in log.read_text().splitlines()) if log.exists() else False


@pytest.mark.both_stores
def test_forget_memory_parks_before_the_call(cli, ops):
    res = cli("run", _recipe(cli, FORGET), "--json")
    assert res.code == 3, res.err
    parked = res.json()
    assert [p["step"] for p in parked["pending"]] == ["forget"]
    assert _started(ops) and rogue_calls(ops) == []  # the server was up, and was not called
    (card,) = cli("show", parked["run"], "--json", expect=0).json()["approvals"]
    assert card["state"] == "pending" and card["payload"] == {"key": "user:42"}
    assert "(write: 'get' inside 'forget' is not read evidence: write (fail closed))" in card["card"]
    assert rogue_calls(ops) == []
    cli("approve", parked["run"], "forget", "--yes", expect=0)
    assert [c["arguments"] for c in rogue_calls(ops, "forget_memory")] == [{"key": "user:42"}]  # once, when approved


@pytest.mark.parametrize("kind", ["preview", "check"])
def test_forget_memory_is_refused_as_a_preview_or_check_online(cli, ops, kind):
    text = (
        f'send: ops.post_message {{"channel": "#x", "text": "y"}}\n  {kind}: ops.forget_memory {{"key": "user:42"}}\n'
    )
    for command in ("plan", "run"):
        res = cli(command, _recipe(cli, text))
        assert res.code == 2, res.err
        assert (
            f"`{kind}:` must be a read-only tool, but ops.forget_memory is write ('get' inside 'forget' is not read evidence"
            in res.err
        )
    assert rogue_calls(ops) == []  # refused before anything could call it


def test_forget_memory_gets_no_retries_online(cli):
    # the rogue fails its first two calls: a read with `retries: 2` would call it three times
    ops = _ops(cli, ROGUE_MODES="forget_memory=fail_first:2")
    for command in ("plan", "run"):
        res = cli(command, _recipe(cli, FORGET + "  retries: 2\n"))
        assert res.code == 2, res.err
        assert (
            "`retries:` is refused for `forget`: ops.forget_memory is write ('get' inside 'forget' is not read evidence"
            in res.err
        )
    assert rogue_calls(ops) == []  # refused before anything could call it


# -- get_onboard, end to end against a real MCP server --------------------------------------------
# tests/rogue_server.py lists get_onboard, an effect whose annotations claim read-only: only the
# name rule stands between it and a call, and it used to read "onboard" as "on board".

ONBOARD = 'join: ops.get_onboard {"user": "ana"}\n'


@pytest.mark.both_stores
def test_get_onboard_parks_before_the_call(cli, ops):
    res = cli("run", _recipe(cli, ONBOARD), "--json")
    assert res.code == 3, res.err
    parked = res.json()
    assert [p["step"] for p in parked["pending"]] == ["join"]
    assert _started(ops) and rogue_calls(ops) == []  # the server was up, and was not called
    (card,) = cli("show", parked["run"], "--json", expect=0).json()["approvals"]
    assert "(write: 'on' inside 'onboard' may make it a verb: write (fail closed))" in card["card"]
    cli("approve", parked["run"], "join", "--yes", expect=0)
    assert [c["arguments"] for c in rogue_calls(ops, "get_onboard")] == [{"user": "ana"}]  # once, when approved


@pytest.mark.parametrize("kind", ["preview", "check"])
def test_get_onboard_is_refused_as_a_preview_or_check_online(cli, ops, kind):
    text = f'send: ops.post_message {{"channel": "#x", "text": "y"}}\n  {kind}: ops.get_onboard {{"user": "ana"}}\n'
    for command in ("plan", "run"):
        res = cli(command, _recipe(cli, text))
        assert res.code == 2, res.err
        assert (
            f"`{kind}:` must be a read-only tool, but ops.get_onboard is write ('on' inside 'onboard' may make it a verb"
            in res.err
        )
    assert rogue_calls(ops) == []  # refused before anything could call it


# -- what the bundled recipes and demo servers rely on --------------------------------------------

STAY_READ = [
    "slack_search_messages",
    "slack_get_channel",
    "slack_preview_message",
    "messages_list",
    "messages_get",
    "preview_message",
    "get_contact",
    "list-events",
    "get-event",
    "get_arrival",
    "query",  # the demo lab's blocking read (board/recall/proc) and the reference PostgreSQL server's tool
    "git_status",
    "git_diff_unstaged",
    "git_log",
    "get_current_time",
    "convert_time",
]
STAY_EFFECT = [
    ("slack_post_message", "write"),
    ("slack_set_topic", "write"),
    ("slack_delete_message", "critical"),
    ("send_message", "write"),
    ("update_contact", "write"),
    ("create-event", "write"),
    ("delete-event", "critical"),
    ("git_add", "write"),
    ("git_commit", "write"),
]


@pytest.mark.parametrize("tool", STAY_READ)
def test_the_reads_recipes_use_stay_read(tool):
    assert verb_risk(tool)[0] == "read", verb_risk(tool)


@pytest.mark.parametrize("tool, risk", STAY_EFFECT)
def test_the_effects_recipes_use_stay_effects(tool, risk):
    assert verb_risk(tool)[0] == risk, verb_risk(tool)


@pytest.mark.parametrize(
    "tool",
    [
        "get_email",
        "slack_preview_message",
        "messages_list",
        "search_emails",
        "get_pull_request_files",
        "list_workflow_runs",
        "listfiles",
        "getItem",
        "LIST_FILES",
        "getURLs",
    ],
)
def test_objects_of_a_read_verb_plurals_and_merged_reads_are_read(tool):
    assert verb_risk(tool)[0] == "read", verb_risk(tool)


@pytest.mark.parametrize(
    "tool",
    ["get_skills", "get_payload", "list_dropdowns", "get_address", "get_settings", "list_payments", "get_charges"],
)
def test_known_nouns_are_not_searched_for_critical_words(tool):
    assert verb_risk(tool)[0] == "read", verb_risk(tool)


def test_database_words_make_query_write_but_not_other_reads():
    assert verb_risk("query") == ("read", "verb 'query'")
    assert verb_risk("read_query")[0] == "read"  # mcp-server-sqlite: SELECT only
    assert verb_risk("list_databases")[0] == "read"
    assert verb_risk("describe_table")[0] == "read"
    for db in sorted(DB_WORDS):
        assert verb_risk(f"{db}_query")[0] == "write", db


# -- cost -----------------------------------------------------------------------------------------


def test_the_rule_is_cheap_on_hostile_names():
    verb_risk.cache_clear()
    names = [
        "a" * 5000,
        "get" * 3000,
        "_".join(["getitems"] * 3000),
        "_".join(["1"] * 20000),
        "_".join(["out"] * 20000),
        "xY" * 4000,
    ]
    start = time.perf_counter()
    for name in names:
        verb_risk(name)
    assert time.perf_counter() - start < 5.0  # about 0.2 s on a laptop; catches a quadratic blow-up


def test_a_long_word_is_cut_in_the_source():
    risk, source = verb_risk("q" * 300)
    assert risk == "write" and len(source) < 120 and "..." in source
