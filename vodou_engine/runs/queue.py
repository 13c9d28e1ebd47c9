"""Runs on the workers (a PostgreSQL store; docs/scale-out.md): a new run, a saved
recipe's run or a stored run's drive queued for ``recipe worker`` instead of driven
here. What can be refused is refused here, before anything is queued (a recipe that
does not compile, a bad input, an agent's opt-out of asking, a SQLite store).

The queue is a table in the store's own database: a drive is deferred on the store's
connection, in the store's transaction, through ``jobs.py``, which the workers use too.
The run API never imports the workers (``workers/``): they import it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from ..errors import UsageError
from ..jobs import defer_drive_in, load_procrastinate, no_queue, store_queue
from ..osuser import os_user
from ..reports import RunReport
from ..runtime.loops import refuse_asking_in_loops
from ..states import TERMINAL_RUN_STATES
from .inputs import new_run_id, refuse_agent_opt_out, resolve_inputs, thread_limit
from .views import ViewsMixin


class QueueMixin(ViewsMixin):
    """``queue``, ``queue_saved``, ``queue_resume``, ``require_queue``."""

    def queue(
        self,
        source: str | os.PathLike[str],
        *,
        text: str | None = None,
        inputs: Mapping[str, Any] | None = None,
        actor: str | None = None,
        model: str | None = None,
        run_id: str | None = None,
        origin: str = "person",
    ) -> str:
        """Queue a new run for the workers instead of driving it here; the run id it will have.

        The recipe is compiled here (a recipe that does not compile, an unknown or missing
        input, an agent's opt-out of asking are refused now, and nothing is queued); a
        worker compiles it again with its servers' annotations and starts it; from then on
        the run is in the store. Refused (``queue.unavailable``) on a SQLite store."""
        self.require_queue()
        plan, recipe_text, path = self.load(source, text=text)
        if recipe_text is None:
            raise UsageError(
                "only a recipe can be queued, not an actions.json: a worker compiles the recipe again with its own servers' annotations",
                hint="queue the .recipe file",
            )
        if origin == "agent":
            refuse_agent_opt_out(plan)
        refuse_asking_in_loops(plan, path, recipe_text)
        resolve_inputs(plan, inputs or {})
        thread_limit(self.threads)
        start = {
            "text": recipe_text,
            "path": os.path.abspath(path) if path else None,
            "inputs": dict(inputs or {}),
            "actor": actor or os_user(),
            "model": model,
            "origin": origin,
        }
        return self._queue_drive(run_id or new_run_id(), {"start": start})

    def queue_saved(
        self,
        saved: Any,
        *,
        inputs: Mapping[str, Any] | None = None,
        actor: str | None = None,
        run_id: str | None = None,
    ) -> str:
        """:meth:`queue` for a saved recipe (a RecipeRecord, or a name for its latest version)."""
        self.require_queue()
        if isinstance(saved, str):
            saved = self.store(create=False).get_recipe(saved)
        plan, _, _ = self.load(f"{saved.name}.recipe", text=saved.source)
        resolve_inputs(plan, inputs or {})
        spec = {"name": saved.name, "version": saved.version, "inputs": dict(inputs or {}), "actor": actor or os_user()}
        return self._queue_drive(run_id or new_run_id(), {"saved": spec})

    def queue_resume(self, run_id: str) -> RunReport:
        """Queue a drive of a parked or interrupted run for the workers (what :meth:`resume`
        does here). A run that has ended is left as it is (its report has ``queued`` False)."""
        self.require_queue()
        store = self.store(create=False)
        run = store.get_run(run_id)
        if run.state in TERMINAL_RUN_STATES:
            return self._report(run_id)
        self._queue_drive(run_id, None)
        return self._report(run_id, queued=True)

    def require_queue(self) -> None:
        """Raise :class:`QueueError` (``queue.unavailable``) unless this store can hold the
        workers' queue (PostgreSQL); nothing is opened or created to find out."""
        if not self._on_postgres():
            raise no_queue(self._location())
        load_procrastinate()  # the workers extra, before the store is opened (without psycopg it could not be)

    def _queue_drive(self, run_id: str, spec: Mapping[str, Any] | None) -> str:
        self.require_queue()
        store = self.store()
        conn = store_queue(store)
        with store.transaction():
            defer_drive_in(conn, run_id, spec)
        return run_id
