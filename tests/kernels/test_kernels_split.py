"""Issue 13: the split-KV path, bf16, empty sequences, the launch choice, the offline sm_90
compile, the paired timing statistics and ``make gpu-check``'s behaviour without a GPU.

On a CPU the Triton kernels run in Triton's interpreter (tiny shapes). Every slot that holds no
token is NaN, so a read past a sequence's end (or of a padding table entry) shows as NaN.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import kernels  # noqa: F401  (interpreter on CPU)
from kernels.attention.paged_attention import (launch_config, paged_attention_reference,
                                               paged_attention_torch, paged_attention_triton)
from kernels.attention.inputs import make_paged_inputs
from kernels.sweep.stats import FASTER, NO_DIFFERENCE, SLOWER, pair_stats, verdict_text
from kernels.sweep.data import SweepResult, load_recorded
from kernels.attention.triton_kernels import choose_config, default_tiling, programs_per_sm

ROOT = Path(__file__).resolve().parents[2]
CUDA = torch.cuda.is_available()
DEVICE = "cuda" if CUDA else "cpu"
NAN = float("nan")


def ragged(block_size: int) -> list[int]:
    """An empty sequence, one token, a partial last block, several whole blocks and a long one."""
    return [0, 1, block_size + block_size // 2 + 1, 3 * block_size, 130]


# ---------------------------------------------------------------- split-KV vs reference

@pytest.mark.parametrize("splits", [2, 3, 5])
@pytest.mark.parametrize("block_size", [1, 16, 24, 256])
def test_split_path_matches_reference(block_size, splits):
    inp = make_paged_inputs(ragged(block_size), 8, 2, head_dim=16, block_size=block_size, device=DEVICE,
                            fill=NAN, spare_blocks=4, seed=block_size + splits)
    # the block tables are shuffled: not the identity order of the pool
    used = inp.block_tables[inp.block_tables >= 0].tolist()
    assert used != sorted(used)
    cfg = launch_config(inp.q, inp.k_cache, inp.seq_lens, num_splits=splits)
    assert cfg.num_splits > 1                          # the split path really runs
    ref = paged_attention_reference(*inp.args)
    out = paged_attention_triton(*inp.args, config=cfg)
    assert torch.isfinite(out).all(), "the split path read a NaN slot"
    assert (out.float() - ref).abs().max().item() < 1e-4
    single = paged_attention_triton(*inp.args, num_splits=1)
    assert (out - single).abs().max().item() < 1e-5   # the two paths agree with each other too


def test_split_path_fp16():
    inp = make_paged_inputs(ragged(24), 6, 2, head_dim=40, block_size=24, dtype=torch.float16, device=DEVICE,
                            fill=NAN, spare_blocks=2, seed=9)
    ref = paged_attention_reference(*inp.args)
    out = paged_attention_triton(*inp.args, num_splits=3)
    assert out.dtype == torch.float16 and torch.isfinite(out).all()
    assert (out.float() - ref).abs().max().item() < 2e-2


@pytest.mark.parametrize("splits", [1, 3])
def test_empty_sequence_gives_zero_not_nan(splits):
    inp = make_paged_inputs([0, 7, 0], 4, 2, head_dim=16, block_size=4, device=DEVICE, fill=NAN, seed=1)
    out = paged_attention_triton(*inp.args, num_splits=splits)
    assert torch.isfinite(out).all()
    assert out[0].abs().max().item() == 0.0 and out[2].abs().max().item() == 0.0
    assert out[1].abs().max().item() > 0
    for fn in (paged_attention_torch, paged_attention_reference):
        other = fn(*inp.args)
        assert other[0].abs().max().item() == 0.0 and torch.isfinite(other).all()


def _interpreter_bf16_dot_works() -> bool:
    """Triton's interpreter (3.9) computes tl.dot on bf16 wrongly; probe it on a 16x16 product."""
    if CUDA:
        return True
    import triton
    import triton.language as tl

    @triton.jit
    def _dot(a_ptr, b_ptr, c_ptr, N: tl.constexpr):
        r = tl.arange(0, N)
        a = tl.load(a_ptr + r[:, None] * N + r[None, :])
        b = tl.load(b_ptr + r[:, None] * N + r[None, :])
        tl.store(c_ptr + r[:, None] * N + r[None, :], tl.dot(a, b))

    gen = torch.Generator().manual_seed(0)
    a = torch.randn(16, 16, generator=gen).bfloat16()
    b = torch.randn(16, 16, generator=gen).bfloat16()
    c = torch.empty(16, 16)
    _dot[(1,)](a, b, c, 16)
    return bool((c - a.float() @ b.float()).abs().max() < 0.1)


