"""Block-size sweep: what reading the KV cache through a block table costs the decode kernel.

For each block size (1, 2, 4 ... 256) the same tokens are paged into a randomly permuted block
pool and the decode kernel runs on it. The baseline reads the same tokens with no block table:
on the Triton backends the contiguous kernel (:func:`kernels.attention.paged_attention.contiguous_attention_triton`,
the same launch with the table lookup compiled out); on the torch CPU path, which has no kernel
to specialise, the same torch gather over one block per sequence, so there the ratio isolates
where the gather reads. Paged / contiguous latency is the gather overhead -- the kernel-side cost
of a block size, which the slack (memory waste) figures of the allocator do not capture.

The sides are timed in alternating pairs and summarised by :mod:`kernels.sweep.stats` (median paired
ratio, bootstrap interval, verdict; the intervals of one sweep hold at 95 % together). The
spread of each side's times (quartiles) is reported beside the medians.

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
from which the number of timed pairs is chosen after timing three pairs of calls; the sweep
then states the most it will take and keeps to it (:mod:`kernels.sweep.plan`). It is the one function to wrap in a server-wide queue for heavy work.

Modules of the sweep: this one runs it; :mod:`kernels.sweep.stats` (statistics),
:mod:`kernels.sweep.data` (:class:`SweepShape`, :class:`SweepResult`, :func:`load_recorded`),
:mod:`kernels.sweep.plan` (the time it states and keeps to) and :mod:`kernels.sweep.__main__`
(the command line, which imports this module; this one never imports it). Import each name
from the module that defines it. CLI::

    python -m kernels.sweep                      # auto backend, its default shape, prints a table
    python -m kernels.sweep --tiny               # seconds, tiny shape
    python -m kernels.gpu_check                  # on a GPU: validate, sweep, record results

Sources: Kwon et al., PagedAttention (SOSP 2023, arXiv:2309.06180), sections 7.1-7.2 (the
attention kernel's overhead and the impact of block size, Figure 18); vLLM's ``csrc/attention/``
kernels for the cache layout.
"""
from __future__ import annotations

import datetime as _dt
import math
import threading
import time
from collections import OrderedDict
from dataclasses import asdict
from typing import Callable

import torch

import kernels  # noqa: F401  (sets TRITON_INTERPRET before triton is imported on CPU)
from kernels.attention.backend import BACKENDS, Backend, cpu_description, detect, last_level_cache_bytes, versions
from allocator.common.errors import FieldError
from kernels.attention.paged_attention import (contiguous_attention_triton, launch_config,
                                               paged_attention_torch, paged_attention_triton)
from kernels.attention.inputs import page_tokens
from kernels.attention.validation import validate_inputs
from kernels.sweep.stats import (CONFIDENCE, pair_stats)
from kernels.sweep.plan import MAX_REPEATS, MIN_REPEATS, SweepPlan
from kernels.sweep.data import (SweepResult,
                                SweepShape, default_shape)
from allocator.common.formats import format_bytes_decimal as format_bytes

DEFAULT_BLOCK_SIZES: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64, 128, 256)
#: Seconds a sweep with ``repeats=None`` is sized to take (issue 24: no sweep past 60 s by default).
DEFAULT_BUDGET_S = 45.0
#: The most a sweep sized from its budget may state, and so take (issue 24): it keeps to what it
#: states (:class:`kernels.sweep.plan.SweepPlan`) and names the block sizes it left out.
HARD_LIMIT_S = 60.0
#: Sweep results kept by :func:`shared_sweep` (a few kilobytes each).
CACHE_ENTRIES = 16
#: Above this many (token x KV head) pairs the interpreter backend refuses to time (far too slow).
INTERPRETER_LIMIT = 16_384


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
    """Return ``(time_pairs, description)``; ``time_pairs(fn_a, fn_b, repeats, on_pair, more)`` gives
    two lists of ``repeats`` seconds each (fewer when ``more(done)`` says stop), timed in alternating
    order (a b, b a, a b, ...), calling ``on_pair(i)`` after pair ``i``."""
    if backend == "cuda":
        from kernels.gpu_check import L2_FLUSH_BYTES, cuda_sampler
        sample = cuda_sampler(torch.empty(L2_FLUSH_BYTES, dtype=torch.uint8, device="cuda"))
        desc = "CUDA events around one call, L2 overwritten before each sample, pairs after a warm-up, sides alternating"
    else:
        def sample(fn: Callable[[], object]) -> float:
            t0 = time.perf_counter()
            fn()
            return time.perf_counter() - t0
        desc = "time.perf_counter per call, pairs after one warm-up call each, sides alternating"

    def time_pairs(fn_a: Callable[[], object], fn_b: Callable[[], object], repeats: int,
                   on_pair: Callable[[int], None] | None = None,
                   more: Callable[[int], bool] | None = None) -> tuple[list[float], list[float]]:
        fn_a()                                                 # warm-up (and compile on CUDA)
        fn_b()
        sa, sb = [], []
        for i in range(repeats):
            if more is not None and not more(i):
                break
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


