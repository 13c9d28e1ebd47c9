"""The ``recipe`` commands, one module per family; ``cli.py`` imports only the one asked for.

``exits.py`` holds what ``cli.py`` needs before it knows the command (signals,
errors in the CLI's words, exit codes); it loads at start-up, so it imports
nothing heavy. ``common.py`` holds what the commands share: the run API opened
with a command's flags, who is acting, a run driven from this process. Each
other module holds a few commands and imports what they need at its top: it is
loaded only when one of its commands runs.
"""
