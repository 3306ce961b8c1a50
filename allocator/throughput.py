"""Throughput at equal latency: a request-rate sweep of the paper's four allocators.

The PagedAttention paper's headline (Kwon et al., SOSP 2023, section 6.2, Figure 12) is the
request rate a system sustains before its latency runs away: on ShareGPT requests, over OPT-13B,
OPT-66B and OPT-175B together, vLLM sustained 1.7-2.7x the rate of Orca (Oracle) and 2.7-8x that
of Orca (Max); for OPT-13B on one A100 alone the paper states batch sizes 2.2x and 4.3x theirs
(Figure 13). This module runs the same kind of experiment on this project's engine and cost model
(:mod:`allocator.paper` runs the paper's own configuration):

1. :func:`poisson_workload`: ``n`` requests whose (prompt, output) lengths are drawn, with a seed,
   from a trace's rows that fit the model's context window, arriving as a Poisson process of
   ``rate`` requests per second (exponential gaps; the same draws at every rate, so the rates
   differ only in their clock: common random numbers).
2. :func:`rate_sweep`: every policy -- reservation ``max``, ``pow2``, ``oracle`` and ``paged`` --
   at every rate, each run on the seconds clock (``engine.simulate(clock=...)``: a step lasts
   what :mod:`allocator.timing` says), on the KV pool the GPU has left after the weights
   (:meth:`allocator.timing.CostModel.pool_slots`).
3. :func:`sustained_rate`: the rate at which a policy's normalised latency (mean end-to-end
   latency / output length, the paper's metric, s/token) crosses a budget. The budget is
   ``latency_factor`` (5 by default) x the **unloaded** normalised latency: each request served
   alone on the same GPU (:func:`unloaded_latency`), so the budget means the same on a fast and
   a slow GPU. Between two swept rates the crossing is interpolated linearly in the rate against
   the logarithm of the latency (latency climbs roughly exponentially near saturation) -- but only
   where the grid is fine enough: when the upper of the two rates is more than
   :data:`INTERPOLATION_SPAN` (1.5) x the lower, the knee could lie anywhere between them, so the
   sustained rate is reported as that bracket ("between 0.2 and 500 requests/s"), not as a number.
   :func:`rate_ratio` then states a ratio only as far as the brackets support it.

The paper's figures are quoted in :data:`PAPER` as the paper's; nothing here is fitted to them.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import numpy as np

from .allocators import RESERVATION_POLICIES, PagedAllocator, ReserveMaxAllocator
from .engine import simulate
from .limits import check
from .timing import CostModel, price
from .trace import shipped_trace
from .validate import FieldError, number_from_text, one_of, show
from .workload import Request, Workload

#: The four allocators of the sweep, in the order the paper draws them (its names beside ours).
POLICIES = ("max", "pow2", "oracle", "paged")
POLICY_LABELS = {"max": "Reserve-max", "pow2": "Reserve-pow2", "oracle": "Reserve-oracle", "paged": "Paged"}
PAPER_NAMES = {"max": "Orca (Max)", "pow2": "Orca (Pow2)", "oracle": "Orca (Oracle)", "paged": "vLLM"}

#: The PagedAttention paper's figures this page sets beside ours, labelled as the paper's.
#: Source: Kwon et al., "Efficient Memory Management for Large Language Model Serving with
#: PagedAttention", SOSP 2023: Figure 2 (average share of KV-cache memory holding token states,
#: OPT-13B on one A100, ShareGPT) and section 6.2 (request rates sustained at similar latency on
#: ShareGPT: ranges over OPT-13B, OPT-66B and OPT-175B together, not OPT-13B's own; for OPT-13B the
#: section states the batch ratios of Figure 13).
PAPER = {
    "token_state_share": {"max": 0.204, "pow2": 0.268, "oracle": 0.382, "paged": 0.963},
    "rate_ratio_vs_oracle": (1.7, 2.7),
    "rate_ratio_vs_max": (2.7, 8.0),
    "rate_ratio_models": "OPT-13B, OPT-66B and OPT-175B together",
    "batch_ratio_opt13b": {"oracle": 2.2, "max": 4.3},
    "setup": "OPT-13B on one NVIDIA A100, ShareGPT requests",
}

#: Defaults of the sweep (the ``rate-sweep`` command and the page).
DEFAULT_REQUESTS = 1000
DEFAULT_BLOCK_SIZE = 16
DEFAULT_MAX_NEW = 1024
DEFAULT_LATENCY_FACTOR = 5.0
DEFAULT_SEED = 0
#: Rates of the default grid, as multiples of the paged allocator's saturation rate (see
#: :func:`default_rates`): dense around the knees of the four curves.
RATE_GRID = (0.2, 0.35, 0.5, 0.65, 0.8, 0.95, 1.1, 1.4)
#: The coarsest step between two swept rates across which a sustained rate is interpolated: the
#: upper rate at most this many times the lower. Across a wider step the crossing is reported as a
#: bracket (between the two rates). The default grid (:data:`RATE_GRID`) is finer above its first
#: step; the paper replication's rates (allocator.paper) step by at most 1.5x where its knees lie.
INTERPOLATION_SPAN = 1.5
#: The widest range (high / low) a ratio of two bracketed sustained rates is stated as; wider, or a
#: range that includes 1 (the grid cannot tell which sustains more), and no ratio is stated.
RATIO_RANGE_SPAN = 4.0
MAX_RATES = 16
#: Named workloads a sweep draws its lengths from, and how texts name them.
SWEEP_WORKLOADS = {"azure-conv": "Azure conversation lengths",
                   "sharegpt-opt": "ShareGPT lengths (the PagedAttention paper's)"}
#: The generation cap of a sweep on each workload (tokens): the paper's ShareGPT lengths run up to
#: OPT's 2,048-token context and are never clipped.
SWEEP_MAX_NEW = {"azure-conv": DEFAULT_MAX_NEW, "sharegpt-opt": 2048}


def workload_trace(workload: str):
    """The lengths a sweep draws from: the shipped Azure trace or the paper's ShareGPT pairs.

    Raises:
        FieldError (``workload``): not a key of :data:`SWEEP_WORKLOADS`.
    """
    one_of("workload", workload, tuple(SWEEP_WORKLOADS))
    if workload == "sharegpt-opt":
        from .sharegpt import sharegpt_lengths
        return sharegpt_lengths()
    return shipped_trace()


def poisson_workload(rate: float, n: int = DEFAULT_REQUESTS, *, seed: int = DEFAULT_SEED, max_context: int,
                     max_new_tokens: int = DEFAULT_MAX_NEW, trace=None, name: str | None = None) -> Workload:
    """``n`` requests with trace lengths arriving as a Poisson process of ``rate`` requests/s.

    Args:
        rate: mean arrivals per second (``LIMITS["rates"]``: more than 0, at most 1,000,000).
        n: number of requests (``LIMITS["requests"]``: 1 .. 20,000).
        seed: the draws (which rows, which gaps) depend only on it and ``n``, not on ``rate``.
        max_context: the model's context window (tokens): only rows with prompt + output <= it
            are drawn (a longer request could not run on the model at all).
        max_new_tokens: the generation cap (tokens); outputs above it are clipped to it.
        trace: a DataFrame from :func:`allocator.trace.load_trace` (default: the shipped Azure
            conversation trace).
        name: the workload's label (default ``"poisson <rate>/s"``).

    Returns:
        Workload: request i arrives at ``arrival_s`` = (sum of the first i - 1 unit exponential
        gaps) / rate, the first at 0 s.

    Raises:
        FieldError: a bad ``rate``, ``n``, ``seed``, ``max_context`` or ``max_new_tokens``, or no
            trace row that fits the context window (``max_context``).
    """
    rate = check("rates", rate, subject="rate")
    n = check("requests", n)
    seed = check("seed", seed)
    max_context = check("max_context", max_context)
    max_new_tokens = check("max_new_tokens", max_new_tokens)
    prompts, outputs, unit = _draws(n, seed, max_context, max_new_tokens, trace)
    arrivals = unit / rate
    reqs = tuple(Request(i + 1, int(p), int(o), 0, float(a))
                 for i, (p, o, a) in enumerate(zip(prompts.tolist(), outputs.tolist(), arrivals.tolist())))
    return Workload(name or f"poisson {rate:g}/s", reqs, max_new_tokens,
                    params=dict(rate=rate, requests=n, seed=seed, max_context=max_context,
                                max_new_tokens=max_new_tokens))


def _draws(n, seed, max_context, max_new_tokens, trace):
    """(prompts, outputs, unit-rate arrival times) for :func:`poisson_workload`."""
    df = shipped_trace() if trace is None else trace
    p_all = df["prompt_tokens"].to_numpy()
    o_all = np.minimum(df["output_tokens"].to_numpy(), max_new_tokens)
    fits = np.flatnonzero(p_all + o_all <= max_context)
    if not len(fits):
        raise FieldError("max_context", f" = {max_context}: no trace row fits the model's context window")
    rng = np.random.default_rng(seed)
    rows = fits[rng.integers(0, len(fits), size=n)]
    gaps = rng.exponential(1.0, size=n)
    unit = np.cumsum(gaps) - gaps[0]
    return p_all[rows], o_all[rows], unit


def make_allocator(policy: str, pool_slots: int, max_new_tokens: int, block_size: int = DEFAULT_BLOCK_SIZE,
                   preemption: str = "recompute"):
    """The allocator of one policy: a reservation policy (``max``, ``pow2``, ``oracle``) or ``paged``.

    Raises:
        FieldError: an unknown ``policy`` or a bad size.
    """
    one_of("policy", policy, POLICIES)
    if policy == "paged":
        return PagedAllocator(pool_slots, block_size, preemption=preemption)
    return ReserveMaxAllocator(pool_slots, max_new_tokens, policy)


def unloaded_latency(workload: Workload, cost: CostModel) -> float:
    """Mean normalised latency (s/token) when every request is served alone, as the engine would
    serve it on an empty GPU: one prefill step of its prompt (emitting the first token), then one
    decode step per further token, attending to every token it holds.

    This is the floor a policy's curve starts from at low rates; the sustained-rate budget is a
    multiple of it. Vectorised over the requests' decode steps (tokens: at most ``output_len``
    per request).
    """
    lin, att, w, kv, over = cost._k
    total = 0.0
    for r in workload.requests:
        p, o = r.prompt_len, r.output_len
        prefill = max(lin * p + att * p * (p + 1) / 2, w + kv * p) + over
        held = p + 1 + np.arange(1, o, dtype=float)            # tokens held after each decode step
        decode = np.maximum(lin + att * held, w + kv * (held + 1)) + over
        total += (prefill + float(decode.sum())) / o
    return total / len(workload)


def saturation_rate(cost: CostModel, n: int = DEFAULT_REQUESTS, *, seed: int = DEFAULT_SEED,
                    block_size: int = DEFAULT_BLOCK_SIZE, max_new_tokens: int = DEFAULT_MAX_NEW, trace=None,
                    pool_slots: int | None = None) -> float:
    """Requests per second the paged allocator finishes when every request arrives at once (its
    throughput at saturation): the scale of the default rate grid."""
    w = poisson_workload(1.0, n, seed=seed, max_context=cost.model.max_context, max_new_tokens=max_new_tokens,
                         trace=trace)
    burst = Workload("burst", tuple(Request(r.id, r.prompt_len, r.output_len, 0, 0.0) for r in w.requests),
                     w.max_new_tokens)
    pool = pool_slots or cost.pool_slots()
    res = simulate(burst, PagedAllocator(pool, block_size), record_snapshots=False,
                   clock=cost.for_blocks(block_size))
    timing = price(res, cost)
    return timing.summary["throughput_requests_per_s"] or 1.0


def default_rates(cost: CostModel, **kwargs) -> tuple[float, ...]:
    """Eight rates (requests/s) spread around the knees of the curves: :data:`RATE_GRID` x the
    paged allocator's saturation rate (:func:`saturation_rate`), to two significant figures."""
    sat = saturation_rate(cost, **kwargs)
    return tuple(float(f"{g * sat:.2g}") for g in RATE_GRID)


