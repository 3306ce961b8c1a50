"""``python -m allocator metrics``: what every figure of ``simulate``'s summary means.

One line per key of ``simulate --json``'s summaries (``allocator.engine.summary.RunSummary``): its
on-screen label, unit and meaning, read from :data:`allocator.common.metric_names.SUMMARY_METRICS` -- the
table the pages, the exports and the About page's glossary read, so the command line names a
number as the screen does.

Examples::

    python -m allocator metrics
    python -m allocator metrics --json
"""
from __future__ import annotations

import json
from dataclasses import asdict

from allocator.common.metric_names import SUMMARY_METRICS


def register(sub) -> None:
    """Add the ``metrics`` sub-command to ``sub`` (an argparse sub-parsers object)."""
    p = sub.add_parser("metrics", help="what each key of simulate's summary means (label, unit, meaning)",
                       description="List every figure of a run's summary with the label the app shows it "
                                   "under, its unit and its meaning.")
    p.add_argument("--json", action="store_true", help="print the table as JSON ({key: {label, unit, meaning, term}})")
    p.set_defaults(func=run)


def run(args) -> int:
    """Print the registry; returns the exit status (0)."""
    if args.json:
        print(json.dumps({key: asdict(m) for key, m in SUMMARY_METRICS.items()}, indent=2, ensure_ascii=False))
        return 0
    width = max(len(k) for k in SUMMARY_METRICS)
    for key, m in SUMMARY_METRICS.items():
        unit = f" [{m.unit}]" if m.unit else ""
        print(f"{key:{width}}  {m.label}{unit}: {m.meaning}")
    return 0
