"""Seconds, not steps: a run priced by the cost model.

The engine counts work in tokens and blocks. This module prices a run's records in seconds with
the roofline of :mod:`allocator.cost.roofline` so the run can report what a user of a serving engine
feels -- time to first token (TTFT), time per output token (TPOT), end-to-end latency -- and what
its operator pays for -- throughput in tokens per second. :func:`breakdown` prices every record
term by term, :func:`price` turns a run into per-request latencies, and :func:`timing_summary`
into the figures the pages, the CLI and the exports quote.

The cost model itself (GPU presets, the roofline of one step, :class:`CostModel`,
:func:`cost_model`, :func:`describe`) lives in :mod:`allocator.cost.roofline` and is re-exported here,
so ``from allocator.cost.timing import cost_model, price`` keeps working.

Units: tokens, slots, bytes, seconds, FLOPs (floating-point operations), bytes/s and FLOP/s
(decimal, as datasheets state them), memory sizes in binary GiB (see
:mod:`allocator.accounting.units`).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from allocator.cost.roofline import CostModel, attention_flops, kv_bytes, linear_flops, weight_bytes
from allocator.common.validate import real_number


def breakdown(result, cost: CostModel, idle_step_s: float = 0.05) -> dict:
    """Every record of a run, priced term by term (arrays of shape [records]).

    Args:
        result: a :class:`allocator.engine.result.SimulationResult`.
        cost: the cost model.
        idle_step_s: seconds per step of an idle gap on the step clock (the arrival clock the
            workload was placed on: 1 / steps_per_second, 50 ms by default). Ignored for a run on
            the seconds clock, whose idle gaps carry their own length.

    Returns:
        {"flops", "bytes", "compute_s", "memory_s", "operators_s", "overhead_s", "swap_s", "idle_s",
        "seconds", "compute_bound"}: for a busy record the roofline terms (``compute_s`` and ``memory_s``
        from :meth:`CostModel.roofline`, the same the engine prices a step with) and ``seconds`` = max(compute_s,
        memory_s) + overhead_s + swap_s; for an idle record only ``idle_s`` = ``seconds``.
        ``compute_bound`` is a bool array (compute_s > memory_s on busy records). With an operator
        profile (``cost.kind == "profile"``, :class:`allocator.cost.best.ProfiledCostModel`) the
        roofline terms are 0, ``operators_s`` holds the profile's operator seconds (all-reduces
        included) and ``overhead_s`` the profile's engine overhead; ``operators_s`` is 0 for the
        roofline.

    Raises:
        FieldError (``idle_step_s``): not a positive finite number.
    """
    idle_step_s = real_number("idle_step_s", idle_step_s, above=0)
    m, model = result.metrics, cost.model
    busy = (m["running"] > 0) | (m["waiting"] > 0)
    tokens = (m["prefill_tokens"] + m["running"] - m["admitted"]).astype(float)
    pairs = (m["prefill_pairs"] + m["decode_pairs"]).astype(float)
    flops = linear_flops(model, tokens) + attention_flops(model, pairs)
    moved = np.where(tokens > 0, float(weight_bytes(model)), 0.0) + kv_bytes(model, m["decode_pairs"] + tokens)
    compute, memory = cost.roofline(tokens, pairs, m["decode_pairs"])    # flops and moved, in seconds
    compute_s = np.where(busy, compute, 0.0)
    memory_s = np.where(busy, memory, 0.0)
    overhead_s = np.where(busy, cost.overhead_s, 0.0)
    swap_s = (cost.swap_seconds(m["swapped_blocks"].astype(float), result.block_size)
              if result.block_size else np.zeros(result.records))
    if "seconds" in m:
        idle_s = np.where(busy, 0.0, m["seconds"])
    else:
        idle_s = np.where(busy, 0.0, m["span"] * idle_step_s)
    operators_s = np.zeros(result.records)
    if getattr(cost, "kind", "roofline") == "profile":
        # the operator profile prices the step (allocator.cost.best.ProfiledCostModel): no roofline
        # terms; its own engine overhead; swap copies as the roofline prices them
        overhead_s = np.where(busy & (tokens > 0), cost.profile.overhead_s, 0.0)     # an empty step costs 0
        if "seconds" in m:               # timed as it ran: the engine's seconds, less overhead and swaps
            operators_s = np.where(busy & (tokens > 0), m["seconds"] - overhead_s - swap_s, 0.0)
        else:
            decode = (m["running"] - m["admitted"]).astype(float)
            for i in np.flatnonzero(busy & (tokens > 0)):
                operators_s[i] = cost.profile_seconds(m["prefill_tokens"][i], m["prefill_pairs"][i], decode[i],
                                                      m["decode_pairs"][i]) - cost.profile.overhead_s
        compute_s = memory_s = np.zeros(result.records)
    seconds = np.maximum(compute_s, memory_s) + operators_s + overhead_s + swap_s + idle_s
    return {"flops": np.where(busy, flops, 0.0), "bytes": np.where(busy, moved, 0.0), "compute_s": compute_s,
            "memory_s": memory_s, "operators_s": operators_s, "overhead_s": overhead_s, "swap_s": swap_s,
            "idle_s": idle_s, "seconds": seconds, "compute_bound": busy & (compute_s > memory_s)}


@dataclass
class RunTiming:
    """A run in seconds (what :func:`price` returns).

    Attributes:
        cost: the cost model used.
        seconds: duration of each record, float [records]; ``start_s`` and ``end_s`` its start
            and end on the run's clock (``end_s`` = cumulative sum of ``seconds``).
        terms: :func:`breakdown`'s arrays.
        requests: per finished request, arrays [finished] sorted by id: ``id``, ``output_len``
            (tokens), ``arrival_s``, ``first_token_s`` (when its first token was out), ``finish_s``,
            ``ttft_s`` = first_token_s - arrival_s, ``e2e_s`` = finish_s - arrival_s, ``tpot_s`` =
            (e2e_s - ttft_s) / (output_len - 1) (NaN for a one-token answer), ``normalized_s`` =
            e2e_s / output_len.
        summary: see :func:`timing_summary`.
        clock: "steps" (the run placed arrivals on steps; seconds price it afterwards) or "seconds"
            (the run was timed as it ran).
        steps, spans: the records' first steps and spans (int [records], from the result).
    """

    cost: CostModel
    seconds: np.ndarray
    start_s: np.ndarray
    end_s: np.ndarray
    terms: dict
    clock: str
    steps: np.ndarray
    spans: np.ndarray
    requests: dict = field(default_factory=dict)
    summary: dict = field(default_factory=dict)

    @property
    def makespan_s(self) -> float:
        """The run's time (seconds): the sum of its record durations."""
        return float(self.end_s[-1]) if len(self.end_s) else 0.0

    def time_at(self, step):
        """Seconds on the run's clock at the start of engine step ``step`` (scalar or array of
        steps); inside a record spanning several steps the time grows evenly; the run's length in
        steps gives its end."""
        step = np.asarray(step)
        if not len(self.steps):
            return np.zeros(step.shape)
        i = np.clip(np.searchsorted(self.steps, step, side="right") - 1, 0, len(self.steps) - 1)
        frac = (step - self.steps[i]) / self.spans[i]
        return self.start_s[i] + frac * self.seconds[i]


