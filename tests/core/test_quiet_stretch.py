"""The engine writes out stretches of decode-only steps (``allocator.engine.loop._quiet_stretch``: nobody waits,
nothing grows or finishes) instead of running the scheduler's step for each. Every record, second,
served request and summary must be the step-by-step loop's: random workloads on both clocks, every
reservation policy, paged pools, stop times and rejected requests, run both ways."""
from __future__ import annotations

import numpy as np
from hypothesis import given, settings, strategies as st

import allocator.engine.loop as engine_run
from allocator.memory.paged import PagedAllocator
from allocator.memory.reserve_max import ReserveMaxAllocator
from allocator.engine.simulate import simulate
from allocator.engine.classroom import ClassroomScheduler
from allocator.cost.roofline import cost_model
from allocator.workloads.requests import Request, Workload

MAX_NEW = 64


@st.composite
def _runs(draw):
    n = draw(st.integers(1, 12))
    timed = draw(st.booleans())
    requests = [Request(id=i + 1, prompt_len=draw(st.integers(1, 40)), output_len=draw(st.integers(1, MAX_NEW)),
                        arrival_step=draw(st.integers(0, 60)),
                        arrival_s=draw(st.floats(0, 3, allow_nan=False)) if timed else None)
                for i in range(n)]
    slots = draw(st.integers(8, 600))
    kind = draw(st.sampled_from(["max", "oracle", "pow2", "paged"]))
    block = draw(st.sampled_from([1, 4, 16]))
    stop_s = draw(st.none() | st.floats(0.01, 2.0)) if timed else None
    return Workload("random", requests, max_new_tokens=MAX_NEW), slots, kind, block, timed, stop_s


def _simulate(workload, slots, kind, block, timed, stop_s):
    alloc = (PagedAllocator(max(slots, block), block) if kind == "paged"
             else ReserveMaxAllocator(slots, MAX_NEW, kind))
    clock = cost_model().for_blocks(block if kind == "paged" else None) if timed else None
    res = simulate(workload, alloc, record_snapshots=False, clock=clock, stop_s=stop_s)
    return ({k: np.asarray(v).tobytes() for k, v in res.metrics.items()}, repr(res.requests), res.rejected,
            res.summary.to_dict())


@settings(max_examples=150, deadline=None)
@given(_runs())
def test_written_out_stretches_equal_the_step_by_step_loop(run):
    taken = []
    real = engine_run._quiet_stretch

    def spy(*args):
        taken.append(args[3] - args[2])
        return real(*args)
    engine_run._quiet_stretch = spy
    try:
        fast = _simulate(*run)
    finally:
        engine_run._quiet_stretch = real
    ClassroomScheduler.quiet_stretches = False
    try:
        slow = _simulate(*run)
    finally:
        ClassroomScheduler.quiet_stretches = True
    assert fast == slow


def test_a_long_decode_is_one_stretch_per_quiet_span():
    """Two requests, one long: after the short one finishes, the long one decodes alone to its end."""
    w = Workload("two", [Request(id=1, prompt_len=10, output_len=5, arrival_step=0),
                         Request(id=2, prompt_len=10, output_len=60, arrival_step=0)], max_new_tokens=MAX_NEW)
    taken = []
    real = engine_run._quiet_stretch

    def spy(*args):
        taken.append((args[2], args[3]))
        return real(*args)
    engine_run._quiet_stretch = spy
    try:
        res = simulate(w, ReserveMaxAllocator(1000, MAX_NEW), record_snapshots=False)
    finally:
        engine_run._quiet_stretch = real
    assert taken == [(1, 4), (5, 59)]                     # steps 1-3 and 5-58 written out
    assert list(res.metrics["step"]) == list(range(60)) and res.summary.to_dict()["steps"] == 60
