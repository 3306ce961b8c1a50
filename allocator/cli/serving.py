"""``python -m allocator rate-sweep``: the Throughput and latency page's sweep on the command line.

Examples::

    python -m allocator rate-sweep --gpu a100-40gb --model opt-13b --json
    python -m allocator rate-sweep --gpu h100-sxm --model llama3-8b --rates 1,2,4,8 --requests 500
    python -m allocator rate-sweep --rules v1 --max-num-batched-tokens 512 --json

``--rules v1`` runs the paged policy under vLLM v1's scheduler (the flags and defaults of
``simulate``: :func:`allocator.cli.simulate.add_rules_arguments`); the reservation policies keep the
classroom scheduler, since vLLM v1 has no reservation allocator.
"""
from __future__ import annotations

import json

from allocator.studies.rate_sweep import (DEFAULT_BLOCK_SIZE, DEFAULT_LATENCY_FACTOR, PAPER, PAPER_NAMES,
                                          POLICIES, POLICY_LABELS, parse_rates, rate_sweep)
from allocator.workloads.poisson import (DEFAULT_MAX_NEW, DEFAULT_REQUESTS, DEFAULT_SEED, SWEEP_MAX_NEW,
                                         SWEEP_WORKLOADS)
from allocator.studies.sustained import INTERPOLATION_SPAN, sustained_short
from allocator.cost.best import CHOICE_HELP, CHOICES, best_cost_model, seconds_source
from allocator.cost.roofline import DEFAULT_GPU, DEFAULT_MODEL, GPU_COUNTS, GPUS, TIMED_MODELS
from allocator.cli.common import count_arg, gpus_arg, range_help, real_arg
from allocator.cli.simulate import add_rules_arguments, rules_from_args
from allocator.common.formats import plural
from allocator.common.limits import check
from allocator.engine.v1 import V1Rules

#: Per-point keys printed in the table (all of them go into --json).
TABLE_KEYS = ("normalized_latency_s_per_token", "throughput_tokens_per_s", "ttft_p50_s", "tpot_p50_s",
              "kv_token_share_waiting", "kv_token_share_busy", "preemptions")
#: What a table's key means where the name alone could be read two ways: the Throughput page shows
#: the KV share on the first basis that every policy has (``allocator.studies.rate_sweep.memory_basis``),
#: so both are printed, each named by its basis.
TABLE_TITLES = {
    "kv_token_share_waiting": "share of the KV pool holding tokens, while requests waited (the page's basis "
                              "where every policy had waiting requests)",
    "kv_token_share_busy": "share of the KV pool holding tokens, over the busy seconds (the page's basis "
                           "where some policy never had a request wait)",
}


def register(sub) -> None:
    """Add the ``rate-sweep`` sub-command to ``sub`` (an argparse sub-parsers object)."""
    p = sub.add_parser("rate-sweep", help="normalised latency and throughput against request rate for the "
                                          "paper's four allocators, in seconds on a chosen GPU and model",
                       description="Poisson arrivals with Azure conversation (or the paper's ShareGPT) lengths at each rate, under "
                                   "reservation policies max, pow2, oracle and paged allocation, each step priced "
                                   "by the best cost model the lab holds (--cost-model); reports each policy's sustained rate.")
    p.add_argument("--gpu", choices=sorted(GPUS), default=DEFAULT_GPU, help=f"GPU preset (default {DEFAULT_GPU})")
    p.add_argument("--model", choices=sorted(TIMED_MODELS), default=DEFAULT_MODEL,
                   help=f"model preset (default {DEFAULT_MODEL})")
    p.add_argument("--cost-model", choices=CHOICES, default="best",
                   help="what prices a step: " + "; ".join(f"{k}: {v}" for k, v in CHOICE_HELP.items())
                        + " (default best, as the Throughput page)")
    p.add_argument("--gpus", default="auto", help="tensor-parallel GPU count 1, 2, 4 or 8 (default auto: the "
                                                  "fewest that hold the weights)")
    p.add_argument("--rates", default=None, help="comma-separated request rates in requests/s (default: eight "
                                                 "around the paged allocator's saturation rate); a sustained rate "
                                                 "is interpolated only between two rates at most "
                                                 f"{INTERPOLATION_SPAN:g}x apart, else reported as that bracket")
    p.add_argument("--workload", choices=tuple(SWEEP_WORKLOADS), default="azure-conv",
                   help="the lengths requests are drawn from: azure-conv (the shipped Azure conversation trace, "
                        "default) or sharegpt-opt (the PagedAttention paper's ShareGPT lengths; the generation cap "
                        "then defaults to 2048)")
    p.add_argument("--requests", type=count_arg, default=DEFAULT_REQUESTS,
                   help=f"requests per run (default {DEFAULT_REQUESTS}; {range_help('requests')})")
    p.add_argument("--policies", default=",".join(POLICIES), help="comma-separated subset of " + ", ".join(POLICIES))
    p.add_argument("--block-size", type=count_arg, default=DEFAULT_BLOCK_SIZE,
                   help=f"paged block size (default {DEFAULT_BLOCK_SIZE}; {range_help('block_size')})")
    p.add_argument("--max-new-tokens", type=count_arg, default=None,
                   help=f"generation cap; reserve-max reserves prompt + this (default {DEFAULT_MAX_NEW}, 2048 with "
                        f"--workload sharegpt-opt; "
                        f"{range_help('max_new_tokens')})")
    p.add_argument("--latency-factor", type=real_arg, default=DEFAULT_LATENCY_FACTOR,
                   help="the sustained-rate budget: this many times the latency of a request served alone "
                        f"(default {DEFAULT_LATENCY_FACTOR:g}; {range_help('latency_factor')})")
    p.add_argument("--seed", type=count_arg, default=DEFAULT_SEED,
                   help=f"which trace rows and arrival gaps are drawn (default {DEFAULT_SEED}; {range_help('seed')})")
    add_rules_arguments(p)
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(func=run)



