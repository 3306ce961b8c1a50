"""Issue 24: a rate sweep shared with a helper process (``rate_sweep(executor=...)``) gives exactly the
figures of the same sweep run in one thread, and a helper that fails costs nothing but time."""
from __future__ import annotations

import multiprocessing
from concurrent.futures import Future, ProcessPoolExecutor

import numpy as np

from allocator.studies.rate_sweep import rate_sweep
from allocator.cost.roofline import cost_model


def _same(a, b) -> None:
    assert list(a.points) == list(b.points) and a.rates == b.rates
    for key in a.points:
        assert a.points[key] == b.points[key], key
        for metric in ("ttft_s", "tpot_s", "e2e_s"):
            np.testing.assert_array_equal(a.latencies[key][metric], b.latencies[key][metric])
    assert a.sustained == b.sustained and a.unloaded_s_per_token == b.unloaded_s_per_token


def _sweep(**kwargs):
    return rate_sweep(cost_model("a100-40gb", "opt-13b", "auto"), None, requests=120, block_size=16, **kwargs)


def test_a_sweep_shared_with_a_helper_process_gives_the_same_figures_and_progress_to_the_end():
    alone = _sweep()
    seen = []
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("fork")) as helper:
        shared = _sweep(executor=helper, progress=lambda done, total, text: seen.append((done, total)))
    _same(alone, shared)
    total = len(alone.points)
    assert [d for d, _ in seen] == list(range(1, total + 1)) and {t for _, t in seen} == {total}


class _FailingExecutor:
    """Starts every task at once and fails it (a helper process that died)."""

    def __init__(self):
        self.submitted = 0

    def submit(self, fn, *args):
        self.submitted += 1
        future = Future()
        future.set_running_or_notify_cancel()
        future.set_exception(RuntimeError("the helper process died"))
        return future


class _ClosedExecutor:
    def submit(self, fn, *args):
        raise RuntimeError("cannot schedule new futures after shutdown")


def test_a_helper_that_fails_or_is_closed_leaves_the_runs_to_this_thread_with_the_same_figures():
    alone = _sweep()
    failing = _FailingExecutor()
    _same(alone, _sweep(executor=failing))
    assert failing.submitted == len(alone.rates)
    _same(alone, _sweep(executor=_ClosedExecutor()))
