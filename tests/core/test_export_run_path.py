"""Every export shows the simulation ``simulate`` runs (issue 36).

``export-site`` once ran each block size itself and passed only the preemption mode and the
reservation policy, so a site exported with ``--placement buddy --prefix-caching`` showed a
first-fit run without a prefix cache. Now the explainer, ``simulate``, ``export-html`` (with its
handout and CSV) and ``export-site`` all run a scenario through
``allocator.engine.scenario.run_scenario`` and sweep it through ``scenario_sweeps``. Here one
scenario with every option off its default is exported each way, and every number each file
shows is checked against ``python -m allocator simulate --json`` for the same options.
"""
from __future__ import annotations

import html
import json

import numpy as np
import pytest

from tests.conftest import assert_metrics_csv_adds_up, read_metrics_csv
from allocator.__main__ import main
from allocator.common.formats import pct
from allocator.common.metric_names import SUMMARY_METRICS
from allocator.engine import scenario as scenario_module
from allocator.engine.scenario import Scenario, block_size_sweep, build_workload, scenario_sweeps
from allocator.viz.claims.sweep import sweep_summary
from allocator.viz.export.markup import markdown_html
from allocator.viz.export.sitecodec import resolve_refs

#: Every scenario option of ``simulate`` off its default, on a small pool (the site stays quick):
#: a pool that both sides wait for, swap preemptions on the paged side, buddy placement (which
#: changes the reservation side's numbers here: 1,586 steps against first-fit's 1,744).
OPTIONS = ["--workload", "classroom-40", "--slots", "512", "--block-size", "32", "--max-new-tokens", "100",
           "--seed", "7", "--arrival", "trickle", "--arrival-rate", "2", "--metadata-cost", "0.5",
           "--shared-prefix", "32", "--prefix-caching", "--preemption", "swap", "--policy", "pow2",
           "--placement", "buddy"]
#: The same scenario as the explainer would hold it.
SCENARIO = Scenario(total_slots=512, block_size=32, max_new_tokens=100, seed=7, arrival="trickle", arrival_rate=2.0,
                    metadata_cost=0.5, shared_prefix=32, prefix_caching=True, preemption="swap", policy="pow2",
                    placement="buddy")
KINDS = ("reserve_max", "paged")


