"""What every sub-command shares: numeric flags read as typed, notes, and files checked and written whole.

* :func:`count_arg` / :func:`real_arg` are argparse ``type=`` functions that never fail: they turn
  what was typed into a number when it reads as one and leave it as text otherwise, so the check
  against :data:`allocator.common.limits.LIMITS` (one message format, naming the field, the value and
  the allowed range) words every bad value, not argparse; :func:`range_help` words that range in
  an option's ``--help``.
* :func:`note` prints one line on stderr about options that do not apply to this run.
* :func:`check_output` checks a path the user gave for an output file before anything is
  computed; :func:`write_files` writes every output to a temporary name in its directory and
  renames them into place only when all of them were written, so a failed run leaves nothing.
"""
from __future__ import annotations

import errno
import os
import re
import stat
import sys
import tempfile
import threading
import time

from allocator.common.errors import FieldError
from allocator.common.limits import LIMITS
from allocator.common.validate import TypedFloat, number_from_text, show


def count_arg(text: str):
    """argparse type of a whole-number flag: ``"16"`` -> 16, ``"1e3"`` -> 1000.0 (checked later as
    a whole number), anything else unchanged (named later as not a number)."""
    return number_from_text(text)


def real_arg(text: str):
    """argparse type of a real-number flag: ``"-1"`` -> -1.0, ``"nan"`` -> nan, text unchanged.
    A float keeps what was typed (:class:`allocator.common.validate.TypedFloat`), so ``--arrival-rate 0``
    is echoed as ``0``, not ``0.0``."""
    value = number_from_text(text)
    if isinstance(value, int) and not isinstance(value, bool):
        try:
            return TypedFloat(float(value), text.strip())
        except OverflowError:                    # 10**400: keep the int; the range check refuses it
            return value
    return value


def range_help(name: str) -> str:
    """The allowed values of the setting ``name`` for an option's ``--help``, from
    :data:`allocator.common.limits.LIMITS` (the range the check enforces), with ``%`` doubled for
    argparse: ``range_help("block_size")`` -> ``"a whole number from 1 to 4,096 (slots per block)"``.

    Raises:
        KeyError: ``name`` has no entry in ``LIMITS``.
    """
    return LIMITS[name].describe().replace("%", "%%")


#: What ``--acceptance-rate`` means, in ``capacity``'s and ``simulate``'s ``--help`` alike.
ACCEPTANCE_WORDS = ("the verifier accepts each draft token with probability A, independently, until the first "
                    "rejection, as in Leviathan et al. 2023, section 3.1")


def gpus_arg(text: object, counts=(1, 2, 4, 8)):
    """The ``--gpus`` value: ``"auto"`` or one of ``counts`` (the tensor-parallel sizes the cost model
    prices, ``allocator.cost.timing.GPU_COUNTS``) as an int.

    Raises:
        FieldError: ``gpus`` naming what was typed (cut) and the allowed values, e.g.
            ``"gpus = '²' must be auto or one of 1, 2, 4, 8"``.
    """
    if isinstance(text, str) and text.strip().lower() == "auto":
        return "auto"
    value = number_from_text(text)
    if isinstance(value, int) and value in counts:
        return value
    raise FieldError("gpus", f" = {show(text)} must be auto or one of {', '.join(map(str, counts))} "
                             "(GPUs per model copy)")


def machine_memory() -> int:
    """This machine's memory (bytes, from /proc/meminfo; 4 GiB when it cannot be read)."""
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 4 << 30


#: Most memory one command may use (bytes): a quarter of this machine's (the lab's machine is shared
#: by several people; 5.9 GiB of its 23.5 GiB). The input caps (200,000 trace rows, 4,194,304-token
#: answers) allow runs far larger: reserve-max keeps about 640 bytes per engine step, and 200,000
#: 9-token prompts with 99-token answers under a huge max_new_tokens run one at a time for some
#: 20 million steps, over 10 GB (measured: 20,000 such rows at the default cap took 350 MB, 40,000
#: took 530 MB). So a run is watched and stopped with a message when it passes this.
MEMORY_LIMIT = machine_memory() // 4
#: Checks a tripped guard waits, still over its limit, for the run to stop on its interrupt before it
#: ends the process itself (:meth:`MemoryGuard.check`): 4 checks of 0.25 s, one second of growth
#: (the engine grows by about 40 MB/s at most; issue 42 measured 6.3 GB in 154 s).
GRACE_CHECKS = 4


