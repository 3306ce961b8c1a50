"""One name per number: every figure a run reports -> (on-screen label, unit, meaning).

The engine's summary (:class:`allocator.engine.summary.RunSummary`, whose field names are the keys here),
the explainer's cards and details table (``allocator.viz.claims``), the exports' CSV header units
(``allocator.viz.export.html``), the CLI's table and the About page's glossary all read this table, so
a number keeps one name from the engine to the screen. For example the **sustained batch**, the
figure the lesson compares allocators by, is the field ``mean_running_busy``, the card "Mean
running", and the glossary's "sustained batch" -- the same number everywhere (the per-step array
it averages is the engine metric ``running``).

No imports beyond the standard library: anything may read it.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Metric:
    """How a figure is shown and what it means.

    Attributes:
        label: the on-screen name (a card's label, a details-table row, a CLI line).
        unit: what one of it counts ("sequences", "fraction of pool", ...; "" for a pure ratio).
        meaning: one sentence a reader can check the number against.
        term: the glossary's word for it, where the lesson has one ("" otherwise).
    """

    label: str
    unit: str
    meaning: str
    term: str = ""


_BUSY = "averaged over the steps when at least one request was waiting"

#: Summary figures of one run (``RunSummary`` field -> Metric). tests/core/test_summary.py checks that
#: every field of :class:`allocator.engine.summary.RunSummary` has an entry.
SUMMARY_METRICS: dict[str, Metric] = {
    "steps": Metric("Steps to drain", "engine steps",
                    "Engine steps until every request has finished or been rejected."),
    "peak_running": Metric("peak running", "sequences",
                           "the most sequences that computed a token in the same step, when it first "
                           "happened and for how many steps the run held it"),
    "peak_running_steps": Metric("steps at the peak", "engine steps",
                                 "how many engine steps ran the peak batch: one step, or most of the run"),
    "peak_running_step": Metric("step of the peak", "engine step", "the first step the peak batch ran"),
    "mean_running_busy": Metric("Mean running", "sequences per step",
                                "Sequences computing a token per step, " + _BUSY + ": the batch an allocator "
                                "keeps up under load (its peak may last one step or most of the run; "
                                "the peak's row says which).",
                                term="sustained batch"),
    "mean_running": Metric("mean running, all steps", "sequences per step",
                           "sequences computing per step over the whole run (equals tokens per step)"),
    "busy_steps": Metric("steps with requests waiting", "engine steps",
                         "steps that ended with a non-empty waiting queue"),
    "mean_utilization_busy": Metric("Mean utilisation", "fraction of pool",
                                    "Distinct tokens stored ÷ all slots (a shared prompt counts once), " + _BUSY + ".",
                                    term="utilisation"),
    "mean_utilization": Metric("mean utilisation, all steps", "fraction of pool",
                               "distinct tokens stored ÷ all slots, averaged over every step"),
    "preemptions": Metric("preemptions", "sequences",
                          "sequences evicted to make room (recompute or swap, as chosen in the sidebar)"),
    "mean_tokens_per_step": Metric("tokens per step", "tokens per step",
                                   "mean tokens emitted per engine step (throughput)"),
    "finished": Metric("finished", "requests", "requests served to their last token"),
    "rejected": Metric("rejected", "requests", "requests that can never fit this pool, with the reason"),
    "total_slots": Metric("pool", "slots", "the pool's size"),
    "block_size": Metric("block size", "slots per block", "slots per block (None for a reservation allocator)"),
    "peak_utilization": Metric("peak utilisation", "fraction of pool", "the largest utilisation of any step"),
    "mean_internal_fragmentation_busy": Metric("internal fragmentation", "fraction of pool",
                                               "allocated, never written, " + _BUSY),
    "mean_duplicate_fraction_busy": Metric("duplicate copies", "fraction of pool",
                                           "extra copies of a shared system prompt, " + _BUSY),
    "mean_external_fragmentation_busy": Metric("external fragmentation", "fraction of pool",
                                               "free, but in places the waiting request cannot use, " + _BUSY),
    "mean_reservation_busy": Metric("reservation", "fraction of pool",
                                    "allocated for tokens the request will still write, " + _BUSY),
    "memory_shares_busy": Metric("memory shares", "fraction of pool each",
                                 "the pool's six shares (allocator.engine.shares.SHARES), adding up to 1, " + _BUSY,
                                 term="memory shares"),
    "memory_shares": Metric("memory shares, all steps", "fraction of pool each",
                            "the pool's six shares, averaged over every step"),
    "shared_prefix": Metric("shared prompt", "tokens", "tokens of one system prompt in front of every prompt"),
    "peak_logical_tokens": Metric("logical tokens, at their peak", "tokens",
                                  "tokens the running sequences hold, each counting its own copy of a shared prompt"),
    "peak_logical_step": Metric("step of the logical peak", "engine step", "the first step of that peak"),
    "used_slots_at_peak_logical": Metric("distinct tokens at that step", "slots",
                                         "the same tokens with a shared prompt counted once"),
    "peak_used_slots": Metric("peak distinct tokens", "slots", "the most distinct tokens stored at one step"),
    "mean_logical_tokens_busy": Metric("mean logical tokens", "tokens", "logical tokens held, " + _BUSY),
    "mean_used_slots_busy": Metric("mean distinct tokens", "slots", "distinct tokens stored, " + _BUSY),
    "preemption_mode": Metric("preemption mode", "", "recompute or swap (None for a reservation allocator)"),
    "swapped_blocks": Metric("swapped blocks", "blocks",
                             "blocks copied to host memory and back (swap), out and in together"),
    "recomputed_tokens": Metric("recomputed tokens", "tokens",
                                "tokens prefilled a second time after a recompute preemption"),
    "records": Metric("records", "records", "busy steps plus idle gaps, as the engine stored them"),
    "prefix_cache_hit_rate": Metric("prefix-cache hit rate", "fraction of prompt tokens",
                                    "prompt tokens found in the cache ÷ prompt tokens, each request counted at "
                                    "its first admission", term="prefix caching"),
    "prefill_tokens_saved": Metric("prefill tokens saved", "tokens", "prompt tokens found in the cache, not prefilled"),
    "prompt_tokens_admitted": Metric("prompt tokens admitted", "tokens", "prompt tokens of first admissions"),
    "cached_block_evictions": Metric("cached blocks evicted", "blocks", "cached blocks reused for other data"),
    "peak_cached_blocks": Metric("peak cached blocks", "blocks", "the most blocks held only by the cache"),
    "mean_cached_blocks": Metric("mean cached blocks", "blocks", "blocks held only by the cache, over every step"),
}

#: Unit of each per-step engine metric (``allocator.engine.result.METRICS`` names), as the exported CSV's
#: header writes it. tests/core/test_exports.py checks that every engine metric has one.
STEP_UNITS: dict[str, str] = {
    "used_slots": "slots",
    "duplicate_slots": "slots",
    "logical_tokens": "tokens",
    "allocated_unshared": "slots",
    "allocated_slots": "slots",
    "reserved_slots": "slots",
    "internal_fragmentation": "slots",
    "external_fragmentation": "slots",
    "free_slots": "slots",
    "free_other_slots": "slots",
    "utilization": "fraction of pool",
    "running": "sequences",
    "waiting": "requests",
    "finished": "requests",
    "tokens": "tokens this step",
    "preemptions": "sequences this step",
    "units": "count in use",
    "next_need": "slots",
    "swapped_blocks": "blocks this step",
    "recomputed_tokens": "tokens this step",
    "admitted": "sequences this step",
    "prefill_tokens": "tokens this step",
    "prefill_pairs": "query-key pairs this step",
    "decode_pairs": "query-key pairs this step",
    "prefix_hit_tokens": "tokens this step",
    "prompt_tokens_admitted": "tokens this step",
    "cached_blocks": "blocks",
    "cached_evictions": "blocks this step",
    "pending_tokens": "tokens still to write",
}


def label(name: str) -> str:
    """The on-screen label of summary figure ``name``.

    Raises:
        KeyError: ``name`` is not a summary figure.
    """
    return SUMMARY_METRICS[name].label


def meaning(name: str) -> str:
    """The one-sentence meaning of summary figure ``name`` (KeyError if unknown)."""
    return SUMMARY_METRICS[name].meaning


def glossary_rows(have: set[str] | frozenset = frozenset(), where: str = "Reserve vs paged"
                  ) -> list[tuple[str, str, str]]:
    """(term, meaning, where in the app) for every figure the lesson names by a term that the
    glossary does not define yet (``have``: its terms), for the About page: the meaning is the
    figure's own, and the row names the label the figure carries on screen."""
    return [(m.term, f"{m.meaning} On screen: \u201c{m.label}\u201d ({m.unit}).", where)
            for m in SUMMARY_METRICS.values() if m.term and m.term not in have]