@pytest.mark.parametrize("splits", [1, 3])
def test_bf16_accepted_and_correct(splits):
    inp = make_paged_inputs(ragged(16), 8, 2, head_dim=32, block_size=16, dtype=torch.bfloat16, device=DEVICE,
                            fill=NAN, spare_blocks=2, seed=4)
    ref = paged_attention_reference(*inp.args)
    # the torch path takes bf16 everywhere
    assert (paged_attention_torch(*inp.args).float() - ref).abs().max().item() < 6e-2
    if not _interpreter_bf16_dot_works():
        pytest.skip("Triton's CPU interpreter multiplies bf16 matrices wrongly (a 16x16 tl.dot is off by "
                    "~1e10); the bf16 kernel is compiled for sm_90 by the compile check and run by make gpu-check")
    out = paged_attention_triton(*inp.args, num_splits=splits)
    assert out.dtype == torch.bfloat16
    assert (out.float() - ref).abs().max().item() < 6e-2


def test_torch_path_ignores_nan_slots_with_a_reused_workspace():
    inp = make_paged_inputs([3, 40, 17], 8, 2, head_dim=16, block_size=8, fill=NAN, spare_blocks=3, seed=2)
    ref = paged_attention_reference(*inp.args)
    ws: dict = {}
    first = paged_attention_torch(*inp.args, workspace=ws)
    second = paged_attention_torch(*inp.args, workspace=ws)
    assert len(ws) == 2                                  # one buffer for K, one for V, reused
    assert torch.equal(first, second) and (first - ref).abs().max().item() < 1e-5


# ---------------------------------------------------------------- the launch choice

def test_choose_config_on_an_h200():
    # 4 warps, 3 stages, 64-token tiles: 70 KiB of shared memory a program, 3 programs per SM,
    # 396 slots on 132 SMs (the figures the compile record shows; see kernels.sweep.predict)
    assert default_tiling(128) == (64, 4, 3) and default_tiling(128, itemsize=4) == (64, 4, 2)
    assert programs_per_sm(64, 128, 2, 3) == 3
    # 64 x 8 = 512 programs: 1.3 waves unsplit (2 rounds of 4,096 tokens = 8,192 + 2 x 64 fill);
    # 3 splits of 1,408 tokens: 1,536 programs, 4 waves x (1,408 + 64 + 8) = 5,920 + 64 -- the minimum
    cfg = choose_config(64, 8, 4096, 128, num_sms=132, num_heads=32)
    assert (cfg.num_splits, cfg.split_len, cfg.tile) == (3, 1408, 64)
    # 16 x 8 = 128 programs fill a third of the slots: 3 splits make 384 <= 396, one wave
    cfg = choose_config(16, 8, 16384, 128, num_sms=132, num_heads=32)
    assert cfg.num_splits == 3 and cfg.split_len == 5504 and cfg.split_len % cfg.tile == 0
    assert cfg.num_splits * cfg.split_len >= 16384 > (cfg.num_splits - 1) * cfg.split_len
    # a batch that already fills every slot evenly is not split: 132 x 3 programs, 256 tokens each
    assert choose_config(396, 1, 256, 128, num_sms=132).num_splits == 1
    # short contexts never split into stretches of fewer than 4 tiles
    assert choose_config(1, 1, 100, 128, num_sms=132).num_splits == 1
    # the CPU interpreter: no SM count, no split unless asked
    assert choose_config(1, 1, 100_000, 128).num_splits == 1
    with pytest.raises(ValueError, match="tile must be a power of two"):
        choose_config(1, 1, 10, 64, tile=24)
    with pytest.raises(ValueError, match="num_splits"):
        choose_config(1, 1, 10, 64, num_splits=0)


# ---------------------------------------------------------------- paired statistics

def test_pair_stats_by_hand():
    # every pair 2x slower: median ratio 2, every resample gives 2
    st = pair_stats([2.0, 4.0, 6.0], [1.0, 2.0, 3.0])
    assert st["overhead"] == 2.0 and st["ci_low"] == 2.0 == st["ci_high"] and st["verdict"] == SLOWER
    assert st["a_median"] == 4.0 and st["a_q1"] == 3.0 and st["a_q3"] == 5.0 and st["pairs"] == 3
    # ratios 0.9, 1.0, 1.1 (x3): the median is 1.0 and the interval must contain it
    st = pair_stats([0.9, 1.0, 1.1] * 3, [1.0] * 9)
    assert st["overhead"] == pytest.approx(1.0) and st["ci_low"] < 1.0 < st["ci_high"]
    assert st["verdict"] == NO_DIFFERENCE
    assert pair_stats([0.5] * 5, [1.0] * 5)["verdict"] == FASTER
    with pytest.raises(ValueError, match="equal length"):
        pair_stats([1.0], [1.0, 2.0])
    with pytest.raises(ValueError, match="> 0"):
        pair_stats([0.0], [1.0])


