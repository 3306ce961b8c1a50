"""AppTest of the live-kernel page: backend named, correctness check shown, sweep button works."""
from __future__ import annotations

import json
import math
import os

import pytest
import torch
from streamlit.testing.v1 import AppTest

import kernels.sweep.data

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CUDA = torch.cuda.is_available()


def _page() -> AppTest:
    at = AppTest.from_file(os.path.join(ROOT, "app.py"), default_timeout=600)  # a hang guard: a budgeted sweep may take its 60 s limit on a busy machine
    at.switch_page("pages/kernel.py")
    at.run()
    assert not at.exception, at.exception
    return at


def _text(at: AppTest) -> str:
    parts = [m.value for m in at.markdown] + [c.value for c in at.caption] + [i.value for i in at.info]
    return "\n".join(str(p) for p in parts)


@pytest.fixture(autouse=True)
def _fresh_server_caches(monkeypatch):
    """Each test is a fresh server: nothing checked or swept yet in this process."""
    import kernels.sweep.run as ks
    monkeypatch.setattr(ks, "_CHECKS", {})
    monkeypatch.setattr(ks, "_RESULTS", ks.OrderedDict())


def test_kernel_page_loads_without_running_anything_then_checks_on_demand():
    at = _page()
    text = _text(at)
    assert "Backend for timing:" in text
    expected = "cuda" if CUDA else "torch-cpu"
    assert f"`{expected}`" in text
    assert not at.metric                                  # issue 24: nothing heavy on load
    assert "Nothing runs until you do" in text
    at.button(key="kernel_run_check").click().run()
    assert not at.exception and not at.error
    labels = [m.label for m in at.metric]
    check = "cuda" if CUDA else "triton-interpreter"
    assert any(check in lbl for lbl in labels), labels
    for m in at.metric:
        assert float(m.value) < 1e-3                      # max abs error vs reference
    assert all("run just now" in s.value for s in at.success)
    if not CUDA:                                          # both Triton paths are checked, and really differ
        assert any("single pass" in lbl for lbl in labels) and any("split-KV, 2 splits" in lbl for lbl in labels)
    # another visitor of the same server gets the result at once, and is told where it came from
    other = _page()
    assert len(other.metric) == len(at.metric)
    assert all("from this server's cache, run at" in s.value for s in other.success)
    assert not [b for b in other.button if b.key == "kernel_run_check"]
    if not CUDA and not any(f.startswith("kernel_gpu_") for f in os.listdir(os.path.join(ROOT, "assets"))):
        assert "No GPU measurement is shipped yet" in text


def test_kernel_page_shows_the_sm90_compile_record_and_a_labelled_prediction():
    from kernels import gpu_check
    from kernels.sweep import predict
    from kernels.compile_check import facts_text, load_report
    from kernels.sweep.figures import percent_span
    at = _page()
    text = _text(at)
    assert "**Compiled for H200 / sm_90**" in text
    rep = load_report()
    assert facts_text(rep) in text                        # the page quotes the record, nothing else
    from kernels.compile_check import TRITON36_OUT, compat_text
    assert compat_text(rep, load_report(TRITON36_OUT)) in text
    assert "**These are predictions, not measurements.**" in text
    h, hkv, d = gpu_check.TIMING_HEADS
    for n, t in gpu_check.TIMING_SHAPES:
        rows = predict.prediction_table(rep, n, t, h, hkv, d, "bf16")
        span = percent_span([r["fraction_of_nominal"] for r in rows])
        assert f"**Predicted, {n} × {t:,} tokens**" in text and f"{span} of the data sheet's 4.8 TB/s" in text
        assert f"{rows[0]['num_splits']} splits" in text
    fig = _figure(at, 0)
    assert "not a measurement" in fig["layout"]["title"]["text"]
    assert all("predicted" in t["name"] or "device copy" in t["name"] or "data sheet" in t["name"]
               for t in fig["data"])
    # the prediction tables are HTML tables with short headers (issue 40); each short header stands for a
    # column of predict.prediction_frame, predicted or from the record (tests/pages/test_page_kernel_tables.py)
    frames = [t.value for t in at.table if "pred. GB/s" in t.value.columns]
    assert len(frames) == len(gpu_check.TIMING_SHAPES)
    from kernels.sweep.figures import prediction_headers
    headers = prediction_headers(predict.H200.name, predict.H200.sms, predict.H200.nominal_Bps / 1e9)
    assert list(frames[0].columns) == [short for short, _ in headers.values()]
    assert all(c.startswith("predicted") or "(record)" in c or c in ("block size (predicted launch)", "kernel, splits",
               "programs per SM (limit)", "waves", "K/V in flight per SM (KiB)") for c in headers)