def _rss() -> int:
    """This process's resident memory (bytes), from /proc/self/statm; 0 when it cannot be read."""
    try:
        with open("/proc/self/statm", encoding="ascii") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def _interrupt_main() -> None:
    import _thread
    _thread.interrupt_main()


def _hard_stop(message: str) -> None:
    """End the process at once with ``message`` on stderr and exit status 2, leaving no partial
    output file (the temporary files :func:`write_files` and ``export-site --zip`` have open are
    removed first). What a tripped :class:`MemoryGuard` does when its interrupt did not stop the run."""
    remove_pending()
    try:
        sys.stderr.write(message + "\n")
        sys.stderr.flush()
    finally:
        os._exit(2)


class MemoryGuard:
    """Keep a command's memory under a bound (``with MemoryGuard(limit):``).

    A watcher thread calls :meth:`check` at once and then every ``interval_s`` seconds. The first
    check that finds the process past ``limit`` bytes records the memory seen in ``tripped`` and
    interrupts the main thread (a KeyboardInterrupt there), so the caller says what happened and
    files are left whole. An interrupt can be lost (Python ignores an exception raised inside a gc
    callback or a ``__del__``, and a long call into C defers it), and the run would then go on
    growing; so when ``grace_checks`` further checks still find the process over the limit, the
    guard ends the process itself (``hard_stop(message)``: by default the message on stderr, the
    temporary output files removed, exit status 2). The bound therefore holds: ``limit`` plus what
    the run can allocate in ``grace_checks x interval_s`` seconds (about one second).

    Args:
        limit: bytes (default :data:`MEMORY_LIMIT`, a quarter of the machine).
        interval_s: seconds between checks.
        read_memory: returns the process's memory in bytes (default: resident memory from /proc);
            tests inject a reader that reports "over the limit" at a chosen check.
        interrupt: interrupts the main thread (default ``_thread.interrupt_main``).
        hard_stop: ends the process, given the message (default :func:`_hard_stop`).
        grace_checks: checks over the limit after the interrupt before ``hard_stop`` (default
            :data:`GRACE_CHECKS`).

    Attributes:
        tripped: the memory seen at the first check over the limit (bytes), 0 while under it.
        checks: how many checks have run.
        stopped: whether ``hard_stop`` was called.
    """

    def __init__(self, limit: int = MEMORY_LIMIT, interval_s: float = 0.25, *, read_memory=None,
                 interrupt=None, hard_stop=None, grace_checks: int | None = None):
        self.limit, self.interval_s = limit, interval_s
        self.read_memory, self.interrupt, self.hard_stop = read_memory, interrupt, hard_stop
        self.grace_checks = GRACE_CHECKS if grace_checks is None else grace_checks
        self.tripped = 0
        self.checks = 0
        self.stopped = False
        self._over_after_trip = 0
        self._stop = threading.Event()
        self._lock = threading.Lock()

    def check(self) -> bool:
        """One check of the process's memory (what the watcher thread runs every ``interval_s``);
        does nothing once the block has ended. Returns whether the watcher should go on checking
        (False once the guard has ended the process, or after the block ended)."""
        with self._lock:
            if self._stop.is_set() or self.stopped:
                return False
            self.checks += 1
            rss = (self.read_memory or _rss)()
            if rss <= self.limit:
                return True
            if not self.tripped:
                self.tripped = rss
                (self.interrupt or _interrupt_main)()
                return True
            self._over_after_trip += 1
            if self._over_after_trip < self.grace_checks:
                return True
            self.stopped = True
            (self.hard_stop or _hard_stop)(self.message())
            return False

    def _watch(self) -> None:
        while self.check() and not self._stop.wait(self.interval_s):
            pass

    def __enter__(self):
        self._stop.clear()
        try:
            threading.Thread(target=self._watch, name="memory-guard", daemon=True).start()
        except BaseException:                # the first check tripped while the thread started: the block
            with self._lock:                 # never runs and __exit__ is not called, so stop watching here
                self._stop.set()
            raise
        return self

    def __exit__(self, exc_type, *exc):
        with self._lock:                     # no check runs after this: none can interrupt outside the block
            self._stop.set()
        if self.tripped and exc_type is None:
            # The interrupt was swallowed: Python ignores an exception raised inside a gc callback or
            # a __del__, and the block ended normally. Let a still-pending one arrive here, then raise
            # it once, so the caller reports the stop as it would have.
            try:
                for _ in range(3):
                    time.sleep(0)
            except KeyboardInterrupt:
                pass
            raise KeyboardInterrupt
        return False

    #: The option strings of the command that runs (set once it is known: ``allocator.__main__``);
    #: the message advises only those.
    options = ("--count", "--max-new-tokens")

    def message(self) -> str:
        """The one line a tripped guard prints: the limit, and what shortens a run, naming only the
        command's own :attr:`options` (:func:`shrink_advice`: fewer requests, a smaller pool or
        generation cap). It never advises a larger pool: a pool's own size counts too."""
        return (f"error: stopped: this run passed {self.limit / 2**30:.1f} GiB of memory (a quarter of this machine's "
                f"{machine_memory() / 2**30:.1f} GiB); {shrink_advice(self.options)}")


