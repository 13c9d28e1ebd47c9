"""Tool risk: ``read``, ``write`` or ``critical``, and where each verdict came from.

Order of authority (docs/policy.md):

1. the person's policy file (per-tool ``risk``; it may lower as well as raise);
2. for a server the policy marks ``trusted``, the server's MCP annotations;
3. the words of the tool's name. A tool is ``read`` only on positive
   evidence: a read verb (``list``, ``get``...) and nothing else in the name
   but words known to be harmless there. The read verb is a word of its own,
   or starts a merged word whose other pieces are its objects (``listfiles``);
   a read word rebuilt from the inside of a longer word (``forget``: ``for`` +
   ``get``) is no evidence, and makes the name ``write``. Any effect word
   (``post``, ``exec``...) makes it ``write``, any critical word (``delete``,
   ``pay``...), even inside a merged word (``deleteall``), makes it ``critical``;
4. a word in no vocabulary makes the name ``write``: unknown means gated. A word run
   together is harmless as its pieces only when none of them is a preposition,
   particle or connector: ``onboard`` (``on board``) may be a verb, so it is ``write``.

An untrusted server's annotations can only raise the verdict of 3-4, never
lower it: a server saying "read-only" about ``post_message`` is ignored, one
saying "destructive" about ``get_thing`` is believed. An unset hint is no
evidence either way (the name rule already fails closed).
"""

from __future__ import annotations

import hashlib
import os
import re
from functools import lru_cache
from pathlib import Path
from typing import Any, NamedTuple

import msgspec

from .errors import PolicyError
from .limits import read_regular_file
from .plan import RISK_ORDER, Risk


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


# -- vocabularies -----------------------------------------------------------------------------
# Every word of a tool's name is looked up here (docs/policy.md, "Reading a tool's name").
# A word is in exactly one set (checked below, at import). tests/test_policy_names.py holds
# the rule to real tool names (tests/data/mcp_tool_names.tsv) and to a property over names
# built from these sets: add a word only with a test that shows why.

READ_VERBS = _words(
    "list get search read find fetch query describe view preview check count lookup inspect "
    "peek browse summarize explain validate whoami convert retrieve compare calculate geocode "
    "screenshot wait grep"
)
"""Verbs that only look: the positive evidence a read needs. A read verb also makes the
next ambiguous words its objects (``get_email``: the email is read, not sent)."""

READ_NOUNS = _words("show status diff history tree info details stats statistics usage logs metadata")
"""Read evidence that takes no object: nouns that name something to read (``git_status``,
``directory_tree``), and ``show``, which may mean showing a person something
(``show_alert`` is not read: ``alert`` there is a verb)."""

LOG_WORD = "log"
"""``git_log`` reads a log; ``log_event`` writes one. ``log`` is read evidence after another
word, and a verb (write) as the first word of the name or right after a connector."""

WRITE_VERBS = _words(
    # change or create something
    "send post create update write insert upload download publish unpublish append patch put save "
    "submit assign unassign apply push merge rebase squash edit modify move rename set unset add "
    "archive unarchive cancel invite forward copy clone fork import export start stop restart "
    "pause resume deploy undeploy init initialize install enable disable toggle trigger dispatch "
    "retry approve reject accept decline confirm follow unfollow like unlike subscribe "
    "unsubscribe join leave unblock mute unmute lock unlock mark unmark unstar unpin untag "
    "unlabel reserve register unregister deregister enroll notify share unshare sync refresh "
    "reload navigate click press hover scroll drag fill select resize tap swipe open close reopen "
    "make generate restore upsert replace grant deny authorize login logout signin signup signout "
    "sign rotate regenerate renew attach detach connect disconnect mount unmount upgrade "
    "downgrade migrate provision allocate scale promote demote rollout handle interact give "
    "dismiss manage respond invoke suspend ban unban kick shutdown reboot format convey mint "
    "stake unstake vote checkout rerun use play"
)
"""Effect verbs: a name holding one is never read."""

CODE_WORDS = _words(
    "exec execute eval evaluate run shell bash sh zsh cmd command script sql spawn repl "
    "powershell python javascript"
)
"""Words that mean the tool runs code or an arbitrary query: effects, never read."""

