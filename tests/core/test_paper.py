"""Issue 21: the paper's workload, the artifact's Orca estimators and buddy allocator."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from allocator.memory.reserve_max import ReserveMaxAllocator
from allocator.memory.buddy import BuddyBlocks, next_pow2, output_estimate, reservation_blocks
from allocator.engine.simulate import simulate
from allocator.workloads.sharegpt import sharegpt_lengths, sharegpt_workload
from allocator.common.errors import FieldError
from allocator.workloads.requests import Request, Workload


# --- the workload ---------------------------------------------------------------------------------

def test_sharegpt_filtered_means_are_the_papers():
    df = sharegpt_lengths()
    assert len(df) == 79_725
    assert (df["prompt_tokens"] + df["output_tokens"]).max() < 2048
    assert abs(df["prompt_tokens"].mean() - 161.2) <= 0.1
    assert abs(df["output_tokens"].mean() - 338.0) <= 0.1


def test_sharegpt_workload_arrives_per_10ms_quantum_with_exact_outputs():
    w = sharegpt_workload(2.0, 600, seed=0)
    arr = [r.arrival_s for r in w.requests]
    assert arr == sorted(arr)
    assert all(abs(a * 100 - round(a * 100)) < 1e-6 for a in arr)      # on 10 ms boundaries
    assert 1100 < len(w) < 1300                                        # ~2/s for 600 s
    assert w.max_new_tokens == 2048
    pairs = set(zip(sharegpt_lengths()["prompt_tokens"][: len(w)], sharegpt_lengths()["output_tokens"][: len(w)]))
    assert {(r.prompt_len, r.output_len) for r in w.requests} <= pairs   # the first N pairs, shuffled
    assert sharegpt_workload(2.0, 600, seed=0).requests == w.requests    # the seed decides everything


def test_sharegpt_workload_refuses_bad_rate():
    with pytest.raises(FieldError) as e:
        sharegpt_workload(0, 600)
    assert e.value.field == "rates"


# --- the estimators, on hand-computed cases --------------------------------------------------------

@pytest.mark.parametrize("estimator,output,expected", [
    ("max", 300, 2048), ("pow2", 300, 512), ("oracle", 300, 300),
    ("pow2", 1, 1), ("pow2", 512, 512), ("pow2", 513, 1024), ("oracle", 1, 1),
])
def test_output_estimate(estimator, output, expected):
    assert output_estimate(output, estimator) == expected


@pytest.mark.parametrize("prompt,output,estimator,blocks,run", [
    (100, 300, "max", 128, 128),        # min(100 + 2048, 2048) / 16 = 128
    (100, 300, "pow2", 39, 64),         # ceil((100 + 512) / 16) = ceil(38.25) = 39 -> 64
    (100, 300, "oracle", 25, 32),       # (100 + 300) / 16 = 25 -> 32
    (1500, 300, "pow2", 126, 128),      # 1500 + 512 = 2012 -> ceil(125.75) = 126 -> 128
    (16, 16, "oracle", 2, 2),
    (17, 16, "oracle", 3, 4),
    (1, 1, "max", 128, 128),
])
def test_reservation_blocks(prompt, output, estimator, blocks, run):
    assert reservation_blocks(prompt, output, estimator) == blocks
    assert next_pow2(blocks) == run
    alloc = ReserveMaxAllocator(15_728, 2048, estimator, placement="buddy")
    assert alloc.reservation(prompt, output) == run * 16


def test_unknown_estimator_and_placement_are_named():
    with pytest.raises(FieldError) as e:
        output_estimate(3, "median")
    assert e.value.field == "estimator"
    with pytest.raises(FieldError) as e:
        ReserveMaxAllocator(100, 10, "max", placement="best-fit")
    assert e.value.field == "placement"


# --- the buddy allocator against a plain model -----------------------------------------------------

def test_initial_pool_is_128_block_runs_then_halves():
    b = BuddyBlocks(983, 128)           # the paper's 15,728 slots / 16
    assert b.initial_runs() == [(i * 128, 128) for i in range(7)] + [(896, 64), (960, 16), (976, 4), (980, 2), (982, 1)]
    assert b.free_list() == b.initial_runs()
    assert b.num_free == 983


def test_split_and_merge_by_hand():
    b = BuddyBlocks(128, 128)
    a = b.allocate(3)                   # 4 blocks: 128 -> 64 + 32 + 16 + 8 + 4 + (4 taken)
    assert a == 0
    assert b.free_list() == [(4, 4), (8, 8), (16, 16), (32, 32), (64, 64)]
    c = b.allocate(4)                   # the smallest fit is the free 4 at block 4
    assert c == 4
    b.free(a)                           # block 0's buddy (4) is owned: no merge
    assert (0, 4) in b.free_list()
    b.free(c)                           # now 0+4 -> 8, +8 -> 16, ... back to one 128-block run
    assert b.free_list() == [(0, 128)]
    b.check_invariants()


def test_buddy_never_merges_past_max_run_or_with_a_different_size():
    b = BuddyBlocks(256, 128)
    x, y = b.allocate(128), b.allocate(128)
    b.free(x)
    b.free(y)
    assert b.free_list() == [(0, 128), (128, 128)]


@settings(max_examples=60, deadline=None)
@given(ops=st.lists(st.tuples(st.booleans(), st.integers(1, 130), st.integers(0, 10_000)), max_size=60),
       blocks=st.integers(1, 400))
def test_buddy_against_a_plain_model(ops, blocks):
    """Every block has at most one owner, free counts add up, allocations are power-of-two aligned
    runs, a failed allocation means no free run is large enough, and freeing everything merges
    the pool back to its first shape."""
    b = BuddyBlocks(blocks, 128)
    owner = [None] * blocks             # the plain model: who holds each block
    held = {}                           # start -> size
    for n, (alloc, size, pick) in enumerate(ops):
        if alloc or not held:
            start = b.allocate(size)
            want = 1 << (size - 1).bit_length()
            if start is None:
                assert want > 128 or all(s < want for _, s in b.free_list())
                continue
            assert start % want == 0 and start + want <= blocks
            for i in range(start, start + want):
                assert owner[i] is None, f"block {i} given twice"
                owner[i] = n
            held[start] = want
        else:
            start = sorted(held)[pick % len(held)]
            for i in range(start, start + held.pop(start)):
                owner[i] = None
            b.free(start)
        b.check_invariants()
        assert b.num_free == owner.count(None)
        free_blocks = {i for s, size in b.free_list() for i in range(s, s + size)}
        assert free_blocks == {i for i, o in enumerate(owner) if o is None}
    for start in list(held):
        b.free(start)
    assert b.free_list() == b.initial_runs()


def test_buddy_reservations_run_in_the_engine_with_invariants():
    reqs = tuple(Request(i + 1, p, o, i) for i, (p, o) in enumerate([(100, 300), (20, 5), (900, 900), (5, 40),
                                                                      (300, 1000), (16, 16)] * 5))
    w = Workload("t", reqs, 2048)
    for policy in ("max", "pow2", "oracle"):
        res = simulate(w, ReserveMaxAllocator(4096, 2048, policy, placement="buddy"), check_invariants=True)
        assert res.summary["finished"] == len(reqs)
        m = res.metrics
        # the reservation share is exactly the tokens the running requests will still write, and the
        # rest of what is allocated and empty is never written (issue 23's shares)
        assert (m["pending_tokens"] == m["reserved_slots"]).all()
        assert (m["allocated_slots"] - m["used_slots"] - m["duplicate_slots"]
                == m["reserved_slots"] + m["internal_fragmentation"]).all()


def test_buddy_rejects_a_request_longer_than_the_cap_with_a_reason():
    w = Workload("t", (Request(1, 2000, 100, 0), Request(2, 100, 100, 0)), 2048)
    res = simulate(w, ReserveMaxAllocator(4096, 2048, "oracle", placement="buddy"))
    assert [r["id"] for r in res.rejected] == [1]
    assert "2100 tokens" in res.rejected[0]["reason"] and "2048-token context" in res.rejected[0]["reason"]
    assert res.summary["finished"] == 1


# --- the wrong attribution is gone ------------------------------------------------------------------

def test_the_paper_rate_ranges_are_never_attributed_to_opt13b_alone():
    """Section 6.2's "1.7-2.7x Orca (Oracle), 2.7-8x Orca (Max)" spans OPT-13B, 66B and 175B:
    wherever the app's code or docs quote the range, the other models are named beside it."""
    import pathlib
    import re

    root = pathlib.Path(__file__).resolve().parents[2]
    pattern = re.compile(r"1\.7\s*[-–]\s*2\.7|2\.7\s*[-–]\s*8\b|\{lo_o:g\}")
    seen = 0
    for path in [*root.glob("allocator/**/*.py"), *root.glob("pages/**/*.py"), root / "README.md", root / "app.py"]:
        text = path.read_text(encoding="utf-8")
        for m in pattern.finditer(text):
            seen += 1
            near = text[max(0, m.start() - 400): m.end() + 400]
            assert "175B" in near or "rate_ratio_models" in near, (path, near)
    assert seen >= 3


