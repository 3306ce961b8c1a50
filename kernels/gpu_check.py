"""``python3 -m kernels.gpu_check -o DIR``: on an NVIDIA GPU, check the kernels and record what they do.

One command, under five minutes on an H200, that needs nothing but the machine's own ``python3``
with torch and Triton (tested against torch 2.11 / Triton 3.6 as well as this repository's
torch 2.13 / Triton 3.9; no install, no network, no virtualenv):

1. **Environment**: GPU name, SM count, memory, driver (``nvidia-smi``), python / torch / Triton /
   CUDA versions, date.
2. **Correctness** against the fp32 torch reference: the paged kernel and the contiguous
   baseline, fp16 and bf16, head_dim 128, block sizes 1-256 (and 24, not a power of
   two), the single pass, four splits and the automatic choice, ragged lengths with an empty
   sequence, shuffled block tables, every unused slot NaN (a read past a sequence's end makes
   the error infinite); torch's ``scaled_dot_product_attention`` on the same contiguous K/V too.
   (The kernels need only torch and Triton; this script also avoids numpy, which a GPU machine's
   torch does not require.)
3. **Timing** at Llama 3 8B's head layout (32 query / 8 KV heads, head_dim 128, bf16), 64 x 4,096
   and 16 x 16,384 tokens (K+V 1.07 and 4.3 GB, far above the 50 MB L2), block sizes 1, 2, 4 ...
   256: the paged kernel, the contiguous kernel (same launch) and SDPA on contiguous K/V, in
   turns, each sample one call between two CUDA events after a warm-up, with the L2 cache
   overwritten before every sample (cold L2). Bandwidth counts bytes as FlashInfer's decode
   benchmarks do: q, K and V read plus the output written, over the median time. The overhead is
   the median of paired paged / contiguous ratios with a bootstrap interval
   (:func:`kernels.sweep.stats.pair_stats`).
4. Writes ``DIR/kernel_gpu_check.json`` (default DIR: ``assets/``), which the kernel page reads
   and labels with the GPU, date and versions; the targets (>= 70 % of the data-sheet bandwidth,
   paged / contiguous <= 1.10 at block size >= 16) are reported in it, not asserted.

``--dry`` runs everything but CUDA timing on a CPU, in Triton's interpreter, on tiny shapes
(the test suite runs it): the same code paths, the same JSON layout, marked ``"dry_run": true``
and never shown as a measurement. Without ``--dry`` and without a GPU it says so and exits 2.

Exit status: 0 when every correctness case passed, 1 when one failed, 2 when it cannot run here.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import math
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

from allocator.common.errors import FieldError
from kernels.errors import read_json

#: File name written into DIR, read by the kernel page.
RESULT_NAME = "kernel_gpu_check.json"
DEFAULT_DIR = Path(__file__).resolve().parent.parent / "assets"
#: Max abs error allowed against the fp32 reference (outputs are O(1) averages of N(0, 1) values).
TOLERANCE = {"float16": 2e-2, "bfloat16": 6e-2, "float32": 2e-3}
#: Correctness cases on the GPU (every one is also compiled offline by ``kernels.compile_check``).
VALIDATION_DTYPES = ("float16", "bfloat16")
#: Head dim 128 only (Llama 3's): each (dtype, head dim, block size, path) is one more compile of
#: ~1-2 s on the GPU machine, and the whole command must finish within 5 minutes.
VALIDATION_HEAD_DIMS = (128,)
VALIDATION_BLOCK_SIZES = (1, 2, 4, 8, 16, 24, 32, 64, 128, 256)
VALIDATION_SEQ_LENS = (0, 1, 15, 16, 17, 300, 1000, 2049)
VALIDATION_HEADS = (32, 8)
VALIDATION_SPLITS = (1, 4, None)
#: Timed shapes: (num_seqs, seq_len), Llama 3 8B heads, bf16.
TIMING_SHAPES = ((64, 4096), (16, 16384))
TIMING_HEADS = (32, 8, 128)
TIMING_DTYPE = "bfloat16"
TIMING_BLOCK_SIZES = (1, 2, 4, 8, 16, 32, 64, 128, 256)
#: Timed samples per side per block size, and the budget after which timing stops (seconds).
SAMPLES = 15
TIME_BUDGET_S = 240.0
#: Bytes overwritten before each timed sample so that nothing of the last call stays in L2.
L2_FLUSH_BYTES = 256 * 2 ** 20
#: Targets of issue 25, reported in the JSON, never asserted.
TARGET_PEAK_FRACTION = 0.70
TARGET_OVERHEAD = 1.10
TARGET_FROM_BLOCK = 16
#: Dry run (CPU, interpreter): tiny shapes that exercise the same paths. fp16 and fp32, not bf16:
#: Triton's CPU interpreter multiplies bf16 matrices wrongly (a 16 x 16 ``tl.dot`` is off by ~1e10,
#: see tests/kernels/test_kernels_split.py); bf16 is compiled for sm_90 by ``kernels.compile_check``.
DRY = dict(dtypes=("float16", "float32"), timing_dtype="float16", head_dims=(16,), block_sizes=(1, 16, 24, 256),
           seq_lens=(0, 1, 17, 70), heads=(8, 2), timing_shapes=((2, 128),), timing_heads=(8, 2, 16),
           timing_block_sizes=(1, 16, 256), samples=3)
EXIT_NO_GPU = 2


def driver_version() -> str:
    """The NVIDIA driver version from ``nvidia-smi`` ("unknown" when it cannot be read)."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20)
        return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else "unknown"
    except (OSError, subprocess.SubprocessError, IndexError):
        return "unknown"


