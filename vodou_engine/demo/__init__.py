"""Small, real MCP demo servers backed by one shared SQLite world.

Modules (each runnable as ``python -m vodou_engine.demo.<module>``, stdio):

* ``calendar_server`` - server name ``google-calendar``
* ``mail_server`` - server name ``gmail``
* ``chat_server`` - server name ``slack``
* ``lab_server`` - server name from ``VODOU_DEMO_NAME`` (default ``lab``)

``VODOU_DEMO_DB`` names the SQLite file they share; ``VODOU_DEMO_LATENCY``
(``"tool=ms,...,*=ms"``) adds real server-side latency. ``db`` works without
the MCP SDK; ``python -m vodou_engine.demo`` is a small CLI over it.

This package imports nothing on purpose, so that importing ``db`` (or the
CLI) never pays for the SDK.
"""
