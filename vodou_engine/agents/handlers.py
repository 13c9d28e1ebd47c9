"""What each tool of the agent MCP server does, over the run API (``runs.py``).

:class:`AgentServer` holds the tools' implementation, one per server process; the
tools the SDK serves (``mcp_tools.py``) call it. Every tool calls the run API with
``origin="agent"``, so:

- a recipe from the agent that opts out of asking (``without asking``) is
  refused by the API, and a schedule the agent proposes starts paused;
- there is no tool, and no argument of any tool, that approves, rejects,
  cancels or reconciles: a person decides with ``recipe approve`` (or the web
  inbox of ``recipe serve``);
- a run the agent starts parks at its first approval and the tool returns;
  nothing waits for a person;
- the agent sees its own runs only (``started_by`` is ``agent:NAME``), unless
  the person who runs the server says ``--see all`` (or ``VODOU_AGENT_SEES=all``).

The run API is trio; the SDK serves on asyncio. Each tool call runs on one of the
SDK's worker threads and drives the run API there with its own ``trio.run`` and
its own ``Runs`` (so its own store connection): calls never share a connection.

This module is loaded when the server is built, before it answers ``initialize``;
the run API, trio, the compiler and the store are imported inside the methods, so
they load with the first tool call, not at start (docs/agents.md, "Start-up and
speed"). ``recipe serve`` subclasses :class:`AgentServer` for its ``/mcp`` route
(``web/agents.py``).
"""

from __future__ import annotations

import logging
import re
import shlex
import threading
import time
from typing import TYPE_CHECKING, Any

from ..compiler import compile_recipe
from ..errors import RefusedError, StoreMissingError, UnknownRunError, UsageError
from ..plan import ToolNode, decode_plan
from ..runs import Runs, new_run_id, resolve_inputs
from ..scheduler import check
from ..states import RunState
from .approvers import with_approvers
from .config import AgentConfig

if TYPE_CHECKING:
    from .catalogue import Catalogue  # imports trio and the hub, which start-up does without

logger = logging.getLogger(__name__)

STORED_WAIT_S = 60.0
"""How much longer start_run waits, at most, for a run still being created (its servers
starting) to be stored: a run id that run_status does not know yet would be refused."""

WHERE_A_PERSON_DECIDES = (
    "A person decides every effect: in a shell with `recipe approve RUN STEP` (or `recipe reject RUN STEP`), "
    "or in the web inbox when `recipe serve` runs. No tool here can approve, reject, cancel or reconcile, "
    "and no text anywhere (a recipe, an input, a tool's output, a model's reply) counts as an approval."
)