def test_paper_comparison_names_the_models_of_the_range():
    from allocator.studies.rate_sweep import rate_sweep
    from allocator.cost.roofline import cost_model
    from allocator.viz.claims.throughput import paper_comparison

    sweep = rate_sweep(cost_model("a100-40gb", "opt-13b"), (0.5, 1.0), requests=60)
    paper = paper_comparison(sweep)["paper"]
    assert "OPT-13B, OPT-66B and OPT-175B together" in paper
    assert "2.2x" in paper and "4.3x" in paper


def test_buddy_rounding_is_drawn_as_allocated_and_empty():
    """The map shows a buddy reservation as what it is: the request's tokens, then orange (EMPTY)
    for the rest of its power-of-two run, rounding included."""
    from allocator.viz.maps import EMPTY, TOKEN, slot_states

    w = Workload("t", (Request(1, 100, 300, 0),), 2048)      # oracle: 25 blocks -> a 32-block run
    res = simulate(w, ReserveMaxAllocator(2048, 2048, "oracle", placement="buddy"))
    owner, state = slot_states(res, 0)
    assert (owner == 1).sum() == 32 * 16
    assert (state == TOKEN).sum() == 101                      # prompt + the first token
    assert (state == EMPTY).sum() == 32 * 16 - 101
    assert res.metrics["pending_tokens"][0] == 400 - 101
    assert res.metrics["reserved_slots"][0] == 400 - 101            # still to be written
    assert res.metrics["internal_fragmentation"][0] == 32 * 16 - 400   # never written, rounding included


