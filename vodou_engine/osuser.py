"""Who this process is: the name of its real user id, never a name from the environment.

``getpass.getuser()`` reads ``$LOGNAME``, ``$USER`` and ``$USERNAME`` before it
asks the system, and anyone can set those: ``LOGNAME=ana recipe approve …``
approved as ana, without ana's secret, and the audit said "approved by ana".
So the operating-system user is looked up by the process's real user id in
the password database and nothing else; any other name needs proof (an
approver's secret, a web session), and an environment that names someone
else is a claim that is ignored (the CLI logs it, ``commands/common.py`` ``_actor``).

*Why the real id, not the effective one:* a set-user-id program runs with the
effective id of its owner, but the person who started it is the real id.

*Why ``uid:N`` when there is no entry:* a container started with a bare
numeric ``--user`` has no name for its id. Falling back to ``$USER`` would
bring the hole back; ``uid:N`` is a name the id alone gives, and one no recipe
can list (``:`` is not in an approver's name) and no agent has (theirs start
``agent:``).
"""

from __future__ import annotations

import os
import pwd
from collections.abc import Mapping

CLAIM_VARIABLES = ("LOGNAME", "USER", "USERNAME")
"""The environment variables that name a user (and that getpass.getuser() would have believed)."""


def os_user() -> str:
    """The name of this process's real user id, or ``uid:N`` when the id has no name."""
    uid = os.getuid()
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid:{uid}"


def env_claim(user: str, environ: Mapping[str, str] | None = None) -> tuple[str, str] | None:
    """``(variable, name)`` when the environment names someone other than ``user``; else None."""
    env = os.environ if environ is None else environ
    for variable in CLAIM_VARIABLES:
        name = env.get(variable, "").strip()
        if name and name != user:
            return variable, name
    return None