def parse_rates(text) -> tuple[float, ...]:
    """Rates from ``"0.5,1,2"`` (or a list): positive finite numbers, ascending, distinct, at most
    16 (requests per second).

    Raises:
        FieldError (``rates``): an entry that is not a positive number (``.index`` its position),
            none at all, too many, or a repeat.
    """
    if isinstance(text, str):
        parts = [p.strip() for p in text.replace(";", ",").split(",") if p.strip()]
    else:
        parts = list(text)
    if not parts:
        raise FieldError("rates", " is empty: give at least one request rate (requests per second)")
    if len(parts) > MAX_RATES:
        raise FieldError("rates", f" has {len(parts)} entries; at most {MAX_RATES} are swept")
    rates = []
    for i, p in enumerate(parts):
        value = number_from_text(p)          # a 5,000-digit entry stays a (too large) number, not inf
        if isinstance(value, str) or not isinstance(value, (int, float)):
            raise FieldError("rates", f" = {show(p)} is not a number", index=i) from None
        rates.append(float(check("rates", value, index=i)))
    rates = sorted(rates)
    if len(set(rates)) != len(rates):
        raise FieldError("rates", ": a rate appears twice")
    return tuple(rates)


@dataclass
class RateSweep:
    """What :func:`rate_sweep` returns.

    Attributes:
        cost: the cost model (GPU, model, GPU count).
        rates: the swept rates (requests/s, ascending); ``policies`` in :data:`POLICIES` order.
        pool_slots: the KV pool every run shared (slots); ``block_size`` the paged block size.
        requests, seed, max_new_tokens: the workload's size, seed and generation cap.
        latency_factor: the budget's multiple of ``unloaded_s_per_token``.
        unloaded_s_per_token: :func:`unloaded_latency` of the workload (s/token).
        points: {(policy, rate): summary} -- :func:`allocator.timing.timing_summary` plus
            ``preemptions``, ``rejected`` (count), ``mean_utilization_busy`` and
            ``mean_running_busy`` (per step, over steps when requests waited; None if none did)
            and ``peak_running``.
        mean_prompt, mean_output: the workload's mean prompt and output lengths (tokens).
        workload: the lengths' source, a key of :data:`SWEEP_WORKLOADS`.
        latencies: {(policy, rate): {"ttft_s", "tpot_s", "e2e_s"}} per finished request (arrays).
        sustained: {policy: {"rate": float or None, "bound": "within" | "between" | "above" | "below"}}: the
            interpolated rate where the policy's normalised latency crosses the budget; "above"
            when it never crosses (the rate is then the highest swept, a lower bound), "below"
            when it is over the budget already at the lowest rate (rate None), "between" (rate
            None, "low" and "high" the two rates) when the crossing lies across a step of the grid
            too wide to interpolate (:data:`INTERPOLATION_SPAN`).
    """

    cost: CostModel
    rates: tuple
    policies: tuple
    pool_slots: int
    block_size: int
    requests: int
    seed: int
    max_new_tokens: int
    latency_factor: float
    unloaded_s_per_token: float
    mean_prompt: float = 0.0
    mean_output: float = 0.0
    workload: str = "azure-conv"
    points: dict = field(default_factory=dict)
    latencies: dict = field(default_factory=dict)
    sustained: dict = field(default_factory=dict)

    @property
    def budget_s_per_token(self) -> float:
        """The normalised-latency budget (s/token): latency_factor x unloaded latency."""
        return self.latency_factor * self.unloaded_s_per_token

    def curve(self, policy: str, key: str = "normalized_latency_s_per_token") -> list:
        """``key`` of ``policy``'s summary at every rate (None where it does not exist)."""
        return [self.points[(policy, r)].get(key) for r in self.rates]

    def ratio(self, a: str = "paged", b: str = "max") -> dict | None:
        """Sustained rate of ``a`` over that of ``b``: :func:`rate_ratio` of the two."""
        return rate_ratio(self.sustained[a], self.sustained[b])


