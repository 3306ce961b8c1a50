"""vLLM v1's rules from the command line (issue 39, item 3): ``--rules classroom|v1``,
``--max-num-seqs``, ``--max-num-batched-tokens`` on ``simulate``, ``export-html``, ``export-site`` and
``rate-sweep``.

The scenario carries the rules (``Scenario.rules``), so every output runs them through the one run
path (``allocator.engine.scenario.run_scenario``): ``simulate --rules v1 --json`` is the engine's
``simulate(workload, PagedAllocator(...), rules=V1Rules(...))`` called directly, and each export
under v1 rules shows those numbers. A flag a command cannot honour is refused, never ignored.
"""
from __future__ import annotations

import json

import pytest

from tests.conftest import assert_metrics_csv_adds_up, read_metrics_csv
from allocator.__main__ import main
from allocator.common.errors import FieldError
from allocator.engine import scenario as scenario_module
from allocator.engine.scenario import Scenario, block_size_sweep, build_workload, run_scenario
from allocator.engine.simulate import simulate
from allocator.engine.v1 import V1Rules
from allocator.memory.paged import PagedAllocator
from allocator.memory.reserve_max import ReserveMaxAllocator
from allocator.viz.export.sitecodec import resolve_refs

#: A small pool both sides wait for, a shared prompt found by the prefix cache, and v1 rules whose cap
#: (6 running) and budget (64 tokens a step: every 33..132-token prompt is chunked) both bind.
OPTIONS = ["--workload", "classroom-40", "--slots", "512", "--block-size", "32", "--max-new-tokens", "100",
           "--seed", "7", "--arrival", "trickle", "--arrival-rate", "2", "--shared-prefix", "32",
           "--prefix-caching", "--policy", "pow2", "--rules", "v1", "--max-num-seqs", "6",
           "--max-num-batched-tokens", "64"]
SCENARIO = Scenario(total_slots=512, block_size=32, max_new_tokens=100, seed=7, arrival="trickle", arrival_rate=2.0,
                    shared_prefix=32, prefix_caching=True, policy="pow2", rules="v1", max_num_seqs=6,
                    max_num_batched_tokens=64)
RULES = V1Rules(max_num_seqs=6, max_num_batched_tokens=64)
KINDS = ("reserve_max", "paged")


