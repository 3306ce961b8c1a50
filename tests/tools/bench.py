"""Benchmarks (``make bench``): speed and size targets, printed as tables.

Targets are checked here, not in timed tests: a busy CI machine must not fail the suite, but
a regression must show. Each section prints a table with the measured value, the target and
whether it was met; the process exits non-zero only with ``--strict``.

Sections:
    explainer  simulate the default scenario (both allocators) + build the animated figure
    scale      10,000 trace requests through both allocators on a 2**20-slot pool
    events     idle gaps and the full Azure trace x5: the engine's cost grows with events
    ratesweep  issue 14: 8 rates x 4 policies x 1,000 requests on the seconds clock <= 20 s
    prefix     issue 15: 2,000 Mooncake requests with prefix caching, block 16, 1/4 pool <= 5 s
    replay     issue 22: the shipped vLLM run (300 requests) replayed under v1 rules <= 5 s
    site       issue 26: the exported static site <= 10 MB; a block-size switch redraws <= 0.5 s
    paper      issues 21, 38: the whole `paper-replication --json` (every figure it prints) <= 60 s wall, paper / ours
    engine     issue 24: the engine's own scale, CPU time: Azure x5 paged <= 2 s; the whole Mooncake
               trace with prefix caching <= 2 s (issue 39), and with pictures <= 1.3x that
    v1         issue 39: 10,000 Azure requests under vLLM v1 rules <= 2x the classroom loop's CPU time
    million    issue 39: 1,000,000 Azure requests, paged, in a fresh process: CPU <= 15 s, memory <= 1 GB
    prefixpage issue 24: the Prefix cache page cold <= 3 s, each control change <= 2 s (AppTest)
    prefixbrowser issue 24: the same first visit in headless Chromium, server up 60 s (<= 3 s)
    cli        issue 24: --help <= 0.5 s, simulate classroom-40 --json <= 1 s, import allocator <= 0.3 s
    pools      issue 24: a pool of 2**30 slots through the CLI, memory growing with blocks used
    kernels    the paged-attention kernel sweep on this machine's backend (see kernels/)
  In headless Chromium against ``python app.py`` (tests/tools/bench_pages.py; "skipped" without Chromium):
    pages      issue 24: every page in the sidebar, first chart <= 3 s of navigation, server up 60 s
    explainerbrowser issue 24: block-size change to redrawn maps <= 1.5 s, each block size; Play >= 10 frames/s
    throughputbrowser issue 24: default sweep <= 10 s cold, each control change <= 5 s, progress bar past 2 s
    kernelbrowser issue 24: the Kernel page <= 3 s; its default sweep's progress bar moves, <= 60 s
    suite      issue 24: make test <= 10 minutes (the whole suite; last; name sections to leave it out)
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

from kernels.sweep.bench import print_table
from tests.tools.bench_pages import (bench_explainer_browser, bench_kernel_browser, bench_pages, bench_suite,
                                     bench_throughput_browser)

#: The repository root (commands timed by the ``cli`` and ``pools`` sections run there).
_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _median_time(fn, repeat: int) -> tuple[float, object]:
    times, out = [], None
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times), out


def bench_explainer(repeat: int = 7) -> list[bool]:
    """Issue 2's targets: scenario + figure <= 0.3 s, figure <= 3 MB, paged classroom-40 <= 40 ms."""
    from allocator.memory.paged import PagedAllocator
    from allocator.workloads.requests import classroom_40
    from allocator.engine.simulate import simulate
    from allocator.engine.scenario import Scenario, run_scenario
    from allocator.viz.explainer_chart import explainer_figure
    from allocator.viz.frozen import figure_json_bytes

    sc = Scenario()
    explainer_figure(run_scenario(sc))         # warm imports (plotly loads its validators lazily)
    t_all, fig = _median_time(lambda: explainer_figure(run_scenario(sc)), repeat)
    size = figure_json_bytes(fig)
    w = classroom_40()
    t_paged, _ = _median_time(lambda: simulate(w, PagedAllocator(2048, 16)), repeat * 3)
    trace_sc = Scenario(workload="azure-conv")
    t_trace, tfig = _median_time(lambda: explainer_figure(run_scenario(trace_sc)), 3)
    rows = [
        ["classroom-40: both simulations + animated figure (median s)", f"{t_all:.3f}", "<= 0.300",
         t_all <= 0.3],
        ["classroom-40: figure JSON (MB)", f"{size / 1e6:.2f}", "<= 3.00", size <= 3_000_000],
        ["classroom-40: paged simulation alone (median ms)", f"{t_paged * 1000:.1f}", "<= 40", t_paged <= 0.040],
        ["azure-conv 40 requests: both + figure (median s)", f"{t_trace:.3f}", "(info)", True],
        ["azure-conv figure JSON (MB)", f"{figure_json_bytes(tfig) / 1e6:.2f}", "<= 3.00",
         figure_json_bytes(tfig) <= 3_000_000],
    ]
    print_table("explainer (this machine, median of repeated runs)", ["measure", "value", "target", "met"], rows)
    return [r[3] for r in rows]


