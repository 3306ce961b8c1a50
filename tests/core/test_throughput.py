"""The request-rate sweep (allocator.studies.rate_sweep): Poisson workloads, sustained rates, the
paper's four allocators on the Azure slice."""
import math

import numpy as np
import pytest

from allocator.memory.paged import PagedAllocator
from allocator.engine.simulate import simulate
from hypothesis import given, settings
from hypothesis import strategies as st

from allocator.studies.sustained import INTERPOLATION_SPAN, rate_ratio, sustained_rate, sustained_short
from allocator.studies.rate_sweep import PAPER, POLICIES, RateSweep, parse_rates, rate_sweep, unloaded_latency
from allocator.workloads.poisson import poisson_workload
from allocator.cost.roofline import cost_model
from allocator.cost.timing import price
from allocator.workloads.trace import shipped_trace
from allocator.common.errors import FieldError
from allocator.workloads.requests import Workload


@pytest.fixture(scope="module")
def a100():
    return cost_model("a100-40gb", "opt-13b")


@pytest.fixture(scope="module")
def overloaded(a100):
    """400 Azure-length requests at 3 requests/s: more than any policy sustains on an A100 with
    OPT-13B, so requests wait and memory is the constraint for all four."""
    return rate_sweep(a100, [3.0], requests=400)


def test_sustained_rate_interpolates_by_hand():
    # crosses 0.4 s/token between 2 (0.2) and 3 (1.6) requests/s: (ln 0.4 - ln 0.2) / (ln 1.6 - ln 0.2)
    # = ln 2 / ln 8 = 1/3 of the way, i.e. 2 + 1/3 requests/s (3 is 1.5x 2: fine enough to interpolate)
    s = sustained_rate((1, 2, 3), (0.1, 0.2, 1.6), 0.4)
    assert s["bound"] == "within" and s["rate"] == pytest.approx(2 + 1 / 3)
    assert sustained_rate((1, 2), (0.1, 0.2), 1.0) == {"rate": 2.0, "bound": "above"}
    assert sustained_rate((1, 2), (0.5, 0.9), 0.4) == {"rate": None, "bound": "below"}
    # nothing finished at the next rate: nothing to interpolate towards (was reported as 1.0 "within")
    assert sustained_rate((1, 1.2), (0.1, None), 0.4) == {"rate": None, "bound": "between", "low": 1.0, "high": 1.2}


def test_a_coarse_step_is_a_bracket_not_a_number():
    """A user typed 0.1, 0.2, 500: the crossing between 0.2 and 500 was interpolated to 167 requests/s.
    Across a step wider than INTERPOLATION_SPAN the sustained rate is the bracket itself."""
    assert INTERPOLATION_SPAN == 1.5
    assert sustained_rate((0.1, 0.2, 500), (0.02, 0.03, 9.0), 0.1) == \
        {"rate": None, "bound": "between", "low": 0.2, "high": 500.0}
    # the same curve on 2-4 (a 2x step) is a bracket too; on 2-3 it is interpolated
    assert sustained_rate((1, 2, 4), (0.1, 0.2, 1.6), 0.4)["bound"] == "between"
    assert sustained_short(sustained_rate((0.1, 0.2, 500), (0.02, 0.03, 9.0), 0.1)) == "0.2-500"
    assert sustained_short({"rate": 1.8053, "bound": "within"}) == "1.81"
    assert sustained_short({"rate": 4.0, "bound": "above"}, 3) == "4.000+"


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(0.01, 100), min_size=1, max_size=8, unique=True),
       st.lists(st.one_of(st.none(), st.floats(0.001, 10)), min_size=8, max_size=8), st.floats(0.001, 10))
def test_sustained_rate_is_a_number_only_on_a_fine_step(rates, lats, budget):
    rates = sorted(rates)
    lats = lats[:len(rates)]
    s = sustained_rate(rates, lats, budget)
    over = [v is None or v > budget for v in lats]
    if s["bound"] in ("within", "between"):
        k = over.index(True)                     # the first rate over the budget; the one before was not
        assert k > 0
        if s["bound"] == "within":
            assert rates[k] <= INTERPOLATION_SPAN * rates[k - 1] and lats[k] is not None
            assert rates[k - 1] - 1e-9 <= s["rate"] <= rates[k] + 1e-9
        else:
            assert s["rate"] is None and (s["low"], s["high"]) == (rates[k - 1], rates[k])
            assert rates[k] > INTERPOLATION_SPAN * rates[k - 1] or lats[k] is None
    else:
        assert s["bound"] == ("above" if not any(over) else "below")


