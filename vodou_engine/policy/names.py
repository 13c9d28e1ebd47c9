"""The name rule: a tool's risk from the words of its name, when nothing else decides it.

3. A tool is ``read`` only on positive evidence: a read verb (``list``, ``get``...) and
   nothing else in the name but words known to be harmless there. The read verb is a word
   of its own, or starts a merged word whose other pieces are its objects (``listfiles``);
   a read word rebuilt from the inside of a longer word (``forget``: ``for`` + ``get``) is
   no evidence, and makes the name ``write``. Any effect word (``post``, ``exec``...) makes
   it ``write``, any critical word (``delete``, ``pay``...), even inside a merged word
   (``deleteall``), makes it ``critical``;
4. a word in no vocabulary makes the name ``write``: unknown means gated. A word run
   together is harmless as its pieces only when none of them is a preposition, particle or
   connector: ``onboard`` (``on board``) may be a verb, so it is ``write``.

(1 and 2, the policy file and a trusted server's annotations, come first: file.py and
annotations.py.) The words and their classes are data, in words.py; this module splits a
name into them (``words_of``) and judges them (``verb_risk``). The verdict depends on the
name alone, so both are cached.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import NamedTuple

from ..plan import Risk
from .words import (
    AMBIGUOUS,
    CLASS,
    CODE,
    CONNECTOR,
    CRITICAL,
    CRITICAL_VERBS,
    DB_WORDS,
    JOINING,
    JOINT,
    LOG,
    NOT_SCANNED,
    NUMBER,
    PARTICLE,
    PIECE,
    PLURAL,
    PLURALS,
    READ,
    READ_NOUN,
    SAFE,
    SEQUENCE,
    UNKNOWN,
    VOCABULARY,
    WRITE,
)

_EVIDENCE = (READ, READ_NOUN, LOG)
"""Classes of the words that can make a name read."""
_OBJECT_PIECES = (SAFE, PLURAL, AMBIGUOUS, READ_NOUN, LOG)
"""What may follow the read verb inside a merged read (``listfiles``, ``getemail``,
``getstatus``): the words that can be its objects. Not another verb (``checklist``),
not a connector (``inspector``), not ``show`` (``showtime``)."""

_MAX_WORD = max(map(len, VOCABULARY))
# Longest first, then alphabetical: the word a verdict names is part of an approval's
# fingerprint, so it may never depend on a set's order (PYTHONHASHSEED).
_SCANNED_CRITICAL = tuple(sorted(CRITICAL_VERBS - NOT_SCANNED, key=lambda w: (-len(w), w)))
_MERGED_MAX = 256
"""Longer merged words are not split into words (they stay unknown: write), only scanned."""

_CHUNK = re.compile(r"[A-Za-z]+|[0-9]+")
_CAMEL = re.compile(r"[A-Z]{2,}s(?![a-z])|[A-Z]+(?![a-z])|[A-Z]?[a-z]+")
"""camelCase, PascalCase and ALLCAPS words; ``URLs``, ``IDs`` stay one word."""


class _Word(NamedTuple):
    text: str
    cls: int
    inside: str = ""
    """The merged word this one was found in (``deleteall``), or ""."""


def _segment(s: str) -> tuple[list[str] | None, set[str]]:
    """Read a merged word as vocabulary words.

    Returns the reading with the fewest words (None when there is none) and every
    vocabulary word that some complete reading contains: an effect or critical word in
    any reading counts, so ``runstable`` (``run stable`` or ``runs table``) is not read.
    """
    n = len(s)
    ends = [False] * (n + 1)  # s[:i] reads as words
    ends[0] = True
    for i in range(1, n + 1):
        for j in range(max(0, i - _MAX_WORD), i):
            if ends[j] and s[j:i] in CLASS:
                ends[i] = True
                break
    if not ends[n]:
        return None, set()
    fewest: list[int | None] = [None] * (n + 1)  # fewest words reading s[i:]
    cut = [0] * (n + 1)
    fewest[n] = 0
    for i in range(n - 1, -1, -1):
        for j in range(min(n, i + _MAX_WORD), i, -1):  # longer words first
            rest, best = fewest[j], fewest[i]
            if rest is not None and s[i:j] in CLASS and (best is None or rest + 1 < best):
                fewest[i] = rest + 1
                cut[i] = j
    pieces, i = [], 0
    while i < n:
        pieces.append(s[i : cut[i]])
        i = cut[i]
    possible = {
        s[j:i]
        for j in range(n)
        if ends[j]
        for i in range(j + 1, min(n, j + _MAX_WORD) + 1)
        if fewest[i] is not None and s[j:i] in CLASS
    }
    return pieces, possible


def _rebuilt(pieces: list[str], possible: set[str]) -> bool:
    """Whether a merged word holds read words that it may not count as read evidence.

    A merged word is read evidence only as ``<read verb><objects>``: its first piece a
    read verb and every other piece a word that can be its object (``listfiles``,
    ``getemail``, ``getstatus``), in every way of reading it. Anything else is a read word
    rebuilt from the inside of another word: ``forget`` (``for get``), ``await``
    (``a wait``), ``inspector`` (``inspect or``), ``checklist``, ``showtime``. Such a word
    says nothing about looking.
    """
    if not any(CLASS[w] in _EVIDENCE for w in possible):
        return False
    head = pieces[0]
    if CLASS[head] != READ:
        return True
    if any(CLASS[p] not in _OBJECT_PIECES or p == "show" for p in pieces[1:]):
        return True
    return any(w != head and (CLASS[w] in (READ, CONNECTOR) or w == "show") for w in possible)


def _merged(token: str, shown: str) -> list[_Word]:
    """The words of a token that is not itself a vocabulary word."""
    out: list[_Word] = []
    pieces, possible = _segment(token) if len(token) <= _MERGED_MAX else (None, set())
    rebuilt = pieces is not None and _rebuilt(pieces, possible)
    if not rebuilt and pieces is not None and min(map(len, pieces)) == 1:
        pieces = None  # a reading that needs a one-letter word is no reading: "ask" is not "a s k"
    for w in _SCANNED_CRITICAL:
        if w in token:
            out.append(_Word(w, CRITICAL, shown))
            break
    for w in sorted(possible, key=lambda w: (token.find(w), -len(w), w)):
        if CLASS[w] in (CRITICAL, WRITE, CODE, PARTICLE) and (pieces is None or w not in pieces):
            out.append(_Word(w, CLASS[w], shown))
    if pieces is None:
        out.append(_Word(token, UNKNOWN, shown))
    elif rebuilt:
        # its effect and critical pieces still count (``getrm``); its read words do not, and
        # the word is not read as harmless pieces either (``forgets``: ``for gets``)
        if not any(CLASS[p] in _EVIDENCE for p in pieces):
            out.append(
                _Word(
                    min((w for w in possible if CLASS[w] in _EVIDENCE), key=lambda w: (token.find(w), -len(w), w)),
                    PIECE,
                    shown,
                )
            )
        out.extend(_Word(p, PIECE if CLASS[p] in _EVIDENCE else CLASS[p], shown) for p in pieces)
    else:
        joint = next((p for p in pieces if p in JOINING), None)
        if joint is not None:
            # not harmless pieces: the preposition or connector may make a verb of the word
            # after it (``onboard``); its effect and critical pieces still count
            out.append(_Word(joint, JOINT, shown))
        out.extend(_Word(p, CLASS[p], shown) for p in pieces)
    return out


@lru_cache(maxsize=4096)
def _token(token: str, shown: str) -> tuple[_Word, ...]:
    cls = CLASS.get(token)
    if cls is not None:
        return (_Word(token, cls),)
    return tuple(_merged(token, shown))


def words_of(tool: str) -> list[_Word]:
    """Split a tool name into classified words: on every non-alphanumeric character, on
    camelCase, PascalCase and ALLCAPS boundaries and on digits; a piece that is not a
    vocabulary word is read as merged words (``listfiles``). A read word that does not
    stand on its own (``forget``, ``4get``) comes out as a ``PIECE``: no evidence."""
    out: list[_Word] = []
    digits_end = -1  # where the last run of digits ended
    for match in _CHUNK.finditer(tool):
        chunk = match.group()
        if chunk.isdigit():
            out.append(_Word(chunk, NUMBER))
            digits_end = match.end()
            continue
        parts = _CAMEL.findall(chunk)
        words = [w for p in parts for w in _token(p.lower(), p)]
        if match.start() == digits_end:
            # letters right after digits: a read word there does not start a word of its
            # own (``4get`` is "forget"), so it is no read evidence
            first = len(_token(parts[0].lower(), parts[0]))
            glued = tool[match.start() - len(out[-1].text) : match.start()] + parts[0]
            words = [
                _Word(w.text, PIECE, glued) if i < first and w.cls in _EVIDENCE else w for i, w in enumerate(words)
            ]
        if len(parts) > 1 and any(w.cls in (UNKNOWN, PIECE, JOINT) for w in words):
            # the camel split may have cut a word in two (getDELETEitem: get, DELET, Eitem):
            # read the chunk as one merged word as well, and keep what that reading finds
            whole = _merged(chunk.lower(), chunk)
            words = [w for w in whole if w.cls in (CRITICAL, WRITE, CODE, PARTICLE)] + words
        out.extend(words)
    return out


def verbs_in(tool: str) -> list[str]:
    """The words of a tool's name, lowercased (merged words split where they can be)."""
    return [w.text for w in words_of(tool)]