def _interval(s: dict) -> tuple[float, float] | None:
    """The rates (low, high) a sustained rate is known to lie in; None when below the sweep."""
    if s["bound"] == "within":
        return s["rate"], s["rate"]
    if s["bound"] == "above":
        return s["rate"], math.inf
    if s["bound"] == "between":
        return s["low"], s["high"]
    return None


def rate_ratio(sa: dict, sb: dict) -> dict | None:
    """The ratio of two sustained rates (:func:`sustained_rate`'s dicts), as far as they support it.

    Returns:
        {"value": a / b, "kind": "exact"} when both crossed the budget at an interpolated rate;
        {"value", "kind": "at least"} or {"value", "kind": "at most"} when one side is a bound (``a``
        never over the budget: a / b is at least top / b's highest possible rate; ``b`` never over:
        at most); {"value": None, "kind": "between", "low", "high"} when a bracket leaves a range
        no wider than :data:`RATIO_RANGE_SPAN` that does not include 1; None when no ratio can be
        stated (either was over the budget at its lowest rate, neither crossed it, or the brackets
        leave too wide a range).
    """
    ia, ib = _interval(sa), _interval(sb)
    if ia is None or ib is None:
        return None
    if sa["bound"] == "above" and sb["bound"] == "above":
        return None
    lo = ia[0] / ib[1]
    hi = ia[1] / ib[0]
    if lo == hi:
        return {"value": lo, "kind": "exact"}
    if math.isinf(hi):
        return {"value": lo, "kind": "at least"}
    if lo == 0:
        return {"value": hi, "kind": "at most"}
    if hi / lo <= RATIO_RANGE_SPAN and not lo <= 1 <= hi:
        return {"value": None, "kind": "between", "low": lo, "high": hi}
    return None