def engine_progress_line(stream, quiet: bool, *, every_s: float = 5.0, clock=time.monotonic):
    """A long simulation's progress on ``stream`` (stderr): a line each time the engine loop reports
    (``allocator.engine.loop.progress_reports``) and ``every_s`` seconds have passed since the last
    line, e.g. ``simulating: 12,000 of 200,000 requests done, engine step 1,520,000 (41 s)``. Whole
    lines, so the result printed after them is never run into. Nothing when ``quiet`` (``--json``)
    or when ``stream`` is not a terminal (piped or redirected): a pipe or a log gets only the result.

    Args:
        clock: seconds, monotonic (tests pass a fake one).

    Returns:
        ``report(finished, total, step)`` for ``progress_reports``, or None when nothing is shown.
    """
    isatty = getattr(stream, "isatty", None)
    if quiet or not (isatty and isatty()):
        return None
    start = clock()
    last = [start]

    def report(finished: int, total: int, step: int) -> None:
        now = clock()
        if now - last[0] < every_s:
            return
        last[0] = now
        stream.write(f"simulating: {finished:,} of {total:,} requests done, engine step {step:,} "
                     f"({now - start:.0f} s)\n")
        stream.flush()
    return report


def shrink_advice(options) -> str:
    """What shortens a run, naming only options the command has (``options``: its option strings,
    e.g. ``{"--count", "--slots"}``): fewer requests (``--count`` or ``--requests``), a smaller pool
    (``--slots``), a smaller generation cap (``--max-new-tokens``), the quick run (``--quick``); a
    command with none of them (``replay-vllm``) is told to run less.

    Returns:
        e.g. ``"try fewer requests (--count), a smaller pool (--slots) or a smaller generation cap
        (--max-new-tokens)"``.
    """
    options = set(options or ())
    ways = [words for flag_, words in (("--count", "fewer requests (--count)"),
                                       ("--requests", "fewer requests (--requests)"),
                                       ("--slots", "a smaller pool (--slots)"),
                                       ("--max-new-tokens", "a smaller generation cap (--max-new-tokens)"),
                                       ("--quick", "the quick run (--quick)")) if flag_ in options]
    if not ways:
        return "try a smaller run"
    return "try " + (ways[0] if len(ways) == 1 else ", ".join(ways[:-1]) + " or " + ways[-1])


def out_of_memory_message(where: str = "this run", options=("--count", "--slots")) -> str:
    """The one line shown when the system refuses memory (a ``MemoryError``) before the
    :class:`MemoryGuard` trips, e.g. under a container's memory cap below a quarter of the machine:
    what ran out and what shortens the work (:func:`shrink_advice` of the command's ``options``),
    with no traceback and no server path.

    Args:
        where: what was running (``"this run"``, ``"the Throughput sweep"``).
        options: the option strings of the command that ran (only those are advised).

    Returns:
        e.g. ``"this run ran out of memory (the system refused more); try fewer requests (--count)
        or a smaller pool (--slots)"``.
    """
    return (f"{where} ran out of memory (the system refused more before the run finished); "
            + shrink_advice(options))


def flag(name: str) -> str:
    """The command-line spelling of a field: ``"steps_per_second"`` -> ``"--steps-per-second"``."""
    return "--" + name.replace("_", "-")


