"""The Throughput and latency page's rate sweeps, computed once per setting and shared by every
session on the server (a sweep takes seconds to minutes, so a class must not run it forty times).

The sweeps live in the server's one result store, :data:`pages._ui.heavy.STORE`, bounded by memory
(an estimate of each sweep's bytes, its per-request latency arrays included) as well as by
:data:`MAX_SWEEPS`, and they run in the server's one heavy-work queue (:func:`pages._ui.heavy.run_heavy`,
"Queued: n ahead of you"). The first session to ask for a setting computes it and reports progress
through a callback; a session asking for the same setting meanwhile waits for that run and is
shown *its* progress ("another student started this sweep", or "the server's start-up computation of
the default" while ``app.py``'s warm-up computes the default) instead of starting again. Who computed
each stored sweep is kept (:func:`origin`), so the page can say when it shows a sweep precomputed at
start-up or another student's identical one.
"""
from __future__ import annotations

import os
import threading

from allocator.workloads.poisson import SWEEP_MAX_NEW
from allocator.studies.rate_sweep import rate_sweep
from allocator.cost.best import best_cost_model
from pages._ui import heavy

#: The store's group for sweeps (the first element of every sweep's store key).
GROUP = "throughput.rate_sweep"
#: Sweeps kept at most (least recently used dropped first); the store's byte budget may keep fewer.
MAX_SWEEPS = 12

_running: dict = {}            # store key -> (done, total, text, by) of a sweep being computed now
_running_lock = threading.Lock()
_origins: dict = {}            # store key -> who computed the stored sweep (see :func:`origin`)

_worker = None                 # the sweep's helper process (:func:`start_worker`), None: every run here

#: How much lower the helper process's priority is than the server's (``os.nice``): it takes only the
#: CPU the server leaves idle, so pages and the heavy-work queue keep the first core as before.
WORKER_NICE = 10


def _watch_parent(parent: int) -> None:
    """In the helper process: lower its priority and exit when the server that forked it is gone
    (a killed server must not leave it behind)."""
    import time
    try:
        os.nice(WORKER_NICE)
    except OSError:
        pass

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(1.0)
        os._exit(0)
    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


def start_worker() -> bool:
    """Fork one helper process that runs part of every sweep beside the heavy-work queue's thread
    (``allocator.studies.rate_sweep.rate_sweep(executor=...)``: it takes rates from the highest down,
    the queue's thread from the lowest up; the figures are the same runs either way). At low load a
    sweep then takes about half the time on two cores. Call it once, before the server starts its
    threads (``app.py`` does): a process forked while other threads hold locks could hang, so a
    server that did not call it simply runs every sweep in its queue's thread. Returns whether the
    helper started (a failure is silent: the sweeps run here)."""
    global _worker
    if _worker is not None:
        return True
    try:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor
        worker = ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("fork"),
                                     initializer=_watch_parent, initargs=(os.getpid(),))
        worker.submit(os.getpid).result(timeout=30)         # fork now, while the process has one thread
    except Exception:                                      # noqa: BLE001 - no helper: sweeps run here
        return False
    _worker = worker
    return True


def _executor():
    """The helper process's executor, or None when there is none or it broke (then never again)."""
    global _worker
    worker = _worker
    if worker is not None and getattr(worker, "_broken", False):
        _worker = None
        return None
    return worker


#: ``by`` of the server's own start-up computation of the default sweep (:func:`warm_default_sweep`).
STARTUP = "start-up"


def sweep_key(gpu: str, model: str, gpus, requests: int, rates, block_size: int, workload: str = "azure-conv") -> tuple:
    """The cache key of a sweep's settings (``rates`` None: the default grid; ``workload`` the lengths'
    source, see ``allocator.studies.rate_sweep.SWEEP_WORKLOADS``)."""
    return (gpu, model, gpus, int(requests), None if rates is None else tuple(rates), int(block_size), workload)


def _store_key(key: tuple) -> tuple:
    return (GROUP, key)


def cached_sweep(key: tuple, progress=None, by: str | None = None):
    """The sweep for ``key`` (see :func:`sweep_key`): from the store, from a session already
    computing it, or computed now in the heavy-work queue.

    Args:
        progress: called as ``progress(done, total, text)`` after each of the sweep's runs (``done``
            of ``total`` runs; ``text`` names the allocator and rate). While this session waits for
            another session's identical sweep it is called with that sweep's progress, ``text``
            saying so (and naming the server's start-up computation when it is that one). None: no
            progress (a spinner while it runs).
        by: who asks: a session's id, :data:`STARTUP` for the server's warm-up, None for anyone else
            (tests, scripts); kept as the sweep's :func:`origin` when this call computes it.

    Raises:
        FieldError: settings the core refuses (a model that does not fit, bad rates...).
        TimeoutError: the heavy-work queue did not reach the sweep in time.
    """
    skey = _store_key(key)

    def compute():
        def report(done: int, total: int, text: str) -> None:
            with _running_lock:
                _running[skey] = (done, total, text, by)
            if progress is not None:
                progress(done, total, text)
        try:
            gpu, model, gpus, requests, rates, block_size, workload = key
            sweep = heavy.run_heavy("Simulating the sweep", rate_sweep, best_cost_model(gpu, model, gpus), rates,
                                    requests=requests, block_size=block_size, progress=report, workload=workload,
                                    max_new_tokens=SWEEP_MAX_NEW[workload], executor=_executor(),
                                    _spinner=progress is None)
            with _running_lock:          # forget who computed sweeps the store has since dropped
                for k in [k for k in _origins if k not in heavy.STORE._items]:
                    del _origins[k]
                _origins[skey] = by
            return sweep
        finally:
            with _running_lock:
                _running.pop(skey, None)

    def other(_waited_s: float) -> None:
        with _running_lock:
            state = _running.get(skey)
        if progress is not None and state is not None:
            done, total, text, started_by = state
            progress(done, total, f"{text}, in the server's start-up computation of the default sweep"
                     if started_by == STARTUP else f"{text}, in the same sweep another student started")

    return heavy.STORE.compute_once(skey, compute, group=GROUP, max_entries=MAX_SWEEPS, on_other=other)


def origin(key: tuple) -> str | None:
    """Who computed the stored sweep for ``key``: :data:`STARTUP` (the server's warm-up), a session's
    id (the ``by`` of the :func:`cached_sweep` call that ran it), or None (not stored, or computed
    outside any page)."""
    skey = _store_key(key)
    if not heavy.STORE.get(skey)[0]:
        return None
    with _running_lock:
        return _origins.get(skey)


def is_cached(key: tuple) -> bool:
    """Whether the sweep for ``key`` is ready (no progress bar needed)."""
    return heavy.STORE.get(_store_key(key))[0]


#: The page's first setting (the PagedAttention paper's GPU and model, 1,000 requests, block 16).
DEFAULT_KEY = sweep_key("a100-40gb", "opt-13b", "auto", 1000, None, 16)


def warm_default_sweep() -> None:
    """Compute the page's default sweep into the store (``app.py`` starts this in the background); the
    page then says its default was precomputed at start-up (:func:`origin`)."""
    cached_sweep(DEFAULT_KEY, by=STARTUP)