def sustained_rate(rates, latencies, budget: float) -> dict:
    """Where a latency curve crosses ``budget`` (see the module docstring).

    Args:
        rates: ascending rates (requests/s).
        latencies: normalised latency at each rate (s/token; None counts as over budget: nothing
            finished).
        budget: s/token.

    Returns:
        {"rate": r, "bound": "within"} with r interpolated between the last rate under budget and
        the next (linear in rate, logarithmic in latency) when the next is at most
        :data:`INTERPOLATION_SPAN` x the last; {"rate": None, "bound": "between", "low": last,
        "high": next} when the step is wider (or the next rate finished nothing, so there is
        nothing to interpolate towards); {"rate": highest rate, "bound": "above"} if no rate went
        over; {"rate": None, "bound": "below"} if the lowest already did.
    """
    lat = [math.inf if v is None else v for v in latencies]
    over = [v > budget for v in lat]
    if not any(over):
        return {"rate": float(rates[-1]), "bound": "above"}
    k = over.index(True)
    if k == 0:
        return {"rate": None, "bound": "below"}
    r0, r1, l0, l1 = rates[k - 1], rates[k], lat[k - 1], lat[k]
    if r1 > INTERPOLATION_SPAN * r0 or not math.isfinite(l1) or l0 <= 0:
        return {"rate": None, "bound": "between", "low": float(r0), "high": float(r1)}
    frac = (math.log(budget) - math.log(l0)) / (math.log(l1) - math.log(l0))
    return {"rate": float(r0 + frac * (r1 - r0)), "bound": "within"}


