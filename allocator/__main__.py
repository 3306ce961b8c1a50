"""Command line: ``python -m allocator <command> ...`` prints the app's figures (JSON with --json).

Each sub-command lives in a module of :mod:`allocator.cli` exposing ``register(subparsers)``; the
module adds a parser whose ``func(args) -> int`` does the work. Bad input (ValueError) is reported on stderr as
one line naming the option as it was typed (``--block-size 0 must be ...``, ``--rates item 3 = 0 ...``:
:func:`allocator.cli.common.option_message`; a file's row or a run's file keeps its own name), with exit
status 2 — never a traceback; so is a command line argparse
cannot read (an unknown option, a missing value), and a file the system refuses (OSError). Ctrl-C
prints one word and exits with status 130, leaving no partial output file; a run that passes a quarter of
the machine's memory is stopped with a message saying so (status 2), and so is one the system refuses
memory to first (a MemoryError, or an ImportError or SystemError raised while a compiled module is loaded
under memory pressure: one line, status 2, no partial file).
"""
from __future__ import annotations

import argparse
import errno
import importlib
import os
import re
import signal
import sys
import warnings

from allocator.cli import MODULES
from allocator.cli.common import (MemoryGuard, engine_progress_line, option_message, out_of_memory_message,
                                  remove_pending)
from allocator.common.errors import FieldError
from allocator.engine.loop import progress_reports
from allocator.common.validate import cut, one_line

#: What argparse should take as a negative number rather than an option (see ``_Parser``).
NEGATIVE_NUMBER = re.compile(r"^-(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$|^-(inf|infinity|nan)$", re.IGNORECASE)


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser whose usage errors are one line on stderr (exit status 2), not the usage
    block: ``python -m allocator simulate: error: unrecognized arguments: --x (see --help)``.

    A value that starts with a minus sign and reads as a number (``-1e-3``, ``-inf``, ``-nan``,
    ``-.5``) is a value, not an option, so ``--arrival-rate -1e-3`` reaches the range check that
    names it (argparse alone takes only ``-1`` and ``-0.5``; no option of ours looks like a number).
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._negative_number_matcher = NEGATIVE_NUMBER

    def error(self, message: str):
        """Print ``message`` as one line and exit with status 2 (argparse's own status for it).
        Whatever argparse quotes of the command line (``invalid choice: '...'``, an unrecognised
        argument) is cut to a few dozen characters, so a 5,000-character value is never echoed whole."""
        message = one_line(re.sub(r"'([^']{41,})'", lambda m: repr(cut(m.group(1), 40)), message), 400)
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def build_parser() -> argparse.ArgumentParser:
    """Return the top-level parser with every sub-command registered."""
    parser = _Parser(prog="python -m allocator",
                                     description="KV Cache Paging Lab figures, as the app computes them.")
    sub = parser.add_subparsers(dest="command", required=True)
    for name in MODULES:
        importlib.import_module(f"allocator.cli.{name}").register(sub)
    return parser


class _Terminated(KeyboardInterrupt):
    """SIGTERM, raised in the main thread as Ctrl-C is, so the same clean-up runs (no ``.part`` file
    is left, no half-written output)."""


def _on_sigterm(signum, frame):
    raise _Terminated


def main(argv: list[str] | None = None) -> int:
    """Parse ``argv`` and run the chosen sub-command; return the process exit status (130 after
    Ctrl-C and 143 after SIGTERM, at any moment: one word on stderr, no traceback, no partial or
    temporary file)."""
    guard = MemoryGuard()
    previous = _install_sigterm()
    try:
        with guard, warnings.catch_warnings():
            warnings.showwarning = _show_warning
            return _main(argv, guard)
    except KeyboardInterrupt as exc:
        remove_pending()
        if guard.tripped:                  # the run outgrew the machine (allocator.cli.common.MEMORY_LIMIT)
            print(guard.message(), file=sys.stderr)
            return 2
        if isinstance(exc, _Terminated):
            print("terminated", file=sys.stderr)    # the shell's status for SIGTERM
            return 143
        print("interrupted", file=sys.stderr)   # Ctrl-C: the shell's status for SIGINT; files are
        return 130                              # written whole or not at all (write_files)
    except MemoryError:                    # the system refused memory before the guard tripped (a
        remove_pending()                   # container cap below a quarter of the machine): one line
        print(f"error: {out_of_memory_message(options=guard.options)}", file=sys.stderr)
        return 2
    except (ImportError, SystemError) as exc:   # a library loaded mid-run (pandas' C parts) that the system
        if not _mapping_refused(exc):      # had no memory to map: the same out-of-memory line
            raise
        remove_pending()
        print(f"error: {out_of_memory_message(options=guard.options)}", file=sys.stderr)
        return 2
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


