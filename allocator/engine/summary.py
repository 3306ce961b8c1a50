"""The summary of one run: :class:`RunSummary`, a typed record of every figure a run reports.

:func:`summarize` builds it from a :class:`allocator.engine.simulate.SimulationResult` (the engine calls
it once per run and keeps it as ``result.summary``). Field names are the keys of the JSON that
``python -m allocator simulate --json`` prints (:meth:`RunSummary.to_dict`, byte-identical to the
dict it replaced) and of :data:`allocator.common.metric_names.SUMMARY_METRICS`, which gives each one its
on-screen label, unit and meaning.

Means over steps weight each record by its span (an idle gap counts for every step it covers).
"Busy" means over the steps whose waiting queue was non-empty after admission: those are the
steps where allocators differ, so the lesson compares them there; a run in which nothing ever
waited has no busy figures (None), and :meth:`RunSummary.over_busy` is the one place that falls
back to the all-steps figure.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING

import numpy as np

from allocator.engine.shares import memory_shares

if TYPE_CHECKING:
    from allocator.engine.result import SimulationResult
    from allocator.workloads.requests import Workload

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
    peak_running: int                            #: the largest batch, sequences (a single instant)
    peak_running_step: int                       #: first step the peak happened
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

    def over_busy(self, name: str):
        """Figure ``name`` (an all-steps field with a ``name + "_busy"`` twin, e.g.
        ``"mean_running"``, ``"mean_utilization"``, ``"memory_shares"``) over the busy steps, or
        over every step when nothing ever waited: the one place the lesson falls back.

        Raises:
            AttributeError: ``name`` has no busy twin.
        """
        return getattr(self, f"{name}_busy") if self.waited else getattr(self, name)

    @property
    def sustained_running(self) -> float:
        """The sustained batch (sequences per step): mean running while requests waited, or over
        every step when none did. The peak is ``peak_running``, one instant."""
        return self.over_busy("mean_running")

    # ----------------------------------------------------------------- JSON and the mapping view
    def _keys(self) -> tuple[str, ...]:
        """Every field but the ``prefix_caching`` flag; the prefix-cache figures only when it is set."""
        names = [f.name for f in fields(self) if f.name != "prefix_caching"]
        return tuple(n for n in names if self.prefix_caching or n not in PREFIX_FIELDS)



def summarize(result: "SimulationResult") -> RunSummary:
    """Summary figures of a run (see :class:`RunSummary` for each field and its unit).

    Rounding (part of the CLI's JSON): busy means and utilisations to 6 places, the all-steps
    means of running, tokens and cached blocks to 4.

    With prefix caching, ``prefix_cache_hit_rate`` counts each request at its first admission
    (None if none was admitted); a re-admission after recompute that finds its own blocks still
    cached saves prefill too, which the cost model sees but ``prefill_tokens_saved`` does not count.
    """
    m = result.metrics
    busy = result.busy_mask()
    total = float(result.total_slots)
    has = result.records > 0

    def busy_mean(arr):
        value = result.mean(arr, busy) if busy.any() else None
        return None if value is None else round(value, 6)

    def total_of(name):
        return int((m[name] * m["span"]).sum())

    peak = int(m["logical_tokens"].argmax()) if has else 0
    extra = {}
    if result.prefix_caching:
        hit, prompt = total_of("prefix_hit_tokens"), total_of("prompt_tokens_admitted")
        extra = dict(
            prefix_cache_hit_rate=round(hit / prompt, 6) if prompt else None,
            prefill_tokens_saved=hit, prompt_tokens_admitted=prompt,
            cached_block_evictions=total_of("cached_evictions"),
            peak_cached_blocks=int(m["cached_blocks"].max()) if has else 0,
            mean_cached_blocks=round(result.mean(m["cached_blocks"]), 4) if has else 0.0)
    return RunSummary(
        steps=result.steps,
        peak_running=int(m["running"].max()) if has else 0,
        peak_running_step=int(m["step"][int(m["running"].argmax())]) if has else 0,
        mean_running_busy=busy_mean(m["running"]),
        mean_running=round(result.mean(m["running"]), 4) if has else 0.0,
        busy_steps=int((m["span"] * busy).sum()),
        mean_utilization_busy=busy_mean(m["utilization"]),
        mean_utilization=round(result.mean(m["utilization"]), 6) if has else 0.0,
        preemptions=total_of("preemptions"),
        mean_tokens_per_step=round(result.mean(m["tokens"]), 4) if has else 0.0,
        finished=int(m["finished"][-1]) if has else 0,
        rejected=list(result.rejected),
        total_slots=result.total_slots,
        block_size=result.block_size,
        peak_utilization=round(float(m["utilization"].max()), 6) if has else 0.0,
        mean_internal_fragmentation_busy=busy_mean(m["internal_fragmentation"] / total),
        mean_duplicate_fraction_busy=busy_mean(m["duplicate_slots"] / total),
        mean_external_fragmentation_busy=busy_mean(m["external_fragmentation"] / total),
        mean_reservation_busy=busy_mean(m["reserved_slots"] / total),
        memory_shares_busy=memory_shares(result, busy=True),
        memory_shares=memory_shares(result, busy=False),
        shared_prefix=result.shared_prefix,
        peak_logical_tokens=int(m["logical_tokens"][peak]) if has else 0,
        peak_logical_step=int(m["step"][peak]) if has else 0,
        used_slots_at_peak_logical=int(m["used_slots"][peak]) if has else 0,
        peak_used_slots=int(m["used_slots"].max()) if has else 0,
        mean_logical_tokens_busy=busy_mean(m["logical_tokens"]),
        mean_used_slots_busy=busy_mean(m["used_slots"]),
        preemption_mode=result.preemption,
        swapped_blocks=total_of("swapped_blocks"),
        recomputed_tokens=total_of("recomputed_tokens"),
        records=result.records,
        prefix_caching=bool(result.prefix_caching),
        **extra,
    )


def request_table(served: list, workload: "Workload", timed: bool) -> dict:
    """The finished requests as arrays sorted by id (see ``SimulationResult.requests``).

    Args:
        served: one tuple per finished request, ``(id, prompt_len, output_len, arrival (steps or
            seconds), first_token_step, finish_step)``; sorted in place.
        workload: the run's workload (for each request's arrival step).
        timed: the run was on the seconds clock (adds ``arrival_s``, float64 seconds).

    Returns:
        {column: int64 array [finished]}: id, prompt_len, output_len (tokens), arrival_step,
        first_token_step, finish_step (engine steps), and ``arrival_s`` when ``timed``.
    """
    served.sort()
    steps = {r.id: r.arrival_step for r in workload.requests}
    ids = np.array([row[0] for row in served], dtype=np.int64)
    table = {
        "id": ids,
        "prompt_len": np.array([row[1] for row in served], dtype=np.int64),
        "output_len": np.array([row[2] for row in served], dtype=np.int64),
        "arrival_step": np.array([steps[i] for i in ids.tolist()], dtype=np.int64),
        "first_token_step": np.array([row[4] for row in served], dtype=np.int64),
        "finish_step": np.array([row[5] for row in served], dtype=np.int64),
    }
    if timed:
        table["arrival_s"] = np.array([row[3] for row in served], dtype=np.float64)
    return table
