"""Command line: ``python -m allocator <command> ...`` prints the app's figures (JSON with --json).

Each sub-command lives in a module of :mod:`allocator.cli` exposing ``register(subparsers)``; the
module adds a parser whose ``func(args) -> int`` does the work. Bad input (ValueError) is reported on stderr as
one line naming the field, with exit status 2 — never a traceback.
"""
from __future__ import annotations

import argparse
import importlib
import os
import sys

from allocator.cli import MODULES


def build_parser() -> argparse.ArgumentParser:
    """Return the top-level parser with every sub-command registered."""
    parser = argparse.ArgumentParser(prog="python -m allocator",
                                     description="KV Cache Paging Lab figures, as the app computes them.")
    sub = parser.add_subparsers(dest="command", required=True)
    for name in MODULES:
        importlib.import_module(f"allocator.cli.{name}").register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Parse ``argv`` and run the chosen sub-command; return the process exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except (ValueError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:                 # the reader went away (e.g. `| head`): stop quietly;
        # point stdout at /dev/null so the interpreter's final flush cannot fail again (Python docs,
        # "Note on SIGPIPE")
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    sys.exit(main())
