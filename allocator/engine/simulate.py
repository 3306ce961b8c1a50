"""The serving engine every page shares (the rules: ``assets/reference_figures.md`` section R9).

One call to :func:`simulate` runs a workload against one allocator (anything implementing
:class:`allocator.memory.allocators.Allocator`), in discrete steps t = 0, 1, 2, ... (one engine
iteration each), in vLLM's scheduler order -- running sequences are served before new ones
are admitted:

1. Arrivals: requests with arrival_step <= t join the waiting queue (FCFS, ties by id). A
   request that can never fit the pool is rejected with a reason and never retried.
2. Serve the running: each running sequence needs room for this step's token. One whose room is
   full asks the allocator for more (a paged sequence takes one block); if there is none, the
   running sequence admitted last is preempted -- recompute (its memory is freed and it returns
   to the head of the queue; on re-admission its prompt and generated tokens are prefilled
   again) or swap (its blocks go to host memory and come back on re-admission) -- until the
   request fits or it was itself preempted.
3. Admission: unless a sequence was preempted in this step, admit the queue's head while it
   fits; stop at the first that does not (no skipping). Admission makes room for the context
   and the token prefill emits.
4. Compute: admitted requests prefill and emit their first token; running ones emit one.
5. Finish: a request that has emitted output_len tokens frees its memory.
6. Record: the step's metrics (and a picture of the pool, if asked).

Work is counted only where it happened: a recompute counts the tokens the preempted sequence
had actually computed, when it is prefilled again; swap traffic counts blocks that existed.

Events, not steps: the engine never walks a sequence token by token. A running sequence is
described by when it was admitted and how much room it has, so its token count at any step is
``base + t``; the engine wakes it only at the step its room fills (a block boundary) and the
step it finishes. A stretch in which nothing runs and nothing waits is skipped to the next
arrival and recorded as **one** record spanning the whole gap, so the cost of a run grows with
its events (arrivals, admissions, block boundaries, finishes, busy steps), not with the length
of the trace's clock.

Records: every metric of a record holds for each of the ``span`` steps it covers (a busy step
is a record with span 1; an idle gap has span >= 1, nothing running, waiting or flowing).

Where each part lives (one idea a module):

* ``allocator/engine/reference.py``: the same rules as one plain step-by-step loop, slow on
  purpose, that the engine must match number for number: start reading there;
* ``allocator/engine/simulate.py`` (this file): :func:`simulate`, the entry point;
* ``allocator/engine/sequence.py``: a sequence's status (waiting, running, preempted, swapped,
  finished);
* ``allocator/engine/loop.py``: the loop both schedulers share (clock, arrivals, idle-gap skip,
  records, pool pictures);
* ``allocator/engine/classroom.py``: the step above (serve, admit, compute, finish, record);
* ``allocator/engine/v1.py``: vLLM v1's step (:class:`V1Rules`), for replaying real runs;
* ``allocator/engine/result.py``: :class:`SimulationResult`, the per-step
  :data:`~allocator.engine.result.METRICS` and the summary figures computed from them
  (:func:`~allocator.engine.result.summarize`);
* ``allocator/engine/summary.py``: the summary's type, :class:`~allocator.engine.summary.RunSummary`;
* ``allocator/engine/shares.py``: where the pool goes (the memory shares);
* ``allocator/viz/maps.py``: drawing a result (slot states, memory maps).
"""
from __future__ import annotations

import gc

from allocator.engine.classroom import ClassroomScheduler
from allocator.engine.result import SimulationResult, build_result
from allocator.engine.loop import Run, drive
from allocator.engine.v1 import V1Rules, V1Scheduler, check_allocator
from allocator.common.errors import FieldError
from allocator.common.validate import real_number
from allocator.workloads.requests import Workload