_point = st.floats(0.1, 10)


@st.composite
def _sustained(draw):
    kind = draw(st.sampled_from(("within", "between", "above", "below")))
    if kind == "within":
        return {"rate": draw(_point), "bound": "within"}
    if kind == "above":
        return {"rate": draw(_point), "bound": "above"}
    if kind == "below":
        return {"rate": None, "bound": "below"}
    lo = draw(_point)
    return {"rate": None, "bound": "between", "low": lo, "high": lo * draw(st.floats(1.51, 50))}


def _inside(s, x):
    return {"within": lambda: x == s["rate"], "above": lambda: x >= s["rate"],
            "between": lambda: s["low"] <= x <= s["high"], "below": lambda: False}[s["bound"]]()


@settings(max_examples=300, deadline=None)
@given(_sustained(), _sustained(), st.floats(0, 1), st.floats(0, 1))
def test_a_stated_ratio_holds_for_every_rate_the_brackets_allow(sa, sb, ta, tb):
    """Whatever the true rates inside the two brackets, the stated ratio (exact, bound or range) holds."""
    def pick(s, t):
        return {"within": lambda: s["rate"], "above": lambda: s["rate"] * (1 + 10 * t),
                "between": lambda: s["low"] + t * (s["high"] - s["low"]), "below": lambda: None}[s["bound"]]()
    a, b = pick(sa, ta), pick(sb, tb)
    r = rate_ratio(sa, sb)
    if r is None or a is None or b is None:
        return
    assert _inside(sa, a) and _inside(sb, b)
    x, eps = a / b, 1e-9
    if r["kind"] == "exact":
        assert x == pytest.approx(r["value"])
    elif r["kind"] == "at least":
        assert x >= r["value"] * (1 - eps)
    elif r["kind"] == "at most":
        assert x <= r["value"] * (1 + eps)
    else:
        assert r["value"] is None and r["low"] * (1 - eps) <= x <= r["high"] * (1 + eps)
        assert r["high"] / r["low"] <= 4 and not r["low"] <= 1 <= r["high"]


def test_ratio_of_brackets_by_hand():
    between = {"rate": None, "bound": "between", "low": 0.2, "high": 500.0}
    assert rate_ratio(between, between) is None                                   # 0.0004x to 2,500x: nothing
    assert rate_ratio({"rate": 3.0, "bound": "within"}, {"rate": None, "bound": "between", "low": 1.0, "high": 2.0}) \
        == {"value": None, "kind": "between", "low": 1.5, "high": 3.0}
    assert rate_ratio({"rate": 4.0, "bound": "above"}, {"rate": None, "bound": "between", "low": 1.0, "high": 2.0}) \
        == {"value": 2.0, "kind": "at least"}
    # both between 1 and 2: either could be higher, so no ratio
    assert rate_ratio({"rate": None, "bound": "between", "low": 1.0, "high": 2.0},
                      {"rate": None, "bound": "between", "low": 1.0, "high": 2.0}) is None


def test_ratio_kinds(a100):
    sw = RateSweep(cost=a100, rates=(1.0, 2.0), policies=POLICIES, pool_slots=1, block_size=16, requests=1, seed=0,
                   max_new_tokens=8, latency_factor=5, unloaded_s_per_token=0.1)
    sw.sustained = {"paged": {"rate": 2.0, "bound": "above"}, "max": {"rate": 1.0, "bound": "within"},
                    "oracle": {"rate": None, "bound": "below"}, "pow2": {"rate": 1.5, "bound": "within"}}
    assert sw.ratio("paged", "max") == {"value": 2.0, "kind": "at least"}
    assert sw.ratio("max", "paged") == {"value": 0.5, "kind": "at most"}
    assert sw.ratio("pow2", "max") == {"value": 1.5, "kind": "exact"}
    assert sw.ratio("paged", "oracle") is None
    assert sw.budget_s_per_token == pytest.approx(0.5)


def test_parse_rates():
    assert parse_rates("2, 0.5;1") == (0.5, 1.0, 2.0)
    for text, problem in (("", "is empty"), ("1, x", "'x' is not a number"), ("1, -2", "must be a number more than 0 and at most 1,000,000 (requests per second)"),
                          ("1,1", "appears twice"), (",".join(["1"] * 17), "at most 16")):
        with pytest.raises(FieldError) as err:
            parse_rates(text)
        assert err.value.field == "rates" and problem in str(err.value), str(err.value)


