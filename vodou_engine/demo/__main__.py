"""``python -m vodou_engine.demo``: seed, inspect and reset the demo database.

    python -m vodou_engine.demo seed  --db demo.sqlite3
    python -m vodou_engine.demo calls --db demo.sqlite3 [--tool slack_post_message] [--server slack]
    python -m vodou_engine.demo reset --db demo.sqlite3

``--db`` defaults to ``$VODOU_DEMO_DB`` so the CLI and the servers agree.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from vodou_engine.demo import db


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m vodou_engine.demo", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    default_db = os.environ.get(db.DB_ENV)
    for name, help_text in (
        ("seed", "create and seed the database if it is missing or empty"),
        ("calls", "print the recorded tool calls as JSON"),
        ("reset", "drop everything (call log included) and seed afresh"),
    ):
        cmd = sub.add_parser(name, help=help_text)
        cmd.add_argument("--db", default=default_db, required=default_db is None, help=f"SQLite file (${db.DB_ENV})")
        if name == "calls":
            cmd.add_argument("--tool", help="only calls to this tool")
            cmd.add_argument("--server", help="only calls to this server")
    args = parser.parse_args(argv)

    if args.command == "seed":
        print(db.ensure_seeded(args.db))
    elif args.command == "reset":
        print(db.reset(args.db))
    else:
        text = json.dumps(db.calls(db.ensure_seeded(args.db), tool=args.tool, server=args.server), indent=2)
        try:
            print(text)
            sys.stdout.flush()
        except BrokenPipeError:
            # Piped into `head` and friends: stop quietly, as other CLI tools do.
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 0


if __name__ == "__main__":
    sys.exit(main())
