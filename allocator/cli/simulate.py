"""``python -m allocator simulate``: both allocators on one workload, summary as JSON or a table.

Examples::

    python -m allocator simulate --workload classroom-40 --slots 2048 --block-size 16 --json
    python -m allocator simulate --trace assets/azure_llm_conv_2023.csv --offset 0 --count 40 --json
    python -m allocator simulate --workload classroom-40 --sweep --json
    python -m allocator simulate --workload classroom-40 --gpu a100-40gb --model opt-13b --policy pow2 --json
    python -m allocator simulate --workload azure-conv --count 400 --rules v1 --max-num-batched-tokens 512 --json

Every numeric option is checked against its range in :data:`allocator.common.limits.LIMITS` before
anything runs, whether or not it matters for this workload; an option that does not apply (say
``--offset`` with classroom-40) is named in one ``note:`` line on stderr.

``--rules v1`` runs the paged allocator under vLLM v1's scheduler (:class:`allocator.engine.v1.V1Rules`:
a token budget per step, chunked prefill, a cap on running sequences, recompute-only preemption)
instead of the classroom scheduler; the reservation baseline keeps the classroom scheduler (vLLM
v1 has no reservation allocator). ``--max-num-seqs`` (default 256) and ``--max-num-batched-tokens``
(default 2,048) are vLLM's defaults for ``vllm serve`` on a GPU under 70 GiB or an A100
(``EngineArgs.get_batch_defaults`` in vllm/engine/arg_utils.py; the ``LLM`` class takes 8,192 tokens,
and larger GPUs 8,192 tokens and 1,024 sequences: the lesson's GPU is the A100-40GB, served, so
2,048); they are refused without ``--rules v1``, as is ``--preemption swap`` with it.

``--sliding-window TOKENS`` (with ``--rules v1``) gives the paged run's model a sliding window:
blocks wholly behind it go back to the pool as vLLM's sliding-window manager releases them, and
``--full-attention-groups`` / ``--window-groups`` make it a hybrid model whose groups share one
pool (:mod:`allocator.memory.sliding_window`)::

    python -m allocator simulate --workload classroom-40 --rules v1 --sliding-window 64
    python -m allocator simulate --workload classroom-40 --rules v1 --sliding-window 128 --full-attention-groups 1
"""
from __future__ import annotations

import argparse
import json

from allocator.memory.reserve_max import PLACEMENTS, RESERVATION_POLICIES
from allocator.engine.scenario import (MOONCAKE_MAX_NEW, MOONCAKE_SLOTS, RULES, WORKLOADS, Scenario, build_workload,
                                       full_attention_run, run_scenario, scenario_sweep, workload_kind)
from allocator.engine.scenario import full_attention_figures as scenario_full_attention_figures
from allocator.engine.v1 import DEFAULT_ACCEPTANCE_RATE, V1_DEFAULT_MAX_NUM_BATCHED_TOKENS, V1_DEFAULT_MAX_NUM_SEQS
from allocator.studies.speculation import SPEC_SEEDS, speculation_cost
from allocator.cost.best import CHOICE_HELP, CHOICES, best_cost_model, seconds_source
from allocator.cost.roofline import GPUS, TIMED_MODELS
from allocator.cost.timing import price
from allocator.common.errors import FieldError
from allocator.engine.shares import SHARES
from allocator.viz.claims.explainer import share_cells
from allocator.viz.claims.sweep import sweep_basis, sweep_value
from allocator.cli.common import ACCEPTANCE_WORDS, count_arg, flag, note as print_note, range_help, real_arg
from allocator.common.validate import show
from allocator.common.formats import and_list
from allocator.common.formats import plural

SUMMARY_KEYS = ("steps", "peak_running", "mean_utilization_busy", "mean_utilization", "preemptions",
                "mean_tokens_per_step", "finished", "peak_logical_tokens", "peak_used_slots", "swapped_blocks",
                "recomputed_tokens")
#: Time keys added to each summary with --gpu/--model (and printed in the table).
TIME_KEYS = ("makespan_s", "throughput_tokens_per_s", "throughput_requests_per_s", "ttft_p50_s", "ttft_p99_s",
             "tpot_p50_s", "tpot_p99_s", "e2e_p50_s", "e2e_p99_s", "normalized_latency_s_per_token", "swap_s",
             "recompute_flops_s")
