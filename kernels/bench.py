"""The ``kernels`` section of ``make bench`` (``python -m tests.bench kernels``).

:func:`bench_kernels` prints two tables -- targets, and the block-size sweep on this machine's
backend -- and returns one bool per target. Targets come from issue 5: the page's load-time
correctness check must pass and take under 2 s; a CPU sweep at the realistic shape (134 MB of
K+V, 15 timed pairs per block size, issue 13) should take under 10 s per block size. Timings are
informational on a busy machine (``--strict`` decides). The sweep table prints each overhead
with its 95 % interval and verdict.
"""
from __future__ import annotations

import time

#: Page-load budget for the correctness check (seconds), and CPU sweep budget per block size.
CHECK_BUDGET_S = 2.0
CPU_SWEEP_BUDGET_PER_BLOCK_S = 10.0


def print_table(title: str, header: list[str], rows: list[list]) -> None:
    """Print a plain aligned table under a ``== title`` line (the format of every ``make bench`` table)."""
    cells = [header] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    print(f"\n== {title}")
    for i, r in enumerate(cells):
        print("  ".join(c.rjust(w) if j else c.ljust(w) for j, (c, w) in enumerate(zip(r, widths))))
        if i == 0:
            print("  ".join("-" * w for w in widths))


def bench_kernels(full: bool = True) -> list[bool]:
    """Run the correctness check and a sweep; print tables; return target-met flags.

    Args:
        full: True -> the backend's default shape (CPU: ~1 s per block size; CUDA: 1.07 GB of
            K+V); False -> the tiny shape.

    Returns:
        list of bool, one per target row printed.
    """
    from kernels.paged_attention import check_correctness
    from kernels.sweep import TINY_SHAPE, sweep

    t0 = time.perf_counter()
    chk = check_correctness()
    t_check = time.perf_counter() - t0
    t0 = time.perf_counter()
    res = sweep(shape=None if full else TINY_SHAPE)
    t_sweep = time.perf_counter() - t0
    per_block = t_sweep / max(1, len(res.rows))
    backend = res.meta["backend"]
    rows = [
        [f"check on {chk['backend']}: max abs error vs reference", f"{chk['max_abs_error']:.2e}",
         f"<= {chk['tolerance']:.0e}", chk["passed"]],
        [f"check on {chk['backend']}: wall time incl. reference (s)", f"{t_check:.2f}",
         f"<= {CHECK_BUDGET_S:.1f}", t_check <= CHECK_BUDGET_S],
    ]
    if backend == "cuda":
        rows.append(["sweep wall time per block size (s)", f"{per_block:.2f}", "(info)", True])
    else:
        rows.append(["sweep wall time per block size (s)", f"{per_block:.2f}",
                     f"<= {CPU_SWEEP_BUDGET_PER_BLOCK_S:.1f}", per_block <= CPU_SWEEP_BUDGET_PER_BLOCK_S])
    worst = max(r["max_abs_diff"] for r in res.rows)
    rows.append(["sweep: max |paged - contiguous| over block sizes", f"{worst:.1e}", "<= 1e-02", worst <= 1e-2])
    print_table(f"kernels: targets ({backend} on {res.meta['device']})", ["measure", "value", "target", "met"], rows)
    peak = res.meta.get("peak_GBps")
    print_table(f"kernels: sweep, {res.meta['shape']}, timer: {res.meta['timer']}",
                ["block size", "paged ms", "contiguous ms", "overhead x", "interval (95% joint)", "verdict",
                 "paged GB/s", "% of peak"],
                [[r["block_size"], f"{r['paged_ms']:.3f}", f"{r['contiguous_ms']:.3f}", f"{r['overhead']:.3f}",
                  f"{r['overhead_ci_low']:.3f}-{r['overhead_ci_high']:.3f}", r["verdict"], f"{r['paged_GBps']:.2f}",
                  f"{100 * r['paged_peak_fraction']:.0f}" if peak and r["paged_peak_fraction"] is not None else "n/a"]
                 for r in res.rows])
    print(res.verdict_text())
    return [bool(r[3]) for r in rows]