def environment(device: str) -> dict:
    """What ran: device, SMs, memory, driver, versions, date (UTC). CPU in a dry run."""
    import torch
    from kernels.attention.backend import cpu_description, cuda_peak_bandwidth, versions

    env = {"versions": versions(), "python_executable": sys.executable, "platform": platform.platform(),
           "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")}
    if device == "cuda":
        props = torch.cuda.get_device_properties(0)
        peak, src = cuda_peak_bandwidth(0)
        env.update(device=props.name, sm_count=props.multi_processor_count,
                   memory_GiB=round(props.total_memory / 2 ** 30, 1), driver=driver_version(),
                   peak_GBps=peak / 1e9 if peak else None, peak_source=src)
    else:
        env.update(device=cpu_description(), sm_count=None, memory_GiB=None, driver="none (dry run on CPU)",
                   peak_GBps=None, peak_source="")
    return env


def validate(log=print, device: str = "cuda", dtypes=VALIDATION_DTYPES, head_dims=VALIDATION_HEAD_DIMS,
             block_sizes=VALIDATION_BLOCK_SIZES, seq_lens=VALIDATION_SEQ_LENS, num_heads: int = VALIDATION_HEADS[0],
             num_kv_heads: int = VALIDATION_HEADS[1], splits=VALIDATION_SPLITS) -> list[dict]:
    """Compare the paged kernel, the contiguous kernel and SDPA with the reference.

    Args:
        device: "cuda" for the real check; "cpu" runs the same loop in Triton's interpreter.
        dtypes: names from :data:`TOLERANCE`.

    Returns:
        one dict per case: ``kernel`` ("paged", "contiguous" or "sdpa"), ``dtype``, ``head_dim``,
        ``block_size`` (None unless paged), ``splits`` ("auto" or an int; None for SDPA),
        ``num_splits`` (what ran), ``max_abs_error``, ``tolerance``, ``passed``.
    """
    import torch
    from kernels.attention.paged_attention import (contiguous_attention_triton, launch_config,
                                                   paged_attention_reference, paged_attention_triton)
    from kernels.attention.inputs import make_paged_inputs

    rows = []

    def record(kind, dtype_name, head_dim, bs, sp, ran, out, ref):
        if device == "cuda":
            torch.cuda.synchronize()
        err = float((out.float() - ref).abs().max())
        err = err if err == err else float("inf")                       # NaN -> inf
        row = {"kernel": kind, "dtype": dtype_name, "head_dim": head_dim, "block_size": bs,
               "splits": sp, "num_splits": ran, "max_abs_error": err, "tolerance": TOLERANCE[dtype_name],
               "passed": err <= TOLERANCE[dtype_name]}
        rows.append(row)
        if not row["passed"]:
            log(f"  FAILED: {row}")

    for dtype_name in dtypes:
        dtype = getattr(torch, dtype_name)
        for head_dim in head_dims:
            ref = dense = None
            for bs in block_sizes:
                inp = make_paged_inputs(list(seq_lens), num_heads, num_kv_heads, head_dim, bs, dtype=dtype,
                                        device=device, fill=float("nan"), spare_blocks=5, seed=head_dim)
                if ref is None:      # same seed and lengths: the same tokens for every block size
                    ref = paged_attention_reference(*inp.args)
                    dense = inp
                for sp in splits:
                    cfg = launch_config(inp.q, inp.k_cache, inp.seq_lens, num_splits=sp)
                    out = paged_attention_triton(*inp.args, config=cfg)
                    record("paged", dtype_name, head_dim, bs, "auto" if sp is None else sp, cfg.num_splits, out, ref)
            for sp in splits:
                cfg = launch_config(dense.q, dense.k_dense, dense.seq_lens, num_splits=sp)
                out = contiguous_attention_triton(dense.q, dense.k_dense, dense.v_dense, dense.seq_lens, config=cfg)
                record("contiguous", dtype_name, head_dim, None, "auto" if sp is None else sp, cfg.num_splits,
                       out, ref)
            keep = dense.seq_lens > 0            # SDPA has no notion of an empty sequence
            out = torch.zeros_like(dense.q)
            out[keep] = sdpa_decode(dense.q[keep], dense.k_dense[keep], dense.v_dense[keep], dense.seq_lens[keep])
            record("sdpa", dtype_name, head_dim, None, None, None, out, ref)
    log(f"correctness: {sum(r['passed'] for r in rows)}/{len(rows)} cases within tolerance")
    return rows


