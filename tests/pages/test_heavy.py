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
    """The first caller fails only once a second is provably waiting for it (the waiter's
    ``on_other`` has been called), so the order never depends on how busy the machine is."""
    store, calls = Store(), []
    started, waiter_in = threading.Event(), threading.Event()

    def compute():
        calls.append(1)
        if len(calls) == 1:
            started.set()
            assert waiter_in.wait(60), "the second caller never waited"
            raise ValueError("bad settings")
        return 42

    errors = []

    def first():
        try:
            store.compute_once(("k",), compute, group="k", max_entries=2)
        except ValueError as exc:
            errors.append(str(exc))
    t = threading.Thread(target=first)
    t.start()
    assert started.wait(60)
    out = store.compute_once(("k",), compute, group="k", max_entries=2, on_other=lambda waited: waiter_in.set())
    t.join(60)
    assert errors == ["bad settings"] and out == 42 and len(calls) == 2


def test_size_of_counts_arrays_frames_and_nested_objects():
    import pandas as pd
    arr = np.zeros(1000)
    assert 8000 <= size_of(arr) < 9000
    assert size_of({"a": arr, "b": [arr, arr]}) < 10_000                    # one array counted once
    assert size_of(pd.DataFrame({"x": np.zeros(1000)})) >= 8000


def test_the_default_lesson_is_light_and_the_heaviest_link_is_heavy():
    from allocator.engine.scenario import Scenario
    from pages._ui.cache import is_heavy
    assert not is_heavy(Scenario()) and not is_heavy(Scenario(block_size=24))
    assert not is_heavy(Scenario(workload="azure-conv", count=40))
    assert is_heavy(Scenario(workload="azure-conv", count=200, block_size=1, total_slots=1 << 20,
                             max_new_tokens=32768, shared_prefix=4096, steps_per_second=200))
    assert is_heavy(Scenario(workload="azure-conv", count=200, shared_prefix=4096))        # 1M tokens


# ------------------------------------------------------------------ the Throughput page's sweeps

def _fake_sweeps(monkeypatch, store, calls, body=None):
    """Point the sweep cache at ``store`` and at a stand-in for the core's ``rate_sweep`` that returns
    a 1 MB payload (8 bytes x 125,000) and records each call; ``body(progress)`` runs inside it."""
    from pages._ui import heavy, sweep_cache

    def fake_rate_sweep(cost, rates, *, progress=None, **kwargs):
        calls.append(rates)
        if body is not None:
            body(progress)
        return {"rates": rates, "latencies": np.zeros(125_000)}
    monkeypatch.setattr(heavy, "STORE", store)
    monkeypatch.setattr(sweep_cache, "rate_sweep", fake_rate_sweep)
    return sweep_cache


def test_throughput_sweeps_live_in_the_shared_store_bounded_by_bytes_not_only_by_count(monkeypatch):
    """Five 1 MB sweeps into a 3.5 MB store: the store keeps the three most recent (by bytes; the
    entry cap of 12 alone would have kept all five), and a dropped sweep is computed again."""
    store, calls = Store(max_bytes=3_500_000), []
    sc = _fake_sweeps(monkeypatch, store, calls)
    keys = [sc.sweep_key("a100-40gb", "opt-13b", "auto", 100, (float(i + 1),), 16) for i in range(5)]
    for k in keys:
        assert sc.cached_sweep(k)["rates"] == k[4]
    assert len(calls) == 5 and len(store) == 3 and 3_000_000 <= store.bytes <= 3_500_000
    assert [sc.is_cached(k) for k in keys] == [False, False, True, True, True]
    sc.cached_sweep(keys[4])                               # a hit: not computed again
    assert len(calls) == 5
    sc.cached_sweep(keys[0])                               # dropped for memory: computed again
    assert len(calls) == 6 and sc.is_cached(keys[0]) and not sc.is_cached(keys[2])


