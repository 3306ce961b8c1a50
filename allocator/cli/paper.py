"""``python -m allocator paper-replication``: the PagedAttention paper's experiment and its figures;
``python -m allocator sharing``: one run of requests with several sequences (Figure 15's measure).

Examples::

    python -m allocator paper-replication
    python -m allocator paper-replication --json
    python -m allocator sharing --mode beam --width 4 --replacement 0.05

Runs OPT-13B on one A100-40GB (the paper's Table 1 pool), ShareGPT lengths, vLLM (block 16,
recompute) and the artifact's three Orca baselines (buddy placement), and prints Figures 2, 13
and 12 as the paper's value beside this model's, with the error (see :mod:`allocator.studies.paper`); without
``--quick`` also Figure 13 over ten seeds, the section 7 ablations (:mod:`allocator.studies.ablations`),
Figure 15 (:mod:`allocator.studies.sharing`) and Figure 14 on ShareGPT (:mod:`allocator.studies.sampling_latency`),
all their runs in one pool of :data:`PAPER_WORKERS` processes (:func:`full_replication`; ``make bench SECTIONS=paper``
times the whole against issue 38's 60 s).
"""
from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor

from allocator.cost.kernel_block import kernel_block_factors
from allocator.studies.ablations import PAPER_ABLATIONS, ablations
from allocator.studies.paper import (FIG13_SEEDS, PAPER_LABELS, SATURATION_REQUESTS, SYSTEMS, add_fig13_spread,
                                     paper_replication, shared_pool)
from allocator.studies.sharing import MODE_LABELS, PAPER_FIG15, figure15
from allocator.studies.sampling_latency import MODES as FIG14_MODES, ORCA_SYSTEMS, PAPER_FIG14, fig14_budget, figure14
from allocator.studies.sustained import sustained_short
from allocator.cli.common import count_arg, range_help, real_arg
from allocator.common.formats import plural
from allocator.common.limits import check
from allocator.engine.sampling import BEAM_MODES, DEFAULT_REPLACEMENT, MAX_WIDTH, Sampling
from allocator.studies.paper import PAPER_FIGURES, load_scale, paper_cost
from allocator.studies.sharing import REQUESTS, sharing_run
from allocator.viz.claims.sampling_latency import fig14_steps

#: Processes running the independent seeded runs of Figure 13's spread, the section 7 ablations, Figure 15
#: and Figure 14's (width, seed) searches, one pool for all (this machine has 2 cores); the numbers are the
#: same for any count.
PAPER_WORKERS = 2


def register(sub) -> None:
    """Add the ``paper-replication`` sub-command to ``sub`` (an argparse sub-parsers object)."""
    p = sub.add_parser("paper-replication",
                       help="the PagedAttention paper's OPT-13B experiment: Figures 2, 12 and 13, the paper's "
                            "values beside this model's",
                       description="OPT-13B on one A100-40GB with ShareGPT lengths: vLLM against Orca (Max, Pow2, "
                                   "Oracle) with the artifact's buddy allocator, at the paper's relative load.")
    p.add_argument("--seed", type=count_arg, default=0,
                   help=f"arrivals and shuffle (default 0; {range_help('seed')})")
    p.add_argument("--json", action="store_true", help="print JSON instead of tables")
    p.add_argument("--quick", action="store_true",
                   help="the three figures only: no Figure 13 spread over ten seeds, no section 7 ablations, "
                        "no Figures 15 and 14 (sharing)")
    p.set_defaults(func=run)
    q = sub.add_parser("sharing",
                       help="requests of several sequences (parallel sampling, beam search) on the paper's set-up: "
                            "memory saved by sharing blocks (Figure 15's measure)",
                       description="OPT-13B on one A100-40GB (the paper's Table 1 pool, blocks of 16), ShareGPT lengths, "
                                   "every request asking for --width samples or beams; prints 1 - physical / logical "
                                   "blocks averaged over time, forks, frees and copy-on-write copies.")
    q.add_argument("--mode", choices=BEAM_MODES, default="parallel", help="parallel sampling or beam search")
    q.add_argument("--width", type=count_arg, default=2, help=f"samples or beams per request (2 to {MAX_WIDTH})")
    q.add_argument("--replacement", type=real_arg, default=DEFAULT_REPLACEMENT,
                   help=f"beam model: probability a beam is replaced per step, 0 to 1 (default {DEFAULT_REPLACEMENT:g})")
    q.add_argument("--requests", type=count_arg, default=REQUESTS, help=f"requests (default {REQUESTS})")
    q.add_argument("--rate", type=real_arg, default=None,
                   help="requests/s on this model's clock (default: Figure 13's relative load / width)")
    q.add_argument("--seed", type=count_arg, default=0, help=f"arrivals and beam model (default 0; {range_help('seed')})")
    q.add_argument("--json", action="store_true", help="print JSON instead of text")
    q.set_defaults(func=run_sharing)