#: What the system says when it refuses memory to load a compiled module ("failed to map segment from
#: shared object", "cannot allocate memory", "out of memory", "mmap failed").
_MEMORY_WORDS = re.compile(r"memory|failed to map|\bmmap\b", re.IGNORECASE)


def _mapping_refused(exc: BaseException) -> bool:
    """Whether an ImportError or a SystemError is the system refusing memory while a compiled module
    was imported mid-run (pandas under an address-space cap: "failed to map segment from shared
    object", or a SystemError raised while its C part initialised), not a module that is missing or
    a bug: true when a MemoryError is in the exception's ``__cause__``/``__context__`` chain, or when
    the text of one in that chain speaks of memory or mapping (:data:`_MEMORY_WORDS`); never for a
    ModuleNotFoundError."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, MemoryError):
            return True
        if isinstance(current, ModuleNotFoundError):     # a module that is not there: never memory
            return False
        if isinstance(current, (ImportError, SystemError)) and _MEMORY_WORDS.search(str(current)):
            return True
        current = current.__cause__ or current.__context__
    return False


def _install_sigterm():
    """Turn SIGTERM into :class:`_Terminated` in the main thread; returns the handler it replaced
    (None when this is not the main thread, where Python cannot set one)."""
    try:
        return signal.signal(signal.SIGTERM, _on_sigterm)
    except ValueError:
        return None


def _command_actions(parser: argparse.ArgumentParser, command: str) -> list:
    """The argparse actions of sub-command ``command`` ([] if there is none)."""
    for action in parser._actions:                       # argparse keeps a parser's actions here
        if isinstance(action, argparse._SubParsersAction) and command in action.choices:
            return list(action.choices[command]._actions)
    return []


def _options(parser: argparse.ArgumentParser, command: str) -> dict[str, tuple[str, ...]]:
    """The options of sub-command ``command``: argparse dest -> option strings (positionals left out)."""
    return {a.dest: tuple(a.option_strings) for a in _command_actions(parser, command) if a.option_strings}


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    """A library's or the cost model's warning as one line on stderr (``warning: ...``), without the
    source file, line and code Python's own format shows (server paths)."""
    print(f"warning: {one_line(str(message), 400)}", file=sys.stderr if file is None else file)


def _command_options(parser: argparse.ArgumentParser, command: str) -> tuple:
    """The option strings (``--count``, ``-o``) of sub-command ``command``, or () if none is found."""
    return tuple(s for a in _command_actions(parser, command) for s in a.option_strings)


def _main(argv: list[str] | None, guard: MemoryGuard | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if guard is not None:                   # out-of-memory advice names only this command's options
        guard.options = _command_options(parser, args.command)
    # a long run says it is alive on a terminal (export-site shows its own line, per block size)
    report = engine_progress_line(sys.stderr, quiet=bool(getattr(args, "json", False))
                                  or args.command == "export-site")
    try:
        with progress_reports(report):
            return int(args.func(args) or 0)
    except FieldError as exc:               # named by the option as typed (--block-size, --rates item 3)
        typed = list(sys.argv[1:] if argv is None else argv)
        print(f"error: {option_message(exc, _options(parser, args.command), typed)}", file=sys.stderr)
        return 2
    except (ValueError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:                 # the reader went away (e.g. `| head`): stop quietly;
        # point stdout at /dev/null so the interpreter's final flush cannot fail again (Python docs,
        # "Note on SIGPIPE")
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except OSError as exc:                  # anything else the system refused (a file, a folder)
        if exc.errno == errno.ENOMEM:       # memory, refused through a system call (mmap, fork)
            raise MemoryError from exc
        where = f": {exc.filename}" if exc.filename else ""
        print(f"error: {exc.strerror or exc}{where}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
