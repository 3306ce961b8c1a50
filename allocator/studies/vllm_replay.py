"""Replay a measured vLLM run in the lab's engine and compare, request by request.

:func:`replay` takes a :class:`allocator.workloads.vllm_run.VllmRun` (arrivals, prompt and output lengths,
the engine's arguments), runs it through :func:`allocator.engine.simulate.simulate` under vLLM v1's rules
(:class:`allocator.engine.v1.V1Rules`: the run's ``max_num_seqs`` and ``max_num_batched_tokens``,
chunked prefill and prefix caching as the run set them, vLLM's defaults otherwise) on the seconds
clock of :class:`allocator.cost.calibration.CalibratedCost`, and returns measured beside simulated TTFT,
TPOT and end-to-end latency with the percentage error of mean, p50 and p90. ``python -m allocator
replay-vllm RUN_DIR`` prints it; the "Checked against a real engine" page draws it.

Requests arrive at their measured ``queued_ts`` (relative to the first). The run gives lengths,
not token ids, so prefix caching can only find a preempted request's own blocks again.

Parallelism comes from meta.json's ``engine_kwargs``: ``tensor_parallel_size`` (the cost models'
all-reduce), ``data_parallel_size`` (that many engine ranks, each simulated as its own engine with
the run's pool and rules, the requests routed as vLLM 0.19's front end routes them:
:func:`assign_ranks`) and ``enable_expert_parallel`` (a mixture of experts' experts split over the
ranks' GPUs, with the dispatch and combine priced). The running and waiting series sum the ranks.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from allocator.memory.paged import PagedAllocator
from allocator.cost.calibration import (CALIBRATED, CalibratedCost, Efficiency, Fit, REPLAY_GPUS, REPLAY_MODELS,
                                        ServedModel, fit_efficiency, gpu_for, kv_pool_blocks, model_for)
from allocator.cost.microbench import efficiency_for
from allocator.cost.profile import VARIANTS, ProfileCost
from allocator.engine.v1 import V1_DEFAULT_MAX_NUM_BATCHED_TOKENS, V1_DEFAULT_MAX_NUM_SEQS, V1Rules
from allocator.engine.simulate import simulate
from allocator.common.errors import FieldError
from allocator.common.limits import LIMITS, MAX_POOL_SLOTS, MAX_TOKENS
from allocator.common.validate import Limit, in_range, show
from allocator.workloads.reader import json_shown
from allocator.workloads.vllm_run import VllmRun, load_run_zip
from allocator.workloads.requests import Request, Workload

#: The three per-request figures compared, with their display names.
FIGURES = {"ttft": "time to first token", "tpot": "time per output token", "latency": "end-to-end latency"}
#: The statistics compared.
STATS = ("mean", "p50", "p90")
#: vLLM's default block size (tokens) when the run does not state one.
DEFAULT_BLOCK_SIZE = 16
#: The step cost models a replay can price with: the roofline calibrated on the shipped run
#: (:class:`allocator.cost.calibration.CalibratedCost`) and the measured operator profiles
#: (:class:`allocator.cost.profile.ProfileCost`).
COST_MODELS = {"roofline": "roofline (efficiencies from the GPU's operator microbenchmarks where a profile "
                            "bundle exists, else the 3 fitted on the shipped run)",
               "profile": "operator profile (measured per-operator latencies of the GPU)"}
#: Where the roofline's efficiencies come from (``calibration=``): the GPU's operator
#: microbenchmarks (:func:`allocator.cost.microbench.efficiency_for`; the fit below for a GPU with
#: no bundle) or the fit on the shipped run (:data:`allocator.cost.calibration.CALIBRATED`).
CALIBRATIONS = {"microbench": "the GPU's operator microbenchmarks (no run)",
                "run": "fitted on the shipped run"}
#: Largest cap on running sequences and largest per-step token budget accepted (a run's meta.json or
#: an override): far above any server's, small enough that the scheduler's arithmetic stays exact.
MAX_NUM_SEQS = 1_000_000
MAX_NUM_BATCHED_TOKENS = MAX_TOKENS
#: Range of meta.json's ``gpu_memory_utilization`` (vLLM's fraction of GPU memory it may use).
GPU_MEMORY_UTILIZATION = Limit(0, 1, integer=False, unit="fraction of GPU memory vLLM may use", low_open=True)
#: Range of meta.json's ``engine_kwargs.data_parallel_size`` (model copies).
DATA_PARALLEL_SIZE = Limit(1, 64, unit="model copies")
#: Most engine steps an override of ``max_num_seqs`` or ``max_num_batched_tokens`` may make a replay
#: take, estimated before it runs (:func:`estimated_steps`). Measured: ``replay-vllm`` on the shipped run
#: with a budget of 16 tokens (an estimate of 28,312 steps) took 8.9 s on the lab's 2-core machine; the
#: issue's hunt saw a budget of 12 (37,749) take 36 s on a loaded one and a budget of 1 (452,992) run
#: past 60 s. So a what-if stays within about half a minute. A run whose own settings already need
#: more may be replayed as it ran; an override may not make it longer than that.
MAX_OVERRIDE_STEPS = 30_000
#: The values vLLM's ``kv_cache_dtype`` takes (vllm/config/cache.py, ``CacheDType``: vLLM 0.9 took auto,
#: fp8, fp8_e4m3 and fp8_e5m2, 0.10 added fp8_inc, later versions bfloat16 and fp8_ds_mla); null is auto.
VLLM_KV_CACHE_DTYPES = ("auto", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2", "fp8_inc", "fp8_ds_mla")
#: Those a replay can price: the KV cache in the model's own 2-byte values (every model a replay prices
#: is bf16). An fp8 cache holds 1 byte a value, which doubles the pool and halves attention's KV reads;
#: neither the derived pool nor the cost models do that.
PRICED_KV_CACHE_DTYPES = ("auto", "bfloat16")
#: Most points of the running/waiting series drawn when the run has no timeseries.csv: one a second
#: up to this many, then evenly spaced (a request queued 10**8 s late once made an array of 10**8 ticks).
MAX_SERIES_TICKS = 10_000


@dataclass(frozen=True)
class Replay:
    """A replay's result.

    Attributes:
        run: the measured run.
        cost: the step model used.
        rules: the v1 rules used.
        prefix_caching: whether the replay's pool kept finished blocks findable.
        block_size, num_blocks: the KV pool (blocks of ``block_size`` tokens).
        pool_source: "run" (meta.json's num_gpu_blocks) or "derived" (:func:`kv_pool_blocks`).
        measured, simulated: {"ttft", "tpot", "latency"}: float64 [requests], seconds (tpot NaN for
            a one-token answer), in the run's queue order.
        table: {figure: {stat: {"measured", "simulated", "error_pct"}}} (seconds; error = simulated /
            measured - 1, in %).
        series: {"t", "running", "waiting"} of the simulation sampled at the run's ticks (seconds,
            counts; the requests running or waiting at the end of the step covering each tick).
        makespan_s: measured and simulated seconds from the first arrival to the last token.
        preemptions: the simulation's preemptions (all ranks).
        data_parallel: engine ranks (meta.json's data_parallel_size); each simulated as its own
            engine with the run's pool and rules (:func:`assign_ranks` places the requests).
        expert_parallel: whether the experts of a mixture-of-experts model were split over the
            ranks' GPUs (meta.json's enable_expert_parallel; False for a dense model).
        ranks: int64 [requests], each request's rank (queue order).
        dp_rounds: rounds of assignment and simulation run (0 with one rank).
        dp_unsettled: requests a further round would move to another rank (0: the assignment
            reproduces itself).
        efficiency_source: where the roofline's efficiencies came from (a sentence).
        notes: one-line notes on settings the run left to vLLM's defaults (:func:`default_notes`).
    """

    run: VllmRun
    cost: CalibratedCost
    rules: V1Rules
    prefix_caching: bool
    block_size: int
    num_blocks: int
    pool_source: str
    measured: dict
    simulated: dict
    table: dict
    series: dict
    makespan_s: dict
    preemptions: int
    cost_model: str = "roofline"
    data_parallel: int = 1
    expert_parallel: bool = False
    ranks: np.ndarray | None = None
    dp_rounds: int = 0
    dp_unsettled: int = 0
    efficiency_source: str = ""
    notes: tuple = ()

    def error_pct(self, figure: str, stat: str = "mean") -> float:
        """Simulated / measured - 1 of one statistic, in percent."""
        return self.table[figure][stat]["error_pct"]

    def to_json(self) -> dict:
        """The replay as JSON-ready data (what ``replay-vllm --json`` prints)."""
        out = {
            "run": self.run.name, "model": self.run.model, "gpu": self.cost.gpu.key, "tp": self.cost.tp,
            "cost_model": self.cost_model,
            "requests": len(self.run), "rules": {"max_num_seqs": self.rules.max_num_seqs,
                                                 "max_num_batched_tokens": self.rules.max_num_batched_tokens,
                                                 "chunked_prefill": self.rules.chunked_prefill,
                                                 "prefix_caching": self.prefix_caching, "preemption": "recompute"},
            "block_size": self.block_size, "num_gpu_blocks": self.num_blocks, "pool_source": self.pool_source,
            "table": self.table, "makespan_s": self.makespan_s, "preemptions": self.preemptions,
            "data_parallel": self.data_parallel, "expert_parallel": self.expert_parallel,
        }
        if self.data_parallel > 1:
            out["ranks"] = {"requests_per_rank": np.bincount(self.ranks, minlength=self.data_parallel).tolist(),
                            "assignment": "vLLM 0.19 DPLBAsyncMPClient: lowest 4 x waiting + running",
                            "rounds": self.dp_rounds, "unsettled_requests": self.dp_unsettled}
        if self.notes:
            out["notes"] = list(self.notes)
        if self.cost_model == "profile":
            out["profile"] = {**self.cost.terms(), "off_grid_lookups": self.cost.off_grid_summary()}
        else:
            e = self.cost.efficiency
            out["efficiency"] = {"eta_flops": e.eta_flops, "eta_bw": e.eta_bw, "overhead_s": e.overhead_s,
                                 "source": self.efficiency_source}
        return out


def _stats(values: np.ndarray) -> dict:
    v = values[np.isfinite(values)]
    return {"mean": float(v.mean()), "p50": float(np.percentile(v, 50)), "p90": float(np.percentile(v, 90))}


def estimated_steps(run: VllmRun, max_num_seqs: int, max_num_batched_tokens: int) -> int:
    """Engine steps a replay of ``run`` takes at least, by its token counts: every step schedules at most
    ``max_num_batched_tokens`` prompt and output tokens, and decodes at most one token for each of at
    most ``max_num_seqs`` running sequences. ``max(ceil((prompt + output tokens) / budget),
    ceil(output tokens / max_num_seqs))``; an estimate (prefix-cache hits skip prompt tokens, idle
    time between arrivals adds steps). vLLM v1's scheduler: vllm/v1/core/sched/scheduler.py (token
    budget and max_num_running_reqs per step)."""
    prompt, output = int(run.prompt.sum()), int(run.output.sum())
    return max(-(-(prompt + output) // max_num_batched_tokens), -(-output // max_num_seqs))


def _check_override_steps(run: VllmRun, own: V1Rules, seqs: int | None, budget: int | None) -> None:
    """Refuse an override whose :func:`estimated_steps` pass :data:`MAX_OVERRIDE_STEPS` (or the run's
    own estimate, when that is larger), naming the smallest value this run allows."""
    limit = max(MAX_OVERRIDE_STEPS, estimated_steps(run, own.max_num_seqs, own.max_num_batched_tokens))
    prompt, output = int(run.prompt.sum()), int(run.output.sum())
    if budget is not None and -(-(prompt + output) // budget) > limit:
        least = -(-(prompt + output) // limit)
        raise FieldError("max_num_batched_tokens", f" = {budget:,} would take about {-(-(prompt + output) // budget):,} "
                         f"engine steps for this run's {prompt + output:,} prompt and output tokens; a what-if replays "
                         f"at most {limit:,} steps, so give at least {least:,} for this run")
    if seqs is not None and -(-output // seqs) > limit:
        least = -(-output // limit)
        raise FieldError("max_num_seqs", f" = {seqs:,} would take about {-(-output // seqs):,} engine steps to decode "
                         f"this run's {output:,} output tokens (one per running sequence a step); a what-if replays "
                         f"at most {limit:,} steps, so give at least {least:,} for this run")


def rules_for(run: VllmRun) -> V1Rules:
    """The v1 rules the run's engine arguments set (vLLM's defaults for what it leaves out).

    Raises:
        FieldError: an engine argument of the wrong type (named ``meta.json: engine_kwargs.<key>``).
    """
    chunked = run.engine.get("enable_chunked_prefill")
    if chunked is not None and not isinstance(chunked, bool):
        raise FieldError("enable_chunked_prefill", f" = {json_shown(chunked)} must be true or false",
                         subject="meta.json: engine_kwargs.enable_chunked_prefill")
    # the ranges of simulate's --max-num-* (allocator.common.limits.LIMITS), stated whole when broken
    seqs = run.engine_int("max_num_seqs", V1_DEFAULT_MAX_NUM_SEQS, LIMITS["max_num_seqs"])
    budget = run.engine_int("max_num_batched_tokens", V1_DEFAULT_MAX_NUM_BATCHED_TOKENS,
                            LIMITS["max_num_batched_tokens"])
    return V1Rules(max_num_seqs=seqs, max_num_batched_tokens=budget,
                   chunked_prefill=True if chunked is None else chunked)


def series_ticks(run: VllmRun) -> np.ndarray:
    """The times (seconds) at which the replay's running/waiting series is sampled: the run's own
    ticks (timeseries.csv's ``t``) when it has them, else one a second from 1 s to the last token --
    spaced wider when that would pass :data:`MAX_SERIES_TICKS` points, so the array is bounded
    whatever the run's time span. float64 [ticks]."""
    if run.timeseries is not None:
        return np.asarray(run.timeseries["t"], dtype=float)
    span = float(run.last.max())
    step = max(1.0, float(np.ceil(span / MAX_SERIES_TICKS)))
    return np.arange(1.0, span + 1.0, step)


def roofline_efficiency(gpu, model: ServedModel, tp: int, calibration: str = "microbench") -> tuple[Efficiency, str]:
    """The roofline's efficiencies and where they come from (a sentence): with ``calibration`` =
    "microbench", :func:`allocator.cost.microbench.efficiency_for` when the lab holds a profile
    bundle of ``gpu``, else the fit on the shipped run; with "run", that fit.

    Raises:
        FieldError (``calibration``): not one of :data:`CALIBRATIONS`.
    """
    if calibration not in CALIBRATIONS:
        raise FieldError("calibration", f" = {show(calibration)} is not one of {', '.join(CALIBRATIONS)}")
    if calibration == "microbench":
        got = efficiency_for(gpu, model, tp)
        if got is not None:
            return got[0], f"operator microbenchmarks ({got[1]})"
        return CALIBRATED, f"fitted on the shipped run (no operator profile of {gpu.label})"
    return CALIBRATED, "fitted on the shipped run"


def replay(run: VllmRun, gpu: str | None = None, model: str | None = None, *,
           efficiency: Efficiency | None = None, calibration: str = "microbench", max_num_seqs: int | None = None,
           max_num_batched_tokens: int | None = None, chunked_prefill: bool | None = None,
           prefix_caching: bool | None = None, cost_model: str = "roofline") -> Replay:
    """Replay ``run`` and compare (see the module docstring).

    Args:
        run: the measured run.
        gpu: a GPU preset key (default: what the run's meta.json or directory name says).
        model: a model preset key (default: the run's model name).
        efficiency: the roofline's parameters (None: :func:`roofline_efficiency` with ``calibration``).
        calibration: "microbench" (default) or "run" (:data:`CALIBRATIONS`), when ``efficiency`` is None.
        max_num_seqs, max_num_batched_tokens, chunked_prefill, prefix_caching: override the run's
            engine arguments (None: as the run set them, vLLM's defaults where it did not), to ask
            "what if" of the same arrivals.
        cost_model: "roofline" (default) or "profile" (:data:`COST_MODELS`; :func:`best_cost_model`
            picks the better one the lab holds for a run).

    Raises:
        FieldError: a run the lab cannot price (:func:`served_model`, :func:`check_priceable`; a
            profile missing for ``cost_model="profile"``), an unknown GPU, engine arguments of the wrong type, a pool that
            cannot hold the model, a request longer than ``max_model_len`` (:func:`check_model_len`) or
            than the pool (:func:`check_pool`), named by its line in requests.jsonl.
    """
    g = gpu_for(gpu, run.hardware, run.name)
    m: ServedModel = served_model(run, model)
    tp = check_priceable(run, m)
    dp, ep = parallelism(run)
    check_model_len(run, m)
    rules = rules_for(run)
    # the same check (and message) as simulate's --max-num-*: allocator.common.limits.LIMITS
    if max_num_seqs is not None:
        max_num_seqs = LIMITS["max_num_seqs"].check("max_num_seqs", max_num_seqs)
    if max_num_batched_tokens is not None:
        max_num_batched_tokens = LIMITS["max_num_batched_tokens"].check("max_num_batched_tokens",
                                                                        max_num_batched_tokens)
    for name, value in (("chunked_prefill", chunked_prefill), ("prefix_caching", prefix_caching)):
        if value is not None and not isinstance(value, bool):
            raise FieldError(name, f" = {json_shown(value)} must be true or false")
    _check_override_steps(run, rules, max_num_seqs, max_num_batched_tokens)
    if max_num_seqs is not None or max_num_batched_tokens is not None or chunked_prefill is not None:
        rules = V1Rules(rules.max_num_seqs if max_num_seqs is None else max_num_seqs,
                        rules.max_num_batched_tokens if max_num_batched_tokens is None else max_num_batched_tokens,
                        rules.chunked_prefill if chunked_prefill is None else chunked_prefill)
    if not rules.chunked_prefill and int(run.prompt.max()) > rules.max_num_batched_tokens:
        raise FieldError("max_num_batched_tokens", f" = {rules.max_num_batched_tokens} is below the longest prompt "
                         f"({int(run.prompt.max())} tokens): without chunked prefill a prompt must fit one step's "
                         "budget (vLLM asks for a budget of at least max_model_len then)")
    kv = run.kv_cache
    bs = in_range("block_size", kv.get("block_size", run.engine.get("block_size", DEFAULT_BLOCK_SIZE)),
                  LIMITS["block_size"], subject="meta.json: kv_cache.block_size")
    if kv.get("num_gpu_blocks") is not None:
        pool = Limit(1, max(1, MAX_POOL_SLOTS // bs), unit=f"blocks of {bs} slots: at most 2**30 slots in all")
        blocks = in_range("num_gpu_blocks", kv["num_gpu_blocks"], pool, subject="meta.json: kv_cache.num_gpu_blocks")
        source = "run"
    else:
        util = in_range("gpu_memory_utilization", kv.get("gpu_memory_utilization",
                                                         run.engine.get("gpu_memory_utilization", 0.9)),
                        GPU_MEMORY_UTILIZATION, subject="meta.json: gpu_memory_utilization")
        blocks, source = kv_pool_blocks(g, m, tp, bs, gpu_memory_utilization=util,
                                        max_num_batched_tokens=rules.max_num_batched_tokens,
                                        max_num_seqs=rules.max_num_seqs,
                                        expert_group=dp * tp if (ep and m.is_moe) else 1), "derived"
    check_pool(run, bs, blocks, source)
    caching = (run.engine.get("enable_prefix_caching", True) is not False) if prefix_caching is None else prefix_caching
    if efficiency is None:
        efficiency, eff_source = roofline_efficiency(g, m, tp, calibration)
    else:
        eff_source = "fitted on the shipped run" if efficiency == CALIBRATED else "given"
    cost = step_cost(run, g, m, tp, cost_model, efficiency, dp=dp, ep=ep)
    reqs = [Request(i + 1, int(run.prompt[i]), int(run.output[i]), 0, float(run.queued[i])) for i in range(len(run))]
    max_out = int(run.output.max())

    def one_rank(members) -> tuple:
        sub = Workload(run.name, tuple(reqs[i] for i in members), max_out)
        res = simulate(sub, PagedAllocator(blocks * bs, bs, prefix_caching=caching), clock=cost, rules=rules,
                       record_snapshots=False)
        if res.rejected:                             # check_pool refuses these first; kept as a guard
            first = res.rejected[0]
            raise FieldError("requests", f": {first['reason']}", subject=run.request_label(first["id"] - 1))
        return res, np.cumsum(res.metrics["seconds"])

    if dp == 1:
        ranks, rounds, unsettled = np.zeros(len(run), dtype=np.int64), 0, 0
        sims = [one_rank(range(len(run)))]
    else:
        ranks, sims, rounds, unsettled = _data_parallel(run, dp, one_rank)
    sim = {k: np.full(len(run), np.nan) for k in FIGURES}
    ticks = series_ticks(run)
    series = {"t": ticks, "running": np.zeros(len(ticks)), "waiting": np.zeros(len(ticks))}
    preempted, span = 0, 0.0
    for res, ends in sims:
        r = res.requests
        order = r["id"] - 1
        arrival = run.queued[order]
        first_s, last_s = ends[r["first_token_step"]], ends[r["finish_step"]]
        sim["ttft"][order] = first_s - arrival
        sim["latency"][order] = last_s - arrival
        out = r["output_len"]
        with np.errstate(invalid="ignore", divide="ignore"):
            sim["tpot"][order] = np.where(out > 1, (last_s - first_s) / np.maximum(out - 1, 1), np.nan)
        running, waiting = _state_at(res, ends, ticks)
        series["running"] += running
        series["waiting"] += waiting
        preempted += res.summary["preemptions"]
        span = max(span, float(ends[-1]))
    meas = {"ttft": run.ttft, "tpot": run.tpot, "latency": run.latency}
    table = {}
    for k in FIGURES:
        ms, ss = _stats(meas[k]), _stats(sim[k])
        table[k] = {s: {"measured": ms[s], "simulated": ss[s], "error_pct": 100.0 * (ss[s] / ms[s] - 1)}
                    for s in STATS}
    return Replay(run, cost, rules, caching, bs, blocks, source, meas, sim, table, series,
                  {"measured": float(run.last.max()), "simulated": span}, preempted, cost_model,
                  dp, ep and m.is_moe, ranks, rounds, unsettled, eff_source,
                  default_notes(run, max_num_seqs, max_num_batched_tokens))


def _state_at(res, ends: np.ndarray, ticks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(running, waiting) of one simulation at each of ``ticks`` (seconds): the counts at the end of
    the step covering the tick, 0 after the last step. float64 [ticks] each."""
    starts = ends - res.metrics["seconds"]
    idx = np.clip(np.searchsorted(starts, ticks, side="right") - 1, 0, len(ends) - 1)
    running = res.metrics["running"][idx].astype(float)
    waiting = res.metrics["waiting"][idx].astype(float)
    running[ticks > ends[-1]] = 0
    waiting[ticks > ends[-1]] = 0
    return running, waiting


#: Seconds between two snapshots of the engines' (waiting, running) counts that vLLM's DP
#: coordinator publishes to the front end (vllm/v1/engine/coordinator.py, stats_update_interval_ms
#: = 100 by default).
DP_STATS_INTERVAL_S = 0.1
#: Rounds of "assign the requests, simulate the ranks" a data-parallel replay runs at most (see
#: :func:`assign_ranks`); it stops earlier when a round reproduces the previous assignment. Two
#: about equally loaded ranks tie often, so some requests keep changing rank from round to round:
#: on the shipped run with data_parallel_size set to 2 by hand, 50-60 of 300 after 3 or 6 rounds,
#: while the simulated means moved by less than 0.2 % between the two (the count is reported as
#: ``dp_unsettled``).
MAX_DP_ROUNDS = 3


def assign_ranks(arrivals: np.ndarray, dp: int, spans: tuple | None = None,
                 interval_s: float = DP_STATS_INTERVAL_S) -> np.ndarray:
    """The data-parallel rank vLLM 0.19's front end sends each request to.

    The rule (vllm/v1/engine/core_client.py, ``DPLBAsyncMPClient.get_core_engine_for_request``):
    each engine's score is 4 x waiting + running, from the front end's copy of the engines'
    counts; the request goes to the lowest score (ties: the first in rank order from the client's
    start index, 0 for one API server), and the front end then adds one to that engine's waiting
    count in its copy, so requests arriving between two snapshots spread out. The copy is replaced
    by the engines' own counts whenever the DP coordinator publishes them, every ``interval_s``
    (vllm/v1/engine/coordinator.py, stats_update_interval_ms = 100).

    The engines' counts at a snapshot come from ``spans``: each request waits from its arrival for
    ``queue_s`` seconds and then runs for ``run_s`` seconds, on the rank it was given; a snapshot
    at time p counts, per rank, the requests given to it so far that arrived before p and are
    waiting or running at p. (A replay takes the spans from a simulation: :func:`replay`.)

    Args:
        arrivals: float64 [requests], seconds, ascending (queue order).
        dp: data-parallel ranks (>= 1).
        spans: (queue_s, run_s), float64 [requests] each, or None: no snapshot is ever published
            (the front end's own counts only, which deal the requests out in turn).
        interval_s: seconds between snapshots (> 0).

    Returns:
        int64 [requests]: each request's rank (0 .. dp - 1).
    """
    arrivals = np.asarray(arrivals, dtype=float)
    counts = [[0, 0] for _ in range(dp)]
    out = np.empty(len(arrivals), dtype=np.int64)
    if spans is not None:
        admit = arrivals + np.asarray(spans[0], dtype=float)
        leave = admit + np.asarray(spans[1], dtype=float)
    last = None
    for i, t in enumerate(arrivals):
        if spans is not None:
            snap = int(np.floor(t / interval_s + 1e-9))
            if snap != last:
                p = snap * interval_s
                given = out[:i]
                seen = arrivals[:i] < p
                waiting = seen & (admit[:i] > p)
                running = seen & (admit[:i] <= p) & (leave[:i] > p)
                counts = [[int(np.count_nonzero(waiting & (given == r))), int(np.count_nonzero(running & (given == r)))]
                          for r in range(dp)]
                last = snap
        best = min(range(dp), key=lambda r: (4 * counts[r][0] + counts[r][1], r))
        counts[best][0] += 1
        out[i] = best
    return out


def _spans(run: VllmRun, sims: list) -> tuple[np.ndarray, np.ndarray]:
    """Each request's (queue_s, run_s) in simulations ``sims`` [(result, step ends)]: waiting from
    its arrival to the start of the step that emits its first token (its admission, for a prompt
    prefilled in one step; later than it for a chunked one), running from there to its last token.
    float64 [requests] each, queue order."""
    queue_s, run_s = np.zeros(len(run)), np.zeros(len(run))
    for res, ends in sims:
        r = res.requests
        order = r["id"] - 1
        starts = ends - res.metrics["seconds"]
        admit = starts[r["first_token_step"]]
        queue_s[order] = np.maximum(admit - run.queued[order], 0.0)
        run_s[order] = ends[r["finish_step"]] - np.maximum(admit, run.queued[order])
    return queue_s, run_s


def _data_parallel(run: VllmRun, dp: int, one_rank) -> tuple:
    """Assign the run's requests to ``dp`` ranks and simulate each (``one_rank(indices) -> (result,
    step ends)``).

    vLLM routes each request on the engines' live counts, and those counts depend on the routing:
    a replay of independent rank simulations reaches the assignment in rounds. Round 1 deals
    requests out as the front end does before any snapshot arrives (in turn); every later round
    takes each request's waiting and running spans from the previous round's simulations
    (:func:`_spans`; the assumption is that a request's spans depend little on which of two
    about equally loaded ranks it ran on, which the rule itself aims for) and assigns again with
    :func:`assign_ranks`, until an assignment repeats or
    :data:`MAX_DP_ROUNDS` rounds have run. Returns (ranks int64 [requests], [(result, ends)] per
    non-empty rank, rounds run, requests one more round would move to another rank: 0 when the
    assignment is settled)."""
    ranks = assign_ranks(run.queued, dp)
    rounds = 0
    while True:
        rounds += 1
        sims = [one_rank(np.flatnonzero(ranks == r)) for r in range(dp) if (ranks == r).any()]
        if rounds >= MAX_DP_ROUNDS:
            break
        again = assign_ranks(run.queued, dp, _spans(run, sims))
        if np.array_equal(again, ranks):
            break
        ranks = again
    unsettled = int(np.count_nonzero(assign_ranks(run.queued, dp, _spans(run, sims)) != ranks))
    return ranks, sims, rounds, unsettled


def held_out_check(run: VllmRun, gpu: str | None = None, model: str | None = None) -> dict:
    """Calibrate on the first half of the run's requests (by queue time), replay the whole run with
    those parameters, and report the errors on the second half only.

    Returns:
        {"fit": the half fit (:class:`allocator.cost.calibration.Fit`), "tpot_error_pct",
        "ttft_error_pct", "latency_error_pct": mean errors (%) over the held-out requests}.
    """
    g = gpu_for(gpu, run.hardware, run.name)
    m = model_for(model or run.model)
    half = np.arange(len(run)) < len(run) // 2
    fit: Fit = fit_efficiency(run, g, m, check_priceable(run, m), fit_mask=half)
    rep = replay(run, g.key, m.config.key, efficiency=fit.efficiency)
    rest = ~half
    out = {"fit": fit}
    for k in FIGURES:
        meas, sim = rep.measured[k][rest], rep.simulated[k][rest]
        ok = np.isfinite(meas) & np.isfinite(sim)
        out[f"{k}_error_pct"] = float(100.0 * (sim[ok].mean() / meas[ok].mean() - 1))
    return out


def served_model(run: VllmRun, model: str | None = None) -> ServedModel:
    """The model the run served, from its meta.json; ``model`` (an override) must name the same one.

    Raises:
        FieldError (``model``): meta.json's model has no preset (what would supply it is named), or
            the override names another model than the run's (the measured times are the run's model's).
    """
    try:
        own = model_for(run.model)
    except FieldError:
        priced = ", ".join(m.config.short for m in REPLAY_MODELS.values())
        raise FieldError("model", f" = {show(run.model)} is not a model this lab can price. It prices runs of "
                         f"{priced}; another model needs its shape and an operator profile added by whoever "
                         "runs the lab", subject="meta.json: model") from None
    if model is not None and model_for(model).config.key != own.config.key:
        raise FieldError("model", f" = {show(model)} does not match the run's model {show(run.model)} (meta.json): the "
                         "measured times are that model's, so another one cannot be checked against them",
                         subject="--model")
    return own


def parallelism(run: VllmRun) -> tuple[int, bool]:
    """(data_parallel_size, enable_expert_parallel) from the run's meta.json (1 and False when absent).

    Raises:
        FieldError (``meta.json: engine_kwargs.<key>``): not a whole number from 1 to 64, or not true/false.
    """
    dp = run.engine_int("data_parallel_size", 1, DATA_PARALLEL_SIZE)
    ep = run.engine.get("enable_expert_parallel")
    if ep is not None and not isinstance(ep, bool):
        raise FieldError("enable_expert_parallel", f" = {json_shown(ep)} must be true or false",
                         subject="meta.json: engine_kwargs.enable_expert_parallel")
    return dp, bool(ep)


def check_priceable(run: VllmRun, model: ServedModel | None = None) -> int:
    """The run's tensor-parallel degree, once its parallelism is one the lab can price.

    Data parallelism is priced (independent engine ranks, :func:`assign_ranks`), and so is expert
    parallelism of a mixture-of-experts model. Refused: a mixture of experts on several
    data-parallel ranks WITHOUT expert parallelism -- vLLM then shards every expert over the
    dp x tp GPUs as a tensor-parallel group, a block no profile or roofline here prices.

    Also refused: a tensor-parallel size the lab cannot price (:func:`tensor_parallel`) and a KV-cache
    dtype vLLM does not know or the lab cannot price (:func:`kv_cache_dtype`).

    Raises:
        FieldError (``enable_expert_parallel``): that case, naming what would supply it; as
            :func:`tensor_parallel` and :func:`kv_cache_dtype`.
    """
    dp, ep = parallelism(run)
    m = model or served_model(run)
    kv_cache_dtype(run)
    if m.is_moe and dp > 1 and not ep:
        raise FieldError("enable_expert_parallel", f": the run has data_parallel_size = {dp} without "
                         f"enable_expert_parallel, so vLLM shards each of {m.config.short}'s experts over the "
                         f"{dp} x tp GPUs; the lab prices whole experts only (expert parallelism, or a profile "
                         "of the sharded expert block, would supply it)",
                         subject="meta.json: engine_kwargs.enable_expert_parallel")
    return tensor_parallel(run, m)


def tensor_parallel_sizes(model: ServedModel) -> tuple[int, ...]:
    """The tensor-parallel sizes a replay can price for ``model``: the divisors of its KV heads.

    vLLM splits the attention heads evenly over the GPUs (its ModelConfig refuses a size that does
    not divide the attention heads) and each GPU holds ``kv_heads / tp`` KV heads; past ``kv_heads``
    GPUs vLLM copies KV heads onto several GPUs, which the lab's pool (:func:`kv_pool_blocks`: the
    KV bytes of a token / tp on each GPU) and roofline do not model. Returns ascending sizes."""
    kv = model.config.kv_heads
    return tuple(d for d in range(1, kv + 1) if kv % d == 0)


def tensor_parallel(run: VllmRun, model: ServedModel) -> int:
    """meta.json's ``engine_kwargs.tensor_parallel_size`` (1 when absent or null), once it is one of
    :func:`tensor_parallel_sizes`.

    Raises:
        FieldError (``meta.json: engine_kwargs.tensor_parallel_size``): not a whole number of at least 1,
            or not a size the lab prices for the run's model (the allowed sizes are listed).
    """
    tp = run.engine_int("tensor_parallel_size", 1)
    allowed = tensor_parallel_sizes(model)
    if tp in allowed:
        return tp
    c = model.config
    refused = (f"vLLM itself refuses it, as its {c.heads} attention heads do not split evenly over {tp:,} GPUs; "
               if c.heads and c.heads % tp else
               f"vLLM would copy {c.short}'s {c.kv_heads} KV heads onto several GPUs, which this lab does not model; ")
    raise FieldError("tensor_parallel_size", f" = {tp:,} is not a tensor-parallel size the lab can price for "
                     f"{c.short}: {refused}set it to the size the run used, one of "
                     f"{', '.join(map(str, allowed))}", subject="meta.json: engine_kwargs.tensor_parallel_size")


def kv_cache_dtype(run: VllmRun) -> str:
    """meta.json's ``engine_kwargs.kv_cache_dtype`` ("auto" when absent or null), once it is one a replay
    can price (:data:`PRICED_KV_CACHE_DTYPES`).

    Raises:
        FieldError (``meta.json: engine_kwargs.kv_cache_dtype``): not one of vLLM's values
            (:data:`VLLM_KV_CACHE_DTYPES`, listed), or an fp8 one, which the lab cannot price.
    """
    value = run.engine.get("kv_cache_dtype")
    if value is None:
        return "auto"
    subject = "meta.json: engine_kwargs.kv_cache_dtype"
    if not isinstance(value, str) or value not in VLLM_KV_CACHE_DTYPES:
        raise FieldError("kv_cache_dtype", f" = {json_shown(value)} is not a KV-cache dtype vLLM knows; it takes one "
                         f"of {', '.join(VLLM_KV_CACHE_DTYPES)}", subject=subject)
    if value not in PRICED_KV_CACHE_DTYPES:
        raise FieldError("kv_cache_dtype", f" = {json_shown(value)}: the lab prices a KV cache in the model's own "
                         f"2-byte values only ({' or '.join(PRICED_KV_CACHE_DTYPES)}); an fp8 cache holds 1 byte a value, "
                         "which changes the pool's size and attention's reads, and neither is modelled here",
                         subject=subject)
    return value


def model_len(run: VllmRun, model: ServedModel) -> int:
    """The run's ``max_model_len`` (tokens): meta.json's ``engine_kwargs.max_model_len``, or, when it is
    absent or null, the model's context window, which vLLM then derives from the model's config.

    Raises:
        FieldError (``meta.json: engine_kwargs.max_model_len``): not a whole number from 1 to the model's
            context window (vLLM refuses a longer one unless told to override it).
    """
    context = model.config.max_context
    return run.engine_int("max_model_len", context,
                          Limit(1, context, unit=f"tokens: {model.config.short}'s context window"))


def check_model_len(run: VllmRun, model: ServedModel) -> int:
    """:func:`model_len`, once every request of the run fits it: vLLM refuses a prompt longer than
    ``max_model_len`` and stops a request when its prompt and output together reach it
    (vllm/v1/core/sched/utils.py, ``check_stop``), so a measured request with more tokens could not
    have run under these settings.

    Raises:
        FieldError (the request's line in requests.jsonl): the first such request in the file, with its
            tokens and max_model_len; as :func:`model_len`.
    """
    limit = model_len(run, model)
    total = run.prompt + run.output
    bad = np.flatnonzero(total > limit)
    if not len(bad):
        return limit
    i = int(bad[np.argmin(run.lines[bad])]) if run.lines is not None else int(bad[0])
    p, o = int(run.prompt[i]), int(run.output[i])
    if run.engine.get("max_model_len") is not None:
        where, fix = "meta.json's engine_kwargs", "set max_model_len in meta.json to the value the run used"
    else:
        where = (f"{model.config.short}'s context window, which vLLM takes when meta.json does not set "
                 "max_model_len")
        fix = "its token counts are damaged, or the run served another model"
    if p > limit:
        problem = f"input_toks = {p:,} is more than max_model_len = {limit:,} ({where}): vLLM refuses a longer prompt"
    else:
        problem = (f"input_toks + output_toks = {p:,} + {o:,} = {p + o:,} tokens, more than max_model_len = {limit:,} "
                   f"({where}): vLLM stops a request when its prompt and output reach max_model_len")
    raise FieldError("max_model_len", f": {problem}, so this request cannot have run under these settings; {fix}",
                     subject=run.request_label(i))


def check_pool(run: VllmRun, block_size: int, num_blocks: int, source: str) -> None:
    """Refuse a run whose longest request can never fit the KV pool: a sequence of prompt + output tokens
    needs ceil(tokens / block_size) blocks at its longest (the engine's own test,
    :func:`allocator.memory.paged.too_long_for_pool`), and vLLM would have refused it too.

    Args:
        source: "run" (meta.json's num_gpu_blocks) or "derived" (:func:`kv_pool_blocks`).

    Raises:
        FieldError (the request's line in requests.jsonl): the first such request in the file, with its
            tokens, the blocks it needs and the pool's, all with thousands separators.
    """
    total = run.prompt + run.output
    need = -(-total // block_size)
    bad = np.flatnonzero(need > num_blocks)
    if not len(bad):
        return
    i = int(bad[np.argmin(run.lines[bad])]) if run.lines is not None else int(bad[0])
    p, o = int(run.prompt[i]), int(run.output[i])
    pool = ("meta.json's kv_cache.num_gpu_blocks" if source == "run"
            else "derived from the GPU's memory as vLLM sizes it")
    raise FieldError("requests", f": input_toks + output_toks = {p:,} + {o:,} = {p + o:,} tokens need {int(need[i]):,} "
                     f"blocks of {block_size} slots at their longest, but the KV pool has only {num_blocks:,} blocks "
                     f"({pool})", subject=run.request_label(i))


def default_notes(run: VllmRun, max_num_seqs: int | None = None, max_num_batched_tokens: int | None = None) -> tuple:
    """One line for each batching setting the run left to vLLM's default (absent or null in meta.json,
    and not overridden): vLLM then picks it by entry point and GPU (``EngineArgs.get_batch_defaults``;
    see :data:`allocator.engine.v1.V1_DEFAULT_MAX_NUM_BATCHED_TOKENS`), which the run folder does not
    record, so the replay takes the default of ``vllm serve`` on a GPU under 70 GiB and says so.
    Returns a tuple of sentences (empty when the run sets both)."""
    notes = []
    for key, override, default, others in (
            ("max_num_batched_tokens", max_num_batched_tokens, V1_DEFAULT_MAX_NUM_BATCHED_TOKENS, "8,192 or 16,384"),
            ("max_num_seqs", max_num_seqs, V1_DEFAULT_MAX_NUM_SEQS, "1,024")):
        if override is None and run.engine.get(key) is None:
            notes.append(f"meta.json's engine_kwargs.{key} is not set, so the replay takes vLLM's default of "
                         f"{default:,} (vllm serve on a GPU under 70 GiB; vLLM picks {others} on a larger GPU or for "
                         f"the offline LLM class): set it in meta.json to the value the run used to replay it as it ran")
    return tuple(notes)


def step_cost(run: VllmRun, gpu, model: ServedModel, tp: int, cost_model: str = "roofline",
              efficiency: Efficiency = CALIBRATED, *, dp: int = 1, ep: bool = False):
    """The step cost model a replay runs on its seconds clock.

    Raises:
        FieldError (``cost_model``): not one of :data:`COST_MODELS`, or no profile bundle for the run's
            GPU, model, dtype and tensor parallelism (from :class:`allocator.cost.profile.ProfileCost`).
    """
    if cost_model == "roofline":
        return CalibratedCost(gpu, model, tp, efficiency, dp=dp, ep=ep)
    if cost_model == "profile":
        dtype = run.engine.get("dtype")
        variant = VARIANTS.get(dtype if isinstance(dtype, str) or dtype is None else "?")
        if variant is None:
            raise FieldError("dtype", f" = {dtype!r}: no profile variant for this dtype",
                             subject="meta.json: engine_kwargs.dtype")
        return ProfileCost(gpu, model, tp, variant=variant, dp=dp, ep=ep)
    raise FieldError("cost_model", f" = {cost_model!r} is not a cost model; one of {', '.join(COST_MODELS)}")


def best_cost_model(run: VllmRun, gpu: str | None = None) -> str:
    """"profile" when the lab holds an operator profile of the run's GPU, model and tensor
    parallelism, else "roofline" (the one the lab can always price a known model with).

    Raises:
        FieldError: as :func:`served_model`, :func:`check_priceable` and
            :func:`allocator.cost.calibration.gpu_for`.
    """
    g, m = gpu_for(gpu, run.hardware, run.name), served_model(run)
    tp = check_priceable(run, m)
    dp, ep = parallelism(run)
    try:
        ProfileCost(g, m, tp, dp=dp, ep=ep)
    except FieldError:
        return "roofline"
    return "profile"


def compare_cost_models(run: VllmRun, gpu: str | None = None, model: str | None = None, **kwargs) -> dict:
    """The run replayed under each cost model: {name: :class:`Replay`, or the one-line reason it
    could not be priced (str)}, in :data:`COST_MODELS` order. ``kwargs`` go to :func:`replay`."""
    out = {}
    for name in COST_MODELS:
        try:
            out[name] = replay(run, gpu, model, cost_model=name, **kwargs)
        except FieldError as exc:
            if name == "roofline":
                raise
            out[name] = str(exc)
    return out


def replay_zip(data: bytes, name: str = "upload.zip") -> dict:
    """A run folder uploaded as a zip, read (:func:`allocator.workloads.vllm_run.load_run_zip`:
    bounded, never extracted to disk) and replayed under each cost model
    (:func:`compare_cost_models`): {name: :class:`Replay`, or the reason it was refused (str)}.

    Raises:
        FieldError: the zip or its files damaged or out of bounds, or a run the roofline cannot
            price (its model, GPU or parallelism); the message is one line.
    """
    return compare_cost_models(load_run_zip(data, name))


__all__ = ["Replay", "replay_zip", "replay", "held_out_check", "rules_for", "FIGURES", "STATS", "REPLAY_GPUS", "COST_MODELS", "series_ticks",
           "served_model", "check_priceable", "parallelism", "assign_ranks", "DP_STATS_INTERVAL_S", "MAX_DP_ROUNDS",
           "step_cost", "best_cost_model", "compare_cost_models", "CALIBRATIONS", "roofline_efficiency",
           "tensor_parallel", "tensor_parallel_sizes", "kv_cache_dtype", "model_len", "check_model_len", "check_pool",
           "default_notes", "VLLM_KV_CACHE_DTYPES", "PRICED_KV_CACHE_DTYPES"]