#: Prefix-cache keys added to the paged summary with --prefix-caching (and printed in the table).
PREFIX_KEYS = ("prefix_cache_hit_rate", "prefill_tokens_saved", "cached_block_evictions", "peak_cached_blocks")


def register(sub) -> None:
    """Add the ``simulate`` sub-command to ``sub`` (an argparse sub-parsers object)."""
    p = sub.add_parser("simulate", help="run reserve-max and paged allocation on one workload",
                       description="Simulate the same workload under reserve-max and paged allocation.")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--workload", choices=WORKLOADS, default=None,
                     help="named workload (default classroom-40; azure-conv is the shipped Azure conversation trace; "
                          "sharegpt-opt the PagedAttention paper's ShareGPT lengths, Poisson arrivals at 2/s)")
    src.add_argument("--trace", metavar="FILE", help="a trace to replay: CSV (Azure or plain schema) or Mooncake "
                     "JSONL (.jsonl, .jsonl.gz: prompts as block ids, for --prefix-caching)")
    p.add_argument("--slots", type=count_arg, default=None, help="pool size in slots (default: 2048 for "
                   f"classroom-40, 8192 for a CSV trace, {MOONCAKE_SLOTS:,} for a Mooncake .jsonl trace; "
                   f"{range_help('total_slots')})")
    p.add_argument("--block-size", type=count_arg, default=16,
                   help=f"paged block size in slots (default 16; {range_help('block_size')})")
    p.add_argument("--max-new-tokens", type=count_arg, default=None,
                   help="generation cap in tokens (default 600 for classroom-40, 1024 for a CSV trace, "
                        f"{MOONCAKE_MAX_NEW:,} for a Mooncake .jsonl trace; "
                        f"{range_help('max_new_tokens')})")
    p.add_argument("--seed", type=count_arg, default=None,
                   help=f"classroom-40 seed (default: calibrated 25; {range_help('seed')})")
    p.add_argument("--arrival", choices=("burst", "trickle"), default=None,
                   help="classroom-40 arrivals: all at step 0 (burst, the default), or a Poisson trickle")
    p.add_argument("--arrival-rate", type=real_arg, default=None,
                   help=f"trickle rate, requests per step (default 1; {range_help('arrival_rate')})")
    p.add_argument("--offset", type=count_arg, default=None,
                   help=f"first trace row to replay (0-based; default 0; {range_help('offset')})")
    p.add_argument("--count", type=count_arg, default=None,
                   help=f"trace rows to replay (default 40; {range_help('count')})")
    p.add_argument("--steps-per-second", type=real_arg, default=None,
                   help=f"engine steps per trace second (default 20; {range_help('steps_per_second')})")
    p.add_argument("--metadata-cost", type=real_arg, default=None,
                   help=f"cost per block in slot equivalents, for the sweep (default 0; {range_help('metadata_cost')})")
    p.add_argument("--shared-prefix", type=count_arg, default=0, metavar="TOKENS",
                   help="put one system prompt of this many tokens in front of every prompt; the paged "
                        "run shares its full blocks and reports logical tokens and physical slots apart "
                        f"({range_help('shared_prefix')})")
    p.add_argument("--preemption", choices=("recompute", "swap"), default="recompute",
                   help="paged preemption mode (default recompute)")
    p.add_argument("--policy", choices=RESERVATION_POLICIES, default="max",
                   help="the reservation allocator's policy: max (prompt + max_new_tokens, default), pow2 (prompt "
                        "+ next power of two of the answer) or oracle (prompt + the exact answer)")
    p.add_argument("--placement", choices=PLACEMENTS, default="first-fit",
                   help="where the reservation allocator puts a reservation: first-fit (one run of slots, "
                        "default) or buddy (the PagedAttention paper's artifact: power-of-two runs of 16-slot "
                        "blocks, capped at 2,048 tokens)")
    p.add_argument("--gpu", choices=sorted(GPUS), default=None,
                   help="price every step in seconds on this GPU (with --model; default a100-40gb when only "
                        "--model is given): adds TTFT, TPOT, latency and throughput to each summary")
    p.add_argument("--model", choices=sorted(TIMED_MODELS), default=None,
                   help="the model the steps are priced for (default opt-13b when only --gpu is given)")
    p.add_argument("--cost-model", choices=CHOICES, default=None,
                   help="with --gpu or --model, what prices a step: " + "; ".join(
                       f"{k}: {v}" for k, v in CHOICE_HELP.items()) + " (default best, as the pages)")
    p.add_argument("--prefix-caching", action="store_true",
                   help="paged: keep finished prompts' full blocks findable by block hash and reuse them "
                        "(a Mooncake JSONL trace's prompts, or --shared-prefix); adds prefix_cache_hit_rate, "
                        "prefill_tokens_saved and cached_block_evictions to the paged summary")
    add_rules_arguments(p)
    add_speculation_arguments(p)
    add_window_arguments(p)
    p.add_argument("--sweep", action="store_true", help="also sweep the paged block size 1..256")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(func=run)