def test_two_students_asking_for_one_sweep_run_it_once_and_both_see_its_progress(monkeypatch):
    """The second student waits for the first one's run (no second run) and is shown that run's real
    progress, marked as another student's; both get the same result. Events, not sleeps."""
    started, seen, release = threading.Event(), threading.Event(), threading.Event()
    calls, second_progress, out = [], [], {}

    def body(progress):
        progress(1, 2, "Paged at 1 requests/s")
        started.set()
        assert release.wait(20)
        progress(2, 2, "Paged at 2 requests/s")

    sc = _fake_sweeps(monkeypatch, Store(), calls, body)
    key = sc.sweep_key("a100-40gb", "opt-13b", "auto", 100, (1.0, 2.0), 16)

    def second(done, total, text):
        second_progress.append((done, total, text))
        seen.set()
    first = threading.Thread(target=lambda: out.setdefault("first", sc.cached_sweep(key, lambda *a: None)))
    first.start()
    assert started.wait(20)
    other = threading.Thread(target=lambda: out.setdefault("second", sc.cached_sweep(key, second)))
    other.start()
    assert seen.wait(20)                                   # the waiting student saw the running sweep's progress
    release.set()
    first.join(20)
    other.join(20)
    assert len(calls) == 1 and out["first"] is out["second"]
    assert second_progress[0] == (1, 2, "Paged at 1 requests/s, in the same sweep another student started")


def test_the_store_counts_a_real_sweeps_latency_arrays():
    """The byte bound sees what a sweep holds: its per-request latency arrays (the bulk of it)."""
    from allocator.studies.rate_sweep import rate_sweep
    from allocator.cost.roofline import cost_model
    sweep = rate_sweep(cost_model("a100-40gb", "opt-13b", "auto"), (1.0, 2.0), requests=100, block_size=16)
    arrays = sum(a.nbytes for runs in sweep.latencies.values() for a in runs.values())
    assert arrays == 8 * 3 * 100 * len(sweep.points)        # ttft, tpot, e2e per finished request, float64
    assert arrays <= size_of(sweep) <= arrays + 200_000


def test_a_sweep_the_queue_did_not_reach_is_named_a_busy_server_not_bad_settings(monkeypatch):
    """Six distinct 5,000-request sweeps take turns for minutes; one that waited past the queue's
    limit is shown as a busy server with what to do (no traceback, no progress bar left over), and
    nothing is stored for it."""
    from pages._ui import heavy, sweep_cache
    from tests.conftest import open_page, seen

    def timed_out(what, *args, **kwargs):
        raise TimeoutError("the server's heavy-work queue did not reach this run in 600 s")
    monkeypatch.setattr(heavy, "run_heavy", timed_out)
    at = open_page("pages/throughput.py", {"tp_requests": 200, "tp_rates": "0.7, 1.3, 2.9"})
    errors = [seen(e.value) for e in at.error]
    assert errors == ["The server is too busy to run this sweep now: the server's heavy-work queue did not reach "
                      "this run in 600 s (the class's heavy runs take turns); change a setting or reload the page "
                      "in a few minutes to try again."], errors
    assert not at.get("progress")
    assert not sweep_cache.is_cached(sweep_cache.sweep_key("a100-40gb", "opt-13b", "auto", 200, (0.7, 1.3, 2.9), 16))


# ------------------------------------------------------------------ a MemoryError in heavy work (issue 42)

def test_a_memory_error_in_heavy_work_is_one_plain_message_not_a_traceback(monkeypatch):
    """The system refusing memory inside a page's heavy work (a container cap below the memory
    guard's quarter of the machine) reaches the page as a ValueError with one plain message, queued or
    not, and the queue is left free; on the Throughput page it is one error box, no traceback."""
    from pages._ui import heavy, sweep_cache
    from tests.conftest import open_page, seen

    def refused(*args, **kwargs):
        raise MemoryError
    with pytest.raises(heavy.OutOfMemory, match=r"^Simulating the sweep ran out of memory on this server"):
        heavy.run_heavy("Simulating the sweep", refused)
    assert heavy.QUEUE.state() == (0, 0)
    light = heavy.shared("Replaying", heavy=lambda *a: False)(lambda n: refused())
    with pytest.raises(ValueError, match="try fewer requests or a smaller pool"):
        light(3)

    monkeypatch.setattr(sweep_cache, "rate_sweep", refused)
    at = open_page("pages/throughput.py", {"tp_requests": 200, "tp_rates": "0.7, 1.3, 2.7"})
    errors = [seen(e.value) for e in at.error]
    assert errors == ["These settings cannot run: Simulating the sweep ran out of memory on this server (the system "
                      "refused more); try fewer requests or a smaller pool."], errors
