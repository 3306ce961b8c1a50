"""``make bench``'s browser sections (tests/tools/bench_pages.py) without a browser: the sections are
registered, the suite runs last, a missing Chromium prints "skipped" and counts nothing, a failure
keeps the rows measured before it and counts one miss, and the poll waits for a quiet page and
reports when its final state first showed."""
from __future__ import annotations

import itertools

import pytest

from tests.tools import bench, browser_timing
from tests.tools.browser_timing import Skip, run_section, watch


def test_sections_are_registered_and_the_suite_runs_last(monkeypatch, capsys):
    for name in ("pages", "explainerbrowser", "throughputbrowser", "kernelbrowser", "suite"):
        assert name in bench.SECTIONS
    ran = []
    monkeypatch.setattr(bench, "SECTIONS", {name: (lambda n=name: ran.append(n) or [True])
                                            for name in ("suite", "cli", "pages")})
    monkeypatch.setattr(bench, "_kernel_section", lambda: lambda: ran.append("kernels") or [False])
    assert bench.main([]) == 0
    assert ran == ["cli", "pages", "kernels", "suite"]
    assert "3 of 4 targets met" in capsys.readouterr().out
    ran.clear()
    bench.main(["cli"])                          # naming sections leaves the suite out
    assert ran == ["cli"]


def test_a_skipped_section_counts_nothing_and_a_failed_one_keeps_its_rows(capsys):
    def missing(rows, met):
        raise Skip("/usr/bin/chromium not found")
    assert run_section("pages", "every page", missing) == []
    assert "skipped" in capsys.readouterr().out

    def fails(rows, met):
        rows.append(["first page", "0.50", "<= 3", True, ""])
        met.append(True)
        pytest.fail("streamlit did not answer /_stcore/health within 60 s")
    assert run_section("pages", "every page", fails) == [True, False]
    out = capsys.readouterr().out
    assert "first page" in out and "pages stopped here" in out and "did not answer" in out


class _Page:
    """Hands ``watch`` a scripted sequence of page states."""

    def __init__(self, states):
        self.states = iter(states)
        self.last = None

    def evaluate(self, _js, _arg=None):
        self.last = next(self.states, self.last)
        return dict(self.last)


def _state(**kw):
    base = {"script": "notRunning", "stale": 0, "spinners": 0, "skeletons": 0, "charts": 1, "drawn": 1,
            "h1": "Capacity", "bar": None, "ran": True, "found": None}
    return {**base, **kw}


def test_watch_waits_for_a_quiet_page_and_times_its_first_final_state(monkeypatch):
    clock = itertools.count(0.0, 0.1)                              # every read of the clock: +0.1 s
    monkeypatch.setattr(browser_timing.time, "perf_counter", lambda: next(clock))
    monkeypatch.setattr(browser_timing.time, "sleep", lambda s: None)
    states = [_state(script="running", drawn=0), _state(drawn=0, skeletons=1),   # finished, chart not drawn
              _state(), _state(bar=50), _state()] + [_state()] * 20
    seen, last = watch(_Page(states), 0.0, browser_timing.settled, marks={"bar": lambda s: s["bar"] is not None},
                       quiet_s=0.5)
    assert seen["bar"] == pytest.approx(0.3)       # the 4th read (the clock reads 0.0, 0.1, ...)
    assert seen["done"] == pytest.approx(0.4)      # the state that stayed, first seen at the 5th read
    assert last["drawn"] == 1


def test_watch_gives_up_after_its_timeout(monkeypatch):
    clock = itertools.count(0.0, 1.0)
    monkeypatch.setattr(browser_timing.time, "perf_counter", lambda: next(clock))
    monkeypatch.setattr(browser_timing.time, "sleep", lambda s: None)
    with pytest.raises(TimeoutError, match="no answer within 5 s"):
        watch(_Page([_state(script="running")]), 0.0, browser_timing.settled, timeout_s=5)


def test_the_bare_reference_page_holds_one_chart_and_its_maps_are_the_explainers():
    """The bench's floor rows (bench_pages.floor_rows) say "the explainer's maps figure": the bare page
    must send exactly the figure the explainer sends for the default lesson, and nothing else."""
    import json
    import os

    from streamlit.testing.v1 import AppTest

    from tests.conftest import APP_PATH, ROOT
    from tests.tools.bench_pages import FLOOR_PAGE

    def charts(script, **query):
        at = AppTest.from_file(os.path.join(ROOT, script), default_timeout=120)
        at.query_params.update(query)
        at.run()
        assert not at.exception
        return at, {c.key: json.loads(c.proto.spec) for c in at.get("plotly_chart")}

    at, small = charts(FLOOR_PAGE)
    assert list(small) == ["small"] and len(at.main.children) == 2            # a title and the chart
    assert [t["type"] for t in small["small"]["data"]] == ["heatmap"]
    at, bare = charts(FLOOR_PAGE, chart="maps")
    assert list(bare) == ["maps"] and len(at.main.children) == 2
    _, app = charts(APP_PATH)                                               # the app opens on the explainer
    assert bare["maps"] == app["maps"] and len(bare["maps"]["frames"]) > 1
