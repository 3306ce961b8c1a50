"""What speculative decoding costs a scenario's paged run in KV memory, measured on the engine.

:func:`speculation_cost` runs a scenario's paged allocator under vLLM v1's rules twice over: once
without speculation and, at each of several acceptance seeds, with the scenario's
``num_speculative_tokens`` k (each decode step reserves k lookahead slots for draft tokens and
the verifier's rejections give them back: :class:`allocator.engine.v1.V1Rules`). It reports, per
setting, the KV slots a running sequence holds (allocated slots over running sequences, summed over
the steps anything ran: a ratio of sums), the slots among them holding no token, the largest
batch, the steps to drain and the tokens a step emitted, with the spread over the seeds (min and
max) beside the mean: the acceptance draws are random, one seed is one draw.

The arithmetic counterpart (a mean length, no engine) is
:func:`allocator.accounting.speculation.speculation_capacity`.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from allocator.common.errors import FieldError
from allocator.engine.result import SimulationResult
from allocator.engine.scenario import Scenario, build_workload
from allocator.engine.simulate import simulate
from allocator.memory.paged import PagedAllocator
from allocator.workloads.requests import Workload

#: Acceptance seeds per speculating setting (spec_seed, spec_seed + 1, ...).
SPEC_SEEDS = 5
#: The figures :func:`speculation_cost` reports per setting, in order (units in :func:`run_figures`).
FIGURES = ("slots_per_sequence", "empty_slots_per_sequence", "peak_running", "mean_running_busy", "steps",
           "tokens_per_step", "preemptions", "accepted_fraction")


def run_figures(res: SimulationResult) -> dict:
    """One paged run's KV-memory figures.

    Returns:
        {"slots_per_sequence": allocated slots / running sequences, summed over the records in
        which some sequence ran (slots, a ratio of sums); "empty_slots_per_sequence": the same for
        allocated slots holding no token (allocated - used); "peak_running": the largest batch
        (sequences); "mean_running_busy": sequences running, mean over the steps a request waited
        (None if none did); "steps": engine steps to drain; "tokens_per_step": tokens emitted per
        step, mean over all steps; "preemptions": sequences preempted in total;
        "accepted_fraction": accepted drafts / drafts verified (None without speculation; below
        the acceptance rate, since the drafts after a rejection are dropped unverified)}.
    """
    m = res.metrics
    span = m["span"].astype(float)
    busy = m["running"] > 0
    running = float((m["running"][busy] * span[busy]).sum())
    allocated = float((m["allocated_slots"][busy] * span[busy]).sum())
    empty = float(((m["allocated_slots"] - m["used_slots"])[busy] * span[busy]).sum())
    spec = res.speculation
    return {"slots_per_sequence": allocated / running if running else None,
            "empty_slots_per_sequence": empty / running if running else None,
            "peak_running": res.summary.peak_running, "mean_running_busy": res.summary.mean_running_busy,
            "steps": res.steps,
            "tokens_per_step": res.summary.mean_tokens_per_step, "preemptions": res.summary.preemptions,
            "accepted_fraction": (spec["accepted_draft_tokens"] / spec["draft_tokens"]
                                    if spec and spec["draft_tokens"] else None)}


def _spread(values: list) -> dict:
    """{"mean", "min", "max"} of the non-None values (all None when there are none)."""
    vals = [v for v in values if v is not None]
    if not vals:
        return {"mean": None, "min": None, "max": None}
    return {"mean": float(np.mean(vals)), "min": float(min(vals)), "max": float(max(vals))}


def speculation_cost(sc: Scenario, workload: Workload | None = None, seeds: int = SPEC_SEEDS) -> dict:
    """The scenario's paged run without and with speculative decoding (see the module docstring).

    Args:
        sc: a scenario under v1 rules with ``num_speculative_tokens`` k >= 1 (its acceptance rate,
            first seed and every other setting are used as they are).
        workload: ``build_workload(sc)`` when the caller has built it.
        seeds: acceptance seeds to run (1 .. 100): ``sc.spec_seed`` and the ones after it.

    Returns:
        {"num_speculative_tokens": k, "acceptance_rate", "seeds": [the seeds run],
        "without": :func:`run_figures` at k = 0 (one run: nothing random), "with": {figure:
        {"mean", "min", "max"} over the seeds}, "extra_slots_per_sequence": {"mean", "min", "max"}
        of with - without slots per sequence}.

    Raises:
        FieldError: the scenario's settings (:meth:`Scenario.checked`), a scenario without
            speculation (``num_speculative_tokens``), or ``seeds`` out of range.
    """
    sc = sc.checked()
    if not sc.num_speculative_tokens:
        raise FieldError("num_speculative_tokens", " = 0: there is no speculation to cost (give 1 or more "
                         "draft tokens per step, under rules 'v1')")
    if isinstance(seeds, bool) or not isinstance(seeds, int) or not 1 <= seeds <= 100:
        raise FieldError("seeds", " must be a whole number from 1 to 100 (acceptance seeds)")
    if workload is None:
        workload = build_workload(sc)

    def paged(s: Scenario) -> SimulationResult:
        alloc = PagedAllocator(s.slots, s.block_size, preemption=s.preemption, prefix_caching=s.prefix_caching)
        return simulate(workload, alloc, record_snapshots=False, rules=s.v1_rules)

    without = run_figures(paged(replace(sc, num_speculative_tokens=0)))
    run_seeds = [(sc.spec_seed + i) % (2 ** 32) for i in range(seeds)]
    runs = [run_figures(paged(replace(sc, spec_seed=seed))) for seed in run_seeds]
    with_ = {name: _spread([r[name] for r in runs]) for name in FIGURES}
    extra = _spread([r["slots_per_sequence"] - without["slots_per_sequence"] for r in runs
                     if r["slots_per_sequence"] is not None and without["slots_per_sequence"] is not None])
    return {"num_speculative_tokens": sc.num_speculative_tokens, "acceptance_rate": sc.acceptance_rate,
            "seeds": run_seeds, "without": without, "with": with_, "extra_slots_per_sequence": extra}