#: Fields whose FieldError is about an option spelt otherwise on the command line: field -> (the
#: option's argparse dest, the 0-based item of that option's comma-separated list, or None). Any
#: other field that is an option's dest is named as that option.
FIELD_OPTIONS: dict[str, tuple[str, int | None]] = {
    "total_slots": ("slots", None), "full_groups": ("full_attention_groups", None), "policy": ("policies", None),
    "length_a": ("share", 0), "length_b": ("share", 1), "prefix_tokens": ("share", 2),
}
#: A subject that is a field's name, with ``[i]`` for item ``i`` of a list (``rates[2]``), or an
#: option's spelling already (``--model``, from code that words a message for the command line).
_FIELD_SUBJECT = re.compile(r"(?:--)?([A-Za-z_][A-Za-z0-9_-]*)(?:\[(\d+)\])?")


def _spelling(option_strings: tuple[str, ...], argv: list[str]) -> str:
    """The option as the user typed it: the last of ``option_strings`` (``--block-size``,
    ``--page-size``) found in ``argv`` (also as ``--opt=value``, or abbreviated as argparse allows),
    else its first long spelling."""
    longs = [o for o in option_strings if o.startswith("--")] or list(option_strings)
    for token in reversed(argv):
        name = token.split("=", 1)[0] if token.startswith("--") else token
        if name in option_strings:
            return name
        if name.startswith("--") and len(name) > 2:
            matches = [o for o in longs if o.startswith(name)]
            if len(matches) == 1:
                return matches[0]
    return longs[0]


def option_message(exc: FieldError, options: dict[str, tuple[str, ...]], argv: list[str]) -> str:
    """A FieldError's message as the command line words it: the option as typed, not the field's name.

    ``block_size = 0 must be ...`` reads ``--block-size 0 must be ...``; item ``i`` (0-based) of a list
    option reads ``--rates item 3 = 0 must be ...`` (counted from 1, as every message counts items);
    a field spelt otherwise goes through :data:`FIELD_OPTIONS` (``length_a`` is ``--share item 1``).
    A subject that names no option of this command (a file's row and column, a run's file, a field
    computed from several options) is kept as it is.

    Args:
        exc: the error the sub-command raised.
        options: the sub-command's options, argparse dest -> option strings (positionals left out).
        argv: the command line as given (to echo the spelling typed: ``--page-size`` or ``--block-size``).

    Returns:
        The message, one line, without the ``error: `` prefix.
    """
    match = _FIELD_SUBJECT.fullmatch(exc.subject)
    if not match:
        return str(exc)
    name, index = match.group(1).replace("-", "_"), match.group(2)
    dest, item = FIELD_OPTIONS.get(name, (name, None))
    if dest not in options:
        if name not in options:
            return str(exc)
        dest, item = name, None
    if index is not None:
        item = int(index)
    spelling = _spelling(options[dest], argv)
    if item is not None:
        return f"{spelling} item {item + 1}{exc.problem}"
    problem = exc.problem
    return spelling + (" " + problem[3:] if problem.startswith(" = ") else problem)


def note(reasons: list[str]) -> None:
    """Print ``reasons`` (why given options do nothing in this run) as one line on stderr."""
    if reasons:
        print("note: " + "; ".join(reasons), file=sys.stderr)


def _name_problem(path: str) -> str | None:
    """Why ``path`` cannot be a file name here, or None."""
    if not path:
        return " is empty: give a file name"
    if "\x00" in path:
        return f" = {show(path, 120)} is not a file name"
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:
        return f" = {show(path, 120)} is not UTF-8 text: give a file name without undecodable bytes"
    return None


def check_text(field: str, text: str) -> str:
    """Return ``text`` if it can be written as UTF-8 (a title that goes into a file).

    Raises:
        FieldError: ``field`` holds undecodable bytes from the command line.
    """
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise FieldError(field, f" = {show(text)} is not UTF-8 text") from None
    return text


def check_output(field: str, path: str) -> None:
    """Check that ``path`` can be written as a new or replaced file, before anything is computed.

    The name must be UTF-8 text; its directory must exist and be writable; an existing ``path``
    must be a regular, writable file (not a directory, a device or a pipe).

    Raises:
        FieldError: ``field`` (``"out"``, ``"handout"``, ``"csv"``) with the path and the problem,
            e.g. ``"csv = 'out' is a directory: give a file name"``.
    """
    problem = _name_problem(path)
    if problem:
        raise FieldError(field, problem)
    shown = show(path, 120)
    folder = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path):
        raise FieldError(field, f" = {shown} is a directory: give a file name")
    if not os.path.isdir(folder):
        raise FieldError(field, f" = {shown} cannot be written: output directory does not exist "
                         f"({show(folder, 120)})")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise FieldError(field, f" = {shown} cannot be written: no permission to write in {show(folder, 120)}")
    if os.path.lexists(path):
        try:
            mode = os.stat(path).st_mode
        except OSError as exc:                   # a dangling link, a loop
            raise FieldError(field, f" = {shown} cannot be written: {exc.strerror or exc}") from None
        if not stat.S_ISREG(mode):
            raise FieldError(field, f" = {shown} is not a regular file (a device or a pipe?): give a file name")
        if not os.access(path, os.W_OK):
            raise FieldError(field, f" = {shown} is read-only")


