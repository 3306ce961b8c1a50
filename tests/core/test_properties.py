"""Property tests (hypothesis): random workloads, pools and block sizes through both allocators.

After every step the engine's ``check_invariants`` asserts: no slot (block) owned twice,
allocated + free == total, each block table exactly ceil(tokens / block_size) long, reservations
never overlapping or overfilled. Here we add: every request finishes or is rejected with a reason,
the per-step metrics add up, and the same input gives the same result.
"""
import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from allocator.memory.paged import PagedAllocator
from allocator.workloads.requests import Request, Workload
from allocator.memory.reserve_max import ReserveMaxAllocator
from allocator.engine.simulate import simulate
from allocator.viz.maps import slot_states
from allocator.common.mathutils import cdiv

SETTINGS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def scenarios(draw):
    n = draw(st.integers(1, 25))
    max_new = draw(st.integers(1, 200))
    reqs = tuple(Request(i + 1, draw(st.integers(1, 300)), draw(st.integers(1, max_new)),
                         draw(st.integers(0, 60))) for i in range(n))
    total = draw(st.integers(1, 3000))
    block = draw(st.integers(1, max(1, min(256, total))))
    return Workload("random", reqs, max_new_tokens=max_new), total, block


def check_run(res, workload):
    m = res.metrics
    total = res.total_slots
    assert (m["allocated_slots"] + m["free_slots"] == total).all()
    assert (m["used_slots"] <= m["allocated_slots"]).all()
    assert (m["reserved_slots"] + m["internal_fragmentation"] + m["duplicate_slots"]
            == m["allocated_slots"] - m["used_slots"]).all()
    assert (m["external_fragmentation"] <= m["free_slots"]).all()
    assert ((0 <= m["utilization"]) & (m["utilization"] <= 1)).all()
    rejected = {r["id"] for r in res.rejected}
    assert all(r["reason"] for r in res.rejected)
    assert res.summary["finished"] + len(rejected) == len(workload)
    # every admitted request emitted at least its output_len tokens (more after recompute never)
    served = sum(r.output_len for r in workload.requests if r.id not in rejected)
    assert int(m["tokens"].sum()) == served
    if res.steps:
        assert m["allocated_slots"][-1] == 0 and m["waiting"][-1] == 0
    assert (m["running"] == m["tokens"]).all()


@SETTINGS
@given(scenarios())
def test_paged_invariants(sc):
    workload, total, block = sc
    res = simulate(workload, PagedAllocator(total, block), record_snapshots=False, check_invariants=True)
    check_run(res, workload)
    for r in res.rejected:
        req = next(q for q in workload.requests if q.id == r["id"])
        assert cdiv(req.prompt_len + req.output_len, block) > total // block


@SETTINGS
@given(scenarios())
def test_reserve_max_invariants(sc):
    workload, total, _ = sc
    res = simulate(workload, ReserveMaxAllocator(total, workload.max_new_tokens), record_snapshots=False,
                   check_invariants=True)
    check_run(res, workload)
    assert res.summary["preemptions"] == 0
    for r in res.rejected:
        req = next(q for q in workload.requests if q.id == r["id"])
        assert req.prompt_len + workload.max_new_tokens > total


@settings(max_examples=20, deadline=None)
@given(scenarios())
def test_same_input_same_result(sc):
    workload, total, block = sc
    a = simulate(workload, PagedAllocator(total, block))
    b = simulate(workload, PagedAllocator(total, block))
    assert a.summary == b.summary
    for name in a.metrics:
        assert np.array_equal(a.metrics[name], b.metrics[name])
    for step in list(a.snapshots)[:5]:
        assert np.array_equal(slot_states(a, step)[1], slot_states(b, step)[1])
