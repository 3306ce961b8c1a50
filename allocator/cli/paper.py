"""``python -m allocator paper-replication``: the PagedAttention paper's experiment and its three figures.

Examples::

    python -m allocator paper-replication
    python -m allocator paper-replication --json

Runs OPT-13B on one A100-40GB (the paper's Table 1 pool), ShareGPT lengths, vLLM (block 16,
recompute) and the artifact's three Orca baselines (buddy placement), and prints Figures 2, 13
and 12 as the paper's value beside this model's, with the error (see :mod:`allocator.studies.paper`).
"""
from __future__ import annotations

import json

from allocator.studies.paper import PAPER_LABELS, SATURATION_REQUESTS, SYSTEMS, paper_replication
from allocator.studies.sustained import sustained_short
from allocator.cli.common import count_arg, range_help


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
    p.set_defaults(func=run)


def run(args) -> int:
    """Run the replication and print it; returns the exit status."""
    rep = paper_replication(seed=args.seed)
    out = rep.to_dict()
    if args.json:
        print(json.dumps(out, indent=2))
        return 0
    sc = rep.scale
    print(f"OPT-13B on one A100-40GB, {out['setup']['slots']:,} KV slots (the paper's Table 1), ShareGPT lengths; "
          f"rates x{sc['scale']:.2f} (same relative load: this model's paged burst saturation rate, "
          f"{SATURATION_REQUESTS:,} requests arriving at once, {sc['ours']:.2f} requests/s over the paper's "
          f"{sc['paper']:g}; a scale, not a sustained rate)")
    rows = [[r["figure"], r["measure"], str(r["paper"]), str(r["ours"]), r["error"], "yes" if r["ok"] else "NO"]
            for r in out["targets"]]
    head = ["figure", "measure", "paper", "ours", "error", "within"]
    widths = [max(len(x[i]) for x in rows + [head]) for i in range(len(head))]
    print()
    for row in [head] + rows:
        print("  ".join(c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths))))
    print("\nFigure 2 (% of KV memory): token states / reservation / internal / external, this model")
    for s in SYSTEMS:
        f = rep.fig2[s]
        print(f"  {PAPER_LABELS[s]:<14}" + " / ".join(f"{100 * f[k]:5.1f}" for k in
                                                     ("token_states", "reservation", "internal", "external")))
    print(f"\nFigure 12: normalised latency (s/token) by rate (requests/s on the paper's scale); knee = the "
          f"sustained rate, where the curve crosses the {rep.budget_s_per_token:.4f} s/token budget "
          f"(paper's scale; x{sc['scale']:.2f} for this model's requests/s)")
    for s in SYSTEMS:
        pts = rep.fig12[s]
        sus = rep.sustained[s]
        text = sustained_short(sus)
        print(f"  {PAPER_LABELS[s]:<14}" + "  ".join(f"{p['paper_rate']:g}: {p['normalized_latency_s_per_token']:.4f}"
                                                     for p in pts) + f"   knee {text}")
    print(f"\n{rep.seconds:.1f} s")
    return 0