def test_scenario_and_cli_take_the_buddy_placement():
    from allocator.engine.scenario import Scenario, run_scenario

    sc = Scenario(workload="sharegpt-opt", policy="oracle", placement="buddy", count=30)
    res = run_scenario(sc, record_snapshots=False)
    assert res["reserve_max"].label == "Reserve-oracle (buddy)"
    assert res["reserve_max"].summary["finished"] == 30
    with pytest.raises(FieldError) as e:
        Scenario(placement="best-fit").checked()
    assert e.value.field == "placement"
    # the explainer (reference figure R7) keeps first fit
    assert Scenario().placement == "first-fit"
    assert run_scenario(Scenario(), record_snapshots=False)["reserve_max"].label == "Reserve-max"


def test_cli_paper_replication_json_carries_paper_and_ours(capsys, monkeypatch):
    """``python -m allocator paper-replication --json``: each figure's paper value beside ours."""
    import json

    import allocator.cli.paper as cli_paper
    from allocator.__main__ import main
    from allocator.studies.paper import PAPER_FIGURES, replication_for

    monkeypatch.setattr(cli_paper, "paper_replication", lambda seed=0: replication_for(seed))
    assert main(["paper-replication", "--json", "--quick"]) == 0
    out = json.loads(capsys.readouterr().out)
    rep = replication_for(0)
    for s in ("max", "pow2", "oracle", "paged"):
        assert out["fig13"]["systems"][s]["paper"] == PAPER_FIGURES["fig13"]["batch"][s]
        assert out["fig13"]["systems"][s]["ours"] == rep.fig13_mean(s)
        assert out["fig2"]["systems"][s]["paper_token_states"] == PAPER_FIGURES["fig2"]["token_states"][s]
        assert out["fig2"]["systems"][s]["token_states"] == rep.fig2[s]["token_states"]
        assert out["fig2"]["systems"][s]["artifact"] == rep.fig2[s]["artifact"]
        assert out["fig2"]["systems"][s]["paper_split"] == PAPER_FIGURES["fig2"]["splits"].get(s)
    assert out["fig2"]["paper_max_split"] == PAPER_FIGURES["fig2"]["max_split"]
    assert out["fig12"]["paper_range_vs_oracle"] == [1.7, 2.7]
    assert out["load"]["scale"] == rep.scale["scale"]
    assert [t["ok"] for t in out["targets"]] == [t["ok"] for t in rep.targets()]
    # the figures add up: every system's four shares partition the pool
    for s in ("max", "pow2", "oracle", "paged"):
        for f in (out["fig2"]["systems"][s], out["fig2"]["systems"][s]["artifact"]):
            assert abs(f["token_states"] + f["reservation"] + f["internal"] + f["external"] - 1) < 1e-9


