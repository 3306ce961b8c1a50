"""Block-size sweep: what reading the KV cache through a block table costs the decode kernel.

For each block size (1, 2, 4 ... 256) the same tokens are paged into a randomly permuted block
pool and the decode kernel runs on it. The baseline reads the same tokens with no block table:
on the Triton backends the contiguous kernel (:func:`kernels.paged_attention.contiguous_attention_triton`,
the same launch with the table lookup compiled out); on the torch CPU path, which has no kernel
to specialise, the same torch gather over one block per sequence, so there the ratio isolates
where the gather reads. Paged / contiguous latency is the gather overhead -- the kernel-side cost
of a page size, which the slack (memory waste) figures of the allocator do not capture.

Timing is paired: the two sides alternate (paged, contiguous, then contiguous, paged, ...) so
that a slow moment of a shared machine hits both, and each pair gives one ratio. The overhead
reported is the median of those ratios, with a bootstrap confidence interval over the pairs
(:func:`pair_stats`); the intervals of one sweep hold at 95 % together (each row at
1 - 0.05 / number of block sizes, Bonferroni), so a sweep of pure noise rarely shows any block
size as different. Where an interval includes 1.0 the verdict is "no measurable difference".
The spread of each side's times (quartiles) is reported beside the medians.

* On CUDA each timed sample is one call between two CUDA events, after a warm-up, with a 256 MiB
  buffer overwritten before it so that nothing stays in the L2 cache, and a K+V working set of
  at least 1 GB by default.
* On a CPU each sample is one call under ``time.perf_counter``, with a K+V working set twice
  the last-level cache (67 MB against this lab machine's 32 MiB L3), gathered into
  buffers reused between calls, so that what differs between the sides is only where the gather
  reads.

:func:`shared_sweep` is the entry point for servers: one process-wide cache keyed on the sweep's
parameters, so identical sweeps requested by several sessions run once (a second request waits
for the running one and follows its progress), and a time budget (:data:`DEFAULT_BUDGET_S`)
from which the number of timed pairs is chosen after timing one call of each side
(:func:`estimate`). It is the one function to wrap in a server-wide queue for heavy work.

CLI::

    python -m kernels.sweep                      # auto backend, its default shape, prints a table
    python -m kernels.sweep --tiny               # seconds, tiny shape
    python -m kernels.gpu_check                  # on a GPU: validate, sweep, record results

Sources: Kwon et al., PagedAttention (SOSP 2023), section on kernel overhead of block size;
vLLM's paged-attention kernels for the cache layout; Efron & Tibshirani, *An Introduction to the
Bootstrap* (1993) for the percentile interval.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import math
import statistics
import sys
import threading
import time
from collections import OrderedDict
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

import torch

import kernels  # noqa: F401  (sets TRITON_INTERPRET before triton is imported on CPU)
from kernels.backend import BACKENDS, Backend, cpu_description, detect, last_level_cache_bytes, versions
from kernels.paged_attention import (contiguous_attention_triton, launch_config, page_tokens, paged_attention_torch,
                                     paged_attention_triton, validate_inputs)

DEFAULT_BLOCK_SIZES: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64, 128, 256)
#: Seconds a sweep with ``repeats=None`` is sized to take (issue 24: no sweep past 60 s by default).
DEFAULT_BUDGET_S = 45.0
#: A sweep sized from its budget stops before a block size that would take it past this many
#: seconds (issue 24), and names the block sizes it left out.
HARD_LIMIT_S = 60.0
#: Bounds on the timed pairs per block size chosen from a budget.
MIN_REPEATS, MAX_REPEATS = 3, 15
#: Sweep results kept by :func:`shared_sweep` (a few kilobytes each).
CACHE_ENTRIES = 16
#: Above this many (token x KV head) pairs the interpreter backend refuses to time (far too slow).
INTERPRETER_LIMIT = 16_384
#: Confidence of the interval around each overhead ratio.
CONFIDENCE = 0.95
#: Bootstrap resamples per interval.
BOOTSTRAP_RESAMPLES = 4000
#: Verdicts of one block size's comparison.
SLOWER, FASTER, NO_DIFFERENCE = "slower", "faster", "no measurable difference"
DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32}


@dataclass(frozen=True)
class SweepShape:
    """The decode batch swept: ``num_seqs`` sequences of ``seq_len`` tokens each.

    ``dtype`` is "float16", "bfloat16" or "float32". K+V bytes per call =
    2 x num_seqs x seq_len x num_kv_heads x head_dim x itemsize.
    """

    num_seqs: int
    seq_len: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    dtype: str = "float32"

    @property
    def torch_dtype(self) -> torch.dtype:
        """The torch dtype named by ``dtype``."""
        return DTYPES[self.dtype]

    @property
    def kv_bytes(self) -> int:
        """Bytes of K and V one decode call reads (bytes)."""
        item = 4 if self.dtype == "float32" else 2
        return 2 * self.num_seqs * self.seq_len * self.num_kv_heads * self.head_dim * item

    def validate(self) -> None:
        """Raise ValueError naming the field if a size is < 1, the head ratio is not whole or the
        dtype is unknown."""
        for name in ("num_seqs", "seq_len", "num_heads", "num_kv_heads", "head_dim"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
        if self.num_heads % self.num_kv_heads:
            raise ValueError(f"num_heads ({self.num_heads}) must be a multiple of num_kv_heads "
                             f"({self.num_kv_heads})")
        if self.dtype not in DTYPES:
            raise ValueError(f"dtype must be one of {tuple(DTYPES)}, got {self.dtype!r}")


#: CPU default: K+V = 67 MB per call, twice the 32 MiB L3 of the lab's machines (Llama-3-8B-like
#: heads; four sequences, not eight, so that nine block sizes with at least 3 timed pairs each fit
#: the 45 s budget on a 2-core machine shared by other work: with eight, a loaded machine took 127 s).
CPU_SHAPE = SweepShape(num_seqs=4, seq_len=2048, num_heads=32, num_kv_heads=8, head_dim=128, dtype="float32")
#: CUDA default: K+V = 1.07 GB per call, larger than any L2 cache (Llama-3-8B-like heads).
CUDA_SHAPE = SweepShape(num_seqs=64, seq_len=4096, num_heads=32, num_kv_heads=8, head_dim=128, dtype="bfloat16")
#: Long contexts on CUDA: 16 sequences x 16k tokens (K+V = 4.3 GB; 128 single-pass programs on a
#: 132-SM H200, so the split-KV path is what fills the GPU).
CUDA_LONG_SHAPE = SweepShape(num_seqs=16, seq_len=16384, num_heads=32, num_kv_heads=8, head_dim=128,
                             dtype="bfloat16")
#: Tiny: for tests, the page's quick option and the Triton interpreter.
TINY_SHAPE = SweepShape(num_seqs=2, seq_len=64, num_heads=4, num_kv_heads=2, head_dim=16, dtype="float32")


def default_shape(backend_name: str) -> SweepShape:
    """The default sweep shape for a backend name."""
    return {"cuda": CUDA_SHAPE, "torch-cpu": CPU_SHAPE}.get(backend_name, TINY_SHAPE)


@dataclass
class SweepResult:
    """Rows (one per block size) plus metadata saying what produced them.

    Row keys: ``block_size`` (slots), ``paged_s`` and ``contiguous_s`` (median latency, seconds),
    ``paged_ms``/``contiguous_ms`` (milliseconds), ``paged_ms_q1``/``paged_ms_q3`` and
    ``contiguous_ms_q1``/``contiguous_ms_q3`` (quartiles: the spread), ``overhead`` (median of
    the paired paged / contiguous ratios), ``overhead_ci_low``/``overhead_ci_high`` (its bootstrap
    interval; the rows' intervals hold at 95 % together), ``verdict`` ("slower", "faster" or
    "no measurable difference"),
    ``pairs`` (timed pairs), ``paged_GBps``/``contiguous_GBps`` (K+V bytes / median time, 1e9
    bytes per second), ``paged_peak_fraction`` (paged_GBps / device peak, None when the peak is
    unknown), ``max_abs_diff`` (paged vs contiguous output).

    Meta keys: ``backend``, ``device``, ``reason``, ``peak_GBps``, ``peak_source``, ``shape``
    (dict), ``kv_bytes``, ``llc_bytes`` (CPU last-level cache, None on CUDA or unknown),
    ``timer``, ``confidence`` (0.95, for the whole sweep), ``row_confidence`` (each row's
    level, Bonferroni), ``launch`` (the Triton launch shape, or None for torch),
    ``date`` (UTC ISO 8601), ``versions`` (dict), ``recorded`` (True when loaded from a file),
    ``warnings`` (list of str).
    """

    rows: list[dict] = field(default_factory=list)
    meta: dict = field(default_factory=dict)

    def to_json(self) -> str:
        """Serialise rows and meta as indented JSON."""
        return json.dumps({"meta": self.meta, "rows": self.rows}, indent=2)

    @classmethod
    def from_json(cls, text: str) -> "SweepResult":
        """Parse :meth:`to_json` output.

        Raises:
            ValueError: text is not JSON with "meta" (object) and "rows" (list of objects with
                block_size, paged_ms, contiguous_ms, overhead).
        """
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(f"results file is not valid JSON: {exc}") from None
        if not isinstance(data, dict) or not isinstance(data.get("meta"), dict) \
                or not isinstance(data.get("rows"), list):
            raise ValueError("results file must be a JSON object with 'meta' and 'rows'")
        need = ("block_size", "paged_ms", "contiguous_ms", "overhead", "overhead_ci_low", "overhead_ci_high",
                "verdict")
        for i, row in enumerate(data["rows"]):
            if not isinstance(row, dict) or any(k not in row for k in need):
                raise ValueError(f"rows[{i}] must have keys {need}")
        return cls(rows=data["rows"], meta=data["meta"])

    @property
    def measurable(self) -> bool:
        """True when at least one block size's interval excludes 1.0 (a real difference)."""
        return any(r["verdict"] != NO_DIFFERENCE for r in self.rows)

    def verdict_text(self) -> str:
        """One sentence on what the sweep can claim, with every number taken from the rows."""
        return verdict_text(self.rows, self.meta.get("confidence", CONFIDENCE),
                            simultaneous=self.meta.get("row_confidence", CONFIDENCE) > self.meta.get("confidence",
                                                                                                  CONFIDENCE))

    def table(self) -> str:
        """A fixed-width text table of the rows."""
        head = (f"{'block':>6} {'paged ms':>10} {'contig ms':>10} {'overhead':>9} {'interval':>15} "
                f"{'verdict':>24} {'paged GB/s':>11} {'of peak':>8}")
        lines = [head, "-" * len(head)]
        for r in self.rows:
            frac = r.get("paged_peak_fraction")
            ci = f"{r['overhead_ci_low']:.3f}-{r['overhead_ci_high']:.3f}"
            lines.append(f"{r['block_size']:>6} {r['paged_ms']:>10.4g} {r['contiguous_ms']:>10.4g} "
                         f"{r['overhead']:>9.3f} {ci:>15} {r['verdict']:>24} {r['paged_GBps']:>11.4g} "
                         f"{('%.0f%%' % (100 * frac)) if frac is not None else 'n/a':>8}")
        return "\n".join(lines)


