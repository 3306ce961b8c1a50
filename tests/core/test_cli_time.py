"""The command line's seconds: ``rate-sweep`` and ``simulate --gpu --model`` print what the
pages show (the same functions), and bad input is one line naming the field, exit status 2."""
from __future__ import annotations

import contextlib
import io
import json

import pytest

from allocator.__main__ import main
from allocator.studies.rate_sweep import rate_sweep
from allocator.cost.roofline import cost_model


def _cli(*argv) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(argv))
    return code, out.getvalue(), err.getvalue()


def test_rate_sweep_json_is_the_pages_sweep():
    code, out, _ = _cli("rate-sweep", "--gpu", "a100-40gb", "--model", "opt-13b", "--rates", "0.5,1,2",
                        "--requests", "150", "--json")
    assert code == 0
    data = json.loads(out)
    sweep = rate_sweep(cost_model("a100-40gb", "opt-13b"), (0.5, 1, 2), requests=150)
    assert data["pool_slots"] == sweep.pool_slots == 15_805
    assert data["rates"] == [0.5, 1.0, 2.0]
    assert data["sustained"] == {p: sweep.sustained[p] for p in sweep.policies}
    for p in ("max", "pow2", "oracle", "paged"):
        got = [pt["normalized_latency_s_per_token"] for pt in data["points"][p]]
        assert got == sweep.curve(p)
    assert data["paper"]["token_state_share"]["paged"] == 0.963 and "not fitted" in data["paper"]["note"]


def test_rate_sweep_table_names_the_setup():
    code, out, _ = _cli("rate-sweep", "--rates", "1", "--requests", "100", "--policies", "max,paged")
    assert code == 0
    assert out.startswith("OPT-13B fp16 on NVIDIA A100 40GB: KV pool 15,805 slots")
    assert out.splitlines()[1] == ("seconds from the datasheet roofline (a model from datasheet peaks, not a "
                                   "measurement); the lab holds no operator profile of OPT-13B fp16")
    assert "Reserve-max" in out and "Paged" in out and "Reserve-oracle" not in out


@pytest.mark.parametrize("argv, message", [
    (("rate-sweep", "--rates", "1,x"), "--rates item 2 = 'x' is not a number"),
    (("rate-sweep", "--model", "llama3-70b", "--gpus", "1"), "--gpus 1: the weights (131.42 GiB)"),
    (("rate-sweep", "--policies", "lifo"), "--policies 'lifo' must be one of"),
    (("rate-sweep", "--requests", "0"), "--requests 0 must be a whole number from 1 to 20,000 (requests per run)"),
])
def test_rate_sweep_bad_input(argv, message):
    code, out, err = _cli(*argv)
    assert code == 2 and not out
    assert err.startswith("error: ") and message in err and "Traceback" not in err


def test_simulate_with_a_gpu_adds_the_time_metrics():
    from allocator.engine.scenario import Scenario, run_scenario
    from allocator.cost.timing import price

    code, out, _ = _cli("simulate", "--gpu", "a100-40gb", "--model", "opt-13b", "--policy", "pow2", "--json")
    assert code == 0
    data = json.loads(out)
    res = run_scenario(Scenario(policy="pow2"), record_snapshots=False)
    cost = cost_model("a100-40gb", "opt-13b")
    for key in ("reserve_max", "paged"):
        want = price(res[key], cost, idle_step_s=1 / 20).summary
        for name in ("ttft_p50_s", "ttft_p99_s", "tpot_p50_s", "throughput_tokens_per_s",
                     "normalized_latency_s_per_token", "makespan_s"):
            assert data[key][name] == want[name], (key, name)
        assert data[key]["steps"] == res[key].summary.steps
    assert data["reserve_max"]["allocator"] == "Reserve-pow2"
    code, out, _ = _cli("simulate", "--json")
    assert "makespan_s" not in json.loads(out)["paged"]                 # no GPU, no seconds