def add_rules_arguments(p) -> None:
    """Add ``--rules``, ``--max-num-seqs`` and ``--max-num-batched-tokens`` to parser ``p`` (``simulate``
    and the commands built on its parser, and ``rate-sweep``); :func:`rules_from_args` reads them."""
    p.add_argument("--rules", choices=RULES, default="classroom",
                   help="the paged run's scheduler: classroom (the lesson's, default) or v1 (vLLM v1's: a token "
                        "budget per step, chunked prefill, a cap on running sequences, recompute preemption)")
    p.add_argument("--max-num-seqs", type=count_arg, default=None,
                   help=f"with --rules v1: most sequences running at once (default {V1_DEFAULT_MAX_NUM_SEQS}, "
                        f"vLLM's; {range_help('max_num_seqs')})")
    p.add_argument("--max-num-batched-tokens", type=count_arg, default=None,
                   help=f"with --rules v1: tokens scheduled per engine step (default "
                        f"{V1_DEFAULT_MAX_NUM_BATCHED_TOKENS:,}, vLLM's for `vllm serve` on an A100; "
                        f"{range_help('max_num_batched_tokens')})")


def add_speculation_arguments(p) -> None:
    """Add ``--num-speculative-tokens``, ``--acceptance-rate`` and ``--spec-seed`` to parser ``p``
    (``simulate`` and the export commands built on its parser); :func:`speculation_from_args` reads them."""
    p.add_argument("--num-speculative-tokens", type=count_arg, default=None, metavar="K",
                   help="with --rules v1: draft tokens per decode step (speculative decoding; default 0, none). "
                        "Each decode step reserves K lookahead slots for the drafts, as vLLM's allocate_slots "
                        "does; the rejected ones are given back. Adds a 'speculation' entry to the paged "
                        "summary: the KV slots a running sequence holds with and without "
                        f"({range_help('num_speculative_tokens')})")
    p.add_argument("--acceptance-rate", type=real_arg, default=None, metavar="A",
                   help=f"with --num-speculative-tokens: {ACCEPTANCE_WORDS} (default "
                        f"{DEFAULT_ACCEPTANCE_RATE:g}, a lesson's value, not a measurement; "
                        f"{range_help('acceptance_rate')})")
    p.add_argument("--spec-seed", type=count_arg, default=None,
                   help="with --num-speculative-tokens: seed of the acceptance draws (default 0; the speculation "
                        f"entry runs {SPEC_SEEDS} seeds from it; {range_help('spec_seed')})")


def speculation_from_args(args) -> tuple[int, float, int]:
    """``(num_speculative_tokens, acceptance_rate, spec_seed)`` as given (defaults: 0, the default
    rate, 0), not yet range-checked (``Scenario.checked`` does that).

    Raises:
        FieldError: ``--acceptance-rate`` or ``--spec-seed`` without ``--num-speculative-tokens``
            (they would change nothing; refused rather than ignored), or ``--num-speculative-tokens``
            above 0 without ``--rules v1``.
    """
    k = getattr(args, "num_speculative_tokens", None)
    given = [n for n in ("acceptance_rate", "spec_seed") if getattr(args, n, None) is not None]
    if given and not k:
        raise FieldError(given[0], f" = {show(getattr(args, given[0]))} applies only with "
                                   "--num-speculative-tokens of 1 or more (there is nothing to accept without draft "
                                   "tokens)")
    if k and (getattr(args, "rules", "classroom") or "classroom") != "v1":
        raise FieldError("num_speculative_tokens", f" = {show(k)} applies only with --rules v1 (the classroom "
                         "scheduler decodes one token per step)")
    return (0 if k is None else k, _given(args, "acceptance_rate", DEFAULT_ACCEPTANCE_RATE),
            _given(args, "spec_seed", 0))


