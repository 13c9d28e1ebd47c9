"""One exception tree for the whole engine.

Every error a person can cause carries an exit code and a message that says
what to do next. The CLI prints ``str(error)`` and exits with ``error.exit_code``;
it never prints a traceback for a ``VodouError``.

Exit codes (docs/exit-codes.md): 0 succeeded, 1 failed, 2 invalid input or
usage, 3 parked waiting for a person, 4 declined or rejected, 5 refused by the
store (unknown run, already decided, not allowed, expired, stale), 6 store
unreadable or corrupt, 7 no queue here (work handed to the workers needs a
PostgreSQL store), 8 a server needs a person to sign in (OAuth) first.
"""

from __future__ import annotations

from typing import Any

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_PARKED = 3
EXIT_DECLINED = 4
EXIT_REFUSED = 5
EXIT_STORE = 6
EXIT_QUEUE = 7
EXIT_SIGN_IN = 8


class VodouError(Exception):
    """Base of every error the engine raises on purpose.

    ``code`` is a stable name for programs (docs/python-api.md lists them);
    ``facts`` holds what the message says as data (run, step, server, ...),
    so a surface can word it its own way. The hint is surface-neutral: the
    wording that names ``recipe …`` commands belongs to the CLI.
    """

    exit_code = EXIT_FAILED
    code = "failed"

    def __init__(self, message: str, *, hint: str | None = None, **facts: object):
        super().__init__(message)
        self.message = message
        self.hint = hint
        self.facts = facts

    def __str__(self) -> str:
        if self.hint:
            return f"{self.message}\n  hint: {self.hint}"
        return self.message


class UsageError(VodouError):
    """A command was called with arguments that cannot work."""

    exit_code = EXIT_USAGE
    code = "usage"


class MissingInputError(UsageError):
    """A run was started without a value for an input the recipe requires (fact ``input``):
    each surface says how its own users give one (the CLI: ``--set NAME=VALUE``)."""

    code = "input.missing"


class RecipeError(VodouError):
    """A recipe (or actions.json) is invalid; carries the place it went wrong.

    Rendered as ``file:line:col: message``, then the source line with a caret
    under the offending column, then a one-line hint.
    """

    exit_code = EXIT_USAGE
    code = "recipe.invalid"

    def __init__(
        self,
        message: str,
        *,
        path: str | None = None,
        line: int | None = None,
        column: int | None = None,
        source_line: str | None = None,
        hint: str | None = None,
        width: int = 1,
    ):
        super().__init__(message, hint=hint, path=path, line=line, column=column, source_line=source_line)
        self.path = path
        self.line = line
        self.column = column
        self.source_line = source_line
        self.width = max(1, width)

    def __str__(self) -> str:
        where = self.path or "<recipe>"
        if self.line is not None:
            where += f":{self.line}"
            if self.column is not None:
                where += f":{self.column}"
        out = [f"{where}: error: {self.message}"]
        if self.source_line is not None and self.column is not None:
            text = self.source_line.rstrip("\n").expandtabs(1)
            out.append(f"  {text}")
            out.append("  " + " " * (self.column - 1) + "^" * min(self.width, max(1, len(text) - self.column + 1)))
        if self.hint:
            out.append(f"  hint: {self.hint}")
        return "\n".join(out)


class ArgumentsError(RecipeError):
    """A tool step's arguments break the tool's own input schema, so the server would refuse
    them: refused before any card shows them. ``also``: the other places, each rendered in turn."""

    code = "recipe.arguments"

    def __init__(self, message: str, *, also: list[RecipeError] | None = None, **where: Any):
        super().__init__(message, **where)
        self.also = list(also or [])

    def __str__(self) -> str:
        return "\n".join([super().__str__(), *(str(e) for e in self.also)])


class PlanError(RecipeError):
    """An actions.json document is malformed or fails verification."""

    code = "plan.invalid"


class PlanEditedError(PlanError):
    """An actions.json whose content no longer matches its fingerprint: edited by hand."""

    code = "plan.edited"


class UnguardedEffectError(PlanError):
    """An effectful step is not dominated by its own approval node."""

    code = "plan.unguarded"


class PolicyError(VodouError):
    """The tool policy file is unreadable or invalid."""

    exit_code = EXIT_USAGE
    code = "policy.invalid"