def _shown(text: str) -> str:
    """A word as the plan card shows it: a very long one is cut."""
    return text if len(text) <= 40 else text[:37] + "..."


def _q(word: _Word) -> str:
    return f"'{word.text}' inside '{_shown(word.inside)}'" if word.inside else ""


_LOOK_ALIKES = str.maketrans(
    "\u0430\u0435\u043e\u0440\u0441\u0443\u0445\u0456\u0458\u0455\u0501\u04cf\u043a\u043c\u043d\u0442\u0432"  # Cyrillic
    "\u03bf\u03b1\u03b5\u03b9\u03ba\u03bd\u03c1\u03c4\u03c5\u03c7",  # Greek
    "aeopcyxijsdlkmhtb"  # the Cyrillic ones as Latin
    "oaeiknptux",  # the Greek ones
    "\u200b\u200c\u200d\u2060\ufeff\u00ad",
)
"""Cyrillic and Greek letters that look like Latin ones, and invisible characters (dropped)."""


def _ascii_look_alike(tool: str) -> str:
    import unicodedata  # only for names outside ASCII

    text = unicodedata.normalize("NFKD", tool.translate(_LOOK_ALIKES))
    return "".join(ch for ch in text if not unicodedata.combining(ch))


@lru_cache(maxsize=4096)
def verb_risk(tool: str) -> tuple[Risk, str]:
    """Risk from the words of a tool's name: ``read`` only on positive evidence.

    ``critical`` when any word is critical (inside a merged word too); else ``write``
    when any word is an effect, runs code, is an ambiguous word in verb position, is
    unknown, is a read word rebuilt from a longer word (``forget``) or is a merged word
    holding a preposition or connector (``onboard``), or when no word is a read verb; else
    ``read``. The source names the word.

    Cached: a recipe calls the same few tools over and over, and the verdict depends on
    the name alone (a policy file or hints are applied on top).
    """
    words = words_of(tool)
    critical: str | None = None
    effect: str | None = None  # an effect word
    verb: str | None = None  # an ambiguous word standing where the verb goes
    unknown: str | None = None
    if not tool.isascii():
        # a letter outside ASCII would split a word where nobody sees a split (a Cyrillic
        # U+0435 for the "e" of "send"): the name is not read, whatever the ASCII pieces say; and if it
        # reads as a critical name once its look-alike letters are made ASCII, it is critical
        folded = _ascii_look_alike(tool)
        if folded != tool and folded.isascii():
            risk, why = verb_risk(folded)
            if risk == "critical":
                return "critical", f"{why}, read as '{_shown(folded)}'"
        odd = next(ch for ch in tool if not ch.isascii())
        unknown = f"character {odd!r} outside ASCII: write (fail closed)"
    read: str | None = None
    governed = False  # a read verb since the start or the last connector
    after: _Word | None = None  # the connector right before this word
    prev: _Word | None = None  # the word before this one (numbers are skipped)
    has_read_verb = any(w.cls in (READ, READ_NOUN) for w in words)

    for w in words:
        cls = w.cls
        if cls == NUMBER:
            continue
        leading = prev is None or after is not None  # where the verb of a clause stands
        if cls == CRITICAL:
            critical = critical or _q(w) or f"verb '{w.text}'"
        elif cls == CODE:
            effect = effect or _q(w) or f"word '{w.text}' (runs code)"
        elif cls == WRITE:
            effect = effect or _q(w) or f"verb '{w.text}'"
        elif cls == PARTICLE:
            if w.text in ("to", "into", "onto"):
                why = f"'{w.text}' names a destination: write"
            else:
                why = f"'{prev.text} {w.text}' is a phrasal verb: write" if prev else f"verb '{w.text}'"
            effect = effect or _q(w) or why
        elif cls == AMBIGUOUS and not governed:
            if after is not None:
                why = f"'{w.text}' after '{after.text}' is a verb"
            elif has_read_verb:
                why = f"'{w.text}' is not the object of a read verb: write"
            else:
                why = f"verb '{w.text}'"
            verb = verb or why
        elif cls == PLURAL and after is not None:
            why = f"'{w.text}' after '{after.text}' is a verb"
            if CLASS[PLURALS[w.text]] == CRITICAL:
                critical = critical or why
            else:
                verb = verb or why
        elif cls == LOG:
            if leading:
                verb = verb or (f"'log' after '{after.text}' is a verb" if after is not None else "verb 'log'")
            else:
                read = read or "verb 'log'"
        elif cls == UNKNOWN:
            unknown = unknown or f"unknown word '{_shown(w.inside or w.text)}': write (fail closed)"
        elif cls == PIECE:
            unknown = unknown or f"'{w.text}' inside '{_shown(w.inside)}' is not read evidence: write (fail closed)"
        elif cls == JOINT:
            unknown = unknown or f"'{w.text}' inside '{_shown(w.inside)}' may make it a verb: write (fail closed)"
        elif after is not None and after.text in SEQUENCE and cls not in (READ, READ_NOUN, CONNECTOR):
            verb = verb or f"'{w.text}' after '{after.text}' is a verb"  # get_status_then_drive: no noun stands there
        elif cls in (READ, READ_NOUN):
            read = read or (f"verb '{w.text}' starting '{_shown(w.inside)}'" if w.inside else f"verb '{w.text}'")
            governed = governed or cls == READ
        if cls == CONNECTOR:
            governed = False
            after = w
        else:
            after = None
        prev = w

    if critical:
        return "critical", critical
    if effect or unknown or verb:
        return "write", effect or unknown or verb  # type: ignore[return-value]
    query = next((w for w in words if w.text == "query"), None)
    database = next((w.text for w in words if w.text in DB_WORDS), None)
    if query is not None and database is not None:
        return "write", f"'query' on '{database}' runs any query: write"
    if read:
        return "read", read
    return "write", "no known verb: write (fail closed)"
