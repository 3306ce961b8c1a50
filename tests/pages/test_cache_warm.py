"""The explainer's background warm-up (pages/_ui/cache.py ``warm_block_sizes``, issue 24): every block
size the slider offers for the default scenario ends in the caches the redraw reads, after app.py's
other warm-ups, and a failure at one block size leaves the others warmed."""
from __future__ import annotations

import dataclasses
import threading

from allocator.engine.scenario import Scenario
from pages._ui import cache, heavy
from pages._ui.url_params import BLOCK_SIZES


def test_the_warm_up_covers_every_slider_position(monkeypatch):
    calls = []
    monkeypatch.setattr(cache, "compute", lambda sc: calls.append(("compute", sc)) or (None, _results(), None))
    monkeypatch.setattr(cache, "timings", lambda sc, gpu, model: calls.append(("timings", sc, gpu, model)))
    monkeypatch.setattr(cache, "sweep_chart", lambda sc, reserve: calls.append(("chart", sc)))
    assert cache.warm_block_sizes(settle_s=0, pause_s=0) == list(BLOCK_SIZES)
    computed = [c[1] for c in calls if c[0] == "compute"]
    assert computed == [dataclasses.replace(Scenario(), block_size=b) for b in BLOCK_SIZES]
    # the redraw's own keys: the default GPU and model the sidebar starts with, each block size's chart
    assert {(c[2], c[3]) for c in calls if c[0] == "timings"} == {(cache.CHOICE_DEFAULTS["gpu"],
                                                                   cache.CHOICE_DEFAULTS["model"])}
    assert [c[1].block_size for c in calls if c[0] == "chart"] == list(BLOCK_SIZES)


def test_it_waits_for_the_other_warm_ups_and_survives_a_failure(monkeypatch, capsys):
    other_done = threading.Event()
    order = []

    def other():
        other_done.wait(10)
        order.append("other")
    rival = threading.Thread(target=other, name="warm-rate-sweep", daemon=True)
    rival.start()

    def compute(sc):
        if sc.block_size == 4:
            raise ValueError("no room")
        order.append(sc.block_size)
        return None, _results(), None
    monkeypatch.setattr(cache, "compute", compute)
    monkeypatch.setattr(cache, "timings", lambda *a: None)
    monkeypatch.setattr(cache, "sweep_chart", lambda *a: None)
    box = []
    warm = threading.Thread(target=lambda: box.append(cache.warm_block_sizes((2, 4, 8), settle_s=0, pause_s=0)),
                            name=cache.WARM_THREAD, daemon=True)
    warm.start()
    warm.join(0.3)
    assert order == [] and warm.is_alive()                   # still waiting for the other warm-up
    other_done.set()
    warm.join(10)
    assert order == ["other", 2, 8] and box == [[2, 8]]
    assert "could not pre-build the explainer at block size 4: no room" in capsys.readouterr().err


def test_the_warmed_results_are_what_a_page_reads_and_stay_within_the_store():
    heavy.STORE.clear()
    done = cache.warm_block_sizes((8, 32), settle_s=0, pause_s=0)
    assert done == [8, 32]
    for b in done:                                              # cache hits: the same objects come back
        sc = dataclasses.replace(Scenario(), block_size=b)
        assert cache.compute(sc) is cache.compute(sc)
        hit, _ = heavy.STORE.get(next(k for k in heavy.STORE._items if f"block_size={b}," in str(k)))
        assert hit
    assert 0 < heavy.STORE.bytes <= heavy.STORE_BYTES
    heavy.STORE.clear()


def _results():
    class Summary:
        summary = {}
    return {"reserve_max": Summary()}