def pair_stats(a_s: list[float], b_s: list[float], seed: int = 0, resamples: int = BOOTSTRAP_RESAMPLES,
               confidence: float = CONFIDENCE) -> dict:
    """Summarise paired timings of two sides (a = paged, b = contiguous), in seconds.

    The overhead is the median of the per-pair ratios a_i / b_i; its interval is the percentile
    bootstrap of that median over pairs (``resamples`` resamples with replacement, fixed
    ``seed``). The verdict is "slower" when the interval lies above 1.0, "faster" when below, and
    "no measurable difference" when it contains 1.0. Source: Efron & Tibshirani (1993), ch. 13.

    Returns:
        dict with ``a_median``, ``a_q1``, ``a_q3``, ``b_median``, ``b_q1``, ``b_q3`` (seconds),
        ``overhead``, ``ci_low``, ``ci_high`` (ratios), ``verdict`` and ``pairs``.

    Raises:
        ValueError: the two lists differ in length or are empty, or a time is not > 0.
    """
    # torch, not numpy: gpu_check imports this on GPU machines whose python3 may have no numpy
    a = torch.as_tensor(list(a_s), dtype=torch.float64)
    b = torch.as_tensor(list(b_s), dtype=torch.float64)
    if a.shape != b.shape or a.numel() == 0:
        raise ValueError(f"paired timings must be two non-empty lists of equal length, got {a.numel()} and "
                         f"{b.numel()}")
    if not (bool((a > 0).all()) and bool((b > 0).all())):
        raise ValueError("every timing must be > 0 seconds")
    ratios = a / b
    gen = torch.Generator().manual_seed(int(seed))
    idx = torch.randint(0, ratios.numel(), (resamples, ratios.numel()), generator=gen)
    medians = torch.quantile(ratios[idx], 0.5, dim=1)                  # the median, as numpy takes it
    tail = (1.0 - confidence) / 2
    lo, hi = (float(x) for x in torch.quantile(medians, torch.tensor([tail, 1.0 - tail], dtype=torch.float64)))
    verdict = SLOWER if lo > 1.0 else FASTER if hi < 1.0 else NO_DIFFERENCE
    q = lambda x, p: float(torch.quantile(x, p))  # noqa: E731
    return {"a_median": q(a, 0.5), "a_q1": q(a, 0.25), "a_q3": q(a, 0.75),
            "b_median": q(b, 0.5), "b_q1": q(b, 0.25), "b_q3": q(b, 0.75),
            "overhead": q(ratios, 0.5), "ci_low": lo, "ci_high": hi, "verdict": verdict,
            "pairs": int(ratios.numel())}


