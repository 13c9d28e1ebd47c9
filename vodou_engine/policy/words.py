"""Every word the name rule knows, and the one class each word is in.

The rule itself (vodou_engine/policy/names.py) only looks words up here: a tool
is ``read`` only on positive evidence, so what counts as evidence, as an effect
or as harmless is this data, kept apart from the code that reads a name so a
vocabulary change is a change of data (docs/policy.md, "Reading a tool's name").
The word lists are frozensets built from plain text, one paragraph per class,
so they read, and diff, like the lists in docs/policy.md.
"""

from __future__ import annotations


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
    "exec execute eval evaluate run shell bash sh zsh cmd command script sql spawn repl powershell python javascript"
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
SEQUENCE = frozenset({"then", "andthen"})
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
``list_files_from_repo``), but not inside a word run together (``JOINING`` below)."""

SAFE_WORDS = SAFE_WORDS | PREPOSITIONS | DB_WORDS

NOT_SCANNED = frozenset({"rm", "del"})
"""Critical words too short to look for inside other words (``form``, ``model``): they count
only as whole words, or as a piece of a merged word that reads as words throughout."""

JOINING = PREPOSITIONS | CONNECTORS | {"im"}
"""Words that, run together with the word after them, may make one verb of the two: ``onboard``
(``on board``), ``attest`` (``at test``), ``imprint`` (``im print``: ``im`` is how ``in`` is
spelled before b, m, p); English writes a verb made with a prefix as one word. A word run
together that holds one, anywhere, is not read as its pieces (``getonboard``, ``itemonboard``,
and ``getbyid`` too: the rule cannot tell ``by id`` from ``on board``), so the name is write.
Particles (``upload``, ``outbox``) already make a name write wherever they stand. A harmless
word of that shape that real tools use (``online``, ``uptime``, ``inbox``) is a whole word of
SAFE_WORDS, never a reading."""

# -- word classes -----------------------------------------------------------------------------
# A word's class is what the name rule makes of it: one small int each, compared on every word
# of every name. The vocabularies above give the first ones; the reader of names (names.py)
# gives the last four to what no vocabulary holds as it stands.

READ = 0  # READ_VERBS
READ_NOUN = 1  # READ_NOUNS
LOG = 2  # LOG_WORD
WRITE = 3  # WRITE_VERBS
CODE = 4  # CODE_WORDS
CRITICAL = 5  # CRITICAL_VERBS
PARTICLE = 6  # PARTICLES
AMBIGUOUS = 7  # AMBIGUOUS_WORDS
PLURAL = 8  # the plural of a word that is neither read nor safe (PLURALS)
CONNECTOR = 9  # CONNECTORS
SAFE = 10  # SAFE_WORDS, and the plurals of read and safe words
UNKNOWN = 11  # a word in no vocabulary, and not read as vocabulary words run together
NUMBER = 12  # a run of digits
PIECE = 13  # a read word rebuilt from the inside of a longer word: no evidence
JOINT = 14  # a preposition or connector a word is run together through

_BASE_CLASS: dict[str, int] = {}
for _cls, _vocab in (
    (READ, READ_VERBS),
    (READ_NOUN, READ_NOUNS),
    (LOG, frozenset({LOG_WORD})),
    (WRITE, WRITE_VERBS),
    (CODE, CODE_WORDS),
    (CRITICAL, CRITICAL_VERBS),
    (PARTICLE, PARTICLES),
    (AMBIGUOUS, AMBIGUOUS_WORDS),
    (CONNECTOR, CONNECTORS),
    (SAFE, SAFE_WORDS),
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
    if _cls in (CONNECTOR, PARTICLE) or len(_w) < 3 or _w in _NO_PLURAL:
        continue
    _p = _plural(_w)
    if _p not in _BASE_CLASS:
        PLURALS.setdefault(_p, _w)

CLASS: dict[str, int] = dict(_BASE_CLASS)
"""Each word the rule knows, plurals included, to its class."""
for _p, _w in PLURALS.items():
    CLASS[_p] = SAFE if _BASE_CLASS[_w] in (SAFE, READ, READ_NOUN) else PLURAL

VOCABULARY = frozenset(CLASS)
"""Every word the rule knows, plurals included."""