def add_window_arguments(p) -> None:
    """Add ``--sliding-window``, ``--full-attention-groups`` and ``--window-groups`` to parser ``p``
    (``simulate`` and the export commands built on its parser)."""
    p.add_argument("--sliding-window", type=count_arg, default=None, metavar="TOKENS",
                   help="with --rules v1: the paged run's model attends through a window of this many tokens, "
                        "and blocks wholly behind it go back to the pool as vLLM's sliding-window manager "
                        f"releases them (0: full attention, the default; {range_help('sliding_window')}); adds "
                        "the peak blocks per sequence per windowed group and the bound ceil(window/block)+1")
    p.add_argument("--full-attention-groups", type=count_arg, default=None, metavar="N",
                   help="with --sliding-window: KV-cache groups of full-attention layers beside the windowed ones "
                        "(vLLM's hybrid manager, one pool; default 0: every layer windowed; "
                        f"{range_help('full_groups')}); gpt-oss-120b: --sliding-window 128 "
                        "--full-attention-groups 1 --window-groups 1")
    p.add_argument("--window-groups", type=count_arg, default=None, metavar="N",
                   help="with --sliding-window: KV-cache groups of windowed layers (default 1; Gemma 3's five "
                        "windowed layers to one full: 5 with --full-attention-groups 1; "
                        f"{range_help('window_groups')})")


def window_from_args(args) -> dict:
    """``{"sliding_window", "full_groups", "window_groups"}`` as given (defaults 0, 0, 1), not yet
    range-checked (``Scenario.checked`` does that).

    Raises:
        FieldError: ``--full-attention-groups`` or ``--window-groups`` without a ``--sliding-window``
            (they would change nothing; refused rather than ignored).
    """
    window = getattr(args, "sliding_window", None) or 0
    for name, field in (("full_attention_groups", "full_groups"), ("window_groups", "window_groups")):
        value = getattr(args, name, None)
        if value is not None and not window:
            raise FieldError(field, f" = {show(value)} applies only with --sliding-window TOKENS (a model "
                                    "without a window keeps one group of full-attention layers)")
    return {"sliding_window": window, "full_groups": _given(args, "full_attention_groups", 0),
            "window_groups": _given(args, "window_groups", 1)}


def rules_from_args(args) -> tuple[str, int, int]:
    """``(rules, max_num_seqs, max_num_batched_tokens)`` as given (defaults: vLLM's), the numbers
    not yet range-checked (``Scenario.checked`` or ``V1Rules`` does that).

    Raises:
        FieldError: ``--max-num-seqs`` or ``--max-num-batched-tokens`` given without ``--rules v1``
            (they would change nothing; refused rather than ignored).
    """
    rules = getattr(args, "rules", "classroom") or "classroom"
    given = [n for n in ("max_num_seqs", "max_num_batched_tokens") if getattr(args, n, None) is not None]
    if given and rules != "v1":
        raise FieldError(given[0], f" = {show(getattr(args, given[0]))} applies only with --rules v1 (the "
                                   "classroom scheduler has no step budget or cap on running sequences)")
    return (rules, _given(args, "max_num_seqs", V1_DEFAULT_MAX_NUM_SEQS),
            _given(args, "max_num_batched_tokens", V1_DEFAULT_MAX_NUM_BATCHED_TOKENS))



#: The caveat on seconds priced for a windowed run (the explainer's window sentence says the same).
WINDOW_SECONDS_NOTE = ("note: the seconds price each decode's attention over its whole context, as for full "
                       "attention; for the windowed layers the model's figure is an overestimate")


def window_line(window: dict, block_size: int) -> str:
    """The paged run's window figures in one line (``SimulationResult.window``): the model, the
    bound and the peaks of blocks per sequence per windowed group, the blocks released."""
    groups = window["full_groups"] + window["window_groups"]
    model = (f"{window['full_groups']} full-attention and {window['window_groups']} windowed KV-cache groups in one "
             f"pool (slot figures count slots of one group: {groups} x {window['model_slots']:,})"
             if window["full_groups"] else
             f"every layer windowed" + (f" ({window['window_groups']} KV-cache groups in one pool)"
                                        if window["window_groups"] > 1 else ""))
    return (f"paged: sliding window of {window['sliding_window']:,} tokens, {model}; per sequence per windowed "
            f"group: peak {window['peak_decode_window_blocks']} blocks while decoding (bound ceil("
            f"{window['sliding_window']}/{block_size})+1 = {window['bound_blocks']}), peak "
            f"{window['peak_window_blocks']} in a prefill step (a chunk's blocks are released the step after); "
            f"{window['released_blocks']:,} blocks released behind the window")