def test_stop_s_cuts_a_run_at_a_measurement_window():
    import numpy as np

    from allocator.studies.paper import make_system, paper_cost

    cost = paper_cost()
    w = sharegpt_workload(4.0, 120, seed=3)
    alloc = make_system("max")
    res = simulate(w, alloc, record_snapshots=False, clock=cost.for_blocks(None), stop_s=60.0)
    start = np.cumsum(res.metrics["seconds"]) - res.metrics["seconds"]
    assert start[-1] < 60.0 <= start[-1] + res.metrics["seconds"][-1]
    assert res.summary["finished"] < len(w)          # the cut leaves requests running and waiting
    assert res.metrics["waiting"][-1] > 0
    full = simulate(w, make_system("max"), record_snapshots=False, clock=cost.for_blocks(None))
    n = len(res.metrics["step"])
    assert (full.metrics["running"][:n] == res.metrics["running"]).all()     # the same run, cut
    with pytest.raises(FieldError) as e:
        simulate(w, make_system("max"), clock=cost.for_blocks(None), stop_s=0)
    assert e.value.field == "stop_s"


# --- issue 38: Figure 2 in the artifact's categories, Figure 13 over seeds, the section 7 ablations ---

def test_artifact_categories_on_hand_built_buddy_cases():
    """The artifact counts as internal only min(prompt + estimate, 2048) - (prompt + output); the buddy
    run's rounding (to blocks and to a power of two) is left to "external and other"."""
    from allocator.studies.paper import ArtifactReservation, memory_shares, paper_cost

    # (prompt, output): pow2 estimate, run of blocks
    # (100, 300): est 512 -> min(612, 2048) = 612 -> excess 212; 39 blocks -> 64-block run = 1024 -> rounding 412
    # (20, 5):    est 8   -> 28 -> excess 3; 2 blocks -> 32 slots -> rounding 4
    cases = {"pow2": [((100, 300), 212, 412), ((20, 5), 3, 4)],
             "oracle": [((100, 300), 0, 112), ((20, 5), 0, 7)],          # 25 blocks -> 32 = 512; 2 blocks = 32
             "max": [((100, 300), 1648, 0), ((20, 5), 2023, 0)]}        # 128 blocks = 2048: no rounding
    for policy, reqs in cases.items():
        a = ArtifactReservation(4096, 2048, policy, placement="buddy")
        for i, ((p, o), excess, rounding) in enumerate(reqs):
            need = a.admit(i, p, p, o)
            assert need == p + o + excess + rounding, (policy, p, o, need)
            assert a.rounding[i] == rounding
        assert a.never_written == sum(e for _, e, _ in reqs)
        a.free(0)
        assert a.never_written == reqs[1][1]
        a.free(1)
        assert a.never_written == 0 and a.allocated_slots == 0
    # in a run: the artifact's internal is the estimate's excess only; the lab's adds the rounding
    w = Workload("t", (Request(1, 100, 300, 0, arrival_s=0.0), Request(2, 20, 5, 0, arrival_s=0.0)), 2048)
    res = simulate(w, ArtifactReservation(4096, 2048, "oracle", placement="buddy"), record_snapshots=False,
                   clock=paper_cost().for_blocks(None))
    shares = memory_shares(res, (0.0, 1e9))
    assert shares["artifact"]["internal"] == 0.0                           # oracle: no excess, as the paper draws
    assert shares["internal"] > 0                                          # the lab counts the rounding
    assert abs(shares["artifact"]["external"] - (shares["external"] + shares["internal"])) < 1e-12
    for d in (shares, shares["artifact"]):
        assert abs(sum(d[k] for k in ("token_states", "reservation", "internal", "external")) - 1) < 1e-12