def sustained_short(s: dict, digits: int = 2) -> str:
    """A sustained rate (:func:`sustained_rate`'s dict) for a terminal table: ``"1.81"``
    (interpolated, ``digits`` decimals), ``"4.00+"`` (never over the budget: a lower bound),
    ``"0.2-500"`` (a bracket, the two swept rates as given) or ``"below the lowest rate"``."""
    if s["bound"] == "between":
        return f"{s['low']:g}-{s['high']:g}"
    if s["rate"] is None:
        return "below the lowest rate"
    return f"{s['rate']:.{digits}f}" + ("+" if s["bound"] == "above" else "")


def rate_sweep(cost: CostModel, rates=None, *, policies=POLICIES, requests: int = DEFAULT_REQUESTS,
               seed: int = DEFAULT_SEED, block_size: int = DEFAULT_BLOCK_SIZE,
               max_new_tokens: int = DEFAULT_MAX_NEW, latency_factor: float = DEFAULT_LATENCY_FACTOR,
               pool_slots: int | None = None, trace=None, progress=None, workload: str = "azure-conv") -> RateSweep:
    """Run every policy at every rate on the seconds clock (see the module docstring).

    Args:
        cost: the GPU and model (:func:`allocator.timing.cost_model`).
        rates: request rates (requests/s), parsed by :func:`parse_rates`; None: :func:`default_rates`.
        policies: a subset of :data:`POLICIES` (the paper's four by default).
        requests, seed, max_new_tokens: see :func:`poisson_workload`.
        block_size: the paged allocator's block size (slots).
        latency_factor: the sustained-rate budget as a multiple of the unloaded latency (> 1).
        pool_slots: the KV pool (slots); None: what the GPU has left after the weights.
        trace: lengths to draw from (default: those of ``workload``).
        workload: the named lengths, "azure-conv" (default) or "sharegpt-opt" (:data:`SWEEP_WORKLOADS`).
        progress: called as ``progress(done, total, text)`` after each run (a page's progress bar).

    Raises:
        FieldError: a bad rate list (``rates``), policy, size, factor or GPU/model combination.
    """
    # every setting is checked before anything runs
    requests, seed = check("requests", requests), check("seed", seed)
    max_new_tokens = check("max_new_tokens", max_new_tokens)
    latency_factor = check("latency_factor", latency_factor)
    block_size = check("block_size", block_size)
    policies = tuple(one_of("policy", p, POLICIES) for p in policies)
    if trace is None:
        trace = workload_trace(workload)
    if not policies:
        raise FieldError("policies", " is empty: choose at least one allocator")
    pool = check("total_slots", pool_slots, subject="pool_slots") if pool_slots is not None else cost.pool_slots()
    if block_size > pool:
        raise FieldError("block_size", f" = {block_size} is larger than the KV pool ({pool:,} slots)")
    rates = parse_rates(rates) if rates is not None else default_rates(
        cost, n=requests, seed=seed, block_size=block_size, max_new_tokens=max_new_tokens, trace=trace,
        pool_slots=pool)
    base = poisson_workload(1.0, requests, seed=seed, max_context=cost.model.max_context,
                            max_new_tokens=max_new_tokens, trace=trace)
    sweep = RateSweep(cost=cost, rates=rates, policies=policies, pool_slots=pool, block_size=block_size,
                      requests=len(base), seed=seed, max_new_tokens=max_new_tokens, latency_factor=latency_factor,
                      unloaded_s_per_token=unloaded_latency(base, cost),
                      mean_prompt=float(np.mean([r.prompt_len for r in base.requests])),
                      mean_output=float(np.mean([r.output_len for r in base.requests])), workload=workload)
    total, done = len(rates) * len(policies), 0
    for rate in rates:
        w = Workload(f"poisson {rate:g}/s", tuple(Request(r.id, r.prompt_len, r.output_len, 0, r.arrival_s / rate)
                                                 for r in base.requests), base.max_new_tokens)
        for policy in policies:
            alloc = make_allocator(policy, pool, max_new_tokens, block_size)
            res = simulate(w, alloc, record_snapshots=False, clock=cost.for_blocks(alloc.block_size))
            timing = price(res, cost)
            s = dict(timing.summary)
            run = res.summary
            s.update(preemptions=run.preemptions, rejected=len(res.rejected),
                     mean_utilization_busy=run.mean_utilization_busy, mean_running_busy=run.mean_running_busy,
                     peak_running=run.peak_running, policy=policy, rate=rate)
            sweep.points[(policy, rate)] = s
            sweep.latencies[(policy, rate)] = {k: timing.requests[k] for k in ("ttft_s", "tpot_s", "e2e_s")}
            done += 1
            if progress is not None:
                progress(done, total, f"{POLICY_LABELS[policy]} at {rate:g} requests/s")
    for policy in policies:
        sweep.sustained[policy] = sustained_rate(rates, sweep.curve(policy), sweep.budget_s_per_token)
    return sweep


