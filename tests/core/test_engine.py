"""The shared core: allocators, the step engine, and the explainer's figures
(``assets/reference_figures.md`` section R7)."""
import inspect
import json

import numpy as np
import pytest

from allocator.viz.maps import EMPTY, FREE, TOKEN
from allocator.memory.paged import PagedAllocator
from allocator.workloads.requests import Request, Workload, classroom_40, generate_workload
from allocator.memory.reserve_max import ReserveMaxAllocator
from allocator.engine.simulate import simulate
from allocator.__main__ import main
from allocator.viz.maps import slot_states
from allocator.engine.scenario import Scenario, block_size_sweep, run_scenario
from allocator.engine.loop import CACHE_STEP_COLUMNS, POOL_COLUMNS, STEP_COLUMNS, PoolRecord, Run, StepRecord


def cli_json(capsys, *args):
    assert main(["simulate", *args, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


# --- reference figures R7 (assets/reference_figures.md), through the CLI -----------------------

@pytest.fixture(scope="module")
def classroom():
    w = classroom_40()
    return {"rm": simulate(w, ReserveMaxAllocator(2048, w.max_new_tokens), check_invariants=True),
            **{bs: simulate(w, PagedAllocator(2048, bs), check_invariants=True) for bs in (16, 64, 256)}}


def test_cli_classroom_40_reproduces_reference_r7(capsys):
    out = cli_json(capsys, "--workload", "classroom-40")
    rm, paged = out["reserve_max"], out["paged"]
    assert rm["total_slots"] == 2048 and paged["block_size"] == 16
    assert rm["peak_running"] == 3
    assert 0.20 <= rm["mean_utilization_busy"] <= 0.40
    assert 25 <= paged["peak_running"] <= 35
    assert paged["mean_utilization_busy"] >= 0.90
    assert paged["steps"] < rm["steps"]
    assert rm["finished"] == paged["finished"] == 40
    assert rm["rejected"] == paged["rejected"] == []
    for key in ("steps", "peak_running", "mean_utilization_busy", "mean_utilization", "preemptions",
                "mean_tokens_per_step", "finished", "rejected"):
        assert key in rm and key in paged


def test_cli_matches_library(capsys, classroom):
    out = cli_json(capsys, "--workload", "classroom-40", "--slots", "2048", "--block-size", "16")
    assert out["paged"]["steps"] == classroom[16].summary["steps"]
    assert out["paged"]["mean_utilization_busy"] == classroom[16].summary["mean_utilization_busy"]
    assert out["reserve_max"]["steps"] == classroom["rm"].summary["steps"]


def test_larger_blocks_pull_utilisation_down(classroom):
    u16 = classroom[16].summary["mean_utilization_busy"]
    assert classroom[64].summary["mean_utilization_busy"] < u16
    assert classroom[256].summary["mean_utilization_busy"] < classroom[64].summary["mean_utilization_busy"]
    # 2048 slots / 256 = 8 blocks: never more than 8 sequences
    assert classroom[256].summary["peak_running"] <= 8


@pytest.mark.parametrize("seed", range(8))
def test_calibration_holds_for_other_seeds(seed):
    """The claims are a property of the workload's shape, not of one lucky seed."""
    w = classroom_40(seed=seed)
    rm = simulate(w, ReserveMaxAllocator(2048, w.max_new_tokens), record_snapshots=False).summary
    p = simulate(w, PagedAllocator(2048, 16), record_snapshots=False).summary
    assert rm["peak_running"] == 3 and 0.20 <= rm["mean_utilization_busy"] <= 0.40
    assert 25 <= p["peak_running"] <= 35 and p["mean_utilization_busy"] >= 0.90


def test_classroom_requests_never_exceed_their_reservation(classroom):
    w = classroom_40()
    assert len(w) == 40 and all(r.arrival_step == 0 for r in w.requests)
    assert all(1 <= r.output_len <= w.max_new_tokens for r in w.requests)


# --- a run small enough to trace by hand -------------------------------------------------------

TINY = Workload("tiny", (Request(1, 3, 3), Request(2, 2, 2)), max_new_tokens=3)


def test_paged_tiny_run_step_by_step():
    res = simulate(TINY, PagedAllocator(8, 4), check_invariants=True)
    m = res.metrics
    # t0: both admitted (1 block each), prefill emits a token each: r1 holds 4, r2 holds 3.
    # t1: r1 needs a 2nd block, none free -> preempts r2 (youngest); r1 holds 5.
    # t2: r2 cannot be re-admitted (no free block); r1 emits its 3rd token and finishes.
    # t3: r2 re-admitted with context 3 (prompt 2 + 1 generated), emits its 2nd token, finishes.
    assert res.steps == 4
    assert m["used_slots"].tolist() == [7, 5, 0, 0]
    assert m["allocated_slots"].tolist() == [8, 8, 0, 0]
    # r1 will hold 6 tokens at the end, r2 4: at t0 r2's block is exactly its final length, r1's
    # first block will fill (1 slot reserved for a token still to come); at t1 r1's second block
    # has 3 empty slots, of which it will write 1 and never the other 2.
    assert m["reserved_slots"].tolist() == [1, 1, 0, 0]
    assert m["internal_fragmentation"].tolist() == [0, 2, 0, 0]
    assert m["running"].tolist() == [2, 1, 1, 1]       # the batch, including one that finishes
    assert m["waiting"].tolist() == [0, 1, 1, 0]
    assert m["preemptions"].tolist() == [0, 1, 0, 0]
    assert m["tokens"].tolist() == [2, 1, 1, 1]
    assert m["finished"].tolist() == [0, 0, 1, 2]
    assert (m["running"] == m["tokens"]).all()
    assert m["next_need"].tolist() == [0, 4, 4, 0]
    assert res.summary["preemptions"] == 1
    assert res.summary["mean_utilization_busy"] == pytest.approx((5 / 8 + 0) / 2)
    owner, state = slot_states(res, 0)
    assert owner.tolist() == [1, 1, 1, 1, 2, 2, 2, 2]
    assert state.tolist() == [TOKEN] * 4 + [TOKEN] * 3 + [EMPTY]


def test_reserve_max_tiny_run_step_by_step():
    res = simulate(TINY, ReserveMaxAllocator(8, 3), check_invariants=True)
    m = res.metrics
    # r1 reserves 3 + 3 = 6 slots at 0..5; r2 needs 2 + 3 = 5 contiguous, only 2 remain.
    assert res.steps == 5
    assert m["allocated_slots"].tolist() == [6, 6, 0, 5, 0]
    assert m["used_slots"].tolist() == [4, 5, 0, 3, 0]
    # r2's 5 slots exceed the 2 free ones together: a shortage, not fragmentation (no placement
    # could admit it), so those 2 slots are free memory, drawn free
    assert m["external_fragmentation"].tolist() == [0, 0, 0, 0, 0]
    assert m["free_other_slots"].tolist() == [2, 2, 8, 3, 8]
    # r1 (final length 6) reserved 6: nothing it never writes; r2 (final 4) reserved 5: one slot
    assert m["internal_fragmentation"].tolist() == [0, 0, 0, 1, 0]
    assert m["running"].tolist() == [1, 1, 1, 1, 1]
    assert m["waiting"].tolist() == [1, 1, 1, 0, 0]
    owner, state = slot_states(res, 0)
    assert owner.tolist() == [1] * 6 + [-1, -1]
    assert state.tolist() == [TOKEN] * 4 + [EMPTY] * 2 + [FREE] * 2
    owner, state = slot_states(res, 3)
    assert state.tolist() == [TOKEN] * 3 + [EMPTY] * 2 + [FREE] * 3


def test_first_fit_takes_the_lowest_address_hole():
    a = ReserveMaxAllocator(100, 10)
    # admit(seq_id, prompt_len, context_len, output_len) returns the room: the whole reservation
    assert [a.admit(s, 10, 10, 5) for s in range(3)] == [20, 20, 20]       # 0-19, 20-39, 40-59
    a.free(1)
    assert a.admit(3, 5, 5, 5) == 15      # 15 slots: fits the 20-slot hole at 20
    assert a.run_of(3) == (20, 15)
    assert a.external_fragmentation(20) == 5          # the 5-slot hole left at 35..39
    assert a.holes(20) == [(35, 5)]
    assert a.admit(4, 80, 80, 5) is None and a.allocated_slots == 55   # refused: nothing changes


def test_paged_block_table_is_exact_and_physical_order_scrambles():
    a = PagedAllocator(64, 4)
    assert a.admit(0, 5, 5, 1) == 8                    # 6 tokens -> 2 blocks, room for 8
    assert a.block_tables[0] == [0, 1]
    assert a.admit(1, 1, 1, 1) == 4                    # 2 tokens -> 1 block
    a.free(0)                                          # last block first: 1, then 0, join the back
    assert a.pool.free_queue()[-2:] == [1, 0]
    assert [a.grow(1) for _ in range(4)] == [8, 12, 16, 20]
    a.check_invariants({1: 18})
    assert a.block_tables[1] == [2, 3, 4, 5, 6] and a.units_in_use == 5


def test_preempting_the_newcomer_before_it_ran_is_impossible():
    """The issue's smallest case: 16 slots in blocks of 4; r1 (prompt 3, output 10, at step 0) and
    r2 (prompt 7, output 2, at step 5). At step 5 r1 needs its third block and r2 needs two.
    Serving the running first, r1 takes the block and r2 waits: no preemption, no phantom work."""
    w = Workload("smallest", (Request(1, 3, 10, 0), Request(2, 7, 2, 5)), max_new_tokens=10)
    for mode in ("recompute", "swap"):
        res = simulate(w, PagedAllocator(16, 4, preemption=mode), check_invariants=True)
        s = res.summary
        assert (s["preemptions"], s["recomputed_tokens"], s["swapped_blocks"]) == (0, 0, 0), mode
        # r1 holds 13 tokens at step 9 (its 4th block) and finishes; r2 is admitted at step 10
        assert res.metrics["waiting"].tolist() == [0] * 5 + [1] * 5 + [0, 0]
        assert res.metrics["units"].tolist() == [1, 2, 2, 2, 2, 3, 3, 3, 3, 0, 2, 0]
        assert s["steps"] == 12 and s["finished"] == 2


def test_no_admission_in_a_step_that_preempted():
    """vLLM's rule: a step that evicted a running sequence admits nobody, even if room appeared."""
    # r1 and r2 fill the 4 blocks; at step 4 r1 needs a block -> r2 is preempted (recompute);
    # r3, waiting since step 1, must not be admitted at step 4.
    w = Workload("rule", (Request(1, 3, 9, 0), Request(2, 3, 9, 0), Request(3, 1, 1, 1)), max_new_tokens=9)
    res = simulate(w, PagedAllocator(16, 4), check_invariants=True)
    m = res.metrics
    step = int(np.flatnonzero(m["preemptions"])[0])
    assert m["running"][step] == 1 and m["waiting"][step] >= 1
    assert m["recomputed_tokens"][step] == 0               # nothing is prefilled again in that step
    assert res.summary["finished"] == 3


# --- rejection, invariants, determinism --------------------------------------------------------

def test_one_token_answers_still_count_as_running():
    """A request admitted and finished in the same step was in that step's batch."""
    w = Workload("short", tuple(Request(i, 10, 1) for i in range(1, 6)), max_new_tokens=1)
    res = simulate(w, PagedAllocator(64, 16), check_invariants=True)
    assert res.summary["peak_running"] == 4 and res.metrics["running"].tolist() == [4, 1]
    assert res.summary["finished"] == 5


def test_request_that_can_never_fit_is_rejected_with_reason():
    w = Workload("big", (Request(1, 10, 5), Request(2, 5000, 5), Request(3, 20, 5)), max_new_tokens=10)
    for alloc in (ReserveMaxAllocator(256, 10), PagedAllocator(256, 16)):
        res = simulate(w, alloc, check_invariants=True)
        assert res.summary["finished"] == 2
        assert [r["id"] for r in res.summary["rejected"]] == [2]
        assert "pool has only" in res.summary["rejected"][0]["reason"]


@pytest.mark.parametrize("block_size", [1, 3, 16, 24, 256])
@pytest.mark.parametrize("arrival", ["burst", "trickle"])
def test_invariants_hold_after_every_step(block_size, arrival):
    w = generate_workload(seed=block_size, num_requests=30, prompt_len_range=(5, 120), output_mean=80,
                          max_new_tokens=300, arrival=arrival, arrival_rate=0.3)
    for alloc in (ReserveMaxAllocator(1000, 300), PagedAllocator(1000, block_size)):
        res = simulate(w, alloc, check_invariants=True)
        m = res.metrics
        assert (m["allocated_slots"] + m["free_slots"] == 1000).all()
        assert (m["used_slots"] <= m["allocated_slots"]).all()
        assert res.summary["finished"] + len(res.summary["rejected"]) == 30
        assert int(m["tokens"].sum()) >= sum(r.output_len for r in w.requests) - sum(
            r.output_len for r in w.requests if r.id in {x["id"] for x in res.rejected})


def test_same_seed_same_result():
    a = run_scenario(Scenario(seed=3), record_snapshots=False)
    b = run_scenario(Scenario(seed=3), record_snapshots=False)
    for key in a:
        assert a[key].summary == b[key].summary
        for name in a[key].metrics:
            assert np.array_equal(a[key].metrics[name], b[key].metrics[name])


@pytest.mark.parametrize("kwargs, field", [
    (dict(total_slots=2048, block_size=0), "block_size"),
    (dict(total_slots=0, block_size=16), "total_slots"),
    (dict(total_slots=8, block_size=16), "larger than the pool"),
])
def test_bad_allocator_settings_name_the_field(kwargs, field):
    with pytest.raises(ValueError, match=field):
        PagedAllocator(**kwargs)


def test_output_above_max_new_tokens_is_refused():
    with pytest.raises(ValueError, match="max_new_tokens"):
        Workload("w", (Request(1, 5, 50),), max_new_tokens=10)
    w = Workload("w", (Request(1, 5, 50),), max_new_tokens=60)
    with pytest.raises(ValueError, match="max_new_tokens"):
        simulate(w, ReserveMaxAllocator(1000, 10))


def test_cli_bad_block_size_is_a_clear_error(capsys):
    assert main(["simulate", "--block-size", "0", "--json"]) == 2
    err = capsys.readouterr().err
    assert "--block-size 0 must be a whole number from 1 to 4,096" in err and "Traceback" not in err


def test_block_size_sweep_rows():
    w = classroom_40()
    rows = block_size_sweep(w, 2048, (1, 16, 256), metadata_cost=1.0)
    assert [r["block_size"] for r in rows] == [1, 16, 256]
    assert [r["blocks"] for r in rows] == [2048, 128, 8]
    assert rows[0]["mean_utilization_busy"] > rows[1]["mean_utilization_busy"] > rows[2]["mean_utilization_busy"]
    # c = 1 charges one slot per block in use: block size 1 pays about one extra slot per token
    assert rows[0]["cost_per_token_busy"] > 1.9
    assert rows[1]["cost_per_token_busy"] < rows[0]["cost_per_token_busy"]


# --- the engine's shape (issue 20): one loop for both schedulers, drawing outside the engine ---------

def test_idle_gap_is_one_record_under_either_scheduler():
    """The idle-gap skip is written once (``allocator.engine.loop``): the classroom and the v1
    scheduler record the same gap between two requests 1,000 steps apart."""
    from allocator.engine.v1 import V1Rules

    w = Workload("gap", (Request(1, 10, 3, 0), Request(2, 20, 2, 1000)), max_new_tokens=10)
    runs = [simulate(w, PagedAllocator(256, 16)), simulate(w, PagedAllocator(256, 16), rules=V1Rules())]
    for res in runs:
        m = res.metrics
        gap = int(np.flatnonzero(m["span"] > 1)[0])
        assert (int(m["step"][gap]), int(m["span"][gap])) == (3, 997)        # steps 3..999, then request 2
        assert int(m["finished"][gap]) == 1 and int(m["allocated_slots"][gap]) == 0
        assert all(int(m[k][gap]) == 0 for k in ("running", "waiting", "tokens", "prefill_tokens", "logical_tokens"))
        assert res.steps == 1002 and res.summary["finished"] == 2
        assert slot_states(res, 500)[1].tolist() == [FREE] * 256             # the gap's picture: an empty pool


# --- a record's columns, by name (allocator/engine/loop.py) -----------------------------------

def test_run_record_takes_the_step_columns_by_name():
    """``Run.record``'s keywords are :class:`StepRecord`'s fields, then the cache counters and the
    tokens emitted: the one list of names a scheduler writes and ``build_result`` reads back."""
    params = [p.name for p in inspect.signature(Run.record).parameters.values() if p.kind is p.KEYWORD_ONLY]
    assert params == [*STEP_COLUMNS, *CACHE_STEP_COLUMNS, "tokens"]
    assert STEP_COLUMNS == StepRecord._fields and POOL_COLUMNS == PoolRecord._fields


@pytest.mark.parametrize("make, tokens_column", [
    (lambda: PagedAllocator(256, 16), False),                                    # the paged, plain
    (lambda: ReserveMaxAllocator(256, 8), False),                                # a reservation allocator
    (lambda: PagedAllocator(256, 16, preemption="swap"), False),                 # swap
    (lambda: PagedAllocator(256, 16, prefix_caching=True), True),                # prefix cache and tokens (v1)
])
def test_each_counter_lands_in_the_column_of_its_name(make, tokens_column):
    """Every way ``Run.record`` packs a record puts each keyword's value under its own name: a
    record written with 18 distinct counters reads back each one where ``run.names`` says."""
    w = Workload("one", (Request(1, 4, 2, 0),), max_new_tokens=8)
    run = Run(w, make(), clock=None, seconds_per_step=None, record_snapshots=False, tokens_column=tokens_column)
    written = {name: 1000 + i for i, name in enumerate([*STEP_COLUMNS, *CACHE_STEP_COLUMNS, "tokens"])}
    run.record(**written)
    row = dict(zip(run.names, np.frombuffer(run.rows, dtype="<i8").tolist()))
    assert len(row) == len(run.names) == len(run.rows) // 8
    expected = {name: v for name, v in written.items() if name in run.names}
    assert {name: row[name] for name in expected} == expected
    assert ("tokens" in run.names) == tokens_column and ("prefix_hit_tokens" in run.names) == run.caching
    assert row["allocated_slots"] == 0 and row["swapped_blocks"] == 0      # the pool, read after: empty


def test_record_plain_writes_the_bytes_record_writes():
    """``Run.record_plain`` (positional, span 1: the classroom scheduler's busy steps in a plain paged
    run) packs exactly what ``Run.record`` packs for the same counters, pool columns included."""
    w = Workload("one", (Request(1, 40, 2, 0),), max_new_tokens=8)
    alloc = PagedAllocator(250, 16)
    run = Run(w, alloc, clock=None, seconds_per_step=None, record_snapshots=False, tokens_column=False)
    assert run.plain
    alloc.admit(1, 40, 40, 2)                  # some blocks in use, an unwritten tail, the 10-slot remainder
    counters = {name: 1000 + i for i, name in enumerate(STEP_COLUMNS)}
    counters["span"] = 1
    run.record(**counters)
    run.record_plain(*(counters[name] for name in STEP_COLUMNS if name != "span"))
    first, second = np.frombuffer(run.rows, dtype="<i8").reshape(2, -1).tolist()
    assert first == second
    row = dict(zip(run.names, first))
    assert row["units"] == 3 and row["allocated_slots"] == 48 and row["external_fragmentation"] == 10
    assert row["internal_fragmentation"] == 48 - 42
    for make in (lambda: PagedAllocator(256, 16, preemption="swap"), lambda: ReserveMaxAllocator(256, 8),
                 lambda: PagedAllocator(256, 16, prefix_caching=True)):
        assert not Run(w, make(), clock=None, seconds_per_step=None, record_snapshots=False,
                       tokens_column=False).plain
