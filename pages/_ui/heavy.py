"""Heavy work, bounded per server: one queue, one memory-bounded store, identical work done once.

A classroom shares one server. Before this module, six students asking for the largest in-range
sweep each started their own, and everyone's wait grew with the number of runs sharing two cores
while memory grew without a bound (issue 19). Here:

* **One server-wide queue** (:data:`QUEUE`): at most ``HEAVY_SLOTS`` heavy computations run at once
  (one per spare core: on a 2-core machine, one), the rest wait in arrival order. A waiting
  session shows "Queued: n ahead of you"; a light change (a cache hit, a page that computes
  nothing heavy) never waits in it, so it still answers while the queue is long.
* **One store for results** (:func:`shared`): a result is kept once for the whole server, keyed by
  the function and its arguments, and dropped least-recently-used first when the store passes
  ``STORE_BYTES`` (an estimate of each result's size, :func:`size_of`) or ``max_entries``.
* **Identical work shared**: a session asking for a result another session is computing waits
  for that one ("another student is computing the same thing") instead of computing it again.

Streamlit-agnostic at its core (:class:`HeavyQueue`, :class:`Store`) so it is tested directly and
works before the runtime starts (``app.py`` warms the default scenario); the messages are drawn
only inside a script run. The lead can bound any other heavy call with :func:`run_heavy`
(e.g. the kernel page's sweep: ``run_heavy("Measuring the kernel sweep", run_sweep, ...)``).
"""
from __future__ import annotations

import functools
import os
import sys
import threading
import time
from collections import OrderedDict
from contextlib import contextmanager

import numpy as np

from allocator.cli.common import machine_memory

#: Heavy computations running at once: one per core beyond the first (the first serves pages), at
#: least one. On the lab's 2-core machine: 1. ``KVLAB_HEAVY_SLOTS`` overrides it (``tests/tools/heavy_load.py``
#: sets it high to measure the server without the queue).
HEAVY_SLOTS = int(os.environ.get("KVLAB_HEAVY_SLOTS") or max(1, (os.cpu_count() or 2) - 1))