def run(args) -> int:
    """Sweep and print; returns the exit status (ValueError propagates to ``__main__``).

    Raises:
        FieldError: a bad setting, e.g. ``--max-num-seqs`` without ``--rules v1`` or out of its range.
    """
    rules, seqs, budget = rules_from_args(args)
    v1 = V1Rules(check("max_num_seqs", seqs), check("max_num_batched_tokens", budget)) if rules == "v1" else None
    cost = best_cost_model(args.gpu, args.model, gpus_arg(args.gpus, GPU_COUNTS), args.cost_model)
    policies = tuple(p.strip() for p in args.policies.split(",") if p.strip())
    rates = parse_rates(args.rates) if args.rates is not None else None
    sweep = rate_sweep(cost, rates, policies=policies, requests=args.requests, seed=args.seed,
                       block_size=args.block_size, latency_factor=args.latency_factor, workload=args.workload,
                       max_new_tokens=SWEEP_MAX_NEW[args.workload] if args.max_new_tokens is None
                       else args.max_new_tokens, rules=v1)
    out = {
        "gpu": cost.gpu.key, "model": cost.model.key, "gpus": cost.gpus, "pool_slots": sweep.pool_slots,
        "cost_model": cost.kind, "seconds_from": seconds_source(cost),
        "workload": sweep.workload, "block_size": sweep.block_size, "requests": sweep.requests, "seed": sweep.seed,
        "max_new_tokens": sweep.max_new_tokens, "rates": list(sweep.rates),
        "rules": "classroom" if v1 is None else {"paged": v1.describe(),
                                                 "reservation": "classroom scheduler (vLLM v1 has no reservation "
                                                                "allocator)"},
        "unloaded_s_per_token": sweep.unloaded_s_per_token, "latency_factor": sweep.latency_factor,
        "budget_s_per_token": sweep.budget_s_per_token,
        "sustained": {p: sweep.sustained[p] for p in sweep.policies},
        "interpolation_span": INTERPOLATION_SPAN,
        "ratios": {f"paged/{p}": sweep.ratio("paged", p) for p in sweep.policies
                   if p != "paged" and "paged" in sweep.policies},
        "points": {p: [sweep.points[(p, r)] for r in sweep.rates] for p in sweep.policies},
        "paper": {"note": "the PagedAttention paper's figures (Kwon et al., SOSP 2023), for comparison, not fitted",
                  **PAPER},
    }
    if args.json:
        print(json.dumps(out, indent=2))
        return 0
    print(f"{cost.label}: KV pool {sweep.pool_slots:,} slots, block size {sweep.block_size}, "
          f"{plural(sweep.requests, 'request')} per run ({SWEEP_WORKLOADS[sweep.workload]}, seed {sweep.seed})")
    print(f"seconds from {cost.priced_by}" + (f"; {cost.why}" if cost.why else ""))
    if v1 is not None:
        print(f"paged: {v1.describe()}; reservation policies: the classroom scheduler")
    print(f"budget: {sweep.budget_s_per_token:.4f} s/token = {sweep.latency_factor:g} x "
          f"{sweep.unloaded_s_per_token:.4f} s/token (a request served alone)")
    for key in TABLE_KEYS:
        print(f"\n{key}" + (f": {TABLE_TITLES[key]}" if key in TABLE_TITLES else ""))
        print(f"{'policy':<16}" + "".join(f"{r:>10g}" for r in sweep.rates))
        for p in sweep.policies:
            vals = [sweep.points[(p, r)][key] for r in sweep.rates]
            print(f"{POLICY_LABELS[p]:<16}" + "".join(f"{'-' if v is None else format(v, '.4g'):>10}" for v in vals))
    print("\nsustained rate (requests/s; + = never over the budget, a lower bound; a-b = between two swept rates "
          f"more than {INTERPOLATION_SPAN:g}x apart, not interpolated)")
    for p in sweep.policies:
        s = sweep.sustained[p]
        text = sustained_short(s, digits=3)
        print(f"{POLICY_LABELS[p]:<16}{text:>14}   (paper: {PAPER_NAMES[p]})")
    if sweep.workload == "sharegpt-opt":
        print(f"\nThese are this sweep's sustained rates: {sweep.requests:,} requests on the cost model's "
              f"{sweep.pool_slots:,}-slot pool. `paper-replication` runs the paper's own traces on its Table 1 pool "
              "and reports its knees on the paper's rate scale, so its figures differ.")
    return 0