CRITICAL_VERBS = _words(
    "delete remove pay payout transfer refund charge drop reset destroy purge wipe revoke "
    "terminate kill truncate erase withdraw purchase buy sell trade overwrite force revert "
    "rollback discard clear flush prune void finalize unlink rm del rmdir shred nuke expunge "
    "uninstall deprovision decommission burn liquidate deposit spend"
)
"""Irreversible, destructive or money-moving verbs: ``critical`` wherever they appear,
inside merged words too (``deleteall``, ``transferfunds``)."""

PARTICLES = _words("out in off up down over back away to into onto")
"""Particles that turn a verb into another one (``check out``, ``sign in``, ``back up``) or
name where something is put (``export_to``): the name is write."""

AMBIGUOUS_WORDS = _words(
    "email mail message text note comment reply commit tag label schedule book star pin order "
    "call request review draft link branch pull transition release type process record track "
    "store alert contact report chat flag bookmark rate answer page watch print file issue block "
    "snapshot index cache queue stream group build bill credit debit fund mirror quote return "
    "ship test place ping address map position color action host route price invoice discount "
    "dispute prompt document size free root profile package notification dialog toast popup "
    "banner modal"
)
"""Words that are a noun or an effect verb (``email``, ``pin``, ``order``...). One is a noun
(allowed in a read) only in object position: after a read verb, with no connector in
between (``get_email``, ``slack_preview_message``). Anywhere else it is the verb
(``email_summary``, ``fetch_and_email``): write."""

CONNECTORS = _words("and then or plus also after before andthen")
"""Words that start a new clause: the word after one is in verb position."""
_SEQUENCE = frozenset({"then", "andthen"})
"""Connectors after which only a verb can stand (``list_files_and_folders`` joins two nouns;
``get_status_then_drive`` cannot): a harmless noun there is a verb, so the name is write."""

