"""The kernel page's prediction tables fit a projector and a laptop: short headers, the full meaning
in each column's tooltip (the long headers cut the last column to "predicted paged ÷ co…" at
1920x1080 and made the table scroll at 1366x768; screenshots in the commit that added this)."""
from __future__ import annotations

import json

from tests.conftest import open_page


def test_every_prediction_column_has_a_short_header_and_a_tooltip_that_says_what_it_is():
    from kernels.sweep import figures, predict
    from kernels import gpu_check
    from kernels.compile_check import load_report
    gpu = predict.H200
    h, hkv, d = gpu_check.TIMING_HEADS
    headers = figures.prediction_headers(gpu.name, gpu.sms, gpu.nominal_Bps / 1e9)
    n, t = gpu_check.TIMING_SHAPES[0]
    frame = figures.prediction_frame(predict.prediction_table(load_report(), n, t, h, hkv, d, "bf16"))
    assert list(headers) == list(frame.columns)           # one header per column, none left long
    assert headers["predicted % of data-sheet bandwidth"][0] == "pred. % of 4.8 TB/s"
    assert "132 SMs of an NVIDIA H200" in headers["waves"][1]

    at = open_page("pages/kernel.py")
    # issue 40: an HTML table, whose headers wrap (the grid cut "pred. paged ÷ conti…" at 1366 px), with
    # what each column means written under the tables (the grid's tooltips)
    tables = [x for x in at.table if "pred. GB/s" in x.value.columns]
    assert len(tables) == len(gpu_check.TIMING_SHAPES)
    for table in tables:
        assert list(table.value.columns) == [short for short, _ in headers.values()]
        assert len(table.value) == len(frame)
    meanings = next(m.value for m in at.markdown if m.value.startswith("**The columns.**"))
    assert all(f"*{short}*: {why}" in meanings for short, why in headers.values())
    labels = [short for short, _ in headers.values()]
    assert sum(len(s) for s in labels) < 150 and max(len(s) for s in labels) <= 22
    for column, (short, why) in headers.items():
        # what the model computed says so in header or tooltip; what the compiler reported says that
        if "(record)" in column:
            assert "from the compile record" in why
        elif column.startswith("predicted"):
            assert short.startswith("pred.") and "redict" in why


def test_the_sweep_table_has_short_headers_with_tooltips(monkeypatch):
    import kernels.sweep.run as ks
    from kernels.sweep.data import TINY_SHAPE
    from kernels.sweep import figures
    monkeypatch.setattr(ks, "_RESULTS", ks.OrderedDict())
    res = ks.sweep(block_sizes=(1, 16), shape=TINY_SHAPE, backend="torch-cpu", repeats=3)
    res.meta.update(peak_GBps=4800.0, peak_source="data sheet")
    res.rows[0]["paged_peak_fraction"] = 0.5
    headers = figures.sweep_headers(res)
    assert list(headers) == list(figures.sweep_table(res).columns)
    assert headers["paged, % of peak"] == ("% of peak", "Paged bandwidth as a percentage of the device's peak memory "
                                                        "bandwidth, 4,800 GB/s (data sheet).")
    assert f"together {100 * ks.CONFIDENCE:.0f} % of the time" in headers["interval (×)"][1]
    assert max(len(short) for short, _ in headers.values()) <= 12
    monkeypatch.setattr(ks, "sweep", lambda *a, **k: res)
    at = open_page("pages/kernel.py")
    radio = at.radio(key="kernel_shape")
    radio.set_value(next(o for o in radio.options if o.startswith("tiny"))).run()
    at.button(key="kernel_run_sweep").click().run()
    assert not at.exception
    table = next(x for x in at.dataframe if "block size (slots)" in x.value.columns)
    config = json.loads(table.proto.columns)
    assert {c: (v["label"], v["help"]) for c, v in config.items() if c != "_index"} == headers
