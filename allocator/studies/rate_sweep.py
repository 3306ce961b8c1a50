"""Throughput at equal latency: a request-rate sweep of the paper's four allocators.

The PagedAttention paper's headline (Kwon et al., SOSP 2023, section 6.2, Figure 12) is the
request rate a system sustains before its latency runs away: on ShareGPT requests, over OPT-13B,
OPT-66B and OPT-175B together, vLLM sustained 1.7-2.7x the rate of Orca (Oracle) and 2.7-8x that
of Orca (Max); for OPT-13B on one A100 alone the paper states batch sizes 2.2x and 4.3x theirs
(Figure 13). This module runs the same kind of experiment on this project's engine and cost model
(:mod:`allocator.studies.paper` runs the paper's own configuration), in three parts:

1. the workload (:mod:`allocator.workloads.poisson`, :func:`poisson_workload`): ``n`` requests with a
   trace's lengths arriving as a Poisson process of ``rate`` requests per second, the same draws
   at every rate;
2. the sweep (this module, :func:`rate_sweep`): every policy -- reservation ``max``, ``pow2``,
   ``oracle`` and ``paged`` -- at every rate, each run on the seconds clock
   (``engine.simulate(clock=...)``: a step lasts what :mod:`allocator.cost.timing` says), on the KV
   pool the GPU has left after the weights (:meth:`allocator.cost.timing.CostModel.pool_slots`);
3. the sustained rates (:mod:`allocator.studies.sustained`, :func:`sustained_rate`): the rate at which a
   policy's normalised latency (mean end-to-end latency / output length, the paper's metric,
   s/token) crosses a budget, interpolated only where the grid is fine enough, else a bracket;
   :func:`rate_ratio` states a ratio only as far as the brackets support it. The budget is
   ``latency_factor`` (5 by default) x the **unloaded** normalised latency: each request served
   alone on the same GPU (:func:`unloaded_latency`), so the budget means the same on a fast and
   a slow GPU.

The names of :mod:`allocator.workloads.poisson` and :mod:`allocator.studies.sustained` are importable from here too.
The paper's figures are quoted in :data:`PAPER` as the paper's; nothing here is fitted to them.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from allocator.memory.reserve_max import RESERVATION_POLICIES, ReserveMaxAllocator
from allocator.memory.paged import PagedAllocator
from allocator.engine.simulate import simulate
from allocator.common.limits import check
from allocator.workloads.poisson import (DEFAULT_MAX_NEW, DEFAULT_REQUESTS, DEFAULT_SEED, SWEEP_MAX_NEW,
                                         SWEEP_WORKLOADS, check_reach, poisson_workload,
                                         workload_trace)
from allocator.studies.sustained import INTERPOLATION_SPAN, RATIO_RANGE_SPAN, rate_ratio, sustained_rate, sustained_short
from allocator.cost.roofline import CostModel
from allocator.cost.timing import price
from allocator.common.errors import FieldError
from allocator.common.validate import number_from_text, one_of
from allocator.workloads.requests import Request, Workload

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

#: Defaults of the sweep (the ``rate-sweep`` command and the page); the workload's own defaults
#: (requests, generation cap, seed) are :mod:`allocator.workloads.poisson`'s.
DEFAULT_BLOCK_SIZE = 16
DEFAULT_LATENCY_FACTOR = 5.0
#: Rates of the default grid, as multiples of the paged allocator's saturation rate (see
#: :func:`default_rates`): dense around the knees of the four curves.
RATE_GRID = (0.2, 0.35, 0.5, 0.65, 0.8, 0.95, 1.1, 1.4)
#: The most rates one sweep runs (:func:`parse_rates`).
MAX_RATES = 16


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
    if getattr(cost, "kind", "roofline") == "profile":
        return _unloaded_latency_profiled(workload, cost)
    lin, att, w, kv, over = cost._k
    total = 0.0
    for r in workload.requests:
        p, o = r.prompt_len, r.output_len
        prefill = max(lin * p + att * p * (p + 1) / 2, w + kv * p) + over
        held = p + 1 + np.arange(1, o, dtype=float)            # tokens held after each decode step
        decode = np.maximum(lin + att * held, w + kv * (held + 1)) + over
        total += (prefill + float(decode.sum())) / o
    return total / len(workload)


def _unloaded_latency_profiled(workload: Workload, cost) -> float:
    """:func:`unloaded_latency` priced by an operator profile (:class:`allocator.cost.best.ProfiledCostModel`):
    the same steps -- one prefill of the prompt, then one decode per further token attending to every
    token held -- each priced by the profile. A decode step's time depends only on the tokens held, so
    it is priced once per length and summed through a running total (exact, and fast)."""
    top = max(r.prompt_len + r.output_len for r in workload.requests)
    held = np.arange(top + 1, dtype=float)
    decode = np.array([cost.profile_seconds(0, 0, 1, h) if h > 0 else 0.0 for h in held])
    upto = np.concatenate([[0.0], np.cumsum(decode)])        # upto[k] = decode[0] + ... + decode[k - 1]
    prefill = {}
    total = 0.0
    for r in workload.requests:
        p, o = r.prompt_len, r.output_len
        if p not in prefill:
            prefill[p] = cost.profile_seconds(p, p * (p + 1) // 2, 0, 0)
        # decodes after the first token hold p + 2 ... p + o tokens (as above: p + 1 + 1 ... p + 1 + o - 1)
        total += (prefill[p] + float(upto[p + o + 1] - upto[p + 2])) / o
    return total / len(workload)


def saturation_rate(cost: CostModel, n: int = DEFAULT_REQUESTS, *, seed: int = DEFAULT_SEED,
                    block_size: int = DEFAULT_BLOCK_SIZE, max_new_tokens: int = DEFAULT_MAX_NEW, trace=None,
                    pool_slots: int | None = None, rules=None) -> float:
    """Requests per second the paged allocator finishes when every request arrives at once (its
    throughput at saturation), under ``rules`` (None: the classroom scheduler; an
    :class:`allocator.engine.v1.V1Rules`: vLLM v1's): the scale of the default rate grid."""
    w = poisson_workload(1.0, n, seed=seed, max_context=cost.model.max_context, max_new_tokens=max_new_tokens,
                         trace=trace)
    burst = Workload("burst", tuple(Request(r.id, r.prompt_len, r.output_len, 0, 0.0) for r in w.requests),
                     w.max_new_tokens)
    pool = pool_slots or cost.pool_slots()
    res = simulate(burst, PagedAllocator(pool, block_size), record_snapshots=False,
                   clock=cost.for_blocks(block_size), rules=rules)
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
        parts = [p.strip() for p in text.replace(";", ",").split(",")]
        if parts == [""]:
            parts = []
        for i, p in enumerate(parts):        # "1,2,,3" or "1,2,": refused, never silently dropped
            if not p:
                raise FieldError("rates", " is empty: give a request rate (requests per second) "
                                          "or remove its comma", index=i)
    else:
        parts = list(text)
    if not parts:
        raise FieldError("rates", " is empty: give at least one request rate (requests per second)")
    if len(parts) > MAX_RATES:
        raise FieldError("rates", f" has {len(parts):,} entries; at most {MAX_RATES} are swept")
    rates = []
    for i, p in enumerate(parts):
        value = number_from_text(p)          # a 5,000-digit entry is refused as too long, not read as inf
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
        points: {(policy, rate): summary} -- :func:`allocator.cost.timing.timing_summary` plus
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


def rate_sweep(cost: CostModel, rates=None, *, policies=POLICIES, requests: int = DEFAULT_REQUESTS,
               seed: int = DEFAULT_SEED, block_size: int = DEFAULT_BLOCK_SIZE,
               max_new_tokens: int = DEFAULT_MAX_NEW, latency_factor: float = DEFAULT_LATENCY_FACTOR,
               pool_slots: int | None = None, trace=None, progress=None, workload: str = "azure-conv",
               executor=None, rules=None) -> RateSweep:
    """Run every policy at every rate on the seconds clock (see the module docstring).

    Args:
        cost: the GPU and model (:func:`allocator.cost.timing.cost_model`).
        rates: request rates (requests/s), parsed by :func:`parse_rates`; None: :func:`default_rates`.
        policies: a subset of :data:`POLICIES` (the paper's four by default).
        requests, seed, max_new_tokens: see :func:`poisson_workload`.
        block_size: the paged allocator's block size (slots).
        latency_factor: the sustained-rate budget as a multiple of the unloaded latency (> 1).
        pool_slots: the KV pool (slots); None: what the GPU has left after the weights.
        trace: lengths to draw from (default: those of ``workload``).
        workload: the named lengths, "azure-conv" (default) or "sharegpt-opt" (:data:`SWEEP_WORKLOADS`).
        progress: called as ``progress(done, total, text)`` after each run (a page's progress bar).
        executor: None (every run here, in order) or a ``concurrent.futures`` executor (e.g. a
            process pool) that takes runs from the far end of the list while this thread takes them
            from the near end (:func:`_run_all`); the figures are the same either way, each run
            being a pure function of its settings (:func:`run_rate`).
        rules: the paged allocator's scheduler: None (the classroom scheduler) or an
            :class:`allocator.engine.v1.V1Rules` (vLLM v1's; the saturation rate of the default grid
            is then v1's too). The reservation policies keep the classroom scheduler: vLLM v1 has no
            reservation allocator.

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
        pool_slots=pool, rules=rules)
    base = poisson_workload(1.0, requests, seed=seed, max_context=cost.model.max_context,
                            max_new_tokens=max_new_tokens, trace=trace)
    unit = [r.arrival_s for r in base.requests]
    for rate in rates:                     # a rate too low to reach the clock is named before anything runs
        check_reach(rate, unit, field="rates")
    sweep = RateSweep(cost=cost, rates=rates, policies=policies, pool_slots=pool, block_size=block_size,
                      requests=len(base), seed=seed, max_new_tokens=max_new_tokens, latency_factor=latency_factor,
                      unloaded_s_per_token=unloaded_latency(base, cost),
                      mean_prompt=float(np.mean([r.prompt_len for r in base.requests])),
                      mean_output=float(np.mean([r.output_len for r in base.requests])), workload=workload)
    runs = _run_all(rates, policies, base, pool, max_new_tokens, block_size, cost, executor, progress, rules)
    for rate in rates:                     # stored in the sweep's own order, whoever ran them
        for policy, (point, latencies) in zip(policies, runs[rate]):
            sweep.points[(policy, rate)], sweep.latencies[(policy, rate)] = point, latencies
    for policy in policies:
        sweep.sustained[policy] = sustained_rate(rates, sweep.curve(policy), sweep.budget_s_per_token)
    return sweep


def run_rate(rate: float, policies: tuple, base: Workload, pool: int, max_new_tokens: int, block_size: int,
             cost: CostModel, progress=None, rules=None) -> list[tuple[dict, dict]]:
    """A sweep's runs at one rate: ``base``'s requests at ``rate`` requests/s (arrivals = unit-rate
    arrivals / rate) under each of ``policies`` on the seconds clock; returns [(summary, latencies)]
    in ``policies`` order, as :attr:`RateSweep.points` and :attr:`RateSweep.latencies` hold them
    (``progress(policy)`` after each; ``rules`` the paged run's scheduler, as in :func:`rate_sweep`).
    A pure function of its arguments (it may run in another process)."""
    w = Workload(f"poisson {rate:g}/s", tuple(Request(r.id, r.prompt_len, r.output_len, 0, r.arrival_s / rate)
                                             for r in base.requests), base.max_new_tokens)
    out = []
    for policy in policies:
        alloc = make_allocator(policy, pool, max_new_tokens, block_size)
        res = simulate(w, alloc, record_snapshots=False, clock=cost.for_blocks(alloc.block_size),
                       rules=rules if policy == "paged" else None)
        timing = price(res, cost)
        s = dict(timing.summary)
        run = res.summary
        s.update(preemptions=run.preemptions, rejected=len(res.rejected),
                 mean_utilization_busy=run.mean_utilization_busy, mean_running_busy=run.mean_running_busy,
                 peak_running=run.peak_running, policy=policy, rate=rate)
        out.append((s, {k: timing.requests[k] for k in ("ttft_s", "tpot_s", "e2e_s")}))
        if progress is not None:
            progress(policy)
    return out


def _run_all(rates, policies, base, pool, max_new_tokens, block_size, cost, executor, progress, rules=None) -> dict:
    """{rate: run_rate(rate, ...)} for every rate. Without ``executor``, in order here. With one,
    every rate is submitted to it in reverse order (it starts from the highest) and this thread walks
    the rates from the lowest, taking over each the executor has not started (``Future.cancel``) and
    waiting for those it has; the two meet in the middle. A rate the executor failed on (a broken
    helper process) runs here, so its real error, if any, is raised."""
    total, done = len(rates) * len(policies), 0
    args = (policies, base, pool, max_new_tokens, block_size, cost)
    rules_kw = {"rules": rules} if rules is not None else {}
    out = {}

    def report(rate):
        def one(policy) -> None:
            nonlocal done
            done += 1
            if progress is not None:
                progress(done, total, f"{POLICY_LABELS[policy]} at {rate:g} requests/s")
        return one
    futures = {}
    if executor is not None:
        try:
            for rate in reversed(rates):
                futures[rate] = executor.submit(run_rate, rate, *args, **rules_kw)
        except Exception:                  # noqa: BLE001 - a shut-down or broken executor: run here
            for future in futures.values():
                future.cancel()
            futures = {}
    try:
        for rate in rates:
            future = futures.get(rate)
            if future is not None and not future.cancel():
                try:
                    out[rate] = future.result()
                except Exception:          # noqa: BLE001 - run it here: its own error, if any, is raised
                    out[rate] = run_rate(rate, *args, progress=report(rate), **rules_kw)
                else:
                    for policy in policies:
                        report(rate)(policy)
            else:
                out[rate] = run_rate(rate, *args, progress=report(rate), **rules_kw)
    finally:
        for future in futures.values():
            future.cancel()                # an error here: the executor starts nothing more of this sweep
    return out


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
           "parse_rates", "RateSweep", "run_rate", "sustained_rate", "sustained_short", "rate_ratio", "INTERPOLATION_SPAN",
           "RATIO_RANGE_SPAN", "rate_sweep", "with_latency_factor", "default_rate",
           "memory_basis", "DEFAULT_BLOCK_SIZE", "DEFAULT_LATENCY_FACTOR", "DEFAULT_MAX_NEW",
           "DEFAULT_REQUESTS", "DEFAULT_SEED", "SWEEP_MAX_NEW", "SWEEP_WORKLOADS", "workload_trace"]