def verdict_text(rows: list[dict], confidence: float = CONFIDENCE, simultaneous: bool = False) -> str:
    """What a sweep's rows allow one to say, in one or two sentences (numbers from the rows).

    "No measurable difference on this machine" when every interval contains 1.0; otherwise the
    block sizes measured slower (and faster), each with its overhead and interval.
    ``simultaneous``: the intervals hold at ``confidence`` together (Bonferroni), and the text
    says so.
    """
    if not rows:
        return "No block sizes were measured."
    pct = f"{100 * confidence:.0f} %" + (" simultaneous" if simultaneous else "")
    slower = [r for r in rows if r["verdict"] == SLOWER]
    faster = [r for r in rows if r["verdict"] == FASTER]
    if not slower and not faster:
        return (f"No measurable difference on this machine: for every block size the {pct} interval of the "
                f"overhead includes 1.0×, so what the chart shows is noise, not a trend.")

    def fmt(rs: list[dict]) -> str:
        return ", ".join(f"block {r['block_size']}: {r['overhead']:.3f}× "
                         f"({r['overhead_ci_low']:.3f}–{r['overhead_ci_high']:.3f})" for r in rs)
    parts = []
    if slower:
        parts.append(f"Paged is measurably slower than contiguous at {fmt(slower)}")
    if faster:
        parts.append(f"measurably faster at {fmt(faster)}")
    rest = len(rows) - len(slower) - len(faster)
    text = "; ".join(parts) + f" ({pct} intervals)."
    if rest:
        text += (f" At the other {rest} block size{'s' if rest != 1 else ''} the interval includes 1.0×: "
                 "no measurable difference.")
    return text


