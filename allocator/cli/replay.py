"""``python -m allocator replay-vllm RUN_DIR``: a measured vLLM run beside the lab's replay of it.

Examples::

    python -m allocator replay-vllm assets/vllm_runs/rtxpro6000_llama-3.1-8b
    python -m allocator replay-vllm RUN_DIR --gpu rtx-pro-6000 --model llama-3.1-8b --json

Prints measured vs simulated mean / p50 / p90 of TTFT, TPOT and end-to-end latency with the
percentage error (simulated / measured - 1). A run directory holds meta.json, requests.jsonl and
(optionally) timeseries.csv (:mod:`allocator.workloads.vllm_run`); anything wrong with it is one line on
stderr and exit status 2.
"""
from __future__ import annotations

import json
import sys

import numpy as np

from allocator.common.limits import MAX_UPLOAD_BYTES
from allocator.cost.calibration import REPLAY_GPUS, REPLAY_MODELS
from allocator.studies.vllm_replay import (CALIBRATIONS, COST_MODELS, FIGURES, STATS, best_cost_model,
                                           MAX_OVERRIDE_STEPS, compare_cost_models, held_out_check, replay)
from allocator.workloads.vllm_run import load_run_path
from allocator.cli.common import count_arg, range_help
from allocator.common.formats import plural

#: Requests past which the command says on stderr, before it starts, that the replay takes a while.
LONG_RUN = 2_000


#: The bound on an override, as --help states it (allocator.studies.vllm_replay.MAX_OVERRIDE_STEPS).
STEP_RULE = (f"refused when the replay would take more than {MAX_OVERRIDE_STEPS:,} engine steps (or the run's own "
             "settings' count, if larger), estimated as the run's prompt and output tokens / the budget and its "
             "output tokens / max-num-seqs; the message names the smallest value allowed")


def register(sub) -> None:
    """Add the ``replay-vllm`` sub-command to ``sub`` (an argparse sub-parsers object)."""
    p = sub.add_parser("replay-vllm", help="replay a measured vLLM run under vLLM v1's rules and the calibrated "
                                           "step model; print measured vs simulated latencies",
                       description="Replays a run directory (meta.json, requests.jsonl, timeseries.csv) with its "
                                   "arrivals, lengths and engine arguments, and prints measured vs simulated "
                                   "mean/p50/p90 TTFT, TPOT and end-to-end latency with the error in percent.")
    p.add_argument("run_dir", metavar="RUN_DIR", help="directory of the measured run, or a zip of one (at most "
                                                      f"{MAX_UPLOAD_BYTES // 1_000_000} MB; meta.json and requests.jsonl at its root or in one folder)")
    p.add_argument("--gpu", default=None, help="GPU preset, one of " + ", ".join(REPLAY_GPUS)
                   + " (default: what meta.json's hardware or the directory name says)")
    p.add_argument("--model", default=None, help="model preset, one of " + ", ".join(REPLAY_MODELS)
                   + " (default: meta.json's model)")
    p.add_argument("--max-num-seqs", type=count_arg, default=None,
                   help="override the run's cap on running sequences (vLLM's default 256): "
                        + range_help("max_num_seqs") + "; " + STEP_RULE)
    p.add_argument("--max-num-batched-tokens", type=count_arg, default=None,
                   help="override the run's per-step token budget (vLLM's default 2048): "
                        + range_help("max_num_batched_tokens") + "; " + STEP_RULE)
    p.add_argument("--no-chunked-prefill", action="store_true",
                   help="turn chunked prefill off (a prompt must fit the budget left in one step)")
    p.add_argument("--no-prefix-caching", action="store_true", help="turn prefix caching off")
    p.add_argument("--held-out", action="store_true", help="also calibrate on the first half of the requests and "
                                                           "report the error on the second half")
    p.add_argument("--cost-model", choices=list(COST_MODELS), default=None,
                   help="price steps with the roofline calibrated on the shipped run, or with the GPU's measured "
                        "operator profile (default: profile when assets/llm_profiles holds the run's GPU, model and "
                        "tensor parallelism, else roofline); --json reports both")
    p.add_argument("--calibration", choices=list(CALIBRATIONS), default="microbench",
                   help="where the roofline's efficiencies come from: the GPU's operator microbenchmarks "
                        "(default; the fit on the shipped run for a GPU without a profile bundle) or the fit on "
                        "the shipped run")
    p.add_argument("--roofline-table", action="store_true",
                   help="print the roofline's efficiencies derived from each shipped operator profile and its error "
                        "on every profiled operator, then exit")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(func=run)


