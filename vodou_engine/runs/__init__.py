"""The run API: every surface (the CLI, a web page, a scheduler, an agent) makes runs
happen through these functions, and only these.

A run's whole life is here: prepare (compile, start the servers, resolve every
tool, raise risks from the servers' annotations, verify again), start,
approve, reject, resume, cancel, reconcile, list and show. No surface keeps its
own rule about what approving, rejecting or resuming means, so a program that
embeds the engine gets exactly the gating the CLI gets.

    import trio, vodou_engine
    runs = vodou_engine.Runs(store="runs.db")
    report = trio.run(runs.start, "recipes/morning-briefing.recipe")
    if report.state == "parked":
        step = report.pending[0]
        report = trio.run(lambda: runs.approve(report.run, step.step, actor="me", fingerprint=step.fingerprint))

Who the ``actor`` is, is the caller's word: the CLI proves it (the
operating-system user, or an approver's secret); a program that embeds the
engine is trusted with the store already. Errors are :class:`VodouError`
subclasses with a stable ``code`` and ``facts``; their wording never names a
``recipe`` command.

:class:`Runs` is one class composed of one mixin per concern, each in its own
module and each standing on the ones it calls:

* ``core.py``: the store, servers and policy a Runs object works with; ``load``;
* ``views.py``: ``show``, ``list``, a run's report; ``inspect``, ``check_policy``;
* ``drive.py``: taking a stored run and driving it, after every check that could refuse it;
* ``lifecycle.py``: ``prepare``, ``start``, ``resume``, ``cancel``, ``prune``;
* ``decisions.py``: ``pending``, ``approve``, ``reject``, ``reconcile``;
* ``queue.py``: runs on the workers (``queue``, ``queue_saved``, ``queue_resume``);
* ``saved.py``: saved recipes, schedules, their firings;
* ``people.py``: approvers, proving a name, refused claims;

and below them ``inputs.py`` (what a new run is given, checked before anything is
stored) and ``common.py`` (what the concerns share). The run API imports nothing
above it: the workers, the service and every surface import it, never the other way
(tests/test_import_graph.py).

Most commands import the run API as they start, so its modules import at their top
only what costs little there; the store, the compiler, cards, plan checks, the
scheduler, trio and the hub are imported in the functions that use them (``recipe
runs`` lists runs without any of them).
"""

from __future__ import annotations

from ..osuser import os_user
from .common import plain_error
from .decisions import DecisionsMixin
from .inputs import new_run_id, resolve_inputs, thread_limit
from .lifecycle import LifecycleMixin, Prepared, PruneReport
from .people import PeopleMixin
from .queue import QueueMixin
from .saved import SavedMixin
from .views import Inspection, PolicyProblem

__all__ = [
    "Inspection",
    "PolicyProblem",
    "Prepared",
    "PruneReport",
    "Runs",
    "new_run_id",
    "os_user",
    "plain_error",
    "resolve_inputs",
    "thread_limit",
]


class Runs(SavedMixin, DecisionsMixin, QueueMixin, PeopleMixin, LifecycleMixin):
    """The run API over one store, one server configuration and one policy.

    ``store``: a RunStore, or its path/URL (default: ``$VODOU_STORE``, then the
    user data directory). ``servers``: a ServerSet, a mapping of names to
    ServerConfig, a server file's path, or None (the usual discovery).
    ``policy``: a Policy, a policy file's path, or None (the usual discovery).
    A Runs object runs one operation at a time (its store connection is not
    shared between concurrent calls).
    """
