"""The KV-cache allocators the lesson compares, behind one protocol the engine uses.

Every allocator manages one pool of ``total_slots`` slots (a slot holds one token's K and V
for every layer) and implements :class:`Allocator`; the engine (``allocator.engine.simulate.simulate``)
touches nothing else. This module holds that protocol and names every allocator, so
``from allocator.memory.allocators import ...`` reaches all of them. Two families, one module each:

* **Reservation** (:class:`ReserveMaxAllocator`, :mod:`allocator.memory.reserve_max`): one contiguous
  run per request, sized at admission by a policy -- ``max``, ``pow2`` or ``oracle`` (the
  PagedAttention paper's baselines "Orca (Max)", "Orca (Pow2)", "Orca (Oracle)") -- placed first
  fit or by a buddy allocator.
* **Paged** (:class:`PagedAllocator`, :mod:`allocator.memory.paged`): the pool cut into fixed blocks
  held in the project's one :class:`~allocator.memory.block_pool.BlockPool`; a block table per sequence
  maps logical to physical blocks, and a sequence takes one more block only when its last block
  is full. It also answers vLLM v1's allocation calls (``v1_computed_blocks``, ``v1_allocate``,
  ``v1_free``).

The largest pool and block any of them accepts are :mod:`allocator.common.limits`'s.

Sources: Kwon et al., "Efficient Memory Management for Large Language Model Serving with
PagedAttention", SOSP 2023 (arXiv:2309.06180), sections 3 (reservation waste), 4 (paging,
sharing, preemption) and 6 (the Orca baselines); ``assets/reference_figures.md`` R9 (the
engine's rules every allocator runs under).
"""
from __future__ import annotations

from typing import Protocol, runtime_checkable

from allocator.memory.paged import PagedAllocator
from allocator.common.limits import MAX_BLOCK_SIZE, MAX_POOL_SLOTS
from allocator.memory.reserve_max import PLACEMENTS, RESERVATION_POLICIES, ReserveMaxAllocator

__all__ = ["Allocator", "MAX_BLOCK_SIZE", "MAX_POOL_SLOTS", "PLACEMENTS", "PagedAllocator",
           "RESERVATION_POLICIES", "ReserveMaxAllocator"]


@runtime_checkable
class Allocator(Protocol):
    """What the engine needs from an allocator (all lengths in tokens, sizes in slots).

    Attributes:
        kind: ``"reserve_max"`` or ``"paged"`` (how results are drawn).
        label: display name.
        total_slots: pool size in slots.
        block_size: slots per block, or None for a contiguous allocator.
        preemption: ``"recompute"`` or ``"swap"`` for an allocator that can preempt, else None.
        allocated_slots: slots currently held by sequences.
        units_in_use: reservations or blocks currently held (one metadata entry each).
        shared_saving: slots saved right now by sharing blocks (0 if it cannot share).
        swap_traffic: blocks moved to or from host memory so far (0 if it never swaps).
        last_hit_tokens: prompt tokens the last :meth:`admit` found in the prefix cache, which
            need no prefill (0 without prefix caching).
        hit_tokens, prompt_tokens: over all admissions, prompt tokens found in the prefix cache
            and prompt tokens admitted (0 and 0 without prefix caching).
        cached_blocks: blocks held only by the prefix cache right now; cache_evictions: cached
            blocks reused for other data so far (0 without prefix caching).
        prefix_caching: whether finished prompts' blocks stay findable (False if it cannot share).
    """

    kind: str
    label: str
    total_slots: int
    block_size: int | None
    preemption: str | None
    allocated_slots: int
    units_in_use: int
    shared_saving: int
    swap_traffic: int
    last_hit_tokens: int
    hit_tokens: int
    prompt_tokens: int
    cached_blocks: int
    cache_evictions: int
    prefix_caching: bool

    def reset(self, shared_prefix: int = 0, prompts=None) -> None:
        """Empty the pool; ``shared_prefix`` leading prompt tokens are one common system prompt;
        ``prompts`` gives requests' prompt token ids (``prompts.tokens(request_id)``) for prefix
        caching, or None."""

    def validate_workload(self, workload) -> None:
        """Raise FieldError if some request could never be served under this allocator's rules."""

    def never_fits(self, prompt_len: int, output_len: int) -> str | None:
        """Why a request can never be served in this pool (a sentence), or None."""

    def admission_need(self, prompt_len: int, context_len: int, output_len: int, seq_id: int | None = None) -> int:
        """Slots of new memory the queue head (request ``seq_id``) needs to be admitted now."""

    def admit(self, seq_id: int, prompt_len: int, context_len: int, output_len: int) -> int | None:
        """Allocate for a sequence holding ``context_len`` tokens that is about to emit one more.

        Returns:
            the tokens the sequence can hold before it needs more memory (its room, at least
            ``context_len + 1``), or None if it does not fit now (nothing is allocated then).
        """

    def grow(self, seq_id: int) -> int | None:
        """More room for a running sequence that has filled its room; the new room, or None."""

    def grow_all(self, seq_ids: list) -> int | None:
        """:meth:`grow` for several sequences at once: the room (tokens) added to each -- the same
        for all -- or None, with nothing allocated, if they cannot all grow now (the engine then
        serves them one by one, preempting as it must)."""

    def free(self, seq_id: int) -> None:
        """Release everything the sequence holds (it finished)."""

    def preempt(self, seq_id: int) -> str:
        """Evict a running sequence; returns ``"recompute"`` or ``"swap"`` (how it will come back)."""

    def external_fragmentation(self, need: int) -> int:
        """Free slots that cannot serve a request needing ``need`` slots although all free slots
        together could (placement, not shortage; 0 when ``need`` exceeds the free total)."""

    never_written: int  # allocated slots the holding requests will never write (internal fragmentation)

    def snapshot(self, lengths: dict) -> tuple:
        """A compact picture of the pool (``lengths``: tokens held per running sequence id)."""

    def check_invariants(self, lengths: dict) -> None:
        """Assert the bookkeeping agrees with the running sequences' lengths (tests)."""