def test_figure2_in_the_artifacts_categories_is_within_5_points_of_the_paper():
    from allocator.studies.paper import PAPER_FIGURES, replication_for

    rep = replication_for(0)
    f2 = PAPER_FIGURES["fig2"]
    for s, split in f2["splits"].items():
        paper = {"token_states": f2["token_states"][s], **split}
        for k, v in paper.items():
            assert abs(rep.fig2[s]["artifact"][k] - v) <= 0.05, (s, k, rep.fig2[s]["artifact"][k], v)
    assert rep.fig2["oracle"]["artifact"]["internal"] == 0.0
    assert abs(rep.fig2["paged"]["token_states"] - f2["token_states"]["paged"]) <= 0.05


def test_figure13_spread_over_seeds():
    from allocator.studies.paper import SYSTEMS, add_fig13_spread, replication_for, spread
    from allocator.studies.paper import Replication

    sp = spread([1.0, 2.0, 3.0])
    assert sp["mean"] == 2.0 and sp["std"] == 1.0 and (sp["min"], sp["max"]) == (1.0, 3.0)
    base = replication_for(0)
    rep = Replication(scale=base.scale, fig2=base.fig2, fig13=base.fig13, fig12=base.fig12,
                      sustained=base.sustained)
    with pytest.raises(FieldError) as e:
        add_fig13_spread(rep, seeds=(0,))
    assert e.value.field == "seeds"
    add_fig13_spread(rep, seeds=(0, 1))
    rules = rep.load_rules()
    assert set(rep.fig13_spread) == {"burst", "knee"}
    assert rules["knee"]["scale"] == rules["knee"]["ours"] / rules["knee"]["paper"]
    assert rules["knee"]["ours"] == base.sustained["paged"]["rate"] * base.scale["scale"]
    for s in SYSTEMS:
        b = rep.fig13_spread["burst"][s]
        assert len(b["values"]) == 2
        assert b["values"][0] == pytest.approx(base.fig13[s])          # seed 0 is the replication's own run
        assert rep.fig13_mean(s) == b["mean"]
    # the heavier load of the knee rule batches more vLLM requests
    assert rep.fig13_spread["knee"]["paged"]["mean"] > rep.fig13_spread["burst"]["paged"]["mean"]


