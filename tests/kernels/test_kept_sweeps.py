"""kernels.sweep.run.kept_sweeps: the page's look-only view of the shared sweep cache (every seed kept,
only the settings asked for, nothing run)."""
from kernels.sweep import run as ks
from kernels.sweep.data import SweepShape


def test_kept_sweeps_lists_every_seed_of_these_settings_and_nothing_else(monkeypatch):
    shape = SweepShape(num_seqs=2, seq_len=64, num_heads=4, num_kv_heads=2, head_dim=16, dtype="float32")
    other = object()
    fake = {
        ks.sweep_key((1, 16), shape, "torch-cpu", None, 0, ks.DEFAULT_BUDGET_S): "seed0",
        ks.sweep_key((1, 16), shape, "torch-cpu", None, 40, ks.DEFAULT_BUDGET_S): "seed40",   # past CACHE_ENTRIES
        ks.sweep_key((1, 16), shape, "triton-interpreter", None, 1, ks.DEFAULT_BUDGET_S): other,
        ks.sweep_key((1, 16), shape, "torch-cpu", 5, 2, ks.DEFAULT_BUDGET_S): other,
        ks.sweep_key((1, 16), shape, "torch-cpu", None, 3, 10.0): other,
        ks.sweep_key((1, 32), shape, "torch-cpu", None, 4, ks.DEFAULT_BUDGET_S): other,
    }
    monkeypatch.setattr(ks, "_RESULTS", dict(fake))
    assert ks.kept_sweeps((1, 16), shape, "torch-cpu") == {0: "seed0", 40: "seed40"}
    assert ks.kept_sweeps((1, 64), shape, "torch-cpu") == {}