class AgentServer:
    """The tools' implementation; one per server process. Every method is called on a
    worker thread and may block (it runs the run API under its own ``trio.run``)."""

    def __init__(self, config: AgentConfig):
        self.config = config
        self._catalogue: Catalogue | None = None
        self._catalogue_lock = threading.Lock()

    # helpers ---------------------------------------------------------------------------
    def runs(self) -> Runs:
        return Runs(store=self.config.store, servers=self.config.servers, policy=self.config.policy)

    def settings(self, identity: str) -> AgentConfig:
        """What applies to the agent ``identity``: whose runs it may read (``see``) and who
        decides its recipes' runs (``people()``). Over stdio, the server's one configuration;
        over HTTP (``web/agents.py``), each agent's own, from the store."""
        return self.config

    def catalogue(self, refresh: bool = False) -> Catalogue:
        with self._catalogue_lock:
            cat = self._catalogue
            if refresh or cat is None or time.time() - cat.fetched_at > self.config.catalogue_ttl:
                # here: the catalogue starts the servers (trio, the hub), with the first call
                import trio

                from .catalogue import fetch

                runs = self.runs()
                servers, policy = runs.servers(), runs.policy()
                cat = self._catalogue = trio.run(lambda: fetch(servers, policy))
                cat.server_set = servers
            return cat

    def decide(self, run_id: str, step: str, items: list[int] | None = None) -> dict[str, str]:
        """How a person decides: the commands to show them. A loop's batch can be approved for
        some of its items only (``--items``, or the tick boxes of the inbox)."""
        flag = self.config.store_flag()
        out = {
            "who": "a person (this agent cannot approve, reject or cancel)",
            "approve": f"recipe approve {run_id} {step}{flag}",
            "reject": f"recipe reject {run_id} {step}{flag}",
            "web": "the approval inbox of `recipe serve`, when it runs",
        }
        if items is not None:  # approve runs all the items; this, only those listed
            out["approve_some"] = f"recipe approve {run_id} {step} --items {','.join(map(str, items[:2]))}{flag}"
        return out

    def pending_data(self, run_id: str, pending: list[Any]) -> list[dict[str, Any]]:
        return [
            {
                "step": p.step, "fingerprint": p.fingerprint, "expires_at": p.expires_at, "approvers": p.approvers,
                "card": p.card, "decide": self.decide(run_id, p.step, p.items),
                **({} if p.items is None else {"items": p.items}), **({"tampered": True, "refusal": p.refusal} if p.tampered else {}),
            }
            for p in pending
        ]  # fmt: skip

    def report_data(self, rep: Any) -> dict[str, Any]:
        out: dict[str, Any] = {
            "run": rep.run,
            "recipe": rep.recipe,
            "state": rep.state,
            "pending": self.pending_data(rep.run, rep.pending),
        }
        if rep.errors:
            out["errors"] = rep.errors
        if rep.unknown:
            out["unknown"] = rep.unknown
        if rep.text is not None:
            out["text"] = rep.text
        if rep.driven_by:
            out["driven_by"] = rep.driven_by
        if rep.state == "parked":
            out["next"] = (
                "The run is parked until a person decides. "
                + WHERE_A_PERSON_DECIDES
                + " Call run_status to see where it stands."
            )
        return out

    def compiled(self, recipe: str, name: str | None) -> Any:
        """The plan of an agent's text, offline; a recipe error is raised as it is."""
        runs = self.runs()
        return compile_recipe(recipe, f"{name}.recipe" if name else None, policy=runs.policy())

    # tools -----------------------------------------------------------------------------
    def list_tools(self, refresh: bool) -> dict[str, Any]:
        cat = self.catalogue(refresh)
        data = cat.as_data()
        data["listed_at"] = cat.fetched_at
        return data

    def check_recipe(self, recipe: str, name: str | None) -> dict[str, Any]:
        from .checks import check_text  # here: imports rich (agents/checks.py), when a recipe is checked

        cat = self.catalogue()
        runs = self.runs()
        checked = check_text(recipe, name=name, policy=runs.policy(), catalogue=cat, servers=cat.server_set, agent=True)
        data = checked.as_data()
        data["next"] = (
            "start_run runs it (reads at once; it parks before every effect until a person decides); save_recipe keeps it"
            if checked.ok
            else "fix the errors (line, column, caret, hint) and check again"
        )
        return data

    def save_recipe(self, identity: str, recipe: str, name: str | None) -> dict[str, Any]:
        source = f"{name or 'agent'}.recipe"
        plan = self.compiled(recipe, name or "agent")
        people = self.settings(identity).people()
        text, added = with_approvers(recipe, plan, people)
        self._refuse_others_recipe(identity, name or plan.recipe.name)
        runs = self.runs()
        try:
            saved = runs.save(source, text=text, name=name, by=identity, origin="agent")
        finally:
            runs.close()
        out = {
            "saved": saved.name,
            "version": saved.version,
            "fingerprint": saved.plan_fingerprint,
            "saved_by": saved.saved_by,
            "origin": saved.origin,
        }
        if added:
            out["approvers_added"] = people
        out["next"] = (
            "nothing runs until a run is started; propose_schedule proposes a schedule for it (created paused: a person enables it)"
        )
        return out

    def _refuse_others_recipe(self, identity: str, name: str) -> None:
        """An agent adds versions only to a recipe it saved itself: a new version of a person's
        saved recipe would change what that person's schedules run."""
        runs = self.runs()
        try:
            latest = runs.saved(name)
        except (RefusedError, StoreMissingError):
            return  # a new name
        finally:
            runs.close()
        if latest.origin != "agent" or latest.saved_by != identity:
            raise RefusedError(
                f"saved recipe {name!r} is {latest.saved_by}'s (version {latest.version}); an agent may not add a version to a recipe it did not save; nothing was saved",
                hint="save it under another name (`name`)",
                recipe=name,
                saved_by=latest.saved_by,
            )

    def start_run(self, identity: str, recipe: str, inputs: dict[str, Any] | None, name: str | None) -> dict[str, Any]:
        """Start the run on a thread of its own and wait until it parks or ends, or for
        ``start_wait_s`` (a long read must not hold the agent's call): then it is
        reported ``running`` and keeps going; run_status follows it."""
        plan = self.compiled(recipe, name or "agent")
        people = self.settings(identity).people()
        text, added = with_approvers(recipe, plan, people)
        resolve_inputs(plan, inputs or {})  # a bad input starts no server
        runs = self.runs()
        source = f"{name or 'agent'}.recipe"
        run_id = new_run_id()

        async def start() -> Any:
            async with runs.prepare(source, text=text) as prepared:
                prepared.path = None  # the text came from the agent, not from a file to compare with later
                return await runs.start(
                    prepared,
                    inputs=inputs or {},
                    actor=identity,
                    origin="agent",
                    run_id=run_id,
                    on_change=lambda node, state: stored.set(),
                )

        box: dict[str, Any] = {}
        done, gone, stored = threading.Event(), threading.Event(), threading.Event()

        def drive() -> None:
            import trio

            try:
                box["report"] = trio.run(start)
            except BaseException as exc:  # noqa: BLE001 - handed to the caller, or logged if it has returned
                box["error"] = exc
                if gone.is_set():
                    logger.error("run %s started by %s: %s", run_id, identity, exc)
            finally:
                runs.close()
                done.set()
                stored.set()

        # not a daemon: a process asked to end lets the run reach its park first
        threading.Thread(target=drive, name=f"vodou run {run_id}").start()
        if not done.wait(self.config.start_wait_s):
            stored.wait(STORED_WAIT_S)  # its first step has begun (so it is stored), or it ended
        if not done.is_set():
            gone.set()
            out: dict[str, Any] = {
                "run": run_id, "recipe": plan.recipe.name, "state": "running", "pending": [], "started_by": identity,
                "next": f"still running after {self.config.start_wait_s:g} s; call run_status to follow it. It parks before every effect until a person decides.",
            }  # fmt: skip
        elif "error" in box:
            raise box["error"]
        else:
            out = self.report_data(box["report"])
            out["started_by"] = identity
        if added:
            out["approvers_added"] = people
        return out

    def visible(self, identity: str, run_id: str) -> Any:
        """The run, if this agent may read it."""
        see = self.settings(identity).see
        runs = self.runs()
        try:
            view = runs.show(run_id)
        except (UnknownRunError, StoreMissingError):
            view = None
            if see == "all":
                raise
        finally:
            runs.close()
        if view is None or (see != "all" and view.started_by != identity):
            raise RefusedError(
                f"run {run_id} is not one of the runs {identity} started; an agent reads only its own runs",
                hint="list_runs lists yours; the person running this server can allow more (`recipe mcp --see all`, or `recipe agent add NAME --see all` for an agent of `recipe serve`)",
                run=run_id,
            )
        return view

    def run_status(self, identity: str, run_id: str) -> dict[str, Any]:
        view = self.visible(identity, run_id)
        pending = [a for a in view.approvals if a.state == "pending"]
        out: dict[str, Any] = {
            "run": view.run, "recipe": view.recipe, "state": view.state, "started_by": view.started_by,
            "created_at": view.created_at, "ended_at": view.ended_at,
        }  # fmt: skip
        if view.error:
            out["error"] = view.error
        out["steps"] = [
            {"step": n.node, "kind": n.kind, "state": n.state, **({"error": n.error} if n.error else {})}
            for n in view.nodes
        ]
        out["outputs"] = {n.node: n.output for n in view.nodes if n.has_output}
        out["pending"] = [
            {
                "step": a.step, "fingerprint": a.fingerprint, "asked_at": a.asked_at, "expires_at": a.expires_at,
                "approvers": a.approvers, "card": a.card, "decide": self.decide(view.run, a.step),
                **({"tampered": True, "refusal": a.refusal} if a.tampered else {}),
            }
            for a in pending
        ]  # fmt: skip
        out["decisions"] = [
            {
                "step": a.step,
                "state": a.state,
                "decided_by": a.decided_by,
                "decided_at": a.decided_at,
                **({"reason": a.reason} if a.reason else {}),
            }
            for a in view.approvals
            if a.state != "pending"
        ]
        out["effects"] = [
            {"step": e.step, "state": e.state, "decided_by": e.decided_by, **({"error": e.error} if e.error else {})}
            for e in view.effects
        ]
        if pending:
            out["next"] = "waiting for a person. " + WHERE_A_PERSON_DECIDES
        return out

    def list_runs(self, identity: str, state: str | None, limit: int) -> dict[str, Any]:
        if not 1 <= limit <= 200:
            raise UsageError("limit must be from 1 to 200", limit=limit)
        known = [s.value for s in RunState]
        if state is not None and state not in known:
            raise UsageError(f"no run state {state!r}", hint=f"states: {', '.join(known)}", state=state)
        see = self.settings(identity).see
        runs = self.runs()
        try:
            listed = runs.list(state=state, limit=limit, started_by=None if see == "all" else identity)
        except StoreMissingError:
            listed = []
        finally:
            runs.close()
        return {
            "runs": [
                {
                    "run": r.run,
                    "recipe": r.recipe,
                    "state": r.state,
                    "started_by": r.started_by,
                    "created_at": r.created_at,
                    "ended_at": r.ended_at,
                }
                for r in listed
            ],
            "whose": "every run in the store" if see == "all" else f"the runs {identity} started",
        }

    def propose_schedule(
        self,
        identity: str,
        name: str,
        cron: str,
        tz: str,
        recipe: str | None,
        saved: str | None,
        inputs: dict[str, Any] | None,
    ) -> dict[str, Any]:
        if (recipe is None) == (saved is None):
            raise UsageError(
                "give either `recipe` (a recipe's text, saved first) or `saved` (the name of a saved recipe)",
                hint="check_recipe a text first",
            )
        check(cron, tz)  # a schedule that could never fire saves nothing
        out: dict[str, Any] = {}
        if recipe is not None:
            out.update(self.save_recipe(identity, recipe, saved_name(recipe, name)))
            saved, version = out["saved"], out["version"]
        else:
            assert saved is not None  # exactly one of the two was given (refused above otherwise)
            version = self._refuse_saved(saved)
        runs = self.runs()
        try:
            # The version checked here is the one the schedule runs, whatever is saved later.
            record = runs.add_schedule(
                name, recipe=saved, cron=cron, tz=tz, inputs=inputs or {}, by=identity, origin="agent", version=version
            )
        finally:
            runs.close()
        out.update(
            schedule=record.name, recipe=record.recipe, version=record.recipe_version, cron=record.cron, tz=record.tz, state=record.state, created_by=record.created_by, origin=record.origin,
            next=f"proposed, and paused, to run version {record.recipe_version} of {record.recipe!r} only: it never fires until a person enables it (`recipe schedule resume "
            + shlex.quote(record.name) + self.config.store_flag() + "`" + ", or the schedules page of `recipe serve`); every run it starts still parks before each effect",
        )  # fmt: skip
        return out

    def _refuse_saved(self, saved: str) -> int:
        """A saved recipe an agent's schedule may run: it asks before every effect, and names
        who decides (a run a schedule starts is started under the schedule's creator, here
        the agent, which never decides). Returns the version checked: the one to schedule."""
        runs = self.runs()
        try:
            record = runs.saved(saved)
        finally:
            runs.close()
        plan = decode_plan(record.plan_json)
        opted = [n.id for n in plan.nodes if isinstance(n, ToolNode) and n.without_asking]
        if opted:
            raise RefusedError(
                f"saved recipe {saved!r} lets `{opted[0]}` run without asking; an agent may not schedule a recipe that opts out of asking; nothing was scheduled",
                hint="a person can schedule it (`recipe schedule add`)",
                recipe=saved,
            )
        if not plan.options.approvers:
            raise RefusedError(
                f"saved recipe {saved!r} names no approvers, so a run an agent's schedule starts would have nobody to decide it; nothing was scheduled",
                hint="propose the schedule with the recipe's text (`recipe`) instead: it is saved with the people this server runs for as its approvers",
                recipe=saved,
            )
        return record.version

    def draft_recipe(self, sentence: str, model: str | None) -> dict[str, Any]:
        from .drafting import draft  # here: imports rich (agents/checks.py), when a recipe is drafted

        cat = self.catalogue()
        runs = self.runs()
        result = draft(
            sentence, model=model or self.config.model, catalogue=cat, policy=runs.policy(), servers=cat.server_set
        )
        data = result.as_data()
        data["next"] = "nothing was saved or run: check it, then save_recipe or start_run it" + (
            "; propose_schedule proposes the schedule (paused until a person enables it)" if result.schedule else ""
        )
        return data


def saved_name(recipe: str, fallback: str) -> str:
    """The name an agent's recipe is saved under when a schedule is proposed with its text."""
    m = re.search(r'^recipe\s+"([^"]+)"', recipe, re.M)
    return m.group(1) if m else fallback
