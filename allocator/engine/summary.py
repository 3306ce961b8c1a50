"""The summary of one run: :class:`RunSummary`, a typed record of every figure a run reports.

:func:`allocator.engine.result.summarize` computes it from the run's per-step metrics (the engine
calls it once per run and keeps it as ``SimulationResult.summary``); this module holds only the
type, so the result can name it without importing what computes it. Field names are the keys of
the JSON that ``python -m allocator simulate --json`` prints (:meth:`RunSummary.to_dict`,
byte-identical to the dict it replaced) and of :data:`allocator.common.metric_names.SUMMARY_METRICS`,
which gives each one its on-screen label, unit and meaning.

Means over steps weight each record by its span (an idle gap counts for every step it covers).
"Busy" means over the steps whose waiting queue was non-empty after admission: those are the
steps where allocators differ, so the lesson compares them there; a run in which nothing ever
waited has no busy figures (None), and the ``sustained_*`` properties of :class:`RunSummary` are
the one place that falls back to the all-steps figure.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields

#: Fields present only in a run with prefix caching (``to_dict`` leaves them out otherwise).
PREFIX_FIELDS = ("prefix_cache_hit_rate", "prefill_tokens_saved", "prompt_tokens_admitted",
                 "cached_block_evictions", "peak_cached_blocks", "mean_cached_blocks")


class FieldMapping(Mapping):
    """A read-only mapping view of a dataclass's fields (``row["steps"]``, ``dict(row)``,
    ``row.items()``), for JSON and for callers written against the dicts these dataclasses
    replaced; new code reads attributes. Subclasses may narrow :meth:`_keys`."""

    def _keys(self) -> tuple[str, ...]:
        return tuple(f.name for f in fields(self))

    def to_dict(self) -> dict:
        """JSON-ready dict, keys in field order."""
        return {name: getattr(self, name) for name in self._keys()}

    def __getitem__(self, key: str):
        if key in self._keys():
            return getattr(self, key)
        raise KeyError(key)

    def __iter__(self):
        return iter(self._keys())

    def __len__(self) -> int:
        return len(self._keys())


@dataclass(frozen=True)
class RunSummary(FieldMapping):
    """Summary figures of one run (units in each comment; "busy": see the module docstring).

    Also a read-only mapping of the same names (``s["steps"]``, ``dict(s)``, ``s.items()``), for
    JSON and for callers written against the dict it replaced; new code reads attributes.
    """

    steps: int                                   #: engine steps, step 0 to the last finish (idle gaps included)
    peak_running: int                            #: the largest batch, sequences
    peak_running_step: int                       #: first step the peak happened
    peak_running_steps: int                      #: engine steps that ran the peak batch (how long it lasted)
    mean_running_busy: float | None              #: the sustained batch: mean sequences running per busy step
    mean_running: float                          #: mean sequences running per step, all steps
    busy_steps: int                              #: steps whose waiting queue was non-empty
    mean_utilization_busy: float | None          #: distinct tokens / pool slots, mean over busy steps (0..1)
    mean_utilization: float                      #: the same over all steps (0..1)
    preemptions: int                             #: sequences preempted, in total
    mean_tokens_per_step: float                  #: tokens emitted per step, mean over all steps
    finished: int                                #: requests served to their last token
    rejected: list                               #: [{"id", "reason", "arrival_step"}] of requests that never fit
    total_slots: int                             #: the pool, slots
    block_size: int | None                       #: slots per block (None: a reservation allocator)
    peak_utilization: float                      #: the largest per-step utilisation (0..1)
    mean_internal_fragmentation_busy: float | None   #: allocated, never written; fraction of pool, busy mean
    mean_duplicate_fraction_busy: float | None   #: extra copies of a shared prompt; fraction of pool, busy mean
    mean_external_fragmentation_busy: float | None   #: free but unusable; fraction of pool, busy mean
    mean_reservation_busy: float | None          #: held for tokens still to come; fraction of pool, busy mean
    memory_shares_busy: dict | None              #: {SHARES key: fraction of pool}, busy mean, adds up to 1
    memory_shares: dict | None                   #: the same over all steps
    shared_prefix: int                           #: tokens of the common system prompt (0: none)
    peak_logical_tokens: int                     #: tokens held, each sequence counting its own prompt copy
    peak_logical_step: int                       #: first step of that peak
    used_slots_at_peak_logical: int              #: distinct slots holding them at that step
    peak_used_slots: int                         #: the most distinct slots in use, at its own step
    mean_logical_tokens_busy: float | None       #: logical tokens, busy mean
    mean_used_slots_busy: float | None           #: distinct slots in use, busy mean
    preemption_mode: str | None                  #: "recompute", "swap" (None: a reservation allocator)
    swapped_blocks: int                          #: blocks moved out to host memory plus back in
    recomputed_tokens: int                       #: tokens prefilled again after a recompute preemption
    records: int                                 #: busy steps plus idle gaps
    prefix_caching: bool = False                 #: the run had a prefix cache (the fields below exist)
    prefix_cache_hit_rate: float | None = None   #: prompt tokens found cached / prompt tokens (first admissions)
    prefill_tokens_saved: int | None = None      #: those tokens, not prefilled (tokens)
    prompt_tokens_admitted: int | None = None    #: prompt tokens of first admissions
    cached_block_evictions: int | None = None    #: cached blocks reused for other data
    peak_cached_blocks: int | None = None        #: the most blocks held only by the cache
    mean_cached_blocks: float | None = None      #: blocks held only by the cache, mean over all steps

    # ----------------------------------------------------------------- the busy-or-all fallback
    @property
    def waited(self) -> bool:
        """True when some step ended with requests waiting (the busy figures exist)."""
        return self.mean_running_busy is not None

    @property
    def sustained_running(self) -> float:
        """The sustained batch (sequences per step): ``mean_running_busy``, the mean running while
        requests waited, or ``mean_running`` over every step when none did. The peak is
        ``peak_running``, held for ``peak_running_steps`` steps."""
        return self.mean_running_busy if self.waited else self.mean_running

    @property
    def sustained_utilization(self) -> float:
        """Distinct tokens stored / pool slots (0..1; the explainer's "Mean utilisation" card):
        ``mean_utilization_busy`` while requests waited, or ``mean_utilization`` over every step
        when none did."""
        return self.mean_utilization_busy if self.waited else self.mean_utilization

    @property
    def sustained_memory_shares(self) -> dict | None:
        """{SHARES key: fraction of the pool}, adding up to 1: ``memory_shares_busy`` while
        requests waited, or ``memory_shares`` over every step when none did (None: no record)."""
        return self.memory_shares_busy if self.waited else self.memory_shares

    # ----------------------------------------------------------------- JSON and the mapping view
    def _keys(self) -> tuple[str, ...]:
        """Every field but the ``prefix_caching`` flag; the prefix-cache figures only when it is set."""
        names = [f.name for f in fields(self) if f.name != "prefix_caching"]
        return tuple(n for n in names if self.prefix_caching or n not in PREFIX_FIELDS)
