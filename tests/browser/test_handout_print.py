"""The "one-page handout" prints on one page: Chromium prints the handout's HTML to PDF on A4 and
on US Letter (the shorter sheet), and the PDF must hold exactly one page, for the default lesson
and for the fullest handouts (a shared prompt, swap preemption, metadata cost, a replayed trace:
every optional setting row and all four take-aways).

Needs Debian's Chromium at /usr/bin/chromium; skips without it (never ``playwright install``).
"""
from __future__ import annotations

import os
import re

import pytest

from allocator.engine.scenario import Scenario, build_workload, run_scenario
from allocator.viz.export.handout import handout_html, takeaways

CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
if not os.path.exists(CHROMIUM):
    pytest.skip(f"{CHROMIUM} not found: browser tests skipped (apt-get install chromium as root).",
                allow_module_level=True)
pytest.importorskip("playwright.sync_api")

SCENARIOS = {
    "default": Scenario(),
    "classroom, every option": Scenario(block_size=32, preemption="swap", shared_prefix=64, metadata_cost=1,
                                        total_slots=1024),
    "trace, every option": Scenario(workload="azure-conv", block_size=8, shared_prefix=40, metadata_cost=0.5,
                                    policy="pow2"),
    "nothing runs on one side": Scenario(total_slots=64, block_size=4),
}


def pdf_pages(pdf: bytes) -> int:
    """Page objects in a PDF (``/Type /Page``, not the ``/Type /Pages`` tree node)."""
    return len(re.findall(rb"/Type\s*/Page(?![a-zA-Z])", pdf))


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_the_handout_prints_on_one_page_of_a4_and_of_letter(browser, name):
    sc = SCENARIOS[name]
    workload = build_workload(sc)
    results = run_scenario(sc, workload, record_snapshots=False)
    if name != "nothing runs on one side":
        assert len(takeaways(results)) >= 3, name
    ctx = browser.new_context()
    try:
        pg = ctx.new_page()
        pg.set_content(handout_html(sc, results, workload))
        for fmt in ("A4", "Letter"):
            pdf = pg.pdf(format=fmt)
            assert pdf.startswith(b"%PDF") and re.search(rb"/Type\s*/Pages", pdf)
            assert pdf_pages(pdf) == 1, (name, fmt, pdf_pages(pdf))
    finally:
        ctx.close()