def full_replication(seed: int):
    """Everything ``paper-replication`` prints without ``--quick``: the replication with Figure 13's spread,
    the section 7 ablations, Figures 15 and 14, all their runs in one pool of :data:`PAPER_WORKERS`
    processes (:func:`allocator.studies.paper.shared_pool`). The load scale and Figure 12's latency budget
    come first (each a fraction of a second, the same values the replication computes: see
    :func:`allocator.studies.paper.load_scale`); then Figures 14, 18b/19 and 15 are handed to the pool from
    threads, Figure 14's longest searches first, while this thread runs the replication (Figures 2, 13
    and 12, in this process) and then hands Figure 13's spread to the pool, which needs the replication's
    Figure 12 knee. The numbers are those of the parts run one after another: every run is independent
    and seeded.

    Returns:
        (Replication with ``fig13_spread``, Ablations, Figure15, Figure14, wall seconds of the whole).
    """
    t0 = time.perf_counter()
    cost = paper_cost()
    scale = load_scale(cost, seed)["scale"]
    budget = fig14_budget(cost, seed)
    with shared_pool(PAPER_WORKERS), ThreadPoolExecutor(max_workers=3) as side:
        # Figure 14 first: its (width, seed) searches are the longest tasks the pool gets
        f14 = side.submit(lambda: figure14(scale=scale, budget=budget, workers=PAPER_WORKERS))
        abl = side.submit(lambda: ablations(kernel_block_factors(), scale=scale, workers=PAPER_WORKERS))
        f15 = side.submit(lambda: figure15(scale=scale))
        rep = paper_replication(seed=seed)
        add_fig13_spread(rep, FIG13_SEEDS, workers=PAPER_WORKERS)
        parts = (rep, abl.result(), f15.result(), f14.result())
    return (*parts, time.perf_counter() - t0)