def test_swap_cost_per_block_with_and_without_the_transfer_latency():
    import dataclasses

    from allocator.cost.roofline import transfers_per_block
    from allocator.studies.ablations import swap_vs_recompute
    from allocator.studies.paper import paper_cost

    cost = paper_cost()
    m = swap_vs_recompute(cost)
    per_copy = cost.transfer_latency_s
    for bs, swap, bare in zip(m["block_sizes"], m["swap_out_in_s"], m["swap_no_latency_s"]):
        blocks = 256 // bs
        data = 256 * cost.model.bytes_per_token / cost.host_link_bytes_per_s
        assert bare == pytest.approx(2 * data)                        # without the latency: the bytes alone
        assert swap == pytest.approx(2 * (data + blocks * transfers_per_block(cost.model) * per_copy))
    assert m["swap_out_in_s"] == sorted(m["swap_out_in_s"], reverse=True)   # small blocks swap slowly
    assert len(set(round(v, 12) for v in m["swap_no_latency_s"])) == 1
    cross = m["crossover"]
    i = m["block_sizes"].index(cross)
    assert m["swap_out_in_s"][i] <= m["recompute_s"] < m["swap_out_in_s"][i - 1]
    free = swap_vs_recompute(dataclasses.replace(cost, transfer_latency_s=0.0))
    assert free["recompute_s"] == m["recompute_s"]                    # recompute knows no block size
    with pytest.raises(FieldError) as e:
        swap_vs_recompute(cost, tokens=0)
    assert e.value.field == "tokens"


def test_kernel_block_clock_adds_the_kernels_extra_time():
    from allocator.cost.kernel_block import KernelBlockClock
    from allocator.cost.roofline import kv_bytes
    from allocator.studies.paper import paper_cost

    cost = paper_cost()
    args = (100, 5050, 30, 15000, 0)
    assert KernelBlockClock(cost, 16, 1.0).step_seconds(*args) == cost.step_seconds(*args, 16)
    extra = KernelBlockClock(cost, 1, 1.5).step_seconds(*args) - cost.step_seconds(*args, 1)
    assert extra == pytest.approx(0.5 * kv_bytes(cost.model, 15000) / cost.hbm_bytes_per_s)
    with pytest.raises(FieldError) as e:
        KernelBlockClock(cost, 16, 0.5)
    assert e.value.field == "factor"


@pytest.mark.parametrize("block_size,factor", [(1, 1.0078125), (16, 1.0), (16, 1.5), (256, 1.000030517578125)])
@pytest.mark.parametrize("work", [(0, 0, 0, 0, 0), (100, 5050, 30, 15000, 0), (0, 0, 256, 123457, 7),
                                  (2048, 2098176, 1, 2047, 3)])
def test_kernel_block_clock_pricer_gives_step_seconds_exactly(block_size, factor, work):
    """The engine's per-step function (:meth:`KernelBlockClock.pricer`) is :meth:`step_seconds` float for float."""
    from allocator.cost.kernel_block import KernelBlockClock
    from allocator.studies.paper import paper_cost

    clock = KernelBlockClock(paper_cost(), block_size, factor)
    assert clock.pricer()(*work) == clock.step_seconds(*work)


def test_kernel_block_cost_file_is_the_prediction():
    """assets/kernel_block_cost.json is what the lab's kernel prediction gives (no GPU sweep is recorded
    in assets/; once one is, this test asks for the file to be made from it, with source "measured")."""
    import json

    from allocator.cost.kernel_block import kernel_block_factors
    from kernels.sweep import predict
    from kernels.sweep.data import load_recorded

    k = kernel_block_factors()
    assert not load_recorded(), "a GPU sweep is recorded: build assets/kernel_block_cost.json from it"
    assert k["source"] == "prediction"
    report = json.loads((__import__("pathlib").Path(__file__).resolve().parents[2] / "assets"
                         / "kernel_compile_sm90.json").read_text())
    rows = predict.prediction_table(report, **k["shape"])
    assert {r["block_size"]: r["predicted_overhead"] for r in rows if r["block_size"]} == k["factor"]