def simulate(workload: Workload, allocator, *, record_snapshots: bool = True,
             check_invariants: bool = False, clock=None, seconds_per_step: float | None = None,
             rules: V1Rules | None = None, stop_s: float | None = None) -> SimulationResult:
    """Run ``workload`` against ``allocator`` until every request finishes or is rejected.

    Args:
        workload: the requests (lengths in tokens, arrivals in steps, or in seconds).
        allocator: an :class:`allocator.memory.allocators.Allocator`; it is reset first, so one instance
            can be reused.
        record_snapshots: keep a picture of the pool at every busy step and idle gap (memory maps).
        check_invariants: after every step, assert the allocator's bookkeeping (tests use this).
        clock: None (the default) runs on the **step clock**: a request joins the queue at step
            ``arrival_step``, and an idle gap is one record spanning the steps to the next arrival.
            A cost model (anything with ``step_seconds(prefill_tokens, prefill_pairs,
            decode_tokens, decode_pairs, swapped_blocks) -> seconds``, e.g.
            :class:`allocator.cost.timing.CostModel`) runs on the **seconds clock**: each busy step
            lasts what the cost model says for the work done in it, a request joins the queue at
            the first step that starts at or after its ``arrival_s``, and an idle gap is one
            record of span 1 lasting until the next arrival. Each record's duration is then the
            ``seconds`` metric.
        seconds_per_step: on the seconds clock, the arrival time of a request without
            ``arrival_s`` is ``arrival_step x seconds_per_step``.
        rules: None (the default: the classroom scheduler above, every existing scenario) or a
            :class:`V1Rules`, which runs vLLM v1's scheduler instead (token budget, chunked
            prefill, a cap on running sequences, recompute-only preemption, prefix caching of
            prompt and generated blocks when the paged allocator has ``prefix_caching``); see
            :class:`V1Rules`. Needs a paged allocator.
        stop_s: on the seconds clock, end the run after the first record that ends at or past this
            many seconds (None: run until every request finished). A cut run is a measurement window
            (the PagedAttention paper's artifact measures its Figure 2 over a fixed stretch of a
            longer trace): requests still running or waiting are neither finished nor rejected.

    Returns:
        SimulationResult with per-record metrics, snapshots, per-request steps and summary.

    Raises:
        FieldError: a sliding-window pool (``allocator.memory.sliding_window``) without ``rules``
            (field ``rules``); the allocator cannot serve this workload (e.g. an output_len above a
            reservation allocator's max_new_tokens); on the seconds clock, a request without
            ``arrival_s`` when ``seconds_per_step`` is not given, or a bad ``seconds_per_step`` or
            ``stop_s``.
        RuntimeError: the loop ran past a bound it can never legitimately reach (a bug guard,
            so a fault shows as an error rather than a hang).
    """
    allocator.validate_workload(workload)
    if rules is not None:
        check_allocator(allocator)
    elif getattr(allocator, "needs_v1_rules", False):
        raise FieldError("rules", ": a sliding-window or hybrid pool follows vLLM v1's KV-cache managers "
                         "(allocator/memory/sliding_window.py); run it under v1 rules")
    run = Run(workload, allocator, clock=clock, seconds_per_step=seconds_per_step,
              record_snapshots=record_snapshots, tokens_column=rules is not None)
    if rules is None and stop_s is not None:
        stop_s = real_number("stop_s", stop_s, above=0)
    scheduler = V1Scheduler(allocator, run, rules) if rules is not None else ClassroomScheduler(allocator, run)
    # The run's objects hold no reference cycles (sequences, block tables, pictures: millions of
    # small tuples and lists), so the cyclic garbage collector would only scan them again and again:
    # a third of a picture-taking run's extra time on the whole Mooncake trace, and 7 % of the Azure
    # trace x5 without pictures (its young block tables). Reference counting still frees everything.
    collecting = gc.isenabled()
    if collecting:
        gc.disable()
    try:
        drive(run, scheduler, stop_s=stop_s if rules is None else None, check_invariants=check_invariants)
    finally:
        if collecting:
            gc.enable()
    result = build_result(workload, allocator, run, clock)
    if rules is not None and rules.num_speculative_tokens:
        result.speculation = {"num_speculative_tokens": rules.num_speculative_tokens,
                              "acceptance_rate": rules.acceptance_rate, "spec_seed": rules.spec_seed,
                              "draft_tokens": scheduler.drafts, "accepted_draft_tokens": scheduler.drafts_accepted}
    if getattr(allocator, "windowed", False):
        result.window = allocator.window_stats()
    return result