def price(result, cost: CostModel, idle_step_s: float = 0.05) -> RunTiming:
    """Turn a run into seconds: record durations, per-request latencies and a summary.

    On the step clock (the explainer's runs) the run is priced afterwards: each busy step lasts
    what :func:`breakdown` says; an idle gap lasts ``span x idle_step_s`` (the arrival clock the
    workload was placed on, so a trace's quiet time comes back as it was); a request arrives at
    the start of its arrival step. On the seconds clock (``engine.simulate(clock=...)``, the rate
    sweep) the durations are the ones the engine ran on and arrivals are the requests' own.
    Either way the time of the run is the sum of its record durations.

    Args:
        result: a SimulationResult.
        cost: the cost model (on the seconds clock, the one the run was timed with).
        idle_step_s: see :func:`breakdown`.

    Raises:
        FieldError: a bad ``idle_step_s``.
    """
    terms = breakdown(result, cost, idle_step_s)
    timed = "seconds" in result.metrics
    seconds = result.metrics["seconds"] if timed else terms["seconds"]
    end_s = np.cumsum(seconds)
    start_s = np.concatenate([[0.0], end_s[:-1]]) if len(seconds) else end_s.copy()
    timing = RunTiming(cost=cost, seconds=seconds, start_s=start_s, end_s=end_s, terms=terms,
                       clock="seconds" if timed else "steps", steps=result.metrics["step"],
                       spans=result.metrics["span"])
    rq = result.requests
    if len(rq.get("id", ())):
        first = timing.time_at(rq["first_token_step"] + 1)
        finish = timing.time_at(rq["finish_step"] + 1)
        arrival = rq["arrival_s"] if timed else timing.time_at(rq["arrival_step"])
        out = rq["output_len"].astype(float)
        e2e = finish - arrival
        ttft = first - arrival
        with np.errstate(invalid="ignore", divide="ignore"):
            tpot = np.where(out > 1, (e2e - ttft) / np.maximum(out - 1, 1), np.nan)
        timing.requests = {"id": rq["id"], "output_len": rq["output_len"], "arrival_s": arrival,
                           "first_token_s": first, "finish_s": finish, "ttft_s": ttft, "e2e_s": e2e,
                           "tpot_s": tpot, "normalized_s": e2e / out}
    else:
        empty = np.zeros(0)
        timing.requests = {k: empty for k in ("id", "output_len", "arrival_s", "first_token_s", "finish_s",
                                               "ttft_s", "e2e_s", "tpot_s", "normalized_s")}
    timing.summary = timing_summary(result, timing)
    return timing


