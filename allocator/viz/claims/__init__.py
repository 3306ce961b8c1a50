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

Numbers are written by :mod:`allocator.common.formats`.
"""
