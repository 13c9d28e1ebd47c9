"""The name rule against English: no common word is read by a read word hidden inside it.

The 30,000 most frequent English words (``wordfreq``), each as the tool name
``WORD_item``: a name is read only on a whole word of the read vocabulary
(docs/policy.md, "Reading a tool's name"), so every word judged read must be
that read word itself (``list``, ``status``), never a word with one inside
(``forget``: ``for`` + ``get``; ``checklist``; ``sausage``). The words judged read
are committed in tests/data/read_words.txt with the word that decided, so any
change to the vocabularies or to the rule shows up there as a diff. After a
deliberate change, write the list again with::

    python tests/test_policy_words.py
"""

from __future__ import annotations

import re
import sys
from functools import cache
from pathlib import Path

import wordfreq

from vodou_engine.policy import READ_NOUNS, READ_VERBS, verb_risk

COUNT = 30_000
LIST = Path(__file__).parent / "data" / "read_words.txt"
HEADER = (
    "# The words of wordfreq.top_n_list('en', 30000) whose tool name WORD_item is judged read,\n"
    "# and the word of the name that decided it (tab-separated, sorted). Written by\n"
    "# python tests/test_policy_words.py; checked by tests/test_policy_words.py.\n"
)
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
    now = {word: _EVIDENCE.fullmatch(source)[1] if _EVIDENCE.fullmatch(source) else source for word, source in judged_read().items()}
    before = committed()
    assert now == before, (
        f"now read and not in {LIST.name}: {sorted(now.keys() - before.keys())}; "
        f"no longer read: {sorted(before.keys() - now.keys())}; "
        f"another word decides: {sorted(w for w in now.keys() & before.keys() if now[w] != before[w])}"
    )


def main() -> int:
    read = judged_read()
    rows = [f"{word}\t{_EVIDENCE.fullmatch(source)[1] if _EVIDENCE.fullmatch(source) else source}" for word, source in sorted(read.items())]
    LIST.write_text(HEADER + "".join(row + "\n" for row in rows), encoding="utf-8")
    print(f"{LIST}: {len(rows)} words")
    return 0


if __name__ == "__main__":
    sys.exit(main())
