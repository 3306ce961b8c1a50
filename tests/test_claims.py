"""Every number the lesson states comes from the result shown beside it (the lesson-truth issue).

For a grid of scenarios -- the default; block sizes 1, 64 and 256; a shared 256-token prompt;
swap preemption; trickle arrivals; the Azure trace; degenerate ones -- the headline cards, the
details table, every lesson reveal, the handout's table and take-aways and the exported
animation's caption are generated, every number is pulled out of their text, and each must be
one the simulation result (or the scenario's own settings) produces. Literature figures the
texts quote are listed explicitly, with their source.
"""
import re

import pytest

from allocator.scenario import Scenario, block_size_sweep, build_workload, run_scenario
from allocator.viz.claims import details_rows, headline, lesson_key_steps, reveal
from allocator.viz.exports import animation_caption, handout_rows, takeaways

GRID = {
    "default": Scenario(),
    "block 1": Scenario(block_size=1),
    "block 64": Scenario(block_size=64),
    "block 256": Scenario(block_size=256),
    "shared prompt 256": Scenario(shared_prefix=256),
    "swap": Scenario(preemption="swap"),
    "trickle": Scenario(arrival="trickle", arrival_rate=0.05),
    "azure-conv": Scenario(workload="azure-conv"),
    "nothing waits": Scenario(total_slots=1 << 20),
    "everything rejected": Scenario(shared_prefix=2048),
}

#: Figures the texts quote from the literature (not from the simulation), with their source.
LITERATURE = {
    "20", "40",   # "20-40 % of KV memory holding tokens": Kwon et al., PagedAttention, SOSP 2023, section 1
    "2", "4",     # "2-4x higher throughput with paging": the same paper's evaluation
}

NUMBER = re.compile(r"(?<![\w.])\d+(?:,\d{3})*(?:\.\d+)?")


def _forms(value) -> set[str]:
    """Every way the texts print a number: as a count, with 1-4 decimals, as a percentage."""
    if value is None or isinstance(value, (str, bool, list, dict)):
        return set()
    value = abs(value)                      # texts print signs separately ("+5.1", "-2,084")
    out = set()
    if float(value).is_integer():
        out |= {f"{int(value):,}", str(int(value))}
    for d in (1, 2, 3, 4):
        out.add(f"{value:,.{d}f}")
    if -1 <= value <= 1:
        for d in (0, 1):
            out.add(f"{100 * value:.{d}f}")
        out.add(f"{100 * value:.2g}")
    out.add(f"{value:.2g}")
    out.add(f"{value:g}")
    return out


def allowed_numbers(sc: Scenario, results: dict, rows: list[dict]) -> set[str]:
    """Numbers a text about this run may contain: the results', the scenario's, and their ratios."""
    nums = set(LITERATURE)
    for v in (sc.slots, sc.block_size, sc.max_new, sc.shared_prefix, sc.metadata_cost, 16, 256, sc.slots // 256,
              sc.slots // sc.block_size):
        nums |= _forms(v)
    for res in results.values():
        s = res.summary
        for v in s.values():
            nums |= _forms(v)
        nums |= _forms(len(s["rejected"]))
        for step in lesson_key_steps(results):
            if step < res.steps:
                for name in res.metrics:
                    nums |= _forms(res.value_at(name, step))
        nums |= _forms(res.cost_per_token(sc.metadata_cost, busy=True)) | _forms(res.cost_per_token(sc.metadata_cost, busy=False))
        if res.summary["finished"] and res.summary["mean_running_busy"] is None:
            for name in ("internal_fragmentation", "external_fragmentation", "duplicate_slots"):
                nums |= _forms(res.mean(res.metrics[name] / res.total_slots))
    r, p = results["reserve_max"].summary, results["paged"].summary
    if r["mean_running_busy"] and p["mean_running_busy"]:
        nums |= _forms(p["mean_running_busy"] / r["mean_running_busy"])
        nums |= _forms(p["mean_running_busy"] - r["mean_running_busy"])
    for a, b in ((p["steps"], r["steps"]),):
        nums |= _forms(a - b)
    if r["mean_utilization_busy"] is not None and p["mean_utilization_busy"] is not None:
        nums |= _forms(round((p["mean_utilization_busy"] - r["mean_utilization_busy"]) * 100))
    for row in rows:
        for v in row.values():
            nums |= _forms(v)
    return nums


def _numbers(text: str) -> list[str]:
    text = re.sub(r"r\d+", "", text)                      # request names such as r12
    return [n.lstrip("-+") for n in NUMBER.findall(text)]


@pytest.fixture(scope="module", params=list(GRID))
def case(request):
    sc = GRID[request.param]
    results = run_scenario(sc, record_snapshots=False)
    rows = block_size_sweep(build_workload(sc), sc.slots, (1, 16, 256), sc.metadata_cost, sc.preemption)
    return request.param, sc, results, rows


def test_headline_cards_and_details_quote_the_result(case):
    name, sc, results, rows = case
    allowed = allowed_numbers(sc, results, rows)
    cards = headline(results)
    for key, panel in cards.items():
        s = results[key].summary
        values = {c["label"]: c["value"] for c in panel["cards"]}
        running = s["mean_running_busy"] if s["mean_running_busy"] is not None else s["mean_running"]
        assert values["Mean running"] == f"{running:.1f}", name
        assert values["Steps to drain"] == f"{s['steps']:,}", name
        texts = [panel["line"], *(c["value"] for c in panel["cards"]), *(c["help"] for c in panel["cards"]),
                 *(c["delta"] or "" for c in panel["cards"])]
        for text in texts:
            for n in _numbers(text):
                assert n in allowed, (name, key, n, text)
        assert "batch" not in panel["line"] or "sustained" in panel["line"]
    for row in details_rows(results, sc.metadata_cost):
        for column in ("reserve-max", "paged"):
            for n in _numbers(row[column]):
                assert n in allowed, (name, row["measure"], n, row[column])


def test_lesson_reveals_quote_the_result(case):
    name, sc, results, rows = case
    allowed = allowed_numbers(sc, results, rows)
    for step in ("reserve", "waste", "paged", "big_blocks", "prefix"):
        text = reveal(step, results, slots=sc.slots, max_new=sc.max_new, sweep_rows=rows)
        for n in _numbers(text):
            assert n in allowed, (name, step, n, text)


def test_handout_and_caption_quote_the_result(case):
    name, sc, results, rows = case
    allowed = allowed_numbers(sc, results, rows)
    workload = build_workload(sc)
    for label, a, b in handout_rows(results):
        for n in _numbers(a) + _numbers(b):
            assert n in allowed, (name, label, n)
    for text in takeaways(results):
        assert "the batch" not in text, text                  # a peak is never called "the batch"
        for n in _numbers(text):
            assert n in allowed, (name, n, text)
    caption = animation_caption(sc, workload, results)
    allowed |= {f"{len(workload):,}", f"{workload.max_new_tokens:,}"}
    for n in _numbers(caption):
        assert n in allowed, (name, n, caption)


def test_the_check_can_fail():
    """A hard-coded number that no result produces is caught."""
    sc = GRID["default"]
    results = run_scenario(sc, record_snapshots=False)
    allowed = allowed_numbers(sc, results, [])
    assert "three" not in allowed and "7777" not in allowed
    assert all(n in allowed for n in _numbers(reveal("waste", results, slots=sc.slots, max_new=sc.max_new)))
    assert not all(n in allowed for n in _numbers("the paged side ran 7777 sequences"))