def format_bytes(n: float) -> str:
    """``n`` bytes as e.g. "67.1 MB", "1.07 GB" or "16.4 kB" (decimal units)."""
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= size:
            return f"{n / size:.3g} {unit}"
    return f"{int(n)} B"


def _dense_tokens(shape: SweepShape, device: str, seed: int) -> tuple[torch.Tensor, ...]:
    gen = torch.Generator(device=device).manual_seed(seed)
    dt = shape.torch_dtype
    q = torch.randn(shape.num_seqs, shape.num_heads, shape.head_dim, generator=gen, device=device, dtype=dt)
    kv_shape = (shape.num_seqs, shape.seq_len, shape.num_kv_heads, shape.head_dim)
    k = torch.randn(kv_shape, generator=gen, device=device, dtype=dt)
    v = torch.randn(kv_shape, generator=gen, device=device, dtype=dt)
    lens = torch.full((shape.num_seqs,), shape.seq_len, dtype=torch.int32, device=device)
    return q, k, v, lens


def _pair_timer(backend: str) -> tuple[Callable[..., tuple[list[float], list[float]]], str]:
    """Return ``(time_pairs, description)``; ``time_pairs(fn_a, fn_b, repeats, on_pair)`` gives
    two lists of ``repeats`` seconds each, timed in alternating order (a b, b a, a b, ...),
    calling ``on_pair(i)`` after pair ``i``."""
    if backend == "cuda":
        from kernels.gpu_check import L2_FLUSH_BYTES, _cuda_sampler
        sample = _cuda_sampler(torch.empty(L2_FLUSH_BYTES, dtype=torch.uint8, device="cuda"))
        desc = "CUDA events around one call, L2 overwritten before each sample, pairs after a warm-up, sides alternating"
    else:
        def sample(fn: Callable[[], object]) -> float:
            t0 = time.perf_counter()
            fn()
            return time.perf_counter() - t0
        desc = "time.perf_counter per call, pairs after one warm-up call each, sides alternating"

    def time_pairs(fn_a: Callable[[], object], fn_b: Callable[[], object], repeats: int,
                   on_pair: Callable[[int], None] | None = None) -> tuple[list[float], list[float]]:
        fn_a()                                                 # warm-up (and compile on CUDA)
        fn_b()
        sa, sb = [], []
        for i in range(repeats):
            if i % 2 == 0:
                sa.append(sample(fn_a))
                sb.append(sample(fn_b))
            else:
                sb.append(sample(fn_b))
                sa.append(sample(fn_a))
            if on_pair is not None:
                on_pair(i)
        return sa, sb
    return time_pairs, desc