SAFE_WORDS = _words(
    # articles, pronouns, qualifiers
    "a an the all any each every my me mine our self current latest recent new old first last "
    "next previous prev top default active closed pending failed unread starred staged unstaged "
    "signed local remote global public private internal external shared full partial single "
    "multiple batch bulk many more other related linked available allowed blocked archived "
    "deleted inactive enabled disabled visible hidden plain simple basic advanced detailed quick "
    "fast slow busy freebusy nested recursive upstream downstream base head main master sub "
    "parent child children ancestor ancestors descendants sibling siblings own owned assigned "
    "unique total overall daily weekly monthly yearly today yesterday tomorrow now"
    # things
    " id ids uuid uuids v s ec k audit slug key keys name names title titles description body "
    "summary value values field fields property properties attribute attributes option options "
    "param params parameter parameters setting settings config configs configuration preference "
    "preferences env environment environments variable variables var vars secret secrets token "
    "credential credentials input inputs output outputs result results response responses item "
    "items entity entities relation relations observation observations node nodes edge edges "
    "graph graphs path paths directory directories folder folders dir dirs content contents media "
    "image images photo photos picture pictures video videos audio attachment attachments "
    "artifact artifacts blob blobs object objects resource resources asset assets bucket buckets "
    "storage volume volumes disk disks drive drives repo repos repository repositories project "
    "projects org orgs organization organizations team teams member members membership "
    "memberships user users usergroup people person account accounts customer customers client "
    "clients vendor vendors owner owners collaborator collaborators author authors assignee "
    "assignees reviewer reviewers follower followers subscriber subscribers ticket tickets task "
    "tasks todo todos bug bugs incident incidents problem problems event events calendar "
    "calendars meeting meetings appointment appointments slot slots availability time times "
    "timezone timezones date dates day days week weeks month months year years hour hours range "
    "period timestamp duration channel channels conversation conversations thread threads dm dms "
    "im inbox outbox sent topic topics category categories reaction reactions emoji discussion "
    "discussions version versions changelog blame workflow workflows job jobs step steps pipeline "
    "pipelines deployment deployments service services server servers instance instances cluster "
    "clusters pod pods container containers namespace namespaces machine machines vm vms droplet "
    "droplets function functions lambda lambdas endpoint endpoints domain domains dns zone zones "
    "certificate certificates cert certs network networks url urls uri web website site sites "
    "html markdown json csv xml pdf yaml code source sources data dataset datasets metric metrics "
    "cost costs pricing receipt receipts billing payment payments balance balances transaction "
    "transactions subscription subscriptions plan plans product products coupon coupons intent "
    "intents cart carts shipment shipments tracking inventory currency currencies api apis http "
    "https rest sdk cli mcp llm ai model models embedding embeddings vector vectors schema "
    "schemas table tables column columns row rows cell cells sheet sheets spreadsheet "
    "spreadsheets doc docs documentation board boards sprint sprints backlog epic epics agile "
    "worklog worklogs session sessions tab tabs window windows browser console element elements "
    "selector dom mouse keyboard coordinates xy width height length overview dashboard dashboards "
    "widget widgets panel panels chart charts layout dropdown dropdowns payload payloads skill "
    "skills preset presets offset offsets charset subset access thing things word words line "
    "lines level levels kind kinds mode modes state states insight insights advisor advisors "
    "advisory advisories scanning security support feedback space spaces gist gists copilot "
    "dependabot seer dsn dsns trace traces span spans direction directions distance distances "
    "matrix elevation location locations area areas region regions country countries city cities "
    "weather forecast news article articles paper papers library libraries module modules "
    "dependency dependencies extension extensions plugin plugins migration migrations typescript "
    "anon unreads feed feeds collection collections entry entries heading headings mime template "
    "templates"
    # a preposition or particle run together with a word is not read as its pieces (_JOINING):
    # words of that shape that real tools name, and that are a noun or a qualifier, are listed
    # whole (get_uptime, list_online_users; inbox, outbox, input, output, overview, offset and
    # upstream above are such words too)
    " uptime online"
    # products and namespaces
    " slack gmail google gcal notion linear jira confluence atlassian github gh gitlab git "
    "bitbucket azure aws gcp docker kubernetes helm stripe paypal shopify sentry datadog "
    "grafana prometheus redis elasticsearch supabase firebase vercel netlify cloudflare openai "
    "anthropic claude brave tavily exa puppeteer playwright selenium browserbase figma airtable "
    "hubspot salesforce zendesk intercom discord telegram whatsapp zoom dropbox onedrive "
    "sharepoint outlook excel trello asana clickup todoist obsidian youtube spotify twitter "
    "reddit wikipedia arxiv npm pypi desktop commander memory knowledge vodou demo lab arrival "
    "arrivals"
)
"""Nouns and qualifiers that may stand anywhere in a read's name."""

DB_WORDS = _words(
    "db dbs database databases pg postgres postgresql psql mysql mariadb sqlite mssql mongo mongodb "
    "cypher duckdb bigquery snowflake clickhouse athena redshift sparql"
)
"""Names of databases: ``query`` next to one runs whatever query it is given (``pg_query``,
``query_database``), so it is write. Bare ``query`` stays read (docs/policy.md)."""

PREPOSITIONS = _words("by for from with of on at per via within across between about without")
"""Prepositions that do not name a destination: harmless as words of their own (``get_by_id``,
``list_files_from_repo``), but not inside a word run together (``_JOINING`` below)."""

SAFE_WORDS = SAFE_WORDS | PREPOSITIONS | DB_WORDS

_NOT_SCANNED = frozenset({"rm", "del"})
"""Critical words too short to look for inside other words (``form``, ``model``): they count
only as whole words, or as a piece of a merged word that reads as words throughout."""

