"""Issue 25: the contiguous baseline kernel, the bandwidth-minded paged kernel, the prediction,
``gpu_check``'s dry run, the Triton/torch API the kernels rely on, and the shared sweep cache.

On a CPU the Triton kernels run in Triton's interpreter (``import kernels`` turns it on): tiny
shapes, every unused slot NaN, so a read past a sequence's end or of a padding table entry shows.
"""
from __future__ import annotations

import inspect
import json
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import torch

import kernels  # noqa: F401  (interpreter on CPU)
from kernels.attention.inputs import TABLE_COLUMN_MULTIPLE, make_paged_inputs
from kernels.attention.paged_attention import (contiguous_attention_triton, launch_config,
                                               paged_attention_reference, paged_attention_triton)

ROOT = Path(__file__).resolve().parents[2]
CUDA = torch.cuda.is_available()
DEVICE = "cuda" if CUDA else "cpu"
NAN = float("nan")
TOL = {torch.float32: 1e-4, torch.float16: 2e-2}
BLOCK_SIZES = (1, 2, 4, 8, 16, 24, 32, 64, 128, 256)


def _lens(block_size: int) -> list[int]:
    """Empty, one token, a partial last block, and 150 tokens (three 64-token tiles, the last partial)."""
    return [0, 1, min(block_size + block_size // 2 + 1, 140), 150]


@pytest.mark.parametrize("group", [1, 4, 8])
@pytest.mark.parametrize("block_size", BLOCK_SIZES)
def test_paged_kernel_matches_reference(block_size, group):
    num_kv_heads = 2 if group < 8 else 1
    for dtype, splits in ((torch.float32, 1), (torch.float16, 2)):
        inp = make_paged_inputs(_lens(block_size), group * num_kv_heads, num_kv_heads, head_dim=16,
                                block_size=block_size, dtype=dtype, device=DEVICE, fill=NAN, spare_blocks=3,
                                seed=block_size + group)
        assert inp.block_tables.shape[1] % TABLE_COLUMN_MULTIPLE == 0          # padded with -1, never read
        cfg = launch_config(inp.q, inp.k_cache, inp.seq_lens, num_splits=splits)
        assert cfg.num_splits == splits and cfg.tile == 64
        ref = paged_attention_reference(*inp.args)
        out = paged_attention_triton(*inp.args, config=cfg)
        assert out.dtype == dtype and torch.isfinite(out).all(), "read a NaN slot"
        assert (out.float() - ref).abs().max().item() < TOL[dtype], (dtype, splits)


@pytest.mark.parametrize("group", [1, 4, 8])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=["fp32", "fp16"])
def test_contiguous_kernel_matches_reference(dtype, group):
    num_kv_heads = 2 if group < 8 else 1
    # the dense tokens past each sequence's length are NaN: the kernel must stop at seq_len
    inp = make_paged_inputs([0, 1, 70, 150], group * num_kv_heads, num_kv_heads, head_dim=16, block_size=16,
                            dtype=dtype, device=DEVICE, seed=group)
    lens = inp.seq_lens.tolist()
    k, v = inp.k_dense.clone(), inp.v_dense.clone()
    for s, n in enumerate(lens):
        k[s, n:] = NAN
        v[s, n:] = NAN
    ref = paged_attention_reference(*inp.args)
    for splits in (1, 3):
        out = contiguous_attention_triton(inp.q, k, v, inp.seq_lens, num_splits=splits)
        assert torch.isfinite(out).all()
        assert (out.float() - ref).abs().max().item() < TOL[dtype], splits
        paged = paged_attention_triton(*inp.args, num_splits=splits)
        assert (out.float() - paged.float()).abs().max().item() < TOL[dtype]


def test_contiguous_kernel_validates_its_inputs():
    inp = make_paged_inputs([5, 9], 4, 2, head_dim=16, block_size=4, seed=1)
    with pytest.raises(ValueError, match=r"seq_lens\[1\] = 20 is longer than k holds \(9 tokens\)"):
        contiguous_attention_triton(inp.q, inp.k_dense, inp.v_dense, torch.tensor([5, 20], dtype=torch.int32))
    with pytest.raises(ValueError, match="k must be"):
        contiguous_attention_triton(inp.q, inp.k_dense[0], inp.v_dense, inp.seq_lens)


def test_launch_plan_contiguous_has_no_table_and_the_same_launch():
    from kernels.attention.paged_attention import meta_plan
    paged = meta_plan(64, 4096, 32, 8, 128, torch.bfloat16, 16)
    contig = meta_plan(64, 4096, 32, 8, 128, torch.bfloat16, None)
    assert [p.kernel for p in paged] == [c.kernel for c in contig] == ["split_kv", "reduce_splits"]
    assert paged[0].grid == contig[0].grid == (64, 8, 3)
    assert paged[0].constexprs["PAGED"] is True and contig[0].constexprs["PAGED"] is False
    same = {k: v for k, v in paged[0].constexprs.items() if k not in ("PAGED", "BLOCK_SIZE")}
    assert same == {k: v for k, v in contig[0].constexprs.items() if k not in ("PAGED", "BLOCK_SIZE")}
    assert (paged[0].num_warps, paged[0].num_stages) == (contig[0].num_warps, contig[0].num_stages) == (4, 3)


# ---------------------------------------------------------------- the API the kernels rely on

def test_triton_and_torch_api_the_kernels_use():
    """What the kernels and gpu_check need from Triton and torch; all present in Triton 3.6 and 3.9
    and torch 2.11 and 2.13 (checked against their sources); a version lacking one fails here."""
    import triton
    import triton.language as tl
    assert "num_stages" in inspect.signature(tl.range.__init__).parameters
    assert "input_precision" in inspect.signature(tl.dot).parameters
    for name in ("exp2", "trans", "where", "maximum", "full", "zeros", "arange", "load", "store", "program_id"):
        assert hasattr(tl, name), name
    assert hasattr(triton, "jit") and hasattr(torch.cuda, "Event")
    from triton._C.libtriton import native_specialize_impl  # noqa: F401  (the compile check's specialiser)
    assert callable(torch.nn.functional.scaled_dot_product_attention)   # a builtin: no signature to read


def test_sdpa_decode_matches_reference_and_falls_back_without_enable_gqa(monkeypatch):
    from kernels.gpu_check import sdpa_decode
    inp = make_paged_inputs([3, 40], 8, 2, head_dim=16, block_size=8, seed=3)
    ref = paged_attention_reference(*inp.args)
    out = sdpa_decode(inp.q, inp.k_dense, inp.v_dense, inp.seq_lens)
    assert (out - ref).abs().max().item() < 1e-4
    real = torch.nn.functional.scaled_dot_product_attention

    def old_torch(*a, **kw):                  # torch < 2.5 had no enable_gqa
        if "enable_gqa" in kw:
            raise TypeError("scaled_dot_product_attention() got an unexpected keyword argument 'enable_gqa'")
        return real(*a, **kw)
    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", old_torch)
    assert (sdpa_decode(inp.q, inp.k_dense, inp.v_dense, inp.seq_lens) - ref).abs().max().item() < 1e-4


# ---------------------------------------------------------------- gpu_check, dry

@pytest.mark.skipif(CUDA, reason="the dry run is the CPU stand-in for the GPU run")
def test_gpu_check_dry_run_end_to_end(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "kernels.gpu_check", "--dry", "-o", str(tmp_path)], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    from kernels.gpu_check import DRY, load_result
    rep = load_result(tmp_path / "kernel_gpu_check.json")
    assert rep["dry_run"] is True and rep["targets"] == {}
    meta = rep["meta"]
    assert {"device", "driver", "versions", "date", "sm_count"} <= set(meta)
    assert {"torch", "triton", "python"} <= set(meta["versions"])
    checks = rep["correctness"]
    assert checks and all(c["passed"] for c in checks)
    kinds = {(c["kernel"], c["splits"]) for c in checks}
    assert {("paged", 1), ("paged", 4), ("paged", "auto"), ("contiguous", 1), ("contiguous", 4),
            ("sdpa", None)} <= kinds
    assert {c["block_size"] for c in checks if c["kernel"] == "paged"} == set(DRY["block_sizes"])
    assert any(c["num_splits"] > 1 for c in checks if c["splits"] == 4)
    (sw,) = rep["sweeps"]
    assert sw["meta"]["backend"] == "dry-run" and "not a measurement" in sw["meta"]["timer"]
    assert [r["block_size"] for r in sw["rows"]] == list(DRY["timing_block_sizes"])
    for r in sw["rows"]:
        assert r["paged_ms"] > 0 and r["contiguous_ms"] > 0 and r["sdpa_ms"] > 0 and r["max_abs_diff"] < 2e-2
        assert r["paged_GBps"] == pytest.approx(sw["meta"]["io_bytes"] / r["paged_s"] / 1e9)
    assert "correctness:" in proc.stdout and "wrote" in proc.stdout


def test_io_bytes_by_flashinfer_count():
    from kernels.gpu_check import io_bytes
    # 64 x 4096 tokens, 32/8 heads, d 128, bf16: q + out = 2 x 64 x 32 x 128 x 2, K + V = 2 x 64 x 4096 x 8 x 128 x 2
    assert io_bytes(64, 4096, 32, 8, 128, 2) == 2 * 64 * 32 * 128 * 2 + 2 * 64 * 4096 * 8 * 128 * 2 == 1_074_790_400


def test_gpu_check_targets_are_reported_not_asserted():
    from kernels.gpu_check import targets
    rows = [{"block_size": 8, "paged_peak_fraction": 0.5, "overhead": 1.5},
            {"block_size": 16, "paged_peak_fraction": 0.8, "overhead": 1.04},
            {"block_size": 256, "paged_peak_fraction": 0.75, "overhead": 1.12}]
    t = targets([{"meta": {"shape": {"num_seqs": 64, "seq_len": 4096}}, "rows": rows}])
    frac = t["64x4096: min fraction of peak, block >= 16"]
    over = t["64x4096: max paged / contiguous, block >= 16"]
    assert frac == {"value": 0.75, "target": ">= 0.7", "met": True}
    assert over == {"value": 1.12, "target": "<= 1.1", "met": False}


# ---------------------------------------------------------------- the prediction

def test_occupancy_by_hand():
    from kernels.sweep.predict import occupancy
    # 124 registers -> 128 per thread = 4,096 per warp, x 4 warps = 16,384: 4 programs by registers;
    # 71,680 + 1,024 bytes of shared memory: 228 KiB / 72,704 = 3 programs -> shared memory decides
    assert occupancy(124, 4, 71680) == (3, "shared memory")
    # 154 registers -> 160 x 32 x 4 = 20,480: 3 by registers (65,536 / 20,480), 3 by shared: registers first
    assert occupancy(154, 4, 71680)[0] == 3
    # the old kernel's 177 registers on 8 warps: 184 x 32 x 8 = 47,104 -> 1 program per SM
    assert occupancy(177, 8, 13 * 1024) == (1, "registers")


def test_prediction_from_the_shipped_record():
    from kernels.compile_check import load_report
    from kernels.sweep.predict import H200, prediction_table
    rep = load_report(ROOT / "assets" / "kernel_compile_sm90.json")
    rows = prediction_table(rep, 64, 4096)
    assert [r["block_size"] for r in rows] == [None, 1, 2, 4, 8, 16, 32, 64, 128, 256]
    for r in rows:
        assert r["prediction"] is True and r["num_splits"] == 3 and r["waves"] == 4
        assert 0 < r["fraction_of_nominal"] <= H200.copy_Bps / H200.nominal_Bps
        assert r["GBps"] == pytest.approx(r["io_bytes"] / r["seconds"] / 1e9)
    contig = rows[0]
    assert contig["predicted_overhead"] is None
    # the model sees only the table's 4 bytes per block: block 1 costs 4 / 512 more bytes than contiguous
    one = rows[1]
    assert one["predicted_overhead"] == pytest.approx(1 + 4 / 512, rel=1e-3)
    long = prediction_table(rep, 16, 16384)
    assert all(r["waves"] == 1 and r["grid"] == 384 for r in long)


# ---------------------------------------------------------------- shared between sessions

def test_shared_sweep_runs_identical_work_once(monkeypatch):
    import kernels.sweep.run as ks
    calls = []
    gate = threading.Event()
    fake = ks.SweepResult(rows=[], meta={"backend": "torch-cpu"})

    def slow_sweep(*args, progress=None, **kw):
        calls.append(args)
        progress(0.5, "half way")
        gate.wait(5)
        return fake
    monkeypatch.setattr(ks, "sweep", slow_sweep)
    monkeypatch.setattr(ks, "_RESULTS", ks.OrderedDict())
    shape = ks.SweepShape(1, 8, 2, 1, 16)
    seen, hows = [], []
    t1 = threading.Thread(target=lambda: hows.append(ks.shared_sweep((1, 2), shape, "torch-cpu")[1]))
    t1.start()
    while not calls:
        pass
    t2 = threading.Thread(target=lambda: hows.append(
        ks.shared_sweep((1, 2), shape, "torch-cpu", progress=lambda f, m: seen.append((f, m)))[1]))
    t2.start()
    threading.Timer(0.6, gate.set).start()
    t1.join(10)
    t2.join(10)
    assert sorted(hows) == ["joined", "ran"] and len(calls) == 1
    assert (0.5, "half way") in seen                          # the waiter saw the real progress
    res, how = ks.shared_sweep((1, 2), shape, "torch-cpu")
    assert how == "cached" and res is fake and len(calls) == 1
    ks.shared_sweep((1, 2, 4), shape, "torch-cpu")            # other parameters: another run
    assert len(calls) == 2


def test_sweep_budget_chooses_repeats_and_meets_its_estimate():
    from kernels.sweep.data import TINY_SHAPE
    from kernels.sweep.plan import choose_repeats
    from kernels.sweep.run import sweep
    # 9 block sizes, 0.2 s paging + pairs of 0.3 s, 45 s budget, 1 s spent: (44 / 9 - 0.2) // 0.3 - 1 = 14
    n, est = choose_repeats(45, 1.0, 9, 0.2, 0.3)
    assert n == 14 and est == pytest.approx(1.0 + 9 * (0.2 + 15 * 0.3))
    assert choose_repeats(45, 1.0, 9, 0.2, 10.0)[0] == 3            # never fewer than 3 pairs
    res = sweep((1, 16), TINY_SHAPE, "torch-cpu", repeats=None, budget_s=2.0)
    assert res.meta["repeats"] == "auto" and all(3 <= r["pairs"] <= 15 for r in res.rows)
    assert res.meta["estimate_s"] > 0 and res.meta["wall_s"] > 0


def test_gpu_check_imports_without_numpy():
    """A GPU machine's python3 has torch and Triton but maybe no numpy (torch does not require it):
    the device check, the kernels and the statistics must import and work without it."""
    code = (
        "import builtins, sys\n"
        "real = builtins.__import__\n"
        "def guard(name, *a, **k):\n"
        "    if name == 'numpy' or name.startswith('numpy.'):\n"
        "        raise ModuleNotFoundError(\"No module named 'numpy'\")\n"
        "    return real(name, *a, **k)\n"
        "builtins.__import__ = guard\n"
        "import torch\n"
        "import kernels.gpu_check, kernels.sweep.predict\n"
        "from kernels.attention.paged_attention import make_paged_inputs, paged_attention_reference, launch_config\n"
        "from kernels.gpu_check import sdpa_decode\n"
        "import kernels.sweep.stats as stats\n"
        "st = stats.pair_stats([2.0, 4.0, 6.0], [1.0, 2.0, 3.0])\n"
        "assert st['overhead'] == 2.0 and st['verdict'] == 'slower', st\n"
        "from kernels.errors import FieldError\n"                  # the core's own (allocator.common.errors: no numpy)
        "from allocator.common.errors import FieldError as CoreFieldError\n"
        "assert FieldError is CoreFieldError\n"
        "try:\n    stats.pair_stats([1.0], [1.0, 2.0])\n    raise SystemExit('no error')\n"
        "except FieldError as e:\n"
        "    assert isinstance(e, ValueError) and e.field == 'b_s' and str(e).startswith('paired timings must')\n"
        "    assert e.reworded('timings').startswith('timings must'), e\n"
        "inp = make_paged_inputs([3, 40], 8, 2, 16, 8, seed=3)\n"
        "ref = paged_attention_reference(*inp.args)\n"
        "assert (sdpa_decode(inp.q, inp.k_dense, inp.v_dense, inp.seq_lens) - ref).abs().max() < 1e-4\n"
        "assert launch_config(inp.q, inp.k_cache, inp.seq_lens).tile == 64\n"
        "assert 'numpy' not in sys.modules\n"
        "print('ok')\n")
    proc = subprocess.run([sys.executable, "-W", "ignore", "-c", code], cwd=ROOT, capture_output=True, text=True,
                          timeout=120, env={**__import__("os").environ, "TRITON_INTERPRET": "0"})
    assert proc.returncode == 0 and proc.stdout.strip().endswith("ok"), proc.stderr[-2000:]


def test_recorded_gpu_check_file_is_read_and_a_dry_run_is_not(tmp_path):
    from kernels.sweep.data import TINY_SHAPE, load_recorded
    from kernels.sweep.run import sweep
    from kernels.sweep.figures import latency_figure
    res = sweep((1, 16), TINY_SHAPE, "torch-cpu", repeats=3)      # rows in gpu_check's layout, plus SDPA
    part = {"meta": dict(res.meta, backend="cuda", device="NVIDIA H200", date="2026-12-01T10:00:00+00:00",
                         versions={"torch": "2.11.0", "triton": "3.6.0", "cuda": "12.8"}),
            "rows": [dict(r, sdpa_ms=r["contiguous_ms"] * 0.9) for r in res.rows]}
    path = tmp_path / "kernel_gpu_check.json"
    path.write_text(json.dumps({"dry_run": True, "meta": {}, "correctness": [], "sweeps": [part]}))
    assert load_recorded(assets=tmp_path) == []                    # a dry run is never a measurement
    path.write_text(json.dumps({"dry_run": False, "meta": {}, "correctness": [], "sweeps": [part]}))
    (rec,) = load_recorded(assets=tmp_path)
    assert rec.meta["recorded"] and rec.meta["file"] == "kernel_gpu_check.json"
    assert [r["block_size"] for r in rec.rows] == [1, 16] and all(r["sdpa_ms"] > 0 for r in rec.rows)
    names = [t.name for t in latency_figure(rec, "x").data]
    assert "torch SDPA on contiguous K/V (second reference)" in names


def test_a_budgeted_sweep_stops_at_the_hard_limit(monkeypatch):
    import kernels.sweep.run as ks
    from kernels.sweep.data import TINY_SHAPE
    monkeypatch.setattr(ks, "HARD_LIMIT_S", 0.0)            # a machine far slower than estimated
    res = ks.sweep((1, 16, 256), TINY_SHAPE, "torch-cpu", repeats=None)
    assert [r["block_size"] for r in res.rows] == [1] and res.meta["skipped"] == [16, 256]
    assert res.meta["estimate_s"] == 0.0 and res.meta["estimate_is_bound"]     # it states the limit at most
    assert any("stopped to keep to the 0 s it stated" in w and "block sizes 16, 256 not measured" in w
               for w in res.meta["warnings"])
    assert res.rows[0]["pairs"] == 3                         # the minimum is always timed
    assert any("fewer timed pairs than planned" in w and "block size 1 (3 of 15)" in w for w in res.meta["warnings"])
    fixed = ks.sweep((1, 16), TINY_SHAPE, "torch-cpu", repeats=3)   # an explicit count is never cut
    assert [r["block_size"] for r in fixed.rows] == [1, 16] and fixed.meta["skipped"] == []