def _row(bs, overhead, lo, hi):
    verdict = SLOWER if lo > 1 else FASTER if hi < 1 else NO_DIFFERENCE
    return {"block_size": bs, "overhead": overhead, "overhead_ci_low": lo, "overhead_ci_high": hi, "verdict": verdict}


def test_verdict_text_quotes_the_rows():
    noise = [_row(1, 1.03, 0.97, 1.09), _row(16, 0.99, 0.95, 1.02)]
    text = verdict_text(noise)
    assert text.startswith("No measurable difference on this machine") and "95 %" in text
    assert not SweepResult(rows=noise).measurable
    mixed = [_row(1, 1.31, 1.2, 1.4), _row(16, 1.01, 0.98, 1.03)]
    text = verdict_text(mixed)
    assert "block 1: 1.310× (1.200–1.400)" in text and "other 1 block size the interval includes 1.0×" in text
    assert "block 16" not in text and "(95 % intervals)" in text
    assert "(95 % simultaneous intervals)" in verdict_text(mixed, simultaneous=True)
    assert SweepResult(rows=mixed).measurable


# ---------------------------------------------------------------- recorded results

def _gpu_file(tmp_path: Path) -> Path:
    from kernels.sweep.data import TINY_SHAPE
    from kernels.sweep.run import sweep
    res = sweep(block_sizes=(1, 16), shape=TINY_SHAPE, backend="torch-cpu", repeats=3)
    meta = dict(res.meta, backend="cuda", device="NVIDIA H200")
    path = tmp_path / "kernel_gpu_results.json"
    path.write_text(json.dumps({"meta": {"device": "NVIDIA H200"}, "validation": [],
                                "sweeps": [{"meta": meta, "rows": res.rows},
                                           {"meta": dict(meta, shape=dict(meta["shape"], num_seqs=16)),
                                            "rows": res.rows}]}))
    return path


def test_load_recorded_reads_the_gpu_check_file(tmp_path):
    path = _gpu_file(tmp_path)
    rec = load_recorded(assets=tmp_path)
    assert len(rec) == 2 and all(r.meta["recorded"] and r.meta["file"] == path.name for r in rec)
    assert rec[1].meta["shape"]["num_seqs"] == 16
    data = json.loads(path.read_text())
    del data["sweeps"][1]["rows"][0]["overhead_ci_low"]
    path.write_text(json.dumps(data))
    with pytest.raises(ValueError, match=r"kernel_gpu_results.json: sweeps\[1\]: rows\[0\] must have keys"):
        load_recorded(assets=tmp_path)


# ---------------------------------------------------------------- make gpu-check without a GPU

@pytest.mark.skipif(CUDA, reason="checks the no-GPU message")
def test_gpu_check_says_plainly_it_needs_a_gpu(tmp_path):
    out = tmp_path / "r.json"
    proc = subprocess.run([sys.executable, "-m", "kernels.gpu_check", "-o", str(out)], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert "needs an NVIDIA GPU with CUDA, and this machine has none" in proc.stderr
    assert "--dry" in proc.stderr
    assert "Traceback" not in proc.stderr and not (out / "kernel_gpu_check.json").exists()


# ---------------------------------------------------------------- offline compile for sm_90

def _has_cuda_backend() -> tuple[bool, str]:
    code = "from kernels.compile_check import cuda_backend; cuda_backend()"
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, TRITON_INTERPRET="0"))
    return proc.returncode == 0, proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else ""