def sdpa_decode(q, k, v, seq_lens):
    """torch's ``scaled_dot_product_attention`` for one decode step on contiguous K/V.

    q [S, H, D]; k, v [S, T, Hkv, D] (contiguous per sequence); seq_lens int32 [S], each >= 1.
    Sequences shorter than T are masked with a boolean mask (all equal lengths: no mask, so
    torch may pick its fused kernels). GQA by repeating K/V heads in a view-free way:
    ``enable_gqa`` where this torch has it (2.5+), else ``repeat_interleave``.
    Returns [S, H, D] in q's dtype.
    """
    import torch
    import torch.nn.functional as F

    S, H, D = q.shape
    T, hkv = k.shape[1], k.shape[2]
    qh = q.unsqueeze(2)                                   # [S, H, 1, D]
    kh = k.transpose(1, 2)                                # [S, Hkv, T, D]
    vh = v.transpose(1, 2)
    mask = None
    if bool((seq_lens != T).any()):
        mask = (torch.arange(T, device=q.device)[None, :] < seq_lens[:, None].to(torch.int64))[:, None, None, :]
    try:
        out = F.scaled_dot_product_attention(qh, kh, vh, attn_mask=mask, enable_gqa=(H != hkv))
    except TypeError:                                     # torch < 2.5: no enable_gqa
        g = H // hkv
        out = F.scaled_dot_product_attention(qh, kh.repeat_interleave(g, 1), vh.repeat_interleave(g, 1),
                                             attn_mask=mask)
    return out.squeeze(2)


def cuda_sampler(flush):
    """A timer of one call on the GPU with a cold L2 cache, shared by this check and the sweep
    (:mod:`kernels.sweep.run`).

    Args:
        flush: a CUDA tensor (uint8, :data:`L2_FLUSH_BYTES` long) overwritten before each call, so
            nothing the call reads is left in the L2 cache.

    Returns:
        ``sample(fn) -> float``: the seconds between two CUDA events recorded around one call of
        ``fn()`` (the events are synchronised before it returns).
    """
    import torch

    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

    def sample(fn) -> float:
        flush.zero_()
        start.record()
        fn()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1e3
    return sample


def _cpu_sampler(flush):
    """Dry run: wall time of one call (not a measurement of anything on a GPU)."""
    def sample(fn) -> float:
        flush.zero_()
        t0 = time.perf_counter()
        fn()
        return max(time.perf_counter() - t0, 1e-9)
    return sample


def io_bytes(num_seqs: int, seq_len: int, num_heads: int, num_kv_heads: int, head_dim: int, itemsize: int) -> int:
    """Bytes one decode call moves by FlashInfer's count: q and K/V read, output written.

    ``(2 x num_seqs x num_heads x head_dim + 2 x num_seqs x seq_len x num_kv_heads x head_dim) x
    itemsize``; the block table (4 bytes per block) is left out, as FlashInfer leaves out its
    page indices. Source: FlashInfer's decode benchmarks (``add_global_memory_reads`` of q, K and
    V and ``add_global_memory_writes`` of o).
    """
    return (2 * num_seqs * num_heads * head_dim + 2 * num_seqs * seq_len * num_kv_heads * head_dim) * itemsize