def _simulate(capsys, *extra: str) -> dict:
    """``python -m allocator simulate --json`` with :data:`OPTIONS` (then ``extra``), in process."""
    capsys.readouterr()
    assert main(["simulate", *OPTIONS, *extra, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_the_scenario_sets_every_option_off_its_default(capsys):
    """The scenario under test is what the options say, and every setting differs from the default."""
    from allocator.cli.simulate import scenario_from_args
    from allocator.__main__ import build_parser
    sc = scenario_from_args(build_parser().parse_args(["simulate", *OPTIONS]))
    assert sc == SCENARIO
    default = Scenario()
    for name in ("total_slots", "block_size", "max_new_tokens", "seed", "arrival", "arrival_rate", "metadata_cost",
                 "shared_prefix", "prefix_caching", "preemption", "policy", "placement"):
        assert getattr(sc, name) != getattr(default, name), name
    out = _simulate(capsys)
    rm, pg = out["reserve_max"], out["paged"]
    assert rm["allocator"] == "Reserve-pow2 (buddy)" and pg["preemption_mode"] == "swap" and pg["shared_prefix"] == 32
    assert rm["mean_running_busy"] is not None and pg["swapped_blocks"] > 0 and pg["prefill_tokens_saved"] > 0
    first_fit = [a for a in OPTIONS if a not in ("--placement", "buddy")]
    capsys.readouterr()
    assert main(["simulate", *first_fit, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["reserve_max"]["steps"] != rm["steps"]   # placement shows


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """``export-html`` with a handout and a CSV, run once with :data:`OPTIONS`: {kind: path}."""
    folder = tmp_path_factory.mktemp("export")
    paths = {"html": folder / "a.html", "handout": folder / "h.html", "csv": folder / "m.csv"}
    assert main(["export-html", *OPTIONS, "-o", str(paths["html"]), "--handout", str(paths["handout"]),
                 "--csv", str(paths["csv"]), "--sweep"]) == 0
    return paths


def test_the_metrics_csv_adds_up_to_simulates_summary(exported, capsys):
    out = _simulate(capsys)
    df = read_metrics_csv(exported["csv"])[0]
    assert_metrics_csv_adds_up(df, out, KINDS)
    span = df["steps covered"].to_numpy()
    hits = int(np.nansum(df["paged prefix_hit_tokens (tokens this step)"].to_numpy(dtype=float) * span))
    assert hits == out["paged"]["prefill_tokens_saved"] > 0          # the prefix cache ran


def _fmt(x) -> str:
    """The handout's number format (``allocator.viz.export.handout``)."""
    return "—" if x is None else f"{x:,.2f}" if isinstance(x, float) else f"{x:,}"


def test_the_handout_and_the_animation_quote_simulates_numbers(exported, capsys):
    out = _simulate(capsys)
    rm, pg = out["reserve_max"], out["paged"]
    doc = exported["handout"].read_text(encoding="utf-8")
    rows = [("Running while requests wait (mean sequences per step)", lambda s: _fmt(s["mean_running_busy"])),
            ("Peak running (sequences, and how many steps ran it)",
             lambda s: f"{s['peak_running']} for {s['peak_running_steps']:,} step{'' if s['peak_running_steps'] == 1 else 's'} "
                       f"(first at step {s['peak_running_step']:,})"),
            ("Steps to drain (engine steps)", lambda s: _fmt(s["steps"])),
            ("Tokens per step (mean over all steps)", lambda s: _fmt(s["mean_tokens_per_step"])),
            ("Preemptions (sequences evicted to free memory)", lambda s: _fmt(s["preemptions"])),
            ("Finished (requests)", lambda s: _fmt(s["finished"])),
            ("Rejected, can never fit (requests)", lambda s: str(len(s["rejected"])))]
    for label, value in rows:
        want = f"<tr><td>{html.escape(label)}</td><td class=num>{html.escape(value(rm))}</td>" \
               f"<td class=num>{html.escape(value(pg))}</td></tr>"
        assert want in doc, label
    assert "swap to host memory" in doc and "reserve-pow2" in doc
    anim = exported["html"].read_text(encoding="utf-8")
    for s in (rm, pg):
        running = s["mean_running_busy"] if s["mean_running_busy"] is not None else s["mean_running"]
        assert (f"{running:.1f} running on average while requests waited (peak {s['peak_running']} at step "
                f"{s['peak_running_step']:,}), {s['steps']:,} steps") in anim


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """``export-site`` run once with :data:`OPTIONS`: (its data, every scenario it ran)."""
    folder = tmp_path_factory.mktemp("site") / "site"
    ran = []
    real = scenario_module.run_scenario

    def spy(sc, *args, **kwargs):
        ran.append(sc)
        return real(sc, *args, **kwargs)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr("allocator.viz.export.site.run_scenario", spy)
        assert main(["export-site", str(folder), *OPTIONS, "--json"]) == 0
    text = (folder / "data" / "site-data.js").read_text(encoding="utf-8")
    prefix = "window.KV_SITE = "
    assert text.startswith(prefix)
    packed = json.loads(text[len(prefix):].rstrip().rstrip(";"))
    return resolve_refs(packed["root"], packed["pool"]), ran


def test_the_static_site_runs_every_block_size_with_every_setting(site):
    data, ran = site
    sizes = data["meta"]["block_sizes"]
    assert sizes == [1, 2, 4, 8, 16, 32, 64, 128, 256] and data["lesson"] is None
    assert [sc.block_size for sc in ran] == sizes
    for sc in ran:                      # the scenario asked for, at each block size of the slider
        assert sc.canonical() == Scenario(**{**SCENARIO.__dict__, "block_size": sc.block_size}).canonical()


@pytest.mark.parametrize("block_size", [8, 32, 256])
def test_the_static_sites_cards_details_and_sweep_are_simulates(site, capsys, block_size):
    data, _ = site
    out = _simulate(capsys, "--block-size", str(block_size), "--sweep")
    key = str(block_size)
    for kind in KINDS:
        s = out[kind]
        cards = data["cards"]["main"][key][kind]["cards"]
        waited = s["mean_running_busy"] is not None
        running = s["mean_running_busy"] if waited else s["mean_running"]
        util = s["mean_utilization_busy"] if waited else s["mean_utilization"]
        assert [c["value"] for c in cards] == [f"{running:.1f}", pct(util), f"{s['steps']:,}"], kind
    costs = data["meta"]["costs"]
    k = data["meta"]["cost_index"]
    assert costs[k] == 0.5
    split = data["details"]["main"][key]
    table = list(split["base"])
    for i, versions in split["vary"].items():
        table[int(i)] = versions[k]
    left = "reserve-pow2 (buddy)"
    by_measure = {row["measure"]: (row[left], row["paged"]) for row in table}
    expect = {
        SUMMARY_METRICS["peak_running"].label: lambda s: (
            f"{s['peak_running']}, held for a single step (step {s['peak_running_step']:,})"
            if s["peak_running_steps"] <= 1 else
            f"{s['peak_running']}, held for {s['peak_running_steps']:,} of the run's {s['steps']:,} steps "
            f"(first at step {s['peak_running_step']:,})"),
        SUMMARY_METRICS["mean_running"].label: lambda s: f"{s['mean_running']:.2f}",
        SUMMARY_METRICS["mean_tokens_per_step"].label: lambda s: f"{s['mean_tokens_per_step']:.2f}",
        **{SUMMARY_METRICS[name].label: (lambda s, name=name: f"{s[name]:,}")
           for name in ("preemptions", "peak_logical_tokens", "used_slots_at_peak_logical", "swapped_blocks",
                        "recomputed_tokens")},
        "finished / rejected": lambda s: f"{s['finished']:,} / {len(s['rejected']):,}",
    }
    for measure, value in expect.items():
        assert by_measure[measure] == (value(out["reserve_max"]), value(out["paged"])), measure
    text = sweep_summary(out["paged_block_size_sweep"], block_size, 0.5, out["reserve_max"])
    assert data["sweep"]["main"]["text_html"][key][k] == markdown_html(text)


def test_a_scenarios_sweeps_at_many_costs_equal_one_sweep_per_cost():
    """``scenario_sweeps`` runs each block size once for every cost; the rows are the ones a sweep
    at each cost alone gives, with the scenario's own paged settings."""
    workload = build_workload(SCENARIO)
    sizes = (8, 32, 128)
    rows = scenario_sweeps(SCENARIO, (0.0, 0.5, 4.0), workload, sizes)
    assert list(rows) == [0.0, 0.5, 4.0]
    for c, got in rows.items():
        assert got == block_size_sweep(workload, SCENARIO.slots, sizes, c, "swap", prefix_caching=True), c
    assert rows[0.0][0].cost_per_token != rows[4.0][0].cost_per_token


@pytest.mark.parametrize("command", ["export-html", "export-site"])
def test_the_exports_refuse_gpu_and_model_rather_than_ignore_them(command, tmp_path, capsys):
    """The exported files count engine steps; a priced run asked of them is refused, nothing written."""
    target = tmp_path / "out"
    argv = [command, str(target)] if command == "export-site" else [command, "-o", str(target)]
    assert main([*argv, "--model", "opt-13b"]) == 2
    err = capsys.readouterr().err
    assert err.strip() == (f"error: --model opt-13b: {command} counts engine steps, not seconds; --gpu, "
                           "--model and --cost-model apply only to simulate")
    assert not target.exists()
    assert main([*argv, "--cost-model", "roofline"]) == 2           # issue 40: the choice of cost model too
    assert "error: --cost-model roofline" in capsys.readouterr().err and not target.exists()
