"""The event-driven engine gives exactly the per-step numbers of a naive step-by-step engine.

``allocator/engine/reference.py`` (where to start reading the engine) follows the engine's six
steps (``allocator/engine/simulate.py``'s docstring; ``assets/reference_figures.md`` section R9)
literally (every sequence visited every step, every step recorded). ``allocator.engine.simulate.simulate`` wakes sequences only at block boundaries
and finishes and compresses idle gaps into one record; expanded back to steps (each record
repeated ``span`` times), every metric must match, for both allocators, both preemption modes,
shared prefixes, tiny host pools and arrivals with long gaps.
"""
import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from allocator.memory.paged import PagedAllocator
from allocator.workloads.requests import Request, Workload
from allocator.memory.reserve_max import ReserveMaxAllocator
from allocator.engine.simulate import simulate
from allocator.viz.maps import slot_states
from allocator.engine.reference import reference_run

COMPARED = ("running", "waiting", "finished", "preemptions", "logical_tokens", "allocated_slots", "units",
            "recomputed_tokens", "swapped_blocks", "next_need")


def expand(result, name):
    """A per-record metric as one value per engine step."""
    return np.repeat(result.metrics[name], result.metrics["span"])


def assert_same(workload, make_allocator):
    fast = simulate(workload, make_allocator(), record_snapshots=False, check_invariants=True)
    ref = reference_run(workload, make_allocator())
    n = fast.steps
    assert fast.metrics["span"].min(initial=1) >= 1
    # The reference also records a last step in which every arrival was rejected; the engine
    # does not, since nothing happens in it.
    assert len(ref["running"]) >= n
    assert all(v == 0 for v in ref["running"][n:]) and all(v == 0 for v in ref["waiting"][n:])
    for name in COMPARED:
        got = expand(fast, name).tolist()
        assert got == ref[name][:n], (name, got[:40], ref[name][:40])
    assert [r["id"] for r in fast.rejected] == ref["rejected"]
    return fast


@st.composite
def workloads(draw):
    n = draw(st.integers(1, 14))
    max_new = draw(st.integers(1, 60))
    prefix = draw(st.sampled_from([0, 0, 4, 9, 16]))
    gap = draw(st.sampled_from([0, 3, 50, 10_000]))
    reqs = tuple(Request(i + 1, prefix + draw(st.integers(1, 40)), draw(st.integers(1, max_new)),
                         draw(st.integers(0, 6)) * draw(st.sampled_from([0, 1, gap]))) for i in range(n))
    return Workload("random", reqs, max_new_tokens=max_new, shared_prefix=prefix)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(w=workloads(), total=st.integers(8, 400), block=st.integers(1, 24),
       mode=st.sampled_from(["recompute", "swap"]), host=st.sampled_from([None, 0, 3]))
def test_paged_matches_the_step_by_step_reference(w, total, block, mode, host):
    block = min(block, total)
    assert_same(w, lambda: PagedAllocator(total, block, preemption=mode, host_blocks=host))


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(w=workloads(), total=st.integers(8, 600), policy=st.sampled_from(["max", "pow2", "oracle"]))
def test_reservations_match_the_step_by_step_reference(w, total, policy):
    assert_same(w, lambda: ReserveMaxAllocator(total, w.max_new_tokens, policy=policy))


def test_a_long_idle_gap_is_one_record():
    short = Workload("gap", (Request(1, 10, 5, 0), Request(2, 20, 3, 10_000)), max_new_tokens=5)
    assert_same(short, lambda: PagedAllocator(64, 4))
    w = Workload("gap", (Request(1, 10, 5, 0), Request(2, 20, 3, 1_000_000)), max_new_tokens=5)
    res = simulate(w, PagedAllocator(64, 4), check_invariants=True)
    m = res.metrics
    # busy steps 0-4, one idle record covering 5 .. 999,999, then request 2's three steps
    assert m["step"].tolist() == [0, 1, 2, 3, 4, 5, 1_000_000, 1_000_001, 1_000_002]
    assert m["span"].tolist() == [1, 1, 1, 1, 1, 999_995, 1, 1, 1]
    assert res.steps == 1_000_003 and res.summary["records"] == 9
    assert res.value_at("running", 500_000) == 0 and res.value_at("finished", 500_000) == 1
    assert res.summary["preemptions"] == 0 and res.summary["finished"] == 2
    owner, state = slot_states(res, 500_000)                 # the gap's picture: an empty pool
    assert (owner == -1).all() and (state == 0).all()
