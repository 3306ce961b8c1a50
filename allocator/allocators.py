"""The KV-cache allocators the lesson compares, behind one protocol the engine uses.

Every allocator manages one pool of ``total_slots`` slots (a slot holds one token's K and V
for every layer) and implements :class:`Allocator`; the engine (``allocator.engine.simulate``)
touches nothing else. Two families:

* **Reservation** (:class:`ReserveMaxAllocator`): one contiguous run per request, sized at
  admission by a policy -- ``max`` (prompt + max_new_tokens, how pre-2023 engines such as
  FasterTransformer and Orca held the cache), ``pow2`` (prompt + the next power of two >= the
  output length) or ``oracle`` (prompt + the exact output length). These are the PagedAttention
  paper's baselines ("Orca (Max)", "Orca (Pow2)", "Orca (Oracle)").
* **Paged** (:class:`PagedAllocator`): the pool cut into fixed blocks held in the project's one
  :class:`~allocator.block_pool.BlockPool`; a block table per sequence maps logical to physical
  blocks, and a sequence takes one more block only when its last block is full.

Sources: Kwon et al., "Efficient Memory Management for Large Language Model Serving with
PagedAttention", SOSP 2023, sections 3 (reservation waste), 4 (paging, sharing, preemption)
and 6 (the Orca baselines); vLLM's block manager and free block queue.
"""
from __future__ import annotations

from bisect import insort
from typing import Protocol, runtime_checkable

from .block_hash import prefix_block_keys, prompt_block_hashes
from .array_pool import ArrayBlockPool
from .block_pool import BlockPool, HostPool
from .buddy import ORCA_BLOCK_SIZE, ORCA_MAX_CONTEXT, BuddyBlocks, reservation_blocks
from .validate import FieldError, one_of, whole_number

#: Reservation policies of :class:`ReserveMaxAllocator` (the PagedAttention paper's baselines).
RESERVATION_POLICIES = ("max", "pow2", "oracle")
#: Where a reservation is placed: "first-fit" (one contiguous run of slots, lowest address; the
#: explainer's lesson, seed 000) or "buddy" (the paper's artifact: power-of-two runs of blocks,
#: :mod:`allocator.buddy`).
PLACEMENTS = ("first-fit", "buddy")
#: Largest block size accepted (slots).
MAX_BLOCK_SIZE = 4096
#: Largest pool simulated (slots), for every allocator, the CLI and every page
#: (``allocator.limits``): 2**30. Production prefix caches span GPU, host memory and disk
#: (Mooncake, FAST 2025), so pools this large are real; the block pool's memory grows with the
#: blocks used, not with the pool's size (``allocator.block_pool``), so they cost what they hold.
MAX_POOL_SLOTS = 1 << 30
#: Largest paged pool in blocks: a pool of one-slot blocks of the largest pool.
MAX_POOL_BLOCKS = MAX_POOL_SLOTS


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


def _next_pow2(n: int) -> int:
    """Smallest power of two >= n (n >= 1)."""
    return 1 << (n - 1).bit_length()


