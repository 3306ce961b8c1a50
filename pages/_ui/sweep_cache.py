"""The Throughput and latency page's rate sweeps, computed once per setting and shared by every
session on the server (a sweep takes seconds, so a class must not run it forty times).

A plain ``st.cache_resource`` cannot report progress while it computes, so the sweeps live in one
cached store: the first session to ask for a setting computes it, reporting progress through a
callback; a session asking for the same setting meanwhile waits for it instead of starting again.
"""
from __future__ import annotations

import threading
from collections import OrderedDict

import streamlit as st

from allocator.throughput import SWEEP_MAX_NEW, rate_sweep
from allocator.timing import cost_model
from pages._ui.heavy import run_heavy

#: Sweeps kept (least recently used dropped first).
MAX_SWEEPS = 12
#: Longest a session waits for another session's sweep of the same setting (seconds).
WAIT_S = 300


@st.cache_resource
def _store() -> dict:
    return {"lock": threading.Lock(), "runs": OrderedDict(), "busy": {}}


def sweep_key(gpu: str, model: str, gpus, requests: int, rates, block_size: int, workload: str = "azure-conv") -> tuple:
    """The cache key of a sweep's settings (``rates`` None: the default grid; ``workload`` the lengths'
    source, see ``allocator.throughput.SWEEP_WORKLOADS``)."""
    return (gpu, model, gpus, int(requests), None if rates is None else tuple(rates), int(block_size), workload)


def cached_sweep(key: tuple, progress=None):
    """The sweep for ``key`` (see :func:`sweep_key`): from the store, from a session already
    computing it, or computed now with ``progress(done, total, text)`` reporting each run.

    Raises:
        FieldError: settings the core refuses (a model that does not fit, bad rates...).
    """
    store = _store()
    with store["lock"]:
        if key in store["runs"]:
            store["runs"].move_to_end(key)
            return store["runs"][key]
        event = store["busy"].get(key)
        owner = event is None
        if owner:
            event = store["busy"][key] = threading.Event()
    if not owner:
        event.wait(WAIT_S)
        with store["lock"]:
            if key in store["runs"]:
                return store["runs"][key]
        return cached_sweep(key, progress)          # the other session failed: try ourselves
    try:
        gpu, model, gpus, requests, rates, block_size, workload = key
        sweep = run_heavy("Simulating the sweep", rate_sweep, cost_model(gpu, model, gpus), rates,
                          requests=requests, block_size=block_size, progress=progress, workload=workload,
                          max_new_tokens=SWEEP_MAX_NEW[workload],
                          _spinner=progress is None)     # one server-wide queue (pages._ui.heavy)
        with store["lock"]:
            store["runs"][key] = sweep
            while len(store["runs"]) > MAX_SWEEPS:
                store["runs"].popitem(last=False)
        return sweep
    finally:
        with store["lock"]:
            store["busy"].pop(key, None)
        event.set()


def is_cached(key: tuple) -> bool:
    """Whether the sweep for ``key`` is ready (no progress bar needed)."""
    store = _store()
    with store["lock"]:
        return key in store["runs"]


#: The page's first setting (the PagedAttention paper's GPU and model, 1,000 requests, block 16).
DEFAULT_KEY = sweep_key("a100-40gb", "opt-13b", "auto", 1000, None, 16)


def warm_default_sweep() -> None:
    """Compute the page's default sweep into the store (``app.py`` starts this in the background)."""
    cached_sweep(DEFAULT_KEY)