def with_latency_factor(sweep: RateSweep, latency_factor: float) -> RateSweep:
    """The same runs judged against another budget: a copy of ``sweep`` whose ``latency_factor``
    and ``sustained`` rates follow ``latency_factor`` (the runs do not depend on it).

    Raises:
        FieldError (``latency_factor``): not a number above 1 (at most 1,000).
    """
    latency_factor = check("latency_factor", latency_factor)
    out = replace(sweep, latency_factor=latency_factor, sustained={})
    for policy in out.policies:
        out.sustained[policy] = sustained_rate(out.rates, out.curve(policy), out.budget_s_per_token)
    return out


def default_rate(sweep: RateSweep) -> float:
    """The swept rate a page shows first: the highest at which paged stays within the budget (where
    the contrast with the reservation policies is sharpest), else the middle one."""
    s = sweep.sustained.get("paged")
    top = None if not s else s["low"] if s["bound"] == "between" else s["rate"]
    if top is not None:
        ok = [r for r in sweep.rates if r <= top]
        if ok:
            return ok[-1]
    return sweep.rates[len(sweep.rates) // 2]


def memory_basis(sweep: RateSweep, rate: float) -> tuple[str, str]:
    """Which average of the KV token share compares the policies at ``rate`` on one basis:
    ("kv_token_share_waiting", "while requests waited") if every policy had waiting requests,
    else ("kv_token_share_busy", "over the busy seconds")."""
    if all(sweep.points[(p, rate)]["kv_token_share_waiting"] is not None for p in sweep.policies):
        return "kv_token_share_waiting", "while requests waited"
    return "kv_token_share_busy", "over the busy seconds"


__all__ = ["POLICIES", "POLICY_LABELS", "PAPER_NAMES", "PAPER", "RATE_GRID", "RESERVATION_POLICIES",
           "poisson_workload", "make_allocator", "unloaded_latency", "saturation_rate", "default_rates",
           "parse_rates", "RateSweep", "sustained_rate", "sustained_short", "rate_ratio", "INTERPOLATION_SPAN",
           "RATIO_RANGE_SPAN", "rate_sweep", "with_latency_factor", "default_rate",
           "memory_basis"]