def test_compile_for_sm90_without_spills(tmp_path):
    """The suite compiles the representative launches (``--subset``); ``make compile-check`` all."""
    ok, why = _has_cuda_backend()
    if not ok:
        pytest.skip(f"this Triton build has no CUDA backend, so nothing can be compiled for sm_90: {why}")
    out = tmp_path / "compile.json"
    proc = subprocess.run([sys.executable, "-m", "kernels.compile_check", "-o", str(out), "--quiet", "--subset"],
                          cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    from kernels.compile_check import failures, load_report
    fresh = load_report(out)
    assert failures(fresh) == [] and fresh["subset"] is True
    res = fresh["results"]
    got = {(r["kernel"], r["dtype"], r["head_dim"], r["block_size"], r["paged"]) for r in res}
    for kernel in ("single_pass", "split_kv"):
        for bs in (1, 16, 24, 256):
            assert (kernel, "bf16", 128, bs, True) in got
        assert (kernel, "bf16", 128, None, False) in got             # the contiguous baseline
    assert ("reduce_splits", "bf16", 128, None, None) in got
    assert ("single_pass", "fp32", 32, 16, True) in got             # the page's quick check
    for r in res:
        assert r["spill_store_bytes"] == r["spill_load_bytes"] == r["stack_bytes"] == 0
        assert 0 < r["registers"] <= 255 and r["shared_bytes"] < 227 * 1024
        if r["kernel"] != "reduce_splits":                          # the tile loop is pipelined
            assert r["cp_async"] and r["num_stages"] >= 2
    # the record the page shows (every launch) holds these same kernels with the same figures
    shipped = load_report(ROOT / "assets" / "kernel_compile_sm90.json")
    assert shipped is not None, "assets/kernel_compile_sm90.json is missing (make compile-check writes it)"
    assert shipped["subset"] is False
    if shipped["triton_version"] != fresh["triton_version"]:
        pytest.skip(f"the shipped record is from Triton {shipped['triton_version']}, this is "
                    f"{fresh['triton_version']}: run make compile-check to refresh it")
    figures = ("registers", "spill_store_bytes", "spill_load_bytes", "shared_bytes", "tile", "num_warps", "num_stages",
               "cp_async")
    by_key = {r["key"]: r for r in shipped["results"]}
    for r in res:
        assert r["key"] in by_key, r
        assert [by_key[r["key"]][f] for f in figures] == [r[f] for f in figures]


def test_compile_inventory_covers_every_launch():
    from kernels import gpu_check as gc
    from kernels.compile_check import launch_inventory, load_report
    cases = launch_inventory()
    sources = {c["source"] for c in cases}
    assert sources == {"gpu_check correctness", "gpu_check timing", "page correctness check", "page sweep"}
    blocks = {c["block_size"] for c in cases if c["source"] == "gpu_check timing"}
    assert blocks == set(gc.TIMING_BLOCK_SIZES) | {None}
    rep = load_report(ROOT / "assets" / "kernel_compile_sm90.json")
    assert not rep["subset"] and rep["summary"]["failed"] == 0 and rep["summary"]["spilling"] == 0
    used = set()
    for r in rep["results"]:
        used |= set(r["used_by"])
    assert used == sources


def test_compile_facts_quote_the_record():
    from kernels.compile_check import facts_text, load_report, summary
    rep = load_report(ROOT / "assets" / "kernel_compile_sm90.json")
    text = facts_text(rep)
    s = summary(rep)
    assert text.startswith("**Compiled for H200 / sm_90** with Triton " + rep["triton_version"])
    assert f"{s['compiled']} kernels" in text and "no register spills" in text
    assert "every launch the page and `gpu_check` make" in text
    lo, hi = s["kernels"]["split_kv"]["registers"]
    assert f"split-KV pass {lo}–{hi}" in text
    assert "block sizes 1, 2, 4, 8, 16, 24, 32, 64, 128, 256 and the contiguous baseline" in text
    loops = [r for r in rep["results"] if r["kernel"] != "reduce_splits"]
    assert f"{len(loops)} of {len(loops)} attention kernels load K/V with asynchronous copies" in text


def test_compile_record_errors_name_the_file(tmp_path):
    from kernels.compile_check import load_report
    assert load_report(tmp_path / "missing.json") is None
    bad = tmp_path / "c.json"
    bad.write_text('{"results": [{}], "triton_version": "3.9", "target": {}}')
    with pytest.raises(ValueError, match=r"c.json: results\[0\] must name kernel"):
        load_report(bad)


def test_triton36_record_holds_the_same_launches_without_spills():
    from kernels.compile_check import TRITON36_OUT, compat_text, load_report
    ours = load_report(ROOT / "assets" / "kernel_compile_sm90.json")
    old = load_report(TRITON36_OUT)
    assert old["triton_version"].startswith("3.6")
    assert {r["key"] for r in old["results"]} == {r["key"] for r in ours["results"]}
    assert old["summary"]["spilling"] == 0 and old["summary"]["failed"] == 0
    n = len(old["results"])
    assert compat_text(ours, old).startswith(f"**Also compiled with Triton {old['triton_version']}** (the GPU "
                                             f"machine's version): {n} kernels, {n} of them the same launches")