def check_distinct(named: dict[str, str], reading: str | None = None) -> None:
    """Refuse two outputs naming one file, or an output naming the file being read.

    Args:
        named: field -> path of each output given, in the order given.
        reading: the input file's path (a trace), or None.

    Raises:
        FieldError: the later field of two naming one file, or the field naming the input.
    """
    source = os.path.realpath(reading) if reading else None
    seen: dict[str, str] = {}
    for field, path in named.items():
        real = os.path.realpath(path)
        if real == source:
            raise FieldError(field, f" = {show(path, 120)} is the trace being read: give another file name")
        if real in seen:
            raise FieldError(field, f" = {show(path, 120)} names the same file as {flag(seen[real])}: the HTML, "
                             "handout and CSV outputs must be different files (one would overwrite another)")
        seen[real] = field


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _write_text(handle, text: str) -> None:
    """Write ``text`` to an open file (one place, so tests can simulate a full disk)."""
    handle.write(text)


def write_files(files: list[tuple[str, str, str]]) -> None:
    """Write each ``(field, path, text)`` (UTF-8) whole, or none of them.

    Every text goes to a temporary file in its target's directory first; only when all of them
    are complete are they renamed into place (``os.replace``, atomic on one file system). A
    failure at any point removes the temporary files, and any target this call had already put
    in place where there was none before, so a failed run leaves no partial or half-written file.
    A replaced file keeps its permissions; a new one gets the usual ``0o666 & ~umask``.

    Raises:
        FieldError: the field of the file that could not be written, with the system's reason
            (``"csv = 'm.csv' cannot be written: No space left on device"``).
    """
    temps: list[str] = []
    placed: list[str] = []
    current = files[0] if files else None
    try:
        for current in files:
            field, path, text = current
            folder = os.path.dirname(os.path.abspath(path))
            fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{os.path.basename(path)}.", suffix=".part")
            temps.append(tmp)
            _PENDING.add(tmp)
            with open(fd, "w", encoding="utf-8", newline="") as handle:
                _write_text(handle, text)
            mode = os.stat(path).st_mode & 0o7777 if os.path.exists(path) else 0o666 & ~_umask()
            os.chmod(tmp, mode)
        for current, tmp in zip(files, list(temps)):
            path = current[1]
            existed = os.path.exists(path)
            os.replace(tmp, path)
            temps.remove(tmp)
            _PENDING.discard(tmp)
            if not existed:
                placed.append(path)
    except BaseException as exc:
        for path in placed:                      # nothing this call put in place survives a failure or Ctrl-C
            _remove(path)
        if not isinstance(exc, (OSError, UnicodeError)):
            raise
        if isinstance(exc, OSError) and exc.errno == errno.ENOMEM:   # memory, not the file: the one
            raise MemoryError from exc                               # out-of-memory line says so
        field, path = current[0], current[1]
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise FieldError(field, f" = {show(path, 120)} cannot be written: {reason}") from None
    finally:
        for tmp in temps:
            _remove(tmp)


def _remove(path: str) -> None:
    _PENDING.discard(path)
    try:
        os.remove(path)
    except OSError:
        pass


#: Temporary output files being written now (``.part`` files): removed by :func:`remove_pending`
#: when the process must end at once (a tripped :class:`MemoryGuard`, SIGTERM).
_PENDING: set[str] = set()


def add_pending(path: str) -> None:
    """Note ``path`` as a temporary file being written, so an abrupt end removes it (call
    :func:`done_pending` when it has been renamed into place or removed)."""
    _PENDING.add(path)


def done_pending(path: str) -> None:
    """``path`` is no longer a temporary file being written (renamed into place, or removed)."""
    _PENDING.discard(path)


def remove_pending() -> None:
    """Remove every temporary file still being written (see :func:`add_pending`); errors ignored."""
    for path in list(_PENDING):
        _remove(path)