def full_attention_figures(sc: Scenario, workload, windowed) -> dict:
    """The same paged run with every layer attending to every token (same memory, block size and
    rules) beside the windowed one (:func:`allocator.engine.scenario.full_attention_figures`)."""
    return scenario_full_attention_figures(full_attention_run(sc, workload), windowed)


def full_attention_line(f: dict) -> str:
    """:func:`full_attention_figures` in one line."""
    ratio = "" if f["ratio"] is None else f" ({f['ratio']:.2f}x)"
    basis = "while requests waited" if f["waited"] else "over the run"
    return (f"paged, full attention in the same memory and rules: {f['mean_running']:.1f} sequences running on "
            f"average {basis} (peak {f['peak_running']}, {f['steps']:,} steps); with the window: "
            f"{f['window_mean_running']:.1f}{ratio} (peak {f['window_peak_running']})")


def scenario_parser() -> argparse.ArgumentParser:
    """``simulate``'s parser, built by :func:`register` on a scratch parser, for the export
    commands to inherit (``parents=[scenario_parser()]``), so they take every scenario option
    ``simulate`` takes and the two never drift apart."""
    scratch = argparse.ArgumentParser(add_help=False)
    sub = scratch.add_subparsers()
    register(sub)
    return sub.choices["simulate"]


def refuse_timing(args, command: str) -> None:
    """Refuse ``--gpu`` and ``--model`` (inherited from ``simulate``) on a command whose files
    count engine steps, not seconds, so a priced run is never asked for and silently not given.

    Args:
        args: the parsed command line.
        command: the command's name, for the message (``"export-site"``).

    Raises:
        FieldError: ``gpu`` (or ``model``, when only it was given), e.g. ``"--gpu a100-40gb:
            export-site counts engine steps, not seconds; --gpu and --model apply only to
            simulate"``.
    """
    timed = [n for n in ("gpu", "model", "cost_model") if getattr(args, n, None) is not None]
    if timed:
        raise FieldError(timed[0], f" = {getattr(args, timed[0])}: {command} counts engine steps, not seconds; "
                                   "--gpu, --model and --cost-model apply only to simulate")


def _given(args, name: str, default):
    """The option's value, or ``default`` when it was not given."""
    value = getattr(args, name)
    return default if value is None else value


def scenario_from_args(args) -> Scenario:
    """The Scenario the CLI arguments describe (options not given take Scenario's defaults).

    The values are as typed (see ``allocator.cli.common.count_arg``); ``Scenario.checked`` checks them.
    """
    d = Scenario()
    workload = args.trace or args.workload or "classroom-40"
    rules, max_num_seqs, max_num_batched_tokens = rules_from_args(args)
    k, rate, spec_seed = speculation_from_args(args) if hasattr(args, "num_speculative_tokens") else (
        0, DEFAULT_ACCEPTANCE_RATE, 0)
    return Scenario(rules=rules, max_num_seqs=max_num_seqs, max_num_batched_tokens=max_num_batched_tokens,
                    num_speculative_tokens=k, acceptance_rate=rate, spec_seed=spec_seed,
                    **window_from_args(args),
                    workload=workload, total_slots=args.slots, block_size=args.block_size,
                    max_new_tokens=args.max_new_tokens, seed=args.seed, arrival=_given(args, "arrival", d.arrival),
                    arrival_rate=_given(args, "arrival_rate", d.arrival_rate),
                    offset=_given(args, "offset", d.offset), count=_given(args, "count", d.count),
                    steps_per_second=_given(args, "steps_per_second", d.steps_per_second),
                    metadata_cost=_given(args, "metadata_cost", d.metadata_cost),
                    shared_prefix=args.shared_prefix, preemption=args.preemption,
                    policy=getattr(args, "policy", d.policy), placement=getattr(args, "placement", d.placement),
                    # --prefix-caching with nothing to find is ignored (a note says so)
                    prefix_caching=bool(getattr(args, "prefix_caching", False))
                    and bool(args.shared_prefix or workload_kind(workload) == "mooncake"))