def bench_scale() -> list[bool]:
    """Issue 6's target: 10,000 trace requests on a 2**20-slot pool, paged run <= 5 s and <= 1 GB."""
    import tracemalloc

    from allocator.memory.paged import PagedAllocator
    from allocator.memory.reserve_max import ReserveMaxAllocator
    from allocator.engine.simulate import simulate
    from allocator.workloads.trace import shipped_trace, trace_workload

    w = trace_workload(shipped_trace(), offset=0, count=10_000, steps_per_second=20.0, max_new_tokens=1024)
    rows, met = [], []
    for alloc in (PagedAllocator(1 << 20, 16), ReserveMaxAllocator(1 << 20, 1024)):
        t_run, res = _median_time(lambda: simulate(w, alloc, record_snapshots=False), 3)
        tracemalloc.start()
        simulate(w, alloc, record_snapshots=False)
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        ok = alloc.kind != "paged" or (t_run <= 5.0 and peak <= 1e9)
        met.append(ok)
        s = res.summary
        rows.append([alloc.label, f"{t_run:.2f}", f"{peak / 1e6:.0f}", s["steps"], s["peak_running"],
                     s["finished"], len(s["rejected"]), "<= 5 s, <= 1000 MB" if alloc.kind == "paged" else "(info)",
                     ok])
    print_table(f"scale: {len(w):,} Azure trace requests, 2**20 slots, block 16 (median of 3; peak traced memory)",
                ["allocator", "time s", "peak MB", "steps", "peak running", "finished", "rejected", "target", "met"],
                rows)
    return met


def _azure_repeated(times: int):
    """The shipped Azure conversation trace replayed ``times`` times back to back (timestamps of
    each copy shifted past the previous one): about 19,366 x times requests."""
    import pandas as pd

    from allocator.workloads.trace import shipped_trace, trace_workload

    df = shipped_trace()
    gap = float(df["arrival_s"].iloc[-1]) + 1.0
    big = pd.concat([df.assign(arrival_s=df["arrival_s"] + k * gap) for k in range(times)], ignore_index=True)
    return trace_workload(big, offset=0, count=len(big), steps_per_second=20.0, max_new_tokens=1024,
                          name=f"azure-conv x{times}")


def bench_events(repeat: int = 3) -> list[bool]:
    """Issue 10's targets: the engine's cost grows with events, not with the trace's clock.

    Three runs that used to step through idle time one step at a time (50 s and a MemoryError,
    51 s, a MemoryError) must each take under 1 s through the CLI's own code path; the whole Azure
    conversation trace replayed five times (96,830 requests) must take at most 3 s paged; the
    classroom-40 paged run stays at most 40 ms.
    """
    import contextlib
    import io
    import os
    import tempfile

    from allocator.memory.paged import PagedAllocator
    from allocator.memory.reserve_max import ReserveMaxAllocator
    from allocator.workloads.requests import classroom_40
    from allocator.engine.simulate import simulate
    from allocator.__main__ import main

    rows, met = [], []
    with tempfile.TemporaryDirectory() as tmp:
        far = os.path.join(tmp, "far.csv")
        with open(far, "w") as fh:
            fh.write("prompt_tokens,output_tokens,arrival_s\n10,5,0\n20,3,1000000\n")
        near = os.path.join(tmp, "near.csv")
        with open(near, "w") as fh:
            fh.write("prompt_tokens,output_tokens,arrival_s\n10,5,0\n20,3,10\n")
        cases = [("two requests 1,000,000 s apart (--trace)", ["--trace", far]),
                 # 10 s at 1e6 steps per second (the range table's most): the same 10,000,000-step gap
                 ("10-second gap at --steps-per-second 1e6", ["--trace", near, "--steps-per-second", "1e6"]),
                 ("--arrival trickle --arrival-rate 0.001 (the range table's least)",
                  ["--arrival", "trickle", "--arrival-rate", "0.001"])]
        for label, argv in cases:
            def cli():
                out = io.StringIO()
                with contextlib.redirect_stdout(out):
                    assert main(["simulate", *argv, "--json"]) == 0
                return out.getvalue()
            t, out = _median_time(cli, repeat)
            import json
            paged = json.loads(out)["paged"]
            ok = t < 1.0
            met.append(ok)
            rows.append([label, f"{t:.3f}", f"{paged['steps']:,}", f"{paged['records']:,}", "< 1 s", ok])
    w = _azure_repeated(5)
    for alloc, target in ((PagedAllocator(1 << 20, 16), 3.0), (ReserveMaxAllocator(1 << 20, 1024), None)):
        t, res = _median_time(lambda: simulate(w, alloc, record_snapshots=False), repeat)
        ok = target is None or t <= target
        met.append(ok)
        rows.append([f"{w.name} ({len(w):,} requests), {alloc.label}, 2**20 slots", f"{t:.2f}",
                     f"{res.steps:,}", f"{res.records:,}", f"<= {target:g} s" if target else "(info)", ok])
    c = classroom_40()
    t, res = _median_time(lambda: simulate(c, PagedAllocator(2048, 16)), repeat * 7)
    met.append(t <= 0.040)
    rows.append(["classroom-40, paged 16, with pictures (ms)", f"{t * 1000:.1f}", f"{res.steps:,}",
                 f"{res.records:,}", "<= 40 ms", t <= 0.040])
    print_table("events: cost grows with events, not steps (median of repeated runs, seconds)",
                ["case", "time", "steps", "records", "target", "met"], rows)
    return met