# word classes
(_READ, _READ_NOUN, _LOG, _WRITE, _CODE, _CRITICAL, _PARTICLE, _AMBIGUOUS, _PLURAL, _CONNECTOR, _SAFE, _UNKNOWN, _NUMBER, _PIECE, _JOINT) = (
    range(15)
)
_EVIDENCE = (_READ, _READ_NOUN, _LOG)
"""Classes of the words that can make a name read."""
_OBJECT_PIECES = (_SAFE, _PLURAL, _AMBIGUOUS, _READ_NOUN, _LOG)
"""What may follow the read verb inside a merged read (``listfiles``, ``getemail``,
``getstatus``): the words that can be its objects. Not another verb (``checklist``),
not a connector (``inspector``), not ``show`` (``showtime``)."""
_JOINING = PREPOSITIONS | CONNECTORS | {"im"}
"""Words that, run together with the word after them, may make one verb of the two: ``onboard``
(``on board``), ``attest`` (``at test``), ``imprint`` (``im print``: ``im`` is how ``in`` is
spelled before b, m, p); English writes a verb made with a prefix as one word. A word run
together that holds one, anywhere, is not read as its pieces (``getonboard``, ``itemonboard``,
and ``getbyid`` too: the rule cannot tell ``by id`` from ``on board``), so the name is write.
Particles (``upload``, ``outbox``) already make a name write wherever they stand. A harmless
word of that shape that real tools use (``online``, ``uptime``, ``inbox``) is a whole word of
SAFE_WORDS, never a reading."""

_BASE_CLASS: dict[str, int] = {}
for _cls, _vocab in (
    (_READ, READ_VERBS),
    (_READ_NOUN, READ_NOUNS),
    (_LOG, frozenset({LOG_WORD})),
    (_WRITE, WRITE_VERBS),
    (_CODE, CODE_WORDS),
    (_CRITICAL, CRITICAL_VERBS),
    (_PARTICLE, PARTICLES),
    (_AMBIGUOUS, AMBIGUOUS_WORDS),
    (_CONNECTOR, CONNECTORS),
    (_SAFE, SAFE_WORDS),
):
    for _w in _vocab:
        if _w in _BASE_CLASS:
            raise AssertionError(f"policy vocabulary: {_w!r} is in two classes")
        _BASE_CLASS[_w] = _cls


def _plural(word: str) -> str:
    if word.endswith(("s", "x", "z", "ch", "sh")):
        return word + "es"
    if len(word) > 1 and word.endswith("y") and word[-2] not in "aeiou":
        return word[:-1] + "ies"
    return word + "s"


PLURALS: dict[str, str] = {}
"""Plural (or third-person) forms of the verbs and nouns, to their base word. A plural is a
noun wherever it stands (``messages_list``, ``list_workflow_runs``), except right after a
connector, where it is the verb (``get_and_emails``)."""
_NO_PLURAL = _words(
    "a an the all any each every my me mine our self by for from with of on at per via within across "
    "between about without new old first last next previous prev top now today yesterday tomorrow "
    "current latest recent daily weekly monthly yearly online"
)
for _w, _cls in _BASE_CLASS.items():
    if _cls in (_CONNECTOR, _PARTICLE) or len(_w) < 3 or _w in _NO_PLURAL:
        continue
    _p = _plural(_w)
    if _p not in _BASE_CLASS:
        PLURALS.setdefault(_p, _w)

_CLASS: dict[str, int] = dict(_BASE_CLASS)
for _p, _w in PLURALS.items():
    _CLASS[_p] = _SAFE if _BASE_CLASS[_w] in (_SAFE, _READ, _READ_NOUN) else _PLURAL