class ServerConfigError(VodouError):
    """The MCP server configuration is missing, unreadable or invalid."""

    exit_code = EXIT_USAGE
    code = "servers.invalid"


class ToolError(VodouError):
    """A tool call failed: the server said so, died, or could not start."""

    code = "tool.failed"


class NotSentError(ToolError):
    """The call never left this process (server not running, tool not listed,
    arguments refused locally): nothing can have happened on the server."""

    code = "tool.not_sent"


class ArgumentsRejectedError(NotSentError):
    """The payload a question would freeze breaks the tool's input schema: the server would
    refuse it, so nobody is asked to approve it and nothing is called."""

    code = "tool.arguments"


class NoReplyError(ToolError):
    """The request may have reached the server, but no well-formed reply came
    back: the connection dropped, the server exited, the call timed out, or the
    reply was cut off, malformed, too deep, or failed the tool's own output
    schema. For an effect this is doubt, recorded ``unknown``, never ``failed``."""

    code = "tool.no_reply"


class ModelError(VodouError):
    """A ``write`` step's model could not run (unknown model, missing key, a failed request)."""

    code = "model.failed"


class ServerStartError(NotSentError):
    """An MCP server process could not be started or initialized."""

    code = "server.start_failed"
    server: str | None = None
    """The server that did not start (of several, the first)."""


class SignInRequiredError(ServerStartError):
    """A server reached by URL with ``"auth": "oauth"`` has no usable sign-in here: none was
    made, it was removed, or the authorization server no longer honours it. Nothing was sent
    to the server (no tool was called); a person signs in once, then the run can start.

    Its own exit code: a script must tell "a person must sign in" from a failure, since the
    remedy is a person at a browser, not a retry or an edit."""

    exit_code = EXIT_SIGN_IN
    code = "server.sign_in_required"


class UnknownToolError(NotSentError):
    """A step names a tool that its server does not list."""

    exit_code = EXIT_USAGE
    code = "tool.unknown"


class StoreError(VodouError):
    """The run store cannot be opened or read: not a store, or corrupt."""

    exit_code = EXIT_STORE
    code = "store.unreadable"


class StoreMissingError(StoreError):
    """No store exists at the path given: nothing was created (a typo must not make an empty store)."""

    code = "store.missing"


class QueueError(VodouError):
    """Work was handed to the workers, and there is no queue to hand it to: the store
    is a SQLite file (the queue lives in a PostgreSQL store's database), or the
    workers' package is not installed. Nothing was queued."""

    exit_code = EXIT_QUEUE
    code = "queue.unavailable"


class RefusedError(VodouError):
    """The store refused a request; nothing was changed."""

    exit_code = EXIT_REFUSED
    code = "refused"


class UnknownRunError(RefusedError):
    """No run with that id exists in the store."""

    code = "run.unknown"


class AlreadyDecidedError(RefusedError):
    """The approval was already approved, rejected, expired, superseded or withdrawn."""

    code = "approval.decided"


class NotAllowedError(RefusedError):
    """The person deciding is not among the run's approvers."""

    code = "approval.not_allowed"


class ExpiredError(RefusedError):
    """The approval's lifetime has passed; the run must ask again."""

    code = "approval.expired"


class StaleError(RefusedError):
    """A check read changed, or the payload no longer matches its fingerprint."""

    code = "approval.stale"


class TamperedError(RefusedError):
    """Stored plan, payload or recipe source changed after the question."""

    code = "run.tampered"


class LostRunError(RefusedError):
    """This process no longer drives the run: it was taken over, cancelled or ended elsewhere."""

    code = "run.lost"


class BusyError(RefusedError):
    """Another live process drives the run right now; it picks up decisions already made."""

    code = "run.busy"


class ServerMismatchError(RefusedError):
    """The servers configured here resolve a server of the run differently from
    the configuration it was started (and approved) with; nothing ran."""

    code = "servers.mismatch"


class PolicyMismatchError(RefusedError):
    """The tool policy in effect here is not the one the run was started under (and its own
    policy file no longer says the same); nothing ran."""

    code = "policy.mismatch"


class IdentityError(RefusedError):
    """Acting under a name without proof of it (the approver's secret)."""

    code = "identity.refused"
