"""Every section of every page renders for degenerate results (the lesson-truth issue, finding 1).

Nothing admitted because everything is rejected, nothing ever waiting, one request, one block,
a pool too small for anything: each scenario is opened through the URL, exactly as a shared link
would, then the other pages that read the explainer's scenario are visited in the same session.
No exception element may appear anywhere, and what the page says must match the result.
"""
import pytest
from streamlit.testing.v1 import AppTest

from allocator.engine.scenario import Scenario, run_scenario
from allocator.cost.best import best_cost_model
from allocator.cost.timing import price
from allocator.viz.claims.explainer import headline
from tests.conftest import APP_PATH

DEGENERATE = {
    "everything rejected (a 2048-token system prompt in a 2048-slot pool)": (
        {"shared_prefix": "2048"}, Scenario(shared_prefix=2048)),
    "nothing ever waits (a pool of 2**20 slots)": (
        {"slots_classroom-40": "1048576"}, Scenario(total_slots=1 << 20)),
    "a pool too small for any request (64 slots)": (
        {"slots_classroom-40": "64"}, Scenario(total_slots=64)),
    "one block (256 slots in blocks of 256)": (
        {"slots_classroom-40": "256", "block_size": "256"}, Scenario(total_slots=256, block_size=256)),
}


def _no_exception(at) -> None:
    assert not at.exception, [e.value for e in at.exception]


@pytest.mark.parametrize("name", list(DEGENERATE))
def test_every_section_renders(name):
    params, sc = DEGENERATE[name]
    at = AppTest.from_file(APP_PATH, default_timeout=180)
    for key, value in params.items():
        at.query_params[key] = value
    at.run()
    _no_exception(at)
    res = run_scenario(sc, record_snapshots=False)
    cost = best_cost_model("a100-40gb", "opt-13b")  # the sidebar's default GPU and model, as the page chooses
    cards = headline(res, {k: price(r, cost, idle_step_s=1 / sc.steps_per_second) for k, r in res.items()})
    for key in ("reserve_max", "paged"):           # what the cards say is what the claims module computed
        for card in cards[key]["cards"]:
            assert card["value"] in [m.value for m in at.metric if m.label == card["label"]]
    assert [c.value for c in at.caption if "Peak:" in c.value or c.value.startswith("Nothing ran")] == [
        cards["reserve_max"]["line"], cards["paged"]["line"]]
    for key in ("show_numbers", "show_sweep_table"):
        at.toggle(key=key).set_value(True).run()
        _no_exception(at)
    at.toggle(key="seconds_axis").set_value(True).run()          # the animation on the seconds clock
    _no_exception(at)
    for page in ("pages/kernel.py", "pages/about.py", "pages/block_tables.py"):
        at.switch_page(page).run()
        _no_exception(at)