def _pct(values: np.ndarray, q: float):
    values = values[~np.isnan(values)]
    return round(float(np.percentile(values, q)), 9) if len(values) else None


def timing_summary(result, timing: RunTiming) -> dict:
    """Summary figures of a priced run (JSON-ready; None where a figure does not exist).

    Keys: ``makespan_s`` (the run's time: sum of record durations), ``busy_s`` (seconds the GPU
    worked: not in idle gaps), ``ttft_p50_s``/``ttft_p90_s``/``ttft_p99_s``, the same for
    ``tpot`` and ``e2e``, ``mean_ttft_s``, ``mean_tpot_s``, ``mean_e2e_s``,
    ``throughput_tokens_per_s`` (output tokens of finished requests / makespan),
    ``throughput_requests_per_s`` (finished requests / makespan), ``normalized_latency_s_per_token``
    (mean over finished requests of end-to-end latency / output length: the PagedAttention
    paper's "normalized latency", section 6.1), ``compute_bound_share`` (share of busy seconds in
    compute-bound steps; None under an operator profile), where the seconds went -- ``compute_limited_s``
    (the roofline part of compute-bound steps), ``memory_limited_s`` (of memory-bound steps),
    ``operators_s`` (the operator profile's operator seconds; 0 under the roofline), ``overhead_s``,
    ``swap_s`` (swap copies) and ``idle_s`` (idle gaps), which add up to ``makespan_s`` --, ``recompute_flops_s`` (seconds the
    recomputed tokens' weight FLOPs, 2 x parameters each, take at peak: the work recompute
    repeats, before any overlap with memory time),
    ``kv_token_share_waiting`` (the share of the KV pool holding tokens, averaged over the seconds
    when requests waited; None if none did) and ``kv_token_share_busy`` (over every busy second),
    ``gpu``, ``model``, ``gpus``, ``clock``, ``cost_model`` (the cost model's kind: "roofline" or
    "profile").
    """
    r = timing.requests
    m = result.metrics
    makespan = timing.makespan_s
    busy = (m["running"] > 0) | (m["waiting"] > 0)
    waiting = m["waiting"] > 0
    sec = timing.seconds
    busy_s = float(sec[busy].sum())
    out_tokens = int(r["output_len"].sum()) if len(r["id"]) else 0
    cost = timing.cost

    def share(mask):
        total = float(sec[mask].sum())
        return round(float((m["utilization"][mask] * sec[mask]).sum() / total), 6) if total > 0 else None

    def mean(values):
        values = values[~np.isnan(values)] if len(values) else values
        return round(float(values.mean()), 9) if len(values) else None

    s = {
        "makespan_s": round(makespan, 9),
        "busy_s": round(busy_s, 9),
        "finished": int(len(r["id"])),
        "output_tokens": out_tokens,
        "throughput_tokens_per_s": round(out_tokens / makespan, 6) if makespan > 0 else None,
        "throughput_requests_per_s": round(len(r["id"]) / makespan, 9) if makespan > 0 else None,
        "normalized_latency_s_per_token": mean(r["normalized_s"]),
        "mean_ttft_s": mean(r["ttft_s"]), "mean_tpot_s": mean(r["tpot_s"]), "mean_e2e_s": mean(r["e2e_s"]),
    }
    for name in ("ttft", "tpot", "e2e"):
        for q in (50, 90, 99):
            s[f"{name}_p{q}_s"] = _pct(r[f"{name}_s"], q)
    terms = timing.terms
    roof = np.maximum(terms["compute_s"], terms["memory_s"])
    compute_bound_s = float(sec[terms["compute_bound"]].sum())
    s["compute_bound_share"] = (round(compute_bound_s / busy_s, 6) if busy_s > 0 and cost.kind == "roofline"
                                else None)
    # where the seconds went (they add up to makespan_s)
    s["compute_limited_s"] = round(float(roof[terms["compute_bound"]].sum()), 9)
    s["memory_limited_s"] = round(float(roof[busy & ~terms["compute_bound"]].sum()), 9)
    s["operators_s"] = round(float(terms["operators_s"].sum()), 9)
    s["overhead_s"] = round(float(terms["overhead_s"].sum()), 9)
    s["idle_s"] = round(float(terms["idle_s"].sum()), 9)
    s["swap_s"] = round(float(timing.terms["swap_s"].sum()), 9)
    s["recompute_flops_s"] = round(float(linear_flops(cost.model, float(m["recomputed_tokens"].sum()))
                                         / cost.peak_flops), 6)
    s["kv_token_share_waiting"] = share(waiting)
    s["kv_token_share_busy"] = share(busy)
    s["gpu"] = cost.gpu.key
    s["model"] = cost.model.key
    s["gpus"] = cost.gpus
    s["clock"] = timing.clock
    s["cost_model"] = cost.kind
    return s