def unused_options(args, *, sweep_only_cost: bool = True) -> list[str]:
    """Why options given on the command line do nothing in this run (empty if all apply).

    Args:
        sweep_only_cost: ``--metadata-cost`` only changes the ``--sweep`` table (``simulate``);
            ``export-html`` also prints it in the files, so there it always applies.
    """
    classroom = not args.trace and (args.workload or "classroom-40") == "classroom-40"
    given = lambda names: [flag(n) for n in names if getattr(args, n) is not None]    # noqa: E731
    reasons = []
    if classroom:
        trace_only = given(("offset", "count", "steps_per_second"))
        if trace_only:
            reasons.append(f"{and_list(trace_only)} {'applies' if len(trace_only) == 1 else 'apply'} only to a "
                           "trace (--trace or --workload azure-conv), not to classroom-40")
        if args.arrival_rate is not None and args.arrival != "trickle":
            reasons.append("--arrival-rate applies only with --arrival trickle")
    else:
        generated = given(("seed", "arrival", "arrival_rate"))
        if generated:
            reasons.append(f"{and_list(generated)} {'applies' if len(generated) == 1 else 'apply'} only to "
                           "classroom-40, not to a trace")
    if sweep_only_cost and args.metadata_cost is not None and not args.sweep:
        reasons.append("--metadata-cost applies only with --sweep")
    if getattr(args, "prefix_caching", False) and not args.shared_prefix \
            and workload_kind(args.trace or args.workload or "classroom-40") != "mooncake":
        reasons.append("--prefix-caching has nothing to find without prompt tokens (a Mooncake .jsonl trace) "
                       "or --shared-prefix")
    if getattr(args, "cost_model", None) is not None and args.gpu is None and args.model is None:
        reasons.append("--cost-model applies only with --gpu or --model (seconds)")
    return [r + "; ignored" for r in reasons]


def speculation_text(cost: dict) -> str:
    """The paged run's speculation figures (:func:`allocator.studies.speculation.speculation_cost`)
    as a few lines for the terminal: slots per running sequence with and without, the spread over
    the acceptance seeds, and what else changed."""
    w, o = cost["with"], cost["without"]

    def spread(d: dict, spec: str = ".1f") -> str:
        return f"{d['mean']:{spec}} (seeds: {d['min']:{spec}} to {d['max']:{spec}})"

    extra = cost["extra_slots_per_sequence"]
    return "\n".join([
        f"speculation: {cost['num_speculative_tokens']} draft tokens per decode step, each accepted with "
        f"probability {cost['acceptance_rate']:g} until the first rejection; {len(cost['seeds'])} acceptance seeds "
        f"from {cost['seeds'][0]}",
        f"  KV slots holding no token, per running sequence: {spread(w['empty_slots_per_sequence'])} against "
        f"{o['empty_slots_per_sequence']:.1f} without speculation",
        f"  KV slots per running sequence: {spread(w['slots_per_sequence'])} against {o['slots_per_sequence']:.1f}, "
        f"{spread(extra, '+.1f')} slots (shorter runs change the mix of lengths too)",
        f"  sequences running while requests waited: {spread(w['mean_running_busy'])} against "
        f"{o['mean_running_busy']:.1f}; largest batch: {spread(w['peak_running'], '.0f')} against {o['peak_running']}",
        f"  steps to drain: {spread(w['steps'], '.0f')} against {o['steps']}; drafts accepted: "
        f"{spread(w['accepted_fraction'], '.3f')} of those verified",
    ])