def bench_ratesweep() -> list[bool]:
    """Issue 14's target: a rate sweep of 8 rates x 4 policies x 1,000 requests in at most 20 s
    (A100 40GB, OPT-13B, Azure conversation lengths, the default rate grid). Prints each policy's
    normalised latency per rate and its sustained rate."""
    from allocator.studies.rate_sweep import POLICY_LABELS, rate_sweep
    from allocator.studies.sustained import sustained_short
    from allocator.cost.roofline import cost_model

    cost = cost_model("a100-40gb", "opt-13b")
    t = time.perf_counter()
    sweep = rate_sweep(cost, requests=1000)
    elapsed = time.perf_counter() - t
    runs = len(sweep.rates) * len(sweep.policies)
    rows = [[POLICY_LABELS[p]] + [f"{v:.3f}" for v in sweep.curve(p)]
            + [sustained_short(sweep.sustained[p])] for p in sweep.policies]
    print_table(f"rate sweep: normalised latency (s/token) by request rate (requests/s); budget "
                f"{sweep.budget_s_per_token:.3f} s/token ({cost.label}, {sweep.requests:,} requests)",
                ["policy"] + [f"{r:g}/s" for r in sweep.rates] + ["sustained /s"], rows)
    ok = elapsed <= 20.0 and runs == 32
    print_table("rate sweep: time", ["measure", "value", "target", "met"],
                [[f"{len(sweep.rates)} rates x {len(sweep.policies)} policies x {sweep.requests:,} requests (s)",
                  f"{elapsed:.2f}", "<= 20", ok]])
    return [ok]


def bench_prefix(repeat: int = 3) -> list[bool]:
    """Issue 15's target: 2,000 consecutive Mooncake conversation requests replayed with prefix
    caching at block size 16 on a pool of about a quarter of their distinct full prompt blocks,
    in at most 5 s (median of ``repeat``). Prints the hit rate and the evictions it took."""
    from allocator.workloads.mooncake import mooncake_workload, shipped_mooncake
    from allocator.studies.prefix_cache import distinct_prompt_blocks, run

    wl = mooncake_workload(shipped_mooncake(), offset=0, count=2000)
    distinct = distinct_prompt_blocks(wl, 16)
    pool = distinct // 4
    elapsed, res = _median_time(lambda: run(wl, 16, pool), repeat)
    s = res.summary
    ok = elapsed <= 5.0
    print_table(f"prefix caching: {len(wl.requests):,} Mooncake requests, block 16, pool {pool:,} blocks "
                f"(1/4 of {distinct:,} distinct prompt blocks)",
                ["measure", "value", "target", "met"],
                [["replay (s, median of %d)" % repeat, f"{elapsed:.2f}", "<= 5", ok],
                 ["hit rate (prompt tokens found cached)", f"{100 * s['prefix_cache_hit_rate']:.1f} %", "-", "-"],
                 ["prefill tokens saved", f"{s['prefill_tokens_saved']:,}", "-", "-"],
                 ["cached blocks evicted", f"{s['cached_block_evictions']:,}", "-", "-"],
                 ["preemptions", f"{s['preemptions']:,}", "-", "-"]])
    return [ok]


def bench_replay(repeat: int = 3) -> list[bool]:
    """Issue 22's target: replaying the shipped vLLM run (300 requests, v1 rules, calibrated step
    model) takes at most 5 s (median of ``repeat``). Prints the replay's mean errors beside it."""
    from allocator.studies.vllm_replay import replay
    from allocator.workloads.vllm_run import SHIPPED_RUN, load_run

    run = load_run(SHIPPED_RUN)
    elapsed, rep = _median_time(lambda: replay(run, calibration="run"), repeat)
    ok = elapsed <= 5.0
    print_table(f"replay-vllm: {run.name} ({len(run)} requests, {rep.cost.label})",
                ["measure", "value", "target", "met"],
                [["replay (s, median of %d)" % repeat, f"{elapsed:.2f}", "<= 5", ok]]
                + [[f"mean {k} error (%)", f"{rep.error_pct(k):+.1f}", "within 10", abs(rep.error_pct(k)) <= 10]
                   for k in ("ttft", "tpot", "latency")])
    return [ok]