def test_simulate_swap_and_recompute_differ_in_seconds_only():
    runs = {}
    for mode in ("recompute", "swap"):
        code, out, _ = _cli("simulate", "--gpu", "a100-40gb", "--preemption", mode, "--block-size", "1", "--json")
        assert code == 0
        runs[mode] = json.loads(out)["paged"]
    assert runs["swap"]["steps"] == runs["recompute"]["steps"]
    assert runs["swap"]["makespan_s"] > runs["recompute"]["makespan_s"]
    assert runs["swap"]["throughput_tokens_per_s"] < runs["recompute"]["throughput_tokens_per_s"]
    code, out, _ = _cli("simulate", "--gpu", "a100-40gb")
    assert "seconds priced on OPT-13B fp16 on NVIDIA A100 40GB" in out and "ttft_p99_s" in out


# -- rate-sweep with generated arguments: the property test of issue 12, for this command --------

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from tests.core.test_cli_properties import BAD_NUMBERS, BAD_RATES, SETTINGS, check_run, number, run_cli  # noqa: E402

#: Good values are kept small (at most 200 requests, two rates) so a valid run takes about a second.
SWEEP_VALUES = {
    "--requests": ["1", "50", "200"],
    "--rates": ["1", "0.5,2", "0.001,1000000"],
    "--block-size": ["1", "16", "256"],
    "--max-new-tokens": ["1", "600", "1024"],
    "--latency-factor": ["1.5", "5", "1000"],
    "--seed": ["0", "4294967295"],
}
CHOICE_VALUES = {
    "--gpu": ["a100-40gb", "l4", "rtx-4090", "tpu"],
    "--model": ["opt-13b", "llama3-70b", "7b-fp16", "gpt-9"],
    "--gpus": ["auto", "1", "2", "8", "3", "x"],
    "--policies": ["max,paged", "oracle", "paged", ",", "lifo"],
}


@st.composite
def sweep_args(draw) -> list[str]:
    bad_rate = draw(BAD_RATES)
    argv = ["rate-sweep", "--requests", draw(st.sampled_from(["50", "200"])), "--rates", "1"]
    for option, values in SWEEP_VALUES.items():
        if draw(st.integers(0, 2)) == 0:
            argv.append(f"{option}={draw(number(values, bad_rate))}")
    for option, values in CHOICE_VALUES.items():
        if draw(st.integers(0, 3)) == 0:
            argv.append(f"{option}={draw(st.sampled_from(values + BAD_NUMBERS[:3]))}")
    if draw(st.booleans()):
        argv.append("--json")
    return argv


@settings(max_examples=40, **SETTINGS)
@given(argv=sweep_args())
def test_rate_sweep_with_generated_arguments(argv):
    check_run(argv, *run_cli(argv))


def test_the_table_prints_the_pages_kv_share_under_the_pages_basis():
    """Issue 40: the table printed the share over busy seconds (90.1 %) under a heading the page used
    for the share while requests waited (95.7 %). Both are printed now, each headed by its basis, and
    the row the page's basis picks holds the page's number."""
    from allocator.studies.rate_sweep import memory_basis
    code, out, _ = _cli("rate-sweep", "--rates", "2,2.9", "--requests", "100", "--policies", "max,paged")
    assert code == 0
    sweep = rate_sweep(cost_model(), (2, 2.9), requests=100, policies=("max", "paged"))
    key, words = memory_basis(sweep, 2.9)
    assert (key, words) == ("kv_token_share_waiting", "while requests waited")
    block = out.split(f"\n{key}: share of the KV pool holding tokens, {words}", 1)[1].split("\n\n", 1)[0]
    paged_row = next(line for line in block.splitlines() if line.startswith("Paged"))
    assert paged_row.split()[-1] == format(sweep.points[("paged", 2.9)][key], ".4g")
    assert "\nkv_token_share_busy: share of the KV pool holding tokens, over the busy seconds" in out
