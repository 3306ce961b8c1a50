"""Issue 24: the Throughput page says where a sweep it did not run itself came from -- the server's
start-up computation of the default, or another student's identical sweep -- and names the start-up
computation (not "another student") in the progress of a session waiting for it."""
from __future__ import annotations

import threading

from pages._ui.heavy import Store
from tests.conftest import open_page
from tests.pages.test_heavy import _fake_sweeps

SMALL = {"tp_requests": 200, "tp_rates": "0.5, 1, 2, 4"}


def _small_key(sweep_cache):
    return sweep_cache.sweep_key("a100-40gb", "opt-13b", "auto", 200, (0.5, 1.0, 2.0, 4.0), 16)


def test_a_session_waiting_for_the_start_up_sweep_is_told_it_is_the_servers_not_a_students(monkeypatch):
    started, seen, release = threading.Event(), threading.Event(), threading.Event()
    calls, waiting_progress = [], []

    def body(progress):
        progress(1, 2, "Paged at 1 requests/s")
        started.set()
        assert release.wait(20)
    sc = _fake_sweeps(monkeypatch, Store(), calls, body)
    key = sc.sweep_key("a100-40gb", "opt-13b", "auto", 100, (1.0, 2.0), 16)
    warm = threading.Thread(target=lambda: sc.cached_sweep(key, by=sc.STARTUP))
    warm.start()
    assert started.wait(20)

    def second(done, total, text):
        waiting_progress.append((done, total, text))
        seen.set()
    student = threading.Thread(target=lambda: sc.cached_sweep(key, second, by="session-b"))
    student.start()
    assert seen.wait(20)
    release.set()
    warm.join(20)
    student.join(20)
    assert len(calls) == 1
    assert waiting_progress[0] == (1, 2, "Paged at 1 requests/s, in the server's start-up computation of the "
                                         "default sweep")
    assert sc.origin(key) == sc.STARTUP                    # computed by the warm-up, not by the student


def test_the_page_says_a_sweep_was_precomputed_at_start_up_or_run_by_another_student():
    from allocator.viz.claims.throughput import sweep_source_note
    from pages._ui import heavy, sweep_cache
    key = _small_key(sweep_cache)
    heavy.STORE.clear()
    sweep_cache.cached_sweep(key, by=sweep_cache.STARTUP)
    captions = [c.value for c in open_page("pages/throughput.py", SMALL).caption]
    assert sweep_source_note("start-up") in captions and sweep_source_note("shared") not in captions
    assert "precomputed by the server at start-up" in sweep_source_note("start-up")
    heavy.STORE.clear()
    sweep_cache.cached_sweep(key, by="another session's id")
    captions = [c.value for c in open_page("pages/throughput.py", SMALL).caption]
    assert sweep_source_note("shared") in captions and sweep_source_note("start-up") not in captions
    heavy.STORE.clear()                                    # the page's own run: no line about its source
    captions = [c.value for c in open_page("pages/throughput.py", SMALL).caption]
    assert sweep_cache.origin(key) not in (None, sweep_cache.STARTUP)
    assert not any(c in captions for c in (sweep_source_note("start-up"), sweep_source_note("shared")))
    assert sweep_source_note(None) is None
