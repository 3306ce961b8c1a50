"""The kernel sweep's time plan (kernels/sweep/plan.py) on a fake clock: the figure a budgeted sweep
states is one it keeps, on a steady machine and on one that slows down after the estimate (issue 24:
measured 13 s against a stated 11 s, 39 s against 33 s, before the plan enforced what it stated)."""
from __future__ import annotations

import pytest

from kernels.sweep.plan import GUARD, LOAD_MARGIN, MAX_REPEATS, MIN_REPEATS, SLACK_S, SweepPlan, choose_repeats


class FakeClock:
    """Seconds that move only when a step of the simulated sweep says so."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now

    def spend(self, seconds: float) -> None:
        self.now += seconds


def simulate(page_s: float, pair_s: float, stats_s: float, blocks: int = 9, budget_s: float = 45.0,
             limit_s: float = 60.0, slow_after: float = 1.0, setup_s: float = 0.5,
             repeats: int | None = None) -> dict:
    """Drive a plan exactly as ``kernels.sweep.run.sweep`` does, each step costing its figure (times
    ``slow_after`` once the figure is stated). Returns what the sweep would report."""
    clock = FakeClock()
    plan = SweepPlan(blocks, budget_s, limit_s, clock=clock, enforce=repeats is None)
    clock.spend(setup_s)                                     # tokens, the contiguous side's first call
    factor, pairs, skipped = 1.0, [], []
    for i in range(blocks):
        if i > 0 and not plan.fits_block(i):
            skipped = list(range(i, blocks))
            break
        clock.spend(page_s * factor)
        plan.note("page", page_s * factor)
        if i == 0:
            clock.spend(pair_s)
            plan.note("pair", pair_s)
            clock.spend(stats_s)
            plan.note("stats", stats_s)
            plan.calibrate(repeats)
            factor = slow_after
        n = plan.pairs_for(i)
        clock.spend(pair_s * factor)                          # the warm-up pair
        done = 0
        for j in range(n):
            if not plan.another_pair(i, j):
                break
            clock.spend(pair_s * factor)
            if j > 0:
                plan.note("pair", pair_s * factor)
            done += 1
        clock.spend(stats_s * factor)
        plan.note("stats", stats_s * factor)
        pairs.append(done)
    return {"wall_s": plan.elapsed(), "stated_s": plan.stated_s, "plan_s": plan.plan_s, "pairs": pairs,
            "skipped": skipped}


def test_choose_repeats_fits_the_budget_and_clamps():
    # 9 block sizes, 0.2 s paging + pairs of 0.3 s, 45 s budget, 1 s spent: (44 / 9 - 0.2) // 0.3 - 1 = 14
    n, est = choose_repeats(45, 1.0, 9, 0.2, 0.3)
    assert n == 14 and est == pytest.approx(1.0 + 9 * (0.2 + 15 * 0.3))
    assert choose_repeats(45, 1.0, 9, 0.2, 10.0)[0] == MIN_REPEATS == 3
    assert choose_repeats(45, 1.0, 9, 0.2, 0.001)[0] == MAX_REPEATS == 15


def test_a_steady_machine_keeps_to_the_stated_figure_with_the_planned_pairs():
    # the realistic CPU shape on the lab machine: paging 0.5 s, a pair 0.6 s, statistics 0.06 s
    r = simulate(page_s=0.5, pair_s=0.6, stats_s=0.06)
    # plan: (45 - 0.5 - 0.5 ... ) chooses n from the budget; the stated figure is plan x 1.2 + 2 s
    n, plan = choose_repeats(45.0, 1.0 + 0.6 + 0.06, 9, 0.56, 0.6)
    assert r["plan_s"] == pytest.approx(plan - 0.5)
    assert r["stated_s"] == pytest.approx(min(60.0, r["plan_s"] * LOAD_MARGIN + SLACK_S))
    assert r["pairs"] == [n] * 9 and r["skipped"] == []
    assert r["wall_s"] <= r["plan_s"] + 1e-9 <= r["stated_s"]


def test_a_fast_machine_times_fifteen_pairs_and_states_little():
    r = simulate(page_s=0.05, pair_s=0.04, stats_s=0.06)      # the old 11 s case: far under the budget
    assert r["pairs"] == [MAX_REPEATS] * 9 and r["stated_s"] < 15
    assert r["wall_s"] <= r["stated_s"]


@pytest.mark.parametrize("slow", [1.1, 1.25, 1.5, 2.0, 3.0])
def test_a_machine_that_slows_after_the_estimate_never_passes_the_stated_figure(slow):
    """Load arrives after the estimate: the sweep times fewer pairs, then leaves block sizes out,
    and says so -- but never takes longer than it said."""
    for page_s, pair_s in ((0.5, 0.6), (0.05, 0.04), (2.0, 1.5)):
        r = simulate(page_s=page_s, pair_s=pair_s, stats_s=0.06, slow_after=slow)
        assert r["wall_s"] <= r["stated_s"], (page_s, pair_s, slow, r)
        assert all(p >= MIN_REPEATS for p in r["pairs"])
        assert len(r["pairs"]) + len(r["skipped"]) == 9


def test_what_no_plan_can_see_coming():
    """The limit of the rules: a step slower than any seen, with the least room left. Here every
    step turns four times slower just after the estimate, paging 8 s where 2 s was seen: the sweep
    passes the 60 s it stated by less than that one paging step's surprise (6 s)."""
    r = simulate(page_s=2.0, pair_s=1.5, stats_s=0.06, slow_after=4.0)
    assert r["stated_s"] == 60.0 and r["skipped"]
    assert r["wall_s"] <= r["stated_s"] + 4 * 2.0 - 2.0