#: Memory the result store may hold (bytes): an eighth of the machine's memory, between 128 MiB and
#: 512 MiB, so the server's whole footprint (about 0.4 GB of code and Python, one heavy run at a time,
#: and this store) stays under 2 GB (issue 19's target).
STORE_BYTES = int(min(512 << 20, max(128 << 20, machine_memory() // 8)))
#: Longest a session waits in the queue or for another session's identical run (seconds).
WAIT_S = 600


def size_of(obj, _seen: set | None = None, _depth: int = 0) -> int:
    """An estimate of the memory ``obj`` holds (bytes): numpy arrays by ``nbytes``, pandas frames by
    ``memory_usage(deep=False)``, bytes and strings by length, containers, dataclasses and objects
    with ``__dict__``/``__slots__`` by their contents (each object counted once, 12 levels deep).
    An estimate for bounding a cache, not an exact figure."""
    seen = set() if _seen is None else _seen
    if id(obj) in seen or _depth > 12:
        return 0
    seen.add(id(obj))
    if isinstance(obj, np.ndarray):
        return obj.nbytes + 112
    if isinstance(obj, (bytes, bytearray, str)):
        return len(obj) + 49
    if isinstance(obj, (int, float, bool, type(None))):
        return 28
    if hasattr(obj, "memory_usage") and hasattr(obj, "columns"):          # a pandas DataFrame
        try:
            return int(obj.memory_usage(index=True, deep=False).sum()) + 1024
        except Exception:                                                  # noqa: BLE001 - an estimate
            return 1024
    total = sys.getsizeof(obj, 64)
    if isinstance(obj, dict):
        return total + sum(size_of(k, seen, _depth + 1) + size_of(v, seen, _depth + 1) for k, v in obj.items())
    if isinstance(obj, (list, tuple, set, frozenset)):
        return total + sum(size_of(v, seen, _depth + 1) for v in obj)
    if hasattr(obj, "__dict__"):
        total += size_of(vars(obj), seen, _depth + 1)
    for name in getattr(type(obj), "__slots__", ()):
        total += size_of(getattr(obj, name, None), seen, _depth + 1)
    return total


class HeavyQueue:
    """A first-come-first-served semaphore: at most ``slots`` holders at once, the rest wait in
    the order they asked, each told how many are ahead of it."""

    def __init__(self, slots: int = HEAVY_SLOTS):
        self.slots = max(1, int(slots))
        self._cond = threading.Condition()
        self._waiting: list[object] = []
        self._running = 0

    def state(self) -> tuple[int, int]:
        """(running, waiting) right now."""
        with self._cond:
            return self._running, len(self._waiting)

    @contextmanager
    def slot(self, on_wait=None, timeout_s: float = WAIT_S):
        """Hold one slot for the ``with`` block, waiting for it first if all are taken.

        Args:
            on_wait: called as ``on_wait(ahead, waited_s)`` about twice a second while waiting
                (``ahead`` = runs before this one: those running plus those queued earlier).
            timeout_s: longest wait (seconds).

        Raises:
            TimeoutError: no slot within ``timeout_s``; the ticket is withdrawn.
        """
        ticket = object()
        start = time.monotonic()
        with self._cond:
            self._waiting.append(ticket)
            try:
                while not (self._waiting[0] is ticket and self._running < self.slots):
                    waited = time.monotonic() - start
                    if waited > timeout_s:
                        raise TimeoutError(f"the server's heavy-work queue did not reach this run in {timeout_s:.0f} s")
                    if on_wait is not None:
                        ahead = self._running + self._waiting.index(ticket)
                        self._cond.release()
                        try:
                            on_wait(ahead, waited)
                        finally:
                            self._cond.acquire()
                        if self._waiting[0] is ticket and self._running < self.slots:
                            break
                    self._cond.wait(0.5)
            except BaseException:
                self._waiting.remove(ticket)
                self._cond.notify_all()
                raise
            self._waiting.remove(ticket)
            self._running += 1
        try:
            yield
        finally:
            with self._cond:
                self._running -= 1
                self._cond.notify_all()


class Store:
    """Results shared by every session: LRU, bounded by an estimate of bytes and by entries; a key
    being computed is computed once (later askers wait for it)."""

    def __init__(self, max_bytes: int = STORE_BYTES):
        self.max_bytes = max_bytes
        self._lock = threading.Lock()
        self._items: OrderedDict = OrderedDict()      # key -> (value, bytes)
        self._busy: dict = {}                          # key -> threading.Event
        self.bytes = 0

    def get(self, key):
        """(True, value) if ``key`` is stored (and marks it recently used), else (False, None)."""
        with self._lock:
            if key in self._items:
                self._items.move_to_end(key)
                return True, self._items[key][0]
        return False, None

    def put(self, key, value, *, group: str, max_entries: int) -> None:
        """Store ``value``; drop the least recently used until under the byte budget and under
        ``max_entries`` entries of ``group`` (the key's first element). A value larger than the
        whole budget is returned to its caller but not kept."""
        size = size_of(value)
        with self._lock:
            if key in self._items:
                self.bytes -= self._items.pop(key)[1]
            if size > self.max_bytes:
                return
            self._items[key] = (value, size)
            self.bytes += size
            same = [k for k in self._items if k[0] == group]
            for k in same[:max(0, len(same) - max_entries)]:
                self.bytes -= self._items.pop(k)[1]
            while self.bytes > self.max_bytes and len(self._items) > 1:
                _, (_, dropped) = self._items.popitem(last=False)
                self.bytes -= dropped

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
            self.bytes = 0

    def __len__(self) -> int:
        return len(self._items)

    def compute_once(self, key, compute, *, group: str, max_entries: int, on_other=None, timeout_s: float = WAIT_S):
        """The value for ``key``: stored, or awaited from the session computing it, or ``compute()``d
        now (and stored). ``on_other(waited_s)`` is called while waiting for another session.
        An exception from ``compute`` reaches its caller; a waiting session then tries itself."""
        found, value = self.get(key)
        if found:
            return value
        with self._lock:
            event = self._busy.get(key)
            owner = event is None
            if owner:
                event = self._busy[key] = threading.Event()
        if not owner:
            start = time.monotonic()
            while not event.wait(0.5):
                if on_other is not None:
                    on_other(time.monotonic() - start)
                if time.monotonic() - start > timeout_s:
                    break
            found, value = self.get(key)
            return value if found else self.compute_once(key, compute, group=group, max_entries=max_entries,
                                                         on_other=on_other, timeout_s=timeout_s)
        try:
            value = compute()
            self.put(key, value, group=group, max_entries=max_entries)
            return value
        finally:
            with self._lock:
                self._busy.pop(key, None)
            event.set()


#: The server's queue and store (one per process: every session shares them).
QUEUE = HeavyQueue()
STORE = Store()


def _in_script() -> bool:
    try:
        from streamlit.runtime.scriptrunner import get_script_run_ctx
        return get_script_run_ctx(suppress_warning=True) is not None
    except Exception:                                 # noqa: BLE001 - no runtime: no messages
        return False


def _plural(n: int, word: str) -> str:
    return f"{n:,} {word}{'' if n == 1 else 's'}"


class OutOfMemory(ValueError):
    """A page's heavy work ran out of memory (the system refused it a ``MemoryError``): a
    ``ValueError``, so every page shows it as it shows bad input, one plain message with no traceback."""


def _guarded(what: str, fn, *args, **kwargs):
    """``fn(*args, **kwargs)``, with a ``MemoryError`` turned into :class:`OutOfMemory` naming ``what``
    and what shortens the work (fewer requests, a smaller pool)."""
    try:
        return fn(*args, **kwargs)
    except MemoryError:
        raise OutOfMemory(f"{what} ran out of memory on this server (the system refused more); try fewer "
                          "requests or a smaller pool") from None


def run_heavy(what: str, fn, *args, _spinner: bool = True, **kwargs):
    """``fn(*args, **kwargs)`` inside the server's heavy-work queue, with the wait shown on the page.

    While queued the page shows "Queued: n ahead of you on this server" (updated twice a second),
    then a spinner naming ``what`` while it runs (``_spinner=False``: the caller shows its own
    progress). Outside a script run (server start-up, tests without a page) it just waits for its
    turn.

    Raises:
        TimeoutError: the queue did not reach this run within ``WAIT_S`` seconds.
        OutOfMemory: ``fn`` raised a ``MemoryError`` (a ``ValueError`` with one plain message).
        Whatever else ``fn`` raises.
    """
    if not _in_script():
        with QUEUE.slot():
            return _guarded(what, fn, *args, **kwargs)
    import streamlit as st
    box = None

    def waiting(ahead: int, waited: float) -> None:
        nonlocal box
        box = box or st.empty()
        box.info(f"Queued: {_plural(ahead, 'heavy run')} ahead of you on this server ({waited:.0f} s so far). "
                 f"Runs take turns so that every student's light changes stay quick; {what.lower()} "
                 "starts when its turn comes.", icon=":material/hourglass_top:")
    try:
        with QUEUE.slot(waiting):
            if box is not None:
                box.empty()
            if not _spinner:
                return _guarded(what, fn, *args, **kwargs)
            with st.spinner(f"{what}…", show_time=True):
                return _guarded(what, fn, *args, **kwargs)
    finally:
        if box is not None:
            box.empty()


def shared(what: str, *, max_entries: int = 32, heavy=None):
    """Decorator: the function's results are kept in the server's :data:`STORE` (shared by every
    session, bounded by memory), computed once per distinct arguments, inside the heavy-work queue
    (:func:`run_heavy`) when ``heavy(*args, **kwargs)`` says so (None: always). A light call skips
    the queue, so a small change never waits behind the class's big runs. Arguments must be
    hashable; as with Streamlit's caches, those whose name starts with ``_`` are left out of the
    key. ``.clear()`` drops this function's results."""
    def decorate(fn):
        import inspect
        params = list(inspect.signature(fn).parameters)
        # page scripts all run as __main__: their file tells two functions of one name apart
        group = f"{os.path.basename(fn.__code__.co_filename)}:{fn.__module__}.{fn.__qualname__}"

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            bound = dict(zip(params, args), **kwargs)
            key = (group, tuple((k, v) for k, v in bound.items() if not k.startswith("_")))
            found, value = STORE.get(key)
            if found:                               # a light change: never queued, no element drawn
                return value
            note = None

            def other(waited: float) -> None:
                nonlocal note
                if _in_script():
                    import streamlit as st
                    note = note or st.empty()
                    note.info(f"Another student is computing the same thing: using theirs when it is done "
                              f"({waited:.0f} s so far).", icon=":material/group:")
            try:
                queued = heavy is None or heavy(*args, **kwargs)
                return STORE.compute_once(key, (lambda: run_heavy(what, fn, *args, **kwargs)) if queued
                                          else (lambda: _guarded(what, fn, *args, **kwargs)), group=group,
                                          max_entries=max_entries, on_other=other)
            finally:
                if note is not None:
                    note.empty()

        def clear() -> None:
            with STORE._lock:
                for k in [k for k in STORE._items if k[0] == group]:
                    STORE.bytes -= STORE._items.pop(k)[1]
        wrapper.clear = clear
        return wrapper
    return decorate
