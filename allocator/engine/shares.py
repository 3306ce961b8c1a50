"""Where the KV pool goes: the memory shares every page, export and the CLI quote.

The categories partition the pool, for every allocator at every step, so they sum to 100 %
(``assets/reference_figures.md`` R9, the per-step metrics). They follow the PagedAttention paper's Figure 2 (Kwon et al.,
SOSP 2023: token states, reservation, internal fragmentation, external fragmentation and
others), plus two the lesson needs: duplicate copies of a shared system prompt, and free
memory that is no fragmentation (nobody waits, or the queue head needs more than all free slots
together, so no placement could admit it).

Pure numpy; the per-step counts come from :func:`allocator.engine.simulate.simulate`'s metrics.
"""
from __future__ import annotations

import numpy as np

#: (key, per-step metric, name on screen, what it means) in display order. The map colours:
#: token states blue (shared pink), duplicates brown, reservation and internal fragmentation both
#: orange (allocated, holding no token yet), external fragmentation dark grey, free grey.
SHARES = (
    ("token_states", "used_slots", "token states",
     "distinct tokens stored, a shared prompt counted once: the utilisation"),
    ("duplicates", "duplicate_slots", "duplicate copies",
     "extra copies of a shared system prompt"),
    ("reservation", "reserved_slots", "reservation",
     "allocated for tokens the request will still write"),
    ("internal_fragmentation", "internal_fragmentation", "internal fragmentation",
     "allocated, never written: room past the answer's end"),
    ("external_fragmentation", "external_fragmentation", "external fragmentation",
     "free, but in places the waiting request cannot use"),
    ("free_other", "free_other_slots", "free, not fragmentation",
     "free: nobody waits, or the next request needs more than all free slots"),
)


def share_arrays(metrics: dict, total_slots: int) -> dict[str, np.ndarray]:
    """Per-record shares of the pool, fractions that add up to 1 at every record.

    Args:
        metrics: a :class:`allocator.engine.result.SimulationResult`'s ``metrics`` (slot counts, shape
            [records]).
        total_slots: the pool's size (slots, >= 1).

    Returns:
        {key: float64 [records]} for every key of :data:`SHARES`.
    """
    return {key: np.asarray(metrics[name], dtype=np.float64) / total_slots for key, name, _, _ in SHARES}


def memory_shares(result, busy: bool = True) -> dict[str, float] | None:
    """Mean share of the pool in each category of :data:`SHARES` (span-weighted means of the
    per-step fractions, so they add up to 1 up to rounding).

    Args:
        result: an :class:`allocator.engine.result.SimulationResult`.
        busy: average over the steps when requests waited (True) or over every step (False).

    Returns:
        {key: fraction of the pool}, or None when there is nothing to average (no record, or
        ``busy`` and no request ever waited).
    """
    if not result.records:
        return None
    mask = result.busy_mask() if busy else None
    if mask is not None and not mask.any():
        return None
    # one share's array at a time (the same floats as share_arrays): all six at once held 170 MB
    # on a million-request run's 3.6 M records
    metrics, total = result.metrics, result.total_slots
    return {key: round(float(result.mean(np.asarray(metrics[name], dtype=np.float64) / total, mask)), 6)
            for key, name, _, _ in SHARES}