def test_slower_pairs_are_cut_before_block_sizes_are_left_out():
    r = simulate(page_s=0.5, pair_s=0.6, stats_s=0.06, slow_after=1.5)
    assert r["skipped"] == [] and min(r["pairs"]) < r["pairs"][0]       # all nine, fewer pairs later
    r = simulate(page_s=0.5, pair_s=0.6, stats_s=0.06, slow_after=4.0)
    assert r["skipped"] and r["wall_s"] <= r["stated_s"]


def test_a_machine_too_slow_for_the_budget_states_the_hard_limit_and_keeps_it():
    r = simulate(page_s=3.0, pair_s=2.0, stats_s=0.06)         # three pairs everywhere is 9 x 11 s
    assert r["stated_s"] == 60.0 and r["skipped"]
    assert r["wall_s"] <= 60.0 and all(p == MIN_REPEATS for p in r["pairs"])


def test_the_stop_rules_price_the_work_ahead_above_what_it_has_cost():
    clock = FakeClock()
    plan = SweepPlan(2, 45.0, 60.0, clock=clock)
    plan.note("page", 1.0)
    for x in (0.5, 1.5):
        plan.note("pair", x)                                   # mean 1.0, dearest 1.5
    plan.note("stats", 0.0)
    plan.calibrate()
    clock.spend(plan.stated_s - GUARD * (1.0 + (MIN_REPEATS + 1) * 1.0))
    assert plan.fits_block(1)                                  # exactly at the guarded cost
    clock.spend(0.01)
    assert not plan.fits_block(1)
    assert plan.another_pair(1, MIN_REPEATS - 1)               # below the minimum: always
    clock.now = plan.t0 + plan.stated_s - 1.5                  # the last block: one dearest pair left
    assert plan.another_pair(1, MIN_REPEATS)
    clock.spend(0.01)
    assert not plan.another_pair(1, MIN_REPEATS)


def test_a_fixed_pair_count_states_its_estimate_and_stops_nothing():
    r = simulate(page_s=0.5, pair_s=0.6, stats_s=0.06, repeats=5, slow_after=3.0)
    assert r["pairs"] == [5] * 9 and r["skipped"] == []
    # set-up 0.5 s, then nine block sizes of paging, a warm-up pair, 5 pairs and statistics
    assert r["stated_s"] == pytest.approx(0.5 + 0.6 + 0.06 + 9 * (0.5 + 6 * 0.6 + 0.06))
    assert r["wall_s"] > r["stated_s"]             # a fixed count on a slowed machine: not enforced
