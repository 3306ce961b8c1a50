"""The kernel page shows the sweep of the shape its radio shows, and nothing else.

* The Shape radio keeps its choice across page switches (Streamlit drops a widget's state when a
  run does not draw it), so coming back from another page never shows a tiny sweep under a
  radio reset to "realistic".
* A sweep of another shape than the one selected is never shown (nor drawn in the two-costs chart).
* A second tab (another session of the same server) sees this server's kept sweep of the selected
  shape at once, labelled as cached with its date and backend; **Run sweep** then measures again
  (a new seed) instead of handing back the kept one.

The sweep itself is replaced by a fake that records its calls, so these tests take seconds; the
real sweep is tested in ``tests/kernels/test_page_kernel.py``.
"""
from __future__ import annotations

from dataclasses import asdict

import pytest

from tests.conftest import open_page


def _fake_result(shape, backend: str, seed: int):
    import kernels.sweep.run as ks
    from kernels.sweep.stats import SLOWER
    rows = []
    for bs in ks.DEFAULT_BLOCK_SIZES:       # seed-dependent overheads, so two runs are told apart
        over = 1.5 + seed / 10
        rows.append({"block_size": bs, "paged_s": 1e-3 * over, "contiguous_s": 1e-3, "paged_ms": over,
                     "contiguous_ms": 1.0, "paged_ms_q1": over, "paged_ms_q3": over, "contiguous_ms_q1": 1.0,
                     "contiguous_ms_q3": 1.0, "overhead": over, "overhead_ci_low": over - 0.01,
                     "overhead_ci_high": over + 0.01, "verdict": SLOWER, "pairs": 3, "paged_GBps": 1.0,
                     "contiguous_GBps": 1.0, "paged_peak_fraction": None, "max_abs_diff": 0.0})
    meta = {"backend": backend, "device": "CPU: test machine", "shape": asdict(shape), "kv_bytes": shape.kv_bytes,
            "llc_bytes": None, "timer": "test", "confidence": 0.95, "launch": None, "warnings": [],
            "date": f"2026-12-01T20:1{seed}:05+00:00", "seed": seed}
    return ks.SweepResult(rows=rows, meta=meta)


@pytest.fixture
def sweeps(monkeypatch):
    """A fresh server (nothing swept yet) whose sweep is a fake; yields the list of (shape, seed) it ran."""
    import kernels.sweep.run as ks
    monkeypatch.setattr(ks, "_RESULTS", ks.OrderedDict())
    calls = []

    def fake(block_sizes, shape, backend, repeats=None, seed=0, progress=None, budget_s=None):
        calls.append((shape, seed))
        return _fake_result(shape, backend, seed)
    monkeypatch.setattr(ks, "sweep", fake)
    return calls


def _kernel_page():
    return open_page("pages/kernel.py")


def _options(at):
    radio = at.radio(key="kernel_shape")
    return (next(o for o in radio.options if o.startswith("realistic")),
            next(o for o in radio.options if o.startswith("tiny")))


def _shown_rows(at) -> list[float] | None:
    """The overheads of the live sweep table on screen (None when no live sweep is shown)."""
    frames = [d.value for d in at.dataframe if "block size (slots)" in d.value.columns]
    return list(frames[0]["overhead (×)"]) if frames else None


def _shape_line(at) -> str:
    return next((m.value for m in at.markdown if m.value.startswith("Backend `")), "")


def test_the_shape_radio_and_the_result_shown_agree_across_page_switches(sweeps):
    from kernels.sweep.data import TINY_SHAPE
    at = _kernel_page()
    realistic, tiny = _options(at)
    at.radio(key="kernel_shape").set_value(tiny).run()
    at.button(key="kernel_run_sweep").click().run()
    assert not at.exception and not at.error
    assert [s for s, _ in sweeps] == [TINY_SHAPE]
    assert "2 sequences × 64 tokens" in _shape_line(at) and _shown_rows(at) == [1.5] * 9
    # away to another page and back through the navigation: the radio still says tiny, beside the tiny result
    at.switch_page("pages/capacity.py").run()
    assert not at.exception
    at.switch_page("pages/kernel.py").run()
    assert not at.exception and not at.error
    assert at.radio(key="kernel_shape").value == tiny
    assert "2 sequences × 64 tokens" in _shape_line(at) and _shown_rows(at) == [1.5] * 9
    # choose the realistic shape: the tiny sweep leaves the screen and the two-costs chart, nothing runs
    at.radio(key="kernel_shape").set_value(realistic).run()
    assert not at.exception and not at.error
    assert _shown_rows(at) is None and _shape_line(at) == ""
    assert any("Press **Run sweep** to measure. Nothing runs until you do." in i.value for i in at.info)
    assert not any("Overhead drawn from: live" in c.value or "Not drawn: live" in c.value for c in at.caption)
    assert len(sweeps) == 1
    # and back to tiny: this session's own tiny run again, still called a run for this request
    at.radio(key="kernel_shape").set_value(tiny).run()
    assert _shown_rows(at) == [1.5] * 9
    assert not any(i.value.startswith("**From this server's cache:**") for i in at.info)


def test_a_second_tab_sees_the_kept_sweep_at_once_and_can_measure_again(sweeps):
    from kernels.attention.backend import detect
    from kernels.sweep.data import TINY_SHAPE
    first = _kernel_page()
    _, tiny = _options(first)
    first.radio(key="kernel_shape").set_value(tiny).run()
    first.button(key="kernel_run_sweep").click().run()
    assert sweeps == [(TINY_SHAPE, 0)]

    second = _kernel_page()                          # another tab: a new session of the same server
    assert _shown_rows(second) is None               # its radio shows "realistic", which nobody measured
    second.radio(key="kernel_shape").set_value(tiny).run()
    assert not second.exception and not second.error
    assert sweeps == [(TINY_SHAPE, 0)]               # nothing ran: the kept result is shown at once
    assert _shown_rows(second) == [1.5] * 9
    note = [i.value for i in second.info if i.value.startswith("**From this server's cache:**")]
    backend = detect("sweep").name
    assert note == [f"**From this server's cache:** measured 2026-12-01 20:10:05 UTC on `{backend}` (CPU: test "
                    "machine) for an earlier visitor, with the shape selected above; nothing ran for you. Press "
                    "**Run sweep** to measure again."]
    assert "2 sequences × 64 tokens" in _shape_line(second)
    assert not any("Nothing runs until you do" in i.value for i in second.info)

    # Run sweep measures again (a new seed), and the new measurement replaces the kept one for both tabs
    second.button(key="kernel_run_sweep").click().run()
    assert not second.exception and not second.error
    assert sweeps == [(TINY_SHAPE, 0), (TINY_SHAPE, 1)]
    assert _shown_rows(second) == [1.6] * 9
    assert not any(i.value.startswith("**From this server's cache:**") for i in second.info)
    third = _kernel_page()
    third.radio(key="kernel_shape").set_value(tiny).run()
    assert _shown_rows(third) == [1.6] * 9 and sweeps[-1] == (TINY_SHAPE, 1)
    assert any("measured 2026-12-01 20:11:05 UTC" in i.value for i in third.info)