def run(args) -> int:
    """Simulate and print; returns the exit status (ValueError propagates to ``__main__``).

    Raises:
        FieldError: a setting out of its range (checked before anything runs), or a bad trace file.
    """
    sc = scenario_from_args(args).checked()
    sc.refuse_a_prefix_that_fills_the_pool()            # up front: a run of zeros that exits 0 says nothing
    workload = build_workload(sc)
    print_note(unused_options(args))
    results = run_scenario(sc, workload, record_snapshots=False)
    timed = args.gpu is not None or args.model is not None
    if timed and sc.num_speculative_tokens:
        raise FieldError("num_speculative_tokens", f" = {sc.num_speculative_tokens}: the cost models price no "
                         "draft model, so a speculating run is not timed; leave out --gpu and --model")
    cost = best_cost_model(args.gpu or "a100-40gb", args.model or "opt-13b", None, args.cost_model or "best") if timed \
        else None
    out = {}
    for key, res in results.items():
        s = res.summary.to_dict()
        s["allocator"] = res.label
        s["workload"] = workload.name
        s["requests"] = len(workload)
        s["max_new_tokens"] = workload.max_new_tokens
        if workload.notes:
            s["notes"] = list(workload.notes)
        if sc.rules == "v1":
            s["rules"] = sc.v1_rules.describe() if key == "paged" else \
                "classroom scheduler (vLLM v1 has no reservation allocator)"
        if res.window is not None:
            s["sliding_window"] = dict(res.window, full_attention=full_attention_figures(sc, workload, res))
        if timed:
            # the explainer's pricing: the run on its step clock, an idle step at the arrival clock
            s.update(price(res, cost, idle_step_s=1 / sc.canonical().steps_per_second).summary)
        out[key] = s
    if sc.num_speculative_tokens:
        out["paged"]["speculation"] = speculation_cost(sc, workload)
    if args.sweep:
        out["paged_block_size_sweep"] = [row.to_dict() for row in scenario_sweep(sc, workload)]
    if args.json:
        print(json.dumps(out, indent=2))
        return 0
    print(f"workload {workload.name}: {plural(len(workload), 'request')}, pool {plural(sc.slots, 'slot')}, "
          f"max_new_tokens {workload.max_new_tokens}, block size {sc.block_size}")
    if sc.rules == "v1":
        print(f"paged: {sc.v1_rules.describe()}; reservation: the classroom scheduler")
    window = results["paged"].window
    if window is not None:
        print(window_line(window, sc.block_size))
        print(full_attention_line(out["paged"]["sliding_window"]["full_attention"]))
    for note in workload.notes:
        print(f"note: {note}")
    if sc.num_speculative_tokens:
        print(speculation_text(out["paged"]["speculation"]))
    if timed:
        print(f"seconds priced on {seconds_source(cost)}")
        if window is not None:
            print(WINDOW_SECONDS_NOTE)
    keys = SUMMARY_KEYS + ("rejected",) + (TIME_KEYS if timed else ()) + (PREFIX_KEYS if sc.prefix_caching else ())
    width = max(len(k) for k in keys)
    left = results["reserve_max"].label.lower()
    print(f"{'':{width}}  {left:>14}  {'paged':>14}")
    for k in keys:
        vals = [out[a].get(k) for a in ("reserve_max", "paged")]
        vals = [len(v) if isinstance(v, list) else v for v in vals]
        vals = [format(v, ".6g") if isinstance(v, float) else v for v in vals]
        print(f"{k:{width}}  " + "  ".join(f"{'-' if v is None else v:>14}" for v in vals))
    cells = {key: share_cells(results[key]) for key in ("reserve_max", "paged")}
    print("\nwhere the pool went while requests waited (% of pool; the shares partition it):")
    names = SHARES + (("total", None, "all of the above", None),)
    w = max(width, *(len(name) for _, _, name, _ in names))
    for key, _, name, _ in names:
        print(f"{name:{w}}  {cells['reserve_max'][key]:>14}  {cells['paged'][key]:>14}")
    for key in ("reserve_max", "paged"):
        for r in out[key]["rejected"]:
            print(f"{key} rejected request {r['id']}: {r['reason']}")
    if args.sweep:
        basis, words = sweep_basis(out["paged_block_size_sweep"], results["reserve_max"].summary)

        def num(value, spec):
            width = spec.split(".")[0]                      # ">9" of ">9.3f"
            return format("-", width) if value is None else format(value, spec)

        print(f"\nblock-size sweep, averages {words}")
        print(f"block_size  mean_util  peak_running  steps  preemptions  cost_per_token(c={sc.metadata_cost:g})")
        for row in out["paged_block_size_sweep"]:
            print(f"{row['block_size']:>10}  {num(sweep_value(row, 'mean_utilization', basis), '>9.3f')}"
                  f"  {row['peak_running']:>12}  {row['steps']:>5}  {row['preemptions']:>11}"
                  f"  {num(sweep_value(row, 'cost_per_token', basis), '>18.3f')}")
    return 0
