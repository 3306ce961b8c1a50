"""The sentences the app says about a result, built from that result (no streamlit).

Every number a headline, a lesson step, a chart caption or an export quotes is computed here
from the result it sits beside, so the pages, the exports and the tests (tests/pages/test_claims.py)
read one source and a claim can never drift from the figure next to it. One module per page's
idea:

* :mod:`.explainer` -- one run of the explainer: headline cards, details table, lesson reveals,
  the About page's lines, which scheduler rules run;
* :mod:`.sweep` -- the block-size sweep's summary and table;
* :mod:`.throughput` -- the Throughput and latency page (a rate sweep);
* :mod:`.paper` -- the paper replication beside the paper's figures;
* :mod:`.capacity` -- the Capacity page's note on a block larger than the max context.

Numbers are written by :mod:`allocator.formats` (re-exported here for the callers that always
imported them from this package).
"""
from allocator.formats import pct, plural, rate, ratio, seconds
from allocator.viz.claims.capacity import oversized_block_note
from allocator.viz.claims.explainer import (RESERVATION_RULES, about_default_run, classroom_tip, details_rows,
                                            empty_pool_note, headline, lesson_key_steps, reservation_name,
                                            reservation_rule, reveal, scheduler_rules_text, share_cells,
                                            share_rows, time_line, workload_outcome)
from allocator.viz.claims.paper import fig12_note, paper_replication_texts
from allocator.viz.claims.sweep import sweep_basis, sweep_summary, sweep_table, sweep_value
from allocator.viz.claims.throughput import (latency_claim, memory_claim, paper_comparison, ratio_words,
                                             sustained_rows, sustained_text, sweep_headline, time_split_claim)

__all__ = [
    "pct", "plural", "rate", "ratio", "seconds",
    "RESERVATION_RULES", "about_default_run", "classroom_tip", "details_rows", "empty_pool_note", "headline",
    "lesson_key_steps", "reservation_name", "reservation_rule", "reveal", "scheduler_rules_text", "share_cells",
    "share_rows", "time_line", "workload_outcome",
    "oversized_block_note",
    "fig12_note", "paper_replication_texts",
    "sweep_basis", "sweep_summary", "sweep_table", "sweep_value",
    "latency_claim", "memory_claim", "paper_comparison", "ratio_words", "sustained_rows", "sustained_text",
    "sweep_headline", "time_split_claim",
]
