"""The ``recipe`` commands, one module per family; ``cli.py`` imports only the one asked for.

``common.py`` holds what every command shares and what ``cli.py`` needs before it
knows the command (it loads at start-up, so it imports nothing heavy); ``api.py``
opens the run API with a command's flags and drives a run from this process.
Each other module holds a few commands and imports what they need at its top:
it is loaded only when one of its commands runs.
"""