def sweep(block_sizes: tuple[int, ...] | list[int] = DEFAULT_BLOCK_SIZES, shape: SweepShape | None = None,
          backend: str | None = None, repeats: int | None = 15, seed: int = 0,
          progress: Callable[[float, str], None] | None = None, budget_s: float = DEFAULT_BUDGET_S,
          clock: Callable[[], float] = time.perf_counter) -> SweepResult:
    """Time paged vs contiguous decode for each block size.

    Args:
        block_sizes: slots per block to try (each >= 1).
        shape: the decode batch; default :func:`default_shape` for the backend.
        backend: "cuda", "torch-cpu" or "triton-interpreter"; default ``detect("sweep").name``.
        repeats: timed pairs per block size (each gives one paged / contiguous ratio); None
            chooses them from ``budget_s`` (:class:`kernels.sweep.plan.SweepPlan`): after paging
            the first block size and timing three calls of each side and one statistics run, the
            sweep states the most it will take (``meta["estimate_s"]``, in the progress message:
            its plan times a margin for a shared machine, never past :data:`HARD_LIMIT_S`) and
            keeps to it, timing fewer pairs or leaving block sizes out when the machine turns
            slower (``meta["skipped"]`` lists those, and a warning says so).
        seed: RNG seed for tokens and block permutations.
        progress: optional callback ``progress(fraction_done in [0, 1], message)``, called after
            every timed pair.
        budget_s: seconds the sweep is planned to take when ``repeats`` is None.
        clock: monotonic seconds for the plan and ``meta["wall_s"]`` (the timed samples always
            use ``time.perf_counter`` or CUDA events).

    Returns:
        :class:`SweepResult` (see its docstring for the row and meta keys; times in seconds and
        milliseconds, bandwidth in GB/s = 1e9 bytes/s of K and V read; overhead with a 95 %
        bootstrap interval and a verdict).

    Raises:
        FieldError (a ValueError; ``.field`` names the input): a block size < 1
            (``block_sizes``), an invalid shape (the shape's field), an unknown backend or "cuda"
            without a GPU (``backend``), ``repeats`` < 3, or a shape too large for the Triton
            interpreter (``shape``).
    """
    auto = detect("sweep")
    name = backend or auto.name
    if name not in BACKENDS:
        raise FieldError("backend", f" must be one of {BACKENDS}, got {name!r}")
    if name == "cuda" and auto.name != "cuda":
        raise FieldError("backend", f" 'cuda' is not available here: {auto.reason}")
    try:
        sizes = [int(b) for b in block_sizes]
    except (TypeError, ValueError):
        sizes = []
    if not sizes or min(sizes) < 1:
        raise FieldError("block_sizes", f" must be a non-empty list of integers >= 1, got {list(block_sizes)}")
    if repeats is not None and repeats < MIN_REPEATS:
        raise FieldError("repeats", f" must be >= {MIN_REPEATS} (pairs for an interval), got {repeats}")
    t_start = clock()
    shape = shape or default_shape(name)
    shape.validate()
    if name == "triton-interpreter" and shape.num_seqs * shape.seq_len * shape.num_kv_heads > INTERPRETER_LIMIT:
        raise FieldError("shape", f" is too large for backend 'triton-interpreter' (num_seqs x seq_len x "
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

    budgeted = repeats is None                 # the pair count is chosen from budget_s
    time_pairs, timer_desc = _pair_timer(name)
    plan = SweepPlan(len(sizes), budget_s, HARD_LIMIT_S, clock=clock, enforce=budgeted, start=t_start)
    ver = versions()                           # everything after the timed loop is counted too
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
    cut: list[str] = []
    for i, bs in enumerate(sizes):
        if i > 0 and not plan.fits_block(i):
            skipped = sizes[i:]            # the machine is slower than estimated: stop, and say so
            warnings.append(f"stopped to keep to the {math.ceil(plan.stated_s):.0f} s it stated (the machine was "
                            f"slower than estimated): block size{'s' if len(skipped) > 1 else ''} "
                            f"{', '.join(map(str, skipped))} not measured")
            break
        report(i / len(sizes), f"block size {bs}: paging {shape.num_seqs} x {shape.seq_len} tokens")
        t_block = clock()
        k_cache, v_cache, tables = page_tokens(k_dense, v_dense, lens, bs, generator=perm_gen)
        paged_args = (q, k_cache, v_cache, tables, lens)
        validate_inputs(*paged_args)
        paged_out = run(*paged_args)
        diff = float((paged_out.float() - contig_out.float()).abs().max())
        plan.note("page", clock() - t_block)
        if i == 0:                         # calibrate on what runs: three pairs, one statistics run
            plan.note("pair", _pair_seconds(lambda a=paged_args: run(*a), contig, device, clock))
            t_stats = clock()
            pair_stats([1.0] * MAX_REPEATS, [1.0] * MAX_REPEATS, seed=seed, confidence=row_confidence)
            plan.note("stats", clock() - t_stats)
            plan.calibrate(repeats)
        # the number of pairs, re-chosen before every block size from what it has cost so far
        n_pairs = plan.pairs_for(i)
        limit = "at most " if budgeted else ""
        report((i + 0.1) / len(sizes), f"{limit}{math.ceil(plan.stated_s):.0f} s in all; block size {bs}: "
                                       f"{n_pairs} pairs")
        last = [clock()]

        def on_pair(j: int, i=i, bs=bs, n=n_pairs) -> None:
            now = clock()
            if j > 0:                      # the first pair's time holds the warm-up pair as well
                plan.note("pair", now - last[0])
            last[0] = now
            report((i + 0.1 + 0.9 * (j + 1) / n) / len(sizes), f"block size {bs}: pair {j + 1} of {n}")
        a_s, b_s = time_pairs(lambda a=paged_args: run(*a), contig, n_pairs, on_pair,
                              lambda done, i=i: plan.another_pair(i, done))
        if budgeted and len(a_s) < plan.repeats:
            cut.append(f"{bs} ({len(a_s)} of {plan.repeats})")
        t_stats = clock()
        st = pair_stats(a_s, b_s, seed=seed + bs, confidence=row_confidence)
        plan.note("stats", clock() - t_stats)
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
    if cut:
        warnings.append(f"fewer timed pairs than planned, to keep to the {math.ceil(plan.stated_s):.0f} s it "
                        f"stated: block size{'s' if len(cut) > 1 else ''} {', '.join(cut)}")
    report(1.0, "done")
    meta = {
        "backend": name, "device": info.device, "reason": info.reason,
        "peak_GBps": info.peak_bandwidth / 1e9 if info.peak_bandwidth else None,
        "peak_source": info.peak_source, "shape": asdict(shape), "kv_bytes": shape.kv_bytes,
        "llc_bytes": llc, "timer": timer_desc, "confidence": CONFIDENCE, "row_confidence": row_confidence,
        "launch": launch, "repeats": repeats if not budgeted else "auto", "skipped": skipped,
        "estimate_s": plan.stated_s, "plan_s": plan.plan_s, "estimate_is_bound": budgeted, "budget_s": budget_s,
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "versions": ver, "recorded": False, "warnings": warnings,
    }
    meta["wall_s"] = clock() - t_start
    return SweepResult(rows=rows, meta=meta)


def _pair_seconds(fn_a: Callable[[], object], fn_b: Callable[[], object], device: str,
                  clock: Callable[[], float] = time.perf_counter, calls: int = 3) -> float:
    """Wall seconds of one call of each side (after their warm-up), for the estimate: the median
    of ``calls`` pairs (one pair alone was measured 2.5x off either way on a shared machine)."""
    times = []
    for _ in range(calls):
        t0 = clock()
        fn_a()
        fn_b()
        if device == "cuda":
            torch.cuda.synchronize()
        times.append(clock() - t0)
    return sorted(times)[len(times) // 2]


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
        FieldError: as :func:`sweep` (also for a waiter, when the sweep it joined failed so).
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


def kept_sweeps(block_sizes, shape: SweepShape, backend: str, repeats: int | None = None,
                budget_s: float = DEFAULT_BUDGET_S) -> dict[int, SweepResult]:
    """This process's kept results of :func:`shared_sweep` for these settings, by seed ({} when
    none), without running anything: what a page shows a later visitor at once."""
    want = sweep_key(block_sizes, shape, backend, repeats, 0, budget_s)
    with _LOCK:
        return {key[4]: res for key, res in _RESULTS.items() if key[:4] == want[:4] and key[5] == want[5]}


_CHECKS: dict[tuple, tuple[dict, float]] = {}


def shared_check(backend: str, num_splits: int | None, run: bool = True) -> tuple[dict | None, str, float | None]:
    """The page's correctness check, kept for the life of the process (one per backend and path).

    Args:
        run: False only looks: a check not yet run returns ``(None, "not run", None)``.

    Returns:
        ``(result, how, when)``: result of :func:`kernels.attention.paged_attention.check_correctness`; how
        is "ran" or "cached"; when is the UNIX time it ran.
    """
    from kernels.attention.paged_attention import check_correctness
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