def run(args) -> int:
    """Replay and print; returns the exit status (FieldError propagates to ``__main__``: exit 2)."""
    if getattr(args, "roofline_table", False):
        return _roofline_table(args)
    measured = load_run_path(args.run_dir)
    if len(measured) > LONG_RUN:
        print(f"note: replaying {len(measured):,} requests takes a few milliseconds each (about "
              f"{len(measured) * 5 / 1000:.0f} s here)", file=sys.stderr)
    chosen = args.cost_model or best_cost_model(measured, args.gpu)
    kw = dict(max_num_seqs=args.max_num_seqs, max_num_batched_tokens=args.max_num_batched_tokens,
              chunked_prefill=False if args.no_chunked_prefill else None,
              prefix_caching=False if args.no_prefix_caching else None, calibration=args.calibration)
    reps = compare_cost_models(measured, args.gpu, args.model, **kw) if args.json else {}
    got = reps.get(chosen)
    rep = got if got is not None and not isinstance(got, str) else replay(measured, args.gpu, args.model,
                                                                          cost_model=chosen, **kw)
    for note in rep.notes:                 # settings left to vLLM's defaults: one line each, before the table
        print(f"note: {note}", file=sys.stderr)
    out = rep.to_json()
    if args.json:
        out["cost_models"] = {name: ({"table": r.table, "makespan_s": r.makespan_s} if not isinstance(r, str)
                                     else {"refused": r}) for name, r in reps.items()}
        roof = reps.get("roofline")
        if roof is not None and not isinstance(roof, str):
            out["cost_models"]["roofline"]["efficiency_source"] = roof.efficiency_source
            if args.calibration != "run" and not roof.efficiency_source.startswith("fitted"):
                fit = replay(measured, args.gpu, args.model, cost_model="roofline", **{**kw, "calibration": "run"})
                out["cost_models"]["roofline_fitted_on_run"] = {
                    "table": fit.table, "makespan_s": fit.makespan_s, "efficiency_source": fit.efficiency_source,
                    "note": "the roofline with the efficiencies fitted on the shipped run: a fit, not a check, "
                            "on that run"}
    if args.held_out:
        h = held_out_check(measured, rep.cost.gpu.key, rep.cost.model.config.key)
        e = h["fit"].efficiency
        out["held_out"] = {"fitted_on": "first half of the requests by queue time", "reported_on": "second half",
                           "efficiency": {"eta_flops": e.eta_flops, "eta_bw": e.eta_bw, "overhead_s": e.overhead_s},
                           **{k: v for k, v in h.items() if k != "fit"}}
    if args.json:
        print(json.dumps(out, indent=2))
        return 0
    print(f"{measured.name}: {plural(len(measured), 'request')}, {rep.cost.label}; {rep.rules.describe()}; "
          f"prefix caching {'on' if rep.prefix_caching else 'off'}; "
          f"KV pool {rep.num_blocks:,} blocks of {rep.block_size} ({rep.pool_source})")
    if rep.data_parallel > 1:
        per = np.bincount(rep.ranks, minlength=rep.data_parallel).tolist()
        print(f"data parallel: {rep.data_parallel} engine ranks, requests per rank {per} (vLLM 0.19's rule: the "
              f"lowest 4 x waiting + running; {rep.dp_rounds} rounds of assignment and simulation, "
              f"{plural(rep.dp_unsettled, 'request')} unsettled); expert parallel: {'yes' if rep.expert_parallel else 'no'}")
    if rep.cost_model == "profile":
        t = rep.cost.terms()
        print(f"cost model: operator profile {t['bundle']} (vLLM {t['vllm_version']}), engine overhead "
              f"{1e3 * t['overhead_s']:g} ms per step (assumed, not fitted); off-grid lookups: "
              f"{rep.cost.off_grid_summary() or 'none'}")
    else:
        e = rep.cost.efficiency
        print(f"cost model: roofline; calibration ({rep.efficiency_source}): eta_flops {e.eta_flops:g}, "
              f"eta_bw {e.eta_bw:g}, overhead {1e3 * e.overhead_s:g} ms per step")
    print(f"\n{'figure':<28}{'stat':<6}{'measured':>12}{'simulated (' + rep.cost_model + ')':>22}{'error':>9}")
    for k, name in FIGURES.items():
        unit, scale = ("ms", 1e3) if k == "tpot" else ("s", 1.0)
        for s in STATS:
            row = rep.table[k][s]
            print(f"{name + ' (' + unit + ')':<28}{s:<6}{row['measured'] * scale:>12.4g}{row['simulated'] * scale:>22.4g}"
                  f"{row['error_pct']:>+8.1f}%")
    print(f"\nmakespan: measured {rep.makespan_s['measured']:.1f} s, simulated {rep.makespan_s['simulated']:.1f} s; "
          f"preemptions (simulated): {rep.preemptions}")
    if args.held_out:
        h = out["held_out"]
        print(f"held out (calibrated on the first half, errors on the second): TTFT {h['ttft_error_pct']:+.1f}%, "
              f"TPOT {h['tpot_error_pct']:+.1f}%, latency {h['latency_error_pct']:+.1f}%")
    return 0


def _roofline_table(args) -> int:
    """``--roofline-table``: per shipped bundle, the roofline efficiencies derived from its operators
    and the roofline's error on each profiled operator (:mod:`allocator.cost.microbench`)."""
    from allocator.cost.microbench import roofline_from_profiles

    rows = roofline_from_profiles()
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    for b in rows:
        e = b["efficiency"]
        r = b["measured_share"]
        print(f"{b['bundle']} ({b['gpu']}): GEMMs reach {r['flops']:.3f} of peak FLOP/s, decode attention "
              f"{r['bandwidth']:.3f} of bandwidth -> eta_flops {e['eta_flops']:g}, eta_bw {e['eta_bw']:g} (capped at 1); "
              "roofline vs measured, one layer:")
        print(f"  {'operator':<16}{'points':>7}{'median error':>14}{'worst error':>13}")
        for op in b["operators"]:
            print(f"  {op['operator']:<16}{op['points']:>7}{op['median_error_pct']:>+13.1f}%{op['worst_error_pct']:>+12.1f}%")
    return 0
