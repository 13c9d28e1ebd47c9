"""What only the ``recipe`` command prints: terminal output, live progress, run reports.

Only ``cli.py`` imports this package; nothing below the CLI does.
"""
