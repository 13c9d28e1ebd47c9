"""Scale-out: runs driven by Procrastinate workers on a PostgreSQL store (docs/scale-out.md).

* ``app.py``: the tasks ``vodou.drive`` and ``vodou.tick`` over the queue in the
  store's own database (its tables, and deferring a drive in the store's own
  transaction as the run API's ``Runs.queue``, ``Runs.approve`` and
  ``Runs.queue_resume`` do, are ``vodou_engine/jobs.py``), :class:`Queue` (the
  queue on a connection of its own), the tick deferred by ``recipe serve``
  (``TickThread``) and the recovery of dead workers' jobs;
* ``host.py``: the asyncio/trio boundary (a trio loop on a thread of its own);
* ``engine.py``: what a job does on the trio side, over the run API;
* ``command.py``: ``recipe worker``.

Importing this package is cheap; Procrastinate is imported when a queue is used.
"""

from __future__ import annotations

from .app import Queue, queue_url

__all__ = ["Queue", "queue_url"]
