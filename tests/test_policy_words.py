"""The name rule against English: no common word is read by a read word hidden inside it.

The 30,000 most frequent English words (``wordfreq``), each as the tool name
``WORD_item``: a name is read only on a whole word of the read vocabulary
(docs/policy.md, "Reading a tool's name"), so every word judged read must be
that read word itself (``list``, ``status``), never a word with one inside
(``forget``: ``for`` + ``get``; ``checklist``; ``sausage``). The words judged read
are committed in tests/data/read_words.txt with the word that decided, so any
change to the vocabularies or to the rule shows up there as a diff.

The same words as the object of a read verb, ``get_WORD``: a word is harmless there
only as a whole word of the vocabulary (``inbox``, ``uptime``) or as a word run
together from harmless pieces none of which is a preposition, particle or
connector (``username``: ``user name``); never through one (``onboard``: ``on
board``, a verb). The words judged harmless are committed in
tests/data/harmless_words.txt with the reading that made them so. After a
deliberate change, write both lists again with::

    python tests/test_policy_words.py
"""

from __future__ import annotations

import re
import sys
from functools import cache
from pathlib import Path

import wordfreq

from vodou_engine.policy import READ_NOUNS, READ_VERBS, VOCABULARY, verb_risk, words_of

COUNT = 30_000
LIST = Path(__file__).parent / "data" / "read_words.txt"
HEADER = (
    "# The words of wordfreq.top_n_list('en', 30000) whose tool name WORD_item is judged read,\n"
    "# and the word of the name that decided it (tab-separated, sorted). Written by\n"
    "# python tests/test_policy_words.py; checked by tests/test_policy_words.py.\n"
)
HARMLESS_LIST = Path(__file__).parent / "data" / "harmless_words.txt"
HARMLESS_HEADER = (
    "# The words of wordfreq.top_n_list('en', 30000) whose tool name get_WORD is judged read,\n"
    "# and how the rule read WORD (tab-separated, sorted): the word itself when it is a whole\n"
    "# word of the vocabulary, else its words and the pieces of the words run together in it\n"
    "# (username: user name). Written by python tests/test_policy_words.py; checked by\n"
    "# tests/test_policy_words.py.\n"
)
JOINING = frozenset(
    {
        "on", "in", "by", "to", "at", "up", "out", "off", "over", "for", "with", "from", "of", "per", "via", "about",
        "across", "between", "within", "without", "into", "onto", "down", "back", "away",
        "and", "or", "then", "plus", "also", "after", "before",
        "im",
    }
)  # fmt: skip
"""English prepositions, particles and connectors (and ``im``, how ``in`` is spelled before b,
m, p): run together with the word after them they may make one verb of the two (``onboard``,
``upload``, ``bypass``, ``attest``, ``imprint``). Written out here, not taken from the rule's
vocabulary, so that a word dropped from the rule's list shows up."""
_EVIDENCE = re.compile(r"verb '([a-z]+)'")
"""The source of a read on a whole word. One on a merged word says ``verb 'get' starting 'getall'``."""


@cache
def judged_read() -> dict[str, str]:
    """Each word whose ``WORD_item`` is read, to the source the rule gave (once per session)."""
    out = {}
    for word in wordfreq.top_n_list("en", COUNT):
        risk, source = verb_risk(f"{word}_item")
        if risk == "read":
            out[word] = source
    return out


def committed() -> dict[str, str]:
    lines = [line for line in LIST.read_text(encoding="utf-8").splitlines() if line and not line.startswith("#")]
    return dict(line.split("\t") for line in lines)


def test_every_common_word_read_is_a_read_word_itself():
    words = wordfreq.top_n_list("en", COUNT)
    assert len(words) == COUNT
    read = judged_read()
    for word, source in read.items():
        evidence = _EVIDENCE.fullmatch(source)
        assert evidence, f"{word}_item is read by a piece of a longer word: {source}"
        # the word itself; a word with an apostrophe or a dot ("show's") is split there first,
        # so its evidence is one of its own whole words
        assert evidence[1] in re.findall(r"[a-z0-9]+", word), (word, source)
        assert evidence[1] == word or not word.isalnum(), (word, source)
        assert evidence[1] in READ_VERBS | READ_NOUNS | {"log"}, (word, source)
    assert "forget" not in read and "checklist" not in read and "inspector" not in read