def run(args) -> int:
    """Run the replication and print it; returns the exit status."""
    seed = check("seed", args.seed)
    abl = fig15 = fig14 = None
    if args.quick:
        rep = paper_replication(seed=seed)
    else:
        rep, abl, fig15, fig14, total_s = full_replication(seed)
    out = rep.to_dict()
    if abl is not None:
        out["ablations"] = abl.to_dict()
    if fig15 is not None:
        out["fig15"] = fig15.to_dict()
    if fig14 is not None:
        out["fig14"] = fig14.to_dict()
        out["seconds_total"] = total_s
        out["workers"] = PAPER_WORKERS
    if args.json:
        print(json.dumps(out, indent=2))
        return 0
    sc = rep.scale
    print(f"OPT-13B on one A100-40GB, {out['setup']['slots']:,} KV slots (the paper's Table 1), ShareGPT lengths; "
          f"rates x{sc['scale']:.2f} (same relative load: this model's paged burst saturation rate, "
          f"{SATURATION_REQUESTS:,} requests arriving at once, {sc['ours']:.2f} requests/s over the paper's "
          f"{sc['paper']:g}; a scale, not a sustained rate)")
    rows = [[r["figure"], r["measure"], str(r["paper"]), str(r["ours"]), r["error"], "-" if r["ok"] is None else "yes" if r["ok"] else "NO"]
            for r in out["targets"]]
    head = ["figure", "measure", "paper", "ours", "error", "within"]
    widths = [max(len(x[i]) for x in rows + [head]) for i in range(len(head))]
    print()
    for row in [head] + rows:
        print("  ".join(c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths))))
    print("\nFigure 2 (% of KV memory): token states / reservation / internal / external and other, this model in "
          "the artifact's categories (the paper's: a buddy run's rounding under external), then in this lab's "
          "(the rounding under internal)")
    keys = ("token_states", "reservation", "internal", "external")
    for s in SYSTEMS:
        art, lab = rep.fig2[s]["artifact"], rep.fig2[s]
        print(f"  {PAPER_LABELS[s]:<14}" + " / ".join(f"{100 * art[k]:5.1f}" for k in keys) + "    lab: "
              + " / ".join(f"{100 * lab[k]:5.1f}" for k in keys))
    print(f"\nFigure 12: normalised latency (s/token) by rate (requests/s on the paper's scale); knee = the "
          f"sustained rate, where the curve crosses the {rep.budget_s_per_token:.4f} s/token budget "
          f"(paper's scale; x{sc['scale']:.2f} for this model's requests/s)")
    for s in SYSTEMS:
        pts = rep.fig12[s]
        sus = rep.sustained[s]
        text = sustained_short(sus)
        print(f"  {PAPER_LABELS[s]:<14}" + "  ".join(f"{p['paper_rate']:g}: {p['normalized_latency_s_per_token']:.4f}"
                                                     for p in pts) + f"   knee {text}")
    if rep.fig13_spread:
        print(f"\nFigure 13 over {len(FIG13_SEEDS)} arrival seeds (mean ± sd, min-max), the paper's bar beside")
        rules = rep.load_rules()
        for rule, info in rules.items():
            if rule not in rep.fig13_spread:
                continue
            print(f"  {rule} rule (x{info['scale']:.2f}: {info['rule']})")
            for s in SYSTEMS:
                sp = rep.fig13_spread[rule][s]
                print(f"    {PAPER_LABELS[s]:<14}{sp['mean']:6.2f} ± {sp['std']:.2f} ({sp['min']:.1f}-{sp['max']:.1f})"
                      f"   paper {out['fig13']['systems'][s]['paper']:.2f}")
    if abl is not None:
        m = abl.micro
        print(f"\nFigure 19a: {m['tokens']} tokens, swap out + in against recompute (ms); "
              f"{m['transfers_per_block']} copies per block x {1e6 * m['transfer_latency_s']:g} us")
        print("  block      " + "".join(f"{b:>8}" for b in m["block_sizes"]))
        print("  swap       " + "".join(f"{1e3 * v:8.1f}" for v in m["swap_out_in_s"]))
        print("  no latency " + "".join(f"{1e3 * v:8.1f}" for v in m["swap_no_latency_s"]))
        print(f"  recompute  {1e3 * m['recompute_s']:8.1f} at every block size; swap no slower from block "
              f"{m['crossover']}")
        print(f"\nFigures 18b/19b: normalised latency (s/token), ShareGPT at {abl.rate:.2f} requests/s "
              f"({len(abl.seeds)} seeds, mean ± sd); kernel cost per block size: {abl.kernel['source']}")
        for mode in ("recompute", "swap"):
            print(f"  {mode:<10} " + "  ".join(f"{bs}: {v['mean']:.4f}±{v['std']:.4f}" for bs, v in abl.e2e[mode].items()))
        print(f"  best block sizes (recompute, within 10 % of the lowest): {abl.best()}; the paper: "
              f"{PAPER_ABLATIONS['fig18b']['best_block_sizes'][0]}-{PAPER_ABLATIONS['fig18b']['best_block_sizes'][1]}")
    if fig15 is not None:
        print_fig15(fig15)
    if fig14 is not None:
        print_fig14(fig14)
    if fig14 is None:
        print(f"\n{rep.seconds:.1f} s (the three figures)")
        return 0
    parts = ", ".join(f"{name} {part.seconds:.1f} s" for name, part in
                      (("the three figures", rep), ("ablations", abl), ("Figure 15", fig15), ("Figure 14", fig14))
                      if part is not None)
    print(f"\n{total_s:.1f} s in all, wall ({PAPER_WORKERS} processes running every part's runs beside this one, "
          f"which runs the three figures; the parts overlap, each timed from its start to its end: {parts})")
    return 0


def print_fig14(f) -> None:
    """Figure 14's text output: vLLM's sustained rate over each Orca baseline's by mode and width (mean ±
    sd, min-max over the seeds), each step between widths as growing, falling or noise
    (:func:`allocator.viz.claims.sampling_latency.fig14_steps`), falls against Orca (Pow2) or (Max), the
    paper's statement beside."""
    print(f"\nFigure 14 on ShareGPT (the paper's: Alpaca): vLLM's sustained rate / each Orca baseline's, "
          f"{f.requests} requests a run, {len(f.seeds)} seeds (mean ± sd, min-max); budget "
          f"{f.budget_s_per_token:.4f} s/token (Figure 12's); width 1 = basic sampling")
    for mode in FIG14_MODES:
        for w in f.widths:
            cells = []
            for o in ORCA_SYSTEMS:
                sp = f.advantage[mode].get(w, {}).get(o)
                cells.append(f"{PAPER_LABELS[o]} " + ("not stated" if sp is None else
                                                      f"{sp['mean']:.2f}x ± {sp['std']:.2f} ({sp['min']:.2f}-{sp['max']:.2f})"))
            print(f"  {MODE_LABELS[mode]:<18} {w}: " + "   ".join(cells))
        steps = fig14_steps(f, mode)
        said = "; ".join(f"{x['from']} -> {x['to']}: {x['from_mean']:.2f}x -> {x['to_mean']:.2f}x "
                         + ("(within the seeds' sd: noise)" if x["kind"] == "noise" else f"({x['kind']})")
                         for x in steps or [])
        print(f"  {MODE_LABELS[mode]}: the advantage over Orca (Oracle) "
              + ("cannot be stated at every width" if steps is None else
                 "grows with every width by more than the seeds' sd" if all(x["kind"] == "grows" for x in steps)
                 else f"does not clearly grow at every width ({said})"))
        for o in ("pow2", "max"):
            down = [x for x in fig14_steps(f, mode, o) or [] if x["to_mean"] < x["from_mean"]]
            if down:
                print(f"  {MODE_LABELS[mode]}: over {PAPER_LABELS[o]} it falls, against the paper's claim: " + "; ".join(
                    f"{x['from']} -> {x['to']}: {x['from_mean']:.2f}x -> {x['to_mean']:.2f}x "
                    + ("(within the seeds' sd: noise)" if x["kind"] == "noise" else "(by more than the seeds' sd)")
                    for x in down))
    imp = PAPER_FIG14["oracle_improvement"]
    print(f"  the paper ({PAPER_FIG14['dataset']}): over Orca (Oracle) {imp['basic sampling']:g}x in basic sampling "
          f"to {imp['beam search, width 6']:g}x in beam search of width 6, growing with the number of sequences")