def _simulate(capsys, *argv: str) -> dict:
    capsys.readouterr()
    assert main(["simulate", *argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def _direct():
    """The two runs called on the engine directly: paged under v1 rules, the reservation baseline
    under the classroom scheduler (vLLM v1 has no reservation allocator)."""
    w = build_workload(SCENARIO)
    paged = simulate(w, PagedAllocator(512, 32, prefix_caching=True), rules=RULES, record_snapshots=False)
    reserve = simulate(w, ReserveMaxAllocator(512, 100, "pow2"), record_snapshots=False)
    return {"reserve_max": reserve, "paged": paged}


def test_the_options_are_the_scenario():
    from allocator.__main__ import build_parser
    from allocator.cli.simulate import scenario_from_args
    sc = scenario_from_args(build_parser().parse_args(["simulate", *OPTIONS]))
    assert sc == SCENARIO and sc.v1_rules == RULES
    plain = scenario_from_args(build_parser().parse_args(["simulate"]))
    assert plain.rules == "classroom" and plain.v1_rules is None
    assert (plain.max_num_seqs, plain.max_num_batched_tokens) == (256, 2048)     # vLLM's defaults


def test_simulate_v1_json_is_the_engine_called_directly(capsys):
    out = _simulate(capsys, *OPTIONS)
    direct = _direct()
    for kind in KINDS:
        want = json.loads(json.dumps(direct[kind].summary.to_dict()))
        got = {k: out[kind][k] for k in want}
        assert got == want, kind
    pg = out["paged"]
    assert pg["rules"] == RULES.describe() and "classroom" in out["reserve_max"]["rules"]
    # the rules bind: a cap of 6, preemptions, chunked prompts, and a run unlike the classroom one
    assert pg["peak_running"] == 6 and pg["preemptions"] > 0 and pg["recomputed_tokens"] > 0
    assert (pg["steps"], pg["preemptions"]) == (956, 54)
    classroom = _simulate(capsys, *OPTIONS[:-6])
    assert classroom["paged"]["steps"] != pg["steps"] and "rules" not in classroom["paged"]
    assert classroom["reserve_max"] == {k: v for k, v in out["reserve_max"].items() if k != "rules"}


def test_the_sweep_runs_the_rules(capsys):
    out = _simulate(capsys, *OPTIONS, "--sweep")
    rows = block_size_sweep(build_workload(SCENARIO), 512, prefix_caching=True, rules=RULES)
    assert out["paged_block_size_sweep"] == json.loads(json.dumps([r.to_dict() for r in rows]))
    row32 = next(r for r in out["paged_block_size_sweep"] if r["block_size"] == 32)
    assert (row32["steps"], row32["preemptions"]) == (out["paged"]["steps"], out["paged"]["preemptions"])


def test_export_html_under_v1_shows_simulates_numbers(tmp_path, capsys):
    paths = {"html": tmp_path / "a.html", "csv": tmp_path / "m.csv"}
    capsys.readouterr()
    assert main(["export-html", *OPTIONS, "-o", str(paths["html"]), "--csv", str(paths["csv"]), "--json"]) == 0
    written = json.loads(capsys.readouterr().out)
    assert written["scenario"]["rules"] == "v1" and written["scenario"]["max_num_seqs"] == 6
    out = _simulate(capsys, *OPTIONS)
    assert_metrics_csv_adds_up(read_metrics_csv(paths["csv"])[0], out, KINDS)
    anim = paths["html"].read_text(encoding="utf-8")
    for s in (out["reserve_max"], out["paged"]):
        assert f"{s['steps']:,} steps" in anim


def test_export_site_runs_every_block_size_under_the_rules(tmp_path, capsys):
    ran = []
    real = scenario_module.run_scenario

    def spy(sc, *args, **kwargs):
        ran.append(sc)
        return real(sc, *args, **kwargs)

    folder = tmp_path / "site"
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr("allocator.viz.export.site.run_scenario", spy)
        assert main(["export-site", str(folder), *OPTIONS, "--json"]) == 0
    assert ran and all(sc.v1_rules == RULES for sc in ran)
    text = (folder / "data" / "site-data.js").read_text(encoding="utf-8")
    prefix = "window.KV_SITE = "
    packed = json.loads(text[len(prefix):].rstrip().rstrip(";"))
    data = resolve_refs(packed["root"], packed["pool"])
    out = _simulate(capsys, *OPTIONS)
    for kind in KINDS:
        s = out[kind]
        cards = data["cards"]["main"]["32"][kind]["cards"]
        assert cards[-1]["value"] == f"{s['steps']:,}", kind


@pytest.mark.parametrize("command", ["simulate", "export-html", "export-site", "rate-sweep"])
@pytest.mark.parametrize("flag", ["--max-num-seqs", "--max-num-batched-tokens"])
def test_v1_numbers_without_v1_rules_are_refused(command, flag, tmp_path, capsys):
    target = tmp_path / "out"
    argv = {"simulate": ["simulate"], "export-html": ["export-html", "-o", str(target)],
            "export-site": ["export-site", str(target)], "rate-sweep": ["rate-sweep"]}[command]
    capsys.readouterr()
    assert main([*argv, flag, "8"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (f"error: {flag} 8 applies only with --rules v1 (the classroom scheduler has no step budget "
                   "or cap on running sequences)")
    assert not target.exists()


@pytest.mark.parametrize("command", ["simulate", "rate-sweep"])
@pytest.mark.parametrize("flag,value,field,limit", [
    ("--max-num-seqs", "0", "max_num_seqs", "1 to 1,000,000 (running sequences)"),
    ("--max-num-batched-tokens", "10000001", "max_num_batched_tokens", "1 to 10,000,000 (tokens per engine step)")])
def test_out_of_range_v1_numbers_are_refused_naming_the_field(command, flag, value, field, limit, capsys):
    capsys.readouterr()
    assert main([command, "--rules", "v1", flag, value]) == 2
    assert capsys.readouterr().err.strip() == f"error: {flag} {value} must be a whole number from {limit}"


def test_swap_under_v1_rules_is_refused(capsys):
    capsys.readouterr()
    assert main(["simulate", "--rules", "v1", "--preemption", "swap"]) == 2
    assert capsys.readouterr().err.strip().startswith("error: --preemption 'swap': vLLM v1 preempts by recompute only")
    with pytest.raises(FieldError) as e:
        run_scenario(Scenario(rules="v2"))
    assert e.value.field == "rules"


def test_a_shared_prefix_that_fills_the_pool_is_refused_up_front(capsys):
    """Issue 40: it used to reject every request and exit 0."""
    capsys.readouterr()
    assert main(["simulate", "--shared-prefix", "4194304"]) == 2
    assert capsys.readouterr().err.strip().startswith(
        "error: --shared-prefix 4,194,304 tokens fills the whole pool (2,048 slots)")
    assert main(["simulate", "--shared-prefix", "2048", "--json"]) == 2          # the pool exactly: still none fit
    capsys.readouterr()
    assert main(["simulate", "--shared-prefix", "100", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["paged"]["finished"] == 40


def test_classroom_scenarios_ignore_v1_numbers_only_in_their_cache_key():
    """Under classroom rules the v1 numbers do not apply: two such scenarios are one cache entry."""
    assert Scenario(max_num_seqs=3).canonical() == Scenario().canonical()
    assert Scenario(rules="v1", max_num_seqs=3).canonical() != Scenario(rules="v1").canonical()


def test_rate_sweep_runs_paged_under_the_rules(capsys):
    from allocator.cost.roofline import cost_model
    from allocator.studies.rate_sweep import rate_sweep
    argv = ["rate-sweep", "--requests", "30", "--rates", "2", "--policies", "paged,max", "--json"]
    capsys.readouterr()
    assert main([*argv, "--rules", "v1", "--max-num-seqs", "4", "--max-num-batched-tokens", "256"]) == 0
    v1 = json.loads(capsys.readouterr().out)
    assert main(argv) == 0
    classroom = json.loads(capsys.readouterr().out)
    assert classroom["rules"] == "classroom" and v1["rules"]["paged"] == V1Rules(4, 256).describe()
    direct = rate_sweep(cost_model("a100-40gb", "opt-13b"), (2.0,), policies=("paged", "max"), requests=30,
                        rules=V1Rules(4, 256))
    assert v1["points"]["paged"] == json.loads(json.dumps([direct.points[("paged", 2.0)]]))
    assert v1["points"]["paged"][0]["peak_running"] == 4 < classroom["points"]["paged"][0]["peak_running"]
    assert v1["points"]["max"] == classroom["points"]["max"]          # the reservation baseline keeps its scheduler
