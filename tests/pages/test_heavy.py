"""Issue 19: heavy work bounded per server -- one queue in arrival order, a store bounded by memory,
identical work done once however many sessions ask at the same moment."""
from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from pages._ui.heavy import HeavyQueue, Store, size_of


def test_the_queue_runs_one_at_a_time_in_arrival_order_and_counts_who_is_ahead():
    """Job 0 holds the one slot until jobs 1-4 have each queued (events, not sleeps: a busy CI machine
    once let job 0 finish before job 4 arrived); each sees how many run or wait before it."""
    q = HeavyQueue(slots=1)
    order, running, peak, ahead_seen = [], [0], [0], {}
    lock = threading.Lock()
    first_running, release = threading.Event(), threading.Event()
    queued = [threading.Event() for _ in range(5)]

    def job(i):
        def waiting(ahead, waited):
            ahead_seen.setdefault(i, ahead)
            queued[i].set()
        with q.slot(waiting):
            with lock:
                running[0] += 1
                peak[0] = max(peak[0], running[0])
                order.append(i)
            if i == 0:
                first_running.set()
                release.wait(10)
            else:
                time.sleep(0.01)
            with lock:
                running[0] -= 1

    threads = [threading.Thread(target=job, args=(i,)) for i in range(5)]
    threads[0].start()
    assert first_running.wait(10)
    for i in range(1, 5):                        # arrive in order 1..4, each queued before the next
        threads[i].start()
        assert queued[i].wait(10)
    release.set()
    for t in threads:
        t.join(10)
    assert order == [0, 1, 2, 3, 4] and peak[0] == 1
    assert [ahead_seen[i] for i in range(1, 5)] == [1, 2, 3, 4]      # "n ahead of you"
    assert q.state() == (0, 0)


def test_a_wait_that_times_out_leaves_the_queue_clean():
    q = HeavyQueue(slots=1)
    with q.slot():
        with pytest.raises(TimeoutError):
            with q.slot(timeout_s=0.2):
                pass
        assert q.state() == (1, 0)
    assert q.state() == (0, 0)


def test_the_store_is_bounded_by_bytes_and_entries_least_recent_first():
    store = Store(max_bytes=3_500_000)
    for i in range(3):
        store.put(("f", i), np.zeros(1_000_000 // 8 * 1, dtype=np.float64).repeat(1), group="f", max_entries=10)
    assert len(store) == 3 and store.bytes <= 3_500_000
    store.get(("f", 0))                                   # 0 is now the most recent
    store.put(("f", 3), np.zeros(125_000), group="f", max_entries=10)
    assert store.get(("f", 1))[0] is False and store.get(("f", 0))[0] and store.get(("f", 3))[0]
    store.put(("g", 0), np.zeros(10), group="g", max_entries=1)
    store.put(("g", 1), np.zeros(10), group="g", max_entries=1)
    assert not store.get(("g", 0))[0] and store.get(("g", 1))[0]
    store.put(("f", 9), np.zeros(1_000_000), group="f", max_entries=10)    # 8 MB: larger than the budget
    assert not store.get(("f", 9))[0] and store.bytes <= 3_500_000


def test_identical_work_asked_at_once_is_computed_once():
    store, calls = Store(), []

    def compute():
        calls.append(1)
        time.sleep(0.3)
        return "result"

    out = []
    threads = [threading.Thread(target=lambda: out.append(store.compute_once(("k", 1), compute, group="k",
                                                                            max_entries=4))) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert out == ["result"] * 6 and len(calls) == 1


def test_a_failed_computation_is_not_stored_and_a_waiter_tries_itself():
    store, calls = Store(), []

    def compute():
        calls.append(1)
        if len(calls) == 1:
            time.sleep(0.2)
            raise ValueError("bad settings")
        return 42

    errors, out = [], []

    def first():
        try:
            store.compute_once(("k",), compute, group="k", max_entries=2)
        except ValueError as exc:
            errors.append(str(exc))
    t = threading.Thread(target=first)
    t.start()
    time.sleep(0.05)
    out.append(store.compute_once(("k",), compute, group="k", max_entries=2))
    t.join(5)
    assert errors == ["bad settings"] and out == [42] and len(calls) == 2


def test_size_of_counts_arrays_frames_and_nested_objects():
    import pandas as pd
    arr = np.zeros(1000)
    assert 8000 <= size_of(arr) < 9000
    assert size_of({"a": arr, "b": [arr, arr]}) < 10_000                    # one array counted once
    assert size_of(pd.DataFrame({"x": np.zeros(1000)})) >= 8000


def test_the_default_lesson_is_light_and_the_heaviest_link_is_heavy():
    from allocator.scenario import Scenario
    from pages._ui.cache import is_heavy
    assert not is_heavy(Scenario()) and not is_heavy(Scenario(block_size=24))
    assert not is_heavy(Scenario(workload="azure-conv", count=40))
    assert is_heavy(Scenario(workload="azure-conv", count=200, block_size=1, total_slots=1 << 20,
                             max_new_tokens=32768, shared_prefix=4096, steps_per_second=200))
    assert is_heavy(Scenario(workload="azure-conv", count=200, shared_prefix=4096))        # 1M tokens
