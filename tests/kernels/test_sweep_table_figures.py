"""The kernel sweep table writes bandwidth with two decimals, or three significant figures where that
keeps more: a small run on a CPU reads well under 0.01 GB/s, which two decimals printed as 0 (a
measured number shown as nothing)."""
from __future__ import annotations


def test_a_tiny_bandwidth_keeps_its_significant_figures(monkeypatch):
    import kernels.sweep.run as ks
    from kernels.sweep.data import TINY_SHAPE
    from kernels.sweep import figures
    monkeypatch.setattr(ks, "_RESULTS", ks.OrderedDict())
    res = ks.sweep(block_sizes=(1, 16), shape=TINY_SHAPE, backend="torch-cpu", repeats=3)
    res.rows[0]["paged_GBps"], res.rows[1]["paged_GBps"] = 0.0041234, 1234.5049
    column = figures.sweep_table(res)["paged K+V read (GB/s)"]
    assert list(column) == [0.00412, 1234.5]