def bench_site() -> list[bool]:
    """Issue 26: the default scenario's static site (``export-site``) at most 10 MB, and a switch of
    the block-size slider redrawn (maps, cards, details, sweep) within 0.5 s in headless Chromium,
    the site opened from disk with every other request aborted. Each block size's first visit
    decodes its frames (cold); the second pass finds them decoded (warm)."""
    import gzip
    import os
    import tempfile

    from allocator.engine.scenario import Scenario
    from allocator.viz.export.site import build_site, site_bytes

    t = time.perf_counter()
    files = build_site(Scenario())
    t_build = time.perf_counter() - t
    total = site_bytes(files)
    zipped = sum(len(gzip.compress(b, 6)) for b in files.values())
    print_table("static site: files (bytes)", ["file", "bytes", "gzip -6"],
                [[name, f"{len(b):,}", f"{len(gzip.compress(b, 6)):,}"] for name, b in sorted(files.items())])
    rows = [["export-site: build, default scenario (s)", f"{t_build:.1f}", "(info)", True],
            ["site size (MB)", f"{total / 1e6:.2f}", "<= 10.00", total <= 10_000_000],
            ["site size gzipped, as a static host sends it (MB)", f"{zipped / 1e6:.2f}", "(info)", True]]
    chromium = os.environ.get("CHROMIUM", "/usr/bin/chromium")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        sync_playwright = None
    if sync_playwright is None or not os.path.exists(chromium):
        rows.append(["slider switch (needs playwright and Chromium)", "skipped", "<= 500 ms", False])
    else:
        with tempfile.TemporaryDirectory() as tmp:
            for name, content in files.items():
                os.makedirs(os.path.dirname(os.path.join(tmp, name)), exist_ok=True)
                with open(os.path.join(tmp, name), "wb") as fh:
                    fh.write(content)
            with sync_playwright() as p:
                browser = p.chromium.launch(executable_path=chromium, args=[
                    "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                    "--disable-component-update", "--disable-sync"])
                page = browser.new_page(viewport={"width": 1366, "height": 768})
                page.route("**/*", lambda r: r.continue_() if r.request.url.startswith("file://") else r.abort())
                t = time.perf_counter()
                page.goto("file://" + os.path.join(tmp, "index.html"))
                page.wait_for_selector("body[data-ready]", state="attached", timeout=120_000)
                t_open = time.perf_counter() - t
                sizes = page.evaluate("Array.from(document.querySelectorAll('#bs-labels span')).map(s => +s.textContent)")
                times = {"cold": [], "warm": []}
                for kind in ("cold", "warm"):
                    for i, bs in enumerate(sizes + sizes[:1] if kind == "cold" else sizes):
                        if kind == "cold" and i == 0:
                            continue                      # the page opened on one block size already
                        page.locator("#bs").fill(str(sizes.index(bs)))
                        page.wait_for_function(f"document.body.getAttribute('data-ready').startsWith('{bs}|')",
                                               timeout=60_000)
                        times[kind].append(page.evaluate("window.KV_LAST_SWITCH_MS"))
                browser.close()
        worst = max(times["cold"] + times["warm"])
        load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
        rows += [["open index.html from disk until drawn (s)", f"{t_open:.2f}", "(info)", True],
                 [f"machine load while measuring (1-min load average, {os.cpu_count()} CPUs)", f"{load:.1f}",
                  "(info)", True],
                 ["slider switch, first visit of each block size (median / max ms)",
                  f"{statistics.median(times['cold']):.0f} / {max(times['cold']):.0f}", "<= 500", worst <= 500],
                 ["slider switch, later visits (median / max ms)",
                  f"{statistics.median(times['warm']):.0f} / {max(times['warm']):.0f}", "<= 500", worst <= 500]]
    print_table("static site (issue 26): default scenario, headless Chromium, file://",
                ["measure", "value", "target", "met"], rows)
    return [r[3] for r in rows if r[2] != "(info)"]


def bench_paper() -> list[bool]:
    """Issue 21's and 38's targets: the whole paper replication in at most 60 s on this 2-core machine,
    and each figure's value against the paper's within its tolerance (Figure 13 within 15 %, Figure 2's
    token states within 5 points and Orca (Max)'s split in the paper's order, Figure 12's sustained-rate
    ratios inside the paper's ranges).

    The 60 s covers everything ``python -m allocator paper-replication --json`` prints, run here as that
    command in a fresh process: Figures 2, 13 and 12, Figure 13 over ten seeds under both load rules, the
    section 7 ablations (Figures 18b, 19a, 19b), Figure 15 and Figure 14, in one pool of ``PAPER_WORKERS``
    (2) processes beside the main one (:func:`allocator.cli.paper.full_replication`). Printed: wall
    seconds, CPU seconds (user + system of the command and the pool's processes), CPU / 2 (the least
    wall time two free cores could take) and the 1-minute load average before and after: on a machine
    shared with other work the wall time is an upper bound, the CPU time the code's own cost.

    Measured (2026-12-03, this 2-core machine shared with four other sessions, ``nice -n 10``;
    ``/usr/bin/time -v`` on the command):
    before (one pool per part, Figure 15 serial): 125 s CPU, 10:07 wall at load 4.7-11.5;
    after (one shared pool, longest tasks first; the section 7 clock's pricer; the Orca baselines'
    repeated refusals without a buddy search): 79 s CPU, 2:34 wall at load 5.3-6.9; 77 s CPU,
    6:02 wall at load 8.7-13.8; this section: 74 s CPU, 156 s wall at load 13.1-6.9 -- about
    40 s on two free cores (CPU / 2; the serial part before the
    pool starts is about 1 s), which this shared machine never had while measuring, so the 60 s
    target was not seen met here. CPU seconds move with the load too on this virtual machine (the
    replication alone: 6.7 s at one time, 12 s at another), so compare runs at similar loads."""
    import json
    import resource
    import subprocess

    def load() -> float:
        return os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")

    argv = [sys.executable, "-m", "allocator", "paper-replication", "--json"]
    load0, before = load(), resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, cwd=_ROOT)
    wall = time.perf_counter() - t
    after, load1 = resource.getrusage(resource.RUSAGE_CHILDREN), load()
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    if done.returncode != 0:
        print(f"paper-replication failed (exit {done.returncode}):\n{done.stderr[-2000:]}")
        return [False]
    out = json.loads(done.stdout)
    sc = out["load"]
    targets = out["targets"]
    print_table(f"paper replication (load scale x{sc['scale']:.2f}: this model's paged saturation "
                f"{sc['our_saturation_rate']:.2f} requests/s / the paper's {sc['paper_saturation_rate']:g})",
                ["figure", "measure", "paper", "ours", "error", "tolerance", "within"],
                [[r["figure"], r["measure"], r["paper"], r["ours"], r["error"], r["tolerance"], r["ok"]]
                 for r in targets])
    ok_time = wall <= 60.0
    parts = ", ".join(f"{name} {sec:.1f}" for name, sec in
                      (("Figures 2, 13, 12", out["seconds"]), ("ablations", out["ablations"]["seconds"]),
                       ("Figure 15", out["fig15"]["seconds"]), ("Figure 14", out["fig14"]["seconds"])))
    print_table("paper replication: time of the whole `paper-replication --json` (every figure it prints; "
                f"{out['workers']} pool processes beside the main one)", ["measure", "value", "target", "met"],
                [["wall s", f"{wall:.1f}", "<= 60", ok_time],
                 ["CPU s (user + system, pool processes included)", f"{cpu:.1f}", "(info)", True],
                 ["CPU / 2 s (the least two free cores could take)", f"{cpu / 2:.1f}", "(info)", True],
                 [f"1-minute load average before / after ({os.cpu_count()} CPUs)", f"{load0:.1f} / {load1:.1f}",
                  "(info)", True],
                 ["each part's wall s, overlapping (its own timer)", parts, "(info)", True]])
    f14 = out["fig14"]
    print_table("Figure 14: vLLM / Orca (Oracle) sustained rate by width (mean ± sd over seeds; the paper, "
                "Alpaca: 1.3x basic sampling to 2.3x beam search of width 6)",
                ["mode", *map(str, f14["widths"]), "grows"],
                [[m] + [f"{f14['advantage'][m][str(w)]['oracle']['mean']:.2f} ± "
                        f"{f14['advantage'][m][str(w)]['oracle']['std']:.2f}"
                        if "oracle" in f14["advantage"][m].get(str(w), {}) else "not stated" for w in f14["widths"]]
                 + [f14["grows_with_width_vs_oracle"][m]] for m in ("parallel", "beam")])
    # None: compared, not a target; Figure 14's shape is reported (the table), not a target
    return [r["ok"] for r in targets if r["ok"] is not None] + [ok_time]


def _cpu_time(fn, repeat: int = 1) -> tuple[float, object]:
    """Least CPU time (``time.process_time``) of ``repeat`` calls, and the last result: on a shared
    machine CPU time is far steadier than wall time, and the least is the closest to the code's cost."""
    times, out = [], None
    for _ in range(repeat):
        t = time.process_time()
        out = fn()
        times.append(time.process_time() - t)
    return min(times), out


def bench_engine(repeat: int = 2) -> list[bool]:
    """Issue 24's engine targets, in CPU seconds (``time.process_time``, the least of ``repeat``; of
    3 x ``repeat`` for the Azure run, whose first run in a process also pays for warming up):
    the Azure conversation trace five times (96,830 requests) through the paged allocator on a
    2**20-slot pool at most 2 s; the whole Mooncake conversation trace (12,031 requests) with
    prefix caching, block 16, a pool of a quarter of its distinct full prompt blocks, at most 2 s
    (issue 39; issue 24 asked 3 s), and the same run with pool pictures at most 1.3x it. The same replay without prefix caching
    is printed beside it (info).

    Measured 2026-12-03 (issue 39), the code before and after run back to back, load 4.8-7.1 (the
    machine shared by five sessions: CPU time itself grows with the load, so only the pairs
    compare): Azure x5 2.84 s -> 2.32 s, the Mooncake trace with prefix caching 3.21 s -> 2.37 s,
    with pictures 4.53 s -> 3.06 s; earlier the same day at load 4-6.5 the code before gave
    2.14 s and 2.26 s."""
    from allocator.memory.paged import PagedAllocator
    from allocator.engine.simulate import simulate
    from allocator.workloads.mooncake import mooncake_workload, shipped_mooncake
    from allocator.studies.prefix_cache import distinct_prompt_blocks, run

    rows, met = [], []
    w = _azure_repeated(5)
    t, res = _cpu_time(lambda: simulate(w, PagedAllocator(1 << 20, 16), record_snapshots=False), 3 * repeat)
    met.append(t <= 2.0)
    rows.append([f"{w.name} ({len(w):,} requests), paged 16, 2**20 slots", f"{t:.2f}", f"{res.records:,}",
                 "<= 2 s", t <= 2.0])
    wl = mooncake_workload(shipped_mooncake(), offset=0, count=len(shipped_mooncake()))
    pool = distinct_prompt_blocks(wl, 16) // 4
    t_plain, res = _cpu_time(lambda: run(wl, 16, pool, prefix_caching=False), repeat)
    rows.append([f"mooncake-conv ({len(wl):,} requests), block 16, {pool:,} blocks, no prefix caching",
                 f"{t_plain:.2f}", f"{res.records:,}", "(info)", True])
    t_cache, res = _cpu_time(lambda: run(wl, 16, pool), repeat)
    met.append(t_cache <= 2.0)
    rows.append(["  the same with prefix caching", f"{t_cache:.2f}", f"{res.records:,}", "<= 2 s", t_cache <= 2.0])
    rows.append(["  prefix caching / none (x)", f"{t_cache / t_plain:.1f}", "-", "(info)", True])
    t_snap, res = _cpu_time(lambda: run(wl, 16, pool, record_snapshots=True), repeat)
    ratio = t_snap / t_cache
    met.append(ratio <= 1.3)
    rows.append([f"  with pool pictures ({len(res.snapshots):,} kept, every {res.snapshot_stride:,} steps)",
                 f"{t_snap:.2f}", f"{res.records:,}", "(info)", True])
    rows.append(["  pictures / without (x)", f"{ratio:.2f}", "-", "<= 1.3", ratio <= 1.3])
    print_table("engine: the engine's own scale (CPU seconds, least of %d runs, Azure %d; the machine is shared, "
                "so these are upper bounds)" % (repeat, 3 * repeat), ["run", "CPU s", "records", "target", "met"], rows)
    return met


def bench_v1(repeat: int = 5) -> list[bool]:
    """Issue 39's target: the event-driven v1 loop within 2x the classroom loop's CPU time, on
    10,000 requests of the Azure conversation trace, paged, block 16, a 2**20-slot pool, vLLM's
    default rules (256 sequences, 2,048 tokens a step). The two runs alternate ``repeat`` times and
    each keeps its least CPU time (``time.process_time``), so both see the same load on a shared
    machine. Measured when the target was set (2026-12-03): before 1.88 s against 0.20 s (9.3x),
    after 0.54 s (2.7x); with the woken decoders grown in one call and no wake-all when a prefill
    makes the budget bind, 0.38 s against 0.26 s (1.5x; the loop before that 2.8-3.1x, same load ~5-9)."""
    from allocator.engine.simulate import simulate
    from allocator.engine.v1 import V1Rules
    from allocator.memory.paged import PagedAllocator
    from allocator.workloads.trace import shipped_trace, trace_workload

    w = trace_workload(shipped_trace(), offset=0, count=10_000, steps_per_second=20.0, max_new_tokens=1024)
    best = {"classroom": float("inf"), "v1": float("inf")}
    for _ in range(repeat):
        for name in best:
            t = time.process_time()
            res = simulate(w, PagedAllocator(1 << 20, 16), record_snapshots=False,
                           rules=V1Rules() if name == "v1" else None)
            best[name] = min(best[name], time.process_time() - t)
    ratio = best["v1"] / best["classroom"]
    rows = [["classroom rules", f"{best['classroom']:.2f}", "(info)", True],
            [f"vLLM v1 rules ({res.records:,} records)", f"{best['v1']:.2f}", "(info)", True],
            ["v1 / classroom (x)", f"{ratio:.2f}", "<= 2", ratio <= 2.0]]
    print_table(f"v1: {len(w):,} Azure requests, paged 16, 2**20 slots (CPU seconds, least of {repeat} "
                "alternating runs)", ["run", "CPU s", "target", "met"], rows)
    return [ratio <= 2.0]


#: What :func:`bench_million` runs in a fresh process: the Azure trace repeated 52 times (as
#: :func:`_azure_repeated`) cut to 1,000,000 requests, paged 16 on 2**20 slots; prints the run's
#: CPU seconds and the process's peak resident memory before and after the run (MB).
_MILLION = """
import resource, sys, time
sys.path.insert(0, {root!r})
from tests.tools.bench import _azure_repeated
from allocator.engine.simulate import simulate
from allocator.memory.paged import PagedAllocator
w = _azure_repeated(52)
w = type(w)(w.name, w.requests[:1_000_000], w.max_new_tokens)
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
t = time.process_time()
res = simulate(w, PagedAllocator(1 << 20, 16), record_snapshots=False)
cpu = time.process_time() - t
print(len(w), res.records, cpu, before, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
"""


def bench_million() -> list[bool]:
    """Issue 39's scale targets for a million requests: the Azure conversation trace repeated to
    1,000,000 requests through the paged allocator (block 16, 2**20 slots) in at most 15 CPU
    seconds (``time.process_time`` of the run) and 1 GB -- the process's peak resident memory
    (``ru_maxrss``) less what it held once the workload was built. Run in a fresh process, so that
    no earlier section's memory counts. (Measured 2026-12-03 at load ~10: 28.7 s, 1.8 GB. After
    issue 39's record format -- records rolled into memory maps every 20,000 busy steps and freed
    as they are copied into columns, finished requests packed, the summary's temporaries one at a
    time: 717 MB against 1,742 MB for the code before, run back to back at load 7-14, where the
    CPU seconds, 33.5 against 31.2, say more about the load than the code; at load 2-4 the run
    took 24.3 s against 28.2 s before at load 6.)"""
    import subprocess

    out = subprocess.run([sys.executable, "-c", _MILLION.format(root=_ROOT)], capture_output=True, text=True,
                         check=True, cwd=_ROOT).stdout.split()
    n, records, cpu, before, after = int(out[0]), int(out[1]), float(out[2]), float(out[3]), float(out[4])
    grown = after - before
    rows = [[f"azure-conv x52 cut to {n:,} requests, paged 16, 2**20 slots ({records:,} records): CPU s",
             f"{cpu:.1f}", "<= 15", cpu <= 15.0],
            ["  peak resident memory of the run, above the workload's (MB)", f"{grown:,.0f}", "<= 1,000",
             grown <= 1000],
            ["  the process's peak resident memory (MB)", f"{after:,.0f}", "(info)", True]]
    print_table("million: a million requests (fresh process)", ["run", "value", "target", "met"], rows)
    return [rows[0][3], rows[1][3]]


def _page_run(at, label: str, rows: list, target: float | None) -> bool:
    """Run the AppTest once; add [label, wall s, CPU s, target, met] to ``rows`` (met: wall <= target)."""
    t, c = time.perf_counter(), time.process_time()
    at.run()
    dt, dc = time.perf_counter() - t, time.process_time() - c
    assert not at.exception, at.exception
    ok = target is None or dt <= target
    rows.append([label, f"{dt:.2f}", f"{dc:.2f}", "(info)" if target is None else f"<= {target:g}", ok])
    return ok


def bench_prefixpage() -> list[bool]:
    """Issue 24's Prefix cache page targets, timed as the page's script runs in AppTest (the
    server's side; the browser adds its drawing): cold (nothing cached, as on a server that has
    not warmed it) for information; after the background warm-up ``app.py`` starts
    (``pages._ui.prefix_data.warm``: the default window at every block size) the first visit
    <= 3 s and each control change <= 2 s -- every block size, the map's pool, the GPU."""
    import streamlit as st
    from streamlit.testing.v1 import AppTest

    from allocator.workloads.mooncake import mooncake_workload, shipped_mooncake
    from allocator.studies.prefix_cache import pool_sweep
    from pages._ui import prefix_data
    from tests.conftest import APP_PATH

    def page():
        at = AppTest.from_file(APP_PATH, default_timeout=600)
        at.switch_page("pages/prefix_cache.py")
        return at

    rows, met = [], []
    shipped_mooncake()                                          # the trace file, read once per process
    wl = mooncake_workload(shipped_mooncake(), offset=0, count=1000)
    t, c = time.perf_counter(), time.process_time()
    sweep = pool_sweep(wl, 16)
    rows.append([f"one-pass sweep, 1,000 requests, block 16 ({len(sweep.curve['pool_blocks'])} pool sizes)",
                 f"{time.perf_counter() - t:.2f}", f"{time.process_time() - c:.2f}", "(info)", True])
    st.cache_resource.clear()
    _page_run(page(), "cold page, nothing cached (no warm-up)", rows, None)
    st.cache_resource.clear()
    t, c = time.perf_counter(), time.process_time()
    prefix_data.warm()
    rows.append(["background warm-up at server start (6 block sizes, 6 map pools)", f"{time.perf_counter() - t:.2f}",
                 f"{time.process_time() - c:.2f}", "(info)", True])
    at = page()
    met.append(_page_run(at, "first visit after the warm-up", rows, 3.0))
    for bs in prefix_data.BLOCK_SIZES[1:] + prefix_data.BLOCK_SIZES[:1]:
        at.select_slider(key="pc_block").set_value(bs)
        met.append(_page_run(at, f"block size -> {bs}", rows, 2.0))
    pool = at.select_slider(key="pc_pool_0_1000_16")
    values = [int(o.split()[0].replace(",", "")) for o in pool.options]      # "33,635 blocks (0.05× ...)"
    pool.set_value(next(v for v in values if v != pool.value))
    met.append(_page_run(at, "map's pool -> another row (warmed)", rows, 2.0))
    at.select_slider(key="pc_block").set_value(32)
    at.run()
    pool = at.select_slider(key="pc_pool_0_1000_32")
    values = [int(o.split()[0].replace(",", "")) for o in pool.options]
    pool.set_value(next(v for v in values if v != pool.value))
    met.append(_page_run(at, "map's pool -> another row, block 32 (not warmed)", rows, 2.0))
    at.selectbox(key="pc_gpu").set_value("a100-80gb" if "a100-80gb" in at.selectbox(key="pc_gpu").options
                                         else at.selectbox(key="pc_gpu").options[0])
    met.append(_page_run(at, "GPU -> another (not warmed: two timed replays)", rows, 2.0))
    print_table("prefix cache page: script run in AppTest, default window 1,000 requests (wall s is the target; "
                "CPU s is this process's, all threads, so a busy machine shows in wall - CPU)",
                ["step", "wall s", "CPU s", "target", "met"], rows)
    return met


def bench_prefixbrowser(repeat: int = 3, up_s: float = 60.0) -> list[bool]:
    """Issue 24's first-visit target in a real browser: ``python app.py`` (which warms the Prefix
    cache page's default window in the background), wait until the server has been up ``up_s``
    seconds, then time the click from the About page to the Prefix cache page's first chart
    (median of ``repeat``), beside the same click to the Capacity page (a light page: what the
    server, the browser and this machine's load cost any page)."""
    try:
        from playwright.sync_api import sync_playwright

        from tests.browser.test_browser import CHROMIUM, serve_app
    except Exception as exc:                    # no playwright or no Chromium: say so, count nothing
        print_table("prefix cache page in a browser", ["measure", "value"], [["skipped", str(exc)[:100]]])
        return []
    rows, met = [], []
    with serve_app("bench-prefix-browser") as base:
        started = time.monotonic()
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=[
                "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                "--disable-sync"])
            page = browser.new_page(viewport={"width": 1920, "height": 1080})
            page.goto(f"{base}/about", timeout=300_000)
            page.wait_for_selector("h1", timeout=300_000)
            time.sleep(max(0.0, up_s - (time.monotonic() - started)))
            for title, target in (("Capacity", None), ("Prefix cache on a real trace", 3.0)):
                times = []
                for _ in range(repeat):
                    page.goto(f"{base}/about", timeout=300_000)
                    page.wait_for_selector("h1", timeout=300_000)
                    t = time.perf_counter()
                    page.get_by_text(title).first.click()
                    page.wait_for_selector(".js-plotly-plot", timeout=300_000)
                    times.append(time.perf_counter() - t)
                value = statistics.median(times)
                ok = target is None or value <= target
                if target is not None:
                    met.append(ok)
                rows.append([f"About -> {title}: first chart", f"{value:.2f}", f"{min(times):.2f}",
                             "(info)" if target is None else f"<= {target:g}", ok])
            browser.close()
    print_table(f"prefix cache page in headless Chromium, server up {up_s:.0f} s (median of {repeat}, s)",
                ["navigation", "median", "min", "target", "met"], rows)
    return met


def _timed_runs(argv: list[str], n: int) -> tuple[float, float]:
    """(min, median) wall seconds of ``n`` runs of a command (after one unmeasured run)."""
    import subprocess

    subprocess.run(argv, capture_output=True, cwd=_ROOT)
    times = []
    for _ in range(n):
        t = time.perf_counter()
        out = subprocess.run(argv, capture_output=True, cwd=_ROOT)
        times.append(time.perf_counter() - t)
        assert out.returncode == 0, out.stderr
    return min(times), statistics.median(times)


def bench_cli(n: int = 10) -> list[bool]:
    """Issue 24's start-up targets, end to end in a fresh process (median of ``n`` runs; the
    interpreter and numpy alone are shown as the floor a busy machine puts under every figure)."""
    py = sys.executable
    cases = [("python -c pass (the interpreter alone)", [py, "-c", "pass"], None),
             ("python -c 'import numpy' (the floor under the rest)", [py, "-c", "import numpy"], None),
             ("python -c 'import allocator'", [py, "-c", "import allocator"], 0.3),
             ("python -m allocator --help", [py, "-m", "allocator", "--help"], 0.5),
             ("python -m allocator simulate --workload classroom-40 --json",
              [py, "-m", "allocator", "simulate", "--workload", "classroom-40", "--json"], 1.0)]
    rows, met = [], []
    for label, argv, target in cases:
        best, median = _timed_runs(argv, n)
        ok = target is None or median <= target
        if target is not None:
            met.append(ok)
        rows.append([label, f"{median:.3f}", f"{best:.3f}", "(info)" if target is None else f"<= {target:g}", ok])
    print_table(f"CLI start-up, wall seconds over {n} runs", ["command", "median", "min", "target", "met"], rows)
    return met


def bench_pools() -> list[bool]:
    """Issue 24's one pool range: the CLI runs classroom-40 on a pool of 2**30 one-slot blocks
    (time, peak resident memory of that process), and a BlockPool of 2**30 blocks costs what the
    blocks it used cost (traced memory)."""
    import json
    import subprocess
    import tracemalloc

    from allocator.memory.block_pool import BlockPool

    # VmHWM (peak resident memory of this process's own address space; ru_maxrss would carry the
    # parent's over exec, and the parent has imported torch)
    code = ("import json, re, sys; from allocator.__main__ import main; import contextlib, io\n"
            "buf = io.StringIO()\n"
            "with contextlib.redirect_stdout(buf): code = main(['simulate', '--workload', 'classroom-40', "
            "'--slots', str(2**30), '--block-size', '1', '--json'])\n"
            "hwm = int(re.search(r'VmHWM:\\s+(\\d+)', open('/proc/self/status').read()).group(1))\n"
            "print(json.dumps({'code': code, 'rss_kb': hwm, "
            "'finished': json.loads(buf.getvalue())['paged']['finished']}))")
    t = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=_ROOT)
    elapsed = time.perf_counter() - t
    info = json.loads(out.stdout.strip().splitlines()[-1])
    ok_cli = info["code"] == 0 and info["finished"] == 40 and info["rss_kb"] <= 300 * 1024
    tracemalloc.start()
    pool = BlockPool(2 ** 30)
    pool.release(pool.allocate(1000))
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    ok_pool = peak <= 1 << 20
    print_table("pools up to 2**30 slots: memory follows the blocks used",
                ["case", "seconds", "memory", "target", "met"],
                [["simulate classroom-40, --slots 2**30 --block-size 1 (whole process)", f"{elapsed:.2f}",
                  f"{info['rss_kb'] / 1024:.0f} MB peak RSS", "runs, <= 300 MB", ok_cli],
                 ["BlockPool(2**30): 1,000 blocks allocated and released", "-", f"{peak / 1024:.0f} KiB traced",
                  "<= 1 MiB", ok_pool]])
    return [ok_cli, ok_pool]


SECTIONS = {"explainer": bench_explainer, "scale": bench_scale, "events": bench_events,
            "ratesweep": bench_ratesweep, "prefix": bench_prefix, "prefixpage": bench_prefixpage,
            "prefixbrowser": bench_prefixbrowser, "cli": bench_cli, "pools": bench_pools, "replay": bench_replay,
            "site": bench_site, "paper": bench_paper, "engine": bench_engine, "v1": bench_v1, "million": bench_million,
            "pages": bench_pages,
            "explainerbrowser": bench_explainer_browser, "throughputbrowser": bench_throughput_browser,
            "kernelbrowser": bench_kernel_browser, "suite": bench_suite}


def kernel_page_seconds() -> float:
    """Seconds to run the kernel page's script on a warm server: the second AppTest run of one
    session (a new AppTest session adds ~0.5 s of AppTest's own component scan, not the page's)."""
    import os
    import time

    from streamlit.testing.v1 import AppTest
    at = AppTest.from_file(os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "app.py"),
                           default_timeout=60)
    at.switch_page("pages/kernel.py")
    at.run()                                   # the first run loads the modules (a server's start-up)
    t0 = time.perf_counter()
    at.run()
    return time.perf_counter() - t0


def _kernel_section():
    try:
        from kernels.sweep.bench import bench_kernels
    except ImportError:
        return None
    return lambda: bench_kernels(page_seconds=kernel_page_seconds)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.tools.bench", description=__doc__.splitlines()[0])
    parser.add_argument("sections", nargs="*", help="sections to run (default: all, in this order): "
                        + ", ".join([k for k in SECTIONS if k != "suite"] + ["kernels", "suite"]))
    parser.add_argument("--strict", action="store_true", help="exit 1 if any target is missed")
    args = parser.parse_args(argv)
    sections = dict(SECTIONS)
    kern = _kernel_section()
    if kern is not None:
        sections["kernels"] = kern
    sections["suite"] = sections.pop("suite")         # the whole suite runs last
    chosen = args.sections or list(sections)
    met = []
    for name in chosen:
        if name not in sections:
            parser.error(f"unknown section {name!r}; choose from {', '.join(sections)}")
        met += list(sections[name]() or [])
    print(f"\n{sum(met)} of {len(met)} targets met")
    return 1 if args.strict and not all(met) else 0


if __name__ == "__main__":
    sys.exit(main())