def _figure(at: AppTest, index: int) -> dict:
    return json.loads(at.get("plotly_chart")[index].proto.spec)


def test_kernel_page_tiny_sweep():
    at = _page()
    radio = at.radio(key="kernel_shape")
    tiny = next(o for o in radio.options if o.startswith("tiny"))
    radio.set_value(tiny).run()
    at.button(key="kernel_run_sweep").click().run()
    assert not at.exception, at.exception
    assert not at.error, [e.value for e in at.error]
    assert len(at.get("plotly_chart")) == 4               # prediction, latency, overhead, two costs
    assert any("2 sequences × 64 tokens" in md.value for md in at.markdown)
    live = at.session_state["kernel_sweep_result"]
    df = next(d.value for d in at.dataframe if "block size (slots)" in d.value.columns)
    assert list(df["block size (slots)"]) == [1, 2, 4, 8, 16, 32, 64, 128, 256]
    assert list(df["overhead (×)"]) == [round(r["overhead"], 3) for r in live.rows]
    assert list(df["verdict"]) == [r["verdict"] for r in live.rows]
    # the verdict shown is the one computed from these rows
    shown = [b.value for b in (at.success if live.measurable else at.info)]
    assert live.verdict_text() in shown
    # the two-costs chart draws the live overhead only when it is measurable and read from memory
    from kernels.sweep.figures import drawable
    ok, why = drawable(live)
    if not CUDA:
        assert not ok and "last-level cache" in why         # the tiny shape fits in the CPU's cache
    two_costs = _figure(at, 3)
    assert live.meta["repeats"] == "auto" and live.meta["budget_s"] == 45.0
    # a budgeted sweep states an upper bound it keeps to, rounded up (kernels/sweep/plan.py)
    assert live.meta["estimate_is_bound"]
    from tests.tools.bench_pages import TOOK_RE                 # make bench reads the same two figures
    shown = [TOOK_RE.search(c.value) for c in at.caption if TOOK_RE.search(c.value)]
    assert [(int(m[1]), int(m[2])) for m in shown] == [(round(live.meta["wall_s"]),
                                                       math.ceil(live.meta["estimate_s"]))]
    assert any(f"Took {live.meta['wall_s']:.0f} s against an estimate of at most "
               f"{math.ceil(live.meta['estimate_s'])} s" in c.value
               and "run for this request" in c.value for c in at.caption)
    names = [t.get("name", "") for t in two_costs["data"]]
    assert any("live, torch-cpu" in n or "live, cuda" in n for n in names) == ok
    caption = " ".join(c.value for c in at.caption)
    assert ("Overhead drawn from: live" in caption) == ok
    assert ("Not drawn: live" in caption and why in caption) == (not ok)


def test_noise_is_called_noise_and_not_drawn(monkeypatch):
    import kernels.sweep.run as ks
    from kernels.sweep.stats import NO_DIFFERENCE
    rows = []
    for bs in ks.DEFAULT_BLOCK_SIZES:   # every interval includes 1.0: noise
        rows.append({"block_size": bs, "paged_s": 0.1, "contiguous_s": 0.1, "paged_ms": 100.0, "contiguous_ms": 100.0,
                     "paged_ms_q1": 95.0, "paged_ms_q3": 105.0, "contiguous_ms_q1": 95.0, "contiguous_ms_q3": 105.0,
                     "overhead": 1.0 + bs / 10_000, "overhead_ci_low": 0.97, "overhead_ci_high": 1.04,
                     "verdict": NO_DIFFERENCE, "pairs": 15, "paged_GBps": 1.3, "contiguous_GBps": 1.3,
                     "paged_peak_fraction": None, "max_abs_diff": 0.0})
    # the shape of the radio's default on a CPU: the page shows only the sweep of the shape its radio shows
    fake = ks.SweepResult(rows=rows, meta={"backend": "torch-cpu", "device": "CPU: test", "shape": {
        "num_seqs": 4, "seq_len": 2048, "num_heads": 32, "num_kv_heads": 8, "head_dim": 128, "dtype": "float32"},
        "kv_bytes": 67108864, "llc_bytes": 16777216, "timer": "test", "confidence": 0.95, "launch": None,
        "warnings": []})
    monkeypatch.setattr(ks, "sweep", lambda *a, **k: fake)
    at = _page()
    at.button(key="kernel_run_sweep").click().run()
    assert not at.exception and not at.error
    assert any(i.value.startswith("No measurable difference on this machine") for i in at.info)
    assert any("4.0× this CPU's 16.8 MB last-level cache" in md.value for md in at.markdown)
    names = [t.get("name", "") for t in _figure(at, len(at.get("plotly_chart")) - 1)["data"]]
    assert not any("gather overhead" in n for n in names), names      # no trend drawn from noise
    assert any("Not drawn: live, torch-cpu on CPU: test — no measurable difference" in c.value for c in at.caption)