def test_poisson_workload_same_draws_every_rate():
    a = poisson_workload(1.0, 1000, max_context=2048)
    b = poisson_workload(4.0, 1000, max_context=2048)
    assert [(r.prompt_len, r.output_len) for r in a.requests] == [(r.prompt_len, r.output_len) for r in b.requests]
    ta = np.array([r.arrival_s for r in a.requests])
    tb = np.array([r.arrival_s for r in b.requests])
    assert ta[0] == 0 and np.allclose(tb, ta / 4)
    assert 0.9 < (len(ta) - 1) / ta[-1] < 1.1                 # mean rate ~1 request/s
    assert max(r.prompt_len + r.output_len for r in a.requests) <= 2048
    df = shipped_trace()
    fits = set(zip(df["prompt_tokens"], df["output_tokens"]))
    assert all((r.prompt_len, r.output_len) in fits for r in a.requests)
    with pytest.raises(FieldError) as err:
        poisson_workload(0, 10, max_context=2048)
    assert err.value.field == "rates" and str(err.value).startswith("rate = 0 must be")


def test_unloaded_latency_is_a_lone_run(a100):
    w = poisson_workload(0.001, 3, max_context=2048)          # 1,000 s apart on average: never together
    lone = []
    for r in w.requests:
        one = Workload("one", (r,), w.max_new_tokens)
        res = simulate(one, PagedAllocator(4096, 16), record_snapshots=False, clock=a100.for_blocks(16))
        lone.append(price(res, a100).requests["normalized_s"][0])
    assert unloaded_latency(w, a100) == pytest.approx(float(np.mean(lone)), rel=1e-9)


def test_memory_use_max_pow2_oracle_paged(overloaded):
    """Acceptance: Max <= Pow2 <= Oracle <= paged in the share of KV memory holding tokens, on the
    Azure slice (the paper's Figure 2 ordering; its figures are the paper's, ours differ)."""
    share = [overloaded.points[(p, 3.0)]["kv_token_share_waiting"] for p in POLICIES]
    assert all(s is not None for s in share)
    assert share == sorted(share) and share[0] < share[-1]
    per_step = [overloaded.points[(p, 3.0)]["mean_utilization_busy"] for p in POLICIES]
    assert per_step == sorted(per_step)
    assert PAPER["token_state_share"]["max"] < PAPER["token_state_share"]["paged"]


def test_sweep_points_hold_the_latencies(overloaded, a100):
    assert overloaded.pool_slots == a100.pool_slots() == 15_805
    for p in POLICIES:
        s = overloaded.points[(p, 3.0)]
        lat = overloaded.latencies[(p, 3.0)]
        assert s["finished"] == len(lat["ttft_s"]) == 400 - s["rejected"]
        assert (lat["ttft_s"] <= lat["e2e_s"]).all()
        assert s["ttft_p50_s"] == pytest.approx(float(np.percentile(lat["ttft_s"], 50)), abs=1e-8)
        # every point is over the budget here: nobody sustains 3 requests/s
        assert s["normalized_latency_s_per_token"] > overloaded.budget_s_per_token
        assert overloaded.sustained[p] == {"rate": None, "bound": "below"}
    # throughput: the paged allocator serves its tokens in the least time
    tps = [overloaded.points[(p, 3.0)]["throughput_tokens_per_s"] for p in POLICIES]
    assert tps[-1] == max(tps)


def test_sweep_rejects_bad_settings(a100):
    for kwargs, field in (({"policies": ("lifo",)}, "policy"), ({"latency_factor": 1}, "latency_factor"),
                          ({"requests": 0}, "requests"), ({"policies": ()}, "policies")):
        with pytest.raises(FieldError) as err:
            rate_sweep(a100, [1.0], **kwargs)
        assert err.value.field == field
    assert math.isfinite(unloaded_latency(poisson_workload(1.0, 5, max_context=2048), a100))


def test_reservation_sizes_of_the_three_baselines():
    """Prompt 50 with a cap of 600: max reserves 50 + 600; pow2 50 + 512 for a 300-token answer and
    50 + 600 (the cap, not 1,024) for a 513-token one; oracle exactly 50 + the answer."""
    from allocator.memory.reserve_max import ReserveMaxAllocator

    assert ReserveMaxAllocator(4096, 600, "max").reservation(50, 300) == 650
    pow2 = ReserveMaxAllocator(4096, 600, "pow2")
    assert pow2.reservation(50, 300) == 562 and pow2.reservation(50, 513) == 650 and pow2.reservation(50, 1) == 51
    assert ReserveMaxAllocator(4096, 600, "oracle").reservation(50, 300) == 350