class ReserveMaxAllocator:
    """Contiguous reservation per request, first fit (lowest address), held until the request ends.

    Args:
        total_slots: pool size in slots (>= 1).
        max_new_tokens: the server's cap on generated tokens (>= 1).
        policy: how big a reservation is (the PagedAttention paper's Orca baselines):
            ``"max"`` prompt + max_new_tokens (default); ``"pow2"`` prompt + the next power of
            two >= the output length, but never more than max_new_tokens (a server does not set
            aside room for tokens its cap forbids: with a cap of 600, a 513-token answer gets
            600, not 1,024); ``"oracle"`` prompt + the exact output length.

        placement: ``"first-fit"`` (default: exactly ``reservation`` slots, the lowest free run
            long enough) or ``"buddy"`` (the PagedAttention paper's artifact, :mod:`allocator.buddy`:
            ``ceil(min(prompt + estimate, max_context) / block_size)`` blocks, where the estimate
            is ``max_context`` for max, the next power of two of the output for pow2 and the
            output for oracle, rounded up to a power of two of blocks and placed by a buddy
            allocator whose largest run is ``max_context / block_size`` blocks; ``max_new_tokens``
            plays no part in the size then).
        block_size: tokens per block of the buddy placement (default 16, the artifact's).
        max_context: the buddy placement's cap on a reservation (tokens; default 2,048, OPT's
            context window); must be a power-of-two multiple of ``block_size``.

    Raises:
        FieldError: ``total_slots`` or ``max_new_tokens`` not a whole number >= 1, an unknown
            ``policy`` or ``placement``, or (buddy) a pool smaller than one block or a
            ``max_context`` that is not a power-of-two number of blocks.

    A reservation never needs to grow, so this allocator never preempts. Its waste is the
    unreached tail of each reservation (internal fragmentation: with buddy placement this includes
    the rounding up to a power of two of blocks) and the free runs between reservations that are
    too short for the next reservation (external fragmentation).
    """

    kind = "reserve_max"
    block_size = None
    preemption = None
    shared_saving = 0
    last_hit_tokens = hit_tokens = prompt_tokens = cached_blocks = cache_evictions = 0
    prefix_caching = False
    swap_traffic = 0
    LABELS = {"max": "Reserve-max", "pow2": "Reserve-pow2", "oracle": "Reserve-oracle"}

    def __init__(self, total_slots: int, max_new_tokens: int, policy: str = "max", placement: str = "first-fit",
                 block_size: int = ORCA_BLOCK_SIZE, max_context: int = ORCA_MAX_CONTEXT):
        self.total_slots = whole_number("total_slots", total_slots, 1, MAX_POOL_SLOTS)
        self.max_new_tokens = whole_number("max_new_tokens", max_new_tokens, 1)
        self.policy = one_of("policy", policy, RESERVATION_POLICIES)
        self.placement = one_of("placement", placement, PLACEMENTS)
        self.label = self.LABELS[self.policy]
        self._buddy = None
        if self.placement == "buddy":
            self.unit = whole_number("block_size", block_size, 1, MAX_BLOCK_SIZE)
            self.max_context = whole_number("max_context", max_context, 1)
            run = self.max_context // self.unit
            if self.max_context % self.unit or run & (run - 1):
                raise FieldError("max_context", f" = {self.max_context} must be a power-of-two number of "
                                 f"{self.unit}-token blocks")
            if self.total_slots < self.unit:
                raise FieldError("block_size", f" = {self.unit} is larger than the pool ({self.total_slots} slots)")
            self._buddy = BuddyBlocks(self.total_slots // self.unit, run)
            self.label += " (buddy)"
        self.reset()

    def reset(self, shared_prefix: int = 0, prompts=None) -> None:
        """Forget every reservation (an empty pool). Contiguous runs cannot share blocks, so a
        shared prefix or known prompt tokens change nothing here: each reservation stores its
        own copy and prefills all of it."""
        self._runs: list[tuple[int, int, int]] = []     # sorted (start, length, seq_id)
        self._by_seq: dict[int, tuple[int, int]] = {}    # seq_id -> (start, length)
        self.allocated_slots = 0
        if self._buddy is not None:
            self._buddy.reset()
        self._unwritten: dict[int, int] = {}             # seq_id -> slots of its run it will never write
        self.never_written = 0                           # their sum: internal fragmentation
        self._version = 0                                # bumped whenever the runs change
        self._ext_key: tuple | None = None
        self._ext_value = 0

    @property
    def units_in_use(self) -> int:
        """Number of reservations held (one metadata entry each)."""
        return len(self._by_seq)

    def reservation(self, prompt_len: int, output_len: int | None = None) -> int:
        """Slots reserved for a request (see ``policy`` and ``placement``); ``output_len`` is needed
        for pow2/oracle. With buddy placement this is the whole power-of-two run of blocks."""
        if self._buddy is not None:
            if output_len is None and self.policy != "max":
                raise FieldError("output_len", f" is needed by the {self.policy!r} reservation policy")
            blocks = reservation_blocks(prompt_len, output_len or 1, self.policy, self.unit, self.max_context)
            return _next_pow2(blocks) * self.unit
        if self.policy == "max":
            return prompt_len + self.max_new_tokens
        if output_len is None:
            raise FieldError("output_len", f" is needed by the {self.policy!r} reservation policy")
        if self.policy == "oracle":
            return prompt_len + output_len
        return prompt_len + min(_next_pow2(output_len), self.max_new_tokens)

    def validate_workload(self, workload) -> None:
        """Every output must fit the cap the reservation is sized by.

        Raises:
            FieldError (``max_new_tokens``): an output_len above this allocator's max_new_tokens.
        """
        if self._buddy is not None:        # the cap sizes reservations; longer requests are rejected one by one
            return
        for r in workload.requests:
            if r.output_len > self.max_new_tokens:
                raise FieldError("max_new_tokens", f" = {self.max_new_tokens} is below request {r.id}'s "
                                 f"output_len {r.output_len}: a reservation could not hold its answer")

    def never_fits(self, prompt_len: int, output_len: int) -> str | None:
        """Reason the request can never be admitted (its reservation exceeds the pool), else None."""
        need = self.reservation(prompt_len, output_len)
        if self._buddy is not None:
            if prompt_len + output_len > self.max_context:
                return (f"holds {prompt_len + output_len} tokens at its longest (prompt {prompt_len} + output "
                        f"{output_len}), more than the {self.max_context}-token context its buddy reservation is "
                        "capped at")
            largest = self._buddy.largest_possible() * self.unit
            if need > largest:
                return (f"needs a buddy run of {need} slots ({need // self.unit} blocks of {self.unit}) but the "
                        f"largest run this pool has is {largest} slots")
            return None
        if need > self.total_slots:
            what = {"max": f"max_new_tokens {self.max_new_tokens}", "oracle": f"output {output_len}",
                    "pow2": f"{min(_next_pow2(output_len), self.max_new_tokens)} for its {output_len}-token output"
                    }[self.policy]
            return (f"needs a contiguous reservation of {need} slots (prompt {prompt_len} + {what}) "
                    f"but the pool has only {self.total_slots} slots")
        return None

    def admission_need(self, prompt_len: int, context_len: int, output_len: int, seq_id: int | None = None) -> int:
        """Contiguous slots the request needs to be admitted (its whole reservation)."""
        return self.reservation(prompt_len, output_len)

    def _gaps(self):
        """Yield (start, length) of every free run, in address order (buddy placement: the buddy
        allocator's free runs, in slots, then the slots past the last whole block)."""
        if self._buddy is not None:
            for start, size in self._buddy.free_list():
                yield start * self.unit, size * self.unit
            tail = self.total_slots - self._buddy.num_blocks * self.unit
            if tail:
                yield self._buddy.num_blocks * self.unit, tail
            return
        pos = 0
        for start, length, _ in self._runs:
            if start > pos:
                yield pos, start - pos
            pos = start + length
        if pos < self.total_slots:
            yield pos, self.total_slots - pos

    def admit(self, seq_id: int, prompt_len: int, context_len: int, output_len: int) -> int | None:
        """Reserve the first (lowest-address) free run long enough; its length is the room, or
        None if no run is long enough."""
        need = self.reservation(prompt_len, output_len)
        if self._buddy is not None:
            block = self._buddy.allocate(need // self.unit)
            if block is None:
                return None
            return self._place(seq_id, block * self.unit, need, prompt_len + output_len)
        for start, length in self._gaps():
            if length >= need:
                return self._place(seq_id, start, need, prompt_len + output_len)
        return None

    def _place(self, seq_id: int, start: int, need: int, final: int) -> int:
        """Record a reservation of ``need`` slots at ``start`` for a sequence that ends at ``final``
        tokens; the slots past ``final`` are never written (internal fragmentation). Returns need."""
        insort(self._runs, (start, need, seq_id))
        self._by_seq[seq_id] = (start, need)
        self.allocated_slots += need
        self._unwritten[seq_id] = need - final
        self.never_written += need - final
        self._version += 1
        return need

    def grow(self, seq_id: int) -> int | None:
        """A contiguous reservation cannot grow: None. (The engine never asks, since a reservation
        holds the whole answer; :meth:`validate_workload` makes sure of that.)"""
        return None

    def grow_all(self, seq_ids: list) -> int | None:
        """Reservations cannot grow: None."""
        return None

    def free(self, seq_id: int) -> None:
        """Release the sequence's reservation."""
        start, length = self._by_seq.pop(seq_id)
        self._runs.remove((start, length, seq_id))
        self.allocated_slots -= length
        self.never_written -= self._unwritten.pop(seq_id)
        self._version += 1
        if self._buddy is not None:
            self._buddy.free(start // self.unit)

    def preempt(self, seq_id: int) -> str:
        """Release the sequence's reservation for recompute (never needed: reservations never grow)."""
        self.free(seq_id)
        return "recompute"

    def external_fragmentation(self, need: int) -> int:
        """Free slots lying in runs shorter than ``need`` slots, counted only when all free slots
        together would hold ``need`` (then placement, not shortage, keeps the request out); 0 when
        nothing waits or the queue head needs more than the whole free pool (free memory, not
        fragmentation: no allocator could admit it).

        Cached until the reservations or ``need`` change, so the engine can ask every step."""
        if need <= 0 or need > self.total_slots - self.allocated_slots:
            return 0
        key = (self._version, need)
        if key != self._ext_key:
            self._ext_key = key
            self._ext_value = sum(length for _, length in self._gaps() if length < need)
        return self._ext_value

    def holes(self, need: int) -> list[tuple[int, int]]:
        """Free runs (start, length) shorter than ``need`` slots: the holes the map marks (none when
        ``need`` exceeds the whole free pool, as :meth:`external_fragmentation` counts them)."""
        if need <= 0 or need > self.total_slots - self.allocated_slots:
            return []
        return [(s, n) for s, n in self._gaps() if n < need]

    def run_of(self, seq_id: int) -> tuple[int, int]:
        """(start slot, length in slots) of a sequence's reservation."""
        return self._by_seq[seq_id]

    def snapshot(self, lengths: dict) -> tuple:
        """Reservations as a tuple of (owner id, start slot, reserved slots, tokens held), by address."""
        return tuple((seq_id, start, length, lengths[seq_id]) for start, length, seq_id in self._runs)

    def check_invariants(self, lengths: dict) -> None:
        """Assert reservations never overlap, never hold more tokens than reserved, and add up.

        Raises:
            AssertionError naming the first inconsistency.
        """
        pos = held = 0
        for start, length, seq_id in self._runs:
            assert start >= pos, f"reservations overlap at slot {start}"
            assert lengths[seq_id] <= length, f"seq {seq_id} holds more tokens than it reserved"
            pos = start + length
            held += length
        assert pos <= self.total_slots, "a reservation runs past the pool"
        assert held == self.allocated_slots, "allocated slots do not add up"
        if self._buddy is not None:
            self._buddy.check_invariants()
            assert {(s // self.unit, n // self.unit) for s, n, _ in self._runs} == set(self._buddy.owned.items()), \
                "reservations and buddy runs differ"
        assert {s for _, _, s in self._runs} == set(lengths), "reservations and running sequences differ"


#: Token id of position ``i`` of the synthetic shared system prompt (any fixed ids will do: the
#: engine only needs every request's prefix to hash alike).
def _system_prompt_tokens(n: int) -> list[int]:
    return list(range(n))


class PagedAllocator:
    """The pool cut into fixed blocks, kept in the project's one :class:`BlockPool`.

    Args:
        total_slots: pool size in slots (>= 1). ``total_slots // block_size`` blocks are made;
            the remainder (``total_slots % block_size`` slots) cannot form a block and is
            counted as an unusable hole.
        block_size: slots per block (1 .. 4096).
        preemption: ``"recompute"`` (a preempted sequence's blocks are dropped and its tokens are
            prefilled again later) or ``"swap"`` (its private blocks are copied to a host pool and
            copied back before it resumes; when the host pool is full it falls back to recompute).
            Swap is older vLLM's option (v0); vLLM v1 preempts by recompute only, and the engine's
            v1 rules (``allocator.engine.V1Rules``) refuse a swapping allocator.
        host_blocks: capacity of the host (CPU) swap pool in blocks (default: as many as the GPU pool).
        prefix_caching: keep the full prompt blocks of every sequence findable by their block
            hash after it finishes, until the free block queue hands them out again (vLLM's
            automatic prefix caching); admission reuses the longest cached run of the prompt's
            full blocks, which then needs no prefill.

    Raises:
        FieldError: ``block_size`` or ``total_slots`` not a whole number >= 1 (at most
            :data:`MAX_POOL_SLOTS` slots), a block larger than the pool, an unknown
            ``preemption`` mode or a negative ``host_blocks``.

    A sequence is admitted with ceil((context_len + 1) / block_size) blocks -- room for its
    context and the token prefill emits -- and takes one more block only when its last block is
    full. Blocks come from the front of the free block queue and return to its back, last block
    first, so physical order soon stops matching logical order, as in vLLM. The only waste is
    the unfilled end of each sequence's last block.

    Prefix sharing (``reset(shared_prefix=N)``): every request's prompt starts with the same N
    tokens, so its first N // block_size blocks are full and identical. The first sequence to be
    admitted fills them and registers them in the pool's block-hash map; later ones find them by
    hash, point their block tables at the same physical blocks and raise their refcount. With
    ``cache_freed=False`` the hashes are forgotten when the last holder releases the blocks, so
    sharing lasts while some sequence holds the prompt. Only full blocks are shared and writes
    always land after them, so no copy-on-write is needed here (``allocator.block_manager``
    shows copy-on-write). Source: PagedAttention (SOSP 2023) section 4.4.

    Prefix caching (``prefix_caching=True``, with ``reset(prompts=...)`` giving each request's
    prompt token ids): a sequence's full prompt blocks are keyed by
    :func:`allocator.block_hash.prefix_block_keys` (each key covers the block and every token
    before it), or, when the prompts come from a trace with chained block ids, by the trace's
    own keys (:meth:`allocator.mooncake.TracePrompts.block_keys`: the same matches, no hashing),
    and registered when it is admitted (the pool is then an
    :class:`~allocator.array_pool.ArrayBlockPool`: the same rules, a prompt's blocks moved in
    bulk). Admission looks the keys up in order and reuses the longest run found -- blocks other
    sequences hold (refcount up) or blocks that finished sequences left in the free queue (taken
    out of it) -- up to the block before the one holding the prompt's last token, which is always
    computed (its logits start the output, as in vLLM). Those tokens need no prefill (``last_hit_tokens``). A cached block that the free queue
    hands out again loses its key (an eviction, least recently used first). Only prompt blocks
    are keyed: generated tokens are the model's and no later prompt is known to repeat them.
    Without ``prompts``, the shared system prompt (``shared_prefix``) is the cached prefix.
    Sources: vLLM automatic prefix caching design; Kwon et al. (SOSP 2023) section 4.4.
    """

    kind = "paged"
    label = "Paged"
    PREEMPTION_MODES = ("recompute", "swap")
    #: The pool type ``reset`` builds (called as ``pool_class(num_blocks, cache_freed=...)``); a
    #: subclass may use a BlockPool subclass that also measures something. None: a
    #: :class:`~allocator.array_pool.ArrayBlockPool` with prefix caching (the same rules, numpy
    #: state for a prompt's hundreds of blocks at a time), else a :class:`BlockPool`.
    pool_class = None

    def __init__(self, total_slots: int, block_size: int, preemption: str = "recompute",
                 host_blocks: int | None = None, prefix_caching: bool = False):
        self.block_size = whole_number("block_size", block_size, 1, MAX_BLOCK_SIZE)
        self.total_slots = whole_number("total_slots", total_slots, 1, MAX_POOL_SLOTS)
        self.prefix_caching = bool(prefix_caching)
        self.num_blocks = self.total_slots // self.block_size
        if self.num_blocks == 0:
            raise FieldError("block_size", f" = {self.block_size} is larger than the pool "
                                           f"({self.total_slots} slots)")
        self.preemption = one_of("preemption", preemption, self.PREEMPTION_MODES)
        self.host_blocks = self.num_blocks if host_blocks is None else whole_number("host_blocks", host_blocks, 0)
        self.remainder_slots = self.total_slots - self.num_blocks * self.block_size
        self.reset()

    def reset(self, shared_prefix: int = 0, prompts=None) -> None:
        """Empty the pool: every block free (in block-id order), no block tables, empty host pool.

        Args:
            shared_prefix: tokens at the start of every prompt that are the same system prompt
                (0: no sharing). Its full blocks are shared between sequences.
            prompts: the requests' prompt token ids (an object with ``tokens(request_id)``, e.g.
                :class:`allocator.mooncake.TracePrompts`), used with prefix caching; requests it
                does not know share only the system prompt.
        """
        pool_class = self.pool_class
        if pool_class is None:      # prefix caching moves a prompt's blocks in bulk: the numpy pool
            pool_class = ArrayBlockPool if self.prefix_caching else BlockPool
        self.pool = pool_class(self.num_blocks, cache_freed=self.prefix_caching)
        self.host = HostPool(self.host_blocks)
        self.block_tables: dict[int, list[int]] = {}
        self._final: dict[int, int] = {}            # seq_id -> tokens it holds when it finishes
        self._unwritten: dict[int, int] = {}        # seq_id -> slots of its last block it will never write
        self.never_written = 0                      # their sum: internal fragmentation
        self.swapped: dict[int, list[int]] = {}     # seq_id -> host blocks it holds
        self._swapped_shared: dict[int, int] = {}   # seq_id -> blocks it shared when swapped out (not copied)
        self.last_lost_tokens = 0                   # context tokens the last swap-in must compute again,
        self.last_lost_start = 0                    # starting at this token (after the blocks still found)
        self.swap_traffic = 0                       # blocks moved out + in, total
        self.shared_saving = 0                      # slots saved by sharing right now
        self.shared_prefix = whole_number("shared_prefix", shared_prefix, 0)
        self.prompts = prompts if self.prefix_caching else None
        self._keys: dict[int, list] = {}            # seq_id -> its prompt's block keys (prefix caching)
        self._v1_registered: dict[int, int] = {}    # v1 scheduler: seq_id -> its leading blocks registered
        self.last_hit_tokens = 0                    # prompt tokens the last admission found cached
        self.hit_tokens = 0                         # all admissions: prompt tokens found cached
        self.prompt_tokens = 0                      # all admissions: prompt tokens admitted
        # blocks of the prompt that can ever be shared (a longer prompt than the pool is rejected anyway)
        n_prefix = min(self.shared_prefix // self.block_size, self.num_blocks)
        self._prefix_hashes = (prompt_block_hashes(_system_prompt_tokens(n_prefix * self.block_size),
                                                   self.block_size) if n_prefix else [])
        self._sharing = bool(self._prefix_hashes) or self.prefix_caching

    @property
    def allocated_slots(self) -> int:
        """Distinct slots in blocks that belong to some sequence."""
        return (self.num_blocks - self.pool.num_free) * self.block_size

    @property
    def units_in_use(self) -> int:
        """Distinct blocks held by sequences (block-table entries pointing at them may be more)."""
        return self.num_blocks - self.pool.num_free

    @property
    def refcounts(self) -> list[int]:
        """Refcount of every block, shape (num_blocks,)."""
        return self.pool.all_refcounts()

    def blocks_for(self, tokens: int) -> int:
        """Blocks needed to hold ``tokens`` tokens: ceil(tokens / block_size)."""
        return -(-tokens // self.block_size)

    def validate_workload(self, workload) -> None:
        """Nothing to check: a paged sequence grows block by block, whatever its output cap."""

    def never_fits(self, prompt_len: int, output_len: int) -> str | None:
        """Reason the request can never finish (its longest context needs more blocks than exist)."""
        need = self.blocks_for(prompt_len + output_len)
        if need > self.num_blocks:
            return (f"needs {need} blocks of {self.block_size} slots at its longest "
                    f"({prompt_len + output_len} tokens) but the pool has only {self.num_blocks} blocks")
        return None

    def _prompt_keys(self, seq_id, prompt_len: int) -> list:
        """Keys of the prompt's blocks that may be found in the cache (see the class docstring)."""
        if self.prompts is not None and seq_id is not None and seq_id in self.prompts:
            keys = self._keys.get(seq_id)
            if keys is None:
                if hasattr(self.prompts, "block_keys"):       # a trace's own chained block ids: no hashing
                    keys = self.prompts.block_keys(seq_id, self.block_size,
                                                   as_array=isinstance(self.pool, ArrayBlockPool))
                else:
                    keys = prefix_block_keys(self.prompts.tokens(seq_id), self.block_size, as_bytes=True)
                self._keys[seq_id] = keys
            return keys
        if self._prefix_hashes and prompt_len >= self.shared_prefix:
            return self._prefix_hashes
        return []

    def _hits(self, seq_id, prompt_len: int) -> tuple[list, list[int]]:
        """(the prompt's keys, the blocks already cached for its longest run of leading keys)."""
        keys = self._prompt_keys(seq_id, prompt_len)
        if not len(keys):
            return keys, []
        # with prefix caching the block holding the prompt's last token is always computed
        limit = min(len(keys), (prompt_len - 1) // self.block_size) if self.prefix_caching else len(keys)
        return keys, self.pool.lookup_run(keys, limit)

    def admission_need(self, prompt_len: int, context_len: int, output_len: int, seq_id: int | None = None) -> int:
        """Slots of new blocks needed to admit: ceil((context_len + 1) / block_size) blocks, less
        the prompt blocks found in the pool (shared system prompt or prefix cache), plus any of
        those that sit in the free queue (taking them out leaves fewer free)."""
        bs = self.block_size
        if not self._sharing:                          # the common case, kept short
            return -(-(context_len + 1) // bs) * bs
        _, hits = self._hits(seq_id, prompt_len)
        cached_free = self.pool.count_refcount(hits, 0)
        return (-(-(context_len + 1) // bs) - len(hits) + cached_free) * bs

    def admit(self, seq_id: int, prompt_len: int, context_len: int, output_len: int) -> int | None:
        """Give the sequence ceil((context_len + 1) / block_size) blocks (pointing at shared or
        cached prompt blocks where it can), or None if too few are free. A sequence coming back
        from the host pool is swapped in here. Returns the room in tokens (blocks x block_size);
        ``last_hit_tokens`` says how many prompt tokens were found in the prefix cache."""
        need = -(-(context_len + 1) // self.block_size)
        pool = self.pool
        if not self._sharing and not self.swapped:      # the common case, kept short
            if need > pool.num_free:
                return None
            self.block_tables[seq_id] = pool.allocate(need)
            self._track(seq_id, prompt_len + output_len, need * self.block_size)
            return need * self.block_size
        keys, hits = self._hits(seq_id, prompt_len) if self._sharing else ((), [])
        cached_free = pool.count_refcount(hits, 0)
        if need - len(hits) > pool.num_free - cached_free:
            return None
        if hits:
            self.shared_saving += (len(hits) - cached_free) * self.block_size   # blocks another table holds
            pool.touch(hits)
        table = hits + pool.allocate(need - len(hits))
        upto = min(len(keys), prompt_len // self.block_size)
        if upto > len(hits):                           # this sequence fills these prompt blocks
            pool.register_all(table[len(hits):upto], keys[len(hits):upto])
        self.block_tables[seq_id] = table
        if self.prefix_caching:
            self.last_hit_tokens = len(hits) * self.block_size
            self.hit_tokens += self.last_hit_tokens
            self.prompt_tokens += prompt_len
        host = self.swapped.pop(seq_id, None)
        if host is not None:
            self.host.give_back(host)
            self.swap_traffic += len(host)
            # Only its private blocks went to the host; the shared ones (the leading prompt blocks)
            # stayed with their other holders. Those no longer found must be computed again.
            lost = self._swapped_shared.pop(seq_id) - len(hits)
            self.last_lost_start = len(hits) * self.block_size
            self.last_lost_tokens = min(context_len - self.last_lost_start, lost * self.block_size) if lost > 0 else 0
        self._track(seq_id, prompt_len + output_len, need * self.block_size)
        return need * self.block_size

    def _track(self, seq_id: int, final: int, room: int) -> None:
        """Remember a newly admitted sequence's final length (tokens) and count the slots of its
        room (tokens) it will never write, if its last block is already allocated."""
        self._final[seq_id] = final
        if room >= final:
            self._unwritten[seq_id] = room - final
            self.never_written += room - final

    def grow(self, seq_id: int) -> int | None:
        """One more block at the end of the sequence's table (its last block is full); the new
        room in tokens, or None if no block is free."""
        b = self.pool.allocate_one()
        if b is None:
            return None
        table = self.block_tables[seq_id]
        table.append(b)
        room = len(table) * self.block_size
        extra = room - self._final[seq_id]
        if extra >= 0:                         # its last block: the rest of it is never written
            self._unwritten[seq_id] = extra
            self.never_written += extra
        return room

    def grow_all(self, seq_ids: list) -> int | None:
        """One more block for each listed sequence, taken from the free queue in the order listed;
        returns block_size (the room each gained), or None -- nothing taken -- if fewer blocks are
        free than sequences listed."""
        if len(seq_ids) > self.pool.num_free:
            return None
        tables, final, bs = self.block_tables, self._final, self.block_size
        for seq_id, b in zip(seq_ids, self.pool.allocate(len(seq_ids))):
            table = tables[seq_id]
            table.append(b)
            extra = len(table) * bs - final[seq_id]
            if extra >= 0:                     # its last block: the rest of it is never written
                self._unwritten[seq_id] = extra
                self.never_written += extra
        return bs

    def free(self, seq_id: int) -> None:
        """Drop the sequence's block table: its blocks lose one reference each, last block first;
        blocks nobody else holds go to the back of the free queue."""
        self._release(seq_id)
        self._keys.pop(seq_id, None)

    def _release(self, seq_id: int) -> None:
        """Drop the sequence's block table (see :meth:`free`); its prompt keys are kept."""
        table = self.block_tables.pop(seq_id)
        self._final.pop(seq_id, None)
        self.never_written -= self._unwritten.pop(seq_id, 0)
        if self._sharing:
            freed = self.pool.release(table)   # the blocks it alone held; the rest stay shared
            self.shared_saving -= (len(table) - len(freed)) * self.block_size
        else:                                  # nothing is ever shared: every block is exclusive
            self.pool.release_exclusive(table)

    def preempt(self, seq_id: int) -> str:
        """Evict a running sequence. Returns "swap" when its private blocks went to the host pool
        (counted in ``swap_traffic``), else "recompute"; either way its GPU blocks are released."""
        mode = "recompute"
        if self.preemption == "swap":
            private = self.pool.count_refcount(self.block_tables[seq_id], 1)
            if private <= self.host.num_free:
                self.swapped[seq_id] = self.host.take(private)
                self._swapped_shared[seq_id] = len(self.block_tables[seq_id]) - private
                self.swap_traffic += private
                mode = "swap"
        self._release(seq_id)
        return mode

    def external_fragmentation(self, need: int) -> int:
        """Free slots that can never serve a request: only the remainder that forms no block."""
        return self.remainder_slots

    def snapshot(self, lengths: dict) -> tuple:
        """The pool's block tables: a tuple of (seq_id, tokens held, block table) per running
        sequence, in admission order. Cheap to take every step (tables are copied, not expanded);
        ``SimulationResult.slot_states`` turns it into a per-slot picture when one is drawn.
        With prefix caching, a last entry ``(0, 0, blocks)`` lists the blocks held only by the
        cache (request ids start at 1, so id 0 is no request). Every picture holds its own tuples
        (none is shared with another picture: a pickled run, as ``tests/tools/engine_digest.py`` hashes
        it, depends on that)."""
        snap = tuple((sid, lengths[sid], tuple(table)) for sid, table in self.block_tables.items())
        if self.prefix_caching and self.pool.num_cached_free:
            snap += ((0, 0, self.pool.cached_free_blocks()),)
        return snap

    @property
    def cached_blocks(self) -> int:
        """Blocks held only by the prefix cache: no sequence holds them, their key still finds them."""
        return self.pool.num_cached_free

    @property
    def cache_evictions(self) -> int:
        """Cached blocks handed out again by the free queue so far (their keys dropped)."""
        return self.pool.evictions

    def check_invariants(self, lengths: dict) -> None:
        """Assert the block bookkeeping agrees with the sequences' lengths (tokens).

        Raises:
            AssertionError: a block table not exactly ceil(tokens / block_size) long, a block
                listed twice in one table, a private block in two tables, refcounts that differ
                from the tables pointing at them (the pool's own check), a shared saving that does
                not match the refcounts, or a host pool over capacity.
        """
        assert set(self.block_tables) == set(lengths), "block tables and running sequences differ"
        for seq_id, table in self.block_tables.items():
            assert len(table) == self.blocks_for(lengths[seq_id]), (
                f"seq {seq_id}: {len(table)} blocks for {lengths[seq_id]} tokens")
            assert len(set(table)) == len(table), f"seq {seq_id} lists a block twice"
        pool = self.pool
        pool.check_invariants(self.block_tables.values())
        saving = 0
        for b, r in enumerate(pool.refcounts):
            if r > 1:       # only a full block found by its hash is ever shared
                assert pool.hash_of(b) is not None, f"private block {b} in several tables"
                saving += (r - 1) * self.block_size
        assert saving == self.shared_saving, f"shared saving {self.shared_saving} != {saving}"
        assert self.hit_tokens <= self.prompt_tokens, "more prompt tokens hit than admitted"
        self.host.check_invariants(sum(len(h) for h in self.swapped.values()))

    # ----------------------------------------------------------------------------------------------
    # vLLM v1's KV cache manager (the engine's ``rules=V1Rules(...)`` scheduler; see allocator.engine)
    # ----------------------------------------------------------------------------------------------
    # Token ids the v1 interface invents where the workload gives none, so that block keys are
    # unique per request and position (they never match another request's tokens by accident):
    # bit 62 marks a generated token, bit 61 a prompt token of a request without known prompt ids.
    _V1_GEN, _V1_PROMPT, _V1_POS_BITS = 1 << 62, 1 << 61, 26

    def _v1_tokens(self, seq_id: int, prompt_len: int, total: int) -> list:
        """Token ids of the sequence's first ``total`` tokens (prompt, then generated): the
        workload's prompt ids when known (else the shared system prompt, then invented unique
        ids), and the generated ids ``prompts.output_tokens(seq_id)`` gives when the workload
        knows them (a later turn of a conversation repeats them), else invented unique ids."""
        base = seq_id << self._V1_POS_BITS
        prompts = self.prompts
        if prompts is not None and seq_id in prompts:
            head = [int(x) for x in prompts.tokens(seq_id)[:prompt_len]]
        else:
            shared = min(self.shared_prefix, prompt_len)
            head = _system_prompt_tokens(shared) + [self._V1_PROMPT | base | i for i in range(shared, prompt_len)]
        gen = total - prompt_len
        out = []
        if gen > 0 and prompts is not None and seq_id in prompts and hasattr(prompts, "output_tokens"):
            out = [int(x) for x in prompts.output_tokens(seq_id)[:gen]]
        out += [self._V1_GEN | base | i for i in range(len(out), gen)]
        return head + out

    def _v1_keys(self, seq_id: int, prompt_len: int, total: int) -> list:
        """Chained keys of the sequence's full blocks among its first ``total`` tokens (prompt and
        generated alike, as vLLM v1 hashes them). Key i depends only on tokens up to the end of
        block i, so keys are computed once for a length that doubles as the sequence grows."""
        keys = self._keys.get(seq_id)
        if keys is None or len(keys) < total // self.block_size:
            n = max(total, 2 * len(keys) * self.block_size) if keys else total
            keys = self._keys[seq_id] = prefix_block_keys(self._v1_tokens(seq_id, prompt_len, n),
                                                          self.block_size, as_bytes=True)
        return keys

    def v1_computed_blocks(self, seq_id: int, prompt_len: int, num_tokens: int) -> list[int]:
        """vLLM v1's ``get_computed_blocks``: the cached blocks of the longest run of the
        sequence's leading full blocks (prompt and generated tokens, ``num_tokens`` in all), at
        most (num_tokens - 1) // block_size of them, so at least the last token is computed (its
        logits give the next token). [] without prefix caching. Nothing is taken or touched.

        Source: vllm/v1/core/kv_cache_manager.py, ``get_computed_blocks`` (max cache hit length =
        num_tokens - 1).
        """
        if not self.prefix_caching:
            return []
        limit = (num_tokens - 1) // self.block_size
        if not limit:
            return []
        return self.pool.lookup_run(self._v1_keys(seq_id, prompt_len, num_tokens), limit)

    def v1_allocate(self, seq_id: int, prompt_len: int, num_tokens: int, upto: int, hits=(),
                    final: int | None = None) -> bool:
        """vLLM v1's ``allocate_slots``: make the sequence's block table hold ``upto`` tokens
        (its computed tokens plus this step's scheduled ones) -- ceil(upto / block_size) blocks, no
        block for a token not yet scheduled -- reusing ``hits`` (from :meth:`v1_computed_blocks`)
        at the front of a new table. With prefix caching, every full block among the first
        min(upto, num_tokens) tokens is registered under its chained key (prompt and generated
        blocks alike; the first registration of a key wins).

        ``final`` (tokens: prompt + the whole answer) lets the allocator count the slots of the
        last block the sequence will never write (``never_written``, the internal fragmentation of
        :mod:`allocator.shares`), as :meth:`admit` and :meth:`grow` do.

        Returns:
            True, or False with nothing changed when too few blocks are free (hits taken out of
            the free queue count against it, as in vLLM).
        """
        table = self.block_tables.get(seq_id)
        pool = self.pool
        bs = self.block_size
        need = -(-upto // bs) - (len(table) if table is not None else len(hits))
        if hits:
            cached_free = pool.count_refcount(hits, 0)
            if need > pool.num_free - cached_free:
                return False
            self.shared_saving += (len(hits) - cached_free) * bs
            pool.touch(hits)
        elif need > pool.num_free:
            return False
        if table is None:
            table = self.block_tables[seq_id] = list(hits)
            if self.prefix_caching:
                self.last_hit_tokens = len(hits) * bs
        if need > 0:
            table.extend(pool.allocate(need))
        if final is not None:
            self._final[seq_id] = final
            extra = len(table) * bs - final
            if extra >= 0:                     # its last block: the rest of it is never written
                self.never_written += extra - self._unwritten.get(seq_id, 0)
                self._unwritten[seq_id] = extra
        if self.prefix_caching:
            full = min(upto, num_tokens) // bs
            if full:
                keys = self._v1_keys(seq_id, prompt_len, num_tokens)
                done = self._v1_registered.get(seq_id, 0)
                if full > done:
                    pool.register_all(table[done:full], keys[done:full])
                self._v1_registered[seq_id] = full
        return True

    def v1_free(self, seq_id: int, keep_keys: bool = False) -> None:
        """Release a finished (``keep_keys=False``) or preempted sequence's blocks, last block
        first; cached blocks stay findable until the free queue hands them out again. A
        preempted sequence (v1 preemption is recompute only) keeps its keys for its return."""
        self._release(seq_id)
        self._v1_registered.pop(seq_id, None)
        if not keep_keys:
            self._keys.pop(seq_id, None)