def test_two_costs_chart_follows_the_explainer_scenario():
    from allocator.engine.scenario import Scenario
    at = AppTest.from_file(os.path.join(ROOT, "app.py"), default_timeout=600)
    at.session_state["last_good_scenario"] = Scenario(total_slots=4096)
    at.switch_page("pages/kernel.py")
    at.run()
    assert not at.exception and not at.error
    assert any("4,096-slot pool (the explainer's settings)" in c.value for c in at.caption)


def test_recorded_gpu_results_are_labelled(monkeypatch):
    import kernels.sweep.run as ks
    from kernels.sweep.data import TINY_SHAPE
    fake = ks.sweep(block_sizes=(1, 16), shape=TINY_SHAPE, backend="torch-cpu", repeats=3)
    fake.meta.update(backend="cuda", device="NVIDIA Test GPU", recorded=True, file="kernel_gpu_results.json")
    monkeypatch.setattr(kernels.sweep.data, "load_recorded", lambda: [fake])
    at = _page()
    assert not at.error
    text = _text(at)
    assert "Recorded GPU results" in text and "**Recorded**" in text and "NVIDIA Test GPU" in text
    assert "No GPU measurement is shipped yet" not in text
    if not CUDA:   # the two-costs chart shows the recorded overhead (or says why not) before any live sweep
        from kernels.sweep.figures import drawable
        caption = " ".join(c.value for c in at.caption)
        label = "recorded on NVIDIA Test GPU"
        assert (f"Overhead drawn from: {label}" in caption) == drawable(fake)[0]
        assert (f"Not drawn: {label}" in caption) == (not drawable(fake)[0])


def test_recorded_gpu_trend_is_drawn_with_device_and_date(monkeypatch):
    import kernels.sweep.run as ks
    from kernels.sweep.stats import NO_DIFFERENCE, SLOWER
    rows = []
    for bs in ks.DEFAULT_BLOCK_SIZES:   # a real, measurable trend: small blocks cost more
        over = 1.0 + 0.4 / bs
        lo, hi = over - 0.01, over + 0.01
        rows.append({"block_size": bs, "paged_s": 1e-3 * over, "contiguous_s": 1e-3, "paged_ms": over,
                     "contiguous_ms": 1.0, "paged_ms_q1": over, "paged_ms_q3": over, "contiguous_ms_q1": 1.0,
                     "contiguous_ms_q3": 1.0, "overhead": over, "overhead_ci_low": lo, "overhead_ci_high": hi,
                     "verdict": SLOWER if lo > 1 else NO_DIFFERENCE, "pairs": 15, "paged_GBps": 1000 / over,
                     "contiguous_GBps": 1000.0, "paged_peak_fraction": 0.2 / over, "max_abs_diff": 0.0})
    rec = ks.SweepResult(rows=rows, meta={"backend": "cuda", "device": "NVIDIA H200", "date": "2026-12-01T10:00:00+00:00",
                                          "shape": {"num_seqs": 64, "seq_len": 4096, "num_heads": 32, "num_kv_heads": 8,
                                                    "head_dim": 128, "dtype": "float16"},
                                          "kv_bytes": 1 << 30, "timer": "do_bench", "confidence": 0.95,
                                          "launch": {"tile": 32, "num_warps": 8, "num_stages": 2, "num_splits": 1,
                                                     "split_len": 4096},
                                          "versions": {"torch": "2.13.0", "triton": "3.9.0", "cuda": "13.0"},
                                          "warnings": [], "recorded": True, "file": "kernel_gpu_results.json"})
    monkeypatch.setattr(kernels.sweep.data, "load_recorded", lambda: [rec])
    at = _page()
    assert not at.exception and not at.error
    label = "recorded on NVIDIA H200, 64×4096 tokens, 2026-12-01"
    names = [t.get("name", "") for t in _figure(at, len(at.get("plotly_chart")) - 1)["data"]]
    assert f"gather overhead (×) — {label}" in names
    assert any(f"Overhead drawn from: {label}" in c.value for c in at.caption)
    assert rec.verdict_text() in [s.value for s in at.success]
    assert any("Launch: single pass, 32-token tiles, 8 warps, 2 stages." in md.value for md in at.markdown)