def time_shape(num_seqs: int, seq_len: int, heads: tuple[int, int, int], dtype_name: str, block_sizes, samples: int,
               device: str, peak_GBps: float | None, deadline: float, log=print) -> dict:
    """Time paged, contiguous and SDPA at one shape for each block size (see the module docstring).

    Returns ``{"meta": {...}, "rows": [...]}`` in the layout :class:`kernels.sweep.run.SweepResult`
    reads, each row with ``sdpa_ms`` beside the paged and contiguous figures; block sizes not
    reached before ``deadline`` (``time.perf_counter()`` value) are listed in ``meta["skipped"]``.
    """
    import torch
    from kernels.attention.paged_attention import (contiguous_attention_triton, launch_config,
                                                   paged_attention_triton)
    from kernels.attention.inputs import page_tokens
    from kernels.attention.validation import validate_inputs
    from kernels.sweep.stats import NO_DIFFERENCE, pair_stats

    num_heads, num_kv_heads, head_dim = heads
    dtype = getattr(torch, dtype_name)
    gen = torch.Generator(device=device).manual_seed(0)
    q = torch.randn(num_seqs, num_heads, head_dim, generator=gen, device=device, dtype=dtype)
    k = torch.randn(num_seqs, seq_len, num_kv_heads, head_dim, generator=gen, device=device, dtype=dtype)
    v = torch.randn(num_seqs, seq_len, num_kv_heads, head_dim, generator=gen, device=device, dtype=dtype)
    lens = torch.full((num_seqs,), seq_len, dtype=torch.int32, device=device)
    cfg = launch_config(q, k, lens)
    nbytes = io_bytes(num_seqs, seq_len, num_heads, num_kv_heads, head_dim, q.element_size())
    flush = torch.empty(L2_FLUSH_BYTES if device == "cuda" else 1 << 20, dtype=torch.uint8, device=device)
    sample = cuda_sampler(flush) if device == "cuda" else _cpu_sampler(flush)
    out_c = torch.empty_like(q)
    contig = lambda: contiguous_attention_triton(q, k, v, lens, validate=False, out=out_c, config=cfg)  # noqa: E731
    sdpa = lambda: sdpa_decode(q, k, v, lens)                                                       # noqa: E731
    contig()
    sdpa()
    ref_out = contig().float()
    sdpa_err = float((sdpa().float() - ref_out).abs().max())
    rows, skipped = [], []
    perm = torch.Generator().manual_seed(1)
    for bs in block_sizes:
        if time.perf_counter() > deadline:
            skipped.append(bs)
            continue
        kc, vc, tables = page_tokens(k, v, lens, bs, generator=perm)
        validate_inputs(q, kc, vc, tables, lens)
        out_p = torch.empty_like(q)
        paged = lambda: paged_attention_triton(q, kc, vc, tables, lens, validate=False, out=out_p,  # noqa: E731
                                               config=cfg)
        diff = float((paged().float() - ref_out).abs().max())
        for fn in (paged, contig, sdpa):          # warm-up (compile, allocator)
            fn()
        a, b, c = [], [], []
        for i in range(samples):                  # sides in turns, the order rotating
            order = ((paged, a), (contig, b), (sdpa, c))
            order = order[i % 3:] + order[:i % 3]
            for fn, acc in order:
                acc.append(sample(fn))
        st = pair_stats(a, b, seed=bs)
        med_c = sorted(c)[len(c) // 2]
        row = {"block_size": bs, "paged_s": st["a_median"], "contiguous_s": st["b_median"],
               "paged_ms": st["a_median"] * 1e3, "contiguous_ms": st["b_median"] * 1e3, "sdpa_ms": med_c * 1e3,
               "paged_ms_q1": st["a_q1"] * 1e3, "paged_ms_q3": st["a_q3"] * 1e3,
               "contiguous_ms_q1": st["b_q1"] * 1e3, "contiguous_ms_q3": st["b_q3"] * 1e3,
               "overhead": st["overhead"], "overhead_ci_low": st["ci_low"], "overhead_ci_high": st["ci_high"],
               "verdict": st["verdict"], "pairs": st["pairs"],
               "paged_GBps": nbytes / st["a_median"] / 1e9, "contiguous_GBps": nbytes / st["b_median"] / 1e9,
               "sdpa_GBps": nbytes / med_c / 1e9,
               "paged_peak_fraction": (nbytes / st["a_median"] / 1e9 / peak_GBps) if peak_GBps else None,
               "contiguous_peak_fraction": (nbytes / st["b_median"] / 1e9 / peak_GBps) if peak_GBps else None,
               "max_abs_diff": diff if math.isfinite(diff) else float("inf")}
        rows.append(row)
        log(f"  block {bs:>3}: paged {row['paged_ms']:.4f} ms, contiguous {row['contiguous_ms']:.4f} ms, "
            f"SDPA {row['sdpa_ms']:.4f} ms, overhead {row['overhead']:.3f} "
            f"({row['overhead_ci_low']:.3f}-{row['overhead_ci_high']:.3f}, {row['verdict']}), "
            f"{row['paged_GBps']:.0f} GB/s")
        del kc, vc, tables
        if device == "cuda":
            torch.cuda.empty_cache()
    meta = {"backend": "cuda" if device == "cuda" else "dry-run", "shape": {
                "num_seqs": num_seqs, "seq_len": seq_len, "num_heads": num_heads, "num_kv_heads": num_kv_heads,
                "head_dim": head_dim, "dtype": dtype_name},
            "kv_bytes": 2 * num_seqs * seq_len * num_kv_heads * head_dim * q.element_size(), "io_bytes": nbytes,
            "bytes_definition": "q, K and V read + output written (FlashInfer's decode benchmarks)",
            "timer": ("CUDA events around one call, L2 overwritten before each sample, after a warm-up; "
                      f"{samples} samples per side, sides in rotating turns") if device == "cuda"
            else "time.perf_counter (dry run on a CPU: not a measurement)",
            "launch": {"tile": cfg.tile, "num_warps": cfg.num_warps, "num_stages": cfg.num_stages,
                       "num_splits": cfg.num_splits, "split_len": cfg.split_len},
            "sdpa_max_abs_diff": sdpa_err, "skipped": skipped, "confidence": 0.95, "row_confidence": 0.95,
            "no_difference": NO_DIFFERENCE, "warnings": []}
    if skipped:
        meta["warnings"].append(f"time budget reached: block sizes {skipped} not timed")
    return {"meta": meta, "rows": rows}


def targets(sweeps: list[dict]) -> dict:
    """The issue's targets per timed shape, with the measured values: reported, never asserted."""
    out = {}
    for s in sweeps:
        sh = s["meta"]["shape"]
        key = f"{sh['num_seqs']}x{sh['seq_len']}"
        big = [r for r in s["rows"] if r["block_size"] >= TARGET_FROM_BLOCK]
        fr = [r["paged_peak_fraction"] for r in big if r.get("paged_peak_fraction") is not None]
        ov = [r["overhead"] for r in big]
        out[f"{key}: min fraction of peak, block >= {TARGET_FROM_BLOCK}"] = {
            "value": min(fr) if fr else None, "target": f">= {TARGET_PEAK_FRACTION}",
            "met": bool(fr) and min(fr) >= TARGET_PEAK_FRACTION}
        out[f"{key}: max paged / contiguous, block >= {TARGET_FROM_BLOCK}"] = {
            "value": max(ov) if ov else None, "target": f"<= {TARGET_OVERHEAD}",
            "met": bool(ov) and max(ov) <= TARGET_OVERHEAD}
    return out


def run(out_dir: str | Path, dry: bool = False, samples: int | None = None, budget_s: float = TIME_BUDGET_S,
        log=print) -> tuple[dict, Path]:
    """Run every step and write ``out_dir/kernel_gpu_check.json``; returns (report, path).

    Raises:
        FieldError (``samples``, ``budget_s``): fewer than 3 samples, or a budget that is not a
            positive number of seconds (nothing is run or written).
        RuntimeError: not ``dry`` and no CUDA GPU (or Triton would run in its interpreter).
    """
    if samples is not None and (isinstance(samples, bool) or not isinstance(samples, int) or samples < 3):
        raise FieldError("samples", f" = {samples!r} must be a whole number >= 3 (timed samples per side)")
    if isinstance(budget_s, bool) or not isinstance(budget_s, (int, float)) or not budget_s > 0 \
            or not math.isfinite(budget_s):
        raise FieldError("budget_s", f" = {budget_s!r} must be a positive number of seconds")
    import torch

    t0 = time.perf_counter()
    device = "cpu" if dry else "cuda"
    if not dry and not torch.cuda.is_available():
        raise RuntimeError("gpu_check needs an NVIDIA GPU with CUDA, and this machine has none "
                           f"(torch {torch.__version__}, CUDA build: {torch.version.cuda or 'no'}). Nothing was run "
                           "or written. `--dry` runs the same steps on the CPU without timing.")
    if not dry and os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
        raise RuntimeError("gpu_check compiles the kernels: unset TRITON_INTERPRET and run again.")
    import kernels  # noqa: F401  (interpreter on CPU)
    env = environment(device)
    log(f"device: {env['device']}" + (f", {env['sm_count']} SMs, driver {env['driver']}" if not dry else " (dry run)"))
    log(f"versions: {env['versions']}")
    p = DRY if dry else {}
    checks = validate(log, device, dtypes=p.get("dtypes", VALIDATION_DTYPES),
                      head_dims=p.get("head_dims", VALIDATION_HEAD_DIMS),
                      block_sizes=p.get("block_sizes", VALIDATION_BLOCK_SIZES),
                      seq_lens=p.get("seq_lens", VALIDATION_SEQ_LENS),
                      num_heads=p.get("heads", VALIDATION_HEADS)[0], num_kv_heads=p.get("heads", VALIDATION_HEADS)[1])
    log(f"correctness done at {time.perf_counter() - t0:.0f} s")
    sweeps = []
    deadline = t0 + budget_s
    for num_seqs, seq_len in p.get("timing_shapes", TIMING_SHAPES):
        log(f"timing {num_seqs} x {seq_len} tokens:")
        sweeps.append(time_shape(num_seqs, seq_len, p.get("timing_heads", TIMING_HEADS),
                                 p.get("timing_dtype", TIMING_DTYPE),
                                 p.get("timing_block_sizes", TIMING_BLOCK_SIZES),
                                 samples or p.get("samples", SAMPLES), device, env["peak_GBps"], deadline, log))
        for s in sweeps[-1:]:
            s["meta"].update(device=env["device"], date=env["date"], versions=env["versions"],
                             peak_GBps=env["peak_GBps"], peak_source=env["peak_source"])
    env["wall_s"] = round(time.perf_counter() - t0, 1)
    report = {"dry_run": dry, "meta": env, "correctness": checks, "sweeps": sweeps,
              "targets": targets(sweeps) if not dry else {}}
    out = Path(out_dir) / RESULT_NAME
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(out.suffix + ".tmp")
    tmp.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    os.replace(tmp, out)
    for name, t in report["targets"].items():
        log(f"target {name}: {t['value']} ({t['target']}): {'met' if t['met'] else 'NOT met'}")
    log(f"wrote {out} in {env['wall_s']} s")
    return report, out


def load_result(path: str | Path | None = None) -> dict | None:
    """Read a ``kernel_gpu_check.json`` (None when absent).

    Raises:
        FieldError (``file``; the message starts with the file's name): not JSON, or missing
            ``meta``/``correctness``/``sweeps``.
    """
    path = Path(path) if path else DEFAULT_DIR / RESULT_NAME
    if not path.exists():
        return None
    data = read_json(path)
    if not isinstance(data, dict) or not all(isinstance(data.get(k), t) for k, t in
                                             (("meta", dict), ("correctness", list), ("sweeps", list))):
        raise FieldError("file", ": expected an object with 'meta', 'correctness' and 'sweeps'", subject=path.name)
    return data


def main(argv: list[str] | None = None) -> int:
    """CLI; see the module docstring."""
    ap = argparse.ArgumentParser(prog="python3 -m kernels.gpu_check", description=__doc__.splitlines()[0])
    ap.add_argument("-o", "--out-dir", default=str(DEFAULT_DIR), help=f"folder for {RESULT_NAME} (default: %(default)s)")
    ap.add_argument("--dry", action="store_true", help="CPU, interpreter, tiny shapes, no CUDA timing")
    ap.add_argument("--samples", type=int, help=f"timed samples per side (default {SAMPLES})")
    ap.add_argument("--budget", type=float, default=TIME_BUDGET_S, help="seconds after which timing stops")
    args = ap.parse_args(argv)
    try:
        report, _ = run(args.out_dir, dry=args.dry, samples=args.samples, budget_s=args.budget,
                        log=lambda m: print(m, flush=True))
    except FieldError as exc:                       # bad input: one line, nothing run or written
        flag = {"samples": "--samples", "budget_s": "--budget"}.get(exc.field, exc.field)
        print(f"error: {exc.reworded(flag)}", file=sys.stderr)
        return EXIT_NO_GPU
    except RuntimeError as exc:
        print(str(exc), file=sys.stderr)
        return EXIT_NO_GPU
    return 0 if all(c["passed"] for c in report["correctness"]) else 1


if __name__ == "__main__":
    sys.exit(main())