VOCABULARY = frozenset(_CLASS)
_MAX_WORD = max(map(len, VOCABULARY))
_SCANNED_CRITICAL = tuple(sorted(CRITICAL_VERBS - _NOT_SCANNED, key=len, reverse=True))
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
            if ends[j] and s[j:i] in _CLASS:
                ends[i] = True
                break
    if not ends[n]:
        return None, set()
    fewest: list[int | None] = [None] * (n + 1)  # fewest words reading s[i:]
    cut = [0] * (n + 1)
    fewest[n] = 0
    for i in range(n - 1, -1, -1):
        for j in range(min(n, i + _MAX_WORD), i, -1):  # longer words first
            rest = fewest[j]
            if rest is not None and s[i:j] in _CLASS and (fewest[i] is None or rest + 1 < fewest[i]):
                fewest[i] = rest + 1
                cut[i] = j
    pieces, i = [], 0
    while i < n:
        pieces.append(s[i : cut[i]])
        i = cut[i]
    possible = {
        s[j:i] for j in range(n) if ends[j] for i in range(j + 1, min(n, j + _MAX_WORD) + 1) if fewest[i] is not None and s[j:i] in _CLASS
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
    if not any(_CLASS[w] in _EVIDENCE for w in possible):
        return False
    head = pieces[0]
    if _CLASS[head] != _READ:
        return True
    if any(_CLASS[p] not in _OBJECT_PIECES or p == "show" for p in pieces[1:]):
        return True
    return any(w != head and (_CLASS[w] in (_READ, _CONNECTOR) or w == "show") for w in possible)


def _merged(token: str, shown: str) -> list[_Word]:
    """The words of a token that is not itself a vocabulary word."""
    out: list[_Word] = []
    pieces, possible = _segment(token) if len(token) <= _MERGED_MAX else (None, set())
    rebuilt = pieces is not None and _rebuilt(pieces, possible)
    if not rebuilt and pieces is not None and min(map(len, pieces)) == 1:
        pieces = None  # a reading that needs a one-letter word is no reading: "ask" is not "a s k"
    for w in _SCANNED_CRITICAL:
        if w in token:
            out.append(_Word(w, _CRITICAL, shown))
            break
    for w in sorted(possible, key=token.find):
        if _CLASS[w] in (_CRITICAL, _WRITE, _CODE, _PARTICLE) and (pieces is None or w not in pieces):
            out.append(_Word(w, _CLASS[w], shown))
    if pieces is None:
        out.append(_Word(token, _UNKNOWN, shown))
    elif rebuilt:
        # its effect and critical pieces still count (``getrm``); its read words do not, and
        # the word is not read as harmless pieces either (``forgets``: ``for gets``)
        if not any(_CLASS[p] in _EVIDENCE for p in pieces):
            out.append(_Word(min((w for w in possible if _CLASS[w] in _EVIDENCE), key=token.find), _PIECE, shown))
        out.extend(_Word(p, _PIECE if _CLASS[p] in _EVIDENCE else _CLASS[p], shown) for p in pieces)
    else:
        joint = next((p for p in pieces if p in _JOINING), None)
        if joint is not None:
            # not harmless pieces: the preposition or connector may make a verb of the word
            # after it (``onboard``); its effect and critical pieces still count
            out.append(_Word(joint, _JOINT, shown))
        out.extend(_Word(p, _CLASS[p], shown) for p in pieces)
    return out


@lru_cache(maxsize=4096)
def _token(token: str, shown: str) -> tuple[_Word, ...]:
    cls = _CLASS.get(token)
    if cls is not None:
        return (_Word(token, cls),)
    return tuple(_merged(token, shown))


def words_of(tool: str) -> list[_Word]:
    """Split a tool name into classified words: on every non-alphanumeric character, on
    camelCase, PascalCase and ALLCAPS boundaries and on digits; a piece that is not a
    vocabulary word is read as merged words (``listfiles``). A read word that does not
    stand on its own (``forget``, ``4get``) comes out as a ``_PIECE``: no evidence."""
    out: list[_Word] = []
    digits_end = -1  # where the last run of digits ended
    for match in _CHUNK.finditer(tool):
        chunk = match.group()
        if chunk.isdigit():
            out.append(_Word(chunk, _NUMBER))
            digits_end = match.end()
            continue
        parts = _CAMEL.findall(chunk)
        words = [w for p in parts for w in _token(p.lower(), p)]
        if match.start() == digits_end:
            # letters right after digits: a read word there does not start a word of its
            # own (``4get`` is "forget"), so it is no read evidence
            first = len(_token(parts[0].lower(), parts[0]))
            glued = tool[match.start() - len(out[-1].text) : match.start()] + parts[0]
            words = [_Word(w.text, _PIECE, glued) if i < first and w.cls in _EVIDENCE else w for i, w in enumerate(words)]
        if len(parts) > 1 and any(w.cls in (_UNKNOWN, _PIECE, _JOINT) for w in words):
            # the camel split may have cut a word in two (getDELETEitem: get, DELET, Eitem):
            # read the chunk as one merged word as well, and keep what that reading finds
            whole = _merged(chunk.lower(), chunk)
            words = [w for w in whole if w.cls in (_CRITICAL, _WRITE, _CODE, _PARTICLE)] + words
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
    "\u0430\u0435\u043e\u0440\u0441\u0443\u0445\u0456\u0458\u0455\u0501\u04cf\u043a\u043c\u043d\u0442\u0432"
    "\u03bf\u03b1\u03b5\u03b9\u03ba\u03bd\u03c1\u03c4\u03c5\u03c7",
    "aeopcyxijsdlkmhtb" "oaeiknptux",
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
        # "е" in "sеnd"): the name is not read, whatever the ASCII pieces say; and if it
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
    has_read_verb = any(w.cls in (_READ, _READ_NOUN) for w in words)

    for w in words:
        cls = w.cls
        if cls == _NUMBER:
            continue
        leading = prev is None or after is not None  # where the verb of a clause stands
        if cls == _CRITICAL:
            critical = critical or _q(w) or f"verb '{w.text}'"
        elif cls == _CODE:
            effect = effect or _q(w) or f"word '{w.text}' (runs code)"
        elif cls == _WRITE:
            effect = effect or _q(w) or f"verb '{w.text}'"
        elif cls == _PARTICLE:
            if w.text in ("to", "into", "onto"):
                why = f"'{w.text}' names a destination: write"
            else:
                why = f"'{prev.text} {w.text}' is a phrasal verb: write" if prev else f"verb '{w.text}'"
            effect = effect or _q(w) or why
        elif cls == _AMBIGUOUS and not governed:
            if after is not None:
                why = f"'{w.text}' after '{after.text}' is a verb"
            elif has_read_verb:
                why = f"'{w.text}' is not the object of a read verb: write"
            else:
                why = f"verb '{w.text}'"
            verb = verb or why
        elif cls == _PLURAL and after is not None:
            why = f"'{w.text}' after '{after.text}' is a verb"
            if _CLASS[PLURALS[w.text]] == _CRITICAL:
                critical = critical or why
            else:
                verb = verb or why
        elif cls == _LOG:
            if leading:
                verb = verb or (f"'log' after '{after.text}' is a verb" if after is not None else "verb 'log'")
            else:
                read = read or "verb 'log'"
        elif cls == _UNKNOWN:
            unknown = unknown or f"unknown word '{_shown(w.inside or w.text)}': write (fail closed)"
        elif cls == _PIECE:
            unknown = unknown or f"'{w.text}' inside '{_shown(w.inside)}' is not read evidence: write (fail closed)"
        elif cls == _JOINT:
            unknown = unknown or f"'{w.text}' inside '{_shown(w.inside)}' may make it a verb: write (fail closed)"
        elif after is not None and after.text in _SEQUENCE and cls not in (_READ, _READ_NOUN, _CONNECTOR):
            verb = verb or f"'{w.text}' after '{after.text}' is a verb"  # get_status_then_drive: no noun stands there
        elif cls in (_READ, _READ_NOUN):
            read = read or (f"verb '{w.text}' starting '{_shown(w.inside)}'" if w.inside else f"verb '{w.text}'")
            governed = governed or cls == _READ
        if cls == _CONNECTOR:
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


class ToolPolicy(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True):
    risk: Risk | None = None
    allow_without_asking: bool = False


class ServerPolicy(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True):
    trusted: bool = False


class PolicyFile(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True):
    servers: dict[str, ServerPolicy] = {}
    tools: dict[str, ToolPolicy] = {}


class Hints(msgspec.Struct, frozen=True):
    """MCP tool annotations as the server gave them (None: not set)."""

    read_only: bool | None = None
    destructive: bool | None = None


BUILTIN_SERVER = "vodou"
BUILTIN_TOOLS = frozenset({"sleep", "noop", "echo"})
"""In-process tools (runtime/builtin.py); all read-only by construction."""


class Policy:
    """A loaded policy file (or none), able to judge any tool."""

    def __init__(self, data: PolicyFile | None = None, source: str | None = None, digest: str = ""):
        self.data = data or PolicyFile()
        self.source = source
        self.digest = digest

    def trusted(self, server: str) -> bool:
        s = self.data.servers.get(server)
        return bool(s and s.trusted)

    def tool(self, server: str, tool: str) -> ToolPolicy | None:
        return self.data.tools.get(f"{server}.{tool}")

    def allows_without_asking(self, server: str, tool: str) -> bool:
        t = self.tool(server, tool)
        return bool(t and t.allow_without_asking)

    def assess(self, server: str, tool: str, hints: Hints | None = None) -> tuple[Risk, str]:
        if server == BUILTIN_SERVER and tool in BUILTIN_TOOLS:
            return "read", "built-in, read-only"
        t = self.tool(server, tool)
        if t is not None and t.risk is not None:
            return t.risk, f"policy file ({self.source})" if self.source else "policy file"
        if hints is not None and self.trusted(server):
            if hints.destructive and hints.read_only is not True:
                return "critical", "destructiveHint (trusted server)"
            if hints.read_only is True:
                return "read", "readOnlyHint (trusted server)"
            if hints.read_only is False and (hints.destructive is False or verb_risk(tool)[0] != "critical"):
                return "write", "readOnlyHint=false (trusted server)"
        risk, source = verb_risk(tool)
        if hints is not None:
            if hints.destructive is True and hints.read_only is not True and risk != "critical":
                return "critical", "destructiveHint raised it"
            if hints.read_only is False and risk == "read":
                return "write", "readOnlyHint=false raised it"
        return risk, source

    def floor(self, server: str, tool: str) -> Risk:
        """The lowest risk a plan may claim for this tool under this policy."""
        if server == BUILTIN_SERVER and tool in BUILTIN_TOOLS:
            return "read"
        t = self.tool(server, tool)
        if t is not None and t.risk is not None:
            return t.risk
        if self.trusted(server):
            return "read"
        return verb_risk(tool)[0]


def at_least(a: Risk, b: Risk) -> bool:
    return RISK_ORDER[a] >= RISK_ORDER[b]


def policy_path(explicit: str | None = None, *, cwd: str | None = None, environ: dict[str, str] | None = None) -> str | None:
    """Where the policy comes from: --policy, VODOU_POLICY, ./vodou-policy.toml, user config."""
    env = os.environ if environ is None else environ
    if explicit:
        return explicit
    if env.get("VODOU_POLICY"):
        return env["VODOU_POLICY"]
    local = Path(cwd or os.getcwd()) / "vodou-policy.toml"
    if local.is_file():
        return str(local)
    xdg = env.get("XDG_CONFIG_HOME", "")
    base = xdg if os.path.isabs(xdg) else os.path.join(env.get("HOME") or os.path.expanduser("~"), ".config")
    user = Path(base) / "vodou" / "policy.toml"
    if user.is_file():
        return str(user)
    return None


_INVALID_HINT = 'see docs/policy.md; e.g. [tools."slack.slack_post_message"] risk = "write"'


def load_policy(explicit: str | None = None, *, cwd: str | None = None, environ: dict[str, str] | None = None) -> Policy:
    path = policy_path(explicit, cwd=cwd, environ=environ)
    if path is None:
        return Policy()
    try:
        raw = read_regular_file(path)  # a FIFO or device is refused, not waited on; at most 16 MiB
    except OSError as exc:
        raise PolicyError(
            f"cannot read the policy file {path}: {exc.strerror or exc}",
            hint="check the path given with --policy or VODOU_POLICY",
        ) from None
    try:
        data = msgspec.toml.decode(raw, type=PolicyFile)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise PolicyError(f"{path}: not a valid policy file: {exc}", hint=_INVALID_HINT) from None
    except RecursionError:
        raise PolicyError(f"{path}: not a valid policy file: a value is nested too deep", hint=_INVALID_HINT) from None
    return Policy(data, path, hashlib.sha256(raw).hexdigest())


def hints_from(annotations: Any) -> Hints | None:
    """Turn whatever the hub reports (an object with read_only/destructive) into Hints."""
    if annotations is None:
        return None
    ro = getattr(annotations, "read_only", None)
    de = getattr(annotations, "destructive", None)
    if ro is None and de is None:
        return None
    return Hints(ro, de)
