"""Each server's tool list as last listed, kept per binding, so ``recipe plan`` starts nothing.

Listing tools means starting the server: 1 to 4 s for a plan that only
wants names, schemas and annotations. So every live listing is written here,
one file per server under ``$XDG_CACHE_HOME/vodou/tools/`` (else
``~/.cache/vodou/tools/``), keyed by the digest of the server's binding
(``binding.py``): the command and arguments, the executable they resolve
to, the directory it starts in, the code its command line reaches (by
content), and a digest of every environment value it is given. An edited
server file, an edited server script, another directory or another token is
another key: the server is listed again. ``recipe plan --refresh`` lists
again whatever the key says; ``VODOU_NO_CACHE=1`` turns the cache off.

A file on this machine, not the store: the binding (and so the list) is
this machine's (its paths, its files), ``plan`` works without a store and
never creates one, and a lost or damaged file only costs a live listing.
The digests are salted with a random salt kept beside the lists, so a file
names no value a server was given.

Only ``recipe plan`` reads it (``Runs.inspect(cached=True)``). A run always
lists tools live (``Runs.prepare``), so the cache never decides a risk at
run time, and an actions.json's risks are checked against what the server
declares when it runs.
"""

from __future__ import annotations

import os
import secrets
import time
from pathlib import Path

import msgspec

from .binding import bind, digest
from .errors import VodouError
from .servers import ServerConfig
from .tools.results import ToolInfo

VERSION = 1
"""The files' format: a file of another version is a miss."""


class Listing(msgspec.Struct, frozen=True, kw_only=True):
    """One server's tools as listed at ``listed_at`` (epoch seconds), under binding ``key``."""

    version: int = VERSION
    server: str
    key: str
    listed_at: float
    tools: dict[str, ToolInfo]


_encoder = msgspec.json.Encoder(order="deterministic")
_decoder = msgspec.json.Decoder(Listing)


def cache_dir() -> Path | None:
    """Where the lists are kept; None when ``VODOU_NO_CACHE`` is set."""
    if os.environ.get("VODOU_NO_CACHE"):
        return None
    base = os.environ.get("XDG_CACHE_HOME")
    root = Path(base) if base and os.path.isabs(base) else Path.home() / ".cache"
    return root / "vodou" / "tools"


def _salt(d: Path) -> str:
    path = d / "salt"
    try:
        return path.read_text().strip() or _new_salt(path)
    except FileNotFoundError:
        return _new_salt(path)


def _new_salt(path: Path) -> str:
    salt = secrets.token_hex(16)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"salt.{os.getpid()}.tmp")
    tmp.write_text(salt)
    try:
        os.link(tmp, path)  # the first writer's salt wins; a racer reads it
    except FileExistsError:
        salt = path.read_text().strip()
    finally:
        tmp.unlink(missing_ok=True)
    return salt


def key(name: str, config: ServerConfig, *, source: str) -> str | None:
    """The cache key of server ``name`` as it would start here now; None when there is
    no cache, or the server cannot be bound (a ``${VAR}`` not set: the live start says why).
    Reads the files the server's command line reaches: call it off the trio thread."""
    d = cache_dir()
    if d is None:
        return None
    try:
        salt = _salt(d)
        return digest(bind(config, source=source, salt=salt, name=name)).removeprefix("sha256:")
    except (OSError, VodouError):
        return None


def get(name: str, k: str | None) -> Listing | None:
    """The list kept for server ``name`` under key ``k``; None on a miss (absent, damaged,
    another format, another binding)."""
    d = cache_dir()
    if d is None or k is None:
        return None
    try:
        listing = _decoder.decode((d / f"{k}.json").read_bytes())
    except (OSError, msgspec.ValidationError, msgspec.DecodeError):
        return None
    if listing.version != VERSION or listing.key != k or listing.server != name:
        return None
    return listing


def put(name: str, k: str | None, tools: dict[str, ToolInfo], *, now: float | None = None) -> Listing | None:
    """Keep ``tools`` as server ``name``'s list under key ``k`` (written whole, then renamed)."""
    d = cache_dir()
    if d is None or k is None:
        return None
    listing = Listing(server=name, key=k, listed_at=time.time() if now is None else now, tools=dict(tools))
    try:
        d.mkdir(parents=True, exist_ok=True)
        tmp = d / f"{k}.{os.getpid()}.tmp"
        tmp.write_bytes(_encoder.encode(listing))
        os.replace(tmp, d / f"{k}.json")
    except OSError:
        return None  # a read-only home only costs speed
    return listing


def age(seconds: float) -> str:
    """How long ago, in the words a card uses: "just now", "40 s ago", "3 min ago", "2 h ago", "5 days ago"."""
    s = max(0.0, seconds)
    if s < 5:
        return "just now"
    if s < 60:
        return f"{s:.0f} s ago"
    if s < 3600:
        return f"{s / 60:.0f} min ago"
    if s < 86400:
        return f"{s / 3600:.0f} h ago"
    days = s / 86400
    return f"{days:.0f} day{'s' if round(days) != 1 else ''} ago"