def test_ablations_reproduce_the_papers_qualitative_result():
    """Figure 18b: large blocks lose; Figure 19: swap far worse than recompute with the smallest block,
    within a factor 1.5 for 16-64 on the mean of three seeds (the paper: comparable; one seed alone
    ranges 1.09-1.51 at block 16). Five block sizes (fast)."""
    from allocator.cost.kernel_block import kernel_block_factors
    from allocator.studies.ablations import ablations
    from allocator.studies.paper import replication_for

    abl = ablations(kernel_block_factors(), scale=replication_for(0).scale["scale"], seeds=(0, 1, 2),
                    block_sizes=(1, 16, 32, 64, 256))
    rec = abl.e2e["recompute"]
    assert rec[256]["mean"] > 2 * rec[16]["mean"]
    assert 16 in abl.best("recompute")
    r = abl.swap_over_recompute()
    assert r[1] > 5 and all(r[b] < 1.5 for b in (16, 32, 64))
    d = abl.to_dict()
    assert d["fig19a"]["crossover"] == abl.micro["crossover"] and d["kernel"]["source"] == "prediction"
    with pytest.raises(FieldError) as e:
        ablations(kernel_block_factors(), scale=1.0, seeds=())
    assert e.value.field == "seeds"


def test_the_spreads_are_the_same_run_in_two_processes():
    """Issue 38: Figure 13's and Figure 12's spreads over seeds run their independent seeded runs in a
    process pool when asked; the values are the same number for number, and the burst rule's run at the
    replication's own seed is the replication's Figure 13 value (reused, not run again)."""
    import dataclasses

    from allocator.studies.paper import SYSTEMS, add_fig12_spread, add_fig13_spread, replication_for

    base = replication_for(0)
    one = dataclasses.replace(base, fig13_spread={}, fig12_spread={})
    two = dataclasses.replace(base, fig13_spread={}, fig12_spread={})
    add_fig13_spread(one, seeds=(0, 1))
    add_fig13_spread(two, seeds=(0, 1), workers=2)
    assert one.fig13_spread == two.fig13_spread
    assert [one.fig13_spread["burst"][s]["values"][0] for s in SYSTEMS] == [base.fig13[s] for s in SYSTEMS]
    add_fig12_spread(one, seeds=(0, 1))
    add_fig12_spread(two, seeds=(0, 1), workers=2)
    assert one.fig12_spread == two.fig12_spread
    for s in SYSTEMS:
        assert [v["values"][0] for v in one.fig12_spread[s]] == \
            [pt["normalized_latency_s_per_token"] for pt in base.fig12[s]]


def test_a_shared_pool_serves_every_run_all_inside_it_with_the_same_values():
    """The full paper-replication's parts share one process pool (allocator.studies.paper.shared_pool):
    inside the block run_all sends its tasks there whatever its ``workers`` (same values, same order,
    progress in order); one block at a time; after it, run_all is back to its own pools."""
    from allocator.studies.paper import run_all, shared_pool

    ticks = []
    with shared_pool(2) as pool:
        assert run_all(abs, [-3, 1, -2], progress=lambda d, t: ticks.append((d, t))) == [3, 1, 2]
        assert run_all(abs, [-5], workers=3) == [5]
        with pytest.raises(FieldError) as e:
            with shared_pool(2):
                pass
        assert e.value.field == "workers"
    assert ticks == [(1, 3), (2, 3), (3, 3)]
    with pytest.raises(RuntimeError):                 # closed with its block
        pool.submit(abs, -1)
    assert run_all(abs, [-1, -2], workers=2) == [1, 2]
    with pytest.raises(FieldError) as e:
        with shared_pool(0):
            pass
    assert e.value.field == "workers"


def test_the_ablations_are_the_same_run_in_two_processes():
    """Issue 38: the section 7 end-to-end runs are independent and seeded; in a process pool they give the
    same latencies, in the same order, with one progress tick per (mode, block size)."""
    from allocator.cost.kernel_block import kernel_block_factors
    from allocator.studies.ablations import ablations

    ticks = []
    kw = dict(scale=1.6558, seeds=(0, 1), block_sizes=(16, 64))
    one = ablations(kernel_block_factors(), **kw, progress=lambda d, t, text: ticks.append((d, t, text)))
    two = ablations(kernel_block_factors(), **kw, workers=2)
    assert one.e2e == two.e2e and list(one.e2e["swap"]) == [16, 64]
    assert ticks == [(1, 4, "block size 16, recompute"), (2, 4, "block size 64, recompute"),
                     (3, 4, "block size 16, swap"), (4, 4, "block size 64, swap")]
