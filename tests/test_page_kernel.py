"""AppTest of the live-kernel page: backend named, correctness check shown, sweep button works."""
from __future__ import annotations

import os

import torch
from streamlit.testing.v1 import AppTest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CUDA = torch.cuda.is_available()


def _page() -> AppTest:
    at = AppTest.from_file(os.path.join(ROOT, "app.py"), default_timeout=60)
    at.switch_page("pages/kernel.py")
    at.run()
    assert not at.exception, at.exception
    return at


def _text(at: AppTest) -> str:
    parts = [m.value for m in at.markdown] + [c.value for c in at.caption] + [i.value for i in at.info]
    return "\n".join(str(p) for p in parts)


def test_kernel_page_loads_with_backend_and_check():
    at = _page()
    text = _text(at)
    assert "Backend for timing:" in text
    expected = "cuda" if CUDA else "torch-cpu"
    assert f"`{expected}`" in text
    labels = [m.label for m in at.metric]
    check = "cuda" if CUDA else "triton-interpreter"
    assert any(check in lbl for lbl in labels), labels
    for m in at.metric:
        assert float(m.value) < 1e-3                      # max abs error vs reference
    assert not at.error
    assert "Nothing runs until you do" in text            # no sweep on load
    if not CUDA and not any(f.startswith("kernel_gpu_results") for f in os.listdir(os.path.join(ROOT, "assets"))):
        assert "No recorded GPU results are shipped yet" in text


def test_kernel_page_tiny_sweep():
    at = _page()
    radio = at.radio(key="kernel_shape")
    tiny = next(o for o in radio.options if o.startswith("tiny"))
    radio.set_value(tiny).run()
    at.button(key="kernel_run_sweep").click().run()
    assert not at.exception, at.exception
    assert not at.error, [e.value for e in at.error]
    assert len(at.get("plotly_chart")) == 3               # latency, overhead, two costs
    assert any("2 sequences × 64 tokens" in md.value for md in at.markdown)
    df = at.dataframe[0].value
    assert list(df["block size (slots)"]) == [1, 2, 4, 8, 16, 32, 64, 128, 256]
    assert (df["overhead (×)"] > 0).all()
    assert any("Overhead measured by backend" in c.value for c in at.caption)


def test_two_costs_chart_follows_the_explainer_scenario():
    from allocator.scenario import Scenario
    at = AppTest.from_file(os.path.join(ROOT, "app.py"), default_timeout=60)
    at.session_state["last_good_scenario"] = Scenario(total_slots=4096)
    at.switch_page("pages/kernel.py")
    at.run()
    assert not at.exception and not at.error
    assert any("4,096-slot pool (the explainer's settings)" in c.value for c in at.caption)


def test_recorded_gpu_results_are_labelled(monkeypatch):
    import kernels.sweep as ks
    fake = ks.sweep(block_sizes=(1, 16), shape=ks.TINY_SHAPE, backend="torch-cpu", repeats=1)
    fake.meta.update(backend="cuda", device="NVIDIA Test GPU", recorded=True, file="kernel_gpu_results.json")
    monkeypatch.setattr(ks, "load_recorded", lambda: [fake])
    at = _page()
    assert not at.error
    text = _text(at)
    assert "Recorded GPU results" in text and "**Recorded**" in text and "NVIDIA Test GPU" in text
    assert "No recorded GPU results are shipped yet" not in text
    if not CUDA:   # the two-costs chart falls back to the recorded overhead before any live sweep
        assert any("(recorded " in c.value for c in at.caption)