def print_fig15(f) -> None:
    """Figure 15's text output: the paper's value or range beside ours, the error, the beam sweep."""
    print(f"\nFigure 15 (ShareGPT): memory saved by sharing = 1 - physical / logical blocks, averaged over "
          f"time; requests at {f.rate:.2f} / width requests/s, lengths sampled from all pairs; parallel: "
          f"{f.requests} requests x {len(f.seeds)} seeds, beam: {f.beam_requests} x {len(f.beam_seeds)} (mean ± sd); "
          f"beam model: replacement {f.default_replacement:g} per step (default, not fitted)")
    for r in f.targets():
        lo, hi = r["paper_range"]
        paper = f"{100 * r['paper']:.1f} %" if r["paper"] is not None else f"{100 * lo:.1f}-{100 * hi:.1f} % (range)"
        err = "" if r["error_points"] is None else f"  error {r['error_points']:+.1f} points"
        extra = ""
        if r["mode"] == "beam":
            extra = f"  sweep spans {100 * r['span'][0]:.1f}-{100 * r['span'][1]:.1f} %"
        print(f"  {MODE_LABELS[r['mode']]:<18} {r['width']}: ours {100 * r['ours']:5.1f} ± {100 * r['std']:.1f} %"
              f"   paper {paper}{err}{extra}   {r['verdict']}")
    print("  parallel sampling from the lengths alone (no engine): "
          + " / ".join(f"{100 * f.lengths_only[w]:.1f}" for w in sorted(f.lengths_only)) + " %")
    print("  beam search by replacement probability: " + "; ".join(
        f"{rho:g}: " + " / ".join(f"{100 * d[w]['mean']:.1f}" for w in sorted(d)) for rho, d in f.beam.items())
        + " % (widths " + ", ".join(str(w) for w in PAPER_FIG15["widths"]) + ")")
    for mode in ("parallel", "beam"):
        print(f"  why they differ ({MODE_LABELS[mode].lower()}): " + f.targets()[0 if mode == "parallel" else 3]["why"])


def run_sharing(args) -> int:
    """One run of requests with several sequences each (``python -m allocator sharing``); returns the exit status.

    Raises:
        FieldError: a bad ``--width``, ``--replacement``, ``--requests``, ``--rate`` or ``--seed`` (named).
    """
    width, replacement = check("width", args.width), check("replacement", args.replacement)
    seed = check("seed", args.seed)
    requests = check("sharing_requests", args.requests, subject="requests")
    sampling = Sampling(args.mode, width, replacement, seed)
    cost = paper_cost()
    if args.rate is None:
        rate = PAPER_FIGURES["fig13"]["rate"] * load_scale(cost)["scale"] / sampling.width
    else:
        rate = args.rate                       # sharing_workload checks it (LIMITS["rates"], its span)
    out = sharing_run(sampling.mode, sampling.width, sampling.replacement, sampling.seed, rate, cost, requests)
    out = {"mode": sampling.mode, "width": sampling.width,
           "replacement": sampling.replacement if sampling.mode == "beam" else None,
           "requests": requests, "rate": rate, "seed": sampling.seed, **out}
    if args.json:
        print(json.dumps(out, indent=2))
        return 0
    what = (f"{sampling.width} parallel samples" if sampling.mode == "parallel" else
            f"beam search of width {sampling.width} (replacement {sampling.replacement:g} per step)")
    print(f"{plural(requests, 'ShareGPT request')} at {rate:.3f} requests/s, each asking for {what}; OPT-13B, one A100-40GB")
    print(f"  memory saved by sharing: {100 * out['saving']:.1f} % of the blocks (1 - physical / logical, averaged "
          f"over time)")
    print(f"  beam forks {out['forks']:,}, frees {out['frees']:,}; blocks copied on write {out['cow_copies']:,}; "
          f"preemptions {out['preemptions']:,}")
    return 0
