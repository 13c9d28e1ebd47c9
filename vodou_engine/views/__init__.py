"""What only the ``recipe`` command prints: terminal output, live progress, run reports.

Only the CLI (``cli.py``, ``commands/``) imports this package; nothing below it does.
"""