def choose_repeats(budget_s: float, elapsed_s: float, blocks: int, page_s: float, pair_s: float,
                   lo: int = MIN_REPEATS, hi: int = MAX_REPEATS) -> tuple[int, float]:
    """Timed pairs per block size that fit a budget, and the whole sweep's estimated seconds.

    Each block size costs paging the tokens (``page_s``) plus a warm-up pair and the timed pairs
    (``pair_s`` each); ``elapsed_s`` is already spent. The count is clamped to [lo, hi]; with
    ``lo`` pairs over budget the estimate says so (it is never shortened to look in budget).
    """
    per_block_left = (budget_s - elapsed_s) / max(1, blocks) - page_s
    n = int(per_block_left // pair_s) - 1 if pair_s > 0 else hi
    n = max(lo, min(hi, n))
    return n, elapsed_s + blocks * (page_s + (n + 1) * pair_s)


def sweep(block_sizes: tuple[int, ...] | list[int] = DEFAULT_BLOCK_SIZES, shape: SweepShape | None = None,
          backend: str | None = None, repeats: int | None = 15, seed: int = 0,
          progress: Callable[[float, str], None] | None = None, budget_s: float = DEFAULT_BUDGET_S) -> SweepResult:
    """Time paged vs contiguous decode for each block size.

    Args:
        block_sizes: slots per block to try (each >= 1).
        shape: the decode batch; default :func:`default_shape` for the backend.
        backend: "cuda", "torch-cpu" or "triton-interpreter"; default ``detect("sweep").name``.
        repeats: timed pairs per block size (each gives one paged / contiguous ratio); None
            chooses from ``budget_s`` (:func:`choose_repeats`) after timing the first block
            size's paging and one call of each side, and reports the estimate in the progress
            message and in ``meta["estimate_s"]``.
        seed: RNG seed for tokens and block permutations.
        progress: optional callback ``progress(fraction_done in [0, 1], message)``, called after
            every timed pair.
        budget_s: seconds the whole sweep should take when ``repeats`` is None; such a sweep
            also stops before a block size that would take it past :data:`HARD_LIMIT_S`
            (``meta["skipped"]`` lists the block sizes left out, and a warning says so).

    Returns:
        :class:`SweepResult` (see its docstring for the row and meta keys; times in seconds and
        milliseconds, bandwidth in GB/s = 1e9 bytes/s of K and V read; overhead with a 95 %
        bootstrap interval and a verdict).

    Raises:
        ValueError: a block size < 1, an invalid shape (field named), an unknown backend, "cuda"
            without a GPU, ``repeats`` < 1, or a shape too large for the Triton interpreter.
    """
    auto = detect("sweep")
    name = backend or auto.name
    if name not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {name!r}")
    if name == "cuda" and auto.name != "cuda":
        raise ValueError(f"backend 'cuda' is not available here: {auto.reason}")
    sizes = [int(b) for b in block_sizes]
    if not sizes or min(sizes) < 1:
        raise ValueError(f"block_sizes must be a non-empty list of integers >= 1, got {list(block_sizes)}")
    if repeats is not None and repeats < MIN_REPEATS:
        raise ValueError(f"repeats must be >= {MIN_REPEATS} (pairs for an interval), got {repeats}")
    t_start = time.perf_counter()
    shape = shape or default_shape(name)
    shape.validate()
    if name == "triton-interpreter" and shape.num_seqs * shape.seq_len * shape.num_kv_heads > INTERPRETER_LIMIT:
        raise ValueError(f"shape is too large for backend 'triton-interpreter' (num_seqs x seq_len x "
                         f"num_kv_heads must be <= {INTERPRETER_LIMIT}); use the tiny shape")
    info = auto if name == auto.name else Backend(name, cpu_description(), "chosen explicitly")
    device = "cuda" if name == "cuda" else "cpu"
    warnings: list[str] = []
    llc = None if name == "cuda" else last_level_cache_bytes()
    if name == "cuda" and shape.kv_bytes < 1e9:
        warnings.append(f"K+V working set is {shape.kv_bytes / 1e9:.2f} GB (< 1 GB): the L2 cache may "
                        "flatter the bandwidth")
    if llc and shape.kv_bytes < 2 * llc:
        warnings.append(f"K+V working set is {format_bytes(shape.kv_bytes)}, less than twice this CPU's "
                        f"{format_bytes(llc)} last-level cache: part of what is timed is cache, not memory")

    def report(frac: float, msg: str) -> None:
        if progress is not None:
            progress(min(1.0, max(0.0, frac)), msg)

    auto = repeats is None
    time_pairs, timer_desc = _pair_timer(name)
    page_times: list[float] = []
    estimate_s = 0.0
    q, k_dense, v_dense, lens = _dense_tokens(shape, device, seed)
    contig_tables = torch.arange(shape.num_seqs, dtype=torch.int32, device=device).reshape(-1, 1)
    contig_args = (q, k_dense, v_dense, contig_tables, lens)
    validate_inputs(*contig_args)
    launch = None
    if name == "torch-cpu":
        workspace: dict = {}                       # gather buffers reused by both sides

        def run(*args):
            return paged_attention_torch(*args, validate=False, workspace=workspace)
        contig = lambda: run(*contig_args)        # noqa: E731  (the same gather, one block per sequence)
    else:
        cfg = launch_config(q, k_dense, lens)      # one shape, one launch: no host sync in the loop
        launch = asdict(cfg)

        def run(*args):
            return paged_attention_triton(*args, validate=False, config=cfg)
        # the contiguous kernel: the same launch with the block table compiled out
        contig = lambda: contiguous_attention_triton(q, k_dense, v_dense, lens, validate=False,  # noqa: E731
                                                     config=cfg)
    contig_out = contig().clone()
    perm_gen = torch.Generator().manual_seed(seed + 1)
    # Simultaneous intervals: with 9 block sizes at 95 % each, about one in two sweeps of pure
    # noise would call some block size "slower"; Bonferroni keeps the whole sweep at 95 %.
    row_confidence = 1.0 - (1.0 - CONFIDENCE) / len(sizes)
    rows = []
    skipped: list[int] = []
    for i, bs in enumerate(sizes):
        if auto and i > 0 and (time.perf_counter() - t_start
                               + max(page_times) + (MIN_REPEATS + 1) * pair_s) > HARD_LIMIT_S:
            skipped = sizes[i:]            # the machine is slower than estimated: stop, and say so
            warnings.append(f"stopped at the {HARD_LIMIT_S:.0f} s limit (the machine was slower than estimated): "
                            f"block size{'s' if len(skipped) > 1 else ''} {', '.join(map(str, skipped))} "
                            "not measured")
            break
        report(i / len(sizes), f"block size {bs}: paging {shape.num_seqs} x {shape.seq_len} tokens")
        t_block = time.perf_counter()
        k_cache, v_cache, tables = page_tokens(k_dense, v_dense, lens, bs, generator=perm_gen)
        paged_args = (q, k_cache, v_cache, tables, lens)
        validate_inputs(*paged_args)
        paged_out = run(*paged_args)
        diff = float((paged_out.float() - contig_out.float()).abs().max())
        page_times.append(time.perf_counter() - t_block)
        if i == 0:
            pair_s = _one_pair_seconds(lambda a=paged_args: run(*a), contig, device)
        # the number of pairs, re-estimated before every block size from what it has cost so far
        page_s = max(page_times)                   # the dearest so far: an estimate to meet, not to hope for
        if auto:
            n_pairs, estimate = choose_repeats(budget_s, time.perf_counter() - t_start, len(sizes) - i, page_s,
                                               pair_s)
            estimate -= page_s                     # this block size is already paged
        else:
            n_pairs = repeats
            estimate = time.perf_counter() - t_start + (len(sizes) - i) * (page_s + (n_pairs + 1) * pair_s) - page_s
        if i == 0:
            estimate_s = estimate
        report((i + 0.1) / len(sizes), f"estimated {estimate:.0f} s in all; block size {bs}: {n_pairs} pairs")
        t_pairs = time.perf_counter()
        a_s, b_s = time_pairs(lambda a=paged_args: run(*a), contig, n_pairs,
                              lambda j, i=i, bs=bs, n=n_pairs: report((i + 0.1 + 0.9 * (j + 1) / n) / len(sizes),
                                                                      f"block size {bs}: pair {j + 1} of {n}"))
        pair_s = max(pair_s, (time.perf_counter() - t_pairs) / (n_pairs + 1))     # the dearest pair so far
        st = pair_stats(a_s, b_s, seed=seed + bs, confidence=row_confidence)
        row = {
            "block_size": bs,
            "paged_s": st["a_median"], "contiguous_s": st["b_median"],
            "paged_ms": st["a_median"] * 1e3, "contiguous_ms": st["b_median"] * 1e3,
            "paged_ms_q1": st["a_q1"] * 1e3, "paged_ms_q3": st["a_q3"] * 1e3,
            "contiguous_ms_q1": st["b_q1"] * 1e3, "contiguous_ms_q3": st["b_q3"] * 1e3,
            "overhead": st["overhead"], "overhead_ci_low": st["ci_low"], "overhead_ci_high": st["ci_high"],
            "verdict": st["verdict"], "pairs": st["pairs"],
            "paged_GBps": shape.kv_bytes / st["a_median"] / 1e9,
            "contiguous_GBps": shape.kv_bytes / st["b_median"] / 1e9,
            "paged_peak_fraction": ((shape.kv_bytes / st["a_median"] / info.peak_bandwidth)
                                    if info.peak_bandwidth else None),
            "max_abs_diff": diff if math.isfinite(diff) else float("inf"),
        }
        rows.append(row)
        del k_cache, v_cache, tables, paged_args, paged_out
        if device == "cuda":
            torch.cuda.empty_cache()
    report(1.0, "done")
    meta = {
        "backend": name, "device": info.device, "reason": info.reason,
        "peak_GBps": info.peak_bandwidth / 1e9 if info.peak_bandwidth else None,
        "peak_source": info.peak_source, "shape": asdict(shape), "kv_bytes": shape.kv_bytes,
        "llc_bytes": llc, "timer": timer_desc, "confidence": CONFIDENCE, "row_confidence": row_confidence,
        "launch": launch, "repeats": repeats if not auto else "auto", "skipped": skipped, "estimate_s": estimate_s, "budget_s": budget_s,
        "wall_s": time.perf_counter() - t_start,
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "versions": versions(), "recorded": False, "warnings": warnings,
    }
    return SweepResult(rows=rows, meta=meta)


def _one_pair_seconds(fn_a: Callable[[], object], fn_b: Callable[[], object], device: str) -> float:
    """Wall seconds of one call of each side (after their warm-up), for the estimate."""
    t0 = time.perf_counter()
    fn_a()
    fn_b()
    if device == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - t0


# --------------------------------------------------------------------------------------------
# Shared between sessions: one process-wide cache, identical work done once
# --------------------------------------------------------------------------------------------

class _Job:
    """A sweep running in this process: waiters follow its progress and take its result."""

    def __init__(self) -> None:
        self.done = threading.Event()
        self.progress: tuple[float, str] = (0.0, "starting")
        self.result: SweepResult | None = None
        self.error: BaseException | None = None


_LOCK = threading.Lock()
_RESULTS: "OrderedDict[tuple, SweepResult]" = OrderedDict()
_RUNNING: dict[tuple, _Job] = {}


def sweep_key(block_sizes, shape: SweepShape, backend: str, repeats: int | None, seed: int,
              budget_s: float) -> tuple:
    """The cache key of a sweep: every parameter that changes its result."""
    return (tuple(int(b) for b in block_sizes), shape, backend, repeats, int(seed), float(budget_s))


def shared_sweep(block_sizes=DEFAULT_BLOCK_SIZES, shape: SweepShape | None = None, backend: str | None = None,
                 repeats: int | None = None, seed: int = 0, budget_s: float = DEFAULT_BUDGET_S,
                 progress: Callable[[float, str], None] | None = None) -> tuple[SweepResult, str]:
    """:func:`sweep`, shared by every session of this process: the heavy-work entry point.

    The result of a sweep is kept (the last :data:`CACHE_ENTRIES`, a few kilobytes each) under
    :func:`sweep_key`; a request for one already kept returns it at once, and a request for one
    that is running waits for it, calling ``progress`` with the running sweep's progress every
    quarter second. Safe to call from many threads (Streamlit sessions). A server-wide queue for
    heavy work wraps this call as a whole.

    Returns:
        ``(result, how)``: how is "ran" (this call ran it), "joined" (it waited for the same
        sweep started by another session) or "cached" (kept from an earlier run).

    Raises:
        ValueError: as :func:`sweep` (also for a waiter, when the sweep it joined failed so).
    """
    name = backend or detect("sweep").name
    shape = shape or default_shape(name)
    key = sweep_key(block_sizes, shape, name, repeats, seed, budget_s)
    with _LOCK:
        if key in _RESULTS:
            _RESULTS.move_to_end(key)
            return _RESULTS[key], "cached"
        job = _RUNNING.get(key)
        owner = job is None
        if owner:
            job = _RUNNING[key] = _Job()
    if not owner:
        while not job.done.wait(0.25):
            if progress is not None:
                progress(*job.progress)
        if job.error is not None:
            raise job.error
        return job.result, "joined"

    def relay(frac: float, msg: str) -> None:
        job.progress = (frac, msg)
        if progress is not None:
            progress(frac, msg)
    try:
        res = sweep(block_sizes, shape, name, repeats=repeats, seed=seed, progress=relay, budget_s=budget_s)
        with _LOCK:
            _RESULTS[key] = res
            while len(_RESULTS) > CACHE_ENTRIES:
                _RESULTS.popitem(last=False)
        job.result = res
        return res, "ran"
    except BaseException as exc:
        job.error = exc
        raise
    finally:
        with _LOCK:
            _RUNNING.pop(key, None)
        job.done.set()


_CHECKS: dict[tuple, tuple[dict, float]] = {}


def shared_check(backend: str, num_splits: int | None, run: bool = True) -> tuple[dict | None, str, float | None]:
    """The page's correctness check, kept for the life of the process (one per backend and path).

    Args:
        run: False only looks: a check not yet run returns ``(None, "not run", None)``.

    Returns:
        ``(result, how, when)``: result of :func:`kernels.paged_attention.check_correctness`; how
        is "ran" or "cached"; when is the UNIX time it ran.
    """
    from kernels.paged_attention import check_correctness
    key = (backend, num_splits)
    with _LOCK:
        hit = _CHECKS.get(key)
    if hit is not None:
        return hit[0], "cached", hit[1]
    if not run:
        return None, "not run", None
    res = check_correctness(backend=backend, num_splits=num_splits)
    when = time.time()
    with _LOCK:
        _CHECKS[key] = (res, when)
    return res, "ran", when


def load_recorded(pattern: str = "kernel_gpu_*.json", assets: str | Path | None = None) -> list[SweepResult]:
    """Load recorded GPU sweeps from ``assets/``.

    Two file shapes are read: what ``python3 -m kernels.gpu_check`` writes
    (``kernel_gpu_check.json``: ``{"dry_run": false, "meta": ..., "correctness": [...], "sweeps":
    [{"meta": ..., "rows": [...]}, ...]}``; each sweep's meta names device, date and versions)
    and what ``python -m kernels.sweep --out`` writes (one ``{"meta", "rows"}``). A dry run's
    file (``"dry_run": true``, made on a CPU) is skipped: it is not a measurement.

    Returns:
        list of :class:`SweepResult` with ``meta["recorded"] = True`` and ``meta["file"]`` set,
        sorted by file name then order in the file; empty when no file matches.

    Raises:
        ValueError: a matching file is malformed or was not produced by the "cuda" backend
            (message names the file).
    """
    folder = Path(assets) if assets else Path(__file__).resolve().parent.parent / "assets"
    out = []
    for path in sorted(folder.glob(pattern)):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ValueError(f"{path.name}: results file is not readable JSON: {exc}") from None
        if isinstance(data, dict) and data.get("dry_run"):
            continue
        parts = data.get("sweeps") if isinstance(data, dict) and "sweeps" in data else [data]
        if not isinstance(parts, list) or not parts:
            raise ValueError(f"{path.name}: 'sweeps' must be a non-empty list")
        for i, part in enumerate(parts):
            try:
                res = SweepResult.from_json(json.dumps(part))
            except ValueError as exc:
                where = f"sweeps[{i}]: " if len(parts) > 1 or "sweeps" in data else ""
                raise ValueError(f"{path.name}: {where}{exc}") from None
            if res.meta.get("backend") != "cuda":
                raise ValueError(f"{path.name}: backend is {res.meta.get('backend')!r}, not 'cuda'")
            res.meta["recorded"] = True
            res.meta["file"] = path.name
            out.append(res)
    return out


def _int_list(text: str) -> list[int]:
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None


def main(argv: list[str] | None = None) -> int:
    """CLI: run a sweep, print a table (or JSON), optionally write it with ``--out``.

    Exit status 0 on success, 2 on bad input (one-line message on stderr, no traceback).
    """
    p = argparse.ArgumentParser(prog="python -m kernels.sweep",
                                description="Paged vs contiguous decode attention latency over block sizes.")
    p.add_argument("--backend", choices=BACKENDS, help="default: detected (cuda, else torch-cpu)")
    p.add_argument("--block-sizes", type=_int_list, default=list(DEFAULT_BLOCK_SIZES),
                   help="comma-separated, default 1,2,4,...,256")
    p.add_argument("--tiny", action="store_true", help="use the tiny shape (seconds)")
    for name in ("num_seqs", "seq_len", "num_heads", "num_kv_heads", "head_dim"):
        p.add_argument("--" + name.replace("_", "-"), type=int, help="override the default shape")
    p.add_argument("--dtype", choices=tuple(DTYPES))
    p.add_argument("--repeats", type=int, default=None,
                   help=f"timed pairs per block size (>= 3); default: chosen to fit {DEFAULT_BUDGET_S:.0f} s, "
                        f"stopping before {HARD_LIMIT_S:.0f} s")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.add_argument("--out", help="write the result as JSON (recorded GPU results: needs the cuda backend)")
    p.add_argument("--allow-non-gpu", action="store_true", help="let --out write a non-GPU result (testing)")
    args = p.parse_args(argv)
    try:
        name = args.backend or detect("sweep").name
        base = TINY_SHAPE if args.tiny else default_shape(name)
        over = {k: getattr(args, k) for k in ("num_seqs", "seq_len", "num_heads", "num_kv_heads", "head_dim", "dtype")
                if getattr(args, k) is not None}
        shape = SweepShape(**{**asdict(base), **over})
        if args.out and name != "cuda" and not args.allow_non_gpu:
            raise ValueError(f"--out records GPU results but the backend is {name!r}; "
                             "run on a CUDA machine (or pass --allow-non-gpu for a test file)")

        def show(frac: float, msg: str) -> None:
            print(f"[{frac * 100:5.1f}%] {msg}", file=sys.stderr)

        res = sweep(args.block_sizes, shape, name, repeats=args.repeats, seed=args.seed, progress=show)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(res.to_json() + "\n", encoding="utf-8")
    if args.json:
        print(res.to_json())
    else:
        m = res.meta
        print(f"backend: {m['backend']}   device: {m['device']}")
        print(f"shape: {m['shape']}   K+V per call: {format_bytes(m['kv_bytes'])}")
        print(f"timer: {m['timer']}")
        if m["peak_GBps"]:
            print(f"peak bandwidth: {m['peak_GBps']:.0f} GB/s ({m['peak_source']})")
        for w in m["warnings"]:
            print(f"warning: {w}")
        print(res.table())
        print(res.verdict_text())
        if args.out:
            print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