def test_the_common_words_read_are_the_committed_list():
    now = {
        word: _EVIDENCE.fullmatch(source)[1] if _EVIDENCE.fullmatch(source) else source
        for word, source in judged_read().items()
    }
    before = committed()
    assert now == before, (
        f"now read and not in {LIST.name}: {sorted(now.keys() - before.keys())}; "
        f"no longer read: {sorted(before.keys() - now.keys())}; "
        f"another word decides: {sorted(w for w in now.keys() & before.keys() if now[w] != before[w])}"
    )


@cache
def judged_harmless() -> dict[str, str]:
    """Each word whose ``get_WORD`` is read, to how the rule read the word (once per session)."""
    out = {}
    for word in wordfreq.top_n_list("en", COUNT):
        if verb_risk(f"get_{word}")[0] == "read":
            out[word] = " ".join(w.text for w in words_of(word))
    return out


def pieces_run_together(word: str) -> list[list[str]]:
    """The pieces of each word of ``word`` that the rule read as words run together."""
    merged: dict[str, list[str]] = {}
    for w in words_of(word):
        if w.inside:
            merged.setdefault(w.inside, []).append(w.text)
    return list(merged.values())


def test_every_common_word_harmless_after_a_read_verb_is_whole_or_has_no_preposition_in_it():
    harmless = judged_harmless()
    whole = 0
    for word in harmless:
        readings = pieces_run_together(word)
        if not readings:
            # every word of it is a whole word of the vocabulary (inbox, show's: show s)
            assert all(w.text in VOCABULARY or w.text.isdigit() for w in words_of(word)), word
            whole += 1
            continue
        for pieces in readings:
            assert pieces[0] not in JOINING, f"get_{word} is read through a leading {pieces[0]!r}: {pieces}"
            assert not JOINING & set(pieces), f"get_{word} is read through {sorted(JOINING & set(pieces))}: {pieces}"
    assert whole > 900 and len(harmless) - whole > 50, (whole, len(harmless))  # both kinds are there
    for word in ("onboard", "byproduct", "attest", "imprint", "projector"):
        assert word not in harmless, word


def committed_harmless() -> dict[str, str]:
    lines = [
        line for line in HARMLESS_LIST.read_text(encoding="utf-8").splitlines() if line and not line.startswith("#")
    ]
    return dict(line.split("\t") for line in lines)


def test_the_common_words_harmless_after_a_read_verb_are_the_committed_list():
    now, before = judged_harmless(), committed_harmless()
    assert now == before, (
        f"now harmless after get_ and not in {HARMLESS_LIST.name}: {sorted(now.keys() - before.keys())}; "
        f"no longer harmless: {sorted(before.keys() - now.keys())}; "
        f"read another way: {sorted(w for w in now.keys() & before.keys() if now[w] != before[w])}"
    )


def main() -> int:
    read = judged_read()
    rows = [
        f"{word}\t{_EVIDENCE.fullmatch(source)[1] if _EVIDENCE.fullmatch(source) else source}"
        for word, source in sorted(read.items())
    ]
    LIST.write_text(HEADER + "".join(row + "\n" for row in rows), encoding="utf-8")
    print(f"{LIST}: {len(rows)} words")
    harmless = sorted(judged_harmless().items())
    HARMLESS_LIST.write_text(
        HARMLESS_HEADER + "".join(f"{word}\t{reading}\n" for word, reading in harmless), encoding="utf-8"
    )
    print(f"{HARMLESS_LIST}: {len(harmless)} words")
    return 0


if __name__ == "__main__":
    sys.exit(main())
