"""The ``kernels`` section of ``make bench`` (``python -m tests.tools.bench kernels``).

:func:`bench_kernels` prints two tables -- targets, and the block-size sweep on this machine's
backend -- and returns one bool per target. Targets (issues 5, 13, 24): the correctness check
passes; the kernel page's script runs within 3 s on a warm server (nothing heavy on load); the realistic sweep takes at most 60 s and no longer than the estimate it states;
a second request for the same sweep is answered from the server's cache; paged and contiguous
give the same output. Timings are informational on a busy machine (``--strict`` decides).
"""
from __future__ import annotations

import time
from typing import Callable

#: Page render budget for a new session (seconds) and the sweep's hard limit.
PAGE_BUDGET_S = 3.0
SWEEP_LIMIT_S = 60.0


def print_table(title: str, header: list[str], rows: list[list]) -> None:
    """Print a plain aligned table under a ``== title`` line (the format of every ``make bench`` table)."""
    cells = [header] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    print(f"\n== {title}")
    for i, r in enumerate(cells):
        print("  ".join(c.rjust(w) if j else c.ljust(w) for j, (c, w) in enumerate(zip(r, widths))))
        if i == 0:
            print("  ".join("-" * w for w in widths))


def bench_kernels(full: bool = True, page_seconds: Callable[[], float] | None = None) -> list[bool]:
    """Run the correctness check, the page render and a sweep; print tables; return target-met flags.

    Args:
        full: True -> the backend's default (realistic) shape through :func:`kernels.sweep.run.shared_sweep`
            with its time budget; False -> the tiny shape (seconds; for the test suite).
        page_seconds: measures the kernel page's script on a warm server (``tests/tools/bench.py`` passes
            one: this package never imports the UI); None leaves that row out.

    Returns:
        list of bool, one per target row printed.
    """
    from kernels.attention.paged_attention import check_correctness
    from kernels.sweep.run import DEFAULT_BUDGET_S, shared_sweep
    from kernels.sweep.data import TINY_SHAPE

    t0 = time.perf_counter()
    chk = check_correctness()
    t_check = time.perf_counter() - t0
    page_s = page_seconds() if page_seconds is not None else None
    res, how = shared_sweep(shape=None if full else TINY_SHAPE, repeats=None, budget_s=DEFAULT_BUDGET_S)
    t0 = time.perf_counter()
    _, how2 = shared_sweep(shape=None if full else TINY_SHAPE, repeats=None, budget_s=DEFAULT_BUDGET_S)
    t_again = time.perf_counter() - t0
    m = res.meta
    backend = m["backend"]
    rows = [
        [f"check on {chk['backend']}: max abs error vs reference", f"{chk['max_abs_error']:.2e}",
         f"<= {chk['tolerance']:.0e}", chk["passed"]],
        [f"check on {chk['backend']}: wall time incl. reference (s, on demand)", f"{t_check:.2f}", "(info)", True],
        [f"sweep wall time (s; {'realistic' if full else 'tiny'} shape, {how})", f"{m['wall_s']:.1f}",
         f"<= {SWEEP_LIMIT_S:.0f}", m["wall_s"] <= SWEEP_LIMIT_S],
        ["sweep: the time it took against the estimate it states (s)", f"{m['wall_s']:.1f} / {m['estimate_s']:.1f}",
         "<= its estimate", m["wall_s"] <= m["estimate_s"]],
        ["same sweep asked again (another session): answered from", f"{how2} in {t_again * 1e3:.1f} ms",
         "cached", how2 == "cached"],
    ]
    if page_s is not None:
        rows.insert(2, ["kernel page script, warm server (AppTest rerun, s)", f"{page_s:.2f}",
                        f"<= {PAGE_BUDGET_S:.0f}", page_s <= PAGE_BUDGET_S])
    worst = max(r["max_abs_diff"] for r in res.rows)
    rows.append(["sweep: max |paged - contiguous| over block sizes", f"{worst:.1e}", "<= 1e-02", worst <= 1e-2])
    print_table(f"kernels: targets ({backend} on {m['device']})", ["measure", "value", "target", "met"], rows)
    peak = m.get("peak_GBps")
    print_table(f"kernels: sweep, {m['shape']}, timer: {m['timer']}",
                ["block size", "pairs", "paged ms", "contiguous ms", "overhead x", "interval (95% joint)", "verdict",
                 "paged GB/s", "% of peak"],
                [[r["block_size"], r["pairs"], f"{r['paged_ms']:.3f}", f"{r['contiguous_ms']:.3f}",
                  f"{r['overhead']:.3f}", f"{r['overhead_ci_low']:.3f}-{r['overhead_ci_high']:.3f}", r["verdict"],
                  f"{r['paged_GBps']:.2f}",
                  f"{100 * r['paged_peak_fraction']:.0f}" if peak and r["paged_peak_fraction"] is not None else "n/a"]
                 for r in res.rows])
    if m.get("skipped"):
        print(f"not measured (stopped at the time limit): block sizes {', '.join(map(str, m['skipped']))}")
    print(res.verdict_text())
    return [bool(r[3]) for r in rows]
